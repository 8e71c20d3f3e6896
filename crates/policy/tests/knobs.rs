//! The tier-set knobs' rules (`memqos_policy::knobs`): cpu.weight and memory.swap.max share
//! one rule, oom_score_adj moves each process once towards its tier's value.

use memqos_policy::knobs::{
    cpu_weight, oom_score_adj, oom_wants, settle, swap_max, tier_static, AdjReason, AdjState, StaticDecision,
    StaticValue, TierStatic,
};
use memqos_policy::{Config, ForeignKnobs, Limit, Tier, TierIndex};
use proptest::prelude::*;

fn tier(fields: &str) -> Tier {
    let text = format!("cgroup_root = \"/x\"\n[[tier]]\nname = \"a\"\nmatch = [\"a\"]\n{fields}");
    Config::from_str(&text, "t.toml").unwrap().tiers.get(TierIndex(0)).unwrap().clone()
}

fn write(value: &str, reason: &'static str) -> StaticDecision {
    StaticDecision::Write { value: value.into(), reason }
}

/// Whether the swap.max rule writes, and what (`swap_max::write_needed` in the daemon before).
fn swap_write(target: Limit, current: &str) -> Option<String> {
    match tier_static(TierStatic::SwapMax, StaticValue::Bytes(target), current, true, ForeignKnobs::Respect) {
        StaticDecision::Write { value, .. } => Some(value),
        _ => None,
    }
}

#[test]
fn swap_max_writes_only_what_differs() {
    assert_eq!(swap_write(Limit::Bytes(0), "max\n"), Some("0".into()));
    assert_eq!(swap_write(Limit::Bytes(0), "0\n"), None);
    assert_eq!(swap_write(Limit::Max, "max\n"), None);
    assert_eq!(swap_write(Limit::Bytes(2 << 30), "0\n"), Some((2u64 << 30).to_string()));
    // The kernel rounds a write down to pages: 5000 reads back as 4096.
    assert_eq!(swap_write(Limit::Bytes(5000), "4096\n"), None);
    assert_eq!(swap_write(Limit::Bytes(0), "garbage"), Some("0".into()));
}

#[test]
fn swap_max_respects_a_value_someone_else_set_unless_told_not_to() {
    let protected = tier("protect = \"low\"\n");
    // The kernel's default is not foreign; memqos's own journaled value is not either.
    assert_eq!(swap_max(&protected, "max", false, ForeignKnobs::Respect), Some(write("0", "tier swap_max")));
    assert_eq!(swap_max(&protected, "1073741824", true, ForeignKnobs::Respect), Some(write("0", "tier swap_max")));
    assert_eq!(swap_max(&protected, "1073741824", false, ForeignKnobs::Respect), Some(StaticDecision::Foreign));
    assert_eq!(swap_max(&protected, "0", false, ForeignKnobs::Respect), Some(StaticDecision::Foreign));
    assert_eq!(swap_max(&protected, "1073741824", false, ForeignKnobs::Override), Some(write("0", "tier swap_max")));
    assert_eq!(swap_max(&protected, "0", true, ForeignKnobs::Respect), Some(StaticDecision::AlreadySet));
    assert_eq!(swap_max(&tier("swap_max = \"keep\"\n"), "max", false, ForeignKnobs::Respect), None);
    assert_eq!(swap_max(&tier(""), "max", false, ForeignKnobs::Respect), None, "unprotected tiers keep it");
}

#[test]
fn cpu_weight_is_the_tiers_whatever_the_file_held() {
    let t = tier("cpu_weight = 500\n");
    assert_eq!(cpu_weight(&t, "100"), Some(write("500", "tier cpu_weight")));
    // systemd's or an operator's weight is not respected: cpu.weight has no foreign rule.
    assert_eq!(cpu_weight(&t, "42"), Some(write("500", "tier cpu_weight")));
    assert_eq!(cpu_weight(&t, "500"), Some(StaticDecision::AlreadySet));
    assert_eq!(cpu_weight(&tier(""), "100"), None);
}

proptest! {
    /// After writing what the rule asks (as the kernel shows it), the rule asks nothing more:
    /// one write per cgroup, never a write every tick.
    #[test]
    fn a_tier_static_write_settles_in_one_step(
        bytes in prop_oneof![Just(None), (0u64..1 << 40).prop_map(Some)],
        weight in 1u64..=10000,
        current in prop_oneof![Just("max".to_string()), (0u64..1 << 40).prop_map(|b| b.to_string())],
        ours in any::<bool>(),
        respect in any::<bool>(),
    ) {
        let foreign_knobs = if respect { ForeignKnobs::Respect } else { ForeignKnobs::Override };
        let limit = bytes.map_or(Limit::Max, Limit::Bytes);
        for (knob, target) in [(TierStatic::SwapMax, StaticValue::Bytes(limit)), (TierStatic::CpuWeight, StaticValue::Number(weight))] {
            match tier_static(knob, target, &current, ours, foreign_knobs) {
                StaticDecision::Write { value, reason } => {
                    prop_assert_eq!(reason, knob.reason());
                    // What the kernel shows after the write: bytes rounded down to pages.
                    let shown = match target {
                        StaticValue::Bytes(Limit::Bytes(b)) => (b - b % 4096).to_string(),
                        _ => value.clone(),
                    };
                    // Written by memqos now: journaled, so ours.
                    prop_assert_eq!(tier_static(knob, target, &shown, true, foreign_knobs), StaticDecision::AlreadySet);
                }
                StaticDecision::AlreadySet => prop_assert!(target.shown_by(&current)),
                StaticDecision::Foreign => {
                    prop_assert!(knob == TierStatic::SwapMax && !ours && respect && current != "max");
                }
            }
        }
    }
}

