//! The daemon loop in-process on fake cgroup trees: sample, decide, journal, write, restore;
//! a left journal restored at start (`recovered`); a re-created name; a tampered journal; a
//! dry run; the state-directory lock. Fake trees prove the mechanisms, not isolation (that
//! is the guest tests' job).

mod common;

use common::{poll, poll_for, set_xattr, write_cgroup, Daemon, FakeTree, GUARD_POLICY, MIB};
use memqos_daemon::actuator::{Actuator, Request, Target};
use memqos_daemon::events::{self, Event, Outcome};
use memqos_daemon::journal::{Journal, JOURNAL_FILE};
use memqos_daemon::lock::StateLock;
use memqos_daemon::{beneath, status, Handle, Options};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A root with `parent_current` bytes used of 512M, a protected `high` and a throttleable
/// `low1` (300M). With the parent within 64M of its max the headroom guard cuts low1.
fn fake(name: &str, parent_current: u64) -> FakeTree {
    let f = FakeTree::new(&format!("inproc-{name}"), GUARD_POLICY);
    write_cgroup(&f.root, parent_current, &(512 * MIB).to_string());
    write_cgroup(&f.root.join("high"), 150 * MIB, "max");
    write_cgroup(&f.root.join("low1"), 300 * MIB, "max");
    f
}

impl FakeTree {
    /// What a daemon killed by SIGKILL leaves: knobs written, a journal, no restore.
    fn crash_after_writing(&self, cg: &str, file: &'static str, value: &str) {
        let journal = Journal::open(&self.state, &self.root).unwrap();
        let log = events::EventLog::open(&self.state, events::DEFAULT_MAX_BYTES, false);
        let mut act = Actuator::new(beneath::Root::open(&self.root).unwrap(), journal, log, false);
        let target = Target::Cgroup { path: cg.into(), id: self.id(cg) };
        let ev = act.apply(vec![Request::new(target, file, value, "test")]).unwrap();
        assert_eq!(ev[0].outcome, Outcome::Ok);
        std::mem::forget(act); // no Drop, no restore: as after SIGKILL
    }
}

#[test]
fn samples_decides_journals_writes_and_restores() {
    let f = fake("loop", 480 * MIB);
    let daemon = f.start();
    poll("low1 throttled", Duration::from_secs(10), || f.capped("low1"));
    let throttled: u64 = f.knob("low1", "memory.high").parse().unwrap();
    assert!(throttled < 300 * MIB, "cut below its usage: {throttled}");
    // Journal first: the original is durable before the knob changed.
    let journal = Journal::open(&f.state, &f.root).unwrap();
    assert_eq!(journal.original(f.id("low1"), "memory.high"), Some("max"));
    // The lock is held while the daemon runs: a manual restore is refused.
    let err = StateLock::try_acquire(&f.state, "memqos restore").err().expect("lock held").to_string();
    assert!(err.contains("memqos restore") && err.contains("stop it first"), "{err}");
    poll("status.json", Duration::from_secs(5), || f.status().is_some_and(|s| !s.cgroups.is_empty()));
    let snap = status::read(&f.state).unwrap().unwrap();
    assert!(!snap.dry_run);
    let low1 = snap.cgroups.iter().find(|c| c.cgroup == "low1").unwrap();
    assert_eq!((low1.tier.as_str(), low1.cgroup_id), ("batch", f.id("low1")));
    assert_eq!(low1.original.high, memqos_policy::Limit::Max);

    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
    assert!(!f.state.join(JOURNAL_FILE).exists(), "journal removed after a full restore");
    let evs = f.events();
    assert!(matches!(evs.first(), Some(Event::Started { dry_run: false, .. })), "{evs:?}");
    let w = evs.iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "low1" => Some(w),
        _ => None,
    });
    let w = w.expect("a write event for low1");
    assert_eq!(
        (w.file.as_str(), w.previous.as_deref(), &w.outcome, w.cgroup_id),
        ("memory.high", Some("max"), &Outcome::Ok, f.id("low1"))
    );
    assert!(w.reason.is_some(), "the engine's reason is logged");
    assert_stopped_cleanly(&f, &evs);
}

/// The last event says the daemon stopped without error and restored what it wrote, and its
/// state lock is free again.
fn assert_stopped_cleanly(f: &FakeTree, evs: &[Event]) {
    assert!(
        matches!(evs.last(), Some(Event::Stopped { restored: 1.., failed, error: None, .. }) if failed.is_empty()),
        "{:?}",
        evs.last()
    );
    assert!(StateLock::try_acquire(&f.state, "test").is_ok(), "lock released at exit");
}

// Asked to stop in the middle of its sleep (the next tick a minute away, no duration), the
// daemon wakes, restores what it wrote and returns.
#[test]
fn a_daemon_asked_to_stop_stops_and_restores_its_knobs() {
    let f = fake("stop", 480 * MIB);
    f.set("signals.sampling_interval_ms", 60000);
    let daemon = f.start();
    poll("low1 throttled", Duration::from_secs(10), || f.capped("low1"));
    poll("status.json", Duration::from_secs(5), || f.status().is_some());
    assert!(daemon.is_running());
    let asker = daemon.handle().clone();
    asker.request_stop();
    daemon.stop().expect("a requested stop is a clean stop");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
    assert!(!f.state.join(JOURNAL_FILE).exists(), "journal removed after a full restore");
    assert!(status::read(&f.state).unwrap().is_none(), "status.json removed");
    let evs = f.events();
    assert_stopped_cleanly(&f, &evs);
}

// memory.events watched (inotify works on a fake tree too): a protected cgroup reclaimed
// under its protection wakes the daemon, which reacts on the fast path, by the cgroup's id,
// long before its next periodic tick (a minute away).
#[test]
fn a_protected_cgroups_memory_events_wake_the_fast_path() {
    let f = fake("wakeup", 300 * MIB);
    f.set("signals.sampling_interval_ms", 60000);
    f.set("signals.events", true);
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    assert_eq!(f.knob("low1", "memory.high"), "max", "no pressure yet");
    std::fs::write(f.root.join("high/memory.events"), "low 5\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n")
        .unwrap();
    poll("low1 throttled by the reaction", Duration::from_secs(5), || f.capped("low1"));
    daemon.stop().expect("daemon run");
    let evs = f.events();
    let reaction = evs.iter().find_map(|e| match e {
        Event::Reaction { signalled, writes, .. } => Some((signalled.clone(), *writes)),
        _ => None,
    });
    assert_eq!(reaction, Some((vec!["high".to_string()], 1)), "{evs:?}");
    let w = evs.iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "low1" => w.reason.clone(),
        _ => None,
    });
    assert!(
        matches!(
            &w,
            Some(memqos_policy::Reason::ProtectedPressure {
                trigger: memqos_policy::Trigger::LowEvents { count: 5 },
                ..
            })
        ),
        "{w:?}"
    );
}

