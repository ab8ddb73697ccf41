// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_swap_index.c - warm restart (kvmm/swap_index.c): sealed pages demoted to a
 * file tier with an index come back after the pool is gone - torn down cleanly, or the
 * process killed (a child that _exits with the pool still up) - and a new pool on the same
 * swap file serves the same prefix with identical bytes; nothing torn, stale or foreign is
 * ever served: a page whose bytes changed, a corrupted record and an index of another
 * namespace each restore nothing wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bitmap.h"
#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"
#include "check_inv.h"
#include "swap_tier.h"

#define PAGE_SZ 4096u
#define NFRAMES 64u
#define NB 6u	  /* blocks of the prefix */
#define SLOTS 32u /* file tier slots */
#define TIER 2u

struct fx {
	char dir[64];
	char path[128];
	char index[140];
	uint8_t want[NB][PAGE_SZ];
	uint32_t tokens[NB * 64];
	uint32_t tpp;
	uint64_t slot_of[NB]; /* the file tier slot of each block after the first run */
};

struct run {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t z = 777;
	uint32_t b, i;

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvmm-swapidx.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/swapfile", f->dir);
	snprintf(f->index, sizeof(f->index), "%s.index", f->path);
	for (b = 0; b < NB; b++)
		for (i = 0; i < PAGE_SZ; i++) {
			z = z * 6364136223846793005ull + 1442695040888963407ull;
			f->want[b][i] = (uint8_t)(z >> 56);
		}
	for (i = 0; i < NB * 64; i++)
		f->tokens[i] = 5000 + i * 7;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	unlink(f->path);
	unlink(f->index);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* A pool with namespace @ns_name and the file tier, indexed for it (or not: @indexed). */
static int start_secret(struct fx *f, struct run *r, const char *ns_name, bool indexed,
			const uint64_t *secret)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = NFRAMES};
	struct kvmm_swap_tier_params tp = {.tier = TIER,
					   .priority = 5,
					   .size = SLOTS * PAGE_SZ,
					   .path = f->path,
					   .queue_depth = 8};
	int ret;

	memset(r, 0, sizeof(*r));
	if (kvmm_pool_create(&p, &r->pool) || kvmm_ns_create(r->pool, ns_name, 0, 0, &r->ns) ||
	    kvmm_fmt_init(&r->fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP32}, PAGE_SZ) ||
	    kvmm_aspace_create(r->pool, r->ns, &r->fmt, NULL, &r->as))
		return -1;
	f->tpp = r->fmt.tokens_per_page;
	if (secret && kvmm_ns_set_secret(r->ns, secret))
		return -1;
	tp.index_ns = indexed ? r->ns : NULL;
	ret = kvmm_swapon(r->pool, &kvmm_swap_nvme_ops, &tp);
	if (ret == -ENOSYS || ret == -EPERM || ret == -EOPNOTSUPP) {
		print_message("nvme tier unavailable here (%s): skipped\n", strerror(-ret));
		skip();
	}
	return ret;
}

static int start(struct fx *f, struct run *r, const char *ns_name, bool indexed)
{
	return start_secret(f, r, ns_name, indexed, NULL);
}

static uint64_t restored(struct run *r)
{
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_tier_info(r->pool, TIER, &ti), 0);
	assert_true(ti.indexed);
	return ti.index_restored;
}

/* The first life: seal the prefix with its bytes, let it go, demote all of it to the file. */
static void first_life(struct fx *f, struct run *r)
{
	struct kvmm_swap_tier *t;
	struct kvmm_seq *seq;
	uint32_t b;
	uint64_t s;

	assert_int_equal(kvmm_mm_seq_create(r->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, NB * f->tpp, f->tokens), 0);
	for (b = 0; b < NB; b++)
		memcpy(kvmm_pool_frame_addr(r->pool, kvmm_mm_seq_frame(seq, b)), f->want[b],
		       PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_seal(seq), (int)NB);
	kvmm_mm_seq_free(seq);
	assert_int_equal(kvmm_swap_demote(r->pool, NULL, NB), (int)NB);
	check_inv(r->pool);
	t = kvmm_swap_tier_get(r->pool, TIER);
	assert_non_null(t);
	for_each_set_bit (s, t->map, t->nslots) {
		struct kvmm_cache_desc d;

		assert_non_null(t->slots[s].ent);
		kvmm_pagecache_ent_desc(t->slots[s].ent, &d);
		assert_true(d.depth < NB);
		f->slot_of[d.depth] = s;
	}
}

