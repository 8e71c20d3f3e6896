#!/usr/bin/env bash
# Regenerates crates/bpf/include/vmlinux.h from the BTF of a real Debian kernel booted in a
# guest (default series 7; pass 6.12 for the other), and records where it came from in
# crates/bpf/include/vmlinux.h.source. The BPF programs are CO-RE, so one header serves every
# kernel; regenerate when a program needs a type or field the current header lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
series=${1:-7}
include=crates/bpf/include
cargo build --release -p memqos
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The guest writes into its results directory (the same path on the host).
target/release/memqos-lab vm run --kernel "$series" -- /bin/sh -c \
  'bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$MEMQOS_RESULTS/vmlinux.h" &&
   bpftool version | head -1 > "$MEMQOS_RESULTS/bpftool" && uname -r > "$MEMQOS_RESULTS/release"' 2>&1 | tee "$log"
results=$(sed -n 's/.*results in \(.*\)$/\1/p' "$log" | tail -1)
if [ -z "$results" ] || [ ! -s "$results/vmlinux.h" ]; then
  echo "vmlinux.sh: the guest wrote no vmlinux.h (see the console above)" >&2
  exit 1
fi
cp "$results/vmlinux.h" "$include/vmlinux.h"
release=$(cat "$results/release")
package=""
for dir in "${MEMQOS_CACHE:-$HOME/.cache/memqos}"/kernels/*/; do
  version=$(basename "$dir")
  case "$release" in "$version"*) package=$version ;; esac
done
cat > "$include/vmlinux.h.source" <<SOURCE
vmlinux.h: bpftool btf dump file /sys/kernel/btf/vmlinux format c
kernel: $release (Debian package ${package:-$release}, series $series)
bpftool: $(cat "$results/bpftool")
sha256: $(sha256sum "$include/vmlinux.h" | cut -d' ' -f1)
regenerate: bash scripts/vmlinux.sh $series
SOURCE
echo "vmlinux.sh: $include/vmlinux.h from $release"; cat "$include/vmlinux.h.source"
