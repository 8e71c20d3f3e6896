//! memqos-lab: the lab's commands (the demo, experiments, benchmarks, guests, workloads and
//! trace replay), never packaged. It also runs every `memqos` command: the lab re-executes
//! this binary inside guests as the daemon, `memqos run` and the workloads, so one file
//! copied into a guest is all a lab command needs there.

mod experiment_cmd;
mod replay_cmd;
mod vm_cmd;

use clap::{CommandFactory, Parser, Subcommand};
use memqos_lab::{bench, demo, workload};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "memqos-lab",
    version,
    about = "The memqos lab: demo, experiments and benchmarks in real-kernel guests (also runs every memqos command)",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot real kernels in QEMU and show memqos at work inside them.
    Demo {
        /// Kernel series: "6.12", "7", "6.12,7" or "all".
        #[arg(long, default_value = "all")]
        kernel: String,
        #[arg(long, hide = true)]
        in_guest: bool,
        /// With --in-guest: run only the controller scenario and print it as JSON.
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Run the isolation experiments (scenarios in experiments/) or the dirty-page
    /// noisy-neighbour experiment in real-kernel guests.
    Experiment(experiment_cmd::ExperimentArgs),
    /// Boot real Debian kernels in QEMU guests and run commands inside them.
    #[command(subcommand)]
    Vm(vm_cmd::VmCmd),
    /// Benchmarks: statistics reading (host or guest) and reaction delay (guests).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Replay an agent's memory trace (resources.json) as a workload, optionally in a cgroup.
    Replay(replay_cmd::ReplayArgs),
    /// Small deterministic memory workloads (used by tests and the demo).
    #[command(subcommand, hide = true)]
    Workload(workload::WorkloadCmd),
    /// The product commands, as `memqos` runs them.
    #[command(flatten)]
    Product(memqos_cli::Cmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Reading memcg statistics: the seeds' C/fscanf control vs memqos's text and BPF backends.
    Stats(bench::stats::BenchStatsArgs),
    /// Delay from a protected cgroup starting to reclaim to the first memory.high write on a
    /// lower tier, per signal source (BPF, PSI, memory.events).
    Reaction(bench::reaction::ReactionArgs),
    /// What `memqos run` adds to a call vs a plain exec, in guests (docs/agent/run-overhead.json).
    Run(bench::run::BenchRunArgs),
    /// The daemon under tool-call cgroup churn: knobs on new cgroups, RSS, CPU, journal size
    /// (docs/agent/churn.json).
    Churn(bench::churn::ChurnArgs),
    /// The fault campaign in guests: SIGKILLs under churn, a hostile tenant, a full and a
    /// read-only state_dir, 10,000 cgroups at 1,024 open files (docs/reliability.md).
    Faults(bench::faults::FaultsArgs),
    /// Whether cutting many lower cgroups holds the daemon's loop: a batch of memory.high
    /// cuts under zswap, before (blocking writes) and after (worker pool, O_NONBLOCK)
    /// (docs/results/limits.json).
    Limits(bench::limits::LimitsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(&cli.command, Cmd::Product(c) if c.is_daemon()) {
        memqos_cli::quiet_sigpipe();
    }
    let result = match cli.command {
        Cmd::Demo { kernel, in_guest, json } => demo::run(&kernel, in_guest, json),
        Cmd::Experiment(args) => experiment_cmd::run(args),
        Cmd::Vm(cmd) => vm_cmd::run(cmd),
        Cmd::Bench(BenchCmd::Stats(a)) => bench::stats::run(a),
        Cmd::Bench(BenchCmd::Reaction(a)) => bench::reaction::run(a),
        Cmd::Bench(BenchCmd::Run(a)) => bench::run::run(a),
        Cmd::Bench(BenchCmd::Churn(a)) => bench::churn::run(a),
        Cmd::Bench(BenchCmd::Faults(a)) => bench::faults::run(a),
        Cmd::Bench(BenchCmd::Limits(a)) => bench::limits::run(a),
        Cmd::Replay(args) => replay_cmd::run(args),
        Cmd::Workload(cmd) => workload::run(cmd),
        Cmd::Product(cmd) => cmd.run(Cli::command),
    };
    memqos_cli::exit("memqos-lab", result)
}
