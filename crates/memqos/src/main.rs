//! memqos: priority memory QoS for cgroup v2 hosts. The packaged binary: the node agent and
//! the user commands (the lab's commands are `memqos-lab`, never packaged).

use clap::{CommandFactory, Parser};
use memqos_cli::Cmd;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "memqos", version, about = "Priority memory QoS for cgroup v2 hosts", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

fn main() -> ExitCode {
    if let Some(code) = memqos_cli::run_as_shell() {
        return code;
    }
    let cli = Cli::parse();
    if !cli.command.is_daemon() {
        memqos_cli::quiet_sigpipe();
    }
    memqos_cli::exit("memqos", cli.command.run(Cli::command))
}
