"""The run page's words (issue #26 item 6): when a campaign started, how long it has run, an
estimate of the time each arm still needs, the headline gain per tier in one line, the verdict
at the end, and the campaign's settings as labelled fields.

Plain functions of the dashboard's tables payload (dashboard.tables / cached_tables), so that
the page, its JSON (``/api/campaigns/<id>/run``, which static/campaigns/run.js renders live) and
the tests all read one computation. It is long because it is every sentence of the page in one
place (estimates, headline, verdict on training reward and held-out accuracy, settings), so
that the words and the numbers they judge cannot drift apart. Definitions (also in docs/web.md,
"The run page"):

* **rounds done** of an arm: the rounds every one of its live agents has reported
  (payload ``settled``), the same rounds the summary sums.
* **time left** (while running): (campaign rounds - rounds done) / rate, the rate being the
  arm's current one (payload ``pace``: its last settled rounds, at most 5, over the time they
  took to settle), or before its second settled round its rounds done over the time since the
  campaign started; "–" until an arm has a round.
* **headline gain**: ``summary[tier].gain``, the swarm's gain in cumulative reward over the
  campaign's reference control, with its 95% t interval and both arms' n; where the design
  cannot reach p < 0.05, the sentence saying so (:func:`design_text`).
* **verdict** (once finished): per tier, from that gain and its windows (thirds of H), judged by
  the exact permutation test over units (swarm_app/web/estimates.py, issue #47):

  - "higher" or "lower" only when the test rejects at 5 % (p <= 0.05) and the 95 % interval
    lies on the same side of 0;
  - "cannot decide" when the design cannot reach p <= 0.05 at all (its smallest p,
    2 / C(R + S, R) with R swarms and S seeds, is above 0.05: 2 vs 3, 3 vs 3, 3 vs 4): the page
    says so in words and gives the gain as a description, not a finding;
  - "none" (no difference shown) otherwise; no verdict where there is no interval (one swarm,
    or one control seed).

  The windows are judged the same way on their Holm-adjusted p (over the windows of every
  tier), or, where even the smallest adjusted p possible is above 0.05, described without a
  judgement.
  The held-out accuracy (issue #48: fresh questions none of them trained on, scored by the
  coordinator) is judged the same way at the latest evaluation both arms were scored on
  (``summary[tier]["held_out"]``, held_out.py): the swarm's accuracy minus the reference
  control's in accuracy points, its Welch t interval over swarms and seeds, the permutation
  test's p and the same "cannot decide" sentence where the design cannot reach p <= 0.05
  (``held_out_judgement``; "unknown" where no evaluation has both arms). The n says what is independent: control seeds and swarms are independent runs;
  the nodes of one swarm share its pool, so each swarm counts once, whatever its nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from worker.shared.campaign import CampaignConfig
from worker.shared.tiers import TIERS

FINISHED = ("completed", "stopped", "failed")
DASH = "–"
# What the page calls each control in its sentences (the payload's arm labels are column headers).
CONTROL_WORDS = {
    "isolated": "plain isolated",
    "filtered": "filtered isolated",
    "self": "self-replay",
    "dyn": "over-generation",
}
STRATEGY_WORDS = {
    "nonzero_advantage": "only groups with a nonzero advantage (not all G rewards equal)",
    "uniform": "any group, uniformly",
}
INDEPENDENCE = (
    "What is independent: each control seed is a separate run, and each swarm is a separate "
    "pool, so seeds and swarms are independent replicates. The nodes of one swarm share its "
    "pool and train on each other's rollouts, so they are not: each swarm counts once, whatever "
    "its nodes, and a campaign with one swarm per model size has no interval for its gain."
)
ETA_NOTE = (
    "Time left is an estimate from each arm's current rate: its last settled rounds (reported by "
    "all of its agents; at most 5) over the time they took, or before its second round its "
    "rounds done over the time since the campaign started; \u201c–\u201d until the arm has a round."
)


# --- numbers in words ----------------------------------------------------------------------------


def pct(value: float | None) -> str:
    """A gain as the page writes it: "+40.0 %", "-4.4 %", "–" when unknown."""
    if value is None or not math.isfinite(value):
        return DASH
    return f"{'+' if value >= 0 else ''}{value:.1f} %"


def interval_text(low: float | None, high: float | None) -> str | None:
    if low is None or high is None:
        return None
    return f"[{pct(low)}, {pct(high)}]"


def duration_text(seconds: float | None) -> str:
    """12 s, 4 min 05 s, 2 h 03 min, 3 d 4 h ("–" when unknown); static/campaigns/run.js has
    the same function for the elapsed time it ticks."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return DASH
    total = int(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    if total < 86400:
        return f"{total // 3600} h {total % 3600 // 60:02d} min"
    return f"{total // 86400} d {total % 86400 // 3600} h"


def eta_text(seconds: float) -> str:
    """A time left, no more precise than an estimate deserves (whole minutes, hours, days)."""
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    if minutes < 24 * 60:
        return f"about {minutes // 60} h {minutes % 60:02d} min"
    hours = round(seconds / 3600)
    return f"about {hours // 24} d {hours % 24} h"


def when_text(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else DASH


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- the parts of the run page -------------------------------------------------------------------

STATE_WORDS = {
    "pending": "Not launched yet: nothing has run, so there is no time, estimate or verdict yet.",
    "running": "Running: the numbers below are provisional and change as rounds arrive.",
    "paused": "Paused: no new rounds until an organizer resumes it; the estimates wait.",
    "completed": "Completed: every arm ran its {rounds} rounds; the numbers below are final.",
    "stopped": "Stopped by an organizer before the end: the numbers below are those of the rounds run until then.",
    "failed": "Failed: the numbers below are those of the rounds run until the failure.",
}
VERDICT_TITLES = {
    "completed": "Verdict",
    "stopped": "Verdict on the rounds run before the stop",
    "failed": "Verdict on the rounds run before the failure",
}


def state_text(state: str, rounds: int) -> str:
    return STATE_WORDS.get(state, f"{state}.").format(rounds=rounds)


def reference_words(tables: Mapping[str, Any], reference: str | None) -> str:
    """The reference control in a sentence: "self-replay (4/4-self)"."""
    if not reference:
        return "no control"
    words = CONTROL_WORDS.get(reference) or next(
        (a["label"] for a in tables.get("arms", []) if a["arm"] == reference), reference
    )
    name = next((c["arm_name"] for c in tables.get("controls", []) if c["arm"] == reference), None)
    return f"{words} ({name})" if name and name != reference else words


def arm_words(tables: Mapping[str, Any], arm: str) -> str:
    if arm == "swarm":
        return "swarm"
    return reference_words(tables, arm)


def estimates(tables: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Per tier and arm: rounds done of the campaign's rounds and, while running, the time left
    at its current rate; the campaign's time left (its slowest arm) once every arm has a rate."""
    campaign = tables["campaign"]
    state, rounds = campaign["state"], int(campaign.get("rounds") or 0)
    started = parse_time(campaign.get("started_at"))
    elapsed = (now - started).total_seconds() if started and state in ("running", "paused") else None
    settled = tables.get("settled") or {}
    paces = tables.get("pace") or {}
    rows = []
    lefts: list[float | None] = []
    for tier in campaign.get("tiers", []):
        for entry in tables.get("arms", []):
            arm = entry["arm"]
            done = min(int((settled.get(tier) or {}).get(arm, 0)), rounds) if rounds else 0
            current = (paces.get(tier) or {}).get(arm)
            rate = done / elapsed if elapsed and done else None  # rounds per second
            if current and rate:
                rate = current["rounds"] / current["seconds"]
            left: float | None = None
            if done >= rounds > 0:
                words = "done"
                left = 0.0
            elif state == "running":
                if rate:
                    left = (rounds - done) / rate
                    words = (
                        f"{eta_text(left)} left ({rate * 60:.2g} rounds/min {'now' if current else 'so far'})"
                    )
                else:
                    words = f"time left {DASH} (no round yet, so no rate)"
            elif state == "paused":
                words = "paused"
            else:
                words = ""
            lefts.append(left)
            text = f"{done} of {rounds} rounds" + (f" · {words}" if words else "")
            rows.append(
                {
                    "tier": tier,
                    "arm": arm,
                    "label": arm_words(tables, arm),
                    "done": done,
                    "rounds": rounds,
                    "rate_per_min": rate * 60 if rate else None,
                    "left_s": left,
                    "text": text,
                }
            )
    total = None
    known = [left for left in lefts if left is not None]
    if state == "running" and lefts and len(known) == len(lefts):
        total = f"The campaign: {eta_text(max(known))} left (its slowest arm; an estimate)."
    return {"rows": rows, "total": total, "note": ETA_NOTE if state == "running" else None}


ALPHA = 0.05  # the level a verdict is reached at


def p_text(p: float) -> str:
    """A p-value as the page writes it: two significant digits (0.2, 0.057, 0.0079)."""
    return f"{p:.2g}"


def design_text(gain: Mapping[str, Any]) -> str | None:
    """The sentence for a design that cannot reach a verdict (its smallest p, ``min_p``, above
    ALPHA), from its numbers: "2 swarms against 3 seeds: no difference can be shown at the 5 %
    level; the smallest p possible is 0.2". None where the design can reach one."""
    min_p = gain.get("min_p")
    if min_p is None or min_p <= ALPHA:
        return None
    n_swarms, n_seeds = (gain.get("n") or [0, 0])[:2]
    return (
        f"{plural(n_swarms, 'swarm')} against {plural(n_seeds, 'seed')}: no difference can be shown "
        f"at the 5 % level; the smallest p possible is {p_text(min_p)}"
    )


def headline(tables: Mapping[str, Any], tier: str) -> dict[str, Any]:
    """The tier's headline gain in one line: what is compared, the value, its interval (or why
    none), n and, where the design cannot reach a verdict, the sentence saying so."""
    summary = (tables.get("summary") or {}).get(tier) or {}
    reference = summary.get("reference") or tables.get("reference")
    finished = tables["campaign"]["state"] in FINISHED
    h = int(summary.get("horizon") or 0)
    gain = summary.get("gain") or {}
    what = f"swarm vs {reference_words(tables, reference)}"
    if h:
        what += f", rounds 0–{h - 1}" + ("" if finished else " so far")
    value = gain.get("value")
    row: dict[str, Any] = {
        "tier": tier,
        "what": what,
        "value": pct(value),
        "interval": None,
        "n": None,
        "design": None,
    }
    if not reference:
        row["note"] = "no control ran: nothing to compare with"
    elif value is None:
        row["note"] = "no rounds from both arms yet"
    else:
        row["interval"] = interval_text(gain.get("low"), gain.get("high"))
        row["note"] = None if row["interval"] else gain.get("note") or "no interval"
        n = gain.get("n") or [0, 0]
        row["n"] = f"n = {plural(n[0], 'swarm')} vs {plural(n[1], 'seed')}"
        design = design_text(gain)
        row["design"] = f"{design}; the gain above is a description, not a finding." if design else None
    return row


def judge(gain: Mapping[str, Any] | None, p_key: str = "p", min_p: float | None = None) -> str:
    """ "higher" or "lower" (the test's ``p_key`` p <= ALPHA and the 95 % interval on that side of
    0), "cannot decide" (the smallest p possible, ``min_p`` or the gain's own, is above ALPHA),
    "none" (no difference shown), "no interval" or "unknown"."""
    if not gain or gain.get("value") is None:
        return "unknown"
    low, high = gain.get("low"), gain.get("high")
    if low is None or high is None:
        return "no interval"
    smallest = gain.get("min_p") if min_p is None else min_p
    if smallest is not None and smallest > ALPHA:
        return "cannot decide"
    p = gain.get(p_key)
    if p is not None and p <= ALPHA and low > 0:
        return "higher"
    if p is not None and p <= ALPHA and high < 0:
        return "lower"
    return "none"


def window_parts(windows: Sequence[Mapping[str, Any]], reference: str, smallest: float | None) -> list[str]:
    """Each window's gain over ``reference`` as "rounds 0–12: +4.7 % [...]", followed, where the
    windows can reach a verdict (``smallest``, their smallest Holm-adjusted p possible, at most
    ALPHA), by its judgement on its Holm-adjusted p."""
    parts = []
    for window in windows:
        g = (window.get("gains") or {}).get(reference)
        rounds = f"rounds {window['start']}–{window['end'] - 1}"
        if not g or g.get("value") is None:
            parts.append(f"{rounds}: {DASH}")
            continue
        interval = interval_text(g.get("low"), g.get("high"))
        shown = pct(g["value"]) + (f" {interval}" if interval else "")
        judgement = judge(g, "p_holm", smallest) if smallest is not None else "cannot decide"
        if judgement in ("higher", "lower"):
            shown += f", {judgement} (Holm p = {p_text(g['p_holm'])})"
        elif judgement == "none" and g.get("p_holm") is not None:
            shown += f", no difference shown (Holm p = {p_text(g['p_holm'])})"
        parts.append(f"{rounds}: {shown}")
    return parts


def accuracy_text(entry: Mapping[str, Any]) -> str:
    """An arm's held-out accuracy as the verdict writes it: "0.412 [0.351, 0.473]"."""
    low, high = entry.get("low"), entry.get("high")
    interval = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"{entry['accuracy']:.3f}{interval}"


def held_out_verdict(tables: Mapping[str, Any], tier: str, reference: str) -> tuple[str, str]:
    """(judgement, sentence) on the held-out accuracy of the swarm against ``reference`` at the
    latest evaluation both were scored on (summary[tier]["held_out"], held_out.py), judged as
    the training reward's gain is (:func:`judge`), on the difference in accuracy points."""
    ref = reference_words(tables, reference)
    held = ((tables.get("summary") or {}).get(tier) or {}).get("held_out") or {}
    swarm, control = held.get("swarm"), held.get(reference)
    if not swarm or not control or not control.get("difference"):
        return "unknown", f"Held-out accuracy: no evaluation both the swarm and {ref} were scored on."
    difference = control["difference"]
    n_swarm, n_ref = difference["n"][:2]
    missing = swarm["missing"] + control["missing"]
    skipped = f"; {plural(missing, 'node')} skipped it, left out, not counted as zero" if missing else ""
    said = (
        f"Held-out accuracy after round {swarm['round']} ({swarm['questions']} fresh questions none "
        f"of them trained on, answered greedily, scored by the coordinator{skipped}): the swarm "
        f"{accuracy_text(swarm)} ({plural(n_swarm, 'swarm')} of {plural(swarm['nodes'], 'node')}) "
        f"against {ref} {accuracy_text(control)} ({plural(n_ref, 'seed')}); difference "
        f"{difference['value']:+.3f}"
    )
    if difference.get("low") is not None:
        said += f" [{difference['low']:+.3f}, {difference['high']:+.3f}] (95 % t interval)"
    judgement = judge(difference)
    p = difference.get("p")
    test = f"exact permutation test over swarms and seeds, p = {p_text(p)}" if p is not None else ""
    if judgement == "cannot decide":
        said += f". {design_text(difference)}: a description, not a finding."
    elif judgement == "none":
        said += f": no difference this campaign can detect ({test})."
    elif judgement in ("higher", "lower"):
        side = "above" if judgement == "higher" else "below"
        said += (
            f": the swarm's held-out accuracy is {judgement} than {ref}'s, a 95 % interval {side} 0 ({test})."
        )
    else:
        said += f": {difference.get('note') or 'no interval'}, so no verdict."
    return judgement, said


def verdict(tables: Mapping[str, Any], tier: str) -> dict[str, Any]:
    """The tier's verdict in plain words, generated from the headline gain and its windows, and
    from the held-out accuracy (:func:`held_out_verdict`)."""
    summary = (tables.get("summary") or {}).get(tier) or {}
    reference = summary.get("reference") or tables.get("reference")
    ref = reference_words(tables, reference)
    h = int(summary.get("horizon") or 0)
    gain = summary.get("gain")
    lines: list[str] = []
    if not reference:
        return {
            "tier": tier,
            "judgement": "unknown",
            "held_out_judgement": "unknown",
            "lines": ["No control ran, so there is nothing to compare the swarm with."],
        }
    held_out_judgement, held_out_line = held_out_verdict(tables, tier, reference)
    judgement = judge(gain)
    if judgement == "unknown" or gain is None:
        return {
            "tier": tier,
            "judgement": judgement,
            "held_out_judgement": held_out_judgement,
            "lines": [f"No verdict: the swarm and {ref} have no rounds in common.", held_out_line],
        }
    figure = pct(gain["value"])
    interval = interval_text(gain.get("low"), gain.get("high"))
    span = f"rounds 0–{h - 1}"
    p = gain.get("p")
    test = f"exact permutation test over swarms and seeds, p = {p_text(p)}" if p is not None else ""
    if judgement == "cannot decide":
        lines.append(
            f"{design_text(gain)}. As a description, not a finding: over {span} the swarm's "
            f"cumulative reward is {figure} {interval} against {ref} (95 % t interval)."
        )
    elif judgement == "none":
        lines.append(
            f"No difference this campaign can detect between the swarm and {ref}: over {span} the "
            f"swarm's cumulative reward is {figure} {interval} against it ({test}; a difference "
            "is shown only at p <= 0.05 with the 95 % interval on one side of 0)."
        )
    elif judgement in ("higher", "lower"):
        lines.append(
            f"The swarm's cumulative reward over {span} is {judgement} than {ref}'s: {figure} "
            f"{interval}, a 95 % interval {'above' if judgement == 'higher' else 'below'} 0 ({test})."
        )
    else:
        lines.append(
            f"Over {span} the swarm's cumulative reward is {figure} against {ref}, but "
            f"{'there is one swarm' if (gain.get('n') or [0])[0] < 2 else 'there is one control seed'}, "
            "so there is no interval and this campaign gives no verdict."
        )
    windows = summary.get("windows") or []
    if windows and reference:
        family = int((summary.get("windows_family") or {}).get(reference) or 0)
        smallest = min(1.0, family * gain["min_p"]) if family and gain.get("min_p") is not None else None
        if smallest is not None and smallest <= ALPHA:
            words = f"thirds of the rounds; Holm-adjusted over {plural(family, 'window')} of every model size"
        elif smallest is not None:
            words = (
                "thirds of the rounds; a description, not a finding: over "
                f"{plural(family, 'window')} of every model size the smallest Holm-adjusted p possible "
                f"is {p_text(smallest)}"
            )
            smallest = None
        else:
            words = "thirds of the rounds; a description, not a finding"
        parts = window_parts(windows, reference, smallest)
        lines.append(f"By window ({words}): " + "; ".join(parts) + ".")
    n_swarm, n_ref = (gain.get("n") or [0, 0])[:2]
    nodes = ((summary.get("arms") or {}).get("swarm") or {}).get("nodes")
    of_nodes = f" of {plural(nodes, 'node')} in all" if nodes else ""
    if n_swarm == 1:
        independence = (
            "The seeds are independent runs; the swarm's nodes share one pool, so it is one "
            "replicate of sharing: one swarm, no interval for the gain."
        )
    else:
        independence = (
            "The seeds and the swarms are independent runs; the nodes of a swarm share its pool, "
            "so each swarm counts once."
        )
    lines.append(
        f"n = {plural(n_swarm, 'swarm')}{of_nodes} vs {plural(n_ref, ref + ' seed')}. {independence}"
    )
    lines.append(held_out_line)
    return {"tier": tier, "judgement": judgement, "held_out_judgement": held_out_judgement, "lines": lines}


def run_info(tables: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """Everything the run section shows, from a tables payload (dashboard.tables) at ``now``."""
    now = now or datetime.now(UTC)
    campaign = tables["campaign"]
    state, rounds = campaign["state"], int(campaign.get("rounds") or 0)
    started, finished = parse_time(campaign.get("started_at")), parse_time(campaign.get("finished_at"))
    if started and state in FINISHED:
        elapsed = ((finished or now) - started).total_seconds()
    elif started and state in ("running", "paused"):
        elapsed = (now - started).total_seconds()
    else:
        elapsed = None
    tiers: Sequence[str] = campaign.get("tiers", [])
    done = state in FINISHED
    return {
        "state": state,
        "state_text": state_text(state, rounds),
        "started": when_text(started) if started else "not launched yet",
        "started_at": campaign.get("started_at"),
        "finished": when_text(finished) if finished else None,
        "finished_at": campaign.get("finished_at"),
        "elapsed_s": elapsed,
        "elapsed": duration_text(elapsed)
        + (" (pauses included)" if elapsed is not None and not done else ""),
        "now": now.isoformat(),
        "eta": estimates(tables, now),
        "headlines": [headline(tables, tier) for tier in tiers],
        "verdict_title": VERDICT_TITLES.get(state),
        "verdict": [verdict(tables, tier) for tier in tiers] if done else [],
        "verdict_pending": None if done else "The verdict is written here when the campaign completes.",
        "independence": INDEPENDENCE,
    }


# --- settings --------------------------------------------------------------------------------------


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _task(task: Mapping[str, Any]) -> str:
    settings = ", ".join(
        f"{key.replace('_', ' ')} {_number(value)}" for key, value in (task.get("config") or {}).items()
    )
    return f"{task['name']} (weight {_number(task.get('weight', 1))}" + (
        f"; {settings})" if settings else ")"
    )


def settings_fields(config: Mapping[str, Any]) -> list[dict[str, str]]:
    """The campaign's settings as labelled, readable fields ({"label", "value"}), in the order a
    reader needs them; never a raw dict."""
    try:
        cfg = CampaignConfig.from_json(dict(config))
    except ValueError:
        return [{"label": "Settings", "value": "the stored settings could not be read"}]
    fields: list[tuple[str, str]] = []
    add = fields.append
    add(("Model sizes (tiers)", ", ".join(cfg.tiers)))
    add(("Rounds per node", str(cfg.rounds)))
    add(("Questions per round (B)", str(cfg.questions_per_round)))
    add(("Completions per question (G)", str(cfg.group_size)))
    # The study's words for the arm (worker.shared.arms.Arm.semantics): one description of
    # what a round generates and trains on, in the reports and here.
    try:
        arm = cfg.swarm_arm()
        add(("Swarm arm", f"{arm.name}: {arm.semantics(cfg.questions_per_round)}"))
    except ValueError:
        add(("Swarm arm", f"{cfg.num_local}/{cfg.num_external}"))
    add(("Own groups trained on", STRATEGY_WORDS.get(cfg.local_strategy, cfg.local_strategy)))
    add(("Pool groups trained on", STRATEGY_WORDS.get(cfg.external_strategy, cfg.external_strategy)))
    scope = "of the node's own model size" if cfg.pool_within_tier else "of every model size"
    add(("Pool", f"a node draws from the most recent {cfg.pool_window} rollouts {scope}"))
    if cfg.replicates > 1:
        swarms = (
            f"{cfg.replicates} independent swarms per model size; a node shares only with its own "
            "swarm, and the gain's interval compares swarms with control seeds"
        )
    else:
        swarms = "one swarm per model size: its nodes share a pool, so the gain has no interval"
    add(("Swarms", swarms))
    add(("Tasks", "; ".join(_task(task) for task in cfg.tasks)))
    kinds = cfg.control_kinds()
    if kinds:
        names = []
        for kind in kinds:
            try:
                names.append(f"{CONTROL_WORDS.get(kind, kind)} ({cfg.control_arm(kind).name})")
            except ValueError:
                names.append(CONTROL_WORDS.get(kind, kind))
        add(("Isolated controls", ", ".join(names)))
        seeds = cfg.controls.seeds
        first, last = cfg.seed, cfg.seed + seeds - 1
        which = f"seeds {first}–{last}" if seeds > 1 else f"seed {first}"
        add(("Control seeds", f"{seeds} per tier and control ({which}); each an independent run"))
        reference = cfg.controls.reference_kind()
        if reference:
            add(("Headline control", f"{names[kinds.index(reference)]}: the headline gain is against it"))
    else:
        add(("Isolated controls", "none: nothing to compare the swarm with"))
    rates = []
    for tier in cfg.tiers:
        try:
            rates.append(f"{cfg.grpo_config(tier).learning_rate:g} ({tier})")
        except (KeyError, TypeError, ValueError):
            rates.append(f"{tier}: {DASH}")
    add(
        ("Learning rate", ", ".join(rates) + ("" if "learning_rate" in cfg.grpo else "; each tier's default"))
    )
    grpo = cfg.grpo_config(cfg.tiers[0]) if cfg.tiers and cfg.tiers[0] in TIERS else None
    if grpo is not None:
        add(("GRPO iterations per batch (μ)", str(grpo.num_iterations)))
        add(("Clip ε low / high", f"{grpo.eps_low:g} / {grpo.eps_high:g}"))
        add(("Sampling temperature", f"{grpo.temperature:g}"))
        if grpo.external_importance_sampling_correction:
            add(("External rollouts", "importance-corrected for being off-policy"))
    shown = {
        "learning_rate",
        "num_iterations",
        "eps_low",
        "eps_high",
        "temperature",
        "external_importance_sampling_correction",
    }
    others = [
        f"{key.replace('_', ' ')} {_number(value)}" for key, value in cfg.grpo.items() if key not in shown
    ]
    if others:
        add(("Other GRPO settings", ", ".join(others)))
    add(("Max new tokens", str(cfg.max_new_tokens)))
    if cfg.format_weight:
        add(("Format reward weight", f"{cfg.format_weight:g}"))
    add(("Question stream seed", f"{cfg.seed} (same seed, same questions)"))
    add(
        (
            "Leases and bans",
            f"a lease lasts {cfg.lease_seconds:g} s; a node is banned after {cfg.ban_threshold} rejected submissions",
        )
    )
    return [{"label": label, "value": value} for label, value in fields]
