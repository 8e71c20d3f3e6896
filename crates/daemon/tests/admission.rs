//! `policy.admission` in-process on a fake tree: the daemon publishes allowances for new
//! cgroups, takes a ceiling `memqos run` armed (marked with `user.memqos.armed_high`) as its
//! own cut (original `max` journaled), raises it as room frees, restores it at stop and
//! withdraws the allowances; an unmarked memory.high stays an operator's. A full parent makes
//! the allowances say `wait`, and the claim waiting calls take goes with the allowances.

mod common;

use common::{poll, poll_for, set_xattr, write_cgroup, FakeTree, MIB};
use memqos_daemon::events::{self, Event};
use memqos_daemon::journal::Journal;
use memqos_policy::Reason;
use memqos_schema::admission::{Admission, ARMED_HIGH_XATTR};
use memqos_schema::state::{ADMISSION_CLAIM_FILE, ADMISSION_FILE};
use std::time::Duration;

/// 100M used of 512M: a protected `high` (50M) and a throttle tier `low*`; `hold_ms` as given.
fn fake(name: &str, hold_ms: u64) -> FakeTree {
    let policy = format!("min_write_interval_ms = 100\nhold_ms = {hold_ms}\nadmission = true\n");
    let f = FakeTree::new(&format!("admission-{name}"), &policy);
    write_cgroup(&f.root, 100 * MIB, &(512 * MIB).to_string());
    write_cgroup(&f.root.join("high"), 50 * MIB, "max");
    f
}

impl FakeTree {
    fn admission(&self) -> Option<Admission> {
        serde_json::from_slice(&std::fs::read(self.state.join(ADMISSION_FILE)).ok()?).ok()
    }

    /// What `memqos run` does before the call starts: mark, then arm.
    fn arm(&self, cg: &str, bytes: u64) {
        write_cgroup(&self.root.join(cg), 20 * MIB, "max");
        set_xattr(&self.root.join(cg), ARMED_HIGH_XATTR, &bytes.to_string());
        std::fs::write(self.root.join(cg).join("memory.high"), format!("{bytes}\n")).unwrap();
    }

    fn journaled_high(&self, cg: &str) -> Option<String> {
        let j = Journal::open(&self.state, &self.root).ok()?;
        j.original(self.id(cg), "memory.high").map(str::to_owned)
    }
}

#[test]
fn an_armed_ceiling_is_published_adopted_and_restored_at_stop_and_an_unmarked_one_is_left_alone() {
    let f = fake("armed", 60_000);
    let daemon = f.start();
    let a = poll_for("the allowances", Duration::from_secs(20), || f.admission());
    assert_eq!((a.cgroup_root.as_str(), a.interval_ms, a.pid), (f.root.to_str().unwrap(), 50, std::process::id()));
    let allowance = a.allowance("batch").expect("the throttle tier has one");
    assert!(a.allowance("critical").is_none(), "a protected tier is never armed");
    // (512M - 64M guard) - 100M used - the protected cgroup's room to grow back: at most half.
    assert!((64 * MIB..=174 * MIB).contains(&allowance), "{allowance}");
    // The whole room beside it (a declared call waits for that): twice the share, give or
    // take a page.
    let room = a.room("batch").expect("published");
    assert!(room >= allowance && room <= 2 * allowance + 4096, "{room} vs {allowance}");

    f.arm("low-call", allowance);
    // An operator's memory.high on another new cgroup: same tier, no mark.
    write_cgroup(&f.root.join("low-unit"), 20 * MIB, "max");
    std::fs::write(f.root.join("low-unit/memory.high"), format!("{}\n", 96 * MIB)).unwrap();
    poll("the armed ceiling journaled as the daemon's own", Duration::from_secs(20), || {
        f.journaled_high("low-call").as_deref() == Some("max")
    });
    // Calm for less than hold_ms: held at its ceiling meanwhile.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(f.knob("low-call", "memory.high"), allowance.to_string());
    assert_eq!(f.journaled_high("low-unit"), None, "an unmarked value is not the daemon's");
    daemon.stop().expect("daemon run");

    assert_eq!(f.knob("low-call", "memory.high"), "max", "restored at stop: never left armed");
    assert_eq!(f.knob("low-unit", "memory.high"), (96 * MIB).to_string(), "the operator's value stays");
    assert!(!f.state.join(ADMISSION_FILE).exists(), "allowances withdrawn at stop");
}

