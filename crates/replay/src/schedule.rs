//! From a trace to a schedule: when each step happens and how much memory it holds.
//!
//! - Time: sample i happens `(epoch_i - epoch_0) / speed` seconds after the replay starts.
//!   The schedule is absolute, so a late step does not push the later ones back (see
//!   `engine`).
//! - Size: `target_i = used_i + baseline`. The baseline stands for the agent framework
//!   process that the container's memory reading does not include (the seed experiment ran
//!   with "100MB/process" and reports peaks of 421 MB and 406 MB for traces whose maxima
//!   are 321 MB and 306 MB: it added the baseline). The baseline is allocated before the
//!   replay's clock starts and held until the end.
//! - Tool calls: a step is marked with every tool call that overlaps the interval it
//!   replays, `(epoch_{i-1}, epoch_i]` (`[epoch_0, epoch_0]` for the first step). A sample is
//!   a reading at one instant taken every ~1 s; a burst that shows up in sample i happened
//!   somewhere in the second before it, and short calls (Read, Grep) would never contain
//!   the instant itself.

use crate::tool_calls::ToolCall;
use crate::trace::Trace;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleOptions {
    /// Time compression: 50 replays a 100 s trace in 2 s. Finite and > 0.
    pub speed: f64,
    /// Bytes held in addition to the trace's `used` value throughout.
    pub baseline_bytes: u64,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions { speed: 1.0, baseline_bytes: 0 }
    }
}

/// One sample transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Index of the sample in the trace file's `samples` array.
    pub sample: usize,
    /// When the step is due, from the start of the replay.
    pub t_sched: Duration,
    /// The trace's reading.
    pub used_bytes: u64,
    /// What the workload holds after this step: `used_bytes + baseline`.
    pub target_bytes: u64,
    /// Distinct names of the tool calls overlapping the step, in order of start, joined
    /// by `+` (parallel calls happen); `None` outside tool calls or without a tool-call file.
    pub tool: Option<String>,
}

