//! `memqos explain CGROUP`: why a cgroup's knobs are what they are now. Built by the
//! daemon's control thread ([`crate::control`]) from the view the loop publishes (the last
//! status snapshot, each cgroup's recent decisions, the config running) and rendered as
//! text or JSON by the client.

use crate::oom_report::OomKill;
use crate::status::{CgroupStatus, DecisionRecord, Snapshot};
use memqos_cgroupfs::{name, MemoryEvents};
use memqos_policy::size::human;
use memqos_policy::{Config, ForeignKnobs, Knob, Knobs, Limit, Protect, Reason, StallAction};
use memqos_schema::KnobFile;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Decisions kept per cgroup for explain.
pub const HISTORY: usize = 10;

/// What the loop publishes for the control thread.
pub struct View {
    pub cfg: Config,
    pub config_path: PathBuf,
    pub snapshot: Option<Snapshot>,
    /// Each managed cgroup's recent decisions, newest last.
    pub history: HashMap<String, VecDeque<DecisionRecord>>,
    pub oom_kills: Vec<OomKill>,
}

impl View {
    pub fn new(cfg: Config, config_path: PathBuf) -> View {
        View { cfg, config_path, snapshot: None, history: HashMap::new(), oom_kills: Vec::new() }
    }

    pub fn record(&mut self, d: DecisionRecord) {
        let h = self.history.entry(d.cgroup.clone()).or_default();
        h.push_back(d);
        if h.len() > HISTORY {
            h.pop_front();
        }
    }

