//! `memqos experiment`: the arguments; the work is `memqos_experiment::host` (scenario files)
//! and `memqos_lab::dirty` (the dirty-page experiment).

use anyhow::Result;
use clap::{Args, Subcommand};
use memqos_experiment::host::Options;
use std::path::PathBuf;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(after_help = "\
SCENARIO is a file name under --dir without .toml (oom, contention, isolation, overhead,
sweep), a path to a scenario file, or \"all\"; `memqos experiment dirty-noisy-neighbour
--help` is the dirty-page experiment, `memqos experiment agent-host --help` the agent-host one. Each scenario is one guest per kernel; the
guest runs --runs runs, each run every arm (each trace alone, then each policy) in a rotated
order. Results accumulate under OUT/runs; OUT/summary.json, OUT/report.md and the plots are
rebuilt from everything there at the end (or alone with --report-only).

Example: memqos experiment oom --runs 5 --kernel all")]
pub struct ExperimentArgs {
    #[command(subcommand)]
    special: Option<SpecialExperiment>,
    /// Scenarios to run.
    #[arg(required_unless_present_any = ["report_only", "list", "in_guest"])]
    scenarios: Vec<String>,
    /// Runs per scenario (each run has every arm).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Number the runs from this one and add them to the scenario's results instead of
    /// replacing them: a long series in chunks (`--runs 2`, then `--runs 3 --first-run 3`), so
    /// other guests can use the machine in between.
    #[arg(long, default_value_t = 1, value_name = "N")]
    first_run: usize,
    /// Kernel series: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// Where runs/, summary.json, report.md and the plots go.
    #[arg(long, default_value = "docs/experiments")]
    out: PathBuf,
    /// The scenario files.
    #[arg(long, default_value = "experiments")]
    dir: PathBuf,
    /// The agent traces (one folder per task) [default: $MEMQOS_TRACES, else the repository's
    /// traces/agent-haiku].
    #[arg(long)]
    traces: Option<PathBuf>,
    /// Only rebuild summary, report and plots from OUT/runs.
    #[arg(long)]
    report_only: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
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

Example: memqos experiment agent-host --runs 5 --kernel 7")]
pub struct AgentHostArgs {
    /// The scenario file.
    #[arg(long, default_value = "experiments/agent-host/scenario.toml")]
    scenario: PathBuf,
    /// Runs (each run has every level and arm).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Number the runs from this one and add them to the results instead of replacing them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    first_run: usize,
    /// Kernel series: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// Where runs/, summary.json, report.md and the plots go.
    #[arg(long, default_value = "docs/agent-host")]
    out: PathBuf,
    /// The agent traces [default: $MEMQOS_TRACES, else the repository's traces/agent-haiku].
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

pub fn run(args: ExperimentArgs) -> Result<u8> {
    match args.special {
        Some(SpecialExperiment::DirtyNoisyNeighbour(a)) => return memqos_lab::dirty::run_cli(a),
        Some(SpecialExperiment::AgentHost(a)) => {
            return memqos_experiment::agent_host::run(&memqos_experiment::agent_host::Options {
                scenario: a.scenario,
                runs: a.runs,
                first_run: a.first_run,
                kernel: a.kernel,
                out: a.out,
                traces: a.traces,
                report_only: a.report_only,
                no_plots: a.no_plots,
                in_guest: a.in_guest,
            })
        }
        None => {}
    }
    memqos_experiment::host::run(&Options {
        scenarios: args.scenarios,
        runs: args.runs,
        first_run: args.first_run,
        kernel: args.kernel,
        out: args.out,
        dir: args.dir,
        traces: args.traces,
        report_only: args.report_only,
        list: args.list,
        no_plots: args.no_plots,
        in_guest: args.in_guest,
    })
}
