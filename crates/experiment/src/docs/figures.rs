//! Figures quoted in prose, generated and checked like the tables.
//!
//! A sentence that quotes a result wraps the figure in markers naming where it comes from:
//!
//! ```text
//! memqos had a kill in <!-- fig: sweep-first-sight 7 * memqos runs-with-kill -->4 of 15<!-- /fig --> runs
//! ```
//!
//! The query is `SCENARIO KERNEL VARIANT ARM MEASURE`:
//! - KERNEL: `7` (any 7.x), `6.12`, or `*` for both;
//! - VARIANT: one variant's name (spaces as `_`), or `*` for every variant of the scenario
//!   except the learned series' first runs (the "(learning run)" variants, which have no
//!   history yet), or `learning` for those first runs alone;
//! - ARM: an arm as the summary names it (`none`, `memqos`, `static-adj`, ...);
//! - MEASURE: a count summed over the groups (`runs`, `kills`, `runs-with-kill`,
//!   `protected-killed`, `protected-finished`, `lows-finished`), or a median ratio
//!   (`high/solo`, `high/none`, `lows/none`, `p95/solo`, `p95/none`, `high-ops/solo`,
//!   `low-ops/solo` (stress-ng bogo-ops/s against each side's own solo run), and
//!   `priority`, the mean low time over the protected time), printed as one
//!   figure for one group and as the range of the groups' medians for several (groups where
//!   the ratio does not exist, such as lows/none where none lost its lows, are left out).
//!
//! An agent-host series is named by its directory under docs/ (`agent-host`,
//! `agent-host-admission-zswap`, ...), with the session count where the VARIANT goes:
//! `<!-- fig: agent-host-admission-zswap 7 12 memqos calls-killed -->`. Its measures:
//! `calls-killed` (call attempts OOM-killed, of those started), `calls-killed/none` (this
//! arm's killed call attempts over none's at the same level and kernel), `runtimes-killed`,
//! `runs-with-runtime-killed`, `sessions-finished`, `sessions-failed`, `calls-lost` (with
//! their session), `calls-waited`, `waits-at-limit`, `killed-after-wait-limit`, `calls-held`,
//! `calls-queued`,
//! `queue-thaws-at-bound`, and the median ratios
//! `runtime-p95/solo` and `call-time/solo`, and `span-s` (the median seconds until a run's
//! last session ended); one kernel and one arm per figure.
//!
//! A marker right after a backtick is quoted in a code span and left alone. Markdown renders
//! the markers as nothing, so the sentence reads as written; `memqos-docs`
//! rewrites the figure and `--check` (and the `docs_match_the_committed_data` test) fails
//! when it differs from what the committed summary gives.

use super::spec::groups_of;
use super::Sources;
use crate::stats::{Estimate, KILLED};
use crate::summary::{ArmSummary, GroupSummary};
use anyhow::{bail, Context, Result};

const OPEN: &str = "<!-- fig: ";
const CLOSE: &str = "<!-- /fig -->";
/// How the summary names a learned series' first run of a triple (no history yet).
const LEARNING: &str = "(learning run)";

