// SPDX-License-Identifier: MIT
/*
 * kvmm/kswapd.c - kvswapd, the background reclaimer of one pool.
 *
 * Direct reclaim (page_alloc.c, under the min watermark) makes the allocating request pay
 * for reclaim, swap I/O included.  kvswapd keeps that rare: an allocation that leaves fewer
 * than wmark_low frames free wakes it, and it runs kvmm_shrink() - the whole reclaim order of
 * vmscan.c - in batches of KVMM_RECLAIM_BATCH until wmark_high frames are free or nothing more
 * can go.  Sequences go out by asynchronous write-back (KVMM_SHRINK_ASYNC): the batch is
 * chosen under the lock, and kvmm_swap_writeback() copies it with the lock let go.  It holds
 * pool->lock for one batch at a time and lets go between batches, so the daemon's loop (which
 * takes the same lock around every core call) waits at most for the choosing of one batch.
 * Its copies are not a window in which the pool looks empty: an allocation that needs the
 * frames meanwhile waits for them (kvmm_swap_writeback_wait, from kvmm_shrink) and finishes
 * the batch itself.  It sleeps on a condition variable tied to pool->lock:
 * kvmm_wakeup_kswapd() is called with the lock held, so a wake-up can never fall between its
 * check and its wait.  A pass that freed nothing (everything pinned, every tier full) backs
 * off for KSWAPD_BACKOFF_MS before it acts on the next wake-up, instead of spinning on
 * allocations that keep waking it; a wake-up that comes meanwhile is kept for the end of the
 * backoff, never dropped (the pool could stay under low with reclaimable pages for good).
 * With pool->reclaim_inline (kvmmd's default, `reclaim_inline`), a pool whose reclaim would
 * only drop clean cached pages (kvmm_reclaim_drop_only) is balanced by the allocation that
 * crossed low, in the allocating thread, one batch towards high, and kvswapd is woken only
 * when that batch left free under low.
 * A pool in an overcommitted daemon-wide budget also wakes it when a charge leaves the budget
 * under its low point (kvmm_wakeup_kswapd_budget): then it runs kvmm_budget_balance() after
 * its own balance, reclaiming cache across the pools until the budget's high point is free
 * (budget.c), so that allocations rarely find the budget spent and reclaim in their path.
 * Counters: KVMM_STAT_KSWAPD_WAKE, KVMM_STAT_KSWAPD_STEAL, KVMM_STAT_RECLAIM_INLINE,
 * KVMM_STAT_BUDGET_BG (vmstat).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

#define KSWAPD_BACKOFF_MS 10

struct kvmm_kswapd {
	struct kvmm_pool *pool;
	pthread_t thread;
	pthread_cond_t wait; /* with pool->lock */
	bool woken;	     /* a wake-up not yet acted on */
	bool budget;	     /* ... and it is (also) for the daemon-wide budget */
	bool stop;
	uint64_t backoff_until; /* CLOCK_MONOTONIC ns: wake-ups wait until then */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kvmm_wakeup_kswapd(struct kvmm_pool *pool)
{
	struct kvmm_kswapd *k = pool->kswapd;
	uint32_t free = kvmm_pool_nr_free(pool);

	if (!k || k->woken || free >= pool->wmark_low)
		return;
	/*
	 * Dropping cached pages is a few list and hash-table operations per page: cheaper here
	 * than handing the lock and the pages' cache lines to kvswapd on the other CPU and back
	 * (a fifth to a third of the daemon's time in the flow benchmark).  kvswapd still does
	 * what needs copies (demotion, swap-out) and what this batch could not.
	 */
	if (kvmm_reclaim_drop_only(pool)) {
		uint32_t got = kvmm_reclaim_protected(
			pool, min_t(uint32_t, pool->wmark_high - free, KVMM_RECLAIM_BATCH));

		pool->stat[KVMM_STAT_RECLAIM_INLINE] += got;
		if (kvmm_pool_nr_free(pool) >= pool->wmark_low)
			return;
	}
	/*
	 * Even while it backs off: kvswapd then waits for the end of the backoff and acts on
	 * it.  A wake-up dropped here would leave the pool under low until the next allocation,
	 * which may never come (the last one before an idle period).
	 */
	k->woken = true;
	pthread_cond_signal(&k->wait);
}

void kvmm_wakeup_kswapd_budget(struct kvmm_pool *pool)
{
	struct kvmm_kswapd *k = pool->kswapd;

	if (!k || k->budget)
		return;
	/* kept through a backoff, like the pool's own wake-up */
	k->budget = true;
	k->woken = true;
	pthread_cond_signal(&k->wait);
}

