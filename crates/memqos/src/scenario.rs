//! The contention scenario the demo shows and the controller test asserts on: a protected
//! cgroup and two low-tier cgroups under a 512 MiB parent, no swap, run three ways (the
//! protected task alone, all three unmanaged, all three with the memqos daemon).
//!
//! The protected workload bursts like an agent running tests (64 -> 256 MiB, three times);
//! each low-tier workload ramps to 200 MiB. Together they need more than the parent limit.

use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_daemon::process::{count_writes, DaemonProcess};
use serde::Serialize;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
pub const HIGH_PROFILE: &str = "64:1500,256:2500,64:2500,256:2500,64:2500,256:2500,0:0";
pub const LOW_PROFILE: &str = "200:10000,200:4000,0:0";
/// What a low task needs when nothing holds it back: its profile's length.
pub const LOW_NOMINAL_SECS: f64 = 14.0;
const PARENT_MAX: u64 = 512 * MIB;
const STATE_DIR: &str = "/run/memqos-demo";

pub const CONFIG: &str = r#"
cgroup_root = "/sys/fs/cgroup/qos"
state_dir = "/run/memqos-demo"
[signals]
sampling_interval_ms = 200
[[tier]]
name = "critical"
match = ["high*"]
protect = "low"
[[tier]]
name = "batch"
match = ["low*"]
throttle = true
[policy]
headroom_guard = "64M"
min_write_interval_ms = 500
hold_ms = 3000
"#;

#[derive(Debug, Serialize)]
pub struct Task {
    pub name: &'static str,
    pub secs: f64,
    pub outcome: String,
    /// memory.events `high` of its cgroup: how often the kernel throttled it.
    pub throttled: u64,
}

#[derive(Debug, Serialize)]
pub struct Run {
    pub policy: &'static str,
    pub tasks: Vec<Task>,
    /// memory.events oom_kill of the parent.
    pub oom_kills: u64,
    pub daemon_writes: usize,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub kernel: String,
    pub solo: Run,
    pub unmanaged: Run,
    pub managed: Run,
    /// memory.high of the low cgroups right after the daemon stopped (SIGTERM).
    pub low_high_after_stop: Vec<String>,
}

fn setup() -> Result<(Cgroup, [Cgroup; 3])> {
    let parent = Cgroup::new("/sys/fs/cgroup/qos");
    parent.create()?;
    parent.enable_controllers(&["memory"])?;
    parent.set_limit("memory.max", Limit::Bytes(PARENT_MAX))?;
    let kids = [parent.child("high"), parent.child("low1"), parent.child("low2")];
    for k in &kids {
        k.create()?;
    }
    Ok((parent, kids))
}

fn teardown(parent: &Cgroup) {
    for k in parent.children().unwrap_or_default() {
        let _ = k.remove();
    }
    let _ = parent.remove();
}

fn start(cg: &Cgroup, profile: &str) -> Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["workload", "phases", "--phases", profile, "--cgroup"])
        .arg(cg.path())
        .stdout(Stdio::null())
        .spawn()
        .context("starting a workload")
}

/// Runs the workloads to completion; the high cgroup is removed as soon as its task is done
/// (a finished sandbox goes away, and with it its protection).
fn run_tasks(policy: &'static str, parent: &Cgroup, specs: &[(&'static str, &Cgroup, &str)]) -> Result<Run> {
    let t0 = Instant::now();
    let mut running = Vec::new();
    for (name, cg, profile) in specs {
        running.push((*name, (*cg).clone(), start(cg, profile)?));
    }
    let mut tasks = Vec::new();
    while !running.is_empty() {
        let mut i = 0;
        while i < running.len() {
            if let Some(status) = running[i].2.try_wait()? {
                let (name, cg, _) = running.remove(i);
                let throttled = cg.memory_events().map(|e| e.high).unwrap_or(0);
                if name == "high" {
                    let _ = cg.remove();
                }
                let outcome = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                    (Some(0), _) => "finished".to_string(),
                    (_, Some(9)) => "killed (SIGKILL)".to_string(),
                    (c, s) => format!("exit {c:?} signal {s:?}"),
                };
                tasks.push(Task { name, secs: t0.elapsed().as_secs_f64(), outcome, throttled });
            } else {
                i += 1;
            }
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("workloads still running after 600 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Run { policy, tasks, oom_kills: parent.memory_events()?.oom_kill, daemon_writes: 0 })
}

/// Runs the three policies in this (guest) kernel.
pub fn run() -> Result<Report> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_owned();
    let (parent, [high, ..]) = setup()?;
    let solo = run_tasks("solo", &parent, &[("high", &high, HIGH_PROFILE)])?;
    teardown(&parent);

    let (parent, [high, low1, low2]) = setup()?;
    let all = |h, a, b| [("high", h, HIGH_PROFILE), ("low1", a, LOW_PROFILE), ("low2", b, LOW_PROFILE)];
    let unmanaged = run_tasks("none", &parent, &all(&high, &low1, &low2))?;
    teardown(&parent);

    let (parent, [high, low1, low2]) = setup()?;
    std::fs::create_dir_all(STATE_DIR)?;
    let config = Path::new(STATE_DIR).join("memqos.toml");
    std::fs::write(&config, CONFIG)?;
    let daemon = DaemonProcess::start(&std::env::current_exe()?, &config, Path::new(STATE_DIR), &[], Stdio::null())?;
    let mut managed = run_tasks("memqos", &parent, &all(&high, &low1, &low2));
    let (status, log) = daemon.stop()?;
    let low_high_after_stop =
        [&low1, &low2].iter().map(|c| c.limit("memory.high").map(|l| l.to_string()).unwrap_or_default()).collect();
    teardown(&parent);
    if !status.success() {
        bail!("the daemon exited with {status}");
    }
    if let Ok(m) = managed.as_mut() {
        m.daemon_writes = count_writes(&log);
    }
    Ok(Report { kernel, solo, unmanaged, managed: managed?, low_high_after_stop })
}

pub fn print(r: &Report) {
    println!("kernel {}: parent memory.max 512 MiB, no swap", r.kernel);
    println!("{:<8} {:<6} {:>9}  {:<18} {:>10}", "POLICY", "TASK", "TIME", "OUTCOME", "THROTTLED");
    for run in [&r.solo, &r.unmanaged, &r.managed] {
        for t in &run.tasks {
            println!("{:<8} {:<6} {:>7.1} s  {:<18} {:>10}", run.policy, t.name, t.secs, t.outcome, t.throttled);
        }
        println!(
            "{:<8} OOM kills: {}{}",
            run.policy,
            run.oom_kills,
            if run.daemon_writes > 0 { format!(", daemon knob writes: {}", run.daemon_writes) } else { String::new() }
        );
    }
    let high = |run: &Run| run.tasks.iter().find(|t| t.name == "high").map(|t| t.secs).unwrap_or(f64::NAN);
    println!(
        "protected task: {:.1} s managed vs {:.1} s alone ({:.2}x); low tasks' memory.high after the daemon stopped: {}",
        high(&r.managed), high(&r.solo), high(&r.managed) / high(&r.solo), r.low_high_after_stop.join(", ")
    );
    let lows: Vec<String> =
        r.managed.tasks.iter().filter(|t| t.name != "high").map(|t| format!("{:.1} s", t.secs)).collect();
    println!(
        "low tasks: finished in {} under memqos (nominal {LOW_NOMINAL_SECS:.0} s: delayed, not killed)",
        lows.join(" and ")
    );
}
