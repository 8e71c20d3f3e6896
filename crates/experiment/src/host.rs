//! The host side of `memqos-lab experiment`: one guest per (scenario, kernel) runs `memqos
//! experiment --in-guest`, which writes one JSON per arm into the guest's results directory;
//! those are copied to `OUT/runs/<scenario>/<kernel>/`, and everything under `OUT/runs` is
//! summarized into summary.json, report.md and the plots.

use crate::runner::{self, RunnerOptions};
use crate::scenario::{Scenario, Workload};
use crate::series::guest;
use crate::summary;
use anyhow::{bail, Context, Result};
use memqos_vmtest::{kernels, self_run};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `memqos-lab experiment` was asked to do (its arguments, parsed).
#[derive(Clone, Debug)]
pub struct Options {
    /// Scenario names under `dir`, paths to scenario files, or "all".
    pub scenarios: Vec<String>,
    /// Runs per scenario (each run has every arm).
    pub runs: usize,
    /// The number of the first run; above 1 the runs are added to the scenario's results
    /// instead of replacing them (a long series in chunks).
    pub first_run: usize,
    /// Kernel series: "6.12", "7", "6.12,7" or "all".
    pub kernel: String,
    /// Where runs/, summary.json, report.md and the plots go.
    pub out: PathBuf,
    /// The scenario files.
    pub dir: PathBuf,
    /// The agent traces; `None`: `$MEMQOS_TRACES`, else the checkout's.
    pub traces: Option<PathBuf>,
    /// Only rebuild summary, report and plots from OUT/runs.
    pub report_only: bool,
    /// List the scenarios and exit.
    pub list: bool,
    pub no_plots: bool,
    /// Inside a guest: run the scenario in `$MEMQOS_SCENARIO`.
    pub in_guest: bool,
}

/// `memqos-lab experiment` with scenario files.
pub fn run(args: &Options) -> Result<u8> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if args.first_run == 0 {
        bail!("--first-run must be at least 1 (runs are numbered from 1)");
    }
    let traces = resolve_traces(args.traces.as_deref())?;
    if args.in_guest {
        return in_guest(args, &traces);
    }
    if args.list {
        for path in scenario_files(&args.dir)? {
            let s = Scenario::load(&path)?;
            println!("{:<12} {}", s.name, s.description);
        }
        return Ok(0);
    }
    if !args.report_only {
        let mut paths = Vec::new();
        for name in &args.scenarios {
            if name == "all" {
                paths.extend(scenario_files(&args.dir)?);
            } else if name.ends_with(".toml") {
                paths.push(PathBuf::from(name));
            } else {
                let p = args.dir.join(format!("{name}.toml"));
                if !p.is_file() {
                    let known: Vec<String> = scenario_files(&args.dir)?
                        .iter()
                        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                        .collect();
                    bail!("no scenario {name:?}: {} does not exist (known: {})", p.display(), known.join(", "));
                }
                paths.push(p);
            }
        }
        let scenarios: Vec<Scenario> = paths.iter().map(|p| Scenario::load(p)).collect::<Result<_, _>>()?;
        let kernels = self_run::kernels(&args.kernel)?;
        let plan: Vec<(f64, u64)> = scenarios.iter().map(|s| plan(s, &traces, args.runs)).collect::<Result<_>>()?;
        let total: f64 = plan.iter().map(|p| p.0).sum::<f64>() * kernels.len() as f64;
        eprintln!(
            "memqos experiment: {} scenario(s) x {} kernel(s) x {} run(s); estimated {:.0} min of guest time",
            scenarios.len(),
            kernels.len(),
            args.runs,
            total / 60.0
        );
        // One failed scenario (a guest that timed out, a kernel that would not boot) must not
        // throw away the others: report it, go on, and fail at the end.
        let mut failed = Vec::new();
        for kernel in &kernels {
            for (scenario, (secs, memory_mb)) in scenarios.iter().zip(&plan) {
                if let Err(e) = run_in_guest(args, scenario, kernel, &traces, *secs, *memory_mb) {
                    eprintln!("memqos experiment: {} on {} failed: {e:#}", scenario.name, kernel.release());
                    failed.push(format!("{} on {}", scenario.name, kernel.release()));
                }
            }
        }
        let code = report(&args.out, &traces, !args.no_plots)?;
        if !failed.is_empty() {
            bail!("{} scenario run(s) failed: {} (the report covers the others)", failed.len(), failed.join(", "));
        }
        return Ok(code);
    }
    report(&args.out, &traces, !args.no_plots)
}

fn scenario_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the scenario directory {} (see --dir)", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.ends_with(".toml") && !n.starts_with("memqos-")
        })
        .collect();
    v.sort();
    Ok(v)
}

