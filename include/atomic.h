/* SPDX-License-Identifier: MIT */
/*
 * atomic.h - atomic counters, memory barriers and the seqcount, as thin wrappers over the
 * compiler's __atomic builtins (the C11 memory model). kvmm shares memory between the daemon
 * and its clients (rings, page tables, counters), so everything here is lock-free on the
 * target (checked at build time), holds no pointers and works the same between processes
 * as between threads.
 *
 * Ordering, following the kernel's conventions:
 *   - read, set, and the void read-modify-writes (inc, dec, add, sub) are relaxed: they are
 *     atomic but order nothing else;
 *   - read-modify-writes that return a value (*_return, dec_and_test, xchg, cmpxchg,
 *     inc_not_zero, fetch_add) are fully ordered, as if an smp_mb() came before and after.
 * Use smp_load_acquire/smp_store_release or the barriers below to order other accesses.
 */
#ifndef KVMM_ATOMIC_H
#define KVMM_ATOMIC_H

#include "compiler.h"

/* ------------------------------------------------------------------------------------ */
/* Barriers */

/*
 * smp_mb: full barrier. All loads and stores before it are globally visible/performed
 * before any load or store after it, including store -> load (the one order x86 does not
 * give for free). Needed for Dekker-style "publish my flag, then read yours" handshakes,
 * such as a consumer announcing it will sleep and then re-checking the ring.
 */
#define smp_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/*
 * smp_rmb: orders loads before it against loads after it (read the index, then the data it
 * guards). An acquire fence: free on x86 (a compiler barrier), a load barrier on arm64.
 */
#define smp_rmb() __atomic_thread_fence(__ATOMIC_ACQUIRE)

/*
 * smp_wmb: orders stores before it against stores after it (write the data, then the index
 * that publishes it). A release fence: free on x86 (a compiler barrier), dmb on arm64. It
 * also orders earlier loads before later stores, which is more than asked and harmless.
 */
#define smp_wmb() __atomic_thread_fence(__ATOMIC_RELEASE)

/*
 * smp_load_acquire(p): load *p; no later load or store (in program order) may be performed
 * before it. Pairs with smp_store_release on the publishing side: whoever sees the
 * released value also sees everything written before the release.
 */
#define smp_load_acquire(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)

/*
 * smp_store_release(p, v): store v to *p; every earlier load and store (in program order) is
 * performed before it. Publishes data written before it (a ring tail after the entries).
 */
#define smp_store_release(p, v) __atomic_store_n(p, v, __ATOMIC_RELEASE)

/*
 * cpu_relax: the body of a busy-wait loop. Tells the CPU we are spinning (x86 pause,
 * arm64 yield) so it saves power and gives a sibling hyperthread the core, and, with its
 * memory clobber, makes the compiler reload whatever the loop polls.
 */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __asm__ __volatile__("pause" ::: "memory")
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() barrier()
#endif

/* ------------------------------------------------------------------------------------ */
/* 32-bit atomic counter */

struct kvmm_atomic {
	int counter;
};

/* 64-bit atomic counter; 8-byte aligned even on 32-bit targets so it stays lock-free. */
struct kvmm_atomic64 {
	int64_t counter __aligned(8);
};

#define KVMM_ATOMIC_INIT(i)    \
	{                      \
		.counter = (i) \
	}

/* Shared-memory users depend on these being plain, lock-free words. */
BUILD_BUG_ON(sizeof(struct kvmm_atomic) != 4);
BUILD_BUG_ON(sizeof(struct kvmm_atomic64) != 8);
BUILD_BUG_ON(!__atomic_always_lock_free(sizeof(int), 0));
BUILD_BUG_ON(!__atomic_always_lock_free(sizeof(int64_t), 0));

