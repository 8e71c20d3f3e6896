#!/usr/bin/python3
"""Plots of `memqos-lab experiment` results: OUT/runs/**/*.json -> OUT/*.png.

For each scenario / variant / kernel: the protected task's allocation-latency CDF per arm,
completion times per arm, and memory timelines of one run per policy with the daemon's
knob writes and the userspace killers' (oomd, systemd-oomd) kills marked. stress-ng scenarios (the RFC demo) get a throughput plot
(each side's bogo-ops/s per arm and run) instead of the latency and completion plots. Run by `memqos-lab experiment` (or by hand: /usr/bin/python3 THIS OUT).
"""
import glob
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ARM_ORDER = ["solo:high", "none", "static-max", "static-high", "memqos", "cpu-weight", "kube-memoryqos", "oomd",
             "systemd-oomd"]
COLORS = {"solo:high": "#555555", "none": "#d62728", "static-max": "#ff7f0e",
          "static-high": "#9467bd", "memqos": "#2ca02c", "cpu-weight": "#1f77b4", "kube-memoryqos": "#8c564b",
          "oomd": "#e377c2", "systemd-oomd": "#17becf"}
UNLIMITED = 2**64 - 1


def arm_rank(arm):
    return ARM_ORDER.index(arm) if arm in ARM_ORDER else (-1 if arm.startswith("solo:") else 99)


def load(out):
    groups = defaultdict(list)
    for path in glob.glob(os.path.join(out, "runs", "**", "*.json"), recursive=True):
        with open(path) as f:
            r = json.load(f)
        groups[(r["scenario"], r["variant"], r["kernel"])].append(r)
    return groups


def high(r):
    return next((t for t in r["tasks"] if t["tier"] == "high"), None)


