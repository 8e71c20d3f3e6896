//! The doctor against fake /proc and /sys trees and this machine.

use crate::*;
use memqos_bpf::btf::builder::Builder;
use memqos_bpf::btf::Kind;
use memqos_bpf::features::{MEMCG_KFUNCS, MEMCG_TRACEPOINTS, PRESSURE_FENTRY};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fake `/proc` + `/sys` under the system temp dir, removed on drop.
struct FakeTree {
    root: PathBuf,
}

impl FakeTree {
    fn new(name: &str) -> FakeTree {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "memqos-doctor-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        FakeTree { root }
    }

    fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.root.join(rel)).unwrap();
    }

    fn paths(&self) -> SystemPaths {
        SystemPaths { proc: self.root.join("proc"), sys: self.root.join("sys") }
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Kernel BTF shaped like 6.12 (`Old`), 6.18 (memcg tracepoints, no kfuncs) or 7.x.
#[derive(Clone, Copy, PartialEq)]
enum KernelBtf {
    V6_12,
    V6_18,
    V7,
}

fn kernel_btf(k: KernelBtf) -> Vec<u8> {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let proto = b.func_proto(int, &[]);
    b.composite(Kind::Struct, "task_struct", 8, &[("pid", int, 0)]);
    b.composite(Kind::Struct, "bpf_iter__cgroup", 16, &[("meta", int, 0)]);
    for name in PRESSURE_FENTRY.iter().filter(|n| !n.starts_with("calc") && **n != "mem_cgroup_handle_over_high") {
        b.func(name, proto);
    }
    if k != KernelBtf::V6_12 {
        for spec in MEMCG_TRACEPOINTS {
            b.typedef(spec.btf_typedef, proto);
        }
    }
    if k == KernelBtf::V7 {
        for name in MEMCG_KFUNCS {
            let f = b.func(name, proto);
            b.decl_tag("bpf_kfunc", f, -1);
        }
    }
    b.build()
}

const HOST_MOUNTINFO: &str = "\
23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

const PSI: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
const NO_SWAP: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

/// The build host: memory on cgroup v1, v2 at /sys/fs/cgroup/unified without memory.
fn host_like() -> FakeTree {
    let t = FakeTree::new("v1");
    t.write("proc/sys/kernel/osrelease", "6.18.44-fc-v445\n");
    t.write("proc/self/mountinfo", HOST_MOUNTINFO);
    t.write(
        "proc/cgroups",
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t1\t1\nmemory\t4\t48\t1\npids\t8\t1\t1\n",
    );
    t.write("sys/fs/cgroup/unified/cgroup.controllers", "\n");
    t.write("sys/fs/cgroup/unified/cgroup.subtree_control", "\n");
    t.write("sys/fs/cgroup/unified/memory.pressure", PSI);
    t.write("proc/pressure/memory", PSI);
    t.write("sys/kernel/btf/vmlinux", kernel_btf(KernelBtf::V6_18));
    t.write("proc/swaps", NO_SWAP);
    t.write("sys/module/zswap/parameters/enabled", "N\n");
    t
}

/// A 7.x guest with memory on cgroup v2 at /sys/fs/cgroup, enabled for children.
fn v2_ready() -> FakeTree {
    let t = FakeTree::new("v2");
    t.write("proc/sys/kernel/osrelease", "7.2.13-amd64\n");
    t.write(
        "proc/self/mountinfo",
        "22 1 0:20 / /sys rw - sysfs sysfs rw\n\
         30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 none rw,nsdelegate,memory_recursiveprot\n",
    );
    t.write("proc/cgroups", "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t0\t5\t1\nmemory\t0\t5\t1\n");
    t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    t.write("sys/fs/cgroup/cgroup.subtree_control", "cpu memory pids\n");
    t.write("sys/fs/cgroup/memory.pressure", PSI);
    t.write("proc/pressure/memory", PSI);
    t.write("sys/kernel/btf/vmlinux", kernel_btf(KernelBtf::V7));
    t.write("proc/swaps", format!("{NO_SWAP}/dev/vda2                               partition\t1048572\t\t0\t\t-2\n"));
    t.write("sys/module/zswap/parameters/enabled", "Y\n");
    t
}

#[test]
fn swap_accounting_is_read_from_a_child_cgroup() {
    let t = v2_ready();
    t.write("sys/fs/cgroup/init.scope/memory.current", "4096\n");
    let r = collect(&t.paths());
    assert_eq!(r.swap_accounting, Some(false));
    let text = render_text(&r);
    assert!(text.contains("swap acct   none (no memory.swap.max)"), "{text}");
    assert!(r.findings.iter().any(|f| f.topic == "swap" && f.message.contains("no memory.swap.max")), "{text}");
    t.write("sys/fs/cgroup/init.scope/memory.swap.max", "max\n");
    let r = collect(&t.paths());
    assert_eq!(r.swap_accounting, Some(true));
    assert!(!r.findings.iter().any(|f| f.topic == "swap"), "{}", render_text(&r));
}

#[test]
fn host_like_v1_memory_cannot_run_and_points_to_a_guest() {
    let t = host_like();
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::CannotRun);
    assert_eq!(exit_code(&r), 1);
    assert!(r.memory_controller.bound_to_v1);
    assert_eq!(r.memory_controller.v1_mounts, [PathBuf::from("/sys/fs/cgroup/memory")]);
    assert_eq!(r.memory_controller.proc_cgroups.as_ref().unwrap().hierarchy, 4);
    assert_eq!(r.cgroup2_root.as_ref().unwrap().mount_point, Path::new("/sys/fs/cgroup/unified"));
    assert_eq!(r.kernel_release.as_deref(), Some("6.18.44-fc-v445"));

    let text = render_text(&r);
    assert!(
        text.contains("the memory controller is bound to the cgroup v1 hierarchy at /sys/fs/cgroup/memory; memqos needs it on cgroup v2"),
        "{text}"
    );
    assert!(text.contains("verdict: CANNOT RUN HERE (exit 1)"), "{text}");
    assert!(text.contains(&format!("`{GUEST_COMMAND}`")), "{text}");
    assert!(text.contains("memqos-lab vm run --kernel 7 -- memqos doctor"));
    // Only the root cause is a blocker; the empty v2 controllers follow from it.
    assert_eq!(r.findings.iter().filter(|f| f.severity == Severity::Blocker).count(), 1);
    // Optional interfaces are still reported.
    assert!(text.contains("memcg kfuncs absent (kernel < 7.0): `memqos stat` uses the text backend"), "{text}");
    assert!(text.contains("memcg tracepoints: present"), "{text}");
    assert!(text.contains("per-cgroup memory.pressure: v1 memory cgroups have none"), "{text}");
    assert!(text.contains("no swap"), "{text}");
    assert!(r.read_errors.is_empty(), "{:?}", r.read_errors);
}

