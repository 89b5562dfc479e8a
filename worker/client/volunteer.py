"""The volunteer's program (``swarm-worker join``): :func:`run_nodes` (:func:`run_worker` for one node).

Each node says hello, loads its assigned tier, resumes from the checkpoint in its data directory,
and runs rounds until the campaign ends, with a rich status line. One process can run several
nodes (``--nodes N``): the coordinator sees N ordinary nodes, which take turns on the device. Ctrl-C and SIGTERM stop it
cleanly: a lease being generated for is given back, a training step in progress is discarded.

Generation speed in the hello: the first hello a new node ever sends reports 0.0 tokens/s (the
model to measure is only known from the welcome). After loading, a short real generation is
measured; later hellos (reconnections, restarts, read from ``node-stats.json``) report it, and
after each round the speed actually observed.

Checkpoints go to ``<data_dir>/checkpoints/campaign-<id>/<node_id>.pt`` (atomic writes): every
round for models up to 100M parameters (the tiny tiers: milliseconds), else every
:func:`checkpoint_interval` rounds, and always on a clean exit when the weights are consistent
(never halfway through a training step). A checkpointed round is saved before its report is
sent, the report beside it (``<checkpoint>.report.json``, sent on resume if it was not): a node
restarted from its checkpoint repeats at most the round it was killed in.

A campaign's control node (the welcome's ``control``) trains its arm (``control_agent_config``)
with its seed's generation seeds (worker/shared/paired.py), and resumes from its checkpoint
only: one missing or behind the coordinator's record is an error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from worker import __version__
from worker.client.address import is_loopback, normalise_url
from worker.client.backends import build_backend, choose_backend, measure_generation_speed
from worker.client.connection import DEFAULT_REQUEST_TIMEOUT, FINISHED_STATES
from worker.client.errors import CampaignFinished, FatalError, LeaseLost, RoundSubmitted
from worker.client.identity import (
    checkpoint_path,
    load_identity,
    load_stats,
    lock_data_dir,
    save_stats,
)
from worker.client.status import StatusLine, StatusLines
from worker.client.transport import WebsocketTransport
from worker.shared import protocol
from worker.shared.evaluation import eval_index, score_answers
from worker.shared.files import write_json_atomic
from worker.shared.paired import control_seed_id
from worker.shared.tiers import model_cache_dir

if TYPE_CHECKING:
    from rich.console import Console

    from worker.engine.agent import Agent
    from worker.shared.hardware import Hardware

log = logging.getLogger(__name__)


def checkpoint_interval(params: int) -> int:
    """Rounds between checkpoints: 1 up to 100M parameters, then ~1 per 100M (0.5B: 5), at most 25.

    A tiny tier's checkpoint takes milliseconds; a big model's (weights plus Adam states) takes
    seconds and gigabytes, and a crash then costs at most K rounds, which the coordinator's
    ``resume_round`` lets the node skip rather than redo.
    """
    if params <= 100_000_000:
        return 1
    return max(1, min(25, round(params / 100_000_000)))


@dataclass
class WorkerResult:
    """How a :func:`run_worker` call ended (the CLI prints it)."""

    node_id: str
    campaign_id: Any = None
    tier: str = ""
    start_round: int = 0  # the round this run started at
    next_round: int = 0  # the round a later run would start at
    rounds_run: int = 0
    reason: str = ""  # completed, max_rounds, campaign_<state>, interrupted
    message: str = ""
    checkpoint: Path | None = None
    eval_seconds: float = 0.0  # spent on held-out evaluations in this run


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (systemd, docker stop) stops the worker like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def held_report_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + ".report.json")  # its last round's report


def hello_message(
    token: str, node_id: str, hardware: Hardware, preferred_tier: str | None, tokens_per_second: float
) -> protocol.Hello:
    """What this node says at every connection (validated as the coordinator will read it)."""
    return msgspec.convert(
        {
            "protocol_versions": list(protocol.SUPPORTED_VERSIONS),
            "token": token,
            "node_id": node_id,
            "client_version": __version__,
            "hardware": hardware.to_json(),
            "backends": list(hardware.backends)[:8],
            "generation_tokens_per_second": max(0.0, float(tokens_per_second)),
            **({"preferred_tier": preferred_tier} if preferred_tier else {}),
        },
        protocol.Hello,
    )


MAX_NODES = 64  # nodes one process runs (each holds a websocket, a model and its optimizer)


def node_data_dirs(data_dir: Path, nodes: int) -> list[Path]:
    """Each node's own data directory (identity, checkpoints, stats, lock).

    Node 0 keeps the data directory itself, so ``--nodes 1`` is the single-node layout and
    adding nodes later keeps the first node's identity and progress; node k >= 1 lives in
    ``<data_dir>/nodes/node-<k>``. The model cache stays the data directory's (one copy).
    """
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be 1..{MAX_NODES}, got {nodes}")
    return [data_dir] + [data_dir / "nodes" / f"node-{index}" for index in range(1, nodes)]


def run_worker(url: str, token: str, data_dir: Path | str, **options: Any) -> WorkerResult:
    """One node: :func:`run_nodes` with ``nodes=1``; returns its result."""
    return run_nodes(url, token, data_dir, nodes=1, **options)[0]


def run_nodes(
    url: str,
    token: str,
    data_dir: Path | str,
    backend: str = "auto",
    max_rounds: int | None = None,
    preferred_tier: str | None = None,
    status: bool = True,
    *,
    nodes: int = 1,
    torch_threads: int | None = None,
    node_id: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    console: Console | None = None,
) -> list[WorkerResult]:
    """Join the coordinator at ``url`` as ``nodes`` nodes and train until the campaign ends (or
    ``max_rounds`` rounds of this run per node). Returns how each node ended; Ctrl-C and SIGTERM
    end them cleanly (reason ``interrupted``).

    Each node is an ordinary node to the coordinator: its own identity and data directory
    (:func:`node_data_dirs`), websocket, lease, policy, optimizer and checkpoint. They share the
    process's device by taking turns, one round each in order, so one process's nodes never
    compete for its cores; while one trains, the others' connections keep heartbeating.

    Raises :class:`FatalError` when the coordinator refuses every node (a node refused while
    others go on ends with reason ``fatal``), and :class:`~worker.client.identity.IdentityError`
    when a data directory is unusable or in use. ``torch_threads`` (else
    ``$SWARM_TORCH_THREADS``) sets torch's intra-op threads. ``node_id``: the first node's id
    when its data directory has none yet (a campaign's control node).
    """
    url = normalise_url(url)
    if not token:
        raise ValueError("a worker token is required (--token or $SWARM_TOKEN)")
    if max_rounds is not None and max_rounds < 0:
        raise ValueError("max_rounds must be >= 0")
    data_dir = Path(data_dir).expanduser()
    dirs = node_data_dirs(data_dir, nodes)
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
    threads = torch_threads or int(os.environ.get("SWARM_TORCH_THREADS") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    if not is_loopback(url) and url.startswith("ws://"):
        log.warning("%s is not encrypted: the token travels in clear text; prefer wss://", url)
    identities = [load_identity(path, node_id if index == 0 else None) for index, path in enumerate(dirs)]
    cache = model_cache_dir(data_dir)
    with contextlib.ExitStack() as stack:
        for path in dirs:
            stack.enter_context(lock_data_dir(path))
        stack.enter_context(_sigterm_as_interrupt())
        runs = [
            _NodeRun(url, token, path, identity.node_id, cache, max_rounds, preferred_tier, request_timeout)
            for path, identity in zip(dirs, identities, strict=True)
        ]
        _take_turns(runs, backend, data_dir, status, console)
    refused = [run.fatal for run in runs if run.fatal is not None]
    if len(refused) == len(runs):
        raise refused[0]
    return [run.result for run in runs]


def _take_turns(
    runs: list[_NodeRun], backend: str, data_dir: Path, status: bool, console: Console | None
) -> None:
    """Start every node, then run one round of each active node in turn until none is left."""
    from rich.console import Console
    from rich.live import Live

    from worker.engine.hardware import detect

    hardware = detect(data_dir).share(len(runs))  # each node says hello with its share
    backend_name, reason = choose_backend(backend, hardware)
    log.info("backend: %s (%s)", backend_name, reason)
    console = console or Console(stderr=True)
    live: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if status and console.is_terminal:
        live = Live(StatusLines(runs), console=console, refresh_per_second=2, transient=True)
    current: _NodeRun | None = None
    try:
        with live:
            active = []
            for run in runs:
                current = run
                label = f"node {run.node_id[:8]}: " if len(runs) > 1 else ""
                if run.guarded(run.start, hardware, backend_name, label):
                    active.append(run)
            while active:
                for run in list(active):
                    current = run
                    if not run.guarded(run.step):
                        active.remove(run)
            current = None
    except KeyboardInterrupt:
        for run in runs:
            run.interrupted(busy=run is current)
    finally:
        for run in runs:
            run.finish()


class _NodeRun:
    """One node of a :func:`run_nodes` call: its state, its round step and the cleanup that
    depends on where it stopped."""

    def __init__(
        self,
        url: str,
        token: str,
        data_dir: Path,
        node_id: str,
        cache: Path,
        max_rounds: int | None,
        preferred_tier: str | None,
        request_timeout: float,
    ) -> None:
        self.url = url
        self.token = token
        self.data_dir = data_dir
        self.node_id = node_id
        self.cache = cache
        self.max_rounds = max_rounds
        self.preferred_tier = preferred_tier
        self.request_timeout = request_timeout
        self.result = WorkerResult(node_id)
        self.fatal: FatalError | None = None
        self.transport: WebsocketTransport | None = None
        self.line: StatusLine | None = None
        self.agent: Agent | None = None
        self.rounds = 0  # the campaign's rounds per node
        self.eval_every = 0  # the campaign's evaluation cadence (worker/shared/evaluation.py)
        self.phase = "starting"  # starting, generate, train, evaluate, idle
        self.saved_round = -1
        self.every = 1
        self.lost_in_a_row = 0

    def guarded(self, step: Callable[..., None], *args: Any) -> bool:
        """Run ``step``; False once this node is done (its campaign finished, or it was refused)."""
        try:
            step(*args)
        except CampaignFinished as finished:
            assert self.transport is not None
            state = self.transport.campaign_state
            if state in FINISHED_STATES:
                self.result.reason = f"campaign_{state}"
            else:  # past the campaign's rounds, or refused at hello
                self.result.reason = "completed" if self.agent is not None else "campaign_not_running"
            self.result.message = str(finished)
            return False
        except FatalError as error:
            log.error("node %s: cannot continue: %s", self.node_id, error)
            self.fatal = error
            self.result.reason, self.result.message = "fatal", str(error)
            return False
        return not self.result.reason

    def start(self, hardware: Hardware, backend_name: str, label: str = "") -> None:
        speed = load_stats(self.data_dir).get("generation_tokens_per_second", 0.0)
        speed = float(speed) if isinstance(speed, int | float) and math.isfinite(speed) else 0.0
        hello = hello_message(self.token, self.node_id, hardware, self.preferred_tier, speed)
        self.transport = WebsocketTransport(self.url, hello, request_timeout=self.request_timeout)
        self.line = StatusLine(self.transport, label)
        log.info("node %s: connecting to %s", self.node_id, self.url)
        welcome = self.transport.start()
        self._load(self.transport, welcome, hardware, backend_name, self.line)

    def interrupted(self, busy: bool) -> None:
        """Ctrl-C or SIGTERM: a lease being generated for is given back (only the node whose
        turn it was can hold one); a training step in progress is discarded."""
        if self.result.reason:
            return
        self.result.reason = "interrupted"
        self.result.message = "interrupted"
        transport = self.transport
        if not busy or transport is None:
            return
        if self.phase == "generate" and transport.active_lease is not None:
            lease = transport.active_lease
            if transport.release_active():
                self.result.message = f"interrupted; released the lease of round {lease.round}"
        elif self.phase == "train":
            self.result.message = (
                "interrupted during a training step; its weights are discarded, the next run resumes "
                f"from the checkpoint of round {max(self.saved_round, 0)}"
            )

    def finish(self) -> None:
        """Checkpoint unless the weights are halfway through a training step; close."""
        agent = self.agent
        try:
            if agent is not None and self.phase != "train" and agent.round > self.saved_round:
                self._save()
        finally:
            if self.transport is not None:
                self.transport.close()
        if agent is not None:
            self.result.next_round = agent.round
        log.info("node %s stopped: %s", self.node_id, self.result.message or self.result.reason)

    def _save(self) -> None:
        """The checkpoint, and beside it the report the transport holds for its round (written
        first: a checkpoint is never without the report of its last round)."""
        assert self.agent is not None and self.result.checkpoint is not None
        held = self.transport.held_report if self.transport is not None else None
        if held is not None:
            self.result.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(
                held_report_path(self.result.checkpoint),
                {"round": held[0], "metrics": held[1]},
                exclusive=False,
            )
        self.agent.save(self.result.checkpoint)
        self.saved_round = self.agent.round

    def _load(
        self,
        transport: WebsocketTransport,
        welcome: protocol.Welcome,
        hardware: Hardware,
        backend_name: str,
        line: StatusLine,
    ) -> None:
        from worker.engine.agent import Agent
        from worker.engine.policy import load_policy, resolve
        from worker.shared.config import stable_seed

        # The welcome was decoded against the declarations (worker/shared/protocol.py): a campaign
        # whose settings this worker cannot read stopped it at the handshake, asking to upgrade.
        campaign, config, spec = welcome.campaign, welcome.campaign.config, welcome.model
        tier_name = welcome.tier
        self.result.campaign_id = campaign.id
        self.result.tier = tier_name
        log.info(
            "node %s joined campaign %r (%s) as tier %s: %s",
            self.node_id,
            campaign.name,
            campaign.state,
            tier_name,
            welcome.reason,
        )
        line.tier, line.rounds, line.phase = tier_name, config.rounds, "loading model"
        device = "cuda" if hardware.device == "cuda" else "cpu"
        model_dir = resolve(spec, self.cache, log=lambda m: log.info("%s", m))  # builds a tiny tier once
        model, tokenizer = load_policy(spec, self.cache, device, log=lambda m: log.info("%s", m))
        control = welcome.control
        if control is msgspec.UNSET:
            seed_id = self.node_id
            agent_config = config.agent_config(tier_name, stable_seed(config.seed, self.node_id))
        else:
            seed_id = control_seed_id(tier_name, control.seed)
            agent_config = config.control_agent_config(tier_name, control.seed, control.arm)
            log.info(
                "node %s is the %s control of %s, seed %d", self.node_id, control.arm, tier_name, control.seed
            )
        seed = stable_seed(config.seed, seed_id)
        generation = build_backend(backend_name, model, tokenizer, model_dir, spec, hardware, seed)
        speed = measure_generation_speed(generation, tokenizer, config.system_prompt)
        log.info("generation speed: %.0f tokens/s", speed)
        transport.update_hello(generation_tokens_per_second=speed)
        save_stats(  # the coordinator too: `swarm-worker export` asks it for the held-out accuracy
            self.data_dir,
            generation_tokens_per_second=speed,
            tier=tier_name,
            measured_at=time.time(),
            coordinator=self.url,
        )

        agent = Agent(
            self.node_id,
            tier_name,
            model,
            tokenizer,
            generation,
            transport,
            config.mix,
            agent_config,
            seed_id=seed_id,
        )
        self.every = checkpoint_interval(spec.params)
        self.result.checkpoint = checkpoint_path(self.data_dir, campaign.id, self.node_id)
        self._resume(agent, self.result.checkpoint, welcome.resume_round, control is not msgspec.UNSET)
        self.agent = agent
        self.saved_round = agent.round if self.result.checkpoint.exists() else -1
        self.result.start_round = agent.round
        self.rounds = config.rounds
        self.eval_every = config.eval_every
        self.phase = "idle"

    def _resume(self, agent: Agent, path: Path, resume_round: int, control: bool) -> None:
        checkpoint_round = 0
        if path.exists():
            try:
                agent.load(path)
            except Exception as error:  # another model's or a damaged file: keep it, start fresh
                aside = path.with_name(f"{path.name}.unusable-{int(time.time())}")
                path.rename(aside)
                log.warning("checkpoint %s is unusable (%s); moved to %s, starting fresh", path, error, aside)
            else:
                checkpoint_round = agent.round
                log.info("resumed from %s (round %d)", path, checkpoint_round)
        if control and resume_round > checkpoint_round:
            raise FatalError(
                "checkpoint_missing",
                f"this control's checkpoint {path} is of round {checkpoint_round}, the coordinator "
                f"expects round {resume_round}: a control resumes from its own weights only "
                "(SWARM_CONTROL_DATA_DIR must be shared by the machines that run controls)",
            )
        self._send_held_report(path, checkpoint_round, resume_round)
        if resume_round > checkpoint_round:
            log.info(
                "the coordinator expects round %d, the checkpoint is of round %d: continuing from "
                "round %d with the checkpoint's weights",
                resume_round,
                checkpoint_round,
                resume_round,
            )
        elif checkpoint_round > resume_round:
            log.info(
                "the checkpoint (round %d) is ahead of the coordinator's record (round %d; metrics "
                "were not recorded): continuing from round %d",
                checkpoint_round,
                resume_round,
                checkpoint_round,
            )
        agent.round = max(checkpoint_round, resume_round)

    def _send_held_report(self, path: Path, checkpoint_round: int, resume_round: int) -> None:
        """The report saved with the checkpoint (:meth:`_save`), sent if the coordinator lacks it."""
        try:
            held = json.loads(held_report_path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        assert self.transport is not None
        if held.get("round") == checkpoint_round - 1 and resume_round < checkpoint_round:
            log.info("sending the report of round %d, saved with the checkpoint", held["round"])
            self.transport.send_report(held["round"], held["metrics"])

    def step(self) -> None:
        """One round (lease, generate, submit, sample, train, report), or this node's end: sets
        ``result.reason`` when there is nothing left for it to do."""
        transport, agent, line = self.transport, self.agent, self.line
        assert transport is not None and agent is not None and line is not None
        line.round = agent.round
        if agent.round >= self.rounds:
            self.result.reason = "completed"
            self.result.message = f"this node finished the campaign's {self.rounds} rounds"
            return
        if self.max_rounds is not None and self.result.rounds_run >= self.max_rounds:
            self.result.reason = "max_rounds"
            self.result.message = f"ran {self.result.rounds_run} rounds (--max-rounds)"
            transport.release_active()  # the next round's lease, if the metrics' answer held one
            return
        if transport.campaign_state in FINISHED_STATES:
            self.result.reason = f"campaign_{transport.campaign_state}"
            self.result.message = f"the campaign is {transport.campaign_state}"
            return
        self.phase, line.phase = "generate", "generating"
        try:
            agent.generate_phase()
        except RoundSubmitted as done:
            # The pool holds this round's rollouts (the last process died after its
            # submit_ack): report the round, untrained, and go on; no second lease for it.
            log.warning("round %d: already submitted before a restart; going on to the next", done.round)
            transport.report(
                agent.agent_id, done.round, {"round": float(done.round), "resumed_submitted": 1.0}
            )
            agent.round = done.round + 1
            self.phase = "idle"
            return
        except LeaseLost as lost:
            self.lost_in_a_row += 1
            self.phase = "idle"
            if self.lost_in_a_row >= 5:
                raise FatalError(
                    "lease_expired",
                    f"{self.lost_in_a_row} leases in a row were lost before this worker could submit "
                    f"them ({lost}); this machine may be too slow for the campaign's lease time",
                ) from None
            log.warning("round %d: %s; generating the round again with a new lease", agent.round, lost)
            return
        self.lost_in_a_row = 0
        self.phase, line.phase = "train", "training"
        checkpointed = (agent.round + 1) % self.every == 0
        transport.hold_reports = checkpointed
        metrics = agent.train_phase()
        self.phase, line.phase = "idle", "idle"
        if checkpointed:  # the checkpoint first, with the report; then the report
            self._save()
            transport.send_held_report()
        self.result.rounds_run += 1
        line.update(metrics)
        line.round = agent.round
        log.info(
            "node %s round %d: reward %.3f, %.0f tokens/s, external %.0f%%, %.1f s",
            self.node_id[:8],
            agent.round - 1,
            metrics.get("reward", float("nan")),
            metrics.get("tokens_per_second", float("nan")),
            100 * metrics.get("external_fraction", 0.0),
            metrics.get("round_time", float("nan")),
        )
        self._evaluate_after(agent.round - 1)

    def _evaluate_after(self, round: int) -> None:
        """The held-out evaluation after ``round``, where the campaign's cadence has one: the
        coordinator's questions answered greedily with the policy just trained and checkpointed,
        then scored by the coordinator (its score is the one shown; ours is only a claim)."""
        if eval_index(self.eval_every, self.rounds, round) is None:
            return
        transport, agent, line = self.transport, self.agent, self.line
        assert transport is not None and agent is not None and line is not None
        eval_set = transport.eval_set(round)
        if eval_set is None:
            return
        self.phase, line.phase = "evaluate", "evaluating"
        started = time.perf_counter()
        completions = agent.answer_greedily([item.question for item in eval_set.questions])
        claimed = score_answers(agent.mix, [item.ref for item in eval_set.questions], completions)
        ack = transport.submit_eval(eval_set, completions, claimed.accuracy)
        seconds = time.perf_counter() - started
        self.phase, line.phase = "idle", "idle"
        self.result.eval_seconds += seconds
        if ack is not None:
            line.held_out = ack.accuracy
            log.info(
                "node %s evaluated after round %d: held-out accuracy %.3f (n = %d), %.1f s",
                self.node_id[:8],
                round,
                ack.accuracy,
                ack.n,
                seconds,
            )
