//! The BPF signal source against real kernels (6.12: vmscan tracepoints + fentry; 7.x:
//! memcg tracepoints): it fires when a protected cgroup starts reclaiming, the daemon
//! throttles the lower tier for that reason, and nothing stays attached after the daemon
//! stops; when BPF is off (config) or refused (no CAP_BPF), the daemon says so in one line
//! and reacts on PSI instead.
//!
//! Scenario: parent memory.high 128 MiB, `low` (throttle tier) holds 96 MiB of anonymous
//! memory, then `prot` (protected) allocates 64 MiB and pushes the parent over its high:
//! the kernel reclaims and penalises `prot`'s task on its way back to user mode. No swap,
//! so nothing can be reclaimed and `prot` keeps stalling (PSI sees that too).

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_lab::configs::DaemonConfig;
use memqos_schema::events::{Event, WriteEvent};
use memqos_schema::protection::Finding;
use memqos_schema::KnobFile;
use memqos_schema::{Reason, Trigger};
use memqos_vmtest::guest_test;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STATE: &str = "/run/memqos-bpf-test";

/// Program names as bpftool shows them (the kernel keeps 15 characters).
const OUR_PROGRAMS: &[&str] = &[
    "memcg_reclaim_b",
    "direct_reclaim_",
    "handle_over_hig",
    "count_memcg_eve",
    "mod_memcg_lruve",
    "lru_shrink_inac",
    "handle_mm_fault",
];

fn config(psi: bool, bpf: bool) -> DaemonConfig {
    DaemonConfig::named("bpf-source.toml").set("signals.psi", psi).set("signals.bpf", bpf)
}

struct Setup {
    parent: Cgroup,
    prot: Cgroup,
    low: Cgroup,
    holder: Child,
}

fn setup() -> Setup {
    let parent = make_cgroup("bpfq");
    enable_memory(&parent);
    set(&parent, "memory.high", 128 * MIB);
    let (prot, low) = (parent.child("prot"), parent.child("low"));
    prot.create().unwrap();
    low.create().unwrap();
    let holder = spawn_workload(&low, "alloc", &["--mb", "96", "--hold-ms", "120000"]);
    let t0 = Instant::now();
    while low.memory_current().unwrap() < 90 * MIB {
        assert!(t0.elapsed() < Duration::from_secs(60), "low did not reach 90 MiB");
        std::thread::sleep(Duration::from_millis(50));
    }
    Setup { parent, prot, low, holder }
}

impl Setup {
    fn teardown(mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        for k in [&self.prot, &self.low] {
            let _ = k.remove();
        }
        let _ = self.parent.remove();
    }
}

