//! What the memqos daemon did to a call because it stalled, read back from its event log
//! (`<state_dir>/events.jsonl`, one JSON object per line), so `memqos run` can tell the agent
//! why its command was slowed down, relieved or killed.
//!
//! Only `write` events for the call's cgroup that are stall actions
//! ([`WriteEvent::is_stall_action`]: reason `stall_bound`, carried out) are used; lines that
//! are not events of `memqos_schema::events` are skipped, so a log from another daemon version
//! costs nothing but the note.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

pub use memqos_schema::call::StallAction;
use memqos_schema::events::{Event, LogLine, WriteEvent};

/// How much of the end of the log is read: a call's own events are recent.
const TAIL_BYTES: u64 = 512 << 10;

/// The stall actions on `cgroup` (relative to the root) in the tail of `events`.
pub fn stall_actions(events: &Path, cgroup: &str) -> Vec<StallAction> {
    let Ok(mut f) = std::fs::File::open(events) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(TAIL_BYTES);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut text = String::new();
    if f.take(TAIL_BYTES).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    // A tail that starts mid-line: its first line is partial.
    let lines = text.lines().skip(usize::from(start > 0));
    lines
        .filter_map(|l| serde_json::from_str::<LogLine>(l).ok())
        .filter_map(|l| match l.event {
            Event::Write(w) if w.cgroup == cgroup && w.is_stall_action() => Some(w),
            _ => None,
        })
        .map(|WriteEvent { file, value, why, .. }| StallAction { file, value, why })
        .collect()
}

/// The stderr lines for them.
pub fn stall_text(actions: &[StallAction]) -> String {
    let mut t = String::new();
    for a in actions {
        let what = if a.is_kill() {
            "killed this call".to_owned()
        } else {
            format!("raised this call's {} to {} so it could go on", a.file, a.value)
        };
        t.push_str(&format!("memqos: the memqos daemon {what}: it was stuck at its memory limit ({}).\n", a.why));
    }
    if actions.iter().any(StallAction::is_kill) {
        t.push_str("memqos: try: run it with less memory (fewer parallel jobs), or with --hint high (MEMQOS_HINT=high) so it is throttled later.\n");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_policy::Reason;
    use memqos_schema::events::Outcome;
    use memqos_schema::KnobFile;

    /// A write event line as the daemon logs it.
    fn line(cgroup: &str, file: KnobFile, value: &str, outcome: Outcome, reason: Reason, why: &str) -> String {
        let w = WriteEvent {
            cgroup: cgroup.into(),
            cgroup_id: 7,
            pid: None,
            file: file.name().into(),
            value: value.into(),
            previous: None,
            dry_run: outcome == Outcome::DryRun,
            outcome,
            reason: Some(reason),
            why: why.into(),
            mono_ns: 1,
            mono_done_ns: 2,
        };
        serde_json::to_string(&LogLine { event: Event::Write(w), ts: 1.0 }).unwrap()
    }

    #[test]
    fn only_this_calls_stall_writes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join(memqos_schema::state::EVENTS_FILE);
        let stall = Reason::StallBound {
            stalled_for_ms: 20_000,
            bound_ms: 20_000,
            usage_bytes: 100 << 20,
            high_bytes: 100 << 20,
            psi_full_avg10: 80.0,
        };
        let guard = Reason::HeadroomGuard {
            parent_usage_bytes: 1,
            limit_bytes: 2,
            headroom_bytes: 1,
            guard_bytes: 2,
            swapless: false,
        };
        let (high, kill) = (KnobFile::MemoryHigh, KnobFile::CgroupKill);
        let lines = [
            line("s/tool.7", high, "100", Outcome::Ok, guard, "guard"),
            line("s/tool.8", kill, "1", Outcome::Ok, stall.clone(), "other call"),
            "not json".into(),
            line("s/tool.7", high, "9", Outcome::DryRun, stall.clone(), "dry"),
            line("s/tool.7", kill, "1", Outcome::Ok, stall, "no progress for 20000 ms (bound 20000 ms)"),
        ];
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let got = stall_actions(&log, "s/tool.7");
        assert_eq!(
            got,
            vec![StallAction {
                file: "cgroup.kill".into(),
                value: "1".into(),
                why: "no progress for 20000 ms (bound 20000 ms)".into()
            }]
        );
        let text = stall_text(&got);
        assert!(
            text.contains(
                "the memqos daemon killed this call: it was stuck at its memory limit (no progress for 20000 ms"
            ),
            "{text}"
        );
        assert!(stall_actions(&dir.path().join("missing"), "s/tool.7").is_empty());
    }
}
