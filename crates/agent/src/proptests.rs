//! Property tests of the agent side's parsers of outside input (issue 53, deliverable 7):
//! where /proc/self/cgroup places this process, the admission claim ledger (a file anyone who
//! runs calls may write), the daemon's admission file and `--hint`. In the crate because the
//! ledger is crate-private.
//!
//! The long run: `scripts/fuzz-long.sh` (PROPTEST_CASES, PROPTEST_RNG_SEED).

use crate::armed::{allowance, MIN_CEILING};
use crate::hint::{resolve_tier, Hint};
use crate::layout::{position, Position};
use crate::wait::{parse_claim, Ledger};
use memqos_policy::size::parse_size;
use memqos_schema::admission::{Admission, TierAllowance, ADMISSION_VERSION};
use memqos_schema::state::ADMISSION_FILE;
use proptest::prelude::*;
use std::path::Path;

const MOUNTINFO: &str = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

/// Where a path of /proc/self/cgroup is, by its definition: below the root when, after the
/// mount point and without empty or `.` parts, its names start with the root's; `..` (a
/// process outside its cgroup namespace) is never below it.
fn expected_position(root: &Path, rel: &str) -> Position {
    let segs: Vec<&str> = rel.trim().split('/').filter(|s| !s.is_empty() && *s != ".").collect();
    if segs.contains(&"..") {
        return Position::Outside;
    }
    let full: Vec<&str> = ["sys", "fs", "cgroup"].into_iter().chain(segs).collect();
    let root: Vec<&str> = root.iter().skip(1).map(|c| c.to_str().unwrap()).collect();
    let Some(below) = full.strip_prefix(&root[..]) else {
        return Position::Outside;
    };
    match below {
        [session, "runtime", ..] => Position::Runtime { session: session.to_string() },
        [session, call, ..] => Position::Call { session: session.to_string(), call: call.to_string() },
        _ => Position::Outside,
    }
}

fn ledger() -> impl Strategy<Value = Ledger> {
    // Ticks at the ends of u64 too: a ledger of tick 0 read at the last tick.
    let seq = prop_oneof![any::<u64>(), 0u64..3, u64::MAX - 2..];
    (seq, any::<u32>(), any::<[u64; 3]>()).prop_map(|(seq, pid, taken)| Ledger { seq, pid, taken })
}

/// An admission file's text: one the daemon could have written, with hostile values (pids
/// that are not a daemon, times and intervals at the ends of u64, another version or root),
/// often cut short; or any text.
fn admission_text(me: u32) -> impl Strategy<Value = String> {
    let tier = ("tool|tool-low|x", any::<u64>(), any::<bool>(), prop::option::of(any::<u64>())).prop_map(
        |(tier, allowance_bytes, wait, room_bytes)| TierAllowance { tier, allowance_bytes, wait, room_bytes },
    );
    let pid = prop::sample::select(vec![me, 0, u32::MAX, i32::MAX as u32 + 1, 1 << 22]);
    let time = prop_oneof![Just(1_000_000u64), any::<u64>()];
    let file = (
        prop_oneof![4 => Just(ADMISSION_VERSION), 1 => any::<u32>()],
        pid,
        prop::sample::select(vec!["/sys/fs/cgroup/agents", "/sys/fs/cgroup", "/sys/fs/cgroup/agents/"]),
        time,
        prop_oneof![Just(100u64), any::<u64>()],
        prop::collection::vec(tier, 0..4),
        any::<u64>(),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(version, pid, root, computed_unix_ms, interval_ms, tiers, seq, cut)| {
            let a = Admission {
                version,
                pid,
                cgroup_root: root.into(),
                computed_unix_ms,
                interval_ms,
                tiers,
                seq,
                wait_limit_ms: 0,
            };
            let mut text = serde_json::to_string(&a).unwrap();
            if let Some(cut) = cut {
                text.truncate(cut.index(text.len() + 1));
            }
            text
        });
    prop_oneof![4 => file, 1 => any::<String>()]
}

