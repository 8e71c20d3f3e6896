//! What the daemon observed: the engine's only input besides the config.
//!
//! All types are plain data (serde both ways) so the daemon can journal observations and a
//! test or a bug report can replay them through `Engine::tick`.

use serde::{Deserialize, Serialize};

use crate::config::TierIndex;
use crate::size::Limit;
use memqos_cgroupfs::{MemoryEvents, Pressure};
pub use memqos_schema::knob::Knobs;
pub use memqos_schema::reason::{BpfKind, LearnedPeak, PeakSource};
pub use memqos_schema::CgroupId;

/// The extended attribute a protected cgroup declares its expected peak in (a size, as in
/// the config: "512M", "2G", bytes); it overrides the tier's `expected_peak`.
pub const EXPECTED_PEAK_XATTR: &str = "user.memqos.expected_peak";

/// The extended attribute a cgroup names its workload in (a short string: a command, a
/// deployment). A `learn_peak` tier learns expected peaks per workload key, never per cgroup
/// path or id: a name reused by an unrelated cgroup inherits nothing (see the daemon's
/// `history` module).
pub const WORKLOAD_XATTR: &str = "user.memqos.workload";

/// The longest workload key accepted, in bytes.
pub const MAX_WORKLOAD_KEY: usize = 256;

/// Checks a workload key ([`WORKLOAD_XATTR`]): non-empty, at most [`MAX_WORKLOAD_KEY`]
/// bytes, printable, no control characters. Err says what is wrong.
pub fn check_workload_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a workload key must not be empty".into());
    }
    if key.len() > MAX_WORKLOAD_KEY {
        return Err(format!("{} bytes is longer than {MAX_WORKLOAD_KEY}", key.len()));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(format!("control character {c:?} in a workload key"));
    }
    if key.trim() != key {
        return Err("a workload key must not start or end with white space".into());
    }
    Ok(())
}

/// One sample of the managed subtree at `now_ms` (any monotonic clock, in milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Monotonic time of the sample. The engine never reads a clock; going backwards is
    /// treated as no time passing.
    pub now_ms: u64,
    /// The cgroup at `cgroup_root`.
    pub parent: ParentObs,
    /// The managed cgroups. They must not nest (pass leaves, or the root's direct children):
    /// a parent and its child would both be counted. Order does not matter; if an id appears
    /// twice the first wins. Cgroups missing here are treated as gone.
    pub cgroups: Vec<CgroupObs>,
}

/// The managed subtree's root (`cgroup_root`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParentObs {
    /// memory.current.
    pub usage_bytes: u64,
    /// memory.max.
    pub max: Limit,
    /// memory.high (the guard uses the tighter of the two).
    pub high: Limit,
    /// memory.events increments since the previous sample (`max`/`oom` mean the whole subtree
    /// hit its limit).
    pub events_delta: MemoryEvents,
    /// The host has no active swap (/proc/swaps lists no device; zswap needs one): anonymous
    /// memory cannot be reclaimed, so a memory.high below what a cgroup holds frees nothing
    /// and only makes its tasks sleep holding it (`throttle::guard_cut`). False when swap is
    /// active or nobody could tell (journals from before this field).
    #[serde(default)]
    pub swapless: bool,
    /// The host has active swap (/proc/swaps lists a device). With `swapless` a tri-state:
    /// both false when nobody could tell (an unreadable /proc/swaps, journals from before
    /// this field). Parking is off only when this is known (`engine::park`); unknown parks,
    /// the behaviour before it was known.
    #[serde(default)]
    pub swap_active: bool,
}

impl Default for ParentObs {
    fn default() -> Self {
        ParentObs {
            usage_bytes: 0,
            max: Limit::Max,
            high: Limit::Max,
            events_delta: MemoryEvents::default(),
            swapless: false,
            swap_active: false,
        }
    }
}

