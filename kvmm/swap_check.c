// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_check.c - the swap state's invariant checker (kvmm_swap_check(), part of
 * kvmm_check_invariants()): every tier's bitmap, slot states and reverse map against the
 * PTEs and page-cache entries that name them, the kept slots against their resident pages,
 * and the write-back records against their slots and pages.  Read-only; the pool lock held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "compiler.h"
#include "kmalloc.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

/* ---- invariants and teardown ------------------------------------------------------------------- */

__printf(3, 4) static int swap_fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EUCLEAN;
}

static int check_tier(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint32_t *reading,
		      uint32_t *writing, char *why, size_t len)
{
	uint64_t kept_n = 0, *kept = &kept_n;
	uint32_t c, free_clusters = 0;
	uint64_t s, used = 0, far_pins = 0;

	for (c = 0; c < t->nclusters; c++) {
		uint64_t base = (uint64_t)c * KVMM_SWAP_CLUSTER, i;
		uint32_t nfree = 0;

		for (i = base; i < base + kvmm_swap_cluster_size(t, c); i++)
			nfree += !bitmap_test_bit(t->map, i);
		if (nfree != t->cluster_free[c])
			return swap_fail(why, len, "swap tier %u cluster %u: %u free, counted %u",
					 t->id, c, nfree, t->cluster_free[c]);
		free_clusters += nfree == kvmm_swap_cluster_size(t, c);
	}
	if (free_clusters != t->nr_free_clusters)
		return swap_fail(why, len, "swap tier %u: %u free clusters, counted %u", t->id,
				 free_clusters, t->nr_free_clusters);
	for (s = 0; s < t->nslots; s++) {
		const struct kvmm_swap_slot *sl = &t->slots[s];
		uint64_t swp = swp_entry(t->id, s);

		if (t->far_pins)
			far_pins += t->far_pins[s];
		if (!bitmap_test_bit(t->map, s)) {
			if (sl->seq || sl->ent || sl->flags || sl->nr_map ||
			    (t->far_pins && t->far_pins[s]))
				return swap_fail(why, len, "swap tier %u slot %llu: free but named",
						 t->id, (unsigned long long)s);
			continue;
		}
		used++;
		if (sl->flags & SLOT_FAR_HELD) {
			/* released while far-pinned: nobody's, freed at the last far unpin */
			if (sl->seq || sl->ent || sl->nr_map || sl->flags != SLOT_FAR_HELD ||
			    !t->far_pins || !t->far_pins[s])
				return swap_fail(why, len,
						 "swap tier %u slot %llu: held for far reads, but "
						 "named or not pinned",
						 t->id, (unsigned long long)s);
			continue;
		}
		if (sl->flags & SLOT_KEPT) {
			const struct kvmm_page *pg =
				sl->block < pool->nframes ? &pool->pages[sl->block] : NULL;

			++*kept;
			if (sl->seq || sl->ent || sl->nr_map || sl->flags != SLOT_KEPT || !pg ||
			    pg->swap != swp)
				return swap_fail(why, len,
						 "swap tier %u slot %llu: kept, but frame %u does "
						 "not name it",
						 t->id, (unsigned long long)s, sl->block);
			continue;
		}
		if (sl->flags & SLOT_READING)
			++*reading;
		if (sl->flags & SLOT_WRITING) {
			++*writing;
			if (sl->seq || sl->ent || sl->nr_map || (sl->flags & SLOT_READING))
				return swap_fail(why, len,
						 "swap tier %u slot %llu: being written but named",
						 t->id, (unsigned long long)s);
			continue;
		}
		if (!sl->seq && !sl->ent && !sl->nr_map && !(sl->flags & SLOT_READING))
			return swap_fail(why, len, "swap tier %u slot %llu: used by no one", t->id,
					 (unsigned long long)s);
		if (sl->nr_map) {
			/* a shared page's slot: exactly nr_map PTEs at its block name it */
			const struct kvmm_aspace *as;
			const struct kvmm_seq *seq;
			uint32_t n = 0;

			list_for_each_entry (as, &pool->aspaces, node)
				list_for_each_entry (seq, &as->seqs, node)
					n += sl->block < seq->nblocks &&
					     kvmm_pte_is_swap(seq->pte[sl->block]) &&
					     (seq->pte[sl->block] & ~KVMM_PTE_FLAGS_MASK) == swp;
			if (sl->seq || n != sl->nr_map || (!sl->ent && !(sl->flags & SLOT_BAD)))
				return swap_fail(why, len,
						 "swap tier %u slot %llu: shared by %u PTEs, %u "
						 "counted%s",
						 t->id, (unsigned long long)s, n, sl->nr_map,
						 sl->ent || sl->seq ? "" : ", no entry");
		}
		if (sl->seq) {
			uint64_t pte = sl->block < sl->seq->nblocks ? sl->seq->pte[sl->block] : 0;

			if (!kvmm_pte_is_swap(pte) || (pte & ~KVMM_PTE_FLAGS_MASK) != swp)
				return swap_fail(
					why, len,
					"swap tier %u slot %llu: seq %llu block %u does not "
					"name it",
					t->id, (unsigned long long)s,
					(unsigned long long)sl->seq->id, sl->block);
		}
		if (sl->ent && kvmm_pagecache_ent_swap(sl->ent) != swp)
			return swap_fail(why, len, "swap tier %u slot %llu: its entry names %#llx",
					 t->id, (unsigned long long)s,
					 (unsigned long long)kvmm_pagecache_ent_swap(sl->ent));
		if (sl->ns_id >= KVMM_MAX_NS || (sl->ns_id && !pool->ns[sl->ns_id]))
			return swap_fail(why, len, "swap tier %u slot %llu: namespace %u gone",
					 t->id, (unsigned long long)s, sl->ns_id);
	}
	if (used != t->nr_used)
		return swap_fail(why, len, "swap tier %u: %llu slots used, counted %llu", t->id,
				 (unsigned long long)used, (unsigned long long)t->nr_used);
	if (kept_n != t->nr_kept)
		return swap_fail(why, len, "swap tier %u: %llu slots kept, counted %llu", t->id,
				 (unsigned long long)kept_n, (unsigned long long)t->nr_kept);
	if (far_pins != t->nr_far_pins)
		return swap_fail(why, len, "swap tier %u: %llu far pins, counted %llu", t->id,
				 (unsigned long long)far_pins, (unsigned long long)t->nr_far_pins);
	return 0;
}

