//! `memqos daemon`, `memqos restore`, `memqos status`, `memqos explain`.

use anyhow::{bail, Result};
use clap::Args;
use memqos_daemon::{journal, lock, status};
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
    /// Where each periodic sample's statistics come from: text (cgroupfs files), bpf (one
    /// cgroup-iterator read with the memcg kfuncs, 7.0+) or auto (bpf where the config allows
    /// BPF, `signals.bpf = true`, and the kernel has the kfuncs; else text). The log's
    /// `stats_backend` event says which, and why not bpf.
    #[arg(long, default_value = "auto")]
    stats_backend: memqos_stats::BackendChoice,
    /// Observe and decide as usual but write nothing (no knob, no journal): each write it
    /// would make is logged with its reason, and `memqos status` shows the daemon as dry.
    #[arg(long)]
    dry_run: bool,
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
    #[arg(long, hide = true, conflicts_with = "watch")]
    await_eof: bool,
    /// Guardian of a daemon that is not this process's parent (a second container of the
    /// Kubernetes pod, which survives the daemon's container): every --interval-ms, take the
    /// state lock if no daemon holds it and restore a journal left behind; runs until
    /// stopped.
    #[arg(long)]
    watch: bool,
    /// How often --watch looks, ms.
    #[arg(long, default_value_t = 1000, requires = "watch", value_parser = clap::value_parser!(u64).range(50..=60_000))]
    interval_ms: u64,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long, conflicts_with = "config")]
    state_dir: Option<PathBuf>,
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// Only check that the daemon's loop completed an iteration within SECONDS (its
    /// heartbeat file): exit 0 if so, 4 if not, 3 if no daemon. A liveness probe.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    live_within: Option<u64>,
}

#[derive(Args)]
pub struct ExplainArgs {
    /// The cgroup: a path relative to the daemon's cgroup_root, or an absolute path below it.
    cgroup: String,
    /// State directory of the daemon (holds control.sock) [default: /run/memqos].
    #[arg(long, conflicts_with = "config")]
    state_dir: Option<PathBuf>,
    /// Take the state directory from this config.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Print the explanation as JSON.
    #[arg(long)]
    json: bool,
}

fn state_dir(state_dir: Option<PathBuf>, config: Option<PathBuf>) -> Result<PathBuf> {
    Ok(match (state_dir, config) {
        (Some(d), _) => d,
        (None, Some(c)) => memqos_daemon::load_config(&c)?.state_dir,
        (None, None) => PathBuf::from(memqos_schema::state::DEFAULT_STATE_DIR),
    })
}

pub fn daemon(a: DaemonArgs) -> Result<u8> {
    if a.check {
        let cfg = memqos_daemon::load_config(&a.config)?;
        println!("{}: ok ({} tiers, cgroup_root {})", a.config.display(), cfg.tiers.len(), cfg.cgroup_root.display());
        return Ok(0);
    }
    // SIGTERM/SIGINT stop the daemon, SIGHUP reloads its config.
    let handle = memqos_daemon::Handle::on_signals();
    memqos_daemon::run(
        memqos_daemon::Options {
            config_path: a.config,
            state_dir: a.state_dir,
            guardian: !a.no_guardian,
            exe: std::env::current_exe()?,
            duration: a.duration.map(Duration::from_secs_f64),
            stats_backend: a.stats_backend,
            dry_run: a.dry_run,
            echo: true,
            lock_memory: true,
            proc_swaps: memqos_daemon::PROC_SWAPS.into(),
        },
        handle,
    )?;
    Ok(0)
}

/// `memqos restore --watch`: see [`RestoreArgs::watch`]. A daemon that dies abruptly leaves
/// its journal and releases its lock (the kernel drops a dead holder's flock); the next look
/// finds the lock free and the journal there, and restores it. A daemon starting meanwhile
/// waits for the lock (it is held only while a restore runs) and restores anything left
/// itself, so the two never undo each other's work.
fn watch(dir: &std::path::Path, interval: Duration) -> Result<u8> {
    if let Err(e) = memqos_daemon::memlock::lock_all() {
        eprintln!("memqos restore --watch: {}", memqos_daemon::memlock::unlocked_message(&e));
    }
    eprintln!("memqos restore --watch: guarding {} every {} ms", dir.display(), interval.as_millis());
    loop {
        std::thread::sleep(interval);
        if !dir.join(journal::JOURNAL_FILE).exists() {
            continue;
        }
        let Ok(_lock) = lock::StateLock::try_acquire(dir, "memqos restore --watch") else {
            continue; // a daemon runs: it restores its own knobs
        };
        match journal::restore_state_dir(dir) {
            Ok(Some(r)) => {
                eprintln!(
                    "memqos restore --watch: the daemon left a journal: {} restored, {} gone, {} failed{}",
                    r.restored.len(),
                    r.vanished.len(),
                    r.failed.len(),
                    if r.failed.is_empty() { String::new() } else { format!(": {}", r.failures().join("; ")) }
                );
            }
            Ok(None) => {}
            Err(e) => eprintln!("memqos restore --watch: {e:#}"),
        }
    }
}

