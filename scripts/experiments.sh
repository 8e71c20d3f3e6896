#!/usr/bin/env bash
# Regenerates docs/experiments/ (per-arm JSON, summary.json, report.md, plots): every
# scenario in experiments/, 5 runs, on the 7.x and 6.12 kernels, in QEMU guests. Guest time
# per kernel on a 2-core TCG host: the seed's scenarios and their -cpu twins ~45 min
# (measured 2026-11-22); sweep-tight (issue 18's 70% sweep) ~10 min per run; rfc-demo and
# rfc-demo-zswap (the RFC cover letter's stress-ng demo with swap, 60 s per arm as there) ~27
# min each (rfc-demo-cpu, rfc-demo-thrash ~21 min, the two neighbour scenarios ~15 min
# per kernel); oom-swap, oom-zswap, contention-swap, contention-zswap (issue 16.6) ~11 min each;
# oom-systemd and contention-systemd ~9 min each. About 6 h in all; progress and an estimate
# are printed. The real-time scenarios (oom-realtime, oom-systemd-realtime, sweep-tight-realtime:
# speed 1, issue 29.2; not run yet) add, from the traces' lengths, ~18, ~20 and ~75 min per run. The agent-host experiment has its own command: `bash scripts/experiments.sh
# agent-host` runs it (both kernels, 5 runs, ~25 min each) into docs/agent-host/. The oomd arm
# needs the Debian package oomd, which install-deps.sh installs; the systemd-oomd arm
# (oom-systemd, contention-systemd) boots those scenarios' guests with systemd and unpacks
# Debian's systemd-oomd, which install-deps.sh downloads. A long series can be run in chunks
# that add to its results: `oom --runs 2 --kernel 7`, then `oom --runs 3 --first-run 3
# --kernel 7`. The report's kill bound (avoidability.rs) reads the traces, no guest.
# Extra arguments go to `memqos-lab experiment` (e.g. `oom --runs 1 --kernel 7`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -q
if [ "${1:-}" = agent-host ] && (($# == 1)); then
    exec target/release/memqos-lab experiment agent-host --runs 5 --kernel 7,6.12 --out docs/agent-host
fi
if (($#)); then
    exec target/release/memqos-lab experiment "$@"
fi
exec target/release/memqos-lab experiment all --runs 5 --kernel 7,6.12 --out docs/experiments
