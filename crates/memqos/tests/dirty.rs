//! Dirty-page isolation against real kernels: the noisy-neighbour reproducer
//! (crates/lab/src/dirty/, docs/dirty-isolation.md) in short phases, once stock and once
//! with the memqos daemon enforcing the victim tier's dirty.min and the noisy tier's
//! dirty.max. The stock run must show the collapse (otherwise the scenario proves nothing);
//! the managed run must keep the victim out of balance_dirty_pages() and near its solo latency
//! (its rate is reported), keep the noisy writer
//! writing to disk, and leave memory.high as it found it.

mod common;

use common::*;
use memqos_vmtest::guest_test;
use std::process::Command;

/// Runs one policy's iteration of the experiment in this guest; returns its report.
fn run(policy: &str) -> serde_json::Value {
    let out = format!("/tmp/dirty-{policy}.json");
    let st = Command::new(lab_bin())
        .args(["experiment", "dirty-noisy-neighbour", "--policy", policy, "--runs", "1"])
        .args(["--solo-secs", "6", "--fill-secs", "4", "--contended-secs", "12", "--in-guest", &out])
        .status()
        .expect("run memqos-lab experiment");
    assert!(st.success(), "experiment ({policy}) failed: {st}");
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).expect("experiment JSON")
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_f64().unwrap_or_else(|| panic!("no number at {path:?}"))
}

fn paused(it: &serde_json::Value, who: &str) -> f64 {
    it["contended_sleepers"]["by_cgroup"][who]["pause_ms"].as_f64().unwrap_or(0.0)
}

// Alone on the host (exclusive): it asserts write latencies against the solo phase.
guest_test!(
    dirty_floor_keeps_victim_fast_next_to_noisy_writer,
    |g| g.memory_mb(2048).scratch_mb(256, Some(262_144)).exclusive(true),
    {
        let stock = run("stock");
        let managed = run("memqos");
        let s = &stock["iterations"][0];
        let m = &managed["iterations"][0];
        let retention = |it: &serde_json::Value| f(it, &["contended", "iops"]) / f(it, &["solo", "iops"]);
        let p99_ratio = |it: &serde_json::Value| f(it, &["contended", "p99_us"]) / f(it, &["solo", "p99_us"]);
        println!(
        "RESULT stock: victim {:.1} -> {:.1} IOPS ({:.2}), p99 {:.1}x, paused {:.0} ms in balance_dirty_pages; noisy to disk {:.0} KiB/s",
        f(s, &["solo", "iops"]), f(s, &["contended", "iops"]), retention(s), p99_ratio(s), paused(s, "victim"), f(s, &["noisy_disk_kib_s"])
    );
        println!(
        "RESULT memqos: victim {:.1} -> {:.1} IOPS ({:.2}), p99 {:.1}x, paused {:.0} ms; noisy to disk {:.0} KiB/s, paused {:.0} ms; daemon writes {}",
        f(m, &["solo", "iops"]), f(m, &["contended", "iops"]), retention(m), p99_ratio(m), paused(m, "victim"),
        f(m, &["noisy_disk_kib_s"]), paused(m, "noisy"), m["daemon_writes"]
    );
        // The scenario reproduces the problem: stock, the victim is paused in
        // balance_dirty_pages() because of noisy's dirty pages (at least one MAX_PAUSE in total;
        // 30 s runs measured 1.2-27 s).
        assert!(
            paused(s, "victim") >= 200.0,
            "stock: the victim was never paused in balance_dirty_pages; the test would prove nothing"
        );
        // Protection. The mechanism: the victim is not paused in balance_dirty_pages() at all
        // (one MAX_PAUSE of slack for the noisy writer's first burst before its ceiling applies).
        assert!(
            paused(m, "victim") <= 200.0,
            "memqos: the victim paused {:.0} ms in balance_dirty_pages",
            paused(m, "victim")
        );
        // The outcome, as latency: p99 within 3x solo, never below 30 ms because TCG solo p99s
        // range 0.6-9 ms and one balance_dirty_pages() pause is up to 200 ms. On 6.12 the victim
        // also has single write() stalls of up to ~32 s with no balance_dirty_pages() event at
        // all (3 of 5 iterations in docs/dirty, stock and memqos alike: ext4 on the 256 KB/s
        // disk), which memqos does not address; so it is asserted on 7.x only and reported on
        // 6.12. Retained IOPS is reported, not asserted: with the victim never paused and its
        // p99 at solo, fio's rate limiter still fell to 0.75 of solo in one CI guest (two vCPUs
        // shared by the victim, the noisy writer, writeback and the daemon under TCG), which is
        // a wall-clock ratio; the experiment (docs/dirty-isolation.md) measures it over N runs.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        if !release.starts_with("6.") {
            let p99_limit = (3.0 * f(m, &["solo", "p99_us"])).max(30_000.0);
            assert!(
                f(m, &["contended", "p99_us"]) <= p99_limit,
                "victim p99 {:.1} ms under memqos (limit {:.1} ms)",
                f(m, &["contended", "p99_us"]) / 1e3,
                p99_limit / 1e3
            );
        }
        // The contention was real: noisy was pushed against its ceiling and kept writing.
        assert!(paused(m, "noisy") > 0.0, "noisy was never throttled: it did not reach its dirty ceiling");
        // Its pages reached the disk while the victim ran: memqos caps noisy's dirty pages, it
        // does not stop its writeback. How much of the 256 KB/s disk noisy gets is a wall-clock
        // split decided by writeback and the block layer, not by memqos: in 12 s TCG windows it
        // measured 94-221 KiB/s before issue 27's refactor and 8-183 after, with no difference
        // between the two (docs/dirty/issue-27-ab), and fell to 8-15 under host load. So the
        // bandwidth is reported by the experiment over N runs, not asserted here.
        assert!(f(m, &["noisy_disk_kib_s"]) > 0.0, "none of noisy's pages reached the disk under memqos");
        assert!(m["daemon_writes"].as_u64().unwrap() >= 1, "the daemon wrote no knob");
        assert_eq!(m["noisy_high_after_stop"], "max", "memory.high not restored when the daemon stopped");
    }
);
