#!/usr/bin/env python3
"""Compares two experiment series arm by arm: runs with a kill, and the protected task's time,
P95 latency (vs solo) and the lows' time (vs none), medians [95% interval] (kNN: killed runs).

    python3 scripts/compare-series.py BEFORE/summary.json AFTER/summary.json [SCENARIO ...]

Ends with two counts: arms whose share of runs with a kill is the same in both series, and the
estimates whose 95% intervals do not overlap. Used for issue 27's check that the refactor left
behaviour as it was (docs/experiments/issue-27-*/compare.txt):
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


def overlap(b, a, key):
    """True/False when both have a numeric interval, None otherwise (killed runs, no estimate)."""
    vb, va = b.get(key), a.get(key)
    if not (isinstance(vb, dict) and isinstance(va, dict)):
        return None
    lo_b, hi_b, lo_a, hi_a = vb.get("ci_low"), vb.get("ci_high"), va.get("ci_low"), va.get("ci_high")
    if not all(isinstance(x, (int, float)) for x in (lo_b, hi_b, lo_a, hi_a)):
        return None
    return lo_a <= hi_b and lo_b <= hi_a


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    before, after = groups(sys.argv[1]), groups(sys.argv[2])
    only = set(sys.argv[3:])
    same_kills, kills_total, apart = 0, 0, []
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
            if b:
                kills_total += 1
                # The same kill outcome: every run killed someone in both, or no run did in either.
                rb, ra = b.get("runs_with_kill", 0) / max(b.get("runs", 1), 1), a["runs_with_kill"] / max(a["runs"], 1)
                same_kills += rb == ra
                for k in ("high_wall_vs_solo", "high_p95_vs_solo", "low_wall_vs_none"):
                    if overlap(b, a, k) is False:
                        apart.append(f"{key[0]} {a['arm']} {k}")
    print(f"\nthe same share of runs with a kill in {same_kills} of {kills_total} arms")
    print(f"95% intervals that do not overlap: {len(apart)}" + "".join(f"\n  {x}" for x in apart))


main()
