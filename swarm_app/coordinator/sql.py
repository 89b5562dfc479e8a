"""The coordinator's hot-path statements, written out instead of left to the ORM.

Profiling bench/coordinator.py (docs/coordinator-bench.md) showed that the ASGI server's one
Python core is what limits a coordinator: each ORM statement costs more Python than the
database spends on it, and a row lock taken in a transaction is held while the thread that
holds it waits for the GIL. So the requests every worker makes every round (a lease, a submission,
a pool draw and its metrics) are on PostgreSQL a few hand-written statements, each sent as a prepared statement
with server-side binding (PostgreSQL plans it once per connection, psycopg converts it once,
nothing is escaped in Python):

* :data:`LEASE_VIEW`: one read for a lease request: the campaign, the node's state, the lease
  the node already holds for the round (a reconnect) and whether any lease waits to be reissued.
* :data:`SUBMISSION_VIEW`: one read for a submission: the lease, its campaign, the node's state,
  and any lease of this node that already carries the submission id (a replay). Not needed for
  a lease this process issued (submissions.py).
* :data:`SAMPLE_VIEW`, :data:`DRAW_RECORDS`: a pool draw: what it is decided on (known already
  when the draw follows the node's submission), then the first qualifying rollouts among a few
  of the window's numbers, with the drawn groups' nodes' credit.
* :data:`RECORD_NODE_METRICS`: a node's report for a round, as one statement;
  :data:`RECORD_NODE_METRICS_AND_LEASE`: the same, LEASE_VIEW for the next round and, in the
  common case, that round's new lease.
* :data:`STORE_SUBMISSION`: the whole write of an accepted submission as one statement (its own
  transaction): claim the lease where the submission's first checks pass, count the node's
  submission, take the pool's sequence numbers from the campaign's counter and insert the
  rollouts under them; and the first chunk of the draw that follows it, with its credit.

A protocol-2 round is two statements: STORE_SUBMISSION, with the first chunk of the round's draw
(DRAW_RECORDS only for the rest, where that chunk gave fewer than J: a young pool), and
RECORD_NODE_METRICS_AND_LEASE.

Other databases (SQLite, the embedded mode) run the ORM versions (storage/orm.py), which do
the same in a transaction; the tests run both.

* :func:`bump`: allocate a range from a counter with ``UPDATE ... SET f = f + n ... RETURNING
  f``. The UPDATE locks the row until its transaction ends, so two servers never get
  overlapping ranges; called outside a transaction, the lock lasts one statement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from django.db import connection, models


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@contextmanager
def _run(sql: str, params: dict[str, Any], prepare: bool = True) -> Iterator[Any]:
    """A PostgreSQL statement with server-side binding, prepared unless ``prepare`` is False
    (a statement run every few seconds, not per request, planned for the tables as they are
    now); its cursor.

    On the connection Django holds, inside whatever transaction is open (outside one, the
    statement is its own transaction). psycopg's errors become Django's (IntegrityError, ...).
    """
    import psycopg  # the PostgreSQL backend's driver; not needed on SQLite

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=prepare)
        yield cursor


def json_text(value: Any) -> str:
    """A statement's JSON parameter as text, by msgspec's encoder: the stdlib's ``json.dumps`` of a
    submission's 36 KB of pool rows was the largest single cost left in daphne at 1,000
    volunteers (6.6% of its CPU, py-spy, docs/coordinator-bench.md)."""
    return msgspec.json.encode(value).decode()


def from_json_text(text: str) -> Any:
    """A JSON column read as text (``::text``), decoded by msgspec (the same values as json.loads)."""
    return msgspec.json.decode(text)


def fetch(sql: str, params: dict[str, Any], prepare: bool = True) -> list[tuple]:
    """The rows of a PostgreSQL statement (see :func:`_run`)."""
    with _run(sql, params, prepare) as cursor:
        return cursor.fetchall()


def execute(sql: str, params: dict[str, Any], prepare: bool = True) -> int:
    """The number of rows a PostgreSQL statement wrote (see :func:`_run`)."""
    with _run(sql, params, prepare) as cursor:
        return cursor.rowcount


def bump(model: type[models.Model], pk: int, field: str, by: int) -> int:
    """Add ``by`` to ``model.field`` of row ``pk``; returns the new value."""
    table = _quote(model._meta.db_table)
    column = _quote(model._meta.get_field(field).column)
    key = _quote(model._meta.pk.column)
    # Only names from the model's _meta are formatted in; values are bound parameters.
    statement = f"UPDATE {table} SET {column} = {column} + %(by)s WHERE {key} = %(pk)s RETURNING {column}"
    if is_postgres():
        rows = fetch(statement, {"by": by, "pk": pk})
        row = rows[0] if rows else None
    else:
        with connection.cursor() as cursor:
            cursor.execute(statement, {"by": by, "pk": pk})
            row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return int(row[0])


# --- PostgreSQL statements of a worker's round ----------------------------------------------
# Table names are the models' (swarm_app/coordinator/models.py, campaigns/models.py); the
# states are the models' State values. JSON columns are read as text (::text) and parsed by
# the caller, whatever loaders the connection has. Literal conditions (submission_id <> '') let a generic
# plan use the partial unique index on (node, submission_id). "Any lease waiting" reads the
# partial index of expired and released leases only (models.Lease, lease_waiting): a lease
# that is active and past its deadline waits only once a sweep marks it expired (leases.py).
# Asking for those on every request too (active AND deadline < now) visited the dead index
# entry of every lease submitted since the last VACUUM: 2.5 ms per request at 5.3k leases,
# growing with the campaign's age (bench/coordinator.py's lease_ratio watches it).
#
# A statement is prepared on a connection at its first run, and its generic plan is kept for
# the connection's life, whatever the tables grow to (autovacuum's ANALYZE, where it runs,
# replans). A plan made while the tables were small must still fit them large, so every lookup
# here goes through an index of the key it is given; tests/coordinator/test_plans.py plans each
# statement on empty, never-analyzed tables and checks. "(condition) IS TRUE" hides a condition
# from the planner's partial-index matching: written plainly, "state = 'active'" let the
# planner answer a primary-key or (node, round) lookup from the index of all active leases
# (lease_active_deadline), a read of every active lease of every campaign.

# A node whose token is banned counts as banned, whatever its own row says: a node registered in
# the moment of its token's ban (a hello that read the token just before) is refused too.
_NODE_STATE = "CASE WHEN t.banned_at IS NOT NULL THEN 'banned' ELSE n.state END"

LEASE_VIEW = """
SELECT c.name, c.state, c.created_at, c.config::text AS config, {NODE_STATE} AS node_state,
       t.revoked_at IS NOT NULL AS revoked, held.lease_id AS held_id, held.deadline AS held_deadline,
       held.questions::text AS held_refs, done.ack::text AS ack,
       EXISTS (SELECT 1 FROM coordinator_lease w
               WHERE w.campaign_id = c.id AND w.state IN ('expired', 'released')) AS any_waiting
