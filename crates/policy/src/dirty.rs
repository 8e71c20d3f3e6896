//! Per-cgroup dirty ceilings and floors on stock kernels, as a pure computation.
//!
//! The kernel (mm/page-writeback.c) throttles a writer in balance_dirty_pages() unless the
//! host's dirty + writeback pages are under the global freerun ceiling `(thresh + bg_thresh)
//! / 2` *and* its memcg's are under the memcg's own ceiling (the test is an AND). A cgroup
//! that is not itself dirtying much is therefore throttled only when *others* push the host
//! over the global ceiling. Two facts make that controllable from user space:
//!
//! * a memcg's dirty threshold scales with its "available" memory: `mdtc_calc_avail()` sets
//!   `avail = file pages + min(headroom, other clean)` where `headroom` comes from
//!   `mem_cgroup_wb_stats()` as `min(memory.max, memory.high) - memory.current`, and
//!   `domain_dirty_limits()` applies the global ratio (vm.dirty_bytes is first converted to a
//!   ratio of the host's dirtyable memory). So `memory.high = non-file usage + cap * dirtyable
//!   / thresh` makes the kernel itself throttle that cgroup once its dirty + writeback pages
//!   reach about `cap`, in its own memcg domain, without touching anyone else;
//! * if the ceilings of all writers add up to less than the global freerun ceiling minus the
//!   floors, the global domain never throttles, and a cgroup below its floor is free-running.
//!
//! [`plan`] turns the config's `dirty.max`/`dirty.min`, the host's thresholds and per-cgroup
//! observations into a memory.high per capped cgroup; [`Ceilings::decide`] turns the plan into
//! memory.high decisions merged with the engine's own (the lower value wins). The daemon reads
//! the inputs ([`host_from`] parses the host's), writes the decisions (journaled like every
//! knob) and decides again every tick.

use crate::config::{Config, TierIndex};
use crate::decision::{Action, Decision, Reason};
use crate::obs::{CgroupObs, Observation};
use crate::size::{Limit, PAGE};
use memqos_schema::CgroupId;
use std::collections::{HashMap, HashSet};

/// The host's dirty thresholds (/proc/vmstat), in pages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostDirty {
    /// `nr_dirty_threshold`.
    pub thresh_pages: u64,
    /// `nr_dirty_background_threshold`.
    pub bg_thresh_pages: u64,
    /// Dirtyable memory (`global_dirtyable_memory()`: free + file pages, less reserves).
    pub dirtyable_pages: u64,
}

impl HostDirty {
    /// The global freerun ceiling in bytes (`dirty_freerun_ceiling()`).
    pub fn freerun_bytes(&self) -> u64 {
        (self.thresh_pages + self.bg_thresh_pages) / 2 * PAGE
    }

    pub fn thresh_bytes(&self) -> u64 {
        self.thresh_pages * PAGE
    }

    /// The memcg "available" memory whose dirty threshold is `bytes`: the kernel computes a
    /// memcg's threshold as `thresh * avail / dirtyable`, so this inverts it.
    pub fn avail_for_thresh(&self, bytes: u64) -> u64 {
        let t = self.thresh_pages.max(1) as u128;
        (bytes as u128 * self.dirtyable_pages as u128 / t) as u64
    }

    /// The inverse: the dirty threshold of a memcg with `avail_bytes` available.
    pub fn thresh_for_avail(&self, avail_bytes: u64) -> u64 {
        let d = self.dirtyable_pages.max(1) as u128;
        (avail_bytes as u128 * self.thresh_pages as u128 / d) as u64
    }
}

/// One managed cgroup, from memory.stat / memory.current / memory.max.
#[derive(Clone, Debug, PartialEq)]
pub struct DirtyObs {
    /// Path relative to `cgroup_root`, as the inputs were read.
    pub path: String,
    pub tier: TierIndex,
    /// memory.current.
    pub usage_bytes: u64,
    /// memory.stat `file`.
    pub file_bytes: u64,
    /// memory.stat `file_dirty` + `file_writeback`.
    pub dirty_bytes: u64,
    /// memory.max (memory.high is ours to set, so it is not an input).
    pub max: Limit,
}

/// What to do for one cgroup.
#[derive(Clone, Debug, PartialEq)]
pub struct Cap {
    /// The capped cgroup's path (its [`DirtyObs::path`]).
    pub path: String,
    /// The dirty ceiling this tick (its tier's `dirty.max`, scaled down when the ceilings
    /// and floors do not fit under the host's freerun ceiling).
    pub cap_bytes: u64,
    /// memory.high that gives the cgroup that kernel dirty threshold, or `None` when its
    /// memory.max is already at or below it (the kernel bounds it by itself then).
    pub high: Option<u64>,
}

