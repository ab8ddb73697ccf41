/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/mm_fixture.h - the pool fixture shared by the core's unit tests (test_ns,
 * test_pagecache, test_pgtable, test_vmscan, test_page_alloc): a pool over the mmap backend,
 * up to two namespaces each with an address space in one test format (16 tokens of
 * 1 layer x 1 head x 64 fp16 in a 4 KiB page), optionally allocating through a magazine, and
 * a teardown that checks kvmm_check_invariants() before and after the address spaces go
 * and that nothing is left charged as used.  A test program links mm_fixture.o through its
 * Kbuild fragment (test_x-objs := test_x.o mm_fixture.o).
 */
#ifndef KVMM_TESTS_MM_FIXTURE_H
#define KVMM_TESTS_MM_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvmm/mm.h"

#define PAGE_SZ 4096 /* page size of the fixture's pools */
#define TPP 16	     /* tokens per page of the fixture's format */

struct mm_fixture_opts {
	/* .nframes required; .page_size PAGE_SZ (0 means it); watermarks as kvmm_pool_create() */
	struct kvmm_pool_params params;
	const char *ns;	 /* first namespace and its address space; NULL: neither */
	const char *ns2; /* a second namespace and address space (with ns); NULL: neither */
	bool mag;	 /* the first address space allocates through ->mag */
};

struct mm_fixture {
	struct kvmm_pool *pool;
	struct kvmm_fmt fmt; /* always set up: TPP tokens per PAGE_SZ page */
	struct kvmm_ns *ns;
	struct kvmm_aspace *as;
	struct kvmm_ns *ns2;
	struct kvmm_aspace *as2;
	struct kvmm_magazine mag; /* initialised (owner 7, capacity 8, batch 4) with opts.mag */
};

/* cmocka setup: build the fixture described by @o into *state.  Fails the test on error. */
int mmf_setup(void **state, const struct mm_fixture_opts *o);
/*
 * cmocka teardown: invariants; the fixture's address spaces destroyed (with every sequence
 * left in them), invariants again; no address space left (a test destroys those it makes) and
 * nothing charged as used in the fixture's namespaces; the magazine drained, invariants; the
 * pool released.
 */
int mmf_teardown(void **state);

/* A pool of @nframes PAGE_SZ frames with default watermarks. */
struct kvmm_pool *mmf_pool(uint32_t nframes);
/* Namespace @name with @limit frames (0 = none), priority 0, registered in the pool. */
struct kvmm_ns *mmf_ns(struct kvmm_pool *pool, const char *name, uint32_t limit);
/* kvmm_check_invariants() over the whole pool, failing the test with its message. */
void mmf_check(struct kvmm_pool *pool);

/* Token ids base, base + 1, ...: fill @t with @n of them, or malloc them (free()). */
void mmf_fill(uint32_t *t, uint32_t n, uint32_t base);
uint32_t *mmf_tokens(uint32_t n, uint32_t base);

#endif /* KVMM_TESTS_MM_FIXTURE_H */
