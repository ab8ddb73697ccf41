// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_swap.c - swap tiers, slots, swap-out, fault-in, demotion, the swap cache,
 * readahead, swapoff, fault injection and a small randomized model, with invariants checked
 * after every step.
 *
 * Pages are filled with random bytes and must come back identical through every tier.  The
 * NVMe tier runs on a real swap file in a mkdtemp directory under /tmp (O_DIRECT through
 * io_uring); when io_uring or the file cannot be set up the NVMe tests skip with the reason.
 * A "manual" test tier (memory, completions only delivered by a waiting poll) makes reads
 * stay in flight deterministically, so the swap cache's join is tested without timing.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "check_inv.h"
#include "swap_tier.h"

#define PAGE_SZ 4096u
#define NFRAMES 64u
#define MAXB 16u

struct fx {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	char dir[64];
	char path[128];
	uint64_t rng;
	uint8_t want[4][MAXB][PAGE_SZ]; /* expected bytes per (seq slot, block) */
};

static uint64_t rnd(struct fx *f)
{
	uint64_t z = (f->rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static int setup(void **state)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = NFRAMES};
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->rng = 12345;
	if (kvmm_pool_create(&p, &f->pool) || kvmm_ns_create(f->pool, "t", 0, 0, &f->ns) ||
	    kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP32}, PAGE_SZ) ||
	    kvmm_aspace_create(f->pool, f->ns, &f->fmt, NULL, &f->as))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvmm-swap.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/swapfile", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	kvmm_pool_destroy(f->pool);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* a sequence of @nb full blocks of distinct tokens (base..), every page random bytes */
static struct kvmm_seq *mkseq(struct fx *f, int idx, uint32_t nb, uint32_t base)
{
	uint32_t tpp = f->fmt.tokens_per_page, i, b;
	uint32_t *tok = calloc((size_t)nb * tpp, sizeof(*tok));
	struct kvmm_seq *seq;

	assert_non_null(tok);
	for (i = 0; i < nb * tpp; i++)
		tok[i] = base + i;
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, nb * tpp, tok), 0);
	for (b = 0; b < nb; b++) {
		uint8_t *p = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, b));
		for (i = 0; i < PAGE_SZ; i += 8) {
			uint64_t v = rnd(f);

			memcpy(&f->want[idx][b][i], &v, 8);
		}
		memcpy(p, f->want[idx][b], PAGE_SZ);
	}
	free(tok);
	return seq;
}

static void check_bytes(struct fx *f, int idx, struct kvmm_seq *seq, uint32_t from, uint32_t to)
{
	uint32_t b;

	for (b = from; b < to; b++) {
		uint32_t fr = kvmm_mm_seq_frame(seq, b);

		assert_int_not_equal(fr, KVMM_FRAME_NONE);
		assert_memory_equal(kvmm_pool_frame_addr(f->pool, fr), f->want[idx][b], PAGE_SZ);
	}
}

static int add_host(struct fx *f, unsigned int id, int prio, uint32_t slots)
{
	return swapon_host(f->pool, id, prio, slots, PAGE_SZ);
}

static int add_nvme(struct fx *f, unsigned int id, int prio, uint32_t slots)
{
	return swapon_nvme(f->pool, id, prio, slots, PAGE_SZ, f->path, 8);
}

static uint64_t vmstat(struct fx *f, enum kvmm_stat s)
{
	return f->pool->stat[s];
}

/* ---- round trips --------------------------------------------------------------------- */

static void roundtrip(struct fx *f)
{
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	uint32_t free0 = kvmm_pool_nr_free(f->pool), b;
	uint64_t out0 = vmstat(f, KVMM_STAT_SWPOUT), in0 = vmstat(f, KVMM_STAT_SWPIN);

	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 + 8);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 8);
	for (b = 0; b < 8; b++) {
		assert_true(kvmm_pte_is_swap(seq->pte[b]));
		/* a run: the sequence's consecutive pages got consecutive slots */
		assert_int_equal(kvmm_pte_swap_slot(seq->pte[b]),
				 kvmm_pte_swap_slot(seq->pte[0]) + b);
	}
	assert_int_equal(vmstat(f, KVMM_STAT_SWPOUT) - out0, 8);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN) - in0, 8);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 8);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

static void test_host_roundtrip(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info info;

	assert_int_equal(add_host(f, 1, 10, 32), 0);
	roundtrip(f);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 1, &info), 0);
	assert_string_equal(info.kind, "host");
	assert_int_equal(info.bytes_out, 8 * PAGE_SZ);
	assert_int_equal(info.bytes_in, 8 * PAGE_SZ);
	assert_int_equal(info.used, 0);
}

static void test_nvme_roundtrip(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info info;
	struct stat st;

	assert_int_equal(add_nvme(f, 2, 0, 64), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_size, 64 * PAGE_SZ);
	roundtrip(f);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 2, &info), 0);
	assert_string_equal(info.kind, "nvme");
	if (!info.direct)
		print_message("note: O_DIRECT refused here, buffered fallback used\n");
	assert_int_equal(info.pages_out, 8);
	assert_int_equal(info.pages_in, 8);
}

static void test_swapon_args(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_params p = {.tier = 1, .size = PAGE_SZ};
	unsigned int ids[4];

	assert_int_equal(add_host(f, 0, 0, 4), -EINVAL);
	assert_int_equal(add_host(f, 32, 0, 4), -EINVAL);
	p.size = PAGE_SZ + 1;
	assert_int_equal(kvmm_swapon(f->pool, &kvmm_swap_host_ops, &p), -EINVAL);
	assert_int_equal(add_host(f, 3, 1, 4), 0);
	assert_int_equal(add_host(f, 3, 1, 4), -EEXIST);
	assert_int_equal(add_host(f, 4, 9, 4), 0);
	assert_int_equal(kvmm_swap_tiers(f->pool, ids, 4), 2);
	assert_int_equal(ids[0], 4); /* priority order */
	assert_int_equal(ids[1], 3);
	assert_int_equal(kvmm_swapoff(f->pool, 5), -ENOENT);
	assert_int_equal(kvmm_swapoff(f->pool, 3), 0);
	assert_int_equal(kvmm_swap_tiers(f->pool, ids, 4), 1);
	check_inv(f->pool);
}

/* ---- tiers, move-down, swapoff ------------------------------------------------------------ */

static void test_priority_and_move_down(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info hi, lo;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);

	assert_int_equal(add_host(f, 1, 10, 4), 0);
	assert_int_equal(add_host(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	check_inv(f->pool);
	kvmm_swap_tier_info(f->pool, 1, &hi);
	kvmm_swap_tier_info(f->pool, 2, &lo);
	assert_int_equal(hi.used, 4); /* the high tier fills first */
	assert_int_equal(lo.used, 4);
	assert_int_equal(kvmm_swap_move_down(f->pool, 1, 100), 4);
	check_inv(f->pool);
	kvmm_swap_tier_info(f->pool, 1, &hi);
	kvmm_swap_tier_info(f->pool, 2, &lo);
	assert_int_equal(hi.used, 0);
	assert_int_equal(lo.used, 8);
	/* nothing lower than the lowest tier */
	assert_int_equal(kvmm_swap_move_down(f->pool, 2, 100), -ENOSPC);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_bytes(f, 0, seq, 0, 8);
	check_inv(f->pool);
}

static void test_swapoff_moves_down(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 6, 1);
	struct kvmm_swap_tier_info lo;

	assert_int_equal(add_host(f, 1, 10, 16), 0);
	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 6), 6);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_inv(f->pool);
	kvmm_swap_tier_info(f->pool, 2, &lo);
	assert_int_equal(lo.used, 6);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 6);
	assert_int_equal(kvmm_swapoff(f->pool, 2), 0); /* the last tier: pages come back */
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 6);
}

static void test_swapoff_no_frames(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 16, 1);
	struct kvmm_page *hog[NFRAMES];
	uint32_t n = 0;

	assert_int_equal(add_host(f, 1, 0, 32), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 16), 16);
	/* take every frame: swapoff cannot bring the pages back and must keep the tier */
	while (n < NFRAMES && (hog[n] = kvmm_alloc_page(f->pool, NULL, NULL)))
		n++;
	assert_int_equal(kvmm_swapoff(f->pool, 1), -ENOMEM);
	assert_non_null(kvmm_swap_tier_get(f->pool, 1));
	while (n)
		kvmm_free_page(f->pool, hog[--n], NULL);
	check_inv(f->pool);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_bytes(f, 0, a, 0, 16);
	check_inv(f->pool);
}

/* ---- far reads: slots pinned in place ------------------------------------------------------ */

/*
 * kvmm_swap_far_pin: a swapped page's slot pinned where it lies.  The arena is a memfd whose
 * mapping shows the page's bytes; a pinned slot outlives its page (truncated: the slot is
 * held, named by nobody, never reused) until the last unpin frees it; swapoff waits.
 */
static void test_far_pin_slot(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 6, 1), *other;
	struct kvmm_swap_tier *t;
	uint64_t s0, s1, s, used;
	const uint8_t *view;
	uint32_t b;
	int fd;

	assert_null(kvmm_swap_far_tier(f->pool)); /* no tier yet */
	assert_int_equal(add_host(f, 1, 10, 16), 0);
	t = kvmm_swap_far_tier(f->pool);
	assert_non_null(t);
	assert_true(t->gen != 0);
	assert_ptr_equal(kvmm_swap_tier_of_gen(f->pool, t->gen), t);
	assert_null(kvmm_swap_tier_of_gen(f->pool, t->gen + 1));
	assert_null(kvmm_swap_tier_of_gen(f->pool, 0));
	fd = t->ops->arena_fd(t);
	assert_true(fd >= 0);
	view = mmap(NULL, 16 * PAGE_SZ, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(view != MAP_FAILED);
	/* resident, or unsealed: nothing to pin in place */
	assert_false(kvmm_swap_far_usable(t, seq->pte[0], true));
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 6), 6);
	assert_false(kvmm_swap_far_usable(t, seq->pte[0], false));
	assert_false(kvmm_swap_far_pin(t, seq->pte[0], false, &s));
	assert_true(kvmm_swap_far_pin(t, seq->pte[0], true, &s0));
	assert_true(kvmm_swap_far_pin(t, seq->pte[0], true, &s)); /* pins nest */
	assert_true(s == s0);
	assert_true(kvmm_swap_far_pin(t, seq->pte[1], true, &s1));
	assert_int_equal(t->nr_far_pins, 3);
	check_inv(f->pool);
	/* the client's view of the arena holds the pages' bytes */
	assert_memory_equal(view + s0 * PAGE_SZ, f->want[0][0], PAGE_SZ);
	assert_memory_equal(view + s1 * PAGE_SZ, f->want[0][1], PAGE_SZ);
	assert_int_equal(kvmm_swapoff(f->pool, 1), -EBUSY);
	/* the sequence goes: its slots are released, the pinned ones held with their bytes */
	used = t->nr_used;
	assert_int_equal(vmstat(f, KVMM_STAT_FAR_PIN), 3);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 0), 0);
	assert_int_equal(t->nr_used, used - 4);
	assert_int_equal(vmstat(f, KVMM_STAT_FAR_HELD), 2);
	check_inv(f->pool);
	/* new swap-outs take other slots; the held ones keep their bytes */
	other = mkseq(f, 1, 12, 100);
	assert_int_equal(kvmm_mm_seq_swap_out(other, 0, 12), 12);
	for (b = 0; b < 12; b++) {
		s = kvmm_pte_swap_slot(other->pte[b]);
		assert_true(s != s0 && s != s1);
	}
	check_inv(f->pool);
	assert_memory_equal(view + s0 * PAGE_SZ, f->want[0][0], PAGE_SZ);
	assert_memory_equal(view + s1 * PAGE_SZ, f->want[0][1], PAGE_SZ);
	/* the last unpin frees a held slot */
	kvmm_swap_far_unpin(t, s0);
	assert_int_equal(t->nr_used, 14);
	kvmm_swap_far_unpin(t, s1);
	assert_int_equal(t->nr_used, 13);
	kvmm_swap_far_unpin(t, s0);
	assert_int_equal(t->nr_used, 12);
	assert_int_equal(t->nr_far_pins, 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_inv(f->pool);
	check_bytes(f, 1, other, 0, 12);
	munmap((void *)view, 16 * PAGE_SZ);
}

