// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_swap_staged.c - swap on a backend whose frames the host cannot address (the
 * CUDA backend's situation): page bytes must move through the backend's copy_to_host /
 * copy_from_host hooks, and reach their destination only once its sync ran.
 *
 * The test backend keeps its frames in a private malloc'd buffer, its frame_addr says NULL,
 * and its staging copies are really asynchronous: they are queued and only carried out by
 * sync (or by the next copy/scrub, which are synchronous like the core expects), so a tier
 * that forgets to sync moves stale bytes and the comparison fails.  host_alloc hands out
 * counted page-aligned memory, so the tests see that the tiers take their arena and staging
 * buffers from it.  Random pages go round trips through the host tier, the NVMe tier (skipped
 * where io_uring or the file is unavailable), write-back, demotion + lookup and move-down.
 *
 * Every test runs twice: with one device, and as a tensor-parallel group of MIRRORS devices
 * (be->nr_devices, the cuda backend's kvmmd --device 0,1,2): every frame then exists on each
 * device with different bytes, a slot holds all of them (kvmm_frame_bytes()), and each must
 * come back to its own device.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "check_inv.h"
#include "swap_tier.h"

#define PAGE_SZ 4096u
#define NFRAMES 64u
#define MAXB 16u
#define QMAX 256u
#define MIRRORS 3u /* the group's devices in the second run */

/* devices per frame of the pools the next setup creates: 1, then MIRRORS */
static uint32_t nr_mirrors = 1;

/* ---- the test backend: device-like memory, asynchronous staging copies ------------------- */

struct dev_copy {
	void *host;
	uint32_t frame;
	bool to_host;
};

struct dev_mem {
	uint8_t *mem;
	struct dev_copy q[QMAX]; /* started, not done: sync does them */
	uint32_t nq;
	uint64_t nr_copies, nr_syncs, host_allocs, host_bytes;
};

static struct dev_mem *dev_of(struct kvmm_backend_ctx *be)
{
	return be->priv;
}

/* frame @frame on device @k: each device's copies of the frames follow the last device's */
static uint8_t *dev_frame_on(struct kvmm_backend_ctx *be, uint32_t k, uint32_t frame)
{
	return dev_of(be)->mem + ((size_t)k * be->nframes + frame) * be->page_size;
}

static int dev_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	struct dev_mem *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->mem = calloc((size_t)nframes * nr_mirrors, page_size);
	if (!d->mem) {
		free(d);
		return -ENOMEM;
	}
	be->priv = d;
	be->nr_devices = nr_mirrors;
	return 0;
}

static int dev_sync(struct kvmm_backend_ctx *be)
{
	struct dev_mem *d = dev_of(be);

	for (uint32_t i = 0; i < d->nq; i++) {
		struct dev_copy *c = &d->q[i];

		/* device k's copy of the frame at k * page_size of the frame's host bytes */
		for (uint32_t k = 0; k < be->nr_devices; k++) {
			uint8_t *h = (uint8_t *)c->host + (size_t)k * be->page_size;

			if (c->to_host)
				memcpy(h, dev_frame_on(be, k, c->frame), be->page_size);
			else
				memcpy(dev_frame_on(be, k, c->frame), h, be->page_size);
		}
	}
	d->nq = 0;
	d->nr_syncs++;
	return 0;
}

static void dev_fini(struct kvmm_backend_ctx *be)
{
	struct dev_mem *d = dev_of(be);

	assert_int_equal(d->nq, 0); /* every started copy was waited for */
	assert_int_equal(d->host_bytes, 0);
	free(d->mem);
	free(d);
	be->priv = NULL;
}

static void *dev_frame_addr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	(void)be;
	(void)frame;
	return NULL;
}

static int dev_copy(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes)
{
	dev_sync(be);
	for (uint32_t k = 0; k < be->nr_devices; k++)
		memmove(dev_frame_on(be, k, dst), dev_frame_on(be, k, src), bytes);
	return 0;
}

static int dev_scrub(struct kvmm_backend_ctx *be, uint32_t frame)
{
	dev_sync(be);
	for (uint32_t k = 0; k < be->nr_devices; k++)
		memset(dev_frame_on(be, k, frame), 0, be->page_size);
	return 0;
}