/* A lookup of the whole prompt in a fresh sequence: the blocks it maps, each checked. */
static uint32_t lookup_check(struct fx *f, struct run *r)
{
	struct kvmm_seq *seq;
	uint32_t b, nb;
	int got;

	assert_int_equal(kvmm_mm_seq_create(r->as, &seq), 0);
	got = kvmm_mm_prefix_lookup(seq, f->tokens, NB * f->tpp);
	assert_true(got >= 0);
	nb = (uint32_t)got / f->tpp;
	for (b = 0; b < nb; b++)
		assert_memory_equal(kvmm_pool_frame_addr(r->pool, kvmm_mm_seq_frame(seq, b)),
				    f->want[b], PAGE_SZ);
	check_inv(r->pool);
	kvmm_mm_seq_free(seq);
	return nb;
}

static void stop(struct run *r)
{
	kvmm_pool_destroy(r->pool);
}

static void fresh(struct fx *f)
{
	unlink(f->path);
	unlink(f->index);
}

/* Clean shutdown, then the same swap file: the whole prefix hits with its bytes. */
static void test_restart_after_shutdown(void **state)
{
	struct fx *f = *state;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), 0);
	first_life(f, &r);
	stop(&r);

	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), NB);
	assert_int_equal(kvmm_pagecache_count(r.pool), NB);
	assert_int_equal(lookup_check(f, &r), NB);
	/* the pages came back into frames: their slots and records are let go */
	stop(&r);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), 0);
	stop(&r);
}

/*
 * The first life in a child killed (it _exits with the pool up: no teardown at all), after
 * a live sequence looked up the first @keep blocks of the prompt again (back in frames: their
 * slots and records let go).
 */
static void crash_first_life(struct fx *f, uint32_t keep)
{
	int status;
	pid_t pid;

	fresh(f);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct kvmm_seq *seq;
		struct run c;

		if (start(f, &c, "t", true))
			_exit(2);
		first_life(f, &c);
		if (keep &&
		    (kvmm_mm_seq_create(c.as, &seq) ||
		     kvmm_mm_prefix_lookup(seq, f->tokens, keep * f->tpp) != (int)(keep * f->tpp)))
			_exit(3);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* kill -9: the first life ends with the pool still up; the records were already there. */
static void test_restart_after_crash(void **state)
{
	struct fx *f = *state;
	struct run r;

	crash_first_life(f, 0);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), NB);
	assert_int_equal(lookup_check(f, &r), NB);
	stop(&r);
}

static void poke(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t x;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &x, 1, off), 1);
	x ^= 0x5a;
	assert_int_equal(pwrite(fd, &x, 1, off), 1);
	close(fd);
}

/*
 * An engine that recomputed blocks [@from, @to) of the prompt over the first @from blocks,
 * which it looked up: it writes their bytes and seals them.  Returns the sequence.
 */
static struct kvmm_seq *recompute(struct fx *f, struct run *r, uint32_t from, uint32_t to)
{
	struct kvmm_seq *seq;
	uint32_t b;

	assert_int_equal(kvmm_mm_seq_create(r->as, &seq), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(seq, f->tokens, (uint64_t)from * f->tpp),
			 (int)(from * f->tpp));
	assert_int_equal(kvmm_mm_seq_append(seq, (to - from) * f->tpp, f->tokens + from * f->tpp),
			 0);
	for (b = from; b < to; b++)
		memcpy(kvmm_pool_frame_addr(r->pool, kvmm_mm_seq_frame(seq, b)), f->want[b],
		       PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_seal(seq), (int)(to - from));
	check_inv(r->pool);
	return seq;
}

static uint64_t pending(struct run *r)
{
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_tier_info(r->pool, TIER, &ti), 0);
	return ti.index_pending;
}

/*
 * The page of block 3 changed in the file (a torn write, a slot reused before its record was
 * cleared): block 3 is rejected; 4 and 5 are restored pending (their parent is gone) and 0-2
 * hit.  Once an engine computes block 3 again and seals it, 4 and 5 hang under it and the
 * whole prompt hits with its bytes.
 */
