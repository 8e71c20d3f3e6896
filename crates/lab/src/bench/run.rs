//! `memqos-lab bench run`: what `memqos run` adds to a tool call, in real-kernel guests.
//!
//! Each iteration starts, in a random-free fixed rotation so drift hits every arm alike:
//! - `plain`: `/bin/true` spawned and waited for (the baseline: a plain exec);
//! - `binary`: `memqos --version` (the cost of starting the memqos binary at all);
//! - `run`: `memqos run --session bench -- /bin/true` (clone3 CLONE_INTO_CGROUP);
//! - `run-fork`: the same with MEMQOS_RUN_SPAWN=fork (fork, then a write to cgroup.procs:
//!   the migration path older kernels take);
//! - `lean-binary`: `memqos-run --version` (starting the small binary at all);
//! - `lean-run`: `memqos-run --session bench -- /bin/true` (the same call as `run` through the
//!   small binary, which links no libelf/libz and builds no command tree).
//!
//! The added cost per call is the median of `run` minus the median of `plain`; the paired
//! per-iteration differences are reported too. Times are host wall-clock of the guest's
//! CLOCK_MONOTONIC under TCG emulation: absolute figures are slower than on hardware.

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_cgroupfs::Cgroup;
use memqos_vmtest::self_run;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = "/sys/fs/cgroup/agents-bench";
const ARMS: [&str; 6] = ["plain", "binary", "run", "run-fork", "lean-binary", "lean-run"];

#[derive(Args)]
pub struct BenchRunArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// Calls per arm.
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// Where the JSON result goes (kernels measured earlier and not in this run are kept).
    #[arg(long, default_value = "docs/agent/run-overhead.json")]
    out: PathBuf,
    #[arg(long, hide = true)]
    in_guest: bool,
}

/// Distribution of one arm, milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Dist {
    pub n: usize,
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelResult {
    pub kernel: String,
    /// Per arm (plain, binary, run, run-fork).
    pub arms: Vec<(String, Dist)>,
    /// median(run) - median(plain), ms.
    pub added_p50_ms: f64,
    /// Paired differences run - plain of the same iteration, ms.
    pub added_paired: Dist,
    /// median(run-fork) - median(plain), ms.
    pub added_fork_p50_ms: f64,
    /// median(lean-run) - median(plain), ms, and the paired differences (absent in results
    /// from before memqos-run).
    #[serde(default)]
    pub added_lean_p50_ms: Option<f64>,
    #[serde(default)]
    pub added_lean_paired: Option<Dist>,
}

pub fn run(a: BenchRunArgs) -> Result<u8> {
    if a.calls < 10 {
        bail!("--calls must be at least 10");
    }
    if a.in_guest {
        let r = in_guest(a.calls)?;
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("run-overhead.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    let mut all = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!("bench run: booting {} ({} calls per arm)", kernel.release(), a.calls);
        let args = ["bench", "run", "--in-guest", "--calls", &a.calls.to_string()].map(String::from);
        let run = self_run::run_self(&kernel, &args, |g| g.timeout(Duration::from_secs(1200)))?;
        let file = run.results_dir.join("run-overhead.json");
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "guest on {} wrote no {} (exit {}); console:\n{}",
                kernel.release(),
                file.display(),
                run.exit_code,
                run.console
            )
        })?;
        let r: KernelResult = serde_json::from_str(&text)?;
        print_table(&r);
        all.push(r);
    }
    let all = super::keep_earlier_kernels(&a.out, all);
    let doc = serde_json::json!({
        "benchmark": "memqos bench run",
        "arms": "plain = /bin/true; binary = memqos --version; run = memqos run -- /bin/true (clone3 CLONE_INTO_CGROUP); run-fork = the same with MEMQOS_RUN_SPAWN=fork (migration through cgroup.procs); lean-binary = memqos-run --version; lean-run = memqos-run -- /bin/true (the small binary)",
        "method": "arms interleaved per iteration after 10 warm-up rounds; wall time from spawn to reaped exit in the guest; milliseconds",
        "target": "added p50 <= 5 ms per call on 7.x",
        "host_note": "TCG guests (no KVM) on a shared 2-core host: absolute times include emulation overhead and host noise",
        "kernels": all,
        // This invocation's (kernels kept from an earlier file keep no provenance of theirs).
        "provenance": crate::provenance::Provenance::collect(std::path::Path::new("."), &a.kernel),
    });
    super::write_result(&a.out, &doc)?;
    Ok(0)
}

