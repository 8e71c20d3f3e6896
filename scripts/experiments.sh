#!/usr/bin/env bash
# Regenerates docs/experiments/ (per-arm JSON, summary.json, report.md, plots): every
# scenario in experiments/ (incl. sweep-tight, issue 18's 70% sweep; rfc-demo, the RFC
# cover letter's stress-ng demo with swap, ~11 min per kernel; oom-swap, oom-zswap,
# contention-swap and contention-zswap, issue 16.6's repeats with a swap disk, ~11 min each
# per kernel), 5 runs, on the 7.x and 6.12 kernels, in QEMU guests. The agent-host
# experiment has its own command: `bash scripts/experiments.sh agent-host` runs it (both
# kernels, 5 runs, ~25 min each) into docs/agent-host/. The oomd arm (oom, contention, rfc-demo) needs the Debian package
# oomd, which install-deps.sh installs; the systemd-oomd arm (oom-systemd, contention-systemd)
# boots those scenarios' guests with systemd and unpacks Debian's systemd-oomd, which install-deps.sh downloads. A long series can be run in chunks that add to its
# results: `oom --runs 2 --kernel 7`, then `oom --runs 3 --first-run 3 --kernel 7`.
# About 4 h of guest time on a 2-core TCG host (measured 2026-11-22: ~45 min per kernel
# without sweep-tight; sweep-tight alone took ~10 min per run on 2026-11-23; the swap repeats
# add ~1.5 h); progress and an estimate are printed. The report's kill bound (avoidability.rs) reads the traces, no guest.
# Extra arguments go to `memqos experiment` (e.g. `oom --runs 1 --kernel 7`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -q
if [ "${1:-}" = agent-host ] && (($# == 1)); then
    exec target/release/memqos experiment agent-host --runs 5 --kernel 7,6.12 --out docs/agent-host
fi
if (($#)); then
    exec target/release/memqos experiment "$@"
fi
exec target/release/memqos experiment all --runs 5 --kernel 7,6.12 --out docs/experiments
