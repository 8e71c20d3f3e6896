//! memqos-policy: priority memory QoS for cgroup v2, as pure functions and state machines.
//!
//! The memcg_bpf_ops RFC throttles low-priority cgroups from a BPF hook when a high-priority
//! one is under memory pressure, and protects the high-priority one from reclaim. This crate
//! reaches the same outcome with knobs stock kernels have: memory.high of lower tiers (the
//! kernel makes tasks over high sleep instead of failing their charges), memory.low/min of
//! protected tiers following their working set, and opt-in freeze/kill.
//!
//! Nothing here does I/O or reads a clock: the daemon observes ([`Observation`]), calls
//! [`Engine::tick`] and writes the returned [`Decision`]s. Config parsing is a pure function
//! of the text ([`Config::from_str`]).

pub mod config;
pub mod decision;
pub mod engine;
pub mod obs;
pub mod size;

pub use config::{Config, ConfigError, Policy, Protect, Signals, Tier, TierIndex, Tiers};
pub use decision::{Action, Decision, Knob, Reason, Trigger};
pub use engine::{Engine, Status};
pub use obs::{CgroupObs, Knobs, MemEvents, Observation, ParentObs, Psi, SignalEvent};
pub use size::Limit;
