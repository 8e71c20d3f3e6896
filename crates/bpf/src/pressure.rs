//! The BPF pressure source: per-cgroup counters of reclaim entry, over-high handling, LRU
//! scanning and page faults, with thresholds the daemon sets per cgroup, and a ring buffer
//! that wakes the daemon the moment a threshold is crossed (`src/bpf/pressure.bpf.c`).
//!
//! Lifecycle: [`plan`] decides from the kernel's BTF which programs this kernel can run (no
//! privilege needed, also used by `memqos doctor`); [`PressureSource::load`] loads them,
//! attaches each and fails with one [`LoadError`] naming the reason when the source cannot
//! work; [`PressureSource::watch`] / [`PressureSource::unwatch`] manage the watched cgroups;
//! the owner polls [`PressureSource::fd`] and calls [`PressureSource::drain`]. Dropping the
//! source detaches everything: nothing is pinned, so no program outlives the process.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::path::Path;
use std::rc::Rc;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use serde::Serialize;

use crate::btf::Btf;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/pressure.skel.rs"));
}
use skel::types;
use skel::{PressureSkel, PressureSkelBuilder};

/// What a cgroup went through (`enum pressure_kind` in `src/bpf/pressure.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A task of the cgroup entered direct reclaim.
    Reclaim,
    /// A task of the cgroup returned to user mode over a memory.high (pages over high).
    OverHigh,
    /// Pages scanned by reclaim.
    Scan,
    /// Page faults.
    Fault,
    /// Major page faults.
    MajFault,
}

impl Kind {
    pub const ALL: [Kind; KINDS] = [Kind::Reclaim, Kind::OverHigh, Kind::Scan, Kind::Fault, Kind::MajFault];

    fn from_raw(raw: u32) -> Option<Kind> {
        Kind::ALL.get(raw as usize).copied()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Reclaim => "reclaim",
            Kind::OverHigh => "over_high",
            Kind::Scan => "scan",
            Kind::Fault => "fault",
            Kind::MajFault => "majfault",
        }
    }
}

/// Number of kinds (`PK_NR`).
pub const KINDS: usize = 5;

/// Per-cgroup thresholds: `limit[kind]` events within one counting window emit an event;
/// 0 means the kind is counted but never emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Thresholds {
    pub limit: [u64; KINDS],
}

impl Thresholds {
    /// What the daemon uses for protected cgroups (window 100 ms):
    /// - reclaim 1: any direct reclaim by a protected task is a stall on its allocation path,
    ///   the earliest sign that it is short of memory;
    /// - over_high 1: it is being charged over a memory.high and will be penalised;
    /// - scan 8192 pages (32 MiB per 100 ms): its LRUs are being scanned hard;
    /// - majfault 256 per 100 ms: it is reading back what was reclaimed (refaults);
    /// - fault 0: minor faults are growth, not pressure; counted for reports only.
    pub const PROTECTED: Thresholds = Thresholds { limit: [1, 1, 8192, 0, 256] };

    pub fn get(&self, kind: Kind) -> u64 {
        self.limit[kind as usize]
    }
}

/// Counters of one watched cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Counters {
    /// Events since the cgroup was watched, by [`Kind`] order.
    pub total: [u64; KINDS],
    /// Crossings suppressed by the per-cgroup rate limit.
    pub suppressed: u64,
}

impl Counters {
    pub fn get(&self, kind: Kind) -> u64 {
        self.total[kind as usize]
    }
}

/// One threshold crossing read from the ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PressureEvent {
    /// The cgroup's id: its directory's inode number (see [`cgroup_id`]).
    pub cgroup_id: u64,
    pub kind: Kind,
    /// Events of `kind` in the window when the threshold was crossed.
    pub value: u64,
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) of the crossing.
    pub ktime_ns: u64,
}

/// Global counters of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Stats {
    pub emitted: u64,
    pub ring_full: u64,
    pub rate_limited: u64,
}

/// One BPF program and whether this kernel can run it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hook {
    /// Program name in pressure.bpf.c.
    pub program: &'static str,
    /// What it attaches to, as the kernel names it.
    pub target: &'static str,
    /// What it counts.
    pub kinds: &'static [Kind],
    /// Chosen for this kernel (else `why_not` says why).
    pub selected: bool,
    pub why_not: Option<&'static str>,
    /// After [`PressureSource::load`]: attached, or the attach error.
    pub attached: Option<Result<(), String>>,
}