static int dev_queue(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames, uint32_t nr,
		     bool to_host)
{
	struct dev_mem *d = dev_of(be);

	if (nr && (!host || !frames))
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++) {
		if (frames[i] >= be->nframes)
			return -EINVAL;
		if (d->nq == QMAX)
			dev_sync(be);
		d->q[d->nq++] = (struct dev_copy){
			.host = (uint8_t *)host + (size_t)i * be->page_size * be->nr_devices,
			.frame = frames[i],
			.to_host = to_host,
		};
		d->nr_copies++;
	}
	return 0;
}

static int dev_copy_to_host(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames,
			    uint32_t nr)
{
	return dev_queue(be, host, frames, nr, true);
}

static int dev_copy_from_host(struct kvmm_backend_ctx *be, const uint32_t *frames, const void *host,
			      uint32_t nr)
{
	return dev_queue(be, (void *)host, frames, nr, false);
}

static void *dev_host_alloc(struct kvmm_backend_ctx *be, uint64_t bytes)
{
	struct dev_mem *d = dev_of(be);
	void *p = aligned_alloc(PAGE_SZ, (size_t)bytes);

	if (p) {
		d->host_allocs++;
		d->host_bytes += bytes;
	}
	return p;
}

static void dev_host_free(struct kvmm_backend_ctx *be, void *host, uint64_t bytes)
{
	struct dev_mem *d = dev_of(be);

	assert_true(d->host_bytes >= bytes);
	d->host_bytes -= bytes;
	free(host);
}

static const struct kvmm_backend_ops dev_ops = {
	.name = "testdev",
	.init = dev_init,
	.fini = dev_fini,
	.frame_addr = dev_frame_addr,
	.copy = dev_copy,
	.scrub = dev_scrub,
	.copy_to_host = dev_copy_to_host,
	.copy_from_host = dev_copy_from_host,
	.sync = dev_sync,
	.host_alloc = dev_host_alloc,
	.host_free = dev_host_free,
};

/* neither a host address nor staging hooks: swap cannot work */
static const struct kvmm_backend_ops bare_ops = {
	.name = "bare",
	.init = dev_init,
	.fini = dev_fini,
	.frame_addr = NULL,
	.copy = dev_copy,
	.scrub = dev_scrub,
};

/* ---- fixture ------------------------------------------------------------------------------- */

struct fx {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	char dir[64];
	char path[128];
	uint64_t rng;
	uint8_t want[MAXB][MIRRORS][PAGE_SZ]; /* block b's bytes on each device */
};

static uint64_t rnd(struct fx *f)
{
	uint64_t z = (f->rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static struct dev_mem *dev(struct fx *f)
{
	return dev_of(&f->pool->be);
}

static int setup_ops(void **state, const struct kvmm_backend_ops *ops)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = NFRAMES, .backend = ops};
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->rng = 777;
	if (kvmm_pool_create(&p, &f->pool) || kvmm_ns_create(f->pool, "t", 0, 0, &f->ns) ||
	    kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP32}, PAGE_SZ) ||
	    kvmm_aspace_create(f->pool, f->ns, &f->fmt, NULL, &f->as))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvmm-swap-staged.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/swapfile", f->dir);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_ops(state, &dev_ops);
}

static int setup_bare(void **state)
{
	return setup_ops(state, &bare_ops);
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
static struct kvmm_seq *mkseq(struct fx *f, uint32_t nb, uint32_t base)
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
		uint32_t fr = kvmm_mm_seq_frame(seq, b);

		assert_null(kvmm_pool_frame_addr(f->pool, fr));
		for (uint32_t k = 0; k < nr_mirrors; k++) {
			for (i = 0; i < PAGE_SZ; i += 8) {
				uint64_t v = rnd(f);

				memcpy(&f->want[b][k][i], &v, 8);
			}
			memcpy(dev_frame_on(&f->pool->be, k, fr), f->want[b][k], PAGE_SZ);
		}
	}
	free(tok);
	return seq;
}

static void check_bytes(struct fx *f, struct kvmm_seq *seq, uint32_t from, uint32_t to)
{
	for (uint32_t b = from; b < to; b++) {
		uint32_t fr = kvmm_mm_seq_frame(seq, b);

		assert_int_not_equal(fr, KVMM_FRAME_NONE);
		for (uint32_t k = 0; k < nr_mirrors; k++)
			assert_memory_equal(dev_frame_on(&f->pool->be, k, fr), f->want[b][k],
					    PAGE_SZ);
	}
}

