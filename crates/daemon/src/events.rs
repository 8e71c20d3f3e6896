//! The daemon's event log: one typed schema ([`Event`]) written as JSON lines to stdout and
//! to `<state_dir>/events.jsonl`, and read back by the same types (status, experiments,
//! benches, tests). The file is opened once and rotated to `events.jsonl.1` when it reaches
//! its size bound, so a long-running daemon never fills its disk.

use memqos_policy::Reason;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const EVENTS_FILE: &str = "events.jsonl";
pub const ROTATED_FILE: &str = "events.jsonl.1";
/// The log's size bound before rotation; at most twice this is kept on disk.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 20;

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
    BpfSource { hooks: serde_json::Value },
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
    BpfSummary { bpf: serde_json::Value },
    /// SIGHUP: the config was re-read and now runs. `moved`: cgroups whose tier changed (their
    /// knobs were put back, `restored` writes); `tiers`: the new tier names in order.
    Reloaded { config: PathBuf, tiers: Vec<String>, moved: Vec<crate::reload::TierMove>, restored: usize },
    /// SIGHUP: the config was rejected; the old one keeps running.
    ReloadRejected { config: PathBuf, error: String },
    /// The kernel OOM-killed a process under the managed root (`oom_report`).
    OomKill(crate::oom_report::OomKill),
    /// A protected cgroup's memory.low/min is capped by an ancestor without protection
    /// (`protection_check`): reclaim from outside that ancestor ignores it.
    ProtectionVoid(crate::protection_check::Finding),
    /// A `learn_peak` cgroup ended (emptied or removed): its lifetime peak was recorded
    /// under its workload key, which now has `lifetimes` recorded (at most 5).
    PeakRecorded { cgroup: String, workload: String, peak_bytes: u64, lifetimes: usize },
    /// A `learn_peak` cgroup without a declaration got its expected peak from its workload's
    /// history (once per cgroup): `expected_bytes` is the learned peak plus 10%.
    PeakLearned { cgroup: String, learned: memqos_policy::LearnedPeak, expected_bytes: u64 },
    /// The daemon stopped and restored what it wrote.
    Stopped { restored: usize, vanished: usize, failed: Vec<String>, error: Option<String> },
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

/// The log of one state directory, opened once.
pub struct EventLog {
    dir: PathBuf,
    file: Option<File>,
    size: u64,
    max_bytes: u64,
    echo: bool,
}

impl EventLog {
    /// `echo`: also print each line on stdout (the daemon does; tests need not).
    pub fn open(state_dir: &Path, max_bytes: u64, echo: bool) -> EventLog {
        let mut log = EventLog { dir: state_dir.to_owned(), file: None, size: 0, max_bytes, echo };
        log.reopen();
        log
    }

    fn reopen(&mut self) {
        self.file = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(EVENTS_FILE)).ok();
        self.size = self.file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
    }

    pub fn emit(&mut self, event: Event) {
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let Ok(line) = serde_json::to_string(&LogLine { event, ts }) else {
            return;
        };
        if self.echo {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        if self.size + line.len() as u64 + 1 > self.max_bytes && self.size > 0 {
            let _ = std::fs::rename(self.dir.join(EVENTS_FILE), self.dir.join(ROTATED_FILE));
            self.reopen();
        }
        if let Some(f) = &mut self.file {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            if f.write_all(&bytes).is_ok() {
                self.size += bytes.len() as u64;
            } else {
                // A full disk: cut back the part that got out, so the next line that fits
                // is not glued to half of this one.
                let _ = f.set_len(self.size);
            }
        }
    }
}

/// Parses a log's text; lines that are not events of this schema (a torn last line, another
/// version's event) are skipped.
pub fn parse(text: &str) -> Vec<LogLine> {
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The whole log of a state directory, rotated part first.
pub fn read(state_dir: &Path) -> Vec<LogLine> {
    let mut text = std::fs::read_to_string(state_dir.join(ROTATED_FILE)).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(state_dir.join(EVENTS_FILE)).unwrap_or_default());
    parse(&text)
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

    #[test]
    fn round_trips_and_rotates_at_its_bound() {
        let dir = std::env::temp_dir().join(format!("memqos-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = EventLog::open(&dir, 600, false);
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
        for _ in 0..5 {
            log.emit(Event::Write(w.clone()));
        }
        log.emit(Event::Degraded { message: "x".into() });
        let size = |f: &str| std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(
            size(EVENTS_FILE) <= 600 && size(ROTATED_FILE) <= 600,
            "bounded: {} {}",
            size(EVENTS_FILE),
            size(ROTATED_FILE)
        );
        assert!(size(ROTATED_FILE) > 0, "rotated");
        let all = read(&dir);
        assert_eq!(all.last().unwrap().event, Event::Degraded { message: "x".into() });
        let ws: Vec<_> = writes(&all).collect();
        assert!(!ws.is_empty());
        assert_eq!(ws[0].1, &w);
        // The JSON keeps the field names older readers look up.
        let text = std::fs::read_to_string(dir.join(ROTATED_FILE)).unwrap();
        assert!(text.contains(r#""event":"write","cgroup":"low/a""#), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