/// Decides from `btf` which programs to load. Each present hook is chosen unless a better
/// one covers the same kinds: the memcg tracepoints (7.x) replace the task-context scan and
/// fault hooks that 6.12 needs.
pub fn plan(btf: &Btf) -> Vec<Hook> {
    let typedef = |t: &str| btf.has_typedef(&format!("btf_trace_{t}"));
    let memcg_events = typedef("count_memcg_events");
    let scan_is_vm_event = btf.enum_value("vm_event_item", "PGSCAN_DIRECT").is_some();
    let scan_is_node_stat = btf.enum_value("node_stat_item", "PGSCAN_DIRECT").is_some();
    let lruvec = typedef("mod_memcg_lruvec_state") && scan_is_node_stat;
    let memcg_scan = (memcg_events && scan_is_vm_event) || lruvec;

    let hook = |program, target, kinds, present: bool, superseded: Option<&'static str>| {
        let why_not = if !present { Some("not in this kernel's BTF") } else { superseded };
        Hook { program, target, kinds, selected: why_not.is_none(), why_not, attached: None }
    };
    vec![
        hook(
            "memcg_reclaim_begin",
            "tracepoint vmscan:mm_vmscan_memcg_reclaim_begin",
            &[Kind::Reclaim],
            typedef("mm_vmscan_memcg_reclaim_begin"),
            None,
        ),
        hook(
            "direct_reclaim_begin",
            "tracepoint vmscan:mm_vmscan_direct_reclaim_begin",
            &[Kind::Reclaim],
            typedef("mm_vmscan_direct_reclaim_begin"),
            None,
        ),
        hook(
            "handle_over_high",
            "fentry mem_cgroup_handle_over_high",
            &[Kind::OverHigh],
            btf.has_func("mem_cgroup_handle_over_high"),
            None,
        ),
        hook(
            "handle_over_high_outline",
            "fentry __mem_cgroup_handle_over_high",
            &[Kind::OverHigh],
            btf.has_func("__mem_cgroup_handle_over_high"),
            None,
        ),
        hook(
            "count_memcg_events",
            "tracepoint memcg:count_memcg_events",
            if scan_is_vm_event { &[Kind::Fault, Kind::MajFault, Kind::Scan] } else { &[Kind::Fault, Kind::MajFault] },
            memcg_events,
            None,
        ),
        hook(
            "mod_memcg_lruvec_state",
            "tracepoint memcg:mod_memcg_lruvec_state",
            &[Kind::Scan],
            typedef("mod_memcg_lruvec_state"),
            (!scan_is_node_stat).then_some("PGSCAN_* are vm events here (count_memcg_events has them)"),
        ),
        hook(
            "lru_shrink_inactive",
            "tracepoint vmscan:mm_vmscan_lru_shrink_inactive",
            &[Kind::Scan],
            typedef("mm_vmscan_lru_shrink_inactive"),
            memcg_scan.then_some("the memcg tracepoints count scans per memcg"),
        ),
        hook(
            "handle_mm_fault_exit",
            "fexit handle_mm_fault",
            &[Kind::Fault, Kind::MajFault],
            btf.has_func("handle_mm_fault"),
            memcg_events.then_some("memcg:count_memcg_events counts faults per memcg"),
        ),
    ]
}

/// Why the source cannot run; the daemon logs it once and continues without it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("no usable BTF ({0}); BPF pressure hooks need /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)")]
    NoBtf(String),
    #[error("this kernel has no hook for reclaim entry or over-high handling (unknown kernel)")]
    NoHooks,
    #[error("opening the BPF object: {0}")]
    Open(String),
    #[error("loading the BPF programs was refused: {0}{hint}", hint = privilege_hint(.0))]
    Load(String),
    #[error("no reclaim or over-high hook could be attached: {0}")]
    Attach(String),
    #[error("setting up the ring buffer: {0}")]
    Ring(String),
}

fn privilege_hint(err: &str) -> &'static str {
    if err.contains("EPERM") || err.contains("Operation not permitted") {
        " (needs root or CAP_BPF + CAP_PERFMON)"
    } else {
        ""
    }
}

/// Tunables fixed at load time.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Counting window for thresholds.
    pub window_ns: u64,
    /// Minimum time between two events of one cgroup (storm protection).
    pub min_gap_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { window_ns: 100_000_000, min_gap_ns: 2_000_000 }
    }
}

/// Loaded and attached programs, their maps and the ring-buffer consumer.
pub struct PressureSource {
    // Field order is drop order: the ring consumer, then the links (detach), then the
    // skeleton (closes programs and maps).
    ring: RingBuffer<'static>,
    queue: Rc<RefCell<Vec<PressureEvent>>>,
    links: Vec<Link>,
    skel: PressureSkel<'static>,
    hooks: Vec<Hook>,
}

