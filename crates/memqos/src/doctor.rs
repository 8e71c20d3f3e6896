//! `memqos doctor`: can memqos run on this machine, and what will it fall back to?
//!
//! [`collect`] reads `/proc` and `/sys` (or a fake tree, see [`SystemPaths`]) and never fails:
//! whatever it cannot read becomes part of the report. [`render_text`] is for people; the
//! report is `serde::Serialize` for `--json`. [`exit_code`]:
//!
//! | code | verdict | meaning |
//! | --- | --- | --- |
//! | 0 | ready | the memory controller is on cgroup v2 and enabled for children, and every interface memqos uses is present |
//! | 1 | cannot run here | a blocker: memory controller on cgroup v1, disabled, not delegated or not enabled in `cgroup.subtree_control`; no cgroup2 mount |
//! | 2 | degraded | memqos runs, with fallbacks the report names (no BTF, no memcg kfuncs or tracepoints, no PSI, ...) |
//!
//! Notes (no swap, the RFC struct_ops being absent) never change the exit code.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use memqos_bpf::btf::Btf;
use memqos_bpf::features::{Availability, KernelFeatures};
use serde::Serialize;

/// The command that runs the doctor inside a guest kernel with the memory controller on
/// cgroup v2.
pub const GUEST_COMMAND: &str = "memqos vm run --kernel 7 -- memqos doctor";

/// Where the kernel's pseudo file systems are. Absolute kernel paths found in
/// `/proc/self/mountinfo` (e.g. `/sys/fs/cgroup`) are read relative to these, so a test can
/// point both at a fake tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPaths {
    pub proc: PathBuf,
    pub sys: PathBuf,
}

impl Default for SystemPaths {
    fn default() -> Self {
        SystemPaths { proc: PathBuf::from("/proc"), sys: PathBuf::from("/sys") }
    }
}

impl SystemPaths {
    /// Maps a path as the kernel names it to where this report reads it: `/sys/...` and
    /// `/proc/...` move under `sys` and `proc`; anything else is read as is.
    fn resolve(&self, kernel_path: &Path) -> PathBuf {
        if let Ok(rest) = kernel_path.strip_prefix("/sys") {
            self.sys.join(rest)
        } else if let Ok(rest) = kernel_path.strip_prefix("/proc") {
            self.proc.join(rest)
        } else {
            kernel_path.to_path_buf()
        }
    }
}

/// The overall answer; see the module docs for the exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ready,
    Degraded,
    CannotRun,
}

/// How much a finding matters. Ordered: a blocker outranks a degraded interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; memqos behaves as designed.
    Note,
    /// memqos runs with a named fallback.
    Degraded,
    /// memqos cannot run here until this is fixed.
    Blocker,
}

/// One thing the doctor wants the reader to know, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// Short subject, e.g. "memory controller", "memcg kfuncs".
    pub topic: &'static str,
    pub message: String,
    pub advice: Option<String>,
}

/// A mounted cgroup file system, as `/proc/self/mountinfo` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupMount {
    pub mount_point: PathBuf,
    /// The cgroup this mount shows as its root (`/` unless inside a cgroup namespace or a
    /// bind mount of a subtree).
    pub root: String,
    /// The `memory_recursiveprot` mount option (systemd sets it).
    pub memory_recursiveprot: bool,
}

/// The cgroup v2 mount memqos would use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cgroup2Root {
    pub mount_point: PathBuf,
    /// `cgroup.controllers`: controllers available to this cgroup; `None` if unreadable.
    pub controllers: Option<Vec<String>>,
    /// `cgroup.subtree_control`: controllers enabled for its children; `None` if unreadable.
    pub subtree_control: Option<Vec<String>>,
    /// `memory.pressure` exists here (per-cgroup PSI).
    pub memory_pressure: bool,
    /// Reasons the files above could not be read.
    pub errors: Vec<String>,
}

/// The memory line of `/proc/cgroups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerLine {
    /// Non-zero: the id of the cgroup v1 hierarchy the controller is bound to.
    pub hierarchy: u32,
    pub num_cgroups: u64,
    pub enabled: bool,
}

