//! Reload (rejected, then accepted), `memqos explain` over the control socket and OOM
//! attribution from memory.events, on a fake cgroup tree with the daemon loop in-process.
//! The first reload is asked by SIGHUP (the command's wiring, `Handle::on_signals`), the
//! others through the handle. One test in its own binary: SIGHUP goes to the whole process,
//! so no other daemon may run in it meanwhile.

mod common;

use common::{poll_for, write_cgroup, Daemon, FakeTree, GUARD_POLICY, MIB};
use memqos_daemon::control::{self, Reply, Request};
use memqos_daemon::events::Event;
use memqos_daemon::{status, Handle};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

fn explain(state: &Path, cgroup: &str) -> Reply {
    control::ask(state, &Request::Explain(cgroup.into())).expect("control socket answers")
}

#[test]
fn reload_rejects_then_applies_explain_answers_and_oom_kills_are_attributed() {
    let f = FakeTree::new("reload", GUARD_POLICY);
    f.set("tier.1.protect", "none");
    let (root, state) = (&f.root, &f.state);
    // The parent is within the 64M guard of its 512M max: the guard throttles low1.
    write_cgroup(root, 480 * MIB, &(512 * MIB).to_string());
    write_cgroup(&root.join("high"), 150 * MIB, "max");
    write_cgroup(&root.join("low1"), 300 * MIB, "max");
    std::fs::write(root.join("low1/memory.peak"), format!("{}\n", 301 * MIB)).unwrap();
    write_cgroup(&root.join("other"), 10 * MIB, "max");

    // Before any daemon: a clear error, naming the state directory.
    let e = control::ask(state, &Request::Explain("low1".into())).unwrap_err().to_string();
    assert!(e.contains("no memqos daemon is running") && e.contains(&state.display().to_string()), "{e}");

    let daemon = Daemon::start_with(f.options(), Handle::on_signals());
    poll_for("low1 throttled", Duration::from_secs(10), || f.capped("low1").then_some(()));
    poll_for("a status with the throttle", Duration::from_secs(5), || {
        f.status().filter(|s| s.throttled.contains(&"low1".to_string()))
    });
    let throttled = f.knob("low1", "memory.high");

    // The socket: owner-only without [control] group.
    let sock = state.join(control::SOCKET_FILE);
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);

    // explain: tier, the rule, the knob, the decision and its reason, what releases it.
    let Reply::Ok(e) = explain(state, "low1") else { panic!("explain low1 failed") };
    assert!(e.managed);
    let tier = e.tier.as_ref().unwrap();
    assert_eq!((tier.name.as_str(), tier.rule.as_deref(), tier.throttle), ("batch", Some("low*"), true));
    assert_eq!(e.knobs.unwrap().high.to_string(), throttled);
    assert!(e.state.iter().any(|s| s.starts_with("throttled: memory.high")), "{:?}", e.state);
    let d = e.decisions.last().expect("its decision");
    assert!(matches!(d.reason, Some(memqos_policy::Reason::HeadroomGuard { .. })), "{d:?}");
    assert!(e.release.iter().any(|r| r.contains("hold_ms = 60000")), "{:?}", e.release);
    let text = memqos_daemon::explain::render(&e);
    assert!(
        text.contains("tier: batch (priority 1) by match \"low*\"") && text.contains("what releases it:"),
        "{text}"
    );
    // Absolute paths below the root work too; others, unknown and unmanaged cgroups are told apart.
    let Reply::Ok(abs) = explain(state, &root.join("low1").display().to_string()) else { panic!("absolute") };
    assert_eq!(abs.cgroup, "low1");
    let Reply::Error(err) = explain(state, "nope") else { panic!("unknown cgroup explained") };
    assert!(err.contains("no cgroup nope under"), "{err}");
    let Reply::Error(err) = explain(state, "/etc") else { panic!("outside the root") };
    assert!(err.contains("not below the managed root"), "{err}");
    // Below the root by prefix, outside it by `..`: refused by name, nothing looked at.
    let sneaky = format!("{}/../../../etc", root.display());
    let Reply::Error(err) = explain(state, &sneaky) else { panic!("'..' in an absolute path explained") };
    assert!(err.contains("\"..\" component"), "{err}");
    let Reply::Ok(other) = explain(state, "other") else { panic!("unmanaged cgroup") };
    assert!(!other.managed && other.unmanaged_because.as_deref().unwrap().contains("no tier"), "{other:?}");
    // A client that sends garbage or nothing gets an error and never stalls the daemon.
    {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.write_all(&[b'x'; 5000]).unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.contains("longer than 4096"), "{r}");
        let _idle = std::os::unix::net::UnixStream::connect(&sock).unwrap(); // never writes
                                                                             // One that trickles a byte at a time, each just inside a per-read timeout, is cut
                                                                             // at the exchange's deadline: the next client is answered.
        let mut slow = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        let trickle = std::thread::spawn(move || {
            let _ = slow.set_nonblocking(false);
            (0..60)
                .take_while(|_| {
                    std::thread::sleep(Duration::from_millis(100));
                    slow.write_all(b" ").is_ok()
                })
                .count()
        });
        std::thread::sleep(Duration::from_millis(50));
        let Reply::Ok(after) = explain(state, "low1") else { panic!("explain after a slow client") };
        assert!(after.managed);
        let sent = trickle.join().unwrap();
        assert!(sent < 60, "the slow client was cut off after {sent} bytes, not served for as long as it trickled");
    }

    // An OOM kill in low1 (its memory.events count): one typed event, counted by tier.
    std::fs::write(root.join("low1/memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
        .unwrap();
    let kill = poll_for("the oom_kill event", Duration::from_secs(3), || {
        f.events().into_iter().find_map(|e| match e {
            Event::OomKill(k) => Some(k),
            _ => None,
        })
    });
    assert_eq!((kill.cgroup.as_str(), kill.tier.as_deref()), ("low1", Some("batch")));
    assert_eq!(kill.peak_bytes, Some(301 * MIB));
    assert_eq!(kill.holders[0].cgroup, "low1", "largest holder first: {:?}", kill.holders);
    assert_eq!(kill.limits.root_max, Some(memqos_policy::Limit::Bytes(512 * MIB)));
    let snap = poll_for("oom kills in status", Duration::from_secs(3), || {
        f.status().filter(|s| !s.oom_kills_by_tier.is_empty())
    });
    assert_eq!(snap.oom_kills_by_tier.get("batch"), Some(&1));
    assert!(status::render(&snap, true).contains("OOM kills since start: batch 1"));

    // 1. A config with an error is rejected whole; the old one keeps running.
    f.set("tier.0.match", vec!["high*", "low1"]);
    f.set("tier.1.protect", "sometimes");
    unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
    let error = poll_for("reload_rejected", Duration::from_secs(5), || {
        f.events().into_iter().find_map(|e| match e {
            Event::ReloadRejected { error, .. } => Some(error),
            _ => None,
        })
    });
    assert!(error.contains("protect") && error.contains("memqos.toml"), "names the field and file: {error}");
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(f.knob("low1", "memory.high"), "max", "still throttled under the old config");
    let Reply::Ok(e) = explain(state, "low1") else { panic!() };
    assert_eq!(e.tier.unwrap().name, "batch", "old tiers still run");

    // 2. A valid config whose restores cannot all be written is rejected whole: low1's
    // memory.high is made a symlink (memqos never writes through one; its value still reads).
    let throttled_now = f.knob("low1", "memory.high");
    let real = root.join("low1/memory.high.real");
    std::fs::write(&real, &throttled_now).unwrap();
    std::fs::remove_file(root.join("low1/memory.high")).unwrap();
    std::os::unix::fs::symlink(&real, root.join("low1/memory.high")).unwrap();
    f.set("tier.1.protect", "none");
    daemon.handle().request_reload();
    let error = poll_for("the reload rejected for its failed restore", Duration::from_secs(5), || {
        f.events().into_iter().find_map(|e| match e {
            Event::ReloadRejected { error, .. } if error.contains("could not all be put back") => Some(error),
            _ => None,
        })
    });
    assert!(error.contains("low1/memory.high"), "{error}");
    let Reply::Ok(e) = explain(state, "low1") else { panic!() };
    assert_eq!(e.tier.unwrap().name, "batch", "the old config runs on, whole");
    std::fs::remove_file(root.join("low1/memory.high")).unwrap();
    std::fs::rename(&real, root.join("low1/memory.high")).unwrap();

    // 3. The same config once the knob can be written: low1 moves to the protected tier and
    // its throttle is restored at once.
    daemon.handle().request_reload();
    let (moved, restored) = poll_for("reloaded", Duration::from_secs(5), || {
        f.events().into_iter().find_map(|e| match e {
            Event::Reloaded { moved, restored, .. } => Some((moved, restored)),
            _ => None,
        })
    });
    assert_eq!(restored, 1, "low1's memory.high");
    let m = moved.iter().find(|m| m.cgroup == "low1").expect("low1 moved");
    assert_eq!((m.from.as_deref(), m.to.as_deref()), (Some("batch"), Some("critical")));
    assert!(!moved.iter().any(|m| m.cgroup == "high"), "high kept its tier: {moved:?}");
    assert_eq!(f.knob("low1", "memory.high"), "max", "restored through the journal");
    let e = poll_for("explain under the new tiers", Duration::from_secs(5), || match explain(state, "low1") {
        Reply::Ok(e) if e.tier.as_ref().is_some_and(|t| t.name == "critical") => Some(e),
        _ => None,
    });
    assert_eq!(e.tier.unwrap().rule.as_deref(), Some("low1"));

    daemon.stop().expect("daemon run");
    assert!(!sock.exists(), "socket removed at stop");
    assert_eq!(f.knob("low1", "memory.high"), "max");
    assert_eq!(f.knob("low1", "memory.low"), "0", "protection written under the new tier restored at stop");
}
