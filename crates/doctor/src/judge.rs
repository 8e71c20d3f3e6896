//! Judging: findings (blockers, degraded interfaces, notes) with advice, a verdict and a
//! headline, from the facts the probe gathered.

use memqos_bpf::features::{Availability, KernelFeatures};

use crate::*;

/// Turns the facts into findings, a verdict and a headline.
pub(crate) fn judge(r: &mut DoctorReport) {
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
    if let Some(m) = crate::probe::pick_v2_root(&r.cgroup2_mounts).filter(|m| memory_on_v2 && !m.memory_recursiveprot) {
        f.push(Finding {
            severity: Severity::Note,
            topic: "protection",
            message: format!(
                "{} is mounted without memory_recursiveprot: memory.low/min set on a slice do not cover its children \
                 that set none. Either way a protected cgroup's memory.low is capped by its ancestors' (the kernel \
                 limits it to the parent's effective protection), so a protected service below a slice without \
                 memory.low is not protected from host-wide reclaim; the daemon names such ancestors at start-up \
                 (event protection_void)",
                m.mount_point.display()
            ),
            advice: Some(
                "give the slices above protected cgroups a memory.low (systemd: MemoryLow= on the slice) and mount \
                 cgroup2 with memory_recursiveprot, as systemd does (`mount -o remount,memory_recursiveprot none /sys/fs/cgroup`)"
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

    // Swap without per-cgroup accounting: protected tiers' pages cannot be kept in memory.
    if r.swap.error.is_none() && !r.swap.devices.is_empty() && r.swap_accounting == Some(false) {
        f.push(Finding {
            severity: Severity::Note,
            topic: "swap",
            message:
                "swap is on but cgroups have no memory.swap.max: reclaim may swap out protected cgroups' pages and \
                      memqos cannot stop it (a tier's swap_max is not applied)"
                    .into(),
            advice: Some("boot with swap accounting (CONFIG_MEMCG_SWAP, no swapaccount=0 on the command line)".into()),
        });
    }

    if let Some(x) = ext4_timestamps(r.kernel_release.as_deref(), &r.ext4_mounts) {
        f.push(x);
    }
    if let Some(x) = limit_writes(r.kernel_release.as_deref()) {
        f.push(x);
    }

    if let Some(p) = &r.privileges {
        privilege_findings(p, &mut f);
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

/// `major.minor` of a release string such as "6.12.117+deb12-amd64".
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// On 6.12 an ext4 write() that changes mtime dirties the inode through the journal even
/// with lazytime (traced: generic_update_time -> ext4_dirty_inode, the i_version bump makes
/// it I_DIRTY_SYNC); on 7.2 it does not. The writer then waits in do_get_write_access()
/// whenever its inode block is in a commit whose journal write is queued behind data on
/// the disk: a stall outside balance_dirty_pages() that dirty bounds cannot prevent.
/// Kernels between 6.12 and 7.2 were not measured; 7.0 is the assumed boundary.
/// Whether lowering memory.high makes its writer reclaim here: by the kernel's version, from
/// `scripts/probe-nonblocking-limits.py` (docs/results/nonblocking-limits.txt: 6.12 ignores
/// O_NONBLOCK on the file, 7.2 honours it). The daemon lowers limits on worker threads on
/// either, and says in its event log what the first slow write showed.
pub(crate) fn limit_writes(release: Option<&str>) -> Option<Finding> {
    let version = kernel_version(release?)?;
    let message = if version >= (7, 0) {
        format!(
            "kernel {}.{}: lowering memory.high or memory.max through a file opened O_NONBLOCK returns at once and \
             the kernel reclaims afterwards (measured on 7.2); memqos writes limits so",
            version.0, version.1
        )
    } else {
        format!(
            "kernel {}.{} is older than 7.0: lowering memory.high or memory.max below usage likely makes the \
             writer reclaim the difference even with O_NONBLOCK (measured on 6.12, \
             docs/results/nonblocking-limits.txt); memqos lowers limits on worker threads so that its loop never waits on it",
            version.0, version.1
        )
    };
    Some(Finding { severity: Severity::Note, topic: "limit writes", message, advice: None })
}

pub(crate) fn ext4_timestamps(release: Option<&str>, mounts: &[Ext4Mount]) -> Option<Finding> {
    let version = kernel_version(release?)?;
    if version >= (7, 0) || mounts.is_empty() {
        return None;
    }
    let list = mounts
        .iter()
        .map(|m| format!("{}{}", m.mount_point.display(), if m.lazytime { " (lazytime)" } else { "" }))
        .collect::<Vec<_>>()
        .join(", ");
    Some(Finding {
        severity: Severity::Note,
        topic: "ext4 timestamps",
        message: format!(
            "kernel {}.{} is older than 7.0: on 6.12 (measured; 7.2 does not) a write() to ext4 that changes mtime \
             goes through the journal even with lazytime, and this kernel likely does too ({list}); when a journal \
             write waits behind queued data writeback (a slow or bandwidth-capped disk), writers sleep in jbd2's \
             do_get_write_access() until it completes, outside balance_dirty_pages(), so dirty.min cannot prevent \
             it (measured on 6.12: a 32 s write() behind 8 MiB queued at 256 KB/s)",
            version.0, version.1
        ),
        advice: Some(
            "keep the queued writeback short: give the writing cgroups io.max wbps that add up to less than the disk's \
             write bandwidth (systemd: IOWriteBandwidthMax=), or put the journal on another device; kernel 7.x keeps \
             lazytime timestamp updates out of the journal (docs/dirty-isolation.md)"
                .into(),
        ),
    })
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

pub(crate) fn list_or_none(list: Option<&[String]>) -> String {
    match list {
        Some([]) => "(empty)".into(),
        Some(l) => l.join(" "),
        None => "(unreadable)".into(),
    }
}

/// One finding per privilege probe that found a limit, each naming what the daemon falls
/// back to.
fn privilege_findings(p: &crate::privileges::Privileges, f: &mut Vec<Finding>) {
    use crate::privileges::{Outcome, FDS_PER_CGROUP, FD_RESERVE, FEW_CGROUPS, PSI_WINDOWS_US};
    const EPERM: i32 = 1;
    const EINVAL: i32 = 22;
    let why = |o: &Outcome| match o {
        Outcome::Allowed => String::new(),
        Outcome::Refused { error, .. } => error.clone(),
    };

    if let Outcome::Refused { errno, error } = &p.bpf_load {
        f.push(Finding {
            severity: Severity::Degraded,
            topic: "BPF",
            message: format!(
                "BPF refused ({error}{}): the daemon falls back to PSI/text stats (no `signals.bpf`, `memqos stat` uses the text backend)",
                if *errno == Some(EPERM) { ", no CAP_BPF/CAP_SYS_ADMIN here" } else { "" }
            ),
            advice: Some("grant CAP_BPF and CAP_PERFMON (or run outside the container) only if `signals.bpf` is wanted".into()),
        });
    }

    if let Some(file) = &p.psi_file {
        let shortest = p.shortest_psi_window_us();
        let refused: Vec<String> = p
            .psi_windows
            .iter()
            .filter(|(_, o)| !o.allowed())
            .map(|(w, o)| {
                let einval = matches!(o, Outcome::Refused { errno: Some(EINVAL), .. });
                format!("{} ms ({}{})", w / 1000, why(o), if einval { ", no CAP_SYS_RESOURCE" } else { "" })
            })
            .collect();
        match shortest {
            Some(w) if w == PSI_WINDOWS_US[0] => {}
            Some(w) => f.push(Finding {
                severity: Severity::Degraded,
                topic: "PSI triggers",
                message: format!(
                    "PSI trigger windows shorter than {} ms refused on {}: {}; the daemon falls back to {} ms windows, so a \
                     stall is noticed later",
                    w / 1000,
                    file.display(),
                    refused.join(", "),
                    w / 1000
                ),
                advice: Some("CAP_SYS_RESOURCE allows the 500 ms window".into()),
            }),
            None => f.push(Finding {
                severity: Severity::Degraded,
                topic: "PSI triggers",
                message: format!(
                    "PSI triggers refused on {}: {}; the daemon falls back to polling memory.pressure every sampling interval",
                    file.display(),
                    refused.join(", ")
                ),
                advice: None,
            }),
        }
    }

    match (&p.nofile, p.cgroups_in_fd_budget()) {
        (Ok((soft, hard)), Some(n)) => {
            let limit = |v: u64| if v == u64::MAX { "unlimited".to_owned() } else { v.to_string() };
            let message = format!(
                "open-file limit soft {} / hard {}: the daemon raises its soft limit to the hard one, which keeps \
                 descriptors for about {n} cgroups ({FDS_PER_CGROUP} per cgroup in half of what is left after {FD_RESERVE} kept back, \
                 the other half for reactions); beyond that \
                 it falls back to opening each file per read",
                limit(*soft),
                limit(*hard)
            );
            f.push(Finding {
                severity: if n < FEW_CGROUPS { Severity::Degraded } else { Severity::Note },
                topic: "open-file limit",
                message,
                advice: (n < FEW_CGROUPS)
                    .then(|| "raise the hard limit (LimitNOFILE= in the unit, ulimit -Hn) for many cgroups".into()),
            });
        }
        (Err(e), _) => f.push(Finding {
            severity: Severity::Note,
            topic: "open-file limit",
            message: format!("cannot read the open-file limit: {e}"),
            advice: None,
        }),
        _ => {}
    }

    if let (Some(root), Some(o @ Outcome::Refused { .. })) = (&p.root, &p.root_write) {
        f.push(if p.is_root {
            Finding {
                severity: Severity::Blocker,
                topic: "write access",
                message: format!(
                    "{} is not writable even as root ({}): the daemon can only run with --dry-run here",
                    root.display(),
                    why(o)
                ),
                advice: Some(
                    "mount the cgroup tree read-write for the daemon, or set cgroup_root to a delegated subtree".into(),
                ),
            }
        } else {
            Finding {
                severity: Severity::Note,
                topic: "write access",
                message: format!(
                    "{} is not writable by this user ({}); the daemon runs as root (or its delegated user)",
                    root.display(),
                    why(o)
                ),
                advice: Some("run memqos doctor as the daemon's user to check its write access".into()),
            }
        });
    }
}
