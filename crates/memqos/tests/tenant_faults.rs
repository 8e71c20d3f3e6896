//! Faults a tenant can cause, in a real kernel (issue 53): a tenant that disables the memory
//! controller below its session makes its protected runtime lose every memory.* file at
//! once, and memqos's knobs on it become half gone (memory.low with the files, cpu.weight
//! not). A restore batch over such a cgroup used to panic the daemon on its second knob
//! (the actuator's unit test covers the batch); here the daemon keeps running, its loop
//! never restarts, and its stop puts back what is left. And `memqos explain` with a name
//! that escapes a `/` stays a name: nothing outside the root is looked at.

mod common;

use common::*;
use memqos_daemon::events::{self, Event, Outcome};
use memqos_vmtest::guest_test;
use std::process::{Command, Stdio};
use std::time::Duration;

const CONFIG: &str = r#"
cgroup_root = "/sys/fs/cgroup/tq"
state_dir = "/run/memqos-tq"
[signals]
sampling_interval_ms = 200
calm_interval_ms = 500
[[tier]]
name = "runtime"
match = ["*/runtime"]
protect = "low"
cpu_weight = 300
[[tier]]
name = "tool"
match = ["*/tool*"]
throttle = true
"#;

fn read(cg: &memqos_cgroupfs::Cgroup, file: &str) -> String {
    std::fs::read_to_string(cg.path().join(file)).map(|s| s.trim().to_owned()).unwrap_or_default()
}

guest_test!(a_tenant_disabling_its_memory_controller_does_not_stop_the_daemon, |g| g.memory_mb(1024), {
    std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+cpu +memory").unwrap();
    let root = make_cgroup("tq");
    std::fs::write(root.path().join("cgroup.subtree_control"), "+cpu +memory").unwrap();
    let session = make_cgroup("tq/s1");
    std::fs::write(session.path().join("cgroup.subtree_control"), "+cpu +memory").unwrap();
    let runtime = make_cgroup("tq/s1/runtime");
    let mut holder = spawn_workload(&runtime, "alloc", &["--mb", "48", "--hold-ms", "600000"]);
    std::fs::write("/run/memqos-tq.toml", CONFIG).unwrap();
    let mut daemon = Command::new(memqos_bin())
        .args(["daemon", "--config", "/run/memqos-tq.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let state = std::path::Path::new("/run/memqos-tq");
    poll("the runtime protected and weighted", Duration::from_secs(60), || {
        (read(&runtime, "memory.low") != "0" && read(&runtime, "cpu.weight") == "300").then_some(())
    });

    // The tenant: no memory controller below its session any more.
    std::fs::write(session.path().join("cgroup.subtree_control"), "-memory").unwrap();
    assert!(!runtime.path().join("memory.low").exists(), "the kernel removed the memory files");
    let evs = || -> Vec<Event> { events::read(state).into_iter().map(|l| l.event).collect() };
    // Whatever the daemon makes of the runtime now (left unmanaged, or dropped and its knobs
    // put back: a batch whose memory.low is gone and whose cpu.weight is not), it keeps
    // running, its loop completes iterations and never restarts.
    std::thread::sleep(Duration::from_secs(5));
    let restores: Vec<(String, Outcome)> = evs()
        .into_iter()
        .filter_map(|e| match e {
            Event::Write(w) if w.cgroup == "s1/runtime" => Some((w.file, w.outcome)),
            _ => None,
        })
        .collect();
    println!("RESULT writes to the runtime: {restores:?}; cpu.weight now {}", read(&runtime, "cpu.weight"));
    assert!(daemon.try_wait().unwrap().is_none(), "the daemon is still running");
    // Dropped, said, and what is left of its knobs put back at once (not only at stop).
    assert!(restores.iter().any(|(f, o)| f == "cpu.weight" && *o == Outcome::Ok), "{restores:?}");
    assert_eq!(read(&runtime, "cpu.weight"), "100", "cpu.weight put back while running");
    let said = evs().into_iter().any(|e| matches!(e, Event::Degraded { message } if message.contains("s1/runtime") && message.contains("not managed")));
    assert!(said, "the drop is said");
    let live = Command::new(memqos_bin())
        .args(["status", "--state-dir", "/run/memqos-tq", "--live-within", "10"])
        .output()
        .unwrap();
    assert!(live.status.success(), "{}", String::from_utf8_lossy(&live.stdout));
    let status =
        Command::new(memqos_bin()).args(["status", "--state-dir", "/run/memqos-tq", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["loop_restarts"], 0, "{status}");
    assert!(!evs().iter().any(|e| matches!(e, Event::LoopRestarted { .. })));

    // A name that escapes '/' is one (nonexistent) cgroup name, never a path out of the root.
    let out = Command::new(memqos_bin())
        .args(["explain", r"s1\x2f..\x2f..\x2f..\x2fetc", "--state-dir", "/run/memqos-tq"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("RESULT explain of an escaped traversal: {text}");
    assert!(!text.contains("passwd") && !text.contains("/etc"), "{text}");

    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(wait_timeout(&mut daemon, Duration::from_secs(30)).is_some_and(|s| s.success()), "daemon stop");
    // The stop's restore reaches what is left of the runtime's knobs.
    assert_eq!(read(&runtime, "cpu.weight"), "100", "cpu.weight put back at stop");
    let _ = holder.kill();
    let _ = holder.wait();
    for cg in [&runtime, &session, &root] {
        let _ = cg.remove();
    }
});
