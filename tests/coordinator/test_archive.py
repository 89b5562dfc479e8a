"""Bounded storage (issue 31, item 2): rollouts no draw can reach leave the hot pool table on a
real Celery worker, into the campaign's archive or deleted; the metrics export is unchanged,
the organizer's download holds every rollout once, and the pool draw sees the same window."""

from __future__ import annotations

import asyncio
import gzip
import json
import urllib.request
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.celery import app as celery_app
from swarm_app.coordinator import archive
from swarm_app.coordinator.bans import ban_node
from swarm_app.coordinator.models import Lease, PoolArchive, PoolRollout, WorkerToken
from swarm_app.coordinator.tasks import archive_pool
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import G, run, submit_round
from tests.coordinator.test_celery import make_pool
from tests.servers import celery_worker
from tests.wsclient import RawSession
from worker.shared.campaign import CampaignConfig

ROUNDS = 5  # per node; 2 questions a round: 20 rollouts, the window holds the last 4


@pytest.fixture
def campaign(transactional_db) -> Campaign:
    config = CampaignConfig(
        group_size=G, questions_per_round=2, num_local=2, num_external=4, rounds=50, pool_window=4
    )
    return Campaign.objects.create(
        name="archive", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )


def get(url: str, cookie: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Cookie": f"sessionid={cookie}"} if cookie else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return response.read()


def exports(base: str, pk: int) -> dict[str, bytes]:
    """The campaign's metrics export in every form (streamed by the real server)."""
    return {
        f"{fmt}-{level}": get(f"{base}/api/campaigns/{pk}/metrics?format={fmt}&level={level}")
        for fmt in ("csv", "json")
        for level in ("agent", "round")
    }


def download(base: str, pk: int, cookie: str) -> dict[int, dict]:
    """The organizer's rollout download, by sequence; every rollout exactly once."""
    lines = gzip.decompress(get(f"{base}/campaigns/{pk}/rollouts.jsonl.gz", cookie)).splitlines()
    rows = [json.loads(text) for text in lines]
    by_sequence = {row["sequence"]: row for row in rows}
    assert len(by_sequence) == len(rows), "a rollout appears twice"
    return by_sequence


def staff_cookie() -> str:
    user = get_user_model().objects.create_user("organizer", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def test_archived_rollouts_leave_the_hot_table_and_nothing_else_changes(coordinator, campaign, tmp_path):
    token = create_token(campaign, "test")[1]
    mix = campaign.settings.mix

    async def rounds() -> tuple[RawSession, dict]:
        a = await RawSession.open(coordinator)
        b = await RawSession.open(coordinator)
        for session, name in ((a, "node-a"), (b, "node-b")):
            welcome = await session.hello(token, name)
            assert welcome["type"] == "welcome", welcome
        for number in range(ROUNDS):
            for session, name in ((a, "node-a"), (b, "node-b")):
                assert (await submit_round(session, name, mix, round=number))["type"] == "submit_ack"
                reply = await session.request("metrics", round=number, metrics={"loss": 0.1 * number})
                assert reply["type"] == "metrics_ack", reply
        drawn = await a.request("sample_request", round=ROUNDS, count=4)
        await a.close()
        await b.close()
        return drawn

    drawn_before = run(rounds())
    cookie = staff_cookie()
    export_before = exports(coordinator, campaign.pk)
    rollouts_before = download(coordinator, campaign.pk, cookie)
    assert sorted(rollouts_before) == list(range(1, 2 * 2 * ROUNDS + 1))
    window = list(range(2 * 2 * ROUNDS - 3, 2 * 2 * ROUNDS + 1))  # the last 4: round 4 of a, then b

    celery_app.control.purge()
    with celery_worker(tmp_path / "celery.log", POOL_ARCHIVE_GRACE_SECONDS="0"):
        assert archive_pool.delay().get(timeout=120) == {str(campaign.pk): 16}
        assert archive_pool.delay().get(timeout=120) == {}  # nothing left to move: nothing doubled

    hot = list(
        PoolRollout.objects.filter(campaign=campaign).order_by("sequence").values_list("sequence", flat=True)
    )
    assert hot == window
    assert exports(coordinator, campaign.pk) == export_before
    assert download(coordinator, campaign.pk, cookie) == rollouts_before
    (stored,) = PoolArchive.objects.filter(campaign=campaign)
    assert (stored.first_sequence, stored.last_sequence, stored.rollouts, stored.deleted) == (
        1,
        16,
        16,
        False,
    )
    assert len(bytes(stored.data)) < len(json.dumps([rollouts_before[s] for s in range(1, 17)]).encode()) / 3

    async def draw_again() -> dict:
        a = await RawSession.open(coordinator)
        await a.hello(token, "node-a")
        drawn = await a.request("sample_request", round=ROUNDS, count=4)
        await a.close()
        return drawn

    # The draw reads the same window: node a gets node b's two rollouts of round 4, both times.
    drawn_after = run(draw_again())
    ids = {rollouts_before[s]["rollout_id"] for s in window[2:]}
    assert {r["rollout_id"] for r in drawn_before["rollouts"]} == ids
    assert {r["rollout_id"] for r in drawn_after["rollouts"]} == ids
    anonymous = urllib.request.Request(f"{coordinator}/campaigns/{campaign.pk}/rollouts.jsonl.gz")
    with urllib.request.urlopen(anonymous, timeout=30) as response:
        assert "/accounts/login/" in response.url  # organizers only


def test_a_campaign_that_says_delete_keeps_only_the_window(transactional_db):
    config = CampaignConfig(pool_window=12, pool_retention="delete").validate()
    campaign = Campaign.objects.create(name="delete", state=Campaign.State.RUNNING, config=config.to_json())
    make_pool(campaign, nodes=3, per_node=10)
    assert archive.archive_all(grace=0) == {campaign.pk: 18}
    assert list(
        PoolRollout.objects.filter(campaign=campaign).values_list("sequence", flat=True).order_by("sequence")
    ) == list(range(19, 31))
    (row,) = PoolArchive.objects.filter(campaign=campaign)
    assert (row.rollouts, row.deleted, bytes(row.data)) == (18, True, b"")

    async def everything() -> list[bytes]:
        parts = [part async for part in archive.stream(campaign.pk)]
        await sync_to_async(connections.close_all)()  # the thread's connection, not the test's
        return parts

    lines = gzip.decompress(b"".join(asyncio.run(everything()))).splitlines()
    assert [json.loads(text)["sequence"] for text in lines] == list(range(19, 31))


def test_leases_nothing_reads_leave_and_the_others_stay(transactional_db):
    """Submitted and reissued leases older than the grace whose rollouts have all left the hot
    table are deleted. A lease with a rollout still in the window, a recent one, and expired,
    released or active ones (waiting to be reissued, or live) stay, and so does every rollout
    still in the window (a lease's rollouts would go with it: a cascade)."""
    config = CampaignConfig(pool_window=12, pool_retention="delete").validate()
    campaign = Campaign.objects.create(name="leases", state=Campaign.State.RUNNING, config=config.to_json())
    nodes = make_pool(campaign, nodes=3, per_node=10)  # leases l0, l1, l2: sequences 1-10, 11-20, 21-30
    old = timezone.now() - timedelta(hours=2)
    for state in Lease.State.values:
        Lease.objects.create(
            lease_id=f"x-{state}",
            campaign=campaign,
            node=nodes[0],
            round=1,
            questions=[],
            deadline=old,
            state=state,
        )
    Lease.objects.filter(campaign=campaign).update(issued_at=old)
    PoolRollout.objects.filter(campaign=campaign).update(created_at=old)
    Lease.objects.create(
        lease_id="recent",
        campaign=campaign,
        node=nodes[1],
        round=2,
        questions=[],
        deadline=old,
        state="submitted",
    )
    assert archive.archive_all(grace=3600) == {campaign.pk: 18}  # the window keeps 19-30
    assert sorted(Lease.objects.filter(campaign=campaign).values_list("lease_id", flat=True)) == [
        "l1",  # rollouts 19 and 20 are in the window
        "l2",
        "recent",
        "x-active",
        "x-expired",
        "x-released",
    ]
    assert PoolRollout.objects.filter(campaign=campaign).count() == 12
    assert archive.prune_leases(grace=3600) == 0  # nothing more: runs are idempotent


def test_the_grace_keeps_recent_rollouts_whatever_the_window(transactional_db):
    config = CampaignConfig(pool_window=12).validate()
    campaign = Campaign.objects.create(name="grace", state=Campaign.State.RUNNING, config=config.to_json())
    make_pool(campaign, nodes=3, per_node=10)
    assert archive.archive_all(grace=3600) == {}
    assert PoolRollout.objects.filter(campaign=campaign).count() == 30


def test_the_download_is_complete_while_a_run_moves_rows(transactional_db, monkeypatch):
    """A run that archives rows between two pages of the download: the rows it moved before the
    download reached them come from its new archive row, those already sent do not come twice."""
    config = CampaignConfig(pool_window=12).validate()
    campaign = Campaign.objects.create(name="moving", state=Campaign.State.RUNNING, config=config.to_json())
    make_pool(campaign, nodes=3, per_node=10)
    monkeypatch.setattr(archive, "PAGE", 5)

    async def read_while_archiving() -> list[bytes]:
        parts = []
        stream = archive.stream(campaign.pk)
        parts.append(await anext(stream))  # sequences 1..5
        parts.append(await anext(stream))  # 6..10
        assert await sync_to_async(archive.archive_all)(grace=0) == {campaign.pk: 18}  # 1..18 move
        parts += [part async for part in stream]
        await sync_to_async(connections.close_all)()  # the thread's connection, not the test's
        return parts

    lines = gzip.decompress(b"".join(asyncio.run(read_while_archiving()))).splitlines()
    assert sorted(json.loads(text)["sequence"] for text in lines) == list(range(1, 31))


def test_a_ban_after_archiving_reaches_the_download(transactional_db):
    """A node banned once its rollouts were archived: in the download, its rollouts are out of
    the pool (in_pool false) in the archive rows as in the hot table; the others' are as stored."""
    config = CampaignConfig(pool_window=12, pool_retention="archive").validate()
    campaign = Campaign.objects.create(name="ban", state=Campaign.State.RUNNING, config=config.to_json())
    nodes = make_pool(campaign, nodes=3, per_node=10)
    assert archive.archive_all(grace=0) == {campaign.pk: 18}
    WorkerToken.objects.filter(pk=nodes[1].token_id).update(ban_scope=WorkerToken.BanScope.NODE)
    with transaction.atomic():
        ban_node(nodes[1], "test")
    stored = {pk: bytes(data) for pk, data in PoolArchive.objects.values_list("pk", "data")}

    async def everything() -> list[bytes]:
        parts = [part async for part in archive.stream(campaign.pk)]
        await sync_to_async(connections.close_all)()  # the thread's connection, not the test's
        return parts

    rows = [json.loads(text) for text in gzip.decompress(b"".join(asyncio.run(everything()))).splitlines()]
    assert sorted(row["sequence"] for row in rows) == list(range(1, 31))
    assert {row["node"] for row in rows if not row["in_pool"]} == {"n1"}
    assert all(not row["in_pool"] for row in rows if row["node"] == "n1")  # 10: 8 archived, 2 hot
    assert {pk: bytes(data) for pk, data in PoolArchive.objects.values_list("pk", "data")} == stored