/// A tick's plan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub caps: Vec<Cap>,
    /// Sum of the `dirty.min` floors of present cgroups.
    pub reserved_bytes: u64,
    /// Dirty + writeback of present cgroups with neither bound (they eat the budget too).
    pub unbounded_bytes: u64,
    /// What the capped cgroups share: freerun ceiling - floors - unbounded usage.
    pub budget_bytes: u64,
    /// Conditions the operator should know about (one line each).
    pub warnings: Vec<String>,
}

/// No ceiling goes below this: under ~1 MiB the kernel's per-memcg limit is a few hundred
/// pages and the writer is paused on nearly every write.
pub const MIN_CAP: u64 = 1 << 20;

/// Plans the ceilings. Floors are reserved first; capped cgroups share the rest of the
/// freerun ceiling in proportion to their `dirty.max`.
pub fn plan(cfg: &Config, host: &HostDirty, cgroups: &[DirtyObs]) -> Plan {
    let mut p = Plan::default();
    let freerun = host.freerun_bytes();
    let mut wanted = Vec::new();
    for c in cgroups {
        let Some(tier) = cfg.tiers.get(c.tier) else { continue };
        let d = tier.dirty;
        if let Some(min) = d.min {
            p.reserved_bytes += min;
            // The floor also needs the cgroup's *own* memcg ceiling above it: its threshold
            // follows its available memory, which its memory.max bounds.
            if let Limit::Bytes(max) = c.max {
                let avail = c.file_bytes + max.saturating_sub(c.usage_bytes);
                let own_freerun = host.thresh_for_avail(avail) * 3 / 4;
                if own_freerun < min {
                    p.warnings.push(format!(
                        "{}: dirty.min {} cannot hold: its memory.max {} gives it a memcg freerun ceiling of only ~{} (memqos does not raise memory.max)",
                        c.path, crate::size::human(min), crate::size::human(max), crate::size::human(own_freerun)
                    ));
                }
            }
        }
        match d.max {
            Some(m) => wanted.push((c, m.bytes(host.thresh_bytes()).max(MIN_CAP))),
            None if d.min.is_none() => p.unbounded_bytes += c.dirty_bytes,
            None => {}
        }
    }
    p.budget_bytes = freerun.saturating_sub(p.reserved_bytes).saturating_sub(p.unbounded_bytes);
    if p.reserved_bytes >= freerun {
        p.warnings.push(format!(
            "the dirty.min floors ({}) exceed the host's freerun ceiling ({}): raise vm.dirty_bytes/vm.dirty_ratio or lower the floors",
            crate::size::human(p.reserved_bytes),
            crate::size::human(freerun)
        ));
    }
    let total: u64 = wanted.iter().map(|(_, w)| *w).sum();
    let scale = if total > p.budget_bytes && total > 0 { p.budget_bytes as f64 / total as f64 } else { 1.0 };
    for (c, w) in wanted {
        let cap = ((w as f64 * scale) as u64).max(MIN_CAP);
        let nonfile = c.usage_bytes.saturating_sub(c.file_bytes);
        let high = round_up(nonfile + host.avail_for_thresh(cap));
        let high = match c.max {
            Limit::Bytes(max) if max <= high => None,
            _ => Some(high),
        };
        p.caps.push(Cap { path: c.path.clone(), cap_bytes: cap, high });
    }
    p
}

fn round_up(b: u64) -> u64 {
    b.div_ceil(PAGE) * PAGE
}

/// The dirty ceilings as the engine's memory.high actions: per capped cgroup, the engine's
/// last memory.high (so that a tick where the engine says nothing keeps its wish), by cgroup
/// id: a cgroup re-created under the same path starts from its own original.
#[derive(Debug, Default)]
pub struct Ceilings {
    engine_high: HashMap<CgroupId, Limit>,
}

/// A change smaller than this is not written (the target moves with non-file usage).
const HYSTERESIS: u64 = 1 << 20;