#[test]
fn oom_score_adj_moves_only_towards_the_target_and_never_undoes_a_stronger_setting() {
    assert!(oom_wants(0, -900));
    assert!(oom_wants(-500, -900));
    assert!(!oom_wants(-900, -900));
    assert!(!oom_wants(-1000, -900), "an administrator's -1000 stays");
    assert!(oom_wants(0, 500));
    assert!(!oom_wants(800, 500));
    assert!(!oom_wants(0, 0));
}

#[test]
fn oom_score_adj_of_a_new_process() {
    // A process at the default: moved, its value kept to put back.
    let (w, s) = oom_score_adj(-900, 0, None, None);
    assert_eq!((w.map(|w| (w.value, w.reason, w.journal_original))), Some((-900, AdjReason::Tier, None)));
    assert_eq!(s, AdjState { wrote: true, original: 0 });
    // Already further: left alone, nothing to put back.
    assert_eq!(oom_score_adj(-900, -1000, None, None), (None, AdjState { wrote: false, original: -1000 }));
    // Journaled before a reload: its true original is the journal's, and it is not rewritten.
    assert_eq!(oom_score_adj(-900, -900, Some(0), None), (None, AdjState { wrote: true, original: 0 }));
    let (w, s) = oom_score_adj(-900, 100, Some(0), None);
    assert_eq!(w.map(|w| w.reason), Some(AdjReason::Tier));
    assert_eq!(s, AdjState { wrote: true, original: 0 });
}

#[test]
fn a_child_that_inherited_memqos_value_gets_its_parents_original() {
    let parent = AdjState { wrote: true, original: 200 };
    let (w, s) = oom_score_adj(-900, -900, None, Some((7, parent)));
    let w = w.expect("journaled, so it is restored");
    assert_eq!((w.value, w.journal_original), (-900, Some(200)));
    assert_eq!(w.reason.to_string(), "inherited from pid 7: its original 200 journaled");
    assert_eq!(s, parent);
    // A parent memqos did not write, or a child that changed its value, is not inheritance.
    let untouched = AdjState { wrote: false, original: -900 };
    assert_eq!(
        oom_score_adj(-900, -900, None, Some((7, untouched))),
        (None, AdjState { wrote: false, original: -900 })
    );
    let (w, s) = oom_score_adj(-900, 0, None, Some((7, parent)));
    assert_eq!((w.map(|w| w.reason), s), (Some(AdjReason::Tier), AdjState { wrote: true, original: 0 }));
}

proptest! {
    /// Whatever a process held, memqos's write is the tier's value, and what it puts back
    /// when the process leaves is what the process (or its parent, if inherited) held first.
    #[test]
    fn oom_score_adj_puts_back_what_was_there(
        target in -999i32..=1000,
        current in -1000i32..=1000,
        parent in proptest::option::of((1u32..1000, any::<bool>(), -1000i32..=1000)),
        alive in any::<bool>(),
    ) {
        let parent = parent.map(|(ppid, wrote, original)| (ppid, AdjState { wrote, original }));
        let (w, s) = oom_score_adj(target, current, None, parent);
        if let Some(w) = w {
            prop_assert_eq!(w.value, target);
            prop_assert!(s.wrote);
        }
        let inherited = parent.filter(|(_, p)| p.wrote && current == target);
        let first = inherited.map_or(current, |(_, p)| p.original);
        prop_assert_eq!(s.original, first);
        prop_assert_eq!(settle(s, alive), (s.wrote && alive).then_some(first));
        // Never moves away from the target's side, never undoes a stronger value.
        if w.is_some() && inherited.is_none() {
            prop_assert!(oom_wants(current, target));
        }
    }
}

mod dirty {
    use memqos_policy::dirty::{plan, Ceilings, DirtyObs, HostDirty};
    use memqos_policy::{Action, CgroupObs, Config, Decision, Limit, Observation, ParentObs, Reason, TierIndex};
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn cfg() -> Config {
        let text = "cgroup_root = \"/x\"\n[[tier]]\nname = \"bulk\"\nmatch = [\"noisy*\"]\ndirty = { max = \"4M\" }\nthrottle = true\n";
        Config::from_str(text, "t.toml").unwrap()
    }

    fn host() -> HostDirty {
        HostDirty { thresh_pages: 8192, bg_thresh_pages: 4096, dirtyable_pages: 487_000 }
    }