    /// Forgets cgroups that are no longer managed (bounded memory with churn).
    pub fn retain(&mut self, managed: impl Fn(&str) -> bool) {
        self.history.retain(|c, _| managed(c));
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Relative to cgroup_root.
    pub cgroup: String,
    pub path: String,
    pub managed: bool,
    /// For a cgroup memqos does not manage: why.
    pub unmanaged_because: Option<String>,
    pub tier: Option<TierInfo>,
    pub usage_bytes: Option<u64>,
    pub knobs: Option<Knobs>,
    /// What memqos puts back when it stops or the cgroup leaves its tier.
    pub original: Option<Knobs>,
    pub psi_some_avg10: Option<f64>,
    pub events: Option<MemoryEvents>,
    /// Each knob memqos holds away from its original, as a sentence.
    pub state: Vec<String>,
    /// Its last decisions, newest last, with their structured reasons.
    pub decisions: Vec<DecisionRecord>,
    /// What would release each of them.
    pub release: Vec<String>,
    pub oom_kills: Vec<OomKill>,
    pub daemon: DaemonInfo,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierInfo {
    pub name: String,
    /// 0 = highest priority.
    pub priority: usize,
    /// The `match` pattern that placed it there.
    pub rule: Option<String>,
    /// The tier's `xattr` (it also needed one of these set).
    pub xattr: Vec<String>,
    pub protect: Protect,
    pub throttle: bool,
    pub freeze: bool,
    /// Held cgroups of the tier take turns (`queue_held`).
    #[serde(default)]
    pub queue_held: bool,
    /// Frozen while it thrashes beside a running protected cgroup (`freeze_thrashing`).
    #[serde(default)]
    pub freeze_thrashing: bool,
    pub kill: bool,
    pub stall_after_ms: u64,
    pub stall_action: StallAction,
    pub oom_score_adj: Option<i32>,
    pub cpu_weight: Option<u32>,
    /// The tier's `swap_max` (None: memory.swap.max left as found).
    #[serde(default)]
    pub swap_max: Option<memqos_policy::Limit>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub pid: u32,
    pub config: String,
    pub cgroup_root: String,
    pub dry_run: bool,
    /// Daemon time (ms since start) of the snapshot and of the last pressure.
    pub now_ms: u64,
    pub last_pressure_ms: Option<u64>,
}

/// Turns what the user typed into a path relative to cgroup_root: relative paths are taken
/// as relative to it, absolute ones must lie below it.
///
/// Resolved by name only, before any filesystem access: `..`, `.` and empty components are
/// refused in absolute paths too (`/sys/fs/cgroup/qos/../../etc` lies "below" the root by
/// prefix), so nothing outside the root is ever looked at on the user's behalf.
pub fn relative_to_root(root: &Path, arg: &str) -> Result<String, String> {
    let trimmed = arg.trim();
    if trimmed.is_empty() {
        return Err("no cgroup given".into());
    }
    let rel = if trimmed.starts_with('/') {
        let root_text = root.to_string_lossy();
        let root_text = root_text.trim_end_matches('/');
        match trimmed.strip_prefix(root_text) {
            Some("") => "",
            Some(rest) if rest.starts_with('/') => rest.trim_matches('/'),
            _ => return Err(format!("{} is not below the managed root {}", name::display(trimmed), root.display())),
        }
    } else {
        trimmed.trim_end_matches('/')
    };
    crate::beneath::check_relative(rel).map_err(|e| name::display(&e))?;
    Ok(rel.to_owned())
}

/// [`explain`] for the control thread: what the loop published is read under its lock, and
/// the lock is released before any filesystem access (a cgroup not managed is looked at on
/// disk), so a slow cgroupfs never delays the loop's next update.
pub fn explain_with(view: &std::sync::Mutex<View>, arg: &str) -> Result<Explanation, String> {
    let guard = view.lock().unwrap_or_else(|e| e.into_inner());
    let rel = relative_to_root(&guard.cfg.cgroup_root, arg)?;
    let managed = guard.snapshot.as_ref().is_some_and(|s| s.cgroups.iter().any(|c| c.cgroup == rel));
    if managed || guard.snapshot.is_none() {
        return explain(&guard, arg); // from memory only
    }
    let unmanaged = View {
        cfg: guard.cfg.clone(),
        config_path: guard.config_path.clone(),
        snapshot: guard.snapshot.as_ref().map(|s| Snapshot { cgroups: Vec::new(), ..s.clone() }),
        history: HashMap::new(),
        oom_kills: guard.oom_kills.iter().filter(|k| k.cgroup == rel).cloned().collect(),
    };
    drop(guard);
    explain(&unmanaged, arg)
}

fn lim(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => human(b),
        Limit::Max => "max".into(),
    }
}

/// The explanation of `arg` from `view`; Err for a cgroup that does not exist under the
/// root (or an argument outside it). Reads the directory only for cgroups not managed.
pub fn explain(view: &View, arg: &str) -> Result<Explanation, String> {
    let cfg = &view.cfg;
    let root = &cfg.cgroup_root;
    let rel = relative_to_root(root, arg)?;
    let path = name::fs_path(root, &rel);
    let snap = view.snapshot.as_ref().ok_or("the daemon has not finished its first tick yet; try again")?;
    let daemon = DaemonInfo {
        pid: snap.pid,
        config: view.config_path.display().to_string(),
        cgroup_root: root.display().to_string(),
        dry_run: snap.dry_run,
        now_ms: snap.now_ms,
        last_pressure_ms: snap.last_pressure_ms,
    };
    let oom_kills: Vec<OomKill> = view.oom_kills.iter().filter(|k| k.cgroup == rel).cloned().collect();
    let Some(c) = snap.cgroups.iter().find(|c| c.cgroup == rel) else {
        if rel.is_empty() {
            return Err(format!("{} is the managed root itself; explain one of the cgroups below it", root.display()));
        }
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            return Err(format!("no cgroup {rel} under {}", root.display()));
        }
        let has_children = std::fs::read_dir(&path)
            .map(|d| d.flatten().any(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)))
            .unwrap_or(false);
        let because = if has_children {
            "it has child cgroups: memqos manages leaf cgroups only (its children are explained one by one)".to_string()
        } else if crate::reload::classify(cfg, root, &rel).is_none() {
            "no tier's `match` (and `xattr`) takes it: memqos never writes its knobs".to_string()
        } else {
            "it appeared after the daemon's last snapshot (about a second): try again".to_string()
        };
        return Ok(Explanation {
            cgroup: rel,
            path: path.display().to_string(),
            managed: false,
            unmanaged_because: Some(because),
            tier: None,
            usage_bytes: None,
            knobs: None,
            original: None,
            psi_some_avg10: None,
            events: None,
            state: Vec::new(),
            decisions: Vec::new(),
            release: Vec::new(),
            oom_kills,
            daemon,
        });
    };
    let tier = tier_info(cfg, c);
    let decisions: Vec<DecisionRecord> =
        view.history.get(&rel).map(|h| h.iter().cloned().collect()).unwrap_or_else(|| c.last_decisions.clone());
    // The snapshot's knobs were read before that tick's writes: apply those on top.
    let mut c = c.clone();
    for d in decisions.iter().filter(|d| d.at_ms >= snap.now_ms) {
        if let Some(knob) = d.knob() {
            c.knobs.set(knob, &d.value);
        }
    }
    let c = &c;
    let (state, release) = reasons(cfg, c, tier.as_ref(), &decisions, snap);
    Ok(Explanation {
        cgroup: rel,
        path: path.display().to_string(),
        managed: true,
        unmanaged_because: None,
        tier,
        usage_bytes: Some(c.usage_bytes),
        knobs: Some(c.knobs),
        original: Some(c.original),
        psi_some_avg10: Some(c.psi_some_avg10),
        events: Some(c.events),
        state,
        decisions,
        release,
        oom_kills,
        daemon,
    })
}

