from django.contrib import admin

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ("name", "state", "created_at", "started_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("name",)


@admin.register(ControlRun)
class ControlRunAdmin(admin.ModelAdmin):
    list_display = ("campaign", "tier", "arm", "seed", "state", "round", "updated_at")
    list_filter = ("campaign", "arm", "state")


@admin.register(RoundMetrics)
class RoundMetricsAdmin(admin.ModelAdmin):
    list_display = ("campaign", "arm", "tier", "agent", "round", "reward", "created_at")
    list_filter = ("campaign", "arm", "tier")
