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
