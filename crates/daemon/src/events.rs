//! The daemon's event log: one typed schema ([`Event`], defined in `memqos_schema::events`)
//! written as JSON lines to stdout and to `<state_dir>/events.jsonl`, and read back by the
//! same types (status, experiments, benches, tests). The file is opened once and rotated to
//! `events.jsonl.1` when it reaches its size bound, so a long-running daemon never fills its
//! disk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use memqos_schema::events::*;
pub use memqos_schema::state::{EVENTS_FILE, ROTATED_FILE};
/// The log's size bound before rotation; at most twice this is kept on disk.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 20;

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

/// The whole log of a state directory, rotated part first.
pub fn read(state_dir: &Path) -> Vec<LogLine> {
    let mut text = std::fs::read_to_string(state_dir.join(ROTATED_FILE)).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(state_dir.join(EVENTS_FILE)).unwrap_or_default());
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_policy::Reason;

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