impl PressureSource {
    /// Loads the programs `plan(btf)` selects and attaches each. A program whose attach
    /// fails is left out (recorded in [`hooks`](Self::hooks)); the source fails only when no
    /// reclaim-entry or over-high hook is attached, since those carry the fast signal.
    pub fn load(btf: &Btf, opts: Options) -> Result<PressureSource, LoadError> {
        let mut hooks = plan(btf);
        let essential = |h: &Hook| h.kinds.contains(&Kind::Reclaim) || h.kinds.contains(&Kind::OverHigh);
        if !hooks.iter().any(|h| h.selected && essential(h)) {
            return Err(LoadError::NoHooks);
        }
        // The open object must outlive the skeleton that borrows it; one small allocation
        // per load, kept for the life of the process.
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = PressureSkelBuilder::default().open(storage).map_err(|e| LoadError::Open(format!("{e:#}")))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.window_ns = opts.window_ns.max(1_000_000);
            ro.min_gap_ns = opts.min_gap_ns;
        }
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            let wanted = hooks.iter().any(|h| h.selected && h.program == name);
            prog.set_autoload(wanted);
        }
        let mut skel = open.load().map_err(|e| LoadError::Load(format!("{e:#}")))?;

        let mut links = Vec::new();
        for prog in skel.object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            let Some(hook) = hooks.iter_mut().find(|h| h.selected && h.program == name) else { continue };
            match prog.attach() {
                Ok(link) => {
                    links.push(link);
                    hook.attached = Some(Ok(()));
                }
                Err(e) => hook.attached = Some(Err(format!("{e:#}"))),
            }
        }
        if !hooks.iter().any(|h| essential(h) && h.attached == Some(Ok(()))) {
            let errors: Vec<String> = hooks
                .iter()
                .filter_map(|h| match &h.attached {
                    Some(Err(e)) => Some(format!("{}: {e}", h.program)),
                    _ => None,
                })
                .collect();
            return Err(LoadError::Attach(errors.join("; ")));
        }

        let queue: Rc<RefCell<Vec<PressureEvent>>> = Rc::default();
        let sink = queue.clone();
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.events, move |data: &[u8]| {
                if let Some(ev) = decode(data) {
                    sink.borrow_mut().push(ev);
                }
                0
            })
            .map_err(|e| LoadError::Ring(format!("{e:#}")))?;
        let ring = builder.build().map_err(|e| LoadError::Ring(format!("{e:#}")))?;
        Ok(PressureSource { ring, queue, links, skel, hooks })
    }

    /// The programs, whether each was chosen, and how its attach went.
    pub fn hooks(&self) -> &[Hook] {
        &self.hooks
    }

    /// Number of attached programs.
    pub fn attached(&self) -> usize {
        self.links.len()
    }

    /// Starts (or updates the thresholds of) counting for `cgroup_id`; its counters start
    /// from zero when it was not watched.
    pub fn watch(&self, cgroup_id: u64, thresholds: &Thresholds) -> Result<(), libbpf_rs::Error> {
        let value = types::pressure_thresholds { limit: thresholds.limit };
        self.skel.maps.thresholds.update(&cgroup_id.to_ne_bytes(), as_bytes(&value), MapFlags::ANY)
    }

    /// Stops counting for `cgroup_id` and forgets its counters. A cgroup that was not
    /// watched is not an error.
    pub fn unwatch(&self, cgroup_id: u64) {
        let key = cgroup_id.to_ne_bytes();
        let _ = self.skel.maps.thresholds.delete(&key);
        let _ = self.skel.maps.states.delete(&key);
    }

    /// The counters of a watched cgroup that had at least one event.
    pub fn counters(&self, cgroup_id: u64) -> Option<Counters> {
        let raw = self.skel.maps.states.lookup(&cgroup_id.to_ne_bytes(), MapFlags::ANY).ok().flatten()?;
        let st: types::pressure_state = from_bytes(&raw)?;
        Some(Counters { total: st.total, suppressed: st.suppressed })
    }

    /// Sums of the per-CPU global counters.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for (i, slot) in [&mut s.emitted, &mut s.ring_full, &mut s.rate_limited].into_iter().enumerate() {
            if let Ok(Some(per_cpu)) = self.skel.maps.stats.lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY) {
                *slot =
                    per_cpu.iter().filter_map(|v| v.get(..8)).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).sum();
            }
        }
        s
    }

    /// A descriptor that polls readable when events are waiting (an epoll fd).
    pub fn fd(&self) -> RawFd {
        self.ring.epoll_fd()
    }

    /// Takes every event waiting in the ring, oldest first. Never blocks.
    pub fn drain(&mut self) -> Vec<PressureEvent> {
        let _ = self.ring.consume();
        std::mem::take(&mut *self.queue.borrow_mut())
    }
}

