//! memqos: priority memory QoS for cgroup v2 hosts.

mod daemon_cmd;
mod experiment_cmd;
mod generate;
mod replay_cmd;
mod stat;
mod vm_cmd;

use memqos_doctor as doctor;
use memqos_lab::{bench, demo, workload};

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
    /// Why a cgroup's knobs are what they are now: its tier and the rule that matched, its
    /// knobs vs originals, the daemon's last decisions and their reasons, what would release
    /// it. Asks the running daemon over <state_dir>/control.sock (root or `[control] group`).
    Explain(daemon_cmd::ExplainArgs),
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
    /// Run a command (an agent's tool call) in its own cgroup below the managed root:
    /// `<root>/<session>/<tier>.<pid>`, removed afterwards; exits with the command's status
    /// and explains an OOM kill on stderr. As `memqos-shell` (a symlink), a drop-in SHELL.
    Run(RunArgs),
    /// Small deterministic memory workloads (used by tests and the demo).
    #[command(subcommand, hide = true)]
    Workload(workload::WorkloadCmd),
    /// Man pages and shell completions from this CLI definition (for packaging).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

#[derive(clap::Args)]
#[command(
    after_help = "Environment: MEMQOS_ROOT, MEMQOS_CONFIG, MEMQOS_SESSION (defaults for the options), MEMQOS_FALLBACK=exec (run without a cgroup when none can be set up). Exit status: the command's, 128 + signal if a signal ended it, 125 when memqos could not set the call up, 126/127 when the command cannot be executed or found. See docs/agent-hosts.md."
)]
struct RunArgs {
    /// Tier of the call (the first part of its cgroup's name, matched by the daemon config's
    /// globs); default from --hint, else "tool".
    #[arg(long)]
    tier: Option<String>,
    /// Session the call belongs to (a cgroup below the root); default: the session this
    /// process already runs in, else $MEMQOS_SESSION, else "default".
    #[arg(long)]
    session: Option<String>,
    /// low | medium | high (tiers tool-low, tool, tool-high), or a size the call expects to
    /// need (e.g. 2G: memory.low of the call).
    #[arg(long)]
    hint: Option<String>,
    /// memory.max of the call's cgroup (e.g. 1G); default none.
    #[arg(long)]
    max: Option<String>,
    /// Run the agent runtime itself, in <session>/runtime (protected by the session config).
    #[arg(long)]
    runtime: bool,
    /// The peak the command expects to reach (e.g. 2G), declared on its cgroup as
    /// user.memqos.expected_peak: in a protected tier (the runtime's) the daemon reserves that
    /// room from the start and caps lower tiers to what is left.
    #[arg(long, value_name = "SIZE")]
    expect: Option<String>,
    /// The workload the command runs (e.g. "cargo test"), named on its cgroup as
    /// user.memqos.workload: a learn_peak tier records its peak under that key and reserves
    /// the learned peak for the next cgroup with the same key.
    #[arg(long, value_name = "KEY")]
    workload: Option<String>,
    /// The managed root (default: the config's cgroup_root, $MEMQOS_ROOT, /sys/fs/cgroup/agents).
    #[arg(long)]
    root: Option<std::path::PathBuf>,
    /// A daemon config: its cgroup_root is the root, and the call's tier is checked against it.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// After the call, a one-line summary (status, time, peak memory) on stderr.
    #[arg(long)]
    stats: bool,
    /// After the call, its report as one JSON line on stderr.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

impl From<RunArgs> for memqos_agent::Request {
    fn from(a: RunArgs) -> Self {
        memqos_agent::Request {
            root: a.root,
            config: a.config,
            session: a.session,
            tier: a.tier,
            hint: a.hint,
            max: a.max,
            runtime: a.runtime,
            expect: a.expect,
            workload: a.workload,
            json: a.json,
            stats: a.stats,
            command: a.command,
        }
    }
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
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.next().is_some_and(|a0| memqos_agent::shell::invoked_as_shell(&a0)) {
        let rest: Vec<_> = args.collect();
        let req = memqos_agent::shell::request(&rest, |k| std::env::var(k).ok());
        return ExitCode::from(memqos_agent::run(&req));
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Cmd::Daemon(_)) {
        // `memqos stat | head`: a closed pipe ends a printing command quietly, as in other
        // Unix tools, instead of a panic on the next print. Not the daemon: its control
        // socket's clients may go away mid-reply.
        // SAFETY: restoring the default disposition of one signal before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Cmd::Demo { kernel, in_guest, json } => demo::run(&kernel, in_guest, json),
        Cmd::Doctor { json } => run_doctor(json),
        Cmd::Daemon(a) => daemon_cmd::daemon(a),
        Cmd::Restore(a) => daemon_cmd::restore(a),
        Cmd::Experiment(args) => experiment_cmd::run(args),
        Cmd::Replay(args) => replay_cmd::run(args),
        Cmd::Status(a) => daemon_cmd::status(a),
        Cmd::Explain(a) => daemon_cmd::explain(a),
        Cmd::Stat(a) => stat::run(a),
        Cmd::Bench(BenchCmd::Stats(a)) => bench::stats::run(a),
        Cmd::Vm(cmd) => vm_cmd::run(cmd),
        Cmd::Workload(cmd) => workload::run(cmd),
        Cmd::Run(a) => Ok(memqos_agent::run(&a.into())),
        Cmd::Bench(BenchCmd::Reaction(a)) => bench::reaction::run(a),
        Cmd::Bench(BenchCmd::Run(a)) => bench::run::run(a),
        Cmd::Bench(BenchCmd::Churn(a)) => bench::churn::run(a),
        Cmd::Bench(BenchCmd::Faults(a)) => bench::faults::run(a),
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
    let report = doctor::collect_with(&doctor::SystemPaths::default(), Some(&doctor::privileges::Host));
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", doctor::render_text(&report));
    }
    Ok(doctor::exit_code(&report) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_takes_a_workload_key() {
        let cli =
            Cli::try_parse_from(["memqos", "run", "--workload", "cargo test", "--expect", "1G", "--", "ls"]).unwrap();
        let Cmd::Run(a) = cli.command else { panic!("not run") };
        let req: memqos_agent::Request = a.into();
        assert_eq!((req.workload.as_deref(), req.expect.as_deref()), (Some("cargo test"), Some("1G")));
        let e = Cli::try_parse_from(["memqos", "run", "--workload"]).err().expect("needs a value");
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
