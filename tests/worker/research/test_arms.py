"""The controls of issue #18 on the real tiny-1m model: 4/4-self trains only on its own window,
8/0-dyn over-generates to the informative count and records it, every arm sees the same round-1
questions (pairing), the new metrics reach the agent's metrics, and the external rollouts'
generator log-probs are the generator's own."""

from __future__ import annotations

import json

import torch

from worker.research.simulate import SimulationConfig, Swarm
from worker.shared.arms import (
    CONTROL_KINDS,
    Arm,
    control_arm,
    controls_for,
    sapo_table_arms,
    sharing_arm,
)
from worker.shared.config import AgentConfig, GRPOConfig
from worker.shared.questions import preset
from worker.shared.rollout import Rollout
from worker.shared.tiers import tier

# Keys that train_phase adds for issue #18 (the platform stores this dict as the round's metrics).
NEW_METRICS = {
    "batch/informative_groups",
    "batch/local_informative",
    "batch/external_informative",
    "batch/external_from_others",
    "batch/local_reward_mean",
    "batch/local_reward_std",
    "advantages/local_abs_mean",
    "grad_norm",
    "grad_norm_clipped",
    "generation/questions",
    "generation/completions",
    "generation/calls",
    "generation/reward",
}


def config(
    agents: int = 3, rounds: int = 3, group_size: int = 8, window: int = 256, **grpo
) -> SimulationConfig:
    return SimulationConfig(
        agents=agents,
        rounds=rounds,
        tier="tiny-1m",
        seed=3,
        mix=preset("cpu"),
        agent=AgentConfig(
            group_size=group_size,
            max_new_tokens=8,
            grpo=GRPOConfig(learning_rate=tier("tiny-1m").learning_rate, **grpo),
        ),
        pool_window=window,
    )


def swarm(cfg: SimulationConfig, arm: Arm, cache) -> Swarm:
    torch.manual_seed(cfg.seed)
    return Swarm(cfg, arm, cache, log=lambda message: None)


def test_arm_definitions_and_controls():
    arms = {arm.name: arm for arm in sapo_table_arms(8, self_window=32)}
    assert list(arms) == ["8/0", "6/2", "4/4", "2/6", "8/0-filtered", "4/4-unfiltered", "4/4-self", "8/0-dyn"]
    assert arms["4/4-self"].replay == "self" and arms["4/4-self"].self_window == 32
    assert not arms["4/4-self"].shares and arms["4/4"].shares  # no pool for the self-replay arm
    assert arms["8/0-dyn"].max_questions == 16 and arms["8/0-dyn"].num_local == 8
    assert {a.kind for a in arms.values()} == {"sharing", *CONTROL_KINDS}
    four = sharing_arm(4, 4)
    assert [c.name for c in controls_for(four)] == ["8/0", "8/0-filtered"]
    assert [c.name for c in controls_for(four, CONTROL_KINDS, self_window=16)] == [
        "8/0",
        "8/0-filtered",
        "4/4-self",
        "8/0-dyn",
    ]
    # an arm's overrides build the AgentConfig that runs it
    built = AgentConfig(**{**AgentConfig().to_json(), **control_arm("self", four, 16).agent_overrides()})
    assert (built.num_local, built.num_external, built.replay, built.self_window) == (4, 4, "self", 16)
    built = AgentConfig(**{**AgentConfig().to_json(), **control_arm("dyn", four).agent_overrides()})
    assert (built.num_local, built.num_external, built.max_questions) == (8, 0, 16)


def test_self_replay_trains_only_on_its_own_window(tiny_1m_dir):
    """4/4-self with a window of 16 groups (2 rounds of B = 8): every group it trains on is its
    own, the J side comes from its last 16 groups (this round's or the previous one's), never
    repeats a local pick, and some of it is replayed from an earlier round."""
    cfg = config(agents=3, rounds=4)
    arm = control_arm("self", sharing_arm(4, 4), self_window=16)
    s = swarm(cfg, arm, tiny_1m_dir.parent)
    replayed_older = 0
    for r in range(cfg.rounds):
        metrics = s.run_round()
        for agent, m in zip(s.agents, metrics, strict=True):
            assert all(owner == agent.agent_id for _, owner, _, _ in agent.last_batch)
            local = {rid for rid, _, _, source in agent.last_batch if source == "local"}
            replay = [(rid, rnd) for rid, _, rnd, source in agent.last_batch if source == "self"]
            assert not local & {rid for rid, _ in replay}  # never a local pick twice
            assert all(r - 1 <= rnd <= r for _, rnd in replay), replay  # within the 16-group window
            assert len(agent.window) <= 16
            replayed_older += sum(rnd < r for _, rnd in replay)
            assert m["batch/external_from_others"] == 0 and m["batch/external_used"] == len(replay)
            assert NEW_METRICS <= set(m), NEW_METRICS - set(m)
            assert ("batch/external_age" in m) == bool(replay)
    assert replayed_older > 0


