"""The engine with a real model (tiny-1m) and real verifiers: sampler/learner agreement,
re-tokenised external rollouts, zero-advantage groups, learning, and exact resume."""

from __future__ import annotations

import copy

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from worker.engine.agent import Agent
from worker.engine.generation.hf import TransformersBackend
from worker.engine.logprobs import completion_logprobs
from worker.engine.trainer import GRPOLearner, TrainSample, collate
from worker.engine.transport import LocalTransport, RolloutPool
from worker.shared.config import AgentConfig, GRPOConfig
from worker.shared.prompts import render_prompt
from worker.shared.questions import QuestionStream, preset

MIX = preset("cpu")


def make_agent(model, tokenizer, transport, agent_id="agent-0", **overrides) -> Agent:
    grpo = GRPOConfig(**{"learning_rate": 1e-4, **overrides.pop("grpo", {})})
    config = AgentConfig(
        **{
            "questions_per_round": 4,
            "group_size": 4,
            "num_local": 4,
            "num_external": 0,
            "local_strategy": "uniform",
            "max_new_tokens": 16,
            "grpo": grpo,
            **overrides,
        }
    )
    return Agent(
        agent_id, "tiny-1m", model, tokenizer, TransformersBackend(model, tokenizer), transport, MIX, config
    )


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_learner_scores_exactly_what_the_sampler_sampled(tiny_policy, temperature, share_prefix):
    """Left-padding, position ids and temperature agree between generate and the learner, with
    the prompts' shared prefix run once (the trainer's way) or in every row."""
    model, tokenizer = tiny_policy
    questions = QuestionStream(MIX, seed=1).take(3)  # different prompt lengths -> left padding
    prompts = [render_prompt(tokenizer, q.question) for q in questions]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=12,
        num_return_sequences=2,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        output_scores=True,
        return_dict_in_generate=True,
    )
    # The sampler's distribution at each step: scores are logits after temperature (no top-k).
    sampled = out.sequences[:, enc["input_ids"].shape[1] :]  # [6, T]
    scores = torch.stack(out.scores, dim=1)  # [6, T, V]
    sampler_logp = torch.log_softmax(scores, -1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)

    samples = []
    for row, ids in enumerate(sampled.tolist()):
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
        prompt_ids = tokenizer(prompts[row // 2], add_special_tokens=False)["input_ids"]
        samples.append(TrainSample(prompt_ids, ids, 0.0))
    batch = collate(
        samples, tokenizer.pad_token_id, torch.device("cpu"), mask_truncated=False, share_prefix=share_prefix
    )
    assert (batch.prefix_ids is not None) == share_prefix
    with torch.no_grad():
        learner_logp, _ = completion_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.num_completion_tokens,
            temperature,
            prefix_ids=batch.prefix_ids,
        )
    for row, sample in enumerate(samples):
        n = len(sample.completion_ids)
        torch.testing.assert_close(learner_logp[row, :n], sampler_logp[row, :n], atol=1e-4, rtol=1e-4)


def test_shared_prefix_gives_the_same_logprobs_and_gradients(tiny_policy):
    """Running the common prefix once and repeating its cache over the rows is an optimisation,
    not an approximation: log-probs, entropies and every parameter's gradient equal full rows."""
    model, tokenizer = tiny_policy
    questions = QuestionStream(MIX, seed=4).take(4)
    samples = []
    for i, q in enumerate(questions):
        prompt_ids = tokenizer(render_prompt(tokenizer, q.question), add_special_tokens=False)["input_ids"]
        completion = tokenizer(f"<answer>{q.answer}</answer>", add_special_tokens=False)["input_ids"]
        samples.append(TrainSample(prompt_ids, [*completion[: 3 + i], tokenizer.eos_token_id], 1.0 - i / 2))
    results = []
    for share in (False, True):
        batch = collate(samples, tokenizer.pad_token_id, torch.device("cpu"), False, share_prefix=share)
        model.zero_grad(set_to_none=True)
        logp, entropy = completion_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.num_completion_tokens,
            0.9,
            with_entropy=True,
            prefix_ids=batch.prefix_ids,
        )
        (logp * batch.completion_mask * batch.advantages[:, None]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((logp * batch.completion_mask, entropy * batch.completion_mask, grads, batch))
    (full_logp, full_entropy, full_grads, _), (logp, entropy, grads, shared) = results
    assert shared.prefix_ids.shape[1] >= 90  # the system turn and user header
    assert shared.input_ids.shape[1] < 40
    torch.testing.assert_close(logp, full_logp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, full_entropy, atol=2e-5, rtol=1e-5)
    for name, grad in full_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_zero_advantage_groups_add_no_gradient(tiny_policy):
    model, tokenizer = tiny_policy
    before = copy.deepcopy(model.state_dict())
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-2), tokenizer.pad_token_id)
    prompt = tokenizer(render_prompt(tokenizer, "1 + 1 ="), add_special_tokens=False)["input_ids"]
    samples = [TrainSample(prompt, tokenizer("<answer>2</answer>")["input_ids"], 0.0) for _ in range(4)]
    metrics = learner.step(samples)
    assert metrics["trained"] == 1.0
    assert metrics["grad_norm"] == 0.0
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name

    # ... while one informative sample in the same batch does move the weights.
    samples[0].advantage = 1.0
    learner.step(samples)
    assert any(not torch.equal(t, before[n]) for n, t in model.state_dict().items())


