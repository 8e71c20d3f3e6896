//! `memqos-docs [--check | --figure QUERY...]`: rebuilds docs/experiments/summary.json and report.md and
//! docs/agent-host/summary.json and report.md from the committed runs (the report step of
//! `memqos-lab experiment --report-only` and `experiment agent-host --report-only`, plots left
//! as they are and linked), then every generated table in the docs from them. `--check` writes
//! nothing and exits 1 if one of those files is not what the committed runs give (naming its
//! first differing line), or a doc's tables differ from what the summary gives. `--figure`
//! prints what a figure marker would hold, writing nothing. Run from the checkout's root;
//! `scripts/docs.sh` does.

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: memqos-docs [--check | --figure QUERY...]

Run from the checkout's root (scripts/docs.sh does).
  (none)           rebuild the summaries, reports and every generated table and figure
                   marker in the docs from the committed runs
  --check          write nothing; exit 1 naming what is out of date
  --figure QUERY   print the figure a `<!-- fig: QUERY -->` marker would hold, one line per
                   QUERY, e.g. --figure 'agent-host-admission-zswap-queue 7 12 memqos calls-killed'
                   (the query language: crates/experiment/src/docs/figures.rs)
  -h, --help       this text";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.first().map(String::as_str) {
        None => false,
        Some("--check") if args.len() == 1 => true,
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("--figure") if args.len() > 1 => return print_figures(&args[1..]),
        Some(_) => {
            eprintln!("memqos-docs: unexpected arguments {args:?}\n{USAGE}");
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

/// `--figure`: each query's figure on a line of its own (`QUERY: FIGURE`), from the
/// committed data (read once); an unknown query is an error naming it.
fn print_figures(queries: &[String]) -> ExitCode {
    let src = match memqos_experiment::docs::Sources::load(Path::new(".")) {
        Ok(src) => src,
        Err(e) => {
            eprintln!("memqos-docs: {e:#}");
            return ExitCode::from(1);
        }
    };
    for q in queries {
        match memqos_experiment::docs::figure(q, &src) {
            Ok(f) => println!("{q}: {f}"),
            Err(e) => {
                eprintln!("memqos-docs: --figure {q:?}: {e:#}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
