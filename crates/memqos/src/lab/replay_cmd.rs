//! `memqos-lab replay`: an agent's memory trace (resources.json) replayed as a real workload.
//! The engine is the memqos-replay crate; this is its command line.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use memqos_replay::run::{exit_code, run_supervised, JsonOut, ReplayRequest};
use memqos_replay::{worker, EngineOptions, ScheduleOptions, ToolCallsSource};
use std::path::PathBuf;
use std::process::Command;

#[derive(Args)]
#[command(after_help = "\
The workload maps and touches anonymous memory to follow the trace's used value plus the
baseline, and unmaps to shrink. It runs in a child process (only the child joins --cgroup),
so an OOM kill is reported, not suffered.

Exit status: 0 finished, 3 OOM-killed, 4 killed by another signal, 5 the workload failed,
1 the trace or cgroup could not be used.")]
pub struct ReplayArgs {
    /// The trace's resources.json.
    #[arg(required_unless_present = "worker")]
    trace: Option<PathBuf>,
    /// Time compression: sample i happens (epoch_i - epoch_0) / SPEED seconds after the start.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// MiB held on top of the trace's value throughout (target = used + baseline), allocated
    /// before the replay's clock starts. The seed experiment used 100.
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    baseline_mb: u64,
    /// Run the workload in this cgroup v2 directory (memqos-lab replay itself stays where it is).
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Write the JSON report here; "-" is stdout.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Tool calls to mark steps with [default: tool_calls.json next to TRACE, if present].
    #[arg(long, value_name = "FILE")]
    tool_calls: Option<PathBuf>,
    /// Size of each anonymous mapping the workload grows by.
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    chunk_kib: usize,
    /// Fill each grown page so that compressed swap (zswap, zram) stores it in 1/RATIO of a
    /// page, as it stores a runtime's heap (2–4:1); 1 is incompressible, at most 64. The
    /// default 3 is the middle of the figures zram reports for application heaps.
    #[arg(long, value_name = "RATIO", default_value_t = memqos_replay::memory::PageFill::DEFAULT_RATIO)]
    compression_ratio: f64,
    /// While FILE exists the replay's clock stands still: no step runs, and the rest of the
    /// schedule moves later by as long as it existed (the agent-host experiment pauses a
    /// runtime while its tool call runs late).
    #[arg(long, value_name = "FILE")]
    pause_file: Option<PathBuf>,
    /// No plan, progress or summary on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Run as the workload process (started by `memqos-lab replay` itself).
    #[arg(long, hide = true)]
    worker: bool,
}

pub fn run(args: ReplayArgs) -> Result<u8> {
    if args.worker {
        return Ok(worker::worker_main());
    }
    let trace = args.trace.ok_or_else(|| anyhow!("a TRACE (resources.json) is required"))?;
    let baseline_bytes = args
        .baseline_mb
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("--baseline-mb {} is too large", args.baseline_mb))?;
    let chunk_bytes =
        args.chunk_kib.checked_mul(1 << 10).ok_or_else(|| anyhow!("--chunk-kib {} is too large", args.chunk_kib))?;
    let fill = memqos_replay::memory::PageFill::new(args.compression_ratio)
        .map_err(|e| anyhow!("--compression-ratio: {e}"))?;
    let req = ReplayRequest {
        trace,
        tool_calls: args.tool_calls.map_or(ToolCallsSource::Auto, ToolCallsSource::File),
        schedule: ScheduleOptions { speed: args.speed, baseline_bytes },
        engine: EngineOptions { chunk_bytes, read_rss: true, pause_file: args.pause_file, fill: Some(fill) },
        cgroup: args.cgroup,
        json: args.json.map(JsonOut::from_arg),
        quiet: args.quiet,
    };
    // The worker is this binary again, as `memqos-lab replay --worker`.
    let mut worker_cmd = Command::new(std::env::current_exe().context("locating the memqos binary")?);
    worker_cmd.args(["replay", "--worker"]);
    let report = run_supervised(&req, worker_cmd)?;
    Ok(exit_code(&report.summary.outcome))
}
