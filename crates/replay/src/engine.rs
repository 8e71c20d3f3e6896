//! The replay loop, run in the calling process: sleep until a step is due, grow or shrink to
//! its target, measure, report.
//!
//! Timing: the schedule is absolute, anchored at t=0 (after the baseline is allocated). A
//! step that is due in the future is slept for; a step that is already due runs at once and
//! records how late it started (`lag_ms`). So when allocation stalls (throttling, reclaim)
//! the replay falls behind and then catches up by not sleeping, replaying every sample: the
//! stall shows up as latency, lag and a longer completion time, never as a skipped sample.
//! This is what the seed's Python replayer did too.

use crate::memory::{MapError, Memory};
use crate::report::StepRecord;
use crate::schedule::Schedule;
use std::io;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Size of each anonymous mapping (rounded to pages). Shrinking is page-exact whatever
    /// the chunk; smaller chunks mean more mmap calls per growth step.
    pub chunk_bytes: usize,
    /// Read VmRSS from /proc/self/status after every step (tens of µs, outside the
    /// measured latency).
    pub read_rss: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { chunk_bytes: 4 << 20, read_rss: true }
    }
}

/// What the engine tells its caller while it runs.
#[derive(Debug)]
pub enum EngineEvent<'a> {
    /// The baseline is allocated; the replay clock starts now.
    Baseline {
        bytes: u64,
        took: Duration,
    },
    Step(&'a StepRecord),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineEnd {
    /// t=0 to the end of the last step.
    pub completion: Duration,
    pub baseline_alloc: Duration,
    pub peak_held_bytes: u64,
    /// VmHWM at the end: the process's peak RSS, including the program itself.
    pub vm_hwm_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("allocating the baseline: {0}")]
    Baseline(MapError),
    #[error("step {step} (trace sample {sample}): {error}")]
    Step { step: usize, sample: usize, error: MapError },
    #[error("step {step} is due {due:?} after the start, beyond what the clock can represent")]
    Unschedulable { step: usize, due: Duration },
    #[error("reporting: {0}")]
    Sink(io::Error),
}

/// Replays `schedule` in this process. `observe` gets every event as it happens; an error
/// from it stops the replay (the supervisor's pipe is gone, say). The memory is released
/// when this returns.
pub fn run(
    schedule: &Schedule,
    opts: &EngineOptions,
    mut observe: impl FnMut(EngineEvent<'_>) -> io::Result<()>,
) -> Result<EngineEnd, EngineError> {
    let mut mem = Memory::new(opts.chunk_bytes);
    let t = Instant::now();
    mem.set_target(schedule.baseline_bytes).map_err(EngineError::Baseline)?;
    let baseline_alloc = t.elapsed();
    observe(EngineEvent::Baseline { bytes: mem.held(), took: baseline_alloc }).map_err(EngineError::Sink)?;

    let start = Instant::now();
    for (i, step) in schedule.steps.iter().enumerate() {
        let due = start.checked_add(step.t_sched).ok_or(EngineError::Unschedulable { step: i, due: step.t_sched })?;
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        }
        let began = Instant::now();
        let change = mem.set_target(step.target_bytes).map_err(|error| EngineError::Step {
            step: i,
            sample: step.sample,
            error,
        })?;
        let rss_bytes = if opts.read_rss { read_status_field("VmRSS") } else { None };
        let rec = StepRecord {
            step: i,
            sample: step.sample,
            t_sched_ms: round_us(step.t_sched),
            t_actual_ms: round_us(began - start),
            lag_ms: round_us(began.saturating_duration_since(due)),
            target_bytes: step.target_bytes,
            held_bytes: mem.held(),
            rss_bytes,
            grown: change.grown,
            shrunk: change.shrunk,
            latency_us: change.grow_time.as_micros() as u64,
            release_us: change.release_time.as_micros() as u64,
            in_tool_call: step.in_tool_call(),
            tool: step.tool.clone(),
        };
        observe(EngineEvent::Step(&rec)).map_err(EngineError::Sink)?;
    }
    let completion = start.elapsed();
    Ok(EngineEnd { completion, baseline_alloc, peak_held_bytes: mem.peak(), vm_hwm_bytes: read_status_field("VmHWM") })
}

/// Milliseconds with microsecond resolution: enough for the report, and stable in JSON.
fn round_us(d: Duration) -> f64 {
    d.as_micros() as f64 / 1e3
}

/// A `kB` field of /proc/self/status, in bytes.
pub fn read_status_field(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_field(&text, field)
}

/// Parses `VmRSS:\t  123456 kB` (the kernel's "kB" is KiB) out of a status file's text.
pub fn parse_status_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => n.checked_mul(1024),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let text = "Name:\tx\nVmHWM:\t   10240 kB\nVmRSS:\t    2048 kB\nThreads:\t1\n";
        assert_eq!(parse_status_field(text, "VmRSS"), Some(2 << 20));
        assert_eq!(parse_status_field(text, "VmHWM"), Some(10 << 20));
        assert_eq!(parse_status_field(text, "VmSwap"), None);
        assert_eq!(parse_status_field(text, "Threads"), None);
        assert!(read_status_field("VmRSS").is_some());
    }
}
