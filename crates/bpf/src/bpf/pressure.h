/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The contract between pressure.bpf.c and crates/bpf/src/pressure.rs: kinds of pressure
 * events, the per-cgroup threshold and state records, and the ring-buffer event. The Rust
 * side mirrors these with #[repr(C)] structs whose sizes a test checks against the skeleton.
 */
#ifndef MEMQOS_PRESSURE_H
#define MEMQOS_PRESSURE_H

/* What a cgroup's tasks or pages went through. Values index the arrays below. */
enum pressure_kind {
	/* A task of the cgroup entered direct reclaim (memcg limit, memory.high or global). */
	PK_RECLAIM = 0,
	/* A task of the cgroup returned to user mode over memory.high (its own or an
	 * ancestor's) and is about to be reclaimed from and penalised. */
	PK_OVER_HIGH = 1,
	/* Pages scanned by reclaim: on the cgroup's LRUs (memcg tracepoints) or by the
	 * cgroup's tasks in direct reclaim (vmscan tracepoint, kernels without them). */
	PK_SCAN = 2,
	/* Page faults of the cgroup's tasks. */
	PK_FAULT = 3,
	/* Major page faults (read from disk or swap). */
	PK_MAJFAULT = 4,
	PK_NR = 5,
};

/* Per watched cgroup, written by the daemon: crossing `limit[k]` events of kind k within
 * one counting window emits an event. 0 = that kind never emits (it is still counted). */
struct pressure_thresholds {
	__u64 limit[PK_NR];
};

/* Per watched cgroup, written by BPF. */
struct pressure_state {
	/* Index of the current counting window (ktime / window_ns). */
	__u64 window;
	/* Events in the current window. */
	__u64 count[PK_NR];
	/* Events since the cgroup was watched. */
	__u64 total[PK_NR];
	/* ktime of the last emitted event; emits closer than min_gap_ns are suppressed. */
	__u64 last_emit_ns;
	/* Crossings suppressed by the rate limit. */
	__u64 suppressed;
};

/* One ring-buffer record: cgroup `cgroup_id` crossed its threshold of `kind` with `value`
 * events in the window, at `ktime_ns` (CLOCK_MONOTONIC, bpf_ktime_get_ns). */
struct pressure_event {
	__u64 cgroup_id;
	__u64 ktime_ns;
	__u64 value;
	__u32 kind;
	__u32 _pad;
};

/* Indexes of the global `stats` array. */
enum pressure_stat {
	PS_EMITTED = 0,
	/* The ring was full. */
	PS_RING_FULL = 1,
	/* Crossings dropped by the per-cgroup rate limit. */
	PS_RATE_LIMITED = 2,
	PS_NR = 3,
};

#endif
