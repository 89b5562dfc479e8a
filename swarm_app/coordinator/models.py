"""Worker tokens and nodes, question leases, and the verified rollout pool."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from swarm_app.campaigns.models import Arm, Campaign, ControlRun


class JSONTextField(models.JSONField):
    """A JSONField stored as ``json`` on PostgreSQL: the text as written, not ``jsonb``'s tree.

    For a column written and read whole, never searched inside (the pool's records): PostgreSQL
    then neither parses a record into jsonb's binary form on insert nor prints it back on every
    draw (about a tenth of its CPU per round at 1,000 volunteers, perf, docs/coordinator-bench.md).
    Elsewhere (SQLite) it is the plain JSONField. psycopg parses ``json`` itself (Django
    registers its text loader for ``jsonb`` only), so a value read may already be decoded.
    """

    def db_type(self, connection):  # type: ignore[no-untyped-def]
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def from_db_value(self, value, expression, connection):  # type: ignore[no-untyped-def]
        if value is not None and not isinstance(value, str):
            return value
        return super().from_db_value(value, expression, connection)


class WorkerToken(models.Model):
    """A secret a volunteer's worker presents at hello. Only its SHA-256 is stored.

    ``ban_scope`` is the organizer's choice, made when the token is created: whether a ban of one
    of its nodes (too many false rewards) bans the token (every node registered with it, and any
    node id it would register later: one volunteer cannot come back under a new node id) or only
    that node (a token shared by several volunteers, so that one liar does not cut off the rest).
    """

    class BanScope(models.TextChoices):
        TOKEN = "token", "the token and all its nodes"
        NODE = "node", "only the node that lied (a token shared by several volunteers)"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=120, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="first characters, to recognise a token")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    ban_scope = models.CharField(
        max_length=8,
        choices=BanScope.choices,
        default=BanScope.TOKEN,
        help_text="what a ban of one of this token's nodes bans",
    )
    banned_at = models.DateTimeField(null=True, blank=True)
    ban_reason = models.CharField(max_length=200, blank=True)
    # The volunteer who made it on their own page (swarm_app/volunteers/); empty for tokens an
    # organizer made. Its nodes' credit is the volunteer's.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="worker_tokens",
    )

    # The token of one of the campaign's control runs (swarm_app/runs/controls.py): its node is
    # that control, not a volunteer. Its secret is made anew each time the control's node starts.
    control_run = models.OneToOneField(
        ControlRun, null=True, blank=True, on_delete=models.CASCADE, related_name="token"
    )

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.label or 'unlabelled'})"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def banned(self) -> bool:
        return self.banned_at is not None


class WorkerNode(models.Model):
    class State(models.TextChoices):
        HEALTHY = "healthy"
        STALE = "stale"  # no heartbeat for a while
        OFFLINE = "offline"  # gone; its leases were reissued
        BANNED = "banned"  # too many false rewards; its rollouts left the pool

    node_id = models.CharField(max_length=64, help_text="chosen by the worker, kept on its disk")
    # No index of its own: one_node_per_campaign leads with the campaign.
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="nodes", db_index=False)
    # RESTRICT: a token cannot be deleted while its nodes exist, but deleting the campaign deletes both.
    token = models.ForeignKey(WorkerToken, on_delete=models.RESTRICT, related_name="nodes")
    tier = models.CharField(max_length=64)
    # Which of the campaign's R independent swarms of its tier (0..R-1): it draws from that
    # swarm's rollouts only (CampaignConfig.replicates; assignment.assign_replicate).
    replicate = models.PositiveSmallIntegerField(default=0)
    # "swarm" for a volunteer's node; a control kind for a campaign's control node, which shares
    # nothing and draws nothing, on its seed's paired question stream (control_nodes.py).
    arm = models.CharField(max_length=16, choices=Arm.choices, default=Arm.SWARM)
    control_run = models.OneToOneField(
        ControlRun, null=True, blank=True, on_delete=models.CASCADE, related_name="node"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.HEALTHY, db_index=True)
    hardware = models.JSONField(default=dict)
    backend = models.CharField(max_length=32, blank=True)
    client_version = models.CharField(max_length=32, blank=True)
    generation_tokens_per_second = models.FloatField(default=0.0)
    round = models.IntegerField(default=0, help_text="the next round this node will run")
    # Accepted submissions are the node's completed rounds (one lease, so one submission, per
    # round). With accepted_rollouts and its NodeCredit's counters they are its credit
    # (docs/volunteers.md): each is updated in the transaction that does the work it counts
    # (submissions, pool draws), never recomputed from history, and none moves once the node is
    # banned.
    accepted_submissions = models.IntegerField(default=0)
    rejected_submissions = models.IntegerField(default=0)
    accepted_rollouts = models.IntegerField(default=0, help_text="verified groups accepted into the pool")
    # How many drawn groups this node's next draw may credit to their nodes: its last accepted
    # round's J (Submitted.external_count), spent by its draws. Draws beyond it (a worker asking
    # again and again) still answer, but credit nobody.
    draw_allowance = models.IntegerField(default=0)
    last_reward = models.FloatField(null=True, blank=True)
    connected = models.BooleanField(default=False)
    # The connection that said hello last (on any server): only its close marks the node
    # disconnected, so a node that moved to another server before its old connection was
    # noticed closed stays connected (docs/deploy.md, several servers).
    connection_id = models.CharField(max_length=32, blank=True)
    # Not indexed: the presence flush (presence.py) writes it for every connected node every few
    # seconds, and an index on it made each of those writes a new row version in every index of
    # the table (no HOT update). Its readers are the liveness beat (by state first) and a form.
    last_seen = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["campaign", "node_id"], name="one_node_per_campaign")]

    def __str__(self) -> str:
        return f"{self.node_id[:8]} ({self.tier}, {self.state})"

    @property
    def is_control(self) -> bool:
        return self.arm != Arm.SWARM


class NodeCredit(models.Model):
    """How many of a node's groups other nodes' draws gave them (its helpfulness, part of its
    credit: docs/volunteers.md). A row of its own, not columns of the node: a draw credits
    several nodes in one statement, and locks only these rows (in node order), never node rows
    that other statements update many at a time in no set order (the presence flush, the
    liveness sweep, a ban); on the node's row two draws and a flush deadlocked (bench/capacity.py
    at 1,000 volunteers). Made with the node's first accepted submission."""

    node = models.OneToOneField(
        WorkerNode, on_delete=models.CASCADE, primary_key=True, related_name="helpfulness"
    )
    groups_drawn = models.IntegerField(default=0, help_text="its groups other nodes' draws gave them")
    groups_drawn_informative = models.IntegerField(
        default=0, help_text="of those, groups with a non-zero advantage"
    )

    def __str__(self) -> str:
        return f"node {self.node_id}: {self.groups_drawn} groups drawn ({self.groups_drawn_informative} informative)"


