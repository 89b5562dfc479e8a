from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The quick start's demo (``manage.py demo``): a cpu-demo campaign with local workers, its
    controls and the live dashboard. An app of its own, above both apps it drives, so that core
    stays the ground floor."""

    name = "swarm_app.demo"
    label = "demo"