#[test]
fn v2_with_memory_enabled_is_ready() {
    let t = v2_ready();
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::Ready, "{}", render_text(&r));
    assert_eq!(exit_code(&r), 0);
    assert!(r.memory_controller.available_on_v2 && r.memory_controller.enabled_for_children);
    assert!(!r.memory_controller.bound_to_v1);
    assert_eq!(r.swap.total_kib, 1_048_572);
    assert_eq!(r.zswap_enabled, Some(true));
    assert_eq!(r.swap_accounting, None, "no child cgroup to look at");
    let text = render_text(&r);
    assert!(text.contains("verdict: READY (exit 0)"), "{text}");
    assert!(text.contains(
        "memcg_bpf_ops struct_ops absent (RFC, in no released kernel): memqos enforces priorities with memory.high/low/min from user space"
    ), "{text}");

    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["verdict"], "ready");
    assert_eq!(json["btf"]["features"]["memcg_kfuncs"]["availability"], "present");
    assert_eq!(json["cgroup2_root"]["mount_point"], "/sys/fs/cgroup");
}

#[test]
fn v2_without_memory_in_subtree_control_says_how_to_enable_it() {
    let t = v2_ready();
    t.write("sys/fs/cgroup/cgroup.subtree_control", "cpu pids\n");
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::CannotRun);
    assert_eq!(exit_code(&r), 1);
    let f = &r.findings[0];
    assert_eq!((f.severity, f.topic), (Severity::Blocker, "memory controller"));
    assert!(f.message.contains("not enabled for its children (cgroup.subtree_control: cpu pids)"), "{}", f.message);
    assert_eq!(f.advice.as_deref(), Some("enable it as root: `echo +memory > /sys/fs/cgroup/cgroup.subtree_control`"));
}

