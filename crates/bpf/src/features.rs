//! Which optional kernel interfaces memqos can use, decided from the kernel's BTF.
//!
//! memqos works on any cgroup v2 kernel through cgroupfs files alone; everything probed here
//! makes it faster or more precise. The probes only look at type information, so they answer
//! "was this compiled into the kernel", not "will the verifier accept my program" or "is it
//! enabled at run time": a program load can still fail, and memqos must keep its fallback
//! reachable after a failed load, not just after a negative probe.

use std::fmt::Write as _;

use serde::Serialize;

use crate::btf::Btf;

/// How much of a group of related interfaces the kernel has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Availability {
    /// Everything in the group.
    Present,
    /// Some of it: an unusual kernel (backport, partial revert, config) — treat as absent
    /// unless the caller needs only the present part.
    Partial,
    Absent,
}

impl Availability {
    fn of(found: usize, total: usize) -> Availability {
        match found {
            0 => Availability::Absent,
            n if n == total => Availability::Present,
            _ => Availability::Partial,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Present => "present",
            Availability::Partial => "partial",
            Availability::Absent => "absent",
        }
    }
}

/// One name looked up in BTF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symbol {
    pub name: &'static str,
    pub present: bool,
}

/// A tracepoint, probed two ways. `TYPEDEF btf_trace_<event>` is what `tp_btf`/`raw_tp`
/// programs attach through, one per event. `STRUCT trace_event_raw_<class>` is the record a
/// classic `tracepoint/` program reads; it is named after the event *class*, so events made
/// with `DEFINE_EVENT` share their class's struct (e.g. `memcg:count_memcg_events` uses
/// `trace_event_raw_memcg_rstat_events`; there is no `trace_event_raw_count_memcg_events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tracepoint {
    /// `system:event`, as in tracefs.
    pub name: &'static str,
    /// `btf_trace_<event>` exists.
    pub btf_trace_typedef: bool,
    /// The class record struct looked for.
    pub event_struct: &'static str,
    pub event_struct_present: bool,
}

impl Tracepoint {
    /// Either kind of evidence: the event was compiled in.
    pub fn present(&self) -> bool {
        self.btf_trace_typedef || self.event_struct_present
    }
}

/// A group of tracepoints memqos uses together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TracepointSet {
    pub availability: Availability,
    pub tracepoints: Vec<Tracepoint>,
}

/// A kfunc looked up in BTF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kfunc {
    pub name: &'static str,
    /// A FUNC of that name exists.
    pub present: bool,
    /// It carries pahole's `bpf_kfunc` decl tag. `None` when this BTF has no such tags at all
    /// (pahole < 1.25), where a missing tag proves nothing.
    pub tagged: Option<bool>,
}

/// A set of kfuncs memqos uses together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KfuncSet {
    pub availability: Availability,
    pub kfuncs: Vec<Kfunc>,
}

/// A struct_ops type and the callbacks memqos would implement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StructOps {
    /// `Present` only when the struct, every wanted member and the registration value type
    /// exist; `Partial` when the struct exists with a different shape (another RFC revision).
    pub availability: Availability,
    pub struct_name: &'static str,
    pub struct_present: bool,
    /// `bpf_struct_ops_<name>`: the value type a struct_ops map of this type needs; the kernel
    /// defines it when it registers the struct_ops, and libbpf looks it up.
    pub value_type_present: bool,
    pub members: Vec<Symbol>,
}

/// Hooks that can stand in for the memcg tracepoints on kernels without them (6.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PressureHooks {
    /// fentry/fexit candidates (FUNCs in BTF).
    pub fentry: Vec<Symbol>,
    /// Reclaim and writeback tracepoints.
    pub tracepoints: Vec<Tracepoint>,
}

impl PressureHooks {
    pub fn present_fentry(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fentry.iter().filter(|s| s.present).map(|s| s.name)
    }
}