/// Where the memory controller lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryController {
    /// From `/proc/cgroups`; `None` if the file or its memory line is missing.
    pub proc_cgroups: Option<ControllerLine>,
    /// cgroup v1 mounts with the memory controller.
    pub v1_mounts: Vec<PathBuf>,
    /// Bound to a v1 hierarchy (hierarchy column != 0, or a v1 memory mount).
    pub bound_to_v1: bool,
    /// Listed in the v2 root's `cgroup.controllers`.
    pub available_on_v2: bool,
    /// Listed in the v2 root's `cgroup.subtree_control`.
    pub enabled_for_children: bool,
}

/// State of a kernel file that may be missing or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileState {
    Readable,
    /// The file does not exist (feature not built in).
    Missing,
    /// The kernel refuses reads (PSI: built in but disabled with `psi=0`).
    Disabled,
    Unreadable,
}

/// Pressure stall information for memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Psi {
    pub path: PathBuf,
    pub state: FileState,
    /// The `some` and `full` lines of `/proc/pressure/memory`.
    pub lines: Vec<String>,
    pub error: Option<String>,
}

/// The kernel's BTF and what it says about optional interfaces.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BtfStatus {
    pub path: PathBuf,
    pub state: FileState,
    pub types: Option<usize>,
    pub error: Option<String>,
    pub features: Option<KernelFeatures>,
    /// The BPF pressure programs this kernel can run (`memqos daemon` with `signals.bpf`).
    pub bpf_pressure_hooks: Option<Vec<memqos_bpf::pressure::Hook>>,
}

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwapDevice {
    pub name: String,
    pub kind: String,
    pub size_kib: u64,
    pub used_kib: u64,
    pub priority: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Swap {
    pub devices: Vec<SwapDevice>,
    pub total_kib: u64,
    pub error: Option<String>,
}

/// Everything `memqos doctor` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DoctorReport {
    pub verdict: Verdict,
    /// One sentence: the verdict and its main reason.
    pub headline: String,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel_release: Option<String>,
    pub cgroup2_mounts: Vec<CgroupMount>,
    pub cgroup2_root: Option<Cgroup2Root>,
    pub memory_controller: MemoryController,
    pub psi: Psi,
    pub btf: BtfStatus,
    pub swap: Swap,
    /// `/sys/module/zswap/parameters/enabled`; `None` when the kernel has no zswap.
    pub zswap_enabled: Option<bool>,
    /// Blockers first, then degraded interfaces, then notes.
    pub findings: Vec<Finding>,
    /// Files that could not be read, with the reason.
    pub read_errors: Vec<String>,
}

/// 0 ready, 1 cannot run here, 2 degraded (see the module docs).
pub fn exit_code(report: &DoctorReport) -> i32 {
    match report.verdict {
        Verdict::Ready => 0,
        Verdict::CannotRun => 1,
        Verdict::Degraded => 2,
    }
}

/// Reads the system described by `sys` and judges whether memqos can run on it.
pub fn collect(sys: &SystemPaths) -> DoctorReport {
    let mut read_errors = Vec::new();
    let mut read = |path: PathBuf| -> Option<String> {
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) => {
                read_errors.push(format!("{}: {e}", path.display()));
                None
            }
        }
    };

    let kernel_release = read(sys.proc.join("sys/kernel/osrelease")).map(|s| s.trim().to_string());
    let mountinfo_path = sys.proc.join("self/mountinfo");
    let mountinfo = read(mountinfo_path.clone());
    let mounts = mountinfo.as_deref().map(parse_mountinfo).unwrap_or_default();
    let proc_cgroups = read(sys.proc.join("cgroups"));
    let memory_line = proc_cgroups.as_deref().and_then(|t| parse_proc_cgroups(t, "memory"));

    let cgroup2_mounts: Vec<CgroupMount> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .map(|m| CgroupMount {
            mount_point: m.mount_point.clone(),
            root: m.root.clone(),
            memory_recursiveprot: m.super_options.split(',').any(|o| o == "memory_recursiveprot"),
        })
        .collect();
    let v1_memory_mounts: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "memory"))
        .map(|m| m.mount_point.clone())
        .collect();

    let cgroup2_root = pick_v2_root(&cgroup2_mounts).map(|m| read_v2_root(sys, &m.mount_point));
    let has = |list: Option<&Vec<String>>| list.is_some_and(|l| l.iter().any(|c| c == "memory"));
    let memory_controller = MemoryController {
        bound_to_v1: memory_line.as_ref().is_some_and(|l| l.hierarchy != 0) || !v1_memory_mounts.is_empty(),
        available_on_v2: has(cgroup2_root.as_ref().and_then(|r| r.controllers.as_ref())),
        enabled_for_children: has(cgroup2_root.as_ref().and_then(|r| r.subtree_control.as_ref())),
        proc_cgroups: memory_line,
        v1_mounts: v1_memory_mounts,
    };

    let psi = read_psi(&sys.proc.join("pressure/memory"));
    let btf = read_btf(&sys.sys.join("kernel/btf/vmlinux"));
    let swap = match read(sys.proc.join("swaps")) {
        Some(text) => match parse_swaps(&text) {
            Ok(devices) => Swap { total_kib: devices.iter().map(|d| d.size_kib).sum(), devices, error: None },
            Err(e) => Swap { devices: vec![], total_kib: 0, error: Some(e) },
        },
        None => Swap { devices: vec![], total_kib: 0, error: Some("/proc/swaps unreadable".into()) },
    };
    // A missing parameter file means zswap is not built in; not a read error.
    let zswap_enabled = std::fs::read_to_string(sys.sys.join("module/zswap/parameters/enabled"))
        .ok()
        .map(|s| matches!(s.trim(), "Y" | "y" | "1"));

    let mut report = DoctorReport {
        verdict: Verdict::Ready,
        headline: String::new(),
        kernel_release,
        cgroup2_mounts,
        cgroup2_root,
        memory_controller,
        psi,
        btf,
        swap,
        zswap_enabled,
        findings: Vec::new(),
        read_errors,
    };
    if mountinfo.is_none() {
        report.findings.push(Finding {
            severity: Severity::Blocker,
            topic: "mounts",
            message: format!("cannot read {}, so the cgroup mounts are unknown", mountinfo_path.display()),
            advice: Some("run memqos doctor where /proc is mounted".into()),
        });
    }
    judge(&mut report);
    report
}

