from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    """Campaigns and what was measured in them: the campaign and its settings, control runs,
    per-round metrics, the dashboard's rollups and the announcements to its pages. The ground
    floor of the coordinator's apps above core: it imports none of them."""

    name = "swarm_app.campaigns"
    label = "campaigns"
