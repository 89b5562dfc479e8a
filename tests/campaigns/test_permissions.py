"""Who may read and write in the organizer web UI: anonymous visitors, non-staff users and staff;
private campaigns, CSRF on every write, POST-only actions; worker tokens shown once, stored
hashed, revocable."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import WorkerToken
from swarm_app.coordinator.tokens import create_token, digest
from swarm_app.settings import public_url
from tests.campaigns.helpers import form_data, make_campaign

User = get_user_model()


def test_anyone_reads_public_pages_and_only_staff_see_private_ones(anonymous, member, staff):
    public = make_campaign(public=True, name="open to all")
    private = make_campaign(public=False, name="staff eyes only")
    for client in (anonymous, member, staff):
        index = client.get("/")
        assert index.status_code == 200 and public.name in index.content.decode()
        assert client.get(public.get_absolute_url()).status_code == 200
        assert client.get(reverse("api-dashboard", args=[public.pk])).status_code == 200
    for client in (anonymous, member):
        assert client.get(private.get_absolute_url()).status_code == 404
        assert client.get(reverse("api-metrics", args=[private.pk])).status_code == 404
        assert private.name not in client.get("/").content.decode()
        assert private.pk not in [c["id"] for c in client.get("/api/status").json()["campaigns"]]
    assert staff.get(private.get_absolute_url()).status_code == 200
    assert private.name in staff.get("/").content.decode()
    assert private.pk in [c["id"] for c in staff.get("/api/status").json()["campaigns"]]


def test_viewers_see_no_organizer_controls(anonymous, staff):
    campaign = make_campaign()
    page = anonymous.get(campaign.get_absolute_url()).content.decode()
    assert 'data-action="launch"' not in page and "Worker tokens" not in page
    page = staff.get(campaign.get_absolute_url()).content.decode()
    assert 'data-action="launch"' in page and "Worker tokens" in page


WRITE_URLS = [
    ("campaign-new", False),
    ("campaign-launch", True),
    ("campaign-pause", True),
    ("campaign-resume", True),
    ("campaign-stop", True),
    ("campaign-tokens", True),
]


@pytest.mark.parametrize(("name", "needs_pk"), WRITE_URLS)
def test_anonymous_and_non_staff_users_cannot_write(anonymous, member, name, needs_pk):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    url = reverse(name, args=[campaign.pk] if needs_pk else [])
    data = form_data() if name == "campaign-new" else {"label": "x"}
    response = anonymous.post(url, data)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert member.post(url, data).status_code == 403
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.RUNNING
    assert Campaign.objects.count() == 1
    assert not WorkerToken.objects.exists()
    assert not ControlRun.objects.exists()


def test_revoking_a_token_needs_staff(anonymous, member):
    campaign = make_campaign()
    token, _ = create_token(campaign, "volunteer")
    url = reverse("token-revoke", args=[campaign.pk, token.pk])
    assert anonymous.post(url).status_code == 302
    assert member.post(url).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_every_write_needs_a_csrf_token(db):
    user = User.objects.create_user("csrf", password="pw", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    campaign = make_campaign()
    for url, data in [
        (reverse("campaign-new"), form_data()),
        (reverse("campaign-launch", args=[campaign.pk]), {}),
        (reverse("campaign-tokens", args=[campaign.pk]), {"label": "x"}),
    ]:
        assert client.post(url, data).status_code == 403
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PENDING and not campaign.tokens.exists()
    # The pages carry the token in every form.
    for url in (
        reverse("campaign-new"),
        campaign.get_absolute_url(),
        reverse("campaign-tokens", args=[campaign.pk]),
    ):
        assert "csrfmiddlewaretoken" in client.get(url).content.decode()


def test_actions_are_post_only(staff):
    campaign = make_campaign()
    for action in ("launch", "pause", "resume", "stop"):
        assert staff.get(reverse(f"campaign-{action}", args=[campaign.pk])).status_code == 405
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PENDING


# --- tokens --------------------------------------------------------------------------------------


def test_the_join_line_names_the_public_address_never_the_browsing_host(staff, settings):
    """SWARM_PUBLIC_URL is the address in the join line; without it the page shows the browsed
    address and says that volunteers may not reach it. A malformed setting stops the start."""
    campaign = make_campaign()
    url = reverse("campaign-tokens", args=[campaign.pk])
    settings.SWARM_PUBLIC_URL = public_url("https://swarm.example:8443")
    page = staff.post(url, {"label": "a"}, HTTP_HOST="127.0.0.1:18600").content.decode()
    assert "curl -fsSL https://swarm.example:8443/join.sh | sh -s -- --token swt_" in page
    assert "127.0.0.1:18600" not in page and 'id="join-url-warning"' not in page
    settings.SWARM_PUBLIC_URL = ""
    page = staff.post(url, {"label": "b"}, HTTP_HOST="127.0.0.1").content.decode()
    assert (
        "curl -fsSL http://127.0.0.1/join.sh | sh -s -- --token swt_" in page
        and 'id="join-url-warning"' in page
    )
    assert public_url("") == "" and public_url(" http://10.0.0.5:8000 ") == "http://10.0.0.5:8000/"
    for bad in ("swarm.example", "ftp://swarm.example/", "https:///path", "https://swarm.example/?a=1"):
        with pytest.raises(ImproperlyConfigured, match="SWARM_PUBLIC_URL"):
            public_url(bad)


def test_the_token_page_warns_about_the_campaigns_state_and_asks_before_revoking(staff):
    """A finished campaign's token page says a new token gets no work, a paused one's that its
    workers wait; Revoke asks first (site.js's data-confirm: no inline script under the CSP)."""
    running = make_campaign(state=Campaign.State.RUNNING)
    create_token(running, "laptop")
    page = staff.get(reverse("campaign-tokens", args=[running.pk])).content.decode()
    assert 'id="campaign-state-warning"' not in page
    assert 'data-confirm="Revoke token' in page and "(laptop)? Its workers are disconnected" in page
    for state, words in (
        (Campaign.State.COMPLETED, "gets no work"),
        (Campaign.State.PAUSED, "wait until it runs"),
    ):
        campaign = make_campaign(state=state, name=f"{state} campaign")
        page = staff.get(reverse("campaign-tokens", args=[campaign.pk])).content.decode()
        assert 'id="campaign-state-warning"' in page and words in page, state


def test_tokens_are_shown_once_stored_hashed_and_revocable(staff):
    campaign = make_campaign()
    response = staff.post(reverse("campaign-tokens", args=[campaign.pk]), {"label": "alice's laptop"})
    page = response.content.decode()
    token = WorkerToken.objects.get()
    secret = page.split('<pre id="token-secret">')[1].split("</pre>")[0]
    assert token.token_hash == digest(secret) and secret not in token.token_hash
    assert response["Cache-Control"] == "no-store"
    later = staff.get(reverse("campaign-tokens", args=[campaign.pk])).content.decode()
    assert secret not in later and token.prefix in later and "alice&#x27;s laptop" in later
    staff.post(reverse("token-revoke", args=[campaign.pk, token.pk]))
    token.refresh_from_db()
    assert token.revoked
    assert "revoked" in staff.get(reverse("campaign-tokens", args=[campaign.pk])).content.decode()


def test_a_token_is_created_with_the_organizers_ban_scope_and_shows_its_ban(staff):
    campaign = make_campaign()
    url = reverse("campaign-tokens", args=[campaign.pk])
    assert "A ban of one of its nodes bans" in staff.get(url).content.decode()
    staff.post(url, {"label": "shared by a class", "ban_scope": "node"})
    staff.post(url, {"label": "one volunteer"})
    scopes = dict(WorkerToken.objects.values_list("label", "ban_scope"))
    assert scopes == {"shared by a class": "node", "one volunteer": "token"}
    WorkerToken.objects.filter(label="one volunteer").update(
        banned_at=timezone.now(), ban_reason="node abc: submitted 3 false rewards"
    )
    page = staff.get(url).content.decode()
    assert "banned" in page and "node abc: submitted 3 false rewards" in page