/// One managed cgroup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupObs {
    /// Path relative to `cgroup_root`, e.g. `"batch/job-7"`: where the cgroup is (reads,
    /// writes, the log, tier matching), not which one it is. On the wire: `id`.
    #[serde(rename = "id")]
    pub path: String,
    /// The kernel's cgroup id (the directory's inode): the key for all engine state. Ids
    /// must be distinct within an observation (0 is an id like any other: tests and replays
    /// that have none use [`CgroupObs::named`]). A cgroup whose id changes under the same
    /// path was removed and re-created: it is a new one. On the wire: `cgroup_id`.
    #[serde(rename = "cgroup_id", default)]
    pub id: CgroupId,
    /// From `Tiers::classify(id)`; cgroups matching no tier should not be passed. A cgroup
    /// whose tier changes is treated as a new cgroup. An out-of-range index is ignored.
    pub tier: TierIndex,
    /// memory.current.
    pub usage_bytes: u64,
    /// Optional better working-set estimate (e.g. anon + active_file from memory.stat);
    /// protection follows this instead of `usage_bytes` when given.
    pub working_set_bytes: Option<u64>,
    /// Knob values before memqos first wrote to this cgroup (the daemon's journal, or the
    /// current values the first time it is seen). Release and restore go back to these.
    pub original: Knobs,
    /// Knob values as read now (what memqos, or anyone, last wrote).
    pub current: Knobs,
    /// memory.events increments since the previous sample.
    pub events_delta: MemoryEvents,
    /// memory.pressure as read (`some avg10` decides; `full` is logged only).
    pub psi: Pressure,
    /// Increase of `psi.some.total_us` (microseconds stalled) since the previous observation
    /// (the engine divides it by the time between ticks); 0 for a cgroup seen for the first
    /// time.
    pub psi_some_delta_us: u64,
    /// Bytes refaulted over the last `refault_window_ms` (memory.stat
    /// `workingset_refault_anon` + `workingset_refault_file`, pages times the page size):
    /// pages reclaimed, or swapped out, and needed again. 0 for a cgroup seen for the first
    /// time or not read (the daemon reads it for protected cgroups on the periodic path,
    /// which is not every tick: hence its own window).
    #[serde(default)]
    pub refault_delta_bytes: u64,
    /// Milliseconds `refault_delta_bytes` covers; 0: no rate.
    #[serde(default)]
    pub refault_window_ms: u64,
    /// Wakeups that arrived since the previous sample.
    pub signals: Vec<SignalEvent>,
    /// `populated` of cgroup.events; `Some(false)`: no process left (a finished sandbox whose
    /// cgroup lingers). A protected cgroup with nothing in it cannot grow back, so it reserves
    /// no regrowth room and its protection goes back to the original. `None`: not read, treated
    /// as populated.
    #[serde(default)]
    pub populated: Option<bool>,
    /// The size this cgroup declared it expects to reach (its [`EXPECTED_PEAK_XATTR`], or
    /// what the daemon learned for its workload: `learned_peak`); the tier's `expected_peak`
    /// applies where it is `None`. Only protected cgroups' declarations count
    /// (`engine::reserve`).
    #[serde(default)]
    pub expected_peak_bytes: Option<u64>,
    /// Set when `expected_peak_bytes` was not declared but learned from the history of the
    /// cgroup's workload key; only named in reasons and logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_peak: Option<LearnedPeak>,
    /// The memory.high `memqos run` armed this throttle-tier cgroup at before its call
    /// started (its declaration, or its tier's allowance), as the daemon adopted it: what the
    /// call was promised. It counts as promised while the call lives, even after a cut has
    /// lowered its memory.high or a release lifted it to `max`: otherwise the room it frees
    /// would admit another call, and both would outgrow the room (`engine::admit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub armed_bytes: Option<u64>,
}

impl CgroupObs {
    /// False only when cgroup.events said nothing runs in it.
    pub fn is_populated(&self) -> bool {
        self.populated != Some(false)
    }

    /// [`CgroupObs::new`] with an id made up from the path (the same path, the same id), for
    /// tests and replays that have no kernel: cgroups named apart are distinct cgroups. Made
    /// up ids have the top bit set, which no inode number of cgroupfs reaches.
    pub fn named(path: impl Into<String>, tier: TierIndex, usage_bytes: u64) -> CgroupObs {
        let mut c = CgroupObs::new(path, tier, usage_bytes);
        c.id = CgroupObs::made_up_id(&c.path);
        c
    }

    /// The id [`CgroupObs::named`] gives the cgroup at `path`.
    pub fn made_up_id(path: &str) -> CgroupId {
        // FNV-1a: stable across runs and platforms.
        let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        CgroupId(hash | 1 << 63)
    }

    /// A cgroup with kernel-default knobs and no pressure, its kernel id unknown (0: set
    /// `id`, or use [`CgroupObs::named`]).
    pub fn new(path: impl Into<String>, tier: TierIndex, usage_bytes: u64) -> CgroupObs {
        CgroupObs {
            path: path.into(),
            id: CgroupId(0),
            tier,
            usage_bytes,
            working_set_bytes: None,
            original: Knobs::default(),
            current: Knobs::default(),
            events_delta: MemoryEvents::default(),
            psi: Pressure::default(),
            psi_some_delta_us: 0,
            refault_delta_bytes: 0,
            refault_window_ms: 0,
            signals: Vec::new(),
            populated: None,
            expected_peak_bytes: None,
            learned_peak: None,
            armed_bytes: None,
        }
    }
}

/// An asynchronous wakeup for one cgroup, delivered with the next observation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SignalEvent {
    /// A PSI trigger registered on memory.pressure fired (counts as pressure when
    /// `signals.psi` is on).
    PsiTrigger,
    /// The BPF source saw this cgroup cross its threshold, e.g. a PGSCAN/PGFAULT rate
    /// (counts as pressure when `signals.bpf` is on).
    BpfThreshold {
        /// The measured value, for the log.
        value: u64,
        /// Which counter crossed (carried into `Trigger::Bpf`, for the log).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counter: Option<BpfKind>,
    },
    /// memory.events changed (inotify). Only a wakeup: `events_delta` carries the counts.
    EventsChanged,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields were renamed (`path`, `id`), their names on the wire were not: an
    /// observation journaled or replayed reads and writes as before, in the same order.
    #[test]
    fn a_cgroup_keeps_its_wire_names() {
        let mut c = CgroupObs::new("batch/a", TierIndex(1), 5);
        c.id = CgroupId(42);
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.starts_with(r#"{"id":"batch/a","cgroup_id":42,"tier":1,"#), "{text}");
        assert_eq!(serde_json::from_str::<CgroupObs>(&text).unwrap(), c);
    }
}
