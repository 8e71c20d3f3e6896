//! `memqos-docs` as a user runs it: help, one figure read from the committed data, and
//! errors that name what is wrong. Run from the checkout's root, as scripts/docs.sh does.

use std::path::Path;
use std::process::{Command, Output};

fn memqos_docs(args: &[&str]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(env!("CARGO_BIN_EXE_memqos-docs")).args(args).current_dir(root).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_names_every_mode() {
    let out = memqos_docs(&["--help"]);
    assert!(out.status.success());
    for mode in ["--check", "--figure QUERY", "--help"] {
        assert!(text(&out.stdout).contains(mode), "{mode} missing from --help");
    }
}

#[test]
fn a_figure_is_printed_as_its_marker_would_hold_it() {
    let query = "agent-host-admission-zswap-queue 7 12 memqos runtimes-killed";
    let out = memqos_docs(&["--figure", query, "agent-host-admission-zswap-queue 7 12 none calls-killed"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2);
    let runtimes = lines[0].strip_prefix(&format!("{query}: ")).unwrap();
    assert!(runtimes.parse::<u64>().is_ok(), "{runtimes:?}");
    assert!(lines[1].contains(" of "), "{}", lines[1]);
}

#[test]
fn a_bad_query_or_argument_is_an_error_naming_it() {
    let out = memqos_docs(&["--figure", "agent-host-admission-zswap-queue 7 12 memqos speed"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown agent-host measure \"speed\""), "{}", text(&out.stderr));
    let out = memqos_docs(&["--chek"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--chek") && text(&out.stderr).contains("usage:"));
    let out = memqos_docs(&["--figure"]);
    assert_eq!(out.status.code(), Some(2));
}