#[test]
fn an_armed_ceiling_is_raised_as_room_frees() {
    let f = fake("raised", 0);
    let daemon = f.start();
    let a = poll_for("the allowances", Duration::from_secs(20), || f.admission());
    let allowance = a.allowance("batch").unwrap();
    f.arm("low-call", allowance);
    // Nothing presses: released (a call far below its ceiling goes straight back to max).
    poll("the armed ceiling raised", Duration::from_secs(20), || f.knob("low-call", "memory.high") == "max");
    daemon.stop().expect("daemon run");
    let raised = events::read(&f.state).into_iter().find_map(|l| match l.event {
        Event::Write(w) if w.cgroup == "low-call" && w.file == "memory.high" => Some(w),
        _ => None,
    });
    let w = raised.expect("the raise was logged");
    assert_eq!((w.value.as_str(), w.previous.as_deref()), ("max", Some(allowance.to_string().as_str())));
    assert!(matches!(w.reason, Some(Reason::Release { .. } | Reason::NothingToProtect { .. })), "{w:?}");
}

#[test]
fn a_mark_that_does_not_match_the_value_is_not_taken_over() {
    let f = fake("mismatch", 0);
    let daemon = f.start();
    poll("the allowances", Duration::from_secs(20), || f.admission().is_some());
    // Marked at one value, holding another (someone changed it since): not the daemon's.
    write_cgroup(&f.root.join("low-x"), 20 * MIB, "max");
    set_xattr(&f.root.join("low-x"), ARMED_HIGH_XATTR, &(64 * MIB).to_string());
    std::fs::write(f.root.join("low-x/memory.high"), format!("{}\n", 80 * MIB)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(f.journaled_high("low-x"), None);
    assert_eq!(f.knob("low-x", "memory.high"), (80 * MIB).to_string());
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low-x", "memory.high"), (80 * MIB).to_string());
}

#[test]
fn a_full_parent_asks_new_calls_to_wait_each_tick_is_counted_and_the_claim_goes_at_stop() {
    let f = fake("wait", 60_000);
    f.set("policy.admission_wait_ms", 1234);
    let daemon = f.start();
    let a = poll_for("the allowances", Duration::from_secs(20), || f.admission());
    assert!(!a.wait("batch"), "100M of 512M used: room");
    assert_eq!(a.wait_limit_ms, 1234, "the config's");
    let later = poll_for("a later tick", Duration::from_secs(20), || f.admission().filter(|b| b.seq > a.seq));
    assert!(later.seq > a.seq && a.seq >= 1);
    // The parent at its limit: no room for a new call, only the floor.
    std::fs::write(f.root.join("memory.current"), format!("{}\n", 512 * MIB)).unwrap();
    let full = poll_for("wait published", Duration::from_secs(20), || f.admission().filter(|b| b.wait("batch")));
    assert_eq!(full.allowance("batch"), Some(64 * MIB));
    assert_eq!(full.room("batch"), Some(0), "no room for a declared call either");
    // A waiter took a tick.
    std::fs::write(f.state.join(ADMISSION_CLAIM_FILE), format!("{} {}\n", full.seq, full.pid)).unwrap();
    daemon.stop().expect("daemon run");
    assert!(!f.state.join(ADMISSION_FILE).exists(), "allowances withdrawn at stop");
    assert!(!f.state.join(ADMISSION_CLAIM_FILE).exists(), "the claim with them");
}
