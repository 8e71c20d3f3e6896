#!/usr/bin/python3
"""Plots of `memqos-lab experiment agent-host`: OUT/summary.json and OUT/runs/<kernel>/*.json -> OUT/*.png.

Per kernel: sessions lost (agent runtimes OOM-killed) and tool calls killed per run against
the number of concurrent sessions, one line per arm (the density figure); and the host's
memory over time at the largest level, one panel per arm, from the first run.
Run by `memqos-lab experiment agent-host` (or by hand: /usr/bin/python3 THIS OUT).
"""
import glob
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ARMS = ["none", "static-peak", "memqos"]
COLORS = {"none": "#d62728", "static-peak": "#ff7f0e", "memqos": "#2ca02c"}


def density(out, summary):
    kernels = sorted({l["kernel"] for l in summary["levels"]})
    for k in kernels:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for arm in ARMS:
            rows = sorted((l for l in summary["levels"] if l["kernel"] == k and l["arm"] == arm), key=lambda l: l["level"])
            if not rows:
                continue
            x = [r["level"] for r in rows]
            axes[0].plot(x, [r["runtimes_killed"] / r["runs"] for r in rows], "o-", color=COLORS[arm], label=arm)
            axes[1].plot(x, [r["calls_killed"] / r["runs"] for r in rows], "o-", color=COLORS[arm], label=arm)
        axes[0].set_title("agent runtimes OOM-killed (sessions lost) per run")
        axes[1].set_title("tool calls OOM-killed per run")
        for ax in axes:
            ax.set_xlabel("concurrent sessions on the host")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"agent host, {k}")
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"agent-host-{k}-density.png"), dpi=110)
        plt.close(fig)


def timelines(out):
    by_kernel = defaultdict(list)
    for f in glob.glob(os.path.join(out, "runs", "*", "*.json")):
        with open(f) as fh:
            r = json.load(fh)
        if r["arm"] != "solo":
            by_kernel[r["kernel"]].append(r)
    for k, rs in by_kernel.items():
        top = max(r["level"] for r in rs)
        first = min(r["run"] for r in rs)
        pick = {r["arm"]: r for r in rs if r["level"] == top and r["run"] == first}
        arms = [a for a in ARMS if a in pick]
        if not arms:
            continue
        fig, axes = plt.subplots(len(arms), 1, figsize=(10, 2.6 * len(arms)), sharex=True, squeeze=False)
        for ax, arm in zip(axes[:, 0], arms):
            r = pick[arm]
            t = [p[0] for p in r["parent_current"]]
            ax.plot(t, [p[1] / 2**20 for p in r["parent_current"]], color=COLORS[arm], label="host memory.current")
            if r.get("host_budget_bytes"):
                ax.axhline(r["host_budget_bytes"] / 2**20, color="black", ls="--", lw=0.8, label="budget")
            for s in r["sessions"]:
                for c in s["calls"]:
                    res = c.get("result")
                    if res and res.get("oom_kills", 0) > 0:
                        ax.axvline(c["started_s"], color="#1f77b4", lw=0.6, alpha=0.6)
                rt = s["runtime"]
                if rt.get("oom_kills", 0) > 0:
                    ax.axvline(s["start_s"] + rt["wall_s"], color="black", lw=1.5)
            ax.set_ylabel("MiB")
            ax.set_title(f"{arm}: {top} sessions, run {first} (thin blue: a killed call's start; black: a runtime killed)")
            ax.legend(loc="lower right", fontsize=7)
        axes[-1, 0].set_xlabel("seconds")
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"agent-host-{k}-timeline.png"), dpi=110)
        plt.close(fig)


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    density(out, summary)
    timelines(out)


if __name__ == "__main__":
    main()
