"""Campaign pages, organizer actions (POST only) and the read-only API.

The home page (``/``, name ``home``) is the status page, routed in swarm_app/urls.py.
"""

from django.urls import path

from swarm_app.web import api, views

urlpatterns = [
    path("campaigns/new/", views.campaign_new, name="campaign-new"),
    path("campaigns/sizing", views.campaign_sizing, name="campaign-sizing"),
    path("campaigns/<int:pk>/", views.campaign_detail, name="campaign-detail"),
    *[
        path(
            f"campaigns/<int:pk>/{action}/",
            views.campaign_action,
            {"action": action},
            name=f"campaign-{action}",
        )
        for action in views.ACTIONS
    ],
    path("campaigns/<int:pk>/tokens/", views.campaign_tokens, name="campaign-tokens"),
    path("campaigns/<int:pk>/rollouts.jsonl.gz", views.rollouts_download, name="campaign-rollouts"),
    path("campaigns/<int:pk>/tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
    path("api/status", api.status_json, name="api-status"),
    path("api/campaigns/<int:pk>/dashboard", api.dashboard_json, name="api-dashboard"),
    path("api/campaigns/<int:pk>/run", api.run_json, name="api-run"),
    path("api/campaigns/<int:pk>/agent", api.agent_json, name="api-agent"),
    path("api/campaigns/<int:pk>/evaluations", api.evaluations_json, name="api-evaluations"),
    path("api/campaigns/<int:pk>/metrics", api.metrics_export, name="api-metrics"),
]