FROM campaigns_campaign c
JOIN coordinator_workernode n ON n.id = %(node)s
JOIN coordinator_workertoken t ON t.id = n.token_id
LEFT JOIN LATERAL (
    SELECT lease_id, deadline, questions FROM coordinator_lease
    WHERE node_id = %(node)s AND round = %(lease_round)s AND (state = 'active' AND deadline >= %(now)s) IS TRUE
    ORDER BY id LIMIT 1
) held ON true
LEFT JOIN LATERAL (
    SELECT ack FROM coordinator_lease
    WHERE node_id = %(node)s AND round = %(lease_round)s AND state = 'submitted'
    ORDER BY id LIMIT 1
) done ON true
WHERE c.id = %(campaign)s
""".replace("{NODE_STATE}", _NODE_STATE)

SUBMISSION_VIEW = """
SELECT l.id, l.lease_id, l.node_id, l.state, l.deadline, l.round, l.questions::text, l.submission_id,
       l.ack::text, c.config::text, {NODE_STATE}
FROM coordinator_lease l
JOIN campaigns_campaign c ON c.id = l.campaign_id
JOIN coordinator_workernode n ON n.id = %(node)s
JOIN coordinator_workertoken t ON t.id = n.token_id
WHERE l.lease_id = %(lease_id)s
   OR (l.node_id = %(node)s AND l.submission_id = %(submission_id)s AND l.submission_id <> '')
LIMIT 2
""".replace("{NODE_STATE}", _NODE_STATE)

INSERT_LEASE = """
INSERT INTO coordinator_lease (lease_id, campaign_id, node_id, round, state, questions, issued_at,
                               deadline, reissue_of_id, submission_id, ack)
