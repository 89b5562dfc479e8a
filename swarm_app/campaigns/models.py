"""Campaigns, their isolated-control runs, and the per-round metrics of every agent."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse

from worker.shared.campaign import CampaignConfig


@lru_cache(maxsize=256)
def settings_from_text(config: str) -> CampaignConfig:
    """A campaign's parsed config from its JSON text, parsed once per distinct text.

    The coordinator's hot paths read the config column as text (swarm_app/coordinator/sql.py)
    and need the parsed config on every request; keyed by the text itself, an edited config is
    a new key, never a stale entry. Callers must not modify the result.
    """
    return CampaignConfig.from_json(config)


class Campaign(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        FAILED = "failed"
        STOPPED = "stopped"

    FINISHED = (State.COMPLETED, State.FAILED, State.STOPPED)

    name = models.CharField(max_length=120)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    failure_reason = models.TextField(blank=True)
    config = models.JSONField(help_text="worker.shared.campaign.CampaignConfig, validated")
    # The next position of the campaign's question stream: every lease takes a fresh block.
    next_question_position = models.BigIntegerField(default=0)
    # Per-campaign sequence of pool rollouts: sampling draws from the last N by sequence number.
    rollout_sequence = models.BigIntegerField(default=0)
    public = models.BooleanField(default=True, help_text="visible to anonymous viewers")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Worker processes the web form started on the coordinator's own machine (demo campaigns).
    local_workers = models.IntegerField(default=0)

    class VolunteerAccess(models.TextChoices):
        OPEN = "open", "open: any signed-in volunteer makes their own tokens"
        INVITE = "invite", "invite-only: volunteers need the invite link"

    # Who may make their own worker tokens (swarm_app/volunteers/); organizers' tokens are
    # unaffected. The invite link carries ``invite_code``; a new code ends the old link.
    volunteer_access = models.CharField(
        max_length=8, choices=VolunteerAccess.choices, default=VolunteerAccess.OPEN
    )
    invite_code = models.CharField(max_length=43, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("campaign-detail", args=[self.pk])

    @property
    def settings(self) -> CampaignConfig:
        return CampaignConfig.from_json(self.config)

    def clean(self) -> None:
        """Every problem of the settings (CampaignConfig.check, the form's and the coordinator's
        checks): the admin and any ModelForm store only settings the coordinator accepts."""
        super().clean()
        if problems := CampaignConfig.check(self.config):
            raise ValidationError({"config": [f"{problem.path}: {problem.message}" for problem in problems]})

    @property
    def is_finished(self) -> bool:
        return self.state in self.FINISHED


class Arm(models.TextChoices):
    """The swarm, and the isolated control kinds of worker.shared.arms.CONTROL_KINDS (same
    values: ``ControlRun.arm`` is the kind passed to ``CampaignConfig.control_arm``)."""

    SWARM = "swarm"
    ISOLATED = "isolated", "isolated (I+J)/0"
    FILTERED = "filtered", "filtered isolated (sanity)"
    SELF = "self", "self-replay I/J-self"
    DYN = "dyn", "over-generation (I+J)/0-dyn"


class ControlRun(models.Model):
    """One isolated control of a campaign: a worker node with an arm (control kind), started by
    Celery on the ``controls`` queue; it shares nothing. One per campaign, tier, arm and seed."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        STOPPED = "stopped"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="control_runs")
    tier = models.CharField(max_length=64)
    arm = models.CharField(max_length=16, choices=Arm.choices)
    seed = models.IntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    round = models.IntegerField(default=0, help_text="rounds completed")
    error = models.TextField(blank=True)
    # The task that runs the control's node now: a task whose id is not this one (a redelivered
    # or superseded copy) does not start a second node (swarm_app/runs/controls.py).
    task_id = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    attempts = models.IntegerField(default=0, help_text="times its node was started")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "tier", "arm", "seed"], name="one_control_per_arm_seed"
            )
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id}/{self.tier}/{self.arm}/seed {self.seed}"

    @property
    def agent_key(self) -> str:
        return f"{self.arm}-{self.tier}-seed{self.seed}"