// The protected cgroup is removed and made again under its name (another kernel id): its
// memory.events is watched anew once a sample has seen it, so the new one wakes the fast
// path too. (Watches were kept by path: the dead one's stayed, the new one had none.)
#[test]
fn a_protected_cgroup_made_again_under_its_name_wakes_the_fast_path_too() {
    let f = fake("rewatch", 300 * MIB);
    f.set("signals.sampling_interval_ms", 60000);
    f.set("signals.events", true);
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    let old = f.id("high");
    std::fs::remove_dir_all(f.root.join("high")).unwrap();
    write_cgroup(&f.base.join("pad"), 0, "max"); // so the old inode is not reused at once
    let staged = f.base.join("staged-high");
    write_cgroup(&staged, 150 * MIB, "max");
    std::fs::rename(&staged, f.root.join("high")).unwrap();
    assert_ne!(f.id("high"), old);
    // A reload (the same config) makes the next tick a periodic one, a minute early.
    daemon.handle().request_reload();
    poll("a sample of the new high", Duration::from_secs(5), || {
        f.status().is_some_and(|s| s.cgroups.iter().any(|c| c.cgroup_id == f.id("high")))
    });
    // Past any wakeup the old one's end caused (its watch's IN_IGNORED, its files closed).
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(f.root.join("high/memory.events"), "low 5\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n")
        .unwrap();
    poll("low1 throttled by the reaction", Duration::from_secs(5), || f.capped("low1"));
    daemon.stop().expect("daemon run");
    let evs = f.events();
    assert!(evs.iter().any(|e| matches!(e, Event::Reloaded { .. })), "{evs:?}");
    assert!(
        evs.iter().any(|e| matches!(e, Event::Reaction { signalled, .. } if signalled == &["high".to_string()])),
        "{evs:?}"
    );
}

#[test]
fn restart_restores_a_left_journal_and_logs_recovered() {
    let f = fake("recover", 100 * MIB); // no pressure: the new run writes nothing itself
    f.crash_after_writing("low1", "memory.high", "12345678");
    assert_eq!(f.knob("low1", "memory.high"), "12345678");
    memqos_daemon::run(f.options_for(0.3), Handle::new()).expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max");
    let evs = f.events();
    assert!(
        evs.iter().any(|e| matches!(e, Event::Recovered { restored: 1, vanished: 0, failed } if failed.is_empty())),
        "{evs:?}"
    );
    assert!(!f.state.join(JOURNAL_FILE).exists());
}

#[test]
fn a_recreated_name_is_not_restored_into() {
    let f = fake("recycled", 100 * MIB);
    f.crash_after_writing("low1", "memory.high", "12345678");
    let old = f.id("low1");
    std::fs::remove_dir_all(f.root.join("low1")).unwrap();
    write_cgroup(&f.root.join("high/pad"), 0, "max"); // so the old inode is not reused at once
    write_cgroup(&f.root.join("low1"), 300 * MIB, "max");
    std::fs::write(f.root.join("low1/memory.high"), "777\n").unwrap();
    assert_ne!(f.id("low1"), old);
    memqos_daemon::run(f.options_for(0.3), Handle::new()).expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "777", "the new low1 is another cgroup");
    let evs = f.events();
    assert!(evs.iter().any(|e| matches!(e, Event::Recovered { restored: 0, vanished: 1, .. })), "{evs:?}");
}

#[test]
fn a_tampered_journal_is_refused_and_nothing_is_written() {
    let f = fake("tampered", 480 * MIB);
    std::fs::create_dir_all(f.base.join("outside")).unwrap();
    std::fs::write(f.base.join("outside/memory.high"), "untouched").unwrap();
    std::os::unix::fs::symlink(f.base.join("outside"), f.root.join("link")).unwrap();
    let outside = std::fs::metadata(f.base.join("outside")).unwrap().ino();
    std::fs::create_dir_all(&f.state).unwrap();
    let mut text = format!("{}\n", serde_json::json!({"op": "root", "cgroup_root": f.root}));
    // Distinct ids: entries are keyed by (id, file).
    for (i, cgroup) in
        ["../outside".to_string(), "link".into(), f.base.join("outside").display().to_string()].into_iter().enumerate()
    {
        text += &format!(
            "{}\n",
            serde_json::json!({"op": "set", "cgroup": cgroup, "cgroup_id": outside + i as u64, "file": "memory.high", "original": "1"})
        );
    }
    std::fs::write(f.state.join(JOURNAL_FILE), text).unwrap();
    let err = format!("{:#}", memqos_daemon::run(f.options_for(1.0), Handle::new()).expect_err("refused"));
    for what in
        ["\"..\" component", "symbolic link", "absolute path", "could not restore knobs left by the previous run"]
    {
        assert!(err.contains(what), "{what} missing: {err}");
    }
    assert_eq!(std::fs::read_to_string(f.base.join("outside/memory.high")).unwrap(), "untouched");
    assert_eq!(f.knob("low1", "memory.high"), "max", "the daemon did not start managing");
    assert!(f.state.join(JOURNAL_FILE).exists(), "the journal is kept for a person to look at");
}

#[test]
fn dry_run_decides_logs_and_writes_nothing() {
    let f = fake("dry", 480 * MIB);
    let daemon = Daemon::start(Options { dry_run: true, ..f.options() });
    poll("a dry write event", Duration::from_secs(10), || {
        f.events().iter().any(|e| matches!(e, Event::Write(w) if w.cgroup == "low1"))
    });
    poll("status.json", Duration::from_secs(5), || f.status().is_some());
    let snap = status::read(&f.state).unwrap().unwrap();
    assert!(snap.dry_run);
    assert!(status::render(&snap, true).contains("DRY RUN"));
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max");
    assert!(!f.state.join(JOURNAL_FILE).exists(), "a dry run writes no journal");
    let evs = f.events();
    let dry: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Write(w) => Some(w),
            _ => None,
        })
        .collect();
    assert!(dry.iter().all(|w| w.dry_run && w.outcome == Outcome::DryRun), "{dry:?}");
    assert!(dry.iter().any(|w| w.cgroup == "low1"
        && w.file == "memory.high"
        && w.previous.as_deref() == Some("max")
        && !w.why.is_empty()));
}

#[test]
fn on_a_swapless_host_the_guard_caps_at_usage_and_says_why() {
    // The same full parent: without swap a high below low1's 300M would free nothing, only
    // freeze it holding that memory, so the guard caps it at what it holds.
    let f = fake("swapless", 480 * MIB);
    f.swapless();
    let daemon = f.start();
    poll("low1 throttled", Duration::from_secs(10), || f.capped("low1"));
    assert_eq!(f.knob("low1", "memory.high"), (300 * MIB).to_string());
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
    let why = f.events().into_iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "low1" => w.reason,
        _ => None,
    });
    assert!(
        matches!(&why, Some(memqos_policy::Reason::HeadroomGuard { swapless: true, .. })),
        "the logged reason says the host had no swap: {why:?}"
    );
}

#[test]
fn dropping_the_actuator_restores() {
    let f = fake("guard", 100 * MIB);
    let journal = Journal::open(&f.state, &f.root).unwrap();
    let log = events::EventLog::open(&f.state, events::DEFAULT_MAX_BYTES, false);
    let act = Actuator::new(beneath::Root::open(&f.root).unwrap(), journal, log, false);
    let fr = &f;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let (mut act, f) = (act, fr);
        let target = Target::Cgroup { path: "low1".into(), id: f.id("low1") };
        act.apply(vec![Request::new(target, "cgroup.freeze", "1", "test")]).unwrap();
        assert_eq!(f.knob("low1", "cgroup.freeze"), "1");
        panic!("boom");
    }));
    assert!(result.is_err());
    assert_eq!(f.knob("low1", "cgroup.freeze"), "0", "unwinding restored the knob");
    assert!(!f.state.join(JOURNAL_FILE).exists());
}

