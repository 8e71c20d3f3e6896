//! Two static baselines (issue 29): what memqos's outcome would be without its daemon.
//!
//! - `static-adj`: each task gets the `oom_score_adj` memqos's own config gives its tier, set
//!   once before the task starts, and nothing else. If memqos's protected-task survival comes
//!   from steering the OOM killer alone, this arm shows it.
//! - `static-reserve`: the protected task's memory.min is its declared size (its replayed
//!   peak plus 10%, the same number the kube-memoryqos arm requests and memqos is told in
//!   the declared-peak scenarios), and the low tasks share the rest of the parent as
//!   memory.max, equally. Unlike static-max it gives the protected task its peak.

use crate::scenario::render_memqos_config;

const PAGE: u64 = 4096;

/// The `oom_score_adj` memqos's config (`template`, the scenario's `memqos_config`) gives
/// the task cgroup `task` (the runner's names: high, low1, ...), `None` where its tier sets
/// none or no tier matches.
pub fn adj_for(template: &str, task: &str) -> Result<Option<i32>, String> {
    let text = render_memqos_config(template, "/sys/fs/cgroup/memqos-exp", "/run/memqos-exp/state");
    let cfg = memqos_policy::Config::from_str(&text, "memqos_config").map_err(|e| e.to_string())?;
    Ok(cfg.tiers.classify(task).and_then(|i| cfg.tiers.get(i)).and_then(|t| t.oom_score_adj))
}

/// The knobs of the static-reserve arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    /// The protected task's memory.min.
    pub high_min: u64,
    /// Each low task's memory.max: an equal share of what is left, page aligned down.
    pub low_max: u64,
}

/// The static-reserve knobs for a parent of `parent_max` bytes, a protected task reserving
/// `high_reserve` bytes and `lows` low tasks.
pub fn reserve(parent_max: u64, high_reserve: u64, lows: usize) -> Result<Reserve, String> {
    if parent_max == u64::MAX {
        return Err("static-reserve needs a parent limit to share (parent_max = \"max\" has none)".into());
    }
    if high_reserve >= parent_max {
        return Err(format!(
            "static-reserve: the protected task's reserve ({} MiB) leaves nothing of the parent's {} MiB for the lows",
            high_reserve >> 20,
            parent_max >> 20
        ));
    }
    let share = (parent_max - high_reserve) / lows.max(1) as u64;
    Ok(Reserve { high_min: high_reserve, low_max: share / PAGE * PAGE })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn static_adj_takes_each_tiers_value_from_the_memqos_config() {
        let template = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/memqos-experiment.toml"),
        )
        .unwrap();
        // The experiments' config: critical tier high* at -900, batch tier low* sets none.
        assert_eq!(adj_for(&template, "high").unwrap(), Some(-900));
        assert_eq!(adj_for(&template, "low1").unwrap(), None);
        assert_eq!(adj_for(&template, "other").unwrap(), None);
        let custom = "cgroup_root = \"@CGROUP_ROOT@\"\n[[tier]]\nname = \"a\"\nmatch = [\"high*\"]\nprotect = \"low\"\noom_score_adj = -500\n[[tier]]\nname = \"b\"\nmatch = [\"low*\"]\nthrottle = true\noom_score_adj = 300\n";
        assert_eq!(adj_for(custom, "high").unwrap(), Some(-500));
        assert_eq!(adj_for(custom, "low2").unwrap(), Some(300));
        assert!(adj_for("not a config", "high").is_err());
    }

    #[test]
    fn static_reserve_gives_the_protected_task_its_peak_and_splits_the_rest() {
        // oom: 1100 MiB parent, the protected trace's 421 MiB peak + 10% reserved, two lows.
        let high = 463 * MIB;
        let r = reserve(1100 * MIB, high, 2).unwrap();
        assert_eq!(r.high_min, 463 * MIB);
        assert_eq!(r.low_max, (1100 - 463) * MIB / 2 / PAGE * PAGE);
        assert_eq!(r.low_max % PAGE, 0);
        assert!(r.high_min + 2 * r.low_max <= 1100 * MIB);
        // Three lows share the same rest three ways.
        assert_eq!(reserve(900 * MIB, 300 * MIB, 3).unwrap().low_max, 200 * MIB);
        assert!(reserve(u64::MAX, high, 2).is_err(), "no parent limit: nothing to share");
        assert!(reserve(400 * MIB, high, 2).is_err(), "the reserve alone exceeds the parent");
    }
}
