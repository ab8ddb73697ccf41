// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ns.c - namespaces (kvmm/ns.c): names and ids, random per-namespace
 * secrets, the used/cached charges kept exact through append, seal, fork, lookup, free and
 * reclaim, limits (a lower limit drops the namespace's own cache), destroy refusing while
 * anything is mapped and dropping the cache otherwise, and an id reused by a new namespace
 * never seeing the old one's bytes.  Every test ends with kvmm_check_invariants().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

#define NFRAMES 64

static int setup(void **state)
{
	return mmf_setup(state, &(struct mm_fixture_opts){.params.nframes = NFRAMES});
}

static void test_create_find_destroy(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_ns *a, *b, *c;
	char name[40];

	assert_int_equal(kvmm_ns_create(f->pool, "alpha", 10, 3, &a), 0);
	assert_int_equal(a->id, 1);
	assert_string_equal(a->name, "alpha");
	assert_int_equal(a->limit, 10);
	assert_int_equal(a->priority, 3);
	assert_ptr_equal(a->pool, f->pool);
	assert_ptr_equal(f->pool->ns[1], a);
	assert_int_equal(kvmm_ns_create(f->pool, "beta", 0, 0, &b), 0);
	assert_int_equal(b->id, 2);
	assert_ptr_equal(kvmm_ns_find(f->pool, "alpha"), a);
	assert_ptr_equal(kvmm_ns_find(f->pool, "beta"), b);
	assert_null(kvmm_ns_find(f->pool, "gamma"));
	assert_null(kvmm_ns_find(f->pool, "alph"));
	assert_null(kvmm_ns_find(NULL, "alpha"));

	assert_int_equal(kvmm_ns_create(f->pool, "alpha", 0, 0, &c), -EEXIST);
	assert_null(c);
	assert_int_equal(kvmm_ns_create(f->pool, "", 0, 0, &c), -EINVAL);
	memset(name, 'x', sizeof(name));
	name[32] = '\0';
	assert_int_equal(kvmm_ns_create(f->pool, name, 0, 0, &c), -EINVAL); /* 32 chars */
	name[31] = '\0';
	assert_int_equal(kvmm_ns_create(f->pool, name, 0, 0, &c), 0); /* 31 fit */
	assert_ptr_equal(kvmm_ns_find(f->pool, name), c);
	assert_int_equal(kvmm_ns_create(NULL, "x", 0, 0, &c), -EINVAL);
	assert_int_equal(kvmm_ns_create(f->pool, NULL, 0, 0, &c), -EINVAL);
	assert_int_equal(kvmm_ns_create(f->pool, "x", 0, 0, NULL), -EINVAL);

	assert_int_equal(kvmm_ns_destroy(a), 0);
	assert_null(kvmm_ns_find(f->pool, "alpha"));
	assert_null(f->pool->ns[1]);
	/* the lowest free id is reused */
	assert_int_equal(kvmm_ns_create(f->pool, "delta", 0, 0, &a), 0);
	assert_int_equal(a->id, 1);
	assert_int_equal(kvmm_ns_destroy(NULL), -EINVAL);
	mmf_check(f->pool);
}

static void test_ids_run_out(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_ns *ns;
	char name[16];
	unsigned int i;

	for (i = 1; i < KVMM_MAX_NS; i++) {
		snprintf(name, sizeof(name), "ns%u", i);
		assert_int_equal(kvmm_ns_create(f->pool, name, 0, 0, &ns), 0);
		assert_int_equal(ns->id, i);
	}
	assert_int_equal(kvmm_ns_create(f->pool, "onemore", 0, 0, &ns), -ENOSPC);
	assert_int_equal(kvmm_ns_destroy(kvmm_ns_find(f->pool, "ns17")), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "onemore", 0, 0, &ns), 0);
	assert_int_equal(ns->id, 17);
}

static void test_secrets_are_random(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_ns *a, *b;
	uint32_t t[TPP] = {1, 2, 3};

	assert_int_equal(kvmm_ns_create(f->pool, "a", 0, 0, &a), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "b", 0, 0, &b), 0);
	assert_false(a->secret[0] == 0 && a->secret[1] == 0);
	assert_memory_not_equal(a->secret, b->secret, sizeof(a->secret));
	assert_true(a->hash_seed != b->hash_seed);
	/* so the same block has a different key in each */
	assert_true(kvmm_cache_key(a, 0, 5, t, TPP) != kvmm_cache_key(b, 0, 5, t, TPP));
}

/* ---- charges ---------------------------------------------------------------------------- */

static void assert_charged(struct kvmm_ns *ns, uint32_t used, uint32_t cached)
{
	assert_int_equal(ns->used, used);
	assert_int_equal(ns->cached, cached);
	mmf_check(ns->pool);
}

