//! Helpers for tests that run inside guests (root, cgroup2 at /sys/fs/cgroup).
#![allow(dead_code)]

use memqos_cgroupfs::{Cgroup, Limit, MemoryEvents};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use memqos_policy::size::MIB;

/// The packaged binary: the daemon and the user commands.
pub fn memqos_bin() -> &'static str {
    env!("CARGO_BIN_EXE_memqos")
}

/// The lab binary: the workloads, the demo, benchmarks and experiments.
pub fn lab_bin() -> &'static str {
    env!("CARGO_BIN_EXE_memqos-lab")
}

/// A cgroup created for one test, with the memory controller enabled for its children.
pub fn make_cgroup(path: &str) -> Cgroup {
    let cg = Cgroup::new(format!("/sys/fs/cgroup/{path}"));
    cg.create().unwrap();
    cg
}

pub fn enable_memory(cg: &Cgroup) {
    cg.enable_controllers(&["memory"]).unwrap();
}

pub fn set(cg: &Cgroup, file: &'static str, bytes: u64) {
    cg.set_limit(file, Limit::Bytes(bytes)).unwrap_or_else(|e| panic!("{e}"));
}

/// Starts `memqos-lab workload ...` as a child that joins `cg` itself before allocating.
pub fn spawn_workload(cg: &Cgroup, kind: &str, args: &[&str]) -> Child {
    Command::new(lab_bin())
        .args(["workload", kind, "--cgroup"])
        .arg(cg.path())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn memqos-lab workload")
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

pub fn events(cg: &Cgroup) -> MemoryEvents {
    cg.memory_events().unwrap_or_else(|e| panic!("{e}"))
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// Polls `f` every 50 ms until it gives a value; panics naming `what` after `limit`.
pub fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
