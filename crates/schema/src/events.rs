//! The daemon's event log: one [`LogLine`] per line of `events.jsonl` (and on the daemon's
//! stdout), an [`Event`] tagged by `"event"` plus its Unix time. The daemon writes and rotates
//! the file (`memqos_daemon::events::EventLog`); readers parse it with [`parse`].

use crate::knob::KnobFile;
use crate::oom::OomKill;
use crate::protection::Finding;
use crate::reason::{LearnedPeak, Reason};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One line of the log: an event and its Unix time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    #[serde(flatten)]
    pub event: Event,
    /// Seconds since the Unix epoch.
    pub ts: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The daemon runs: config valid, root checked, lock taken, earlier journal restored.
    Started { pid: u32, cgroup_root: PathBuf, config: PathBuf, dry_run: bool },
    /// A journal left by an earlier run (crash, SIGKILL) was restored at start-up.
    Recovered { restored: usize, vanished: usize, failed: Vec<String> },
    /// The BPF pressure source started: what it attached.
    BpfSource { hooks: BpfHooks },
    /// Something works less well than configured (a source off, a controller missing).
    Degraded { message: String },
    /// One knob write (or, in a dry run, one write that would have been made).
    Write(WriteEvent),
    /// A BPF threshold crossing on a protected cgroup.
    Bpf { cgroup: String, cgroup_id: u64, kind: String, value: u64, ktime_ns: u64, mono_ns: u64 },
    /// Where the periodic samples' statistics come from (`text` or `bpf`), and with
    /// `--stats-backend auto`, why not BPF when it is text.
    StatsBackend { backend: String, why_not_bpf: Option<String> },
    /// A reaction on the fast path that wrote something: the cgroups that signalled, how
    /// many cgroups it read (parent included), and how long reading and deciding took before
    /// its writes (whose own times are in their `write` events).
    Reaction { signalled: Vec<String>, read_cgroups: usize, read_us: u64, decide_us: u64, writes: usize },
    /// The BPF source's counters at stop.
    BpfSummary { bpf: BpfSummary },
    /// SIGHUP: the config was re-read and now runs. `moved`: cgroups whose tier changed (their
    /// knobs were put back, `restored` writes); `tiers`: the new tier names in order.
    Reloaded { config: PathBuf, tiers: Vec<String>, moved: Vec<TierMove>, restored: usize },
    /// SIGHUP: the config was rejected; the old one keeps running.
    ReloadRejected { config: PathBuf, error: String },
    /// The kernel OOM-killed a process under the managed root.
    OomKill(OomKill),
    /// A protected cgroup's memory.low/min is capped by an ancestor without protection:
    /// reclaim from outside that ancestor ignores it.
    ProtectionVoid(Finding),
    /// A `learn_peak` cgroup ended (emptied or removed): its lifetime peak was recorded
    /// under its workload key, which now has `lifetimes` recorded (at most 5).
    PeakRecorded { cgroup: String, workload: String, peak_bytes: u64, lifetimes: usize },
    /// A `learn_peak` cgroup without a declaration got its expected peak from its workload's
    /// history (once per cgroup): `expected_bytes` is the learned peak plus 10%.
    PeakLearned { cgroup: String, learned: LearnedPeak, expected_bytes: u64 },
    /// The daemon stopped and restored what it wrote.
    Stopped { restored: usize, vanished: usize, failed: Vec<String>, error: Option<String> },
    /// The loop stopped on an error while the root was still there: every knob was put
    /// back and the loop starts afresh after `retry_ms`. `restarts` counts this process's
    /// restarts so far, this one included.
    LoopRestarted { error: String, restored: usize, restarts: u64, retry_ms: u64 },
    /// An empty, unlocked cgroup `memqos run` made (`kind`: `call` or `session`) was removed
    /// after `idle_ms` idle (`policy.remove_leftovers_after_ms`); in a dry run, would have been.
    LeftoverRemoved { cgroup: String, cgroup_id: u64, kind: String, idle_ms: u64, dry_run: bool },
}

/// How a write went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// The cgroup or process went away (or its name now belongs to another one).
    Vanished,
    /// Dry run: not written.
    DryRun,
    Error(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteEvent {
    /// Path relative to cgroup_root ("" for a process that left every managed cgroup).
    pub cgroup: String,
    /// The cgroup's id (directory inode); 0 when unknown.
    pub cgroup_id: u64,
    /// For oom_score_adj: the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The file written (a [`KnobFile`] name; [`WriteEvent::knob`] reads it as one).
    pub file: String,
    pub value: String,
    /// The value found before the write (None for cgroup.kill or when unreadable).
    pub previous: Option<String>,
    pub outcome: Outcome,
    /// The engine's structured reason, when the engine decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The reason as a sentence.
    pub why: String,
    #[serde(default)]
    pub dry_run: bool,
    /// CLOCK_MONOTONIC before and after the write, for reaction-delay measurements.
    pub mono_ns: u64,
    pub mono_done_ns: u64,
}

impl WriteEvent {
    /// The knob written; None for a file memqos does not know as a knob.
    pub fn knob(&self) -> Option<KnobFile> {
        KnobFile::from_name(&self.file)
    }

    /// A stall-bound action that took effect: the engine's stall bound (`Reason::StallBound`)
    /// relieved (memory.high raised) or killed (cgroup.kill) a cgroup, and the write went
    /// through.
    pub fn is_stall_action(&self) -> bool {
        matches!(self.reason, Some(Reason::StallBound { .. })) && self.outcome == Outcome::Ok
    }
}

/// The BPF pressure source's programs, as `program (target)`, and the attach errors, as
/// `program: error`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BpfHooks {
    pub attached: Vec<String>,
    pub attach_failed: Vec<String>,
}