class Lease(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        SUBMITTED = "submitted"
        EXPIRED = "expired"  # deadline passed; questions wait to be reissued
        RELEASED = "released"  # given back by the worker; questions wait to be reissued
        REISSUED = "reissued"  # its questions went into a newer lease

    lease_id = models.CharField(max_length=32, unique=True)
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="leases")
    # No index of its own: lease_by_node_round leads with the node (a lease is written twice a
    # round, and every index is written each time).
    node = models.ForeignKey(WorkerNode, on_delete=models.CASCADE, related_name="leases", db_index=False)
    round = models.IntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    questions = models.JSONField(help_text="[QuestionRef] as issued")
    issued_at = models.DateTimeField(auto_now_add=True)
    deadline = models.DateTimeField()
    reissue_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    submission_id = models.CharField(max_length=64, blank=True, default="")
    ack = models.JSONField(null=True, blank=True, help_text="the ack sent, replayed for duplicates")

    class Meta:
        indexes = [
            # Partial indexes, so that neither read walks the campaign's history: leases waiting
            # to be reissued (a lease request asks whether any exists, then takes the oldest),
            # and active leases by deadline (the sweep that expires overdue ones).
            models.Index(
                fields=["campaign", "issued_at"],
                condition=models.Q(state__in=["expired", "released"]),
                name="lease_waiting",
            ),
            models.Index(
                fields=["deadline"], condition=models.Q(state="active"), name="lease_active_deadline"
            ),
            # A lease request looks up the lease the node already holds for the round.
            models.Index(fields=["node", "round"], name="lease_by_node_round"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "submission_id"],
                condition=~models.Q(submission_id=""),
                name="one_submission_id_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"lease {self.lease_id[:8]} round {self.round} ({self.state})"


class PoolRollout(models.Model):
    """A verified rollout in a campaign's pool: rewards are the coordinator's, not the worker's."""

    # No index of its own: the (campaign, sequence) constraint below serves every lookup by
    # campaign. With a plain campaign index (or another index leading with it) the planner, on a
    # table never analyzed, probed the pool with it and a filter, walking the campaign's every
    # rollout for each number of the window (then sql.SAMPLE_CANDIDATES; now sql.DRAW_RECORDS).
    #
    # No foreign-key constraints in the database (db_constraint=False): the table is append-only,
    # and its one writer per store (sql.STORE_SUBMISSION; the ORM store's transaction) takes each
    # row's campaign, node and lease from the rows it has just updated, and locked, in the same
    # statement or transaction. The constraints' checks only repeated that, for each of a
    # submission's 8 rows at its commit (8% of PostgreSQL's CPU per round, perf). Deletes go
    # through Django, whose collector cascades to the pool as before.
    campaign = models.ForeignKey(
        Campaign, on_delete=models.CASCADE, related_name="rollouts", db_index=False, db_constraint=False
    )
    sequence = models.BigIntegerField(help_text="per-campaign order of arrival")
    rollout_id = models.CharField(max_length=64)
    # No index of its own: rollout_by_node_round leads with the node (8 rows a round, every index
    # written for each).
    node = models.ForeignKey(
        WorkerNode, on_delete=models.CASCADE, related_name="rollouts", db_index=False, db_constraint=False
    )
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="rollouts", db_constraint=False)
    tier = models.CharField(max_length=64)
    replicate = models.PositiveSmallIntegerField(default=0, help_text="its node's swarm: whose pool it is in")
    round = models.IntegerField()
    task = models.CharField(max_length=64)
    question_seed = models.BigIntegerField()
    question_index = models.BigIntegerField()
    record = JSONTextField(help_text="the Rollout record with verified rewards and advantages")
    mean_reward = models.FloatField()
    zero_advantage = models.BooleanField()
    in_pool = models.BooleanField(default=True, help_text="False once its node is banned")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "sequence"], name="one_rollout_per_sequence"),
            # rollout_id first: the pool probe's (campaign, sequence) must be the one index that
            # leads with the campaign (see the campaign field).
            models.UniqueConstraint(fields=["rollout_id", "campaign"], name="rollout_id_unique_in_campaign"),
        ]
        indexes = [
            models.Index(fields=["node", "round"], name="rollout_by_node_round"),
        ]

    def __str__(self) -> str:
        return f"rollout {self.sequence} of campaign {self.campaign_id}"


