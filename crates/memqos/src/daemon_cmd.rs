//! `memqos daemon`, `memqos restore`, `memqos status`.

use anyhow::{bail, Result};
use clap::Args;
use memqos_daemon::{journal, status};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct DaemonArgs {
    /// The TOML config (see crates/policy/memqos.example.toml).
    #[arg(long, short)]
    config: PathBuf,
    /// Override the config's state_dir (journal, status, events.jsonl).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Do not start the guardian process that restores knobs if the daemon is killed.
    #[arg(long)]
    no_guardian: bool,
    /// Stop (and restore) after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Validate the config and exit; nothing is touched.
    #[arg(long)]
    check: bool,
    /// Where each tick's statistics come from: text (cgroupfs), bpf (memcg kfuncs, 7.0+)
    /// or auto (bpf where the kernel has the kfuncs).
    #[arg(long, default_value = "text")]
    stats_backend: memqos_stats::BackendChoice,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// State directory holding journal.json.
    #[arg(long, conflicts_with = "config")]
    state_dir: Option<PathBuf>,
    /// Take the state directory from this config.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Guardian mode: wait for EOF on stdin (the daemon exiting), then restore.
    #[arg(long, hide = true)]
    await_eof: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long, conflicts_with = "config")]
    state_dir: Option<PathBuf>,
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

fn state_dir(state_dir: Option<PathBuf>, config: Option<PathBuf>) -> Result<PathBuf> {
    Ok(match (state_dir, config) {
        (Some(d), _) => d,
        (None, Some(c)) => memqos_daemon::load_config(&c)?.state_dir,
        (None, None) => PathBuf::from("/var/lib/memqos"),
    })
}

pub fn daemon(a: DaemonArgs) -> Result<u8> {
    if a.check {
        let cfg = memqos_daemon::load_config(&a.config)?;
        println!("{}: ok ({} tiers, cgroup_root {})", a.config.display(), cfg.tiers.len(), cfg.cgroup_root.display());
        return Ok(0);
    }
    memqos_daemon::run(memqos_daemon::Options {
        config_path: a.config,
        state_dir: a.state_dir,
        guardian: !a.no_guardian,
        exe: std::env::current_exe()?,
        duration: a.duration.map(Duration::from_secs_f64),
        stats_backend: a.stats_backend,
    })?;
    Ok(0)
}

pub fn restore(a: RestoreArgs) -> Result<u8> {
    let dir = state_dir(a.state_dir, a.config)?;
    if a.await_eof {
        // The daemon handles SIGINT/SIGTERM itself; the guardian must outlive a terminal's ^C.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    }
    match journal::restore_state_dir(&dir)? {
        None => {
            if !a.await_eof {
                println!("nothing to restore in {}", dir.display());
            }
            Ok(0)
        }
        Some(r) => {
            for e in &r.restored {
                println!("restored {}/{} = {}", e.cgroup, e.file, e.original);
            }
            for e in &r.vanished {
                println!("skipped {}/{}: cgroup is gone", e.cgroup, e.file);
            }
            for (e, err) in &r.failed {
                eprintln!("FAILED {}/{}: {err}", e.cgroup, e.file);
            }
            if !r.failed.is_empty() {
                bail!("{} knob(s) could not be restored; the journal keeps them for a retry", r.failed.len());
            }
            Ok(0)
        }
    }
}

pub fn status(a: StatusArgs) -> Result<u8> {
    let dir = state_dir(a.state_dir, a.config)?;
    let Some(s) = status::read(&dir)? else {
        if a.json {
            println!("null");
        } else {
            println!("no memqos daemon is running with state directory {}", dir.display());
        }
        return Ok(3);
    };
    let alive = unsafe { libc::kill(s.pid as i32, 0) } == 0;
    if a.json {
        let mut v = serde_json::to_value(&s)?;
        v["alive"] = serde_json::json!(alive);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if alive { 0 } else { 3 });
    }
    let mib = |b: u64| format!("{:.0}M", b as f64 / 1048576.0);
    println!(
        "memqos daemon pid {} ({}), config {}",
        s.pid,
        if alive { "running" } else { "NOT RUNNING: stale status" },
        s.config
    );
    println!("cgroup root {}: usage {} / max {}", s.cgroup_root, mib(s.parent_usage_bytes), s.parent_max);
    println!(
        "{:<28} {:<10} {:>8} {:>12} {:>12} {:>10} {:>7}",
        "CGROUP", "TIER", "USAGE", "HIGH", "(ORIGINAL)", "LOW/MIN", "PSI10"
    );
    for c in &s.cgroups {
        let lim = |v: &serde_json::Value| match v.get("bytes").and_then(|b| b.as_u64()) {
            Some(b) => mib(b),
            None => v.as_str().unwrap_or("max").to_string(),
        };
        let knobs = &c["knobs"];
        let low = if knobs["min"].get("bytes").and_then(|b| b.as_u64()).unwrap_or(0) > 0 {
            lim(&knobs["min"])
        } else {
            lim(&knobs["low"])
        };
        println!(
            "{:<28} {:<10} {:>8} {:>12} {:>12} {:>10} {:>7.2}{}",
            c["cgroup"].as_str().unwrap_or("?"),
            c["tier"].as_str().unwrap_or("?"),
            mib(c["usage_bytes"].as_u64().unwrap_or(0)),
            lim(&knobs["high"]),
            lim(&c["original"]["high"]),
            low,
            c["psi_some_avg10"].as_f64().unwrap_or(0.0),
            if knobs["frozen"].as_bool() == Some(true) { "  FROZEN" } else { "" },
        );
    }
    if s.oom_score_adj_processes > 0 {
        println!("oom_score_adj set on {} process(es) of tiers with oom_score_adj", s.oom_score_adj_processes);
    }
    println!("\nlast decisions:");
    for d in &s.recent_decisions {
        println!(
            "  {}/{} = {}  ({})",
            d["cgroup"].as_str().unwrap_or(""),
            d["file"].as_str().unwrap_or(""),
            d["value"].as_str().unwrap_or(""),
            d["why"].as_str().unwrap_or("")
        );
    }
    Ok(if alive { 0 } else { 3 })
}