class RoundMetrics(models.Model):
    """One agent's metrics for one round. ``reward`` is the coordinator's verified mean reward
    of the agent's own completions that round, never the agent's own claim."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="metrics")
    arm = models.CharField(max_length=16, choices=Arm.choices)
    tier = models.CharField(max_length=64)
    # "node:<node id>" for swarm workers, "control:<control run id>" for controls
    agent = models.CharField(max_length=80)
    node = models.ForeignKey("coordinator.WorkerNode", null=True, blank=True, on_delete=models.SET_NULL)
    control_run = models.ForeignKey(ControlRun, null=True, blank=True, on_delete=models.CASCADE)
    round = models.IntegerField()
    reward = models.FloatField(help_text="verified mean reward of the agent's completions")
    metrics = models.JSONField(default=dict, help_text="the agent's report, TRL names")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "round metrics"
        verbose_name_plural = "round metrics"  # one agent's metrics of one round; not "metricss"
        constraints = [
            models.UniqueConstraint(fields=["campaign", "agent", "round"], name="one_report_per_round")
        ]
        indexes = [models.Index(fields=["campaign", "arm", "tier", "round"], name="metrics_chart")]

    def __str__(self) -> str:
        return f"{self.agent} round {self.round}: {self.reward:.3f}"


class RoundAggregate(models.Model):
    """Dashboard rollup: one arm's statistics across agents for one round of one tier.

    Maintained by swarm_app/campaigns/rollups.py from new RoundMetrics rows (recomputed per
    touched round, never incremented), so a page of a 1,000-worker, 2,000-round campaign reads
    a few thousand rows instead of aggregating two million.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="round_aggregates")
    arm = models.CharField(max_length=16, choices=Arm.choices)
    tier = models.CharField(max_length=64)
    round = models.IntegerField()
    agents = models.IntegerField(help_text="agents that reported this round")
    reward_mean = models.FloatField()
    reward_std = models.FloatField(help_text="population std across agents")
    reward_min = models.FloatField()
    reward_max = models.FloatField()
    zero_std_share = models.FloatField(null=True, help_text="mean of frac_reward_zero_std")
    local_used = models.FloatField(null=True, help_text="mean of batch/local_used")
    external_used = models.FloatField(null=True, help_text="mean of batch/external_used")
    metric_means = models.JSONField(
        default=dict, help_text="{key: mean across agents} of rollups.MECHANISM_KEYS (present ones)"
    )
    # The arm's independent units this round: its seeds for a control (one agent each), its
    # swarms for the swarm arm (the nodes of one swarm share a pool: each swarm counts once, by
    # the mean over its nodes). The per-round difference's interval is drawn from these.
    units = models.IntegerField(default=0, help_text="independent units that reported this round")
    unit_mean = models.FloatField(null=True, help_text="mean over the units of each unit's mean reward")
    unit_std = models.FloatField(null=True, help_text="population std across the units' mean rewards")
    source_id = models.BigIntegerField(db_index=True, help_text="largest RoundMetrics id included")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "arm", "tier", "round"], name="one_aggregate_per_round"
            )
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id}/{self.tier}/{self.arm} round {self.round}: {self.reward_mean:.3f}"


class AgentBlock(models.Model):
    """Dashboard rollup: one agent's reward sum over a block of rounds (for the bootstrap over
    agents), recomputed per touched block like :class:`RoundAggregate`."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="agent_blocks")
    agent = models.CharField(max_length=80)
    arm = models.CharField(max_length=16, choices=Arm.choices)
    tier = models.CharField(max_length=64)
    block = models.IntegerField(help_text="round // BLOCK_ROUNDS")
    rounds = models.IntegerField()
    reward_sum = models.FloatField()
    last_round = models.IntegerField()
    metric_sums = models.JSONField(
        default=dict, help_text="{key: [sum, rounds reporting it]} of rollups.MECHANISM_KEYS"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "agent", "block"], name="one_block_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent} block {self.block}: {self.reward_sum:.2f} over {self.rounds}"
