from django.apps import AppConfig


class WebConfig(AppConfig):
    """The campaign pages: list, form, dashboard and its live socket, run page, tokens, exports.
    The top of the coordinator's apps: it reads campaigns, nodes and runs, and nothing below
    imports it."""

    name = "swarm_app.web"
    label = "web"
