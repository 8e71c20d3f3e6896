//! Tables in the docs generated from committed data, so no figure in them is typed by hand.
//!
//! A generated region of a doc is
//!
//! ```text
//! <!-- generated: NAME (memqos-docs, from docs/experiments/summary.json) -->
//! ...
//! <!-- end generated: NAME -->
//! ```
//!
//! and [`update`] rewrites every such region, and every figure quoted in prose between
//! `<!-- fig: QUERY -->` and `<!-- /fig -->` markers ([`figures`]), from
//! `docs/experiments/summary.json` (itself rebuilt from the runs by the report step) and
//! `docs/experiments/builds.toml` (which build made each series). `scripts/docs.sh` runs both;
//! the `docs_match_the_committed_data` test fails when a region or a quoted figure differs from
//! what the data gives, and [`files`]'
//! `report_files_match_the_committed_runs` when a committed summary.json or report.md does.

mod agent_host;
mod bench;
mod figures;
pub mod files;
mod regions;
mod scenarios;
mod spec;

pub use regions::{regions, splice};

use crate::summary::{GroupSummary, Verdict};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The docs that may hold generated regions or figure markers (relative to the checkout). The
/// README quotes figures only; its long findings and their generated lists (kill tests, missed
/// targets) are in docs/results/evidence.md.
pub const DOCS: &[&str] = &[
    "README.md",
    "docs/results/evidence.md",
    "docs/experiments.md",
    "docs/agent-hosts.md",
    "docs/bpf-signals.md",
    "docs/stats.md",
];

/// What the tables are made from.
pub struct Sources {
    pub groups: Vec<GroupSummary>,
    pub verdicts: Vec<Verdict>,
    /// `scenario/kernel` -> build, for series whose runs do not record it themselves.
    pub builds: BTreeMap<String, String>,
    /// The checkout, for data files read by one table only.
    pub root: std::path::PathBuf,
}

#[derive(serde::Deserialize)]
struct SummaryFile {
    groups: Vec<GroupSummary>,
    targets: Vec<Verdict>,
}

#[derive(serde::Deserialize)]
struct BuildsFile {
    series: BTreeMap<String, String>,
}

/// `out/builds.toml`'s series -> build map; empty without the file.
pub fn builds(out: &Path) -> Result<BTreeMap<String, String>> {
    let path = out.join("builds.toml");
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let b: BuildsFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    Ok(b.series)
}

