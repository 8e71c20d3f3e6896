//! The agent-host experiment's tables: levels and density per kernel.

use super::{kernel_rank, short_kernel};
use crate::agent_host::summary::{HostSummary, LevelSummary};
use crate::series::figures::{percent_range, ratio_range};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The open-loop series (docs/agent-host) and the closed-loop one (docs/agent-host-closed).
pub(super) const OPEN_LOOP: &str = "docs/agent-host";
pub(super) const CLOSED_LOOP: &str = "docs/agent-host-closed";

pub(super) fn agent_host(root: &Path, dir: &str) -> Result<HostSummary> {
    let path = root.join(dir).join("summary.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// The levels on one kernel (`kernel` is a release prefix), by session count, then none,
/// static-peak, memqos (then any other arm by name).
fn levels_in_order<'a>(h: &'a HostSummary, kernel: &str) -> Vec<&'a LevelSummary> {
    let rank = |a: &str| ["none", "static-peak", "memqos"].iter().position(|x| *x == a).unwrap_or(9);
    let mut ls: Vec<_> = h.levels.iter().filter(|l| l.kernel.starts_with(kernel)).collect();
    ls.sort_by_key(|l| (l.level, rank(&l.arm), l.arm.clone()));
    ls
}

/// The agent-host series in `dir`: its levels on one kernel (`kernel` is a release prefix).
pub(super) fn render_agent_levels(root: &Path, dir: &str, kernel: &str) -> Result<String> {
    let h = agent_host(root, dir)?;
    let mut out = String::from(
        "| sessions | arm | sessions finished | runtimes killed (runs) | calls OOM-killed / started | OOM kills under the host (OOM events at a session's own limit) | runtime p95 vs solo | call time vs solo |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for l in levels_in_order(&h, kernel) {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {} ({}) | {}/{} | {} ({}) | {} | {} |",
            l.level,
            l.arm,
            l.sessions_finished,
            l.sessions,
            l.runtimes_killed,
            l.runs_with_runtime_killed,
            l.calls_killed,
            l.calls_started,
            l.parent_oom_kills,
            l.session_limit_ooms.map(|x| x.to_string()).unwrap_or_else(|| "–".into()),
            ratio_range(&l.runtime_p95_vs_solo),
            ratio_range(&l.call_time_vs_solo),
        );
    }
    Ok(out)
}

/// The closed-loop columns of the series in `dir` on one kernel: what a killed call or
/// runtime cost its session (a call is retried once; a second failure fails the session).
pub(super) fn render_agent_closed(root: &Path, dir: &str, kernel: &str) -> Result<String> {
    let h = agent_host(root, dir)?;
    let mut out = String::from(
        "| sessions | arm | runs | sessions failed (a call failed twice) | sessions hung | calls finished on their retry | calls lost with their session | runtimes' solo peaks summed, of the budget |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for l in levels_in_order(&h, kernel).into_iter().filter(|l| l.closed_loop) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}/{} | {} | {} | {}/{} | {} |",
            l.level,
            l.arm,
            l.runs,
            l.sessions_failed,
            l.sessions,
            l.sessions_hung,
            l.calls_retried,
            l.calls_lost,
            l.calls_planned,
            percent_range(&l.runtime_peaks_of_budget),
        );
    }
    Ok(out)
}

