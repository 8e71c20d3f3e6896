//! The `memqos` command line: the product commands (the node agent and the user commands),
//! shared by the two binaries. `memqos` (`src/main.rs`, the packaged one) runs these alone;
//! `memqos-lab` (`src/lab/main.rs`) adds the lab's commands and also runs these, because the
//! lab re-executes itself as the daemon, `run` and the workloads inside guests.

mod daemon_cmd;
mod generate;
mod init;
mod stat;

use memqos_doctor as doctor;

use clap::Subcommand;
use std::process::ExitCode;

/// The product commands, as `memqos` lists them.
#[derive(Subcommand)]
pub enum Cmd {
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
    /// Check whether memqos can run on this machine and which kernel interfaces it will use.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the daemon's config from a profile (systemd, kubernetes, agent-host) after checking
    /// the host as `doctor` does; says what it chose and why.
    Init(init::InitArgs),
    /// memcg statistics of a cgroup subtree (table, --json or --prom), from one snapshot.
    Stat(stat::StatArgs),
    /// Run a command (an agent's tool call) in its own cgroup below the managed root:
    /// `<root>/<session>/<tier>.<pid>`, removed afterwards; exits with the command's status
    /// and explains an OOM kill on stderr. As `memqos-shell` (a symlink), a drop-in SHELL.
    Run(RunArgs),
    /// Man pages and shell completions from this CLI definition (for packaging).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

impl Cmd {
    /// Runs the command; `cli` is the whole command line's definition (for `generate`).
    pub fn run(self, cli: impl FnOnce() -> clap::Command) -> anyhow::Result<u8> {
        match self {
            Cmd::Doctor { json } => run_doctor(json),
            Cmd::Daemon(a) => daemon_cmd::daemon(a),
            Cmd::Restore(a) => daemon_cmd::restore(a),
            Cmd::Status(a) => daemon_cmd::status(a),
            Cmd::Explain(a) => daemon_cmd::explain(a),
            Cmd::Init(a) => init::run(a),
            Cmd::Stat(a) => stat::run(a),
            Cmd::Run(a) => Ok(memqos_agent::run(&a.into())),
            Cmd::Generate(a) => generate::run(a, cli()),
        }
    }

    /// The daemon keeps SIGPIPE ignored; every other command ends quietly on a closed pipe
    /// ([`quiet_sigpipe`]).
    pub fn is_daemon(&self) -> bool {
        matches!(self, Cmd::Daemon(_))
    }
}

/// As `memqos-shell` (a symlink to the binary), a drop-in SHELL: runs `-c CMD` through
/// `memqos run`. None when invoked under another name.
pub fn run_as_shell() -> Option<ExitCode> {
    let mut args = std::env::args_os();
    if !args.next().is_some_and(|a0| memqos_agent::shell::invoked_as_shell(&a0)) {
        return None;
    }
    let rest: Vec<_> = args.collect();
    let req = memqos_agent::shell::request(&rest, |k| std::env::var(k).ok());
    Some(ExitCode::from(memqos_agent::run(&req)))
}

/// `memqos stat | head`: a closed pipe ends a printing command quietly, as in other Unix
/// tools, instead of a panic on the next print. Not for the daemon: its control socket's
/// clients may go away mid-reply.
pub fn quiet_sigpipe() {
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The process's exit status from a command's result; an error is printed as `<bin>: error:`.
pub fn exit(bin: &str, result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{bin}: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[derive(clap::Args)]
#[command(
    after_help = "Environment: MEMQOS_ROOT, MEMQOS_CONFIG, MEMQOS_SESSION, MEMQOS_STATE_DIR (defaults for the options), MEMQOS_FALLBACK=exec (run without a cgroup when none can be set up). Exit status: the command's, 128 + signal if a signal ended it, 125 when memqos could not set the call up, 126/127 when the command cannot be executed or found. See docs/agent-hosts.md."
)]
pub struct RunArgs {
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
    /// room from the start and caps lower tiers to what is left; in a throttle tool tier
    /// with `admission = true` the call waits before it starts until the daemon has that
    /// much room (at most admission_wait_ms), then is armed at it, and the daemon keeps that
    /// room promised to it while it runs.
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
    /// Say on stderr whether the call's memory ceiling was armed (and why not), and whether
    /// memqos run lifted it.
    #[arg(long, short)]
    verbose: bool,
    /// The daemon's state directory, where its allowances for new calls are (default:
    /// $MEMQOS_STATE_DIR, the config's state_dir, /run/memqos). With `admission = true`
    /// in the daemon's config, the call's memory.high is armed at its tier's allowance before
    /// it starts, so a burst waits instead of ending in an OOM kill; without a live daemon
    /// nothing is armed.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
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
            verbose: a.verbose,
            state_dir: a.state_dir,
            command: a.command,
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
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

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
