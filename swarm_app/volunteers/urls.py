"""Volunteer pages (views.py). Existing URLs stay as they are; these are added beside them."""

from django.urls import path

from swarm_app.volunteers import views

urlpatterns = [
    path("accounts/signup/", views.signup, name="signup"),
    path("me/", views.me, name="volunteer-me"),
    path("me/tokens/<int:token_id>/revoke/", views.revoke, name="volunteer-token-revoke"),
    path("volunteers/<int:pk>/", views.volunteer_page, name="volunteer-page"),
    path("campaigns/<int:pk>/leaderboard/", views.leaderboard, name="campaign-leaderboard"),
    path("campaigns/<int:pk>/nodes/<int:node_pk>/", views.node_page, name="node-page"),
    path("campaigns/<int:pk>/join/<str:code>/", views.invite, name="campaign-invite"),
    path("campaigns/<int:pk>/volunteer-access/", views.volunteer_access, name="campaign-volunteer-access"),
]
