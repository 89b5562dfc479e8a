"""The campaign form: presets, a valid POST and its stored settings, every validation error next to
its field, tiers no seen worker can run, local workers started from the form."""

from __future__ import annotations

import html
import math
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import create_token, digest
from tests.campaigns.helpers import form_data, make_campaign
from worker.shared.campaign import ControlsConfig, cpu_demo_config


def field_errors(response, field: str) -> list[str]:
    return list(response.context["form"].errors.get(field, []))


def test_presets_fill_the_form(staff):
    form = staff.get(reverse("campaign-new") + "?preset=cpu-demo").context["form"]
    assert form.initial["tiers"] == ["tiny-1m", "tiny-5m"]
    assert form.initial["task_preset"] == "cpu" and form.initial["rounds"] == 40
    form = staff.get(reverse("campaign-new") + "?preset=sapo-table&num_local=6&num_external=2").context[
        "form"
    ]
    assert form.initial["tiers"] == ["qwen2.5-0.5b"] and form.initial["task_preset"] == "rgym9"
    assert (form.initial["num_local"], form.initial["num_external"]) == (6, 2)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("num_local=²&num_external=2", (4, 2)),  # "²".isdigit() is true, int("²") raises
        ("num_local=6&num_external=٣", (6, 3)),  # an Arabic-Indic 3 is the number 3
        ("num_local=65&num_external=-1", (4, 4)),  # outside the fields' bounds: the preset's
        ("num_local=&num_external=x", (4, 4)),
    ],
)
def test_prefill_is_parsed_by_the_form_fields_and_a_bad_value_is_ignored(staff, query, expected):
    response = staff.get(reverse("campaign-new") + "?preset=sapo-table&" + query)
    assert response.status_code == 200
    form = response.context["form"]
    assert (form.initial["num_local"], form.initial["num_external"]) == expected


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
    # The off-policy correction is stored only when chosen, and reaches the workers' GRPOConfig.
    response = staff.post(reverse("campaign-new"), form_data(name="corrected", external_is_correction="on"))
    assert response.status_code == 302, response.context["form"].errors
    corrected = Campaign.objects.get(name="corrected").settings
    assert corrected.grpo == {"num_iterations": 2, "external_importance_sampling_correction": True}
    assert corrected.grpo_config("tiny-1m").external_importance_sampling_correction
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
    (
        {"task_preset": "custom", "custom_tasks": "spell_backward 1 data_file=/etc/passwd"},
        "custom_tasks",
        "data_file names a file on the coordinator",
    ),
    ({"task_preset": "custom", "custom_tasks": "chain_sum\nchain_sum"}, "custom_tasks", "duplicate"),
    ({"task_preset": "nope"}, "task_preset", "valid choice"),
    ({"tiers": []}, "tiers", "required"),
    ({"tiers": ["gpt-5"]}, "tiers", "valid choice"),
    ({"group_size": "1"}, "group_size", "greater than or equal to 2"),
    ({"questions_per_round": "65"}, "questions_per_round", "less than or equal to 64"),
    ({"num_local": "5"}, "num_local", "I = 5 exceeds the 4 questions per round"),
    ({"num_external": "3", "batch_rule": "decay"}, "num_external", "decay rule ends at I + J = 5"),
    ({"batch_rule": "backfill", "local_strategy": "uniform"}, "local_strategy", "backfill fills"),
    ({"batch_rule": "sideways"}, "batch_rule", "valid choice"),
    ({"decay_rounds": "0"}, "decay_rounds", "greater than or equal to 1"),
    ({"local_strategy": "best"}, "local_strategy", "valid choice"),
    ({"rounds": "0"}, "rounds", "greater than or equal to 1"),
    ({"control_seeds": "17"}, "control_seeds", "less than or equal to 16"),
    ({"replicates": "0"}, "replicates", "greater than or equal to 1"),
    ({"replicates": "65"}, "replicates", "less than or equal to 64"),
    ({"eps_low": "1.5"}, "eps_low", "less than or equal to 0.99"),
    ({"eps_high": "0.1"}, "eps_high", "must not be below"),
    ({"num_iterations": "0"}, "num_iterations", "greater than or equal to 1"),
    ({"temperature": "0"}, "temperature", "greater than or equal to 0.01"),
    ({"max_new_tokens": "0"}, "max_new_tokens", "greater than or equal to 1"),
    ({"learning_rate": "-1"}, "learning_rate", "must be above 0"),
    ({"learning_rate": "0"}, "learning_rate", "must be above 0"),
    # 1e6 was stored (#28); the bound is 1e-2, 100x the tiers' largest default
    ({"learning_rate": "1000000"}, "learning_rate", "less than or equal to 0.01"),
    (
        {"task_preset": "custom", "custom_tasks": "chain_sum 1 max_digits=5000 max_terms=2000"},
        "custom_tasks",
        "max_digits=5000 is too large; at most 40",
    ),
    ({"name": ""}, "name", "required"),
]