fn resolve_traces(arg: Option<&Path>) -> Result<PathBuf> {
    Ok(memqos_replay::traces_dir::resolve(arg)?)
}

/// Estimated guest seconds for a scenario, and the guest memory it needs.
fn plan(s: &Scenario, traces: &Path, runs: usize) -> Result<(f64, u64)> {
    let mut secs = 15.0; // boot
    let mut parent_max = 0;
    if s.workload == Workload::StressNg {
        // stress-ng runs for its -t/--timeout (stress-ng's default is a day: refuse that).
        let timeout = |args: &[String], field: &str| {
            args.windows(2)
                .find(|w| w[0] == "-t" || w[0] == "--timeout")
                .and_then(|w| w[1].trim_end_matches('s').parse::<f64>().ok())
                .with_context(|| format!("{}: {field} need -t SECONDS", s.file.display()))
        };
        let mut t = timeout(&s.stress_args, "stress_args")?;
        if !s.stress_args_low.is_empty() {
            t = t.max(timeout(&s.stress_args_low, "stress_args_low")?);
        }
        for v in &s.variants {
            let arms = if s.solo { v.tasks().len() } else { 0 } + s.policies.len();
            secs += arms as f64 * (t + 10.0) * runs as f64;
        }
        return Ok((secs, s.guest_memory_mb.expect("validated for stress-ng")));
    }
    for v in &s.variants {
        parent_max = parent_max.max(runner::parent_max_bytes(s, v, traces)?);
        let mut longest = 0.0f64;
        let mut solo = 0.0;
        let mut seen = Vec::new();
        for (_, _, trace) in v.tasks() {
            let t = memqos_replay::trace::load_trace(&runner::trace_path(traces, &trace))
                .with_context(|| format!("{}: variant {}", s.file.display(), v.name))?;
            let d = t.duration_s() / s.speed;
            longest = longest.max(d);
            if !seen.contains(&trace) {
                seen.push(trace);
                solo += d + 1.5;
            }
        }
        // TCG runs a replay ~15% slower than its schedule; throttled arms take longer.
        let per_run = if s.solo { solo } else { 0.0 } + s.policies.len() as f64 * (longest * 2.0 + 2.0);
        secs += per_run * runs as f64;
    }
    let memory_mb = s.guest_memory_mb.unwrap_or((parent_max >> 20) + 1024);
    Ok((secs, memory_mb))
}

fn run_in_guest(
    args: &Options,
    s: &Scenario,
    kernel: &kernels::Kernel,
    traces: &Path,
    est_secs: f64,
    memory_mb: u64,
) -> Result<()> {
    eprintln!(
        "=== {} on {}: {} run(s), guest {} MiB, estimated {:.1} min ===",
        s.name,
        kernel.release(),
        args.runs,
        memory_mb,
        est_secs / 60.0
    );
    // The parsed scenario travels in the environment: the file may live where the guest
    // cannot see it (its /tmp is its own).
    let args_in_guest = guest::in_guest_args(&["experiment"], args.runs, args.first_run, traces);
    let timeout = Duration::from_secs_f64(600.0 + est_secs * 4.0);
    // The guest shares two host cores with whatever else runs; the host's load goes with the
    // results (in the provenance) so a noisy run can be recognized as one.
    let scenario_file = std::fs::read(&s.file).with_context(|| s.file.display().to_string())?;
    let provenance = guest::provenance(
        &kernel.release(),
        &scenario_file,
        s.memqos_config.as_deref(),
        s.oomd_config.as_deref(),
        s.speed,
    )?;
    let scenario_json = serde_json::to_string(s)?;
    let run = self_run::run_self(kernel, &args_in_guest, |g| {
        g.optional_swap(s.swap_mb, s.zswap)
            .memory_mb(memory_mb)
            .systemd(s.boots_systemd())
            .timeout(timeout)
            .env("MEMQOS_SCENARIO", &scenario_json)
            .env(crate::provenance::ENV, &serde_json::to_string(&provenance).expect("serializes"))
            .share_path(traces)
            .stream_console(true)
    })?;
    let from = run.results_dir.join("experiment");
    let to = args.out.join("runs").join(&s.name).join(kernel.release());
    if run.exit_code != 0 {
        let kept = args.out.join("failed").join(&s.name).join(kernel.release());
        let n = guest::salvage(&from, &kept)?;
        bail!(
            "{} on {}: the in-guest experiment exited with {} (console: {}); the {n} result file(s) it wrote are in {}, outside the series",
            s.name,
            kernel.release(),
            run.exit_code,
            run.results_dir.join("console.log").display(),
            kept.display()
        );
    }
    guest::keep_results(&from, &to, args.first_run, args.runs, &provenance, &run)?;
    eprintln!(
        "=== {} on {}: done in {:.1} min, results in {} ===",
        s.name,
        kernel.release(),
        run.wall_secs / 60.0,
        to.display()
    );
    Ok(())
}