/// What the running kernel offers memqos beyond plain cgroupfs, probed from BTF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelFeatures {
    /// The `memcg:*` tracepoints (`mod_memcg_state`, `mod_memcg_lruvec_state`,
    /// `count_memcg_events`, `memcg_flush_stats`): every memcg stat/event update with the
    /// cgroup id. memqos counts reclaim and fault events per cgroup with them (e.g. PGSCAN_*
    /// as a pressure signal) instead of polling `memory.stat`.
    /// Present on 6.18 and 7.x, absent on 6.12.
    /// Can be wrong: BTF says the events were compiled in. A classic `tracepoint/` attach
    /// also needs tracefs mounted (libbpf reads the event id there); `tp_btf`/`raw_tp` do not.
    pub memcg_tracepoints: TracepointSet,

    /// The memcg BPF kfuncs (merged in 7.0): read a memcg's usage, page state, vm events and
    /// memory events from a (sleepable) cgroup iterator without formatting and parsing
    /// `memory.stat` text; memqos's fast `stat` backend needs all of them.
    /// Can be wrong: a FUNC in BTF is not proof the kfunc is registered for the program type
    /// memqos uses (check the `bpf_kfunc` tag, and expect load failures); a kernel with a
    /// same-named non-kfunc function would look present but untagged.
    pub memcg_kfuncs: KfuncSet,

    /// The RFC `memcg_bpf_ops` struct_ops (`get_high_delay_ms`, `below_low`, `below_min`):
    /// lets BPF decide throttling delay and protection per memcg in the kernel, which is
    /// exactly memqos's priority policy. In no released kernel; memqos otherwise drives
    /// `memory.high/low/min` from user space.
    /// Can be wrong: an RFC can change member names or semantics between revisions while
    /// keeping the struct name, so `Present` means "shape matches", not "semantics match".
    pub memcg_bpf_ops: StructOps,

    /// BPF cgroup iterator (`iter/cgroup`, since 6.1; `struct bpf_iter__cgroup`): walks a
    /// cgroup subtree in one read, which memqos uses to sample many cgroups at once and which
    /// the memcg kfuncs need as their caller.
    /// Can be wrong: the struct says the iterator was built, not that this process may attach
    /// it (CAP_BPF + CAP_PERFMON or root), and the sleepable variant (`iter.s/cgroup`) that
    /// the flush kfunc needs leaves no separate trace in BTF.
    pub cgroup_iter: bool,

    /// Candidate hooks for pressure signals when the memcg tracepoints are missing: fentry
    /// on memcg reclaim / over-high / OOM / dirty-throttle functions and the vmscan and
    /// writeback tracepoints.
    /// Can be wrong: static functions that the compiler inlined (e.g. `calculate_high_delay`,
    /// the `mem_cgroup_handle_over_high` wrapper) are absent from BTF, which is why they are
    /// probed; a FUNC present in BTF can still be inlined at some call sites (fentry then
    /// misses those calls) or be `notrace`/deny-listed so attaching fails.
    pub pressure_hooks: PressureHooks,
}

/// Where a tracepoint shows up in BTF (see [`Tracepoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracepointSpec {
    /// `system:event`.
    pub name: &'static str,
    /// `btf_trace_<event>`.
    pub btf_typedef: &'static str,
    /// `trace_event_raw_<class>`.
    pub event_struct: &'static str,
}

const fn tp(name: &'static str, btf_typedef: &'static str, event_struct: &'static str) -> TracepointSpec {
    TracepointSpec { name, btf_typedef, event_struct }
}

/// The `memcg:*` tracepoints (include/trace/events/memcg.h).
pub const MEMCG_TRACEPOINTS: &[TracepointSpec] = &[
    tp("memcg:mod_memcg_state", "btf_trace_mod_memcg_state", "trace_event_raw_memcg_rstat_stats"),
    tp("memcg:mod_memcg_lruvec_state", "btf_trace_mod_memcg_lruvec_state", "trace_event_raw_memcg_rstat_stats"),
    tp("memcg:count_memcg_events", "btf_trace_count_memcg_events", "trace_event_raw_memcg_rstat_events"),
    tp("memcg:memcg_flush_stats", "btf_trace_memcg_flush_stats", "trace_event_raw_memcg_flush_stats"),
];

/// The memcg kfuncs memqos's BPF stat backend calls.
pub const MEMCG_KFUNCS: &[&str] = &[
    "bpf_get_mem_cgroup",
    "bpf_put_mem_cgroup",
    "bpf_mem_cgroup_usage",
    "bpf_mem_cgroup_page_state",
    "bpf_mem_cgroup_vm_events",
    "bpf_mem_cgroup_memory_events",
    "bpf_mem_cgroup_flush_stats",
];

