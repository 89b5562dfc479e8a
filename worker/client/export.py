"""``swarm-worker export``: a node's trained model as a Hugging Face model directory (issue #30).

A worker keeps, per campaign, one checkpoint of its node (worker/engine/checkpoint.py: model,
optimizer, loop state) in ``<data dir>/checkpoints/campaign-<id>/<node id>.pt``, and the tier
it trains in its stats file. The export loads the tier's base model the way the worker does
(worker/engine/policy.py: ``from_pretrained`` on the cached or shipped directory), puts the
checkpoint's weights in it, and writes what ``AutoModelForCausalLM.from_pretrained(OUT)`` and
``AutoTokenizer.from_pretrained(OUT)`` read (safetensors weights, config, generation config,
tokenizer), with a model card (README.md) naming the campaign, the node, the tier, the rounds
trained and the checkpoint's held-out accuracy as the coordinator scored it (:func:`held_out`:
fetched from ``/api/campaigns/<id>/evaluations``, or "not evaluated" and why; the export never
fails for it). The weights are the optimizer's fp32 master weights, exactly the checkpoint's.
``--push-to-hub REPO`` then uploads the directory with huggingface_hub, with the credentials
``huggingface-cli login`` or ``HF_TOKEN`` give (checked before anything is written).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.client.address import http_url
from worker.client.identity import NODE_FILE, load_stats
from worker.client.volunteer import node_data_dirs
from worker.shared.tiers import model_cache_dir, tier

FETCH_TIMEOUT = 10.0  # seconds to wait for the coordinator's answer


class ExportError(RuntimeError):
    """Nothing to export as asked (no worker ran there, no checkpoint, an unknown campaign)."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    campaign_id: str
    node_id: str
    tier: str


def find_checkpoint(data_dir: Path, node: int = 0, campaign_id: str | None = None) -> Checkpoint:
    """Node ``node``'s checkpoint under ``data_dir`` (``--nodes`` layout), for ``campaign_id``
    or else the most recently written one."""
    if node < 0:
        raise ExportError("--node must be 0 or more")
    node_dir = node_data_dirs(Path(data_dir), node + 1)[node]
    identity = node_dir / NODE_FILE
    if not identity.exists():
        raise ExportError(f"no worker has run with the data directory {node_dir} (no {NODE_FILE})")
    node_id = json.loads(identity.read_text(encoding="utf-8"))["node_id"]
    tier_name = load_stats(node_dir).get("tier")
    if not isinstance(tier_name, str):
        raise ExportError(f"{node_dir} records no tier: the worker never loaded a model there")
    pattern = f"campaign-{campaign_id}" if campaign_id is not None else "campaign-*"
    found = sorted(
        (node_dir / "checkpoints").glob(f"{pattern}/{node_id}.pt"), key=lambda p: p.stat().st_mtime
    )
    if not found:
        which = f"campaign {campaign_id}" if campaign_id is not None else "any campaign"
        raise ExportError(f"node {node_id} has no checkpoint for {which} in {node_dir / 'checkpoints'}")
    path = found[-1]
    return Checkpoint(path, path.parent.name.removeprefix("campaign-"), node_id, tier_name)


def coordinator_of(data_dir: Path, node: int = 0) -> str | None:
    """The coordinator node ``node`` of ``data_dir`` last joined (``swarm-worker join`` records
    it), or None."""
    url = load_stats(node_data_dirs(Path(data_dir), node + 1)[node]).get("coordinator")
    return url if isinstance(url, str) and url else None


def held_out(
    checkpoint: Checkpoint, rounds: int, url: str | None, token: str | None, timeout: float = FETCH_TIMEOUT
) -> dict[str, Any]:
    """The checkpoint's held-out accuracy as the coordinator at ``url`` scored it: the node's
    evaluation after round ``rounds - 1``, the checkpoint's last (``/api/campaigns/<id>/evaluations``;
    the worker token, where given, goes as ``Authorization: Bearer``: a private campaign's nodes
    need it). ``{"evaluated": True, "round", "n", "correct", "accuracy", "reward", ...}``, or
    ``{"evaluated": False, "why": ...}`` when there is none or the coordinator cannot say."""
    if rounds < 1:
        return {"evaluated": False, "why": "the checkpoint has trained no round"}
    if not url:
        return {"evaluated": False, "why": "no coordinator address (give --url or $SWARM_URL)"}
    try:
        base = http_url(url)
    except ValueError as error:
        return {"evaluated": False, "why": str(error)}
    query = urllib.parse.urlencode({"agent": f"node:{checkpoint.node_id}"})
    address = f"{base}/api/campaigns/{urllib.parse.quote(checkpoint.campaign_id)}/evaluations?{query}"
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            said = json.loads(error.read()).get("error") or error.reason
        except ValueError:
            said = error.reason
        return {"evaluated": False, "why": f"the coordinator at {base} answered {error.code}: {said}"}
    except (OSError, ValueError) as error:
        return {"evaluated": False, "why": f"the coordinator at {base} could not be reached ({error})"}
    scored = [row for row in body.get("evaluations", []) if row.get("round") == rounds - 1]
    if not scored:
        rounds_scored = [row["round"] for row in body.get("evaluations", [])]
        latest = f"; its latest is after round {rounds_scored[-1]}" if rounds_scored else ""
        return {
            "evaluated": False,
            "why": f"the coordinator has no held-out evaluation of this checkpoint (after round {rounds - 1}){latest}",
        }
    return {"evaluated": True, **scored[0]}


