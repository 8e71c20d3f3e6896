#!/usr/bin/env bash
# All tests: unit tests, then integration tests that boot real kernels (6.12 and 7.x) in
# QEMU guests. Set MEMQOS_TEST_KERNELS=7 (or 6.12) to test one series only. A guest test that
# skips fails unless MEMQOS_ALLOW_SKIP=1. Formatting and clippy are checked first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
start=$(date +%s)
bash scripts/check-paths.sh
cargo fmt --all --check
# Release: guest tests run the binaries under emulation, where optimisation matters.
cargo build --release --workspace --all-targets
cargo clippy --workspace --all-targets --release -- -D warnings
# The committed summary is what the committed runs give, and every generated doc table is what
# the summary gives (the unit test docs_match_the_committed_data checks the second alone).
# The binary the workspace build made: `cargo run -p` would resolve features for one package
# and build it again.
target/release/memqos-docs --check
# The Debian package from that build: contents, unpacked binary, unit verified (no install).
bash scripts/test-package.sh
# Two guests at once for mechanism tests (2 cores: one guest's boot and timer waits leave
# room for another); tests that measure a delay still run alone (crates/vmtest, slots).
MEMQOS_VM_SLOTS=${MEMQOS_VM_SLOTS:-2} cargo test --release --workspace --no-fail-fast -- --test-threads=2
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
