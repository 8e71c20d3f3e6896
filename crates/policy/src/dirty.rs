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
//! observations into a memory.high per capped cgroup. The daemon reads the inputs, writes the
//! outputs (journaled like every knob) and re-plans every tick.

use crate::config::{Config, TierIndex};
use crate::size::{Limit, PAGE};

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
    pub id: String,
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
    pub id: String,
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
                        c.id, crate::size::human(min), crate::size::human(max), crate::size::human(own_freerun)
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
        p.caps.push(Cap { id: c.id.clone(), cap_bytes: cap, high });
    }
    p
}

fn round_up(b: u64) -> u64 {
    b.div_ceil(PAGE) * PAGE
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

    fn obs(id: &str, tier: usize, usage: u64, file: u64, dirty: u64) -> DirtyObs {
        DirtyObs {
            id: id.into(),
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
        assert_eq!((cap.id.as_str(), cap.cap_bytes), ("noisy", 4 * MIB));
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
}