fn pick_v2_root(mounts: &[CgroupMount]) -> Option<&CgroupMount> {
    mounts
        .iter()
        .find(|m| m.root == "/" && m.mount_point == Path::new("/sys/fs/cgroup"))
        .or_else(|| mounts.iter().find(|m| m.root == "/"))
        .or_else(|| mounts.first())
}

fn read_v2_root(sys: &SystemPaths, mount_point: &Path) -> Cgroup2Root {
    let dir = sys.resolve(mount_point);
    let mut errors = Vec::new();
    let mut list = |file: &str| match std::fs::read_to_string(dir.join(file)) {
        Ok(text) => Some(text.split_whitespace().map(str::to_string).collect()),
        Err(e) => {
            errors.push(format!("{}: {e}", dir.join(file).display()));
            None
        }
    };
    let controllers = list("cgroup.controllers");
    let subtree_control = list("cgroup.subtree_control");
    Cgroup2Root {
        mount_point: mount_point.to_path_buf(),
        controllers,
        subtree_control,
        memory_pressure: dir.join("memory.pressure").exists(),
        errors,
    }
}

/// EOPNOTSUPP on Linux (all architectures memqos builds for): what PSI files return when
/// PSI is compiled in but disabled at boot.
const EOPNOTSUPP: i32 = 95;

