//! What the engine asks the daemon to write, and why.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::obs::CgroupObs;
use crate::size::Limit;
use memqos_schema::CgroupId;

/// The engine's vocabulary on the wire lives in `memqos_schema`, which the daemon's readers share.
pub use memqos_schema::knob::Knob;
pub use memqos_schema::reason::{Reason, Trigger};

/// One knob write for one cgroup. The daemon applies a tick's decisions in order (thaws come
/// first, kills last) and logs each as a JSON line. On the wire a decision names its cgroup by
/// path only; one read back (a replay, a test: no kernel) gets the id
/// [`CgroupObs::named`] makes up for that path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "WireDecision")]
pub struct Decision {
    /// Path relative to `cgroup_root`: what reasons and logs name, and where the write goes.
    pub cgroup: String,
    /// Which cgroup, as the kernel knows it: the actuator's key (a cgroup re-created under
    /// the same path is another one, and a decision for the old one must not reach it).
    #[serde(skip_serializing)]
    pub id: CgroupId,
    /// Which knob, and the value to write.
    pub action: Action,
    /// Why.
    pub reason: Reason,
}

impl Decision {
    /// A decision for observed cgroup `c`: its path and its id.
    pub fn for_cgroup(c: &CgroupObs, action: Action, reason: Reason) -> Decision {
        Decision { cgroup: c.path.clone(), id: c.id, action, reason }
    }

    /// The knob this decision writes.
    pub fn knob(&self) -> Knob {
        self.action.knob()
    }
}

/// A decision as written: without its id.
#[derive(Deserialize)]
struct WireDecision {
    cgroup: String,
    action: Action,
    reason: Reason,
}

impl From<WireDecision> for Decision {
    fn from(w: WireDecision) -> Decision {
        Decision { id: CgroupObs::made_up_id(&w.cgroup), cgroup: w.cgroup, action: w.action, reason: w.reason }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} = {}: {}", self.cgroup, self.action.file(), self.action.value(), self.reason)
    }
}

/// A knob and its new value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Write memory.high.
    High(Limit),
    /// Write memory.low.
    Low(Limit),
    /// Write memory.min.
    Min(Limit),
    /// Write cgroup.freeze (true = freeze).
    Freeze(bool),
    /// Write `1` to cgroup.kill (kernel 5.14+). Irreversible; only for `kill = true` tiers.
    Kill,
}

impl Action {
    /// The knob, without the value.
    pub fn knob(&self) -> Knob {
        match self {
            Action::High(_) => Knob::High,
            Action::Low(_) => Knob::Low,
            Action::Min(_) => Knob::Min,
            Action::Freeze(_) => Knob::Freeze,
            Action::Kill => Knob::Kill,
        }
    }

    /// The cgroup file to write, relative to the cgroup's directory.
    pub fn file(&self) -> &'static str {
        self.knob().file()
    }

    /// The exact text to write into [`Action::file`].
    pub fn value(&self) -> String {
        match self {
            Action::High(l) | Action::Low(l) | Action::Min(l) => l.to_string(),
            Action::Freeze(b) => u8::from(*b).to_string(),
            Action::Kill => "1".to_string(),
        }
    }
}
