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
//!
//! ```
//! use memqos_policy::{Action, CgroupId, CgroupObs, Config, Engine, Limit, Observation, ParentObs};
//!
//! let text = r#"
//!     cgroup_root = "/sys/fs/cgroup/agents"
//!     [[tier]]
//!     name = "critical"
//!     match = ["prod/*"]
//!     protect = "low"
//!     [[tier]]
//!     name = "batch"
//!     match = ["**"]
//!     throttle = true
//! "#;
//! let cfg = Config::from_str(text, "memqos.toml").unwrap();
//! let mut cgroups = Vec::new();
//! for (inode, path, usage) in [(101, "prod/db", 500 << 20), (102, "jobs/etl", 400 << 20)] {
//!     let tier = cfg.tiers.classify(path).expect("every cgroup matches some tier");
//!     let mut c = CgroupObs::new(path, tier, usage);
//!     c.id = CgroupId(inode); // the engine knows a cgroup by its kernel id
//!     cgroups.push(c);
//! }
//! cgroups[0].psi.some.avg10 = 20.0; // prod/db stalls on memory
//! cgroups[0].psi_some_delta_us = 100_000;
//!
//! let mut engine = Engine::new(cfg);
//! let obs = Observation { now_ms: 0, parent: ParentObs::default(), cgroups };
//! let decisions = engine.tick(&obs);
//! // jobs/etl gives up 10 % of its usage; prod/db's memory.low follows its working set.
//! assert_eq!(decisions[0].cgroup, "jobs/etl");
//! assert_eq!(decisions[0].action, Action::High(Limit::Bytes(360 << 20)));
//! assert_eq!(decisions[0].action.file(), "memory.high");
//! assert_eq!(decisions[1].action, Action::Low(Limit::Bytes(560 << 20)));
//! // The daemon writes decisions[i].action.value() into decisions[i].action.file() and
//! // logs serde_json::to_string(&decisions[i]); on shutdown it restores what it wrote from
//! // its journal.
//! ```

pub mod config;
pub mod decision;
pub mod dirty;
pub mod engine;
pub mod knobs;
pub mod obs;
pub mod size;

pub use config::{
    AdmissionRegrowth, Config, ConfigError, Control, Dirty, DirtyMax, ForeignKnobs, Metrics, Policy, Protect, Signals,
    StallAction, StallBound, SwapMax, Tier, TierIndex, Tiers,
};
pub use decision::{Action, Decision, Knob, Reason, Trigger};
pub use engine::{Allowance, Engine, Status, THRASH_REST_MS, UNSTARTED_RESERVATION_MS};
pub use memqos_cgroupfs::{Limit, MemoryEvents, Pressure, PressureLine};
pub use obs::{
    check_workload_key, BpfKind, CgroupId, CgroupObs, Knobs, LearnedPeak, Observation, ParentObs, PeakSource,
    SignalEvent, EXPECTED_PEAK_XATTR, WORKLOAD_XATTR,
};