/* scribble over every free frame, so that only a real copy brings the bytes back */
static void poison_free(struct fx *f)
{
	for (uint32_t fr = 0; fr < NFRAMES; fr++)
		if (f->pool->pages[fr].state != KVMM_PAGE_MAPPED &&
		    f->pool->pages[fr].state != KVMM_PAGE_CACHED)
			for (uint32_t k = 0; k < nr_mirrors; k++)
				memset(dev_frame_on(&f->pool->be, k, fr), 0xa5, PAGE_SZ);
}

static int add_host(struct fx *f, unsigned int id, int prio, uint32_t slots)
{
	return swapon_host(f->pool, id, prio, slots, PAGE_SZ * nr_mirrors);
}

static int add_nvme(struct fx *f, unsigned int id, int prio, uint32_t slots)
{
	return swapon_nvme(f->pool, id, prio, slots, PAGE_SZ * nr_mirrors, f->path, 4);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void roundtrip(struct fx *f, uint32_t nb)
{
	struct kvmm_seq *seq = mkseq(f, nb, 1);
	uint64_t copies0 = dev(f)->nr_copies;

	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, nb), (int)nb);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), nb);
	assert_int_equal(dev(f)->nq, 0);
	poison_free(f);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, nb), (int)nb);
	check_inv(f->pool);
	assert_int_equal(dev(f)->nq, 0);
	assert_int_equal(dev(f)->nr_copies - copies0, 2 * nb);
	check_bytes(f, seq, 0, nb);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

static void test_host_roundtrip(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_host(f, 1, 10, 32), 0);
	/* the arena is the backend's (pinned) host memory */
	assert_int_equal(dev(f)->host_allocs, 1);
	assert_int_equal(dev(f)->host_bytes, 32 * PAGE_SZ * nr_mirrors);
	roundtrip(f, 8);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	assert_int_equal(dev(f)->host_bytes, 0);
}

static void test_nvme_roundtrip(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_nvme(f, 2, 0, 32), 0);
	/* queue depth 4 staging buffers, from the backend */
	assert_int_equal(dev(f)->host_bytes, 4 * PAGE_SZ * nr_mirrors);
	/* more pages than staging buffers: buffers are reused, each after its copy was waited */
	roundtrip(f, 12);
	assert_int_equal(kvmm_swapoff(f->pool, 2), 0);
	assert_int_equal(dev(f)->host_bytes, 0);
}

static void wb_roundtrip(struct fx *f)
{
	struct kvmm_seq *seq = mkseq(f, 8, 1);

	assert_int_equal(kvmm_mm_seq_swap_out_async(seq, 0, 8), 8);
	check_inv(f->pool);
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_swap_writeback(f->pool, true), 8);
	pthread_mutex_unlock(&f->pool->lock);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), 8);
	assert_int_equal(dev(f)->nq, 0);
	poison_free(f);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 8), 8);
	kvmm_swap_poll(f->pool, true);
	check_bytes(f, seq, 0, 8);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

static void test_wb_host(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	wb_roundtrip(f);
}

static void test_wb_nvme(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	wb_roundtrip(f);
}

/*
 * Clean swap-cached pages on a staged backend: a page whose KV is written keeps its slot after
 * a fault-in, and its next swap-out copies nothing (no staging copy at all); the bytes that
 * come back are the slot's.
 */
static void clean_roundtrip(struct fx *f, unsigned int id)
{
	struct kvmm_seq *seq = mkseq(f, 6, 1);
	struct kvmm_swap_tier_info ti;
	uint64_t copies0;
	uint32_t b;

	for (b = 0; b < 6; b++) {
		struct kvmm_page *pg = kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(seq, b));

		pg->pincount++;
		kvmm_page_unpin(pg, 1); /* the engine's pin window over the KV it wrote ended */
	}
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 6), 6);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 6), 6);
	check_inv(f->pool);
	copies0 = dev(f)->nr_copies;
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 6), 6);
	assert_int_equal(dev(f)->nr_copies, copies0);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_tier_info(f->pool, id, &ti), 0);
	assert_int_equal(ti.clean_out, 6);
	assert_int_equal(ti.pages_out, 6);
	poison_free(f);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, 6), 6);
	check_inv(f->pool);
	check_bytes(f, seq, 0, 6);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

