"""The organizer web UI: permissions, CSRF, the campaign form and every validation error,
the lifecycle functions behind the buttons, worker tokens, the status page and the export API."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from swarm_app.campaigns import lifecycle
from swarm_app.campaigns.broadcast import campaign_group, worker_group
from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.coordinator.models import WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import create_token, digest
from worker.shared.campaign import CampaignConfig, ControlsConfig, cpu_demo_config

User = get_user_model()


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def staff(db) -> Client:
    user = User.objects.create_user("organizer", password="pw-organizer", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def member(db) -> Client:
    user = User.objects.create_user("viewer", password="pw-viewer")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def anonymous(db) -> Client:
    return Client()


def make_campaign(state: str = Campaign.State.PENDING, public: bool = True, **config) -> Campaign:
    defaults = {"tiers": ["tiny-1m"], "rounds": 3, "controls": ControlsConfig(True, True, 2)}
    cfg = CampaignConfig(**{**defaults, **config}).validate()
    return Campaign.objects.create(name="web test", state=state, public=public, config=cfg.to_json())


def form_data(**overrides) -> dict:
    """A valid POST of the campaign form (the cpu-demo preset on one tier)."""
    data = {
        "name": "form test",
        "preset": "cpu-demo",
        "task_preset": "cpu",
        "custom_tasks": "",
        "tiers": ["tiny-1m"],
        "group_size": "4",
        "questions_per_round": "4",
        "num_local": "2",
        "num_external": "2",
        "local_strategy": "nonzero_advantage",
        "external_strategy": "nonzero_advantage",
        "rounds": "5",
        "seed": "0",
        "controls_isolated": "on",
        "controls_filtered": "on",
        "control_seeds": "1",
        "learning_rate": "",
        "eps_low": "0.2",
        "eps_high": "0.28",
        "num_iterations": "2",
        "max_new_tokens": "8",
        "temperature": "1.0",
        "public": "on",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def field_errors(response, field: str) -> list[str]:
    return list(response.context["form"].errors.get(field, []))


# --- permissions ---------------------------------------------------------------------------------


def test_anyone_reads_public_pages_and_only_staff_see_private_ones(anonymous, member, staff):
    public = make_campaign(public=True)
    private = make_campaign(public=False)
    for client in (anonymous, member, staff):
        assert client.get("/").status_code == 200
        assert client.get(public.get_absolute_url()).status_code == 200
        assert client.get(reverse("api-dashboard", args=[public.pk])).status_code == 200
    for client in (anonymous, member):
        assert client.get(private.get_absolute_url()).status_code == 404
        assert client.get(reverse("api-metrics", args=[private.pk])).status_code == 404
        assert private.name not in client.get("/").content.decode() or public.name == private.name
        assert private.pk not in [c["id"] for c in client.get("/api/status").json()["campaigns"]]
    assert staff.get(private.get_absolute_url()).status_code == 200
    assert private.pk in [c["id"] for c in staff.get("/api/status").json()["campaigns"]]


def test_viewers_see_no_organizer_controls(anonymous, staff):
    campaign = make_campaign()
    page = anonymous.get(campaign.get_absolute_url()).content.decode()
    assert 'data-action="launch"' not in page and "Worker tokens" not in page
    page = staff.get(campaign.get_absolute_url()).content.decode()
    assert 'data-action="launch"' in page and "Worker tokens" in page


WRITE_URLS = [
    ("campaign-new", False),
    ("campaign-launch", True),
    ("campaign-pause", True),
    ("campaign-resume", True),
    ("campaign-stop", True),
    ("campaign-tokens", True),
]


@pytest.mark.parametrize(("name", "needs_pk"), WRITE_URLS)
def test_anonymous_and_non_staff_users_cannot_write(anonymous, member, name, needs_pk):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    url = reverse(name, args=[campaign.pk] if needs_pk else [])
    data = form_data() if name == "campaign-new" else {"label": "x"}
    response = anonymous.post(url, data)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert member.post(url, data).status_code == 403
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.RUNNING
    assert Campaign.objects.count() == 1
    assert not WorkerToken.objects.exists()
    assert not ControlRun.objects.exists()


def test_revoking_a_token_needs_staff(anonymous, member):
    campaign = make_campaign()
    token, _ = create_token(campaign, "volunteer")
    url = reverse("token-revoke", args=[campaign.pk, token.pk])
    assert anonymous.post(url).status_code == 302
    assert member.post(url).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_every_write_needs_a_csrf_token(db):
    user = User.objects.create_user("csrf", password="pw", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    campaign = make_campaign()
    for url, data in [
        (reverse("campaign-new"), form_data()),
        (reverse("campaign-launch", args=[campaign.pk]), {}),
        (reverse("campaign-tokens", args=[campaign.pk]), {"label": "x"}),
    ]:
        assert client.post(url, data).status_code == 403
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PENDING and not campaign.tokens.exists()
    # The pages carry the token in every form.
    for url in (
        reverse("campaign-new"),
        campaign.get_absolute_url(),
        reverse("campaign-tokens", args=[campaign.pk]),
    ):
        assert "csrfmiddlewaretoken" in client.get(url).content.decode()


def test_actions_are_post_only(staff):
    campaign = make_campaign()
    for action in ("launch", "pause", "resume", "stop"):
        assert staff.get(reverse(f"campaign-{action}", args=[campaign.pk])).status_code == 405
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PENDING


# --- the form ------------------------------------------------------------------------------------


def test_presets_fill_the_form(staff):
    form = staff.get(reverse("campaign-new") + "?preset=cpu-demo").context["form"]
    assert form.initial["tiers"] == ["tiny-1m", "tiny-5m"]
    assert form.initial["task_preset"] == "cpu" and form.initial["rounds"] == 60
    form = staff.get(reverse("campaign-new") + "?preset=sapo-table&num_local=6&num_external=2").context[
        "form"
    ]
    assert form.initial["tiers"] == ["qwen2.5-0.5b"] and form.initial["task_preset"] == "rgym9"
    assert (form.initial["num_local"], form.initial["num_external"]) == (6, 2)


def test_the_cpu_demo_preset_round_trips_through_the_form(staff):
    initial = staff.get(reverse("campaign-new") + "?preset=cpu-demo").context["form"].initial
    post = {key: value for key, value in initial.items() if value is not None and value is not False}
    post.update({key: "on" for key, value in initial.items() if value is True})
    response = staff.post(reverse("campaign-new"), post)
    assert response.status_code == 302, response.context["form"].errors
    campaign = Campaign.objects.get()
    expected = cpu_demo_config().to_json()
    assert campaign.config == expected
    assert campaign.state == Campaign.State.RUNNING  # the demo preset launches at once
    assert campaign.created_by.username == "organizer"


def test_a_valid_form_creates_a_pending_campaign_with_those_settings(staff):
    response = staff.post(
        reverse("campaign-new"),
        form_data(
            task_preset="custom",
            custom_tasks="chain_sum 2 min_digits=1 max_digits=1\nspell_backward 1 # comment",
            learning_rate="0.0003",
        ),
    )
    campaign = Campaign.objects.get()
    assert response.status_code == 302 and response["Location"] == campaign.get_absolute_url()
    config = campaign.settings
    assert campaign.state == Campaign.State.PENDING
    assert config.tasks == [
        {"name": "chain_sum", "weight": 2.0, "config": {"min_digits": 1, "max_digits": 1}},
        {"name": "spell_backward", "weight": 1.0, "config": {}},
    ]
    assert (config.group_size, config.questions_per_round, config.num_local, config.num_external) == (
        4,
        4,
        2,
        2,
    )
    assert config.grpo == {"num_iterations": 2, "learning_rate": 0.0003}  # defaults are not stored
    assert config.controls == ControlsConfig(isolated=True, filtered=True, seeds=1)
    assert config.max_new_tokens == 8 and config.rounds == 5


def seen_worker(hardware: dict) -> None:
    campaign = make_campaign()
    token, _ = create_token(campaign)
    WorkerNode.objects.create(
        campaign=campaign,
        node_id=f"seen{WorkerNode.objects.count()}",
        token=token,
        tier="tiny-1m",
        hardware=hardware,
        last_seen=timezone.now() - timedelta(hours=1),
    )


CPU = {"device": "cpu", "device_name": "x86", "vram_bytes": 0, "ram_bytes": 16 * 1024**3, "cpu_count": 4}

INVALID = [
    # (overrides, field, message fragment)
    ({"num_local": "0", "num_external": "0"}, "num_local", "I + J must be at least 1"),
    (
        {"task_preset": "custom", "custom_tasks": "no_such_task 1"},
        "custom_tasks",
        "unknown reasoning-gym task",
    ),
    ({"task_preset": "custom", "custom_tasks": ""}, "custom_tasks", "at least one task"),
    ({"task_preset": "custom", "custom_tasks": "chain_sum heavy"}, "custom_tasks", "weight"),
    ({"task_preset": "custom", "custom_tasks": "chain_sum 1 min_digits"}, "custom_tasks", "key=value"),
    ({"task_preset": "custom", "custom_tasks": "chain_sum 0"}, "custom_tasks", "weight must be positive"),
    (
        {"task_preset": "custom", "custom_tasks": "chain_sum 1 no_such_setting=3"},
        "custom_tasks",
        "invalid config",
    ),
    ({"task_preset": "custom", "custom_tasks": "chain_sum\nchain_sum"}, "custom_tasks", "duplicate"),
    ({"task_preset": "nope"}, "task_preset", "valid choice"),
    ({"tiers": []}, "tiers", "required"),
    ({"tiers": ["gpt-5"]}, "tiers", "valid choice"),
    ({"group_size": "1"}, "group_size", "greater than or equal to 2"),
    ({"questions_per_round": "65"}, "questions_per_round", "less than or equal to 64"),
    ({"num_local": "5"}, "num_local", "cannot exceed"),
    ({"num_external": "3"}, "num_external", "I + J = 5"),
    ({"local_strategy": "best"}, "local_strategy", "valid choice"),
    ({"rounds": "0"}, "rounds", "greater than or equal to 1"),
    ({"control_seeds": "17"}, "control_seeds", "less than or equal to 16"),
    ({"eps_low": "1.5"}, "eps_low", "less than or equal to 0.99"),
    ({"eps_high": "0.1"}, "eps_high", "must not be below"),
    ({"num_iterations": "0"}, "num_iterations", "greater than or equal to 1"),
    ({"temperature": "0"}, "temperature", "greater than or equal to 0.01"),
    ({"max_new_tokens": "0"}, "max_new_tokens", "greater than or equal to 1"),
    ({"learning_rate": "-1"}, "learning_rate", "greater than or equal to 0"),
    ({"name": ""}, "name", "required"),
]


@pytest.mark.parametrize(("overrides", "field", "fragment"), INVALID, ids=[i[2][:30] for i in INVALID])
def test_each_validation_error_is_shown_next_to_its_field(staff, overrides, field, fragment):
    response = staff.post(reverse("campaign-new"), form_data(**overrides))
    assert response.status_code == 200
    errors = field_errors(response, field)
    assert any(fragment in error for error in errors), response.context["form"].errors
    page = response.content.decode()
    start = page.index(f'id="field-{field}"')
    assert "errorlist" in page[start : page.index("</div>\n", page.index("errorlist", start)) + 1]
    assert not Campaign.objects.exists()


def test_independent_errors_are_reported_together(staff):
    response = staff.post(
        reverse("campaign-new"),
        form_data(num_local="0", num_external="0", task_preset="custom", custom_tasks="bogus 1"),
    )
    assert field_errors(response, "num_local") and field_errors(response, "custom_tasks")


def test_a_tier_no_seen_worker_can_run_is_refused_unless_allowed(staff):
    seen_worker(CPU)
    response = staff.post(reverse("campaign-new"), form_data(tiers=["tiny-1m", "qwen2.5-1.5b"]))
    errors = field_errors(response, "tiers")
    assert len(errors) == 1 and "no worker seen in the last 7 days can run qwen2.5-1.5b" in errors[0]
    assert "GPU" in errors[0]
    assert Campaign.objects.count() == 1  # the seen worker's own
    response = staff.post(reverse("campaign-new"), form_data(tiers=["qwen2.5-1.5b"], allow_unseen_tiers="on"))
    assert response.status_code == 302


def test_local_workers_need_the_setting_and_a_tier_this_machine_runs(staff, settings, monkeypatch):
    settings.SWARM_ALLOW_LOCAL_WORKERS = False
    assert "local_workers" not in staff.get(reverse("campaign-new")).context["form"].fields
    settings.SWARM_ALLOW_LOCAL_WORKERS = True
    assert "local_workers" in staff.get(reverse("campaign-new")).context["form"].fields
    monkeypatch.setattr("swarm_app.campaigns.forms.local_hardware", lambda: dict(CPU))
    response = staff.post(
        reverse("campaign-new"), form_data(tiers=["qwen2.5-0.5b"], local_workers="2", allow_unseen_tiers="on")
    )
    errors = field_errors(response, "tiers")
    assert errors and "local workers run on this machine" in errors[0] and "GPU" in errors[0]
    assert not Campaign.objects.exists()


def test_the_form_starts_local_workers_for_a_demo_campaign(staff, settings, monkeypatch):
    settings.SWARM_ALLOW_LOCAL_WORKERS = True
    monkeypatch.setattr("swarm_app.campaigns.forms.local_hardware", lambda: dict(CPU))
    started = []

    class FakePopen:
        pid = 4242

        def __init__(self, args, env, **kwargs):
            started.append((args, env))

        def wait(self):
            return 0

    monkeypatch.setattr("swarm_app.campaigns.lifecycle.subprocess.Popen", FakePopen)
    monkeypatch.delenv("SWARM_MODEL_CACHE", raising=False)
    response = staff.post(reverse("campaign-new"), form_data(local_workers="2", launch_now="on"))
    assert response.status_code == 302
    campaign = Campaign.objects.get()
    assert campaign.state == Campaign.State.RUNNING and campaign.local_workers == 2
    assert len(started) == 2
    args, env = started[0]
    assert args[1:5] == ["-m", "worker.cli", "join", "http://testserver/"]
    token = campaign.tokens.get()
    assert token.token_hash == digest(env["SWARM_TOKEN"])  # the secret travels in the environment
    assert env["SWARM_TOKEN"] not in " ".join(args)
    data_dirs = {a[a.index("--data-dir") + 1] for a, _ in started}
    assert len(data_dirs) == 2  # one identity per local worker
    # ... but one model cache, the coordinator's: a worker's own would build the tiers again.
    assert {e["SWARM_MODEL_CACHE"] for _, e in started} == {str(Path(settings.DATA_DIR) / "models")}


# --- lifecycle -----------------------------------------------------------------------------------


def test_launch_creates_one_control_per_tier_arm_and_seed(db):
    campaign = make_campaign(tiers=["tiny-1m", "tiny-5m"], seed=10, controls=ControlsConfig(True, True, 2))
    runs = lifecycle.launch(campaign, enqueue=False)
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.RUNNING and campaign.started_at is not None
    keys = sorted((r.tier, r.arm, r.seed) for r in runs)
    assert keys == sorted(
        (tier, arm, seed)
        for tier in ("tiny-1m", "tiny-5m")
        for arm in ("isolated", "filtered")
        for seed in (10, 11)
    )
    assert all(r.state == ControlRun.State.QUEUED for r in runs)
    only_filtered = make_campaign(controls=ControlsConfig(isolated=False, filtered=True, seeds=1))
    assert [(r.arm, r.seed) for r in lifecycle.launch(only_filtered, enqueue=False)] == [("filtered", 0)]


def test_transitions_follow_the_state_machine(db):
    campaign = make_campaign()
    with pytest.raises(lifecycle.LifecycleError):
        lifecycle.pause(campaign)
    lifecycle.launch(campaign, enqueue=False)
    with pytest.raises(lifecycle.LifecycleError):
        lifecycle.launch(campaign, enqueue=False)
    lifecycle.pause(campaign)
    assert campaign.state == Campaign.State.PAUSED
    lifecycle.resume(campaign)
    assert campaign.state == Campaign.State.RUNNING
    lifecycle.stop(campaign)
    assert campaign.state == Campaign.State.STOPPED and campaign.finished_at is not None
    for action in (lifecycle.resume, lifecycle.pause, lifecycle.stop):
        with pytest.raises(lifecycle.LifecycleError):
            action(campaign)
    lifecycle.fail(campaign, "too late")  # a finished campaign keeps its first outcome
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.STOPPED and campaign.failure_reason == ""


def test_the_buttons_move_the_campaign_and_say_so(staff):
    campaign = make_campaign(controls=ControlsConfig(False, False, 0))
    response = staff.post(reverse("campaign-launch", args=[campaign.pk]), follow=True)
    assert "is running" in response.content.decode()
    staff.post(reverse("campaign-pause", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PAUSED
    response = staff.post(reverse("campaign-pause", args=[campaign.pk]), follow=True)
    assert "cannot make it paused" in response.content.decode()  # an error message, not a crash
    staff.post(reverse("campaign-resume", args=[campaign.pk]))
    staff.post(reverse("campaign-stop", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.STOPPED


def test_pause_and_resume_are_pushed_to_workers_and_dashboards(db):
    campaign = make_campaign()
    lifecycle.launch(campaign, enqueue=False)
    layer = get_channel_layer()

    async def listen():
        workers, viewers = await layer.new_channel(), await layer.new_channel()
        await layer.group_add(worker_group(campaign.pk), workers)
        await layer.group_add(campaign_group(campaign.pk), viewers)
        return workers, viewers

    async def receive(channel):
        return await asyncio.wait_for(layer.receive(channel), timeout=10)

    workers, viewers = asyncio.run(listen())
    lifecycle.pause(campaign)
    assert asyncio.run(receive(workers))["state"] == "paused"
    assert asyncio.run(receive(viewers)) == {"type": "campaign.state", "state": "paused", "reason": ""}
    lifecycle.resume(campaign)
    assert asyncio.run(receive(workers)) == {"type": "campaign.state", "state": "running", "reason": ""}


def test_a_failed_campaign_shows_its_reason(anonymous):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    lifecycle.fail(campaign, "control isolated/tiny-1m/seed 0 failed: RuntimeError: out of memory")
    page = anonymous.get(campaign.get_absolute_url()).content.decode()
    assert "Failed:" in page and "RuntimeError: out of memory" in page
    assert 'id="failure" class="failure" hidden' not in page


def test_a_campaign_completes_when_every_live_node_and_control_is_done(db):
    campaign = make_campaign(controls=ControlsConfig(True, False, 1), rounds=3)
    lifecycle.launch(campaign, enqueue=False)
    token, _ = create_token(campaign)
    node = WorkerNode.objects.create(campaign=campaign, node_id="n1", token=token, tier="tiny-1m", round=3)
    straggler = WorkerNode.objects.create(
        campaign=campaign, node_id="n2", token=token, tier="tiny-1m", round=1
    )
    assert lifecycle.complete_finished() == []  # a control still runs, a node lags
    ControlRun.objects.filter(campaign=campaign).update(state=ControlRun.State.COMPLETED, round=3)
    assert lifecycle.complete_finished() == []
    WorkerNode.objects.filter(pk=straggler.pk).update(
        state=WorkerNode.State.OFFLINE
    )  # gone: no longer waited for
    assert lifecycle.complete_finished() == [campaign.pk]
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.COMPLETED and campaign.finished_at is not None
    assert node.round == 3


def test_a_campaign_completes_after_its_finished_workers_have_left(db):
    # The demo's case: each worker leaves (offline) when it has run the rounds, and the last
    # control finishes later.
    campaign = make_campaign(controls=ControlsConfig(True, False, 1), rounds=3)
    lifecycle.launch(campaign, enqueue=False)
    token, _ = create_token(campaign)
    WorkerNode.objects.create(
        campaign=campaign, node_id="n1", token=token, tier="tiny-1m", round=3, state=WorkerNode.State.OFFLINE
    )
    WorkerNode.objects.create(
        campaign=campaign, node_id="n2", token=token, tier="tiny-1m", round=1, state=WorkerNode.State.BANNED
    )
    assert lifecycle.complete_finished() == []  # the control still runs
    ControlRun.objects.filter(campaign=campaign).update(state=ControlRun.State.COMPLETED, round=3)
    assert lifecycle.complete_finished() == [campaign.pk]
    # Nobody finished: every volunteer left early. The campaign waits for others.
    waiting = make_campaign(controls=ControlsConfig(False, False, 0), rounds=3)
    lifecycle.launch(waiting, enqueue=False)
    token, _ = create_token(waiting)
    WorkerNode.objects.create(
        campaign=waiting, node_id="n3", token=token, tier="tiny-1m", round=2, state=WorkerNode.State.OFFLINE
    )
    assert lifecycle.complete_finished() == []


# --- tokens --------------------------------------------------------------------------------------


def test_tokens_are_shown_once_stored_hashed_and_revocable(staff):
    campaign = make_campaign()
    response = staff.post(reverse("campaign-tokens", args=[campaign.pk]), {"label": "alice's laptop"})
    page = response.content.decode()
    token = WorkerToken.objects.get()
    secret = page.split('<pre id="token-secret">')[1].split("</pre>")[0]
    assert token.token_hash == digest(secret) and secret not in token.token_hash
    assert response["Cache-Control"] == "no-store"
    later = staff.get(reverse("campaign-tokens", args=[campaign.pk])).content.decode()
    assert secret not in later and token.prefix in later and "alice&#x27;s laptop" in later
    staff.post(reverse("token-revoke", args=[campaign.pk, token.pk]))
    token.refresh_from_db()
    assert token.revoked
    assert "revoked" in staff.get(reverse("campaign-tokens", args=[campaign.pk])).content.decode()


# --- status page and export ----------------------------------------------------------------------


def add_metrics(campaign: Campaign) -> None:
    token, _ = create_token(campaign)
    node = WorkerNode.objects.create(
        campaign=campaign, node_id="w1", token=token, tier="tiny-1m", connected=True, round=2
    )
    for number in range(2):
        RoundMetrics.objects.create(
            campaign=campaign,
            arm="swarm",
            tier="tiny-1m",
            agent="node:w1",
            node=node,
            round=number,
            reward=0.25 * (number + 1),
            metrics={"reward": 0.9, "entropy": 1.5 + number, "batch/external_used": 2.0},
        )
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    RoundMetrics.objects.create(
        campaign=campaign,
        arm="isolated",
        tier="tiny-1m",
        agent=f"control:{run.pk}",
        control_run=run,
        round=0,
        reward=0.1,
        metrics={"reward": 0.1, "step_time": 0.5},
    )


def test_status_page_lists_campaigns_with_live_counts(anonymous):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    add_metrics(campaign)
    page = anonymous.get("/").content.decode()
    assert campaign.name in page and campaign.get_absolute_url() in page
    data = anonymous.get("/api/status").json()
    row = next(c for c in data["campaigns"] if c["id"] == campaign.pk)
    assert (row["live_workers"], row["workers"], row["state"]) == (1, 1, "running")
    assert data["totals"]["running"] == 1 and data["totals"]["live_workers"] == 1


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_metrics_export_as_csv_and_json(anonymous):
    """(The test client reads the async stream synchronously, hence the ignored warning; the real
    server streams it: tests/test_dashboard.py.)"""
    campaign = make_campaign(state=Campaign.State.RUNNING)
    add_metrics(campaign)
    url = reverse("api-metrics", args=[campaign.pk])
    response = anonymous.get(url, {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert f"campaign-{campaign.pk}-metrics.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response).decode())))
    assert [(r["arm"], r["agent"], r["round"], float(r["reward"])) for r in rows] == [
        ("swarm", "node:w1", "0", 0.25),
        ("swarm", "node:w1", "1", 0.5),
        ("isolated", rows[2]["agent"], "0", 0.1),
    ]
    assert rows[1]["entropy"] == "2.5" and rows[2]["entropy"] == "" and rows[2]["step_time"] == "0.5"
    assert rows[0]["metrics/reward"] == "0.9"  # the worker's own claim, apart from the verified reward
    body = json.loads(b"".join(anonymous.get(url, {"format": "json", "arm": "swarm"})))
    assert body["campaign"] == campaign.pk and body["level"] == "agent"
    assert [(r["round"], r["reward"], r["metrics"]["entropy"]) for r in body["rows"]] == [
        (0, 0.25, 1.5),
        (1, 0.5, 2.5),
    ]
    body = anonymous.get(url, {"format": "json", "level": "round"}).json()
    assert [(r["arm"], r["round"], r["agents"], r["reward_mean"]) for r in body["rows"]] == [
        ("isolated", 0, 1, 0.1),
        ("swarm", 0, 1, 0.25),
        ("swarm", 1, 1, 0.5),
    ]
    rounds_csv = anonymous.get(url, {"format": "csv", "level": "round", "from_round": "1"}).content.decode()
    assert rounds_csv.splitlines()[0].startswith("campaign,arm,tier,round,agents,reward_mean")
    assert len(rounds_csv.splitlines()) == 2
    assert anonymous.get(url, {"format": "xml"}).status_code == 400
    assert anonymous.get(url, {"from_round": "x"}).status_code == 400
