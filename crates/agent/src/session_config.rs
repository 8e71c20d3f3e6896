//! The session layout's daemon config (`session.example.toml` next to this crate's
//! Cargo.toml) agrees with `memqos run`'s naming: every hint lands in the tier of its name.

/// The example config's text (docs/agent-hosts.md shows it; a test checks it).
pub const SESSION_EXAMPLE: &str = include_str!("../session.example.toml");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::{resolve_tier, Hint};
    use crate::layout::RUNTIME;
    use memqos_policy::{Config, Protect, StallAction};

    /// The example and the agent-host profile (`memqos init --profile agent-host`).
    fn layouts() -> [(&'static str, &'static str); 2] {
        let profile = memqos_policy::config::profiles::profile("agent-host").expect("the agent-host profile");
        [("session.example.toml", SESSION_EXAMPLE), (profile.file, profile.text)]
    }

    #[test]
    fn hints_runtime_and_strays_classify_into_the_right_tiers() {
        for (file, text) in layouts() {
            classify_as_named(&Config::from_str(text, file).unwrap());
        }
    }

    fn classify_as_named(cfg: &Config) {
        let tier_of = |rel: &str| {
            let i = cfg.tiers.classify(rel).unwrap_or_else(|| panic!("{rel} matches no tier"));
            cfg.tiers.get(i).unwrap().clone()
        };
        let runtime = tier_of(&format!("s1/{RUNTIME}"));
        assert_eq!(
            (runtime.name.as_str(), runtime.protect, runtime.oom_score_adj),
            ("runtime", Protect::Low, Some(-900))
        );
        for hint in [None, Some(Hint::Low), Some(Hint::Medium), Some(Hint::High), Some(Hint::Size(1 << 30))] {
            let tier = resolve_tier(None, hint).unwrap();
            let got = tier_of(&format!("agent-7/{tier}.4711"));
            assert_eq!(got.name, tier, "hint {hint:?}");
            assert!(got.throttle && !got.is_protected(), "tool calls are best-effort: {got:?}");
            assert_eq!(tier_of(&format!("agent-7/{tier}.4711-2")).name, tier);
        }
        // Whatever else appears under the root is the lowest tier, never the runtime's.
        assert_eq!(tier_of("stray").name, "tool-low");
        assert_eq!(tier_of("s1/runtime-not").name, "tool-low");
        assert_eq!(tier_of("s1/tool-low.9").stall.action, StallAction::Kill);
    }

    #[test]
    fn the_agent_host_profile_arms_and_its_commented_queue_switch_parses() {
        let (file, text) = layouts()[1];
        let cfg = Config::from_str(text, file).unwrap();
        assert!(cfg.policy.admission);
        let tool = |c: &Config| c.tiers.get(c.tiers.by_name("tool").unwrap()).unwrap().queue_held;
        assert!(!tool(&cfg));
        let on = text.replace("# queue_held = true", "queue_held = true");
        assert!(tool(&Config::from_str(&on, "on.toml").unwrap()));
    }

    #[test]
    fn arming_is_off_and_its_commented_switch_turns_it_on() {
        let on = SESSION_EXAMPLE.replace("# [policy]\n# admission = true", "[policy]\nadmission = true");
        assert_ne!(on, SESSION_EXAMPLE);
        assert!(Config::from_str(&on, "on.toml").unwrap().policy.admission);
        assert!(!Config::from_str(SESSION_EXAMPLE, "session.example.toml").unwrap().policy.admission);
    }
}