def latency_cdf(key, runs, path):
    by_arm = defaultdict(list)
    for r in runs:
        h = high(r)
        if h is not None:
            by_arm[r["arm"]].extend(h["latencies_ms"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm in sorted(by_arm, key=arm_rank):
        v = sorted(x for x in by_arm[arm] if x > 0)
        if not v:
            continue
        y = [(i + 1) / len(v) for i in range(len(v))]
        ax.step(v, y, where="post", label=f"{arm} (n={len(v)})", color=COLORS.get(arm))
    ax.set_xscale("log")
    ax.set_xlabel("protected task: growth-step latency (ms, log)")
    ax.set_ylabel("fraction of steps")
    ax.axhline(0.95, color="#bbbbbb", lw=0.8, ls=":")
    ax.set_title(f"{key[0]} / {key[1]} on {key[2]}: allocation latency, all runs pooled", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def completion(key, runs, path):
    arms = sorted({r["arm"] for r in runs}, key=arm_rank)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, arm in enumerate(arms):
        for r in (r for r in runs if r["arm"] == arm):
            for t in r["tasks"]:
                dx = -0.15 if t["tier"] == "high" else 0.15
                ok = t["outcome"]["kind"] == "finished"
                ax.scatter(i + dx, t["wall_s"], s=22, color=("#1f77b4" if t["tier"] == "high" else "#8c564b"),
                           marker="o" if ok else "x", alpha=0.8)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels(arms, fontsize=8)
    ax.set_ylabel("wall time (s)")
    ax.scatter([], [], color="#1f77b4", label="protected (high)")
    ax.scatter([], [], color="#8c564b", label="low tier")
    ax.scatter([], [], color="black", marker="x", label="OOM-killed / not finished")
    ax.legend(fontsize=8)
    ax.set_title(f"{key[0]} / {key[1]} on {key[2]}: completion per task and run", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timelines(key, runs, path):
    policy_runs = {}
    for r in sorted(runs, key=lambda r: r["run"]):
        if not r["arm"].startswith("solo:") and r["arm"] not in policy_runs:
            policy_runs[r["arm"]] = r
    arms = sorted(policy_runs, key=arm_rank)
    if not arms:
        return
    fig, axes = plt.subplots(len(arms), 1, figsize=(8, 2.4 * len(arms)), sharex=True, squeeze=False)
    for ax, arm in zip(axes[:, 0], arms):
        r = policy_runs[arm]
        tl = r["timeline"]
        t = tl["t_s"]
        mib = 1 << 20
        ax.plot(t, [x / mib for x in tl["parent_current"]], color="black", lw=1, label="parent")
        for name, series in sorted(tl["current"].items()):
            ax.plot(t[: len(series)], [x / mib for x in series], lw=1, label=name)
        for name, series in sorted(tl["high"].items()):
            pts = [(t[i], v / mib) for i, v in enumerate(series) if v is not None]
            if pts:
                ax.plot(*zip(*pts), lw=0.8, ls="--", label=f"{name} memory.high")
        if r["parent_max_bytes"] != UNLIMITED:
            ax.axhline(r["parent_max_bytes"] / mib, color="#d62728", lw=0.8, ls=":", label="parent memory.max")
        for d in r["decisions"]:
            if d["file"] == "memory.high":
                ax.axvline(d["t_s"], color="#2ca02c", lw=0.4, alpha=0.5)
            elif d["file"] == "kill":
                ax.axvline(d["t_s"], color="#e377c2", lw=1.2, label=f"{arm} kills {d['cgroup']}")
        kills = [tk["name"] for tk in r["tasks"] if tk["outcome"]["kind"] == "oom_killed"]
        title = f"{arm} (run {r['run']})" + (f": OOM-killed {', '.join(kills)}" if kills else "")
        if arm in ("oomd", "systemd-oomd"):
            by_killer = [tk["name"] for tk in r["tasks"] if tk["outcome"] == {"kind": "killed", "signal": 9}]
            title += f"; killed by {arm}: {', '.join(by_killer) or 'none'}"
        elif r["decisions"]:
            title += f"; {len(r['decisions'])} daemon writes (green lines: memory.high writes)"
        ax.set_title(title, fontsize=8)
        ax.set_ylabel("MiB")
        ax.legend(fontsize=6, loc="upper right", ncol=2)
    axes[-1, 0].set_xlabel("seconds since the tasks started")
    fig.suptitle(f"{key[0]} / {key[1]} on {key[2]}: memory over time", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def throughput(key, runs, path):
    """Each side's bogo-ops/s per arm, one dot per run (stress-ng scenarios)."""
    arms = sorted({r["arm"] for r in runs}, key=arm_rank)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, arm in enumerate(arms):
        for r in (r for r in runs if r["arm"] == arm):
            for t in r["tasks"]:
                if t.get("bogo_ops_per_s") is None:
                    continue
                dx = -0.12 if t["tier"] == "high" else 0.12
                ax.scatter(i + dx, t["bogo_ops_per_s"], s=22,
                           color=("#1f77b4" if t["tier"] == "high" else "#8c564b"))
    ax.scatter([], [], color="#1f77b4", s=22, label="high side")
    ax.scatter([], [], color="#8c564b", s=22, label="low side")
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels(arms, fontsize=8)
    ax.set_ylabel("stress-ng bogo-ops/s (real time)")
    ax.set_title(f"{key[0]} / {key[1]} on {key[2]}: throughput of each side, every run", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: experiment.py OUT (the directory with runs/)")
    out = sys.argv[1]
    groups = load(out)
    if not groups:
        sys.exit(f"experiment.py: no results under {out}/runs")
    for old in glob.glob(os.path.join(out, "*.png")):
        os.remove(old)
    for key, runs in sorted(groups.items()):
        prefix = os.path.join(out, "-".join(key))
        if any(r.get("workload") == "stress-ng" for r in runs):
            throughput(key, runs, prefix + "-throughput.png")
            timelines(key, runs, prefix + "-timeline.png")
            continue
        latency_cdf(key, runs, prefix + "-latency-cdf.png")
        completion(key, runs, prefix + "-completion.png")
        timelines(key, runs, prefix + "-timeline.png")
    print(f"experiment.py: plots for {len(groups)} group(s) in {out}")


if __name__ == "__main__":
    main()
