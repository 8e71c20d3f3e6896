//! `memqos-docs [--check]`: rebuilds docs/experiments/summary.json and report.md from the
//! committed runs (the report step of `memqos-lab experiment --report-only`, plots left as they
//! are), then every generated table in the docs from them. `--check` rebuilds nothing and
//! exits 1 if the committed summary.json is not what the committed runs give, or a doc's
//! tables differ from what the summary gives. Run from the checkout's root; `scripts/docs.sh`
//! does.

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
        let (out, traces) = (root.join("docs/experiments"), root.join("traces/agent-haiku"));
        if !check {
            memqos_experiment::host::report(&out, &traces, false)?;
        } else if !memqos_experiment::host::summary_is_current(&out, &traces)? {
            return Ok(vec!["docs/experiments/summary.json (not what the runs give)".to_string()]);
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
