//! `<state_dir>/status.json`: what the daemon manages, written atomically about once a second
//! and read by `memqos status` through the same types (`memqos_schema::status`). Per cgroup: its tier, its knobs
//! beside the originals memqos will put back, and its last decisions with their reasons.

use crate::observe::Seen;
use anyhow::{Context, Result};
use memqos_cgroupfs::units::mib;
use memqos_policy::{Config, Engine, Knobs, Limit, Observation};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::Path;

pub use memqos_schema::state::STATUS_FILE;
use memqos_schema::state::STATUS_TMP_FILE;
pub use memqos_schema::status::{CgroupStatus, DecisionRecord, Snapshot};

/// The decisions kept for status: the last few overall.
pub const RECENT: usize = 20;
const PER_CGROUP: usize = 3;

/// The snapshot of one periodic tick.
#[allow(clippy::too_many_arguments)]
pub(crate) fn snapshot(
    cfg: &Config,
    config_path: &Path,
    dry_run: bool,
    obs: &Observation,
    seen: &[Seen],
    engine: &Engine,
    recent: &VecDeque<DecisionRecord>,
    oom_score_adj_processes: usize,
) -> Snapshot {
    let st = engine.status();
    let cgroups = seen
        .iter()
        .map(|s| {
            let mine: Vec<DecisionRecord> = recent.iter().filter(|d| d.cgroup == s.cgroup).cloned().collect();
            CgroupStatus {
                cgroup: s.cgroup.clone(),
                cgroup_id: s.cgroup_id,
                tier: s.tier.clone(),
                usage_bytes: s.usage_bytes,
                knobs: s.knobs,
                original: s.original,
                psi_some_avg10: s.psi_some_avg10,
                events: s.events,
                last_decisions: mine[mine.len().saturating_sub(PER_CGROUP)..].to_vec(),
            }
        })
        .collect();
    Snapshot {
        pid: std::process::id(),
        config: config_path.display().to_string(),
        cgroup_root: cfg.cgroup_root.display().to_string(),
        dry_run,
        parent_usage_bytes: obs.parent.usage_bytes,
        parent_max: obs.parent.max,
        cgroups,
        throttled: st.throttled,
        frozen: st.frozen,
        parked: st.parked,
        queued: st.queued,
        thrashing: st.thrashing,
        last_pressure_ms: st.last_pressure_ms,
        now_ms: obs.now_ms,
        recent_decisions: recent.iter().cloned().collect(),
        oom_score_adj_processes,
        oom_kills_by_tier: Default::default(),
        recent_oom_kills: Vec::new(),
        loop_restarts: 0,
        leftovers_removed: Default::default(),
        leftovers_waiting: 0,
    }
}

pub(crate) fn write(state_dir: &Path, snap: &Snapshot) -> Result<()> {
    let tmp = state_dir.join(STATUS_TMP_FILE);
    if let Err(e) = std::fs::write(&tmp, serde_json::to_vec_pretty(snap)?) {
        // A partial file on a full disk holds space the journal may need.
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    std::fs::rename(&tmp, state_dir.join(STATUS_FILE)).with_context(|| format!("renaming {}", tmp.display()))?;
    Ok(())
}

pub(crate) fn remove(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(STATUS_FILE));
}