impl Sources {
    pub fn load(root: &Path) -> Result<Sources> {
        let path = root.join("docs/experiments/summary.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let s: SummaryFile = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let builds = builds(&root.join("docs/experiments"))?;
        Ok(Sources { groups: s.groups, verdicts: s.targets, builds, root: root.to_path_buf() })
    }

    fn build(&self, g: &GroupSummary) -> String {
        if let Some(b) = &g.build {
            return b.clone();
        }
        self.builds.get(&format!("{}/{}", g.scenario, g.kernel)).cloned().unwrap_or_else(|| "not recorded".into())
    }
}

/// "7.2.13+deb14-amd64" -> "7.2.13".
fn short_kernel(k: &str) -> &str {
    k.split('+').next().unwrap_or(k)
}

/// 7.x series before 6.12, as the docs read.
fn kernel_rank(k: &str) -> u32 {
    if k.starts_with("6.") {
        1
    } else {
        0
    }
}

/// The body of the generated region `name`.
pub fn render(name: &str, src: &Sources) -> Result<String> {
    Ok(match name {
        "missed-targets" => scenarios::render_missed(src),
        "run-arms" => bench::render_run_arms(&src.root)?,
        "churn" => bench::render_churn(&src.root)?,
        "stats-bench" => bench::render_stats_bench(&src.root)?,
        "reaction-7" => bench::render_reaction(&src.root, "7.")?,
        "reaction-6.12" => bench::render_reaction(&src.root, "6.12")?,
        "reaction-targets" => bench::render_reaction_targets(&src.root)?,
        "agent-host-7" => agent_host::render_agent_levels(&src.root, agent_host::OPEN_LOOP, "7.")?,
        "agent-host-6.12" => agent_host::render_agent_levels(&src.root, agent_host::OPEN_LOOP, "6.12")?,
        "agent-density" => agent_host::render_agent_density(&src.root, agent_host::OPEN_LOOP)?,
        "agent-host-closed-7" => agent_host::render_agent_levels(&src.root, agent_host::CLOSED_LOOP, "7.")?,
        "agent-host-closed-loop-7" => agent_host::render_agent_closed(&src.root, agent_host::CLOSED_LOOP, "7.")?,
        "agent-density-closed" => agent_host::render_agent_density(&src.root, agent_host::CLOSED_LOOP)?,
        "kill-tests" => scenarios::render_kill_tests(src),
        "realtime-ranking" => scenarios::render_ranking(src, "oom", "oom-realtime"),
        "realtime-ranking-tight" => scenarios::render_ranking(src, "sweep-tight", "sweep-tight-dask-realtime"),
        "realtime-ranking-tight-rest" => scenarios::render_ranking(src, "sweep-tight", "sweep-tight-realtime"),
        "realtime-kills-tight-rest" => scenarios::render_kills_pooled(src, "sweep-tight-realtime"),
        "realtime-kills-tight-systemd" => scenarios::render_kills_pooled(src, "sweep-tight-systemd-realtime"),
        "zswap-kills-90" => scenarios::render_kills_pooled(src, "sweep-zswap"),
        "zswap-kills-tight" => scenarios::render_kills_pooled(src, "sweep-tight-zswap"),
        "realtime-ranking-systemd" => scenarios::render_ranking(src, "oom-systemd", "oom-systemd-realtime"),
        "run-overhead" => bench::render_run_overhead(&src.root)?,
        "margins" => scenarios::render_margins(src),
        "series-builds" => scenarios::render_series_builds(src),
        "targets" => scenarios::render_targets(src, false),
        "peer-targets" => scenarios::render_targets(src, true),
        _ => match spec::spec(name) {
            Some(s) => spec::render_spec(src, &s),
            None => bail!("no generated table named {name:?}"),
        },
    })
}

/// The figure a `<!-- fig: QUERY -->` marker holds, from the committed data `src` (the
/// query language is in `figures.rs`): for a closing note or a review, read the number the
/// docs would print instead of typing it.
pub fn figure(query: &str, src: &Sources) -> Result<String> {
    figures::render(query, src)
}

/// Rewrites (or, with `write` false, only checks) every generated region of every doc in
/// [`DOCS`] under `root`; returns the regions that were (or would be) changed, as `doc: name`.
pub fn update(root: &Path, write: bool) -> Result<Vec<String>> {
    let src = Sources::load(root)?;
    let mut stale = Vec::new();
    for doc in DOCS {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut new = text.clone();
        for name in regions(&text) {
            let body = render(&name, &src).with_context(|| doc.to_string())?;
            new = splice(&new, &name, &body).with_context(|| doc.to_string())?;
            if splice(&text, &name, &body)? != text {
                stale.push(format!("{doc}: {name}"));
            }
        }
        let (new, figures_stale) = figures::update(&new, &src).with_context(|| doc.to_string())?;
        stale.extend(figures_stale.into_iter().map(|f| format!("{doc}: {f}")));
        if write && new != text {
            std::fs::write(&path, new).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The docs' generated tables are what the committed summary gives: a hand edit of a
    /// table, or a summary rebuilt without `scripts/docs.sh`, fails here.
    #[test]
    fn docs_match_the_committed_data() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let stale = update(&root, false).unwrap();
        assert!(
            stale.is_empty(),
            "generated doc tables differ from the committed data (run bash scripts/docs.sh): {stale:?}"
        );
        // The check can fail: a changed figure in a copy of a region is caught.
        let src = Sources::load(&root).unwrap();
        let body = render("oom-7.2", &src).unwrap();
        let doc =
            format!("<!-- generated: oom-7.2 -->\n{}<!-- end generated: oom-7.2 -->\n", body.replacen('1', "2", 1));
        assert_ne!(splice(&doc, "oom-7.2", &body).unwrap(), doc);
    }
}