static void test_clean_host(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	clean_roundtrip(f, 1);
}

static void test_clean_nvme(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_nvme(f, 2, 0, 16), 0);
	clean_roundtrip(f, 2);
}

/* the unlocked fault-in on a staged backend: its copies run under the lock, nothing in flight */
static void test_fault_unlocked_staged(void **state)
{
	struct fx *f = *state;
	struct kvmm_seq *seq = mkseq(f, 8, 1);
	struct kvmm_swap_fault sf;
	uint64_t copies0;

	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 2), 0);
	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, 8), 8);
	poison_free(f);
	copies0 = dev(f)->nr_copies;
	assert_int_equal(kvmm_mm_seq_fault_start(seq, 0, 4, &sf), 0);
	assert_int_equal(kvmm_swap_fault_finish(&sf), 4);
	check_inv(f->pool);
	assert_int_equal(dev(f)->nq, 0);
	assert_int_equal(dev(f)->nr_copies - copies0, 6); /* and the readahead of 4 and 5 */
	/* 6 and 7 read, 4 joined (its read lands with 5's, which is then resident) */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_fault_unlocked(seq, 0, 8), 3);
	pthread_mutex_unlock(&f->pool->lock);
	kvmm_swap_poll(f->pool, true);
	check_inv(f->pool);
	check_bytes(f, seq, 0, 8);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

/* sealed pages demoted to the host tier, moved down to NVMe, found again by a lookup */
static void test_demote_move_down_lookup(void **state)
{
	struct fx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, i;
	uint32_t tok[6 * 64];
	struct kvmm_seq *a, *b;
	bool nvme;
	int ret;

	assert_true(6 * tpp <= ARRAY_SIZE(tok));
	for (i = 0; i < 6 * tpp; i++)
		tok[i] = 100 + i;
	a = mkseq(f, 6, 100);
	assert_int_equal(add_host(f, 1, 10, 16), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 6);
	kvmm_mm_seq_free(a); /* six CACHED pages */
	assert_int_equal(kvmm_swap_demote(f->pool, NULL, 6), 6);
	check_inv(f->pool);
	assert_int_equal(kvmm_pagecache_count(f->pool), 6);
	struct kvmm_swap_tier_params p = {
		.tier = 2, .size = 16 * PAGE_SZ * nr_mirrors, .path = f->path, .queue_depth = 4};
	ret = kvmm_swapon(f->pool, &kvmm_swap_nvme_ops, &p);
	nvme = !ret;
	if (nvme) {
		/* the bytes of three of them go host arena -> NVMe file */
		assert_int_equal(kvmm_swap_move_down(f->pool, 1, 3), 3);
		check_inv(f->pool);
	} else {
		print_message("nvme tier unavailable here (%s): host only\n", strerror(-ret));
	}
	poison_free(f);
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, tok, 6 * tpp), (int)(6 * tpp));
	check_inv(f->pool);
	assert_int_equal(dev(f)->nq, 0);
	check_bytes(f, b, 0, 6);
	kvmm_mm_seq_free(b);
	check_inv(f->pool);
}

static void test_bare_backend_refused(void **state)
{
	struct fx *f = *state;

	assert_int_equal(add_host(f, 1, 0, 16), -EOPNOTSUPP);
}

/* a tier's size is whole slots of every device's copy: one device's page size is not enough */
static void test_tier_slot_size(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_frame_bytes(f->pool), (uint64_t)PAGE_SZ * nr_mirrors);
	if (nr_mirrors > 1)
		assert_int_equal(swapon_host(f->pool, 1, 0, 16, PAGE_SZ), -EINVAL);
	assert_int_equal(add_host(f, 1, 0, 16), 0);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 1, &ti), 0);
	assert_int_equal(ti.nslots, 16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_host_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nvme_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_host, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wb_nvme, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_host, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_nvme, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_unlocked_staged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_demote_move_down_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bare_backend_refused, setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_tier_slot_size, setup, teardown),
	};
	int failed;

	failed = cmocka_run_group_tests_name("swap_staged", tests, NULL, NULL);
	nr_mirrors = MIRRORS;
	return failed + cmocka_run_group_tests_name("swap_staged_group_of_3", tests, NULL, NULL);
}
