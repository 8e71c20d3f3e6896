//! Leftovers of `memqos run` removed by the daemon (`policy.remove_leftovers_after_ms`), on
//! fake trees: what is removed (marked, empty, childless, unlocked, idle past the grace), what
//! never is, in which order, and how it is counted. Fake trees prove the mechanism; a guest
//! test would prove the kernel's rmdir of a real cgroup.

mod common;

use common::{poll, poll_for, set_xattr, write_cgroup, Daemon, FakeTree, MIB};
use memqos_daemon::events::Event;
use memqos_daemon::Options;
use memqos_schema::call::{MADE_BY_RUN_XATTR, MADE_CALL, MADE_SESSION};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// A tree whose every periodic tick is a full one (no calm path), with the grace given.
fn tree(name: &str, grace_ms: u64) -> FakeTree {
    let f = FakeTree::new(&format!("leftovers-{name}"), &format!("remove_leftovers_after_ms = {grace_ms}\n"));
    f.set("signals.calm_interval_ms", 0);
    write_cgroup(&f.root, 100 * MIB, &(512 * MIB).to_string());
    f
}

/// A cgroup as `memqos run` leaves it (`kind`: its mark, or none), populated or not.
fn made(f: &FakeTree, rel: &str, kind: Option<&str>, populated: bool) {
    let dir = f.root.join(rel);
    write_cgroup(&dir, 0, "max");
    std::fs::write(dir.join("cgroup.events"), format!("populated {}\nfrozen 0\n", u8::from(populated))).unwrap();
    if let Some(k) = kind {
        set_xattr(&dir, MADE_BY_RUN_XATTR, k);
    }
}

/// An exclusive flock on `dir`, as a live call's `memqos run` holds on its cgroup.
fn lock(dir: &Path) -> std::fs::File {
    let f = std::fs::File::open(dir).unwrap();
    // SAFETY: a valid fd.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    f
}

/// The leftover removals logged so far: (cgroup, kind, dry run), oldest first.
fn removals(f: &FakeTree) -> Vec<(String, String, bool)> {
    f.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::LeftoverRemoved { cgroup, kind, dry_run, .. } => Some((cgroup, kind, dry_run)),
            _ => None,
        })
        .collect()
}

#[test]
fn idle_unlocked_marked_cgroups_are_removed_and_counted_calls_before_their_session() {
    let f = tree("removed", 1);
    let textfile = f.base.join("metrics.prom");
    f.set("metrics.textfile", textfile.display().to_string());
    made(&f, "s1", Some(MADE_SESSION), false);
    made(&f, "s1/tool.1", Some(MADE_CALL), false); // SIGKILLed creator: removed
    made(&f, "s1/tool.2", Some(MADE_CALL), true); // background processes left: stays
    made(&f, "s1/tool.3", Some(MADE_CALL), false); // its creator lives (locked): stays
    let live = lock(&f.root.join("s1/tool.3"));
    made(&f, "s2", Some(MADE_SESSION), false);
    made(&f, "s2/tool.4", Some(MADE_CALL), false); // then its session, which is empty then
    made(&f, "theirs", None, false);
    made(&f, "theirs/tool.5", None, false); // not made by memqos run: never
    made(&f, "odd", Some("something-else"), false); // a mark memqos does not write: never
    let daemon = f.start();
    poll("the session s2 removed", LIMIT, || removals(&f).iter().any(|r| r.0 == "s2"));
    let gone = |rel: &str| !f.root.join(rel).exists();
    assert!(gone("s1/tool.1") && gone("s2/tool.4") && gone("s2"));
    for rel in ["s1", "s1/tool.2", "s1/tool.3", "theirs", "theirs/tool.5", "odd"] {
        assert!(!gone(rel), "{rel} was removed");
    }
    let order: Vec<String> = removals(&f).into_iter().map(|r| r.0).collect();
    let at = |rel: &str| order.iter().position(|r| r == rel).unwrap();
    assert!(at("s2/tool.4") < at("s2"), "a session after its calls: {order:?}");
    assert!(removals(&f).iter().all(|(_, kind, dry)| !dry && (kind == "call" || kind == "session")));

    // The live call ends (its lock goes with its process): its cgroup is a leftover now.
    drop(live);
    poll("s1/tool.3 removed once unlocked", LIMIT, || gone("s1/tool.3"));
    let counted = |kind: &str, n: u64| {
        f.status().is_some_and(|s| s.leftovers_removed.get(kind) == Some(&n))
            && std::fs::read_to_string(&textfile)
                .is_ok_and(|t| t.contains(&format!("memqos_leftovers_removed_total{{kind=\"{kind}\"}} {n}\n")))
    };
    poll("status and metrics count 3 calls and 1 session", LIMIT, || counted("call", 3) && counted("session", 1));
    daemon.stop().unwrap();
    assert!(!gone("s1/tool.2") && !gone("s1") && !gone("theirs/tool.5"), "still there after the stop");
}

#[test]
fn a_young_leftover_waits_out_the_grace_period() {
    let f = tree("young", 3_600_000);
    made(&f, "s", Some(MADE_SESSION), false);
    made(&f, "s/tool.1", Some(MADE_CALL), false);
    let daemon = f.start();
    // Seen idle (the daemon looked at it and started its clock), not removed.
    let snap = poll_for("the leftover seen waiting", LIMIT, || f.status().filter(|s| s.leftovers_waiting == 1));
    assert!(snap.leftovers_removed.is_empty());
    daemon.stop().unwrap();
    assert!(f.root.join("s/tool.1").exists() && removals(&f).is_empty());
}

#[test]
fn a_dry_run_removes_nothing_and_says_once_what_it_would_remove() {
    let f = tree("dry", 1);
    made(&f, "s", Some(MADE_SESSION), false);
    made(&f, "s/tool.1", Some(MADE_CALL), false);
    let daemon = Daemon::start(Options { dry_run: true, ..f.options() });
    poll("the dry removal logged", LIMIT, || !removals(&f).is_empty());
    // More ticks: status.json is written again with the count still zero.
    poll("a later status", LIMIT, || f.status().is_some_and(|s| s.now_ms > 500));
    daemon.stop().unwrap();
    assert_eq!(removals(&f), vec![("s/tool.1".to_owned(), "call".to_owned(), true)], "once, and only the call");
    assert!(f.root.join("s/tool.1").exists() && f.root.join("s").exists());
}

#[test]
fn zero_turns_removal_off() {
    let f = tree("off", 0);
    made(&f, "s", Some(MADE_SESSION), false);
    made(&f, "s/tool.1", Some(MADE_CALL), false);
    let daemon = f.start();
    poll("a few ticks", LIMIT, || f.status().is_some_and(|s| s.now_ms > 500));
    let snap = f.status().unwrap();
    assert_eq!((snap.leftovers_waiting, snap.leftovers_removed.len()), (0, 0));
    daemon.stop().unwrap();
    assert!(f.root.join("s/tool.1").exists() && removals(&f).is_empty());
}
