"""manage.py validation_campaign: issue #50 item 2's validation campaign, end to end, in one command.

1. read study v3's results file (``--v3``) and build the campaign from its settings: tiny-1m,
   G = 8, B = 8, 16 tokens, the tier's learning rate, one GRPO iteration, temperature 1, beta 0,
   pool window 256, 45 rounds; the swarm arm 4/4 in ``--swarms`` independent swarms of
   ``--nodes`` nodes, beside ``--control-seeds`` seeds of the isolated 8/0 control only; the
   campaign's arms are checked against v3's ``arm_definitions`` before anything starts;
2. start the coordinator's processes as ``manage.py demo`` does (swarm_app/demo/processes.py:
   the ASGI server, Celery with beat, the ``controls`` queue, local ``swarm-worker join``
   processes of ``--nodes-per-process`` nodes each), launch the campaign and wait for it to
   complete, printing a status line and sampling the processes' resident memory;
3. stop every process, read every agent's verified reward and J-side age per round and the
   leases' questions from the database (validation_data.py), compare the swarm - control gain
   with the simulator's for the same arms from the v3 file (validation.py), and write ``--out``
   (JSON) and the markdown report beside it (``.md``).

Restartable, not resumable: an interrupted run stops its campaign (its data stays in the
database); running the command again starts a new campaign. ``--campaign ID`` writes the
report of a campaign that already ran (no process is started).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max, Min

from swarm_app.demo.processes import (
    ROOT,
    Children,
    catch_stop_signals,
    process_tree_rss,
    service_env,
    start_services,
    start_training,
    stop_campaign_and_children,
    wait_http,
)
from swarm_app.demo.validation import analyse, arm_problems, campaign_settings, deviations
from swarm_app.demo.validation_report import render_markdown

V3_RESULTS = "docs/experiments/sapo-table-cpu-v3.json"
DEFAULT_OUT = "docs/experiments/platform-validation.json"
MIB = 1024 * 1024


def machine() -> str:
    """This machine in words: OS, architecture, CPUs and memory."""
    uname = os.uname()
    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return f"{uname.sysname} {uname.machine}, {os.cpu_count()} CPUs, {memory} memory"


def load_average() -> str:
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "-"


def git_state() -> tuple[str, bool]:
    """The checkout's commit and whether its tracked files differ from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return "-", False
    return commit, dirty


class Memory:
    """Peak resident memory of a run's processes, sampled every second: per worker process,
    ``per_node_mib`` (the largest worker process's peak over its nodes: its own footprint of
    Python, torch and the libraries, about 560 MiB measured, dominates, so this falls as nodes
    per process grow), per control node (the controls queue's children: a process of one
    node), the server and Celery processes, and all of them together."""

    def __init__(self) -> None:
        self.worker_peak: dict[str, int] = {}
        self.control_node_peak = 0
        self.server_peak = 0
        self.total_peak = 0

    def sample(self, children: Children) -> None:
        total = server = 0
        for name, proc in children.procs:
            if proc.poll() is not None:
                continue
            tree = process_tree_rss(proc.pid)
            total += sum(tree.values())
            if name.startswith("worker"):
                self.worker_peak[name] = max(self.worker_peak.get(name, 0), sum(tree.values()))
            elif name == "controls":
                nodes = [rss for pid, rss in tree.items() if pid != proc.pid]
                self.control_node_peak = max([self.control_node_peak, *nodes])
                server += tree.get(proc.pid, 0)
            else:
                server += sum(tree.values())
        self.server_peak = max(self.server_peak, server)
        self.total_peak = max(self.total_peak, total)

    def summary(self, nodes_of: dict[str, int]) -> dict[str, Any]:
        per_node = [peak / nodes_of[name] for name, peak in self.worker_peak.items() if nodes_of.get(name)]
        return {
            "worker_process_peak_mib": {name: peak / MIB for name, peak in sorted(self.worker_peak.items())},
            "per_node_mib": max(per_node) / MIB if per_node else None,
            "control_node_peak_mib": self.control_node_peak / MIB or None,
            "servers_peak_mib": self.server_peak / MIB,
            "peak_total_mib": self.total_peak / MIB,
        }