/* ---- shared pages, sealed pages, demotion -------------------------------------------------- */

static void test_shared_not_swapped(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 4, 1), *b;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	/* every page is shared now: nothing to swap */
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 0);
	kvmm_mm_seq_free(b);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	/* fork of a swapped sequence brings its pages back first */
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	check_bytes(f, 0, a, 0, 4);
	check_bytes(f, 0, b, 0, 4);
	check_inv(f->pool);
}

static void test_demote_and_lookup(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[6 * 64];
	struct kvmm_seq *a = mkseq(f, 0, 6, 100), *b;
	uint32_t nfree;

	for (i = 0; i < 6 * tpp; i++)
		tok[i] = 100 + i;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 6);
	kvmm_mm_seq_free(a); /* six CACHED pages */
	check_inv(f->pool);
	nfree = kvmm_pool_nr_free(f->pool);
	assert_int_equal(kvmm_swap_demote(f->pool, NULL, 3), 3);
	/* and reclaim demotes too, instead of dropping */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 3), 3);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), nfree + 6);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_DEMOTE), 6);
	assert_int_equal(kvmm_pagecache_count(f->pool), 6); /* the prefix survives */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, tok, 6 * tpp), (int)(6 * tpp));
	check_inv(f->pool);
	check_bytes(f, 0, b, 0, 6);
	assert_true(vmstat(f, KVMM_STAT_REFAULT) >= 6);
}

/* The tier and slot a swap PTE names. */
static struct kvmm_swap_tier *slot_of(struct fx *f, uint64_t pte, uint64_t *slot)
{
	*slot = kvmm_pte_swap_slot(pte);
	return kvmm_pte_is_swap(pte) ? kvmm_swap_tier_get(f->pool, kvmm_pte_swap_tier(pte)) : NULL;
}

/*
 * A client that reads the far tier in place (as->far_lookup, set by FAR_MAP): its lookups
 * map demoted pages where they lie, swap PTEs counted in the slot's nr_map (a slot one
 * sequence owned becomes a shared one), nothing faulted in; a fault brings a page back for
 * every mapper at once; a mapper going away leaves the demoted page cached.
 */
static void test_far_lookup_maps_in_place(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i, b;
	uint32_t tok[6 * 64];
	struct kvmm_seq *a = mkseq(f, 0, 6, 100), *x, *y, *z;
	struct kvmm_swap_tier *t;
	uint64_t in0, s;

	for (i = 0; i < 6 * tpp; i++)
		tok[i] = 100 + i;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	t = kvmm_swap_far_tier(f->pool);
	assert_non_null(t);
	assert_int_equal(kvmm_mm_seq_seal(a), 6);
	kvmm_mm_seq_free(a); /* six CACHED pages, demoted to the tier */
	assert_int_equal(kvmm_swap_demote(f->pool, NULL, 6), 6);
	check_inv(f->pool);
	f->as->far_lookup = true;
	in0 = vmstat(f, KVMM_STAT_SWPIN);
	assert_int_equal(kvmm_mm_seq_create(f->as, &x), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(x, tok, 6 * tpp), (int)(6 * tpp));
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN), in0); /* nothing read back */
	assert_int_equal(vmstat(f, KVMM_STAT_FAR_MAP), 6);
	for (b = 0; b < 6; b++) {
		assert_true(kvmm_pte_is_swap(x->pte[b]));
		assert_true(slot_of(f, x->pte[b], &s) == t);
		assert_int_equal(t->slots[s].nr_map, 1);
	}
	/* a second mapper */
	assert_int_equal(kvmm_mm_seq_create(f->as, &y), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(y, tok, 6 * tpp), (int)(6 * tpp));
	check_inv(f->pool);
	assert_true(slot_of(f, y->pte[0], &s) == t);
	assert_int_equal(t->slots[s].nr_map, 2);
	/* far pins read the slots as mapped */
	assert_true(kvmm_swap_far_usable(t, y->pte[2], true));
	/* y goes: x still maps them */
	kvmm_mm_seq_free(y);
	check_inv(f->pool);
	assert_int_equal(t->slots[s].nr_map, 1);
	/* x faults two in: back for every mapper, the bytes the first sequence wrote */
	assert_int_equal(kvmm_mm_seq_create(f->as, &z), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(z, tok, 6 * tpp), (int)(6 * tpp));
	assert_true(kvmm_mm_seq_fault(x, 0, 2) >= 2);
	check_inv(f->pool);
	assert_true(kvmm_pte_is_present(z->pte[0]) && kvmm_pte_is_present(z->pte[1]));
	check_bytes(f, 0, x, 0, 2);
	assert_true(kvmm_mm_seq_fault(z, 0, 6) >= 0); /* readahead may have brought some */
	for (b = 0; b < 6; b++)
		assert_true(kvmm_pte_is_present(x->pte[b]) && kvmm_pte_is_present(z->pte[b]));
	check_bytes(f, 0, x, 0, 6);
	check_inv(f->pool);
	kvmm_mm_seq_free(x);
	kvmm_mm_seq_free(z);
	check_inv(f->pool);
	assert_int_equal(kvmm_pagecache_count(f->pool), 6); /* still cached */
	/* without far_lookup a lookup faults them in as before */
	f->as->far_lookup = false;
	assert_true(kvmm_swap_demote(f->pool, NULL, 6) >= 5);
	assert_int_equal(kvmm_mm_seq_create(f->as, &x), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(x, tok, 5 * tpp), (int)(5 * tpp));
	for (b = 0; b < 5; b++)
		assert_true(kvmm_pte_is_present(x->pte[b]));
	check_bytes(f, 0, x, 0, 5);
	kvmm_mm_seq_free(x);
	check_inv(f->pool);
}

/* A sequence's own swapped sealed page becomes one of several mappers' at a far lookup. */
static void test_far_lookup_owned_slot(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[4 * 64];
	struct kvmm_seq *a = mkseq(f, 0, 4, 100), *x;
	struct kvmm_swap_tier *t;
	uint64_t s;

	for (i = 0; i < 4 * tpp; i++)
		tok[i] = 100 + i;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	t = kvmm_swap_far_tier(f->pool);
	assert_int_equal(kvmm_mm_seq_seal(a), 4);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	assert_true(slot_of(f, a->pte[0], &s) == t);
	assert_ptr_equal(t->slots[s].seq, a);
	check_inv(f->pool);
	f->as->far_lookup = true;
	assert_int_equal(kvmm_mm_seq_create(f->as, &x), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(x, tok, 4 * tpp), (int)(4 * tpp));
	check_inv(f->pool);
	assert_null(t->slots[s].seq);
	assert_int_equal(t->slots[s].nr_map, 2);
	assert_true((x->pte[0] & ~KVMM_PTE_FLAGS_MASK) == (a->pte[0] & ~KVMM_PTE_FLAGS_MASK));
	assert_true(a->pte[0] & KVMM_PTE_SHARED);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
	assert_int_equal(t->slots[s].nr_map, 1);
	assert_true(kvmm_mm_seq_fault(x, 0, 4) >= 4);
	check_bytes(f, 0, x, 0, 4);
	kvmm_mm_seq_free(x);
	check_inv(f->pool);
}

static void test_ns_destroy_drops_demoted(void **state)
{
	struct fx *f = *state;
	struct kvmm_ns *ns2;
	struct kvmm_aspace *as2;
	struct kvmm_seq *a;
	struct kvmm_swap_tier_info info;
	uint32_t tok[4 * 64], i;

	for (i = 0; i < 4 * f->fmt.tokens_per_page; i++)
		tok[i] = 9 + i;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "other", 0, 0, &ns2), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, ns2, &f->fmt, NULL, &as2), 0);
	assert_int_equal(kvmm_mm_seq_create(as2, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 4 * f->fmt.tokens_per_page, tok), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 4);
	kvmm_aspace_destroy(as2);
	assert_int_equal(kvmm_swap_demote(f->pool, ns2, 4), 4);
	check_inv(f->pool);
	assert_int_equal(kvmm_ns_destroy(ns2), 0);
	check_inv(f->pool);
	kvmm_swap_tier_info(f->pool, 1, &info);
	assert_int_equal(info.used, 0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
}

static void test_sealed_swapout_shared_by_lookup(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[4 * 64];
	struct kvmm_seq *a = mkseq(f, 0, 4, 7), *b;

	for (i = 0; i < 4 * tpp; i++)
		tok[i] = 7 + i;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 4);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	check_inv(f->pool);
	/* a lookup faults the pages in, for itself and for @a, whose PTEs are present again */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, tok, 4 * tpp), (int)(4 * tpp));
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	for (i = 0; i < 4; i++)
		assert_int_equal(kvmm_mm_seq_frame(a, i), kvmm_mm_seq_frame(b, i));
	check_bytes(f, 0, b, 0, 4);
	/* swap a's sealed blocks again, then a lookup continues past them */
	kvmm_mm_seq_free(b);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	kvmm_mm_seq_free(a); /* entries stay, naming their slots: demoted */
	check_inv(f->pool);
	assert_int_equal(kvmm_pagecache_count(f->pool), 4);
}

/* ---- pages several sequences map (a shared sealed prefix) ------------------------------- */

/* byte pattern of block @b of a page tagged @tag (prefix 1, own pages 2 and 3) */
static uint8_t sh_byte(uint32_t tag, uint32_t b, uint32_t i)
{
	return (uint8_t)(tag * 131u + b * 7u + i * 13u + (i >> 8));
}

static void sh_fill(struct fx *f, struct kvmm_seq *seq, uint32_t from, uint32_t to, uint32_t tag)
{
	uint32_t b, i;

	for (b = from; b < to; b++) {
		uint8_t *p = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, b));

		for (i = 0; i < PAGE_SZ; i++)
			p[i] = sh_byte(tag, b, i);
	}
}

/* blocks [from, to) of @seq are resident and hold the pattern of @tag */
static void sh_check(struct fx *f, struct kvmm_seq *seq, uint32_t from, uint32_t to, uint32_t tag)
{
	uint32_t b, i;

	for (b = from; b < to; b++) {
		uint32_t fr = kvmm_mm_seq_frame(seq, b);
		const uint8_t *p;

		assert_int_not_equal(fr, KVMM_FRAME_NONE);
		p = kvmm_pool_frame_addr(f->pool, fr);
		for (i = 0; i < PAGE_SZ; i++)
			if (p[i] != sh_byte(tag, b, i))
				fail_msg("block %u byte %u: %u, want %u", b, i, p[i],
					 sh_byte(tag, b, i));
	}
}

/* @a holds @np sealed blocks of tokens 5000.. (pattern 1); @b maps them by a prefix lookup */
static void sh_prefix(struct fx *f, uint32_t np, struct kvmm_seq **a, struct kvmm_seq **b)
{
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t *tok = calloc((size_t)np * tpp, sizeof(*tok));

	assert_non_null(tok);
	for (i = 0; i < np * tpp; i++)
		tok[i] = 5000 + i;
	assert_int_equal(kvmm_mm_seq_create(f->as, a), 0);
	assert_int_equal(kvmm_mm_seq_append(*a, np * tpp, tok), 0);
	sh_fill(f, *a, 0, np, 1);
	/* the engine wrote their KV (what an UNPIN says) */
	for (i = 0; i < np; i++)
		kvmm_page_unpin(kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(*a, i)), 0);
	assert_int_equal(kvmm_mm_seq_seal(*a), (int)np);
	assert_int_equal(kvmm_mm_seq_create(f->as, b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(*b, tok, np * tpp), (int)(np * tpp));
	for (i = 0; i < np; i++)
		assert_int_equal(kvmm_mm_seq_frame(*a, i), kvmm_mm_seq_frame(*b, i));
	free(tok);
}

