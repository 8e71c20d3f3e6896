// SPDX-License-Identifier: GPL-2.0
/*
 * Per-cgroup memory-pressure counters with thresholds (memqos's BPF signal source).
 *
 * Only cgroups the daemon put in `thresholds` are counted. Each event of a kind adds to the
 * cgroup's count in the current counting window; when a count crosses the cgroup's limit for
 * that kind, one pressure_event goes into the ring buffer, so user space sleeps in epoll and
 * wakes within microseconds of the crossing instead of polling files.
 *
 * Which programs are loaded is decided by the loader from the kernel's BTF:
 *   7.x (memcg:* tracepoints): count_memcg_events (faults, and scans where PGSCAN_* are
 *       vm events) or mod_memcg_lruvec_state (scans where PGSCAN_* are node stats), keyed
 *       by the memcg the kernel charged the event to;
 *   6.12 (none): the vmscan shrink tracepoint and fexit on handle_mm_fault, keyed by the
 *       cgroup of the task doing the work (direct reclaim and faults run in its context);
 *   both: reclaim entry (vmscan tracepoints) and over-high handling (fentry, under its name
 *       on each kernel), keyed by the current task's cgroup.
 * Enum values come from the running kernel's BTF (bpf_core_enum_value), never from this
 * build's headers: vm_event_item indexes move with kernel config.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "pressure.h"

char LICENSE[] SEC("license") = "GPL";

/* Length of a counting window. Set by the loader before load. */
const volatile __u64 window_ns = 100000000;
/* Minimum time between two events of one cgroup: bounds the ring's load in a storm. */
const volatile __u64 min_gap_ns = 2000000;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* cgroup id (kernfs id = the directory's inode number) */
	__type(value, struct pressure_thresholds);
} thresholds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct pressure_state);
} states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PS_NR);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Where the kernel keeps PGSCAN_* on kernels that moved them from vm events to node stats;
 * matched by name through CO-RE (the ___ suffix is ignored), absent from our vmlinux.h. */
enum node_stat_item___pgscan {
	PGSCAN_KSWAPD___pgscan = 0,
	PGSCAN_DIRECT___pgscan = 1,
	PGSCAN_KHUGEPAGED___pgscan = 2,
	PGSCAN_PROACTIVE___pgscan = 3,
};

/* Make the shared types visible to the skeleton generator (libbpf-cargo emits Rust types
 * for what global variables use), so the Rust mirror can be checked against them. */
struct pressure_event _event_type = {};
struct pressure_thresholds _thresholds_type = {};
struct pressure_state _state_type = {};

static __always_inline void stat_inc(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);

	if (v)
		*v += 1;
}

static __always_inline void emit(__u64 cgid, struct pressure_state *st, __u32 kind,
				 __u64 value, __u64 now)
{
	struct pressure_event *e;
	__u64 last = st->last_emit_ns;

	if (last && now - last < min_gap_ns) {
		__sync_fetch_and_add(&st->suppressed, 1);
		stat_inc(PS_RATE_LIMITED);
		return;
	}
	st->last_emit_ns = now;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(PS_RING_FULL);
		return;
	}
	e->cgroup_id = cgid;
	e->ktime_ns = now;
	e->value = value;
	e->kind = kind;
	e->_pad = 0;
	/* Wake the consumer at once: the point of this source is latency. */
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	stat_inc(PS_EMITTED);
}

static __always_inline void account(__u64 cgid, __u32 kind, __u64 n)
{
	struct pressure_thresholds *th;
	struct pressure_state *st, zero = {};
	__u64 now, window, before, after, limit;

	if (kind >= PK_NR || n == 0)
		return;
	th = bpf_map_lookup_elem(&thresholds, &cgid);
	if (!th)
		return;
	st = bpf_map_lookup_elem(&states, &cgid);
	if (!st) {
		bpf_map_update_elem(&states, &cgid, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&states, &cgid);
		if (!st)
			return;
	}
	now = bpf_ktime_get_ns();
	window = now / window_ns;
	/* Racy across CPUs by design (no locks in tracing programs): a rollover can lose a
	 * few events of the old window, which only delays a crossing by one window. */
	if (st->window != window) {
		st->window = window;
		for (int i = 0; i < PK_NR; i++)
			st->count[i] = 0;
	}
	__sync_fetch_and_add(&st->total[kind], n);
	before = __sync_fetch_and_add(&st->count[kind], n);
	after = before + n;
	limit = th->limit[kind];
	if (limit && before < limit && after >= limit)
		emit(cgid, st, kind, after, now);
}