fn adj(pid: u32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap().trim().parse().unwrap()
}

// A child forked after memqos set its parent's oom_score_adj inherits the value: memqos
// journals the parent's original for it, so the stop restores the child too.
#[test]
fn children_that_inherited_oom_score_adj_get_the_original_back() {
    let f = fake("inherit", 100 * MIB);
    // Calm off: a process joining an existing cgroup is seen at the next full sample, which
    // the calm path would put up to calm_interval_ms away.
    f.set("tier.1.oom_score_adj", 500);
    f.set("signals.calm_interval_ms", 0);
    let go = f.base.join("fork-now");
    let script = format!("while [ ! -e {} ]; do sleep 0.02; done; sleep 30 & wait", go.display());
    let mut parent = std::process::Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let ppid = parent.id();
    let original = adj(ppid);
    assert!(original < 500, "the test needs a parent below 500, found {original}");
    std::fs::write(f.root.join("low1/cgroup.procs"), format!("{ppid}\n")).unwrap();

    let daemon = f.start();
    poll("parent adjusted", Duration::from_secs(10), || adj(ppid) == 500);
    std::fs::write(&go, "").unwrap();
    let children = format!("/proc/{ppid}/task/{ppid}/children");
    let mut child = 0;
    // The shell's polling `sleep 0.02` children come and go; the one we want is `sleep 30`.
    poll("child forked", Duration::from_secs(5), || {
        let kids = std::fs::read_to_string(&children).unwrap_or_default();
        child = kids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .find(|p: &u32| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x0030\x00"))
            .unwrap_or(0);
        child != 0
    });
    assert_eq!(adj(child), 500, "inherited");
    std::fs::write(f.root.join("low1/cgroup.procs"), format!("{ppid}\n{child}\n")).unwrap();
    poll("child journaled", Duration::from_secs(10), || {
        Journal::open(&f.state, &f.root)
            .unwrap()
            .entries()
            .any(|e| e.process.is_some_and(|p| p.pid == child) && e.original == original.to_string())
    });
    daemon.stop().expect("daemon run");
    assert_eq!((adj(ppid), adj(child)), (original, original), "both restored at stop");
    let _ = parent.kill();
    let _ = parent.wait();
    // SAFETY: kill(2) on the sleep the test's shell started.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
}

#[test]
fn a_new_cgroup_gets_its_tiers_cpu_weight_without_waiting_for_a_sample() {
    let f = fake("adopt", 100 * MIB);
    // A minute between periodic samples: only the tree watch can explain a prompt write.
    f.set("signals.sampling_interval_ms", 60000);
    f.add_tier(toml::toml! { name = "tools" match = ["tool*"] throttle = true cpu_weight = 25 });
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    // Made elsewhere and moved in whole (a fake cgroup needs its files before the daemon
    // looks; mkdir in cgroupfs makes them atomically).
    let staged = f.base.join("staged");
    write_cgroup(&staged, 0, "max");
    std::fs::write(staged.join("cpu.weight"), "100\n").unwrap();
    std::fs::rename(&staged, f.root.join("tool.1")).unwrap();
    poll("cpu.weight of the new cgroup", Duration::from_secs(3), || f.knob("tool.1", "cpu.weight") == "25");
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("tool.1", "cpu.weight"), "100", "restored at stop");
    let w = f.events().into_iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "tool.1" && w.file == "cpu.weight" => Some(w),
        _ => None,
    });
    assert_eq!(w.map(|w| w.cgroup_id), Some(f.id("tool.1")));
}

// A tool call's process leaves its cgroup (it exits, or moves back to a pool) and the
// cgroup is emptied or removed: its original oom_score_adj goes back at once, not at the
// next full sample (a minute away here, with the calm path on).
#[test]
fn a_process_leaving_an_emptied_or_removed_cgroup_gets_its_original_back_at_once() {
    let f = fake("settle", 100 * MIB);
    f.set("signals.calm_interval_ms", 60000);
    f.add_tier(toml::toml! { name = "tools" match = ["tool*"] throttle = true oom_score_adj = 500 });
    let mut sleepers: Vec<std::process::Child> =
        (0..2).map(|_| std::process::Command::new("sleep").arg("30").spawn().unwrap()).collect();
    let pids: Vec<u32> = sleepers.iter().map(|c| c.id()).collect();
    let original = adj(pids[0]);
    assert!(original < 500, "the test needs processes below 500, found {original}");
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    for (i, pid) in pids.iter().enumerate() {
        let staged = f.base.join(format!("staged{i}"));
        write_cgroup(&staged, 0, "max");
        std::fs::write(staged.join("cgroup.procs"), format!("{pid}\n")).unwrap();
        std::fs::rename(&staged, f.root.join(format!("tool.{i}"))).unwrap();
    }
    poll("both adjusted", Duration::from_secs(3), || pids.iter().all(|&p| adj(p) == 500));
    // tool.0 empties (its cgroup.events changes), tool.1 is removed.
    std::fs::write(f.root.join("tool.0/cgroup.procs"), "").unwrap();
    std::fs::write(f.root.join("tool.0/cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
    std::fs::remove_dir_all(f.root.join("tool.1")).unwrap();
    poll("both put back", Duration::from_secs(3), || pids.iter().all(|&p| adj(p) == original));
    daemon.stop().expect("daemon run");
    let restores = f
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Write(w) if w.file == "oom_score_adj" && w.value == original.to_string()))
        .count();
    assert_eq!(restores, 2, "one restore each, none repeated at stop");
    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

#[test]
fn a_calm_daemon_reads_the_parent_and_samples_everything_when_it_nears_its_limit() {
    let f = fake("calm", 100 * MIB);
    // A full sample once a minute while calm; the parent every 50 ms.
    f.set("signals.calm_interval_ms", 60000);
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(f.knob("low1", "memory.high"), "max", "calm: nothing to do");
    // The parent fills up to within the 64M guard of its 512M: the parent check sees it and
    // the full sample that follows lets the guard cut low1, long before a minute is up.
    std::fs::write(f.root.join("memory.current"), format!("{}\n", 480 * MIB)).unwrap();
    poll("low1 throttled", Duration::from_secs(3), || f.capped("low1"));
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
}

#[test]
fn a_calm_daemon_sees_a_protected_burst_past_its_protection_at_once() {
    // The parent stays far from its limit; only the protected cgroup's usage moves.
    let f = fake("burst", 100 * MIB);
    f.set("signals.calm_interval_ms", 60000);
    let daemon = f.start();
    // 150M used: protection 150M x 1.1 rounded up to 16M steps.
    poll("the first protection", Duration::from_secs(3), || f.knob("high", "memory.low") == (176 * MIB).to_string());
    std::thread::sleep(Duration::from_millis(300));
    // A burst past it: the calm check reads high's usage, the full sample that follows
    // learns the new working set (and with it the room the lower tiers must leave).
    std::fs::write(f.root.join("high/memory.current"), format!("{}\n", 250 * MIB)).unwrap();
    poll("protection follows the burst", Duration::from_secs(3), || {
        f.knob("high", "memory.low") == (288 * MIB).to_string()
    });
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("high", "memory.low"), "0", "restored at stop");
}