class Command(BaseCommand):
    help = "Run issue #50's validation campaign (study v3's design on the platform) and write its report."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--swarms", type=int, default=5, help="independent 4/4 swarms (default 5)")
        parser.add_argument("--nodes", type=int, default=None, help="nodes per swarm (default: v3's 8)")
        parser.add_argument(
            "--control-seeds", type=int, default=5, help="seeds of the isolated 8/0 control (default 5)"
        )
        parser.add_argument("--rounds", type=int, default=None, help="rounds (default: v3's 45)")
        parser.add_argument("--tokens", type=int, default=None, help="max new tokens (default: v3's 16)")
        parser.add_argument(
            "--nodes-per-process",
            type=int,
            default=4,
            help="swarm nodes per local worker process (default 4: 40 nodes in 10 processes of about "
            "0.6 GiB resident, about 10 GiB with the controls and servers; one node per process "
            "would need 26 GiB; docs/experiments/README.md)",
        )
        parser.add_argument("--seed", type=int, default=0, help="the campaign's seed (question streams)")
        parser.add_argument(
            "--out",
            default=DEFAULT_OUT,
            help=f"results JSON (default {DEFAULT_OUT}); the report is written beside it as .md",
        )
        parser.add_argument(
            "--v3", default=V3_RESULTS, help=f"study v3's results file (default {V3_RESULTS})"
        )
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--status-every", type=float, default=30.0, help="seconds between status lines")
        parser.add_argument("--minutes", type=float, default=None, help="give up after this many minutes")
        parser.add_argument(
            "--beside", default="", help="what else ran on the machine meanwhile, for the report"
        )
        parser.add_argument(
            "--campaign", type=int, default=None, help="only write the report of this campaign (already run)"
        )
        parser.add_argument(
            "--simulator-seeds",
            type=int,
            default=2,
            help="4/4 cells rerun in the simulator after the campaign, for the pool age per draw "
            "(seeds 0..N-1, 2 processes at a time; default 2, about 20 process-minutes; 0: none)",
        )

    def handle(self, *args, **opts) -> None:
        from swarm_app.campaigns.models import Campaign
        from swarm_app.coordinator.models import WorkerNode

        v3 = json.loads((ROOT / opts["v3"]).read_text())  # ROOT / an absolute path is that path
        v3_config = v3["config"]
        nodes = opts["nodes"] or v3_config["agents"]
        if opts["swarms"] < 1 or nodes < 1 or opts["control_seeds"] < 1 or opts["nodes_per_process"] < 1:
            raise CommandError("--swarms, --nodes, --control-seeds and --nodes-per-process must be >= 1")
        call_command("migrate", verbosity=0, interactive=False)
        run: dict[str, Any] = {
            "command": "python manage.py validation_campaign " + shlex.join(sys.argv[2:]),
            "database": f"{connection.vendor}, {'embedded' if settings.EMBEDDED else 'Redis'} broker",
            "machine": machine(),
            "beside": opts["beside"] or "not stated (--beside)",
            "out": opts["out"],
        }
        run["commit"], run["dirty"] = git_state()
        if opts["campaign"] is not None:
            campaign = Campaign.objects.get(pk=opts["campaign"])
            config = campaign.settings
            previous = self.previous_run(opts["out"], campaign.pk)
            run = {**run, **previous, "command": previous.get("command", run["command"])}
            swarm_nodes = WorkerNode.objects.filter(campaign=campaign, arm="swarm").count()
            nodes = round(swarm_nodes / config.replicates) or nodes  # as the campaign ran
        else:
            config = campaign_settings(
                v3_config, opts["swarms"], opts["control_seeds"], opts["rounds"], opts["tokens"], opts["seed"]
            )
            problems = arm_problems(config, v3_config)
            if problems:
                raise CommandError("the campaign would not run v3's arms: " + "; ".join(problems))
            campaign = Campaign.objects.create(
                name=f"platform-validation {time.strftime('%Y-%m-%d %H:%M')}", config=config.to_json()
            )
            run.update(self.run_campaign(campaign, config, nodes, opts))
        run.update(
            campaign=campaign.pk,
            swarms=config.replicates,
            nodes_per_swarm=nodes,
            control_seeds=config.controls.seeds,
            rounds=config.rounds,
            max_new_tokens=config.max_new_tokens,
            deviations=deviations(config, nodes, v3_config),
            settings_summary=(
                f"{config.tiers[0]}, G = {config.group_size}, B = {config.questions_per_round}, "
                f"I/J = {config.num_local}/{config.num_external} ({config.local_strategy}/"
                f"{config.external_strategy}), {config.max_new_tokens} tokens, lr "
                f"{config.grpo_config(config.tiers[0]).learning_rate:g}, pool window {config.pool_window}, "
                f"{config.rounds} rounds, tasks {v3_config['tasks']}"
            ),
            settings=config.to_json(),
        )
        campaign.refresh_from_db()
        run["state"] = campaign.state
        state_dir = Path(settings.DATA_DIR) / "validation" / f"campaign-{campaign.pk}"
        reruns = self.simulator_reruns(config, v3_config, nodes, opts["simulator_seeds"], state_dir, run)
        self.write_report(campaign, v3, run, Path(opts["out"]), reruns)

    def simulator_reruns(
        self,
        config,
        v3_config: dict[str, Any],
        agents: int,
        seeds: int,
        state_dir: Path,
        run: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """Rerun 4/4 cells of seeds 0..seeds-1 in the simulator (``swarm-worker simulate`` processes,
        two at a time, one torch thread each, at the training niceness), with the campaign's
        settings and ``agents`` agents; a seed whose file is in ``state_dir`` is not run again.
        Records their wall time in ``run``; returns [{"seed", "results"}]."""
        from swarm_app.demo.validation import simulate_command

        state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        files = {seed: state_dir / f"simulate-seed{seed}.json" for seed in range(seeds)}
        todo = [seed for seed, path in files.items() if not path.exists()]
        started = time.monotonic()
        running: list[tuple[int, subprocess.Popen]] = []
        nice = ["nice", "-n", str(settings.TRAINING_NICE)]
        catch_stop_signals()  # the campaign's stop ignored them while stopping its processes
        try:
            while todo or running:
                while todo and len(running) < 2:
                    seed = todo.pop(0)
                    self.stdout.write(f"simulator: 4/4 seed {seed} ({agents} agents, {config.rounds} rounds)")
                    partial = files[seed].with_suffix(".partial.json")
                    command = simulate_command(sys.executable, v3_config, config, agents, seed, str(partial))
                    # the child keeps its own copy of the log's descriptor
                    with open(state_dir / f"simulate-seed{seed}.log", "ab") as log:
                        proc = subprocess.Popen([*nice, *command], cwd=ROOT, env=env, stdout=log, stderr=log)
                    running.append((seed, proc))
                time.sleep(1.0)
                for seed, proc in list(running):
                    if proc.poll() is None:
                        continue
                    running.remove((seed, proc))
                    if proc.returncode != 0:
                        raise CommandError(
                            f"the simulator's seed {seed} failed; see {state_dir}/simulate-seed{seed}.log"
                        )
                    files[seed].with_suffix(".partial.json").rename(files[seed])
        finally:
            for _seed, proc in running:  # interrupted or failed: stop the other seeds' processes
                proc.terminate()
                proc.wait()
        if seeds:
            run["simulator_seconds"] = run.get("simulator_seconds", 0.0) + time.monotonic() - started
        return [{"seed": seed, "results": json.loads(path.read_text())} for seed, path in files.items()]

    def previous_run(self, out: str, campaign_id: int) -> dict[str, Any]:
        """The run record of ``out`` if it is this campaign's (its budget and memory were measured
        while it ran), else {}."""
        path = Path(out)
        if not path.exists():
            return {}
        previous = json.loads(path.read_text()).get("run", {})
        return previous if previous.get("campaign") == campaign_id else {}

    def run_campaign(self, campaign, config, nodes: int, opts: dict[str, Any]) -> dict[str, Any]:
        """Start the processes, launch ``campaign``, wait for it to complete and stop them all.
        Returns what the report says about the run: budget, processes, memory, load."""
        from swarm_app.campaigns.models import RoundMetrics
        from swarm_app.coordinator.models import WorkerToken
        from swarm_app.coordinator.tokens import create_token
        from swarm_app.runs.lifecycle import complete_if_done, launch
        from swarm_app.runs.local_workers import model_cache

        catch_stop_signals()
        _, secret = create_token(campaign, "validation local workers", WorkerToken.BanScope.NODE)
        state_dir = Path(settings.DATA_DIR) / "validation" / f"campaign-{campaign.pk}"
        state_dir.mkdir(parents=True, exist_ok=True)
        children = Children(state_dir)
        env = service_env(model_cache())
        python = sys.executable
        total = opts["swarms"] * nodes
        per_process = opts["nodes_per_process"]
        sizes = [min(per_process, total - start) for start in range(0, total, per_process)]
        nodes_of = {f"worker-{index}": size for index, size in enumerate(sizes)}
        memory = Memory()
        record: dict[str, Any] = {
            "nodes_per_process": per_process,
            "worker_processes": len(sizes),
            "load_start": load_average(),
            "state_dir": str(state_dir),
        }
        self.stdout.write(
            f"campaign {campaign.pk}: {opts['swarms']} swarms x {nodes} nodes ({len(sizes)} processes), "
            f"{config.controls.seeds} control seeds, {config.rounds} rounds; logs in {state_dir}"
        )
        started = time.monotonic()
        cpu_before = os.times()
        finished = False
        try:
            url = start_services(children, python, opts["port"], state_dir, config.control_run_count(), env)
            wait_http(url, children)
            launch(campaign)
            launched = time.monotonic()
            for name, size in nodes_of.items():
                start_training(
                    children, name, python, url, state_dir / name, size, config.tiers[0], secret, env
                )
            deadline = launched + opts["minutes"] * 60 if opts["minutes"] else None
            last_status = 0.0
            while True:
                time.sleep(1.0)
                memory.sample(children)
                campaign.refresh_from_db()
                if complete_if_done(campaign) or campaign.is_finished:
                    finished = True
                    break
                if time.monotonic() - last_status >= opts["status_every"]:
                    last_status = time.monotonic()
                    self.stdout.write(self.status_line(campaign, launched))
                if deadline and time.monotonic() > deadline:
                    raise CommandError(f"--minutes {opts['minutes']:g} reached before the campaign completed")
                if dead := children.dead():
                    raise CommandError(f"{', '.join(dead)} exited with an error; see {state_dir}/<name>.log")
            record["wall_seconds"] = time.monotonic() - launched
        except KeyboardInterrupt:
            self.stdout.write("\nstopping every process (up to a minute)...")
        finally:
            killed = stop_campaign_and_children(campaign, children)
            if killed:
                self.stdout.write(f"killed after 30 s without stopping: {', '.join(killed)}")
        if not finished:
            raise CommandError(f"campaign {campaign.pk} did not complete ({campaign.state}); run again")
        cpu_after = os.times()
        reports = RoundMetrics.objects.filter(campaign=campaign)
        agent_rounds = reports.count()
        # Past the start (servers, model loading): from the first report to the last, per
        # agent-round reported after round 0.
        span = reports.aggregate(first=Min("created_at"), last=Max("created_at"))
        firsts = reports.filter(round=0).count()
        steady = None
        if span["first"] and agent_rounds > firsts:
            steady = (span["last"] - span["first"]).total_seconds() / (agent_rounds - firsts)
        cpu = (cpu_after.children_user - cpu_before.children_user) + (
            cpu_after.children_system - cpu_before.children_system
        )
        record.update(
            agent_rounds=agent_rounds,
            seconds_per_agent_round=record["wall_seconds"] / agent_rounds if agent_rounds else None,
            steady_seconds_per_agent_round=steady,
            cpu_seconds=cpu,
            cpu_seconds_per_agent_round=cpu / agent_rounds if agent_rounds else None,
            total_seconds=time.monotonic() - started,
            memory=memory.summary(nodes_of),
            load_end=load_average(),
        )
        self.stdout.write(self.status_line(campaign, launched))
        return record

    def status_line(self, campaign, launched: float) -> str:
        """Elapsed time, then per arm: agents reporting and the lowest and highest round reached."""
        from swarm_app.campaigns.models import RoundMetrics

        rows = (
            RoundMetrics.objects.filter(campaign=campaign).values("arm", "agent").annotate(last=Max("round"))
        )
        by_arm: dict[str, list[int]] = {}
        for row in rows:
            by_arm.setdefault(row["arm"], []).append(row["last"])
        parts = [f"[{time.monotonic() - launched:6.0f} s] {campaign.state}"]
        for arm, lasts in sorted(by_arm.items()):
            parts.append(f"{arm}: {len(lasts)} agents, rounds {min(lasts)}-{max(lasts)}")
        return " | ".join(parts)

    def write_report(
        self, campaign, v3: dict[str, Any], run: dict[str, Any], out: Path, reruns: list[dict[str, Any]]
    ) -> None:
        from swarm_app.demo.validation_data import campaign_rows, question_streams, stream_words

        counts = question_streams(campaign)
        run["question_stream_counts"] = counts
        run["question_streams"] = stream_words(counts, campaign.settings.seed)
        result = analyse(campaign_rows(campaign), v3, run, reruns)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        report = out.with_suffix(".md")
        report.write_text(render_markdown(result))
        platform, simulator = result["platform"]["gain"], result["simulator"]["unpaired"]

        def show(row: dict[str, Any]) -> str:
            if row.get("difference") is None:
                return "-"
            interval = "" if row.get("low") is None else f" [{row['low']:.3f}, {row['high']:.3f}]"
            return f"{row['difference']:+.3f}{interval}"

        ages = result["pool_age"]
        self.stdout.write(
            f"H = {result['horizon']}: platform swarm - control {show(platform)} (n = {platform['n']}); "
            f"simulator 4/4 - 8/0 {show(simulator)} (n = {simulator['n']}); "
            f"difference {show(result['comparison'])}: {result['comparison'].get('verdict')}"
        )
        self.stdout.write(
            "pool age per draw: platform "
            + (f"{ages['platform_per_draw']['mean']:.2f}" if ages["platform_per_draw"].get("n") else "-")
            + " rounds, simulator (per round and cell) "
            + (
                f"{ages['simulator_per_round_cell']['mean']:.2f}"
                if ages["simulator_per_round_cell"].get("n")
                else "-"
            )
            + ", simulator per draw (reruns) "
            + (f"{ages['simulator_per_draw']['mean']:.2f}" if ages["simulator_per_draw"].get("n") else "-")
            + f"; question streams: {counts}"
        )
        if run.get("memory"):
            self.stdout.write(
                f"memory: {json.dumps(run['memory'])}; wall {run.get('wall_seconds', 0):.0f} s, "
                f"{run.get('seconds_per_agent_round') or math.nan:.3f} s per agent-round "
                f"({run.get('steady_seconds_per_agent_round') or math.nan:.3f} s past the start), "
                f"{run.get('cpu_seconds') or 0:.0f} CPU-seconds of child processes"
            )
        self.stdout.write(self.style.SUCCESS(f"wrote {out} and {report}"))
