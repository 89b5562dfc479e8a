"""Helpers of the campaigns app's tests: a campaign in the database, a valid campaign-form POST."""

from __future__ import annotations

from swarm_app.campaigns.models import Campaign
from worker.shared.campaign import CampaignConfig, ControlsConfig


def make_campaign(
    state: str = Campaign.State.PENDING, public: bool = True, name: str = "web test", **config
) -> Campaign:
    defaults = {"tiers": ["tiny-1m"], "rounds": 3, "controls": ControlsConfig(True, True, 2)}
    cfg = CampaignConfig(**{**defaults, **config}).validate()
    return Campaign.objects.create(name=name, state=state, public=public, config=cfg.to_json())


def form_data(**overrides) -> dict:
    """A valid POST of the campaign form (the cpu-demo preset on one tier)."""
    data = {
        "name": "form test",
        "preset": "cpu-demo",
        "task_preset": "cpu",
        "custom_tasks": "",
        "tiers": ["tiny-1m"],
        "group_size": "4",
        "questions_per_round": "4",
        "num_local": "2",
        "num_external": "2",
        "local_strategy": "nonzero_advantage",
        "external_strategy": "nonzero_advantage",
        "rounds": "5",
        "seed": "0",
        "replicates": "1",
        "controls_isolated": "on",
        "controls_filtered": "on",
        "controls_reference": "",
        "batch_rule": "fixed",
        "decay_rounds": "30",
        "control_seeds": "1",
        "learning_rate": "",
        "eps_low": "0.2",
        "eps_high": "0.28",
        "num_iterations": "2",
        "max_new_tokens": "8",
        "temperature": "1.0",
        "public": "on",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}