def held_out_text(result: dict[str, Any], campaign_id: str) -> str:
    """The model card's (and the command's) words for :func:`held_out`'s result."""
    if not result["evaluated"]:
        # one line, no table cell's end: the reason may quote the coordinator's own words
        return "not evaluated: " + " ".join(str(result["why"]).split()).replace("|", "/")
    return (
        f"{result['accuracy']:.3f} ({result['correct']} of {result['n']} fresh questions exactly right, "
        f"n = {result['n']}; after round {result['round']}, the checkpoint's last, of campaign "
        f"{campaign_id}; scored by the coordinator)"
    )


def export_model(
    checkpoint: Checkpoint,
    out: Path,
    cache_dir: Path | None = None,
    url: str | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """Write ``checkpoint``'s model to ``out`` as a Hugging Face model directory; returns what
    the model card says (campaign, node, tier, base model, rounds, tokens trained on, and the
    held-out accuracy the coordinator at ``url`` scored: :func:`held_out`)."""
    import torch

    from worker.engine.policy import load_policy

    spec = tier(checkpoint.tier)
    model, tokenizer = load_policy(spec, cache_dir or model_cache_dir(), log=lambda message: None)
    payload = torch.load(checkpoint.path, map_location="cpu", weights_only=False)
    model.load_state_dict(payload["model"])
    state = payload["state"]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    card = {
        "campaign": checkpoint.campaign_id,
        "node": checkpoint.node_id,
        "tier": spec.name,
        "base_model": spec.source,
        "rounds": int(state["round"]),
        "tokens_trained_on": int(state.get("tokens_seen", 0)),
    }
    card["held_out"] = held_out(checkpoint, card["rounds"], url, token)
    (out / "README.md").write_text(model_card(card), encoding="utf-8")
    return card


def model_card(card: dict[str, Any]) -> str:
    return f"""---
library_name: transformers
tags: [swarm, sapo, grpo, reasoning-gym]
---

# Swarm node {card["node"]}, campaign {card["campaign"]}

A policy trained with GRPO on reasoning-gym tasks as one node of a Swarm campaign (SAPO: the
nodes share decoded rollouts through a common pool). Exported by `swarm-worker export` from the
node's checkpoint: its weights are the checkpoint's (fp32).

| | |
|---|---|
| campaign | {card["campaign"]} |
| node | {card["node"]} |
| tier | {card["tier"]} (base: `{card["base_model"]}`) |
| rounds trained | {card["rounds"]} |
| tokens trained on | {card["tokens_trained_on"]} |
| held-out accuracy | {held_out_text(card["held_out"], card["campaign"])} |

Held-out accuracy: the share of the campaign's evaluation questions (fresh reasoning-gym
questions no node trained on, answered greedily) the coordinator's verifiers gave full marks,
fetched from the coordinator when this card was written. The node's verified rewards per round
(re-scored by the coordinator, never the worker's claim) are on the campaign's page and in its
metrics export.
"""


def hub_token() -> str:
    """The Hugging Face credentials a push would use; ExportError when there are none (checked
    before the export, so that a push that cannot happen is said at once)."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ExportError(
            "no Hugging Face credentials for --push-to-hub: run `huggingface-cli login` or set HF_TOKEN"
        )
    return token


def push_to_hub(out: Path, repo: str, token: str) -> str:
    """Upload the model directory ``out`` to the model repository ``repo`` (created if missing,
    private); returns its URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
    api.upload_folder(
        folder_path=str(out), repo_id=repo, repo_type="model", commit_message="swarm-worker export"
    )
    return str(url)
