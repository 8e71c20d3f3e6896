//! The VM harness gives real memcg semantics: each test runs inside a guest on every kernel
//! series under test and checks a behaviour memqos relies on, in the manner of the kernel's
//! own tools/testing/selftests/cgroup/test_memcontrol.c (written fresh here).

mod common;

use common::*;
use memqos_vmtest::guest_test;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

// memory.high throttles instead of killing: a task that allocates past memory.high (no
// swap, so nothing can be reclaimed) is delayed by the over-high penalty and finishes.
guest_test!(memory_high_throttles_without_oom_kill, |g| g, {
    let cg = make_cgroup("high-test");
    set(&cg, "memory.high", 32 * MIB);
    let start = Instant::now();
    let mut child = spawn_workload(&cg, "alloc", &["--mb", "48"]);
    let status = wait_timeout(&mut child, Duration::from_secs(600)).expect("allocation never finished");
    let elapsed = start.elapsed();
    let ev = events(&cg);
    println!("memory.high=32M, 48 MiB allocated in {:.1} s, events {ev:?}", elapsed.as_secs_f64());
    assert!(status.success(), "allocation under memory.high did not finish cleanly: {status:?}");
    assert!(ev.high > 0, "memory.events high should count throttling, got {ev:?}");
    assert_eq!(ev.oom_kill, 0, "memory.high must never OOM-kill: {ev:?}");
    assert_eq!(ev.max, 0, "memory.max was never reached: {ev:?}");
});

// memory.max is a hard limit: exceeding it with unreclaimable memory invokes the OOM killer
// inside the cgroup, and memory.events records it.
guest_test!(memory_max_oom_kills_and_records_it, |g| g, {
    let cg = make_cgroup("max-test");
    set(&cg, "memory.max", 32 * MIB);
    let mut child = spawn_workload(&cg, "alloc", &["--mb", "96"]);
    let status = wait_timeout(&mut child, Duration::from_secs(300)).expect("workload neither finished nor died");
    let ev = events(&cg);
    println!("memory.max=32M, 96 MiB requested: exit {status:?}, events {ev:?}");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the OOM killer should SIGKILL the task: {status:?}");
    assert!(ev.oom_kill >= 1 && ev.oom >= 1 && ev.max >= 1, "memory.events should record the OOM kill: {ev:?}");
});

/// Two siblings hold 80 MiB of clean page cache each; a third allocates 100 MiB of anon
/// memory under a 200 MiB parent limit, so reclaim must take ~60 MiB back. The sibling
/// with protection (`file` = memory.low or memory.min, 80 MiB) keeps its cache; the
/// unprotected one gives it up.
fn protection_under_sibling_pressure(file: &'static str) {
    let parent = make_cgroup(&format!("prot-{}", file.replace('.', "-")));
    enable_memory(&parent);
    set(&parent, "memory.max", 200 * MIB);
    let protected = parent.child("protected");
    let unprotected = parent.child("unprotected");
    let hog = parent.child("hog");
    for cg in [&protected, &unprotected, &hog] {
        cg.create().unwrap();
    }
    set(&protected, file, 80 * MIB);
    for (cg, name) in [(&protected, "p"), (&unprotected, "u")] {
        let file = format!("/run/scratch/{name}-{}", parent.path().file_name().unwrap().to_string_lossy());
        let mut w = spawn_workload(cg, "pagecache", &["--mb", "80", "--file", &file]);
        assert!(wait_timeout(&mut w, Duration::from_secs(300)).unwrap().success());
    }
    let before = (protected.memory_current().unwrap(), unprotected.memory_current().unwrap());
    let mut h = spawn_workload(&hog, "alloc", &["--mb", "100", "--hold-ms", "1000"]);
    let status = wait_timeout(&mut h, Duration::from_secs(300)).expect("hog never finished");
    let after = (protected.memory_current().unwrap(), unprotected.memory_current().unwrap());
    println!(
        "{file}=80M: protected {:.0} -> {:.0} MiB, unprotected {:.0} -> {:.0} MiB, hog {status:?}, protected events {:?}",
        mib(before.0), mib(after.0), mib(before.1), mib(after.1), events(&protected)
    );
    assert!(before.0 >= 78 * MIB && before.1 >= 78 * MIB, "page cache should be charged first: {before:?}");
    assert!(status.success(), "hog should fit once unprotected cache is reclaimed: {status:?}");
    assert!(after.0 >= 72 * MIB, "{file} should keep the protected cache: {:.0} MiB left", mib(after.0));
    assert!(after.1 <= 40 * MIB, "the unprotected sibling should lose its cache: {:.0} MiB left", mib(after.1));
}

guest_test!(memory_low_protects_under_sibling_pressure, |g| g.scratch_mb(512, None), {
    protection_under_sibling_pressure("memory.low");
});

guest_test!(memory_min_protects_under_sibling_pressure, |g| g.scratch_mb(512, None), {
    protection_under_sibling_pressure("memory.min");
});
