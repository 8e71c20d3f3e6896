//! `--hint` and `--tier`: which tier a call runs in, and what else a hint sets.
//!
//! The tier is the first part of the call cgroup's name (`tool-low.4711`), which the daemon
//! config's globs match (`crates/agent/session.example.toml`):
//!
//! | hint | tier | meaning |
//! | --- | --- | --- |
//! | `low` | `tool-low` | throttled first, frozen or killed where that tier opts in |
//! | `medium` (default) | `tool` | best-effort: throttled when the runtime needs memory |
//! | `high` | `tool-high` | throttled only after the other tool calls |
//! | a size, e.g. `2G` | `tool` | the call expects to need this much: memory.low = size |
//!
//! A size hint protects the call from reclaim up to that size, but only within what its
//! session is itself entitled to: memory.low is hierarchical, so a call can never claim more
//! protection than its parents grant (with cgroup2's `memory_recursiveprot`, the session's
//! own protection is shared among its children in proportion).

use memqos_policy::size::parse_size;

use crate::error::SetupError;

/// The default tier of a tool call.
pub const DEFAULT_TIER: &str = "tool";

/// A parsed `--hint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    Low,
    Medium,
    High,
    /// Expected peak in bytes.
    Size(u64),
}

impl Hint {
    pub fn parse(s: &str) -> Result<Hint, SetupError> {
        match s.to_ascii_lowercase().as_str() {
            "low" => Ok(Hint::Low),
            "medium" => Ok(Hint::Medium),
            "high" => Ok(Hint::High),
            _ => parse_size(s).map(Hint::Size).map_err(|e| {
                SetupError::Usage(format!("--hint {s:?}: expected low, medium, high or a size such as 512M ({e})"))
            }),
        }
    }

    /// The tier this hint puts a call in.
    pub fn tier(self) -> &'static str {
        match self {
            Hint::Low => "tool-low",
            Hint::Medium | Hint::Size(_) => DEFAULT_TIER,
            Hint::High => "tool-high",
        }
    }

    /// memory.low to write on the call's cgroup, if any.
    pub fn low_bytes(self) -> Option<u64> {
        match self {
            Hint::Size(b) => Some(b),
            _ => None,
        }
    }
}

/// The tier of a call from `--tier` and `--hint`: an explicit tier wins over a level hint's
/// tier only if they agree; a size hint combines with any tier.
pub fn resolve_tier(tier: Option<&str>, hint: Option<Hint>) -> Result<String, SetupError> {
    match (tier, hint) {
        (Some(t), Some(h @ (Hint::Low | Hint::Medium | Hint::High))) if t != h.tier() => Err(SetupError::Usage(
            format!("--tier {t} and --hint {h:?} disagree (that hint means tier {}); give one of them", h.tier()),
        )),
        (Some(t), _) => Ok(t.to_owned()),
        (None, Some(h)) => Ok(h.tier().to_owned()),
        (None, None) => Ok(DEFAULT_TIER.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_map_to_tiers() {
        assert_eq!(Hint::parse("LOW").unwrap().tier(), "tool-low");
        assert_eq!(Hint::parse("high").unwrap().tier(), "tool-high");
        assert_eq!(Hint::parse("512M").unwrap(), Hint::Size(512 << 20));
        assert_eq!(Hint::parse("512M").unwrap().low_bytes(), Some(512 << 20));
        assert!(Hint::parse("huge").unwrap_err().to_string().contains("expected low, medium, high"));

        assert_eq!(resolve_tier(None, None).unwrap(), "tool");
        assert_eq!(resolve_tier(None, Some(Hint::Low)).unwrap(), "tool-low");
        assert_eq!(resolve_tier(Some("build"), Some(Hint::Size(1))).unwrap(), "build");
        assert_eq!(resolve_tier(Some("tool-high"), Some(Hint::High)).unwrap(), "tool-high");
        assert!(resolve_tier(Some("build"), Some(Hint::Low)).unwrap_err().to_string().contains("disagree"));
    }
}