impl Ceilings {
    /// Plans the ceilings for `observed` on `host` and merges them into the engine's
    /// `decisions` of this tick: a capped cgroup's memory.high is the lower of its ceiling
    /// and the engine's wish (this tick's decision, else its last one, else the original),
    /// written only when it moves by more than the hysteresis. Returns the decisions and the
    /// plan's warnings.
    pub fn decide(
        &mut self,
        cfg: &Config,
        host: &HostDirty,
        observed: &[DirtyObs],
        obs: &Observation,
        mut decisions: Vec<Decision>,
    ) -> (Vec<Decision>, Vec<String>) {
        let p = plan(cfg, host, observed);
        // Caps name cgroups by path (the plan's inputs are read by path): each is matched
        // to its observation once, and everything after works by id.
        let capped: Vec<(&Cap, &CgroupObs)> =
            p.caps.iter().filter_map(|cap| obs.cgroups.iter().find(|c| c.path == cap.path).map(|c| (cap, c))).collect();
        let capped_ids: HashSet<CgroupId> = capped.iter().map(|(_, c)| c.id).collect();
        self.engine_high.retain(|id, _| capped_ids.contains(id));
        for (cap, c) in capped {
            let id = c.id;
            let engine_decision = decisions.iter().position(|d| d.id == id && matches!(d.action, Action::High(_)));
            let engine_reason = engine_decision.map(|i| {
                let d = decisions.remove(i);
                if let Action::High(l) = d.action {
                    self.engine_high.insert(id, l);
                }
                d.reason
            });
            let engine = *self.engine_high.entry(id).or_insert(c.original.high);
            let (target, reason) = match (cap.high, engine) {
                (Some(h), Limit::Bytes(e)) if e <= h => (Limit::Bytes(e), engine_reason.unwrap_or(Reason::Restore)),
                (Some(h), _) => (
                    Limit::Bytes(h),
                    Reason::DirtyCeiling {
                        cap_bytes: cap.cap_bytes,
                        dirty_bytes: observed.iter().find(|o| o.path == cap.path).map(|o| o.dirty_bytes).unwrap_or(0),
                        budget_bytes: p.budget_bytes,
                    },
                ),
                // memory.max already bounds it: leave memory.high to the engine.
                (None, e) => (e, engine_reason.unwrap_or(Reason::Restore)),
            };
            if differs(c.current.high, target) {
                decisions.push(Decision::for_cgroup(c, Action::High(target), reason));
            }
        }
        (decisions, p.warnings)
    }
}

/// Whether memory.high at `current` is far enough from `target` to be written.
pub fn differs(current: Limit, target: Limit) -> bool {
    match (current, target) {
        (Limit::Bytes(a), Limit::Bytes(b)) => a.abs_diff(b) >= HYSTERESIS.min(b / 32).max(4096),
        (a, b) => a != b,
    }
}

