//! `memqos-lab replay` without the memqos binary, for trying the replayer on its own:
//!
//!     cargo run --release -p memqos-replay --example replay -- TRACE [--speed X]
//!         [--baseline-mb N] [--cgroup PATH] [--json OUT|-] [--tool-calls FILE] [--quiet]
//!
//! It re-executes itself with `--worker` to run the workload, as memqos does.

use memqos_replay::run::{exit_code, run_supervised, JsonOut, ReplayRequest};
use memqos_replay::{worker, EngineOptions, ScheduleOptions, ToolCallsSource};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return ExitCode::from(worker::worker_main());
    }
    match parse(&args) {
        Ok(req) => {
            let worker_cmd = {
                let mut c = Command::new(std::env::current_exe().expect("current_exe"));
                c.arg("--worker");
                c
            };
            match run_supervised(&req, worker_cmd) {
                Ok(report) => ExitCode::from(exit_code(&report.summary.outcome)),
                Err(e) => {
                    eprintln!("replay: error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[String]) -> Result<ReplayRequest, String> {
    let mut req = ReplayRequest {
        trace: PathBuf::new(),
        tool_calls: ToolCallsSource::Auto,
        schedule: ScheduleOptions::default(),
        engine: EngineOptions::default(),
        cgroup: None,
        json: None,
        quiet: false,
    };
    let mut it = args.iter();
    let mut trace = None;
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--speed" => req.schedule.speed = value()?.parse().map_err(|e| format!("--speed: {e}"))?,
            "--baseline-mb" => {
                let mb: u64 = value()?.parse().map_err(|e| format!("--baseline-mb: {e}"))?;
                req.schedule.baseline_bytes = mb << 20;
            }
            "--cgroup" => req.cgroup = Some(value()?.into()),
            "--json" => req.json = Some(JsonOut::from_arg(value()?.into())),
            "--tool-calls" => req.tool_calls = ToolCallsSource::File(value()?.into()),
            "--quiet" | "-q" => req.quiet = true,
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if trace.is_none() => trace = Some(PathBuf::from(s)),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    req.trace = trace.ok_or(
        "usage: replay TRACE [--speed X] [--baseline-mb N] [--cgroup PATH] [--json OUT] [--tool-calls FILE] [--quiet]",
    )?;
    Ok(req)
}