/// The tier `c` is in, as `explain` shows it (None: the snapshot names no tier of `cfg`).
fn tier_info(cfg: &Config, c: &CgroupStatus) -> Option<TierInfo> {
    cfg.tiers.iter().find(|(_, t)| t.name == c.tier).map(|(i, t)| TierInfo {
        name: t.name.clone(),
        priority: i.0,
        rule: cfg.tiers.matching_pattern(i, &c.cgroup).map(str::to_owned),
        xattr: t.xattrs.clone(),
        protect: t.protect,
        throttle: t.throttle,
        freeze: t.freeze,
        queue_held: t.queue_held,
        freeze_thrashing: t.freeze_thrashing,
        kill: t.kill,
        stall_after_ms: t.stall.after_ms,
        stall_action: t.stall.action,
        oom_score_adj: t.oom_score_adj,
        cpu_weight: t.cpu_weight,
        swap_max: t.swap_max.target(),
    })
}

/// What memqos holds away from the original, and what would end it.
fn reasons(
    cfg: &Config,
    c: &CgroupStatus,
    tier: Option<&TierInfo>,
    decisions: &[DecisionRecord],
    snap: &Snapshot,
) -> (Vec<String>, Vec<String>) {
    let p = &cfg.policy;
    let e_cgroup = c.cgroup.as_str();
    let (k, o) = (&c.knobs, &c.original);
    let mut state = Vec::new();
    let mut release = Vec::new();
    let last = |knob: KnobFile| decisions.iter().rev().find(|d| d.knob() == Some(knob));
    let since = |d: &DecisionRecord| format!("{:.1} s ago", snap.now_ms.saturating_sub(d.at_ms) as f64 / 1000.0);
    if k.frozen && !o.frozen {
        let by = last(KnobFile::CgroupFreeze).map(|d| (d.why.clone(), since(d)));
        state.push(match by {
            Some((why, ago)) => format!("frozen by memqos {ago}: {why}"),
            None => "frozen (cgroup.freeze = 1), originally not".into(),
        });
        let after = tier.map_or(0, |t| t.stall_after_ms);
        release.push(match last(KnobFile::CgroupFreeze).and_then(|d| d.reason.as_ref()) {
            Some(Reason::Queued { behind, .. }) => {
                let line = snap.queued.iter().position(|c| *c == e_cgroup).map(|i| format!(" (now {} in line)", i + 1));
                format!(
                    "queued behind {behind}{}: its tier sets queue_held, so cgroups held at their memory ceilings take turns; thawed when {behind} is no longer held or has ended and this one is next, or after its tier's stall.after_ms = {after} ms frozen",
                    line.unwrap_or_default()
                )
            }
            Some(Reason::Thrashing { beside, .. }) => format!(
                "frozen for thrashing (its tier sets freeze_thrashing): thawed when no protected cgroup above it runs any more ({beside} ends), or after its tier's stall.after_ms = {after} ms frozen; then it runs at least {} s and is frozen again only if it still thrashes",
                memqos_policy::THRASH_REST_MS / 1000
            ),
            Some(Reason::Parked { by, .. }) => format!(
                "parked by freezing (its tier sets freeze): thawed when admitted, when {by} is empty or gone, or after its tier's stall.after_ms = {after} ms frozen"
            ),
            reason => {
                let cause = match reason {
                    Some(Reason::Stalled { by, .. }) => by.as_str(),
                    _ => "the protected cgroup that stalled",
                };
                format!(
                    "thawed as soon as {cause} no longer stalls or goes away, before any memory.high is released; stopping the daemon thaws it too"
                )
            }
        });
    }
    if k.high < o.high {
        let why = last(KnobFile::MemoryHigh).map(|d| format!(" {}: {}", since(d), d.why)).unwrap_or_default();
        state.push(format!(
            "throttled: memory.high {} (originally {}), lowered by memqos{why}",
            lim(k.high),
            lim(o.high)
        ));
        let calm = snap.last_pressure_ms.map(|t| snap.now_ms.saturating_sub(t));
        let wait = match calm {
            Some(calm) if calm < p.hold_ms => format!(
                "; last pressure {:.1} s ago, so the first step is due in about {:.1} s if none comes back",
                calm as f64 / 1000.0,
                (p.hold_ms - calm) as f64 / 1000.0
            ),
            Some(_) | None => "; that time has passed, so it goes up at the next allowed write".into(),
        };
        match last(KnobFile::MemoryHigh).and_then(|d| d.reason.as_ref()) {
            Some(Reason::Reservation { by, learned, source, .. }) => {
                let source = expectation_words(learned.as_ref(), *source);
                release.push(format!(
                    "room is reserved for {by}'s {source}: this cap rises as that room frees (a sibling leaves) and is released once {by} is empty or gone"
                ));
            }
            Some(Reason::Parked { by, expected_bytes, source, place, admitted, .. }) => {
                let line = snap.parked.iter().position(|c| *c == e_cgroup).map_or(*place, |i| i + 1);
                release.push(format!(
                    "parked: room is kept for {by}'s expected peak {} ({}) and {admitted} older lower cgroup(s) run meanwhile; this one is {line} in line and is admitted (its cap raised to a share of the room) when the room left fits it (policy.park_room = {}), one per tick, oldest first; released once {by} is empty or gone",
                    human(*expected_bytes),
                    source.label(),
                    human(p.park_room)
                ));
            }
            _ => {}
        }
        release.push(format!(
            "memory.high goes back up one step (+{:.0} %) at most every {} ms once no protected cgroup has been under pressure and the parent has had headroom for hold_ms = {} ms{wait}",
            p.release_ratio * 100.0,
            p.min_write_interval_ms,
            p.hold_ms
        ));
        if let Some(t) = tier {
            let action = match t.stall_action {
                StallAction::Relieve => "raises it one step regardless (stall bound)",
                StallAction::Kill => "kills the cgroup (the tier opted in)",
            };
            release.push(format!(
                "if it makes no progress at that limit (memory.events high rising, usage pinned, its PSI full avg10 >= {:.0} %) for {} ms, memqos {action}",
                p.stall_psi_full_avg10, t.stall_after_ms
            ));
        }
    }
    for (now, orig, file) in [(k.low, o.low, KnobFile::MemoryLow), (k.min, o.min, KnobFile::MemoryMin)] {
        if now == orig {
            continue;
        }
        let why = last(file).map(|d| format!(" ({})", d.why)).unwrap_or_default();
        state.push(format!("protected: {file} {} (originally {}){why}", lim(now), lim(orig)));
        // The lower cgroups' caps name the expectation they keep room for.
        let expected = snap.recent_decisions.iter().rev().find_map(|d| match &d.reason {
            Some(Reason::Reservation { by, declared_bytes, learned, source, .. }) if *by == e_cgroup => Some(format!(
                "{} (sum of the protected cgroups' expectations {})",
                expectation_words(learned.as_ref(), *source),
                human(*declared_bytes)
            )),
            Some(Reason::Parked { by, expected_bytes, source, .. }) if *by == e_cgroup => {
                Some(format!("expected peak {}, {}", human(*expected_bytes), source.label()))
            }
            _ => None,
        });
        if let Some(expected) = expected {
            state.push(format!("room reserved for its {expected}"));
        }
        release.push(format!(
            "{file} follows its working set: the peak usage over ws_window_ms = {} ms times ws_margin {}, rounded to {}; it shrinks once a whole window passes lower, returns to {} when the cgroup is empty, leaves its tier or the daemon stops",
            p.ws_window_ms,
            p.ws_margin,
            human(p.ws_granularity),
            lim(orig)
        ));
    }
    if p.foreign_knobs == ForeignKnobs::Respect {
        if o.is_foreign(Knob::High) {
            state.push(format!(
                "memory.high {} was set by someone else (a unit's MemoryHigh=, a tenant): memqos never raises it above that value and cuts below it only when throttling (policy.foreign_knobs = \"respect\")",
                lim(o.high)
            ));
        }
        if o.is_foreign(Knob::Low) && tier.is_some_and(|t| t.protect != Protect::None) {
            state.push(format!(
                "memory.low {} / memory.min {} were set by someone else (kubelet's MemoryQoS, a unit's MemoryLow=): memqos leaves them alone",
                lim(o.low),
                lim(o.min)
            ));
        }
    }
    if state.is_empty() {
        state.push("memqos holds none of its knobs away from the originals".into());
        if let Some(t) = tier {
            let mut would = Vec::new();
            if t.throttle {
                would.push(
                    "lower memory.high when a higher protected tier is under pressure or the parent nears its limit",
                );
            }
            if t.protect != Protect::None {
                would.push("set its protection to its working set once it runs");
            }
            if t.freeze {
                would.push("freeze it if a protected cgroup keeps stalling despite throttling");
            }
            if t.queue_held {
                would.push("freeze it while it is held at its ceiling and an older held cgroup grows first");
            }
            if t.freeze_thrashing {
                would.push("freeze it while it thrashes (memory.pressure full avg10 at or above stall_psi_full_avg10, or refaulting thrash_refault_rate per second) beside a running protected cgroup");
            }
            if !would.is_empty() {
                release.push(format!("its tier lets memqos {}", would.join("; ")));
            }
        }
    }
    (state, release)
}