static void test_changed_page_rejected(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info ti;
	struct kvmm_seq *seq;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	first_life(f, &r);
	stop(&r);
	poke(f->path, (off_t)(f->slot_of[3] * PAGE_SZ + 100));
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), NB - 1);
	assert_int_equal(kvmm_swap_tier_info(r.pool, TIER, &ti), 0);
	assert_int_equal(ti.index_rejected, 1);
	assert_int_equal(ti.index_pending, 2);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 1);
	check_inv(r.pool);
	assert_int_equal(lookup_check(f, &r), 3);
	seq = recompute(f, &r, 3, 4);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 2);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 0);
	kvmm_mm_seq_free(seq);
	assert_int_equal(lookup_check(f, &r), NB);
	stop(&r);
}

/*
 * The first life, killed with blocks 0-2 resident (faulted back in and mapped by a live
 * sequence: their slots and records let go) and 3-5 on the file tier; then the second life
 * in @r, on the same file: 3-5 restored, all pending.
 */
static void restart_resident_parent(struct fx *f, struct run *r)
{
	crash_first_life(f, 3);
	assert_int_equal(start(f, r, "t", true), 0);
	assert_int_equal(restored(r), 3);
	assert_int_equal(pending(r), 3);
}

/*
 * Warm restart of the children of a resident parent: blocks 3-5 come back pending and miss;
 * the engine recomputes 0-2 and seals them, which adopts 3-5: the whole prompt hits, with
 * the bytes of the first life (3-5 read from the file and checked against their checksums).
 */
static void test_resident_parent(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq;
	struct run r;

	restart_resident_parent(f, &r);
	assert_int_equal(kvmm_pagecache_count(r.pool), 3);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 1);
	check_inv(r.pool);
	/* unreachable until their parent is sealed again */
	assert_int_equal(lookup_check(f, &r), 0);
	/* an engine computes blocks 0-1 only: nothing to adopt yet */
	seq = recompute(f, &r, 0, 2);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 0);
	assert_int_equal(lookup_check(f, &r), 2);
	kvmm_mm_seq_free(seq);
	/* ... and block 2 over them: 3-5 hang under it */
	seq = recompute(f, &r, 2, 3);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 3);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 0);
	assert_int_equal(lookup_check(f, &r), NB);
	kvmm_mm_seq_free(seq);
	check_inv(r.pool);
	stop(&r);
}

/*
 * Only the very prefix adopts them: the same tokens for block 2 over another block 1 (its key
 * differs), or the right prefix under another salt (another key id), leave 3-5 pending.
 */
static void test_pending_needs_same_prefix(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq;
	struct run r;

	restart_resident_parent(f, &r);
	f->tokens[f->tpp + 1] ^= 1; /* block 1 differs */
	seq = recompute(f, &r, 0, 3);
	kvmm_mm_seq_free(seq);
	f->tokens[f->tpp + 1] ^= 1;
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 0);
	/* the right tokens, salted */
	assert_int_equal(kvmm_mm_seq_create(r.as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_set_salt(seq, "tenant", 6), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3 * f->tpp, f->tokens), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 3);
	kvmm_mm_seq_free(seq);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 0);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 1);
	/* block 0 (sealed with the wrong block 1) hits, nothing past it */
	assert_int_equal(lookup_check(f, &r), 1);
	check_inv(r.pool);
	stop(&r);
}

/*
 * Bounded: pending pages are cache nobody can reach, the first a tier lets go.  Dropping the
 * pending root (here: the tier's cached pages dropped) leaves nothing behind; dropping only
 * the root makes its child a pending root of its own, still adopted later.
 */
