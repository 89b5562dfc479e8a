"""Do the arms of a running campaign advance at the same pace? Polls its dashboard API.

    python bench/demo_pace.py --url http://127.0.0.1:8000 --campaign 1 [--every 5] [--out pace.json]

Every ``--every`` seconds it reads ``/api/campaigns/<id>/dashboard`` (the page's first load) and
notes, per tier, each arm's settled round (the payload's ``settled``: rounds every live agent of
the arm reported) and how long the call took. From the first poll at which every arm of a tier
has a settled round, the tier's ratio at a poll is its slowest arm's settled round over its
fastest arm's; the worst ratio over the run is what it prints, with the API's p50 and p95 latency
and when the campaign finished (seconds since the first poll). It stops when the campaign is
completed, stopped or failed. Run it beside ``./scripts/demo.sh --no-browser`` (issue #46's
acceptance: worst ratio at least 0.8, p95 under 1 s).

Output lines: ``worst_ratio=<r> (tier <t>, poll <i>)``, ``api_p50_ms=<ms> api_p95_ms=<ms> n=<polls>``,
``finished=<state> after_s=<s>``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from pathlib import Path


def poll(url: str) -> tuple[dict, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        data = json.load(response)
    return data, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--campaign", type=int, default=1)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None, help="every poll, as JSON")
    args = parser.parse_args()
    api = f"{args.url.rstrip('/')}/api/campaigns/{args.campaign}/dashboard"
    polls: list[dict] = []
    first = time.monotonic()
    worst: tuple[float, str, int] | None = None
    while True:
        at = time.monotonic() - first
        try:
            data, seconds = poll(api)
        except OSError as error:  # the demo still starting
            print(f"t={at:.0f}s: {error}")
            time.sleep(args.every)
            continue
        settled = data.get("settled") or {}
        arms = [entry["arm"] for entry in data.get("arms", [])]
        state = data["campaign"]["state"]
        ratios = {}
        for tier in data["campaign"].get("tiers", []):
            rounds = [int((settled.get(tier) or {}).get(arm, 0)) for arm in arms]
            if rounds and min(rounds) >= 1:
                ratios[tier] = min(rounds) / max(rounds)
                if worst is None or ratios[tier] < worst[0]:
                    worst = (ratios[tier], tier, len(polls))
        polls.append(
            {"t": round(at, 1), "api_s": seconds, "state": state, "settled": settled, "ratios": ratios}
        )
        print(f"t={at:.0f}s api={seconds * 1000:.0f}ms {state} settled={settled} ratios={ratios}", flush=True)
        if state in ("completed", "stopped", "failed"):
            break
        time.sleep(max(0.0, args.every - seconds))
    latencies = sorted(p["api_s"] * 1000 for p in polls)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    if worst is not None:
        print(f"worst_ratio={worst[0]:.3f} (tier {worst[1]}, poll {worst[2]})")
    print(f"api_p50_ms={statistics.median(latencies):.0f} api_p95_ms={p95:.0f} n={len(latencies)}")
    print(f"finished={polls[-1]['state']} after_s={polls[-1]['t']:.0f}")
    if args.out:
        args.out.write_text(json.dumps(polls, indent=1))


if __name__ == "__main__":
    main()