pub fn restore(a: RestoreArgs) -> Result<u8> {
    let dir = state_dir(a.state_dir, a.config)?;
    if a.watch {
        return watch(&dir, Duration::from_millis(a.interval_ms));
    }
    let _lock = if a.await_eof {
        // The daemon handles SIGINT/SIGTERM itself; the guardian must outlive a terminal's ^C.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
        // It must act while memory is short too: the daemon's reason to lock (memlock).
        if let Err(e) = memqos_daemon::memlock::lock_all() {
            eprintln!("memqos restore: {}", memqos_daemon::memlock::unlocked_message(&e));
        }
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).map(|n| n > 0).unwrap_or(false) {}
        // The daemon is gone; the kernel releases its lock as it exits, possibly a moment
        // after our pipe's EOF. If the lock stays taken, a restarted daemon holds it and has
        // restored (or will restore) the journal itself: nothing for us to do.
        match lock::StateLock::acquire_within(&dir, GUARDIAN_PATIENCE)? {
            Some(l) => l,
            None => return Ok(0),
        }
    } else {
        lock::StateLock::try_acquire(&dir, "memqos restore")?
    };
    match journal::restore_state_dir(&dir)? {
        None => {
            if !a.await_eof {
                println!("nothing to restore in {}", dir.display());
            }
            Ok(0)
        }
        Some(r) => {
            for m in &r.skipped {
                eprintln!("{m}");
            }
            if !r.other_boot.is_empty() {
                eprintln!(
                    "{} entries of another boot not restored (cgroup ids and pids are reused across boots); the journal is kept aside as {}/journal.json.boot-*",
                    r.other_boot.len(),
                    dir.display()
                );
            }
            for e in &r.restored {
                println!("restored {} = {}", e.describe(), e.original);
            }
            for e in &r.vanished {
                println!("skipped {}: gone (or re-created: another cgroup now)", e.describe());
            }
            for f in r.failures() {
                eprintln!("FAILED {f}");
            }
            if !r.failed.is_empty() {
                bail!(
                    "{} knob(s) could not be restored; the journal in {} keeps them for a retry",
                    r.failed.len(),
                    dir.display()
                );
            }
            Ok(0)
        }
    }
}

/// How long the guardian waits for a dead daemon's lock to be released.
const GUARDIAN_PATIENCE: Duration = Duration::from_secs(2);

pub fn status(a: StatusArgs) -> Result<u8> {
    let dir = state_dir(a.state_dir, a.config)?;
    if let Some(within) = a.live_within {
        return live_within(&dir, within);
    }
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
    } else {
        print!("{}", status::render(&s, alive));
    }
    Ok(if alive { 0 } else { 3 })
}

/// `memqos status --live-within`: the heartbeat's age against the bound.
fn live_within(dir: &std::path::Path, within: u64) -> Result<u8> {
    let path = dir.join(memqos_schema::state::HEARTBEAT_FILE);
    let age = match std::fs::metadata(&path).and_then(|m| m.modified()) {
        Ok(t) => t.elapsed().unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no heartbeat at {}: no memqos daemon has run a loop with this state directory", path.display());
            return Ok(3);
        }
        Err(e) => bail!("{}: {e}", path.display()),
    };
    if age.as_secs() <= within {
        println!("live: the loop completed an iteration {:.1} s ago", age.as_secs_f64());
        Ok(0)
    } else {
        println!("stuck: the loop's last completed iteration was {:.0} s ago (bound {within} s)", age.as_secs_f64());
        Ok(4)
    }
}

/// Asks the running daemon over its control socket. Exit 0 explained, 1 error, 3 no daemon.
pub fn explain(a: ExplainArgs) -> Result<u8> {
    use memqos_daemon::control::{self, Reply, Request};
    let dir = state_dir(a.state_dir, a.config)?;
    let reply = match control::ask(&dir, &Request::Explain(a.cgroup.clone())) {
        Ok(r) => r,
        Err(e) if e.to_string().contains("no memqos daemon is running") => {
            eprintln!("memqos: {e:#}");
            return Ok(3);
        }
        Err(e) => return Err(e),
    };
    match reply {
        Reply::Ok(e) if a.json => println!("{}", serde_json::to_string_pretty(&e)?),
        Reply::Ok(e) => print!("{}", memqos_daemon::explain::render(&e)),
        Reply::Error(msg) => bail!("{}: {msg}", a.cgroup),
    }
    Ok(0)
}