/// The BPF pressure source's counters when the daemon stops.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BpfSummary {
    /// Per watched cgroup (path relative to cgroup_root).
    pub counters: BTreeMap<String, BpfCounters>,
    pub stats: BpfStats,
}

/// One watched cgroup's BPF counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BpfCounters {
    /// Events since the cgroup was watched, in `memqos_bpf::pressure::Kind` order: reclaim
    /// entries, returns over memory.high, pages scanned, page faults, major faults.
    pub total: Vec<u64>,
    /// Crossings the per-cgroup rate limit suppressed.
    pub suppressed: u64,
}

/// The BPF source's global counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BpfStats {
    pub emitted: u64,
    pub ring_full: u64,
    pub rate_limited: u64,
}

/// A cgroup whose tier changed with a reload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierMove {
    pub cgroup: String,
    /// Its tier under the old config.
    pub from: Option<String>,
    /// Under the new one (None: no longer managed).
    pub to: Option<String>,
}

/// Parses a log's text; lines that are not events of this schema (a torn last line, another
/// version's event) are skipped.
pub fn parse(text: &str) -> Vec<LogLine> {
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The events of a log's text, without their times.
pub fn parse_events(text: &str) -> Vec<Event> {
    parse(text).into_iter().map(|l| l.event).collect()
}

/// The write events of a log.
pub fn writes(lines: &[LogLine]) -> impl Iterator<Item = (f64, &WriteEvent)> {
    lines.iter().filter_map(|l| match &l.event {
        Event::Write(w) => Some((l.ts, w)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall-bound kill exactly as the daemon logs it (the first test checks that
    /// serializing the event gives this text byte for byte).
    const STALL_KILL_LINE: &str = r#"{"event":"write","cgroup":"s3/tool-low.4711","cgroup_id":9012,"file":"cgroup.kill","value":"1","previous":null,"outcome":"ok","reason":{"kind":"stall_bound","stalled_for_ms":10012,"bound_ms":10000,"usage_bytes":402653184,"high_bytes":402653184,"psi_full_avg10":61.5},"why":"no progress for 10012 ms (bound 10000 ms)","dry_run":false,"mono_ns":5000,"mono_done_ns":5100,"ts":1795599120.5}"#;

    fn stall_kill() -> WriteEvent {
        WriteEvent {
            cgroup: "s3/tool-low.4711".into(),
            cgroup_id: 9012,
            pid: None,
            file: KnobFile::CgroupKill.name().into(),
            value: "1".into(),
            previous: None,
            outcome: Outcome::Ok,
            reason: Some(Reason::StallBound {
                stalled_for_ms: 10012,
                bound_ms: 10000,
                usage_bytes: 384 << 20,
                high_bytes: 384 << 20,
                psi_full_avg10: 61.5,
            }),
            why: "no progress for 10012 ms (bound 10000 ms)".into(),
            dry_run: false,
            mono_ns: 5000,
            mono_done_ns: 5100,
        }
    }

    #[test]
    fn a_stall_bound_kill_is_written_as_this_line() {
        let line = LogLine { event: Event::Write(stall_kill()), ts: 1795599120.5 };
        assert_eq!(serde_json::to_string(&line).unwrap(), STALL_KILL_LINE);
    }

    #[test]
    fn a_stall_bound_kill_line_parses_as_a_stall_action() {
        let lines = parse(STALL_KILL_LINE);
        assert_eq!(lines.len(), 1, "the line is an event of this schema");
        let Event::Write(w) = &lines[0].event else { panic!("not a write: {:?}", lines[0].event) };
        assert_eq!(w, &stall_kill());
        assert_eq!(w.knob(), Some(KnobFile::CgroupKill));
        assert!(w.is_stall_action());
        // The same write for another reason, or one that did not go through, is not one.
        assert!(!WriteEvent { reason: Some(Reason::Restore), ..w.clone() }.is_stall_action());
        assert!(!WriteEvent { outcome: Outcome::Vanished, ..w.clone() }.is_stall_action());
        assert!(!WriteEvent { outcome: Outcome::DryRun, dry_run: true, ..w.clone() }.is_stall_action());
    }

    #[test]
    fn round_trips_and_keeps_the_field_names() {
        let w = WriteEvent {
            cgroup: "low/a".into(),
            cgroup_id: 42,
            pid: None,
            file: "memory.high".into(),
            value: "1048576".into(),
            previous: Some("max".into()),
            outcome: Outcome::Ok,
            reason: Some(Reason::Restore),
            why: "restore".into(),
            dry_run: false,
            mono_ns: 1,
            mono_done_ns: 2,
        };
        let line = serde_json::to_string(&LogLine { event: Event::Write(w.clone()), ts: 3.5 }).unwrap();
        assert!(line.starts_with(r#"{"event":"write","cgroup":"low/a""#), "{line}");
        let text = format!("{line}\n{{\"event\":\"from_a_newer_version\",\"ts\":1}}\n{{\"event\":\"wri");
        let lines = parse(&text);
        assert_eq!(lines.len(), 1, "unknown and torn lines are skipped");
        assert_eq!(writes(&lines).collect::<Vec<_>>(), vec![(3.5, &w)]);
    }
}
