//! Model tests of parking (`engine::park`): while a reservation is in force, the oldest
//! lower cgroups that fit run and the others wait at what they hold, admitted one at a time
//! as room frees; and of where the expected peak comes from (`reserve::expectation`).

mod common;

use common::*;
use memqos_policy::{Decision, Knob, LearnedPeak, Limit, PeakSource, Reason};
use proptest::prelude::*;

fn sim(tiers: &str, policy: &str) -> Sim {
    let mut sim = Sim::new(config(tiers, &format!("min_write_interval_ms = 200\nhold_ms = 2000\n{policy}")));
    sim.tick_ms = 100;
    sim.parent.max = Limit::Bytes(711 * MB);
    sim
}

/// A protected task declaring 330 MiB that runs long (~9 s), and two low tasks that each
/// need 200 MiB for ~2 s, the second made one tick after the first. The room beside the
/// reservation (~311 MiB) fits one low at a time, not both. Swapless: nothing is reclaimed.
/// Returns (the first tick at which the three held more than the limit, finish times:
/// protected, then the lows).
fn one_fits(policy: &str) -> (Option<u64>, Vec<Option<u64>>) {
    let mut sim = sim(TWO_TIERS, policy);
    let high = Workload::new("critical/agent", [hold(12, 3), ramp(12, 300, 30), hold(300, 60)].concat());
    let low = || [hold(12, 1), ramp(12, 200, 10), hold(200, 10)].concat();
    let mut tasks = [high, Workload::new("batch/a", low()), Workload::new("batch/b", low())];
    sim.add("critical/agent", 0);
    sim.cg("critical/agent").expected_peak_bytes = Some(330 * MB);
    sim.add("batch/a", 0);
    let over = run_swapless(&mut sim, &mut tasks, 400, 711 * MB, |tick, sim| {
        if tick == 1 {
            sim.add("batch/b", 0);
        }
    });
    (over, tasks.iter().map(|w| w.finished_at).collect())
}

#[test]
fn parked_lows_run_one_at_a_time_oldest_first_and_finish_before_equal_shares_would() {
    let (over, shares) = one_fits("park_room = \"0\"");
    assert_eq!(over, None);
    let (over, parked) = one_fits("");
    assert_eq!(over, None, "parking keeps the reservation as equal shares do");
    let (a, b) = (parked[1].expect("a finishes"), parked[2].expect("b finishes"));
    assert!(a < b, "the oldest runs first: a at {a}, b at {b}");
    let high = parked[0].expect("the protected task finishes");
    assert!(b < high, "both lows finished while the protected task still ran ({b} vs {high})");
    // Equal shares hold both at ~155 MiB, below the 200 MiB each needs: neither finishes
    // before the reservation ends with the protected task.
    for f in &shares[1..] {
        let f = f.expect("finishes eventually");
        assert!(f > b, "equal shares finish a low at {f}, parking finished both by {b}");
    }
}

/// A 450 MiB reservation under the 711 MiB parent leaves `park_room` for batch/a (the
/// oldest) and not for the `later` lows beside it (made a tick later, with their usage): they
/// are parked from their first tick, whose decisions are returned with the sim.
fn parked_behind_a(tiers: &str, later: &[(&str, u64)]) -> (Sim, Vec<Decision>) {
    behind_a(sim(tiers, ""), later)
}

