//! The report step's own files in the checkout (summary.json and report.md of
//! docs/experiments and of each agent-host series), rebuilt in memory from the committed runs by the
//! functions `--report-only` writes them with, so a file committed by an older build, or
//! edited by hand, is caught. The plots are PNGs and are not compared. The configuration
//! reference (docs/guide/configuration.md, packaging/memqos.toml.5) is regenerated here too,
//! from `memqos_policy::config::reference`.

use anyhow::{Context, Result};
use std::path::Path;

/// The agent-host series in the checkout, each with the scenario file it ran (docs/agent-host
/// is what `memqos-lab experiment agent-host` writes with its default scenario).
const AGENT_HOST_SERIES: &[(&str, &str)] = &[
    (super::agent_host::OPEN_LOOP, "experiments/agent-host/scenario.toml"),
    (super::agent_host::CLOSED_LOOP, "experiments/agent-host/scenario.toml"),
    ("docs/agent-host-admission", "experiments/agent-host/admission.toml"),
    ("docs/agent-host-admission-wait", "experiments/agent-host/admission.toml"),
    ("docs/agent-host-admission-release", "experiments/agent-host/admission.toml"),
    ("docs/agent-host-admission-zswap", "experiments/agent-host/admission-zswap.toml"),
    ("docs/agent-host-admission-zswap-queue", "experiments/agent-host/admission-zswap-queue.toml"),
    ("docs/agent-host-admission-queue", "experiments/agent-host/admission-queue.toml"),
    ("docs/agent-host-admission-declared", "experiments/agent-host/admission-declared.toml"),
    ("docs/agent-host-admission-declared-long-wait", "experiments/agent-host/admission-declared-long-wait.toml"),
    ("docs/agent-host-admission-declared-exact", "experiments/agent-host/admission-declared.toml"),
    ("docs/agent-host-admission-declared-room", "experiments/agent-host/admission-declared.toml"),
    ("docs/agent-host-admission-declared-room-long-wait", "experiments/agent-host/admission-declared-long-wait.toml"),
    ("docs/agent-host-admission-declared-promise", "experiments/agent-host/admission-declared-long-wait.toml"),
    ("docs/agent-host-admission-declared-largest", "experiments/agent-host/admission-declared-largest.toml"),
    ("docs/agent-host-admission-declared-kept", "experiments/agent-host/admission-declared-long-wait.toml"),
    ("docs/agent-host-admission-zswap-queue-kept", "experiments/agent-host/admission-zswap-queue.toml"),
];

/// Every such file, relative to `root`, with the text the committed runs give.
pub fn expected(root: &Path) -> Result<Vec<(String, String)>> {
    let experiments = root.join("docs/experiments");
    let mut out = Vec::new();
    for (name, text) in crate::host::rendered(&experiments, &root.join("traces/agent-haiku"))? {
        out.push((format!("docs/experiments/{name}"), text));
    }
    for (dir, scenario) in AGENT_HOST_SERIES {
        for (name, text) in crate::agent_host::rendered(&root.join(dir), &root.join(scenario))? {
            out.push((format!("{dir}/{name}"), text));
        }
    }
    // Not from runs: the configuration reference, from the config code's table of keys.
    for (rel, text) in memqos_policy::config::reference::files() {
        out.push((rel.to_string(), text));
    }
    Ok(out)
}

/// Rewrites (or, with `write` false, only checks) each file of [`expected`] under `root`;
/// returns one line per file that was (or would be) changed, naming its first differing line.
pub fn update(root: &Path, write: bool) -> Result<Vec<String>> {
    let mut stale = Vec::new();
    for (rel, text) in expected(root)? {
        let path = root.join(&rel);
        // A generated file not committed yet is made.
        let committed = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            read => read.with_context(|| format!("reading {}", path.display()))?,
        };
        if let Some(diff) = first_difference(&committed, &text) {
            stale.push(format!("{rel}: {diff}"));
            if write {
                std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(stale)
}

/// Where `committed` first differs from `expected`, by line (1-based); `None` if they are equal.
pub fn first_difference(committed: &str, expected: &str) -> Option<String> {
    if committed == expected {
        return None;
    }
    let (mut a, mut b) = (committed.split('\n'), expected.split('\n'));
    let mut line = 1;
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            (Some(x), Some(y)) => {
                return Some(format!("line {line} is {:?}, the runs give {:?}", clip(x), clip(y)));
            }
            (Some(_), None) => return Some(format!("has lines from {line} on that the runs do not give")),
            (None, Some(y)) => return Some(format!("ends before line {line}, which the runs give as {:?}", clip(y))),
            // Equal line by line but not as text: cannot happen with one separator.
            (None, None) => return Some("differs".into()),
        }
    }
}

