#!/usr/bin/env bash
# The Debian package, end to end on the build machine (nothing is installed on it): builds the
# .deb from target/release/memqos, checks its metadata and file list, unpacks it into a scratch
# root, runs the unpacked binary (--version, --check on the shipped config, man pages,
# completions) and verifies the unit with systemd-analyze against that root.
# Run by scripts/test.sh after the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
deb=$(bash scripts/build-deb.sh --no-build "$out/deb" | tail -1)
[ -f "$deb" ] || fail "build-deb.sh printed no package ($deb)"
version=$(target/release/memqos --version | awk '{print $2}')

info=$(dpkg-deb -I "$deb")
grep -q "^ Package: memqos$" <<<"$info" || fail "control has no Package: memqos"
grep -q "^ Version: $version$" <<<"$info" || fail "control version is not $version"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$(dpkg --print-architecture)" ] || fail "wrong architecture"
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/memqos/memqos.toml ] || fail "conffiles is not exactly /etc/memqos/memqos.toml"

contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/memqos ./usr/bin/memqos-run ./lib/systemd/system/memqos.service ./etc/memqos/memqos.toml \
    ./usr/share/man/man1/memqos.1.gz ./usr/share/man/man1/memqos-daemon.1.gz \
    ./usr/share/man/man1/memqos-restore.1.gz ./usr/share/man/man1/memqos-status.1.gz \
    ./usr/share/man/man1/memqos-explain.1.gz ./usr/share/man/man1/memqos-init.1.gz \
    ./usr/share/man/man5/memqos.toml.5.gz \
    ./usr/share/bash-completion/completions/memqos ./usr/share/zsh/vendor-completions/_memqos \
    ./usr/share/fish/vendor_completions.d/memqos.fish ./usr/share/doc/memqos/copyright \
    ./usr/share/memqos/profiles/systemd.toml ./usr/share/memqos/profiles/kubernetes.toml \
    ./usr/share/memqos/profiles/agent-host.toml ./usr/share/doc/memqos/examples/memqos.example.toml; do
    grep -q " $path\$" <<<"$contents" || fail "$path missing from the package"
done
# Hidden commands are for tests and packaging, not for operators' manuals.
! grep -q "memqos-workload\|memqos-generate" <<<"$contents" || fail "a hidden command has a man page"
# The lab (demo, experiments, benchmarks, guests) is memqos-lab, never packaged.
! grep -q "memqos-lab\|memqos-demo\|memqos-bench\|memqos-experiment\|memqos-vm\|memqos-replay" <<<"$contents" ||
    fail "the package holds the lab binary or a lab command's man page"
grep -q "^-rwxr-xr-x root/root .* ./usr/bin/memqos$" <<<"$contents" || fail "binary not root-owned 0755"

root="$out/root"
dpkg-deb -x "$deb" "$root"
got=$("$root/usr/bin/memqos" --version)
[ "$got" = "memqos $version" ] || fail "unpacked binary says '$got'"
commands=$("$root/usr/bin/memqos" --help | sed -n '/^Commands:/,/^$/p')
for lab in demo bench experiment vm workload replay; do
    ! grep -q "^  $lab " <<<"$commands" || fail "memqos --help lists the lab command $lab"
    ! "$root/usr/bin/memqos" "$lab" --help >/dev/null 2>&1 || fail "memqos runs the lab command $lab"
