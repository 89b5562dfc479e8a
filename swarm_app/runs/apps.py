from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Running a campaign: its lifecycle (launch, pause, stop, completion once its nodes and
    controls are done) and its isolated-control runs on Celery. Above the coordinator: completion
    reads the nodes' rounds."""

    name = "swarm_app.runs"
    label = "runs"