VALUES (%(lease_id)s, %(campaign)s, %(node)s, %(round)s, 'active', %(questions)s::jsonb, %(now)s,
        %(deadline)s, NULL, '', NULL)
"""

# A draw's credit, the same in DRAW_RECORDS and in STORE_SUBMISSION's first chunk: the groups in
# "drawn" credit their nodes' rows (models.NodeCredit), locked in node order.
_CREDIT_DRAWN = """credited AS (
    SELECT node_id, count(*) AS groups, count(*) FILTER (WHERE NOT zero_advantage) AS informative
    FROM drawn GROUP BY node_id
), locked AS (
    SELECT node_id FROM coordinator_nodecredit
    WHERE node_id = ANY(ARRAY(SELECT node_id FROM credited))
    ORDER BY node_id FOR UPDATE
), updated AS (
    UPDATE coordinator_nodecredit r
    SET groups_drawn = r.groups_drawn + c.groups,
        groups_drawn_informative = r.groups_drawn_informative + c.informative
    FROM locked l JOIN credited c ON c.node_id = l.node_id
    WHERE r.node_id = l.node_id
)"""

# Rows of the pool's last sequence number, the number of rollouts stored, len(rollouts), the last
# number before them and a record of the draw's first chunk (one row per record drawn, in the
# order drawn; one row with a NULL record when none is); (NULL, 0, ...) when the lease could not
# be claimed: then nothing is written or drawn, and no sequence number is taken. It is claimed
# only where a submission's first checks (submissions.py) pass as of the claim: the node's lease of that round, active and within its deadline, the submission id not
# used by another of the node's leases, node and token not banned. A submission of a lease this
# process issued is stored on that alone (no read before it); the others were read and checked
# first, and a claim that fails then was lost to a race (a racing connection, an expiry). The
# records (36 KB per submission) arrive as an array of texts in binary form (``%(records)b``: each
# element sent as it is, length-prefixed; the text form of an array would be escaped in Python,
# element by element), zipped in order with one small JSON array of the other columns. Sent
# inside that JSON, as before, the records were parsed three times by PostgreSQL (the ``::json``
# cast, json_to_recordset, each record's json input): 0.2-0.3 ms of its CPU a round, against one
# parse now, each record's json input (docs/coordinator-bench.md). As ``json``, not ``jsonb``:
# each record is kept as the text sent (the column is json, models.JSONTextField), and nothing is
# parsed into jsonb's tree to be printed back at every draw.
# The sequence numbers are taken here, from the campaign's counter ("numbered"), so that the
# campaign row is locked until this statement commits; taken in a statement of their own they
# cost a round trip and a commit more per round (docs/coordinator-bench.md). The campaign row's
# other writers are rare (an organizer's action, the lease positions' blocks, a new node's first
# hello with several replicates), and none of them waits, while holding it, for a row this
# statement locks first (the lease, or a node that holds a lease), so no deadlock.
# The draw that follows the submission (protocol 2's submit_ack) visits its first chunk here
# ("chosen" .. "updated": DRAW_RECORDS' steps), below the pool's last number as this statement's
# snapshot reads it ("pool": before the submission's own rollouts, which the node never draws),
# with the node's allowance known: the draw_allowance this statement sets is what J leaves after
# the chunk. A draw in a statement of its own cost a round trip, an executor start and a commit
# more per round (docs/coordinator-bench.md). Its locks come last: the drawn groups' credit rows
# ("locked", in node order) after the campaign's row ("drawn" reads "numbered"), and nothing that
# holds credit rows waits for a node's or a campaign's row, as DRAW_RECORDS says.
STORE_SUBMISSION = """
WITH claimed AS (
    UPDATE coordinator_lease l SET state = 'submitted', submission_id = %(submission_id)s,
                                   ack = %(ack)s::jsonb
    WHERE l.lease_id = %(lease_id)s AND l.node_id = %(node)s AND l.round = %(round)s
      AND (l.state = 'active' AND l.deadline >= %(now)s) IS TRUE
      AND NOT EXISTS (SELECT 1 FROM coordinator_lease p
                      WHERE p.node_id = %(node)s AND p.submission_id = %(submission_id)s AND p.submission_id <> '')
      AND NOT EXISTS (SELECT 1 FROM coordinator_workernode n JOIN coordinator_workertoken t ON t.id = n.token_id
                      WHERE n.id = %(node)s AND (n.state = 'banned' OR t.banned_at IS NOT NULL))
    RETURNING l.id
), pool AS (
    -- The pool's last number as this statement reads it: before this submission's rollouts.
    SELECT rollout_sequence AS last FROM campaigns_campaign WHERE id = %(campaign)s
), chosen AS (
    -- The draw's first chunk (pool.DrawOrder): the first "count" rollouts at these offsets below
    -- pool.last, in their order, that the node may draw; as DRAW_RECORDS' "chosen".
    SELECT row_number() OVER (ORDER BY o.k) AS rank, p.node_id, p.zero_advantage, p.record
    FROM pool CROSS JOIN unnest(%(offsets)s::bigint[]) WITH ORDINALITY AS o(back, k)
    CROSS JOIN LATERAL (
        SELECT in_pool, node_id, zero_advantage, tier, replicate, record FROM coordinator_poolrollout
        WHERE campaign_id = %(campaign)s AND sequence = pool.last - o.back LIMIT 1
    ) p
    WHERE o.back < pool.last AND p.in_pool AND p.node_id <> %(node)s AND p.replicate = %(replicate)s
      AND (NOT %(nonzero_only)s OR NOT p.zero_advantage)
      AND (%(draw_tier)s::text IS NULL OR p.tier = %(draw_tier)s)
    ORDER BY o.k LIMIT %(count)s
), counted AS (
    -- The next draw's allowance is what this round's J leaves after the first chunk's draw.
    UPDATE coordinator_workernode SET accepted_submissions = accepted_submissions + 1,
                                      accepted_rollouts = accepted_rollouts + %(groups)s,
                                      draw_allowance = GREATEST(0, %(allowance)s - (SELECT count(*) FROM chosen))
    WHERE id = %(node)s AND state <> 'banned' AND EXISTS (SELECT 1 FROM claimed)
    RETURNING id
), credit_row AS (
    -- The node's credit row (models.NodeCredit), made once; after the node's row is locked
    -- (it reads "counted"), and an existing row is not locked at all (DO NOTHING).
    INSERT INTO coordinator_nodecredit (node_id, groups_drawn, groups_drawn_informative)
    SELECT id, 0, 0 FROM counted
    ON CONFLICT (node_id) DO NOTHING
), numbered AS (
    -- After the node's row ("counted"), so that the campaign's row is never held while this
    -- waits for the node's (which the presence flush may hold, for a thousand nodes at once).
    UPDATE campaigns_campaign SET rollout_sequence = rollout_sequence + %(groups)s
    WHERE id = %(campaign)s AND EXISTS (SELECT 1 FROM counted)
    RETURNING rollout_sequence AS last
), stored AS (
    INSERT INTO coordinator_poolrollout (campaign_id, sequence, rollout_id, node_id, lease_id, tier,
                                         replicate, round, task, question_seed, question_index, record,
                                         mean_reward, zero_advantage, in_pool, created_at)
    SELECT %(campaign)s, numbered.last - %(groups)s + r.position, r.rollout_id, %(node)s, claimed.id,
           %(tier)s, %(replicate)s, %(round)s, r.task, r.seed, r.index, r.record::json, r.mean_reward,
           r.zero_advantage, true, now()
    FROM claimed, numbered,
         ROWS FROM (
             json_to_recordset(%(rows)s::json)
                 AS (rollout_id text, task text, seed bigint, index bigint, mean_reward float8,
                     zero_advantage bool),
             unnest(%(records)b::text[])
         ) WITH ORDINALITY AS r(rollout_id, task, seed, index, mean_reward, zero_advantage, record, position)
    RETURNING 1
), drawn AS (
    -- The groups drawn that earn credit, as DRAW_RECORDS' "drawn": after the campaign's row
    -- ("numbered"), so that the credit rows are the last locks taken.
    SELECT chosen.node_id, chosen.zero_advantage
    FROM chosen
    CROSS JOIN LATERAL (
        SELECT state FROM coordinator_workernode WHERE id = chosen.node_id LIMIT 1
    ) w
    WHERE chosen.rank <= %(allowance)s AND w.state <> 'banned' AND EXISTS (SELECT 1 FROM numbered)
), {CREDIT_DRAWN}
SELECT (SELECT last FROM numbered), (SELECT count(*) FROM stored), (SELECT last FROM pool),
       chosen.record::text