#[test]
fn missing_btf_degrades_to_the_text_backend() {
    let t = v2_ready();
    t.remove("sys/kernel/btf/vmlinux");
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::Degraded);
    assert_eq!(exit_code(&r), 2);
    assert_eq!(r.btf.state, FileState::Missing);
    assert!(r.btf.features.is_none());
    let text = render_text(&r);
    assert!(text.contains("missing (kernel without CONFIG_DEBUG_INFO_BTF)"), "{text}");
    assert!(text.contains("`memqos stat` uses the text backend"), "{text}");
    assert!(text.contains("verdict: DEGRADED (exit 2)\n  memqos can run here, with fallbacks for: BTF\n"), "{text}");
}

#[test]
fn malformed_btf_is_reported_not_fatal() {
    let t = v2_ready();
    t.write("sys/kernel/btf/vmlinux", b"not btf at all, but long enough to have a header".as_slice());
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::Degraded);
    assert_eq!(r.btf.state, FileState::Unreadable);
    assert!(r.btf.error.as_deref().unwrap().contains("byte 0: bad magic"), "{:?}", r.btf.error);
}

#[test]
fn a_mount_without_memory_recursiveprot_gets_a_note() {
    let t = v2_ready();
    let info = std::fs::read_to_string(t.paths().proc.join("self/mountinfo")).unwrap();
    t.write("proc/self/mountinfo", info.replace(",memory_recursiveprot", "").into_bytes());
    let r = collect(&t.paths());
    assert!(!r.cgroup2_mounts[0].memory_recursiveprot);
    let note = r.findings.iter().find(|f| f.topic == "protection").expect("a protection note");
    assert_eq!(note.severity, Severity::Note);
    assert!(note.message.contains("without memory_recursiveprot"), "{}", note.message);
    let r = collect(&v2_ready().paths());
    assert!(r.cgroup2_mounts[0].memory_recursiveprot && !r.findings.iter().any(|f| f.topic == "protection"));
}

#[test]
fn kernel_6_12_names_its_fallbacks() {
    let t = v2_ready();
    t.write("sys/kernel/btf/vmlinux", kernel_btf(KernelBtf::V6_12));
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::Degraded);
    let topics: Vec<_> = r.findings.iter().map(|f| (f.severity, f.topic)).collect();
    assert_eq!(
        topics,
        [
            (Severity::Degraded, "memcg kfuncs"),
            (Severity::Degraded, "memcg tracepoints"),
            (Severity::Note, "memcg_bpf_ops"),
            (Severity::Note, "limit writes"),
        ]
    );
    assert!(r.findings[1].message.contains("fentry hooks this kernel offers instead: try_to_free_mem_cgroup_pages"));
}

#[test]
fn no_cgroup2_mount_and_missing_psi() {
    let t = v2_ready();
    t.write("proc/self/mountinfo", "22 1 0:20 / /sys rw - sysfs sysfs rw\n");
    t.remove("proc/pressure/memory");
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::CannotRun);
    assert!(r.findings[0].message.starts_with("no cgroup2 file system is mounted"));
    assert!(r.findings.iter().any(|f| f.topic == "PSI" && f.severity == Severity::Degraded));
    assert!(render_text(&r).contains("cgroup v2   not mounted"));
}

