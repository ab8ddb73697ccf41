// SPDX-License-Identifier: MIT
/*
 * kvmm/budget.c - the daemon-wide frame budget: several pools (kvmmd: one per namespace, the
 * separation that keeps tenants from mapping each other's KV) draw the frames they hold from
 * one limit, the way memcg's children share their parent's.
 *
 * Each pool's size is the most its namespace may ever hold (its address span); what it holds
 * is what it took out of its buddy (MAGAZINE, MAPPED and CACHED frames) and the free frames
 * whose memory is still there (KVMM_PG_RESIDENT), charged here as it takes them (page_alloc.c's
 * buddy_take) and uncharged as their memory is given back (kvmm_budget_trim).  The pools may
 * together span more than the limit (overcommit); then the free frames a pool holds past its
 * keep are discarded at once, the coldest first (the backend's discard: a punched hole in the
 * host backend's memfd; the clients' mappings stay valid and read zeroes), and the others as
 * soon as another pool's allocation needs the budget, so that the limit bounds the memory
 * really resident, and another pool can take what one gave back.
 *
 * When an allocation finds the budget spent (kvmm_alloc_page), reclaim runs across the pools
 * (memcg's reclaim from a parent's limit, with its children's memory.min and memory.low):
 *   0. the other pools' resident free frames are given back (they cost nobody anything);
 *   1. from every pool whose namespace holds more than its low (max(min, low)), the
 *      allocating one included, each in proportion to what it holds above it
 *      (kvmm_budget_targets), never taking one below its low (KVMM_SHRINK_KEEP_LOW):
 *      kvmm_shrink()'s whole order, cached pages first, then client magazines, then
 *      sequences swapped out;
 *   2. only if that was not enough: the same against min, counting a low event for each
 *      namespace that ends below its low (memcg's "low" event: protection broken because
 *      every candidate was under low);
 *   3. the allocating namespace is under its min (guaranteed: kvmmd refuses mins that add up
 *      past the limit) and still nothing: a sequence of the pool holding the most above its
 *      min is preempted (kvmm_out_of_memory, whose victim's end gives frames back later).
 * Otherwise the allocation goes on to its own pool's OOM path, as without a budget.
 *
 * Locking: budget->used is atomic, each pool charges it under its own lock (while the budget
 * is not overcommitted, into its own budget_pending instead: kvmm_budget_flush).  The rest of the
 * budget is under budget->lock, which an allocator takes with trylock (one reclaimer at a time;
 * another finding it taken reclaims from its own pool only, whose lock it holds) and then takes
 * the other pools' locks while holding its own: no thread ever waits for a budget lock while
 * holding a pool lock, so no cycle.
 */
#include <errno.h>
#include <string.h>

#include "compiler.h"
#include "list.h"
#include "log.h"
#include "kvmm/mm.h"
#include "kvmm/trace.h"

int kvmm_budget_init(struct kvmm_budget *b, uint64_t limit)
{
	int ret;

	if (!b || !limit)
		return -EINVAL;
	memset(b, 0, sizeof(*b));
	ret = -pthread_mutex_init(&b->lock, NULL);
	if (ret)
		return ret;
	b->limit = limit;
	/* background reclaim between 2% and 3% of the limit free, like a pool's watermarks */
	b->wmark_low = max_t(uint64_t, limit / 50, 1);
	b->wmark_high = max_t(uint64_t, limit * 3 / 100, b->wmark_low + 1);
	if (b->wmark_high >= limit)
		b->wmark_low = b->wmark_high = 0; /* too small a budget to keep any free */
	INIT_LIST_HEAD(&b->pools);
	return 0;
}

void kvmm_budget_fini(struct kvmm_budget *b)
{
	if (!b)
		return;
	KVMM_WARN_ON(b->nr_pools);
	pthread_mutex_destroy(&b->lock);
}

void kvmm_budget_flush(struct kvmm_pool *pool)
{
	uint32_t n = pool->budget_pending;

	if (!n)
		return;
	__atomic_add_fetch(&pool->budget->used, n, __ATOMIC_RELAXED);
	__atomic_store_n(&pool->budget_pending, 0, __ATOMIC_RELAXED);
}

uint64_t kvmm_budget_used(struct kvmm_budget *b)
{
	uint64_t used = __atomic_load_n(&b->used, __ATOMIC_RELAXED);
	struct kvmm_pool *p;

	/* b->lock held: the pools' pending charges too (read without their locks) */
	list_for_each_entry (p, &b->pools, budget_node)
		used += __atomic_load_n(&p->budget_pending, __ATOMIC_RELAXED);
	return used;
}

