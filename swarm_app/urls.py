from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from swarm_app.coordinator import scrape
from swarm_app.core import join
from swarm_app.core import views as core_views
from swarm_app.web import views as campaign_views

urlpatterns = [
    path("", campaign_views.status, name="home"),
    path("", include("swarm_app.web.urls")),
    # Volunteers: sign-up, their tokens, pages, leaderboards (swarm_app/volunteers/urls.py).
    path("", include("swarm_app.volunteers.urls")),
    path("healthz", core_views.healthz, name="healthz"),
    path("healthz/all", core_views.healthz_all, name="healthz-all"),
    # The volunteers' one command fetches these (swarm_app/core/join.py).
    path(join.SCRIPT_PATH, core_views.join_script, name="join-script"),
    path("join/<str:filename>", core_views.worker_wheel, name="worker-wheel"),
    # Prometheus's scrape, for operators only: refused through the proxy, from addresses outside
    # METRICS_ALLOWED_ADDRESSES and without METRICS_TOKEN when one is set (coordinator/scrape.py).
    path("metrics", scrape.metrics, name="metrics"),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin's, JSON, files).
    path("favicon.ico", RedirectView.as_view(url=static("swarm/favicon.ico"), permanent=True)),
    # Django's own login and logout views, with templates in the site's layout
    # (templates/registration/); LOGIN_REDIRECT_URL and LOGOUT_REDIRECT_URL say where they land.
    # Both logins (this one and the admin's) are throttled by django-axes (settings.py).
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "accounts/password_change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("admin/", admin.site.urls),
]

if settings.PASSWORD_RESET_ENABLED:
    # Password reset mails a link: routed only when mail is configured (EMAIL_HOST). Without it,
    # each request would end in a failed SMTP connection and an ERROR traceback.
    urlpatterns += [
        path("accounts/password_reset/", auth_views.PasswordResetView.as_view(), name="password_reset"),
        path(
            "accounts/password_reset/done/",
            auth_views.PasswordResetDoneView.as_view(),
            name="password_reset_done",
        ),
        path(
            "accounts/reset/<uidb64>/<token>/",
            auth_views.PasswordResetConfirmView.as_view(),
            name="password_reset_confirm",
        ),
        path(
            "accounts/reset/done/",
            auth_views.PasswordResetCompleteView.as_view(),
            name="password_reset_complete",
        ),
    ]
