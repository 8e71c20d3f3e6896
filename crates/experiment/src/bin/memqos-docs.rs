//! `memqos-docs [--check]`: rebuilds docs/experiments/summary.json and report.md and
//! docs/agent-host/summary.json and report.md from the committed runs (the report step of
//! `memqos-lab experiment --report-only` and `experiment agent-host --report-only`, plots left
//! as they are and linked), then every generated table in the docs from them. `--check` writes
//! nothing and exits 1 if one of those files is not what the committed runs give (naming its
//! first differing line), or a doc's tables differ from what the summary gives. Run from the
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
        // The files first: in update mode the tables are then made from the new summary.
        let mut stale = memqos_experiment::docs::files::update(root, !check)?;
        stale.extend(memqos_experiment::docs::update(root, !check)?);
        Ok(stale)
    })();
    match result {
        Ok(stale) if check && !stale.is_empty() => {
            eprintln!("memqos-docs: out of date (run bash scripts/docs.sh):");
            for s in &stale {
                eprintln!("  {s}");
            }
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
