#!/usr/bin/env bash
# The main job: build memqos, boot real Debian kernels (6.12 and the newest 7.x) in QEMU
# and show memqos at work inside them. Kernels are downloaded once into ~/.cache/memqos.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -q -p memqos
exec ./target/release/memqos-lab demo "$@"