pub fn read(state_dir: &Path) -> Result<Option<Snapshot>> {
    let path = state_dir.join(STATUS_FILE);
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(
            serde_json::from_slice(&b).with_context(|| format!("{}: not a memqos status file", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn limit(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => mib(b),
        Limit::Max => "max".into(),
    }
}

/// `memqos status` as text. `alive`: whether the pid in the snapshot still runs.
pub fn render(s: &Snapshot, alive: bool) -> String {
    let mut out = String::new();
    let state = match (alive, s.dry_run) {
        (true, true) => "running, DRY RUN: writes nothing",
        (true, false) => "running",
        (false, _) => "NOT RUNNING: stale status",
    };
    let _ = writeln!(out, "memqos daemon pid {} ({state}), config {}", s.pid, s.config);
    let _ = writeln!(
        out,
        "cgroup root {}: usage {} / max {}",
        s.cgroup_root,
        mib(s.parent_usage_bytes),
        limit(s.parent_max)
    );
    // Columns as wide as the longest name (systemd unit paths run past 28 characters).
    let cw = s.cgroups.iter().map(|c| c.cgroup.chars().count()).max().unwrap_or(0).max(28);
    let tw = s.cgroups.iter().map(|c| c.tier.chars().count()).max().unwrap_or(0).max(10);
    let _ = writeln!(
        out,
        "{:<cw$} {:<tw$} {:>8} {:>8} {:>10} {:>8} {:>10} {:>7}",
        "CGROUP", "TIER", "USAGE", "HIGH", "(ORIGINAL)", "LOW/MIN", "(ORIGINAL)", "PSI10"
    );
    for c in &s.cgroups {
        let prot = |k: &Knobs| {
            if k.min > Limit::Bytes(0) {
                format!("min {}", limit(k.min))
            } else {
                limit(k.low)
            }
        };
        let _ = writeln!(
            out,
            "{:<cw$} {:<tw$} {:>8} {:>8} {:>10} {:>8} {:>10} {:>7.2}{}",
            c.cgroup,
            c.tier,
            mib(c.usage_bytes),
            limit(c.knobs.high),
            format!("({})", limit(c.original.high)),
            prot(&c.knobs),
            format!("({})", prot(&c.original)),
            c.psi_some_avg10,
            match (
                c.knobs.frozen,
                s.parked.iter().position(|p| *p == c.cgroup),
                s.queued.iter().position(|p| *p == c.cgroup),
            ) {
                (true, _, Some(i)) => format!("  QUEUED #{} (frozen)", i + 1),
                (true, _, None) if s.thrashing.contains(&c.cgroup) => "  THRASHING (frozen)".to_string(),
                (true, _, None) => "  FROZEN".to_string(),
                (false, Some(i), _) => format!("  PARKED #{}", i + 1),
                (false, None, _) => String::new(),
            },
        );
    }
    if s.oom_score_adj_processes > 0 {
        let _ =
            writeln!(out, "oom_score_adj set on {} process(es) of tiers with oom_score_adj", s.oom_score_adj_processes);
    }
    if s.loop_restarts > 0 {
        let _ = writeln!(
            out,
            "the loop restarted {} time(s) after errors (every knob put back each time): see loop_restarted in the event log",
            s.loop_restarts
        );
    }
    if !s.leftovers_removed.is_empty() || s.leftovers_waiting > 0 {
        let by: Vec<String> = s.leftovers_removed.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let removed = if by.is_empty() { "none".to_owned() } else { by.join(", ") };
        let _ = writeln!(
            out,
            "leftovers of memqos run removed since start: {removed}; {} waiting out policy.remove_leftovers_after_ms",
            s.leftovers_waiting
        );
    }
    if !s.oom_kills_by_tier.is_empty() {
        let by: Vec<String> = s.oom_kills_by_tier.iter().map(|(t, n)| format!("{t} {n}")).collect();
        let _ = writeln!(out, "\nOOM kills since start: {}", by.join(", "));
        for k in &s.recent_oom_kills {
            let _ = writeln!(out, "  {}", k.describe());
        }
    }
    let _ = writeln!(out, "\nlast decisions{}:", if s.dry_run { " (dry run: not written)" } else { "" });
    for d in &s.recent_decisions {
        let _ =
            writeln!(out, "  {:>8.1} s  {}/{} = {}  ({})", d.at_ms as f64 / 1000.0, d.cgroup, d.file, d.value, d.why);
    }
    // Cgroup names are chosen by tenants: no terminal escapes reach the reader's terminal.
    memqos_cgroupfs::name::terminal_safe(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_cgroupfs::MemoryEvents;
    use memqos_policy::Reason;

    fn snapshot() -> Snapshot {
        let knobs = Knobs {
            high: Limit::Bytes(300 << 20),
            max: Limit::Max,
            low: Limit::Bytes(0),
            min: Limit::Bytes(0),
            frozen: false,
        };
        let d = DecisionRecord {
            cgroup: "low1".into(),
            file: "memory.high".into(),
            value: "314572800".into(),
            reason: Some(Reason::Restore),
            why: "restore".into(),
            at_ms: 2500,
        };
        Snapshot {
            pid: 42,
            config: "/etc/memqos/memqos.toml".into(),
            cgroup_root: "/sys/fs/cgroup/qos".into(),
            dry_run: true,
            parent_usage_bytes: 400 << 20,
            parent_max: Limit::Bytes(512 << 20),
            cgroups: vec![
                CgroupStatus {
                    cgroup: "high".into(),
                    cgroup_id: 7,
                    tier: "critical".into(),
                    usage_bytes: 200 << 20,
                    knobs: Knobs { high: Limit::Max, low: Limit::Bytes(256 << 20), ..knobs },
                    original: Knobs { high: Limit::Max, ..knobs },
                    psi_some_avg10: 1.5,
                    events: MemoryEvents::default(),
                    last_decisions: vec![],
                },
                CgroupStatus {
                    cgroup: "low1".into(),
                    cgroup_id: 8,
                    tier: "batch".into(),
                    usage_bytes: 200 << 20,
                    knobs,
                    original: Knobs { high: Limit::Bytes(1 << 30), ..knobs },
                    psi_some_avg10: 0.0,
                    events: MemoryEvents::default(),
                    last_decisions: vec![d.clone()],
                },
            ],
            throttled: vec!["low1".into()],
            frozen: vec![],
            parked: vec![],
            queued: vec![],
            thrashing: vec![],
            last_pressure_ms: Some(2000),
            now_ms: 3000,
            recent_decisions: vec![d],
            oom_score_adj_processes: 0,
            oom_kills_by_tier: Default::default(),
            recent_oom_kills: Vec::new(),
            loop_restarts: 0,
            leftovers_removed: Default::default(),
            leftovers_waiting: 0,
        }
    }

    #[test]
    fn a_queued_cgroup_is_marked_with_its_place_and_another_frozen_one_as_frozen() {
        let mut s = snapshot();
        let low1 = s.cgroups[1].clone();
        s.cgroups.push(CgroupStatus { cgroup: "low2".into(), cgroup_id: 9, ..low1.clone() });
        s.cgroups[1].knobs.frozen = true;
        s.cgroups[2].knobs.frozen = true;
        s.queued = vec!["low2".into()];
        let text = render(&s, true);
        let row =
            |name: &str| text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}"));
        assert!(row("low2").ends_with("QUEUED #1 (frozen)"), "{text}");
        assert!(row("low1").ends_with("FROZEN"), "{text}");
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.queued, ["low2"]);
    }

    #[test]
    fn a_cgroup_frozen_for_thrashing_says_so() {
        let mut s = snapshot();
        s.cgroups[1].knobs.frozen = true;
        s.thrashing = vec!["low1".into()];
        let text = render(&s, true);
        let row = text.lines().find(|l| l.starts_with("low1 ")).unwrap_or_else(|| panic!("{text}"));
        assert!(row.ends_with("THRASHING (frozen)"), "{text}");
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.thrashing, ["low1"]);
    }

    #[test]
    fn long_cgroup_names_keep_the_columns_aligned() {
        let mut s = snapshot();
        s.cgroups[0].cgroup = "system.slice/systemd-journald.service".into();
        let text = render(&s, true);
        let table: Vec<&str> = text.lines().skip(2).take(3).collect();
        let tier_at: Vec<usize> = table
            .iter()
            .zip(["TIER", "critical", "batch"])
            .map(|(line, word)| line.find(&format!(" {word} ")).unwrap_or_else(|| panic!("{word} in {line:?}")))
            .collect();
        assert!(tier_at.iter().all(|&at| at == tier_at[0]), "TIER column moves: {table:#?}");
        let end = |l: &str| l.len();
        assert!(table.iter().all(|l| end(l) == end(table[0])), "rows of different widths: {table:#?}");
    }

    #[test]
    fn renders_true_values_and_round_trips() {
        let s = snapshot();
        let text = render(&s, true);
        let expected = "\
memqos daemon pid 42 (running, DRY RUN: writes nothing), config /etc/memqos/memqos.toml
cgroup root /sys/fs/cgroup/qos: usage 400M / max 512M
CGROUP                       TIER          USAGE     HIGH (ORIGINAL)  LOW/MIN (ORIGINAL)   PSI10
high                         critical       200M      max      (max)     256M       (0M)    1.50
low1                         batch          200M     300M    (1024M)       0M       (0M)    0.00

last decisions (dry run: not written):
       2.5 s  low1/memory.high = 314572800  (restore)
";
        assert_eq!(text, expected, "got:\n{text}");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), s);
    }
}
