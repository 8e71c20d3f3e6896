//! memqos-stats against live kernels: the text backend against the kernel's own files, and
//! (on 7.x) the BPF backend against the text backend, field by field, on a quiesced tree.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_stats::{BackendChoice, BpfBackend, CgroupStats, Error, Snapshot, StatsSource, TextBackend, Walker};
use memqos_vmtest::guest_test;
use std::os::unix::fs::MetadataExt;
use std::process::Child;
use std::time::{Duration, Instant};

/// st/{a/{x,y},b}: memory enabled everywhere, limits set, 24 MiB anon held in a/x and
/// 8 MiB in b, then left alone (the workloads sleep) so counters stop moving.
fn quiet_tree(name: &str) -> (Cgroup, Vec<Child>) {
    let root = make_cgroup(name);
    enable_memory(&root);
    let a = root.child("a");
    a.create().unwrap();
    enable_memory(&a);
    for cg in [a.child("x"), a.child("y"), root.child("b")] {
        cg.create().unwrap();
    }
    set(&a, "memory.high", 512 * MIB);
    set(&root.child("b"), "memory.low", 16 * MIB);
    set(&a.child("x"), "memory.max", 256 * MIB);
    let kids = vec![
        spawn_workload(&a.child("x"), "alloc", &["--mb", "24", "--hold-ms", "120000"]),
        spawn_workload(&root.child("b"), "alloc", &["--mb", "8", "--hold-ms", "120000"]),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.child("x").memory_current().unwrap() < 24 * MIB || root.child("b").memory_current().unwrap() < 8 * MIB {
        assert!(Instant::now() < deadline, "workloads did not reach their size in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let the kernel's periodic stat flush (every 2 s) catch up with the allocation.
    std::thread::sleep(Duration::from_secs(3));
    (root, kids)
}

fn stop(kids: Vec<Child>) {
    for mut k in kids {
        let _ = k.kill();
        let _ = k.wait();
    }
}

// The text backend reports exactly what the kernel's files say: tree shape and ids from the
// directory tree, limits and events equal to fresh reads, every memory.stat key present
// with the value a fresh read gives, and the workloads' memory where it was allocated.
guest_test!(text_snapshot_matches_the_live_kernel, |g| g, {
    let (root, kids) = quiet_tree("stats-text");
    let mut backend = TextBackend::open(root.path()).unwrap();
    let snap = backend.snapshot().unwrap();

    let mut want = vec![String::new()];
    want.extend(
        root.descendants()
            .unwrap()
            .iter()
            .map(|c| c.path().strip_prefix(root.path()).unwrap().to_string_lossy().into_owned()),
    );
    let got: Vec<_> = snap.cgroups.iter().map(|c| c.path.clone()).collect();
    assert_eq!(got, want, "pre-order tree");

    let (mut exact, mut close) = (0, 0);
    for cg in &snap.cgroups {
        let live = Cgroup::new(root.path().join(&cg.path));
        assert_eq!(cg.id, std::fs::metadata(live.path()).unwrap().ino(), "{}: id is the inode", cg.path);
        assert_eq!(cg.events, Some(live.memory_events().unwrap()), "{}: memory.events", cg.path);
        for (file, got) in
            [("memory.max", cg.max), ("memory.high", cg.high), ("memory.low", cg.low), ("memory.min", cg.min)]
        {
            assert_eq!(got, Some(live.limit(file).unwrap()), "{}: {file}", cg.path);
        }
        let reference = live.memory_stat().unwrap();
        let keys: Vec<_> = reference.iter().map(|(k, _)| k.as_str()).collect();
        let mine: Vec<_> = snap.keys.iter().filter(|k| snap.stat(cg, k).is_some()).map(|k| &**k).collect();
        assert_eq!(mine, keys, "{}: memory.stat keys, in kernel order", cg.path);
        for (k, v) in &reference {
            let got = snap.stat(cg, k).unwrap();
            // A quiesced cgroup's counters do not move, except the few the kernel updates on
            // its own: see stat_tolerance.
            assert!(got.abs_diff(*v) <= stat_tolerance(k), "{}: {k} = {got}, a fresh read says {v}", cg.path);
            if got == *v {
                exact += 1;
            } else {
                close += 1;
            }
        }
        let psi = cg.pressure.expect("memory.pressure");
        assert!(
            psi.some.total_us <= live.memory_pressure().unwrap().some.total_us,
            "{}: PSI total only grows",
            cg.path
        );
    }
    let x = snap.get("a/x").unwrap();
    let anon = snap.stat(x, "anon").unwrap();
    assert!((24 * MIB..=26 * MIB).contains(&anon), "a/x anon {anon} should be the 24 MiB workload");
    assert!(snap.stat(snap.get("a").unwrap(), "anon").unwrap() >= anon, "a's anon includes a/x's");
    assert_eq!(x.max, Some(Limit::Bytes(256 * MIB)));
    assert!(x.current.unwrap() >= 24 * MIB && x.peak.unwrap() >= x.current.unwrap());
    let root_stats = &snap.cgroups[0];
    assert!(root_stats.current.is_some(), "a non-root snapshot root has memory.current");
    println!(
        "RESULT text backend: {} cgroups, {} keys: {exact} memory.stat values equal to a fresh read, {close} within the kernel-internal tolerance",
        snap.cgroups.len(),
        snap.keys.len()
    );

    // The hierarchy root: memory.stat and memory.pressure only.
    let full = TextBackend::open(std::path::Path::new("/sys/fs/cgroup")).unwrap().snapshot().unwrap();
    let top = &full.cgroups[0];
    assert!(
        top.current.is_none() && top.max.is_none() && top.stat.iter().any(|v| v.is_some()) && top.pressure.is_some()
    );
    assert!(full.get("stats-text/a/x").is_some());
    stop(kids);
});

/// Counters a quiesced cgroup may still see move between two reads: kernel-internal
/// allocations charged to it (slab, per-cpu) and the vmstat-driven LRU moves. Everything
/// else must be equal.
fn stat_tolerance(key: &str) -> u64 {
    match key {
        "kernel" | "slab" | "slab_reclaimable" | "slab_unreclaimable" | "percpu" | "sock" => 64 << 10,
        _ => 0,
    }
}

// On 7.x: the BPF backend returns the same snapshot as the text backend, field by field.
// On 6.12: it refuses with a message naming the missing kfuncs, and `auto` falls back.
guest_test!(bpf_snapshot_equals_text_snapshot, |g| g, {
    let (root, kids) = quiet_tree("stats-bpf");
    let bpf = BpfBackend::open(root.path());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if release.starts_with("6.") {
        let Err(Error::BpfUnavailable(why)) = bpf else {
            panic!("6.12 has no memcg kfuncs, BPF backend opened anyway")
        };
        assert!(why.contains("memcg BPF kfuncs"), "{why}");
        let mut notes = Vec::new();
        let mut auto = memqos_stats::open(root.path(), BackendChoice::Auto, &mut |m| notes.push(m.to_owned())).unwrap();
        assert_eq!(auto.name(), "text");
        assert_eq!(notes.len(), 1, "one message: {notes:?}");
        assert!(auto.snapshot().unwrap().cgroups.len() == 5);
        assert_eq!(cli_json(&root)["backend"], "text");
        println!("RESULT 6.12: BPF backend unavailable ({why}); auto uses text");
        stop(kids);
        return;
    }
    let mut text = TextBackend::open(root.path()).unwrap();
    let keys = text.snapshot().unwrap().keys;
    println!("RESULT memory.stat keys on {}: {}", release.trim(), keys.join(" "));
    drop(bpf);
    for walker in [Walker::Syscall, Walker::Iterator] {
        compare_bpf_with_text(&root, &mut text, walker);
    }
    assert_eq!(cli_json(&root)["backend"], "bpf");
    stop(kids);
});

fn compare_bpf_with_text(root: &Cgroup, text: &mut TextBackend, walker: Walker) {
    let mut bpf =
        BpfBackend::open_with(root.path(), Some(walker)).unwrap_or_else(|e| panic!("BPF backend ({walker:?}): {e}"));
    // text, bpf, text: a BPF value must equal the text value or lie between the two text
    // reads (for the few counters the kernel moves by itself on a quiet cgroup).
    let t1 = text.snapshot().unwrap();
    let b = bpf.snapshot().unwrap();
    let t2 = text.snapshot().unwrap();
    assert_eq!(b.keys, t1.keys, "same memory.stat keys in the same order");
    assert_eq!(b.cgroups.len(), t1.cgroups.len());
    let mut exact = 0;
    let mut between = 0;
    for ((c1, cb), c2) in t1.cgroups.iter().zip(&b.cgroups).zip(&t2.cgroups) {
        assert_eq!((&cb.path, cb.id, cb.depth), (&c1.path, c1.id, c1.depth));
        assert_eq!((cb.max, cb.high, cb.low, cb.min), (c1.max, c1.high, c1.low, c1.min), "{}: limits", cb.path);
        assert_eq!(cb.events, c1.events, "{}: memory.events", cb.path);
        assert_eq!(cb.peak, c1.peak, "{}: memory.peak", cb.path);
        assert!(
            within(cb.current, c1.current, c2.current, 256 << 10),
            "{}: current {:?} vs text {:?}/{:?}",
            cb.path,
            cb.current,
            c1.current,
            c2.current
        );
        for (i, key) in b.keys.iter().enumerate() {
            let (v1, vb, v2) = (c1.stat[i], cb.stat[i], c2.stat[i]);
            if vb == v1 {
                exact += 1;
            } else {
                assert!(
                    within(vb, v1, v2, stat_tolerance(key)),
                    "{}: {key}: bpf {vb:?}, text {v1:?} then {v2:?}",
                    cb.path
                );
                between += 1;
            }
        }
        // PSI: the kernel aggregates per-CPU stall time when memory.pressure is read, and
        // every 2 s otherwise; BPF reads the last aggregate, so it may trail the text.
        let (p1, pb, p2) = (c1.pressure.unwrap(), cb.pressure.unwrap(), c2.pressure.unwrap());
        assert!(
            pb.some.total_us <= p2.some.total_us,
            "{}: PSI some total {} > later text {}",
            cb.path,
            pb.some.total_us,
            p2.some.total_us
        );
        assert!(
            pb.some.total_us + 2_000_000 >= p1.some.total_us,
            "{}: PSI some total trails by more than 2 s",
            cb.path
        );
    }
    println!(
        "RESULT 7.x BPF ({}) vs text: {} cgroups x {} keys: {exact} equal, {between} between two text reads",
        walker.as_str(),
        b.cgroups.len(),
        b.keys.len()
    );
}

/// `memqos stat --tree --json` on the live tree: the backend `auto` picks, and a/x's memory.
fn cli_json(root: &Cgroup) -> serde_json::Value {
    let out = std::process::Command::new(memqos_bin())
        .args(["stat", "--tree", "--json", "--backend", "auto"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "memqos stat: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let x = v["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "a/x")
        .expect("a/x in memqos stat --json")
        .clone();
    assert!(x["stat"]["anon"].as_u64().unwrap() >= 24 * MIB, "{x}");
    assert_eq!(x["max"], 256 * MIB);
    v
}

fn within(v: Option<u64>, a: Option<u64>, b: Option<u64>, slack: u64) -> bool {
    match (v, a, b) {
        (Some(v), Some(a), Some(b)) => v + slack >= a.min(b) && v <= a.max(b) + slack,
        (None, None, None) => true,
        _ => false,
    }
}

// Trees larger than one run of the iterator (2048 records): every cgroup is reported once,
// in the same order as the text walk. 6.12 has no memcg kfuncs: there the test asserts that
// the BPF backend says so (BpfUnavailable, which `auto` turns into the text backend).
guest_test!(bpf_snapshot_of_a_tree_larger_than_one_run, |g| g.memory_mb(3072), {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if release.starts_with("6.") {
        let refused = memqos_stats::BpfBackend::open(std::path::Path::new("/sys/fs/cgroup"));
        assert!(
            matches!(refused, Err(memqos_stats::Error::BpfUnavailable(_))),
            "{release}: the BPF backend must refuse with BpfUnavailable, got {:?}",
            refused.as_ref().err()
        );
        println!("RESULT {}: no memcg kfuncs, BPF backend refused as expected", release.trim());
        return;
    }
    let root = make_cgroup("stats-big");
    enable_memory(&root);
    let start = Instant::now();
    for i in 0..50 {
        let mid = root.child(&format!("m{i:02}"));
        mid.create().unwrap();
        enable_memory(&mid);
        for j in 0..49 {
            mid.child(&format!("c{j:02}")).create().unwrap();
        }
    }
    let created = start.elapsed();
    let mut text = TextBackend::open(root.path()).unwrap();
    for walker in [Walker::Syscall, Walker::Iterator] {
        let mut bpf = BpfBackend::open_with(root.path(), Some(walker)).unwrap();
        let mut b = Snapshot::default();
        bpf.refresh(&mut b).unwrap(); // maps ids to paths (a directory walk)
        let t0 = Instant::now();
        bpf.refresh(&mut b).unwrap();
        let bpf_time = t0.elapsed();
        let t = text.snapshot().unwrap();
        assert_eq!(b.cgroups.len(), 1 + 50 + 50 * 49);
        let ids = |s: &Snapshot| s.cgroups.iter().map(|c| (c.path.clone(), c.id)).collect::<Vec<_>>();
        assert_eq!(ids(&b), ids(&t), "same cgroups, same order");
        let limits = |c: &CgroupStats| (c.max, c.high, c.low, c.min);
        assert!(b.cgroups.iter().zip(&t.cgroups).all(|(x, y)| limits(x) == limits(y)));
        println!(
            "RESULT {} cgroups (created in {:.1} s): BPF snapshot ({}) {:.1} ms in 2 runs",
            b.cgroups.len(),
            created.as_secs_f64(),
            walker.as_str(),
            bpf_time.as_secs_f64() * 1e3
        );
    }
});