@pytest.mark.parametrize(("overrides", "field", "fragment"), INVALID, ids=[i[2][:30] for i in INVALID])
def test_each_validation_error_is_shown_next_to_its_field(staff, overrides, field, fragment):
    response = staff.post(reverse("campaign-new"), form_data(**overrides))
    assert response.status_code == 200
    errors = field_errors(response, field)
    assert any(fragment in error for error in errors), response.context["form"].errors
    page = response.content.decode()
    # Listed above the form too, with a link to the field (its own message may be far below).
    summary = page[page.index('id="form-errors"') : page.index("<fieldset")]
    assert f'href="#field-{field}"' in summary and 'role="alert"' in page
    start = page.index(f'id="field-{field}"')
    assert "errorlist" in page[start : page.index("</div>\n", page.index("errorlist", start)) + 1]
    assert not Campaign.objects.exists()


def test_independent_errors_are_reported_together(staff):
    response = staff.post(
        reverse("campaign-new"),
        form_data(
            num_local="0",
            num_external="0",
            eps_low="0.3",
            eps_high="0.1",
            task_preset="custom",
            custom_tasks="bogus 1",
            rounds="0",
        ),
    )
    # Cross-field rules (I + J, ε order), a task error and a field's own bound, all at once.
    assert field_errors(response, "num_local") == ["I + J must be at least 1: a node must train on something"]
    assert field_errors(response, "eps_high") == ["the upper clip ε must not be below the lower one"]
    assert field_errors(response, "custom_tasks") and field_errors(response, "rounds")


def test_every_field_has_help_text(staff):
    form = staff.get(reverse("campaign-new")).context["form"]
    missing = [name for name, field in form.fields.items() if not field.help_text and name != "preset"]
    assert not missing


def test_edited_preset_lines_are_stored_as_typed(staff):
    """With a preset chosen, lines that differ from it are custom tasks (never dropped); lines
    left as the preset wrote them keep the preset."""
    typed = "chain_sum 1 min_digits=1 max_digits=3"
    response = staff.post(reverse("campaign-new"), form_data(task_preset="cpu", custom_tasks=typed))
    assert response.status_code == 302, response.context["form"].errors
    assert Campaign.objects.get().settings.tasks == [
        {"name": "chain_sum", "weight": 1.0, "config": {"min_digits": 1, "max_digits": 3}}
    ]
    unchanged = (
        staff.get(reverse("campaign-new") + "?preset=cpu-demo").context["form"].initial["custom_tasks"]
    )
    response = staff.post(
        reverse("campaign-new"),
        form_data(name="kept", task_preset="cpu", custom_tasks=unchanged.replace("\n", "\r\n")),
    )
    assert response.status_code == 302
    assert Campaign.objects.get(name="kept").settings.tasks == cpu_demo_config().tasks


