#!/usr/bin/python3
"""Plots `memqos-lab bench stats` results (docs/stats/stats-bench-*.json) into one PNG.

    /usr/bin/python3 scripts/plots/stats_bench.py docs/stats/stats-bench-*.json -o docs/stats/stats-bench.png

Left: one cgroup's stats per method, median time per read (bars) with the spread over
batches (whiskers), speedup vs the C control printed beside each bar. Right: whole-tree
snapshot time against tree size, per backend and kernel (log-log).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--out")
    ap.add_argument("--markdown", action="store_true", help="print the figures as Markdown tables instead")
    args = ap.parse_args()
    runs = [json.load(open(p)) for p in args.results]
    if args.markdown:
        markdown(runs)
        return
    if not args.out:
        ap.error("-o/--out is required for the plot")

    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 3.6 * len(runs)), squeeze=False)
    for row, r in enumerate(runs):
        label = f"{r['kernel']} ({r['mode']})"
        ax = axes[row][0]
        series = [s for s in r["single"] if not s.get("unavailable")]
        names = [s["method"] for s in series]
        med = [s["per_op_us_median"] for s in series]
        lo = [s["per_op_us_median"] - s["per_op_us_min"] for s in series]
        hi = [s["per_op_us_max"] - s["per_op_us_median"] for s in series]
        y = range(len(series))
        ax.barh(y, med, xerr=[lo, hi], color=["#888888", "#4c72b0", "#55a868", "#c44e52", "#8172b2"][: len(series)], capsize=3)
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("µs per read (median over batches; whiskers min–max)")
        n = series[0]["ops"] if series else 0
        ax.set_title(f"one cgroup, n={n:,} per method\n{label}", fontsize=9)
        right = max([s["per_op_us_max"] for s in series] + [1]) * 1.25
        for i, s in enumerate(series):
            ax.text(right * 0.98, i, f"x{s['speedup_vs_control']:.1f} vs control", va="center", ha="right", fontsize=8)
        ax.set_xlim(0, right)

        ax = axes[row][1]
        by_method = {}
        for t in r["trees"]:
            for s in t["series"]:
                if s.get("unavailable"):
                    continue
                by_method.setdefault(s["method"], []).append((t["size"], s["per_op_us_median"] / 1000.0))
        for method, pts in by_method.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cgroups in the tree")
        ax.set_ylabel("ms per whole-tree snapshot (median)")
        ax.axhline(2.0, color="grey", linestyle=":", linewidth=1)
        ax.text(1, 2.0, " 2 ms (issue's host text target at 1,000)", fontsize=7, va="bottom", color="grey")
        ax.set_title(f"whole-tree snapshots\n{label}", fontsize=9)
        if by_method:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


def markdown(runs):
    def fmt(s, unit_ms=False):
        if s.get("unavailable"):
            return None
        med, lo, hi = s["per_op_us_median"], s["per_op_us_min"], s["per_op_us_max"]
        if unit_ms:
            med, lo, hi = med / 1000, lo / 1000, hi / 1000
            u = "ms"
        else:
            u = "µs"
        t = s["total"]
        return (f"{med:.3g} {u} ({lo:.3g}–{hi:.3g})", f"{t['wall_s']:.2f} / {t['user_s']:.2f} / {t['sys_s']:.2f}",
                f"{s['speedup_vs_control']:.1f}x")

    for r in runs:
        print(f"**{r['kernel']}** ({r['mode']}; {r['machine']}, {r['cpus']} CPUs)\n")
        print(f"One cgroup ({r['single_target']}), n = {r['iterations']:,} per method in {r['batches']} batches:\n")
        print("| method | per read, median (min–max over batches) | wall / user / sys (s, all n) | vs control |")
        print("| --- | --- | --- | --- |")
        for s in r["single"]:
            f = fmt(s)
            if f:
                print(f"| {s['method']} | {f[0]} | {f[1]} | {f[2]} |")
        print()
        for t in r["trees"]:
            print(f"Tree of {t['size']:,} cgroups, {t['iterations']:,} snapshots per method:\n")
            print("| method | per snapshot, median (min–max) | wall / user / sys (s, all snapshots) | vs control |")
            print("| --- | --- | --- | --- |")
            for s in t["series"]:
                f = fmt(s, unit_ms=True)
                if f:
                    print(f"| {s['method']} | {f[0]} | {f[1]} | {f[2]} |")
            print()


if __name__ == "__main__":
    main()
