"""Sign-up, login throttling for volunteers, and a volunteer's own tokens (swarm_app/volunteers/
accounts.py, tokens.py, views.py), through Django's test client on the test database."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test import Client, override_settings
from django.urls import reverse

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerToken
from swarm_app.coordinator.tokens import authenticate, digest
from swarm_app.volunteers import tokens
from swarm_app.volunteers.models import SignupAttempt, Volunteer
from tests.volunteers.conftest import PASSWORD
from worker.shared.campaign import CampaignConfig

T = TypeVar("T")


def make_campaign(name: str = "open one", **fields) -> Campaign:
    config = CampaignConfig(group_size=4, questions_per_round=2, num_local=2, num_external=2, rounds=10)
    fields.setdefault("state", Campaign.State.RUNNING)
    return Campaign.objects.create(name=name, config=config.validate().to_json(), **fields)


def sign_up(client: Client, username: str = "grace", display_name: str = "Grace H", **extra) -> int:
    data = {
        "username": username,
        "password1": PASSWORD,
        "password2": PASSWORD,
        "display_name": display_name,
        **extra,
    }
    return client.post(reverse("signup"), data).status_code


def test_sign_up_makes_a_volunteer_and_logs_in(db):
    client = Client()
    assert client.get(reverse("signup")).status_code == 200
    assert sign_up(client) == 302  # to /me/
    user = get_user_model().objects.get(username="grace")
    assert user.email == "" and not user.is_staff  # email optional
    assert Volunteer.objects.get(user=user).display_name == "Grace H"
    page = client.get(reverse("volunteer-me")).content.decode()
    assert 'id="display-name">Grace H<' in page


def test_sign_up_refuses_a_taken_display_name_and_a_bad_one(db):
    assert sign_up(Client()) == 302
    response = Client().post(
        reverse("signup"),
        {"username": "other", "password1": PASSWORD, "password2": PASSWORD, "display_name": "grace h"},
    )
    assert response.status_code == 200 and "This display name is taken." in response.content.decode()
    response = Client().post(
        reverse("signup"),
        {"username": "third", "password1": PASSWORD, "password2": PASSWORD, "display_name": "<b>x</b>"},
    )
    assert response.status_code == 200 and "starting with a letter or digit" in response.content.decode()
    assert Volunteer.objects.count() == 1


def test_the_header_and_the_login_page_offer_sign_up(db):
    assert 'id="signup-link"' in Client().get("/").content.decode()
    assert 'id="signup-from-login"' in Client().get(reverse("login")).content.decode()


@override_settings(SWARM_VOLUNTEER_SIGNUP=False)
def test_the_site_can_switch_sign_up_off(db):
    assert 'id="signup-link"' not in Client().get("/").content.decode()
    assert 'id="signup-from-login"' not in Client().get(reverse("login")).content.decode()
    assert Client().get(reverse("signup")).status_code == 404
    assert sign_up(Client()) == 404
    assert not get_user_model().objects.exists()


@override_settings(SIGNUP_LIMIT=3, SIGNUP_WINDOW_SECONDS=60)
def test_sign_up_is_throttled_per_address(db):
    client = Client()
    for n in range(3):  # valid or not, every form counts
        assert sign_up(client, username=f"u{n}", display_name=f"U {n}", password2="mismatch") == 200
    assert sign_up(client, username="u3", display_name="U 3") == 429
    assert not get_user_model().objects.filter(username="u3").exists()
    # Another address is not throttled.
    assert sign_up(Client(REMOTE_ADDR="192.0.2.9"), username="u4", display_name="U 4") == 302
    assert SignupAttempt.objects.count() == 4


def race_behind_a_table_lock(table: str, calls: int, call: Callable[[int], T]) -> list[T]:
    """``call(0)`` .. ``call(calls - 1)`` at once, each from a thread and connection of its own
    (with the lock's holder and this thread, calls + 2 of the test process's pool of 8); their
    answers in order.

    On PostgreSQL the race is made certain rather than left to timing: another transaction holds
    ``table`` (SHARE ROW EXCLUSIVE: reads go on, writes wait) until all the calls wait on a lock,
    then lets go. SQLite takes no table locks; there they simply race."""
    postgres = connection.vendor == "postgresql"
    start, held, release = threading.Barrier(calls), threading.Event(), threading.Event()

    def hold_table() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    def one(n: int) -> T:
        try:
            start.wait(10)
            return call(n)
        finally:
            connections.close_all()

    def waiting_on_locks() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return cursor.fetchone()[0]

    with ThreadPoolExecutor(calls + 1) as pool:
        if postgres:
            holder = pool.submit(hold_table)
            assert held.wait(10)
        answers = pool.map(one, range(calls))
        if postgres:
            deadline = time.monotonic() + 30
            while waiting_on_locks() < calls:
                assert time.monotonic() < deadline, "the calls never all waited"
                time.sleep(0.05)
            release.set()
            holder.result()
        return list(answers)


@override_settings(SIGNUP_LIMIT=2, SIGNUP_WINDOW_SECONDS=60)
def test_concurrent_sign_ups_from_one_address_stop_at_the_limit(transactional_db):
    """4 forms from one address at once: exactly SIGNUP_LIMIT get through the throttle (the
    others 429), and that many attempts are stored. On PostgreSQL the attempts table is held until
    all 4 wait, so without the throttle's per-address lock they count the same window at once
    (seen: 3 and 4 of 4 admitted at a limit of 2)."""
    forms = 4
    answers = race_behind_a_table_lock(
        SignupAttempt._meta.db_table,
        forms,
        lambda n: sign_up(Client(), username=f"c{n}", display_name=f"C {n}", password2="mismatch"),
    )
    assert sorted(answers) == [200] * 2 + [429] * (forms - 2), answers
    assert SignupAttempt.objects.count() == 2


def test_the_51st_wrong_password_of_a_volunteer_within_a_minute_is_refused(volunteer):
    """django-axes, as shipped (LOGIN_FAILURE_LIMIT=50): from the 50th wrong password in a row the
    address is locked out, so the 51st is refused unchecked, the right password included."""
    client = Client()
    started = time.monotonic()
    statuses = [
        client.post(reverse("login"), {"username": "ada", "password": f"wrong-{n}"}).status_code
        for n in range(1, 51)
    ]
    assert statuses[:49] == [200] * 49 and statuses[49] == 429
    assert client.post(reverse("login"), {"username": "ada", "password": "wrong-51"}).status_code == 429
    assert client.post(reverse("login"), {"username": "ada", "password": PASSWORD}).status_code == 429
    assert "_auth_user_id" not in client.session
    # The issue asks for 51 within a minute; what axes counts is the lockout window (15 minutes),
    # and under CI's load 50 password hashes have taken just over a minute.
    assert time.monotonic() - started < settings.AXES_COOLOFF_TIME.total_seconds()


def logged_in(volunteer: Volunteer) -> Client:
    client = Client()
    client.force_login(volunteer.user)
    return client


def create_token(client: Client, campaign: Campaign, name: str = "laptop"):
    return client.post(reverse("volunteer-me"), {"campaign": campaign.pk, "name": name})


def test_a_volunteer_makes_names_and_revokes_their_own_tokens(volunteer):
    campaign = make_campaign()
    client = logged_in(volunteer)
    response = create_token(client, campaign)
    page = response.content.decode()
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = re.search(r'<pre id="token-secret">(swt_[\w-]+)</pre>', page).group(1)
    # The exact join line, with the address from join.join_url (the browsing host here, warned about).
    assert (
        f'<pre id="join-line">curl -fsSL http://testserver/join.sh | sh -s -- --token {secret}</pre>' in page
    )
    assert 'data-copy="join-line"' in page and 'id="join-url-warning"' in page
    token = WorkerToken.objects.get(token_hash=digest(secret))
    assert (token.owner, token.label, token.campaign) == (volunteer.user, "laptop", campaign)
    assert authenticate(secret) == token
    # The secret is shown once: the next view of the page lists the token by prefix only.
    again = client.get(reverse("volunteer-me")).content.decode()
    assert secret not in again and f"{token.prefix}…" in again
    # Revoke: confirmation asked in the page; the token is revoked.
    assert "data-confirm=" in again
    client.post(reverse("volunteer-token-revoke", args=[token.pk]))
    token.refresh_from_db()
    assert token.revoked


def test_concurrent_token_requests_stop_at_the_cap(volunteer):
    """A volunteer one token short of MAX_ACTIVE_TOKENS asks for 4 at once: exactly one is made,
    the others are told to revoke one first. On PostgreSQL the tokens table is held until all 4
    wait, so a count taken before the insert reads 19 in every request (seen: 4 of 4 made)."""
    campaign = make_campaign()
    for n in range(tokens.MAX_ACTIVE_TOKENS - 1):
        tokens.create(volunteer.user, campaign, f"machine {n}")

    def ask(n: int) -> str:
        try:
            tokens.create(volunteer.user, campaign, f"racer {n}")
            return "made"
        except tokens.TokenError as error:
            return str(error)

    requests = 4
    answers = race_behind_a_table_lock(WorkerToken._meta.db_table, requests, ask)
    refused = f"You hold {tokens.MAX_ACTIVE_TOKENS} active tokens for this campaign: revoke one first."
    assert sorted(answers) == sorted(["made"] + [refused] * (requests - 1)), answers
    active = WorkerToken.objects.filter(owner=volunteer.user, revoked_at__isnull=True)
    assert active.count() == tokens.MAX_ACTIVE_TOKENS


@override_settings(SWARM_PUBLIC_URL="https://swarm.example/")
def test_the_join_line_uses_the_public_address(volunteer):
    page = create_token(logged_in(volunteer), make_campaign()).content.decode()
    assert re.search(
        r'<pre id="join-line">curl -fsSL https://swarm.example/join.sh \| sh -s -- --token swt_', page
    )
    assert 'id="join-url-warning"' not in page


def test_a_volunteer_cannot_revoke_anothers_token(volunteer):
    campaign = make_campaign()
    other = Volunteer.objects.create(
        user=get_user_model().objects.create_user("bob", password=PASSWORD), display_name="Bob"
    )
    create_token(logged_in(other), campaign)
    theirs = WorkerToken.objects.get(owner=other.user)
    response = logged_in(volunteer).post(reverse("volunteer-token-revoke", args=[theirs.pk]), follow=True)
    assert "No such token of yours." in response.content.decode()
    theirs.refresh_from_db()
    assert not theirs.revoked


def test_invite_only_private_and_finished_campaigns(volunteer):
    invite_only = make_campaign("invite", volunteer_access=Campaign.VolunteerAccess.INVITE)
    private = make_campaign("private", public=False)
    finished = make_campaign("done", state=Campaign.State.COMPLETED)
    client = logged_in(volunteer)
    for campaign, words in [
        (invite_only, "is invite-only"),
        (private, "is invite-only"),
        (finished, "is completed"),
    ]:
        page = create_token(client, campaign).content.decode()
        assert words in page, campaign.name
    assert not WorkerToken.objects.exists()
    # The organizer makes an invite link; a wrong code is refused, the right one lets the volunteer in.
    staff = get_user_model().objects.create_user("org", password=PASSWORD, is_staff=True)
    organizer = Client()
    organizer.force_login(staff)
    organizer.post(reverse("campaign-volunteer-access", args=[invite_only.pk]), {"access": "invite"})
    invite_only.refresh_from_db()
    assert len(invite_only.invite_code) >= 32
    tokens_page = organizer.get(reverse("campaign-tokens", args=[invite_only.pk])).content.decode()
    link = f"http://testserver/campaigns/{invite_only.pk}/join/{invite_only.invite_code}/"
    assert f'<pre id="invite-link">{link}</pre>' in tokens_page
    assert client.get(f"/campaigns/{invite_only.pk}/join/wrong-code/").status_code == 404
    assert client.get(f"/campaigns/{invite_only.pk}/join/%C3%A9t%C3%A9/").status_code == 404  # "été"
    assert client.get(link).status_code == 302
    page = create_token(client, invite_only).content.decode()
    assert 'id="token-secret"' in page
    assert WorkerToken.objects.filter(owner=volunteer.user, campaign=invite_only).count() == 1


def test_only_staff_switch_a_campaigns_volunteer_access(volunteer):
    campaign = make_campaign()
    response = logged_in(volunteer).post(
        reverse("campaign-volunteer-access", args=[campaign.pk]), {"access": "invite"}
    )
    assert response.status_code == 403
    campaign.refresh_from_db()
    assert campaign.volunteer_access == Campaign.VolunteerAccess.OPEN


def test_a_bad_campaign_choice_is_told_not_a_server_error(volunteer, campaign):
    client = logged_in(volunteer)
    # "²" and "٣" are str.isdigit(); 30 digits overflow PostgreSQL's bigint; 5,000 digits pass
    # Python's int() limit.
    for value in ("abc", "", "99999", "-1", "²", "٣", "9" * 30, "1" * 5000):
        response = client.post(reverse("volunteer-me"), {"campaign": value, "name": "x"})
        assert response.status_code == 200 and "Choose a campaign." in response.content.decode(), value
    response = client.post(reverse("volunteer-me"), {"campaign": f"{campaign.pk}\x00", "name": "x"})
    assert response.status_code == 200 and "Null characters are not allowed" in response.content.decode()
    # PostgreSQL stores no NUL; the page's field takes 120 characters.
    for name, told in (("a\x00b", "Null characters are not allowed"), ("x" * 121, "at most 120 characters")):
        response = client.post(reverse("volunteer-me"), {"campaign": campaign.pk, "name": name})
        assert response.status_code == 200 and told in response.content.decode(), name
    assert not WorkerToken.objects.exists()


def test_my_tokens_needs_a_login(db):
    response = Client().get(reverse("volunteer-me"))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("state", ["paused", "completed"])
def test_the_join_section_of_an_open_campaign(db, state):
    campaign = make_campaign(state=state)
    page = Client().get(campaign.get_absolute_url()).content.decode()
    assert 'id="join"' in page
    assert (
        '<pre id="join-campaign-line">curl -fsSL http://testserver/join.sh | sh -s -- --token &lt;your token&gt;</pre>'
        in page
    )
    assert 'id="join-state-warning"' in page and f"This campaign is {state}" in page
    assert 'data-copy="join-campaign-line"' in page
    invite_only = make_campaign("invite", volunteer_access=Campaign.VolunteerAccess.INVITE)
    assert 'id="join"' not in Client().get(invite_only.get_absolute_url()).content.decode()
