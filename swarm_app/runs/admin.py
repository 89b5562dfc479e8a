"""The Django admin for campaigns: a view of the data, never a side door around the lifecycle.

A campaign's state, its timestamps and counters change only through lifecycle.py (the page's
buttons, or the admin actions below, which call it); control runs and per-round metrics are
written by the coordinator and the Celery controls, and are read-only here.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.runs import lifecycle


def _lifecycle_action(name: str, verb: str):
    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Campaign]) -> None:
        for campaign in queryset:
            try:
                getattr(lifecycle, name)(campaign)
            except lifecycle.LifecycleError as error:
                modeladmin.message_user(request, f"{campaign.name}: {error}", messages.WARNING)
            else:
                modeladmin.message_user(request, f"{campaign.name}: {verb}")

    action.__name__ = name
    return admin.action(description=f"{name.capitalize()} the selected campaigns (as the page's button)")(
        action
    )


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ("name", "state", "public", "created_at", "started_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("name",)
    # The lifecycle's fields and the coordinator's counters: editing them directly would bypass
    # the transitions (no control runs on a "running" campaign, streams reused, ...).
    readonly_fields = (
        "state",
        "failure_reason",
        "started_at",
        "finished_at",
        "created_at",
        "next_question_position",
        "rollout_sequence",
        "local_workers",
        "config",
        # Made by the Worker tokens page from a secure random source; typed by hand it could be
        # guessed.
        "invite_code",
    )
    actions = [_lifecycle_action(name, f"now {target}") for name, (_, target) in lifecycle.ACTIONS.items()]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # campaigns are created from the validated form (/campaigns/new/)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by the coordinator and the controls: shown, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(ControlRun)
class ControlRunAdmin(ReadOnlyAdmin):
    list_display = ("campaign", "tier", "arm", "seed", "state", "round", "updated_at")
    list_filter = ("campaign", "arm", "state")


@admin.register(RoundMetrics)
class RoundMetricsAdmin(ReadOnlyAdmin):
    list_display = ("campaign", "arm", "tier", "agent", "round", "reward", "created_at")
    list_filter = ("campaign", "arm", "tier")
