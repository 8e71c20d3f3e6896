/* SPDX-License-Identifier: GPL-2.0-only */
/* What both memcg_stats programs share: the memcg kfuncs, the configuration and result
 * globals, and the per-cgroup record fill. Included by memcg_stats.bpf.c (cgroup iterator)
 * and memcg_stats_run.bpf.c (BPF_PROG_TYPE_SYSCALL, run with BPF_PROG_TEST_RUN). */
#ifndef MEMQOS_MEMCG_STATS_COMMON_BPF_H
#define MEMQOS_MEMCG_STATS_COMMON_BPF_H

extern struct mem_cgroup *bpf_get_mem_cgroup(struct cgroup_subsys_state *css) __weak __ksym;
extern void bpf_put_mem_cgroup(struct mem_cgroup *memcg) __weak __ksym;
extern unsigned long bpf_mem_cgroup_usage(struct mem_cgroup *memcg) __weak __ksym;
extern unsigned long bpf_mem_cgroup_page_state(struct mem_cgroup *memcg, int idx) __weak __ksym;
extern unsigned long bpf_mem_cgroup_vm_events(struct mem_cgroup *memcg, enum vm_event_item event) __weak __ksym;
extern unsigned long bpf_mem_cgroup_memory_events(struct mem_cgroup *memcg, enum memcg_memory_event event) __weak __ksym;
extern void bpf_mem_cgroup_flush_stats(struct mem_cgroup *memcg) __weak __ksym;

/* What to fetch, set before load. */
const volatile __u32 nr_fetch = 0;
const volatile __u32 fetch_idx[MEMQOS_STATS_MAX_FETCH] = {};
const volatile __u8 fetch_kind[MEMQOS_STATS_MAX_FETCH] = {};

/* Per run, written by user space through the mmapped .bss before each read(). */
__u32 skip = 0;         /* records already collected by earlier runs of this snapshot */
__u32 flush_pending = 0; /* flush the subtree's stats at the first cgroup of this run */

/* Results. */
__u32 nr_seen = 0;      /* cgroups walked this run (may exceed MEMQOS_STATS_MAX_RECS) */
__u32 nr_written = 0;
struct memqos_memcg_rec recs[MEMQOS_STATS_MAX_RECS] = {};

/* struct psi_group has u64 total[NR_PSI_AGGREGATORS][NR_PSI_STATES - 1] and unsigned long
 * avg[NR_PSI_STATES - 1][3]; some BTF shows them flattened (pahole versions differ), and
 * CO-RE does not match a 2-D array against a 1-D one. Only the offsets are used. */
struct psi_group___nested {
	u64 total[2][6];
	unsigned long avg[6][3];
} __attribute__((preserve_access_index));

struct psi_group___flat {
	u64 total[12];
	unsigned long avg[18];
} __attribute__((preserve_access_index));

static __always_inline void read_psi(struct cgroup *cgrp, struct memqos_memcg_rec *r)
{
	struct psi_group *psi = BPF_CORE_READ(cgrp, psi);
	__u32 some = bpf_core_enum_value(enum psi_states, PSI_MEM_SOME);
	__u32 full = bpf_core_enum_value(enum psi_states, PSI_MEM_FULL);
	__u64 total_off, avg_off;

	if (bpf_core_field_exists(struct psi_group___nested, total)) {
		total_off = bpf_core_field_offset(struct psi_group___nested, total);
		avg_off = bpf_core_field_offset(struct psi_group___nested, avg);
	} else if (bpf_core_field_exists(struct psi_group___flat, total)) {
		total_off = bpf_core_field_offset(struct psi_group___flat, total);
		avg_off = bpf_core_field_offset(struct psi_group___flat, avg);
	} else {
		return;
	}

	/* The hierarchy root's PSI is the system's (psi_system), not in cgrp->psi. */
	if (!psi)
		return;
	/* total[PSI_AVGS = 0][state] and avg[state][0..2]: flat offsets, so a kernel with a
	 * different NR_PSI_STATES still reads the right words. */
	if (bpf_probe_read_kernel(&r->psi_total_ns[0], 8, (void *)psi + total_off + some * 8) ||
	    bpf_probe_read_kernel(&r->psi_total_ns[1], 8, (void *)psi + total_off + full * 8) ||
	    bpf_probe_read_kernel(&r->psi_avg[0], 24, (void *)psi + avg_off + some * 24) ||
	    bpf_probe_read_kernel(&r->psi_avg[1], 24, (void *)psi + avg_off + full * 24))
		return;
	r->flags |= MEMQOS_REC_PSI;
}

/* Claims the next record slot for `cgrp` (NULL: skipped or over capacity) and fills the
 * fields that need no memcg. */
static __always_inline struct memqos_memcg_rec *claim_record(struct cgroup *cgrp)
{
	struct memqos_memcg_rec *r;
	__u32 n, slot;

	n = nr_seen++;
	if (n < skip)
		return NULL;
	slot = n - skip;
	if (slot >= MEMQOS_STATS_MAX_RECS)
		return NULL; /* counted, not written: user space runs again with a larger skip */
	r = &recs[slot];
	r->cgroup_id = BPF_CORE_READ(cgrp, kn, id);
	r->level = BPF_CORE_READ(cgrp, level);
	r->flags = 0;
	read_psi(cgrp, r);
	nr_written = slot + 1;
	return r;
}

/* Fills the memcg part of `r` (the caller holds a reference on `memcg`). */
static __always_inline void fill_memcg(struct memqos_memcg_rec *r, struct mem_cgroup *memcg)
{
	__u32 i;

	r->flags |= MEMQOS_REC_MEMCG;
	r->usage_bytes = bpf_mem_cgroup_usage(memcg);
	r->watermark = memcg->memory.watermark;
	r->max = memcg->memory.max;
	r->high = memcg->memory.high;
	r->low = memcg->memory.low;
	r->min = memcg->memory.min;
	r->events[0] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_LOW));
	r->events[1] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_HIGH));
	r->events[2] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_MAX));
	r->events[3] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_OOM));
	r->events[4] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_OOM_KILL));
	r->events[5] = bpf_mem_cgroup_memory_events(memcg, bpf_core_enum_value(enum memcg_memory_event, MEMCG_OOM_GROUP_KILL));
	for (i = 0; i < MEMQOS_STATS_MAX_FETCH; i++) {
		if (i >= nr_fetch)
			break;
		if (fetch_kind[i] == MEMQOS_FETCH_VM_EVENT)
			r->values[i] = bpf_mem_cgroup_vm_events(memcg, fetch_idx[i]);
		else
			r->values[i] = bpf_mem_cgroup_page_state(memcg, fetch_idx[i]);
	}
}

#endif
