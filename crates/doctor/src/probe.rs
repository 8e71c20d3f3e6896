//! Reading the system: /proc, /sys and the kernel's BTF (or a fake tree, see
//! [`SystemPaths`]). Never fails: whatever cannot be read becomes part of the report.

use std::io;
use std::path::{Path, PathBuf};

use memqos_bpf::btf::Btf;
use memqos_bpf::features::KernelFeatures;
use memqos_cgroupfs::procfs::{parse_mountinfo, parse_proc_cgroups, parse_swaps};

use crate::*;

/// Reads the system described by `sys` and judges whether memqos can run on it, without
/// trying what the daemon may do (see [`collect_with`]).
pub fn collect(sys: &SystemPaths) -> DoctorReport {
    collect_with(sys, None)
}

/// [`collect`], and with `prober` the privilege probes too: a BPF load, PSI trigger windows
/// on this process's cgroup's memory.pressure (or the root's), the open-file limit and
/// write access to the cgroup2 root.
pub fn collect_with(sys: &SystemPaths, prober: Option<&dyn crate::privileges::Prober>) -> DoctorReport {
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

    // The root cgroup has no memory.* knobs: look at a child that has the memory controller.
    let swap_accounting = cgroup2_root.as_ref().and_then(|r| swap_accounting(&sys.resolve(&r.mount_point)));

    let mut ext4_mounts: Vec<Ext4Mount> = Vec::new();
    for m in mounts.iter().filter(|m| m.fstype == "ext4") {
        if !ext4_mounts.iter().any(|e| e.mount_point == m.mount_point) {
            ext4_mounts.push(Ext4Mount {
                mount_point: m.mount_point.clone(),
                lazytime: m.super_options.split(',').any(|o| o == "lazytime"),
            });
        }
    }

    let privileges = prober.map(|p| {
        let root = cgroup2_root.as_ref().map(|r| sys.resolve(&r.mount_point));
        let own = std::fs::read_to_string(sys.proc.join("self/cgroup")).ok();
        let psi_file = root.as_ref().and_then(|root| {
            let own = own.as_deref().and_then(crate::privileges::own_cgroup).map(|c| c.trim_start_matches('/'));
            let mine = own.map(|c| root.join(c).join("memory.pressure"));
            mine.filter(|f| f.exists()).or_else(|| Some(root.join("memory.pressure")).filter(|f| f.exists()))
        });
        crate::privileges::probe(p, psi_file.as_deref(), root.as_deref())
    });
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
        swap_accounting,
        ext4_mounts,
        findings: Vec::new(),
        read_errors,
        privileges,
    };
    if mountinfo.is_none() {
        report.findings.push(Finding {
            severity: Severity::Blocker,
            topic: "mounts",
            message: format!("cannot read {}, so the cgroup mounts are unknown", mountinfo_path.display()),
            advice: Some("run memqos doctor where /proc is mounted".into()),
        });
    }
    judge::judge(&mut report);
    report
}

pub(crate) fn pick_v2_root(mounts: &[CgroupMount]) -> Option<&CgroupMount> {
    mounts
        .iter()
        .find(|m| m.root == "/" && m.mount_point == Path::new("/sys/fs/cgroup"))
        .or_else(|| mounts.iter().find(|m| m.root == "/"))
        .or_else(|| mounts.first())
}

/// Some(whether memory.swap.max exists) in the first child of `root` (by name) that has
/// memory.current; None when no child has.
fn swap_accounting(root: &Path) -> Option<bool> {
    let mut children: Vec<_> = std::fs::read_dir(root).ok()?.flatten().map(|e| e.path()).collect();
    children.sort();
    let child = children.into_iter().find(|c| c.join("memory.current").exists())?;
    Some(child.join("memory.swap.max").exists())
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