#[test]
fn unreadable_mountinfo_is_one_blocker() {
    let t = v2_ready();
    t.remove("proc/self/mountinfo");
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::CannotRun);
    let blockers: Vec<_> = r.findings.iter().filter(|f| f.severity == Severity::Blocker).map(|f| f.topic).collect();
    assert_eq!(blockers, ["mounts"]);
    assert!(r.read_errors[0].contains("mountinfo"), "{:?}", r.read_errors);
}

#[test]
fn disabled_memory_controller() {
    let t = v2_ready();
    t.write("proc/cgroups", "#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t0\t1\t0\n");
    t.write("sys/fs/cgroup/cgroup.controllers", "cpu io pids\n");
    let r = collect(&t.paths());
    assert_eq!(r.verdict, Verdict::CannotRun);
    assert!(r.findings[0].message.contains("cgroup_disable=memory"));
}

#[test]
fn resolve_rebases_kernel_paths() {
    let p = SystemPaths { proc: "/t/proc".into(), sys: "/t/sys".into() };
    assert_eq!(p.resolve(Path::new("/sys/fs/cgroup")), Path::new("/t/sys/fs/cgroup"));
    assert_eq!(p.resolve(Path::new("/proc/1")), Path::new("/t/proc/1"));
    assert_eq!(p.resolve(Path::new("/cgroup2")), Path::new("/cgroup2"));
    assert_eq!(SystemPaths::default().resolve(Path::new("/sys/fs/cgroup")), Path::new("/sys/fs/cgroup"));
}

#[test]
fn this_machine_does_not_panic() {
    let r = collect(&SystemPaths::default());
    let text = render_text(&r);
    eprintln!("{text}");
    assert!(text.contains("verdict: "));
    serde_json::to_string(&r).unwrap();
}

#[test]
fn ext4_on_6_12_gets_a_journaled_timestamps_note() {
    let t = v2_ready();
    t.write("proc/sys/kernel/osrelease", "6.12.117+deb12-amd64\n");
    let info = std::fs::read_to_string(t.paths().proc.join("self/mountinfo")).unwrap();
    t.write(
        "proc/self/mountinfo",
        format!(
            "{info}25 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n\
             26 25 254:16 / /srv rw,relatime shared:2 - ext4 /dev/vdb rw,lazytime\n\
             27 25 254:16 / /mnt/srv rw,relatime shared:2 - ext4 /dev/vdb rw,lazytime\n\
             28 25 254:32 / /data rw,relatime shared:3 - xfs /dev/vdc rw,attr2\n"
        ),
    );
    let r = collect(&t.paths());
    let mounts: Vec<_> = r.ext4_mounts.iter().map(|m| (m.mount_point.to_str().unwrap(), m.lazytime)).collect();
    assert_eq!(mounts, [("/", false), ("/srv", true), ("/mnt/srv", true)]);
    let note = r.findings.iter().find(|f| f.topic == "ext4 timestamps").expect("an ext4 note");
    assert_eq!(note.severity, Severity::Note);
    assert!(note.message.contains("kernel 6.12 is older than 7.0"), "{}", note.message);
    assert!(note.message.contains("/, /srv (lazytime), /mnt/srv (lazytime)"), "{}", note.message);
    assert!(note.advice.as_deref().unwrap().contains("io.max wbps"));
    // A note only: the verdict is the one the cgroup setup gives.
    assert_eq!(r.verdict, collect(&v2_ready().paths()).verdict);

    // 7.x, or no ext4 at all: nothing to say.
    t.write("proc/sys/kernel/osrelease", "7.2.13+deb14-amd64\n");
    assert!(!collect(&t.paths()).findings.iter().any(|f| f.topic == "ext4 timestamps"));
    assert!(!collect(&v2_ready().paths()).findings.iter().any(|f| f.topic == "ext4 timestamps"));
}