fn in_guest(calls: usize) -> Result<KernelResult> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
    let root = Cgroup::new(ROOT);
    root.create()?;
    root.enable_controllers(&["memory"])?;
    // The packaged binaries, built beside memqos-lab by a workspace build (`cargo build
    // --release`): what a host runs is what is timed, not the larger lab binary.
    let lab = std::env::current_exe()?;
    let exe = lab.with_file_name("memqos");
    let lean = lab.with_file_name("memqos-run");
    for (bin, package) in [(&exe, "memqos"), (&lean, "memqos-agent")] {
        if !bin.is_file() {
            bail!("{} is missing: build it with `cargo build --release -p {package}`", bin.display());
        }
    }
    let spawn = |arm: &str| -> Result<f64> {
        let mut cmd = match arm {
            "plain" => Command::new("/bin/true"),
            "binary" => {
                let mut c = Command::new(&exe);
                c.arg("--version");
                c
            }
            "lean-binary" => {
                let mut c = Command::new(&lean);
                c.arg("--version");
                c
            }
            "lean-run" => {
                let mut c = Command::new(&lean);
                c.args(["--root", ROOT, "--session", "bench", "--", "/bin/true"]);
                c
            }
            _ => {
                let mut c = Command::new(&exe);
                c.args(["run", "--root", ROOT, "--session", "bench", "--", "/bin/true"]);
                if arm == "run-fork" {
                    c.env("MEMQOS_RUN_SPAWN", "fork");
                }
                c
            }
        };
        cmd.stdout(Stdio::null());
        let t = Instant::now();
        let st = cmd.status()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if !st.success() {
            bail!("{arm}: {st}");
        }
        Ok(ms)
    };
    for _ in 0..10 {
        for arm in ARMS {
            spawn(arm)?;
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(calls); ARMS.len()];
    for i in 0..calls {
        // Rotate the order so no arm always follows the same one.
        for k in 0..ARMS.len() {
            let j = (i + k) % ARMS.len();
            samples[j].push(spawn(ARMS[j])?);
        }
    }
    let leftovers = Cgroup::new(format!("{ROOT}/bench")).children()?.len();
    if leftovers != 0 {
        bail!("{leftovers} call cgroups left under {ROOT}/bench");
    }
    let paired: Vec<f64> = samples[2].iter().zip(&samples[0]).map(|(r, p)| r - p).collect();
    let lean_paired: Vec<f64> = samples[5].iter().zip(&samples[0]).map(|(r, p)| r - p).collect();
    let dists: Vec<Dist> = samples.iter().map(|s| dist(s)).collect();
    Ok(KernelResult {
        kernel,
        added_p50_ms: dists[2].p50 - dists[0].p50,
        added_fork_p50_ms: dists[3].p50 - dists[0].p50,
        added_paired: dist(&paired),
        added_lean_p50_ms: Some(dists[5].p50 - dists[0].p50),
        added_lean_paired: Some(dist(&lean_paired)),
        arms: ARMS.iter().map(|a| a.to_string()).zip(dists).collect(),
    })
}

fn dist(v: &[f64]) -> Dist {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize];
    Dist { n: s.len(), p10: q(0.10), p50: q(0.50), p90: q(0.90), p99: q(0.99), min: s[0], max: s[s.len() - 1] }
}

fn print_table(r: &KernelResult) {
    println!("kernel {}", r.kernel);
    println!(
        "  {:<11} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "arm", "N", "p10 ms", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    for (name, d) in &r.arms {
        println!(
            "  {:<11} {:>4} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            name, d.n, d.p10, d.p50, d.p90, d.p99, d.max
        );
    }
    let p = &r.added_paired;
    println!(
        "  added by memqos run: p50 {:.2} ms (median difference); paired per call p10 {:.2} / p50 {:.2} / p90 {:.2} ms; fork+migrate path p50 {:.2} ms",
        r.added_p50_ms, p.p10, p.p50, p.p90, r.added_fork_p50_ms
    );
    if let (Some(m), Some(p)) = (r.added_lean_p50_ms, &r.added_lean_paired) {
        println!(
            "  added by memqos-run: p50 {m:.2} ms (median difference); paired per call p10 {:.2} / p50 {:.2} / p90 {:.2} ms",
            p.p10, p.p50, p.p90
        );
    }
}

impl super::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}
