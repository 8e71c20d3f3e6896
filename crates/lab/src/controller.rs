//! The contention scenario the demo shows and the controller test asserts on: a protected
//! cgroup and two low-tier cgroups under a 512 MiB parent, no swap, run three ways (the
//! protected task alone, all three unmanaged, all three with the memqos daemon).
//!
//! The protected workload bursts like an agent running tests (64 -> 256 MiB, three times);
//! each low-tier workload ramps to 200 MiB. Together they need more than the parent limit.

use crate::configs::DaemonConfig;
use crate::daemon_process::{count_writes, DaemonProcess};
use crate::workload::PhasesReport;
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit, MemoryEvents, Pressure};
use memqos_policy::size::MIB;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HIGH_PROFILE: &str = "64:1500,256:2500,64:2500,256:2500,64:2500,256:2500,0:0";
pub const LOW_PROFILE: &str = "200:10000,200:4000,0:0";
/// What a low task needs when nothing holds it back: its profile's length.
pub const LOW_NOMINAL_SECS: f64 = 14.0;
pub const PARENT_MAX: u64 = 512 * MIB;
/// The daemon config of the managed run: `crates/lab/configs/controller.toml`.
pub const CONFIG: &str = "controller.toml";

#[derive(Debug, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    pub secs: f64,
    pub outcome: String,
    /// Its cgroup's memory.events when it ended (`high`: how often the kernel throttled it).
    pub events: MemoryEvents,
    /// Its cgroup's memory.pressure when it ended: `some.total_us` is the time any of its
    /// tasks stalled on memory.
    pub pressure: Pressure,
    /// What the workload reported (lateness behind its schedule); `None` if it was killed.
    pub workload: Option<PhasesReport>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Run {
    pub policy: String,
    pub tasks: Vec<Task>,
    /// memory.events oom_kill of the parent.
    pub oom_kills: u64,
    pub daemon_writes: usize,
    /// The daemon's writes, one line each (seconds since the daemon started, cgroup, knob,
    /// value, why): what a failed assertion is explained by.
    #[serde(default)]
    pub daemon_timeline: Vec<String>,
}

impl Run {
    pub fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.name == name)
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub kernel: String,
    pub solo: Run,
    pub unmanaged: Run,
    pub managed: Run,
    /// memory.high of the low cgroups right after the daemon stopped (SIGTERM).
    pub low_high_after_stop: Vec<String>,
}