/* append @nb blocks of own tokens (base) to @seq, pattern @tag; 0 or the append's error */
static int sh_append(struct fx *f, struct kvmm_seq *seq, uint32_t nb, uint32_t base, uint32_t tag)
{
	uint32_t tpp = f->fmt.tokens_per_page, i, from = seq->nblocks;
	uint32_t tok[8 * 64];
	int ret;

	assert_true(nb * tpp <= ARRAY_SIZE(tok));
	for (i = 0; i < nb * tpp; i++)
		tok[i] = base + i;
	ret = kvmm_mm_seq_append(seq, nb * tpp, tok);
	if (!ret)
		sh_fill(f, seq, from, from + nb, tag);
	return ret;
}

/*
 * A sealed prefix that two sequences map is reclaimed: kvmm_shrink() swaps the shared pages
 * out of both (each PTE names the one slot), a fault by either brings each page back once and
 * maps it into both, with its bytes.  (Before: nothing was reclaimable at all, every page had
 * two mappers.)
 */
static void test_shared_prefix_reclaimed(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a, *b;
	uint32_t nfree, i;
	uint64_t in0, out0, clean0;

	assert_int_equal(add_host(f, 1, 0, 64), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	sh_prefix(f, 24, &a, &b);
	check_inv(f->pool);
	/* a sequence's own swap-out never takes a page another maps */
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 24), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(b, 0, 24), 0);
	nfree = kvmm_pool_nr_free(f->pool);
	assert_int_equal(kvmm_shrink(f->pool, 24, 0), 24);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), nfree + 24);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 24);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 24);
	for (i = 0; i < 24; i++)
		assert_int_equal(a->pte[i] & ~KVMM_PTE_FLAGS_MASK,
				 b->pte[i] & ~KVMM_PTE_FLAGS_MASK);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_SHARED), 24);
	assert_int_equal(kvmm_pagecache_count(f->pool), 24); /* the entries name the slots */

	/* b faults block 5: one read, and a maps the page again too */
	in0 = vmstat(f, KVMM_STAT_SWPIN);
	assert_int_equal(kvmm_mm_seq_fault(b, 5, 1), 1);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN) - in0, 1);
	assert_int_equal(kvmm_mm_seq_frame(a, 5), kvmm_mm_seq_frame(b, 5));
	sh_check(f, a, 5, 6, 1);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 23);

	/* swapped out again (its slot is kept: no second write), then a faults everything */
	out0 = vmstat(f, KVMM_STAT_SWPOUT);
	clean0 = vmstat(f, KVMM_STAT_SWAP_CLEAN);
	assert_int_equal(kvmm_shrink(f->pool, 1, 0), 1);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPOUT), out0);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CLEAN) - clean0, 1);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 24), 24);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN) - in0, 25);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	sh_check(f, a, 0, 24, 1);
	sh_check(f, b, 0, 24, 1);

	/* out once more; freeing one mapper leaves the other's PTEs naming the slots */
	assert_int_equal(kvmm_shrink(f->pool, 24, 0), 24);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 24);
	assert_int_equal(kvmm_mm_seq_fault(b, 0, 24), 24);
	sh_check(f, b, 0, 24, 1);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
	assert_int_equal(kvmm_pagecache_count(f->pool), 24);
}

/* A pinned shared page is never taken, nor is one of a NORECLAIM sequence. */
static void test_shared_pinned_kept(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a, *b;
	uint32_t i;

	assert_int_equal(add_host(f, 1, 0, 64), 0);
	sh_prefix(f, 8, &a, &b);
	for (i = 2; i < 5; i++)
		kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(a, i))->pincount++;
	assert_int_equal(kvmm_shrink(f->pool, 8, 0), 5);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 5);
	assert_int_equal(kvmm_seq_nr_resident(b), 3);
	sh_check(f, b, 2, 5, 1);
	for (i = 2; i < 5; i++)
		kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(a, i))->pincount--;
	b->flags |= KVMM_SEQ_F_NORECLAIM;
	assert_int_equal(kvmm_shrink(f->pool, 8, 0), 0);
	b->flags &= ~KVMM_SEQ_F_NORECLAIM;
	assert_int_equal(kvmm_shrink(f->pool, 8, 0), 3);
	check_inv(f->pool);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 8), 8);
	sh_check(f, a, 0, 8, 1);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
}

/*
 * Two sequences share a sealed prefix of 56 pages in a 64-frame pool and each adds pages of
 * its own: the second's prefix and own pages alone (56 + 10) do not fit.  Before, its pages
 * could not be allocated (only the first's own 4 pages were reclaimable); now the shared
 * prefix is reclaimed too, and both can have their last pages resident at once, each with
 * its bytes, and every page of both comes back right.
 */
static void test_shared_prefix_bigger_than_pool(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a, *b;

	assert_int_equal(add_host(f, 1, 0, 128), 0);
	sh_prefix(f, 56, &a, &b);
	assert_int_equal(sh_append(f, a, 4, 90000, 2), 0);
	check_inv(f->pool);
	assert_int_equal(sh_append(f, b, 10, 70000, 3), 0);
	check_inv(f->pool);
	assert_true(vmstat(f, KVMM_STAT_SWAP_SHARED) > 0);
	/* both sequences' last blocks resident together: 8 shared + 4 + 10 */
	kvmm_shrink(f->pool, 24, 0);
	assert_true(kvmm_mm_seq_fault(a, 48, 12) >= 0);
	assert_true(kvmm_mm_seq_fault(b, 48, 18) >= 0);
	check_inv(f->pool);
	sh_check(f, a, 48, 56, 1);
	sh_check(f, a, 56, 60, 2);
	sh_check(f, b, 48, 56, 1);
	sh_check(f, b, 56, 66, 3);
	/* and all of a, then b in two halves */
	kvmm_shrink(f->pool, 60, 0);
	assert_true(kvmm_mm_seq_fault(a, 0, 60) >= 0);
	sh_check(f, a, 0, 56, 1);
	sh_check(f, a, 56, 60, 2);
	kvmm_shrink(f->pool, 40, 0);
	assert_true(kvmm_mm_seq_fault(b, 0, 33) >= 0);
	sh_check(f, b, 0, 33, 1);
	kvmm_shrink(f->pool, 40, 0);
	assert_true(kvmm_mm_seq_fault(b, 33, 33) >= 0);
	sh_check(f, b, 33, 56, 1);
	sh_check(f, b, 56, 66, 3);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
}

/*
 * A shared page's slot through the other swap paths: a lookup hitting its entry brings it back
 * for the lookup and every mapper; move-down rewrites every mapper's PTE; DROP_CACHES leaves
 * it (it is the sequences' data); swapoff of the last tier brings it back for all; and once
 * both mappers are gone, only demoted cache is left, which drops to nothing.
 */
static void test_shared_swap_paths(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[8 * 64];
	struct kvmm_swap_tier_info hi, lo;
	struct kvmm_seq *a, *b, *c;

	for (i = 0; i < 8 * tpp; i++)
		tok[i] = 5000 + i;
	assert_int_equal(add_host(f, 1, 10, 16), 0);
	assert_int_equal(add_host(f, 2, 0, 32), 0);
	sh_prefix(f, 8, &a, &b);
	assert_int_equal(kvmm_mm_seq_swap_out_shared(b, 0, 8), 8);
	check_inv(f->pool);
	/* a lookup of the prefix: one read a page, and a and b map the pages again too */
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(c, tok, 8 * tpp), (int)(8 * tpp));
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(kvmm_mm_seq_frame(a, i), kvmm_mm_seq_frame(c, i));
	sh_check(f, b, 0, 8, 1);
	kvmm_mm_seq_free(c);

	/* out again (clean: their kept slots), then moved down: every PTE follows */
	assert_int_equal(kvmm_mm_seq_swap_out_shared(a, 0, 8), 8);
	kvmm_swap_tier_info(f->pool, 1, &hi);
	assert_int_equal(hi.used, 8);
	assert_int_equal(kvmm_swap_move_down(f->pool, 1, 100), 8);
	check_inv(f->pool);
	kvmm_swap_tier_info(f->pool, 2, &lo);
	assert_int_equal(lo.used, 8);
	for (i = 0; i < 8; i++)
		assert_int_equal(kvmm_pte_swap_tier(a->pte[i]), 2);
	/* DROP_CACHES with swap: the sequences' pages stay */
	assert_int_equal(kvmm_swap_drop_cached(f->pool), 0);
	check_inv(f->pool);
	/* swapoff of tier 2 moves them up to tier 1, of tier 1 brings them back for both */
	assert_int_equal(kvmm_swapoff(f->pool, 2), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 8);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	sh_check(f, a, 0, 8, 1);
	sh_check(f, b, 0, 8, 1);

	/* out of both, both freed: demoted cache is all that is left, and it drops */
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_shared(a, 0, 8), 8);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_drop_cached(f->pool), 8);
	kvmm_swap_tier_info(f->pool, 1, &hi);
	assert_int_equal(hi.used, 0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
	check_inv(f->pool);
}

static void test_append_truncate_seal_swapped(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct kvmm_seq *a = mkseq(f, 0, 4, 1);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	/* a partial tail */
	assert_int_equal(kvmm_mm_seq_truncate(a, 3 * tpp + 5), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_append(a, 3, NULL), 0); /* faults the tail in */
	check_inv(f->pool);
	check_bytes(f, 0, a, 3, 4);
	assert_int_equal(kvmm_mm_seq_truncate(a, 2 * tpp + 1), 0); /* faults block 2 in */
	check_inv(f->pool);
	check_bytes(f, 0, a, 2, 3);
	/* blocks 0 and 1 never came back; block 2 goes out again */
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 3), 1);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 3);
	assert_int_equal(kvmm_mm_seq_seal(a), 2); /* faults the blocks to seal in */
	check_inv(f->pool);
	check_bytes(f, 0, a, 0, 2);
	assert_int_equal(kvmm_mm_seq_truncate(a, 0), 0);
	check_inv(f->pool);
}

/*
 * Sealing block b reads block b - 1's cache entry through its page: kvmm_mm_seq_seal() faults
 * that sealed block in too, not only the blocks it seals (it stopped on block_page()'s
 * KVMM_BUG_ON in the page cache when the sealed block before them was swapped out).
 */
static void test_seal_parent_swapped(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct kvmm_seq *a = mkseq(f, 0, 3, 1);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_truncate(a, tpp), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 1); /* block 0 sealed */
	assert_int_equal(kvmm_mm_seq_append(a, 2 * tpp, NULL), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 3), 3);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 3);
	assert_int_equal(kvmm_mm_seq_seal(a), 2); /* blocks 1 and 2, and block 0 faults in */
	check_inv(f->pool);
	check_bytes(f, 0, a, 0, 1);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	assert_int_equal(kvmm_mm_seq_truncate(a, 0), 0);
	check_inv(f->pool);
}

/*
 * An append into a partial tail in a full pool: the pages it allocates make room by reclaim,
 * which must not swap out the tail the append is writing into (first in reclaim order here).
 * Found by tests/fuzz/fuzz_admin.c: seq_append() marked the swapped tail through its PTE and
 * stopped on seq_page()'s KVMM_BUG_ON.
 */
static void test_append_reclaim_keeps_tail(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct kvmm_seq *a = mkseq(f, 0, 2, 1), *b;

	assert_int_equal(add_host(f, 1, 0, NFRAMES), 0);
	assert_int_equal(kvmm_mm_seq_truncate(a, tpp + 5), 0); /* block 1 is a partial tail */
	a->priority = -10;				       /* reclaim takes a first */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	b->priority = 10;
	while (kvmm_pool_nr_free(f->pool))
		assert_int_equal(kvmm_mm_seq_append(b, tpp, NULL), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * tpp, NULL), 0);
	check_inv(f->pool);
	assert_true(kvmm_mm_seq_frame(a, 1) != KVMM_FRAME_NONE);
	assert_memory_equal(kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(a, 1)), f->want[0][1],
			    PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_truncate(a, 0), 0);
	assert_int_equal(kvmm_mm_seq_truncate(b, 0), 0);
	check_inv(f->pool);
}

