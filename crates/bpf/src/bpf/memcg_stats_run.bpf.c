// SPDX-License-Identifier: GPL-2.0-only
/* memqos stats, the one-syscall variant: a BPF_PROG_TYPE_SYSCALL program run with
 * BPF_PROG_TEST_RUN that walks the subtree with the open-coded css iterator and fills the
 * same records as memcg_stats.bpf.c. Unlike the cgroup iterator it needs no iterator fd,
 * seq_file or buffer per snapshot: one bpf() call does the whole walk. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "memcg_stats.h"
#include "memcg_stats_common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

extern struct cgroup *bpf_cgroup_from_id(u64 cgid) __ksym;
extern void bpf_cgroup_release(struct cgroup *cgrp) __ksym;
extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;
extern int bpf_iter_css_new(struct bpf_iter_css *it, struct cgroup_subsys_state *start, unsigned int flags) __ksym;
extern struct cgroup_subsys_state *bpf_iter_css_next(struct bpf_iter_css *it) __ksym;
extern void bpf_iter_css_destroy(struct bpf_iter_css *it) __ksym;

/* The subtree root, set by user space. */
__u64 root_cgroup_id = 0;

SEC("syscall")
int memcg_stats_run(void *ctx)
{
	struct cgroup *root = bpf_cgroup_from_id(root_cgroup_id);
	struct cgroup_subsys_state *pos;
	struct mem_cgroup *memcg;
	struct bpf_iter_css it;

	if (!root)
		return 1;
	/* The flush may sleep: before the RCU section, once, at the root (flushes the subtree). */
	if (flush_pending) {
		memcg = bpf_get_mem_cgroup(&root->self);
		if (memcg) {
			bpf_mem_cgroup_flush_stats(memcg);
			bpf_put_mem_cgroup(memcg);
		}
		flush_pending = 0;
	}
	bpf_rcu_read_lock();
	bpf_iter_css_new(&it, &root->self, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	while ((pos = bpf_iter_css_next(&it))) {
		struct memqos_memcg_rec *r = claim_record(pos->cgroup);

		if (!r)
			continue;
		memcg = bpf_get_mem_cgroup(pos);
		if (!memcg)
			continue;
		fill_memcg(r, memcg);
		bpf_put_mem_cgroup(memcg);
	}
	bpf_iter_css_destroy(&it);
	bpf_rcu_read_unlock();
	bpf_cgroup_release(root);
	return 0;
}
