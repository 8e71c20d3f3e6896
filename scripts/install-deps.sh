#!/usr/bin/env bash
# Installs what memqos needs on Debian 12, idempotently: only missing packages are installed,
# and a second run does nothing but check. The machine's apt sources are not changed.
set -euo pipefail

PACKAGES=(
    qemu-system-x86   # guests: real Debian kernels under QEMU (TCG)
    busybox-static    # the guest initramfs's shell and tools
    xz-utils zstd     # decompressing kernel modules for the initramfs
    e2fsprogs         # mkfs.ext4 for guest scratch disks
    xfsprogs          # mkfs.xfs for the dirty-page experiment's xfs arm (--fs xfs)
    clang llvm        # compiling BPF programs (CO-RE)
    libelf-dev zlib1g-dev pkg-config make   # building libbpf (libbpf-sys)
    bpftool           # inspecting BPF programs and BTF
    fio stress-ng     # real workloads for experiments
    oomd              # Meta's userspace OOM killer: the experiments' oomd arm runs it inside guests only
    python3-matplotlib   # PNG plots of experiment and benchmark results (scripts/plots)
    debian-archive-keyring
    systemd binutils python3-yaml   # scripts/test-package.sh: systemd-analyze verify, strip/readelf, the DaemonSet's YAML
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
    # The package enables and starts oomd.service on a systemd host. memqos needs only the
    # binary (the experiments start it in guests); a userspace OOM killer left running on a
    # build machine could kill its processes, so the service we just installed is switched off.
    if [[ " ${missing[*]} " == *" oomd "* ]] && [ -d /run/systemd/system ]; then
        echo "install-deps: disabling oomd.service on this host (the experiments run oomd inside guests only)"
        $SUDO systemctl disable --now oomd.service || true
    fi
fi
# systemd-oomd (the experiments' systemd-oomd arm) is only downloaded, not installed: on
# Debian 12 installing it would upgrade this machine's systemd packages to its exact version.
# The guests unpack it into their own writable root (crates/experiment/src/systemd_oomd.rs).
OOMD_DEBS=/var/cache/memqos
if ! compgen -G "$OOMD_DEBS/systemd-oomd_*.deb" >/dev/null; then
    echo "install-deps: downloading Debian's systemd-oomd package to $OOMD_DEBS"
    $SUDO mkdir -p "$OOMD_DEBS"
    if ! (cd "$OOMD_DEBS" && $SUDO apt-get download -q systemd-oomd 2>/dev/null); then
        $SUDO apt-get update -q
        (cd "$OOMD_DEBS" && $SUDO apt-get download -q systemd-oomd 2>/dev/null)
    fi
    compgen -G "$OOMD_DEBS/systemd-oomd_*.deb" >/dev/null \
        || { echo "install-deps: could not download systemd-oomd into $OOMD_DEBS" >&2; exit 1; }
fi
command -v cargo >/dev/null || { echo "install-deps: cargo not found: install Rust (rustup) first" >&2; exit 1; }
