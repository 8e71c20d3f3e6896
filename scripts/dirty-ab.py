#!/usr/bin/env python3
"""Compares two sets of dirty-noisy-neighbour results (memqos arm): the noisy writer's dirty
pages when the victim starts and its KiB/s to disk during contention, per iteration; medians,
ranges, and a two-sided permutation test of the Mann-Whitney U (20000 shuffles, fixed seed).

    python3 scripts/dirty-ab.py BEFORE_DIR AFTER_DIR

Each DIR holds result files of `memqos-lab experiment dirty-noisy-neighbour --out FILE`.
Used for issue 27 (docs/dirty/issue-27-ab, its results.txt).
"""
import glob
import json
import random
import sys


def values(folder):
    dirty, disk = [], []
    for f in sorted(glob.glob(f"{folder}/*.json")):
        for run in json.load(open(f))["runs"]:
            for it in run["iterations"]:
                contended = [s for s in it["samples"] if s["t"] >= 0]
                dirty.append(contended[0]["noisy_dirty"] / 1e6)
                disk.append(it["noisy_disk_kib_s"])
    return dirty, disk


def u_stat(x, y):
    return sum((a > b) + 0.5 * (a == b) for a in x for b in y)


def permutation_p(x, y, shuffles=20000):
    centre = len(x) * len(y) / 2
    observed = abs(u_stat(x, y) - centre)
    pool, hits = x + y, 0
    rng = random.Random(1)
    for _ in range(shuffles):
        rng.shuffle(pool)
        hits += abs(u_stat(pool[: len(x)], pool[len(x):]) - centre) >= observed
    return hits / shuffles


def median(v):
    s = sorted(v)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    (bd, bk), (ad, ak) = values(sys.argv[1]), values(sys.argv[2])
    for name, d, k in (("before", bd, bk), ("after", ad, ak)):
        print(
            f"{name}: N = {len(d)}; noisy dirty at contention start {median(d):.1f} MB [{min(d):.1f}..{max(d):.1f}]; "
            f"noisy to disk {median(k):.0f} KiB/s [{min(k):.0f}..{max(k):.0f}]; below 30 KiB/s: {sum(v < 30 for v in k)}"
        )
    print(f"permutation p (two-sided): dirty at start {permutation_p(bd, ad):.3f}, to disk {permutation_p(bk, ak):.3f}")


main()