    fn noisy(usage: u64, file: u64, dirty: u64) -> (DirtyObs, Observation) {
        let d = DirtyObs {
            path: "noisy".into(),
            tier: TierIndex(0),
            usage_bytes: usage,
            file_bytes: file,
            dirty_bytes: dirty,
            max: Limit::Max,
        };
        let obs = Observation {
            now_ms: 0,
            parent: ParentObs::default(),
            cgroups: vec![CgroupObs::named("noisy", TierIndex(0), usage)],
        };
        (d, obs)
    }

    fn high(cgroup: &str, bytes: u64, reason: Reason) -> Decision {
        Decision {
            cgroup: cgroup.into(),
            id: CgroupObs::made_up_id(cgroup),
            action: Action::High(Limit::Bytes(bytes)),
            reason,
        }
    }

    #[test]
    fn the_ceiling_is_a_memory_high_decision_with_its_reason() {
        let (d, obs) = noisy(70 * MIB, 64 * MIB, 30 * MIB);
        let cap = plan(&cfg(), &host(), std::slice::from_ref(&d)).caps[0].high.unwrap();
        let (out, warnings) = Ceilings::default().decide(&cfg(), &host(), &[d], &obs, Vec::new());
        assert!(warnings.is_empty());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].action, Action::High(Limit::Bytes(cap)));
        assert!(
            matches!(out[0].reason, Reason::DirtyCeiling { cap_bytes, dirty_bytes, .. } if cap_bytes == 4 * MIB && dirty_bytes == 30 * MIB),
            "{:?}",
            out[0].reason
        );
    }

    #[test]
    fn the_engines_lower_wish_wins_and_is_kept_while_it_says_nothing() {
        let (d, obs) = noisy(70 * MIB, 64 * MIB, 30 * MIB);
        let mut c = Ceilings::default();
        let engine = high("noisy", 8 * MIB, Reason::Restore);
        let other = high("other", 100 * MIB, Reason::Restore);
        let (out, _) = c.decide(&cfg(), &host(), std::slice::from_ref(&d), &obs, vec![engine.clone(), other.clone()]);
        assert_eq!(out, vec![other, engine]);
        // Next tick the engine is silent: its 8 MiB still beats the ceiling.
        let (out, _) = c.decide(&cfg(), &host(), &[d], &obs, Vec::new());
        assert_eq!(out, vec![high("noisy", 8 * MIB, Reason::Restore)]);
    }

    #[test]
    fn a_cgroup_made_again_under_the_same_path_does_not_inherit_the_engines_wish() {
        let (d, obs) = noisy(70 * MIB, 64 * MIB, 30 * MIB);
        let mut c = Ceilings::default();
        let (out, _) =
            c.decide(&cfg(), &host(), std::slice::from_ref(&d), &obs, vec![high("noisy", 8 * MIB, Reason::Restore)]);
        assert_eq!(out, vec![high("noisy", 8 * MIB, Reason::Restore)]);
        // The cgroup is removed and made again under its name: a new id, its own original
        // (max). The old one's 8 MiB is not its wish: the ceiling applies.
        let mut again = obs.clone();
        again.cgroups[0].id = memqos_policy::CgroupId(4242);
        let cap = plan(&cfg(), &host(), std::slice::from_ref(&d)).caps[0].high.unwrap();
        let (out, _) = c.decide(&cfg(), &host(), &[d], &again, Vec::new());
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].action, Action::High(Limit::Bytes(cap)));
        assert!(matches!(out[0].reason, Reason::DirtyCeiling { .. }), "{:?}", out[0].reason);
    }

    proptest! {
        /// A capped cgroup's memory.high never ends above its ceiling, nor above the engine's
        /// wish; and once memory.high holds what was decided, nothing more is decided.
        #[test]
        fn memory_high_is_the_lower_of_ceiling_and_engine(
            nonfile in 0u64..512,
            file in 0u64..512,
            dirty in 0u64..64,
            engine in proptest::option::of(1u64..1024),
        ) {
            let (d, mut obs) = noisy((nonfile + file) * MIB, file * MIB, dirty * MIB);
            let cap = plan(&cfg(), &host(), std::slice::from_ref(&d)).caps[0].high.unwrap();
            let engine: Vec<Decision> = engine.map(|e| high("noisy", e * MIB, Reason::Restore)).into_iter().collect();
            let mut c = Ceilings::default();
            let (out, _) = c.decide(&cfg(), &host(), std::slice::from_ref(&d), &obs, engine.clone());
            prop_assert_eq!(out.len(), 1, "{:?}", out);
            let Action::High(Limit::Bytes(h)) = out[0].action else { panic!("{:?}", out[0]) };
            prop_assert!(h <= cap);
            if let Some(Action::High(Limit::Bytes(e))) = engine.first().map(|d| d.action) {
                prop_assert_eq!(h, e.min(cap));
            }
            obs.cgroups[0].current.high = Limit::Bytes(h);
            let (again, _) = c.decide(&cfg(), &host(), &[d], &obs, Vec::new());
            prop_assert!(again.is_empty(), "{:?}", again);
        }
    }
}
