#!/usr/bin/env bash
# Builds the Debian package of memqos with dpkg-deb alone (no debhelper, no network):
#   scripts/build-deb.sh [--no-build] [--compression xz|gzip|none] [OUTDIR]
#                                                   (default OUTDIR: target/debian)
# Contents: /usr/bin/memqos, /usr/bin/memqos-run (`memqos run` as a small program, for
# agent hosts that start it per tool call), the systemd unit, /etc/memqos/memqos.toml (a conffile, from
# configs/systemd.toml), the example configs, man pages and bash/zsh/fish completions
# generated from the CLI definition (`memqos generate`). Prints the .deb's path last.
# --no-build packages target/release/memqos and memqos-run as they are (the test script uses it).
# --compression: xz (the default, what ships) or gzip/none for a package built under emulation
# (the guest test under systemd: xz of the two binaries takes ~10 s natively, minutes in TCG).
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
compression=xz
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --compression)
            case "${2:-}" in
                xz|gzip|none) compression=$2; shift 2 ;;
                *) echo "build-deb: --compression takes xz, gzip or none, not '${2:-}'" >&2; exit 2 ;;
            esac ;;
        -*) echo "build-deb: unknown option $1 (usage: build-deb.sh [--no-build] [--compression xz|gzip|none] [OUTDIR])" >&2; exit 2 ;;
        *) break ;;
    esac
done
out=${1:-target/debian}

if ((build)); then cargo build --release --locked -p memqos -p memqos-agent; fi
bin=target/release/memqos
for b in "$bin" target/release/memqos-run; do
    [ -x "$b" ] || { echo "build-deb: $b missing: run without --no-build" >&2; exit 1; }
done
version=$("$bin" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "build-deb: cannot read the version from $bin --version" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# Debug info stays in target/ (the release profile keeps it for perf); the package is stripped.
install -D -m 0755 "$bin" "$root/usr/bin/memqos"
install -D -m 0755 target/release/memqos-run "$root/usr/bin/memqos-run"
strip --strip-debug "$root/usr/bin/memqos" "$root/usr/bin/memqos-run"
install -D -m 0644 packaging/memqos.service "$root/lib/systemd/system/memqos.service"
install -D -m 0644 configs/systemd.toml "$root/etc/memqos/memqos.toml"
doc="$root/usr/share/doc/memqos"
install -D -m 0644 packaging/copyright "$doc/copyright"
install -D -m 0644 -t "$doc/examples" configs/*.toml crates/policy/memqos.example.toml
install -D -m 0644 -t "$doc" docs/operators.md docs/metrics.md
install -D -m 0644 packaging/memqos.service.d/bpf.conf "$doc/examples/memqos.service.d/bpf.conf"

"$bin" generate man "$root/usr/share/man/man1" >/dev/null
gzip -9n "$root"/usr/share/man/man1/*.1
comp=$(mktemp -d -p "$root")
"$bin" generate completions "$comp" >/dev/null
install -D -m 0644 "$comp/memqos.bash" "$root/usr/share/bash-completion/completions/memqos"
install -D -m 0644 "$comp/_memqos" "$root/usr/share/zsh/vendor-completions/_memqos"
install -D -m 0644 "$comp/memqos.fish" "$root/usr/share/fish/vendor_completions.d/memqos.fish"
rm -rf "$comp"

mkdir -p "$root/DEBIAN"
size_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: memqos
Version: $version
Architecture: $arch
Maintainer: memqos developers <memqos@localhost>
Installed-Size: $size_kb
Depends: libc6 (>= 2.34), libelf1, zlib1g, libgcc-s1
Section: admin
Priority: optional
Description: priority memory QoS for cgroup v2 hosts
 A node agent that keeps latency-critical cgroups fast by protecting their
 working set (memory.low/min) and throttling lower tiers (memory.high) under
 pressure, instead of letting the kernel OOM-kill them. Every knob it writes is
 journaled and restored when it stops or dies. The unit is installed but not
 enabled: edit /etc/memqos/memqos.toml, then systemctl enable --now memqos.
CONTROL
echo /etc/memqos/memqos.toml > "$root/DEBIAN/conffiles"
install -m 0755 packaging/postinst packaging/prerm packaging/postrm "$root/DEBIAN/"

mkdir -p "$out"
deb="$out/memqos_${version}_${arch}.deb"
dpkg-deb --root-owner-group "-Z$compression" --build "$root" "$deb" >/dev/null
echo "$deb"