/* ---- the swap cache and readahead, with a tier whose reads stay in flight ------------------- */

struct manual_tier {
	uint8_t *mem;
	struct list_head queued;
};

static int manual_init(struct kvmm_swap_tier *t, const struct kvmm_swap_tier_params *p)
{
	struct manual_tier *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->mem = calloc(1, p->size);
	if (!m->mem) {
		free(m);
		return -ENOMEM;
	}
	INIT_LIST_HEAD(&m->queued);
	t->priv = m;
	return 0;
}

static void manual_fini(struct kvmm_swap_tier *t)
{
	struct manual_tier *m = t->priv;

	free(m->mem);
	free(m);
}

static int manual_submit(struct kvmm_swap_tier *t, struct kvmm_swap_io *io)
{
	struct manual_tier *m = t->priv;

	list_add_tail(&io->node, &m->queued);
	return 0;
}

static int manual_flush(struct kvmm_swap_tier *t)
{
	(void)t;
	return 0;
}

/* completes only when asked to wait: reads stay in flight until someone needs them */
static int manual_poll(struct kvmm_swap_tier *t, bool wait)
{
	struct manual_tier *m = t->priv;
	int n = 0;

	if (!wait)
		return 0;
	while (!list_empty(&m->queued)) {
		struct kvmm_swap_io *io = list_first_entry(&m->queued, struct kvmm_swap_io, node);
		uint8_t *slot = m->mem + io->slot * t->page_size;

		list_del(&io->node);
		if (io->write)
			memcpy(slot, io->buf, t->page_size);
		else
			memcpy(io->buf, slot, t->page_size);
		io->res = 0;
		io->end_io(io);
		n++;
	}
	return n;
}

static const struct kvmm_swap_ops manual_ops = {
	.name = "manual",
	.init = manual_init,
	.fini = manual_fini,
	.submit = manual_submit,
	.flush = manual_flush,
	.poll = manual_poll,
};

static int add_manual(struct fx *f)
{
	struct kvmm_swap_tier_params p = {.tier = 5, .size = 32 * PAGE_SZ};

	return kvmm_swapon(f->pool, &manual_ops, &p);
}

static void test_readahead_joins_in_flight(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 8, 1);

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 8), 8);
	/* default depth 2: faulting block 0 reads 1 and 2 ahead, asynchronously */
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 1), 1);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_RA), 2);
	assert_true(kvmm_pte_is_swap(a->pte[1]));
	check_inv(f->pool); /* two locked frames in the swap cache */
	/* a fault on block 1 joins its read instead of reading again */
	assert_int_equal(kvmm_mm_seq_fault(a, 1, 1), 1);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CACHE_HIT), 1);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_poll(f->pool, true) >= 0, 1);
	check_inv(f->pool);
	check_bytes(f, 0, a, 0, 4);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 4);
}

static void test_prefetch_async(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 6, 1);

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 6), 6);
	assert_int_equal(kvmm_mm_seq_prefetch(a, 0, 6), 6);
	assert_int_equal(kvmm_mm_seq_prefetch(a, 0, 6), 0); /* already in flight */
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 6);
	assert_int_equal(kvmm_swap_poll(f->pool, true), 6);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	check_inv(f->pool);
	check_bytes(f, 0, a, 0, 6);
}

static void test_free_while_reading(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 6, 1);
	uint32_t nfree;
	struct kvmm_swap_tier_info info;

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 6), 6);
	nfree = kvmm_pool_nr_free(f->pool);
	assert_int_equal(kvmm_mm_seq_prefetch(a, 0, 6), 6);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_poll(f->pool, true), 6);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), nfree); /* the frames read into went back */
	kvmm_swap_tier_info(f->pool, 5, &info);
	assert_int_equal(info.used, 0);
}

/* ---- the swap file: full, truncated, unlinked ------------------------------------------------ */

static void test_swapfile_fills(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 8, 1);

	assert_int_equal(add_nvme(f, 2, 0, 4), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 8), 4);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 8), -ENOSPC);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 8), 4);
	check_bytes(f, 0, a, 0, 8);
	check_inv(f->pool);
}

static void test_swapfile_truncated(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 4, 1);
	struct kvmm_seq *b = mkseq(f, 1, 2, 1000);
	uint64_t fail0 = vmstat(f, KVMM_STAT_SWAP_FAIL);

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	assert_int_equal(truncate(f->path, 0), 0);
	/* reads past the end come back short: -EIO for @a, nothing else changes */
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 4), -EIO);
	assert_true(vmstat(f, KVMM_STAT_SWAP_FAIL) > fail0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 4);
	check_bytes(f, 1, b, 0, 2);
	kvmm_mm_seq_free(a);
	check_inv(f->pool);
}

static void test_swapfile_unlinked(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 4, 1);

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 4), 4);
	/* the open file outlives its name */
	assert_int_equal(unlink(f->path), 0);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 4), 4);
	check_bytes(f, 0, a, 0, 4);
	check_inv(f->pool);
}

/* ---- asynchronous write-back ------------------------------------------------------------------ */

static uint64_t tier_used(struct fx *f, unsigned int id)
{
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_tier_info(f->pool, id, &ti), 0);
	return ti.used;
}

static bool under_wb(struct fx *f, struct kvmm_seq *seq, uint32_t b)
{
	uint32_t fr = kvmm_mm_seq_frame(seq, b);

	return fr != KVMM_FRAME_NONE &&
	       (kvmm_frame_to_page(f->pool, fr)->flags & KVMM_PG_WRITEBACK);
}

/* host (copied by the core without the lock) and manual (submitted) tiers alike */
static void wb_roundtrip(struct fx *f, unsigned int id)
{
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	uint32_t free0 = kvmm_pool_nr_free(f->pool), b;
	uint64_t out0 = vmstat(f, KVMM_STAT_SWPOUT);
	int done;

	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 8), 8);
	check_inv(f->pool);
	/* in flight: still mapped, locked, under writeback; slots taken; no frame freed yet */
	for (b = 0; b < 8; b++) {
		assert_true(kvmm_pte_is_present(seq->pte[b]));
		assert_true(under_wb(f, seq, b));
	}
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);
	assert_int_equal(tier_used(f, id), 8);
	/* nor are they taken twice */
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 8), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 0);
	/* a submitted write (NVMe) that completed already is installed by the poll */
	done = kvmm_swap_poll(f->pool, false);
	check_inv(f->pool);
	/* lock held as kvswapd does: kvmm_swap_writeback lets go of it for the copies */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(done + kvmm_swap_writeback(f->pool, true), 8);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 8);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 + 8);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPOUT) - out0, 8);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_bytes(f, 0, seq, 0, 8);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, id), 0);
}

static void test_wb_host(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	wb_roundtrip(f, 1);
}

static void test_wb_submitted(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_manual(f), 0);
	wb_roundtrip(f, 5);
}

static void test_wb_nvme(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	wb_roundtrip(f, 2);
}

/* a fault on pages under writeback keeps them: nothing is swapped, nothing read back */
static void test_wb_fault_during(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1);
	uint64_t in0 = vmstat(f, KVMM_STAT_SWPIN);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fault(seq, 1, 2), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 2);
	check_inv(f->pool);
	assert_true(kvmm_pte_is_swap(seq->pte[0]));
	assert_true(kvmm_pte_is_present(seq->pte[1]) && kvmm_pte_is_present(seq->pte[2]));
	assert_true(kvmm_pte_is_swap(seq->pte[3]));
	assert_false(under_wb(f, seq, 1) || under_wb(f, seq, 2));
	assert_int_equal(tier_used(f, 1), 2);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN), in0);
	check_bytes(f, 0, seq, 1, 3);
	/* a pinned page is not taken from under a step either */
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 1))->pincount++;
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 2, 1), 1);
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 2))->pincount++;
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 0);
	assert_true(kvmm_pte_is_present(seq->pte[2]));
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 1))->pincount--;
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 2))->pincount--;
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 2);
	check_bytes(f, 0, seq, 0, 4);
	check_inv(f->pool);
}

/* freed while its pages are being written: the frames go when the writes complete */
static void test_wb_free_during(void **state)
{
	struct fx *f = *state;
	uint32_t free0 = kvmm_pool_nr_free(f->pool);
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1), *b;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[4 * 64];

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool); /* four MAPPED frames with no mapper, LOCKED */
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 - 4);
	kvmm_swap_poll(f->pool, true);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);
	assert_int_equal(tier_used(f, 1), 0);

	/* a sealed page freed during its write becomes cached, still found by lookup */
	seq = mkseq(f, 0, 2, 1);
	assert_int_equal(kvmm_mm_seq_seal(seq), 2);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 2), 2);
	kvmm_mm_seq_free(seq);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 0);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, 1), 0);
	for (i = 0; i < 2 * tpp; i++)
		tok[i] = 1 + i;
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, tok, 2 * tpp), (int)(2 * tpp));
	check_bytes(f, 0, b, 0, 2);
	check_inv(f->pool);
}

/* a namespace whose last address space went during a write can still be destroyed */
static void test_wb_ns_destroy(void **state)
{
	struct fx *f = *state;
	uint32_t free0 = kvmm_pool_nr_free(f->pool);
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_ns *ns;

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "wb", 0, 0, &ns), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, ns, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3 * f->fmt.tokens_per_page, NULL), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 3), 3);
	kvmm_aspace_destroy(as);
	check_inv(f->pool);
	assert_int_equal(kvmm_ns_destroy(ns), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);
	assert_int_equal(tier_used(f, 5), 0);
}

/* truncate during writeback: the dropped block is freed at completion, the cut one stays */
static void test_wb_truncate_during(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1);
	uint32_t tpp = f->fmt.tokens_per_page;
	uint8_t *p;

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 2 * tpp + 1), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 2);
	check_inv(f->pool);
	assert_true(kvmm_pte_is_swap(seq->pte[0]) && kvmm_pte_is_swap(seq->pte[1]));
	assert_true(kvmm_pte_is_present(seq->pte[2]));
	assert_int_equal(tier_used(f, 5), 2);
	/* appending into the cut page while a new write is in flight cancels that one too */
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 2, 1), 1);
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
	p = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, 2));
	p[PAGE_SZ - 1] ^= 0x5a; /* the engine writes the new token's KV */
	f->want[0][2][PAGE_SZ - 1] ^= 0x5a;
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 0);
	assert_true(kvmm_pte_is_present(seq->pte[2]));
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 3), 2);
	check_bytes(f, 0, seq, 0, 3);
	check_inv(f->pool);
}

/* a failed write: the page stays resident and dirty, its slot is freed, nothing is lost */
static void test_wb_write_error(void **state)
{
	struct fx *f = *state;
	struct kvmm_fault_attr a = {.nth = 2, .mode = KVMM_FAULT_EIO};
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1);
	uint64_t fail0 = vmstat(f, KVMM_STAT_SWAP_FAIL), pte1 = seq->pte[1];

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.write", &a), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 3);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_FAIL) - fail0, 1);
	assert_int_equal(seq->pte[1], pte1);
	assert_true(seq->pte[1] & KVMM_PTE_DIRTY);
	assert_false(under_wb(f, seq, 1));
	assert_int_equal(tier_used(f, 1), 3);
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.write", NULL), 0);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 3);
	check_bytes(f, 0, seq, 0, 4);
	check_inv(f->pool);
}

