//! The split between the two binaries: `memqos` (packaged) carries the node agent and the user
//! commands only; `memqos-lab` carries the lab's commands and also runs the product ones, which
//! the lab re-executes in guests (the daemon, `run`, the workloads). Host-only.

use std::process::Command;

const LAB_COMMANDS: [&str; 6] = ["demo", "experiment", "vm", "bench", "replay", "workload"];
const PRODUCT_COMMANDS: [&str; 8] = ["daemon", "restore", "status", "explain", "doctor", "init", "stat", "run"];

/// The names under "Commands:" in `bin --help`.
fn listed(bin: &str) -> Vec<String> {
    let out = Command::new(bin).arg("--help").output().expect("run --help");
    assert!(out.status.success(), "{bin} --help failed");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn accepts(bin: &str, command: &str) -> bool {
    Command::new(bin).args([command, "--help"]).output().expect("run").status.success()
}

#[test]
fn memqos_has_no_lab_command() {
    let bin = env!("CARGO_BIN_EXE_memqos");
    let listed = listed(bin);
    for c in PRODUCT_COMMANDS {
        assert!(listed.iter().any(|l| l == c), "memqos --help lacks {c}: {listed:?}");
    }
    for c in LAB_COMMANDS {
        assert!(!listed.iter().any(|l| l == c), "memqos --help lists the lab command {c}");
        assert!(!accepts(bin, c), "memqos accepts the lab command {c}");
    }
}

#[test]
fn memqos_lab_runs_the_lab_and_the_product_commands() {
    let bin = env!("CARGO_BIN_EXE_memqos-lab");
    let listed = listed(bin);
    for c in LAB_COMMANDS.iter().filter(|&&c| c != "workload") {
        assert!(listed.iter().any(|l| l == c), "memqos-lab --help lacks {c}: {listed:?}");
    }
    for c in LAB_COMMANDS.iter().chain(&PRODUCT_COMMANDS) {
        assert!(accepts(bin, c), "memqos-lab does not accept {c}");
    }
}