/// The RFC struct_ops type and the callbacks memqos would implement.
pub const MEMCG_BPF_OPS: &str = "memcg_bpf_ops";
pub const MEMCG_BPF_OPS_VALUE: &str = "bpf_struct_ops_memcg_bpf_ops";
pub const MEMCG_BPF_OPS_MEMBERS: &[&str] = &["get_high_delay_ms", "below_low", "below_min"];

/// fentry candidates for pressure signals on kernels without the memcg tracepoints.
pub const PRESSURE_FENTRY: &[&str] = &[
    "try_to_free_mem_cgroup_pages",
    "mem_cgroup_handle_over_high",
    "__mem_cgroup_handle_over_high",
    "calculate_high_delay",
    "memcg_memory_event",
    "mem_cgroup_out_of_memory",
    "balance_dirty_pages",
];

/// Reclaim and writeback tracepoints. The vmscan memcg events are `DEFINE_EVENT`s of the
/// direct-reclaim classes, so there is no `trace_event_raw_mm_vmscan_memcg_reclaim_begin`.
pub const PRESSURE_TRACEPOINTS: &[TracepointSpec] = &[
    tp(
        "vmscan:mm_vmscan_memcg_reclaim_begin",
        "btf_trace_mm_vmscan_memcg_reclaim_begin",
        "trace_event_raw_mm_vmscan_direct_reclaim_begin_template",
    ),
    tp(
        "vmscan:mm_vmscan_memcg_reclaim_end",
        "btf_trace_mm_vmscan_memcg_reclaim_end",
        "trace_event_raw_mm_vmscan_direct_reclaim_end_template",
    ),
    tp("writeback:balance_dirty_pages", "btf_trace_balance_dirty_pages", "trace_event_raw_balance_dirty_pages"),
];

fn tracepoints(btf: &Btf, table: &[TracepointSpec]) -> Vec<Tracepoint> {
    table
        .iter()
        .map(|spec| Tracepoint {
            name: spec.name,
            btf_trace_typedef: btf.has_typedef(spec.btf_typedef),
            event_struct: spec.event_struct,
            event_struct_present: btf.has_struct(spec.event_struct),
        })
        .collect()
}

impl KernelFeatures {
    /// Probes `btf` (normally the running kernel's vmlinux BTF).
    pub fn probe(btf: &Btf) -> KernelFeatures {
        let memcg_tracepoints = {
            let tps = tracepoints(btf, MEMCG_TRACEPOINTS);
            let found = tps.iter().filter(|t| t.present()).count();
            TracepointSet { availability: Availability::of(found, tps.len()), tracepoints: tps }
        };

        let memcg_kfuncs = {
            let tags_known = btf.has_kfunc_tags();
            let kfuncs: Vec<Kfunc> = MEMCG_KFUNCS
                .iter()
                .map(|&name| {
                    let present = btf.has_func(name);
                    Kfunc { name, present, tagged: (present && tags_known).then(|| btf.is_tagged_kfunc(name)) }
                })
                .collect();
            let found = kfuncs.iter().filter(|k| k.present).count();
            KfuncSet { availability: Availability::of(found, kfuncs.len()), kfuncs }
        };

        let memcg_bpf_ops = {
            let struct_present = btf.has_struct(MEMCG_BPF_OPS);
            let members: Vec<Symbol> = MEMCG_BPF_OPS_MEMBERS
                .iter()
                .map(|&name| Symbol { name, present: struct_present && btf.find_member(MEMCG_BPF_OPS, name).is_some() })
                .collect();
            let value_type_present = btf.has_struct(MEMCG_BPF_OPS_VALUE);
            let complete = members.iter().all(|m| m.present) && value_type_present;
            StructOps {
                availability: match (struct_present, complete) {
                    (false, _) => Availability::Absent,
                    (true, true) => Availability::Present,
                    (true, false) => Availability::Partial,
                },
                struct_name: MEMCG_BPF_OPS,
                struct_present,
                value_type_present,
                members,
            }
        };

        let pressure_hooks = PressureHooks {
            fentry: PRESSURE_FENTRY.iter().map(|&name| Symbol { name, present: btf.has_func(name) }).collect(),
            tracepoints: tracepoints(btf, PRESSURE_TRACEPOINTS),
        };

        KernelFeatures {
            memcg_tracepoints,
            memcg_kfuncs,
            memcg_bpf_ops,
            cgroup_iter: btf.has_struct("bpf_iter__cgroup"),
            pressure_hooks,
        }
    }