def test_too_large_task_settings_are_refused_quickly(staff):
    started = time.perf_counter()
    response = staff.post(
        reverse("campaign-new"),
        form_data(task_preset="custom", custom_tasks="chain_sum 1 max_digits=5000 max_terms=2000"),
    )
    elapsed = time.perf_counter() - started
    assert "max_digits=5000 is too large" in field_errors(response, "custom_tasks")[0]
    assert elapsed < 2.0, f"validation took {elapsed:.1f} s"
    response = staff.post(
        reverse("campaign-new"), form_data(task_preset="custom", custom_tasks="chain_sum 1 size=10")
    )
    assert "chosen by the coordinator" in field_errors(response, "custom_tasks")[0]


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
    monkeypatch.setattr("swarm_app.web.forms.local_hardware", lambda: dict(CPU))
    response = staff.post(
        reverse("campaign-new"), form_data(tiers=["qwen2.5-0.5b"], local_workers="2", allow_unseen_tiers="on")
    )
    errors = field_errors(response, "tiers")
    assert errors and "local workers run on this machine" in errors[0] and "GPU" in errors[0]
    assert not Campaign.objects.exists()


def test_the_form_starts_local_workers_for_a_demo_campaign(staff, settings, monkeypatch):
    settings.SWARM_ALLOW_LOCAL_WORKERS = True
    monkeypatch.setattr("swarm_app.web.forms.local_hardware", lambda: dict(CPU))
    started = []

    class FakePopen:
        pid = 4242

        def __init__(self, args, env, **kwargs):
            started.append((args, env))

        def wait(self):
            return 0

    monkeypatch.setattr("swarm_app.runs.local_workers.subprocess.Popen", FakePopen)
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


def test_the_form_offers_every_control_kind_and_sapo_table_turns_on_the_falsifiers(staff):
    """Plain, filtered (labelled a sanity arm), self-replay and over-generation controls, each
    with help saying what it controls for; the sapo-table preset turns on the two that can tell
    sharing from curation and reuse; cpu-demo runs plain and self-replay (same cost, the
    headline's reference), not the filtered sanity arm (issue #26)."""
    response = staff.get(reverse("campaign-new") + "?preset=sapo-table")
    form, page = response.context["form"], response.content.decode()
    for field in (
        "controls_isolated",
        "controls_filtered",
        "controls_self_replay",
        "controls_over_generation",
    ):
        assert f'id="id_{field}"' in page and form.fields[field].help_text
    assert "sanity" in form.fields["controls_filtered"].label
    assert "reuse" in form.fields["controls_self_replay"].help_text
    assert "more generation" in form.fields["controls_over_generation"].help_text
    assert form.initial["controls_self_replay"] and form.initial["controls_over_generation"]
    assert form.initial["controls_reference"] == "isolated"  # sapo-table: the paper's 8/0
    demo = staff.get(reverse("campaign-new") + "?preset=cpu-demo").context["form"].initial
    assert demo["controls_isolated"] and demo["controls_self_replay"]
    assert not demo["controls_filtered"] and not demo["controls_over_generation"]
    assert demo["controls_reference"] == "self"
    # Independent swarms (issue #26): the demo's 4 nodes per tier as 2 swarms, sapo-table 4
    # swarms against 4 seeds of each control, so that both gains have an interval and the
    # headline can reach a verdict (issue #47: 3 vs 3 cannot).
    assert demo["replicates"] == 2
    assert (form.initial["replicates"], form.initial["control_seeds"]) == (4, 4)
    assert "not independent" in form.fields["replicates"].help_text


def test_the_headline_control_must_be_one_the_campaign_runs(staff):
    """The reference control (the dashboard's headline gain) is chosen in the form; one the
    campaign does not run is refused next to the field, and nothing is stored."""
    response = staff.post(
        reverse("campaign-new"), form_data(controls_filtered=None, controls_reference="filtered")
    )
    assert response.status_code == 200 and not Campaign.objects.exists()
    assert any("must be one the campaign runs" in e for e in field_errors(response, "controls_reference"))
    response = staff.post(
        reverse("campaign-new"), form_data(controls_self_replay="on", controls_reference="self")
    )
    assert response.status_code == 302, response.context["form"].errors
    assert Campaign.objects.get().settings.controls.reference_kind() == "self"