/// Which expectation a reservation keeps room for, in words.
fn expectation_words(learned: Option<&memqos_policy::LearnedPeak>, source: memqos_policy::PeakSource) -> String {
    match learned {
        Some(l) if l.tier => format!(
            "expected peak, learned from {} recent lifetime(s) of its tier {:?} (largest peak {} + 10%; learn_peak, {})",
            l.lifetimes,
            l.workload,
            human(l.peak_bytes),
            memqos_schema::state::TIER_PEAKS_FILE
        ),
        Some(l) => format!(
            "expected peak, learned from {} recorded lifetime(s) of its workload {:?} (largest peak {} + 10%; learn_peak, user.memqos.workload)",
            l.lifetimes,
            l.workload,
            human(l.peak_bytes)
        ),
        None if source == memqos_policy::PeakSource::TierDefault => "expected peak, the tier's default_peak".into(),
        None if source == memqos_policy::PeakSource::FirstSight => {
            "expected peak at first sight: nothing known, and it is still growing (its peak so far times the tier's first_sight_growth)".into()
        }
        None => "declared expected peak (expected_peak, or its user.memqos.expected_peak xattr)".into(),
    }
}

/// The explanation as text.
pub fn render(e: &Explanation) -> String {
    let mut out = String::new();
    let dry = if e.daemon.dry_run { " (DRY RUN: the daemon writes nothing)" } else { "" };
    let _ = writeln!(out, "{} ({}){dry}", e.cgroup, e.path);
    if !e.managed {
        let _ = writeln!(out, "  not managed: {}", e.unmanaged_because.as_deref().unwrap_or("unknown"));
    }
    if let Some(t) = &e.tier {
        let rule = t.rule.as_deref().map(|r| format!(" by match \"{r}\"")).unwrap_or_default();
        let xattr = if t.xattr.is_empty() { String::new() } else { format!(" and xattr {}", t.xattr.join("|")) };
        let mut flags = vec![format!(
            "protect={}",
            serde_json::to_value(t.protect).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
        )];
        for (on, name) in [
            (t.throttle, "throttle"),
            (t.freeze, "freeze"),
            (t.queue_held, "queue_held"),
            (t.freeze_thrashing, "freeze_thrashing"),
            (t.kill, "kill"),
        ] {
            if on {
                flags.push(name.into());
            }
        }
        if let Some(a) = t.oom_score_adj {
            flags.push(format!("oom_score_adj={a}"));
        }
        if let Some(w) = t.cpu_weight {
            flags.push(format!("cpu_weight={w}"));
        }
        if let Some(s) = t.swap_max {
            flags.push(format!("swap_max={s}"));
        }
        let _ = writeln!(out, "  tier: {} (priority {}){rule}{xattr}; {}", t.name, t.priority, flags.join(", "));
    }
    if let (Some(k), Some(o), Some(u)) = (&e.knobs, &e.original, e.usage_bytes) {
        let _ = writeln!(
            out,
            "  usage {}; memory.high {} (orig {}), memory.low {} (orig {}), memory.min {} (orig {}), memory.max {}{}",
            human(u),
            lim(k.high),
            lim(o.high),
            lim(k.low),
            lim(o.low),
            lim(k.min),
            lim(o.min),
            lim(k.max),
            if k.frozen { ", FROZEN" } else { "" }
        );
    }
    if let (Some(psi), Some(ev)) = (e.psi_some_avg10, &e.events) {
        let _ = writeln!(
            out,
            "  pressure some avg10 {psi:.2} %; memory.events high {} max {} oom_kill {}",
            ev.high, ev.max, ev.oom_kill
        );
    }
    if !e.state.is_empty() {
        let _ = writeln!(out, "why:");
        for s in &e.state {
            let _ = writeln!(out, "  - {s}");
        }
    }
    if !e.decisions.is_empty() {
        let _ = writeln!(out, "last decisions (daemon time):");
        for d in &e.decisions {
            let _ = writeln!(out, "  {:>8.1} s  {} = {}  ({})", d.at_ms as f64 / 1000.0, d.file, d.value, d.why);
        }
    }
    if !e.release.is_empty() {
        let _ = writeln!(out, "what releases it:");
        for s in &e.release {
            let _ = writeln!(out, "  - {s}");
        }
    }
    for k in &e.oom_kills {
        let _ = writeln!(out, "  {}", k.describe());
    }
    // Cgroup names are chosen by tenants: no terminal escapes reach the reader's terminal.
    memqos_cgroupfs::name::terminal_safe(out)
}

