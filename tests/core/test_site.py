"""Site-wide behaviour: the Content-Security-Policy header, the favicon, login and logout
landing back on the page, the friendly 403 page, and the benchmark's echo websocket, which
exists only when SWARM_BENCH_ECHO enables it (checked on real daphne servers)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import websockets
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from websockets.exceptions import InvalidHandshake

from swarm_app.core.consumers import MAX_ECHO_BYTES
from tests.campaigns.helpers import make_campaign
from tests.servers import asgi_server


@pytest.fixture
def viewer(db) -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-viewer-1")
    client = Client()
    client.force_login(user)
    return client


def test_every_page_sends_a_content_security_policy(client, db):
    for url in ("/", reverse("login"), reverse("healthz"), "/admin/login/"):
        policy = client.get(url)["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == "'self'"  # no inline scripts, no eval
        assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"


def test_the_pages_have_no_inline_scripts(client, db):
    """What the policy forbids, the pages must not need: every <script> is a file or JSON data."""
    campaign = make_campaign()
    for url in ("/", campaign.get_absolute_url(), reverse("login")):
        page = client.get(url).content.decode()
        for tag in page.split("<script")[1:]:
            head = tag.split(">", 1)[0]
            assert "src=" in head or 'type="application/json"' in head, f"{url}: <script{head}>"


def test_favicon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/swarm/favicon.ico"
    assert '<link rel="icon" href="/static/swarm/favicon.ico">' in client.get("/").content.decode()
    assert (Path(__file__).resolve().parents[2] / "static/swarm/favicon.ico").read_bytes()[:4] == b"\0\0\1\0"


def test_login_and_logout_land_back_on_the_page(client, db):
    get_user_model().objects.create_user("viewer", password="pw-viewer-1")
    campaign = make_campaign()
    home = client.get("/").content.decode()
    assert f'href="{reverse("login")}?next=/"' in home  # the header's link carries the page
    page = campaign.get_absolute_url()
    response = client.post(reverse("login"), {"username": "viewer", "password": "pw-viewer-1", "next": page})
    assert response.status_code == 302 and response["Location"] == page
    # Without a next: the home page (LOGIN_REDIRECT_URL), not /accounts/profile/.
    client.logout()
    response = client.post(reverse("login"), {"username": "viewer", "password": "pw-viewer-1"})
    assert response["Location"] == "/"
    assert f'name="next" value="{page}"' in client.get(page).content.decode()  # a public page
    response = client.post(reverse("logout"), {"next": page})
    assert response.status_code == 302 and response["Location"] == page
    response = client.post(reverse("logout"))
    assert response["Location"] == "/"  # LOGOUT_REDIRECT_URL, not the admin's "Logged out"


def test_a_private_page_logs_out_to_the_home_page(db):
    staff = get_user_model().objects.create_user("organizer", password="pw-organizer-1", is_staff=True)
    client = Client()
    client.force_login(staff)
    page = client.get(make_campaign(public=False).get_absolute_url()).content.decode()
    assert 'name="next" value="/"' in page  # its page would be a 404 once logged out
    assert 'id="private"' in page and "private: staff only" in page


def test_a_non_staff_user_gets_the_sites_403_page(viewer):
    response = viewer.get(reverse("campaign-new"))
    assert response.status_code == 403
    page = response.content.decode()
    assert "Not allowed" in page and "needs a staff account, and viewer is not one" in page
    assert 'class="brand"' in page  # in the site's layout, not a bare "403 Forbidden"
    assert "log in with another account" in page


def echo_answer(base: str) -> str:
    async def echo() -> str:
        async with websockets.connect(base.replace("http", "ws") + "/ws/echo/") as ws:
            await ws.send("ping")
            return await asyncio.wait_for(ws.recv(), timeout=10)

    return asyncio.run(echo())


def test_the_echo_websocket_exists_only_when_a_benchmark_enables_it(transactional_db, tmp_path):
    with asgi_server(tmp_path / "plain.log", SWARM_BENCH_ECHO="0") as base, pytest.raises(InvalidHandshake):
        echo_answer(base)
    with asgi_server(tmp_path / "bench.log", SWARM_BENCH_ECHO="1") as base:
        assert echo_answer(base) == "ping"
        assert asyncio.run(echo_close_code(base, "x" * (MAX_ECHO_BYTES + 1))) == 4413
    assert "Traceback" not in (tmp_path / "bench.log").read_text()


async def echo_close_code(base: str, frame: str) -> int | None:
    """The code the echo closes with after ``frame`` (an oversized one is not echoed)."""
    async with websockets.connect(base.replace("http", "ws") + "/ws/echo/", max_size=None) as ws:
        await ws.send(frame)
        try:
            await asyncio.wait_for(ws.recv(), timeout=10)
        except websockets.ConnectionClosed:
            return ws.close_code
    return None
