//! What the engine asks the daemon to write, and why.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::size::Limit;

/// The engine's vocabulary on the wire lives in `memqos_schema`, which the daemon's readers share.
pub use memqos_schema::knob::Knob;
pub use memqos_schema::reason::{Reason, Trigger};

/// One knob write for one cgroup. The daemon applies a tick's decisions in order (thaws come
/// first, kills last) and logs each as a JSON line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Path relative to `cgroup_root`.
    pub cgroup: String,
    /// Which knob, and the value to write.
    pub action: Action,
    /// Why.
    pub reason: Reason,
}

impl Decision {
    /// The knob this decision writes.
    pub fn knob(&self) -> Knob {
        self.action.knob()
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