FROM (SELECT 1) AS one LEFT JOIN chosen ON EXISTS (SELECT 1 FROM counted)
ORDER BY chosen.rank
""".replace("{CREDIT_DRAWN}", _CREDIT_DRAWN)

# The pool's draw (pool.py): the view it is decided on, then DRAW_RECORDS on the window's numbers
# in a random order, a few at a time. Each number is looked up by (campaign, sequence) on its
# unique index: one probe per number, a LATERAL subquery with LIMIT 1, the one shape the planner
# cannot turn into a scan of the campaign. Every other form was seen to go wrong:
# "campaign_id = X AND sequence > Y" walked the campaign's every rollout (for a campaign newer
# than the table's statistics, a custom plan trusts ~1 row for it: 8 ms per draw at 18k
# rollouts, growing); as a generic plan it scanned the whole table (200 ms at 1M); and a plain
# JOIN with generate_series, on a table never analyzed (autovacuum off), became a hash join over
# a bitmap scan of the campaign's rollouts (117 ms per draw at 25k, in bench/capacity.py's 1,000
# volunteers; 0.9 ms as written here). tests/coordinator/test_plans.py checks the plan.
SAMPLE_VIEW = """
SELECT c.config::text, c.rollout_sequence, n.tier, n.replicate
FROM campaigns_campaign c JOIN coordinator_workernode n ON n.id = %(node)s
WHERE c.id = %(campaign)s
"""

# A draw's records, with its credit (pool.py): the first "count" rollouts among the given
# window numbers, in their order, that the node may draw (in the pool, another node's, its
# replicate's, [informative], [its tier]); the groups drawn, in that order, credit their
# nodes (NodeCredit: groups_drawn, and groups_drawn_informative for a non-zero advantage) up to
# the asking node's draw_allowance, which they spend; banned nodes get nothing. Locks: the asking
# node's row only when it has an allowance left (once a round), before anything else ("drawn"
# reads "me"); then the drawn nodes' credit rows, in node order. Nothing that holds credit rows
# waits for a node row, so no draw deadlocks with another or with the statements that update
# many node rows in no set order (the presence flush, the liveness sweep, a ban): on the node
# rows themselves, 10-15 draws a minute deadlocked with the flush at 1,000 volunteers.
# Each drawn node is one LATERAL probe of the node table's primary key, and "= ANY(ARRAY(...))"
# keeps the credit rows' lookup on theirs: planned generically on small tables, a plain join
# and "id = ANY(ids)" became sequential scans (see the plan notes above). The records come back
# in the order drawn.
DRAW_RECORDS = """
WITH chosen AS (
    SELECT row_number() OVER (ORDER BY o.k) AS rank, p.id, p.node_id, p.zero_advantage, p.record
    FROM unnest(%(sequences)s::bigint[]) WITH ORDINALITY AS o(sequence, k)
    CROSS JOIN LATERAL (
        SELECT id, in_pool, node_id, zero_advantage, tier, replicate, record FROM coordinator_poolrollout
        WHERE campaign_id = %(campaign)s AND sequence = o.sequence LIMIT 1
    ) p
    WHERE p.in_pool AND p.node_id <> %(node)s AND p.replicate = %(replicate)s
      AND (NOT %(nonzero_only)s OR NOT p.zero_advantage) AND (%(tier)s::text IS NULL OR p.tier = %(tier)s)
    ORDER BY o.k LIMIT %(count)s
), me AS (
    SELECT draw_allowance AS n FROM coordinator_workernode
    WHERE id = %(node)s AND draw_allowance > 0 FOR UPDATE
), spent AS (
    UPDATE coordinator_workernode SET draw_allowance = GREATEST(0, draw_allowance - (SELECT count(*) FROM chosen))
    WHERE id = %(node)s AND EXISTS (SELECT 1 FROM me)
), drawn AS (
    SELECT chosen.node_id, chosen.zero_advantage
    FROM chosen
    CROSS JOIN LATERAL (
        SELECT state FROM coordinator_workernode WHERE id = chosen.node_id LIMIT 1
    ) w
    WHERE chosen.rank <= COALESCE((SELECT n FROM me), 0) AND w.state <> 'banned'
), {CREDIT_DRAWN}
SELECT record::text FROM chosen ORDER BY rank
""".replace("{CREDIT_DRAWN}", _CREDIT_DRAWN)

# Presence (presence.py): last-seen times of many nodes in one statement; a node the liveness beat
# marked offline and that still talks is connected again, a banned one stays banned. Run every
# few seconds with up to every connected node's id: not prepared, so that it is planned for the
# node table as it is (a hash join over it once it is large, where a plan kept from its first
# run, on a small table, would stay what fit then).
FLUSH_SEEN = """
UPDATE coordinator_workernode n
SET last_seen = v.seen,
    state = CASE WHEN n.state = 'banned' THEN n.state ELSE 'healthy' END,
    connected = n.connected OR n.state = 'offline'