def build_other_tokenizer_and_model():
    """A different model family member: a character-level tokenizer and its own random Qwen2."""
    alphabet = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<eos>": 1, **{ch: i + 2 for i, ch in enumerate(alphabet)}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    raw.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>")
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config), tokenizer


def test_external_rollout_from_another_tokenizer_is_retokenised_and_trained_on(tiny_policy):
    pool = RolloutPool()
    other_model, other_tokenizer = build_other_tokenizer_and_model()
    other = make_agent(other_model, other_tokenizer, LocalTransport(MIX, seed=2, pool=pool), agent_id="other")
    other.generate_phase()  # shares 4 rollouts decoded with the character-level tokenizer
    shared = list(pool.rollouts)
    # Make sure one shared group carries signal, whatever the random model produced.
    shared[0].completions[0] = f"<answer>{shared[0].answer}</answer>"
    shared[0].rewards[0] = 1.0
    shared[0].truncated[0] = False

    model, tokenizer = tiny_policy
    agent = make_agent(
        model,
        tokenizer,
        LocalTransport(MIX, seed=3, pool=pool),
        num_local=2,
        num_external=4,
        external_strategy="uniform",
    )
    agent.generate_phase()
    batch_ids = []
    original = agent._train_samples

    def spy(rollout, local):
        samples = original(rollout, local)
        if local is None:
            batch_ids.append((rollout.rollout_id, samples))
        return samples

    agent._train_samples = spy
    before = copy.deepcopy(model.state_dict())
    metrics = agent.train_phase()
    assert metrics["batch/external_used"] == 4
    assert metrics["external_fraction"] == pytest.approx(4 / 6)
    assert metrics["trained"] == 1.0
    first = next(samples for rid, samples in batch_ids if rid == shared[0].rollout_id)
    expected = tokenizer(shared[0].completions[0], add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    assert first[0].completion_ids == expected  # our tokenizer's ids, not the sender's
    assert expected != other_tokenizer(shared[0].completions[0])["input_ids"]
    assert first[0].external
    assert any(not torch.equal(t, before[n]) for n, t in model.state_dict().items())


@pytest.mark.slow
def test_seeded_run_raises_reward(tiny_policy):
    """30 rounds of GRPO on tiny-1m at the tier's learning rate: the mean verified reward of the
    last 8 rounds beats the first 8 by a clear margin. (What is learnt first is which answer
    format pays, then sharper answers: docs/tiny-models.md; measured 0.20 -> 0.46 in 40 rounds.)"""
    from worker.shared.tiers import tier

    torch.manual_seed(0)
    model, tokenizer = tiny_policy
    agent = make_agent(
        model,
        tokenizer,
        LocalTransport(MIX, seed=7),
        questions_per_round=8,
        group_size=8,
        num_local=8,
        max_new_tokens=16,
        grpo={"learning_rate": tier("tiny-1m").learning_rate},
    )
    rewards = [agent.run_round()["reward"] for _ in range(30)]
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    print(f"reward first 8 rounds {first:.3f}, last 8 rounds {last:.3f}")
    assert last > first + 0.05


def test_resume_reproduces_the_next_round(tiny_policy, tiny_1m_dir, tmp_path):
    from worker.engine.policy import load_policy
    from worker.shared.tiers import tier

    def fresh_agent():
        model, tokenizer = load_policy(tier("tiny-1m"), tiny_1m_dir.parent)
        return make_agent(model, tokenizer, LocalTransport(MIX, seed=9), grpo={"num_iterations": 2})

    torch.manual_seed(0)
    uninterrupted = fresh_agent()
    for _ in range(2):
        uninterrupted.run_round()
    uninterrupted.save(tmp_path / "agent.pt")
    expected = uninterrupted.run_round()

    torch.manual_seed(123)  # a different process state: the checkpoint must restore what matters
    resumed = fresh_agent()
    resumed.load(tmp_path / "agent.pt")
    assert resumed.round == 2
    got = resumed.run_round()
    for key in ("reward", "loss", "entropy", "completions/mean_length", "grad_norm", "num_tokens"):
        assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    for name, tensor in resumed.model.state_dict().items():
        torch.testing.assert_close(tensor, uninterrupted.model.state_dict()[name])


def test_every_metric_the_engine_reports_has_a_name_the_protocol_accepts(tiny_policy):
    """The coordinator refuses a report with a name outside protocol.METRIC_NAME (issue #27), so
    a real round of each kind (own and external rollouts, the KL term, several iterations, the
    external correction) must report only such names."""
    from worker.shared.protocol import METRIC_NAME

    pool = RolloutPool()
    model, tokenizer = tiny_policy
    sharer = make_agent(model, tokenizer, LocalTransport(MIX, seed=4, pool=pool), agent_id="sharer")
    sharer.generate_phase()
    learner = make_agent(
        copy.deepcopy(model),
        tokenizer,
        LocalTransport(MIX, seed=5, pool=pool),
        num_local=2,
        num_external=2,
        external_strategy="uniform",
        grpo={"beta": 0.04, "num_iterations": 2, "external_importance_sampling_correction": True},
    )
    metrics = learner.run_round()
    assert {"kl", "clip_ratio/low_mean", "batch/external_used", "completions/mean_length"} <= set(metrics)
    assert [name for name in metrics if not METRIC_NAME.fullmatch(name)] == []