/* a fork or a lookup that maps a page under writeback keeps it; swapoff waits for writes */
static void test_wb_shared_and_swapoff(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1), *c;

	assert_int_equal(add_manual(f), 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fork(seq, &c), 0);
	kvmm_mm_seq_free(c);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 4), 4);
	/* nobody else is copying: swapoff completes the writes, then brings the pages back */
	assert_int_equal(kvmm_swapoff(f->pool, 5), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 4);
}

/* ---- unlocked fault-in: pages in the swap cache while another thread copies them -------------- */

static void *copy_thread(void *arg)
{
	kvmm_swap_fault_copy(arg);
	return NULL;
}

/* kvmm_swap_fault_copy() on another thread, as kvmm_mm_seq_fault_unlocked()'s caller does */
static void copy_async(pthread_t *th, struct kvmm_swap_fault *sf)
{
	assert_int_equal(pthread_create(th, NULL, copy_thread, sf), 0);
}

static bool in_swap_cache(struct kvmm_seq *seq, uint32_t b)
{
	return kvmm_pte_is_swap(seq->pte[b]);
}

/* the three steps, and the one call with the lock held: pages come back identical */
static void test_unlocked_roundtrip(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	uint32_t free0, b;
	struct kvmm_swap_fault sf;
	uint64_t in0 = vmstat(f, KVMM_STAT_SWPIN);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	free0 = kvmm_pool_nr_free(f->pool);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 8, &sf), 8);
	/* in flight: frames taken and charged, PTEs still swap, slots still used */
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 - 8);
	for (b = 0; b < 8; b++)
		assert_true(in_swap_cache(seq, b));
	assert_int_equal(tier_used(f, 1), 8);
	check_inv(f->pool);
	kvmm_swap_fault_copy(&sf);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 8);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	assert_int_equal(tier_used(f, 1), 0);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN) - in0, 8);
	check_bytes(f, 0, seq, 0, 8);

	/* the one call, lock held as the caller's; readahead comes in through the same copy */
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 2), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_fault_unlocked(seq, 0, 4), 4);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 2); /* 4 and 5 were read ahead */
	check_bytes(f, 0, seq, 0, 6);
	/* nothing swapped in the range: only the readahead (6, 7) comes in */
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 6, &sf), 2);
	kvmm_swap_fault_copy(&sf);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 8);
	/* a finish without the copy step copies under the lock */
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 6, 2), 2);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 6, 2, &sf), 2);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 2);
	check_bytes(f, 0, seq, 0, 8);
	check_inv(f->pool);
	/* and a fault that finds a copy nobody started does it itself instead of waiting */
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 2), 2);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 2, &sf), 2);
	assert_int_equal(kvmm_mm_seq_fault(seq, 1, 1), 1);
	check_inv(f->pool);
	kvmm_swap_fault_copy(&sf);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 2);
	check_bytes(f, 0, seq, 0, 8);
	check_inv(f->pool);
}

/* a fault (and a lookup-style wait) on a page being copied waits for that copy, reads nothing */
static void test_unlocked_fault_during(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	struct kvmm_swap_fault sf;
	uint64_t in0, hit0;
	pthread_t th;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	in0 = vmstat(f, KVMM_STAT_SWPIN);
	hit0 = vmstat(f, KVMM_STAT_SWAP_CACHE_HIT);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 8, &sf), 8);
	copy_async(&th, &sf);
	/* whether or not the copy finished yet, this waits for page 2's and installs it */
	assert_int_equal(kvmm_mm_seq_fault(seq, 2, 1), 1);
	assert_true(kvmm_pte_is_present(seq->pte[2]));
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CACHE_HIT) - hit0, 1);
	check_bytes(f, 0, seq, 2, 3);
	check_inv(f->pool);
	/* and so does an unlocked fault started on the same pages: nothing is read twice */
	{
		struct kvmm_swap_fault sf2;

		assert_int_equal(kvmm_mm_seq_fault_start(seq, 3, 2, &sf2), 0);
		assert_int_equal(kvmm_swap_fault_finish(&sf2), 2);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 8);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWPIN) - in0, 8);
	check_bytes(f, 0, seq, 0, 8);
	assert_int_equal(tier_used(f, 1), 0);
}

/* freed or truncated while its pages are copied: what went away is freed, not installed */
static void test_unlocked_free_truncate_during(void **state)
{
	struct fx *f = *state;
	uint32_t free0 = kvmm_pool_nr_free(f->pool), tpp = f->fmt.tokens_per_page;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1), *other = mkseq(f, 1, 2, 500);
	struct kvmm_swap_fault sf;
	pthread_t th;
	uint8_t *p;

	assert_int_equal(add_host(f, 1, 0, 32), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_swap_out(other, 0, 2), 2);
	/* free: no wait needed, the slots are left to the copies */
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 8, &sf), 8);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool); /* eight locked frames nobody maps, eight slots nobody names */
	kvmm_swap_fault_copy(&sf);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 0);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, 1), 2);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);

	/* truncate into a page in flight: it waits for that page, the dropped ones are freed */
	seq = mkseq(f, 0, 8, 1);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 8, &sf), 8);
	copy_async(&th, &sf);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 3 * tpp + 1), 0);
	assert_true(kvmm_pte_is_present(seq->pte[3]));
	check_inv(f->pool);
	/* then append into it (the engine writes the token's KV) */
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
	p = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, 3));
	p[PAGE_SZ - 1] ^= 0x5a;
	f->want[0][3][PAGE_SZ - 1] ^= 0x5a;
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 4);
	check_inv(f->pool);
	assert_int_equal(seq->nblocks, 4);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 4);
	assert_int_equal(tier_used(f, 1), 2);
	/* the other sequence never noticed */
	assert_int_equal(kvmm_mm_seq_fault(other, 0, 2), 2);
	check_bytes(f, 1, other, 0, 2);
	kvmm_mm_seq_free(seq);
	kvmm_mm_seq_free(other);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);
	assert_int_equal(tier_used(f, 1), 0);
}

/* swapoff while pages are copied: it waits for the copies, then empties the tier */
static void test_unlocked_swapoff_during(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	struct kvmm_swap_fault sf;
	pthread_t th;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 4, &sf), 4);
	copy_async(&th, &sf);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_inv(f->pool);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 4);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 8);
	check_inv(f->pool);
}

/* an injected read failure: only that block stays swapped and the fault says -EIO */
static void test_unlocked_read_error(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1), *other = mkseq(f, 1, 2, 500);
	uint32_t free0;
	uint64_t fail0;
	struct kvmm_swap_fault sf;
	pthread_t th;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_swap_out(other, 0, 2), 2);
	free0 = kvmm_pool_nr_free(f->pool);
	fail0 = vmstat(f, KVMM_STAT_SWAP_FAIL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read nth=3 times=1 mode=short"), 0);
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 8, &sf), 8);
	check_inv(f->pool);
	/* a fault on the failed page, during the copy, sees the failure and reads it again */
	copy_async(&th, &sf);
	assert_int_equal(kvmm_mm_seq_fault(seq, 2, 1), 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(kvmm_swap_fault_finish(&sf), -EIO);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_FAIL) - fail0, 1);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 0);
	check_bytes(f, 0, seq, 0, 8);

	/* without a second fault: the block stays swapped, nothing else is lost, a retry works */
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read nth=5 times=1 mode=eio"), 0);
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_fault_unlocked(seq, 0, 8), -EIO);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 1);
	assert_true(kvmm_pte_is_swap(seq->pte[4]));
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 - 7);
	check_bytes(f, 0, seq, 0, 4);
	check_bytes(f, 0, seq, 5, 8);
	assert_int_equal(kvmm_mm_seq_nr_swapped(other), 2);
	/* the caller holds the pool lock, which the copy drops and takes again */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_fault_unlocked(seq, 0, 8), 1);
	pthread_mutex_unlock(&f->pool->lock);
	check_bytes(f, 0, seq, 0, 8);
	assert_int_equal(kvmm_mm_seq_fault(other, 0, 2), 2);
	check_bytes(f, 1, other, 0, 2);
	check_inv(f->pool);
}

/*
 * Two threads on one pool, as kvmmd's loop and a prefetcher: one swaps sequences out and
 * brings them back with the unlocked fault-in, the other (this thread, which asserts) faults,
 * appends, truncates and checks bytes and invariants under the lock meanwhile.
 */
struct unl_stress {
	struct fx *f;
	struct kvmm_seq *seqs[3];
	int iters, err;
};

static void *unl_stress_thread(void *arg)
{
	struct unl_stress *x = arg;
	struct kvmm_pool *pool = x->f->pool;
	int i, ret;

	for (i = 0; i < x->iters && !x->err; i++) {
		struct kvmm_seq *seq = x->seqs[i % 3];

		pthread_mutex_lock(&pool->lock);
		ret = kvmm_mm_seq_swap_out(seq, 0, seq->nblocks);
		if (ret >= 0)
			ret = kvmm_mm_seq_fault_unlocked(seq, 0, seq->nblocks);
		if (ret < 0 && ret != -ENOSPC)
			x->err = ret;
		pthread_mutex_unlock(&pool->lock);
	}
	return NULL;
}

static void test_unlocked_stress(void **state)
{
	struct fx *f = *state;
	struct unl_stress x = {.f = f, .iters = 300};
	uint32_t tpp = f->fmt.tokens_per_page, full[3] = {6, 8, 4};
	pthread_t th;
	int i, k;

	assert_int_equal(add_host(f, 1, 0, 48), 0);
	for (k = 0; k < 3; k++)
		x.seqs[k] = mkseq(f, k, full[k], 1 + 1000 * (uint32_t)k);
	assert_int_equal(pthread_create(&th, NULL, unl_stress_thread, &x), 0);
	for (i = 0; i < 300; i++) {
		struct kvmm_seq *seq = x.seqs[i % 3];
		uint32_t nb = seq->nblocks;

		pthread_mutex_lock(&f->pool->lock);
		check_inv(f->pool);
		assert_true(kvmm_mm_seq_fault(seq, 0, nb) >= 0);
		if (i % 2)
			check_bytes(f, i % 3, seq, 0, nb);
		/* cut the last page short and write it back to whole, as an engine would */
		if (i % 5 == 0) {
			assert_int_equal(kvmm_mm_seq_truncate(seq, (uint64_t)nb * tpp - 1), 0);
			assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
			check_bytes(f, i % 3, seq, 0, nb);
		}
		pthread_mutex_unlock(&f->pool->lock);
		if (i % 7 == 0)
			sched_yield();
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(x.err, 0);
	for (k = 0; k < 3; k++) {
		assert_true(kvmm_mm_seq_fault(x.seqs[k], 0, x.seqs[k]->nblocks) >= 0);
		check_bytes(f, k, x.seqs[k], 0, full[k]);
	}
	check_inv(f->pool);
}

/* ---- clean swap-cached pages ------------------------------------------------------------------- */

/*
 * The engine's pin window over every resident page of @seq ends: the KV of the tokens
 * appended so far is written (as kvmmd's UNPIN), so their pages may keep their slots.
 */
static void kv_written(struct fx *f, struct kvmm_seq *seq)
{
	uint32_t b;

	for (b = 0; b < seq->nblocks; b++) {
		struct kvmm_page *pg;

		if (kvmm_mm_seq_frame(seq, b) == KVMM_FRAME_NONE)
			continue;
		pg = kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, b));
		pg->pincount++;
		kvmm_page_unpin(pg, 1);
	}
}

static struct kvmm_swap_tier_info tinfo(struct fx *f, unsigned int id)
{
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_tier_info(f->pool, id, &ti), 0);
	return ti;
}

static bool kept(struct fx *f, struct kvmm_seq *seq, uint32_t b)
{
	return kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, b))->swap != 0;
}

/* new random bytes for block @b of sequence slot @idx, written into its frame */
static void rewrite(struct fx *f, int idx, struct kvmm_seq *seq, uint32_t b)
{
	uint32_t i;

	for (i = 0; i < PAGE_SZ; i += 8) {
		uint64_t v = rnd(f);

		memcpy(&f->want[idx][b][i], &v, 8);
	}
	memcpy(kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, b)), f->want[idx][b], PAGE_SZ);
}