/// The host's thresholds from /proc/vmstat, and its dirtyable memory as the kernel's
/// `global_dirtyable_memory()` computes it: free + file pages less `totalreserve_pages`
/// (per zone: the high watermark plus the largest lowmem reserve, from /proc/zoneinfo).
pub fn host_from(vmstat: &str, zoneinfo: &str) -> Result<HostDirty, String> {
    let get = |k: &str| -> Result<u64, String> {
        vmstat
            .lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
            .ok_or_else(|| format!("/proc/vmstat has no {k}"))
    };
    let mut reserve = 0u64;
    for zone in zoneinfo.split("Node ").skip(1) {
        let high = zone
            .lines()
            .find_map(|l| l.trim().strip_prefix("high").and_then(|v| v.trim().parse::<u64>().ok()))
            .unwrap_or(0);
        let protection = zone
            .lines()
            .find_map(|l| l.trim().strip_prefix("protection:"))
            .map(|p| p.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u64>().ok()).max().unwrap_or(0))
            .unwrap_or(0);
        // Saturating: /proc/zoneinfo is the kernel's, but a sum that wraps would make every
        // page look reserved (or none), and debug builds panic.
        reserve = reserve.saturating_add(high).saturating_add(protection);
    }
    let free_and_file =
        get("nr_free_pages")?.saturating_add(get("nr_inactive_file")?).saturating_add(get("nr_active_file")?);
    Ok(HostDirty {
        thresh_pages: get("nr_dirty_threshold")?,
        bg_thresh_pages: get("nr_dirty_background_threshold")?,
        dirtyable_pages: free_and_file.saturating_sub(reserve).max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::size::MIB;

    fn cfg() -> Config {
        Config::from_str(
            r#"
            cgroup_root = "/sys/fs/cgroup/x"
            [[tier]]
            name = "latency"
            match = ["victim*"]
            dirty = { min = "16M" }
            [[tier]]
            name = "bulk"
            match = ["noisy*"]
            dirty = { max = "4M" }
            [[tier]]
            name = "rest"
            match = ["**"]
            "#,
            "t.toml",
        )
        .unwrap()
    }

    /// The reproducer's host: vm.dirty_bytes 32 MB, background 16 MB, ~1.9 GB dirtyable.
    fn host() -> HostDirty {
        HostDirty { thresh_pages: 8192, bg_thresh_pages: 4096, dirtyable_pages: 487_000 }
    }

    fn obs(path: &str, tier: usize, usage: u64, file: u64, dirty: u64) -> DirtyObs {
        DirtyObs {
            path: path.into(),
            tier: TierIndex(tier),
            usage_bytes: usage,
            file_bytes: file,
            dirty_bytes: dirty,
            max: Limit::Max,
        }
    }

    #[test]
    fn cap_fits_and_high_inverts_the_kernel_ratio() {
        let p = plan(
            &cfg(),
            &host(),
            &[obs("victim", 0, 20 * MIB, 18 * MIB, 2 * MIB), obs("noisy", 1, 70 * MIB, 64 * MIB, 30 * MIB)],
        );
        assert_eq!(p.reserved_bytes, 16 * MIB);
        assert_eq!(p.budget_bytes, 24 * MIB - 16 * MIB);
        let cap = &p.caps[0];
        assert_eq!((cap.path.as_str(), cap.cap_bytes), ("noisy", 4 * MIB));
        let high = cap.high.unwrap();
        // 6 MiB of non-file memory plus what makes the memcg threshold 4 MiB.
        let avail = high - 6 * MIB;
        let thresh = host().thresh_for_avail(avail);
        assert!((thresh as i64 - (4 * MIB) as i64).abs() < 8192, "thresh {thresh}");
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn ceilings_shrink_when_floors_and_unbounded_writers_take_the_room() {
        let many: Vec<DirtyObs> = (0..4).map(|i| obs(&format!("noisy{i}"), 1, 10 * MIB, 8 * MIB, 0)).collect();
        let mut all = vec![obs("victim", 0, 0, 0, 0), obs("other", 2, 10 * MIB, 9 * MIB, 4 * MIB)];
        all.extend(many);
        let p = plan(&cfg(), &host(), &all);
        assert_eq!(p.unbounded_bytes, 4 * MIB);
        assert_eq!(p.budget_bytes, 4 * MIB);
        assert!(p.caps.iter().all(|c| c.cap_bytes == MIB), "{:?}", p.caps);
    }

    #[test]
    fn memory_max_below_the_target_means_no_write_and_floor_warning() {
        let mut n = obs("noisy", 1, 70 * MIB, 64 * MIB, 0);
        n.max = Limit::Bytes(80 * MIB);
        let mut v = obs("victim", 0, 20 * MIB, 18 * MIB, 0);
        v.max = Limit::Bytes(64 * MIB);
        let p = plan(&cfg(), &host(), &[v, n]);
        assert_eq!(p.caps[0].high, None);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(p.warnings[0].starts_with("victim: dirty.min 16"), "{}", p.warnings[0]);
    }

    #[test]
    fn floors_above_freerun_warn() {
        let vs: Vec<DirtyObs> = (0..2).map(|i| obs(&format!("victim{i}"), 0, 0, 0, 0)).collect();
        let p = plan(&cfg(), &host(), &vs);
        assert!(p.warnings.iter().any(|w| w.contains("exceed the host's freerun ceiling")), "{:?}", p.warnings);
    }

    #[test]
    fn host_thresholds_and_reserves() {
        let vmstat = "nr_free_pages 487637\nnr_free_pages_blocks 1\nnr_inactive_file 1190\nnr_active_file 10\nnr_dirty_threshold 8192\nnr_dirty_background_threshold 4096\n";
        let zoneinfo = "Node 0, zone      DMA\n  pages free     3840\n        min      13\n        low      16\n        high     19\n        protection: (0, 1910, 1910, 1910, 1910)\nNode 0, zone    DMA32\n  pages free     480000\n        high     900\n        protection: (0, 0, 0, 0, 0)\n";
        let h = host_from(vmstat, zoneinfo).unwrap();
        assert_eq!((h.thresh_pages, h.bg_thresh_pages), (8192, 4096));
        assert_eq!(h.dirtyable_pages, 487637 + 1200 - (19 + 1910) - 900);
        assert!(host_from("nr_free_pages 1\n", "").is_err());
    }

    /// Found by `proptest_vmstat_and_zoneinfo_agree_with_their_definition`
    /// (tests/proptest_inputs.rs): the sums overflowed (a panic in debug builds).
    #[test]
    fn huge_counts_saturate() {
        let max = u64::MAX;
        let vmstat = format!("nr_free_pages {max}\nnr_inactive_file {max}\nnr_active_file 1\nnr_dirty_threshold 1\nnr_dirty_background_threshold 1\n");
        let zoneinfo =
            format!("Node 0, zone Normal\n high {max}\n protection: (0, {max})\nNode 1, zone Normal\n high 5\n");
        let h = host_from(&vmstat, "").unwrap();
        assert_eq!(h.dirtyable_pages, max);
        let h = host_from(&vmstat, &zoneinfo).unwrap();
        assert_eq!(h.dirtyable_pages, 1, "everything reserved leaves the floor of one page");
    }

    #[test]
    fn hysteresis() {
        assert!(!differs(Limit::Bytes(100 << 20), Limit::Bytes((100 << 20) + 4096)));
        assert!(differs(Limit::Bytes(100 << 20), Limit::Bytes(102 << 20)));
        assert!(differs(Limit::Max, Limit::Bytes(100 << 20)));
    }
}