static __always_inline void account_current(__u32 kind, __u64 n)
{
	account(bpf_get_current_cgroup_id(), kind, n);
}

static __always_inline __u64 memcg_cgroup_id(struct mem_cgroup *memcg)
{
	if (!memcg)
		return 0;
	return BPF_CORE_READ(memcg, css.cgroup, kn, id);
}

/* --- both kernels: reclaim entry and over-high handling, in the task's context --- */

/* try_to_free_mem_cgroup_pages: charge over memory.max, memory.high handling, or a write
 * to memory.high/max/reclaim (then the writer's cgroup is charged with it). */
SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(memcg_reclaim_begin)
{
	account_current(PK_RECLAIM, 1);
	return 0;
}

/* Global direct reclaim (the machine, not a memcg limit, is short). */
SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(direct_reclaim_begin)
{
	account_current(PK_RECLAIM, 1);
	return 0;
}

static __always_inline void over_high(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (task->memcg_nr_pages_over_high)
		account_current(PK_OVER_HIGH, task->memcg_nr_pages_over_high);
}

/* 6.12: called on every return to user mode with notify-resume work; returns at once unless
 * the task charged pages over some memory.high. */
SEC("fentry/mem_cgroup_handle_over_high")
int BPF_PROG(handle_over_high)
{
	over_high();
	return 0;
}

/* 7.x: the inline wrapper checks memcg_nr_pages_over_high and calls this out of line. */
SEC("fentry/__mem_cgroup_handle_over_high")
int BPF_PROG(handle_over_high_outline)
{
	over_high();
	return 0;
}

/* --- 7.x: memcg tracepoints, keyed by the memcg the event is charged to --- */

SEC("tp_btf/count_memcg_events")
int BPF_PROG(count_memcg_events, struct mem_cgroup *memcg, int item, unsigned long count)
{
	__u32 kind;

	if (item == bpf_core_enum_value(enum vm_event_item, PGFAULT))
		kind = PK_FAULT;
	else if (item == bpf_core_enum_value(enum vm_event_item, PGMAJFAULT))
		kind = PK_MAJFAULT;
	else if (bpf_core_enum_value_exists(enum vm_event_item, PGSCAN_DIRECT) &&
		 (item == bpf_core_enum_value(enum vm_event_item, PGSCAN_DIRECT) ||
		  item == bpf_core_enum_value(enum vm_event_item, PGSCAN_KSWAPD)))
		kind = PK_SCAN;
	else
		return 0;
	account(memcg_cgroup_id(memcg), kind, count);
	return 0;
}

/* Kernels where PGSCAN_* are node stats: the lruvec update names the memcg scanned. */
SEC("tp_btf/mod_memcg_lruvec_state")
int BPF_PROG(mod_memcg_lruvec_state, struct mem_cgroup *memcg, int item, int val)
{
	if (val <= 0 || !bpf_core_enum_value_exists(enum node_stat_item___pgscan,
						   PGSCAN_DIRECT___pgscan))
		return 0;
	if (item != bpf_core_enum_value(enum node_stat_item___pgscan, PGSCAN_DIRECT___pgscan) &&
	    item != bpf_core_enum_value(enum node_stat_item___pgscan, PGSCAN_KSWAPD___pgscan))
		return 0;
	account(memcg_cgroup_id(memcg), PK_SCAN, val);
	return 0;
}

/* --- 6.12: no memcg tracepoints; the task doing the work names the cgroup --- */

/* Pages scanned off an inactive LRU: in direct reclaim this runs in the allocating task. */
SEC("tp_btf/mm_vmscan_lru_shrink_inactive")
int BPF_PROG(lru_shrink_inactive, int nid, unsigned long nr_scanned)
{
	account_current(PK_SCAN, nr_scanned);
	return 0;
}

SEC("fexit/handle_mm_fault")
int BPF_PROG(handle_mm_fault_exit, struct vm_area_struct *vma, unsigned long address,
	     unsigned int flags, struct pt_regs *regs, vm_fault_t ret)
{
	__u64 cgid = bpf_get_current_cgroup_id();

	account(cgid, PK_FAULT, 1);
	if (ret & bpf_core_enum_value(enum vm_fault_reason, VM_FAULT_MAJOR))
		account(cgid, PK_MAJFAULT, 1);
	return 0;
}
