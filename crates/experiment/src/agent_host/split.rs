//! One agent trace as a session: the runtime's memory and each tool call's, separately.
//!
//! A trace is the whole sandbox's usage, one reading a second. The seed report's reading of
//! it: the agent runtime holds a slowly moving baseline, and tool calls (pytest, pip, builds)
//! add bursts on top while they run. So, over the trace's samples:
//!
//! - a sample belongs to a tool call when a call overlaps the second before it,
//!   `(epoch_{i-1}, epoch_i]` (the replay marks steps the same way: a burst seen at a reading
//!   happened in the second before it); calls that overlap in time are one call;
//! - inside a call, the runtime holds what it held at the last sample before the call (or
//!   less, if the whole sandbox dropped below that), and the call holds the rest;
//! - outside calls, the runtime holds everything.
//!
//! A call whose extra memory never reaches `min_call_bytes` (most Read/Grep/Edit calls: the
//! 1-second sampling sees nothing of them) is not replayed as a process: its samples stay with
//! the runtime, so the session's total at every sample is the trace's, whichever way it is cut.
//!
//! The cut is a model. A real tool call's memory is not exactly "sandbox minus runtime at the
//! call's start" (the runtime may grow during a call, e.g. reading the call's output), and a
//! burst shorter than a second is invisible in the trace.

use memqos_replay::tool_calls::ToolCall;
use memqos_replay::trace::Trace;
use serde::{Deserialize, Serialize};

/// A point of a derived schedule: seconds from the trace's first sample, bytes held.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub t_s: f64,
    pub bytes: u64,
}

/// One tool call to replay in its own cgroup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallPlan {
    /// Position among the session's replayed calls.
    pub index: usize,
    /// The call's names in tool_calls.json, joined by `+` when calls overlapped.
    pub tools: String,
    /// When the call starts and ends, seconds from the trace's first sample.
    pub start_s: f64,
    pub end_s: f64,
    /// What the call holds: 0 at its start, then its extra memory at each of its samples,
    /// the last held until it ends.
    pub points: Vec<Point>,
}

impl CallPlan {
    pub fn peak_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.bytes).max().unwrap_or(0)
    }
}

/// A trace cut into its runtime and its tool calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionPlan {
    pub trace: String,
    pub duration_s: f64,
    /// The runtime's memory at every sample of the trace.
    pub runtime: Vec<Point>,
    pub calls: Vec<CallPlan>,
    /// Calls in tool_calls.json (before merging) and merged calls left with the runtime
    /// because their extra memory stayed below `min_call_bytes`.
    pub calls_in_file: usize,
    pub calls_below_threshold: usize,
    /// The trace's own peak: what a static per-session limit at the session's peak allows.
    pub peak_bytes: u64,
}

impl SessionPlan {
    pub fn runtime_peak_bytes(&self) -> u64 {
        self.runtime.iter().map(|p| p.bytes).max().unwrap_or(0)
    }
}

/// Cuts `trace` with its `calls` (see the module's text).
pub fn split(trace: &Trace, calls: &[ToolCall], min_call_bytes: u64) -> SessionPlan {
    let samples = &trace.samples;
    let epoch0 = samples[0].epoch;
    let merged = merge(calls);
    // Which merged call each sample belongs to.
    let mut owner: Vec<Option<usize>> = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let from = if i == 0 { s.epoch } else { samples[i - 1].epoch };
        let hit = merged.iter().position(|c| {
            if i == 0 {
                c.start <= s.epoch && c.end >= s.epoch
            } else {
                c.start <= s.epoch && c.end > from
            }
        });
        owner.push(hit);
    }
    let mut runtime: Vec<u64> = samples.iter().map(|s| s.used_bytes).collect();
    let mut extra = vec![0u64; samples.len()];
    let mut plans = Vec::new();
    let mut below = 0;
    let mut i = 0;
    while i < samples.len() {
        let Some(c) = owner[i] else {
            i += 1;
            continue;
        };
        let first = i;
        while i < samples.len() && owner[i] == Some(c) {
            i += 1;
        }
        let members = first..i;
        let before = if first > 0 { samples[first - 1].used_bytes } else { samples[first].used_bytes };
        let peak_extra = members.clone().map(|j| samples[j].used_bytes.saturating_sub(before)).max().unwrap_or(0);
        if peak_extra < min_call_bytes {
            below += 1;
            continue;
        }
        for j in members.clone() {
            runtime[j] = samples[j].used_bytes.min(before);
            extra[j] = samples[j].used_bytes - runtime[j];
        }
        let call = &merged[c];
        let start_s = (call.start.max(if first > 0 { samples[first - 1].epoch } else { epoch0 }) - epoch0).max(0.0);
        let last = members.end - 1;
        let end_s = (call.end - epoch0).max(samples[last].epoch - epoch0);
        let mut points = vec![Point { t_s: start_s, bytes: 0 }];
        points.extend(members.map(|j| Point { t_s: (samples[j].epoch - epoch0).max(start_s), bytes: extra[j] }));
        points.push(Point { t_s: end_s, bytes: extra[last] });
        plans.push(CallPlan { index: plans.len(), tools: call.tools.clone(), start_s, end_s, points });
    }
    SessionPlan {
        trace: trace.name.clone(),
        duration_s: trace.duration_s(),
        runtime: samples.iter().zip(&runtime).map(|(s, &b)| Point { t_s: s.epoch - epoch0, bytes: b }).collect(),
        calls: plans,
        calls_in_file: calls.len(),
        calls_below_threshold: below,
        peak_bytes: trace.max_used_bytes(),
    }
}

struct Merged {
    start: f64,
    end: f64,
    tools: String,
}

