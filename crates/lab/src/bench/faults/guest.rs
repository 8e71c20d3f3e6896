//! The campaign's scenarios, run inside a guest (see the parent module for what each proves).

use super::{Check, DescriptorsResult, HostileResult, KernelResult, Phase, SigkillResult, Spread, StateDirResult};
use crate::bench::churn::{remove_when_empty, spawn_in};
use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_daemon::events::{self, Event, LogLine, Outcome, WriteEvent};
use memqos_daemon::journal::Journal;
use memqos_daemon::lock::StateLock;
use memqos_daemon::mono_ns;
use memqos_policy::EXPECTED_PEAK_XATTR;
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const SCENARIOS: &[&str] = &["sigkill", "hostile", "state_dir", "descriptors"];

const ROOT: &str = "/sys/fs/cgroup/faults";
/// Rehearsal on a host without cgroup v2 (a developer's check of the scenarios' own logic,
/// never a result): the tree is plain directories with fake cgroup files below this one.
const FAKE_ENV: &str = "MEMQOS_FAULTS_FAKE_ROOT";
const STATE: &str = "/run/memqos-faults";
const CONFIG: &str = "/run/memqos-faults.toml";
const MIB: u64 = 1 << 20;
const PARENT_LIMIT: u64 = 512 * MIB;
/// Names reused by the churn: `low/tool.{k % SLOTS}`.
const SLOTS: u64 = 50;
const CHURN_PERIOD: Duration = Duration::from_millis(10);
/// The tenants' own memory.high values start here: far above any cap memqos writes (at most
/// the parent's limit), page aligned so the kernel reads back exactly what was written.
const V_BASE: u64 = 1 << 30;
const RESTORE_PATIENCE: Duration = Duration::from_secs(30);

pub fn run(scenarios: &[String], kills: usize, seed: u64, cgroups: usize) -> Result<KernelResult> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
    let mut r = KernelResult { kernel, ..Default::default() };
    for s in scenarios {
        eprintln!("faults: scenario {s}");
        let t0 = Instant::now();
        let outcome = match s.as_str() {
            "sigkill" => sigkill(kills, seed).map(|x| r.sigkill = Some(x)),
            "hostile" => hostile().map(|x| r.hostile = Some(x)),
            "state_dir" => state_dir().map(|x| r.state_dir = Some(x)),
            "descriptors" => descriptors(cgroups).map(|x| r.descriptors = Some(x)),
            other => bail!("unknown scenario {other}"),
        };
        if let Err(e) = outcome {
            eprintln!("faults: {s} stopped: {e:#}");
            r.errors.push(format!("{s}: {e:#}"));
        }
        eprintln!("faults: {s} took {:.0} s", t0.elapsed().as_secs_f64());
        teardown();
    }
    Ok(r)
}

fn root_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(ROOT), |d| PathBuf::from(d).join("faults"))
}

fn state_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(STATE), |d| PathBuf::from(d).join("state"))
}

fn config_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(CONFIG), |d| PathBuf::from(d).join("memqos.toml"))
}

fn stderr_path() -> PathBuf {
    state_path().with_file_name("memqos-faults-daemon.stderr")
}

fn fake() -> bool {
    std::env::var_os(FAKE_ENV).is_some()
}

