from django.apps import AppConfig


class CoordinatorConfig(AppConfig):
    """The swarm's coordinator: worker tokens and nodes, leases, the rollout pool, the socket."""

    name = "swarm_app.coordinator"
    label = "coordinator"
