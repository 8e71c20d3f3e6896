//! `memqos doctor`: can memqos run on this machine, and what will it fall back to?
//!
//! In three steps: [`probe`] reads the system, [`judge`] turns the facts into findings and a
//! verdict, [`render`] writes them for people; the /proc parsers are
//! `memqos_cgroupfs::procfs`.
//!
//! [`collect`](probe::collect) reads `/proc` and `/sys` (or a fake tree, see [`SystemPaths`]) and never fails:
//! whatever it cannot read becomes part of the report. [`render_text`](render::render_text) is for people; the
//! report is `serde::Serialize` for `--json`. [`exit_code`]:
//!
//! | code | verdict | meaning |
//! | --- | --- | --- |
//! | 0 | ready | the memory controller is on cgroup v2 and enabled for children, and every interface memqos uses is present |
//! | 1 | cannot run here | a blocker: memory controller on cgroup v1, disabled, not delegated or not enabled in `cgroup.subtree_control`; no cgroup2 mount |
//! | 2 | degraded | memqos runs, with fallbacks the report names (no BTF, no memcg kfuncs or tracepoints, no PSI, BPF refused, long PSI windows only, few descriptors, ...) |
//!
//! Notes (no swap, the RFC struct_ops being absent) never change the exit code.

use std::path::{Path, PathBuf};

use memqos_bpf::features::KernelFeatures;
pub use memqos_cgroupfs::procfs::{ControllerLine, SwapDevice};
use serde::Serialize;

mod judge;
pub mod privileges;
mod probe;
mod render;
#[cfg(test)]
mod tests;

pub use probe::{collect, collect_with};
pub use render::render_text;

/// The command that runs the doctor inside a guest kernel with the memory controller on
/// cgroup v2.
pub const GUEST_COMMAND: &str = "memqos-lab vm run --kernel 7 -- memqos doctor";

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
    pub(crate) fn resolve(&self, kernel_path: &Path) -> PathBuf {
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Swap {
    pub devices: Vec<SwapDevice>,
    pub total_kib: u64,
    pub error: Option<String>,
}

/// A mounted ext4 file system (its timestamp updates may go through the journal, see
/// [`judge`]'s "ext4 timestamps" note).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ext4Mount {
    pub mount_point: PathBuf,
    /// The `lazytime` super option.
    pub lazytime: bool,
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
    /// Whether cgroups have memory.swap.max (per-cgroup swap accounting, which a tier's
    /// `swap_max` needs), judged from the first child of the cgroup2 root with memory.current;
    /// `None` when there is no such child to look at.
    pub swap_accounting: Option<bool>,
    /// ext4 mounts, one per mount point.
    pub ext4_mounts: Vec<Ext4Mount>,
    /// Blockers first, then degraded interfaces, then notes.
    pub findings: Vec<Finding>,
    /// Files that could not be read, with the reason.
    pub read_errors: Vec<String>,
    /// What the daemon would be allowed to do, found by trying ([`collect_with`]); `None`
    /// when not probed (a fake tree).
    pub privileges: Option<privileges::Privileges>,
}

/// 0 ready, 1 cannot run here, 2 degraded (see the module docs).
pub fn exit_code(report: &DoctorReport) -> i32 {
    match report.verdict {
        Verdict::Ready => 0,
        Verdict::CannotRun => 1,
        Verdict::Degraded => 2,
    }
}