/// The parent `qos` (memory.max 512 MiB) and its children high, low1, low2.
pub fn setup() -> Result<(Cgroup, [Cgroup; 3])> {
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

/// Removes the children and the parent (tasks must be gone).
pub fn teardown(parent: &Cgroup) {
    for k in parent.children().unwrap_or_default() {
        let _ = k.remove();
    }
    let _ = parent.remove();
}

/// Starts `memqos-lab workload phases` with `profile` in `cg` (the binary at `lab`: a test's
/// own executable is not it), stdout piped (its PhasesReport).
pub fn start(lab: &Path, cg: &Cgroup, profile: &str) -> Result<Child> {
    Command::new(lab)
        .args(["workload", "phases", "--phases", profile, "--cgroup"])
        .arg(cg.path())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting a workload")
}

/// Runs the workloads to completion; the high cgroup is removed as soon as its task is done
/// (a finished sandbox goes away, and with it its protection).
fn run_tasks(policy: &str, parent: &Cgroup, specs: &[(&str, &Cgroup, &str)]) -> Result<Run> {
    let exe = std::env::current_exe()?;
    let t0 = Instant::now();
    let mut running = Vec::new();
    for (name, cg, profile) in specs {
        running.push((*name, (*cg).clone(), start(&exe, cg, profile)?));
    }
    let mut tasks = Vec::new();
    while !running.is_empty() {
        let mut i = 0;
        while i < running.len() {
            if let Some(status) = running[i].2.try_wait()? {
                let (name, cg, mut child) = running.remove(i);
                let secs = t0.elapsed().as_secs_f64();
                let events = cg.memory_events()?;
                let pressure = cg.memory_pressure()?;
                if name == "high" {
                    let _ = cg.remove();
                }
                let mut stdout = String::new();
                if let Some(mut out) = child.stdout.take() {
                    std::io::Read::read_to_string(&mut out, &mut stdout)?;
                }
                let workload = stdout.lines().find_map(|l| serde_json::from_str::<PhasesReport>(l).ok());
                let outcome = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                    (Some(0), _) => "finished".to_string(),
                    (_, Some(9)) => "killed (SIGKILL)".to_string(),
                    (c, s) => format!("exit {c:?} signal {s:?}"),
                };
                tasks.push(Task { name: name.to_owned(), secs, outcome, events, pressure, workload });
            } else {
                i += 1;
            }
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("workloads still running after 600 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Run {
        policy: policy.to_owned(),
        tasks,
        oom_kills: parent.memory_events()?.oom_kill,
        daemon_writes: 0,
        daemon_timeline: Vec::new(),
    })
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
    let config = DaemonConfig::named(CONFIG);
    let state_dir = config.state_dir();
    std::fs::create_dir_all(&state_dir)?;
    let path = state_dir.join("memqos.toml");
    config.write(&path)?;
    let daemon = DaemonProcess::start(&std::env::current_exe()?, &path, &state_dir, &[], Stdio::null())?;
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
        m.daemon_timeline = timeline(&log);
    }
    Ok(Report { kernel, solo, unmanaged, managed: managed?, low_high_after_stop })
}

/// One line per write of the daemon's event log, timed from its first line.
fn timeline(log: &str) -> Vec<String> {
    let lines = memqos_daemon::events::parse(log);
    let t0 = lines.first().map_or(0.0, |l| l.ts);
    memqos_daemon::events::writes(&lines)
        .map(|(ts, w)| format!("{:7.3} s {} {} {} ({})", ts - t0, w.cgroup, w.file, w.value, w.why))
        .collect()
}

pub fn print(r: &Report) {
    println!("kernel {}: parent memory.max 512 MiB, no swap", r.kernel);
    println!(
        "{:<8} {:<6} {:>9}  {:<18} {:>10} {:>10} {:>9}",
        "POLICY", "TASK", "TIME", "OUTCOME", "THROTTLED", "STALL", "MAX LATE"
    );
    for run in [&r.solo, &r.unmanaged, &r.managed] {
        for t in &run.tasks {
            let late = t.workload.as_ref().map_or("-".to_string(), |w| format!("{:.2} s", w.max_late_ms as f64 / 1e3));
            println!(
                "{:<8} {:<6} {:>7.1} s  {:<18} {:>10} {:>8.2} s {:>9}",
                run.policy,
                t.name,
                t.secs,
                t.outcome,
                t.events.high,
                t.pressure.some.total_us as f64 / 1e6,
                late
            );
        }
        println!(
            "{:<8} OOM kills: {}{}",
            run.policy,
            run.oom_kills,
            if run.daemon_writes > 0 { format!(", daemon knob writes: {}", run.daemon_writes) } else { String::new() }
        );
    }
    let high = |run: &Run| run.task("high").map_or(f64::NAN, |t| t.secs);
    println!(
        "protected task: {:.1} s managed vs {:.1} s alone ({:.2}x); low tasks' memory.high after the daemon stopped: {}",
        high(&r.managed),
        high(&r.solo),
        high(&r.managed) / high(&r.solo),
        r.low_high_after_stop.join(", ")
    );
    let lows: Vec<String> =
        r.managed.tasks.iter().filter(|t| t.name != "high").map(|t| format!("{:.1} s", t.secs)).collect();
    println!(
        "low tasks: finished in {} under memqos (nominal {LOW_NOMINAL_SECS:.0} s: delayed, not killed)",
        lows.join(" and ")
    );
}