#[test]
fn a_cgroup_losing_its_files_is_skipped_and_one_without_the_memory_controller_is_named_and_left_alone() {
    // Being removed: the kernel takes a cgroup's files away before its directory.
    let f = fake("dying", 480 * MIB);
    let dying = f.root.join("low2");
    std::fs::create_dir_all(&dying).unwrap();
    std::fs::write(dying.join("cgroup.controllers"), "memory cpu\n").unwrap();
    memqos_daemon::run(f.options_for(0.5), Handle::new()).expect("a vanishing cgroup is not an error");
    // Still there, memory controller not enabled (any tenant who may `mkdir -p a/b` makes
    // one): named once, left alone, and everyone else is managed as before.
    std::fs::write(dying.join("cgroup.controllers"), "cpu\n").unwrap();
    let daemon = f.start();
    poll("low1 throttled all the same", Duration::from_secs(3), || f.capped("low1"));
    // Made mid-run too, under a tier that matches it, with an odd name.
    let odd = f.root.join("low3\u{1b}[2J");
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(odd.join("cgroup.controllers"), "cpu\n").unwrap();
    poll("low3 named", Duration::from_secs(5), || !f.degraded(|m| m.contains("low3\\u{1b}[2J")).is_empty());
    daemon.stop().expect("one cgroup's shape does not stop the daemon");
    let said = f.degraded(|m| m.contains("memory controller"));
    assert_eq!(said.iter().filter(|m| m.contains("low2")).count(), 1, "said once: {said:?}");
    assert!(said.iter().any(|m| m.contains("low3\\u{1b}[2J")), "named, escaped: {said:?}");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
}

#[test]
fn a_memory_high_an_administrator_changes_after_memqos_wrote_it_is_never_raised_above_theirs() {
    let f = fake("takeover", 480 * MIB);
    let daemon = f.start();
    poll("low1 throttled", Duration::from_secs(5), || f.capped("low1"));
    // The administrator's own limit, on top of memqos's throttle.
    let admin = 200 * MIB;
    std::fs::write(f.root.join("low1/memory.high"), admin.to_string()).unwrap();
    poll("the takeover noticed", Duration::from_secs(5), || {
        !f.degraded(|m| m.contains("low1/memory.high") && m.contains("set by someone else")).is_empty()
    });
    // Some ticks (50 ms apart) in which it could write low1 again.
    std::thread::sleep(Duration::from_millis(500));
    let journaled = Journal::open(&f.state, &f.root).unwrap().original(f.id("low1"), "memory.high").map(str::to_owned);
    assert_ne!(journaled.as_deref(), Some("max"), "the stale original is forgotten");
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), admin.to_string(), "theirs at stop, not the stale original");
    let said = f.events();
    let noticed = |e: &Event| matches!(e, Event::Degraded { message } if message.contains("set by someone else"));
    assert_eq!(said.iter().filter(|e| noticed(e)).count(), 1, "{said:?}");
    // Still throttled (the lower value wins), never above their value.
    let later: Vec<u64> = said
        .iter()
        .skip_while(|e| !noticed(e))
        .filter_map(|e| match e {
            Event::Write(w) if w.cgroup == "low1" && w.file == "memory.high" => Some(w.value.parse().unwrap()),
            _ => None,
        })
        .collect();
    assert!(later.iter().all(|&v| v <= admin), "{later:?}");
}

/// A tier-static knob (cpu.weight, memory.swap.max) an administrator sets while memqos runs
/// is theirs: noticed and said once, its original forgotten on disk, never written again,
/// left as they set it at stop.
#[test]
fn a_tier_knob_an_administrator_changes_is_forgotten_and_left_to_them() {
    let f = fake("statics", 100 * MIB);
    f.set("tier.0.cpu_weight", 500);
    f.set("signals.calm_interval_ms", 0);
    std::fs::write(f.root.join("high/memory.swap.max"), "max\n").unwrap();
    let daemon = f.start();
    poll("tier knobs written", Duration::from_secs(5), || {
        f.knob("high", "cpu.weight") == "500" && f.knob("high", "memory.swap.max") == "0"
    });
    std::fs::write(f.root.join("high/cpu.weight"), "300\n").unwrap();
    std::fs::write(f.root.join("high/memory.swap.max"), "1073741824\n").unwrap();
    poll("both take-overs noticed", Duration::from_secs(5), || {
        f.degraded(|m| m.contains("set by someone else")).len() == 2
    });
    let journal = Journal::open(&f.state, &f.root).unwrap();
    assert_eq!(journal.original(f.id("high"), "cpu.weight"), None);
    assert_eq!(journal.original(f.id("high"), "memory.swap.max"), None);
    std::thread::sleep(Duration::from_millis(500));
    daemon.stop().expect("daemon run");
    assert_eq!((f.knob("high", "cpu.weight"), f.knob("high", "memory.swap.max")), ("300".into(), "1073741824".into()));
    let said = f.events();
    let notes = f.degraded(|m| m.contains("set by someone else"));
    assert!(notes.iter().any(|m| m.starts_with("high/cpu.weight is 300 now") && m.contains("(100)")), "{notes:?}");
    assert!(notes.iter().any(|m| m.starts_with("high/memory.swap.max is 1073741824 now")), "{notes:?}");
    let writes = |file: &str| said.iter().filter(|e| matches!(e, Event::Write(w) if w.file == file)).count();
    assert_eq!((writes("cpu.weight"), writes("memory.swap.max")), (1, 1), "each written once, never again");
}

