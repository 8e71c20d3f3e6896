#!/usr/bin/python3
"""Plots docs/agent/churn.json (written by `memqos-lab bench churn`) as docs/agent/churn.png:
per kernel, the daemon's RSS, CPU, journal and event-log size over the run (one point per
10 s), and the adoption delays (p50, p99, max) against the 100 ms target.
Run with Debian's python3 (matplotlib): /usr/bin/python3 scripts/plots/churn.py
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/agent/churn.json")
out = Path(sys.argv[2] if len(sys.argv) > 2 else src.with_suffix(".png"))
kernels = json.loads(src.read_text())["kernels"]
fig, axes = plt.subplots(len(kernels), 3, figsize=(14, 3.8 * len(kernels)), squeeze=False)
for row, k in zip(axes, kernels):
    t = [s["at_s"] for s in k["samples"]]
    title = f'{k["kernel"]}: {k["created"]} tool calls, {k["rate_achieved"]:.0f}/s'

    ax = row[0]
    ax.plot(t, [s["cpu_pct"] for s in k["samples"]], marker=".", color="tab:red", label="CPU (% of one core)")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("daemon CPU, %")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(t, [s["rss_kib"] / 1024 for s in k["samples"]], marker=".", color="tab:blue", label="RSS (MiB)")
    ax2.set_ylabel("daemon RSS, MiB")
    ax2.set_ylim(bottom=0)
    ax.set_title(f"{title}: CPU and RSS", fontsize=9)
    ax.grid(True, alpha=0.3)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="lower right")

    ax = row[1]
    ax.plot(t, [s["journal_bytes"] / 1024 for s in k["samples"]], marker=".", label="journal")
    ax.plot(t, [s["log_bytes"] / 1024 for s in k["samples"]], marker=".", label="event log (both files)")
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("KiB")
    ax.set_title("journal and event log (the log rotates at 8 MiB)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

    ax = row[2]
    names = ["cpu.weight", "oom_score_adj"]
    delays = [k["cpu_weight"], k["oom_score_adj"]]
    for i, (q, color) in enumerate((("p50_ms", "tab:green"), ("p99_ms", "tab:orange"), ("max_ms", "tab:gray"))):
        ax.bar([x + i * 0.25 for x in range(2)], [d[q] or 0 for d in delays], width=0.25, color=color, label=q[:-3])
    ax.axhline(100, color="red", linewidth=0.8, linestyle=":", label="target p99 100 ms")
    ax.set_xticks([x + 0.25 for x in range(2)], [f'{n}\n(n {d["n"]}, misses {d["misses"]})' for n, d in zip(names, delays)])
    ax.set_ylabel("mkdir to the daemon's write, ms")
    ax.set_title("a new cgroup's knobs: delay", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
fig.suptitle("memqos daemon under tool-call cgroup churn (QEMU TCG guest on a shared 2-core host)", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