fn read_psi(path: &Path) -> Psi {
    let (state, lines, error) = match std::fs::read_to_string(path) {
        Ok(text) => (FileState::Readable, text.lines().map(str::to_string).collect(), None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (FileState::Missing, vec![], None),
        Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => (FileState::Disabled, vec![], Some(e.to_string())),
        Err(e) => (FileState::Unreadable, vec![], Some(e.to_string())),
    };
    Psi { path: path.to_path_buf(), state, lines, error }
}

fn read_btf(path: &Path) -> BtfStatus {
    let mut status = BtfStatus {
        path: path.to_path_buf(),
        state: FileState::Readable,
        types: None,
        error: None,
        features: None,
        bpf_pressure_hooks: None,
    };
    match Btf::load(path) {
        Ok(btf) => {
            status.types = Some(btf.type_count());
            status.features = Some(KernelFeatures::probe(&btf));
            status.bpf_pressure_hooks = Some(memqos_bpf::pressure::plan(&btf));
        }
        Err(memqos_bpf::BtfError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            status.state = FileState::Missing;
        }
        Err(e) => {
            status.state = FileState::Unreadable;
            status.error = Some(e.to_string());
        }
    }
    status
}

/// Turns the facts into findings, a verdict and a headline.
fn judge(r: &mut DoctorReport) {
    let mut f = std::mem::take(&mut r.findings);
    let mc = &r.memory_controller;
    let guest = format!("to try memqos without touching this host, run it in a guest kernel: `{GUEST_COMMAND}`");

    // Where the memory controller is: the one thing memqos cannot do without.
    if mc.proc_cgroups.as_ref().is_some_and(|l| !l.enabled) {
        f.push(Finding {
            severity: Severity::Blocker,
            topic: "memory controller",
            message: "the memory controller is disabled (/proc/cgroups shows enabled 0, usually `cgroup_disable=memory` on the kernel command line)".into(),
            advice: Some(format!("remove `cgroup_disable=memory` from the kernel command line and reboot; or {guest}")),
        });
    } else if mc.bound_to_v1 {
        let at = match (&mc.v1_mounts[..], &mc.proc_cgroups) {
            ([], Some(l)) => format!(" {} (not mounted in this mount namespace)", l.hierarchy),
            ([], None) => String::new(),
            (mounts, _) => {
                format!(" at {}", mounts.iter().map(|m| m.display().to_string()).collect::<Vec<_>>().join(", "))
            }
        };
        f.push(Finding {
            severity: Severity::Blocker,
            topic: "memory controller",
            message: format!(
                "the memory controller is bound to the cgroup v1 hierarchy{at}; memqos needs it on cgroup v2 \
                 (memory.high, memory.low, memory.min, memory.events and per-cgroup memory.pressure exist only there), \
                 and a controller serves one hierarchy at a time"
            ),
            advice: Some(format!(
                "memqos does not rebind controllers; using it on this host takes a reboot with the memory controller \
                 kept off cgroup v1 (kernel command line `cgroup_no_v1=memory`, or `systemd.unified_cgroup_hierarchy=1` \
                 for a v2-only boot), once nothing here relies on v1 memory cgroups; {guest}"
            )),
        });
    } else if f.iter().any(|x| x.topic == "mounts") {
        // Mounts unknown: already a blocker; "no cgroup2 mount" would be a guess.
    } else if r.cgroup2_mounts.is_empty() {
        f.push(Finding {
            severity: Severity::Blocker,
            topic: "cgroup v2",
            message: "no cgroup2 file system is mounted (no cgroup2 line in /proc/self/mountinfo)".into(),
            advice: Some(format!(
                "mount it where the init system expects it (`mount -t cgroup2 none /sys/fs/cgroup`; on systemd hosts boot with \
                 `systemd.unified_cgroup_hierarchy=1`); or {guest}"
            )),
        });
    } else if let Some(root) = &r.cgroup2_root {
        let mp = root.mount_point.display();
        if root.controllers.is_none() {
            f.push(Finding {
                severity: Severity::Blocker,
                topic: "cgroup v2",
                message: format!("cannot read {mp}/cgroup.controllers: {}", root.errors.join("; ")),
                advice: Some("run memqos doctor as root, or check that the cgroup2 mount is intact".into()),
            });
        } else if !mc.available_on_v2 {
            let missing_line = if mc.proc_cgroups.is_none() {
                " and /proc/cgroups lists no memory controller (kernel without CONFIG_MEMCG?)"
            } else {
                ""
            };
            f.push(Finding {
                severity: Severity::Blocker,
                topic: "memory controller",
                message: format!(
                    "the memory controller is not available in the cgroup v2 tree at {mp} (cgroup.controllers: {}){missing_line}",
                    list_or_none(root.controllers.as_deref())
                ),
                advice: Some(format!(
                    "the parent of this cgroup must delegate it (`+memory` in the parent's cgroup.subtree_control; \
                     for a container, give it a cgroup namespace with memory delegated); or {guest}"
                )),
            });
        } else if !mc.enabled_for_children {
            f.push(Finding {
                severity: Severity::Blocker,
                topic: "memory controller",
                message: format!(
                    "the memory controller is available at {mp} but not enabled for its children \
                     (cgroup.subtree_control: {}), so child cgroups have no memory.* files",
                    list_or_none(root.subtree_control.as_deref())
                ),
                advice: Some(format!("enable it as root: `echo +memory > {mp}/cgroup.subtree_control`")),
            });
        }
    }
    let memory_on_v2 = mc.available_on_v2 && !mc.bound_to_v1;

    // PSI: memqos's stall signal.
    match r.psi.state {
        FileState::Readable => {}
        state => f.push(Finding {
            severity: Severity::Degraded,
            topic: "PSI",
            message: format!(
                "{} is {}: memqos cannot measure memory stall time and reacts only to memory.events and reclaim counters",
                r.psi.path.display(),
                match state {
                    FileState::Missing => "missing (kernel without CONFIG_PSI)",
                    FileState::Disabled => "disabled (`psi=0`, or CONFIG_PSI_DEFAULT_DISABLED without `psi=1`)",
                    _ => "unreadable",
                }
            ),
            advice: Some("boot with `psi=1` (or a kernel built with CONFIG_PSI)".into()),
        }),
    }
    if r.memory_controller.bound_to_v1 {
        f.push(Finding {
            severity: Severity::Note,
            topic: "PSI",
            message:
                "per-cgroup memory.pressure: v1 memory cgroups have none (only the v1 memory.pressure_level notifier); \
                      the v2 tree's memory.pressure groups tasks by the v2 hierarchy, not by memory cgroup"
                    .into(),
            advice: None,
        });
    } else if let Some(root) = r.cgroup2_root.as_ref().filter(|_| memory_on_v2) {
        if !root.memory_pressure && r.psi.state == FileState::Readable {
            f.push(Finding {
                severity: Severity::Degraded,
                topic: "PSI",
                message: format!(
                    "{}/memory.pressure is missing (cgroup PSI disabled, e.g. `cgroup_disable=pressure`): \
                     memqos uses system-wide /proc/pressure/memory and per-cgroup memory.events",
                    root.mount_point.display()
                ),
                advice: Some("remove `cgroup_disable=pressure` from the kernel command line".into()),
            });
        }
    }

    // Hierarchical protection: a cgroup's memory.low/min counts only up to its parent's.
    if let Some(m) = pick_v2_root(&r.cgroup2_mounts).filter(|m| memory_on_v2 && !m.memory_recursiveprot) {
        f.push(Finding {
            severity: Severity::Note,
            topic: "protection",
            message: format!(
                "{} is mounted without memory_recursiveprot: memory.low/min set on a slice do not cover its children                  that set none. Either way a protected cgroup's memory.low is capped by its ancestors' (the kernel                  limits it to the parent's effective protection), so a protected service below a slice without                  memory.low is not protected from host-wide reclaim; the daemon names such ancestors at start-up                  (event protection_void)",
                m.mount_point.display()
            ),
            advice: Some(
                "give the slices above protected cgroups a memory.low (systemd: MemoryLow= on the slice) and mount                  cgroup2 with memory_recursiveprot, as systemd does (`mount -o remount,memory_recursiveprot none /sys/fs/cgroup`)"
                    .into(),
            ),
        });
    }

    // BTF and the optional BPF interfaces.
    match (&r.btf.state, &r.btf.features) {
        (FileState::Readable, Some(feat)) => feature_findings(feat, &mut f),
        (state, _) => f.push(Finding {
            severity: Severity::Degraded,
            topic: "BTF",
            message: format!(
                "{} is {}: memqos cannot load its BPF programs, so `memqos stat` uses the text backend and pressure \
                 signals come from polling cgroupfs",
                r.btf.path.display(),
                match state {
                    FileState::Missing => "missing (kernel without CONFIG_DEBUG_INFO_BTF)".to_string(),
                    _ => format!("unreadable ({})", r.btf.error.as_deref().unwrap_or("unknown error")),
                }
            ),
            advice: Some("use a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian's kernels are)".into()),
        }),
    }

    // Swap decides what reclaim can take from low-priority groups.
    if r.swap.error.is_none() && r.swap.devices.is_empty() {
        f.push(Finding {
            severity: Severity::Note,
            topic: "swap",
            message: "no swap: reclaim can take only page cache from low-priority cgroups; their anonymous memory \
                      stays resident, so memory.high throttles them rather than pushing memory out"
                .into(),
            advice: Some(match r.zswap_enabled {
                Some(_) => "add a swap device (zswap then compresses in front of it) if low-priority work should give memory back".into(),
                None => "add a swap device if low-priority work should give memory back".into(),
            }),
        });
    }

    f.sort_by_key(|x| std::cmp::Reverse(x.severity));
    r.verdict = match f.first().map(|x| x.severity) {
        Some(Severity::Blocker) => Verdict::CannotRun,
        Some(Severity::Degraded) => Verdict::Degraded,
        _ => Verdict::Ready,
    };
    r.headline = match r.verdict {
        Verdict::CannotRun => format!("memqos cannot run here: {}", f[0].message),
        Verdict::Degraded => {
            let topics: Vec<_> = f.iter().filter(|x| x.severity == Severity::Degraded).map(|x| x.topic).collect();
            format!("memqos can run here, with fallbacks for: {}", topics.join(", "))
        }
        Verdict::Ready => format!(
            "memqos is ready: the memory controller is on cgroup v2 at {} and every interface it uses is present",
            r.cgroup2_root.as_ref().map(|x| x.mount_point.display().to_string()).unwrap_or_default()
        ),
    };
    r.findings = f;
}

fn feature_findings(feat: &KernelFeatures, f: &mut Vec<Finding>) {
    let kf = &feat.memcg_kfuncs;
    if kf.availability != Availability::Present {
        let missing: Vec<_> = kf.kfuncs.iter().filter(|k| !k.present).map(|k| k.name).collect();
        f.push(Finding {
            severity: Severity::Degraded,
            topic: "memcg kfuncs",
            message: match kf.availability {
                Availability::Absent => {
                    "memcg kfuncs absent (kernel < 7.0): `memqos stat` uses the text backend".into()
                }
                _ => format!(
                    "memcg kfuncs partial (missing {}): `memqos stat` uses the text backend",
                    missing.join(", ")
                ),
            },
            advice: Some("a 7.0+ kernel reads memcg counters without formatting memory.stat text".into()),
        });
    }

    let tp = &feat.memcg_tracepoints;
    if tp.availability != Availability::Present {
        let hooks: Vec<_> = feat.pressure_hooks.present_fentry().collect();
        f.push(Finding {
            severity: Severity::Degraded,
            topic: "memcg tracepoints",
            message: format!(
                "memcg:* tracepoints {} (6.12 has none): memqos polls memory.stat and memory.events for reclaim and \
                 throttling instead of counting events as they happen{}",
                tp.availability.as_str(),
                if hooks.is_empty() {
                    String::new()
                } else {
                    format!("; fentry hooks this kernel offers instead: {}", hooks.join(", "))
                }
            ),
            advice: Some("kernels 6.18 and 7.x have the memcg:* tracepoints".into()),
        });
    }

    if !feat.cgroup_iter {
        f.push(Finding {
            severity: Severity::Degraded,
            topic: "cgroup iterator",
            message: "BPF cgroup iterator absent (kernel < 6.1): memqos walks the cgroup tree through cgroupfs".into(),
            advice: None,
        });
    }

    let ops = &feat.memcg_bpf_ops;
    f.push(Finding {
        severity: Severity::Note,
        topic: "memcg_bpf_ops",
        message: match ops.availability {
            Availability::Present => "memcg_bpf_ops struct_ops present (RFC kernel): in-kernel priority throttling is possible".into(),
            Availability::Partial => format!(
                "memcg_bpf_ops struct_ops has another shape than memqos expects (missing: {}): memqos enforces priorities \
                 with memory.high/low/min from user space",
                ops.members
                    .iter()
                    .filter(|m| !m.present)
                    .map(|m| m.name)
                    .chain((!ops.value_type_present).then_some("bpf_struct_ops_memcg_bpf_ops"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Availability::Absent => "memcg_bpf_ops struct_ops absent (RFC, in no released kernel): memqos enforces priorities \
                                     with memory.high/low/min from user space"
                .into(),
        },
        advice: None,
    });
}

fn list_or_none(list: Option<&[String]>) -> String {
    match list {
        Some([]) => "(empty)".into(),
        Some(l) => l.join(" "),
        None => "(unreadable)".into(),
    }
}

/// Renders the report for a terminal.
pub fn render_text(r: &DoctorReport) -> String {
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "memqos doctor\n");
    let _ = writeln!(w, "kernel      {}", r.kernel_release.as_deref().unwrap_or("(unknown)"));

    match &r.cgroup2_root {
        Some(root) => {
            let others: Vec<_> = r
                .cgroup2_mounts
                .iter()
                .filter(|m| m.mount_point != root.mount_point)
                .map(|m| m.mount_point.display().to_string())
                .collect();
            let _ = writeln!(
                w,
                "cgroup v2   {}{}",
                root.mount_point.display(),
                if others.is_empty() { String::new() } else { format!(" (also mounted at {})", others.join(", ")) }
            );
            let _ = writeln!(w, "            cgroup.controllers:     {}", list_or_none(root.controllers.as_deref()));
            let _ =
                writeln!(w, "            cgroup.subtree_control: {}", list_or_none(root.subtree_control.as_deref()));
        }
        None => {
            let _ = writeln!(w, "cgroup v2   not mounted");
        }
    }

    let mc = &r.memory_controller;
    let place = if mc.bound_to_v1 {
        let mut s = String::from("cgroup v1");
        if let Some(l) = &mc.proc_cgroups {
            let _ = write!(s, ", hierarchy {}, {} cgroups", l.hierarchy, l.num_cgroups);
        }
        if !mc.v1_mounts.is_empty() {
            let mounts: Vec<_> = mc.v1_mounts.iter().map(|m| m.display().to_string()).collect();
            let _ = write!(s, ", mounted at {}", mounts.join(", "));
        }
        s
    } else if mc.available_on_v2 {
        format!(
            "cgroup v2, {}",
            if mc.enabled_for_children { "enabled for children" } else { "not enabled for children" }
        )
    } else {
        "not available".into()
    };
    let _ = writeln!(w, "memory      {place}");

    let _ = match r.psi.state {
        FileState::Readable => writeln!(
            w,
            "PSI         {}: {}",
            r.psi.path.display(),
            r.psi.lines.first().map(String::as_str).unwrap_or("")
        ),
        FileState::Missing => writeln!(w, "PSI         {}: missing", r.psi.path.display()),
        FileState::Disabled => writeln!(w, "PSI         {}: disabled", r.psi.path.display()),
        FileState::Unreadable => writeln!(w, "PSI         {}: unreadable", r.psi.path.display()),
    };
    if let Some(root) = &r.cgroup2_root {
        let _ = writeln!(
            w,
            "            {}/memory.pressure: {}",
            root.mount_point.display(),
            if root.memory_pressure { "present" } else { "absent" }
        );
    }

    match (&r.btf.features, r.btf.state) {
        (Some(feat), _) => {
            let _ = writeln!(w, "BTF         {}: {} types", r.btf.path.display(), r.btf.types.unwrap_or(0));
            for line in feat.summary().lines() {
                let _ = writeln!(w, "            {line}");
            }
            for h in r.btf.bpf_pressure_hooks.iter().flatten() {
                let kinds: Vec<_> = h.kinds.iter().map(|k| k.as_str()).collect();
                let _ = writeln!(
                    w,
                    "            BPF pressure hook {} ({}): {}",
                    h.target,
                    kinds.join(", "),
                    match h.why_not {
                        None => "used".to_string(),
                        Some(why) => format!("not used: {why}"),
                    }
                );
            }
        }
        (None, FileState::Missing) => {
            let _ = writeln!(w, "BTF         {}: missing", r.btf.path.display());
        }
        (None, _) => {
            let _ =
                writeln!(w, "BTF         {}: {}", r.btf.path.display(), r.btf.error.as_deref().unwrap_or("unreadable"));
        }
    }

    let swap = if let Some(e) = &r.swap.error {
        format!("unknown ({e})")
    } else if r.swap.devices.is_empty() {
        "none".into()
    } else {
        let names: Vec<_> = r.swap.devices.iter().map(|d| d.name.as_str()).collect();
        format!("{} MiB on {}", r.swap.total_kib / 1024, names.join(", "))
    };
    let _ = writeln!(w, "swap        {swap}");
    let _ = writeln!(
        w,
        "zswap       {}",
        match r.zswap_enabled {
            Some(true) => "enabled",
            Some(false) => "disabled",
            None => "not built in",
        }
    );

    if !r.findings.is_empty() {
        let _ = writeln!(w);
    }
    for x in &r.findings {
        let sev = match x.severity {
            Severity::Blocker => "blocker ",
            Severity::Degraded => "degraded",
            Severity::Note => "note    ",
        };
        let _ = writeln!(w, "{sev}  {}: {}", x.topic, x.message);
        if let Some(a) = &x.advice {
            let _ = writeln!(w, "          -> {a}");
        }
    }
    if !r.read_errors.is_empty() {
        let _ = writeln!(w, "\nunreadable files:");
        for e in &r.read_errors {
            let _ = writeln!(w, "  {e}");
        }
    }

    // The verdict comes last, so it is what a person sees when the output ends.
    let label = match r.verdict {
        Verdict::Ready => "READY",
        Verdict::Degraded => "DEGRADED",
        Verdict::CannotRun => "CANNOT RUN HERE",
    };
    let _ = writeln!(w, "\nverdict: {label} (exit {})", exit_code(r));
    let _ = writeln!(w, "  {}", r.headline);
    if r.verdict == Verdict::CannotRun {
        let _ = writeln!(w, "  try memqos in a guest kernel instead: `{GUEST_COMMAND}`");
    }
    o
}

/// One line of `/proc/self/mountinfo`, the fields the doctor needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountEntry {
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_options: String,
}

/// Parses `/proc/self/mountinfo` (proc(5)): `id parent maj:min root mount-point options
/// [optional fields...] - fstype source super-options`. Lines that do not fit are skipped.
fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|&f| f == "-")?;
            if sep < 6 || fields.len() < sep + 4 {
                return None;
            }
            Some(MountEntry {
                root: unescape_octal(fields[3]),
                mount_point: PathBuf::from(unescape_octal(fields[4])),
                fstype: fields[sep + 1].to_string(),
                super_options: fields[sep + 3].to_string(),
            })
        })
        .collect()
}