/* One wake-up's work, pool lock held: shrink to the high watermark.  Returns frames freed. */
static uint64_t balance(struct kvmm_kswapd *k)
{
	struct kvmm_pool *pool = k->pool;
	uint64_t total = 0;

	while (!k->stop) {
		uint32_t free = kvmm_pool_nr_free(pool), got;

		if (free >= pool->wmark_high)
			break;
		/*
		 * Sequences go out asynchronously: the copies run with the lock let go
		 * (kvmm_swap_writeback), so the daemon's loop is not held up by them.
		 */
		kvmm_trace_clock_begin(); /* one reading for the batch's records */
		got = kvmm_shrink(pool,
				  min_t(uint32_t, pool->wmark_high - free, KVMM_RECLAIM_BATCH),
				  KVMM_SHRINK_ASYNC);
		kvmm_trace_clock_end();
		kvmm_swap_writeback(pool, true);
		pool->stat[KVMM_STAT_KSWAPD_STEAL] += got;
		total += got;
		if (!got)
			break;
		/* let the daemon's loop in between batches */
		pthread_mutex_unlock(&pool->lock);
		sched_yield();
		pthread_mutex_lock(&pool->lock);
	}
	return total;
}

static void *kswapd_main(void *arg)
{
	struct kvmm_kswapd *k = arg;
	struct kvmm_pool *pool = k->pool;
	uint64_t freed;
	bool short_;

	pthread_mutex_lock(&pool->lock);
	while (!k->stop) {
		if (!k->woken) {
			pthread_cond_wait(&k->wait, &pool->lock);
			continue;
		}
		if (k->backoff_until) {
			uint64_t now = mono_ns();

			if (now < k->backoff_until) {
				struct timespec ts = {
					.tv_sec = (time_t)(k->backoff_until / 1000000000u),
					.tv_nsec = (long)(k->backoff_until % 1000000000u),
				};

				pthread_cond_timedwait(&k->wait, &pool->lock, &ts);
				continue;
			}
			k->backoff_until = 0;
		}
		k->woken = false;
		pool->stat[KVMM_STAT_KSWAPD_WAKE]++;
		freed = balance(k);
		short_ = false;
		if (k->budget && pool->budget) {
			uint64_t got = 0;

			/* the budget under its low point: reclaim across the pools (budget.c) */
			k->budget = false;
			if (kvmm_budget_balance(pool, &got) == -EBUSY) {
				/* another thread reclaims for the budget: look again after a backoff */
				k->budget = true;
				k->woken = true;
			}
			freed += got;
			short_ = k->budget || kvmm_budget_below_low(pool->budget);
		}
		if (!freed && (short_ || kvmm_pool_nr_free(pool) < pool->wmark_high))
			k->backoff_until = mono_ns() + KSWAPD_BACKOFF_MS * 1000000ull;
		else
			k->backoff_until = 0;
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

int kvmm_kswapd_start(struct kvmm_pool *pool)
{
	pthread_condattr_t attr;
	struct kvmm_kswapd *k;
	int ret;

	if (!pool)
		return -EINVAL;
	if (pool->kswapd)
		return -EEXIST;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->pool = pool;
	/* the backoff's deadline is CLOCK_MONOTONIC (mono_ns) */
	ret = -pthread_condattr_init(&attr);
	if (ret)
		goto out_free;
	ret = -pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (!ret)
		ret = -pthread_cond_init(&k->wait, &attr);
	pthread_condattr_destroy(&attr);
	if (ret)
		goto out_free;
	pthread_mutex_lock(&pool->lock);
	pool->kswapd = k;
	pthread_mutex_unlock(&pool->lock);
	ret = -pthread_create(&k->thread, NULL, kswapd_main, k);
	if (ret)
		goto out_unhook;
	return 0;

out_unhook:
	pthread_mutex_lock(&pool->lock);
	pool->kswapd = NULL;
	pthread_mutex_unlock(&pool->lock);
	pthread_cond_destroy(&k->wait);
out_free:
	free(k);
	return ret;
}

void kvmm_kswapd_stop(struct kvmm_pool *pool)
{
	struct kvmm_kswapd *k;

	if (!pool || !pool->kswapd)
		return;
	k = pool->kswapd;
	pthread_mutex_lock(&pool->lock);
	k->stop = true;
	pthread_cond_signal(&k->wait);
	pthread_mutex_unlock(&pool->lock);
	pthread_join(k->thread, NULL);
	pthread_mutex_lock(&pool->lock);
	pool->kswapd = NULL;
	pthread_mutex_unlock(&pool->lock);
	pthread_cond_destroy(&k->wait);
	free(k);
}
