"""``swarm-worker export`` (issue #30 item 4): a node's checkpoint, written as the worker writes it,
becomes a directory that ``from_pretrained`` loads with exactly the checkpoint's weights, and
that generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from worker.cli import main
from worker.client.export import ExportError, find_checkpoint
from worker.client.identity import checkpoint_path, load_identity, save_stats
from worker.engine.checkpoint import save_checkpoint
from worker.engine.policy import load_policy
from worker.shared.tiers import tier


def trained_node(data_dir: Path, cache: Path, campaign_id: int, round: int) -> dict[str, torch.Tensor]:
    """A node that trained ``round`` rounds: its identity, stats and checkpoint, as the worker
    writes them (the weights moved away from the base model's); returns the weights saved."""
    node_id = load_identity(data_dir).node_id
    save_stats(data_dir, tier="tiny-1m")
    model, _ = load_policy(tier("tiny-1m"), cache, log=lambda message: None)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    path = checkpoint_path(data_dir, campaign_id, node_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"round": round, "tokens_seen": 1234, "agent_id": node_id, "self_window": []}
    save_checkpoint(path, model, optimizer, state)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_a_nodes_checkpoint_exports_to_a_model_directory_that_loads_and_generates(
    tiny_1m_dir: Path, tmp_path: Path, capsys
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data_dir = tmp_path / "volunteer"
    saved = trained_node(data_dir, tiny_1m_dir.parent, campaign_id=7, round=12)
    out = tmp_path / "model"
    assert main(["export", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    assert "from_pretrained" in capsys.readouterr().out
    assert (out / "model.safetensors").exists() and (out / "config.json").exists()

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(out)
    exported = model.state_dict()
    for name, value in saved.items():
        assert torch.equal(exported[name], value), name  # the checkpoint's weights, exactly
    prompt = tokenizer("3 + 4 =", return_tensors="pt")
    generated = model.generate(
        **prompt, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    card = (out / "README.md").read_text()
    node_id = json.loads((data_dir / "node.json").read_text())["node_id"]
    assert "campaign 7" in card and node_id in card and "| rounds trained | 12 |" in card


def test_export_says_what_is_missing(tmp_path: Path, tiny_1m_dir: Path):
    with pytest.raises(ExportError, match="no worker has run"):
        find_checkpoint(tmp_path / "empty")
    data_dir = tmp_path / "volunteer"
    trained_node(data_dir, tiny_1m_dir.parent, campaign_id=3, round=1)
    with pytest.raises(ExportError, match="no checkpoint for campaign 9"):
        find_checkpoint(data_dir, campaign_id="9")
    assert find_checkpoint(data_dir).campaign_id == "3"
    assert main(["export", "--data-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "x")]) == 2


def test_a_push_without_credentials_is_refused_before_anything_is_written(
    tmp_path: Path, tiny_1m_dir: Path, monkeypatch, capsys
):
    """--push-to-hub checks for Hugging Face credentials first (no network is needed to say so;
    the upload itself cannot be tested offline: docs say how it runs)."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "token"))  # no login
    data_dir = tmp_path / "volunteer"
    trained_node(data_dir, tiny_1m_dir.parent, campaign_id=1, round=2)
    out = tmp_path / "model"
    code = main(
        ["export", "--data-dir", str(data_dir), "--out", str(out), "--push-to-hub", "someone/swarm-node"]
    )
    assert code == 2 and "huggingface-cli login" in capsys.readouterr().err
    assert not out.exists()


def test_the_model_card_gives_the_held_out_accuracy_the_coordinator_scored(
    coordinator: str, tiny_1m_dir: Path, tmp_path: Path, capsys
):
    """A node of a private campaign answers the evaluation after round 1 over the real protocol
    (2 of 6 right, claiming 6 of 6); its checkpoint of round 2 exports with the coordinator's
    score, round and n fetched with its worker token. Without the token, without an address, for
    a checkpoint the coordinator did not evaluate, or with the coordinator unreachable, the card
    says "not evaluated" and why, and the export still succeeds."""
    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.tokens import create_token
    from tests.coordinator.helpers import run
    from tests.coordinator.test_evaluations import answers_for, train_rounds
    from tests.wsclient import RawSession
    from worker.shared.campaign import CampaignConfig

    config = CampaignConfig(
        group_size=4,
        questions_per_round=2,
        num_local=2,
        num_external=2,
        rounds=4,
        eval_every=2,
        eval_questions=3,
    ).validate()
    campaign = Campaign.objects.create(
        name="card", state=Campaign.State.RUNNING, public=False, config=config.to_json()
    )
    secret = create_token(campaign, "t")[1]
    data_dir = tmp_path / "volunteer"
    trained_node(data_dir, tiny_1m_dir.parent, campaign_id=campaign.pk, round=2)
    node_id = load_identity(data_dir).node_id

    async def evaluate() -> dict:
        s = await RawSession.open(coordinator)
        assert (await s.hello(secret, node_id))["type"] == "welcome"
        await train_rounds(s, node_id, config.mix, range(0, 2))
        eval_set = await s.request("eval_request", round=1)
        ack = await s.request(
            "eval_submit",
            submission_id="e1",
            eval_id=eval_set["eval_id"],
            answers=answers_for(eval_set, config.mix, 2),
            claimed_accuracy=1.0,
        )
        await s.close()
        return ack

    assert run(evaluate())["accuracy"] == pytest.approx(2 / 6)

    def export(*extra: str) -> str:
        out = tmp_path / "model"
        assert main(["export", "--data-dir", str(data_dir), "--out", str(out), *extra]) == 0
        return (out / "README.md").read_text()

    card = export("--url", coordinator, "--token", secret)
    assert (
        f"| held-out accuracy | 0.333 (2 of 6 fresh questions exactly right, n = 6; after round 1, the "
        f"checkpoint's last, of campaign {campaign.pk}; scored by the coordinator) |" in card
    )
    assert "held-out accuracy: 0.333 (2 of 6" in capsys.readouterr().out
    # The coordinator joined last, recorded by the worker, is asked when no --url is given.
    assert (
        "| held-out accuracy | not evaluated: no coordinator address (give --url or $SWARM_URL) |" in export()
    )
    save_stats(data_dir, coordinator=coordinator.replace("http://", "ws://") + "/ws/worker/")
    assert "| held-out accuracy | 0.333 (2 of 6" in export("--token", secret)
    # A private campaign's node without its token: the coordinator shows nothing.
    assert f"| held-out accuracy | not evaluated: the coordinator at {coordinator} answered 404" in export()
    # Another token of the campaign is not this node's.
    other = create_token(campaign, "other")[1]
    refused = export("--token", other)
    assert "answered 403: this token has no such node in this campaign |" in refused
    # A checkpoint of a round the coordinator did not evaluate.
    trained_node(data_dir, tiny_1m_dir.parent, campaign_id=campaign.pk, round=3)
    assert (
        "| held-out accuracy | not evaluated: the coordinator has no held-out evaluation of this "
        "checkpoint (after round 2); its latest is after round 1 |" in export("--token", secret)
    )
    # The coordinator cannot be reached.
    unreachable = export("--url", "http://127.0.0.1:9", "--token", secret)
    assert (
        "| held-out accuracy | not evaluated: the coordinator at http://127.0.0.1:9 could not be reached ("
        in unreachable
    )


def test_a_reason_stays_in_its_table_cell():
    """The coordinator's own words may end up in the card's reason: one line, no cell's end."""
    from worker.client.export import held_out_text

    said = {"evaluated": False, "why": "the coordinator answered 500: broken\n| injected | row |"}
    assert (
        held_out_text(said, "3") == "not evaluated: the coordinator answered 500: broken / injected / row /"
    )
