from django.apps import AppConfig


class CoordinatorConfig(AppConfig):
    """The swarm's coordinator: worker tokens and nodes, leases, the rollout pool, the socket."""

    name = "swarm_app.coordinator"
    label = "coordinator"

    def ready(self) -> None:
        from swarm_app.coordinator import checks  # noqa: F401  (registers the metrics token file's check)
