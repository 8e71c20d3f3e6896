//! Many managed cgroups under an open-file limit that cannot be raised (a container without
//! CAP_SYS_RESOURCE): on a real host with 10,000 cgroups and a limit of 1,024 the daemon
//! exited at start-up with `writing .../status.json.tmp: Too many open files`. Its own test
//! binary, because it lowers the process's limit for good. A fake tree proves the mechanism
//! (the descriptor budget), not isolation.
//!
//! The test command runs 2,000 cgroups at a limit of 256 (the same shortfall: every file of
//! every cgroup would need 14,000 descriptors), short enough for CI; the host's own case,
//! 10,000 at 1,024, is `MEMQOS_FD_CGROUPS=10000 MEMQOS_FD_LIMIT=1024 cargo test --release -p
//! memqos-daemon --test descriptors` (minutes: a fake tree of 130,000 files).

mod common;

use common::{write_cgroup, FakeTree, MIB};
use memqos_daemon::events::{self, Event};
use memqos_daemon::status;
use std::path::{Path, PathBuf};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

fn lower_open_file_limit(to: u64) {
    let lim = libc::rlimit { rlim_cur: to, rlim_max: to };
    // SAFETY: a valid rlimit; lowering the hard limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0, "{}", std::io::Error::last_os_error());
}

#[test]
fn thousands_of_cgroups_run_at_an_open_file_limit_far_below_what_caching_them_needs() {
    let cgroups = setting("MEMQOS_FD_CGROUPS", 2_000) as usize;
    let limit = setting("MEMQOS_FD_LIMIT", 256);
    // A tree of tens of thousands of files: in memory where the host has /dev/shm.
    let tmp = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let f = FakeTree::new_in(&tmp, "fds", "headroom_guard = \"64M\"\nhold_ms = 60000\n");
    // A tick a second over the large tree; the batch tier's cpu.weight is the write that
    // every cgroup must get.
    f.set("signals.sampling_interval_ms", 1000);
    f.set("tier.1.cpu_weight", 50);
    let root = &f.root;
    // The parent within the 64M guard of its limit: the guard must still cut the largest low.
    write_cgroup(root, 1000 * MIB, &(1024 * MIB).to_string());
    write_cgroup(&root.join("high"), 100 * MIB, "max");
    for i in 0..cgroups {
        write_cgroup(&root.join(format!("low{i:05}")), if i == 7 { 300 * MIB } else { MIB }, "max");
    }
    let t0 = std::time::Instant::now();
    lower_open_file_limit(limit);
    memqos_daemon::run(f.options_for(5.0), memqos_daemon::Handle::new())
        .expect("the daemon runs its whole duration at a low open-file limit");
    eprintln!("{cgroups} cgroups at {limit} open files: the daemon ran {:?} (asked: 5 s)", t0.elapsed());
    let evs = f.events();
    let weights = evs
        .iter()
        .filter(|e| matches!(e, Event::Write(w) if w.file == "cpu.weight" && w.outcome == events::Outcome::Ok))
        .count();
    let degraded: Vec<&Event> = evs.iter().filter(|e| matches!(e, Event::Degraded { .. })).take(5).collect();
    let mut outcomes = std::collections::BTreeMap::new();
    for e in &evs {
        if let Event::Write(w) = e {
            *outcomes.entry(format!("{} {:?}", w.file, w.outcome)).or_insert(0) += 1;
        }
    }
    let kinds: std::collections::BTreeMap<String, usize> = evs.iter().fold(Default::default(), |mut m, e| {
        *m.entry(format!("{e:?}").chars().take(12).collect()).or_insert(0) += 1;
        m
    });
    eprintln!("writes: {outcomes:?}\nevents: {kinds:?}");
    assert_eq!(weights, cgroups, "every cgroup got its tier's cpu.weight; degraded: {degraded:?}");
    let cut = evs.iter().any(|e| matches!(e, Event::Write(w) if w.cgroup == "low00007" && w.file == "memory.high"));
    assert!(cut, "the guard still acts on the largest holder");
    let emfile: Vec<&Event> = evs.iter().filter(|e| format!("{e:?}").contains("Too many open files")).take(3).collect();
    assert!(emfile.is_empty(), "no EMFILE anywhere: {emfile:?}");
    assert!(status::read(&f.state).is_ok(), "status.json was written and parses");
    let budget_said =
        evs.iter().any(|e| matches!(e, Event::Degraded { message } if message.starts_with("descriptor budget")));
    assert!(budget_said, "the operator is told what the limit allows");
    assert_eq!(std::fs::read_to_string(root.join("low00007/memory.high")).unwrap().trim(), "max", "restored");
}
