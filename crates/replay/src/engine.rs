//! The replay loop, run in the calling process: sleep until a step is due, grow or shrink to
//! its target, measure, report.
//!
//! Timing: the schedule is absolute, anchored at t=0 (after the baseline is allocated). A
//! step that is due in the future is slept for; a step that is already due runs at once and
//! records how late it started (`lag_ms`). So when allocation stalls (throttling, reclaim)
//! the replay falls behind and then catches up by not sleeping, replaying every sample: the
//! stall shows up as latency, lag and a longer completion time, never as a skipped sample.
//! This is what the seed's Python replayer did too.
//!
//! A pause file (`EngineOptions::pause_file`) stops the clock: while it exists no step runs
//! and the rest of the schedule moves later by as long as it existed. The agent-host
//! experiment pauses an agent runtime's replay while its tool call runs late, as an agent
//! waits for its tool call, instead of letting the runtime grow on top of the late call.

use crate::memory::{MapError, Memory, PageFill};
use crate::report::StepRecord;
use crate::schedule::Schedule;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// Size of each anonymous mapping (rounded to pages). Shrinking is page-exact whatever
    /// the chunk; smaller chunks mean more mmap calls per growth step.
    pub chunk_bytes: usize,
    /// Read VmRSS from /proc/self/status after every step (tens of µs, outside the
    /// measured latency).
    pub read_rss: bool,
    /// While this file exists the replay's clock stands still (see the module's text).
    pub pause_file: Option<PathBuf>,
    /// How compressible grown pages are; None: an 8-byte stamp and zeros (see `memory`).
    pub fill: Option<PageFill>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { chunk_bytes: 4 << 20, read_rss: true, pause_file: None, fill: Some(PageFill::default()) }
    }
}

/// How often a paused (or pausable) replay looks at its pause file: as often as the
/// agent-host runner looks at its sessions. A step still runs when due (the last sleep before
/// it is cut to fit); only a pause is seen up to this late.
const PAUSE_POLL: Duration = Duration::from_millis(20);

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
    let mut mem = Memory::with_fill(opts.chunk_bytes, opts.fill);
    let t = Instant::now();
    mem.set_target(schedule.baseline_bytes).map_err(EngineError::Baseline)?;
    let baseline_alloc = t.elapsed();
    observe(EngineEvent::Baseline { bytes: mem.held(), took: baseline_alloc }).map_err(EngineError::Sink)?;

    let mut start = Instant::now();
    for (i, step) in schedule.steps.iter().enumerate() {
        let mut due =
            start.checked_add(step.t_sched).ok_or(EngineError::Unschedulable { step: i, due: step.t_sched })?;
        match &opts.pause_file {
            None => {
                let now = Instant::now();
                if now < due {
                    std::thread::sleep(due - now);
                }
            }
            Some(pause) => loop {
                let now = Instant::now();
                if pause.exists() {
                    // Paused time is not schedule time: the rest of the schedule moves later.
                    std::thread::sleep(PAUSE_POLL);
                    let stood = now.elapsed();
                    start += stood;
                    due += stood;
                } else if now < due {
                    std::thread::sleep((due - now).min(PAUSE_POLL));
                } else {
                    break;
                }
            },
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

    #[test]
    fn no_step_runs_while_the_pause_file_exists() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let pause = dir.path().join("pause");
        std::fs::write(&pause, "").unwrap();
        let step = |t_ms: u64| crate::schedule::Step {
            sample: 0,
            t_sched: Duration::from_millis(t_ms),
            used_bytes: 1 << 20,
            target_bytes: 1 << 20,
            tool: None,
        };
        let schedule = Schedule { speed: 1.0, baseline_bytes: 0, steps: vec![step(0), step(1)] };
        let opts = EngineOptions { chunk_bytes: 1 << 20, read_rss: false, pause_file: Some(pause.clone()), fill: None };
        let resumed = Arc::new(AtomicBool::new(false));
        let r = resumed.clone();
        let unpause = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            r.store(true, Ordering::SeqCst);
            std::fs::remove_file(&pause).unwrap();
        });
        let mut steps = 0;
        run(&schedule, &opts, |ev| {
            if let EngineEvent::Step(_) = ev {
                assert!(resumed.load(Ordering::SeqCst), "a step ran while the pause file existed");
                steps += 1;
            }
            Ok(())
        })
        .unwrap();
        unpause.join().unwrap();
        assert_eq!(steps, 2);
    }
}