static void test_accounting_exact(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as, *as_b;
	struct kvmm_seq *s1, *s2, *s3;
	struct kvmm_ns *a, *b;
	uint32_t t[4 * TPP], i;

	for (i = 0; i < 4 * TPP; i++)
		t[i] = i;
	assert_int_equal(kvmm_ns_create(f->pool, "a", 0, 0, &a), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "b", 0, 0, &b), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, a, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, b, &f->fmt, NULL, &as_b), 0);
	assert_charged(a, 0, 0);

	assert_int_equal(kvmm_mm_seq_create(as, &s1), 0);
	assert_int_equal(kvmm_mm_seq_append(s1, 3 * TPP + 4, t), 0);
	assert_charged(a, 4, 0);
	assert_int_equal(kvmm_mm_seq_fork(s1, &s2), 0);
	assert_charged(a, 4, 0); /* shared, charged once */
	assert_int_equal(kvmm_mm_seq_append(s2, 1, NULL), 0);
	assert_charged(a, 5, 0); /* the copy */
	assert_int_equal(a->peak, 5);
	assert_int_equal(kvmm_mm_seq_seal(s1), 3);
	kvmm_mm_seq_free(s1);
	assert_charged(a, 4, 0); /* s2 still maps every sealed page */
	kvmm_mm_seq_free(s2);
	assert_charged(a, 0, 3); /* the sealed pages stay, as cached */

	assert_int_equal(kvmm_mm_seq_create(as, &s3), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(s3, t, 4 * TPP), 3 * TPP);
	assert_charged(a, 3, 0);
	assert_int_equal(kvmm_mm_seq_truncate(s3, TPP), 0);
	assert_charged(a, 1, 2);
	assert_int_equal(kvmm_reclaim(f->pool, a, 1), 1);
	assert_charged(a, 1, 1);
	/* the high-water mark: frees, seals and lookups never lower or raise it */
	assert_int_equal(a->peak, 5);
	assert_int_equal(kvmm_mm_seq_append(s3, 5 * TPP, NULL), 0);
	assert_charged(a, 6, 1);
	assert_int_equal(a->peak, 7);
	assert_int_equal(kvmm_mm_seq_truncate(s3, TPP), 0);
	assert_charged(a, 1, 1);
	assert_int_equal(a->peak, 7);

	/* the other namespace is charged for its own pages only */
	assert_int_equal(kvmm_mm_seq_create(as_b, &s1), 0);
	assert_int_equal(kvmm_mm_seq_append(s1, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(s1), 2);
	assert_charged(b, 2, 0);
	assert_int_equal(b->peak, 2);
	assert_charged(a, 1, 1);
	kvmm_aspace_destroy(as_b);
	assert_charged(b, 0, 2);
	kvmm_aspace_destroy(as);
	assert_charged(a, 0, 2);
}

static void test_set_limit_drops_own_cache(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_ns *a;

	assert_int_equal(kvmm_ns_create(f->pool, "a", 0, 0, &a), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, a, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 6 * TPP, NULL), 0);
	/* identical blocks of zeros still chain to distinct keys, so 6 entries */
	assert_int_equal(kvmm_mm_seq_seal(seq), 6);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 2 * TPP), 0);
	assert_charged(a, 2, 4);

	assert_int_equal(kvmm_ns_set_limit(a, 4), 0);
	assert_int_equal(a->limit, 4);
	assert_charged(a, 2, 2);
	/* below what is mapped: the cache goes, the mapped pages stay */
	assert_int_equal(kvmm_ns_set_limit(a, 1), 0);
	assert_charged(a, 2, 0);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), -ENOMEM);
	assert_int_equal(kvmm_ns_set_limit(a, 0), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), 0);
	assert_charged(a, 3, 0);
	assert_int_equal(kvmm_ns_set_limit(NULL, 0), -EINVAL);
	kvmm_aspace_destroy(as);
}

/* ---- destroy ---------------------------------------------------------------------------- */

static void test_destroy_busy_while_mapped(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as;
	struct kvmm_page *pg;
	struct kvmm_seq *seq;
	struct kvmm_ns *a;

	assert_int_equal(kvmm_ns_create(f->pool, "a", 0, 0, &a), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, a, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_ns_destroy(a), -EBUSY); /* an address space belongs to it */
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 2 * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 2);
	assert_int_equal(kvmm_ns_destroy(a), -EBUSY);
	kvmm_aspace_destroy(as);
	assert_charged(a, 0, 2);

	/* a frame charged without any address space also keeps it */
	pg = kvmm_alloc_page(f->pool, a, NULL);
	assert_non_null(pg);
	assert_int_equal(kvmm_ns_destroy(a), -EBUSY);
	assert_ptr_equal(kvmm_ns_find(f->pool, "a"), a);
	assert_int_equal(a->cached, 2); /* a refused destroy dropped nothing */
	kvmm_free_page(f->pool, pg, NULL);

	/* only cache left: destroy drops it and succeeds */
	assert_int_equal(kvmm_ns_destroy(a), 0);
	assert_null(kvmm_ns_find(f->pool, "a"));
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), NFRAMES);
	mmf_check(f->pool);
}

static void test_reused_id_never_sees_old_data(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_ns *a, *b;
	uint32_t frame, i;
	unsigned char *p;
	uint64_t scrubs;

	assert_int_equal(kvmm_ns_create(f->pool, "a", 0, 0, &a), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, a, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
	frame = kvmm_mm_seq_frame(seq, 0);
	p = kvmm_pool_frame_addr(f->pool, frame);
	memset(p, 0x77, PAGE_SZ);
	kvmm_aspace_destroy(as);
	assert_int_equal(kvmm_ns_destroy(a), 0);

	/* a new namespace gets the same id and, LIFO, the same frame: scrubbed first */
	assert_int_equal(kvmm_ns_create(f->pool, "b", 0, 0, &b), 0);
	assert_int_equal(b->id, 1);
	scrubs = f->pool->stat[KVMM_STAT_SCRUB];
	assert_int_equal(kvmm_aspace_create(f->pool, b, &f->fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
	assert_int_equal(kvmm_mm_seq_frame(seq, 0), frame);
	assert_true(f->pool->stat[KVMM_STAT_SCRUB] > scrubs);
	for (i = 0; i < PAGE_SZ; i++)
		assert_int_equal(p[i], 0);
	kvmm_aspace_destroy(as);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_find_destroy, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_ids_run_out, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_secrets_are_random, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_accounting_exact, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_set_limit_drops_own_cache, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_destroy_busy_while_mapped, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_reused_id_never_sees_old_data, setup,
						mmf_teardown),
	};

	return cmocka_run_group_tests_name("ns", tests, NULL, NULL);
}
