"""What the coordinator's frequent writes cost in indexes, on PostgreSQL (migration 0013): the
presence flush rewrites every connected node's row every few seconds, and it stays a HOT update
(no new index entries) only while no index covers a column it changes; and no index of the
tables written every round repeats the leading column of another one."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode, WorkerToken
from swarm_app.coordinator.storage import store
from worker.shared.campaign import CampaignConfig

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's catalog and HOT")


def _rows(query: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def test_the_presence_flush_updates_node_rows_without_new_index_entries(db):
    campaign = Campaign.objects.create(name="presence", config=CampaignConfig().validate().to_json())
    token = WorkerToken.objects.create(campaign=campaign, label="t", token_hash="h" * 64, prefix="p")
    nodes = [
        WorkerNode.objects.create(campaign=campaign, token=token, node_id=f"node-{i}", tier="tiny-1m")
        for i in range(5)  # their rows and the new versions below fit one page: room for HOT
    ]
    now = time.time()
    for flush in range(3):  # three flushes, each with later times: every row updated each time
        assert store().flush_seen({node.pk: now + flush for node in nodes}) == len(nodes)
    # This transaction's own counts (pg_stat_get_xact_*: exact at once, unlike the shared views).
    ((updated, hot),) = _rows(
        "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid) "
        "FROM pg_class c WHERE c.relname = 'coordinator_workernode'"
    )
    assert updated == 3 * len(nodes)
    assert hot == updated, (
        f"{updated - hot} of {updated} presence updates wrote every index of the node table"
    )


@pytest.mark.parametrize("table", ["coordinator_poolrollout", "coordinator_lease", "coordinator_workernode"])
def test_no_index_repeats_the_leading_column_of_another(db, table):
    indexes = _rows(
        "SELECT i.indexrelid::regclass::text, array_agg(a.attname ORDER BY k.ord) "
        "FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s::regclass AND i.indpred IS NULL GROUP BY i.indexrelid",
        [table],
    )
    single = {columns[0]: name for name, columns in indexes if len(columns) == 1}
    led = {columns[0] for _, columns in indexes if len(columns) > 1}
    assert not [single[column] for column in single.keys() & led]