FROM (SELECT unnest(%(ids)s::bigint[]) AS id, unnest(%(seen)s::timestamptz[]) AS seen) v
WHERE n.id = v.id AND (n.last_seen IS NULL OR n.last_seen < v.seen)
"""

# A node's report for a round (campaigns/metrics.py): the verified mean reward of its rollouts
# that round, the report upserted (one per campaign, agent and round), the node moved on. No
# row is written when the node has no rollouts that round (reward NULL).
_REPORT = """
WITH verified AS (
    SELECT avg(mean_reward) AS reward FROM coordinator_poolrollout
    WHERE node_id = %(node)s AND round = %(round)s
), reported AS (
    INSERT INTO campaigns_roundmetrics (campaign_id, arm, tier, agent, node_id, control_run_id, round,
                                        reward, metrics, created_at)
    SELECT %(campaign)s, 'swarm', %(tier)s, %(agent)s, %(node)s, NULL, %(round)s, verified.reward,
           %(metrics)s::jsonb, now()
    FROM verified WHERE verified.reward IS NOT NULL
    ON CONFLICT ON CONSTRAINT one_report_per_round DO UPDATE
        SET arm = EXCLUDED.arm, tier = EXCLUDED.tier, node_id = EXCLUDED.node_id,
            reward = EXCLUDED.reward, metrics = EXCLUDED.metrics
    RETURNING id
), advanced AS (
    UPDATE coordinator_workernode SET round = GREATEST(round, %(round)s + 1), last_reward = verified.reward
    FROM verified WHERE id = %(node)s AND verified.reward IS NOT NULL
)
"""

RECORD_NODE_METRICS = _REPORT + "SELECT verified.reward, (SELECT id FROM reported) FROM verified"

# Protocol 2's metrics report, whose answer carries the next round's lease: the report; what
# that lease is decided on (LEASE_VIEW for round %(lease_round)s, one row); and the lease this
# process offers (leases.offer_lease: its id, questions and deadline; all NULL for no offer),
# inserted only in the common case, where leases.issue_lease would insert a new lease too: the
# round reported (verified rollouts), the campaign the one the offer was made for (its creation
# time) and running, the node not banned nor its token revoked, no lease of the node held or
# submitted for that round and none waiting to be reissued. Otherwise nothing is inserted and
# issue_lease decides from the view. One statement and one commit where the report, the read
# and the insert were three statements and two commits.
RECORD_NODE_METRICS_AND_LEASE = (
    _REPORT
    + ", lease AS ("
    + LEASE_VIEW
    + """), issued AS (
    INSERT INTO coordinator_lease (lease_id, campaign_id, node_id, round, state, questions, issued_at,
                                   deadline, reissue_of_id, submission_id, ack)
    SELECT %(lease_id)s::text, %(campaign)s, %(node)s, %(lease_round)s, 'active', %(questions)s::jsonb, %(now)s,
           %(deadline)s, NULL, '', NULL
    FROM lease, verified
    WHERE %(lease_id)s::text IS NOT NULL AND verified.reward IS NOT NULL
      AND lease.state = 'running' AND lease.created_at = %(created)s::timestamptz
      AND lease.node_state <> 'banned' AND NOT lease.revoked
      AND lease.held_id IS NULL AND lease.ack IS NULL AND NOT lease.any_waiting
    RETURNING 1
)
SELECT verified.reward, (SELECT id FROM reported), lease.*, EXISTS (SELECT 1 FROM issued)
FROM verified CROSS JOIN lease"""
)
