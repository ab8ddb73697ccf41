// SPDX-License-Identifier: MIT
/*
 * tests/unit/mm_fixture.c - the pool fixture shared by the core's unit tests (mm_fixture.h):
 * one place that builds a pool, namespaces, the test format and address spaces, and one
 * teardown that checks the whole pool at every step of taking them apart, so that every test
 * of every core module ends with the same checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "list.h"
#include "mm_fixture.h"

void mmf_check(struct kvmm_pool *pool)
{
	char why[256] = "";
	int ret = kvmm_check_invariants(pool, why, sizeof(why));

	if (ret)
		fail_msg("invariants: %s", why);
}

struct kvmm_pool *mmf_pool(uint32_t nframes)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = nframes};
	struct kvmm_pool *pool = NULL;

	assert_int_equal(kvmm_pool_create(&p, &pool), 0);
	assert_non_null(pool);
	return pool;
}

struct kvmm_ns *mmf_ns(struct kvmm_pool *pool, const char *name, uint32_t limit)
{
	struct kvmm_ns *ns = NULL;

	assert_int_equal(kvmm_ns_create(pool, name, limit, 0, &ns), 0);
	assert_non_null(ns);
	assert_ptr_equal(pool->ns[ns->id], ns);
	return ns;
}

int mmf_setup(void **state, const struct mm_fixture_opts *o)
{
	struct kvmm_pool_params p = o->params;
	struct mm_fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	if (!p.page_size)
		p.page_size = PAGE_SZ;
	assert_int_equal(kvmm_pool_create(&p, &f->pool), 0);
	/* 1 layer, 1 head, dim 64, fp16: 256 bytes a token, 16 tokens in a 4 KiB page */
	assert_int_equal(p.page_size, PAGE_SZ);
	assert_int_equal(
		kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, PAGE_SZ),
		0);
	assert_int_equal(f->fmt.tokens_per_page, TPP);
	if (o->mag)
		assert_int_equal(kvmm_magazine_init(f->pool, &f->mag, 7, 8, 4), 0);
	if (o->ns) {
		f->ns = mmf_ns(f->pool, o->ns, 0);
		assert_int_equal(kvmm_aspace_create(f->pool, f->ns, &f->fmt,
						    o->mag ? &f->mag : NULL, &f->as),
				 0);
	}
	if (o->ns && o->ns2) {
		f->ns2 = mmf_ns(f->pool, o->ns2, 0);
		assert_int_equal(kvmm_aspace_create(f->pool, f->ns2, &f->fmt, NULL, &f->as2), 0);
	}
	*state = f;
	return 0;
}

int mmf_teardown(void **state)
{
	struct mm_fixture *f = *state;

	mmf_check(f->pool);
	kvmm_aspace_destroy(f->as);
	kvmm_aspace_destroy(f->as2);
	mmf_check(f->pool);
	/* a test destroys the address spaces it makes: nothing may be mapped any more */
	assert_true(list_empty(&f->pool->aspaces));
	if (f->ns)
		assert_int_equal(f->ns->used, 0);
	if (f->ns2)
		assert_int_equal(f->ns2->used, 0);
	kvmm_magazine_drain_all(&f->mag);
	mmf_check(f->pool);
	kvmm_mm_release(f->pool);
	kvmm_pool_destroy(f->pool);
	free(f);
	return 0;
}

void mmf_fill(uint32_t *t, uint32_t n, uint32_t base)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		t[i] = base + i;
}

uint32_t *mmf_tokens(uint32_t n, uint32_t base)
{
	/* one spare byte: malloc(0) may return NULL */
	uint32_t *t = malloc((size_t)n * sizeof(*t) + 1);

	assert_non_null(t);
	mmf_fill(t, n, base);
	return t;
}
