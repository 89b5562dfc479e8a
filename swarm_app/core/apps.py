from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Site-wide pages and health endpoints that belong to no single feature."""

    name = "swarm_app.core"
    label = "core"

    def ready(self) -> None:
        from swarm_app.core import checks  # noqa: F401  (registers the deployment checks)
