//! Fake cgroup trees and waiting, shared by the daemon's in-process tests. Fake trees prove
//! the daemon's mechanisms, not what a kernel does with its writes (the guest tests' job).
#![allow(dead_code)] // each test binary uses its own part

use memqos_daemon::events::{self, Event};
use memqos_daemon::status::{self, Snapshot};
use memqos_daemon::{Handle, Options};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use memqos_policy::size::MIB;

/// The `[policy]` of most fake-tree tests: the headroom guard at 64M, writes allowed every
/// 100 ms (a few 50 ms ticks), and a hold long enough that nothing is released mid-test.
pub const GUARD_POLICY: &str = "headroom_guard = \"64M\"\nmin_write_interval_ms = 100\nhold_ms = 60000\n";

const SWAPS_HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

/// A fake cgroup tree with its state directory and config, all below one directory that is
/// removed when it is dropped: `root` (base/qos), `state` (base/state), `config`
/// (base/memqos.toml). The tests write the cgroups; the config is written at once.
pub struct FakeTree {
    pub base: PathBuf,
    pub root: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    /// The daemon's /proc/swaps: one active device unless `swapless` empties it, so that
    /// what the guard does does not depend on the machine the tests run on.
    pub swaps: PathBuf,
}

impl FakeTree {
    /// A tree in the temp directory, named by `name` and the process id so that tests and
    /// test binaries running at once never share one. `policy` are the `[policy]` lines.
    pub fn new(name: &str, policy: &str) -> FakeTree {
        FakeTree::new_in(&std::env::temp_dir(), name, policy)
    }

