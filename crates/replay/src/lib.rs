//! memqos-replay: replays an AI agent's memory trace as a real workload.
//!
//! A trace (`resources.json`, one `podman stats` reading per second; see
//! traces/README.md in the repository) becomes a [`Schedule`] of steps; a workload follows it by
//! mapping and touching anonymous memory to grow and unmapping it to shrink, measuring how
//! long every growth takes. Under memory.high throttling or direct reclaim that latency is
//! what grows, and under memory.max the workload is OOM-killed: the two things memory QoS
//! for agents is about.
//!
//! Layers, each usable on its own:
//! - [`trace`], [`tool_calls`], [`units`]: pure parsers with located errors;
//! - [`schedule`]: times (`(epoch_i - epoch_0) / speed`) and sizes (`used + baseline`);
//! - [`engine`]: the replay loop in the calling process ([`memory`] holds the pages);
//! - [`worker`]: the same loop in a child process, supervised, so an OOM kill is an outcome
//!   rather than the end of the experiment;
//! - [`report`]: records, outcome, percentiles, JSON and text;
//! - [`run`]: one supervised replay from trace to report, as `memqos-lab replay` runs it.
//!
//! ```no_run
//! use memqos_replay::{prepare, report::Report, worker, EngineOptions, ScheduleOptions, ToolCallsSource};
//! use std::path::Path;
//!
//! let path = Path::new("traces/agent-haiku/dask__dask-11628/resources.json");
//! let opts = ScheduleOptions { speed: 50.0, baseline_bytes: 100 << 20 };
//! let prepared = prepare(path, ToolCallsSource::Auto, &opts)?;
//! let engine = EngineOptions::default();
//! let run = worker::run_in_process(&prepared.schedule, &engine, |_step| {});
//! let report = Report::new(prepared.report_context(&engine, None), prepared.schedule_s(), prepared.schedule.steps.len(), run);
//! eprint!("{}", report.render_text());
//! # Ok::<(), memqos_replay::PrepareError>(())
//! ```

pub mod engine;
mod input_error;
pub mod memory;
pub mod report;
pub mod run;
pub mod schedule;
pub mod tool_calls;
pub mod trace;
pub mod traces_dir;
pub mod units;
pub mod worker;

pub use engine::EngineOptions;
pub use input_error::InputError;
pub use report::{Outcome, Report, RunData, StepRecord};
pub use schedule::{Schedule, ScheduleOptions};
pub use trace::Trace;
pub use worker::WorkerConfig;

use std::path::{Path, PathBuf};

/// Where the tool calls come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallsSource {
    /// `tool_calls.json` next to the trace, if there is one (10 of the 55 haiku traces
    /// have none).
    Auto,
    /// This file; it must exist.
    File(PathBuf),
    None,
}

/// A trace with its tool calls, scheduled.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub trace: Trace,
    /// The tool-call file used, if any.
    pub tool_calls_path: Option<PathBuf>,
    pub tool_calls: Option<Vec<tool_calls::ToolCall>>,
    pub schedule: Schedule,
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The trace or the tool-call file.
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Schedule(#[from] schedule::ScheduleError),
}

/// Loads `trace_path` and its tool calls and builds the schedule.
pub fn prepare(
    trace_path: &Path,
    tool_calls: ToolCallsSource,
    opts: &ScheduleOptions,
) -> Result<Prepared, PrepareError> {
    let trace = trace::load_trace(trace_path)?;
    let tool_calls_path = match tool_calls {
        ToolCallsSource::File(p) => Some(p),
        ToolCallsSource::Auto => Some(trace_path.with_file_name("tool_calls.json")).filter(|p| p.is_file()),
        ToolCallsSource::None => None,
    };
    let calls = tool_calls_path.as_deref().map(tool_calls::load_tool_calls).transpose()?;
    let schedule = schedule::build(&trace, calls.as_deref(), opts)?;
    Ok(Prepared { trace, tool_calls_path, tool_calls: calls, schedule })
}

impl Prepared {
    pub fn schedule_s(&self) -> f64 {
        self.schedule.duration().as_secs_f64()
    }

    /// The report's header for a run of this schedule with `engine`, in `cgroup`.
    pub fn report_context(&self, engine: &EngineOptions, cgroup: Option<&Path>) -> report::ReportContext {
        report::ReportContext {
            trace: self.trace.name.clone(),
            trace_path: self.trace.path.as_ref().map(|p| p.display().to_string()),
            trace_samples: self.trace.samples.len(),
            trace_duration_s: self.trace.duration_s(),
            trace_max_used_bytes: self.trace.max_used_bytes(),
            dropped_no_container: self.trace.dropped_no_container.clone(),
            tool_calls: self.tool_calls_path.as_ref().map(|p| p.display().to_string()),
            speed: self.schedule.speed,
            baseline_bytes: self.schedule.baseline_bytes,
            chunk_bytes: memory::Memory::new(engine.chunk_bytes).chunk_size() as u64,
            compression_ratio: engine.fill.map(|f| f.ratio),
            cgroup: cgroup.map(|p| p.display().to_string()),
        }
    }

    /// The config for a worker replaying this schedule.
    pub fn worker_config(&self, engine: &EngineOptions, cgroup: Option<&Path>) -> WorkerConfig {
        WorkerConfig {
            schedule: self.schedule.clone(),
            chunk_bytes: engine.chunk_bytes,
            read_rss: engine.read_rss,
            cgroup: cgroup.map(Path::to_owned),
            pause_file: engine.pause_file.clone(),
            fill: engine.fill,
        }
    }
}
