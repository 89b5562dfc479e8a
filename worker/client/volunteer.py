"""The volunteer's program (``swarm-worker join``): :func:`run_worker`.

It says hello, loads the assigned tier, resumes from the checkpoint in the data directory, and
runs rounds until the campaign ends, with a rich status line. Ctrl-C and SIGTERM stop it
cleanly: a lease being generated for is given back, a training step in progress is discarded.

Generation speed in the hello: the first hello a new node ever sends reports 0.0 tokens/s (the
model to measure is only known from the welcome). After loading, a short real generation is
measured; later hellos (reconnections, restarts, read from ``node-stats.json``) report it, and
after each round the speed actually observed.

Checkpoints go to ``<data_dir>/checkpoints/campaign-<id>/<node_id>.pt`` (atomic writes): every
round for models up to 100M parameters (the tiny tiers: milliseconds), else every
:func:`checkpoint_interval` rounds, and always on a clean exit when the weights are consistent
(never halfway through a training step).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker import __version__
from worker.client.address import is_loopback, normalise_url
from worker.client.backends import build_backend, choose_backend, measure_generation_speed
from worker.client.connection import DEFAULT_REQUEST_TIMEOUT, FINISHED_STATES, RUNNING
from worker.client.errors import CampaignFinished, FatalError, LeaseLost, RoundSubmitted
from worker.client.identity import (
    checkpoint_path,
    load_identity,
    load_stats,
    lock_data_dir,
    save_stats,
)
from worker.client.transport import WebsocketTransport
from worker.shared import protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

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


class StatusLine:
    """The live one-line status (a rich renderable, re-read on every refresh)."""

    def __init__(self, transport: WebsocketTransport) -> None:
        self.transport = transport
        self.phase = "starting"
        self.round = 0
        self.rounds: int | None = None
        self.tier = ""
        self.reward: float | None = None
        self.tokens_per_second: float | None = None
        self.external_fraction: float | None = None

    def update(self, metrics: dict[str, float]) -> None:
        self.reward = metrics.get("reward")
        self.tokens_per_second = metrics.get("tokens_per_second")
        self.external_fraction = metrics.get("external_fraction")

    def render(self) -> str:
        total = f"/{self.rounds}" if self.rounds else ""
        parts = [f"round {self.round}{total}"]
        if self.tier:
            parts.append(self.tier)
        parts.append(self.phase)
        parts.append("reward " + ("-" if self.reward is None else f"{self.reward:.3f}"))
        parts.append(("-" if self.tokens_per_second is None else f"{self.tokens_per_second:.0f}") + " tok/s")
        parts.append(
            "external " + ("-" if self.external_fraction is None else f"{100 * self.external_fraction:.0f}%")
        )
        connection = self.transport.connection_state
        if self.transport.campaign_state not in (RUNNING, "unknown"):
            connection += f", campaign {self.transport.campaign_state}"
        parts.append(f"coordinator: {connection}")
        return " | ".join(parts)

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text(self.render())


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


def hello_fields(
    token: str, node_id: str, hardware: Hardware, preferred_tier: str | None, tokens_per_second: float
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "protocol_versions": list(protocol.SUPPORTED_VERSIONS),
        "token": token,
        "node_id": node_id,
        "client_version": __version__,
        "hardware": hardware.to_json(),
        "backends": list(hardware.backends)[:8],
        "generation_tokens_per_second": max(0.0, float(tokens_per_second)),
    }
    if preferred_tier:
        fields["preferred_tier"] = preferred_tier
    return fields


def run_worker(
    url: str,
    token: str,
    data_dir: Path | str,
    backend: str = "auto",
    max_rounds: int | None = None,
    preferred_tier: str | None = None,
    status: bool = True,
    *,
    torch_threads: int | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    console: Console | None = None,
) -> WorkerResult:
    """Join the coordinator at ``url`` and train until the campaign ends (or ``max_rounds`` rounds
    of this run). Returns how it ended; Ctrl-C and SIGTERM end it cleanly (reason
    ``interrupted``). Raises :class:`FatalError` when the coordinator refuses the worker and
    :class:`~worker.client.identity.IdentityError` when the data directory is unusable or in use.

    ``torch_threads`` (else ``$SWARM_TORCH_THREADS``) sets torch's intra-op threads.
    """
    url = normalise_url(url)
    if not token:
        raise ValueError("a worker token is required (--token or $SWARM_TOKEN)")
    if max_rounds is not None and max_rounds < 0:
        raise ValueError("max_rounds must be >= 0")
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    threads = torch_threads or int(os.environ.get("SWARM_TORCH_THREADS") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    if not is_loopback(url) and url.startswith("ws://"):
        log.warning("%s is not encrypted: the token travels in clear text; prefer wss://", url)
    identity = load_identity(data_dir)
    with lock_data_dir(data_dir), _sigterm_as_interrupt():
        run = _WorkerRun(url, token, data_dir, identity.node_id, backend, max_rounds, preferred_tier)
        run.request_timeout = request_timeout
        return run.run(status, console)


class _WorkerRun:
    """One run of :func:`run_worker`: its state, and the cleanup that depends on it."""

    def __init__(
        self,
        url: str,
        token: str,
        data_dir: Path,
        node_id: str,
        backend: str,
        max_rounds: int | None,
        preferred_tier: str | None,
    ) -> None:
        self.url = url
        self.token = token
        self.data_dir = data_dir
        self.node_id = node_id
        self.requested_backend = backend
        self.max_rounds = max_rounds
        self.preferred_tier = preferred_tier
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.result = WorkerResult(node_id)
        self.agent: Agent | None = None
        self.phase = "starting"  # starting, generate, train, idle
        self.saved_round = -1
        self.every = 1

    def run(self, status: bool, console: Console | None) -> WorkerResult:
        from rich.console import Console
        from rich.live import Live

        from worker.engine.hardware import detect

        hardware = detect(self.data_dir)
        backend_name, reason = choose_backend(self.requested_backend, hardware)
        log.info("backend: %s (%s)", backend_name, reason)
        speed = load_stats(self.data_dir).get("generation_tokens_per_second", 0.0)
        speed = float(speed) if isinstance(speed, int | float) and math.isfinite(speed) else 0.0
        hello = hello_fields(self.token, self.node_id, hardware, self.preferred_tier, speed)
        transport = WebsocketTransport(self.url, hello, request_timeout=self.request_timeout)
        line = StatusLine(transport)
        console = console or Console(stderr=True)
        live: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if status and console.is_terminal:
            live = Live(line, console=console, refresh_per_second=2, transient=True)
        try:
            with live:
                log.info("node %s: connecting to %s", self.node_id, self.url)
                welcome = transport.start()
                self._train(transport, welcome, hardware, backend_name, line)
        except KeyboardInterrupt:
            self._stopped(transport)
        except CampaignFinished as finished:
            state = transport.campaign_state
            if state in FINISHED_STATES:
                self.result.reason = f"campaign_{state}"
            else:  # past the campaign's rounds, or refused at hello
                self.result.reason = "completed" if self.agent is not None else "campaign_not_running"
            self.result.message = str(finished)
        finally:
            self._save_if_consistent()
            transport.close()
        if self.agent is not None:
            self.result.next_round = self.agent.round
        log.info("stopped: %s", self.result.message or self.result.reason)
        return self.result

    def _stopped(self, transport: WebsocketTransport) -> None:
        self.result.reason = "interrupted"
        self.result.message = "interrupted"
        if self.phase == "generate" and transport.active_lease is not None:
            lease = transport.active_lease
            if transport.release_active():
                self.result.message = f"interrupted; released the lease of round {lease.round}"
        elif self.phase == "train":
            self.result.message = (
                "interrupted during a training step; its weights are discarded, the next run resumes "
                f"from the checkpoint of round {max(self.saved_round, 0)}"
            )

    def _save_if_consistent(self) -> None:
        """Checkpoint unless the weights are halfway through a training step."""
        agent = self.agent
        if agent is None or self.phase == "train" or agent.round <= self.saved_round:
            return
        self._save()

    def _save(self) -> None:
        assert self.agent is not None and self.result.checkpoint is not None
        self.agent.save(self.result.checkpoint)
        self.saved_round = self.agent.round

    def _train(
        self,
        transport: WebsocketTransport,
        welcome: dict[str, Any],
        hardware: Hardware,
        backend_name: str,
        line: StatusLine,
    ) -> None:
        from worker.engine.agent import Agent
        from worker.engine.policy import load_policy, resolve
        from worker.shared.campaign import CampaignConfig, ConfigError
        from worker.shared.config import stable_seed
        from worker.shared.tiers import ModelSpec, model_cache_dir, tier

        campaign = welcome["campaign"]
        try:
            config = CampaignConfig.from_json(campaign.get("config") or {})
        except ConfigError as error:
            raise FatalError(
                "unsupported_campaign",
                f"this worker cannot read the campaign's settings ({error}); upgrade it",
            ) from None
        tier_name = welcome["tier"]
        try:
            spec = ModelSpec(**welcome["model"])
        except TypeError:
            spec = tier(tier_name)
        self.result.campaign_id = campaign.get("id")
        self.result.tier = tier_name
        log.info(
            "joined campaign %r (%s) as tier %s: %s",
            campaign.get("name"),
            campaign.get("state"),
            tier_name,
            welcome.get("reason", ""),
        )
        line.tier, line.rounds, line.phase = tier_name, config.rounds, "loading model"
        device = "cuda" if hardware.device == "cuda" else "cpu"
        cache = model_cache_dir(self.data_dir)
        model_dir = resolve(spec, cache, log=lambda m: log.info("%s", m))  # builds a tiny tier once
        model, tokenizer = load_policy(spec, cache, device, log=lambda m: log.info("%s", m))
        seed = stable_seed(config.seed, self.node_id)
        generation = build_backend(backend_name, model, tokenizer, model_dir, spec, hardware, seed)
        speed = measure_generation_speed(generation, tokenizer, config.system_prompt)
        log.info("generation speed: %.0f tokens/s", speed)
        transport.update_hello(generation_tokens_per_second=speed)
        save_stats(self.data_dir, generation_tokens_per_second=speed, tier=tier_name, measured_at=time.time())

        agent = Agent(
            self.node_id,
            tier_name,
            model,
            tokenizer,
            generation,
            transport,
            config.mix,
            config.agent_config(tier_name, seed),
        )
        self.every = checkpoint_interval(spec.params)
        self.result.checkpoint = checkpoint_path(self.data_dir, campaign.get("id"), self.node_id)
        self._resume(agent, self.result.checkpoint, welcome["resume_round"])
        self.agent = agent
        self.saved_round = agent.round if self.result.checkpoint.exists() else -1
        self.result.start_round = agent.round
        self._loop(transport, agent, config.rounds, line)

    def _resume(self, agent: Agent, path: Path, resume_round: int) -> None:
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

    def _loop(self, transport: WebsocketTransport, agent: Agent, rounds: int, line: StatusLine) -> None:
        lost_in_a_row = 0
        self.phase = "idle"
        while True:
            line.round = agent.round
            if agent.round >= rounds:
                self.result.reason = "completed"
                self.result.message = f"this node finished the campaign's {rounds} rounds"
                return
            if self.max_rounds is not None and self.result.rounds_run >= self.max_rounds:
                self.result.reason = "max_rounds"
                self.result.message = f"ran {self.result.rounds_run} rounds (--max-rounds)"
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
                continue
            except LeaseLost as lost:
                lost_in_a_row += 1
                if lost_in_a_row >= 5:
                    raise FatalError(
                        "lease_expired",
                        f"{lost_in_a_row} leases in a row were lost before this worker could submit "
                        f"them ({lost}); this machine may be too slow for the campaign's lease time",
                    ) from None
                log.warning("round %d: %s; generating the round again with a new lease", agent.round, lost)
                self.phase = "idle"
                continue
            lost_in_a_row = 0
            self.phase = "train"
            line.phase = "training"
            metrics = agent.train_phase()
            self.phase = "idle"
            line.phase = "idle"
            self.result.rounds_run += 1
            line.update(metrics)
            line.round = agent.round
            log.info(
                "round %d: reward %.3f, %.0f tokens/s, external %.0f%%, %.1f s",
                agent.round - 1,
                metrics.get("reward", float("nan")),
                metrics.get("tokens_per_second", float("nan")),
                100 * metrics.get("external_fraction", 0.0),
                metrics.get("round_time", float("nan")),
            )
            if agent.round % self.every == 0:
                self._save()