#[test]
fn kernel_versions_parse() {
    use crate::judge::kernel_version;
    assert_eq!(kernel_version("6.12.117+deb12-amd64"), Some((6, 12)));
    assert_eq!(kernel_version("7.2.13+deb14-amd64"), Some((7, 2)));
    assert_eq!(kernel_version("7.0-rc1"), Some((7, 0)));
    assert_eq!(kernel_version("garbage"), None);
}

/// Canned answers to the privilege probes, recording what was tried.
struct FakeProber {
    bpf: Option<i32>,
    /// Windows (µs) refused with EINVAL.
    psi_refused_below_us: u64,
    nofile: (u64, u64),
    write: Option<i32>,
    root: bool,
    tried: std::sync::Mutex<Vec<(PathBuf, String)>>,
}

impl FakeProber {
    /// A host where everything is allowed.
    fn allowing() -> FakeProber {
        FakeProber {
            bpf: None,
            psi_refused_below_us: 0,
            nofile: (1 << 20, 1 << 20),
            write: None,
            root: true,
            tried: Default::default(),
        }
    }

    /// The container of issue 28: BPF refused, PSI windows under 2 s refused, hard limit 1,024.
    fn container() -> FakeProber {
        FakeProber { bpf: Some(1), psi_refused_below_us: 2_000_000, nofile: (1024, 1024), ..FakeProber::allowing() }
    }
}

impl privileges::Prober for FakeProber {
    fn bpf_load(&self) -> std::io::Result<()> {
        self.bpf.map_or(Ok(()), |e| Err(std::io::Error::from_raw_os_error(e)))
    }
    fn psi_trigger(&self, file: &Path, trigger: &str) -> std::io::Result<()> {
        self.tried.lock().unwrap().push((file.to_owned(), trigger.to_owned()));
        let window: u64 = trigger.rsplit(' ').next().unwrap().parse().unwrap();
        if window < self.psi_refused_below_us {
            return Err(std::io::Error::from_raw_os_error(22));
        }
        Ok(())
    }
    fn nofile(&self) -> std::io::Result<(u64, u64)> {
        Ok(self.nofile)
    }
    fn writable(&self, _: &Path) -> std::io::Result<()> {
        self.write.map_or(Ok(()), |e| Err(std::io::Error::from_raw_os_error(e)))
    }
    fn is_root(&self) -> bool {
        self.root
    }
}

#[test]
fn privileges_all_allowed_add_only_a_note() {
    let t = v2_ready();
    let p = FakeProber::allowing();
    let r = collect_with(&t.paths(), Some(&p));
    assert_eq!(r.verdict, Verdict::Ready, "{:#?}", r.findings);
    let privs = r.privileges.as_ref().unwrap();
    assert_eq!(privs.shortest_psi_window_us(), Some(500_000));
    // The 500 ms trigger was accepted, so nothing longer was tried.
    assert_eq!(p.tried.lock().unwrap().len(), 1);
    let note = r.findings.iter().find(|f| f.topic == "open-file limit").unwrap();
    assert_eq!(note.severity, Severity::Note);
    assert!(note.message.contains("about 74889 cgroups"), "{}", note.message);
    // Without a prober nothing is probed.
    assert!(collect(&t.paths()).privileges.is_none());
}