/* swap out, fault in (written once, then kept), swap out again without a copy, fault in */
static void test_clean_roundtrip(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);
	uint32_t free0, b;
	struct kvmm_swap_tier_info ti;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	kv_written(f, seq);
	free0 = kvmm_pool_nr_free(f->pool);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 8);
	ti = tinfo(f, 1);
	assert_int_equal(ti.pages_out, 8);
	assert_int_equal(ti.kept, 8);
	assert_int_equal(ti.used, 0);
	for (b = 0; b < 8; b++)
		assert_true(kept(f, seq, b));

	/* the slots still hold the bytes: no write, the frames are freed at once */
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	check_inv(f->pool);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 + 8);
	ti = tinfo(f, 1);
	assert_int_equal(ti.pages_out, 8);
	assert_int_equal(ti.clean_out, 8);
	assert_int_equal(ti.kept, 0);
	assert_int_equal(ti.used, 8);
	/* and the next frames hold other bytes: the slots are what comes back */
	for (b = 0; b < 8; b++)
		memset(kvmm_pool_frame_addr(f->pool, b), 0xa5, PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 8);

	/* asynchronous swap-out: a clean page needs no write-back either */
	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 8);
	assert_int_equal(kvmm_swap_writeback(f->pool, false), 0);
	check_inv(f->pool);
	ti = tinfo(f, 1);
	assert_int_equal(ti.pages_out, 8);
	assert_int_equal(ti.clean_out, 16);
	assert_int_equal(f->pool->stat[KVMM_STAT_SWAP_CLEAN], 16);
	/* unlocked fault-in keeps them too */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_fault_unlocked(seq, 0, 8), 8);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 8);
	assert_int_equal(tinfo(f, 1).kept, 8);

	/* the association is checked: a page that forgets its slot is caught */
	{
		struct kvmm_page *pg = kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 3));
		uint64_t swp = pg->swap;
		char why[256];

		pg->swap = 0;
		assert_int_equal(kvmm_check_invariants(f->pool, why, sizeof(why)), -EUCLEAN);
		pg->swap = swp;
		check_inv(f->pool);
	}
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).kept, 0);
	assert_int_equal(tinfo(f, 1).used, 0);
}

/* the same through the NVMe tier (a read under the lock keeps its slot too) */
static void test_clean_nvme(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 8, 1);

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 2), 0);
	kv_written(f, seq);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 6), 6); /* 6, 7 read ahead */
	assert_int_equal(kvmm_swap_poll(f->pool, true), 2);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 2).kept, 8);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	assert_int_equal(tinfo(f, 2).clean_out, 8);
	assert_int_equal(tinfo(f, 2).pages_out, 8);
	for (uint32_t b = 0; b < NFRAMES; b++)
		if (f->pool->pages[b].state == KVMM_PAGE_FREE)
			memset(kvmm_pool_frame_addr(f->pool, b), 0x5a, PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 8);
}

/*
 * Appended tokens whose KV the engine has not written yet (no unpin since): a trip does not
 * make the page clean, the KV written after it is swapped out for real and comes back.
 */
static void test_clean_pending_kv(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	/* appended, not written yet: out and in (a PIN), then the engine writes */
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 4);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).kept, 0);
	rewrite(f, 0, seq, 2);
	kv_written(f, seq);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 4), 4);
	assert_int_equal(tinfo(f, 1).pages_out, 8);
	assert_int_equal(tinfo(f, 1).clean_out, 0);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 4);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 4);
	assert_int_equal(tinfo(f, 1).kept, 4);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

/* append, truncate, fork (COW) and unmap after a fault-in free the slot: the next trip writes */
static void test_clean_dirtied(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 0, 4, 1), *child;
	uint32_t tpp = f->fmt.tokens_per_page, tok = 7;
	struct kvmm_page *pg;
	uint64_t out;

	assert_int_equal(add_host(f, 1, 0, 32), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	kv_written(f, seq);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 4);
	assert_int_equal(tinfo(f, 1).kept, 4);

	/* truncate into block 3: its slot goes, the others stay kept */
	assert_int_equal(kvmm_mm_seq_truncate(seq, 3 * tpp + tpp / 2), 0);
	check_inv(f->pool);
	assert_false(kept(f, seq, 3));
	assert_true(kept(f, seq, 2));
	assert_int_equal(tinfo(f, 1).kept, 3);
	/* append into it (the engine then writes the token's KV in its pin window) */
	assert_int_equal(kvmm_mm_seq_append(seq, 1, &tok), 0);
	rewrite(f, 0, seq, 3);
	kv_written(f, seq);
	out = tinfo(f, 1).pages_out;
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 4), 4);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).pages_out, out + 1);
	assert_int_equal(tinfo(f, 1).clean_out, 3);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 4);
	check_inv(f->pool);
	check_bytes(f, 0, seq, 0, 4);
	assert_int_equal(tinfo(f, 1).kept, 4);

	/* an append into the kept partial page alone frees its slot */
	assert_int_equal(kvmm_mm_seq_append(seq, 1, &tok), 0);
	assert_false(kept(f, seq, 3));
	rewrite(f, 0, seq, 3);
	kv_written(f, seq);
	check_inv(f->pool);

	/* fork: every page is shared, no slot is kept; the COW source stays unchanged */
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 0);
	assert_int_equal(kvmm_mm_seq_fork(seq, &child), 0);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).kept, 0);
	assert_int_equal(kvmm_mm_seq_append(child, 1, &tok), 0); /* COW of block 3 */
	check_inv(f->pool);
	kvmm_mm_seq_free(child);
	check_inv(f->pool);
	/* exclusive again but not clean: the next trip writes all four */
	out = tinfo(f, 1).pages_out;
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 4), 4);
	assert_int_equal(tinfo(f, 1).pages_out, out + 4);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 4), 4);
	check_bytes(f, 0, seq, 0, 4);
	assert_int_equal(tinfo(f, 1).kept, 4);

	/* unmap_tail hands the page to the caller: its slot goes */
	pg = kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, 3));
	assert_int_equal(kvmm_mm_seq_unmap_tail(seq, 1, &pg), 0);
	assert_int_equal(pg->swap, 0);
	assert_int_equal(tinfo(f, 1).kept, 3);
	kvmm_free_page(f->pool, pg, NULL);
	check_inv(f->pool);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).used + tinfo(f, 1).kept, 0);
}

/* a full tier frees kept slots before it moves down or fails */
static void test_clean_full_tier(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 8, 1), *b = mkseq(f, 1, 6, 100);

	assert_int_equal(add_host(f, 1, 10, 8), 0);
	assert_int_equal(add_host(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	kv_written(f, a);
	kv_written(f, b);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 8), 8);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 8), 8);
	assert_int_equal(tinfo(f, 1).kept, 8);
	assert_int_equal(tinfo(f, 1).used, 0); /* kept slots are room */
	/* tier 1 is full of kept slots: they are freed, b goes there, not to tier 2 */
	assert_int_equal(kvmm_mm_seq_swap_out(b, 0, 6), 6);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).used, 6);
	assert_int_equal(tinfo(f, 1).kept, 2);
	assert_int_equal(tinfo(f, 2).used, 0);
	assert_int_equal(kvmm_mm_seq_fault(b, 0, 6), 6);
	check_bytes(f, 0, a, 0, 8);
	check_bytes(f, 1, b, 0, 6);
	check_inv(f->pool);
	/* move-down frees kept slots instead of moving them */
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 8), 8); /* 2 clean, 6 into freed kept */
	assert_int_equal(tinfo(f, 1).clean_out, 2);
	assert_int_equal(tinfo(f, 1).used, 8);
	assert_int_equal(kvmm_swap_move_down(f->pool, 1, 8), 8);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).used + tinfo(f, 1).kept, 0);
	assert_int_equal(tinfo(f, 2).used, 8);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 8), 8);
	check_bytes(f, 0, a, 0, 8);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
}

/* swapoff: the tier's kept slots go with it, resident pages lose them and keep their bytes */
static void test_clean_swapoff(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *a = mkseq(f, 0, 6, 1), *b = mkseq(f, 1, 4, 100);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 2), 0);
	kv_written(f, a);
	kv_written(f, b);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 6), 6);
	assert_int_equal(kvmm_mm_seq_swap_out(b, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 2), 2); /* 2, 3 read ahead */
	assert_int_equal(kvmm_swap_poll(f->pool, true), 2);
	check_inv(f->pool);
	assert_int_equal(tinfo(f, 1).kept, 4);
	/* no other tier: b's and a's swapped pages come back (kept, then freed with it) */
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	check_bytes(f, 0, a, 0, 6);
	check_bytes(f, 1, b, 0, 4);
	for (uint32_t k = 0; k < 6; k++)
		assert_false(kept(f, a, k));
	/* a new tier with the same id starts empty; the pages are written again */
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(a, 0, 6), 6);
	assert_int_equal(tinfo(f, 1).pages_out, 6);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 6), 6);
	check_bytes(f, 0, a, 0, 6);
	check_inv(f->pool);
	/* and pool teardown (teardown()) frees the kept ones */
}

/* ---- fault injection ----------------------------------------------------------------------------- */

static void write_fault(struct fx *f, enum kvmm_fault_mode mode, int want_err)
{
	struct kvmm_fault_attr a = {.nth = 2, .mode = mode};
	struct kvmm_seq *s = mkseq(f, 0, 4, 1);
	uint64_t fail0 = vmstat(f, KVMM_STAT_SWAP_FAIL), calls, fails;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.write", &a), 0);
	/* the second write fails: that page stays resident, the others go */
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), 3);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_FAIL) - fail0, 1);
	assert_true(kvmm_pte_is_present(s->pte[1]));
	assert_int_equal(kvmm_swap_fault_stats(f->pool, "swap.write", &calls, &fails), 0);
	assert_int_equal(calls, 4);
	assert_int_equal(fails, 1);
	check_inv(f->pool);
	/* every write fails: the caller sees the error, nothing is lost */
	a.nth = 0;
	a.interval = 1;
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.write", &a), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), want_err);
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.write", NULL), 0);
	assert_int_equal(kvmm_mm_seq_fault(s, 0, 4), 3);
	check_bytes(f, 0, s, 0, 4);
	check_inv(f->pool);
}

static void test_fault_write_eio(void **state)
{
	write_fault(*state, KVMM_FAULT_EIO, -EIO);
}

static void test_fault_write_short(void **state)
{
	write_fault(*state, KVMM_FAULT_SHORT, -EIO);
}

static void test_fault_write_enospc(void **state)
{
	write_fault(*state, KVMM_FAULT_ENOSPC, -ENOSPC);
}

static void test_fault_alloc(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 4, 1);

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.alloc nth=1"), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), -ENOSPC);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), 4); /* only the first call failed */
	check_inv(f->pool);
}

static void test_fault_read(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 4, 1), *other = mkseq(f, 1, 2, 500);

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_swap_out(other, 0, 2), 2);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read nth=1 times=1 mode=eio"), 0);
	assert_int_equal(kvmm_mm_seq_fault(s, 0, 4), -EIO);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 1); /* only the failed block */
	/* the other sequence is untouched, and a retry of the failed one works */
	assert_int_equal(kvmm_mm_seq_fault(other, 0, 2), 2);
	check_bytes(f, 1, other, 0, 2);
	assert_int_equal(kvmm_mm_seq_fault(s, 0, 4), 1);
	check_bytes(f, 0, s, 0, 4);
	check_inv(f->pool);
}

/* ---- host-tier checksums --------------------------------------------------------------------- */

static struct kvmm_seq *lost_seq, *oom_seq;
static unsigned int nr_lost, nr_oom;

static void hook_lost(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t nr_frames)
{
	(void)pool;
	(void)nr_frames;
	lost_seq = seq;
	nr_lost++;
}

