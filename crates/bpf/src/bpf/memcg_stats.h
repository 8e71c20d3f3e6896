/* SPDX-License-Identifier: GPL-2.0-only */
/* The record memcg_stats.bpf.c writes per cgroup; mirrored by crates/bpf/src/memcg_stats.rs
 * through the generated skeleton types (one definition, no hand-copied layout). */
#ifndef MEMQOS_MEMCG_STATS_H
#define MEMQOS_MEMCG_STATS_H

/* Counters fetched per cgroup: memory.stat has ~60 (6.12) to ~110 (7.x) keys. */
#define MEMQOS_STATS_MAX_FETCH 192
/* Records per iterator run. 2048 x ~1.7 KiB = 3.4 MiB of .bss, under the 4 MiB a map
 * value may hold (KMALLOC_MAX_SIZE); bigger trees take several runs (see `skip`). */
#define MEMQOS_STATS_MAX_RECS 2048
/* memory.events: low high max oom oom_kill oom_group_kill */
#define MEMQOS_STATS_NR_EVENTS 6

#define MEMQOS_FETCH_PAGE_STATE 0
#define MEMQOS_FETCH_VM_EVENT 1

/* flags */
#define MEMQOS_REC_MEMCG 1 /* the cgroup has its own memcg (memory controller enabled) */
#define MEMQOS_REC_PSI 2   /* psi fields are valid */

struct memqos_memcg_rec {
	__u64 cgroup_id;
	__u32 level;
	__u32 flags;
	__u64 usage_bytes;
	/* page_counter fields, in pages; PAGE_COUNTER_MAX means "max" */
	__u64 watermark;
	__u64 max;
	__u64 high;
	__u64 low;
	__u64 min;
	__u64 events[MEMQOS_STATS_NR_EVENTS];
	/* memory PSI: total stall (ns) and the fixed-point averages (FIXED_1 = 2048) */
	__u64 psi_total_ns[2];
	__u64 psi_avg[2][3];
	__u64 values[MEMQOS_STATS_MAX_FETCH];
};

#endif
