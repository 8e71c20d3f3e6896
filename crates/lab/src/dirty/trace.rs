//! Who slept in balance_dirty_pages(): the `writeback:balance_dirty_pages` tracepoint, read
//! through a private tracefs instance (so the global trace buffer is left alone).
//!
//! The event fires only on the throttled path of balance_dirty_pages() (past the freerun
//! check), once per pause decision; `pause` is the sleep in ms (negative: none, the task was
//! behind its budget), `cgroup_ino` the inode of the memcg owning the written inode's
//! writeback domain (`wb->memcg_css`), and the line's first field the task as `comm-pid`.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TRACEFS: &str = "/sys/kernel/tracing";
const INSTANCE: &str = "memqos-dirty";

/// A private trace instance with only the balance_dirty_pages event on.
pub struct BdpTrace {
    dir: PathBuf,
}

impl BdpTrace {
    pub fn start() -> Result<BdpTrace> {
        let dir = Path::new(TRACEFS).join("instances").join(INSTANCE);
        if !dir.exists() {
            std::fs::create_dir(&dir)
                .with_context(|| format!("creating trace instance {} (is tracefs mounted?)", dir.display()))?;
        }
        // Enough for tens of thousands of events: a stock run logs a few thousand per phase.
        let _ = std::fs::write(dir.join("buffer_size_kb"), "8192");
        std::fs::write(dir.join("trace"), "").with_context(|| format!("clearing {}/trace", dir.display()))?;
        let enable = dir.join("events/writeback/balance_dirty_pages/enable");
        std::fs::write(&enable, "1")
            .with_context(|| format!("enabling {} (no writeback:balance_dirty_pages tracepoint?)", enable.display()))?;
        Ok(BdpTrace { dir })
    }

    /// Clears the buffer (events so far are dropped).
    pub fn clear(&self) -> Result<()> {
        std::fs::write(self.dir.join("trace"), "").with_context(|| format!("clearing {}/trace", self.dir.display()))
    }

    /// The events recorded since the last clear.
    pub fn read(&self) -> Result<String> {
        std::fs::read_to_string(self.dir.join("trace")).with_context(|| format!("reading {}/trace", self.dir.display()))
    }
}

impl Drop for BdpTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("events/writeback/balance_dirty_pages/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Throttling seen for one key (a cgroup or a task).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sleeps {
    /// Tracepoint hits: passes through the throttled path of balance_dirty_pages().
    pub events: u64,
    /// Hits with a positive pause.
    pub pauses: u64,
    /// Sum of the positive pauses the kernel computed, ms: an upper bound of the time slept
    /// (a pause below the task's min_pause is traced but not slept).
    #[serde(alias = "slept_ms")]
    pub pause_ms: u64,
    /// Longest single pause, ms, 0 if none (the kernel caps it at MAX_PAUSE = 200 ms).
    pub max_pause_ms: i64,
}

/// Throttling per memcg (by cgroup inode) and per task command.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BdpSummary {
    pub by_cgroup_ino: BTreeMap<u64, Sleeps>,
    pub by_task: BTreeMap<String, Sleeps>,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    line[at..].split(|c: char| c.is_whitespace()).next()
}

/// Parses the text of a trace buffer; other events and comment lines are skipped.
pub fn summarize(text: &str) -> BdpSummary {
    let mut s = BdpSummary::default();
    for line in text.lines() {
        if line.starts_with('#') || !line.contains("balance_dirty_pages:") {
            continue;
        }
        let (Some(pause), Some(ino)) = (field(line, " pause="), field(line, " cgroup_ino=")) else { continue };
        let (Ok(pause), Ok(ino)) = (pause.parse::<i64>(), ino.parse::<u64>()) else { continue };
        // "fio-214     [001] ....": the comm may contain '-', the pid is after the last one.
        let task = line.split_whitespace().next().unwrap_or("?");
        let comm = task.rsplit_once('-').map(|(c, _)| c).unwrap_or(task).to_string();
        for sleeps in [s.by_cgroup_ino.entry(ino).or_default(), s.by_task.entry(comm).or_default()] {
            sleeps.events += 1;
            if pause > 0 {
                sleeps.pauses += 1;
                sleeps.pause_ms += pause as u64;
            }
            sleeps.max_pause_ms = sleeps.max_pause_ms.max(pause);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_lines_per_cgroup_and_task() {
        let text = "# tracer: nop\n\
             fio-216     [000] .....   211.120618: balance_dirty_pages: bdi 254:0: limit=8192 setpoint=7168 dirty=7387 wb_setpoint=6887 wb_dirty=704 dirty_ratelimit=4 task_ratelimit=456 dirtied=43 dirtied_pause=0 paused=13712 pause=200 period=376 think=8 cgroup_ino=28\n\
             fio-179     [001] .....   229.236486: balance_dirty_pages: bdi 254:0: limit=8192 setpoint=7168 dirty=7284 wb_setpoint=98 wb_dirty=0 dirty_ratelimit=1080 task_ratelimit=16232 dirtied=1 dirtied_pause=0 paused=0 pause=-24724 period=0 think=24724 cgroup_ino=82\n\
             kworker/u8:1-55 [001] .....   230.0: balance_dirty_pages: bdi 254:0: limit=1 setpoint=1 dirty=1 wb_setpoint=1 wb_dirty=1 dirty_ratelimit=1 task_ratelimit=1 dirtied=1 dirtied_pause=0 paused=0 pause=12 period=0 think=0 cgroup_ino=28\n";
        let s = summarize(text);
        assert_eq!(s.by_cgroup_ino[&28], Sleeps { events: 2, pauses: 2, pause_ms: 212, max_pause_ms: 200 });
        assert_eq!(s.by_cgroup_ino[&82], Sleeps { events: 1, pauses: 0, pause_ms: 0, max_pause_ms: 0 });
        assert_eq!(s.by_task["fio"].events, 2);
        assert_eq!(s.by_task["kworker/u8:1"].pause_ms, 12);
    }
}