#[cfg(test)]
mod tests {
    use super::{expectation_words, reasons, tier_info};
    use memqos_policy::{Config, LearnedPeak, PeakSource, Reason};
    use memqos_schema::status::{CgroupStatus, DecisionRecord, Snapshot};

    /// Why a frozen `tool.2` is frozen and what thaws it, for the last freeze's `reason`.
    fn frozen_because(reason: Reason) -> (Vec<String>, Vec<String>) {
        let cfg = Config::from_str(
            r#"
cgroup_root = "/sys/fs/cgroup/agents"
[[tier]]
name = "runtime"
match = ["runtime*"]
protect = "low"
[[tier]]
name = "tool"
match = ["tool*"]
throttle = true
freeze = true
queue_held = true
freeze_thrashing = true
stall = { after_ms = 20000 }
"#,
            "memqos.toml",
        )
        .unwrap();
        let knobs = r#"{"high": "max", "max": "max", "low": 0, "min": 0, "frozen": false}"#;
        let frozen = knobs.replace("false", "true");
        let snap: Snapshot = serde_json::from_str(&format!(
            r#"{{"pid": 1, "config": "memqos.toml", "cgroup_root": "/sys/fs/cgroup/agents",
                "parent_usage_bytes": 0, "parent_max": "max", "throttled": [], "frozen": [],
                "queued": ["tool.2"], "last_pressure_ms": null, "now_ms": 5000, "recent_decisions": [],
                "cgroups": [{{"cgroup": "tool.2", "cgroup_id": 9, "tier": "tool", "usage_bytes": 1,
                  "knobs": {frozen}, "original": {knobs}, "psi_some_avg10": 0.0,
                  "events": {{"low": 0, "high": 0, "max": 0, "oom": 0, "oom_kill": 0, "oom_group_kill": 0}}}}]}}"#
        ))
        .unwrap();
        let c: &CgroupStatus = &snap.cgroups[0];
        let tier = tier_info(&cfg, c);
        let d = DecisionRecord {
            cgroup: "tool.2".into(),
            file: "cgroup.freeze".into(),
            value: "1".into(),
            why: reason.to_string(),
            reason: Some(reason),
            at_ms: 2000,
        };
        reasons(&cfg, c, tier.as_ref(), &[d], &snap)
    }

    #[test]
    fn each_freeze_says_why_and_what_thaws_it() {
        let by = || "tool.1".to_string();
        let cases = [
            (Reason::Queued { behind: by(), place: 1 }, "queued behind tool.1 (now 1 in line)"),
            (
                Reason::Thrashing { beside: "runtime".into(), psi_full_avg10: 3.0, refault_bytes_per_s: 9 << 20 },
                "frozen for thrashing",
            ),
            (
                Reason::Parked {
                    by: "runtime".into(),
                    expected_bytes: 1,
                    source: PeakSource::Declared,
                    place: 1,
                    admitted: 1,
                    budget_bytes: 1,
                    free_bytes: 0,
                },
                "parked by freezing",
            ),
            (
                Reason::Stalled { by: "runtime".into(), stalled_for_ms: 10_000 },
                "thawed as soon as runtime no longer stalls",
            ),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (reason, thaw) in cases {
            let why = reason.to_string();
            let (state, release) = frozen_because(reason);
            assert!(
                state.iter().any(|s| s.starts_with("frozen by memqos 3.0 s ago: ") && s.ends_with(&why)),
                "{state:?}"
            );
            assert_eq!(release.len(), 1, "{release:?}");
            assert!(release[0].starts_with(thaw), "{release:?}");
            if !thaw.starts_with("thawed as soon") {
                assert!(release[0].contains("stall.after_ms = 20000 ms"), "the bound is named: {release:?}");
            }
            seen.insert(release[0].clone());
        }
        assert_eq!(seen.len(), 4, "one text per reason");
    }

    #[test]
    fn each_expectation_source_is_named_in_its_own_words() {
        let learned = |tier| LearnedPeak { workload: "w".into(), lifetimes: 2, peak_bytes: 100 << 20, tier };
        let words = [
            expectation_words(None, PeakSource::Declared),
            expectation_words(Some(&learned(false)), PeakSource::Workload),
            expectation_words(Some(&learned(true)), PeakSource::TierRecent),
            expectation_words(None, PeakSource::TierDefault),
            expectation_words(None, PeakSource::FirstSight),
        ];
        for (w, key) in words.iter().zip(["declared", "workload", "its tier", "default_peak", "first_sight_growth"]) {
            assert!(w.contains(key), "{w:?} does not name {key}");
        }
        let distinct: std::collections::BTreeSet<&String> = words.iter().collect();
        assert_eq!(distinct.len(), words.len());
    }
}
