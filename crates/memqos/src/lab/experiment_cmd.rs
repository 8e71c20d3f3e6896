//! `memqos-lab experiment`: the arguments; the work is `memqos_experiment::host` (scenario files)
//! and `memqos_lab::dirty` (the dirty-page experiment).

use anyhow::Result;
use clap::{Args, Subcommand};
use memqos_experiment::host::Options;
use std::path::PathBuf;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(after_help = "\
SCENARIO is a file name under --dir without .toml (oom, contention, isolation, overhead,
sweep), a path to a scenario file, or \"all\"; `memqos-lab experiment dirty-noisy-neighbour
--help` is the dirty-page experiment, `memqos-lab experiment agent-host --help` the agent-host one. Each scenario is one guest per kernel; the
guest runs --runs runs, each run every arm (each trace alone, then each policy) in a rotated
order. Results accumulate under OUT/runs; OUT/summary.json, OUT/report.md and the plots are
rebuilt from everything there at the end (or alone with --report-only).

Example: memqos-lab experiment oom --runs 5 --kernel all")]
pub struct ExperimentArgs {
    #[command(subcommand)]
    special: Option<SpecialExperiment>,
    /// Scenarios to run.
    #[arg(required_unless_present_any = ["report_only", "list", "in_guest"])]
    scenarios: Vec<String>,
    #[command(flatten)]
    series: SeriesArgs,
    /// Where runs/, summary.json, report.md and the plots go.
    #[arg(long, default_value = "docs/experiments")]
    out: PathBuf,
    /// The scenario files.
    #[arg(long, default_value = "experiments")]
    dir: PathBuf,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

/// What every experiment series takes: how many runs, on which kernels, from which traces.
#[derive(Args)]
pub struct SeriesArgs {
    /// Runs (each run has every arm).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Number the runs from this one and add them to the results instead of replacing them:
    /// a long series in chunks (`--runs 2`, then `--runs 3 --first-run 3`), so other guests
    /// can use the machine in between.
    #[arg(long, default_value_t = 1, value_name = "N")]
    first_run: usize,
    /// Kernel series: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// The agent traces (one folder per task) [default: $MEMQOS_TRACES, else the repository's
    /// traces/agent-haiku].
    #[arg(long)]
    traces: Option<PathBuf>,
    /// Only rebuild summary, report and plots from OUT/runs.
    #[arg(long)]
    report_only: bool,
    /// Skip the plots (no matplotlib needed).
    #[arg(long)]
    no_plots: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
}

/// Experiments with their own runner (not scenario files).
#[derive(Subcommand)]
pub enum SpecialExperiment {
    /// A buffered writer floods the dirty-page pool while a rate-limited sibling writes
    /// (throttled 256 KB/s disk): stock kernel vs memqos dirty.max/dirty.min
    /// (docs/dirty-isolation.md).
    DirtyNoisyNeighbour(memqos_lab::dirty::ExperimentArgs),
    /// Many agent sessions under one host budget, a cgroup per tool call (`memqos run`):
    /// none vs static per-session peak limits vs memqos, at rising session counts
    /// (docs/agent-hosts.md, results in docs/agent-host/).
    AgentHost(AgentHostArgs),
}

#[derive(Args)]
#[command(after_help = "\
Each kernel is one guest; it runs --runs runs, each run every session's trace alone (the solo
baselines), then every level of the scenario with every arm in a rotated order. Results
accumulate under OUT/runs/<kernel>; OUT/summary.json, OUT/report.md and the plots are rebuilt
from everything there at the end (or alone with --report-only).

Example: memqos-lab experiment agent-host --runs 5 --kernel 7")]
pub struct AgentHostArgs {
    /// The scenario file.
    #[arg(long, default_value = "experiments/agent-host/scenario.toml")]
    scenario: PathBuf,
    #[command(flatten)]
    series: SeriesArgs,
    /// Where runs/, summary.json, report.md and the plots go.
    #[arg(long, default_value = "docs/agent-host")]
    out: PathBuf,
    /// Levels instead of the scenario's: "9,10,11" for every arm, "none=9,10,11" for one
    /// (repeat for more arms).
    #[arg(long, value_name = "[ARM=]N,N,...")]
    levels: Vec<String>,
    /// Run each arm at the levels inside its density bracket in OUT/summary.json not run yet
    /// (two above the largest level run where none lost a runtime): steps of one session
    /// around each arm's density after a coarse pass.
    #[arg(long)]
    refine: bool,
}

pub fn run(args: ExperimentArgs) -> Result<u8> {
    match args.special {
        Some(SpecialExperiment::DirtyNoisyNeighbour(a)) => return memqos_lab::dirty::run_cli(a),
        Some(SpecialExperiment::AgentHost(a)) => {
            let s = a.series;
            return memqos_experiment::agent_host::run(&memqos_experiment::agent_host::Options {
                scenario: a.scenario,
                runs: s.runs,
                first_run: s.first_run,
                kernel: s.kernel,
                out: a.out,
                traces: s.traces,
                report_only: s.report_only,
                no_plots: s.no_plots,
                in_guest: s.in_guest,
                levels: a.levels,
                refine: a.refine,
            });
        }
        None => {}
    }
    let s = args.series;
    memqos_experiment::host::run(&Options {
        scenarios: args.scenarios,
        runs: s.runs,
        first_run: s.first_run,
        kernel: s.kernel,
        out: args.out,
        dir: args.dir,
        traces: s.traces,
        report_only: s.report_only,
        list: args.list,
        no_plots: s.no_plots,
        in_guest: s.in_guest,
    })
}