def test_over_generation_trains_on_the_informative_count_and_records_its_cost(tiny_1m_dir):
    """8/0-dyn: 8 informative groups whenever its cap allows (as many as 4/4 trains on when the
    pool has them), its generation count recorded; 8/0 trains on whatever its 8 held."""
    cfg = config(agents=3, rounds=2)
    arms = {a.name: a for a in sapo_table_arms(8)}
    dyn = swarm(cfg, arms["8/0-dyn"], tiny_1m_dir.parent)
    plain = swarm(cfg, arms["8/0"], tiny_1m_dir.parent)
    sharing = swarm(cfg, arms["4/4"], tiny_1m_dir.parent)
    informative = {"8/0-dyn": [], "8/0": [], "4/4": []}
    for _ in range(cfg.rounds):
        for name, s in (("8/0-dyn", dyn), ("8/0", plain), ("4/4", sharing)):
            for m in s.run_round():
                assert NEW_METRICS <= set(m), NEW_METRICS - set(m)
                informative[name].append(m["batch/informative_groups"])
                if name == "8/0-dyn":
                    assert 8 <= m["generation/questions"] <= 16
                    assert m["generation/completions"] == 8 * m["generation/questions"]
                    if m["generation/questions"] < 16:  # stopped early: it had the 8 it wanted
                        assert m["batch/informative_groups"] == 8
                    assert m["generation/calls"] >= 1 + (m["generation/questions"] > 8)
                else:
                    assert m["generation/questions"] == 8 and m["generation/calls"] == 1
    assert sum(informative["8/0-dyn"]) > sum(informative["8/0"])
    assert max(informative["4/4"]) == 8  # what 4/4 trains on when its pool has them


def test_round_one_is_identical_across_arms(tiny_1m_dir):
    """Pairing: in round 1 every arm's agents lease the same B questions and sample the same
    completions (8/0-dyn's extra questions come after them, from a stream of their own)."""
    cfg = config(agents=2, rounds=1, group_size=4)
    seen = {}
    for arm in sapo_table_arms(8):
        s = swarm(cfg, arm, tiny_1m_dir.parent)
        firsts = []
        for agent in s.agents:
            agent.generate_phase()
            base = agent._local[:8]
            firsts.append([(g.rollout.question, tuple(g.rollout.completions)) for g in base])
        seen[arm.name] = firsts
        metrics = [agent.train_phase() for agent in s.agents]
        assert all(m["round"] == 0 for m in metrics)
    reference = seen["8/0"]
    assert len(reference[0]) == 8 and reference[0] != reference[1]  # agents differ, arms do not
    for name, firsts in seen.items():
        assert firsts == reference, name


def test_external_rollouts_carry_their_generators_log_probs(tiny_1m_dir):
    """With the opt-in correction, a generator puts its completions' token ids and per-token
    log-probs under its policy as it sampled in the rollout record (checked against a direct forward of its model), and a
    receiver's step reports the external importance-sampling statistics."""
    cfg = config(agents=2, rounds=1, group_size=4, external_importance_sampling_correction=True)
    s = swarm(cfg, sharing_arm(4, 4), tiny_1m_dir.parent)
    for agent in s.agents:
        agent.generate_phase()
    generator = s.agents[0]
    group = generator._local[0]
    behaviour = group.rollout.behaviour
    shared = next(r for r in s.pools[""].rollouts if r.rollout_id == group.rollout.rollout_id)
    assert shared.behaviour is behaviour and shared.schema_version == 2  # in the record itself
    wire = json.loads(json.dumps(shared.to_json()))
    travelled = Rollout.from_json(wire)
    assert travelled.to_json() == wire and travelled.schema_version == 2
    assert travelled.behaviour == behaviour  # it travels
    for ids, logp in zip(behaviour.completion_ids, behaviour.logp, strict=True):
        with torch.no_grad():
            logits = generator.model(input_ids=torch.tensor([group.prompt_ids + ids])).logits[0]
        direct = torch.log_softmax(logits[len(group.prompt_ids) - 1 : -1].float(), -1)
        expected = direct.gather(-1, torch.tensor(ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logp), expected, atol=1e-4, rtol=1e-4)
    metrics = [agent.train_phase() for agent in s.agents]
    assert any(m["batch/external_used"] > 0 for m in metrics)
    for m in metrics:
        if m["batch/external_used"] > 0 and m.get("trained"):
            assert 0 < m["sampling/external_importance_sampling_ratio/mean"]
            assert m["sampling/external_importance_sampling_ratio/max"] <= 3.0 + 1e-6
            assert 0 <= m["sampling/external_importance_sampling_truncated"] <= 1