class PoolArchive(models.Model):
    """A batch of a campaign's rollouts moved out of the hot pool table (archive.py): no draw could
    reach them any more. ``data`` is one gzip member of JSONL lines (one rollout each, as the
    archive download writes them), empty when the campaign's ``pool_retention`` deleted them."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="pool_archives")
    first_sequence = models.BigIntegerField()
    last_sequence = models.BigIntegerField()
    rollouts = models.IntegerField(help_text="rollouts moved out of the pool by this batch")
    deleted = models.BooleanField(default=False, help_text="dropped (pool_retention 'delete'), not kept")
    data = models.BinaryField(blank=True, help_text="gzip of the rollouts' JSONL lines")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["campaign", "id"], name="pool_archive_by_campaign")]

    def __str__(self) -> str:
        return (
            f"archive of rollouts {self.first_sequence}..{self.last_sequence} of campaign {self.campaign_id}"
        )


class Evaluation(models.Model):
    """One held-out evaluation of one node (a volunteer's or a control's) after one round
    (worker/shared/evaluation.py): issued when the node asks for the set, scored when it answers.
    An issued row that is never answered is a missing evaluation, never a zero. Written by the
    ORM (evaluations.py): a node evaluates every ``eval_every`` rounds, off the hot path."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="evaluations")
    node = models.ForeignKey(WorkerNode, on_delete=models.CASCADE, related_name="evaluations")
    round = models.IntegerField(help_text="the training round after which the node was evaluated")
    eval_id = models.CharField(max_length=32, unique=True)
    questions = models.JSONField(help_text="[QuestionRef] as issued")
    issued_at = models.DateTimeField(auto_now_add=True)
    submission_id = models.CharField(max_length=64, blank=True, default="")
    submitted_at = models.DateTimeField(null=True, blank=True)
    answers = models.JSONField(null=True, blank=True, help_text="the completions as submitted, in order")
    n = models.IntegerField(default=0, help_text="questions scored")
    correct = models.IntegerField(null=True, blank=True, help_text="answers the verifier gave full marks")
    accuracy = models.FloatField(null=True, blank=True)
    reward = models.FloatField(null=True, blank=True, help_text="mean reward, the campaign's")
    claimed_accuracy = models.FloatField(null=True, blank=True, help_text="the node's own score, never used")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "round"], name="one_evaluation_per_node_round")
        ]
        indexes = [models.Index(fields=["campaign", "round"], name="evaluation_by_round")]

    def __str__(self) -> str:
        state = f"accuracy {self.accuracy:.3f}" if self.accuracy is not None else "not answered"
        return f"evaluation of node {self.node_id} after round {self.round} ({state})"

    @property
    def ack(self) -> dict:
        """The eval_ack's fields (replayed to a duplicate)."""
        return {
            "eval_id": self.eval_id,
            "round": self.round,
            "n": self.n,
            "accuracy": self.accuracy,
            "reward": self.reward,
        }
