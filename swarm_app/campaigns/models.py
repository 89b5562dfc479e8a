"""Campaigns, their isolated-control runs, and the per-round metrics of every agent."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from worker.campaign import CampaignConfig


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
    config = models.JSONField(help_text="worker.campaign.CampaignConfig, validated")
    # The next position of the campaign's question stream: every lease takes a fresh block.
    next_question_position = models.BigIntegerField(default=0)
    # Per-campaign sequence of pool rollouts: sampling draws from the last N by sequence number.
    rollout_sequence = models.BigIntegerField(default=0)
    public = models.BooleanField(default=True, help_text="visible to anonymous viewers")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("campaign-detail", args=[self.pk])

    @property
    def settings(self) -> CampaignConfig:
        return CampaignConfig.from_json(self.config)

    @property
    def is_finished(self) -> bool:
        return self.state in self.FINISHED


class Arm(models.TextChoices):
    SWARM = "swarm"
    ISOLATED = "isolated"
    FILTERED = "filtered"


class ControlRun(models.Model):
    """One isolated-control agent (J = 0) run by Celery: one per campaign, tier, arm and seed."""

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
    task_id = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

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
        constraints = [
            models.UniqueConstraint(fields=["campaign", "agent", "round"], name="one_report_per_round")
        ]
        indexes = [models.Index(fields=["campaign", "arm", "tier", "round"], name="metrics_chart")]

    def __str__(self) -> str:
        return f"{self.agent} round {self.round}: {self.reward:.3f}"
