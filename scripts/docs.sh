#!/usr/bin/env bash
# Every generated table in the docs from the committed data: rebuilds
# docs/experiments/summary.json and report.md from docs/experiments/runs (kill bounds from
# traces/, plots left as they are), then the regions between "<!-- generated: NAME" and
# "<!-- end generated: NAME -->" in README.md and docs/experiments.md.
# `bash scripts/docs.sh --check` only checks (the unit test docs_match_the_committed_data does too).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -p memqos-experiment --bin memqos-docs -- "$@"
