// SPDX-License-Identifier: MIT
/*
 * kvmm/shrinker.c - frames the pool's owner parks and gives back under pressure.
 *
 * The core's reclaim knows its own idle frames (cached pages on the LRU, the core magazines),
 * but kvmmd also keeps frames charged and idle that the core cannot see the use of: each
 * data-plane client's magazine, up to mag_size pre-charged frames published in shared memory
 * so the client can take one without a round trip.  Those are a latency optimisation; under
 * pressure they are worth less than any cached prefix and far less than a sequence someone
 * is decoding, so kvmm_shrink() asks the shrinkers for them right after the page cache and
 * before it swaps sequences out, and an allocation at its namespace's limit asks for that
 * namespace's charges before it fails (page_alloc.c).  The owner registers one struct
 * kvmm_shrinker per thing it can shrink; the rules for ->scan are at the struct (mm.h).
 * Fairness: the list is rotated so that each run starts one shrinker further on.
 */
#include "kvmm/mm.h"

void kvmm_register_shrinker(struct kvmm_pool *pool, struct kvmm_shrinker *sh)
{
	KVMM_BUG_ON(!sh->scan);
	list_add_tail(&sh->node, &pool->shrinkers);
}

void kvmm_unregister_shrinker(struct kvmm_pool *pool, struct kvmm_shrinker *sh)
{
	(void)pool;
	list_del_init(&sh->node);
}

uint32_t kvmm_run_shrinkers(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t want)
{
	struct kvmm_shrinker *sh;
	uint32_t freed = 0, n = 0;

	if (!pool || !want)
		return 0;
	list_for_each_entry (sh, &pool->shrinkers, node)
		n++;
	/* one turn at most: each step asks the head, then moves it to the tail */
	while (freed < want && n--) {
		uint32_t got;

		sh = list_first_entry(&pool->shrinkers, struct kvmm_shrinker, node);
		list_move_tail(&sh->node, &pool->shrinkers);
		got = sh->scan(sh, ns, want - freed);
		KVMM_BUG_ON(got > want - freed);
		sh->nr_freed += got;
		freed += got;
	}
	pool->stat[KVMM_STAT_SHRINKER_FREED] += freed;
	return freed;
}