static void test_pending_dropped(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier *t;
	struct kvmm_seq *seq;
	struct run r;
	uint64_t s, root = UINT64_MAX;

	restart_resident_parent(f, &r);
	t = kvmm_swap_tier_get(r.pool, TIER);
	assert_non_null(t);
	for_each_set_bit (s, t->map, t->nslots) {
		struct kvmm_cache_desc d;

		assert_true(kvmm_pagecache_ent_pending(t->slots[s].ent));
		kvmm_pagecache_ent_desc(t->slots[s].ent, &d);
		if (d.depth == 3)
			root = s;
	}
	assert_true(root != UINT64_MAX);
	/* the root (block 3) goes: block 4 waits for block 3's key now */
	kvmm_pagecache_remove_ent(r.pool, t->slots[root].ent);
	t->slots[root].ent = NULL;
	kvmm_swap_slot_release(t, root);
	check_inv(r.pool);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 1);
	assert_int_equal(kvmm_pagecache_count(r.pool), 2);
	seq = recompute(f, &r, 0, 4);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 2);
	kvmm_mm_seq_free(seq);
	assert_int_equal(lookup_check(f, &r), NB);
	stop(&r);

	/* all pending pages dropped with the tier's cache: nothing left, nothing adopted */
	restart_resident_parent(f, &r);
	assert_int_equal(kvmm_swap_drop_cached(r.pool), 3);
	assert_int_equal(kvmm_pagecache_nr_pending(r.pool), 0);
	check_inv(r.pool);
	seq = recompute(f, &r, 0, 3);
	assert_int_equal(r.pool->stat[KVMM_STAT_CACHE_ADOPT], 0);
	kvmm_mm_seq_free(seq);
	assert_int_equal(lookup_check(f, &r), 3);
	stop(&r);
}

/* A corrupted record (here its token ids: another prompt) fails its own checksum. */
static void test_corrupt_record_rejected(void **state)
{
	struct fx *f = *state;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	first_life(f, &r);
	stop(&r);
	/* a token of block 5's record: past the header (4096) and the record's fixed part */
	poke(f->index, (off_t)(4096 + f->slot_of[5] * (56 + 4 * KVMM_INDEX_TOKENS) + 56 + 4));
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), NB - 1);
	assert_int_equal(lookup_check(f, &r), NB - 1);
	stop(&r);
}

/*
 * A tier without an index restores nothing and leaves the index file alone; another
 * namespace's index starts over (nothing restored, no hit).
 */
static void test_foreign_starts_over(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info ti;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	first_life(f, &r);
	stop(&r);

	assert_int_equal(start(f, &r, "t", false), 0);
	assert_int_equal(kvmm_swap_tier_info(r.pool, TIER, &ti), 0);
	assert_false(ti.indexed);
	assert_int_equal(lookup_check(f, &r), 0);
	stop(&r);

	assert_int_equal(start(f, &r, "other", true), 0);
	assert_int_equal(restored(&r), 0);
	assert_int_equal(lookup_check(f, &r), 0);
	stop(&r);
	/* ... and the index was started over for "other": "t" finds nothing either */
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), 0);
	stop(&r);
}

/* The secret can only be given to a namespace with nothing cached or mapped. */
static void test_set_secret(void **state)
{
	struct fx *f = *state;
	const uint64_t s1[2] = {1, 2}, zero[2] = {0, 0};
	struct kvmm_seq *seq;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", false), 0);
	assert_int_equal(kvmm_ns_set_secret(r.ns, zero), -EINVAL);
	assert_int_equal(kvmm_ns_set_secret(NULL, s1), -EINVAL);
	assert_int_equal(kvmm_ns_set_secret(r.ns, s1), 0);
	assert_int_equal(kvmm_mm_seq_create(r.as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, f->tpp, f->tokens), 0);
	assert_int_equal(kvmm_ns_set_secret(r.ns, s1), -EBUSY);
	kvmm_mm_seq_free(seq);
	stop(&r);
}

/*
 * With a host tier above the file, demoted pages land there first (here: two of them, the rest
 * finds it full and goes to the file); moved down, they are indexed on the way. A restart
 * after the move brings all of them back; pages still on the host tier would die with the
 * process (it is memory).
 */
static void test_moved_down_indexed(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info ti;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(swapon_host(r.pool, 1, 10, 2, PAGE_SZ), 0);
	first_life(f, &r);
	assert_int_equal(kvmm_swap_tier_info(r.pool, 1, &ti), 0);
	assert_int_equal(ti.used, 2);
	assert_int_equal(kvmm_swap_tier_info(r.pool, TIER, &ti), 0);
	assert_int_equal(ti.index_records, NB - 2);
	assert_int_equal(kvmm_swap_move_down(r.pool, 1, 2), 2);
	check_inv(r.pool);
	assert_int_equal(kvmm_swap_tier_info(r.pool, TIER, &ti), 0);
	assert_int_equal(ti.index_records, NB);
	stop(&r);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(restored(&r), NB);
	assert_int_equal(lookup_check(f, &r), NB);
	stop(&r);
}

/*
 * A provisioned secret (kvmmd's secret_file) is the namespace's own: an index made under it
 * is restored when the namespace comes back with it, and started over when it comes back
 * with another (its keys could never be looked up).
 */
