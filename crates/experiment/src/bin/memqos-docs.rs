//! `memqos-docs [--check]`: rebuilds docs/experiments/summary.json and report.md from the
//! committed runs (the report step of `memqos experiment --report-only`, plots left as they
//! are), then every generated table in the docs from them. `--check` rebuilds nothing and
//! exits 1 if a doc's tables differ from what the committed summary gives. Run from the
//! checkout's root; `scripts/docs.sh` does.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("memqos-docs: unknown argument {other:?} (usage: memqos-docs [--check])");
            return ExitCode::from(2);
        }
    };
    let root = Path::new(".");
    let result = (|| -> anyhow::Result<Vec<String>> {
        if !check {
            memqos_experiment::host::report(&root.join("docs/experiments"), &root.join("traces/agent-haiku"), false)?;
        }
        memqos_experiment::docs::update(root, !check)
    })();
    match result {
        Ok(stale) if check && !stale.is_empty() => {
            eprintln!("memqos-docs: out of date (run bash scripts/docs.sh): {}", stale.join(", "));
            ExitCode::from(1)
        }
        Ok(stale) => {
            for s in &stale {
                println!("memqos-docs: regenerated {s}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memqos-docs: {e:#}");
            ExitCode::from(1)
        }
    }
}
