#!/usr/bin/python3
"""Plots for the dirty-noisy-neighbour experiment.

Usage: /usr/bin/python3 scripts/plots/dirty.py docs/dirty/results.json docs/dirty
(results.json is written by `memqos-lab experiment dirty-noisy-neighbour --out ...`).
Writes summary.png (victim IOPS, p99 latency, noisy disk bandwidth; medians with min..max)
and timeline.png (dirty + writeback per cgroup and host-wide in one iteration per run).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1048576.0


def short(kernel):
    return kernel.split("+")[0]


def arm_of(policy, variant):
    return policy + (f" [{variant}]" if variant else "")


def run_variant(run):
    # Mirrors Settings::variant() in crates/lab/src/dirty/mod.rs.
    st = run["settings"]
    v = []
    if st.get("fs", "ext4") != "ext4":
        v.append(st["fs"])
    if not st.get("lazytime", True):
        v.append("no-lazytime")
    vw, nw = st.get("victim_wbps"), st.get("noisy_wbps")
    if vw is not None or nw is not None:
        k = lambda w: "max" if w is None else f"{w // 1024}K"
        v.append(f"io.max wbps victim {k(vw)} noisy {k(nw)}")
    if st.get("max_sectors_kb") is not None:
        v.append(f"max_sectors_kb {st['max_sectors_kb']}")
    return ", ".join(v)


def main(path, outdir):
    with open(path) as f:
        report = json.load(f)
    sums = report["summaries"]
    kernels = sorted({s["kernel"] for s in sums}, key=short)
    palette = ["#d62728", "#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b"]
    policies = []
    for s in sorted(sums, key=lambda s: (s.get("variant", ""), s["policy"] != "stock")):
        a = arm_of(s["policy"], s.get("variant", ""))
        if a not in policies:
            policies.append(a)
    colors = {a: palette[i % len(palette)] for i, a in enumerate(policies)}

    def get(kernel, policy):
        for s in sums:
            if s["kernel"] == kernel and arm_of(s["policy"], s.get("variant", "")) == policy:
                return s
        return None

    labelled = set()

    def label(ax, text):
        key = (id(ax), text)
        if key in labelled:
            return None
        labelled.add(key)
        return text

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    width = 0.8 / (2 * len(policies))
    # Victim IOPS: solo and contended for each policy.
    ax = axes[0]
    for ki, k in enumerate(kernels):
        for pi, p in enumerate(policies):
            s = get(k, p)
            if not s:
                continue
            for phase_i, (phase, hatch) in enumerate([("solo_iops", ""), ("contended_iops", "//")]):
                x = ki + (pi * 2 + phase_i - len(policies) + 0.5) * width
                sp = s[phase]
                ax.bar(x, sp["median"], width, color=colors[p], hatch=hatch, edgecolor="black",
                       yerr=[[sp["median"] - sp["min"]], [sp["max"] - sp["median"]]], capsize=3,
                       label=label(ax, f"{p} {'solo' if phase_i == 0 else 'contended'}"))
    ax.set_xticks(range(len(kernels)), [short(k) for k in kernels])
    ax.set_ylabel("victim write IOPS (fio rate: 125)")
    ax.set_title("victim IOPS: solo vs contended")
    ax.legend(fontsize=8)

    # p99 latency, log scale.
    ax = axes[1]
    for ki, k in enumerate(kernels):
        for pi, p in enumerate(policies):
            s = get(k, p)
            if not s:
                continue
            for phase_i, (phase, hatch) in enumerate([("solo_p99_ms", ""), ("contended_p99_ms", "//")]):
                x = ki + (pi * 2 + phase_i - len(policies) + 0.5) * width
                sp = s[phase]
                ax.bar(x, sp["median"], width, color=colors[p], hatch=hatch, edgecolor="black",
                       yerr=[[sp["median"] - sp["min"]], [sp["max"] - sp["median"]]], capsize=3,
                       label=label(ax, f"{p} {'solo' if phase_i == 0 else 'contended'}"))
    ax.set_yscale("log")
    ax.set_xticks(range(len(kernels)), [short(k) for k in kernels])
    ax.set_ylabel("victim p99 write() latency, ms (log)")
    ax.set_title("victim p99 latency")
    ax.legend(fontsize=8)

    # Noisy disk bandwidth and write() rate.
    ax = axes[2]
    for ki, k in enumerate(kernels):
        for pi, p in enumerate(policies):
            s = get(k, p)
            if not s:
                continue
            for mi, (metric, hatch) in enumerate([("noisy_disk_kib_s", ""), ("victim_disk_kib_s", "..")]):
                x = ki + (pi * 2 + mi - len(policies) + 0.5) * width
                sp = s[metric]
                ax.bar(x, sp["median"], width, color=colors[p], hatch=hatch, edgecolor="black",
                       yerr=[[sp["median"] - sp["min"]], [sp["max"] - sp["median"]]], capsize=3,
                       label=label(ax, f"{p} {'noisy' if mi == 0 else 'victim'} to disk"))
    ax.set_xticks(range(len(kernels)), [short(k) for k in kernels])
    ax.set_ylabel("KiB/s reaching the disk (io.stat), contended window")
    ax.set_title("disk bandwidth per cgroup")
    ax.legend(fontsize=8)
    ns = sorted({s["n"] for s in sums})
    fig.suptitle(f"dirty-noisy-neighbour: medians, bars = min..max (N = {', '.join(map(str, ns))} per arm; "
                 "TCG guests, 256 KB/s disk)", fontsize=10)
    fig.tight_layout()
    fig.savefig(f"{outdir}/summary.png", dpi=100)

    # Timelines: the median-retention iteration of each run.
    runs = report["runs"]
    fig, axes = plt.subplots(len(kernels), len(policies), figsize=(7 * len(policies), 4 * len(kernels)),
                             squeeze=False)
    for run in runs:
        ki = kernels.index(run["kernel"])
        arm = arm_of(run["policy"], run_variant(run))
        pi = policies.index(arm)
        its = run["iterations"]
        order = sorted(range(len(its)), key=lambda i: its[i]["contended"]["iops"])
        it = its[order[len(order) // 2]]
        ax = axes[ki][pi]
        t = [s["t"] for s in it["samples"]]
        ax.plot(t, [(s["global_dirty"] + s["global_writeback"]) / MIB for s in it["samples"]], "k-", label="host dirty+writeback")
        ax.plot(t, [(s["noisy_dirty"] + s["noisy_writeback"]) / MIB for s in it["samples"]], "-", color="#d62728", label="noisy dirty+writeback")
        ax.plot(t, [s["noisy_writeback"] / MIB for s in it["samples"]], ":", color="#d62728", label="noisy writeback")
        ax.plot(t, [(s["victim_dirty"] + s["victim_writeback"]) / MIB for s in it["samples"]], "-", color="#1f77b4", label="victim dirty+writeback")
        ax.plot(t, [s["victim_writeback"] / MIB for s in it["samples"]], ":", color="#1f77b4", label="victim writeback")
        thresh = run["dirty_threshold_pages"] * 4096 / MIB
        bg = run["dirty_background_threshold_pages"] * 4096 / MIB
        ax.axhline((thresh + bg) / 2, color="gray", ls="--", label="freerun ceiling")
        ax.axhline(thresh, color="gray", ls="-.", label="dirty limit")
        ax.axvline(0, color="gray", lw=0.5)
        ax.set_title(f"{short(run['kernel'])} {arm}:\nvictim {it['contended']['iops']:.0f} IOPS, "
                     f"p99 {it['contended']['p99_us'] / 1e3:.1f} ms (solo {it['solo']['iops']:.0f}, {it['solo']['p99_us'] / 1e3:.1f} ms)")
        ax.set_xlabel("s since the victim started next to noisy")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        if ki == 0 and pi == 0:
            ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(f"{outdir}/timeline.png", dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