    /// The same in `dir` (a tmpfs, for a tree of tens of thousands of files).
    pub fn new_in(dir: &Path, name: &str, policy: &str) -> FakeTree {
        let base = dir.join(format!("memqos-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base); // left by a run that was killed
        std::fs::create_dir_all(&base).unwrap();
        let (root, state, config) = (base.join("qos"), base.join("state"), base.join("memqos.toml"));
        std::fs::write(&config, config_text(&root, &state, policy)).unwrap();
        let swaps = base.join("swaps");
        std::fs::write(&swaps, format!("{SWAPS_HEADER}/swapfile file 1048572 0 -2\n")).unwrap();
        FakeTree { base, root, state, config, swaps }
    }

    /// From now on the host the daemon sees has no active swap.
    pub fn swapless(&self) {
        std::fs::write(&self.swaps, SWAPS_HEADER).unwrap();
    }

    /// Changes one value of the config, as data: `set("signals.calm_interval_ms", 60000)`;
    /// a number in the path indexes an array (`tier.1.oom_score_adj`).
    pub fn set(&self, path: &str, value: impl Into<toml::Value>) {
        let mut config: toml::Value =
            std::fs::read_to_string(&self.config).unwrap().parse::<toml::Table>().unwrap().into();
        let mut at = &mut config;
        for key in path.split('.') {
            at = match key.parse::<usize>() {
                Ok(i) => &mut at.as_array_mut().unwrap_or_else(|| panic!("{path}: {key} indexes no array"))[i],
                Err(_) => at
                    .as_table_mut()
                    .unwrap_or_else(|| panic!("{path}: no table at {key}"))
                    .entry(key)
                    .or_insert_with(|| toml::Value::Table(Default::default())),
            };
        }
        *at = value.into();
        std::fs::write(&self.config, toml::to_string(&config).unwrap()).unwrap();
    }

    /// Appends a tier to the config.
    pub fn add_tier(&self, tier: toml::Table) {
        let mut config = std::fs::read_to_string(&self.config).unwrap().parse::<toml::Table>().unwrap();
        config.get_mut("tier").and_then(toml::Value::as_array_mut).unwrap().push(tier.into());
        std::fs::write(&self.config, toml::to_string(&config).unwrap()).unwrap();
    }

    /// A run without end, stopped when asked (`Daemon::stop`). No guardian (nothing to
    /// re-exec) and text stats: a fake tree has no BPF iterator to read.
    pub fn options(&self) -> Options {
        Options {
            config_path: self.config.clone(),
            state_dir: None,
            guardian: false,
            exe: PathBuf::from("/nonexistent"),
            duration: None,
            stats_backend: memqos_stats::BackendChoice::Text,
            dry_run: false,
            echo: false,
            lock_memory: false,
            proc_swaps: self.swaps.clone(),
        }
    }

    /// A run of `secs` (tests that look only at what it did once it stopped).
    pub fn options_for(&self, secs: f64) -> Options {
        Options { duration: Some(Duration::from_secs_f64(secs)), ..self.options() }
    }

    /// A daemon on this tree in a thread of the test, until asked to stop.
    pub fn start(&self) -> Daemon {
        Daemon::start(self.options())
    }

    /// The value of `file` of cgroup `cg` (a path below the root).
    pub fn knob(&self, cg: &str, file: &str) -> String {
        read_knob(&self.root.join(cg).join(file))
    }

    /// The cgroup's id as the daemon knows it (a fake tree's inode, as cgroupfs's is).
    pub fn id(&self, cg: &str) -> u64 {
        std::fs::metadata(self.root.join(cg)).unwrap().ino()
    }

    /// Whether cgroup `cg`'s memory.high holds a limit (anything but "max").
    pub fn capped(&self, cg: &str) -> bool {
        self.knob(cg, "memory.high") != "max"
    }

    /// status.json as the daemon last wrote it: none before its first sample or after a stop.
    pub fn status(&self) -> Option<Snapshot> {
        status::read(&self.state).ok().flatten()
    }

    /// What the daemon logged so far, oldest first.
    pub fn events(&self) -> Vec<Event> {
        events::read(&self.state).into_iter().map(|l| l.event).collect()
    }

    /// The messages of the `degraded` events that `about` picks, oldest first: how the
    /// daemon told an operator what it could not do.
    pub fn degraded(&self, about: impl Fn(&str) -> bool) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Degraded { message } if about(&message) => Some(message),
                _ => None,
            })
            .collect()
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Config text for a fake tree: a protected tier `critical` (`high*`) above a throttled
/// `batch` (`low*`), sampled every 50 ms from files alone (a fake tree gives no PSI, no
/// memory.events notifications and no BPF), with the `[policy]` lines given.
pub fn config_text(root: &Path, state: &Path, policy: &str) -> String {
    format!(
        r#"
cgroup_root = "{}"
state_dir = "{}"
[signals]
sampling_interval_ms = 50
psi = false
events = false
bpf = false
[[tier]]
name = "critical"
match = ["high*"]
protect = "low"
[[tier]]
name = "batch"
match = ["low*"]
throttle = true
[policy]
{policy}"#,
        root.display(),
        state.display()
    )
}

/// Sets a `user.*` xattr on a fake cgroup, as a cgroup's owner gives memqos a hint.
pub fn set_xattr(dir: &Path, name: &str, value: &str) {
    let p = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings, value pointer and length from one slice.
    let rc = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(rc, 0, "setxattr {name} on {}: {}", dir.display(), std::io::Error::last_os_error());
}

/// A cgroup directory shaped like the kernel's (memory controller enabled), using `current`
/// bytes of a `max` limit ("max" or bytes); its peak is its usage.
pub fn write_cgroup(dir: &Path, current: u64, max: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let files = [
        ("cgroup.controllers", "memory cpu\n".to_string()),
        ("cgroup.procs", String::new()),
        ("cgroup.events", "populated 1\nfrozen 0\n".into()),
        ("cgroup.freeze", "0\n".into()),
        ("cpu.weight", "100\n".into()),
        ("memory.current", format!("{current}\n")),
        ("memory.peak", format!("{current}\n")),
        ("memory.max", format!("{max}\n")),
        ("memory.high", "max\n".into()),
        ("memory.low", "0\n".into()),
        ("memory.min", "0\n".into()),
        ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n".into()),
        (
            "memory.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n".into(),
        ),
        ("memory.stat", "anon 0\nfile 0\n".into()),
    ];
    for (f, v) in files {
        std::fs::write(dir.join(f), v).unwrap();
    }
}

/// Waits (at most `limit`) until `f` holds.
pub fn poll(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    poll_for(what, limit, || f().then_some(()))
}

/// Waits (at most `limit`) until `f` gives a value, and returns it.
pub fn poll_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A knob file's value. A fake tree's file is written with O_TRUNC then write(2) (cgroupfs
/// ignores O_TRUNC): a read between the two sees it empty, so an empty read is retried.
pub fn read_knob(path: &Path) -> String {
    let read = || std::fs::read_to_string(path).unwrap().trim().to_string();
    for _ in 0..100 {
        let v = read();
        if !v.is_empty() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    read()
}

/// A daemon run in a thread of the test, stopped by asking it to (`Handle::request_stop`),
/// not on a timer: a test waits for what it wants to see, then stops it. Dropped while
/// running (a failed assertion), it is stopped and waited for, so its knobs are restored.
pub struct Daemon {
    handle: Handle,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Daemon {
    pub fn start(opts: Options) -> Daemon {
        Daemon::start_with(opts, Handle::new())
    }

    /// With a handle of the caller's (`Handle::on_signals()` to test the signals' wiring).
    pub fn start_with(opts: Options, handle: Handle) -> Daemon {
        let h = handle.clone();
        Daemon { handle, thread: Some(std::thread::spawn(move || memqos_daemon::run(opts, h))) }
    }

    /// What asks this daemon to stop or reload.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Asks it to stop and waits until it has (restore included): what `run` returned.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.handle.request_stop();
        self.finish()
    }

    /// Waits until it stops by itself (the end of its `duration`, a fatal error).
    pub fn join(mut self) -> anyhow::Result<()> {
        let t = self.thread.take().expect("running");
        t.join().expect("the daemon thread panicked")
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        let t = self.thread.take().expect("running");
        // A bound, so a daemon that ignores the request fails the test instead of hanging it.
        poll("the daemon to stop once asked", STOP_LIMIT, || t.is_finished());
        t.join().expect("the daemon thread panicked")
    }
}

/// How long a stop may take (a tick under way, then the restore) before a test calls it hung.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.request_stop();
            let _ = t.join();
        }
    }
}
