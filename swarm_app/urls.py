from django.contrib import admin
from django.urls import include, path

from swarm_app.campaigns import views as campaign_views
from swarm_app.core import views as core_views

urlpatterns = [
    path("", campaign_views.status, name="home"),
    path("", include("swarm_app.campaigns.urls")),
    path("healthz", core_views.healthz, name="healthz"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