/// A process's oom_score_adj set by someone else while memqos runs is theirs: noticed, its
/// original forgotten, and the stop leaves their value.
#[test]
fn an_oom_score_adj_an_administrator_changes_is_not_put_back_at_stop() {
    let f = fake("adjtaken", 100 * MIB);
    f.set("tier.1.oom_score_adj", 500);
    f.set("signals.calm_interval_ms", 0);
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id();
    let original = adj(pid);
    assert!(original < 500, "the test needs a process below 500, found {original}");
    std::fs::write(f.root.join("low1/cgroup.procs"), format!("{pid}\n")).unwrap();
    let daemon = f.start();
    poll("adjusted", Duration::from_secs(5), || adj(pid) == 500);
    std::fs::write(format!("/proc/{pid}/oom_score_adj"), "600").unwrap();
    poll("the take-over noticed", Duration::from_secs(5), || {
        !f.degraded(|m| m.contains(&format!("pid {pid} in low1/oom_score_adj is 600 now"))).is_empty()
    });
    let journal = Journal::open(&f.state, &f.root).unwrap();
    assert!(!journal.entries().any(|e| e.process.is_some_and(|p| p.pid == pid)), "forgotten on disk");
    daemon.stop().expect("daemon run");
    assert_eq!(adj(pid), 600, "theirs, not the stale original {original}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// In a delegated subtree a tenant names its own cgroups: one it owns named like the
/// protected tier's (`high*`) is not protected; one owned by root is.
#[test]
fn a_cgroup_a_tenant_owns_does_not_take_a_protected_tier_by_its_name() {
    let f = fake("tenant", 100 * MIB);
    write_cgroup(&f.root.join("high2"), 150 * MIB, "max");
    std::os::unix::fs::chown(f.root.join("high"), Some(4242), Some(4242)).unwrap();
    let daemon = f.start();
    poll("high2 protected", Duration::from_secs(5), || f.knob("high2", "memory.low") != "0");
    let snap = poll_for("status.json", Duration::from_secs(5), || f.status());
    assert!(snap.cgroups.iter().all(|c| c.cgroup != "high"), "high is in no tier: {:?}", snap.cgroups);
    std::thread::sleep(Duration::from_millis(300));
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("high", "memory.low"), "0");
    let wrote_high = f.events().into_iter().filter(|e| matches!(e, Event::Write(w) if w.cgroup == "high")).count();
    assert_eq!(wrote_high, 0);
}

#[test]
fn a_throttled_cgroup_that_becomes_unreadable_gets_its_original_back_while_unseen() {
    let f = fake("unreadable", 480 * MIB);
    let daemon = f.start();
    poll("low1 throttled", Duration::from_secs(5), || f.capped("low1"));
    // Its usage can no longer be read: memqos cannot see it, so it must not keep it capped.
    std::fs::write(f.root.join("low1/memory.current"), "junk\n").unwrap();
    poll("low1's original back while the daemon runs", Duration::from_secs(3), || {
        f.knob("low1", "memory.high") == "max"
    });
    assert!(daemon.is_running());
    daemon.stop().expect("daemon run");
    let said = f.events();
    assert!(
        said.iter().any(
            |e| matches!(e, Event::Degraded { message } if message.contains("low1") && message.contains("unreadable"))
        ),
        "{said:?}"
    );
}

#[test]
fn a_low_cgroup_made_while_calm_beside_a_declared_one_is_capped_without_waiting_for_the_calm_sample() {
    // high declares 200M and runs; no low cgroup yet, so nothing is reserved against anyone,
    // the parent is far from its limit even counting high's room to grow, and the daemon is
    // calm (a full sample once a minute, the parent in between).
    let f = fake("calmnew", 100 * MIB);
    std::fs::remove_dir_all(f.root.join("low1")).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "200M");
    f.set("signals.calm_interval_ms", 60000);
    let daemon = f.start();
    poll("the first sample", Duration::from_secs(5), || f.status().is_some());
    std::thread::sleep(Duration::from_millis(300));
    // A low task starts (an agent's framework about to load): capped within a sampling
    // interval or two, not at the next calm sample a minute away.
    write_cgroup(&f.root.join("low2"), 20 * MIB, "max");
    poll("low2 capped", Duration::from_secs(2), || f.capped("low2"));
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low2", "memory.high"), "max", "restored at stop");
}

#[test]
fn a_second_daemon_on_the_same_tree_is_refused_whatever_its_state_dir() {
    let f = fake("tworoots", 100 * MIB);
    let first = f.start();
    poll("the first daemon's first tick", Duration::from_secs(5), || f.status().is_some());
    let mut second = f.options_for(0.5);
    second.state_dir = Some(f.base.join("other-state"));
    let err = format!("{:#}", memqos_daemon::run(second, Handle::new()).expect_err("refused"));
    assert!(err.contains("another memqos daemon manages cgroup_root"), "{err}");
    first.stop().expect("the first runs on");
}

/// A tmpfs of 64 KiB as the state directory (the host's own mounts are not touched; this
/// one is ours and unmounted when the test ends).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path) -> SmallDisk {
        std::fs::create_dir_all(at).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "memqos-test", at.to_str().unwrap()])
            .status()
            .expect("running mount");
        assert!(status.success(), "mounting a 64 KiB tmpfs at {} (the test runs as root)", at.display());
        SmallDisk(at.to_owned())
    }

    /// Fills it up: every write that needs a new block fails with ENOSPC.
    fn fill(&self) -> PathBuf {
        let filler = self.0.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: the test's FakeTree removes the directory next.
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_state_dir_stops_no_protection_and_no_knob_is_written_unjournaled() {
    let f = fake("fulldisk", 100 * MIB);
    let disk = SmallDisk::mount(&f.state);
    let filler = disk.fill();
    let daemon = f.start();
    // The parent nears its limit: the guard wants low1 cut, but its original cannot be
    // journaled, so it is not written (a crash now would leave it cut for good).
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(f.root.join("memory.current"), format!("{}\n", 480 * MIB)).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(f.knob("low1", "memory.high"), "max", "no write without its original journaled");
    assert!(daemon.is_running(), "the daemon runs on with its state_dir full");
    // Space returns: full service within a second.
    std::fs::remove_file(&filler).unwrap();
    // (How soon is measured by the fault campaign, docs/reliability.md; here: it does.)
    poll("low1 throttled once the journal can be written", Duration::from_secs(3), || f.capped("low1"));
    let journal = Journal::open(&f.state, &f.root).unwrap();
    assert_eq!(journal.original(f.id("low1"), "memory.high"), Some("max"), "journaled before written");
    daemon.stop().expect("the daemon never stopped for a full disk");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
    let said = f.events();
    assert!(
        said.iter().any(|e| matches!(e, Event::Degraded { message } if message.contains("journal is written again"))),
        "{said:?}"
    );
    drop(disk);
}

#[test]
fn a_declared_expected_peak_caps_the_lower_tier_and_a_bad_declaration_is_named() {
    // high holds 150M of a 512M parent and declares 400M; low1 holds 20M. The budget left to
    // low1 is (512 - 64) - 150 - (400 - 150) = 48M: capped there, although the parent is
    // below its guard line even counting high's regrowth (170 + 250 < 448M), so the guard
    // alone would have cut nothing.
    let f = fake("reserve", 170 * MIB);
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "400M");
    write_cgroup(&f.root.join("high2"), 0, "max");
    set_xattr(&f.root.join("high2"), "user.memqos.expected_peak", "lots");
    // Padded past what is read: said, not silently dropped as if nothing were declared.
    write_cgroup(&f.root.join("high3"), 0, "max");
    set_xattr(&f.root.join("high3"), "user.memqos.expected_peak", &format!("{}1G", " ".repeat(300)));
    let daemon = f.start();
    poll("low1 capped", Duration::from_secs(10), || f.capped("low1"));
    assert_eq!(f.knob("low1", "memory.high"), (48 * MIB).to_string());
    assert_eq!(f.knob("high", "memory.low"), (400 * MIB).to_string(), "protection covers the declaration");
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored at stop");
    let evs = f.events();
    let why = evs.iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "low1" && w.file == "memory.high" => w.reason.clone(),
        _ => None,
    });
    assert!(matches!(&why, Some(memqos_policy::Reason::Reservation { by, members: 1, .. }) if by == "high"), "{why:?}");
    let bad = f.degraded(|m| m.contains("user.memqos.expected_peak"));
    assert_eq!(bad.len(), 2, "each said once: {bad:?}");
    assert!(bad.iter().any(|m| m.starts_with("high2: user.memqos.expected_peak = \"lots\" ignored")), "{bad:?}");
    assert!(
        bad.iter()
            .any(|m| m.starts_with("high3: user.memqos.expected_peak = \"(overlong)\" ignored: longer than 256 bytes")),
        "{bad:?}"
    );
}