fn in_guest(args: &Options, traces: &Path) -> Result<u8> {
    let (scenario, results): (Scenario, PathBuf) = guest::guest_inputs()?;
    let opts = RunnerOptions {
        scenario,
        traces_dir: traces.to_path_buf(),
        runs: args.runs,
        first_run: args.first_run,
        out_dir: results.join("experiment"),
        exe: std::env::current_exe()?,
        // Absent when a guest is started by hand; the results then say nothing rather than guess.
        provenance: std::env::var(crate::provenance::ENV).ok().and_then(|j| serde_json::from_str(&j).ok()),
    };
    let n = runner::run_all(&opts)?;
    println!("experiment: {n} arm results written");
    Ok(0)
}

/// The groups and verdicts of everything under `out/runs`.
fn summarize_runs(out: &Path, traces: &Path) -> Result<(Vec<summary::GroupSummary>, Vec<summary::Verdict>)> {
    let runs = out.join("runs");
    let results = summary::load_results(&runs)?;
    if results.is_empty() {
        bail!("no results under {}", runs.display());
    }
    let bounds = crate::kills::KillBounds::compute(&results, traces)?;
    let mut groups = summary::summarize_with(&results, &bounds);
    // Runs from before provenance was recorded: the build out/builds.toml names for them.
    let builds = crate::docs::builds(out)?;
    for g in groups.iter_mut().filter(|g| g.build.is_none()) {
        g.build = builds.get(&format!("{}/{}", g.scenario, g.kernel)).cloned();
    }
    let verdicts = summary::verdicts(&groups);
    Ok((groups, verdicts))
}

fn summary_json(groups: &[summary::GroupSummary], verdicts: &[summary::Verdict]) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::json!({"groups": groups, "targets": verdicts}))?)
}

/// summary.json and report.md as the report step writes them from `out/runs`, linking the plots
/// already in `out`: what `--report-only` leaves behind, computed without writing anything, so
/// `memqos-docs --check` can compare the committed files with it.
pub fn rendered(out: &Path, traces: &Path) -> Result<[(&'static str, String); 2]> {
    let (groups, verdicts) = summarize_runs(out, traces)?;
    Ok([
        ("summary.json", summary_json(&groups, &verdicts)?),
        ("report.md", summary::render_markdown(&groups, &verdicts, &plot_files(out)?)),
    ])
}

/// The plots (PNGs) in `out`, sorted: the report links each.
pub(crate) fn plot_files(out: &Path) -> Result<Vec<String>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".png") {
            files.push(name);
        }
    }
    files.sort();
    Ok(files)
}

/// Runs a plot script of `scripts/plots/` on a results folder (both pipelines' report steps).
pub(crate) fn draw_plots(script: &Path, out: &Path) -> Result<()> {
    let status = std::process::Command::new("/usr/bin/python3").arg(script).arg(out).status().with_context(|| {
        format!("running /usr/bin/python3 {} (install python3-matplotlib, or pass --no-plots)", script.display())
    })?;
    if !status.success() {
        bail!("{} failed with {status}", script.display());
    }
    Ok(())
}

/// Summary, report and plots from everything under `out/runs`. Without `plots` the plots
/// already in `out` are left as they are and linked.
pub fn report(out: &Path, traces: &Path, plots: bool) -> Result<u8> {
    let (groups, verdicts) = summarize_runs(out, traces)?;
    std::fs::write(out.join("summary.json"), summary_json(&groups, &verdicts)?)?;
    if plots {
        draw_plots(Path::new("scripts/plots/experiment.py"), out)?;
    }
    let plot_files = plot_files(out)?;
    std::fs::write(out.join("report.md"), summary::render_markdown(&groups, &verdicts, &plot_files))?;
    // The checkout's own results: the docs' generated tables follow the new summary at once.
    let docs_dir = std::fs::canonicalize("docs/experiments").ok();
    if docs_dir.is_some() && std::fs::canonicalize(out).ok() == docs_dir {
        for region in crate::docs::update(Path::new("."), true)? {
            println!("regenerated {region}");
        }
    }
    for v in &verdicts {
        println!(
            "{:<4} {}/{} {}: {} — {}",
            if v.met { "MET" } else { "MISS" },
            v.scenario,
            v.variant,
            v.kernel,
            v.target,
            v.measured
        );
    }
    println!("report: {}", out.join("report.md").display());
    Ok(0)
}