done
grep -q "^  daemon " <<<"$commands" || fail "memqos --help does not list daemon"
got=$("$root/usr/bin/memqos-run" --version)
[ "$got" = "memqos-run $version" ] || fail "unpacked memqos-run says '$got'"
! ldd "$root/usr/bin/memqos-run" | grep -q "libelf\|libz" || fail "memqos-run links libelf or libz"
"$root/usr/bin/memqos" daemon --check --config "$root/etc/memqos/memqos.toml" || fail "shipped config does not pass --check"
cmp -s "$root/etc/memqos/memqos.toml" configs/systemd.toml || fail "shipped config differs from configs/systemd.toml"
# Every profile: shipped as in configs/, valid, and what `memqos init` writes without the files.
for f in configs/*.toml; do
    p=$(basename "$f" .toml)
    cmp -s "$root/usr/share/memqos/profiles/$p.toml" "$f" || fail "profile $p: /usr/share/memqos/profiles/$p.toml differs from $f"
    "$root/usr/bin/memqos" daemon --check --config "$root/usr/share/memqos/profiles/$p.toml" >/dev/null || fail "profile $p does not pass --check"
    "$root/usr/bin/memqos" init --profile "$p" --output "$out/init-$p.toml" --json >/dev/null || fail "memqos init --profile $p"
    cmp -s "$out/init-$p.toml" "$f" || fail "memqos init --profile $p wrote something other than $f"
done
! "$root/usr/bin/memqos" init --profile agent-host --output "$out/init-agent-host.toml" 2>/dev/null || fail "memqos init overwrote a file without --force"
zcat "$root/usr/share/man/man5/memqos.toml.5.gz" | grep -q '^\.TH memqos\.toml 5' || fail "memqos.toml.5 has no .TH header"
zcat "$root/usr/share/man/man5/memqos.toml.5.gz" | grep -q 'admission_wait_ms' || fail "memqos.toml.5 does not document policy.admission_wait_ms"
! readelf -S "$root/usr/bin/memqos" | grep -q "\.debug_info" || fail "binary still has debug info"
zcat "$root/usr/share/man/man1/memqos-daemon.1.gz" | grep -q '^\.TH memqos-daemon 1' || fail "memqos-daemon.1 has no .TH header"
zcat "$root/usr/share/man/man1/memqos-daemon.1.gz" | grep -q 'state\\-dir' || fail "memqos-daemon.1 does not document --state-dir"
grep -q "daemon" "$root/usr/share/bash-completion/completions/memqos" || fail "bash completion lacks 'daemon'"
bash -n "$root/usr/share/bash-completion/completions/memqos" || fail "bash completion is not valid bash"
grep -q "complete -c memqos" "$root/usr/share/fish/vendor_completions.d/memqos.fish" || fail "fish completion malformed"
head -1 "$root/usr/share/zsh/vendor-completions/_memqos" | grep -q "^#compdef memqos" || fail "zsh completion lacks #compdef"
for s in postinst prerm postrm; do
    dpkg-deb --ctrl-tarfile "$deb" | tar -xO "./$s" | sh -n || fail "$s is not valid sh"
done

# systemd-analyze verify resolves ExecStart= against --root, and the man pages of
# Documentation= through MANPATH; the host's own units (sysinit.target, ...) are copied into
# the scratch root so it looks like a host with the package installed.
unit="$root/lib/systemd/system/memqos.service"
cp -rn /lib/systemd/system/. "$root/lib/systemd/system/"
# BPF privileges only by the drop-in shipped for configs that use BPF (docs/operators.md).
! grep -q "^CapabilityBoundingSet=.*CAP_\(BPF\|PERFMON\|SYS_ADMIN\)" "$unit" || fail "the unit grants BPF capabilities without BPF configured"
grep -q " ./usr/share/doc/memqos/examples/memqos.service.d/bpf.conf\$" <<<"$contents" || fail "the BPF drop-in is not shipped"
grep -q "^KillMode=process$" "$unit" && grep -q "^Type=notify$" "$unit" && grep -q "^ReadWritePaths=/sys/fs/cgroup$" "$unit" ||
    fail "unit lacks KillMode=process, Type=notify or ReadWritePaths=/sys/fs/cgroup"
verify=$(MANPATH="$root/usr/share/man" SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$root" "$unit" 2>&1) ||
    fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warned: $verify"
exposure=$(systemd-analyze security --offline=yes --root="$root" memqos.service 2>&1 | grep -o "Overall exposure level for memqos.service: [0-9.]*" || true)
[ -n "$exposure" ] || fail "systemd-analyze security gave no exposure level"
echo "test-package: $exposure (10 = unsandboxed root service)"
echo "test-package: ok: $(basename "$deb"), $(wc -l <<<"$contents") entries, unpacked binary runs, unit verifies"

# The Kubernetes DaemonSet: least privilege as documented, and its ConfigMap is
# configs/kubernetes.toml with the host's cgroupfs at /host/sys/fs/cgroup.
python3 - "$root/usr/bin/memqos" <<'PY' || fail "deploy/kubernetes/daemonset.yaml"
import subprocess, sys, tempfile, tomllib, yaml
docs = list(yaml.safe_load_all(open("deploy/kubernetes/daemonset.yaml")))
kinds = [d["kind"] for d in docs]
assert kinds == ["Namespace", "ConfigMap", "DaemonSet"], kinds
cm, ds = docs[1], docs[2]
pod = ds["spec"]["template"]["spec"]
c, g = pod["containers"]
assert (c["name"], g["name"]) == ("memqos", "guardian"), [c["name"], g["name"]]
assert g["args"][:2] == ["restore", "--watch"] and "/run/memqos" in g["args"], g["args"]
assert g["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
sc = c["securityContext"]
assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, sc
assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_RESOURCE", "IPC_LOCK"]}, sc["capabilities"]
assert pod["hostPID"] is False and pod["hostNetwork"] is False and pod["automountServiceAccountToken"] is False
assert pod["shareProcessNamespace"] is True
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
vols = {v["name"]: v for v in pod["volumes"]}
# Only the managed subtree of the host's cgroupfs, in both containers.
managed = "/host/sys/fs/cgroup/kubepods.slice"
assert vols[mounts[managed]["name"]]["hostPath"]["path"] == "/sys/fs/cgroup/kubepods.slice"
assert {m["mountPath"] for m in g["volumeMounts"]} == {managed, "/run/memqos"}
# The journal on the host's boot-scoped /run, the learned history on disk.
assert vols[mounts["/run/memqos"]["name"]]["hostPath"]["path"] == "/run/memqos"
assert vols[mounts["/var/lib/memqos"]["name"]]["hostPath"]["path"] == "/var/lib/memqos"
probe = c["livenessProbe"]["exec"]["command"]
assert probe[:2] == ["memqos", "status"] and "--live-within" in probe and "/run/memqos" in probe, probe
text = cm["data"]["memqos.toml"]
shipped = tomllib.load(open("configs/kubernetes.toml", "rb"))
got = tomllib.loads(text)
assert got["cgroup_root"] == "/host" + shipped["cgroup_root"] == managed, got["cgroup_root"]
got["cgroup_root"] = shipped["cgroup_root"]
assert got == shipped, "ConfigMap differs from configs/kubernetes.toml"
with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
    f.write(text); f.flush()
    subprocess.run([sys.argv[1], "daemon", "--check", "--config", f.name], check=True)
PY
echo "test-package: ok: deploy/kubernetes/daemonset.yaml is least-privilege and carries configs/kubernetes.toml"
