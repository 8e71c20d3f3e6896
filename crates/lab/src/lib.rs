//! memqos-lab: everything that exercises memqos rather than being memqos. The `memqos` binary
//! dispatches to it; the guest tests import it instead of copying it.
//!
//! - [`controller`]: the controller scenario (a protected task and two low-tier tasks under a
//!   512 MiB parent, run alone, unmanaged and under memqos) the demo shows and
//!   `crates/memqos/tests/controller.rs` asserts on;
//! - [`demo`]: `memqos-lab demo`, the guest-side tour and the controller scenario per kernel;
//! - [`bench`]: `memqos-lab bench stats` (memcg statistics backends), `memqos-lab bench reaction`
//!   (delay from reclaim to the first memory.high write, daemon CPU cost) and `memqos-lab bench
//!   run` (what `memqos run` adds to a call), `memqos-lab bench churn` and `memqos-lab bench faults`
//!   (the fault campaign, docs/reliability.md);
//! - [`dirty`]: the dirty-page noisy-neighbour reproducer;
//! - [`workload`]: small deterministic memory workloads (`memqos-lab workload`);
//! - [`configs`]: the daemon configs all of these run with (`crates/lab/configs/`);
//! - [`daemon_process`]: `memqos daemon` as a child process: start, wait until it runs, stop;
//! - [`provenance`]: the commit, config digests, speed, kernel and host load every result
//!   file records (the experiments' and the benches').
//!
//! Guests are booted through `memqos_vmtest::self_run`.

pub mod bench;
pub mod configs;
pub mod controller;
pub mod daemon_process;
pub mod demo;
pub mod dirty;
pub mod provenance;
pub mod workload;
