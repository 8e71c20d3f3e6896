//! What the daemon writes and other programs read, as types both sides share: the event log
//! (`events.jsonl`), the status file (`status.json`), OOM reports, protection findings, tier
//! moves on reload, the names of the files in a state directory and the knob files memqos
//! writes; and the report `memqos run --json` prints after a call ([`call`]). Writers
//! serialize these types and readers (status, explain, experiments, the agent host, the lab,
//! tests) deserialize them, so a change of encoding is a compile error or a failing test
//! rather than a reader that silently counts 0.
//!
//! Only types, their text forms and pure parsing live here; opening, rotating and atomically
//! replacing the files is the daemon's job. The engine's words on the wire are defined here
//! too (`Reason`, `Trigger`, `Knob`, `Knobs`, `LearnedPeak`; `memqos-policy` re-exports them
//! where the engine uses them), so this crate depends on nothing of memqos but the value types
//! of `memqos-cgroupfs` (`Limit`, `MemoryEvents`, and `units` for the reasons' text).

pub mod admission;
pub mod call;
pub mod cgroup_id;
pub mod events;
pub mod knob;
pub mod oom;
pub mod protection;
pub mod reason;
pub mod state;
pub mod status;

pub use cgroup_id::CgroupId;
pub use events::{Event, LogLine, Outcome, TierMove, WriteEvent};
pub use knob::{Knob, KnobFile, Knobs, Scope};
pub use oom::OomKill;
pub use reason::{BpfKind, LearnedPeak, PeakSource, Reason, Trigger};
pub use status::{CgroupStatus, DecisionRecord, Snapshot};