int kvmm_swap_check(struct kvmm_pool *pool, char *why, size_t len)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct kvmm_aspace *as;
	struct swap_rd *rd;
	struct swap_wb *wb;
	uint32_t reading = 0, writing = 0, recs = 0, n = 0, f, wbpages = 0;
	size_t bkt;
	int ret;

	if (!sw)
		return 0;
	list_for_each_entry (t, &sw->tiers, node) {
		if (sw->tier[t->id] != t)
			return swap_fail(why, len, "swap tier %u not indexed", t->id);
		ret = check_tier(pool, t, &reading, &writing, why, len);
		if (ret)
			return ret;
		n++;
	}
	if (n != sw->nr_tiers)
		return swap_fail(why, len, "%u swap tiers listed, %u counted", n, sw->nr_tiers);
	/* every swap PTE names a used slot that names it back */
	list_for_each_entry (as, &pool->aspaces, node) {
		const struct kvmm_seq *seq;

		list_for_each_entry (seq, &as->seqs, node) {
			uint32_t b;

			for (b = 0; b < seq->nblocks; b++) {
				uint64_t s;

				if (!kvmm_pte_is_swap(seq->pte[b]))
					continue;
				t = kvmm_swap_decode(pool, seq->pte[b], &s);
				if (!t || !bitmap_test_bit(t->map, s) ||
				    (t->slots[s].seq != seq && !t->slots[s].nr_map) ||
				    t->slots[s].block != b)
					return swap_fail(why, len,
							 "seq %llu block %u: swap pte %#llx names "
							 "no slot of it",
							 (unsigned long long)seq->id, b,
							 (unsigned long long)seq->pte[b]);
			}
		}
	}
	/* the swap cache: one record per slot being read, into a locked, unmapped frame */
	kvmm_htable_for_each (&sw->cache, bkt, rd, hnode) {
		uint64_t s;

		t = kvmm_swap_decode(pool, rd->swp, &s);
		if (!t || t != rd->t || !(t->slots[s].flags & SLOT_READING))
			return swap_fail(why, len, "swap cache: record %#llx names no reading slot",
					 (unsigned long long)rd->swp);
		if (rd->pg->state != KVMM_PAGE_MAPPED || rd->pg->refcount ||
		    !(rd->pg->flags & KVMM_PG_LOCKED))
			return swap_fail(why, len, "swap cache: frame %u of %#llx is not locked",
					 kvmm_page_to_frame(pool, rd->pg),
					 (unsigned long long)rd->swp);
		recs++;
	}
	if (recs != reading || recs != sw->nr_inflight)
		return swap_fail(why, len, "swap cache: %u records, %u slots reading, %u counted",
				 recs, reading, sw->nr_inflight);
	/* unlocked fault-in: records being copied are in the swap cache, unfinished */
	recs = 0;
	list_for_each_entry (rd, &sw->rd_copy, node) {
		if (!rd->unlocked || rd->finished || kvmm_swap_cache_find(sw, rd->swp) != rd)
			return swap_fail(why, len, "swap cache: unlocked copy %#llx not cached",
					 (unsigned long long)rd->swp);
		recs++;
	}
	if (recs != sw->nr_rd_copy)
		return swap_fail(why, len, "swap cache: %u unlocked copies, %u counted", recs,
				 sw->nr_rd_copy);
	/* write-back: one record per slot being written, from a locked, mapped page */
	recs = 0;
	list_for_each_entry (wb, &sw->wb_all, all) {
		uint64_t s = wb->io.slot;

		if (sw->tier[wb->t->id] != wb->t || s >= wb->t->nslots ||
		    !bitmap_test_bit(wb->t->map, s) || !(wb->t->slots[s].flags & SLOT_WRITING))
			return swap_fail(why, len,
					 "write-back: tier %u slot %llu is not being written",
					 wb->t->id, (unsigned long long)s);
		if (wb->pg->state != KVMM_PAGE_MAPPED ||
		    (wb->pg->flags & (KVMM_PG_LOCKED | KVMM_PG_WRITEBACK)) !=
			    (KVMM_PG_LOCKED | KVMM_PG_WRITEBACK))
			return swap_fail(why, len, "write-back: frame %u is not under writeback",
					 kvmm_page_to_frame(pool, wb->pg));
		recs++;
	}
	for (f = 0; f < pool->nframes; f++) {
		const struct kvmm_page *pg = &pool->pages[f];

		/*
		 * a clean swap-cached page: mapped by its one sequence (or, sealed, by several),
		 * unchanged since fault-in
		 */
		if (pg->swap) {
			uint64_t s;

			t = kvmm_swap_decode(pool, pg->swap, &s);
			if (!t || !bitmap_test_bit(t->map, s) || !(t->slots[s].flags & SLOT_KEPT) ||
			    t->slots[s].block != f)
				return swap_fail(why, len,
						 "frame %u: kept slot %#llx not kept for it", f,
						 (unsigned long long)pg->swap);
			if (pg->state != KVMM_PAGE_MAPPED || !pg->refcount ||
			    (pg->refcount > 1 && !(pg->flags & KVMM_PG_SEALED)) ||
			    (pg->flags & (KVMM_PG_LOCKED | KVMM_PG_KV_PENDING)))
				return swap_fail(why, len,
						 "frame %u: keeps slot %#llx but is %s, refcount "
						 "%u, flags %#x",
						 f, (unsigned long long)pg->swap,
						 kvmm_page_state_name(pg->state), pg->refcount,
						 pg->flags);
		}
		if (pg->flags & KVMM_PG_WRITEBACK)
			wbpages++;
		else if (pg->flags & KVMM_PG_WB_CANCEL)
			return swap_fail(why, len, "frame %u: write-back cancelled but none", f);
	}
	if (recs != writing || recs != wbpages || recs != sw->nr_wb || sw->nr_wb_copying > recs)
		return swap_fail(why, len,
				 "write-back: %u records, %u slots writing, %u pages, %u counted",
				 recs, writing, wbpages, sw->nr_wb);
	return 0;
}
