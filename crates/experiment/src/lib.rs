//! memqos-experiment: the isolation experiments of issue 4, reproducible from data files.
//!
//! - [`scenario`]: `experiments/*.toml` (traces per tier, parent limit, speed, policies);
//! - [`runner`]: the in-guest loop (runs × arms, rotated order, one JSON per arm);
//! - [`stats`]: medians with bootstrap intervals;
//! - [`summary`]: paired ratios, target verdicts and the markdown report;
//! - [`avoidability`]: the fewest kills any pausing policy could achieve (a clairvoyant bound);
//! - [`kills`]: that bound for each run's traces, and the kills above it.
//! - [`kube`]: the knobs a v1.37 kubelet writes with MemoryQoS (the `kube-memoryqos` arm);
//! - [`static_arms`]: the static-adj and static-reserve baselines' knobs;
//! - [`oomd`]: Meta's oomd with the scenario's ruleset (the `oomd` arm);
//! - [`systemd_oomd`]: systemd-oomd watching the low tier's slice (the `systemd-oomd` arm);
//! - [`docs`]: the docs' tables generated from the committed summary (`scripts/docs.sh`);
//! - [`provenance`]: the commit, config digests, speed, kernel, host load and host CPU of a series;
//! - [`agent_host`]: many agent sessions under one host budget, a cgroup per tool call
//!   (`memqos-lab experiment agent-host`, its own runner and report);
//! - [`series`]: what both pipelines share: a series' guest, provenance and results, the
//!   memqos arm's daemon, the arm's cgroup tree torn down, result files read back;
//! - [`host`]: the host side of `memqos-lab experiment` (a guest per scenario and kernel, the
//!   copy of its results, the report and plots).

pub mod agent_host;
pub mod avoidability;
pub mod docs;
pub mod host;
pub mod kills;
pub mod kube;
pub mod oomd;
/// Shared with the lab's benches, which write results too.
pub use memqos_lab::provenance;
pub mod runner;
pub mod scenario;
pub mod series;
pub mod static_arms;
pub mod stats;
pub mod summary;
pub mod systemd_oomd;