/// A report's table row can be long; the start of it is enough to find it.
fn clip(line: &str) -> String {
    const MAX: usize = 160;
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed summaries and reports are what the committed runs give: a file committed
    /// by an older build, or edited by hand, fails here.
    #[test]
    fn report_files_match_the_committed_runs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let stale = update(&root, false).unwrap();
        assert!(
            stale.is_empty(),
            "committed summary/report files differ from what the runs give (run bash scripts/docs.sh): {stale:?}"
        );
        // The check can fail: every file is compared, and a changed figure in one is caught.
        let files = expected(&root).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "docs/experiments/summary.json",
                "docs/experiments/report.md",
                "docs/agent-host/summary.json",
                "docs/agent-host/report.md",
                "docs/agent-host-closed/summary.json",
                "docs/agent-host-closed/report.md",
                "docs/agent-host-admission/summary.json",
                "docs/agent-host-admission/report.md",
                "docs/agent-host-admission-wait/summary.json",
                "docs/agent-host-admission-wait/report.md",
                "docs/agent-host-admission-release/summary.json",
                "docs/agent-host-admission-release/report.md",
                "docs/agent-host-admission-zswap/summary.json",
                "docs/agent-host-admission-zswap/report.md",
                "docs/agent-host-admission-zswap-queue/summary.json",
                "docs/agent-host-admission-zswap-queue/report.md",
                "docs/agent-host-admission-queue/summary.json",
                "docs/agent-host-admission-queue/report.md",
                "docs/agent-host-admission-declared/summary.json",
                "docs/agent-host-admission-declared/report.md",
                "docs/agent-host-admission-declared-long-wait/summary.json",
                "docs/agent-host-admission-declared-long-wait/report.md",
                "docs/agent-host-admission-declared-exact/summary.json",
                "docs/agent-host-admission-declared-exact/report.md",
                "docs/agent-host-admission-declared-room/summary.json",
                "docs/agent-host-admission-declared-room/report.md",
                "docs/agent-host-admission-declared-room-long-wait/summary.json",
                "docs/agent-host-admission-declared-room-long-wait/report.md",
                "docs/agent-host-admission-declared-promise/summary.json",
                "docs/agent-host-admission-declared-promise/report.md",
                "docs/agent-host-admission-declared-largest/summary.json",
                "docs/agent-host-admission-declared-largest/report.md",
                "docs/agent-host-admission-declared-kept/summary.json",
                "docs/agent-host-admission-declared-kept/report.md",
                "docs/agent-host-admission-zswap-queue-kept/summary.json",
                "docs/agent-host-admission-zswap-queue-kept/report.md",
                "docs/guide/configuration.md",
                "packaging/memqos.toml.5"
            ]
        );
        for (_, text) in &files {
            assert!(first_difference(&text.replacen('1', "2", 1), text).is_some());
        }
    }

    #[test]
    fn first_difference_names_the_line() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        assert_eq!(first_difference("a\nb\nc", "a\nx\nc"), Some(r#"line 2 is "b", the runs give "x""#.into()));
        assert_eq!(first_difference("a\nb", "a"), Some("has lines from 2 on that the runs do not give".into()));
        assert_eq!(first_difference("a", "a\nb"), Some(r#"ends before line 2, which the runs give as "b""#.into()));
        assert_eq!(first_difference("a", "a\n"), Some(r#"ends before line 2, which the runs give as """#.into()));
        assert!(first_difference(&"x".repeat(500), "y").unwrap().contains("..."));
    }
}
