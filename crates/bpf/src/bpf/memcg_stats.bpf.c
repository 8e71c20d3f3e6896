// SPDX-License-Identifier: GPL-2.0-only
/* memqos stats: one walk of a cgroup subtree (descendants, pre-order) that copies each
 * memcg's counters into a memory-mapped array, read by user space without a syscall per
 * cgroup or file and without formatting or parsing text.
 *
 * Counters come from the memcg kfuncs (Linux 7.0+). Which counters, and their indexes in
 * enum node_stat_item / memcg_stat_item / vm_event_item, are decided in user space from the
 * kernel's BTF and set in .rodata before load: indexes change with kernel config. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "memcg_stats.h"
#include "memcg_stats_common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("iter.s/cgroup")
int memcg_stats(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct memqos_memcg_rec *r;
	struct mem_cgroup *memcg;

	if (!cgrp) /* end of the walk */
		return 0;
	r = claim_record(cgrp);
	if (!r)
		return 0;
	memcg = bpf_get_mem_cgroup(&cgrp->self);
	if (!memcg)
		return 0;
	/* Like a memory.stat read, which flushes the cgroup's subtree; once per snapshot,
	 * at its root, covers every cgroup walked after it. */
	if (flush_pending) {
		bpf_mem_cgroup_flush_stats(memcg);
		flush_pending = 0;
	}
	fill_memcg(r, memcg);
	bpf_put_mem_cgroup(memcg);
	return 0;
}