/// Each arm's density with the bracket the levels run allow, and the ratios the brackets
/// support: a density of 9 where the next level run is 12 says "9 to 11", not 9.
pub(super) fn render_agent_density(root: &Path, dir: &str) -> Result<String> {
    let h = agent_host(root, dir)?;
    let mut out = String::new();
    let mut kernels: Vec<&str> = h.density.iter().map(|d| d.kernel.as_str()).collect();
    kernels.sort_by_key(|k| (kernel_rank(k), k.to_string()));
    kernels.dedup();
    for k in kernels {
        let mut levels: Vec<usize> = h.levels.iter().filter(|l| l.kernel == k).map(|l| l.level).collect();
        levels.sort_unstable();
        levels.dedup();
        // (lowest, highest) density consistent with the levels run; `None` high: unbounded.
        let bracket =
            |d: usize| -> (usize, Option<usize>) { (d, levels.iter().find(|&&l| l > d).map(|&next| next - 1)) };
        let show = |(lo, hi): (usize, Option<usize>)| match hi {
            Some(h) if h == lo => lo.to_string(),
            Some(h) => format!("{lo}–{h}"),
            None => format!("≥ {lo} (the largest level run)"),
        };
        // A summary that records each arm's own levels (per-arm `--levels`, `--refine`) gives
        // the bracket itself; older ones ran every arm at the same levels.
        let get = |arm: &str| {
            h.density.iter().find(|d| d.kernel == k && d.arm == arm).map(|d| match d.levels_run.is_empty() {
                true => bracket(d.sessions),
                false => (d.sessions, d.lowest_lost.map(|l| l - 1)),
            })
        };
        let mut parts = Vec::new();
        for arm in ["memqos", "none", "static-peak"] {
            if let Some(b) = get(arm) {
                parts.push(format!("{arm} {}", show(b)));
            }
        }
        let mut ratios = Vec::new();
        if let Some((m_lo, _)) = get("memqos") {
            for peer in ["none", "static-peak"] {
                match get(peer) {
                    Some((_, Some(p_hi))) if p_hi > 0 => {
                        ratios.push(format!("memqos/{peer} ≥ {m_lo}/{p_hi} = {:.2}x", m_lo as f64 / p_hi as f64))
                    }
                    Some((_, Some(_))) => ratios.push(format!("{peer} lost a runtime at every level run")),
                    Some((_, None)) => ratios.push(format!("memqos/{peer}: no bound (both at the largest level)")),
                    None => {}
                }
            }
        }
        // Density counts runtimes only; an arm can keep every runtime and fail the sessions
        // instead (a call killed twice). What finished is the other half of the picture.
        let mut finished = Vec::new();
        for arm in ["memqos", "none", "static-peak"] {
            let best = h
                .levels
                .iter()
                .filter(|l| l.kernel == k && l.arm == arm && l.runs > 0)
                .map(|l| (l.sessions_finished as f64 / l.runs as f64, l.level))
                .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
            if let Some((per_run, level)) = best {
                finished.push(format!("{arm} {per_run:.1} (at {level})"));
            }
        }
        let finished = match finished.is_empty() {
            true => String::new(),
            false => format!("; most sessions finished per run: {}", finished.join(", ")),
        };
        let _ = writeln!(out, "- {}: density {}; {}{finished}.", short_kernel(k), parts.join(", "), ratios.join(", "));
    }
    Ok(out)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_density_brackets_come_from_each_arms_own_levels_when_recorded() {
        use crate::agent_host::summary::{Density, HostSummary};
        let d = |arm: &str, sessions: usize, lowest_lost: Option<usize>, levels_run: Vec<usize>| Density {
            kernel: "7.2.13+deb14-amd64".into(),
            arm: arm.into(),
            sessions,
            highest_clean: Some(sessions),
            lowest_lost,
            levels_run,
            admitted_by_limits: None,
        };
        // none refined to 10–11 (lost at 11), memqos held at 14, its largest level.
        let h = HostSummary {
            levels: Vec::new(),
            density: vec![d("none", 10, Some(11), vec![9, 10, 11, 12]), d("memqos", 14, None, vec![12, 13, 14])],
            targets: Vec::new(),
            example_explanations: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docs/agent-host")).unwrap();
        std::fs::write(dir.path().join("docs/agent-host/summary.json"), serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(
            render_agent_density(dir.path(), OPEN_LOOP).unwrap(),
            "- 7.2.13: density memqos ≥ 14 (the largest level run), none 10; memqos/none ≥ 14/10 = 1.40x.\n"
        );
    }

    #[test]
    fn the_density_line_says_how_many_sessions_finished_per_run_at_best() {
        use crate::agent_host::summary::{Density, HostSummary, LevelSummary};
        let level = |arm: &str, level: usize, runs: usize, finished: usize| -> LevelSummary {
            let mut l: LevelSummary = serde_json::from_value(serde_json::json!({
                "kernel": "7.2.13+deb14-amd64", "level": level, "arm": arm, "runs": runs, "sessions": level * runs,
                "sessions_finished": finished, "runtimes_killed": 0, "runs_with_runtime_killed": 0,
                "calls_planned": 0, "calls_started": 0, "calls_killed": 0, "calls_not_started": 0,
                "parent_oom_kills": 0, "runtime_p95_vs_solo": null, "call_time_vs_solo": null,
                "static_limits_fit": null, "knobs_restored": null, "daemon_cpu_s": null
            }))
            .unwrap();
            l.closed_loop = true;
            l
        };
        let density = |arm: &str, sessions: usize| Density {
            kernel: "7.2.13+deb14-amd64".into(),
            arm: arm.into(),
            sessions,
            highest_clean: Some(sessions),
            lowest_lost: None,
            levels_run: vec![sessions],
            admitted_by_limits: None,
        };
        // memqos keeps every runtime at 17 but finishes fewer sessions there than at 12.
        let h = HostSummary {
            levels: vec![level("memqos", 12, 3, 31), level("memqos", 17, 3, 25), level("none", 9, 3, 24)],
            density: vec![density("memqos", 17), density("none", 9)],
            targets: Vec::new(),
            example_explanations: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docs/agent-host-closed")).unwrap();
        std::fs::write(dir.path().join("docs/agent-host-closed/summary.json"), serde_json::to_string(&h).unwrap())
            .unwrap();
        let text = render_agent_density(dir.path(), CLOSED_LOOP).unwrap();
        assert!(text.ends_with("; most sessions finished per run: memqos 10.3 (at 12), none 8.0 (at 9).\n"), "{text}");
    }
}