#[test]
fn a_container_without_capabilities_names_each_fallback() {
    let t = v2_ready();
    // The process's own cgroup has a memory.pressure: the triggers are tried there.
    t.write("proc/self/cgroup", "0::/pod/ctr\n");
    t.write("sys/fs/cgroup/pod/ctr/memory.pressure", PSI);
    let p = FakeProber::container();
    let r = collect_with(&t.paths(), Some(&p));
    assert_eq!(r.verdict, Verdict::Degraded);
    let tried = p.tried.lock().unwrap().clone();
    let windows: Vec<&str> = tried.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(windows, ["some 150000 500000", "some 150000 1000000", "some 150000 2000000"]);
    assert!(tried.iter().all(|(f, _)| f.ends_with("fs/cgroup/pod/ctr/memory.pressure")), "{tried:?}");

    let find = |topic: &str| r.findings.iter().find(|f| f.topic == topic).unwrap_or_else(|| panic!("no {topic}"));
    let bpf = find("BPF");
    assert_eq!(bpf.severity, Severity::Degraded);
    assert!(
        bpf.message.starts_with("BPF refused") && bpf.message.contains("falls back to PSI/text stats"),
        "{}",
        bpf.message
    );
    let psi = find("PSI triggers");
    assert!(
        psi.message.contains("shorter than 2000 ms refused")
            && psi.message.contains("no CAP_SYS_RESOURCE")
            && psi.message.contains("falls back to 2000 ms windows"),
        "{}",
        psi.message
    );
    let fds = find("open-file limit");
    assert_eq!(fds.severity, Severity::Degraded);
    assert!(fds.message.contains("hard 1024") && fds.message.contains("about 64 cgroups"), "{}", fds.message);
    assert!(r.headline.contains("BPF") && r.headline.contains("PSI triggers"), "{}", r.headline);
    let text = render_text(&r);
    assert!(text.contains("BPF refused"), "{text}");
}

#[test]
fn psi_refused_entirely_and_read_only_root() {
    let t = v2_ready();
    let p = FakeProber { psi_refused_below_us: u64::MAX, write: Some(30), ..FakeProber::allowing() };
    let r = collect_with(&t.paths(), Some(&p));
    // No own cgroup file: the root's memory.pressure is used.
    assert!(p.tried.lock().unwrap().iter().all(|(f, _)| f.ends_with("sys/fs/cgroup/memory.pressure")));
    let psi = r.findings.iter().find(|f| f.topic == "PSI triggers").unwrap();
    assert!(psi.message.contains("falls back to polling memory.pressure"), "{}", psi.message);
    let w = r.findings.iter().find(|f| f.topic == "write access").unwrap();
    assert_eq!(w.severity, Severity::Blocker);
    assert!(w.message.contains("not writable even as root") && w.message.contains("--dry-run"), "{}", w.message);
    assert_eq!(r.verdict, Verdict::CannotRun);

    // Not root: a refused write is expected and only noted.
    let p = FakeProber { write: Some(13), root: false, ..FakeProber::allowing() };
    let r = collect_with(&t.paths(), Some(&p));
    let w = r.findings.iter().find(|f| f.topic == "write access").unwrap();
    assert_eq!(w.severity, Severity::Note);
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn own_cgroup_line() {
    assert_eq!(privileges::own_cgroup("12:memory:/x\n0::/user.slice/a.scope\n"), Some("/user.slice/a.scope"));
    assert_eq!(privileges::own_cgroup("1:name=systemd:/\n"), None);
}

#[test]
fn this_machines_nofile_and_bpf_probes_answer() {
    use privileges::Prober;
    // Harmless on any host: getrlimit, and a two-instruction socket filter loaded and closed.
    let (soft, hard) = privileges::Host.nofile().unwrap();
    assert!(soft <= hard && soft > 0, "soft {soft} hard {hard}");
    if let Err(e) = privileges::Host.bpf_load() {
        assert!(e.raw_os_error().is_some(), "a refused load is an errno: {e}");
    }
}

#[test]
fn limit_writes_are_named_by_what_each_kernel_was_measured_to_do() {
    let old = crate::judge::limit_writes(Some("6.12.117+deb12-amd64")).unwrap();
    assert!(old.message.contains("older than 7.0") && old.message.contains("worker threads"), "{}", old.message);
    let new = crate::judge::limit_writes(Some("7.2.13+deb14-amd64")).unwrap();
    assert!(new.message.contains("returns at once"), "{}", new.message);
    assert!(crate::judge::limit_writes(Some("garbage")).is_none());
    assert_eq!(old.severity, crate::Severity::Note);
}