/// Calls that overlap in time, as one.
fn merge(calls: &[ToolCall]) -> Vec<Merged> {
    let mut sorted: Vec<&ToolCall> = calls.iter().collect();
    sorted.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut out: Vec<Merged> = Vec::new();
    for c in sorted {
        match out.last_mut() {
            Some(m) if c.start <= m.end => {
                m.end = m.end.max(c.end);
                if !m.tools.split('+').any(|t| t == c.tool) {
                    m.tools.push('+');
                    m.tools.push_str(&c.tool);
                }
            }
            _ => out.push(Merged { start: c.start, end: c.end, tools: c.tool.clone() }),
        }
    }
    out
}

/// A derived schedule as a `resources.json` that `memqos-lab replay` reads: the points' times
/// become epochs after `epoch0`, their sizes `"<bytes>B / <limit>B"` (a limit of 0 with 0
/// used would read as "no container").
pub fn resources_json(points: &[Point], epoch0: f64) -> String {
    let samples: Vec<serde_json::Value> = points
        .iter()
        .map(|p| serde_json::json!({"epoch": epoch0 + p.t_s, "mem_usage": format!("{}B / 1B", p.bytes)}))
        .collect();
    serde_json::json!({ "samples": samples }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_replay::trace::parse_trace;

    const MB: u64 = 1_000_000;

    fn trace(used_mb: &[u64]) -> Trace {
        let samples: Vec<String> = used_mb
            .iter()
            .enumerate()
            .map(|(i, u)| format!(r#"{{"epoch": {}, "mem_usage": "{u}MB / 2GB"}}"#, 1000 + i))
            .collect();
        parse_trace("t.json", &format!(r#"{{"samples": [{}]}}"#, samples.join(","))).unwrap()
    }

    fn call(tool: &str, start: f64, end: f64) -> ToolCall {
        ToolCall { index: 0, tool: tool.into(), start, end }
    }

    #[test]
    fn a_burst_inside_a_call_is_the_calls_and_the_runtime_keeps_its_level() {
        // Samples at 1000..1006; the call runs 1002.5..1004.5, so it owns the samples at 1003,
        // 1004 and 1005 (the second before 1005 overlaps the call's end).
        let t = trace(&[200, 210, 210, 300, 500, 260, 215]);
        let plan = split(&t, &[call("Bash", 1002.5, 1004.5)], 16 * MB);
        let rt: Vec<u64> = plan.runtime.iter().map(|p| p.bytes / MB).collect();
        assert_eq!(rt, [200, 210, 210, 210, 210, 210, 215]);
        assert_eq!(plan.calls.len(), 1);
        let c = &plan.calls[0];
        assert_eq!((c.start_s, c.end_s), (2.5, 5.0));
        let pts: Vec<(f64, u64)> = c.points.iter().map(|p| (p.t_s, p.bytes / MB)).collect();
        assert_eq!(pts, [(2.5, 0), (3.0, 90), (4.0, 290), (5.0, 50), (5.0, 50)]);
        // Whichever way it is cut, the session holds what the trace says at every sample.
        for (i, s) in t.samples.iter().enumerate() {
            let in_call: u64 =
                c.points.iter().skip(1).filter(|p| p.t_s == s.epoch - 1000.0).map(|p| p.bytes).max().unwrap_or(0);
            assert_eq!(plan.runtime[i].bytes + in_call, s.used_bytes, "sample {i}");
        }
        assert_eq!(plan.peak_bytes, 500 * MB);
        assert_eq!(plan.runtime_peak_bytes(), 215 * MB);
    }

    #[test]
    fn small_calls_stay_with_the_runtime_and_overlapping_calls_are_one() {
        let t = trace(&[200, 205, 300, 310, 200, 201, 200]);
        let calls = [call("Bash", 1001.5, 1003.0), call("Read", 1002.0, 1003.2), call("Grep", 1004.5, 1005.0)];
        let plan = split(&t, &calls, 16 * MB);
        assert_eq!(plan.calls_in_file, 3);
        assert_eq!(plan.calls.len(), 1);
        assert_eq!(plan.calls_below_threshold, 1, "the Grep call's 1 MB stays with the runtime");
        assert_eq!(plan.calls[0].tools, "Bash+Read");
        assert_eq!(plan.runtime[5].bytes, 201 * MB);
        assert_eq!(plan.calls[0].peak_bytes(), 105 * MB);
    }

    #[test]
    fn a_sandbox_that_drops_below_the_runtimes_level_inside_a_call_leaves_the_call_nothing_then() {
        let t = trace(&[250, 250, 400, 180, 240]);
        let plan = split(&t, &[call("Bash", 1001.5, 1003.5)], 16 * MB);
        let c = &plan.calls[0];
        // Start, the samples at 1002, 1003 and 1004 (the second before 1004 overlaps the
        // call's end), and the end.
        assert_eq!(c.points.iter().map(|p| p.bytes / MB).collect::<Vec<_>>(), [0, 150, 0, 0, 0]);
        assert_eq!(plan.runtime[3].bytes, 180 * MB);
    }

    #[test]
    fn the_derived_schedule_is_a_trace_memqos_replay_reads_with_zero_sizes_kept() {
        let pts =
            [Point { t_s: 0.0, bytes: 0 }, Point { t_s: 1.5, bytes: 42 * MB }, Point { t_s: 2.0, bytes: 42 * MB }];
        let back = parse_trace("call.json", &resources_json(&pts, 5000.0)).unwrap();
        assert_eq!(back.samples.len(), 3);
        assert_eq!(back.samples[0].used_bytes, 0);
        assert_eq!(back.samples[1].used_bytes, 42 * MB);
        assert_eq!(back.duration_s(), 2.0);
    }
}
