#!/usr/bin/python3
"""Plots docs/bpf/reaction.json (written by `memqos-lab bench reaction`) as docs/bpf/reaction.png:
per kernel, each signal source's reaction delays with the protected/low pair alone (every run as a dot, p50 and p99 marked),
log scale. Run with Debian's python3 (matplotlib): /usr/bin/python3 scripts/plots/bpf_reaction.py
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bpf/reaction.json")
out = Path(sys.argv[2] if len(sys.argv) > 2 else src.with_suffix(".png"))
doc = json.loads(src.read_text())
kernels = doc["kernels"]
fig, axes = plt.subplots(1, len(kernels), figsize=(5.5 * len(kernels), 4.5), sharey=True, squeeze=False)
colors = {"bpf": "tab:green", "psi": "tab:orange", "events": "tab:blue"}
for ax, k in zip(axes[0], kernels):
    names = []
    # The pair alone (no extra managed cgroups); scale.png shows the size axis.
    for i, s in enumerate([s for s in k["sources"] if s.get("cgroups", 0) == 0]):
        d = s["delays_ms"]
        names.append(f'{s["source"]}\nN={s["runs"]}, miss={s["misses"]}')
        xs = [i + (j % 7 - 3) * 0.03 for j in range(len(d))]
        ax.scatter(xs, d, s=14, alpha=0.7, color=colors.get(s["source"], "gray"))
        for q, style in (("p50_ms", "-"), ("p99_ms", "--")):
            if s.get(q) is not None:
                ax.hlines(s[q], i - 0.3, i + 0.3, colors="black", linestyles=style, linewidth=1)
                ax.annotate(f'{q[:3]} {s[q]:.1f}', (i + 0.32, s[q]), fontsize=7, va="center")
    ax.axhline(10, color="red", linewidth=0.8, linestyle=":")
    ax.text(-0.45, 10.5, "10 ms target", color="red", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_xlim(-0.5, len(names) - 0.2)
    ax.set_yscale("log")
    ax.set_title(f'kernel {k["kernel"]}', fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
axes[0][0].set_ylabel("crossing -> first memory.high write on the low tier (ms)")
fig.suptitle("memqos reaction delay per signal source\n(QEMU TCG guests, shared 2-core host; each dot one run)", fontsize=9)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(f"wrote {out}")
