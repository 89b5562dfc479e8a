"""A volunteer's whole path in a real browser (Debian's chromium through Playwright) against a
real coordinator and a real worker (issue #30's acceptance):

sign up from a campaign's "Join this campaign" section, make a token on My tokens, start
`swarm-worker join <URL> --token ...` (tiny-1m) exactly as the page says, watch the node appear
on the volunteer's page with credit > 0 after its first accepted round, see it on the
campaign's leaderboard, then revoke the token (the page asks first) and see the node's session
end: the worker exits with the coordinator's "revoked" and the node reads disconnected.
"""

from __future__ import annotations

import re
import shlex
import time
import urllib.request
from pathlib import Path

import pytest

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode
from swarm_app.volunteers.models import Volunteer
from tests.factories import tiny_campaign_config
from tests.servers import asgi_server, stop, worker_process

pytestmark = pytest.mark.slow

PASSWORD = "volunteer-pw-9431"


@pytest.fixture
def site(transactional_db, tmp_path: Path):
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        yield base


def reload_until(page, url: str, selector: str, test, timeout: float, what: str) -> str:
    """Reload ``url`` until ``selector``'s text passes ``test``; returns that text."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        page.goto(url)
        if page.locator(selector).count():
            text = page.inner_text(selector)
            if test(text):
                return text
        time.sleep(2)
    raise AssertionError(f"{what}: last seen {text!r}")


def test_a_volunteer_signs_up_joins_earns_credit_and_revokes(site, page, tiny_1m_dir, tmp_path):
    config = tiny_campaign_config(rounds=200, max_new_tokens=12)
    campaign = Campaign.objects.create(
        name="volunteers welcome", state=Campaign.State.RUNNING, config=config.to_json()
    )

    # The campaign's page, anonymous: how to join, with the one command and a copy button.
    page.goto(f"{site}{campaign.get_absolute_url()}")
    assert page.is_visible("#join")
    command = f"curl -fsSL {site}/join.sh | sh -s -- --token <your token>"
    assert page.inner_text("#join-campaign-line").strip() == command
    assert page.is_visible("button[data-copy=join-campaign-line]")
    page.click("#join a:text('Sign up')")

    # Sign up: logged in, on My tokens.
    page.fill("#id_username", "grace")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.fill("#id_display_name", "Grace H")
    page.click("#signup")
    page.wait_for_url("**/me/")
    assert page.inner_text("#display-name") == "Grace H"

    # A token for the campaign, shown once with the exact join command and a copy button.
    page.select_option("#id_campaign", str(campaign.pk))
    page.fill("#id_name", "test laptop")
    page.click("#create-token")
    line = page.inner_text("#join-line").strip()
    secret = page.inner_text("#token-secret").strip()
    assert line == f"curl -fsSL {site}/join.sh | sh -s -- --token {secret}" and secret.startswith("swt_")
    assert page.is_visible("button[data-copy=join-line]")
    page.click("button[data-copy=join-line]")  # selects (plain http) or copies the line; no error

    # Start the worker with that command's arguments (tests/system/test_join_command.py runs the
    # command itself in a fresh virtual environment).
    args = shlex.split(line)
    assert args[-2] == "--token"
    log = tmp_path / "worker.log"
    worker = worker_process(
        f"{site}/",
        "",
        tmp_path / "worker",
        log,
        "--token",
        args[-1],
        SWARM_MODEL_CACHE=str(tiny_1m_dir.parent),
    )
    try:
        volunteer = Volunteer.objects.get(display_name="Grace H")
        my_page = f"{site}/volunteers/{volunteer.pk}/"
        try:
            credit = reload_until(
                page,
                my_page,
                "#nodes td[data-field=credit]",
                lambda t: t.isdigit() and int(t) > 0,
                300,
                "the node's credit on the volunteer's page",
            )
        except AssertionError:
            print(log.read_text()[-3000:])
            raise
        node = WorkerNode.objects.get(campaign=campaign)
        assert node.accepted_submissions >= 1 and int(credit) > 0
        assert page.inner_text("#nodes .node-name") == f"Grace H · {node.node_id[:8]}"
        assert int(page.inner_text("#volunteer-credit")) > 0
        assert "swarm-worker export --campaign" in page.inner_text("#export-line")

        # The leaderboard names the volunteer and the node.
        page.goto(f"{site}/campaigns/{campaign.pk}/leaderboard/")
        assert "Grace H" in page.inner_text("#volunteer-ranking")
        assert f"Grace H · {node.node_id[:8]}" in page.inner_text("#node-ranking")
        # What anyone else gets: no username, no token.
        for path in (f"/campaigns/{campaign.pk}/leaderboard/", f"/volunteers/{volunteer.pk}/"):
            public = urllib.request.urlopen(f"{site}{path}", timeout=30).read().decode()
            assert "Grace H" in public and secret not in public and "grace" not in public, path

        # Revoke, confirming the browser's dialog: the worker's session ends.
        page.goto(f"{site}/me/")
        dialogs: list[str] = []
        page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
        page.click("#my-tokens button.revoke")
        page.wait_for_selector("text=revoked")
        assert dialogs and "Revoke token" in dialogs[0]
        worker.wait(timeout=60)
        text = log.read_text()
        assert worker.returncode != 0 and re.search(r"revoked", text), text[-2000:]
        deadline = time.monotonic() + 30
        while WorkerNode.objects.get(pk=node.pk).connected and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not WorkerNode.objects.get(pk=node.pk).connected
        reload_until(
            page,
            my_page,
            "#nodes [data-field=state]",
            lambda t: "disconnected" in t or "offline" in t,
            30,
            "the node's state after the revocation",
        )
    finally:
        stop(worker)
