"""Metric names at the protocol boundary (issue #27): a name a spreadsheet would read as a
formula, or with any character outside ``[A-Za-z0-9_./-]``, is refused with ``invalid_message``
naming it, and nothing is stored; TRL's names pass and reach the CSV export unchanged. Against a
real coordinator over a real websocket."""

from __future__ import annotations

import csv
import io
import urllib.request

from swarm_app.campaigns.models import RoundMetrics
from tests.coordinator.helpers import connected, expect_error, run, submit_round

# Names a hostile worker could send: formulas (OWASP's starting characters), and characters
# outside the set that have no place in a metric name.
REFUSED = [
    '=HYPERLINK("http://evil.example","x")',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    "\tx",
    "\rx",
    "a b",
    "reward;x",
    "rewärd",
    "/abs",
    ".hidden",
    "",
]
# TRL's names as the engine reports them (worker/engine/agent.py, trainer.py).
TRL_NAMES = [
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "clip_ratio/low_mean",
    "clip_ratio/region_mean",
    "kl",
    "entropy",
    "grad_norm",
    "sampling/external_importance_sampling_ratio/mean",
    "batch/external_from_others",
    "advantages/local_abs_mean",
]


def test_metric_names_outside_the_charset_are_refused_and_nothing_is_stored(ready, campaign):
    async def session() -> None:
        s = await connected(ready)
        assert (await submit_round(s, "node-a", ready["mix"]))["type"] == "submit_ack"
        for name in REFUSED:
            reply = await s.request("metrics", round=0, metrics={"reward": 0.5, name: 1.0})
            expect_error(reply, "invalid_message", f"field 'metrics': metric name {name!r} is not allowed")
        assert (await s.request("heartbeat"))["type"] == "heartbeat_ack"  # the connection survives
        await s.close()

    run(session())
    assert not RoundMetrics.objects.filter(campaign=campaign).exists()


def test_trl_names_pass_and_reach_the_csv_export_unchanged(ready, campaign):
    reported = {name: -0.5 for name in TRL_NAMES}

    async def session() -> None:
        s = await connected(ready)
        assert (await submit_round(s, "node-a", ready["mix"]))["type"] == "submit_ack"
        assert (await s.request("metrics", round=0, metrics=reported))["type"] == "metrics_ack"
        await s.close()

    run(session())
    assert RoundMetrics.objects.get(campaign=campaign, agent="node:node-a").metrics == reported
    url = f"{ready['url']}/api/campaigns/{campaign.pk}/metrics?format=csv"
    with urllib.request.urlopen(url, timeout=60) as response:
        rows = list(csv.DictReader(io.StringIO(response.read().decode())))
    assert set(TRL_NAMES) - {"reward"} <= set(rows[0])
    assert rows[0]["metrics/reward"] == rows[0]["clip_ratio/low_mean"] == "-0.5"  # numbers stay numbers