/// Starts the daemon (optionally through a wrapper such as setpriv) and waits until its
/// first status file exists.
fn start_daemon(cfg: &DaemonConfig, wrapper: &[&str]) -> Child {
    let _ = std::fs::remove_dir_all(STATE);
    std::fs::create_dir_all(STATE).unwrap();
    cfg.write(std::path::Path::new("/run/memqos-bpf-test.toml")).unwrap();
    let log = std::fs::File::create("/run/memqos-bpf-test.log").unwrap();
    let argv: Vec<&str> = wrapper
        .iter()
        .copied()
        .chain([memqos_bin(), "daemon", "--config", "/run/memqos-bpf-test.toml", "--no-guardian"])
        .collect();
    let child = Command::new(argv[0]).args(&argv[1..]).stdout(log).stderr(Stdio::inherit()).spawn().unwrap();
    let t0 = Instant::now();
    while !Path::new(STATE).join(memqos_schema::state::STATUS_FILE).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "daemon did not start; log:\n{}",
            std::fs::read_to_string("/run/memqos-bpf-test.log").unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn stop_daemon(mut d: Child) {
    unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
    assert!(wait_timeout(&mut d, Duration::from_secs(30)).is_some(), "daemon did not stop on SIGTERM");
}

fn log_events() -> Vec<Event> {
    let text = std::fs::read_to_string(Path::new(STATE).join(memqos_schema::state::EVENTS_FILE)).unwrap_or_default();
    memqos_schema::events::parse_events(&text)
}

/// What `pick` takes from the first event of the log it takes anything from.
fn first_event<T>(pick: impl FnMut(Event) -> Option<T>) -> Option<T> {
    log_events().into_iter().find_map(pick)
}

/// Waits for the daemon's first memory.high write on `low`.
fn wait_low_write(limit: Duration) -> Option<WriteEvent> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(w) = first_event(|e| match e {
            Event::Write(w) if w.cgroup == "low" && w.knob() == Some(KnobFile::MemoryHigh) => Some(w),
            _ => None,
        }) {
            return Some(w);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn our_bpf_objects() -> Vec<String> {
    let mut found = Vec::new();
    for what in ["prog", "link"] {
        let out = Command::new("bpftool").args([what, "show"]).output().expect("bpftool");
        assert!(out.status.success(), "bpftool {what} show: {}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if OUR_PROGRAMS.iter().any(|p| line.contains(p)) {
                found.push(format!("{what}: {line}"));
            }
        }
    }
    found
}

guest_test!(bpf_source_fires_on_reclaim_and_detaches, |g| g, {
    let s = setup();
    assert!(our_bpf_objects().is_empty(), "programs attached before the daemon: {:?}", our_bpf_objects());
    let daemon = start_daemon(&config(false, true), &[]);
    let started = first_event(|e| match e {
        Event::BpfSource { hooks } => Some(hooks),
        _ => None,
    })
    .expect("no bpf_source line: BPF did not start");
    println!("RESULT bpf hooks: {:?}", started.attached);
    assert!(started.attach_failed.is_empty(), "{started:?}");
    let attached = our_bpf_objects();
    assert!(!attached.is_empty(), "bpftool shows none of our programs while the daemon runs");
    std::thread::sleep(Duration::from_millis(1500)); // a tick to register the threshold

    let t0 = Instant::now();
    let mut prot = spawn_workload(&s.prot, "alloc", &["--mb", "64", "--hold-ms", "30000"]);
    let write = wait_low_write(Duration::from_secs(30));
    let waited = t0.elapsed();
    let _ = prot.kill();
    let _ = prot.wait();
    let write = write.unwrap_or_else(|| panic!("no memory.high write on low within 30 s; log:\n{:#?}", log_events()));
    println!("RESULT first write {:.0} ms after prot started: {}", waited.as_secs_f64() * 1e3, write.why);
    // The typed trigger, not the text: the text names the counter that crossed.
    assert!(
        matches!(&write.reason, Some(Reason::ProtectedPressure { trigger: Trigger::Bpf { counter: Some(_), .. }, .. })),
        "write was not for the BPF source, or the counter that crossed was lost: {write:?}"
    );
    let crossing = log_events()
        .into_iter()
        .find(|e| matches!(e, Event::Bpf { cgroup, .. } if cgroup == "prot"))
        .expect("no bpf crossing logged for prot");
    println!("RESULT first crossing: {crossing:?}");

    stop_daemon(daemon);
    let summary = first_event(|e| match e {
        Event::BpfSummary { bpf } => Some(bpf),
        _ => None,
    })
    .expect("no bpf_summary at stop");
    let c = summary.counters.get("prot").expect("prot counters");
    println!("RESULT prot counters {c:?}, stats {:?}", summary.stats);
    // By memqos_bpf::pressure::Kind: reclaim, over high, scanned, faults, major faults.
    assert!(c.total[0] + c.total[1] > 0, "no reclaim or over-high counted for prot: {c:?}");
    assert!(c.total[3] > 0, "no page faults counted for prot: {c:?}");
    // The kernel frees a program after its last link and fd are gone, deferred (RCU, a
    // workqueue): under TCG it can still be listed a moment after the daemon exited. What
    // is still there after 5 s is held by something else (a pin, a leaked link).
    let t0 = Instant::now();
    let mut left = our_bpf_objects();
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        left = our_bpf_objects();
    }
    assert!(left.is_empty(), "left attached 5 s after the daemon stopped: {left:?}");
    assert_eq!(s.low.limit("memory.high").unwrap(), Limit::Max, "low's memory.high not restored");
    s.teardown();
});

guest_test!(bpf_fallback_when_disabled_or_refused, |g| g, {
    let s = setup();
    // 1. Disabled in the config: nothing loads, nothing is said about BPF.
    let daemon = start_daemon(&config(true, false), &[]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(our_bpf_objects().is_empty(), "bpf = false but programs are attached");
    stop_daemon(daemon);
    assert!(!log_events().iter().any(|e| match e {
        Event::BpfSource { .. } => true,
        Event::Degraded { message } | Event::ProtectionVoid(Finding { message, .. }) => message.contains("BPF"),
        _ => false,
    }));

    // 2. Refused by the kernel: the daemon runs without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN.
    // It must log one line saying why and still react, on PSI.
    let daemon = start_daemon(
        &config(true, true),
        &["setpriv", "--bounding-set", "-bpf,-perfmon,-sys_admin", "--inh-caps", "-bpf,-perfmon,-sys_admin", "--"],
    );
    let degraded: Vec<String> = log_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Degraded { message } => Some(message),
            _ => None,
        })
        .collect();
    let bpf_lines: Vec<&String> = degraded.iter().filter(|m| m.contains("BPF")).collect();
    println!("RESULT fallback line: {bpf_lines:?}");
    assert_eq!(bpf_lines.len(), 1, "want exactly one line about BPF: {degraded:?}");
    assert!(
        bpf_lines[0].starts_with("BPF pressure source off:") && bpf_lines[0].contains("continuing on PSI"),
        "{}",
        bpf_lines[0]
    );
    assert!(our_bpf_objects().is_empty(), "programs attached although the load was refused");
    std::thread::sleep(Duration::from_millis(1500));
    let mut prot = spawn_workload(&s.prot, "alloc", &["--mb", "64", "--hold-ms", "30000"]);
    let write = wait_low_write(Duration::from_secs(30));
    let _ = prot.kill();
    let _ = prot.wait();
    let write =
        write.unwrap_or_else(|| panic!("PSI fallback did not throttle low within 30 s; log:\n{:#?}", log_events()));
    println!("RESULT fallback write: {}", write.why);
    assert!(!write.why.contains("bpf"), "{write:?}");
    stop_daemon(daemon);
    assert_eq!(s.low.limit("memory.high").unwrap(), Limit::Max, "low's memory.high not restored");
    s.teardown();
});