/// `doc` with every figure rewritten from `src`, and the queries whose figure changed.
pub fn update(doc: &str, src: &Sources) -> Result<(String, Vec<String>)> {
    let mut out = String::with_capacity(doc.len());
    let mut stale = Vec::new();
    let mut rest = doc;
    while let Some(at) = rest.find(OPEN) {
        // Quoted in a code span (the docs describing the markers): text, not a figure.
        if rest[..at].ends_with('`') {
            out.push_str(&rest[..at + OPEN.len()]);
            rest = &rest[at + OPEN.len()..];
            continue;
        }
        let line = doc[..doc.len() - rest.len() + at].matches('\n').count() + 1;
        let after_open = &rest[at + OPEN.len()..];
        let query_end = after_open
            .find(" -->")
            .filter(|&e| !after_open[..e].contains('\n'))
            .with_context(|| format!("line {line}: a figure's query has no \" -->\" on its line"))?;
        let query = &after_open[..query_end];
        let body_start = &after_open[query_end + " -->".len()..];
        let body_end = body_start
            .find(CLOSE)
            .filter(|&e| !body_start[..e].contains('\n') && !body_start[..e].contains(OPEN))
            .with_context(|| format!("line {line}: figure {query:?} has no {CLOSE:?} on its line"))?;
        let old = &body_start[..body_end];
        let new = render(query, src).with_context(|| format!("line {line}: figure {query:?}"))?;
        if old != new {
            stale.push(format!("fig {query} ({old:?} -> {new:?})"));
        }
        out.push_str(&rest[..at + OPEN.len() + query_end + " -->".len()]);
        out.push_str(&new);
        out.push_str(CLOSE);
        rest = &body_start[body_end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok((out, stale))
}

/// The text of the figure `query` names.
pub fn render(query: &str, src: &Sources) -> Result<String> {
    let words: Vec<&str> = query.split_whitespace().collect();
    let [scenario, kernel, variant, arm, measure] = words[..] else {
        bail!("expected SCENARIO KERNEL VARIANT ARM MEASURE, got {} words", words.len());
    };
    if scenario.starts_with("agent-host") {
        return render_agent_host(src, scenario, kernel, variant, arm, measure);
    }
    let variant_matches = |v: &str| match variant {
        "*" => !v.ends_with(LEARNING),
        "learning" => v.ends_with(LEARNING),
        named => v == named.replace('_', " "),
    };
    if groups_of(src, &[scenario], None).is_empty() {
        bail!("no scenario {scenario:?} in the summary");
    }
    // "7" is any 7.x release, "6.12" any 6.12.x: the series prefix and its dot.
    let series = (kernel != "*").then(|| format!("{kernel}."));
    let groups: Vec<&GroupSummary> =
        groups_of(src, &[scenario], series.as_deref()).into_iter().filter(|g| variant_matches(&g.variant)).collect();
    if groups.is_empty() {
        bail!("scenario {scenario:?} has no group for kernel {kernel:?} and variant {variant:?}");
    }
    let arms: Vec<&ArmSummary> =
        groups.iter().map(|g| g.arms.iter().find(|a| a.arm == arm)).collect::<Option<_>>().with_context(|| {
            let missing: Vec<String> = groups
                .iter()
                .filter(|g| !g.arms.iter().any(|a| a.arm == arm))
                .map(|g| format!("{} on {}", g.variant, g.kernel))
                .collect();
            format!("no arm {arm:?} in {}", missing.join(", "))
        })?;
    let sum = |f: fn(&ArmSummary) -> u64| arms.iter().map(|a| f(a)).sum::<u64>();
    let runs = sum(|a| a.runs as u64);
    Ok(match measure {
        "runs" => runs.to_string(),
        "kills" => sum(|a| a.task_kills).to_string(),
        "runs-with-kill" => format!("{} of {runs}", sum(|a| a.runs_with_kill as u64)),
        "protected-killed" => format!("{} of {runs}", sum(|a| a.runs_high_killed as u64)),
        "protected-finished" => format!("{} of {runs}", sum(|a| a.high_finished as u64)),
        "lows-finished" => format!("{} of {}", sum(|a| a.low_finished as u64), sum(|a| a.low_started as u64)),
        ratio => {
            let pick: fn(&ArmSummary) -> Option<Estimate> = match ratio {
                "high/solo" => |a| a.high_wall_vs_solo,
                "high/none" => |a| a.high_wall_vs_none,
                "lows/none" => |a| a.low_wall_vs_none,
                "p95/solo" => |a| a.high_p95_vs_solo,
                "p95/none" => |a| a.high_p95_vs_none,
                "priority" => |a| a.priority_ratio,
                "high-ops/solo" => |a| a.high_ops_vs_solo,
                "low-ops/solo" => |a| a.low_ops_vs_solo,
                other => bail!("unknown measure {other:?}"),
            };
            let medians: Vec<f64> = arms.iter().filter_map(|a| pick(a).map(|e| e.median)).collect();
            if medians.is_empty() {
                bail!("arm {arm:?} has no {ratio} in any group");
            }
            median_range(&medians)
        }
    })
}

/// A figure of the agent-host series in docs/`dir`: one kernel series, one level, one arm.
fn render_agent_host(src: &Sources, dir: &str, kernel: &str, level: &str, arm: &str, measure: &str) -> Result<String> {
    let h = super::agent_host::agent_host(&src.root, &format!("docs/{dir}"))?;
    let level: usize =
        level.parse().with_context(|| format!("{level:?}: an agent-host figure's third word is a session count"))?;
    let series = format!("{kernel}.");
    let l = h
        .levels
        .iter()
        .find(|l| l.kernel.starts_with(&series) && l.level == level && l.arm == arm)
        .with_context(|| format!("docs/{dir} has no level {level} of arm {arm:?} on kernel {kernel:?}"))?;
    let ratio = |e: Option<Estimate>| e.map(|e| format!("{:.2}x", e.median)).context("no such ratio in this series");
    Ok(match measure {
        "calls-killed" => format!("{} of {}", l.calls_killed, l.calls_started),
        // The issue-30 target's measure: this arm's killed call attempts over none's, at the
        // same level on the same kernel, over all runs.
        "calls-killed/none" => {
            let none = h
                .levels
                .iter()
                .find(|n| n.kernel == l.kernel && n.level == level && n.arm == "none")
                .with_context(|| format!("docs/{dir} has no none arm at level {level} on kernel {kernel:?}"))?;
            if none.calls_killed == 0 {
                bail!("docs/{dir}: none killed no call at level {level} on kernel {kernel:?}: no ratio");
            }
            format!("{:.2}x", l.calls_killed as f64 / none.calls_killed as f64)
        }
        "runtimes-killed" => l.runtimes_killed.to_string(),
        "runs-with-runtime-killed" => format!("{} of {}", l.runs_with_runtime_killed, l.runs),
        "sessions-finished" => format!("{} of {}", l.sessions_finished, l.sessions),
        "sessions-failed" => format!("{} of {}", l.sessions_failed, l.sessions),
        "calls-lost" => l.calls_lost.to_string(),
        "calls-waited" => l.calls_waited.to_string(),
        "waits-at-limit" => l.waits_at_limit.to_string(),
        "killed-after-wait-limit" => l.killed_after_wait_limit.to_string(),
        "calls-held" => l.calls_held.to_string(),
        "calls-queued" => l.calls_queued.to_string(),
        "queue-thaws-at-bound" => l.queue_thaws_at_bound.to_string(),
        "runtime-p95/solo" => ratio(l.runtime_p95_vs_solo)?,
        "call-time/solo" => ratio(l.call_time_vs_solo)?,
        "span-s" => l.span_s.map(|e| format!("{:.0} s", e.median)).context("no session spans in this series")?,
        other => bail!("unknown agent-host measure {other:?}"),
    })
}

/// "1.05x" for one median (or several equal ones), "1.03x–1.09x" for the range of several.
fn median_range(medians: &[f64]) -> String {
    let x = |m: f64| if m == KILLED { "killed".to_string() } else { format!("{m:.2}x") };
    let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if x(lo) == x(hi) {
        x(lo)
    } else {
        format!("{}–{}", x(lo), x(hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sources() -> Sources {
        Sources::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")).unwrap()
    }

    #[test]
    fn a_figure_is_rewritten_and_a_stale_one_reported() {
        let src = sources();
        let runs = render("sweep-first-sight 7 * memqos runs", &src).unwrap();
        let doc = "a <!-- fig: sweep-first-sight 7 * memqos runs -->999<!-- /fig --> b\n";
        let (new, stale) = update(doc, &src).unwrap();
        assert_eq!(new, format!("a <!-- fig: sweep-first-sight 7 * memqos runs -->{runs}<!-- /fig --> b\n"));
        assert_eq!(stale.len(), 1);
        let (again, stale) = update(&new, &src).unwrap();
        assert_eq!(again, new);
        assert!(stale.is_empty());
        let quoted = "write `<!-- fig: SCENARIO KERNEL VARIANT ARM MEASURE -->` and `<!-- /fig -->`\n";
        assert_eq!(update(quoted, &src).unwrap(), (quoted.to_string(), vec![]));
    }

    #[test]
    fn pooled_counts_are_the_sum_of_the_groups() {
        let src = sources();
        let one =
            |v: &str| render(&format!("sweep-first-sight 7 {v} none runs"), &src).unwrap().parse::<u64>().unwrap();
        let variants: Vec<String> = src
            .groups
            .iter()
            .filter(|g| g.scenario == "sweep-first-sight" && g.kernel.starts_with("7."))
            .map(|g| g.variant.replace(' ', "_"))
            .collect();
        assert!(variants.len() > 1);
        let total: u64 = variants.iter().map(|v| one(v)).sum();
        assert_eq!(one("*"), total);
    }

    #[test]
    fn agent_host_figures_come_from_the_series_summary() {
        let src = sources();
        let h = crate::docs::agent_host::agent_host(&src.root, "docs/agent-host-admission-zswap").unwrap();
        let l = h.levels.iter().find(|l| l.arm == "memqos" && l.level == 12).unwrap();
        let fig = |m: &str| render(&format!("agent-host-admission-zswap 7 12 memqos {m}"), &src).unwrap();
        assert_eq!(fig("calls-killed"), format!("{} of {}", l.calls_killed, l.calls_started));
        assert_eq!(fig("runtimes-killed"), l.runtimes_killed.to_string());
        let none = h.levels.iter().find(|n| n.arm == "none" && n.level == 12 && n.kernel == l.kernel).unwrap();
        assert_eq!(fig("calls-killed/none"), format!("{:.2}x", l.calls_killed as f64 / none.calls_killed as f64));
        assert_eq!(render("agent-host-admission-zswap 7 12 none calls-killed/none", &src).unwrap(), "1.00x");
        let err = |q: &str| format!("{:#}", render(q, &src).unwrap_err());
        assert!(err("agent-host-admission-zswap 7 13 memqos calls-killed").contains("no level 13"));
        assert!(err("agent-host-admission-zswap 7 twelve memqos calls-killed").contains("session count"));
        assert!(err("agent-host-admission-zswap 7 12 memqos speed").contains("unknown agent-host measure"));
        assert!(err("agent-host-nowhere 7 12 memqos calls-killed").contains("docs/agent-host-nowhere"));
    }

    #[test]
    fn bad_queries_name_what_is_wrong() {
        let src = sources();
        let err = |q: &str| format!("{:#}", render(q, &src).unwrap_err());
        assert!(err("no-such-scenario 7 * memqos runs").contains("no scenario"));
        assert!(err("sweep-first-sight 5 * memqos runs").contains("no group"));
        assert!(err("sweep-first-sight 7 * oomd runs").contains("no arm \"oomd\""));
        assert!(err("sweep-first-sight 7 * memqos speed").contains("unknown measure"));
        assert!(err("sweep-first-sight 7 memqos runs").contains("got 4 words"));
        let unclosed = update("x <!-- fig: sweep-first-sight 7 * memqos runs -->3\nof 5<!-- /fig -->", &src);
        assert!(format!("{:#}", unclosed.unwrap_err()).contains("line 1"));
        let open_query = update("x\n<!-- fig: sweep-first-sight 7\n* memqos runs -->3<!-- /fig -->", &src);
        assert!(format!("{:#}", open_query.unwrap_err()).contains("line 2: a figure's query"));
    }

    #[test]
    fn ranges_collapse_when_the_medians_print_alike() {
        assert_eq!(median_range(&[1.051, 1.049]), "1.05x");
        assert_eq!(median_range(&[1.03, 1.09, 1.05]), "1.03x–1.09x");
        assert_eq!(median_range(&[1.2, KILLED]), "1.20x–killed");
    }
}
