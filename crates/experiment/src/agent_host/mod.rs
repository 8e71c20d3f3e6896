//! The agent-host experiment (issue 14.6): many agent sessions replayed from the traces under
//! one host budget, each session's runtime in its session cgroup and each tool call's extra
//! memory in a tool-call cgroup of its own, made by `memqos run` as on a real agent host.
//! Arms: none, a static memory.max per session at its peak, and memqos with the documented
//! session config. The question: how many concurrent sessions can a host run before an agent
//! runtime is OOM-killed (the session lost), and what happens to the tool calls.
//!
//! - [`split`]: a trace cut into its runtime's memory and its calls' (pure);
//! - [`scenario`]: the scenario file (`experiments/agent-host/scenario.toml`);
//! - [`session`]: one session as a closed loop, as an agent drives its calls (pure);
//! - [`runner`]: the in-guest loop (runs × levels × arms, one JSON per arm), each host's
//!   sessions driven by `drive` and written as `result`'s types;
//! - [`summary`]: per level and arm, densities, the target; `report` renders it as markdown.

mod drive;
mod report;
mod result;
pub mod runner;
pub mod scenario;
pub mod session;
pub mod split;
pub mod summary;

use crate::series::guest;
use anyhow::{bail, Context, Result};
use memqos_vmtest::self_run;
use runner::HostRunnerOptions;
use scenario::HostScenario;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `memqos-lab experiment agent-host` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    pub scenario: PathBuf,
    pub runs: usize,
    pub first_run: usize,
    pub kernel: String,
    pub out: PathBuf,
    pub traces: Option<PathBuf>,
    pub report_only: bool,
    pub no_plots: bool,
    pub in_guest: bool,
    /// `--levels` specs (see [`HostScenario::set_levels`]).
    pub levels: Vec<String>,
    /// Run each arm at the levels inside its density bracket in OUT/summary.json that have not
    /// run yet ([`summary::next_levels`]).
    pub refine: bool,
}

pub fn run(args: &Options) -> Result<u8> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if args.first_run == 0 {
        bail!("--first-run must be at least 1 (runs are numbered from 1)");
    }
    let traces = memqos_replay::traces_dir::resolve(args.traces.as_deref())?;
    if args.in_guest {
        return in_guest(args, &traces);
    }
    let mut scenario = HostScenario::load(&args.scenario)?;
    scenario.set_levels(&args.levels).map_err(|e| anyhow::anyhow!(e))?;
    if args.refine {
        let path = args.out.join("summary.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("--refine reads {}", path.display()))?;
        let sum: summary::HostSummary = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let kernels = self_run::kernels(&args.kernel)?;
        for p in scenario.policies.clone() {
            let mut next: Vec<usize> = Vec::new();
            for k in &kernels {
                if let Some(d) = sum.density.iter().find(|d| d.kernel == k.release() && d.arm == p.name()) {
                    next.extend(summary::next_levels(d, 2));
                }
            }
            next.sort_unstable();
            next.dedup();
            eprintln!("memqos-lab experiment agent-host --refine: {p} at {next:?}");
            scenario.arm_levels.insert(p, next);
        }
    }
    if !args.report_only {
        let plans = runner::plans(&scenario, &traces)?;
        let est = estimate_secs(&scenario, &plans, args.runs);
        let kernels = self_run::kernels(&args.kernel)?;
        eprintln!(
            "memqos-lab experiment agent-host: {} kernel(s) x {} run(s) x {} arm levels; estimated {:.0} min of guest time",
            kernels.len(),
            args.runs,
            scenario.policies.iter().map(|&p| scenario.levels_of(p).len()).sum::<usize>(),
            est * kernels.len() as f64 / 60.0
        );
        let mut failed = Vec::new();
        for kernel in &kernels {
            if let Err(e) = run_in_guest(args, &scenario, kernel, &traces, est) {
                eprintln!("memqos-lab experiment agent-host: {} failed: {e:#}", kernel.release());
                failed.push(kernel.release());
            }
        }
        let code = report(&args.out, &scenario, !args.no_plots)?;
        if !failed.is_empty() {
            bail!("agent-host failed on {} (the report covers the rest)", failed.join(", "));
        }
        return Ok(code);
    }
    report(&args.out, &scenario, !args.no_plots)
}

