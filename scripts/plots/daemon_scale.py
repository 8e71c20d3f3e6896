#!/usr/bin/python3
"""Plots docs/bpf/reaction.json (written by `memqos-lab bench reaction`) as docs/bpf/scale.png:
per kernel, the reaction delay (p50, p99) of each signal source against the number of
managed cgroups, and the daemon's CPU (idle and under a fault load, default 500 ms sampling
with the calm path, and 5 s sampling) against the number of managed cgroups, with the
targets. Run with Debian's python3 (matplotlib): /usr/bin/python3 scripts/plots/daemon_scale.py
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bpf/reaction.json")
out = Path(sys.argv[2] if len(sys.argv) > 2 else src.with_name("scale.png"))
kernels = json.loads(src.read_text())["kernels"]
fig, axes = plt.subplots(len(kernels), 2, figsize=(11, 4.2 * len(kernels)), squeeze=False)
colors = {"bpf": "tab:green", "psi": "tab:orange", "events": "tab:blue"}
for row, k in zip(axes, kernels):
    ax = row[0]
    by_source = {}
    for s in k["sources"]:
        by_source.setdefault(s["source"], []).append(s)
    for name, series in by_source.items():
        series.sort(key=lambda s: s.get("cgroups", 0))
        xs = [s.get("cgroups", 0) + 2 for s in series]
        for q, style in (("p50_ms", "-"), ("p99_ms", "--")):
            ys = [s.get(q) for s in series]
            ax.plot(xs, ys, style, marker="o", color=colors.get(name, "gray"), label=f"{name} {q[:3]}")
    ax.axhline(10, color="red", linewidth=0.8, linestyle=":", label="target p99 10 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("managed cgroups")
    ax.set_ylabel("reaction delay (ms)")
    ax.set_title(f'{k["kernel"]}: reaction vs tree size', fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax = row[1]
    arms = {}
    for c in k.get("cpu_cost", []):
        key = f'{"bpf" if c["bpf"] else "no bpf"}, {c["sampling_interval_ms"]} ms, {c["load"]}'
        arms.setdefault(key, []).append((c["cgroups"], c["cpu_pct"]))
    for key, pts in sorted(arms.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [max(p[1], 0.01) for p in pts], marker="o", label=key)
    ax.axhline(1, color="red", linewidth=0.8, linestyle=":", label="target idle 1%")
    ax.axhline(3, color="darkred", linewidth=0.8, linestyle=":", label="target faults 3%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("managed cgroups")
    ax.set_ylabel("daemon CPU (% of one core)")
    ax.set_title(f'{k["kernel"]}: daemon CPU vs tree size', fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
fig.suptitle("memqos daemon at scale (QEMU TCG guests on a shared 2-core host)", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
