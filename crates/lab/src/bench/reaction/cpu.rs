//! The daemon's CPU cost inside the guest: managed trees of each size, idle and under a steady
//! fault load, with the BPF source on and off.

use super::guest::read_events;
use super::{CpuCost, STATE};
use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_replay::memory::map_anonymous;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One managed cgroup in ten is protected in the CPU-cost trees.
const CPU_PROTECTED_EVERY: usize = 10;

fn cpu_config(bpf: bool, interval_ms: u64) -> DaemonConfig {
    DaemonConfig::named("cpu-cost.toml").set("signals.bpf", bpf).set("signals.sampling_interval_ms", interval_ms as i64)
}

/// The machine's page faults so far (`pgfault` of /proc/vmstat).
fn vm_pgfault() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/vmstat")?;
    text.lines()
        .find_map(|l| l.strip_prefix("pgfault "))
        .context("no pgfault in /proc/vmstat")?
        .trim()
        .parse()
        .map_err(Into::into)
}

/// For each size, the daemon managing that many cgroups (one in ten protected, the rest
/// throttleable, all sources on), idle and with a steady fault load in a protected cgroup:
/// default sampling (500 ms) with the BPF source on, then 5 s sampling idle (what the idle
/// cost is made of); at the smallest size also with the BPF source off.
pub(super) fn cpu_cost(window: Duration, sizes: &[usize], errors: &mut Vec<String>) -> Result<Vec<CpuCost>> {
    let mut out = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let mut arms = vec![(true, 500, &["idle", "faults"][..]), (true, 5000, &["idle"][..])];
        if i == 0 {
            arms.push((false, 500, &["idle", "faults"][..]));
        }
        // One size failing (the daemon refusing a tree that large, say) is reported and the
        // others are still measured: a 10,000-cgroup failure used to lose the whole run.
        match cpu_cost_at(window, size, &arms) {
            Ok(costs) => out.extend(costs),
            Err(e) => {
                eprintln!("cpu cost: {size} cgroups: FAILED: {e:#}");
                errors.push(format!("{size} cgroups: {e:#}"));
            }
        }
    }
    Ok(out)
}

fn cpu_cost_at(window: Duration, size: usize, arms: &[(bool, u64, &[&str])]) -> Result<Vec<CpuCost>> {
    let root = Cgroup::new("/sys/fs/cgroup");
    let parent = root.child("cpucost");
    parent.create()?;
    parent.write_string("cgroup.subtree_control", "+memory")?;
    let names: Vec<String> =
        (0..size).map(|i| if i % CPU_PROTECTED_EVERY == 0 { format!("p{i}") } else { format!("b{i}") }).collect();
    let made = Instant::now();
    for n in &names {
        parent.child(n).create()?;
    }
    eprintln!("cpu cost: {size} cgroups created in {:.1} s", made.elapsed().as_secs_f64());
    let measured = cpu_cost_arms(window, size, arms, &parent);
    for n in &names {
        let _ = parent.child(n).remove();
    }
    let _ = parent.remove();
    measured
}

fn cpu_cost_arms(
    window: Duration,
    size: usize,
    arms: &[(bool, u64, &[&str])],
    parent: &Cgroup,
) -> Result<Vec<CpuCost>> {
    let exe = std::env::current_exe()?;
    let mut out = Vec::new();
    for &(bpf, interval_ms, loads) in arms {
        cpu_config(bpf, interval_ms).write(Path::new("/run/memqos-cpucost.toml"))?;
        let _ = std::fs::remove_dir_all(STATE);
        std::fs::create_dir_all(STATE)?;
        let launched = Instant::now();
        let daemon = DaemonProcess::start_within(
            &exe,
            Path::new("/run/memqos-cpucost.toml"),
            Path::new(STATE),
            &["--no-guardian"],
            Stdio::null(),
            Duration::from_secs(30 + size as u64 / 50),
        )
        .context("daemon for the CPU cost")?;
        let startup_s = launched.elapsed().as_secs_f64();
        eprintln!("cpu cost: {size} cgroups: daemon's first sample done {startup_s:.1} s after launch");
        // Start-up (BPF load, first ticks, fds opened for every cgroup) excluded.
        std::thread::sleep(Duration::from_secs(3 + (size / 1000) as u64 * 2));
        for &load in loads {
            let mut loader = (load == "faults")
                .then(|| {
                    Command::new(&exe)
                        .args(["bench", "reaction", "--fault-load"])
                        .env("MEMQOS_BENCH_CGROUP", parent.child("p0").path())
                        .spawn()
                })
                .transpose()?;
            if loader.is_some() {
                std::thread::sleep(Duration::from_secs(1));
            }
            let events_before = read_events(&Path::new(STATE).join(memqos_daemon::events::EVENTS_FILE)).len();
            let (c0, f0, w0) = (daemon.cpu_seconds().context("daemon CPU time")?, vm_pgfault()?, Instant::now());
            std::thread::sleep(window);
            let (c1, f1, secs) =
                (daemon.cpu_seconds().context("daemon CPU time")?, vm_pgfault()?, w0.elapsed().as_secs_f64());
            let logged = read_events(&Path::new(STATE).join(memqos_daemon::events::EVENTS_FILE)).len() - events_before;
            if let Some(l) = loader.as_mut() {
                let _ = l.kill();
                let _ = l.wait();
            }
            let c = CpuCost {
                bpf,
                sampling_interval_ms: interval_ms,
                load: load.into(),
                cgroups: size,
                window_s: secs,
                cpu_pct: (c1 - c0) / secs * 100.0,
                faults_per_s: (f1 - f0) as f64 / secs,
                logged_events: logged,
                startup_s,
            };
            eprintln!(
                "cpu cost: {size} cgroups, bpf {bpf} sampling {interval_ms} ms {load}: {:.3} % ({:.0} faults/s)",
                c.cpu_pct, c.faults_per_s
            );
            out.push(c);
        }
        daemon.stop()?;
    }
    Ok(out)
}

/// Steady minor-fault load: map 4 MiB, touch every page, unmap, sleep 10 ms, forever.
pub(super) fn fault_load() -> Result<u8> {
    let cg = std::env::var("MEMQOS_BENCH_CGROUP").context("MEMQOS_BENCH_CGROUP unset")?;
    std::fs::write(Path::new(&cg).join("cgroup.procs"), std::process::id().to_string())?;
    let len = 4 << 20;
    loop {
        let p = map_anonymous(len).context("mmap")?.cast::<libc::c_void>();
        // SAFETY: advice on, touches inside and the unmap of our own fresh mapping.
        unsafe {
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE); // one fault per page
            for off in (0..len).step_by(4096) {
                (p as *mut u8).add(off).write_volatile(1);
            }
            libc::munmap(p, len);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