/// Guest seconds: each solo session, then each level and arm as long as its longest session
/// plus the stagger, doubled for contention and TCG (closed loop: late calls stretch a
/// session by as long as they are late).
fn estimate_secs(s: &HostScenario, plans: &[split::SessionPlan], runs: usize) -> f64 {
    let solo: f64 = plans.iter().map(|p| p.duration_s / s.speed + 2.0).sum();
    let longest = plans.iter().map(|p| p.duration_s / s.speed).fold(0.0, f64::max);
    let hosts: f64 = s
        .policies
        .iter()
        .flat_map(|&p| s.levels_of(p))
        .map(|&l| (longest + l as f64 * s.stagger_s) * 2.0 + 3.0)
        .sum::<f64>();
    20.0 + (solo + hosts) * runs as f64
}

fn run_in_guest(
    args: &Options,
    s: &HostScenario,
    kernel: &memqos_vmtest::kernels::Kernel,
    traces: &Path,
    est: f64,
) -> Result<()> {
    eprintln!("=== agent-host on {}: {} run(s), guest {} MiB ===", kernel.release(), args.runs, s.guest_memory_mb);
    let argv = guest::in_guest_args(&["experiment", "agent-host"], args.runs, args.first_run, traces);
    let provenance =
        guest::provenance(&kernel.release(), &std::fs::read(&args.scenario)?, Some(&s.memqos_config), None, s.speed)?;
    let run = self_run::run_self(kernel, &argv, |g| {
        g.optional_swap(s.swap_mb, s.zswap)
            .memory_mb(s.guest_memory_mb)
            .timeout(Duration::from_secs_f64(600.0 + est * 3.0))
            .env("MEMQOS_SCENARIO", &serde_json::to_string(s).expect("a scenario serializes"))
            .share_path(traces)
            .stream_console(true)
    })?;
    let to = args.out.join("runs").join(kernel.release());
    let from = run.results_dir.join("agent-host");
    if run.exit_code != 0 {
        let kept = args.out.join("failed").join(kernel.release());
        let n = guest::salvage(&from, &kept)?;
        bail!(
            "the in-guest experiment exited with {} (console: {}); the {n} result file(s) it wrote are in {}, outside the series",
            run.exit_code,
            run.results_dir.join("console.log").display(),
            kept.display()
        );
    }
    guest::keep_results(&from, &to, args.first_run, args.runs, &provenance, &run)?;
    eprintln!("=== agent-host on {}: done in {:.1} min ===", kernel.release(), run.wall_secs / 60.0);
    Ok(())
}

fn in_guest(args: &Options, traces: &Path) -> Result<u8> {
    let (scenario, results): (HostScenario, PathBuf) = guest::guest_inputs()?;
    let opts = HostRunnerOptions {
        scenario,
        traces_dir: traces.to_path_buf(),
        runs: args.runs,
        first_run: args.first_run,
        out_dir: results.join("agent-host"),
        exe: std::env::current_exe()?,
    };
    let n = runner::run_all(&opts)?;
    println!("agent-host: {n} arm results written");
    Ok(0)
}

/// summary.json and report.md as the report step writes them from `out/runs` for the scenario
/// file `scenario` (its description heads the report), linking the plots already in `out`:
/// computed without writing anything, so `memqos-docs --check` can compare the committed files.
pub fn rendered(out: &Path, scenario: &Path) -> Result<[(&'static str, String); 2]> {
    let s = HostScenario::load(scenario)?;
    let sum = summarize_runs(out)?;
    Ok([
        ("summary.json", serde_json::to_string_pretty(&sum)?),
        ("report.md", summary::render_markdown(&sum, &s.description, &crate::host::plot_files(out)?)),
    ])
}

fn summarize_runs(out: &Path) -> Result<summary::HostSummary> {
    let results = summary::load(&out.join("runs"))?;
    if results.is_empty() {
        bail!("no results under {}", out.join("runs").display());
    }
    Ok(summary::summarize(&results))
}

/// summary.json, report.md and the plots from everything under `out/runs`. Without `plots`
/// the plots already in `out` are left as they are and linked, as the scenario pipeline's
/// report step does (so the report matches what `memqos-docs --check` expects either way).
fn report(out: &Path, s: &HostScenario, plots: bool) -> Result<u8> {
    let sum = summarize_runs(out)?;
    std::fs::write(out.join("summary.json"), serde_json::to_string_pretty(&sum)?)?;
    if plots {
        crate::host::draw_plots(Path::new("scripts/plots/agent_host.py"), out)?;
    }
    let files = crate::host::plot_files(out)?;
    std::fs::write(out.join("report.md"), summary::render_markdown(&sum, &s.description, &files))?;
    for v in &sum.targets {
        println!("{:<4} agent-host {}: {} — {}", if v.met { "MET" } else { "MISS" }, v.kernel, v.target, v.measured);
    }
    for d in &sum.density {
        println!("density {} {}: {} sessions", d.kernel, d.arm, d.sessions);
    }
    println!("report: {}", out.join("report.md").display());
    Ok(0)
}