static void test_provisioned_secret(void **state)
{
	static const uint64_t s1[2] = {0x1111, 0x2222}, s2[2] = {0x3333, 0x4444};
	struct fx *f = *state;
	struct run r;

	fresh(f);
	assert_int_equal(start_secret(f, &r, "t", true, s1), 0);
	first_life(f, &r);
	stop(&r);
	assert_int_equal(start_secret(f, &r, "t", true, s1), 0);
	assert_int_equal(restored(&r), NB);
	assert_int_equal(r.ns->secret[0], s1[0]);
	stop(&r);
	/* (that restart faulted nothing in: the records are still there) */
	assert_int_equal(start_secret(f, &r, "t", true, s2), 0);
	assert_int_equal(restored(&r), 0);
	assert_int_equal(r.ns->secret[0], s2[0]);
	assert_int_equal(lookup_check(f, &r), 0);
	stop(&r);
}

/*
 * Swap-in checksums: a demoted page whose bytes in the file changed while kvmmd runs is never
 * installed: the read fails its slot's checksum, the page is dropped (its entry goes, the
 * lookup misses from there), counted; the blocks before it still hit with their bytes.
 */
static void test_swapin_checksum_cached(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info ti;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	first_life(f, &r);
	poke(f->path, (off_t)(f->slot_of[3] * PAGE_SZ + 100));
	assert_int_equal(lookup_check(f, &r), 3);
	assert_int_equal(kvmm_swap_tier_info(r.pool, TIER, &ti), 0);
	assert_int_equal(ti.csum_bad, 1);
	assert_int_equal(r.pool->stat[KVMM_STAT_SWAP_CSUM_BAD], 1);
	/* gone, not retried: the next lookup misses at once */
	assert_int_equal(lookup_check(f, &r), 3);
	assert_int_equal(r.pool->stat[KVMM_STAT_SWAP_CSUM_BAD], 1);
	stop(&r);
}

/* A sequence's swapped page that fails its checksum: the fault fails, the sequence is lost. */
static void test_swapin_checksum_seq(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq;
	uint32_t b;
	struct run r;

	fresh(f);
	assert_int_equal(start(f, &r, "t", true), 0);
	assert_int_equal(kvmm_mm_seq_create(r.as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, NB * f->tpp, f->tokens), 0);
	for (b = 0; b < NB; b++)
		memcpy(kvmm_pool_frame_addr(r.pool, kvmm_mm_seq_frame(seq, b)), f->want[b],
		       PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, NB), (int)NB);
	assert_true(kvmm_pte_is_swap(seq->pte[2]));
	poke(f->path, (off_t)(kvmm_pte_swap_slot(seq->pte[2]) * PAGE_SZ + 7));
	assert_true(kvmm_mm_seq_fault(seq, 0, NB) < 0);
	assert_true(seq->flags & KVMM_SEQ_F_PREEMPTED);
	assert_int_equal(r.pool->stat[KVMM_STAT_SWAP_CSUM_BAD], 1);
	/* what did come back is its own; the bad block is still not resident */
	for (b = 0; b < NB; b++)
		if (kvmm_pte_is_present(seq->pte[b]))
			assert_memory_equal(kvmm_pool_frame_addr(r.pool, kvmm_mm_seq_frame(seq, b)),
					    f->want[b], PAGE_SZ);
	assert_false(kvmm_pte_is_present(seq->pte[2]));
	check_inv(r.pool);
	kvmm_mm_seq_free(seq);
	check_inv(r.pool);
	stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restart_after_shutdown),
		cmocka_unit_test(test_restart_after_crash),
		cmocka_unit_test(test_changed_page_rejected),
		cmocka_unit_test(test_resident_parent),
		cmocka_unit_test(test_pending_needs_same_prefix),
		cmocka_unit_test(test_pending_dropped),
		cmocka_unit_test(test_corrupt_record_rejected),
		cmocka_unit_test(test_foreign_starts_over),
		cmocka_unit_test(test_set_secret),
		cmocka_unit_test(test_moved_down_indexed),
		cmocka_unit_test(test_provisioned_secret),
		cmocka_unit_test(test_swapin_checksum_cached),
		cmocka_unit_test(test_swapin_checksum_seq),
	};

	return cmocka_run_group_tests_name("swap_index", tests, setup, teardown);
}