/// Undoes the kernel's `\ooo` escaping of space, tab, newline and backslash in mount fields.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The line for `controller` in `/proc/cgroups`
/// (`#subsys_name hierarchy num_cgroups enabled`).
fn parse_proc_cgroups(text: &str, controller: &str) -> Option<ControllerLine> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 || f[0] != controller {
            return None;
        }
        Some(ControllerLine { hierarchy: f[1].parse().ok()?, num_cgroups: f[2].parse().ok()?, enabled: f[3] == "1" })
    })
}

/// Parses `/proc/swaps` (`Filename Type Size Used Priority`, sizes in KiB).
fn parse_swaps(text: &str) -> Result<Vec<SwapDevice>, String> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let bad = || format!("/proc/swaps: cannot parse line {l:?}");
            if f.len() < 5 {
                return Err(bad());
            }
            Ok(SwapDevice {
                name: unescape_octal(f[0]),
                kind: f[1].to_string(),
                size_kib: f[2].parse().map_err(|_| bad())?,
                used_kib: f[3].parse().map_err(|_| bad())?,
                priority: f[4].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
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

    const PSI: &str =
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
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
        t.write(
            "proc/swaps",
            format!("{NO_SWAP}/dev/vda2                               partition\t1048572\t\t0\t\t-2\n"),
        );
        t.write("sys/module/zswap/parameters/enabled", "Y\n");
        t
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
        assert!(text.contains("memqos vm run --kernel 7 -- memqos doctor"));
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
        assert_eq!(
            f.advice.as_deref(),
            Some("enable it as root: `echo +memory > /sys/fs/cgroup/cgroup.subtree_control`")
        );
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
        assert!(
            text.contains("verdict: DEGRADED (exit 2)\n  memqos can run here, with fallbacks for: BTF\n"),
            "{text}"
        );
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
            ]
        );
        assert!(r.findings[1]
            .message
            .contains("fentry hooks this kernel offers instead: try_to_free_mem_cgroup_pages"));
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
    fn parsers() {
        let m = parse_mountinfo(
            "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:2 - cgroup cgroup rw,cpu,memory\nbad line\n",
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, Path::new("/mnt two"));
        assert_eq!(
            (m[0].root.as_str(), m[0].fstype.as_str(), m[0].super_options.as_str()),
            ("/mnt1", "cgroup", "rw,cpu,memory")
        );
        assert_eq!(unescape_octal("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape_octal("trailing\\04"), "trailing\\04");

        let c = parse_proc_cgroups("#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t4\t48\t1\n", "memory");
        assert_eq!(c, Some(ControllerLine { hierarchy: 4, num_cgroups: 48, enabled: true }));
        assert_eq!(parse_proc_cgroups("#h\ncpu 1 1 1\n", "memory"), None);

        let s = parse_swaps("Filename Type Size Used Priority\n/swap\\040file file 100 5 -2\n").unwrap();
        assert_eq!(
            s[0],
            SwapDevice { name: "/swap file".into(), kind: "file".into(), size_kib: 100, used_kib: 5, priority: -2 }
        );
        assert!(parse_swaps("Filename Type Size Used Priority\n/dev/x partition big 0 -2\n").is_err());
        assert!(parse_swaps(NO_SWAP).unwrap().is_empty());
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
}