/// A cgroup v2 directory's id as BPF sees it (`bpf_get_current_cgroup_id`,
/// `cgroup->kn->id`): the directory's inode number.
pub fn cgroup_id(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(dir)?.ino())
}

fn decode(data: &[u8]) -> Option<PressureEvent> {
    let raw: types::pressure_event = from_bytes(data)?;
    Some(PressureEvent {
        cgroup_id: raw.cgroup_id,
        kind: Kind::from_raw(raw.kind)?,
        value: raw.value,
        ktime_ns: raw.ktime_ns,
    })
}

fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of the skeleton's plain #[repr(C)] integer structs (no padding holes
    // that matter: the BPF side reads the same layout).
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

fn from_bytes<T: Copy + Default>(data: &[u8]) -> Option<T> {
    if data.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: length checked; T is a plain #[repr(C)] integer struct, any bit pattern is valid.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btf::builder::Builder;

    #[test]
    fn kinds_match_the_c_header() {
        assert_eq!(std::mem::size_of::<types::pressure_thresholds>(), 8 * KINDS);
        assert_eq!(std::mem::size_of::<types::pressure_event>(), 32);
        let header = include_str!("bpf/pressure.h");
        for (i, k) in Kind::ALL.iter().enumerate() {
            let name =
                format!("PK_{} = {i},", k.as_str().replace('_', "").to_uppercase().replace("OVERHIGH", "OVER_HIGH"));
            assert!(header.contains(&name), "pressure.h lacks {name}");
        }
        assert!(header.contains(&format!("PK_NR = {KINDS},")));
    }

    fn kernel(memcg_tracepoints: bool, over_high_outline: bool) -> Btf {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let proto = b.func_proto(int, &[]);
        b.typedef("btf_trace_mm_vmscan_memcg_reclaim_begin", proto);
        b.typedef("btf_trace_mm_vmscan_direct_reclaim_begin", proto);
        b.typedef("btf_trace_mm_vmscan_lru_shrink_inactive", proto);
        b.func("handle_mm_fault", proto);
        b.func(if over_high_outline { "__mem_cgroup_handle_over_high" } else { "mem_cgroup_handle_over_high" }, proto);
        b.enum32("vm_event_item", false, &[("PGFAULT", 23), ("PGMAJFAULT", 24), ("PGSCAN_DIRECT", 32)]);
        if memcg_tracepoints {
            b.typedef("btf_trace_count_memcg_events", proto);
            b.typedef("btf_trace_mod_memcg_lruvec_state", proto);
        }
        Btf::parse(b.build(), "test.btf").unwrap()
    }

    fn selected(hooks: &[Hook]) -> Vec<&'static str> {
        hooks.iter().filter(|h| h.selected).map(|h| h.program).collect()
    }

    #[test]
    fn old_kernel_uses_task_context_hooks() {
        let hooks = plan(&kernel(false, false));
        assert_eq!(
            selected(&hooks),
            [
                "memcg_reclaim_begin",
                "direct_reclaim_begin",
                "handle_over_high",
                "lru_shrink_inactive",
                "handle_mm_fault_exit"
            ]
        );
        let missing = hooks.iter().find(|h| h.program == "count_memcg_events").unwrap();
        assert_eq!(missing.why_not, Some("not in this kernel's BTF"));
    }

    #[test]
    fn memcg_tracepoints_replace_scan_and_fault_hooks() {
        let hooks = plan(&kernel(true, true));
        assert_eq!(
            selected(&hooks),
            ["memcg_reclaim_begin", "direct_reclaim_begin", "handle_over_high_outline", "count_memcg_events"]
        );
        let lruvec = hooks.iter().find(|h| h.program == "mod_memcg_lruvec_state").unwrap();
        assert!(lruvec.why_not.unwrap().contains("vm events"));
    }

    #[test]
    fn a_kernel_without_reclaim_hooks_is_refused_before_any_bpf_call() {
        let b = Builder::new();
        let btf = Btf::parse(b.build(), "empty.btf").unwrap();
        assert!(matches!(PressureSource::load(&btf, Options::default()), Err(LoadError::NoHooks)));
    }
}