def test_a_resumed_self_replay_agent_keeps_its_window(tiny_1m_dir, tmp_path):
    cfg = config(agents=2, rounds=2, group_size=4)
    arm = control_arm("self", sharing_arm(4, 4), self_window=12)
    first = swarm(cfg, arm, tiny_1m_dir.parent)
    first.run_round()
    first.run_round()
    first.save(tmp_path)
    second = swarm(cfg, arm, tiny_1m_dir.parent)
    assert second.load(tmp_path)
    for a, b in zip(first.agents, second.agents, strict=True):
        assert len(a.window) == 12 and [r.to_json() for r in a.window] == [r.to_json() for r in b.window]
    after = first.run_round(), second.run_round()
    for a, b, ma, mb in zip(first.agents, second.agents, *after, strict=True):
        assert [row[1:] for row in a.last_batch] == [row[1:] for row in b.last_batch]
        assert ma["reward"] == mb["reward"] and ma["batch/external_age"] == mb["batch/external_age"]


def test_the_batches_of_issue_29s_arms_differ_as_designed(tiny_1m_dir):
    """On tiny-1m with the real verifiers: 4/4@B4 generates 4 and trains on its informative ones
    plus 4 external; backfill trains on every informative own group of its 8 and asks the pool
    for exactly 8 minus those; 4/4-decay (T = 2) asks for J = 4, 2, 0 and gives the slots to own
    groups; every round reports what it generated and trained on (compute)."""
    from swarm_lab.study import resolve_arm

    cfg = config(agents=3, rounds=3)
    seen: dict[str, list[tuple[float, float, float]]] = {}
    for name in ("4/4@B4", "backfill", "4/4-decay"):
        s = swarm(cfg, resolve_arm(name, decay_rounds=2), tiny_1m_dir.parent)
        seen[name] = []
        for r in range(cfg.rounds):
            for agent, m in zip(s.agents, s.run_round(), strict=True):
                own = [row for row in agent.last_batch if row[3] == "local"]
                external = [row for row in agent.last_batch if row[3] == "pool"]
                assert (len(own), len(external)) == (m["batch/local_used"], m["batch/external_used"])
                assert all(owner != agent.agent_id for _, owner, _, _ in external)
                assert m["batch/external_informative"] == len(external)  # filtered: informative only
                generated = m["generation/questions"]
                informative = generated - m["filtered/local"]  # own groups the filter accepts
                if name == "4/4@B4":
                    assert generated == 4 and m["batch/local_used"] == informative <= 4
                    assert m["batch/external_requested"] == 4
                elif name == "backfill":
                    assert generated == 8 and m["batch/local_used"] == informative
                    assert m["batch/external_requested"] == 8 - informative
                    assert m["batch/local_used"] + m["batch/external_used"] <= 8
                else:
                    want = {0: 4, 1: 2, 2: 0}[r]
                    assert generated == 8 and m["batch/external_requested"] == want
                    assert m["batch/local_requested"] == 8 - want
                    assert m["batch/local_used"] == min(8 - want, informative)
                # compute: what the round generated and trained on
                assert m["generation/completions"] == generated * 8
                assert m["generation/tokens"] == m["generated_tokens"] > 0
                trained = m["batch/local_used"] + m["batch/external_used"]
                assert m["train/completions"] == trained * 8
                assert (m["train/tokens"] > 0) == (trained > 0)
                seen[name].append((generated, m["batch/local_used"], m["batch/external_used"]))
    # backfill's J varied with its informative own groups; the batches of the arms differ
    assert len({e for _, _, e in seen["backfill"]}) > 1
    assert {g for g, _, _ in seen["4/4@B4"]} == {4.0} and {g for g, _, _ in seen["backfill"]} == {8.0}
    assert [e for _, _, e in seen["4/4-decay"][6:]] == [0.0, 0.0, 0.0]


def test_num_tokens_adds_up_the_rounds_trained_tokens(tiny_1m_dir):
    cfg = config(agents=2, rounds=2, group_size=4)
    s = swarm(cfg, sharing_arm(4, 4), tiny_1m_dir.parent)
    totals = [0.0, 0.0]
    for _ in range(cfg.rounds):
        for i, m in enumerate(s.run_round()):
            totals[i] += m["train/tokens"]
            assert m["num_tokens"] == totals[i]


def test_an_arm_at_a_smaller_b_gets_a_prefix_of_every_rounds_questions(tiny_1m_dir):
    """Pairing round by round: in the simulator 4/4@B4's 4 questions of round r are the first 4
    of the 8 that 8/0 gets in round r (not round r // 2's last ones)."""
    from swarm_lab.study import resolve_arm

    cfg = config(agents=2, rounds=1, group_size=2)
    plain, half = (swarm(cfg, resolve_arm(name), tiny_1m_dir.parent) for name in ("8/0", "4/4@B4"))
    for a, b in zip(plain.agents, half.agents, strict=True):
        assert b.config.questions_per_round == 4
        for r in range(3):
            eight = [q.question for q in a.transport.lease(a.agent_id, r, 8).questions]
            four = [q.question for q in b.transport.lease(b.agent_id, r, 4).questions]
            assert four == eight[:4], r