    /// Several lines for humans, one per interface, naming what is missing.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let tp = &self.memcg_tracepoints;
        let _ = writeln!(
            out,
            "memcg tracepoints: {}{}",
            tp.availability.as_str(),
            missing_list(tp.tracepoints.iter().filter(|t| !t.present()).map(|t| t.name))
        );
        let kf = &self.memcg_kfuncs;
        let _ = writeln!(
            out,
            "memcg kfuncs: {} ({}/{}){}",
            kf.availability.as_str(),
            kf.kfuncs.iter().filter(|k| k.present).count(),
            kf.kfuncs.len(),
            missing_list(kf.kfuncs.iter().filter(|k| !k.present).map(|k| k.name))
        );
        let untagged: Vec<_> = kf.kfuncs.iter().filter(|k| k.tagged == Some(false)).map(|k| k.name).collect();
        if !untagged.is_empty() {
            let _ = writeln!(out, "  present but without the bpf_kfunc tag: {}", untagged.join(", "));
        }
        let ops = &self.memcg_bpf_ops;
        let _ = write!(out, "{} struct_ops: {}", ops.struct_name, ops.availability.as_str());
        if ops.struct_present {
            let _ = write!(
                out,
                "{}{}",
                missing_list(ops.members.iter().filter(|m| !m.present).map(|m| m.name)),
                if ops.value_type_present { "" } else { " (no bpf_struct_ops_memcg_bpf_ops)" }
            );
        }
        out.push('\n');
        let _ = writeln!(out, "cgroup iterator: {}", if self.cgroup_iter { "present" } else { "absent" });
        let hooks = &self.pressure_hooks;
        let present: Vec<_> = hooks.present_fentry().collect();
        let absent: Vec<_> = hooks.fentry.iter().filter(|s| !s.present).map(|s| s.name).collect();
        let _ = writeln!(
            out,
            "fentry pressure hooks: {} of {} in BTF: {}{}",
            present.len(),
            hooks.fentry.len(),
            if present.is_empty() { "none".to_string() } else { present.join(", ") },
            missing_list(absent.into_iter())
        );
        for t in &hooks.tracepoints {
            let _ = writeln!(out, "tracepoint {}: {}", t.name, if t.present() { "present" } else { "absent" });
        }
        out
    }
}

