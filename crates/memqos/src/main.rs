//! memqos: priority memory QoS for cgroup v2 hosts.

mod bench_reaction;
mod bench_stats;
mod daemon_cmd;
mod demo;
mod dirty;
mod doctor;
mod experiment_cmd;
mod generate;
mod replay_cmd;
mod scenario;
mod stat;
mod vm_cmd;
mod workload;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "memqos", version, about = "Priority memory QoS for cgroup v2 hosts", long_about = None)]
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
    /// Run the priority controller on a cgroup subtree (see --config).
    Daemon(daemon_cmd::DaemonArgs),
    /// Put back every knob a (crashed) daemon changed, from its journal.
    Restore(daemon_cmd::RestoreArgs),
    /// What the running daemon manages: tiers, knobs vs originals, pressure, last decisions.
    Status(daemon_cmd::StatusArgs),
    /// Replay an agent's memory trace (resources.json) as a workload, optionally in a cgroup.
    Replay(replay_cmd::ReplayArgs),
    /// Run the isolation experiments (scenarios in experiments/) or the dirty-page
    /// noisy-neighbour experiment in real-kernel guests.
    Experiment(experiment_cmd::ExperimentArgs),
    /// Check whether memqos can run on this machine and which kernel interfaces it will use.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// memcg statistics of a cgroup subtree (table, --json or --prom), from one snapshot.
    Stat(stat::StatArgs),
    /// Boot real Debian kernels in QEMU guests and run commands inside them.
    #[command(subcommand)]
    Vm(vm_cmd::VmCmd),
    /// Benchmarks: statistics reading (host or guest) and reaction delay (guests).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Small deterministic memory workloads (used by tests and the demo).
    #[command(subcommand, hide = true)]
    Workload(workload::WorkloadCmd),
    /// Man pages and shell completions from this CLI definition (for packaging).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Reading memcg statistics: the seeds' C/fscanf control vs memqos's text and BPF backends.
    Stats(bench_stats::BenchStatsArgs),
    /// Delay from a protected cgroup starting to reclaim to the first memory.high write on a
    /// lower tier, per signal source (BPF, PSI, memory.events).
    Reaction(bench_reaction::ReactionArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Demo { kernel, in_guest, json } => demo::run(&kernel, in_guest, json),
        Cmd::Doctor { json } => run_doctor(json),
        Cmd::Daemon(a) => daemon_cmd::daemon(a),
        Cmd::Restore(a) => daemon_cmd::restore(a),
        Cmd::Experiment(args) => experiment_cmd::run(args),
        Cmd::Replay(args) => replay_cmd::run(args),
        Cmd::Status(a) => daemon_cmd::status(a),
        Cmd::Stat(a) => stat::run(a),
        Cmd::Bench(BenchCmd::Stats(a)) => bench_stats::run(a),
        Cmd::Vm(cmd) => vm_cmd::run(cmd),
        Cmd::Workload(cmd) => workload::run(cmd),
        Cmd::Bench(BenchCmd::Reaction(a)) => bench_reaction::run(a),
        Cmd::Generate(a) => generate::run(a, Cli::command()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("memqos: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run_doctor(json: bool) -> anyhow::Result<u8> {
    let report = doctor::collect(&doctor::SystemPaths::default());
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", doctor::render_text(&report));
    }
    Ok(doctor::exit_code(&report) as u8)
}
