from django.contrib import admin, messages

from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import create_token, revoke


@admin.register(WorkerToken)
class WorkerTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "label", "campaign", "created_at", "revoked_at", "ban_scope", "banned_at")
    list_filter = ("campaign", "ban_scope")
    readonly_fields = ("token_hash", "prefix", "created_at", "revoked_at", "banned_at", "ban_reason")
    actions = ["revoke_tokens"]
    fields = (
        "campaign",
        "label",
        "ban_scope",
        "prefix",
        "token_hash",
        "created_at",
        "revoked_at",
        "banned_at",
        "ban_reason",
    )

    def save_model(self, request, obj, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new token: generate the secret, show it once, store only its digest.
        token, secret = create_token(obj.campaign, obj.label, obj.ban_scope)
        obj.pk = token.pk
        obj.token_hash, obj.prefix, obj.created_at = token.token_hash, token.prefix, token.created_at
        self.message_user(request, f"Worker token (shown once, copy it now): {secret}", messages.WARNING)

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request, queryset) -> None:
        for token in queryset:
            revoke(token)


@admin.register(WorkerNode)
class WorkerNodeAdmin(admin.ModelAdmin):
    list_display = (
        "node_id",
        "campaign",
        "tier",
        "state",
        "round",
        "accepted_submissions",
        "rejected_submissions",
        "last_seen",
    )
    list_filter = ("campaign", "state", "tier")
    search_fields = ("node_id",)


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ("lease_id", "campaign", "node", "round", "state", "issued_at", "deadline")
    list_filter = ("campaign", "state")
    search_fields = ("lease_id", "submission_id")


@admin.register(PoolRollout)
class PoolRolloutAdmin(admin.ModelAdmin):
    list_display = (
        "sequence",
        "campaign",
        "node",
        "tier",
        "round",
        "task",
        "mean_reward",
        "zero_advantage",
        "in_pool",
    )
    list_filter = ("campaign", "tier", "task", "zero_advantage", "in_pool")