fn missing_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<_> = names.collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" (missing: {})", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btf::builder::Builder;
    use crate::btf::Kind;

    /// A 6.12-like kernel: no memcg tracepoints or kfuncs, some fentry targets.
    fn old_kernel() -> Btf {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let proto = b.func_proto(int, &[]);
        b.func("try_to_free_mem_cgroup_pages", proto);
        b.func("__mem_cgroup_handle_over_high", proto);
        b.func("balance_dirty_pages", proto);
        b.composite(Kind::Struct, "bpf_iter__cgroup", 16, &[("meta", int, 0)]);
        b.composite(Kind::Struct, "trace_event_raw_balance_dirty_pages", 8, &[("x", int, 0)]);
        b.typedef("btf_trace_mm_vmscan_memcg_reclaim_begin", proto);
        Btf::parse(b.build(), "old.btf").unwrap()
    }

    /// A 7.x-like kernel with the kfuncs (tagged), tracepoints and the RFC struct_ops.
    fn rfc_kernel(drop_kfunc: Option<&str>) -> Btf {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let proto = b.func_proto(int, &[]);
        for name in MEMCG_KFUNCS.iter().filter(|&&n| Some(n) != drop_kfunc) {
            let f = b.func(name, proto);
            b.decl_tag("bpf_kfunc", f, -1);
        }
        for spec in MEMCG_TRACEPOINTS {
            b.typedef(spec.btf_typedef, proto);
        }
        let fp = b.ptr(proto);
        let ops = b.composite(
            Kind::Struct,
            "memcg_bpf_ops",
            40,
            &[
                ("handle_cgroup_online", fp, 0),
                ("below_low", fp, 128),
                ("below_min", fp, 192),
                ("get_high_delay_ms", fp, 256),
            ],
        );
        b.composite(Kind::Struct, "bpf_struct_ops_memcg_bpf_ops", 48, &[("data", ops, 64)]);
        Btf::parse(b.build(), "rfc.btf").unwrap()
    }

    #[test]
    fn old_kernel_has_only_fallback_hooks() {
        let f = KernelFeatures::probe(&old_kernel());
        assert_eq!(f.memcg_tracepoints.availability, Availability::Absent);
        assert_eq!(f.memcg_kfuncs.availability, Availability::Absent);
        assert_eq!(f.memcg_bpf_ops.availability, Availability::Absent);
        assert!(f.cgroup_iter);
        let hooks: Vec<_> = f.pressure_hooks.present_fentry().collect();
        assert_eq!(hooks, ["try_to_free_mem_cgroup_pages", "__mem_cgroup_handle_over_high", "balance_dirty_pages"]);
        let tps: Vec<_> = f.pressure_hooks.tracepoints.iter().map(|t| t.present()).collect();
        assert_eq!(tps, [true, false, true]);
        let s = f.summary();
        assert!(s.contains("memcg kfuncs: absent (0/7)"), "{s}");
        assert!(s.contains("memcg_bpf_ops struct_ops: absent\n"), "{s}");
        assert!(s.contains("missing: mem_cgroup_handle_over_high, calculate_high_delay"), "{s}");
    }

    #[test]
    fn rfc_kernel_has_everything() {
        let f = KernelFeatures::probe(&rfc_kernel(None));
        assert_eq!(f.memcg_tracepoints.availability, Availability::Present);
        assert_eq!(f.memcg_kfuncs.availability, Availability::Present);
        assert!(f.memcg_kfuncs.kfuncs.iter().all(|k| k.tagged == Some(true)));
        assert_eq!(f.memcg_bpf_ops.availability, Availability::Present);
        assert!(!f.cgroup_iter);
        let s = f.summary();
        assert!(s.contains("memcg kfuncs: present (7/7)\n"), "{s}");
        assert!(s.contains("memcg_bpf_ops struct_ops: present\n"), "{s}");
    }

    #[test]
    fn partial_kfuncs_name_the_missing_one() {
        let f = KernelFeatures::probe(&rfc_kernel(Some("bpf_mem_cgroup_memory_events")));
        assert_eq!(f.memcg_kfuncs.availability, Availability::Partial);
        assert!(f.summary().contains("(6/7) (missing: bpf_mem_cgroup_memory_events)"));
    }

    #[test]
    fn struct_ops_of_another_shape_is_partial() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.composite(Kind::Struct, "memcg_bpf_ops", 8, &[("memcg_nr_pages_over_high", int, 0)]);
        let f = KernelFeatures::probe(&Btf::parse(b.build(), "v1.btf").unwrap());
        assert_eq!(f.memcg_bpf_ops.availability, Availability::Partial);
        assert!(f.summary().contains(
            "memcg_bpf_ops struct_ops: partial (missing: get_high_delay_ms, below_low, below_min) (no bpf_struct_ops_memcg_bpf_ops)"
        ));
    }

    #[test]
    fn serializes_to_json() {
        let f = KernelFeatures::probe(&old_kernel());
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["memcg_kfuncs"]["availability"], "absent");
        assert_eq!(v["cgroup_iter"], true);
        assert_eq!(v["pressure_hooks"]["fentry"][0]["name"], "try_to_free_mem_cgroup_pages");
    }

    #[test]
    fn host_probe_prints_summary() {
        let Ok(btf) = Btf::load_vmlinux() else {
            eprintln!("SKIP host_probe_prints_summary: {} unreadable", crate::btf::VMLINUX_BTF);
            return;
        };
        let f = KernelFeatures::probe(&btf);
        eprintln!("{}", f.summary());
        assert!(f.cgroup_iter, "every kernel memqos supports (>= 6.1) has the cgroup iterator");
    }
}
