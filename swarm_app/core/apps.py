from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Site-wide pages and health endpoints that belong to no single feature."""

    name = "swarm_app.core"
    label = "core"