def test_the_organizer_chooses_self_replay_and_over_generation(staff):
    response = staff.post(
        reverse("campaign-new"),
        form_data(controls_self_replay="on", controls_over_generation="on", control_seeds="2"),
    )
    assert response.status_code == 302, response.context["form"].errors
    config = Campaign.objects.get().settings
    assert config.controls.self_replay and config.controls.over_generation
    assert config.control_kinds() == ["isolated", "filtered", "self", "dyn"]
    assert config.control_run_count() == 1 * 4 * 2
    # Only plain and filtered train on I + J of the round's own B groups: with those off, a
    # batch larger than B is fine for over-generation (it generates up to 2 (I + J) questions).
    response = staff.post(
        reverse("campaign-new"),
        form_data(
            name="dyn only",
            num_external="4",
            controls_isolated=None,
            controls_filtered=None,
            controls_over_generation="on",
        ),
    )
    assert response.status_code == 302, response.context["form"].errors
    config = Campaign.objects.get(name="dyn only").settings
    assert config.control_kinds() == ["dyn"]
    agent = config.control_agent_config("tiny-1m", 0, "dyn")
    assert (agent.num_local, agent.num_external, agent.max_questions) == (6, 0, 12)


def test_self_replay_without_j_is_refused_next_to_its_checkbox(staff):
    response = staff.post(
        reverse("campaign-new"),
        form_data(
            num_external="0", controls_isolated=None, controls_filtered=None, controls_self_replay="on"
        ),
    )
    assert response.status_code == 200 and not Campaign.objects.exists()
    assert any("needs J >= 1" in error for error in field_errors(response, "controls_self_replay"))
    page = response.content.decode()
    start = page.index('id="field-controls_self_replay"')
    assert "errorlist" in page[start : page.index("</div>\n", page.index("errorlist", start)) + 1]


def launch_from_link(staff, query: str, **changes) -> object:
    """GET the form from one of the page's arm links, POST what it shows (tiny-1m instead of the
    preset's GPU tier), and return the response."""
    initial = staff.get(reverse("campaign-new") + "?" + query).context["form"].initial
    post = {key: value for key, value in initial.items() if value is not None and value is not False}
    post.update({key: "on" for key, value in initial.items() if value is True})
    post.update({"tiers": ["tiny-1m"], "allow_unseen_tiers": "on", "name": query, **changes})
    return staff.post(reverse("campaign-new"), {k: v for k, v in post.items() if v is not None})


@pytest.mark.parametrize(
    ("query", "arm", "questions", "isolated"),
    [
        ("preset=sapo-table&questions_per_round=4", "4/4@B4", 4, (8, 8)),  # the paper's semantics
        (
            "preset=sapo-table&batch_rule=backfill&num_local=8&num_external=8&controls_self_replay=false",
            "backfill",
            8,
            (8, 8),
        ),
        ("preset=sapo-table&batch_rule=decay&decay_rounds=30", "4/4-decay", 8, (8, 8)),
        ("preset=sapo-table&external_is_correction=true", "4/4-is", 8, (8, 8)),
    ],
)
def test_the_study_arms_links_launch_campaigns_of_those_arms(staff, query, arm, questions, isolated):
    """Issue #29's arms as campaign settings: each link on the form makes a campaign whose swarm
    runs that arm; its plain control is the paper's 8/0 (8 questions generated, 8 trained on),
    also where the swarm generates only 4."""
    response = launch_from_link(staff, query)
    assert response.status_code == 302, response.context["form"].errors
    config = Campaign.objects.get(name=query).settings
    assert config.swarm_arm().name == arm and config.questions_per_round == questions
    control = config.control_agent_config("tiny-1m", 0, "isolated")
    assert (control.questions_per_round, control.num_local, control.num_external) == (*isolated, 0)


def test_batch_rules_that_cannot_run_are_refused_next_to_their_field(staff):
    response = launch_from_link(staff, "preset=sapo-table&batch_rule=backfill&num_local=8&num_external=8")
    assert response.status_code == 200 and not Campaign.objects.exists()
    assert any("backfill" in e for e in field_errors(response, "controls_self_replay"))
    response = launch_from_link(
        staff, "preset=sapo-table&batch_rule=decay", num_local="6", controls_self_replay=None
    )
    assert response.status_code == 200 and not Campaign.objects.exists()
    assert any("decay rule ends at I + J = 10" in e for e in field_errors(response, "num_external"))


