"""manage.py demo: a cpu-demo campaign, its controls and local workers, and the live dashboard.

One command shows a swarm learning next to its isolated controls on one machine:

1. migrate the database (embedded SQLite unless DATABASE_URL is set);
2. create a staff account with a generated password (printed once) if there is none;
3. use the shipped tiny tiers (worker/models/, checksums checked); a tier the project does not
   ship is built once into the model cache: the first such tier before anything starts, the
   others in the background (their workers start when their model is built);
4. create a ``cpu-demo`` campaign and a worker token, and launch it (the controls are queued:
   ``--seeds`` per tier and arm);
5. start the ASGI server, a Celery worker with beat for housekeeping, a Celery worker of the
   ``controls`` queue (each control is a worker node it starts: swarm_app/runs/controls.py),
   and ``--workers`` local worker processes per tier, each running ``--nodes`` nodes (a swarm
   of workers x nodes per tier). Every training process runs one node by default, one torch
   thread, at niceness SWARM_TRAINING_NICE, in the demo's session: each agent gets the same
   share of the cores, and the server and Celery keep theirs (docs/deploy.md);
6. print the dashboard URL and a status line every few seconds (per tier and arm: round, reward,
   n, and the swarm's external share); once the campaign completes, keep serving the dashboard
   and its export until Ctrl-C (or ``--minutes``); then stop every child process (workers
   first, so they give their leases back) and mark the campaign stopped if it had not ended.

With DATABASE_URL and REDIS_URL set, the same command runs on PostgreSQL and Redis.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
import webbrowser
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Avg, Max
from django.urls import reverse

from swarm_app.demo.processes import (
    Children,
    catch_stop_signals,
    service_env,
    start_services,
    start_training,
    stop_campaign_and_children,
    wait_http,
)

DEMO_USER = "organizer"


class Command(BaseCommand):
    help = "Run a cpu-demo campaign with local workers, its isolated controls and the live dashboard."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--workers", type=int, default=4, help="local worker processes per tier (default 4)"
        )
        parser.add_argument(
            "--nodes",
            type=int,
            default=1,
            help="nodes per worker process, taking turns on its core (default 1, as every control: "
            "each agent gets the same share of the cores)",
        )
        parser.add_argument(
            "--seeds", type=int, default=None, help="control runs per tier and arm (default: the preset's)"
        )
        parser.add_argument(
            "--rounds", type=int, default=None, help="rounds per node (default: the preset's)"
        )
        parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--tiers", default="tiny-1m,tiny-5m", help="comma-separated CPU tiers")
        parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
        parser.add_argument("--browser", action="store_true", help="open a browser even without a display")
        parser.add_argument("--reset", action="store_true", help="start fresh: new database and demo data")
        parser.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines")

    def build_model(self, name: str, cache: Path) -> str:
        """Build a tiny tier in a child process (``swarm-worker build-tiny``), its progress shown
        here: the demo's own process never imports torch. Returns the built model's path."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", "build-tiny", name, "--cache-dir", str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip())
                self.stdout.write(f"  {line.rstrip()}")
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        if proc.wait() != 0 or not lines:
            raise CommandError(f"building {name} failed (exit {proc.returncode}); its output is above")
        return lines[-1]

    def handle(self, *args, **opts) -> None:
        # Ctrl-C, a closed terminal and `kill` all stop the demo the same way, stopping every
        # child (each runs in its own process group, so no signal reaches them otherwise).
        catch_stop_signals()
        from swarm_app.campaigns.models import Campaign
        from swarm_app.coordinator.models import WorkerToken
        from swarm_app.coordinator.tokens import create_token
        from swarm_app.runs.lifecycle import complete_if_done, launch
        from swarm_app.runs.local_workers import model_cache
        from worker.shared.campaign import cpu_demo_config
        from worker.shared.tiers import tier, tiny_model_ready

        demo_dir = Path(settings.DATA_DIR) / "demo"
        if opts["reset"]:
            self.reset(demo_dir)
        demo_dir.mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0, interactive=False)
        self.stdout.write(
            f"database: {connection.vendor}, {'embedded' if settings.EMBEDDED else 'Redis'} broker"
        )
        self.ensure_organizer()

        tiers = [t.strip() for t in opts["tiers"].split(",") if t.strip()]
        for name in tiers:
            if not tier(name).cpu_ok:
                raise CommandError(f"tier {name} needs a GPU; the demo runs CPU tiers")
        # One model cache for the demo and every child it starts (server, Celery, workers): a
        # worker's own default would be inside its data directory, and it would build again.
        cache = model_cache()
        # The shipped tiers load at once. A tier not shipped is built: the first one (if need be)
        # before anything starts, the others in child processes while the swarm already runs;
        # their workers start once their model is there, their controls wait on the build lock.
        started = time.monotonic()
        unbuilt = [name for name in tiers if not tiny_model_ready(name, cache)]
        if tiers[0] in unbuilt:
            try:
                path = self.build_model(tiers[0], cache)
            except KeyboardInterrupt:
                self.stdout.write("\ninterrupted while building (the next run builds again)")
                sys.exit(130)
            self.stdout.write(f"model {tiers[0]}: {path} ({time.monotonic() - started:.0f} s)")
            unbuilt.remove(tiers[0])

        overrides = {"tiers": tiers}
        if opts["rounds"]:
            overrides["rounds"] = opts["rounds"]
        if opts["seeds"] is not None:
            overrides["controls"] = {**cpu_demo_config().to_json()["controls"], "seeds": opts["seeds"]}
        config = cpu_demo_config(**overrides).validate()
        campaign = Campaign.objects.create(
            name=f"cpu-demo {time.strftime('%Y-%m-%d %H:%M')}", config=config.to_json()
        )
        # One token for several local worker processes: a ban holds for the lying node only.
        _, secret = create_token(campaign, "demo local workers", WorkerToken.BanScope.NODE)

        children = Children(demo_dir)
        port = opts["port"]
        env = service_env(cache)
        python = sys.executable
        building: dict[str, tuple[subprocess.Popen, float]] = {}
        interrupted = finished = False
        try:
            # Later tiers not yet built: one build process each, on one thread (the running swarm has
            # the cores; oversubscribed torch threads run several times slower, docs/tiny-models.md).
            for name in unbuilt:
                build = children.start(
                    f"build-{name}",
                    [python, "-m", "worker.cli", "build-tiny", name, "--cache-dir", str(cache)],
                    **env,
                )
                building[name] = (build, time.monotonic())
                self.stdout.write(
                    f"model {name}: building in the background ({demo_dir}/build-{name}.log); "
                    "its workers start when it is built"
                )
            url = start_services(children, python, port, demo_dir, config.control_run_count(), env)
            wait_http(url, children)
            launch(campaign)

            def start_workers(name: str) -> None:
                for index in range(opts["workers"]):
                    data_dir = demo_dir / "workers" / f"campaign-{campaign.pk}" / f"{name}-{index}"
                    start_training(
                        children,
                        f"worker-{name}-{index}",
                        python,
                        url,
                        data_dir,
                        opts["nodes"],
                        name,
                        secret,
                        env,
                    )

            for name in tiers:
                if name not in building:
                    start_workers(name)
            self.stdout.write(self.style.SUCCESS(f"dashboard: {url}{campaign.get_absolute_url()}"))
            self.stdout.write(f"logs: {demo_dir}/*.log   (Ctrl-C stops everything)")
            if opts["browser"] or (
                not opts["no_browser"] and (os.environ.get("DISPLAY") or sys.platform == "darwin")
            ):
                webbrowser.open(f"{url}{campaign.get_absolute_url()}")
            deadline = time.monotonic() + opts["minutes"] * 60 if opts["minutes"] else None
            while True:
                time.sleep(opts["status_every"])
                if deadline and time.monotonic() > deadline:
                    self.stdout.write(f"--minutes {opts['minutes']:g} reached")
                    break
                if finished:
                    continue  # serving the results until Ctrl-C
                for name, (build, build_started) in list(building.items()):
                    if build.poll() == 0:  # a failed build is a dead child, reported below
                        del building[name]
                        self.stdout.write(f"model {name}: built in {time.monotonic() - build_started:.0f} s")
                        start_workers(name)
                campaign.refresh_from_db()
                self.stdout.write(self.status_line(campaign))
                if complete_if_done(campaign) or campaign.is_finished:
                    finished = True
                    campaign.refresh_from_db()
                    export = reverse("api-metrics", args=[campaign.pk])
                    self.stdout.write(
                        self.style.SUCCESS(
                            f"campaign {campaign.pk} {campaign.state}: the dashboard stays at "
                            f"{url}{campaign.get_absolute_url()} and its export at {url}{export} "
                            "until Ctrl-C"
                        )
                    )
                    continue
                dead = children.dead()
                if dead:
                    raise CommandError(f"{', '.join(dead)} exited with an error; see {demo_dir}/<name>.log")
        except KeyboardInterrupt:
            interrupted = not finished  # Ctrl-C after the campaign's end is how the demo ends
            self.stdout.write("\nstopping every process (up to a minute)...")
        finally:
            killed = stop_campaign_and_children(campaign, children)
            if killed:
                self.stdout.write(f"killed after 30 s without stopping: {', '.join(killed)}")
        self.stdout.write(self.status_line(campaign))
        self.stdout.write(
            self.style.SUCCESS(f"campaign {campaign.pk} {campaign.state}; every child process stopped")
        )
        if interrupted:
            sys.exit(130)

    def ensure_organizer(self) -> None:
        User = get_user_model()
        if User.objects.filter(username=DEMO_USER).exists():
            self.stdout.write(
                f"staff account: {DEMO_USER} (password printed on its first run; "
                f"`manage.py changepassword {DEMO_USER}` sets a new one)"
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_user(DEMO_USER, password=password, is_staff=True, is_superuser=True)
        self.stdout.write(self.style.WARNING(f"staff account: {DEMO_USER} / {password}   (shown once)"))

    def reset(self, demo_dir: Path) -> None:
        """A new database (embedded) or no demo campaigns (server); built models are kept."""
        if connection.vendor == "sqlite":
            connection.close()
            name = Path(settings.DATABASES["default"]["NAME"])
            for path in (name, name.with_name(name.name + "-wal"), name.with_name(name.name + "-shm")):
                path.unlink(missing_ok=True)
        else:
            from swarm_app.campaigns.models import Campaign

            Campaign.objects.filter(name__startswith="cpu-demo").delete()
        shutil.rmtree(demo_dir, ignore_errors=True)
        self.stdout.write("reset: fresh demo data (built models kept)")

    def status_line(self, campaign) -> str:
        """One line: per tier and arm, the last round reached, the mean reward of the last 5
        rounds over its agents, n (agents reporting), and for the swarm the external share of
        what it trained on over those rounds."""
        from swarm_app.campaigns.models import RoundMetrics
        from swarm_app.coordinator.models import WorkerNode

        parts = [f"[{time.strftime('%H:%M:%S')}] {campaign.state}"]
        workers = WorkerNode.objects.filter(campaign=campaign, connected=True).count()
        parts.append(f"nodes {workers}")
        for tier_name in campaign.settings.tiers:
            rows = RoundMetrics.objects.filter(campaign=campaign, tier=tier_name)
            arms = []
            for arm in ("swarm", *campaign.settings.control_kinds()):
                last = rows.filter(arm=arm).aggregate(last=Max("round"))["last"]
                if last is None:
                    arms.append(f"{arm} -")
                    continue
                recent = rows.filter(arm=arm, round__gte=max(0, last - 4))
                reward = recent.aggregate(r=Avg("reward"))["r"]
                n = recent.values("agent").distinct().count()
                text = f"{arm} r{last} {reward:.3f} (n={n}"
                if arm == "swarm":
                    shares = [m.get("external_fraction") for m in recent.values_list("metrics", flat=True)]
                    shares = [x for x in shares if isinstance(x, int | float)]
                    if shares:
                        text += f", external {100 * sum(shares) / len(shares):.0f}%"
                arms.append(text + ")")
            parts.append(f"{tier_name}: {', '.join(arms)}")
        return " | ".join(parts)