#[test]
fn a_tenants_own_declaration_is_not_honoured_and_is_named() {
    // high was made by root (so its name gave it the protected tier) and then handed to a
    // tenant (owned by uid 4242, who may set user.* xattrs on it: systemd's Delegate= does
    // this), which declares u64::MAX: honoured, that would hold low1 at its floor. Only root
    // or the owner of cgroup_root may give hints.
    let f = fake("untrusted", 170 * MIB);
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    // Every sample a full one (where hints are read), not one every calm_interval_ms.
    f.set("signals.calm_interval_ms", 0);
    let daemon = f.start();
    poll("high classified", Duration::from_secs(5), || {
        f.status().is_some_and(|s| s.cgroups.iter().any(|c| c.cgroup == "high"))
    });
    std::os::unix::fs::chown(f.root.join("high"), Some(4242), Some(4242)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "18446744073709551615");
    poll("named", Duration::from_secs(5), || !f.degraded(|m| m.contains("owned by uid 4242")).is_empty());
    std::thread::sleep(Duration::from_millis(300));
    daemon.stop().expect("daemon run");
    let evs = f.events();
    let capped = evs.iter().any(|e| matches!(e, Event::Write(w) if w.cgroup == "low1" && w.file == "memory.high"));
    assert!(!capped, "no reservation from an untrusted declaration: {evs:?}");
    let said = f.degraded(|m| m.contains("owned by uid 4242"));
    assert_eq!(said.len(), 1, "said once: {said:?}");
    // The same declaration from root (the cgroup's owner now) is a request memqos honours,
    // at most the parent's limit.
    std::os::unix::fs::chown(f.root.join("high"), Some(0), Some(0)).unwrap();
    let daemon = f.start();
    poll("low1 capped", Duration::from_secs(5), || f.capped("low1"));
    daemon.stop().expect("daemon run");
}

/// The fake with a learning critical tier, a history file of its own and no calm path (so
/// every sample is a full one): the history file's path.
fn learning(f: &FakeTree) -> PathBuf {
    let file = f.base.join("history.json");
    f.set("history_file", file.to_str().unwrap());
    f.set("tier.0.learn_peak", true);
    f.set("signals.calm_interval_ms", 0);
    file
}

/// A new protected cgroup `name` with workload `key`, made aside and moved in whole, so the
/// daemon never sees it without its xattrs.
fn arrive(f: &FakeTree, name: &str, current: u64, xattrs: &[(&str, &str)]) {
    let staged = f.base.join(format!("staged-{name}"));
    write_cgroup(&staged, current, "max");
    for (n, v) in xattrs {
        set_xattr(&staged, n, v);
    }
    std::fs::rename(&staged, f.root.join(name)).unwrap();
}

fn reservations(f: &FakeTree, cg: &str) -> Vec<memqos_policy::Reason> {
    f.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Write(w) if w.cgroup == cg && w.file == "memory.high" => w.reason,
            _ => None,
        })
        .filter(|r| matches!(r, memqos_policy::Reason::Reservation { .. }))
        .collect()
}

#[test]
fn a_learned_peak_is_recorded_when_its_cgroup_ends_and_reserved_for_the_next_with_its_key() {
    // `high` (key job-k) peaks at 300M and is removed: history holds job-k = [300M]. `high2`
    // with the same key and no declaration then expects 300M + 10% = 330M, reserved as 336M
    // (ws_granularity): low1's budget is (512 - 64) - (70 - 20) - (336 - 50) = 112M.
    let f = fake("learn", 170 * MIB);
    let file = learning(&f);
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    std::fs::write(f.root.join("high/memory.peak"), format!("{}\n", 300 * MIB)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.workload", "job-k");
    let daemon = f.start();
    poll("high protected", Duration::from_secs(10), || f.knob("high", "memory.low") != "0");
    assert_eq!(f.knob("low1", "memory.high"), "max", "nothing learned yet: nothing reserved");
    std::fs::remove_dir_all(f.root.join("high")).unwrap();
    poll("history written", Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains("job-k"))
    });
    let h = memqos_daemon::history::History::from_json(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(h.get("job-k").unwrap().expectation(), Some(300 * MIB), "memory.peak, not memory.current");

    std::fs::write(f.root.join("memory.current"), format!("{}\n", 70 * MIB)).unwrap();
    arrive(&f, "high2", 50 * MIB, &[("user.memqos.workload", "job-k")]);
    poll("low1 capped", Duration::from_secs(10), || f.capped("low1"));
    assert_eq!(f.knob("low1", "memory.high"), (112 * MIB).to_string());
    daemon.stop().expect("daemon run");
    let why = reservations(&f, "low1");
    let learned =
        memqos_policy::LearnedPeak { workload: "job-k".into(), lifetimes: 1, peak_bytes: 300 * MIB, tier: false };
    assert!(
        matches!(&why[0], memqos_policy::Reason::Reservation { by, declared_bytes, learned: Some(l), .. }
            if by == "high2" && *declared_bytes == 330 * MIB && *l == learned),
        "{why:?}"
    );
    assert!(why[0].to_string().contains("learned from 1 lifetime(s) of workload \"job-k\""), "{}", why[0]);
    let evs = f.events();
    assert!(evs.iter().any(|e| matches!(e, Event::PeakRecorded { cgroup, workload, peak_bytes, lifetimes: 1 }
        if cgroup == "high" && workload == "job-k" && *peak_bytes == 300 * MIB)));
    let said: Vec<&Event> = evs.iter().filter(|e| matches!(e, Event::PeakLearned { .. })).collect();
    assert_eq!(said.len(), 1, "said once per cgroup: {said:?}");
    assert!(
        matches!(said[0], Event::PeakLearned { cgroup, expected_bytes, .. } if cgroup == "high2" && *expected_bytes == 330 * MIB)
    );
}