def test_the_organizer_chooses_what_becomes_of_rollouts_past_the_window(staff):
    """pool_retention (issue 31 item 2): archive by default, delete when chosen; anything else
    refused by the form."""
    from tests.campaigns.helpers import form_data

    assert staff.get(reverse("campaign-new")).context["form"].initial["pool_retention"] == "archive"
    for choice, expected in (("delete", "delete"), (None, "archive")):
        staff.post(reverse("campaign-new"), form_data(name=f"retention {choice}", pool_retention=choice))
        assert Campaign.objects.get(name=f"retention {choice}").settings.pool_retention == expected
    response = staff.post(reverse("campaign-new"), form_data(name="bad", pool_retention="keep-forever"))
    assert "pool_retention" in response.context["form"].errors


# --- sizing before launch (issue #47) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("swarms", "seeds", "splits", "smallest", "decides"),
    [
        (2, 3, 10, "0.2", False),
        (3, 5, 56, "0.036", True),
        (4, 4, 70, "0.029", True),
        (3, 3, 20, "0.1", False),
    ],
)
def test_the_sizing_line_gives_the_smallest_p_of_the_exact_counts(
    staff, swarms, seeds, splits, smallest, decides
):
    """The form's sizing line for R swarms against S seeds: the exact two-sided permutation
    test's smallest p, 2 / C(R + S, R) (10, 56, 70 and 20 ways to split the units), the smallest
    gain it detects with 80 % power from the study's spread where it can reach 0.05, and a
    warning where it cannot; on the form's page (as posted) and as form.js fetches it."""
    assert math.comb(swarms + seeds, swarms) == splits
    assert float(smallest) == pytest.approx(2 / splits, abs=0.0005)
    response = staff.post(
        reverse("campaign-new"), form_data(name="", replicates=swarms, control_seeds=seeds, tiers=["tiny-1m"])
    )
    page = response.content.decode()
    line = re.search(r'<p id="sizing" class="([^"]*)"[^>]*>([^<]*)</p>', page)
    assert line, page
    text = html.unescape(line.group(2))
    assert text.startswith(
        f"Sizing: {swarms} swarms per model size against {seeds} seeds per control: the smallest p "
        f"the exact permutation test over them can give is {smallest}"
    ), text
    assert ("sizing-warning" in line.group(1)) != decides
    if decides:
        detectable = re.search(r"the smallest gain it detects with 80 % power is about (\d+\.\d) %", text)
        assert detectable and 3.0 < float(detectable.group(1)) < 8.0, text
        assert "docs/experiments/sapo-table-cpu-v3.md" in text
    else:
        assert "no difference can be shown at the 5 % level, whatever the results" in text
    fetched = staff.get(reverse("campaign-sizing"), {"replicates": swarms, "seeds": seeds, "tiers": 1}).json()
    assert fetched["text"] == text and fetched["can_decide"] == decides
    assert fetched["min_p"] == pytest.approx(2 / splits)


def test_the_presets_are_sized_sapo_table_to_decide_the_demo_to_describe(staff):
    """sapo-table (4 vs 4) can reach a verdict on its headline; cpu-demo (2 vs 3) cannot, and its
    form says so before launch."""
    table = staff.get(reverse("campaign-new") + "?preset=sapo-table").context["sizing"]
    assert table.can_decide and table.min_p == pytest.approx(2 / 70)
    demo = staff.get(reverse("campaign-new") + "?preset=cpu-demo")
    assert not demo.context["sizing"].can_decide and demo.context["sizing"].min_p == pytest.approx(0.2)
    assert 'class="sizing sizing-warning"' in demo.content.decode()
    assert (
        staff.get(reverse("campaign-sizing"), {"replicates": "x", "seeds": 3, "tiers": 1}).status_code == 400
    )