static void hook_oom(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t nr_frames)
{
	(void)pool;
	(void)nr_frames;
	oom_seq = seq;
	nr_oom++;
}

static const struct kvmm_mm_hooks csum_hooks = {.oom = hook_oom, .lost = hook_lost};

static uint64_t tier_csum_bad(struct fx *f, unsigned int id)
{
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_tier_info(f->pool, id, &ti), 0);
	return ti.csum_bad;
}

/* Block @b of @seq is swapped and its frame was never given the spoilt bytes. */
static void assert_not_mapped(struct kvmm_seq *seq, uint32_t b)
{
	assert_true(kvmm_pte_is_swap(seq->pte[b]));
	assert_int_equal(kvmm_mm_seq_frame(seq, b), KVMM_FRAME_NONE);
}

/*
 * A host-tier slot spoilt after its write (swap.write mode=corrupt): the read fails its
 * checksum, nothing is installed, it is counted, the owner hears of it as lost (not as an
 * OOM), the slot is never read again; the other pages of the tier come back intact.
 */
static void test_host_csum_sync(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 4, 1), *other = mkseq(f, 1, 2, 500);
	uint64_t bad0 = vmstat(f, KVMM_STAT_SWAP_CSUM_BAD);

	f->pool->hooks = &csum_hooks;
	nr_lost = nr_oom = 0;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.write nth=3 times=1 mode=corrupt"),
			 0);
	/* the write "succeeds": a corruption is not an I/O error */
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_swap_out(other, 0, 2), 2);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD), bad0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(s, 0, 4), -EIO);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD) - bad0, 1);
	assert_int_equal(tier_csum_bad(f, 1), 1);
	assert_not_mapped(s, 2);
	check_bytes(f, 0, s, 0, 2);
	check_bytes(f, 0, s, 3, 4);
	assert_int_equal(nr_lost, 1);
	assert_ptr_equal(lost_seq, s);
	assert_int_equal(nr_oom, 0);
	assert_true(s->flags & KVMM_SEQ_F_PREEMPTED);
	/* the spoilt slot is not read again (nor counted twice) */
	assert_int_equal(kvmm_mm_seq_fault(s, 2, 1), -EIO);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD) - bad0, 1);
	assert_not_mapped(s, 2);
	/* others are untouched */
	assert_int_equal(kvmm_mm_seq_fault(other, 0, 2), 2);
	check_bytes(f, 1, other, 0, 2);
	/* the owner frees it: the slot goes */
	kvmm_mm_seq_free(s);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, 1), 0);
	f->pool->hooks = NULL;
}

/* the same through the copies made without the lock: write-back and unlocked fault-in */
static void test_host_csum_unlocked(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 4, 1);
	uint64_t bad0 = vmstat(f, KVMM_STAT_SWAP_CSUM_BAD);
	struct kvmm_swap_tier *t;
	struct kvmm_swap_fault sf;
	uint8_t *slot;

	f->pool->hooks = &csum_hooks;
	nr_lost = nr_oom = 0;
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	/* asynchronous write-back, its copy spoilt once made */
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.write nth=2 times=1 mode=corrupt"),
			 0);
	assert_int_equal(kvmm_mm_seq_swap_out_async(s, 0, 4), 4);
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_swap_writeback(f->pool, true), 4);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 4);
	/* and a stray write into the arena (a bug elsewhere in the process) spoils block 3 */
	t = kvmm_swap_tier_get(f->pool, 1);
	slot = t->ops->slot_addr(t, kvmm_pte_swap_slot(s->pte[3]));
	slot[7] ^= 1;
	/* the unlocked fault-in: copy without the lock, finish with it */
	assert_int_equal(kvmm_mm_seq_fault_start(s, 0, 4, &sf), 4);
	kvmm_swap_fault_copy(&sf);
	assert_int_equal(kvmm_swap_fault_finish(&sf), -EIO);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD) - bad0, 2);
	assert_int_equal(tier_csum_bad(f, 1), 2);
	assert_not_mapped(s, 1);
	assert_not_mapped(s, 3);
	check_bytes(f, 0, s, 0, 1);
	check_bytes(f, 0, s, 2, 3);
	assert_int_equal(nr_lost, 1); /* once per sequence */
	assert_ptr_equal(lost_seq, s);
	assert_int_equal(nr_oom, 0);
	kvmm_mm_seq_free(s);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, 1), 0);
	f->pool->hooks = NULL;
}

/* a demoted cached page spoilt on the host tier is never moved down: dropped, counted */
static void test_host_csum_move_down(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 2, 1);
	uint64_t bad0 = vmstat(f, KVMM_STAT_SWAP_CSUM_BAD);
	struct kvmm_swap_tier *t;
	uint8_t *slot;

	f->pool->hooks = &csum_hooks;
	nr_lost = nr_oom = 0;
	assert_int_equal(add_host(f, 1, 10, 16), 0);
	assert_int_equal(add_host(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 2), 2);
	t = kvmm_swap_tier_get(f->pool, 1);
	assert_int_equal(kvmm_pte_swap_tier(s->pte[0]), 1);
	slot = t->ops->slot_addr(t, kvmm_pte_swap_slot(s->pte[0]));
	slot[PAGE_SZ - 1] ^= 0x80;
	/* the good page moves; the spoilt one stays, marked, until its owner lets it go */
	assert_int_equal(kvmm_swap_move_down(f->pool, 1, 2), 1);
	check_inv(f->pool);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD) - bad0, 1);
	assert_int_equal(nr_lost, 1);
	assert_int_equal(kvmm_swap_move_down(f->pool, 1, 2), 0);
	assert_int_equal(vmstat(f, KVMM_STAT_SWAP_CSUM_BAD) - bad0, 1);
	assert_int_equal(kvmm_pte_swap_tier(s->pte[1]), 2);
	assert_int_equal(kvmm_mm_seq_fault(s, 1, 1), 1);
	check_bytes(f, 0, s, 1, 2);
	kvmm_mm_seq_free(s);
	check_inv(f->pool);
	assert_int_equal(tier_used(f, 1), 0);
	f->pool->hooks = NULL;
}

/* mode=corrupt: only the write point; a file tier (no slot address) gets -EIO instead */
static void test_fault_corrupt_args(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *s = mkseq(f, 0, 2, 1);

	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read nth=1 mode=corrupt"), -EINVAL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.alloc nth=1 mode=corrupt"), -EINVAL);
	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.write nth=1 times=1 mode=corrupt"),
			 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 2), 1);
	assert_true(kvmm_pte_is_present(s->pte[0]));
	assert_int_equal(kvmm_mm_seq_fault(s, 0, 2), 1);
	check_bytes(f, 0, s, 0, 2);
	check_inv(f->pool);
}

static void test_fault_parse(void **state)
{
	struct fx *f = *state;
	uint64_t calls, fails;
	struct kvmm_seq *s = mkseq(f, 0, 8, 1);

	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.nope nth=1"), -ENOENT);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read nth"), -EINVAL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read mode=bad"), -EINVAL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read probability=101"), -EINVAL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read bogus=1"), -EINVAL);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, ""), -EINVAL);
	/* every 2nd write fails, three times at most */
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.write interval=2,times=3"), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 8), 5);
	kvmm_swap_fault_stats(f->pool, "swap.write", &calls, &fails);
	assert_int_equal(calls, 8);
	assert_int_equal(fails, 3);
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.write off"), 0);
	kvmm_swap_fault_stats(f->pool, "swap.write", &calls, &fails);
	assert_int_equal(calls, 0);
	check_inv(f->pool);
	/* a seeded probability rule is reproducible */
	assert_int_equal(kvmm_swap_fault_parse(f->pool, "swap.read probability=50 seed=3"), 0);
	kvmm_mm_seq_fault(s, 0, 8);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_fault_set(f->pool, "swap.read", NULL), 0);
	assert_true(kvmm_mm_seq_fault(s, 0, 8) >= 0);
	check_bytes(f, 0, s, 0, 8);
}

static void test_stat_names(void **state)
{
	(void)state;
	assert_string_equal(kvmm_stat_name(KVMM_STAT_SWPOUT), "pswpout");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_SWPIN), "pswpin");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_REFAULT), "workingset_refault");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_SWAP_FAIL), "swap_fail");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_SWAP_CACHE_HIT), "swap_cache_hit");
}

/*
 * A swapped prefix longer than the free frames: a plain lookup stops at the first swapped hit
 * it has no frame for (its fault-in may only drop cache); kvmm_mm_prefix_lookup_reclaim()
 * makes room by swapping out what it mapped so far (the sequence's alone, unpinned) and maps
 * the whole prefix, with the right bytes behind every page.  A miss stays a miss.
 */
static void test_lookup_reclaim_maps_past_the_pool(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i, n = 0;
	uint32_t tok[16 * 64];
	struct kvmm_seq *a = mkseq(f, 0, 16, 100), *b, *c;
	struct kvmm_page *hog[NFRAMES];

	assert_true(16 * tpp <= 16 * 64);
	for (i = 0; i < 16 * tpp; i++)
		tok[i] = 100 + i;
	assert_int_equal(add_host(f, 1, 0, 64), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 16);
	kvmm_mm_seq_free(a);
	assert_int_equal(kvmm_swap_demote(f->pool, NULL, 16), 16);
	/* leave 6 frames above the min watermark */
	while (kvmm_pool_nr_free(f->pool) > f->pool->wmark_min + 6 &&
	       (hog[n] = kvmm_alloc_page(f->pool, NULL, NULL)))
		n++;
	/* (no invariant check while the hog's frames, mapped by no one, are out) */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	i = (uint32_t)kvmm_mm_prefix_lookup(b, tok, 16 * tpp) / tpp;
	assert_true(i > 0 && i < 16);
	kvmm_mm_seq_free(b);

	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_prefix_lookup_reclaim(c, tok, 16 * tpp), (int)(16 * tpp));
	assert_int_equal(c->nsealed, 16);
	assert_true(vmstat(f, KVMM_STAT_LOOKUP_RECLAIM) >= 1);
	assert_true(kvmm_mm_seq_nr_swapped(c) > 0); /* it did not fit: part went out again */
	while (n)
		kvmm_free_page(f->pool, hog[--n], NULL);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(c, 0, 16) >= 0, true);
	check_bytes(f, 0, c, 0, 16);
	kvmm_mm_seq_free(c);
	check_inv(f->pool);

	/* a miss at block 3 (no room needed): three pages, nothing swapped out for it */
	tok[3 * tpp] = 7;
	n = (uint32_t)vmstat(f, KVMM_STAT_LOOKUP_RECLAIM);
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_prefix_lookup_reclaim(c, tok, 16 * tpp), (int)(3 * tpp));
	assert_int_equal(vmstat(f, KVMM_STAT_LOOKUP_RECLAIM), n);
	check_bytes(f, 0, c, 0, 3);
	kvmm_mm_seq_free(c);
	assert_int_equal(kvmm_mm_prefix_lookup_reclaim(NULL, tok, 1), -EINVAL);
	check_inv(f->pool);
}

/* ---- a small randomized model: swap ops against the expected bytes --------------------------- */

/*
 * check_bytes() for a far lookup's result: a block mapped where it lies on the host tier
 * (tier 1) is compared in its slot; one on another tier is not looked at.
 */
static void check_any(struct fx *f, int idx, struct kvmm_seq *seq, uint32_t from, uint32_t to)
{
	for (uint32_t b = from; b < to; b++) {
		uint64_t pte = seq->pte[b];

		if (kvmm_pte_is_swap(pte)) {
			struct kvmm_swap_tier *t =
				kvmm_swap_tier_get(f->pool, kvmm_pte_swap_tier(pte));

			if (t && t->id == 1)
				assert_memory_equal(t->ops->slot_addr(t, kvmm_pte_swap_slot(pte)),
						    f->want[idx][b], PAGE_SZ);
			continue;
		}
		check_bytes(f, idx, seq, b, b + 1);
	}
}

