"""Bounded storage: rollouts no pool draw can reach any more leave the hot pool table.

A draw reads the campaign's last ``pool_window`` rollouts by sequence number (pool.py), and the
campaign's counter only grows, so a rollout numbered ``rollout_sequence - pool_window`` or lower
is never drawn again. Such a rollout also older than ``POOL_ARCHIVE_GRACE_SECONDS`` (its node's
metrics report for that round reads it: campaigns/metrics.py) moves out, by the campaign's
``pool_retention``:

* ``archive``: into :class:`PoolArchive` rows of the campaign, each one gzip member of JSONL
  lines (:func:`line`), in the same transaction as the delete: a rollout is in the hot table or
  in exactly one archive row, never in both, never in neither;
* ``delete``: dropped; a :class:`PoolArchive` row without data keeps the count and the range.

Celery beat runs :func:`archive_all` every ``POOL_ARCHIVE_SECONDS``; on PostgreSQL each run that
moved rows ends with a plain VACUUM of the table, so that the space is reused (this project's
development PostgreSQL runs without autovacuum; production's would do it too).

Rows are taken in batches of :data:`BATCH` (locked with SKIP LOCKED on PostgreSQL, so that two
runs at once take different rows; SQLite runs one writer at a time). What the campaign's
metrics export reads (RoundMetrics, RoundAggregate) is not touched: it stays complete.

Leases go too (:func:`prune_leases`, the same run): a submitted or reissued lease (a final
state) older than the grace, none of whose rollouts is left in the hot table. What one still
served, the stored ack replayed for a repeated submit and the ``round_submitted`` answer to a
node that asks again for a round it submitted, comes seconds after the submit (a worker that
crashed after its ack), well inside the grace. Expired and released leases wait to be reissued
and stay, as does every active one. Without this the lease table grew by about 6 KB a round
(63 MB at 10,000 rounds, bench/pool_storage.py).

The organizer's download (:func:`stream`) is the archive's rows, then the rollouts still in the
hot table, as one gzip stream of every rollout of the campaign (multi-member gzip, which gzip,
zcat and Python's gzip read as one): each rollout once, even when a run moves rows meanwhile.
A node banned after its rollouts were archived has them marked out of the pool there too
(``in_pool`` false, as in the hot table).
"""

from __future__ import annotations

import bisect
import gzip
import logging
from array import array
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import msgspec
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator import sql, telemetry
from swarm_app.coordinator.models import Lease, PoolArchive, PoolRollout, WorkerNode

log = logging.getLogger(__name__)

BATCH = 2000  # rollouts per archive row (about 1 MB of gzip at the benchmark's record size)
FINAL_LEASE_STATES = (Lease.State.SUBMITTED, Lease.State.REISSUED)
PAGE = 500  # hot rollouts per page of the download
FIELDS = (
    "sequence",
    "rollout_id",
    "node__node_id",
    "tier",
    "replicate",
    "round",
    "task",
    "question_seed",
    "question_index",
    "mean_reward",
    "zero_advantage",
    "in_pool",
    "created_at",
    "record",
)
NAMES = ("sequence", "rollout_id", "node", *FIELDS[3:])
_encoder = msgspec.json.Encoder()


def line(row: tuple) -> bytes:
    """One rollout as a JSONL line: its pool columns (``node``: the node's id) and its record."""
    values = dict(zip(NAMES, row, strict=True))
    values["created_at"] = values["created_at"].isoformat()
    return _encoder.encode(values) + b"\n"


def _cutoff(campaign: Campaign) -> int:
    """The highest sequence number no draw of the campaign can reach any more."""
    return campaign.rollout_sequence - campaign.settings.pool_window


def _take_batch(campaign: Campaign, cutoff: int, before: datetime, retention: str) -> int:
    """Move one batch out of the hot table (one transaction); returns how many rows moved."""
    with transaction.atomic():
        rows = PoolRollout.objects.filter(
            campaign_id=campaign.pk, sequence__lte=cutoff, created_at__lt=before
        ).order_by("sequence")
        if sql.is_postgres():
            rows = rows.select_for_update(skip_locked=True, of=("self",))
        taken = list(rows.values_list("id", *FIELDS)[:BATCH])
        if not taken:
            return 0
        deleted, _ = PoolRollout.objects.filter(id__in=[row[0] for row in taken]).delete()
        if deleted != len(taken):  # locked above: cannot happen; never archive what was not removed
            raise RuntimeError(
                f"archive of campaign {campaign.pk}: took {len(taken)} rows, deleted {deleted}"
            )
        keep = retention == "archive"
        PoolArchive.objects.create(
            campaign_id=campaign.pk,
            first_sequence=taken[0][1],
            last_sequence=taken[-1][1],
            rollouts=len(taken),
            deleted=not keep,
            data=gzip.compress(b"".join(line(row[1:]) for row in taken), 6) if keep else b"",
        )
    telemetry.ARCHIVED.labels(str(campaign.pk), retention).inc(len(taken))
    return len(taken)


def archive_campaign(campaign: Campaign, now: datetime | None = None, grace: float | None = None) -> int:
    """Move every rollout of ``campaign`` that no draw can reach and that is older than the grace
    out of the hot table; returns how many moved."""
    grace = settings.POOL_ARCHIVE_GRACE_SECONDS if grace is None else grace
    before = (now or timezone.now()) - timedelta(seconds=grace)
    cutoff = _cutoff(campaign)
    retention = campaign.settings.pool_retention
    moved = 0
    while (taken := _take_batch(campaign, cutoff, before, retention)) > 0:
        moved += taken
    return moved


