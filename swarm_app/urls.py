from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from swarm_app.campaigns import views as campaign_views
from swarm_app.core import views as core_views

urlpatterns = [
    path("", campaign_views.status, name="home"),
    path("", include("swarm_app.campaigns.urls")),
    path("healthz", core_views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin's, JSON, files).
    path("favicon.ico", RedirectView.as_view(url=static("swarm/favicon.ico"), permanent=True)),
    # Django's own login and logout views, with templates in the site's layout
    # (templates/registration/); LOGIN_REDIRECT_URL and LOGOUT_REDIRECT_URL say where they land.
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