impl Step {
    pub fn in_tool_call(&self) -> bool {
        self.tool.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub speed: f64,
    pub baseline_bytes: u64,
    /// Non-empty, `t_sched` non-decreasing, `t_sched[0] == 0`.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// How long the replay takes if every step is on time.
    pub fn duration(&self) -> Duration {
        self.steps.last().map_or(Duration::ZERO, |s| s.t_sched)
    }

    pub fn peak_target_bytes(&self) -> u64 {
        self.steps.iter().map(|s| s.target_bytes).max().unwrap_or(self.baseline_bytes)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("speed must be a finite number > 0, not {0}")]
    BadSpeed(f64),
    #[error("baseline {baseline} B plus the trace's {used} B overflows")]
    Overflow { baseline: u64, used: u64 },
}

/// Builds the schedule; `tool_calls` is `None` when there is no tool-call file.
pub fn build(
    trace: &Trace,
    tool_calls: Option<&[ToolCall]>,
    opts: &ScheduleOptions,
) -> Result<Schedule, ScheduleError> {
    if !(opts.speed.is_finite() && opts.speed > 0.0) {
        return Err(ScheduleError::BadSpeed(opts.speed));
    }
    let epoch0 = trace.samples[0].epoch;
    let mut steps = Vec::with_capacity(trace.samples.len());
    let mut prev_epoch = epoch0;
    for s in &trace.samples {
        let target_bytes = s
            .used_bytes
            .checked_add(opts.baseline_bytes)
            .ok_or(ScheduleError::Overflow { baseline: opts.baseline_bytes, used: s.used_bytes })?;
        // Trace epochs are non-decreasing (checked by the parser), so this is >= 0; the max
        // only guards against a hand-built Trace.
        let secs = ((s.epoch - epoch0) / opts.speed).max(0.0);
        let t_sched = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
        let tool = tool_calls.and_then(|calls| tools_in(calls, prev_epoch, s.epoch, s.epoch == epoch0));
        steps.push(Step { sample: s.index, t_sched, used_bytes: s.used_bytes, target_bytes, tool });
        prev_epoch = s.epoch;
    }
    Ok(Schedule { speed: opts.speed, baseline_bytes: opts.baseline_bytes, steps })
}

/// Names of the calls overlapping `(from, to]`, or the instant `to` when `first`.
fn tools_in(calls: &[ToolCall], from: f64, to: f64, first: bool) -> Option<String> {
    let mut hits: Vec<&ToolCall> = calls
        .iter()
        .filter(|c| if first { c.start <= to && c.end >= to } else { c.start <= to && c.end > from })
        .collect();
    hits.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut names: Vec<&str> = Vec::new();
    for c in hits {
        if !names.contains(&c.tool.as_str()) {
            names.push(&c.tool);
        }
    }
    (!names.is_empty()).then(|| names.join("+"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Sample;

    fn trace(points: &[(f64, u64)]) -> Trace {
        Trace {
            name: "t".into(),
            path: None,
            samples: points
                .iter()
                .enumerate()
                .map(|(i, &(epoch, used))| Sample { index: i, epoch, used_bytes: used, limit_bytes: 1 << 40 })
                .collect(),
            dropped_no_container: vec![],
        }
    }

    fn call(tool: &str, start: f64, end: f64) -> ToolCall {
        ToolCall { index: 0, tool: tool.into(), start, end }
    }

    #[test]
    fn speed_compresses_time() {
        let t = trace(&[(1000.0, 10), (1001.0, 20), (1003.5, 5)]);
        let s = build(&t, None, &ScheduleOptions { speed: 50.0, baseline_bytes: 0 }).unwrap();
        let ms: Vec<u128> = s.steps.iter().map(|s| s.t_sched.as_micros()).collect();
        assert_eq!(ms, [0, 20_000, 70_000]);
        assert_eq!(s.duration(), Duration::from_millis(70));
        let real = build(&t, None, &ScheduleOptions::default()).unwrap();
        assert_eq!(real.duration(), Duration::from_millis(3500));
    }

    #[test]
    fn baseline_is_added() {
        let t = trace(&[(0.0, 0), (1.0, 321_000_000)]);
        let s = build(&t, None, &ScheduleOptions { speed: 1.0, baseline_bytes: 100 << 20 }).unwrap();
        assert_eq!(s.steps[0].target_bytes, 100 << 20);
        assert_eq!(s.steps[1].target_bytes, 321_000_000 + (100 << 20));
        assert_eq!(s.steps[1].used_bytes, 321_000_000);
        assert_eq!(s.peak_target_bytes(), 321_000_000 + (100 << 20));
    }

    #[test]
    fn bad_options() {
        let t = trace(&[(0.0, 1)]);
        for speed in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = build(&t, None, &ScheduleOptions { speed, baseline_bytes: 0 }).unwrap_err();
            assert!(matches!(e, ScheduleError::BadSpeed(_)));
        }
        let t = trace(&[(0.0, u64::MAX)]);
        assert!(matches!(
            build(&t, None, &ScheduleOptions { speed: 1.0, baseline_bytes: 1 }),
            Err(ScheduleError::Overflow { .. })
        ));
    }

    #[test]
    fn tool_calls_mark_the_interval_before_a_sample() {
        let t = trace(&[(10.0, 1), (11.0, 1), (12.0, 1), (13.0, 1), (14.0, 1)]);
        let calls = [
            call("Bash", 9.0, 10.5),    // covers sample 0's instant and part of step 1
            call("Read", 11.2, 11.3),   // short, inside step 2's interval
            call("Grep", 11.25, 11.28), // parallel with Read
            call("Read", 11.5, 11.6),   // same tool again: named once
            call("Task", 12.0, 12.0),   // ends exactly at sample 2: belongs to step 2 only
        ];
        let s = build(&t, Some(&calls), &ScheduleOptions::default()).unwrap();
        let tools: Vec<Option<&str>> = s.steps.iter().map(|s| s.tool.as_deref()).collect();
        assert_eq!(tools, [Some("Bash"), Some("Bash"), Some("Read+Grep+Task"), None, None]);
        assert!(s.steps[0].in_tool_call());
        assert!(!s.steps[3].in_tool_call());
        let none = build(&t, None, &ScheduleOptions::default()).unwrap();
        assert!(none.steps.iter().all(|s| s.tool.is_none()));
    }
}