def prune_leases(now: datetime | None = None, grace: float | None = None) -> int:
    """Delete the leases nothing reads any more (see the module's docstring); returns how many."""
    grace = settings.POOL_ARCHIVE_GRACE_SECONDS if grace is None else grace
    before = (now or timezone.now()) - timedelta(seconds=grace)
    done = Lease.objects.filter(state__in=FINAL_LEASE_STATES, issued_at__lt=before).exclude(
        Exists(PoolRollout.objects.filter(lease=OuterRef("pk")))  # a cascade would take them along
    )
    pruned = 0
    while ids := list(done.values_list("pk", flat=True)[:BATCH]):
        with transaction.atomic():
            # Checked again inside the delete: a rollout cannot appear for a final lease, but the
            # cascade must never take one.
            pruned += (
                Lease.objects.filter(pk__in=ids)
                .exclude(Exists(PoolRollout.objects.filter(lease=OuterRef("pk"))))
                .delete()[1]
                .get(Lease._meta.label, 0)
            )
    return pruned


def _vacuum(*models: type) -> None:
    """A plain VACUUM of the tables a run deleted from, on PostgreSQL (outside a transaction:
    Celery's tasks run in autocommit), so that their space is reused."""
    if not sql.is_postgres():
        return
    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(f"VACUUM {connection.ops.quote_name(model._meta.db_table)}")


def archive_all(now: datetime | None = None, grace: float | None = None) -> dict[int, int]:
    """Every campaign's unreachable rollouts out of the hot table, then the leases nothing reads
    (beat's task); per campaign with rollouts moved, how many."""
    moved = {}
    for campaign in Campaign.objects.only("pk", "config", "rollout_sequence").order_by("pk"):
        count = archive_campaign(campaign, now, grace)
        if count:
            moved[campaign.pk] = count
    pruned = prune_leases(now, grace)
    _vacuum(*([PoolRollout] if moved else []), *([Lease] if pruned else []))
    if moved:
        log.info("pool archive: %s", ", ".join(f"campaign {pk}: {n}" for pk, n in moved.items()))
    if pruned:
        log.info("pool archive: %d leases pruned", pruned)
    return moved


# --- the organizer's download ---------------------------------------------------------------


def _segment_ids(campaign_pk: int) -> list[int]:
    return list(
        PoolArchive.objects.filter(campaign_id=campaign_pk, deleted=False)
        .order_by("id")
        .values_list("id", flat=True)
    )


def _segment(pk: int) -> bytes:
    return bytes(PoolArchive.objects.values_list("data", flat=True).get(pk=pk))


def _banned_nodes(campaign_pk: int) -> frozenset[str]:
    """The ids of the campaign's banned nodes."""
    nodes = WorkerNode.objects.filter(campaign_id=campaign_pk, state=WorkerNode.State.BANNED)
    return frozenset(nodes.values_list("node_id", flat=True))


def _as_banned(data: bytes, banned: frozenset[str]) -> bytes:
    """An archive row's gzip data with its banned nodes' rollouts marked out of the pool, as a
    ban marks the hot table's (bans.py): a ban after the archiving reaches the download too.
    The stored row is not rewritten; only a row with such a rollout is decompressed."""
    if not banned or not data:
        return data
    lines = gzip.decompress(data).splitlines(keepends=True)
    changed = False
    for i, text in enumerate(lines):
        values = msgspec.json.decode(text, type=dict[str, Any])
        if values["node"] in banned and values["in_pool"]:
            values["in_pool"] = False
            lines[i], changed = _encoder.encode(values) + b"\n", True
    return gzip.compress(b"".join(lines), 6) if changed else data


def _hot_page(campaign_pk: int, after: int) -> list[tuple]:
    return list(
        PoolRollout.objects.filter(campaign_id=campaign_pk, sequence__gt=after)
        .order_by("sequence")
        .values_list(*FIELDS)[:PAGE]
    )


def _unseen_lines(data: bytes, seen: array) -> Iterator[bytes]:
    """The lines of an archive row whose rollouts the download did not already send."""
    for text in gzip.decompress(data).splitlines(keepends=True):
        sequence = msgspec.json.decode(text, type=dict[str, Any])["sequence"]
        at = bisect.bisect_left(seen, sequence)
        if at == len(seen) or seen[at] != sequence:
            yield text


async def stream(campaign_pk: int) -> AsyncIterator[bytes]:
    """Every rollout of the campaign once, as gzip members: the archive rows that existed when
    the download started, then the hot table by sequence, then the archive rows written
    meanwhile (by a run that moved rows while the download read), less the rollouts already
    sent from the hot table."""
    before = await sync_to_async(_segment_ids)(campaign_pk)
    banned = await sync_to_async(_banned_nodes)(campaign_pk)
    for pk in before:
        yield _as_banned(await sync_to_async(_segment)(pk), banned)
    seen = array("q")  # sequences sent from the hot table, ascending
    position = -1
    while page := await sync_to_async(_hot_page)(campaign_pk, position):
        seen.extend(row[0] for row in page)
        position = page[-1][0]
        yield gzip.compress(b"".join(line(row) for row in page), 6)
    known = set(before)
    for pk in await sync_to_async(_segment_ids)(campaign_pk):
        if pk not in known:
            data = _as_banned(await sync_to_async(_segment)(pk), banned)
            late = b"".join(_unseen_lines(data, seen))
            if late:
                yield gzip.compress(late, 6)
