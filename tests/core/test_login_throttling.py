"""Login throttling (django-axes, swarm_app/settings.py): wrong passwords from one address lock
both logins (the site's and the admin's) for a window, across every daphne process.

The default limit (LOGIN_FAILURE_LIMIT=50) is tested as shipped on the site login; the other
tests set a smaller limit and need fewer attempts. Windows are short and real: the tests wait
them out instead of editing the attempt store.
"""

from __future__ import annotations

import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import reverse

from tests.servers import asgi_server

PASSWORD = "pw-organizer-1"
WINDOW = 5.0  # seconds: long enough that failures in a row stay inside it


@pytest.fixture
def organizer(db):
    return get_user_model().objects.create_user("organizer", password=PASSWORD, is_staff=True)


def post_login(client: Client, url: str, password: str) -> int:
    data = {"username": "organizer", "password": password}
    if url.startswith("/admin/"):
        data["next"] = "/admin/"
    return client.post(url, data).status_code


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_the_shipped_limit_refuses_the_51st_attempt_and_the_window_ends_it(organizer):
    assert settings.AXES_FAILURE_LIMIT == 50  # the documented default (docs/deploy.md)
    client = Client()
    login = reverse("login")
    for attempt in range(1, 50):
        assert post_login(client, login, f"wrong-{attempt}") == 200, attempt  # "wrong password"
    # The 50th failure locks the address: its answer is the lockout page ...
    response = client.post(login, {"username": "organizer", "password": "wrong-50"})
    assert response.status_code == 429
    assert "Too many login attempts" in response.content.decode()
    # ... and the 51st attempt is refused without checking the password, the right one included.
    with override_settings(AXES_COOLOFF_TIME=timedelta(seconds=WINDOW)):
        assert post_login(client, login, PASSWORD) == 429 and not logged_in(client)
        time.sleep(WINDOW + 0.5)
        assert post_login(client, login, PASSWORD) == 302 and logged_in(client)


@override_settings(AXES_FAILURE_LIMIT=3, AXES_COOLOFF_TIME=timedelta(seconds=WINDOW))
def test_the_admin_login_is_throttled_with_the_site_login(organizer):
    client = Client()
    assert post_login(client, "/admin/login/", "wrong-1") == 200
    assert post_login(client, reverse("login"), "wrong-2") == 200
    assert post_login(client, "/admin/login/", "wrong-3") == 429  # failures of both logins count
    assert post_login(client, "/admin/login/", PASSWORD) == 429 and not logged_in(client)
    assert post_login(client, reverse("login"), PASSWORD) == 429 and not logged_in(client)
    # Another address is not locked out.
    other = Client(REMOTE_ADDR="192.0.2.7")
    assert post_login(other, "/admin/login/", PASSWORD) == 302 and logged_in(other)
    time.sleep(WINDOW + 0.5)
    response = client.post(
        "/admin/login/", {"username": "organizer", "password": PASSWORD, "next": "/admin/"}
    )
    assert response.status_code == 302 and response["Location"] == "/admin/" and logged_in(client)


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """A cookie-keeping HTTP client that logs in through the real login form (CSRF included)."""

    def __init__(self) -> None:
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.cookies), NoRedirects
        )

    def get(self, url: str) -> tuple[int, str]:
        try:
            with self.opener.open(url, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def login(self, base: str, password: str) -> int:
        status, page = self.get(f"{base}/accounts/login/")
        assert status == 200, page
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token, "username": "organizer", "password": password, "next": "/"}
        ).encode()
        try:
            with self.opener.open(f"{base}/accounts/login/", data=body, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code


def test_failures_count_across_daphne_processes(transactional_db, tmp_path: Path):
    """Two real daphne servers share the attempt store (the database): failures sent to either
    one add up, the lockout holds on both, and ends on both."""
    get_user_model().objects.create_user("organizer", password=PASSWORD, is_staff=True)
    env = {"LOGIN_FAILURE_LIMIT": "4", "LOGIN_LOCKOUT_SECONDS": str(WINDOW)}
    with (
        asgi_server(tmp_path / "a.log", **env) as a,
        asgi_server(tmp_path / "b.log", **env) as b,
    ):
        browser = Browser()
        assert [browser.login(a, "wrong-1"), browser.login(b, "wrong-2"), browser.login(a, "wrong-3")] == [
            200,
            200,
            200,
        ]
        assert browser.login(b, "wrong-4") == 429
        assert browser.login(a, PASSWORD) == 429
        assert browser.login(b, PASSWORD) == 429
        time.sleep(WINDOW + 0.5)
        assert browser.login(a, PASSWORD) == 302
        # Logged in: the session works on the other server too (the header names the user).
        status, page = browser.get(f"{b}/")
        assert status == 200 and '<span id="username">organizer</span>' in page
