//! One supervised replay from start to report, as `memqos-lab replay` does it: load, schedule,
//! start the worker, print progress, write the JSON, print the summary.

use crate::report::{Progress, Report};
use crate::worker::{self, Event};
use crate::{prepare, EngineOptions, Outcome, PrepareError, ScheduleOptions, ToolCallsSource};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

#[derive(Debug, Clone, PartialEq)]
pub enum JsonOut {
    Stdout,
    File(PathBuf),
}

impl JsonOut {
    /// `-` is stdout, anything else a file path.
    pub fn from_arg(arg: PathBuf) -> JsonOut {
        if arg.as_os_str() == "-" {
            JsonOut::Stdout
        } else {
            JsonOut::File(arg)
        }
    }
}

#[derive(Debug, Clone)]
pub struct ReplayRequest {
    pub trace: PathBuf,
    pub tool_calls: ToolCallsSource,
    pub schedule: ScheduleOptions,
    pub engine: EngineOptions,
    pub cgroup: Option<PathBuf>,
    pub json: Option<JsonOut>,
    /// No plan, progress or summary on stderr.
    pub quiet: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Supervise(#[from] worker::SuperviseError),
    #[error("installing the SIGINT/SIGTERM handlers: {0}")]
    Signals(std::io::Error),
    /// The run happened but its report could not be written.
    #[error("writing the report to {to}: {error}")]
    Write { to: String, error: std::io::Error },
}

/// Exit status for a command whose run ended with `outcome`: 0 finished, 3 OOM-killed,
/// 4 killed otherwise, 5 failed. (1 and 2 stay for errors before the run and usage errors.)
pub fn exit_code(outcome: &Outcome) -> u8 {
    match outcome {
        Outcome::Finished => 0,
        Outcome::OomKilled { .. } => 3,
        Outcome::Killed { .. } => 4,
        Outcome::Failed { .. } => 5,
    }
}

/// Runs `req` in a worker started by `worker` (a command whose process calls
/// [`worker::worker_main`]). Installs SIGINT/SIGTERM handlers that stop the worker, so an
/// interrupted run still writes its report.
pub fn run_supervised(req: &ReplayRequest, worker_cmd: Command) -> Result<Report, RunError> {
    let prepared = prepare(&req.trace, req.tool_calls.clone(), &req.schedule)?;
    let say = |line: &str| {
        if !req.quiet {
            eprintln!("{line}");
        }
    };
    let t = &prepared.trace;
    say(&format!(
        "replay: {} ({} samples, {:.1} s, max {:.1} MB{}) at {}x = {:.3} s, baseline {} MiB{}",
        t.name,
        t.samples.len(),
        t.duration_s(),
        t.max_used_bytes() as f64 / 1e6,
        match &prepared.tool_calls {
            Some(c) => format!(", {} tool calls", c.len()),
            None => String::new(),
        },
        req.schedule.speed,
        prepared.schedule_s(),
        req.schedule.baseline_bytes as f64 / (1u64 << 20) as f64,
        match &req.cgroup {
            Some(cg) => format!(", worker in {}", cg.display()),
            None => String::new(),
        },
    ));
    // Opened before the run, so a bad path fails now rather than after a long replay.
    let json_file = match &req.json {
        Some(JsonOut::File(p)) => {
            Some(std::fs::File::create(p).map_err(|error| RunError::Write { to: p.display().to_string(), error })?)
        }
        _ => None,
    };
    let stop = worker::install_stop_handlers().map_err(RunError::Signals)?;
    let cfg = prepared.worker_config(&req.engine, req.cgroup.as_deref());
    let mut progress = Progress::new(prepared.schedule.steps.len());
    let run = worker::supervise(worker_cmd, &cfg, Some(stop), |ev| {
        if let Event::Step(rec) = ev {
            if let Some(line) = progress.line(rec) {
                say(&line);
            }
        }
    })?;
    let ctx = prepared.report_context(&req.engine, req.cgroup.as_deref());
    let report = Report::new(ctx, prepared.schedule_s(), prepared.schedule.steps.len(), run);
    if !req.quiet {
        eprint!("{}", report.render_text());
    }
    match (&req.json, json_file) {
        (Some(JsonOut::File(p)), Some(mut f)) => write_json(&report, &mut f, &p.display().to_string())?,
        (Some(JsonOut::Stdout), _) => write_json(&report, &mut std::io::stdout().lock(), "stdout")?,
        _ => {}
    }
    Ok(report)
}

/// Pretty JSON and a newline; `to` names the destination in errors.
pub fn write_json(report: &Report, out: &mut impl Write, to: &str) -> Result<(), RunError> {
    let mut text = serde_json::to_vec_pretty(report).map_err(|e| RunError::Write { to: to.into(), error: e.into() })?;
    text.push(b'\n');
    out.write_all(&text).and_then(|()| out.flush()).map_err(|error| RunError::Write { to: to.into(), error })
}