/// The reservation of [`parked_behind_a`] on a sim of the caller's (a host with swap, say).
fn behind_a(mut sim: Sim, later: &[(&str, u64)]) -> (Sim, Vec<Decision>) {
    sim.add("critical/agent", 12 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(450 * MB);
    sim.add("batch/a", 60 * MB);
    sim.tick();
    for &(id, usage) in later {
        sim.add(id, usage);
    }
    let d = sim.tick();
    (sim, d)
}

#[test]
fn a_parked_cgroup_is_capped_at_what_it_holds_named_in_status_and_admitted_when_room_frees() {
    let (mut sim, d) = parked_behind_a(TWO_TIERS, &[("batch/b", 50 * MB), ("batch/c", 40 * MB)]);
    // Budget (711 - 64) - 12 - (464 - 12) = 183 MiB, 150 MiB held: 33 MiB free, below
    // park_room: only the oldest runs.
    assert_eq!(sim.engine.status().parked, vec!["batch/b".to_string(), "batch/c".to_string()]);
    assert_eq!(sim.high("batch/b"), Limit::Bytes(50 * MB));
    assert_eq!(sim.high("batch/c"), Limit::Bytes(40 * MB));
    let parked: Vec<_> = d.iter().filter(|d| matches!(d.reason, Reason::Parked { .. })).collect();
    assert!(
        matches!(&parked[0].reason, Reason::Parked { by, place: 1, admitted: 1, source: PeakSource::Declared, .. } if by == "critical/agent")
            && parked[0].to_string().contains("1 in line"),
        "{parked:?}"
    );
    // a runs with what the parked ones leave: 183 - 50 - 40 = 93 MiB (once the write
    // interval since its first cap has passed).
    sim.run(200, |_| {});
    assert_eq!(sim.high("batch/a"), Limit::Bytes(93 * MB));
    // a ends: b is admitted (next in line), c still waits (one at a time).
    sim.cg("batch/a").usage_bytes = 0;
    sim.cg("batch/a").populated = Some(false);
    sim.run(300, |_| {});
    assert_eq!(sim.engine.status().parked, vec!["batch/c".to_string()]);
    assert!(sim.high("batch/b") > Limit::Bytes(50 * MB), "b admitted: {:?}", sim.high("batch/b"));
    assert_eq!(sim.high("batch/c"), Limit::Bytes(40 * MB));
    // The protected task ends: nobody is parked, everything is released.
    sim.cg("critical/agent").populated = Some(false);
    sim.run(1_000, |_| {});
    assert!(sim.engine.status().parked.is_empty());
    for id in ["batch/a", "batch/b", "batch/c"] {
        assert_eq!(sim.high(id), Limit::Max, "{id}");
    }
}

/// A sim of two tiers on a host with active swap.
fn with_swap(policy: &str) -> Sim {
    let mut sim = sim(TWO_TIERS, policy);
    sim.parent.swap_active = true;
    sim
}

#[test]
fn with_swap_nobody_is_parked_and_the_lows_share_the_budget() {
    // The same reservation as above on a host with swap: a capped low pushes its own pages
    // out and goes on, so all three run at equal shares of the 183 MiB budget.
    let (mut sim, d) = behind_a(with_swap(""), &[("batch/b", 50 * MB), ("batch/c", 40 * MB)]);
    assert!(sim.engine.status().parked.is_empty());
    assert!(!d.iter().any(|d| matches!(d.reason, Reason::Parked { .. })), "{d:?}");
    // 33 MiB free, 11 MiB each on top of what it holds.
    sim.run(200, |_| {});
    assert_eq!(sim.high("batch/a"), Limit::Bytes(71 * MB));
    assert_eq!(sim.high("batch/b"), Limit::Bytes(61 * MB));
    assert_eq!(sim.high("batch/c"), Limit::Bytes(51 * MB));
    // Once the host loses its swap (or it cannot be read), parking applies again: only the
    // oldest runs.
    sim.parent.swap_active = false;
    sim.run(300, |_| {});
    assert_eq!(sim.engine.status().parked, vec!["batch/b".to_string(), "batch/c".to_string()]);
}

#[test]
fn park_with_swap_parks_where_the_host_has_swap_too() {
    let (sim, _) = behind_a(with_swap("park_with_swap = true"), &[("batch/b", 50 * MB), ("batch/c", 40 * MB)]);
    assert_eq!(sim.engine.status().parked, vec!["batch/b".to_string(), "batch/c".to_string()]);
    assert_eq!(sim.high("batch/b"), Limit::Bytes(50 * MB));
}

#[test]
fn with_room_for_all_of_them_they_are_admitted_one_per_tick() {
    let mut sim = sim(TWO_TIERS, "park_room = \"16M\"");
    sim.add("critical/agent", 12 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(200 * MB);
    for id in ["batch/a", "batch/b", "batch/c", "batch/d"] {
        sim.add(id, 10 * MB);
    }
    let mut parked = Vec::new();
    for _ in 0..5 {
        sim.tick();
        parked.push(sim.engine.status().parked.len());
    }
    assert_eq!(parked, vec![3, 2, 1, 0, 0]);
}

#[test]
fn the_stall_bound_relieves_a_parked_cgroup() {
    let tiers = edit_tier(TWO_TIERS, "batch", |t| {
        let mut stall = toml::Table::new();
        stall.insert("after_ms".into(), 1000.into());
        t.insert("stall".into(), stall.into());
    });
    let (mut sim, _) = parked_behind_a(&tiers, &[("batch/b", 50 * MB)]);
    assert_eq!(sim.high("batch/b"), Limit::Bytes(50 * MB), "parked");
    sim.run(2_000, |s| {
        let c = s.cg("batch/b");
        c.usage_bytes = c.current.high.bytes().unwrap_or(50 * MB);
        c.events_delta.high = 5;
        set_full(c, 90.0);
    });
    assert!(
        sim.log.iter().any(|(_, d)| d.cgroup == "batch/b" && matches!(d.reason, Reason::StallBound { .. })),
        "a parked cgroup that makes no progress is relieved like any throttled one"
    );
    assert!(sim.high("batch/b") > Limit::Bytes(50 * MB));
}

#[test]
fn a_freeze_tier_has_its_parked_frozen_thawed_at_the_stall_bound_and_when_admitted() {
    let tiers = edit_tier(TWO_TIERS, "batch", |t| {
        t.insert("freeze".into(), true.into());
        let mut stall = toml::Table::new();
        stall.insert("after_ms".into(), 1000.into());
        t.insert("stall".into(), stall.into());
    });
    let (mut sim, _) = parked_behind_a(&tiers, &[("batch/b", 50 * MB)]);
    let freezes = |sim: &Sim| sim.writes("batch/b", Knob::Freeze);
    assert!(sim.cgs["batch/b"].current.frozen, "parked and frozen: {:?}", freezes(&sim));
    assert!(!sim.cgs["batch/a"].current.frozen, "the oldest runs");
    assert!(sim.log.iter().any(|(_, d)| d.cgroup == "batch/b"
        && d.action == memqos_policy::Action::Freeze(true)
        && matches!(d.reason, Reason::Parked { .. })));
    // Frozen for the tier's stall bound: thawed, and not frozen again for another bound.
    sim.run(1_200, |_| {});
    assert!(!sim.cgs["batch/b"].current.frozen, "thawed at the bound: {:?}", freezes(&sim));
    assert!(sim.log.iter().any(|(_, d)| d.cgroup == "batch/b"
        && d.action == memqos_policy::Action::Freeze(false)
        && matches!(d.reason, Reason::StallBound { .. })));
    sim.run(500, |_| {});
    assert!(
        !sim.cgs["batch/b"].current.frozen,
        "no refreeze within the grace: {:?}",
        sim.log.iter().filter(|(_, d)| d.cgroup == "batch/b").collect::<Vec<_>>()
    );
    sim.run(1_000, |_| {});
    assert!(sim.cgs["batch/b"].current.frozen, "parked again after the grace: {:?}", freezes(&sim));
    // a ends: b is admitted and thawed.
    sim.cg("batch/a").usage_bytes = 0;
    sim.cg("batch/a").populated = Some(false);
    sim.run(300, |_| {});
    assert!(!sim.cgs["batch/b"].current.frozen, "admitted: thawed");
    assert!(sim.engine.status().parked.is_empty());
    // Parked again behind a newcomer? No: the newcomer is younger and waits.
    sim.add("batch/c", 40 * MB);
    sim.run(300, |_| {});
    assert!(sim.cgs["batch/c"].current.frozen && !sim.cgs["batch/b"].current.frozen);
    // The reservation ends: everything parking froze is thawed.
    sim.cg("critical/agent").populated = Some(false);
    sim.run(500, |_| {});
    assert!(!sim.cgs["batch/c"].current.frozen, "thawed when nothing is reserved any more");
}

#[test]
fn expectation_sources_go_declaration_learned_tier_default() {
    let with_default = edit_tier(TWO_TIERS, "critical", |t| {
        t.insert("default_peak".into(), "300M".into());
    });
    let source = |d: Vec<memqos_policy::Decision>| {
        d.iter()
            .find_map(|d| match &d.reason {
                Reason::Reservation { source, declared_bytes, .. }
                | Reason::Parked { source, expected_bytes: declared_bytes, .. } => Some((*source, *declared_bytes)),
                _ => None,
            })
            .map(|(s, b)| (s, b / MB))
    };
    let first = |tiers: &str, set: &dyn Fn(&mut memqos_policy::CgroupObs)| {
        let mut s = sim(tiers, "");
        s.add("critical/agent", 12 * MB);
        s.add("batch/a", 10 * MB);
        set(s.cg("critical/agent"));
        let d = s.tick();
        let text = d.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        (source(d), text)
    };
    // Nothing at all: no reservation, nothing capped.
    assert_eq!(first(TWO_TIERS, &|_| {}).0, None);
    // The tier's default.
    let (got, text) = first(&with_default, &|_| {});
    assert_eq!(got, Some((PeakSource::TierDefault, 300)));
    assert!(text.contains("the tier's default_peak"), "{text}");
    // Learned (the daemon fills it in where nothing is declared): the tier's recent peaks ...
    let learned = |tier: bool, mb: u64| {
        move |c: &mut memqos_policy::CgroupObs| {
            c.expected_peak_bytes = Some(mb * MB);
            c.learned_peak = Some(LearnedPeak { workload: "w".into(), lifetimes: 3, peak_bytes: 200 * MB, tier });
        }
    };
    let (got, text) = first(&with_default, &learned(true, 220));
    assert_eq!(got, Some((PeakSource::TierRecent, 220)));
    assert!(text.contains("recent lifetime(s) of tier"), "{text}");
    // ... or its workload key's history.
    assert_eq!(first(&with_default, &learned(false, 230)).0, Some((PeakSource::Workload, 230)));
    // A declaration (the xattr) beats them all.
    assert_eq!(first(&with_default, &|c| c.expected_peak_bytes = Some(250 * MB)).0, Some((PeakSource::Declared, 250)));
    // The tier's expected_peak is a declaration too, and beats its default.
    let both = edit_tier(&with_default, "critical", |t| {
        t.insert("expected_peak".into(), "400M".into());
    });
    assert_eq!(first(&both, &|_| {}).0, Some((PeakSource::Declared, 400)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Whatever the members hold and however they come and go: parked caps are what the
    /// cgroup holds (page-aligned, at least min_high); the parked are the youngest; at most
    /// one more member runs than the tick before.
    #[test]
    fn parking_invariants(steps in prop::collection::vec((0u64..400, 0usize..6, any::<bool>()), 1..40)) {
        let mut sim = sim(TWO_TIERS, "");
        sim.add("critical/agent", 12 * MB);
        sim.cg("critical/agent").expected_peak_bytes = Some(300 * MB);
        let mut born = Vec::<String>::new();
        let mut running_before: Option<usize> = None;
        for (i, (mb, which, add)) in steps.into_iter().enumerate() {
            if add || born.is_empty() {
                let id = format!("batch/{i:03}");
                sim.add(&id, mb * MB);
                born.push(id);
            } else {
                let id = born[which % born.len()].clone();
                sim.cg(&id).usage_bytes = mb * MB;
            }
            let decisions = sim.tick();
            let parked = sim.engine.status().parked;
            for d in decisions.iter().filter(|d| matches!(d.reason, Reason::Parked { .. })) {
                let usage = sim.cgs[&d.cgroup].usage_bytes;
                prop_assert_eq!(d.knob(), Knob::High);
                let want = usage.div_ceil(4096) * 4096;
                prop_assert_eq!(sim.high(&d.cgroup), Limit::Bytes(want.max(32 * MB)));
            }
            // Members made earlier run before younger ones (ids are made in age order).
            let first_parked = parked.first().map(|id| born.iter().position(|b| b == id).unwrap());
            if let Some(p) = first_parked {
                prop_assert!(parked.iter().all(|id| born.iter().position(|b| b == id).unwrap() >= p));
                prop_assert_eq!(parked.len(), born.len() - p, "everyone younger than the first parked is parked");
            }
            let running = born.len() - parked.len();
            // A member just made counts as newly runnable too: at most one admission per tick.
            if let Some(before) = running_before {
                prop_assert!(running <= before + 1, "{} running after {}", running, before);
            }
            running_before = Some(running);
        }
    }
}

/// The tight sweep's first sight in miniature: nothing known about the protected task, and
/// all three start at once, growing together (the protected one to 360 MiB, each low to
/// 240 MiB: 840 MiB of peaks under a 711 MiB limit, swapless). Returns (the first time they
/// held more than the limit, finish times, the decisions' expectation sources).
fn first_sight_race(tiers: &str) -> (Option<u64>, Vec<Option<u64>>, Vec<PeakSource>) {
    let mut sim = sim(tiers, "");
    let high = Workload::new("critical/agent", [ramp(0, 360, 30), hold(360, 30)].concat());
    let low = || [ramp(0, 240, 20), hold(240, 20)].concat();
    let mut tasks = [high, Workload::new("batch/a", low()), Workload::new("batch/b", low())];
    for id in ["critical/agent", "batch/a", "batch/b"] {
        sim.add(id, 0);
    }
    let over = run_swapless(&mut sim, &mut tasks, 600, 711 * MB, |_, _| {});
    let sources = sim
        .log
        .iter()
        .filter_map(|(_, d)| match &d.reason {
            Reason::Reservation { source, .. } | Reason::Parked { source, .. } => Some(*source),
            _ => None,
        })
        .collect();
    (over, tasks.iter().map(|w| w.finished_at).collect(), sources)
}

#[test]
fn at_first_sight_a_growing_protected_cgroup_reserves_its_growth_factor_and_no_more_once_level() {
    // Without foresight the guard caps the lows only when the three already fill the
    // limit; the protected task's growth past that point is the OOM kill.
    let (over, _, sources) = first_sight_race(TWO_TIERS);
    assert!(over.is_some(), "nothing reserved, the limit is overrun");
    assert!(sources.is_empty());
    let doubling = edit_tier(TWO_TIERS, "critical", |t| {
        t.insert("first_sight_growth".into(), 2.0.into());
    });
    let (over, finished, sources) = first_sight_race(&doubling);
    assert_eq!(over, None, "twice its peak so far, reserved while it grows, holds the lows back in time");
    assert!(finished.iter().all(Option::is_some), "every task finishes: {finished:?}");
    assert!(!sources.is_empty() && sources.iter().all(|s| *s == PeakSource::FirstSight), "{sources:?}");
}

#[test]
fn a_first_sight_expectation_ends_when_growth_levels_off_and_never_beats_another_source() {
    let doubling = edit_tier(TWO_TIERS, "critical", |t| {
        t.insert("first_sight_growth".into(), 2.0.into());
    });
    let reserved_for = |d: &[Decision]| {
        d.iter().find_map(|d| match &d.reason {
            Reason::Reservation { source, declared_bytes, .. } => Some((*source, declared_bytes / MB)),
            _ => None,
        })
    };
    let last_reserved = |s: &Sim| {
        s.log.iter().rev().find_map(|(_, d)| match &d.reason {
            Reason::Reservation { source, declared_bytes, .. } => Some((*source, declared_bytes / MB)),
            _ => None,
        })
    };
    let mut s = sim(&doubling, "");
    s.add("critical/agent", 100 * MB);
    s.add("batch/a", 300 * MB);
    // Running before the engine's first tick (a daemon start or restart): its 100 MiB then
    // are where it stands, not growth the engine saw, and nothing is reserved for them.
    assert_eq!(reserved_for(&s.tick()), None);
    s.run(300, |_| {});
    assert_eq!(last_reserved(&s), None, "level since the start: no expectation");
    // A step of growth (ws_granularity, 16 MiB) after the start: twice its peak so far.
    s.cg("critical/agent").usage_bytes = 120 * MB;
    assert_eq!(reserved_for(&s.tick()), Some((PeakSource::FirstSight, 240)));
    s.cg("critical/agent").usage_bytes = 150 * MB;
    s.run(300, |_| {});
    assert_eq!(last_reserved(&s), Some((PeakSource::FirstSight, 300)), "it follows the peak");
    // (711 - 64 guard) - 150 held - (304 reserved, in 16 MiB steps, - 150): 343 MiB.
    assert_eq!(s.high("batch/a"), Limit::Bytes(343 * MB), "the low is capped within what the reservation leaves");
    // Level for hold_ms (2 s): nothing is expected beyond its protection any more, and the
    // cap is released as after any pressure.
    s.run(2500, |_| {});
    s.run(3000, |_| {});
    assert_eq!(s.high("batch/a"), Limit::Max, "released once the growth stopped");
    // One that appears after the engine's first tick is new: its first sample is growth.
    let mut s = sim(&doubling, "");
    s.add("batch/a", 300 * MB);
    s.tick();
    s.add("critical/agent", 100 * MB);
    assert_eq!(reserved_for(&s.tick()), Some((PeakSource::FirstSight, 200)));
    // A stronger source wins while it grows: the tier's default_peak.
    let with_default = edit_tier(&doubling, "critical", |t| {
        t.insert("default_peak".into(), "200M".into());
    });
    let mut s = sim(&with_default, "");
    s.add("critical/agent", 100 * MB);
    s.add("batch/a", 300 * MB);
    assert_eq!(reserved_for(&s.tick()), Some((PeakSource::TierDefault, 200)));
}
