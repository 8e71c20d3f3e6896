#!/usr/bin/env bash
# Every generated table in the docs from the committed data: rebuilds
# docs/experiments/summary.json and report.md from docs/experiments/runs (kill bounds from
# traces/) and docs/agent-host/summary.json and report.md from docs/agent-host/runs (plots left
# as they are), then the regions between "<!-- generated: NAME" and
# "<!-- end generated: NAME -->" and the figure markers in the docs memqos-docs lists (README.md,
# docs/results/evidence.md, docs/experiments.md, ...: DOCS in crates/experiment/src/docs/mod.rs).
# `bash scripts/docs.sh --check` only checks and writes nothing (the unit tests
# report_files_match_the_committed_runs and docs_match_the_committed_data do too);
# `bash scripts/docs.sh --figure 'QUERY'` prints one figure marker's value; `--help`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -p memqos-experiment --bin memqos-docs -- "$@"
