//! Fake cgroup trees and waiting, shared by the daemon's in-process tests. Fake trees prove
//! the daemon's mechanisms, not what a kernel does with its writes (the guest tests' job).
#![allow(dead_code)] // each test binary uses its own part

use memqos_daemon::{Handle, Options};
use std::path::Path;
use std::time::{Duration, Instant};

pub use memqos_policy::size::MIB;

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