#[test]
fn a_lifetime_that_ends_just_before_the_daemon_stops_is_recorded_at_stop() {
    // The experiments' case: the protected task ends last, its cgroup is removed, and the
    // daemon is stopped before its next sample. A sample a minute apart leaves only the stop
    // to see that `high` ended.
    let f = fake("learn-stop", 170 * MIB);
    let file = learning(&f);
    f.set("signals.sampling_interval_ms", 60_000);
    std::fs::write(f.root.join("high/memory.peak"), format!("{}\n", 300 * MIB)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.workload", "job-k");
    let daemon = f.start();
    poll("high protected", Duration::from_secs(10), || f.knob("high", "memory.low") != "0");
    std::fs::remove_dir_all(f.root.join("high")).unwrap();
    daemon.stop().expect("daemon run");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let h = memqos_daemon::history::History::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert_eq!(h.get("job-k").and_then(|e| e.expectation()), Some(300 * MIB), "{text}");
}

#[test]
fn a_declared_peak_wins_over_history_and_a_bad_key_is_named_once() {
    // The history says job-k peaked at 300M; `high` has that key but declares 400M: the
    // reservation is the declaration's (low1 at 48M, as without history).
    let f = fake("learn-declared", 170 * MIB);
    let file = learning(&f);
    std::fs::write(
        &file,
        format!("{{\"version\": 1, \"workloads\": {{\"job-k\": {{\"peaks\": [{}], \"last_seen\": 1}}}}}}", 300 * MIB),
    )
    .unwrap();
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.workload", "job-k");
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "400M");
    write_cgroup(&f.root.join("high3"), 0, "max");
    std::fs::write(f.root.join("high3/cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
    set_xattr(&f.root.join("high3"), "user.memqos.workload", "bad\tkey");
    let daemon = f.start();
    poll("low1 capped", Duration::from_secs(10), || f.capped("low1"));
    assert_eq!(f.knob("low1", "memory.high"), (48 * MIB).to_string());
    daemon.stop().expect("daemon run");
    let why = reservations(&f, "low1");
    assert!(
        matches!(&why[0], memqos_policy::Reason::Reservation { by, declared_bytes, learned: None, .. }
            if by == "high" && *declared_bytes == 400 * MIB),
        "{why:?}"
    );
    let evs = f.events();
    assert!(!evs.iter().any(|e| matches!(e, Event::PeakLearned { .. })), "nothing learned applied");
    let bad = f.degraded(|m| m.contains("user.memqos.workload"));
    assert_eq!(bad.len(), 1, "said once: {bad:?}");
    assert!(bad[0].starts_with("high3: user.memqos.workload = \"bad\\tkey\" ignored: control character"), "{}", bad[0]);
}

#[test]
fn without_a_key_the_tiers_recent_peaks_are_reserved_and_a_bad_tier_file_is_set_aside() {
    // `high` names no workload, peaks at 300M and is removed: the tier `critical` remembers
    // 300M (state_dir/tier-peaks.json, whose old content was unreadable). `high2`, no key, no
    // declaration, then expects 330M from its tier: low1 capped at 112M as with a key.
    let f = fake("learn-tier", 170 * MIB);
    learning(&f);
    let tier_file = f.state.join("tier-peaks.json");
    std::fs::create_dir_all(&f.state).unwrap();
    std::fs::write(&tier_file, "{\"version\": 1, \"workloads\": [").unwrap();
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    std::fs::write(f.root.join("high/memory.peak"), format!("{}\n", 300 * MIB)).unwrap();
    let daemon = f.start();
    poll("high protected", Duration::from_secs(10), || f.knob("high", "memory.low") != "0");
    std::fs::remove_dir_all(f.root.join("high")).unwrap();
    poll("tier peaks written", Duration::from_secs(10), || {
        std::fs::read_to_string(&tier_file).is_ok_and(|t| t.contains("critical"))
    });
    std::fs::write(f.root.join("memory.current"), format!("{}\n", 70 * MIB)).unwrap();
    arrive(&f, "high2", 50 * MIB, &[]);
    poll("low1 capped", Duration::from_secs(10), || f.capped("low1"));
    assert_eq!(f.knob("low1", "memory.high"), (112 * MIB).to_string());
    daemon.stop().expect("daemon run");
    let why = reservations(&f, "low1");
    assert!(
        matches!(&why[0], memqos_policy::Reason::Reservation { by, declared_bytes, learned: Some(l), source: memqos_policy::PeakSource::TierRecent, .. }
            if by == "high2" && *declared_bytes == 330 * MIB && l.tier && l.workload == "critical"),
        "{why:?}"
    );
    assert!(why[0].to_string().contains("recent lifetime(s) of tier \"critical\""), "{}", why[0]);
    let warned = f.degraded(|m| m.starts_with("tier peaks "));
    assert!(warned.len() == 1 && warned[0].contains("moved aside"), "{warned:?}");
    assert!(f.state.join("tier-peaks.json.bad").exists(), "kept for a person");
    let h = memqos_daemon::history::History::from_json(&std::fs::read_to_string(&tier_file).unwrap()).unwrap();
    assert_eq!(h.get("critical").unwrap().peaks, [300 * MIB]);
    assert!(!f.events().iter().any(|e| matches!(e, Event::PeakRecorded { .. })), "no key: no workload history");
}

#[test]
fn a_low_that_does_not_fit_is_parked_and_status_and_explain_say_so() {
    // high holds 150M and declares 300M (reserved as 304M, a multiple of ws_granularity): the
    // lows may hold (512 - 64) - 150 - (304 - 150) = 144M together; they hold 40M, so 104M is
    // free, less than park_room (128M): only the oldest (low1, first by name at the same
    // first sight) runs, low2 waits at what it holds (20M, so min_high's 32M); low1 gets
    // what that leaves, 112M.
    let f = fake("park", 190 * MIB);
    // Parking is for swapless hosts (with swap the lows share the room instead).
    f.swapless();
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    write_cgroup(&f.root.join("low2"), 20 * MIB, "max");
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "300M");
    let daemon = f.start();
    let snap = poll_status(&f, |s| s.parked == ["low2"]);
    assert_eq!(f.knob("low2", "memory.high"), (32 * MIB).to_string());
    assert_eq!(f.knob("low1", "memory.high"), (112 * MIB).to_string());
    let view = explain_view(&f, snap);
    let e = memqos_daemon::explain::explain(&view, "low2").unwrap();
    assert!(
        e.release.iter().any(|r| r.starts_with("parked:") && r.contains("1 in line") && r.contains("300M")),
        "{:?}",
        e.release
    );
    let e = memqos_daemon::explain::explain(&view, "high").unwrap();
    assert!(e.state.iter().any(|s| s.contains("room reserved for its") && s.contains("declared")), "{:?}", e.state);
    daemon.stop().expect("daemon run");
    let parked = f.events().into_iter().any(|e| {
        matches!(e, Event::Write(w) if w.cgroup == "low2"
        && matches!(&w.reason, Some(memqos_policy::Reason::Parked { by, place: 1, admitted: 1, .. }) if by == "high"))
    });
    assert!(parked, "the cap's write names the parking");
}

#[test]
fn with_active_swap_the_lows_share_and_with_unreadable_swaps_they_are_parked() {
    // The reservation of the test above. With an active swap device the lows share the room
    // (low2 is capped at its share, not at what it holds); once /proc/swaps cannot be read
    // the daemon does not know, and parks as it did before it knew.
    let f = fake("park-swap", 190 * MIB);
    std::fs::write(f.root.join("low1/memory.current"), format!("{}\n", 20 * MIB)).unwrap();
    write_cgroup(&f.root.join("low2"), 20 * MIB, "max");
    set_xattr(&f.root.join("high"), "user.memqos.expected_peak", "300M");
    let daemon = f.start();
    // 104M free shared by two: 20M + 52M each.
    common::poll_for("shares", Duration::from_secs(10), || {
        (f.knob("low2", "memory.high") == (72 * MIB).to_string()).then_some(())
    });
    assert!(f.status().is_some_and(|s| s.parked.is_empty()));
    std::fs::remove_file(&f.swaps).unwrap();
    poll_status(&f, |s| s.parked == ["low2"]);
    assert_eq!(f.knob("low2", "memory.high"), (32 * MIB).to_string());
    daemon.stop().expect("daemon run");
}

/// Waits for a status.json that satisfies `f`.
/// What `memqos explain` answers from, as the daemon keeps it: the tree's config, `snap`, and
/// its recent decisions recorded per cgroup.
fn explain_view(f: &FakeTree, snap: memqos_daemon::status::Snapshot) -> memqos_daemon::explain::View {
    let cfg = memqos_policy::Config::from_str(&std::fs::read_to_string(&f.config).unwrap(), "memqos.toml").unwrap();
    let mut view = memqos_daemon::explain::View::new(cfg, f.config.clone());
    for d in &snap.recent_decisions {
        view.record(d.clone());
    }
    view.snapshot = Some(snap);
    view
}

fn poll_status(f: &FakeTree, ok: impl Fn(&memqos_daemon::status::Snapshot) -> bool) -> memqos_daemon::status::Snapshot {
    common::poll_for("status", Duration::from_secs(10), || f.status().filter(|s| ok(s)))
}

#[test]
fn a_malformed_history_file_is_moved_aside_and_the_daemon_learns_afresh() {
    let f = fake("learn-bad", 170 * MIB);
    let file = learning(&f);
    std::fs::write(&file, "{\"version\": 1, \"workloads\": [").unwrap();
    std::fs::write(f.root.join("high/memory.peak"), format!("{}\n", 200 * MIB)).unwrap();
    set_xattr(&f.root.join("high"), "user.memqos.workload", "job-k");
    let daemon = f.start();
    poll("high protected", Duration::from_secs(10), || f.knob("high", "memory.low") != "0");
    std::fs::remove_dir_all(f.root.join("high")).unwrap();
    poll("history written", Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains("job-k"))
    });
    daemon.stop().expect("the daemon runs on a malformed history");
    let bad = f.base.join("history.json.bad");
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "{\"version\": 1, \"workloads\": [", "kept for a person");
    let warned = f.degraded(|m| m.starts_with("history_file "));
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains(file.to_str().unwrap()) && warned[0].contains("moved aside"), "{}", warned[0]);
    let h = memqos_daemon::history::History::from_json(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(h.get("job-k").unwrap().peaks, [200 * MIB], "only what this run learned");
}

