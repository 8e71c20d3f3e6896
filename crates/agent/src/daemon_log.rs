//! What the memqos daemon did to a call because it stalled, read back from its event log
//! (`<state_dir>/events.jsonl`, one JSON object per line), so `memqos run` can tell the agent
//! why its command was slowed down, relieved or killed.
//!
//! Only `write` events that were carried out (`outcome` ok) whose reason is `stall_bound`
//! for the call's cgroup are used (the schema of `memqos_daemon::events::WriteEvent`); lines
//! that do not parse are skipped, so a log from another daemon version costs nothing but the
//! note.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;

/// How much of the end of the log is read: a call's own events are recent.
const TAIL_BYTES: u64 = 512 << 10;

/// One stall action the daemon took on the call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StallAction {
    /// The file written: memory.high (relieved) or cgroup.kill.
    pub file: String,
    pub value: String,
    /// The daemon's reason, in words.
    pub why: String,
}

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
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["event"] == "write"
                && e["cgroup"] == cgroup
                && e["reason"]["kind"] == "stall_bound"
                && e["outcome"] == "ok"
        })
        .map(|e| StallAction {
            file: e["file"].as_str().unwrap_or_default().to_owned(),
            value: e["value"].as_str().unwrap_or_default().to_owned(),
            why: e["why"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

/// The stderr lines for them.
pub fn stall_text(actions: &[StallAction]) -> String {
    let mut t = String::new();
    for a in actions {
        let what = if a.file == "cgroup.kill" {
            "killed this call".to_owned()
        } else {
            format!("raised this call's {} to {} so it could go on", a.file, a.value)
        };
        t.push_str(&format!("memqos: the memqos daemon {what}: it was stuck at its memory limit ({}).\n", a.why));
    }
    if actions.iter().any(|a| a.file == "cgroup.kill") {
        t.push_str("memqos: try: run it with less memory (fewer parallel jobs), or with --hint high (MEMQOS_HINT=high) so it is throttled later.\n");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_calls_stall_writes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let lines = [
            r#"{"event":"write","cgroup":"s/tool.7","file":"memory.high","value":"100","outcome":"ok","reason":{"kind":"headroom_guard"},"why":"guard"}"#,
            r#"{"event":"write","cgroup":"s/tool.8","file":"cgroup.kill","value":"1","outcome":"ok","reason":{"kind":"stall_bound"},"why":"other call"}"#,
            "not json",
            r#"{"event":"write","cgroup":"s/tool.7","file":"memory.high","value":"9","outcome":"dry_run","reason":{"kind":"stall_bound"},"why":"dry"}"#,
            r#"{"event":"write","cgroup":"s/tool.7","file":"cgroup.kill","value":"1","outcome":"ok","reason":{"kind":"stall_bound"},"why":"no progress for 20000 ms (bound 20000 ms)"}"#,
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