/// mkdir; in a rehearsal also the files the daemon reads.
fn make(cg: &Cgroup) -> Result<()> {
    cg.create()?;
    if fake() {
        let files = [
            ("cgroup.controllers", "memory\n"),
            ("cgroup.procs", ""),
            ("cgroup.events", "populated 1\nfrozen 0\n"),
            ("cgroup.freeze", "0\n"),
            ("cgroup.subtree_control", ""),
            ("cgroup.type", "domain\n"),
            ("memory.current", "1048576\n"),
            ("memory.max", "max\n"),
            ("memory.high", "max\n"),
            ("memory.low", "0\n"),
            ("memory.min", "0\n"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
        ];
        for (f, v) in files {
            std::fs::write(cg.path().join(f), v)?;
        }
    }
    Ok(())
}

/// rmdir once empty; in a rehearsal the directory and its fake files.
fn unmake(cg: &Cgroup) -> Result<()> {
    if fake() {
        return std::fs::remove_dir_all(cg.path()).with_context(|| format!("removing {}", cg.path().display()));
    }
    remove_when_empty(cg)
}

/// Removes the campaign's tree (deepest first), ending the processes in it.
fn teardown() {
    let root = Cgroup::new(root_path());
    if !root.exists() {
        return;
    }
    let mut all = root.descendants().unwrap_or_default();
    all.push(root.clone());
    for cg in all.iter().rev() {
        if let Ok(pids) = cg.procs() {
            for pid in pids {
                // SAFETY: kill(2) on processes the campaign started in its own tree.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        let _ = unmake(cg);
    }
}

/// The campaign's tree: the parent with a limit, a protected cgroup with a process that
/// declares `declared` (root-owned: honoured), and `low/` for the tenants' cgroups.
struct Tree {
    root: Cgroup,
    prot: Cgroup,
    low: Cgroup,
    sleepers: Vec<Child>,
}

impl Tree {
    fn setup(declared: &str) -> Result<Tree> {
        teardown();
        let root = Cgroup::new(root_path());
        make(&root)?;
        root.write_string("memory.max", &PARENT_LIMIT.to_string())?;
        root.write_string("cgroup.subtree_control", "+memory")?;
        let prot = root.child("prot");
        make(&prot)?;
        prot.set_xattr(EXPECTED_PEAK_XATTR, declared)?;
        let sleepers = vec![spawn_in(&prot, "sleep", &["100000"])?];
        let low = root.child("low");
        make(&low)?;
        low.write_string("cgroup.subtree_control", "+memory")?;
        Ok(Tree { root, prot, low, sleepers })
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for c in &mut self.sleepers {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn config() -> Result<PathBuf> {
    daemon_config().write(config_path().as_path())?;
    Ok(config_path())
}

fn daemon_config() -> DaemonConfig {
    let c = DaemonConfig::named("faults.toml");
    if !fake() {
        return c;
    }
    // Fake files have no PSI triggers or events to watch.
    c.set("cgroup_root", root_path().display().to_string()).set("signals.psi", false).set("signals.events", false)
}

/// splitmix64: the kill instants from the seed, reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A live low cgroup of the churn and the memory.high its tenant gave it.
struct Slot {
    rel: String,
    id: u64,
    /// The incarnation: the churn's call number.
    k: u64,
    value: u64,
}

#[derive(Default)]
struct ChurnState {
    slots: Vec<Option<Slot>>,
    /// Every tenant value ever written, and the incarnation it was written to (by call
    /// number, not cgroup id: a rehearsal's fake tree reuses inode numbers).
    owner: HashMap<u64, u64>,
    /// Incarnations already counted lost or wrong (a knob left wrong is counted once, not
    /// at every later check).
    counted: HashSet<u64>,
    k: u64,
    made: usize,
    errors: Vec<String>,
}

/// Low cgroups removed and made again at 100/s from a thread; holding the state's lock
/// pauses it (a check never sees a cgroup between its mkdir and its tenant's write).
struct Churner {
    state: Arc<Mutex<ChurnState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    t0: Instant,
}

impl Churner {
    fn start(low: Cgroup) -> Churner {
        let state =
            Arc::new(Mutex::new(ChurnState { slots: (0..SLOTS).map(|_| None).collect(), ..Default::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut next = Instant::now();
            while !halt.load(Ordering::Relaxed) {
                {
                    let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = step(&low, &mut s) {
                        if s.errors.len() < 20 {
                            s.errors.push(format!("{e:#}"));
                        }
                    }
                }
                next += CHURN_PERIOD;
                match next.checked_duration_since(Instant::now()) {
                    Some(d) => std::thread::sleep(d),
                    None => next = Instant::now(), // behind (paused by a check): no burst
                }
            }
        });
        Churner { state, stop, thread: Some(thread), t0: Instant::now() }
    }

    fn pause(&self) -> MutexGuard<'_, ChurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the thread: (made, per second, errors).
    fn stop(mut self) -> (usize, f64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = self.pause();
        (s.made, s.made as f64 / self.t0.elapsed().as_secs_f64(), s.errors.clone())
    }
}

impl Drop for Churner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One churn call: remove the slot's cgroup, make it again, give it its own memory.high.
fn step(low: &Cgroup, s: &mut ChurnState) -> Result<()> {
    let slot = (s.k % SLOTS) as usize;
    let name = format!("tool.{slot}");
    let cg = low.child(&name);
    if s.slots[slot].is_some() {
        unmake(&cg)?;
        s.slots[slot] = None;
    }
    make(&cg)?;
    let k = s.k;
    let value = V_BASE + k * 4096;
    s.k += 1;
    cg.write_string("memory.high", &value.to_string())?;
    let id = std::fs::metadata(cg.path())?.ino();
    s.owner.insert(value, k);
    s.slots[slot] = Some(Slot { rel: format!("low/{name}"), id, k, value });
    s.made += 1;
    Ok(())
}

/// A memqos cap on a low cgroup: a successful memory.high write below the tenants' values.
fn is_cap(w: &WriteEvent) -> bool {
    w.file == "memory.high"
        && w.outcome == Outcome::Ok
        && w.cgroup.starts_with("low/")
        && w.value.trim().parse::<u64>().is_ok_and(|v| v < V_BASE)
}

fn caps(lines: &[LogLine]) -> impl Iterator<Item = &WriteEvent> {
    events::writes(lines).map(|(_, w)| w).filter(|w| is_cap(w))
}

/// What the daemon found in each low cgroup's memory.high before its first write there.
fn note_first_reads(lines: &[LogLine], first: &mut HashMap<u64, String>) {
    for (_, w) in events::writes(lines) {
        if w.file == "memory.high" && w.cgroup.starts_with("low/") {
            if let Some(p) = &w.previous {
                first.entry(w.cgroup_id).or_insert_with(|| p.trim().to_string());
            }
        }
    }
}

/// Every live low cgroup must hold its own tenant value, the protected cgroup no protection.
/// `root`: the tree the slots' paths are relative to.
fn check(root: &Path, s: &mut ChurnState, first: &HashMap<u64, String>, prot: &Cgroup) -> Check {
    let mut c = Check::default();
    let ChurnState { slots, owner, counted, .. } = s;
    for slot in slots.iter().flatten() {
        let dir = root.join(&slot.rel);
        match std::fs::metadata(&dir) {
            Ok(m) if m.ino() == slot.id => {}
            _ => continue,
        }
        let Ok(text) = std::fs::read_to_string(dir.join("memory.high")) else { continue };
        c.checked += 1;
        let found = text.trim().parse::<u64>().ok();
        if found == Some(slot.value) || !counted.insert(slot.k) {
            continue;
        }
        match found.and_then(|v| owner.get(&v)) {
            Some(&other) if other != slot.k => {
                c.wrong += 1;
                if c.examples.len() < 20 {
                    c.examples.push(format!(
                        "{} (id {}): holds {}, call {other}'s value; its own is {}",
                        slot.rel,
                        slot.id,
                        text.trim(),
                        slot.value
                    ));
                }
            }
            _ => {
                c.lost += 1;
                let raced = first.get(&slot.id).is_some_and(|p| *p != slot.value.to_string());
                c.raced += usize::from(raced);
                if c.examples.len() < 20 {
                    c.examples.push(format!(
                        "{} (id {}): holds {}, its own is {}{}",
                        slot.rel,
                        slot.id,
                        text.trim(),
                        slot.value,
                        if raced { " (the daemon had read it before its tenant's write)" } else { "" }
                    ));
                }
            }
        }
    }
    for file in ["memory.low", "memory.min"] {
        c.checked += 1;
        match prot.read_string(file) {
            Ok(v) if v.trim() == "0" => {}
            other => {
                c.lost += 1;
                c.examples.push(format!("prot/{file}: {other:?}, was 0"));
            }
        }
    }
    c
}

/// Launches `memqos daemon` (guardian on unless `extra` says otherwise) without waiting for
/// it, after removing the stale status and log of an earlier life. `nofile`: the open-file
/// limit, soft and hard, set before exec.
fn spawn_daemon(state: &Path, extra: &[&str], stdout: Stdio, nofile: Option<u64>) -> Result<Child> {
    std::fs::create_dir_all(state)?;
    for stale in [memqos_daemon::status::STATUS_FILE, events::EVENTS_FILE, events::ROTATED_FILE] {
        let _ = std::fs::remove_file(state.join(stale));
    }
    let stderr = std::fs::File::create(stderr_path())?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["daemon", "--config"])
        .arg(config_path())
        .args(["--state-dir"])
        .arg(state)
        .args(extra)
        .stdout(stdout)
        .stderr(stderr);
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; the struct is built before the fork.
        let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn().context("starting memqos daemon")
}

fn daemon_stderr_tail() -> String {
    let t = std::fs::read_to_string(stderr_path()).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

/// Waits until no process holds the state lock and the journal is gone or empty (the
/// guardian restored it). Err: not within the patience, with what was last seen.
fn await_restore(state: &Path) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < RESTORE_PATIENCE {
        if let Ok(lock) = StateLock::try_acquire(state, "memqos-lab bench faults") {
            let empty = match Journal::open(state, root_path().as_path()) {
                Ok(j) => j.is_empty(),
                Err(e) => {
                    last = format!("{e:#}");
                    false
                }
            };
            drop(lock);
            if empty {
                return Ok(t0.elapsed());
            }
        } else {
            last = "the state lock stayed taken".into();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(if last.is_empty() { "the journal kept entries".into() } else { last })
}

/// `memqos restore` by hand, after a guardian that did not.
fn restore_by_hand(state: &Path) {
    let _ = Command::new(std::env::current_exe().unwrap_or_default())
        .args(["restore", "--state-dir"])
        .arg(state)
        .stdout(Stdio::null())
        .status();
}

fn ms_between(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}

fn sigkill(kills: usize, seed: u64) -> Result<SigkillResult> {
    let tree = Tree::setup("256M")?;
    config()?;
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    let churn = Churner::start(tree.low.clone());
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let mut rng = Rng(seed);
    let mut r = SigkillResult { seed, kills_asked: kills, ..Default::default() };
    let mut first_reads = HashMap::new();
    let (mut restores, mut gaps) = (Vec::new(), Vec::new());
    let mut gap_from: Option<u64> = None;
    for life in 0..=kills {
        let last = life == kills;
        let launched = Instant::now();
        let mut child = spawn_daemon(state, &[], Stdio::null(), None)?;
        let mut killed_at = None;
        if last {
            // A last life, stopped in order once it protects: it closes the last gap.
            while launched.elapsed() < RESTORE_PATIENCE && child.try_wait()?.is_none() {
                if caps(&events::read(state)).next().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let st = child.wait()?;
            if !st.success() {
                r.unexpected_exits.push(format!("last life: {st} at SIGTERM ({})", daemon_stderr_tail()));
            }
        } else {
            let after = Duration::from_secs_f64(0.2 + 2.8 * rng.unit());
            let mut exited = None;
            while launched.elapsed() < after {
                if let Some(st) = child.try_wait()? {
                    exited = Some(st);
                    break;
                }
                std::thread::sleep(Duration::from_millis(5).min(after.saturating_sub(launched.elapsed())));
            }
            if let Some(st) = exited {
                r.unexpected_exits.push(format!(
                    "life {life}: {st} after {:.2} s ({})",
                    launched.elapsed().as_secs_f64(),
                    daemon_stderr_tail()
                ));
            } else {
                let in_startup = !state.join(memqos_daemon::status::STATUS_FILE).exists();
                let s = churn.pause();
                let capped = s
                    .slots
                    .iter()
                    .flatten()
                    .filter(|slot| {
                        std::fs::read_to_string(root_path().as_path().join(&slot.rel).join("memory.high"))
                            .ok()
                            .and_then(|t| t.trim().parse::<u64>().ok())
                            .is_some_and(|v| v < V_BASE)
                    })
                    .count();
                let at = mono_ns();
                let _ = child.kill();
                let _ = child.wait();
                drop(s);
                killed_at = Some(at);
                r.kills += 1;
                r.killed_in_startup += usize::from(in_startup);
                r.capped_at_kill += capped;
                r.kills_with_caps += usize::from(capped > 0);
                r.kill_after_s.push(after.as_secs_f64());
            }
            match await_restore(state) {
                Ok(_) => restores.extend(killed_at.map(|k| ms_between(k, mono_ns()))),
                Err(why) => {
                    r.restore_timeouts += 1;
                    eprintln!("faults: life {life}: no restore within {} s: {why}", RESTORE_PATIENCE.as_secs());
                }
            }
        }
        let log = events::read(state);
        note_first_reads(&log, &mut first_reads);
        if let Some(c) = caps(&log).next() {
            if let Some(from) = gap_from.take() {
                gaps.push(ms_between(from, c.mono_done_ns));
            }
        }
        if gap_from.is_none() {
            gap_from = killed_at;
        }
        let found = check(&root_path(), &mut churn.pause(), &first_reads, &tree.prot);
        if found.lost + found.wrong > 0 {
            eprintln!("faults: life {life}: {} lost, {} wrong: {:?}", found.lost, found.wrong, found.examples);
        }
        r.check.add(&found);
        if r.restore_timeouts > 0 && state.join(memqos_daemon::journal::JOURNAL_FILE).exists() {
            restore_by_hand(state);
        }
        if life % 10 == 0 {
            eprintln!(
                "faults: sigkill life {life}: {} kills, {} lost, {} wrong, {} exits, {:.0} s",
                r.kills,
                r.check.lost,
                r.check.wrong,
                r.unexpected_exits.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    r.duration_s = t0.elapsed().as_secs_f64();
    r.restore = Spread::of(restores);
    r.unprotected = Spread::of(gaps);
    (r.churn_made, r.churn_rate, r.churn_errors) = churn.stop();
    drop(tree);
    Ok(r)
}

/// The first cap of the normal low cgroup `rel` in the daemon's log, ms after `since_ns`.
fn await_cap(state: &Path, rel: &str, since_ns: u64, within: Duration) -> Option<f64> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        let log = events::read(state);
        if let Some(w) = caps(&log).find(|w| w.cgroup == rel && w.mono_ns >= since_ns) {
            return Some(ms_between(since_ns, w.mono_done_ns));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn c_path(p: &Path) -> Result<CString> {
    Ok(CString::new(p.as_os_str().as_bytes())?)
}

/// mkdirat + openat beneath `parent`: no path of the chain is ever spelled out whole.
fn mkdir_at(parent: libc::c_int, name: &str) -> std::io::Result<libc::c_int> {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: a valid directory fd and NUL-terminated name.
    unsafe {
        if libc::mkdirat(parent, c.as_ptr(), 0o755) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::openat(parent, c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }
}

fn write_at(dir: libc::c_int, file: &str, value: &str) -> std::io::Result<()> {
    let c = CString::new(file).expect("no NUL");
    // SAFETY: a valid directory fd, NUL-terminated name, our own buffer.
    unsafe {
        let fd = libc::openat(dir, c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, value.as_ptr().cast(), value.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// A chain of directories too deep to name by path, removed beneath its own fds, deepest
/// first, when dropped (also when the scenario stops early: the next scenarios' teardown
/// could not remove it by path).
struct Chain {
    /// The top directory's fd, then each level's.
    fds: Vec<libc::c_int>,
    name: String,
    _top: std::fs::File,
}

impl Drop for Chain {
    fn drop(&mut self) {
        let Ok(c) = CString::new(self.name.as_str()) else { return };
        for w in self.fds.windows(2).rev() {
            // SAFETY: fds this chain opened (the top one is `_top`'s, closed by it); each
            // child's is closed before it is removed beneath its parent's.
            unsafe {
                libc::close(w[1]);
                libc::unlinkat(w[0], c.as_ptr(), libc::AT_REMOVEDIR);
            }
        }
    }
}

/// Sends without SIGPIPE (the bench runs with SIGPIPE's default action).
fn send(fd: libc::c_int, bytes: &[u8]) -> bool {
    // SAFETY: our own socket and buffer.
    unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) == bytes.len() as isize }
}

fn hostile() -> Result<HostileResult> {
    let mut tree = Tree::setup("256M")?;
    config()?;
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    let exe = std::env::current_exe()?;
    let mut daemon = DaemonProcess::start(&exe, config_path().as_path(), state, &[], Stdio::null())?;
    let mut r = HostileResult::default();

    // Before the tenant: no low cgroup yet, so the declaration has no one to hold back and the
    // daemon is calm (whole-tree samples every calm_interval_ms). How soon is a first low
    // cgroup capped?
    std::thread::sleep(Duration::from_secs(2));
    let first = tree.low.child("first");
    let since = mono_ns();
    make(&first)?;
    first.write_string("memory.high", &V_BASE.to_string())?;
    r.calm_low_capped_ms = await_cap(state, "low/first", since, Duration::from_secs(20));

    let hostile = tree.root.child("hostile");
    make(&hostile)?;
    hostile.write_string("cgroup.subtree_control", "+memory")?;

    // A leaf without the memory controller: a's subtree_control is empty.
    let a = hostile.child("a");
    make(&a)?;
    make(&a.child("b"))?;
    r.made.push("hostile/a/b: no memory controller".into());

    // A chain of long names, each level with the memory controller, past PATH_MAX.
    let name = "d".repeat(200);
    let top = std::fs::File::open(hostile.path())?;
    let mut chain = Chain { fds: vec![std::os::fd::AsRawFd::as_raw_fd(&top)], name: name.clone(), _top: top };
    let mut bytes = hostile.path().as_os_str().len();
    while bytes <= 4096 + 2 * name.len() {
        let parent = *chain.fds.last().expect("non-empty");
        if let Err(e) = write_at(parent, "cgroup.subtree_control", "+memory") {
            r.made.push(format!("deep chain: +memory refused at level {}: {e}", chain.fds.len() - 1));
            break;
        }
        match mkdir_at(parent, &name) {
            Ok(fd) => {
                chain.fds.push(fd);
                bytes += 1 + name.len();
            }
            Err(e) => {
                r.made.push(format!("deep chain: mkdir refused at level {}: {e}", chain.fds.len()));
                break;
            }
        }
    }
    r.deep_levels = chain.fds.len() - 1;
    r.deep_path_bytes = bytes;
    r.made.push(format!("hostile/{{200 x d}}/...: {} levels, {bytes} bytes", r.deep_levels));

    // Names that are not UTF-8, with terminal escapes and control characters.
    let odd: [&[u8]; 6] =
        [b"\xff\xfe-not-utf8", b"tool\x1b[31mred\x1b[0m", b"new\nline", b"tab\tand\rcr", b"back\\slash", b"\x07bell"];
    for raw in odd {
        let p = hostile.path().join(OsStr::from_bytes(raw));
        match std::fs::create_dir(&p) {
            Ok(()) => r.made.push(format!(
                "hostile/{}",
                memqos_cgroupfs::name::display(&memqos_cgroupfs::name::encode(OsStr::from_bytes(raw)))
            )),
            Err(e) => r.made.push(format!("{raw:?}: refused: {e}")),
        }
    }

    // A huge declaration from a tenant (untrusted: ignored) and from root (honoured, capped
    // at the parent's limit), both with a process.
    let huge = u64::MAX.to_string();
    let declared_at = mono_ns();
    for (name, uid) in [("prot-tenant", Some(1000)), ("prot-huge", None)] {
        let cg = tree.root.child(name);
        make(&cg)?;
        if let Some(uid) = uid {
            // SAFETY: chown(2) on a path we made.
            if unsafe { libc::chown(c_path(cg.path())?.as_ptr(), uid, uid) } != 0 {
                bail!("chown {}: {}", cg.path().display(), std::io::Error::last_os_error());
            }
        }
        cg.set_xattr(EXPECTED_PEAK_XATTR, &huge)?;
        tree.sleepers.push(spawn_in(&cg, "sleep", &["100000"])?);
        r.made.push(format!("{name}: {EXPECTED_PEAK_XATTR} = {huge}, owner uid {}", uid.unwrap_or(0)));
    }

    // A control client that trickles a byte every 100 ms; an explain meanwhile.
    match std::os::unix::net::UnixStream::connect(state.join(memqos_daemon::control::SOCKET_FILE)) {
        Ok(sock) => {
            let trickler = std::thread::spawn(move || {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(15) {
                    if !send(fd, b" ") {
                        return Some(t0.elapsed().as_secs_f64() * 1e3);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                None
            });
            std::thread::sleep(Duration::from_millis(300));
            let asked = Instant::now();
            let explain = Command::new(&exe)
                .args(["explain", "prot", "--json", "--state-dir"])
                .arg(state)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            r.explain_ok = explain.is_ok_and(|s| s.success());
            r.explain_ms = r.explain_ok.then(|| asked.elapsed().as_secs_f64() * 1e3);
            r.trickle_cut_after_ms = trickler.join().unwrap_or(None);
            r.made.push("a control client trickling a byte every 100 ms".into());
        }
        Err(e) => r.made.push(format!("control client: could not connect: {e}")),
    }

    // A normal low cgroup: the daemon must still cap it.
    let normal = tree.low.child("normal");
    let since = mono_ns();
    make(&normal)?;
    normal.write_string("memory.high", &V_BASE.to_string())?;
    r.normal_capped_ms = await_cap(state, "low/normal", since, Duration::from_secs(20));
    r.declared_seen_ms = events::writes(&events::read(state))
        .map(|(_, w)| w)
        .find(|w| w.cgroup == "prot-huge" && w.outcome == Outcome::Ok)
        .map(|w| ms_between(declared_at, w.mono_done_ns));
    if let Some(st) = daemon.exited() {
        r.unexpected_exits.push(format!("{st} ({})", daemon_stderr_tail()));
    }
    for l in events::read(state) {
        if let Event::Degraded { message } = l.event {
            r.degraded.push(message);
        }
    }
    let (status, _) = daemon.stop()?;
    r.stop_status = status.to_string();
    // What memqos wrote must be back: the normal cgroup's value, no protection left.
    let expect: [(&Cgroup, &str, String); 5] = [
        (&first, "memory.high", V_BASE.to_string()),
        (&normal, "memory.high", V_BASE.to_string()),
        (&tree.prot, "memory.low", "0".into()),
        (&tree.root.child("prot-huge"), "memory.low", "0".into()),
        (&a, "memory.high", "max".into()),
    ];
    for (cg, file, want) in expect {
        r.check.checked += 1;
        let found = cg.read_string(file).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("{e:#}"));
        if found != want {
            r.check.lost += 1;
            r.check.examples.push(format!("{}/{file}: {found}, was {want}", cg.path().display()));
        }
    }
    drop(chain);
    Ok(r)
}

/// Writes `path` until the filesystem is full.
fn fill(path: &Path) -> Result<u64> {
    let mut f = std::fs::File::create(path)?;
    let chunk = vec![0u8; 4096];
    let mut n = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(w) => n += w as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e).with_context(|| format!("filling {}", path.display())),
        }
    }
    let _ = f.sync_all();
    Ok(n)
}

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    if !out.status.success() {
        bail!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Holds a fault for `hold` while sampling: the daemon alive, every knob memqos holds
/// journaled. Fills in the phase's exits, samples and unjournaled count.
fn hold_fault(phase: &mut Phase, hold: Duration, child: &mut Child, churn: &Churner, state: &Path) -> Result<()> {
    let t0 = Instant::now();
    let mut unjournaled = HashSet::new();
    while t0.elapsed() < hold {
        if let Some(st) = child.try_wait()? {
            phase.unexpected_exits.push(format!("{st} ({})", daemon_stderr_tail()));
            break;
        }
        {
            let s = churn.pause();
            let journal = Journal::open(state, root_path().as_path());
            for slot in s.slots.iter().flatten() {
                let v = std::fs::read_to_string(root_path().as_path().join(&slot.rel).join("memory.high"))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok());
                if v.is_some_and(|v| v < V_BASE) {
                    let journaled = journal.as_ref().is_ok_and(|j| j.original(slot.id, "memory.high").is_some());
                    if !journaled {
                        unjournaled.insert(slot.id);
                    }
                }
            }
        }
        phase.samples += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    phase.held_s = t0.elapsed().as_secs_f64();
    phase.unjournaled = unjournaled.len();
    Ok(())
}

/// Counts refused writes in [from, to] and waits for the first newly journaled knob after
/// `to`: a first cap of a cgroup memqos had not capped before (its original must be
/// journaled before that write).
fn after_fault(phase: &mut Phase, stdout: &Path, from: u64, to: u64) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        let lines = events::parse(&std::fs::read_to_string(stdout).unwrap_or_default());
        let writes: Vec<&WriteEvent> = events::writes(&lines).map(|(_, w)| w).collect();
        phase.refused = writes
            .iter()
            .filter(|w| {
                (from..=to).contains(&w.mono_ns)
                    && matches!(&w.outcome, Outcome::Error(m) if m.contains("could not be journaled"))
            })
            .count();
        let before: HashSet<u64> = writes.iter().filter(|w| is_cap(w) && w.mono_ns < to).map(|w| w.cgroup_id).collect();
        if let Some(w) = writes.iter().find(|w| is_cap(w) && w.mono_ns >= to && !before.contains(&w.cgroup_id)) {
            phase.recovery_ms = Some(ms_between(to, w.mono_done_ns));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn state_dir() -> Result<StateDirResult> {
    // 8 MiB, not 64 KiB: at 100 calls/s the daemon's own event log (about 40 KB/s) would fill
    // 64 KiB within two seconds, so "full" could not be switched off again to time recovery.
    let size = "8m";
    let small_buf = state_path().with_file_name("memqos-faults-small");
    let (small, at) = (small_buf.as_path(), small_buf.to_str().context("a UTF-8 path")?);
    let _ = sh(&["umount", at]);
    std::fs::create_dir_all(small)?;
    sh(&["mount", "-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "memqos-faults", at])?;
    let result = state_dir_on(small, at, size);
    // A bind mount may be left on top after a failure: unmount until nothing is there.
    while sh(&["umount", at]).is_ok() {}
    result
}

fn state_dir_on(small: &Path, at: &str, size: &str) -> Result<StateDirResult> {
    let tree = Tree::setup("256M")?;
    config()?;
    let churn = Churner::start(tree.low.clone());
    let stdout_buf = state_path().with_file_name("memqos-faults-stdout.jsonl");
    let stdout_path = stdout_buf.as_path();
    let stdout = std::fs::File::create(stdout_path)?;
    let mut child = spawn_daemon(small, &[], Stdio::from(stdout), None)?;
    let t0 = Instant::now();
    while !small.join(memqos_daemon::status::STATUS_FILE).exists() {
        if let Some(st) = child.try_wait()? {
            bail!("the daemon exited in start-up: {st} ({})", daemon_stderr_tail());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("no status.json within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut r = StateDirResult { tmpfs_size: size.into(), ..Default::default() };
    let hold = Duration::from_secs(5);

    // Full.
    let filler = small.join("filler");
    let from = mono_ns();
    let filled = fill(&filler)?;
    let mut full = Phase {
        fault: "full".into(),
        method: format!("tmpfs filled to ENOSPC ({} KiB file)", filled / 1024),
        ..Default::default()
    };
    hold_fault(&mut full, hold, &mut child, &churn, small)?;
    std::fs::remove_file(&filler)?;
    let to = mono_ns();
    after_fault(&mut full, stdout_path, from, to);
    r.phases.push(full);

    // Read-only. The kernel refuses `remount,ro` while files are open for writing (the
    // daemon's journal and log); then a read-only bind mount on top fails every new open and
    // rename beneath the state_dir, while the daemon's open descriptors still write.
    std::thread::sleep(Duration::from_secs(2));
    let from = mono_ns();
    let (method, undo): (String, Vec<&str>) = match sh(&["mount", "-o", "remount,ro", at]) {
        Ok(()) => ("tmpfs remounted read-only".into(), vec!["mount", "-o", "remount,rw", at]),
        Err(e) => {
            sh(&["mount", "--bind", at, at])?;
            sh(&["mount", "-o", "remount,bind,ro", at])?;
            (
                format!(
                    "read-only bind mount over state_dir (remount,ro refused: {})",
                    e.to_string().lines().next().unwrap_or_default()
                ),
                vec!["umount", at],
            )
        }
    };
    let mut ro = Phase { fault: "read-only".into(), method, ..Default::default() };
    hold_fault(&mut ro, hold, &mut child, &churn, small)?;
    sh(&undo)?;
    let to = mono_ns();
    after_fault(&mut ro, stdout_path, from, to);
    r.phases.push(ro);

    // The journal written through both faults must restore every knob after a SIGKILL.
    if let Some(st) = child.try_wait()? {
        r.phases.last_mut().expect("two phases").unexpected_exits.push(format!("{st} before the final kill"));
    } else {
        let s = churn.pause();
        let _ = child.kill();
        let _ = child.wait();
        drop(s);
    }
    if let Err(why) = await_restore(small) {
        r.check.examples.push(format!("no restore within {} s: {why}", RESTORE_PATIENCE.as_secs()));
    }
    let mut first = HashMap::new();
    note_first_reads(&events::parse(&std::fs::read_to_string(stdout_path).unwrap_or_default()), &mut first);
    r.check.add(&check(&root_path(), &mut churn.pause(), &first, &tree.prot));
    churn.stop();
    drop(tree);
    Ok(r)
}

/// "Max open files" soft and hard of a process.
fn nofile(pid: u32) -> (Option<u64>, Option<u64>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("Max open files")) else { return (None, None) };
    let mut f = line["Max open files".len()..].split_whitespace().map(|v| v.parse().ok());
    (f.next().flatten(), f.next().flatten())
}

fn descriptors(n: usize) -> Result<DescriptorsResult> {
    const LIMIT: u64 = 1024;
    const ASKED: u64 = 30;
    let tree = Tree::setup("256M")?;
    // A whole-tree sample of 10,000 cgroups every 100 ms would be the bench, not the limit.
    daemon_config().set("signals.sampling_interval_ms", 1000).write(config_path().as_path())?;
    let mut r = DescriptorsResult { cgroups: n, asked_s: ASKED as f64, ..Default::default() };
    let made = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("c{i:05}")).collect();
    for name in &names {
        make(&tree.low.child(name))?;
    }
    r.make_s = made.elapsed().as_secs_f64();
    eprintln!("faults: {n} cgroups made in {:.0} s", r.make_s);
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    // The daemon raises its limit up to fs.nr_open when it may: lowered, 1,024 is a hard cap.
    // (Not in a rehearsal: the host's sysctl is not the bench's to change.)
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")?;
    let set_nr_open = |v: &str| if fake() { Ok(()) } else { std::fs::write("/proc/sys/fs/nr_open", v) };
    set_nr_open(&LIMIT.to_string())?;
    let launched = mono_ns();
    let t0 = Instant::now();
    let spawned = spawn_daemon(state, &["--duration", &ASKED.to_string()], Stdio::null(), Some(LIMIT));
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            set_nr_open(nr_open.trim())?;
            return Err(e);
        }
    };
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(ASKED + 600) {
            let _ = child.kill();
            break child.wait()?;
        }
        // The largest limit seen: the daemon may raise its own after start-up.
        let (soft, hard) = nofile(child.id());
        r.nofile_soft = r.nofile_soft.max(soft);
        r.nofile_hard = r.nofile_hard.max(hard);
        r.status_json_seen |= state.join(memqos_daemon::status::STATUS_FILE).exists();
        if r.status_json_seen && r.startup_s.is_none() {
            r.startup_s = Some(t0.elapsed().as_secs_f64());
        }
        let fds = std::fs::read_dir(format!("/proc/{}/fd", child.id())).map(|d| d.count()).unwrap_or(0);
        r.peak_fds = r.peak_fds.max(fds);
        std::thread::sleep(Duration::from_millis(250));
    };
    set_nr_open(nr_open.trim())?;
    r.ran_s = t0.elapsed().as_secs_f64();
    r.exit_status = status.to_string();
    if !status.success() {
        r.unexpected_exits.push(format!("{status} ({})", daemon_stderr_tail()));
    }
    let log = events::read(state);
    let capped: Vec<&WriteEvent> = caps(&log).collect();
    r.first_cap_s = capped.iter().map(|w| w.mono_done_ns).min().map(|t| ms_between(launched, t) / 1e3);
    r.capped = capped.iter().map(|w| w.cgroup_id).collect::<HashSet<_>>().len();
    r.emfile_lines = log.iter().filter(|l| format!("{:?}", l.event).contains("Too many open files")).count();
    for name in &names {
        r.check.checked += 1;
        let v = tree.low.child(name).read_string("memory.high").map(|s| s.trim().to_string()).unwrap_or_default();
        if v != "max" {
            r.check.lost += 1;
            if r.check.examples.len() < 20 {
                r.check.examples.push(format!("low/{name}: memory.high {v}, was max"));
            }
        }
    }
    for name in &names {
        let _ = unmake(&tree.low.child(name));
    }
    drop(tree);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of plain files: the counting only, no kernel.
    #[test]
    fn a_check_tells_kept_lost_raced_and_wrong_apart_and_counts_each_knob_once() {
        let base = std::env::temp_dir().join(format!("memqos-faults-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut s = ChurnState::default();
        // k: 0 kept its value, 1 holds a memqos cap, 2 a cap it was read before its tenant
        // wrote, 3 holds call 7's value (an earlier incarnation of another cgroup).
        let held = [V_BASE, 32 * MIB, 32 * MIB, V_BASE + 7 * 4096];
        let mut first = HashMap::new();
        for (k, found) in held.into_iter().enumerate() {
            let rel = format!("low/tool.{k}");
            std::fs::create_dir_all(base.join(&rel)).unwrap();
            std::fs::write(base.join(&rel).join("memory.high"), format!("{found}\n")).unwrap();
            let id = std::fs::metadata(base.join(&rel)).unwrap().ino();
            let (k, value) = (k as u64, V_BASE + k as u64 * 4096);
            s.owner.insert(value, k);
            s.slots.push(Some(Slot { rel, id, k, value }));
            if k == 2 {
                first.insert(id, "max".to_string());
            }
        }
        s.owner.insert(V_BASE + 7 * 4096, 7);
        let prot = base.join("prot");
        std::fs::create_dir_all(&prot).unwrap();
        std::fs::write(prot.join("memory.low"), "0\n").unwrap();
        std::fs::write(prot.join("memory.min"), "16777216\n").unwrap();
        let c = check(&base, &mut s, &first, &Cgroup::new(&prot));
        assert_eq!((c.checked, c.lost, c.raced, c.wrong), (6, 3, 1, 1), "{c:?}");
        // Again: the same knobs are not counted twice (the protected one is: a second restore).
        let again = check(&base, &mut s, &first, &Cgroup::new(&prot));
        assert_eq!((again.lost, again.wrong), (1, 0), "{again:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