uint64_t kvmm_budget_free(const struct kvmm_budget *b)
{
	uint64_t used = __atomic_load_n(&b->used, __ATOMIC_RELAXED);

	return used >= b->limit ? 0 : b->limit - used;
}

void kvmm_budget_discard_free(struct kvmm_pool *pool)
{
	kvmm_budget_trim(pool, UINT32_MAX);
}

/* b->lock held: the pools together span more than the limit (or no longer do). */
static void update_overcommit(struct kvmm_budget *b)
{
	struct kvmm_pool *p;
	bool on = b->span > b->limit;

	if (on == b->discard)
		return;
	__atomic_store_n(&b->discard, on, __ATOMIC_RELAXED);
	if (!on)
		return;
	/*
	 * The charges the pools counted on their own meanwhile join budget->used (a pool that
	 * charges after its lock was taken here sees discard set); what went back to the
	 * buddies while that was not needed goes now.
	 */
	list_for_each_entry (p, &b->pools, budget_node) {
		pthread_mutex_lock(&p->lock);
		kvmm_budget_flush(p);
		kvmm_budget_discard_free(p);
		pthread_mutex_unlock(&p->lock);
	}
}

int kvmm_budget_join(struct kvmm_budget *b, struct kvmm_pool *pool, struct kvmm_ns *ns)
{
	if (!b || !pool || (ns && ns->pool != pool))
		return -EINVAL;
	if (pool->budget || pool->nr_free != pool->nframes)
		return -EBUSY;
	pthread_mutex_lock(&b->lock);
	if (b->nr_pools >= KVMM_BUDGET_MAX_POOLS) {
		pthread_mutex_unlock(&b->lock);
		return -ENOSPC;
	}
	pthread_mutex_lock(&pool->lock);
	pool->budget = b;
	pool->budget_ns = ns;
	pool->budget_charged = 0;
	pool->budget_pending = 0;
	pool->nr_free_resident = 0;
	/* free frames a pool keeps resident: its high watermark, at least two refill batches */
	pool->budget_keep =
		min(max_t(uint32_t, pool->wmark_high, 2 * KVMM_MAG_DEFAULT_BATCH), pool->nframes);
	pthread_mutex_unlock(&pool->lock);
	list_add_tail(&pool->budget_node, &b->pools);
	b->nr_pools++;
	b->span += pool->nframes;
	update_overcommit(b);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

void kvmm_budget_leave(struct kvmm_pool *pool)
{
	struct kvmm_budget *b;

	if (!pool || !pool->budget)
		return;
	b = pool->budget;
	pthread_mutex_lock(&b->lock);
	list_del_init(&pool->budget_node);
	b->nr_pools--;
	b->span -= pool->nframes;
	__atomic_sub_fetch(&b->used, pool->budget_charged - pool->budget_pending, __ATOMIC_RELAXED);
	pool->budget_pending = 0;
	update_overcommit(b);
	pthread_mutex_unlock(&b->lock);
	pool->budget = NULL;
	pool->budget_ns = NULL;
	pool->budget_charged = 0;
	pool->nr_free_resident = 0;
}

uint64_t kvmm_budget_targets(const uint64_t *usage, const uint64_t *floor, unsigned int nr,
			     uint64_t want, uint64_t *take)
{
	unsigned __int128 rem[KVMM_BUDGET_MAX_POOLS];
	uint64_t excess = 0, sum = 0, left;
	unsigned int i, j;

	if (nr > KVMM_BUDGET_MAX_POOLS)
		nr = KVMM_BUDGET_MAX_POOLS;
	for (i = 0; i < nr; i++)
		excess += usage[i] > floor[i] ? usage[i] - floor[i] : 0;
	for (i = 0; i < nr; i++) {
		uint64_t e = usage[i] > floor[i] ? usage[i] - floor[i] : 0;

		rem[i] = 0;
		if (want >= excess) {
			take[i] = e; /* all they hold above their floors */
		} else {
			unsigned __int128 x = (unsigned __int128)want * e;

			take[i] = (uint64_t)(x / excess);
			rem[i] = x % excess;
		}
		sum += take[i];
	}
	/* largest remainders: the shares add up to exactly @want */
	for (left = want < excess ? want - sum : 0; left; left--) {
		for (j = nr, i = 0; i < nr; i++)
			if (rem[i] && (j == nr || rem[i] > rem[j]))
				j = i;
		if (j == nr)
			break;
		take[j]++;
		rem[j] = 0;
		sum++;
	}
	return sum;
}

static inline uint64_t ns_charged(const struct kvmm_ns *ns)
{
	return (uint64_t)ns->used + ns->cached;
}

/*
 * Reclaim up to @n frames of @p (its lock held) for @self's allocation; returns the frames
 * that went back to @p's buddy.  Another pool's are given back to the system at once (that
 * is what frees the budget); @self's stay resident, for it to take again without a refault.
 */
static uint64_t shrink_pool(struct kvmm_pool *p, struct kvmm_pool *self, uint64_t n, bool keep_low)
{
	uint32_t before = p->nr_free;
	struct kvmm_ns *prev = p->reclaim_for;
	uint32_t got;

	/* every namespace's protections hold here, the allocating one's too */
	p->reclaim_for = NULL;
	kvmm_shrink(p, (uint32_t)min_t(uint64_t, n, UINT32_MAX),
		    keep_low ? KVMM_SHRINK_KEEP_LOW : 0);
	p->reclaim_for = prev;
	got = p->nr_free > before ? p->nr_free - before : 0;
	if (p != self)
		kvmm_budget_trim(p, got);
	return got;
}

/* What @self's allocations can have: the budget left, and its own free frames still resident. */
static inline uint64_t avail(const struct kvmm_budget *b, const struct kvmm_pool *self)
{
	return kvmm_budget_free(b) + self->nr_free_resident;
}

int kvmm_budget_balance(struct kvmm_pool *self, uint64_t *nr_freed)
{
	struct kvmm_pool *pools[KVMM_BUDGET_MAX_POOLS], *p;
	uint64_t usage[KVMM_BUDGET_MAX_POOLS], floor[KVMM_BUDGET_MAX_POOLS];
	uint64_t take[KVMM_BUDGET_MAX_POOLS];
	struct kvmm_budget *b = self->budget;
	uint64_t freed = 0;
	unsigned int nr = 0, i;

	*nr_freed = 0;
	if (!b || !b->wmark_high || !__atomic_load_n(&b->discard, __ATOMIC_RELAXED) ||
	    kvmm_budget_free(b) >= b->wmark_high)
		return 0;
	/* the same order as an allocation's: own pool lock, budget (trylock), the others */
	if (pthread_mutex_trylock(&b->lock))
		return -EBUSY;
	list_for_each_entry (p, &b->pools, budget_node) {
		if (p != self)
			pthread_mutex_lock(&p->lock);
		pools[nr++] = p;
	}
	b->nr_background++;
	/* free frames still resident first, the kvswapd's own pool's too: nobody uses them */
	for (i = 0; i < nr && kvmm_budget_free(b) < b->wmark_high; i++)
		kvmm_budget_trim(
			pools[i],
			(uint32_t)min_t(uint64_t, b->wmark_high - kvmm_budget_free(b), UINT32_MAX));
	if (kvmm_budget_free(b) < b->wmark_high) {
		for (i = 0; i < nr; i++) {
			const struct kvmm_ns *n = pools[i]->budget_ns;

			usage[i] = pools[i]->budget_charged;
			floor[i] = n ? max(n->min, n->low) : 0;
		}
		kvmm_budget_targets(usage, floor, nr, b->wmark_high - kvmm_budget_free(b), take);
		for (i = 0; i < nr; i++) {
			struct kvmm_pool *q = pools[i];
			struct kvmm_ns *prev = q->reclaim_for;
			uint32_t before = q->nr_free, got;

			if (!take[i])
				continue;
			q->reclaim_for = NULL;
			kvmm_shrink(q, (uint32_t)min_t(uint64_t, take[i], UINT32_MAX),
				    KVMM_SHRINK_KEEP_LOW | KVMM_SHRINK_NOSWAP);
			q->reclaim_for = prev;
			got = q->nr_free > before ? q->nr_free - before : 0;
			/* given back to the system: that is what frees the budget */
			kvmm_budget_trim(q, got);
			freed += got;
			q->stat[KVMM_STAT_BUDGET_RECLAIM] += got;
			q->stat[KVMM_STAT_BUDGET_BG] += got;
			if (q->budget_ns)
				q->budget_ns->budget_reclaimed += got;
		}
	}
	b->bg_reclaimed += freed;
	while (nr--)
		if (pools[nr] != self)
			pthread_mutex_unlock(&pools[nr]->lock);
	pthread_mutex_unlock(&b->lock);
	if (freed)
		kvmm_trace_event(KVMM_TR_RECLAIM, self, 0, 0, 0, KVMM_TRACE_NONE, freed);
	*nr_freed = freed;
	return 0;
}

uint64_t kvmm_budget_reclaim(struct kvmm_pool *self, struct kvmm_ns *ns, uint64_t want)
{
	struct kvmm_pool *pools[KVMM_BUDGET_MAX_POOLS], *p;
	uint64_t usage[KVMM_BUDGET_MAX_POOLS], floor[KVMM_BUDGET_MAX_POOLS];
	uint64_t take[KVMM_BUDGET_MAX_POOLS];
	struct kvmm_budget *b = self->budget;
	unsigned int nr = 0, i, pass;
	uint64_t freed = 0;

	if (!b)
		return 0;
	if (pthread_mutex_trylock(&b->lock)) {
		/*
		 * Another allocation reclaims across the pools (kvmmd's ring workers run
		 * namespaces in parallel), perhaps waiting for our lock.  Ours is the one pool
		 * we may touch meanwhile: what it frees stays resident, for us to take.  Without
		 * this, an allocation that loses the race failed with plenty of cache to reclaim.
		 */
		if (avail(b, self) < want) {
			uint64_t got = shrink_pool(self, self, want - avail(b, self), true);

			self->stat[KVMM_STAT_BUDGET_RECLAIM] += got;
			if (self->budget_ns)
				self->budget_ns->budget_reclaimed += got;
		}
		return avail(b, self);
	}
	list_for_each_entry (p, &b->pools, budget_node) {
		if (p != self)
			pthread_mutex_lock(&p->lock);
		pools[nr++] = p;
	}
	b->nr_reclaim++;
	/* other pools' free frames still resident cost nobody anything: given back first */
	for (i = 0; i < nr && avail(b, self) < want; i++)
		if (pools[i] != self)
			kvmm_budget_trim(pools[i], (uint32_t)min_t(uint64_t, want - avail(b, self),
								   UINT32_MAX));
	for (pass = 0; pass < 2 && avail(b, self) < want; pass++) {
		uint64_t need = want - avail(b, self);

		for (i = 0; i < nr; i++) {
			const struct kvmm_ns *n = pools[i]->budget_ns;

			usage[i] = pools[i]->budget_charged;
			floor[i] = !n ? 0 : pass ? n->min : max(n->min, n->low);
		}
		if (!kvmm_budget_targets(usage, floor, nr, need, take))
			continue;
		for (i = 0; i < nr; i++) {
			struct kvmm_ns *n = pools[i]->budget_ns;
			uint64_t got;

			if (!take[i])
				continue;
			got = shrink_pool(pools[i], self, take[i], pass == 0);
			freed += got;
			pools[i]->stat[KVMM_STAT_BUDGET_RECLAIM] += got;
			if (!n)
				continue;
			n->budget_reclaimed += got;
			/* low protection broken: every namespace above low had too little */
			if (pass && got && ns_charged(n) < max(n->min, n->low)) {
				n->low_events++;
				pools[i]->stat[KVMM_STAT_BUDGET_LOW]++;
				b->low_events++;
				kvmm_notice_ratelimited(
					"budget: namespace %.32s reclaimed below its low (%u "
					"frames, "
					"low %u): every namespace was at or under its low",
					n->name, n->used + n->cached, n->low);
			}
		}
	}
	/* a guaranteed min: preempt where the most is held above one */
	if (avail(b, self) < want && ns && ns_charged(ns) < ns->min) {
		struct kvmm_pool *victim = NULL;
		uint64_t best = 0;

		for (i = 0; i < nr; i++) {
			const struct kvmm_ns *n = pools[i]->budget_ns;
			uint64_t m = n ? n->min : 0, u = pools[i]->budget_charged;

			if (pools[i] != self && u > m && u - m > best) {
				best = u - m;
				victim = pools[i];
			}
		}
		if (victim && kvmm_out_of_memory(victim)) {
			b->nr_oom++;
			kvmm_notice_ratelimited(
				"budget: namespace %.32s is under its min (%llu of %u "
				"frames): a sequence of another one is preempted",
				ns->name, (unsigned long long)ns_charged(ns), ns->min);
		}
	}
	b->reclaimed += freed;
	if (avail(b, self) < want)
		b->nr_short++;
	while (nr--)
		if (pools[nr] != self)
			pthread_mutex_unlock(&pools[nr]->lock);
	pthread_mutex_unlock(&b->lock);
	if (freed)
		kvmm_trace_event(KVMM_TR_RECLAIM, self, 0, ns ? ns->id : 0, 0, KVMM_TRACE_NONE,
				 freed);
	return avail(b, self);
}
