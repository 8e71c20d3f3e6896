//! `memqos-lab demo`: boots each kernel series and shows, inside the guest, what memqos builds on.

use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_policy::size::MIB;
use memqos_vmtest::self_run;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Host side: one guest per kernel series, each running `memqos-lab demo --in-guest`.
pub fn run(kernel_list: &str, in_guest: bool, json: bool) -> Result<u8> {
    if in_guest {
        if json {
            // Only the controller scenario, as JSON: what the controller test asserts on.
            println!("{}", serde_json::to_string(&crate::controller::run()?)?);
            return Ok(0);
        }
        guest_demo()?;
        println!("\n== the memqos controller: protected task + two low-tier tasks under a 512 MiB parent ==");
        crate::controller::print(&crate::controller::run()?);
        return Ok(0);
    }
    let mut worst = 0u8;
    for kernel in self_run::kernels(kernel_list)? {
        println!("=== booting Debian kernel {} in QEMU ===", kernel.release());
        let run = self_run::run_self(&kernel, &["demo".into(), "--in-guest".into()], |g| {
            g.timeout(Duration::from_secs(900))
        })?;
        for line in run.console.lines().filter(|l| !l.starts_with("memqos-init:") && !l.starts_with('[')) {
            println!("{line}");
        }
        println!(
            "=== guest exit {} (boot {:.1} s, total {:.1} s, {:?}) ===\n",
            run.exit_code, run.boot_secs, run.wall_secs, run.accel
        );
        worst = worst.max(run.exit_code.clamp(0, 255) as u8);
    }
    Ok(worst)
}

fn guest_demo() -> Result<()> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    println!("guest kernel {}", release.trim());
    let root = Cgroup::new("/sys/fs/cgroup");
    println!("cgroup v2 root controllers: {}", root.controllers()?.join(" "));

    println!("\n-- memory.high = 32 MiB, workload allocates 64 MiB (no swap) --");
    let cg = root.child("demo-high");
    cg.create()?;
    cg.set_limit("memory.high", Limit::Bytes(32 * MIB))?;
    let (status, secs) = alloc_and_watch(&cg, 64)?;
    let ev = cg.memory_events()?;
    println!(
        "finished: {status}, {secs:.1} s; memory.events high={} max={} oom_kill={} -> throttled, not killed",
        ev.high, ev.max, ev.oom_kill
    );

    println!("\n-- same workload alone, no limit (baseline) --");
    let free = root.child("demo-free");
    free.create()?;
    let (status, secs_free) = alloc_and_watch(&free, 64)?;
    println!("finished: {status}, {secs_free:.1} s; throttling made it {:.1}x slower", secs / secs_free.max(0.01));

    println!("\n-- memory.max = 32 MiB, same workload --");
    let hard = root.child("demo-max");
    hard.create()?;
    hard.set_limit("memory.max", Limit::Bytes(32 * MIB))?;
    let (status, _) = alloc_and_watch(&hard, 64)?;
    let ev = hard.memory_events()?;
    println!(
        "finished: {status}; memory.events max={} oom={} oom_kill={} -> the kernel OOM-killed it",
        ev.max, ev.oom, ev.oom_kill
    );
    for cg in [cg, free, hard] {
        let _ = cg.remove();
    }
    Ok(())
}

/// Runs `memqos-lab workload alloc` in `cg`, printing memory.current every 2 s.
fn alloc_and_watch(cg: &Cgroup, mb: u64) -> Result<(String, f64)> {
    let exe = std::env::current_exe()?;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .args(["workload", "alloc", "--mb", &mb.to_string(), "--cgroup"])
        .arg(cg.path())
        .stdout(Stdio::null())
        .spawn()
        .context("starting the workload")?;
    let mut next_print = Duration::ZERO;
    loop {
        if let Some(st) = child.try_wait()? {
            let secs = start.elapsed().as_secs_f64();
            let desc = match (st.code(), std::os::unix::process::ExitStatusExt::signal(&st)) {
                (Some(0), _) => "exit 0".to_string(),
                (_, Some(9)) => "killed by SIGKILL".to_string(),
                (c, s) => format!("exit {c:?} signal {s:?}"),
            };
            return Ok((desc, secs));
        }
        if start.elapsed() >= next_print {
            let cur = cg.memory_current().unwrap_or(0);
            let ev = cg.memory_events().unwrap_or_default();
            println!(
                "  t={:>5.1}s memory.current={:>5.1} MiB  events: high={} max={}",
                start.elapsed().as_secs_f64(),
                cur as f64 / MIB as f64,
                ev.high,
                ev.max
            );
            next_print += Duration::from_secs(2);
        }
        if start.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            bail!("workload in {} did not finish in 600 s", cg.path().display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
