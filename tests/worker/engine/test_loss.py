"""The engine's GRPO loss (worker.engine.loss) and its importance-sampling correction, against
hand computations."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from worker.engine.loss import grpo_loss, importance_weights
from worker.engine.trainer import GRPOLearner, TrainSample
from worker.shared.config import GRPOConfig


def test_loss_matches_hand_computation_with_clipped_tokens():
    # Three sequences, two positions. Ratios: seq 0 (A=+1) 1.5 (above 1+0.28: high-clipped) and
    # 1.0; seq 1 (A=-1) 0.5 (below 1-0.2: low-clipped) and 1.1; seq 2 (A=0) one real token.
    ratios = torch.tensor([[1.5, 1.0], [0.5, 1.1], [0.7, 1.0]])
    old_logp = torch.log(torch.tensor([[0.2, 0.3], [0.4, 0.5], [0.6, 0.7]]))
    logp = (old_logp + torch.log(ratios)).requires_grad_(True)
    advantages = torch.tensor([1.0, -1.0, 0.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    out = grpo_loss(logp, old_logp, advantages, mask, num_tokens=5, eps_low=0.2, eps_high=0.28)

    # per token: -min(r*A, clip(r)*A) = -1.28, -1.0, +0.8, +1.1, 0 -> sum -0.38 over N = 5 tokens
    assert out.loss.item() == pytest.approx(-0.38 / 5, abs=1e-6)
    assert out.high_clipped.item() == 1
    assert out.low_clipped.item() == 1
    out.loss.backward()
    # d loss / d logp = -r*A/N on unclipped tokens, 0 where the clip removed the gradient
    expected = torch.tensor([[0.0, -1.0 / 5], [0.0, 1.1 / 5], [0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=0)


def test_loss_with_unit_ratio_is_advantage_weighted_likelihood_and_kl_is_nonnegative():
    logp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_(True)
    out = grpo_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 2), num_tokens=2)
    assert out.loss.item() == pytest.approx(-2.0)  # -(1*2 + 1*2)/2
    ref = torch.log(torch.tensor([[0.4, 0.3]]))
    with_kl = grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2, beta=0.1, ref_logp=ref)
    delta = ref - logp.detach()
    kl = (torch.exp(delta) - delta - 1).sum()
    assert with_kl.kl_sum.item() == pytest.approx(kl.item(), abs=1e-6)
    assert with_kl.loss.item() == pytest.approx(0.1 * kl.item() / 2, abs=1e-6)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2, beta=0.1)


# --- sampler/learner mismatch: TRL's truncated importance sampling ---------------------------
def test_importance_weights_equal_an_independent_computation():
    old = [[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0]]
    sampler = [[-1.2, -0.5, -0.5], [-2.0, -3.0, -9.0]]
    mask = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]  # the last token of row 1 is padding
    args = (torch.tensor(old), torch.tensor(sampler), torch.tensor(mask))
    for mode, cap in (
        ("token_truncate", 3.0),
        ("token_mask", 3.0),
        ("sequence_truncate", 2.0),
        ("sequence_mask", 2.0),
    ):
        got = importance_weights(*args, mode=mode, cap=cap)
        expected = []
        for o_row, s_row, m_row in zip(old, sampler, mask, strict=True):
            diffs = [(o - s) * m for o, s, m in zip(o_row, s_row, m_row, strict=True)]
            ratios = [math.exp(d) for d in diffs] if mode.startswith("token") else [math.exp(sum(diffs))]
            if mode.endswith("truncate"):
                expected.append([min(r, cap) for r in ratios])
            else:
                expected.append([r if r <= cap else 0.0 for r in ratios])
        torch.testing.assert_close(got, torch.tensor(expected), atol=1e-6, rtol=1e-6, msg=mode)
    # token_truncate, row 0: exp(0.2), exp(-1.5), exp(0) (none capped); row 1: exp(1.7) = 5.47 -> 3
    assert importance_weights(*args)[1, 0].item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="mode"):
        importance_weights(*args, mode="token")


def test_learner_weights_sampler_tokens_and_reports_trl_metrics():
    """A step on samples carrying sampler log-probs: with mu = 1 the loss is
    -sum_it w_it A_i / N with w_it = min(exp(logp_it - sampler_logp_it), 3) (the ratio itself is
    1), and the sampling/* metrics are the w's and |logp - sampler_logp|'s statistics; a sample
    without sampler log-probs weighs 1 and stays out of the metrics."""
    config = Qwen2Config(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    prompts = [[3, 4, 5, 6], [7, 8, 9]]
    completions = [[10, 11, 12], [13, 14]]
    with torch.no_grad():  # the learner's own log-probs, computed independently (full logits)
        learner_logp = []
        for p, c in zip(prompts, completions, strict=True):
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
            learner_logp.append(
                torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None])[:, 0].tolist()
            )
    offsets = [[0.3, -1.5, 0.0], [2.0, -0.2]]  # sampler = learner - offset: ratio exp(offset)
    sampler = [
        [lp - off for lp, off in zip(row, offs, strict=True)]
        for row, offs in zip(learner_logp, offsets, strict=True)
    ]
    samples = [
        TrainSample(prompts[0], completions[0], 1.0, sampler_logp=sampler[0]),
        TrainSample(prompts[1], completions[1], -0.5, sampler_logp=sampler[1]),
        TrainSample([3, 4, 9], [15, 16], 2.0),  # external: no sampler log-probs
    ]
    weights = [[min(math.exp(o), 3.0) for o in row] for row in offsets]
    expected_loss = -(sum(weights[0]) * 1.0 + sum(weights[1]) * -0.5 + 2 * 2.0) / 7
    metrics = GRPOLearner(model, GRPOConfig(learning_rate=0.0), pad_token_id=0).step(samples)
    flat = [w for row in weights for w in row]
    diffs = [abs(o) for row in offsets for o in row]
    assert metrics["loss"] == pytest.approx(expected_loss, abs=1e-5)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(min(flat), abs=1e-5)
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(flat) / 5, abs=1e-5)
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx(3.0, abs=1e-6)
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(sum(diffs) / 5, abs=1e-5)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(2.0, abs=1e-5)

    off = GRPOLearner(model, GRPOConfig(learning_rate=0.0, vllm_importance_sampling_correction=False), 0)
    uncorrected = off.step(samples)
    assert uncorrected["loss"] == pytest.approx(-(3 * 1.0 + 2 * -0.5 + 2 * 2.0) / 7, abs=1e-5)
    assert not any(key.startswith("sampling/") for key in uncorrected)


def test_external_correction_equals_an_independent_computation():
    """Issue #18's opt-in off-policy correction: an external sample with its generator's
    log-probs b_it weighs each token by w_it = min(exp(logp_it - b_it), 3) (mu = 1, so the PPO
    ratio is 1 and loss = -sum_it w_it A_i / N); samples without b keep weight 1; the
    sampling/external_* metrics are the w's, |logp - b| and the share of capped ratios. Off by
    default: then every weight is 1 and no sampling/external_* metric appears."""
    config = Qwen2Config(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(1)
    model = Qwen2ForCausalLM(config)
    prompts = [[3, 4, 5], [6, 7, 8, 9]]
    completions = [[10, 11], [12, 13, 14]]
    learner_logp = []
    with torch.no_grad():  # independently: full logits, log-softmax, gather
        for p, c in zip(prompts, completions, strict=True):
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
            learner_logp.append(
                torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None])[:, 0].tolist()
            )
    # generator = learner - offset, so the ratio pi_learner / pi_generator is exp(offset)
    offsets = [[1.5, -0.7], [0.2, -2.0, 0.0]]
    behaviour = [
        [lp - o for lp, o in zip(r, off, strict=True)] for r, off in zip(learner_logp, offsets, strict=True)
    ]
    samples = [
        TrainSample(prompts[0], completions[0], 0.5, external=True, behaviour_logp=behaviour[0]),
        TrainSample(prompts[1], completions[1], -1.0, external=True, behaviour_logp=behaviour[1]),
        TrainSample([3, 9], [15, 16], 2.0),  # own sample: weight 1
    ]
    weights = [[min(math.exp(o), 3.0) for o in row] for row in offsets]
    expected_loss = -(sum(weights[0]) * 0.5 + sum(weights[1]) * -1.0 + 2 * 2.0) / 7
    on = GRPOConfig(learning_rate=0.0, external_importance_sampling_correction=True)
    metrics = GRPOLearner(model, on, pad_token_id=0).step(samples)
    flat = [w for row in weights for w in row]
    assert metrics["loss"] == pytest.approx(expected_loss, abs=1e-5)
    assert metrics["sampling/external_importance_sampling_ratio/mean"] == pytest.approx(
        sum(flat) / 5, abs=1e-5
    )
    assert metrics["sampling/external_importance_sampling_ratio/min"] == pytest.approx(
        math.exp(-2.0), abs=1e-5
    )
    assert metrics["sampling/external_importance_sampling_ratio/max"] == pytest.approx(3.0, abs=1e-6)
    assert metrics["sampling/external_importance_sampling_truncated"] == pytest.approx(1 / 5)  # exp(1.5) > 3
    assert metrics["sampling/external_logp_difference/mean"] == pytest.approx(4.4 / 5, abs=1e-5)
    assert metrics["sampling/external_logp_difference/max"] == pytest.approx(2.0, abs=1e-5)
    assert "sampling/importance_sampling_ratio/mean" not in metrics  # the vLLM correction's, untouched

    off = GRPOLearner(model, GRPOConfig(learning_rate=0.0), pad_token_id=0).step(samples)
    assert off["loss"] == pytest.approx(-(2 * 0.5 + 3 * -1.0 + 2 * 2.0) / 7, abs=1e-5)
    assert not any(key.startswith("sampling/external") for key in off)


def test_grad_norm_is_before_clipping_and_clipping_is_counted():
    config = Qwen2Config(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(2)
    model = Qwen2ForCausalLM(config)
    samples = [TrainSample([3, 4, 5], [10, 11, 12], 5.0), TrainSample([6, 7], [13, 14], -5.0)]
    big = GRPOLearner(model, GRPOConfig(learning_rate=0.0, max_grad_norm=1e-6), pad_token_id=0).step(samples)
    free = GRPOLearner(model, GRPOConfig(learning_rate=0.0, max_grad_norm=1e6), pad_token_id=0).step(samples)
    assert big["grad_norm"] == pytest.approx(free["grad_norm"], rel=1e-5) and big["grad_norm"] > 1e-3
    assert big["grad_norm_clipped"] == 1.0 and free["grad_norm_clipped"] == 0.0
