#!/usr/bin/env python3
"""Compares two experiment series arm by arm: runs with a kill, and the protected task's time,
P95 latency (vs solo) and the lows' time (vs none), medians [95% interval] (kNN: killed runs).

    python3 scripts/compare-series.py BEFORE/summary.json AFTER/summary.json [SCENARIO ...]

Used for issue 27's check that the refactor left behaviour as it was:
    python3 scripts/compare-series.py docs/experiments/issue-27-base/summary.json \
        docs/experiments/issue-27-rerun/summary.json
"""
import json
import sys


def groups(path):
    return {(g["scenario"], g["variant"], g["kernel"]): g for g in json.load(open(path))["groups"]}


def est(arm, key):
    v = arm.get(key)
    if not isinstance(v, dict) or v.get("median") is None:
        return "-"
    f = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else str(x)
    return f"{f(v['median'])} [{f(v.get('ci_low'))}-{f(v.get('ci_high'))}] k{v.get('killed', 0)}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    before, after = groups(sys.argv[1]), groups(sys.argv[2])
    only = set(sys.argv[3:])
    for key, ga in sorted(after.items()):
        if only and key[0] not in only:
            continue
        gb = before.get(key)
        if gb is None:
            print(f"== {'/'.join(key)}: not in {sys.argv[1]}")
            continue
        print(f"== {key[0]}/{key[1]} on {key[2]}: build {gb['build']} -> {ga['build']}")
        for a in ga["arms"]:
            if a["arm"].startswith("solo"):
                continue
            b = next((x for x in gb["arms"] if x["arm"] == a["arm"]), {})
            print(
                f"  {a['arm']}: runs with a kill {b.get('runs_with_kill')}/{b.get('runs')} -> "
                f"{a['runs_with_kill']}/{a['runs']}; high/solo {est(b, 'high_wall_vs_solo')} -> "
                f"{est(a, 'high_wall_vs_solo')}; P95/solo {est(b, 'high_p95_vs_solo')} -> "
                f"{est(a, 'high_p95_vs_solo')}; lows/none {est(b, 'low_wall_vs_none')} -> {est(a, 'low_wall_vs_none')}"
            )


main()