/*
 * Sequence i always holds the same tokens (1000 * i + 1 ...), nb = 2 + 2i blocks, so a new
 * incarnation first looks its prefix up: the blocks it hits (resident, demoted or swapped
 * pages of an earlier incarnation) must hold the bytes written then; the rest are appended and
 * filled with new random bytes.
 */
static struct kvmm_seq *model_create(struct fx *f, int i, uint32_t nb)
{
	uint32_t tpp = f->fmt.tokens_per_page, t, b, h = 0;
	uint32_t tok[8 * 64];
	struct kvmm_seq *seq;
	int ret;

	for (t = 0; t < nb * tpp; t++)
		tok[t] = 1000u * (uint32_t)i + 1 + t;
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	ret = kvmm_mm_prefix_lookup(seq, tok, nb * tpp);
	assert_true(ret >= 0 || ret == -ENOMEM || ret == -EIO);
	if (ret > 0)
		h = (uint32_t)ret / tpp;
	check_any(f, i, seq, 0, h);
	if (h == nb)
		return seq;
	if (kvmm_mm_seq_append(seq, (nb - h) * tpp, tok + h * tpp)) {
		kvmm_mm_seq_free(seq);
		return NULL;
	}
	for (b = h; b < nb; b++) {
		for (t = 0; t < PAGE_SZ; t += 8) {
			uint64_t v = rnd(f);

			memcpy(&f->want[i][b][t], &v, 8);
		}
		memcpy(kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, b)), f->want[i][b],
		       PAGE_SZ);
	}
	return seq;
}

/*
 * A twin of model sequence @i: a new sequence that maps @i's sealed blocks by a prefix lookup
 * (so they are pages two sequences map); NULL when nothing could be mapped.
 */
static struct kvmm_seq *model_twin(struct fx *f, int i, struct kvmm_seq *seq)
{
	uint32_t tpp = f->fmt.tokens_per_page, t, h;
	uint32_t tok[8 * 64];
	struct kvmm_seq *tw;
	int ret;

	if (!seq->nsealed)
		return NULL;
	for (t = 0; t < seq->nsealed * tpp; t++)
		tok[t] = 1000u * (uint32_t)i + 1 + t;
	assert_int_equal(kvmm_mm_seq_create(f->as, &tw), 0);
	ret = kvmm_mm_prefix_lookup(tw, tok, seq->nsealed * tpp);
	assert_true(ret >= 0 || ret == -ENOMEM || ret == -EIO);
	h = ret > 0 ? (uint32_t)ret / tpp : 0;
	if (!h) {
		kvmm_mm_seq_free(tw);
		return NULL;
	}
	check_any(f, i, tw, 0, h);
	return tw;
}

/* A far pin of the model: the slot and the bytes it held when pinned. */
struct model_pin {
	uint64_t slot;
	uint8_t bytes[PAGE_SZ];
};

/*
 * @far: lookups map host-tier pages where they lie (as->far_lookup), and slots are pinned
 * in place at random (kvmm_swap_far_pin) and unpinned later: a pinned slot must keep the
 * bytes it had when pinned whatever happens to its page meanwhile (faulted back, moved
 * down, its sequences freed), and nothing may reuse it.
 */
static void model_run(struct fx *f, bool far)
{
	struct kvmm_seq *s[4] = {0}, *tw[4] = {0};
	static struct model_pin pins[8];
	struct kvmm_swap_tier *host;
	uint32_t op, npins = 0;
	int ret;

	assert_int_equal(add_host(f, 1, 10, 12), 0);
	assert_int_equal(add_manual(f), 0);
	assert_int_equal(add_nvme(f, 2, 0, 24), 0);
	host = kvmm_swap_tier_get(f->pool, 1);
	f->as->far_lookup = far;
	for (op = 0; op < 4000; op++) {
		int i = (int)(rnd(f) % 4);
		uint32_t nb = 2 + 2 * (uint32_t)i;
		uint32_t r = (uint32_t)(rnd(f) % 100), first, n;

		if (far && s[i] && rnd(f) % 8 == 0) {
			uint32_t b = (uint32_t)(rnd(f) % s[i]->nblocks);

			if (npins && (npins == 8 || rnd(f) % 2)) {
				struct model_pin *p = &pins[rnd(f) % npins];

				assert_memory_equal(host->ops->slot_addr(host, p->slot), p->bytes,
						    PAGE_SZ);
				kvmm_swap_far_unpin(host, p->slot);
				*p = pins[--npins];
			} else if (kvmm_swap_far_pin(host, s[i]->pte[b], b < s[i]->nsealed,
						     &pins[npins].slot)) {
				void *at = host->ops->slot_addr(host, pins[npins].slot);

				assert_memory_equal(at, f->want[i][b], PAGE_SZ);
				memcpy(pins[npins].bytes, at, PAGE_SZ);
				npins++;
			}
			continue;
		}
		if (!s[i]) {
			s[i] = model_create(f, i, nb);
			/* KV written: its pages keep their slots after a fault-in (clean) */
			kv_written(f, s[i]);
			continue;
		}
		first = (uint32_t)(rnd(f) % nb);
		n = 1 + (uint32_t)(rnd(f) % nb);
		if (r < 18) {
			/* odd: the pages it shares with its twin, out of both */
			if (r & 1)
				ret = kvmm_mm_seq_swap_out_shared(s[i], first, n);
			else
				ret = kvmm_mm_seq_swap_out(s[i], first, n);
			assert_true(ret >= 0 || ret == -ENOSPC);
		} else if (r < 30) {
			/* asynchronous write-back, finished later by writeback/poll (or not yet) */
			ret = kvmm_mm_seq_swap_out_async(s[i], first, n);
			assert_true(ret >= 0 || ret == -ENOSPC);
			if (r & 1)
				assert_true(kvmm_swap_writeback(f->pool, false) >= 0);
		} else if (r < 50) {
			ret = kvmm_mm_seq_fault(s[i], first, n);
			assert_true(ret >= 0 || ret == -ENOMEM);
		} else if (r < 60) {
			assert_true(kvmm_mm_seq_prefetch(s[i], first, n) >= 0);
		} else if (r < 65) {
			assert_true(kvmm_swap_move_down(f->pool, 1, n) >= -ENOSPC);
		} else if (r < 70) {
			kvmm_swap_poll(f->pool, r & 1);
		} else if (r < 76) {
			ret = kvmm_mm_seq_seal(s[i]);
			assert_true(ret >= 0 || ret == -ENOMEM);
		} else if (r < 84) {
			/* its twin alone, or both (the twin maps pages of this incarnation) */
			if (tw[i]) {
				kvmm_mm_seq_free(tw[i]);
				tw[i] = NULL;
			}
			if (!(r & 1) || r < 80) {
				kvmm_mm_seq_free(s[i]);
				s[i] = NULL;
			}
		} else if (r < 86) {
			kvmm_reclaim(f->pool, NULL, n);
		} else if (r < 88) {
			/* kvswapd's order, write-back included */
			kvmm_shrink(f->pool, n, (r & 1) ? KVMM_SHRINK_ASYNC : 0);
		} else if (r < 92) {
			assert_true(kvmm_swap_demote(f->pool, NULL, n) >= -ENOSPC);
		} else if (r < 95 && !tw[i]) {
			tw[i] = model_twin(f, i, s[i]);
		} else {
			/* everything resident must hold exactly what was written */
			ret = kvmm_mm_seq_fault(s[i], 0, nb);
			assert_true(ret >= 0 || ret == -ENOMEM);
			if (!kvmm_mm_seq_nr_swapped(s[i]))
				check_bytes(f, i, s[i], 0, nb);
			if (tw[i]) {
				ret = kvmm_mm_seq_fault(tw[i], 0, tw[i]->nblocks);
				assert_true(ret >= 0 || ret == -ENOMEM);
				if (!kvmm_mm_seq_nr_swapped(tw[i]))
					check_bytes(f, i, tw[i], 0, tw[i]->nblocks);
			}
		}
		if (op % 16 == 0)
			check_inv(f->pool);
	}
	check_inv(f->pool);
	while (npins) {
		struct model_pin *p = &pins[--npins];

		assert_memory_equal(host->ops->slot_addr(host, p->slot), p->bytes, PAGE_SZ);
		kvmm_swap_far_unpin(host, p->slot);
	}
	check_inv(f->pool);
	kvmm_swap_poll(f->pool, true);
	for (op = 0; op < 4; op++) {
		if (!s[op])
			continue;
		assert_true(kvmm_mm_seq_fault(s[op], 0, s[op]->nblocks) >= 0);
		kvmm_swap_poll(f->pool, true);
		assert_int_equal(kvmm_mm_seq_nr_swapped(s[op]), 0);
		check_bytes(f, (int)op, s[op], 0, s[op]->nblocks);
	}
	check_inv(f->pool);
	print_message("model: pswpout %llu pswpin %llu demote %llu ra %llu cache_hit %llu "
		      "refault %llu lookup hits %llu\n",
		      (unsigned long long)vmstat(f, KVMM_STAT_SWPOUT),
		      (unsigned long long)vmstat(f, KVMM_STAT_SWPIN),
		      (unsigned long long)vmstat(f, KVMM_STAT_SWAP_DEMOTE),
		      (unsigned long long)vmstat(f, KVMM_STAT_SWAP_RA),
		      (unsigned long long)vmstat(f, KVMM_STAT_SWAP_CACHE_HIT),
		      (unsigned long long)vmstat(f, KVMM_STAT_REFAULT),
		      (unsigned long long)vmstat(f, KVMM_STAT_CACHE_HIT));
	print_message("model: clean swap-outs (kept slots) host %llu nvme %llu; shared pages "
		      "swapped out %llu\n",
		      (unsigned long long)tinfo(f, 1).clean_out,
		      (unsigned long long)tinfo(f, 2).clean_out,
		      (unsigned long long)vmstat(f, KVMM_STAT_SWAP_SHARED));
	if (far)
		print_message("model: far pins %llu, slots held past their release %llu, lookup "
			      "hits mapped in place %llu\n",
			      (unsigned long long)vmstat(f, KVMM_STAT_FAR_PIN),
			      (unsigned long long)vmstat(f, KVMM_STAT_FAR_HELD),
			      (unsigned long long)vmstat(f, KVMM_STAT_FAR_MAP));
	assert_int_equal(kvmm_swapoff(f->pool, 2), 0);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	assert_int_equal(kvmm_swapoff(f->pool, 5), 0);
	check_inv(f->pool);
}

static void test_model(void **state)
{
	model_run(*state, false);
}

static void test_model_far(void **state)
{
	model_run(*state, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_host_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nvme_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapon_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_priority_and_move_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapoff_moves_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_far_pin_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_far_lookup_maps_in_place, setup, teardown),
		cmocka_unit_test_setup_teardown(test_far_lookup_owned_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapoff_no_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_not_swapped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_demote_and_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup_reclaim_maps_past_the_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ns_destroy_drops_demoted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sealed_swapout_shared_by_lookup, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shared_prefix_reclaimed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_pinned_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_prefix_bigger_than_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shared_swap_paths, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_truncate_seal_swapped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_parent_swapped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_reclaim_keeps_tail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readahead_joins_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prefetch_async, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_while_reading, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapfile_fills, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapfile_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapfile_unlinked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_host, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_submitted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_nvme, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_fault_during, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_free_during, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_truncate_during, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_ns_destroy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_write_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_shared_and_swapoff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_fault_during, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_free_truncate_during, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_swapoff_during, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_read_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlocked_stress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_nvme, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_pending_kv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_dirtied, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_full_tier, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_swapoff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_write_eio, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_write_short, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_write_enospc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_alloc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_parse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_csum_sync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_csum_unlocked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_csum_move_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_corrupt_args, setup, teardown),
		cmocka_unit_test(test_stat_names),
		cmocka_unit_test_setup_teardown(test_model, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_far, setup, teardown),
	};

	return cmocka_run_group_tests_name("swap", tests, NULL, NULL);
}