static inline int kvmm_atomic_read(const struct kvmm_atomic *v)
{
	return __atomic_load_n(&v->counter, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic_set(struct kvmm_atomic *v, int i)
{
	__atomic_store_n(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic_add(int i, struct kvmm_atomic *v)
{
	__atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic_sub(int i, struct kvmm_atomic *v)
{
	__atomic_fetch_sub(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic_inc(struct kvmm_atomic *v)
{
	kvmm_atomic_add(1, v);
}

static inline void kvmm_atomic_dec(struct kvmm_atomic *v)
{
	kvmm_atomic_sub(1, v);
}

/* Returns the new value. */
static inline int kvmm_atomic_add_return(int i, struct kvmm_atomic *v)
{
	return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST);
}

/* Returns the new value. */
static inline int kvmm_atomic_sub_return(int i, struct kvmm_atomic *v)
{
	return __atomic_sub_fetch(&v->counter, i, __ATOMIC_SEQ_CST);
}

static inline int kvmm_atomic_inc_return(struct kvmm_atomic *v)
{
	return kvmm_atomic_add_return(1, v);
}

static inline int kvmm_atomic_dec_return(struct kvmm_atomic *v)
{
	return kvmm_atomic_sub_return(1, v);
}

/* Returns the old value. */
static inline int kvmm_atomic_fetch_add(int i, struct kvmm_atomic *v)
{
	return __atomic_fetch_add(&v->counter, i, __ATOMIC_SEQ_CST);
}

/* Decrement; true when the result is zero (the last reference went away). */
static inline bool kvmm_atomic_dec_and_test(struct kvmm_atomic *v)
{
	return kvmm_atomic_sub_return(1, v) == 0;
}

/* Store i and return the old value. */
static inline int kvmm_atomic_xchg(struct kvmm_atomic *v, int i)
{
	return __atomic_exchange_n(&v->counter, i, __ATOMIC_SEQ_CST);
}

/* If the value is old, replace it by new. Returns the value found (== old on success). */
static inline int kvmm_atomic_cmpxchg(struct kvmm_atomic *v, int old, int new)
{
	__atomic_compare_exchange_n(&v->counter, &old, new, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	return old;
}

/*
 * If the value is *old, replace it by new and return true; otherwise store the value found
 * in *old and return false. Shapes CAS loops without a reload per iteration.
 */
static inline bool kvmm_atomic_try_cmpxchg(struct kvmm_atomic *v, int *old, int new)
{
	return __atomic_compare_exchange_n(&v->counter, old, new, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED);
}

/* Add a unless the value is u. Returns true when it added. */
static inline bool kvmm_atomic_add_unless(struct kvmm_atomic *v, int a, int u)
{
	int c = kvmm_atomic_read(v);

	do {
		if (c == u)
			return false;
	} while (!kvmm_atomic_try_cmpxchg(v, &c, c + a));
	return true;
}

/* Take a reference unless the object is already dead (count 0). True when it took one. */
static inline bool kvmm_atomic_inc_not_zero(struct kvmm_atomic *v)
{
	return kvmm_atomic_add_unless(v, 1, 0);
}

/* ------------------------------------------------------------------------------------ */
/* 64-bit atomic counter: same semantics as the 32-bit one */

static inline int64_t kvmm_atomic64_read(const struct kvmm_atomic64 *v)
{
	return __atomic_load_n(&v->counter, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic64_set(struct kvmm_atomic64 *v, int64_t i)
{
	__atomic_store_n(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic64_add(int64_t i, struct kvmm_atomic64 *v)
{
	__atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic64_sub(int64_t i, struct kvmm_atomic64 *v)
{
	__atomic_fetch_sub(&v->counter, i, __ATOMIC_RELAXED);
}

static inline void kvmm_atomic64_inc(struct kvmm_atomic64 *v)
{
	kvmm_atomic64_add(1, v);
}

static inline void kvmm_atomic64_dec(struct kvmm_atomic64 *v)
{
	kvmm_atomic64_sub(1, v);
}

static inline int64_t kvmm_atomic64_add_return(int64_t i, struct kvmm_atomic64 *v)
{
	return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST);
}

static inline int64_t kvmm_atomic64_sub_return(int64_t i, struct kvmm_atomic64 *v)
{
	return __atomic_sub_fetch(&v->counter, i, __ATOMIC_SEQ_CST);
}

static inline int64_t kvmm_atomic64_inc_return(struct kvmm_atomic64 *v)
{
	return kvmm_atomic64_add_return(1, v);
}

static inline int64_t kvmm_atomic64_dec_return(struct kvmm_atomic64 *v)
{
	return kvmm_atomic64_sub_return(1, v);
}

static inline int64_t kvmm_atomic64_fetch_add(int64_t i, struct kvmm_atomic64 *v)
{
	return __atomic_fetch_add(&v->counter, i, __ATOMIC_SEQ_CST);
}

static inline bool kvmm_atomic64_dec_and_test(struct kvmm_atomic64 *v)
{
	return kvmm_atomic64_sub_return(1, v) == 0;
}

static inline int64_t kvmm_atomic64_xchg(struct kvmm_atomic64 *v, int64_t i)
{
	return __atomic_exchange_n(&v->counter, i, __ATOMIC_SEQ_CST);
}

static inline int64_t kvmm_atomic64_cmpxchg(struct kvmm_atomic64 *v, int64_t old, int64_t new)
{
	__atomic_compare_exchange_n(&v->counter, &old, new, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	return old;
}

static inline bool kvmm_atomic64_try_cmpxchg(struct kvmm_atomic64 *v, int64_t *old, int64_t new)
{
	return __atomic_compare_exchange_n(&v->counter, old, new, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED);
}

static inline bool kvmm_atomic64_add_unless(struct kvmm_atomic64 *v, int64_t a, int64_t u)
{
	int64_t c = kvmm_atomic64_read(v);

	do {
		if (c == u)
			return false;
	} while (!kvmm_atomic64_try_cmpxchg(v, &c, c + a));
	return true;
}

static inline bool kvmm_atomic64_inc_not_zero(struct kvmm_atomic64 *v)
{
	return kvmm_atomic64_add_unless(v, 1, 0);
}

/* ------------------------------------------------------------------------------------ */
/* Seqcount: one writer, any number of lock-free readers, across processes */

/*
 * The writer makes the count odd, updates the data, makes it even again. A reader samples an
 * even count, reads the data, and retries if the count changed meanwhile, so it never uses
 * a half-written update (a page-table entry together with its generation, say).
 *
 *	writer (serialized by the caller)	reader
 *	kvmm_seqcount_write_begin(&s);		do {
 *	WRITE_ONCE(d->a, x);				seq = kvmm_seqcount_read_begin(&s);
 *	WRITE_ONCE(d->b, y);				a = READ_ONCE(d->a);
 *	kvmm_seqcount_write_end(&s);			b = READ_ONCE(d->b);
 *						} while (kvmm_seqcount_read_retry(&s, seq));
 *
 * The protected fields must be accessed with READ_ONCE/WRITE_ONCE (they really are read
 * while being written; the retry only discards the result), and a reader must not act on
 * values it read (follow an index, divide by one) before read_retry said they are stable.
 * The struct is one plain 32-bit integer, so it can live in a shared-memory mapping.
 */
struct kvmm_seqcount {
	uint32_t sequence;
};

#define KVMM_SEQCOUNT_INIT    \
	{                     \
		.sequence = 0 \
	}

BUILD_BUG_ON(sizeof(struct kvmm_seqcount) != 4);

static inline void kvmm_seqcount_init(struct kvmm_seqcount *s)
{
	WRITE_ONCE(s->sequence, 0);
}

static inline void kvmm_seqcount_write_begin(struct kvmm_seqcount *s)
{
	/* Only the writer stores the count, so a plain read-increment-store is enough. */
	WRITE_ONCE(s->sequence, s->sequence + 1);
	/*
	 * Orders the store of the odd count before the data stores that follow: a reader that
	 * sees any new data will then also see (at read_retry) a count other than the one it
	 * started with. Pairs with the smp_rmb in kvmm_seqcount_read_retry.
	 */
	smp_wmb();
}

static inline void kvmm_seqcount_write_end(struct kvmm_seqcount *s)
{
	/*
	 * Orders the data stores before the store of the even count: a reader that sees the new
	 * even count also sees all the data of this update. Pairs with the acquire load in
	 * kvmm_seqcount_read_begin.
	 */
	smp_wmb();
	WRITE_ONCE(s->sequence, s->sequence + 1);
}

/*
 * Sample the count without waiting. Returns false (and an odd *seq) when a write is in
 * progress: for readers that must not spin on a writer that may have died.
 */
static inline bool kvmm_seqcount_try_read_begin(const struct kvmm_seqcount *s, uint32_t *seq)
{
	/* Acquire: the data loads that follow are performed after the count is sampled. */
	*seq = smp_load_acquire(&s->sequence);
	return !(*seq & 1);
}

/* Wait until no write is in progress and return the count to pass to read_retry. */
static inline uint32_t kvmm_seqcount_read_begin(const struct kvmm_seqcount *s)
{
	uint32_t seq;

	while (!kvmm_seqcount_try_read_begin(s, &seq))
		cpu_relax();
	return seq;
}

/* True when a write started or finished since read_begin: discard what was read, retry. */
static inline bool kvmm_seqcount_read_retry(const struct kvmm_seqcount *s, uint32_t seq)
{
	/*
	 * Orders the data loads before the second load of the count: if any data load saw a
	 * store made after the writer's write_begin barrier, this load sees the odd (or later)
	 * count. Pairs with the smp_wmb in kvmm_seqcount_write_begin.
	 */
	smp_rmb();
	return READ_ONCE(s->sequence) != seq;
}

#endif /* KVMM_ATOMIC_H */
