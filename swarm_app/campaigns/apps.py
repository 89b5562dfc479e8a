from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    """Campaigns: their configuration, lifecycle, isolated-control runs and per-round metrics."""

    name = "swarm_app.campaigns"
    label = "campaigns"