proptest! {
    /// Whatever /proc/self/cgroup says, this process is placed in a session (and a call) only
    /// when its path really lies below the root, by names that are real path components.
    #[test]
    fn proptest_position_names_a_place_below_the_root(
        root in prop::sample::select(vec!["/sys/fs/cgroup", "/sys/fs/cgroup/agents", "/sys/fs/cgroup/agents/"]),
        segs in prop::collection::vec(prop::sample::select(vec!["agents", "s1", "runtime", "tool.5", "..", ".", "", "a b", "é"]), 0..6),
        before in prop::sample::select(vec!["", "12:memory:/x\n", "1:name=systemd:/agents/s9/runtime\n"]),
        junk in any::<String>(),
    ) {
        let root = Path::new(root);
        let rel = format!("/{}", segs.join("/"));
        let got = position(root, &format!("{before}0::{rel}\n"), MOUNTINFO);
        prop_assert_eq!(&got, &expected_position(root, &rel), "0::{}", rel);
        for text in [junk.clone(), format!("0::{junk}\n")] {
            match position(root, &text, MOUNTINFO) {
                Position::Outside => {}
                Position::Runtime { session } => prop_assert!(plain(&session), "{:?}", session),
                Position::Call { session, call } => prop_assert!(plain(&session) && plain(&call), "{:?} {:?}", session, call),
            }
        }
    }

    /// The claim ledger reads back what it wrote; any text reads as a ledger that writes back
    /// to itself, or as none.
    #[test]
    fn proptest_claim_ledger_round_trips(l in ledger(), text in prop_oneof![
        any::<String>(),
        "[0-9]{1,21}( [0-9 -]{1,21}){0,5}\n?",
    ]) {
        prop_assert_eq!(parse_claim(&l.text()), Some(l));
        if let Some(read) = parse_claim(&text) {
            prop_assert_eq!(parse_claim(&read.text()), Some(read));
        }
    }

    /// A ledger of tick `l.seq` read at tick `seq` moves each tick's take back by the ticks
    /// between them (what falls off the end is forgotten); a ledger of a later tick is none.
    #[test]
    fn proptest_claim_ledger_shifts_without_wrapping(
        l in ledger(),
        seq in prop_oneof![any::<u64>(), Just(u64::MAX)],
        near in 0u64..5,
    ) {
        for seq in [seq, l.seq.saturating_add(near)] {
            let got = l.taken_as_of(seq);
            match seq.checked_sub(l.seq) {
                None => prop_assert_eq!(got, None),
                Some(behind) => {
                    let want: Vec<u64> = (0..3u64).map(|j| j.checked_sub(behind).map_or(0, |k| l.taken[k as usize])).collect();
                    prop_assert_eq!(got.map(|t| t.to_vec()), Some(want));
                }
            }
        }
    }

    /// `--hint` is a level (any case) or a size exactly as the config's sizes read; anything
    /// else is a usage error that names the flag. `--tier` and a level hint must agree.
    #[test]
    fn proptest_hint_parse_agrees_with_its_definition(
        s in prop_oneof![any::<String>(), "(?i)(low|medium|high)", "[0-9]{1,21} ?[kKmMgGtTbB]?[iI]?[bB]?"],
        tier in prop::option::of("tool|tool-low|tool-high|x"),
    ) {
        let got = Hint::parse(&s);
        match s.to_ascii_lowercase().as_str() {
            "low" => prop_assert_eq!(got.as_ref().ok(), Some(&Hint::Low)),
            "medium" => prop_assert_eq!(got.as_ref().ok(), Some(&Hint::Medium)),
            "high" => prop_assert_eq!(got.as_ref().ok(), Some(&Hint::High)),
            _ => match parse_size(&s) {
                Ok(b) => prop_assert_eq!(got.as_ref().ok(), Some(&Hint::Size(b))),
                Err(_) => prop_assert!(got.as_ref().is_err_and(|e| e.to_string().contains("--hint")), "{:?}", got),
            },
        }
        if let Ok(h) = got {
            let r = resolve_tier(tier.as_deref(), Some(h));
            match (&tier, h) {
                (Some(t), Hint::Low | Hint::Medium | Hint::High) if t != h.tier() => prop_assert!(r.is_err()),
                (Some(t), _) => prop_assert_eq!(r.ok(), Some(t.clone())),
                (None, _) => prop_assert_eq!(r.ok(), Some(h.tier().to_owned())),
            }
        }
    }

    /// The daemon's admission file, whatever it holds, gives an allowance only from a file of
    /// this version, for this root, fresh, of a live daemon, listing the tier; never below the
    /// minimum ceiling. Anything else is a reason, never a panic.
    #[test]
    fn proptest_admission_file_any_text_is_an_allowance_or_a_reason(
        text in admission_text(std::process::id()),
        tier in "tool|tool-low|x",
        now in prop_oneof![Just(1_000_050u64), any::<u64>()],
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ADMISSION_FILE), &text).unwrap();
        let root = Path::new("/sys/fs/cgroup/agents");
        match allowance(dir.path(), root, &tier, now) {
            Ok((bytes, pid)) => {
                let a: Admission = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(a.version, ADMISSION_VERSION);
                prop_assert_eq!(Path::new(&a.cgroup_root), root);
                prop_assert!(a.age_ms(now) <= a.max_age_ms());
                prop_assert!(pid == a.pid && pid != 0 && pid <= i32::MAX as u32);
                prop_assert_eq!(Some(bytes), a.allowance(&tier).map(|b| b.max(MIN_CEILING)));
            }
            Err(why) => prop_assert!(!why.is_empty()),
        }
    }
}

/// A name that is one real path component.
fn plain(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/')
}