#[test]
fn a_low_thrashing_beside_the_protected_one_is_frozen_explained_and_thawed_at_stop() {
    // No guard cut (the parent far below its limit): only the thrash rule acts. low1's own
    // memory.pressure says its tasks were all stalled 85% of the last ten seconds.
    let f = fake("thrash", 200 * MIB);
    f.set("tier.1.freeze_thrashing", true);
    std::fs::write(
        f.root.join("low1/memory.pressure"),
        "some avg10=90.00 avg60=50.00 avg300=20.00 total=900000\nfull avg10=85.00 avg60=45.00 avg300=18.00 total=800000\n",
    )
    .unwrap();
    let daemon = f.start();
    let snap = poll_status(&f, |s| s.thrashing == ["low1"]);
    assert_eq!(f.knob("low1", "cgroup.freeze"), "1");
    assert_eq!(f.knob("high", "cgroup.freeze"), "0", "a protected cgroup is never frozen for thrashing");
    assert!(!f.capped("low1"), "frozen, not throttled");
    let text = memqos_daemon::status::render(&snap, false);
    assert!(text.lines().any(|l| l.starts_with("low1 ") && l.ends_with("THRASHING (frozen)")), "{text}");
    let view = explain_view(&f, snap);
    let e = memqos_daemon::explain::explain(&view, "low1").unwrap();
    assert!(
        e.state.iter().any(|s| s.contains("thrashing (memory.pressure full avg10 85%") && s.contains("high")),
        "{:?}",
        e.state
    );
    assert!(
        e.release
            .iter()
            .any(|r| r.starts_with("frozen for thrashing") && r.contains("high ends") && r.contains("30000 ms")),
        "{:?}",
        e.release
    );
    assert!(e.tier.as_ref().is_some_and(|t| t.freeze_thrashing));
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "cgroup.freeze"), "0", "thawed when the daemon stops");
    let froze = f.events().into_iter().any(|e| {
        matches!(e, Event::Write(w) if w.cgroup == "low1" && w.file == "cgroup.freeze" && w.value == "1"
        && matches!(&w.reason, Some(memqos_policy::Reason::Thrashing { beside, .. }) if beside == "high"))
    });
    assert!(froze, "the freeze's write names the thrashing and the protected cgroup");
}

#[test]
fn a_low_whose_refaults_race_is_frozen_for_thrashing_though_its_psi_is_quiet() {
    // The daemon reads memory.stat of freeze_thrashing cgroups: once it has a first count,
    // 1 GiB of refaults between two 50 ms samples is far above thrash_refault_rate.
    let f = fake("thrash-refaults", 200 * MIB);
    f.set("tier.1.freeze_thrashing", true);
    std::fs::write(f.root.join("low1/memory.stat"), "anon 0\nfile 0\nworkingset_refault_anon 10\n").unwrap();
    let daemon = f.start();
    poll_status(&f, |s| s.cgroups.iter().any(|c| c.cgroup == "low1"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(f.knob("low1", "cgroup.freeze"), "0", "a steady count is no thrash");
    let pages = (1u64 << 30) / 4096 + 10;
    std::fs::write(f.root.join("low1/memory.stat"), format!("anon 0\nfile 0\nworkingset_refault_anon {pages}\n"))
        .unwrap();
    poll_status(&f, |s| s.thrashing == ["low1"]);
    assert_eq!(f.knob("low1", "cgroup.freeze"), "1");
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "cgroup.freeze"), "0", "thawed when the daemon stops");
    let why = f.events().into_iter().find_map(|e| match e {
        Event::Write(w) if w.cgroup == "low1" && w.file == "cgroup.freeze" && w.value == "1" => w.reason,
        _ => None,
    });
    assert!(
        matches!(&why, Some(memqos_policy::Reason::Thrashing { psi_full_avg10, refault_bytes_per_s, .. })
            if *psi_full_avg10 == 0.0 && *refault_bytes_per_s >= 8 * MIB),
        "{why:?}"
    );
}

/// cgroup.freeze an administrator sets after memqos wrote it is theirs: a cgroup memqos
/// froze for thrashing and thawed at its stall bound, then frozen by them, is not thawed
/// again when memqos stops (its journaled original, "0", is forgotten).
#[test]
fn a_freeze_an_administrator_sets_after_memqos_thawed_is_not_undone_at_stop() {
    let f = fake("freezetaken", 200 * MIB);
    f.set("tier.1.freeze_thrashing", true);
    f.set("tier.1.stall.after_ms", 1000);
    // Every sample a full one: the calm path would look at low1 only every few seconds.
    f.set("signals.calm_interval_ms", 0);
    std::fs::write(
        f.root.join("low1/memory.pressure"),
        "some avg10=90.00 avg60=50.00 avg300=20.00 total=900000\nfull avg10=85.00 avg60=45.00 avg300=18.00 total=800000\n",
    )
    .unwrap();
    let daemon = f.start();
    poll("low1 frozen", Duration::from_secs(5), || f.knob("low1", "cgroup.freeze") == "1");
    // Thawed at its stall bound; it then rests (thrash::REST_MS) before any new freeze.
    poll("low1 thawed by memqos", Duration::from_secs(5), || f.knob("low1", "cgroup.freeze") == "0");
    std::fs::write(f.root.join("low1/cgroup.freeze"), "1\n").unwrap();
    poll("the take-over noticed", Duration::from_secs(5), || {
        !f.degraded(|m| m.starts_with("low1/cgroup.freeze is 1 now") && m.contains("set by someone else")).is_empty()
    });
    assert_eq!(Journal::open(&f.state, &f.root).unwrap().original(f.id("low1"), "cgroup.freeze"), None);
    daemon.stop().expect("daemon run");
    assert_eq!(f.knob("low1", "cgroup.freeze"), "1", "their freeze stays");
    let values: Vec<String> = f
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Write(w) if w.cgroup == "low1" && w.file == "cgroup.freeze" => Some(w.value),
            _ => None,
        })
        .collect();
    assert_eq!(values, ["1", "0"], "frozen and thawed once, nothing after theirs");
}
