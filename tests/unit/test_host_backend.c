// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_host_backend.c - the shared host-memory backend (kvmm/backend/host.c):
 * every frame is addressable at base + n * page_size and distinct, the chunk memfds mapped a
 * second time at another address (what a client does after ATTACH) show the same bytes both
 * ways, chunk sizes (default, explicit, a short last chunk) and the -EINVAL cases, the seals
 * that stop anyone resizing a chunk, close-on-exec, copy and both kinds of scrub, and the
 * backend under a real pool where a frame changing namespace is scrubbed.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/backend/host.h"

#define PS 4096u

/* A backend context as kvmm_pool_create() sets it up before calling init. */
static int be_init(struct kvmm_backend_ctx *be, const struct kvmm_backend_ops *ops,
		   uint64_t page_size, uint32_t nframes)
{
	memset(be, 0, sizeof(*be));
	be->ops = ops;
	be->page_size = page_size;
	be->nframes = nframes;
	return ops->init(be, page_size, nframes);
}

static uint8_t pattern(uint32_t frame, uint64_t off)
{
	return (uint8_t)(frame * 131u + off * 7u + 1u);
}

/* Map every chunk again at a fresh address, as a client does: reserve, then MAP_FIXED. */
static char *map_like_client(const int *fds, uint32_t nr, uint64_t chunk_size)
{
	char *base = mmap(NULL, nr * chunk_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t i;

	assert_true(base != MAP_FAILED);
	for (i = 0; i < nr; i++) {
		struct stat st;
		void *p;

		assert_int_equal(fstat(fds[i], &st), 0);
		assert_true((uint64_t)st.st_size <= chunk_size);
		p = mmap(base + i * chunk_size, (size_t)st.st_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, fds[i], 0);
		assert_ptr_equal(p, base + i * chunk_size);
	}
	return base;
}

static void test_frames_addressable(void **state)
{
	struct kvmm_host_backend hb;
	struct kvmm_backend_ctx be;
	const int *fds;
	uint32_t nr, f;
	uint64_t cs;
	char *base;

	(void)state;
	/* 4 frames per chunk, 10 frames: chunks of 4, 4 and a short one of 2 */
	kvmm_host_backend_init(&hb, 4 * PS, 0);
	assert_int_equal(be_init(&be, &hb.ops, PS, 10), 0);
	assert_true(kvmm_is_host_backend(&be));
	assert_int_equal(kvmm_host_backend_chunks(&be, &fds, &nr, &cs), 0);
	assert_int_equal(nr, 3);
	assert_int_equal(cs, 4 * PS);
	base = kvmm_host_backend_base(&be);
	assert_non_null(base);

	for (f = 0; f < 10; f++) {
		uint8_t *p = be.ops->frame_addr(&be, f);
		uint64_t o;

		assert_ptr_equal(p, base + (uint64_t)f * PS);
		for (o = 0; o < PS; o++)
			p[o] = pattern(f, o);
	}
	assert_null(be.ops->frame_addr(&be, 10));
	for (f = 0; f < 10; f++) {
		uint8_t *p = be.ops->frame_addr(&be, f);

		assert_int_equal(p[0], pattern(f, 0));
		assert_int_equal(p[PS - 1], pattern(f, PS - 1));
	}
	be.ops->fini(&be);
	assert_null(be.priv);
}

static void test_client_mapping_shares_bytes(void **state)
{
	struct kvmm_host_backend hb;
	struct kvmm_backend_ctx be;
	const int *fds;
	uint32_t nr, f;
	uint64_t cs;
	char *mine, *theirs;

	(void)state;
	kvmm_host_backend_init(&hb, 2 * PS, 0);
	assert_int_equal(be_init(&be, &hb.ops, PS, 7), 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, &fds, &nr, &cs), 0);
	assert_int_equal(nr, 4);
	mine = kvmm_host_backend_base(&be);
	theirs = map_like_client(fds, nr, cs);
	assert_ptr_not_equal(mine, theirs);

	/* daemon writes, client reads: frame n at base + n * page_size on both sides */
	for (f = 0; f < 7; f++)
		memset(be.ops->frame_addr(&be, f), 0x40 + (int)f, PS);
	for (f = 0; f < 7; f++) {
		assert_int_equal((uint8_t)theirs[f * PS], 0x40 + f);
		assert_int_equal((uint8_t)theirs[f * PS + PS - 1], 0x40 + f);
	}
	/* client writes, daemon reads */
	memcpy(theirs + 5 * PS + 100, "kv bytes", 8);
	assert_memory_equal(mine + 5 * PS + 100, "kv bytes", 8);
	/* a copy in the daemon is visible to the client */
	assert_int_equal(be.ops->copy(&be, 1, 5, PS), 0);
	assert_memory_equal(theirs + 1 * PS + 100, "kv bytes", 8);

	munmap(theirs, nr * cs);
	be.ops->fini(&be);
}

static void test_default_chunk_size(void **state)
{
	struct kvmm_backend_ctx be;
	uint32_t nr;
	uint64_t cs;

	(void)state;
	/* small pool: one chunk exactly the pool */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, PS, 3), 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_int_equal(nr, 1);
	assert_int_equal(cs, 3 * PS);
	be.ops->fini(&be);

	/* larger than the default chunk: KVMM_HOST_CHUNK_DEFAULT each (memory is not touched) */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, 1u << 20, 200), 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_int_equal(cs, KVMM_HOST_CHUNK_DEFAULT);
	assert_int_equal(nr, DIV_ROUND_UP(200ull << 20, KVMM_HOST_CHUNK_DEFAULT));
	be.ops->fini(&be);

	/* a huge pool: chunks grow so that there are at most KVMM_HOST_DEFAULT_MAX_CHUNKS */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, 1u << 20,
				 KVMM_HOST_DEFAULT_MAX_CHUNKS * 64 + 100),
			 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_true(nr <= KVMM_HOST_DEFAULT_MAX_CHUNKS);
	assert_true(cs > KVMM_HOST_CHUNK_DEFAULT);
	assert_int_equal(cs % (1u << 20), 0);
	assert_true((uint64_t)nr * cs >= (uint64_t)(KVMM_HOST_DEFAULT_MAX_CHUNKS * 64 + 100) << 20);
	assert_true((uint64_t)(nr - 1) * cs < (uint64_t)(KVMM_HOST_DEFAULT_MAX_CHUNKS * 64 + 100)
						      << 20);
	be.ops->fini(&be);

	/* a page larger than the default chunk: one page per chunk */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, 2 * KVMM_HOST_CHUNK_DEFAULT, 2), 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_int_equal(cs, 2 * KVMM_HOST_CHUNK_DEFAULT);
	assert_int_equal(nr, 2);
	be.ops->fini(&be);
}

static void test_bad_sizes(void **state)
{
	struct kvmm_host_backend hb;
	struct kvmm_backend_ctx be;

	(void)state;
	/* chunk not a multiple of the page size */
	kvmm_host_backend_init(&hb, 3 * PS + PS / 2, 0);
	assert_int_equal(be_init(&be, &hb.ops, PS, 8), -EINVAL);
	kvmm_host_backend_init(&hb, PS + 1, 0);
	assert_int_equal(be_init(&be, &hb.ops, PS, 8), -EINVAL);
	kvmm_host_backend_init(&hb, 3 * PS, 0);
	assert_int_equal(be_init(&be, &hb.ops, 2 * PS, 8), -EINVAL);
	/* page size not a multiple of the system page */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, 100, 8), -EINVAL);
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, 0, 8), -EINVAL);
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, PS, 0), -EINVAL);
	/* nframes * page_size overflows */
	assert_int_equal(be_init(&be, &kvmm_host_backend_ops, UINT64_C(1) << 62, 64), -EINVAL);
	assert_null(be.priv);

	/* through the pool too: nothing is created */
	{
		struct kvmm_pool_params pp = {.page_size = PS, .nframes = 16, .backend = &hb.ops};
		struct kvmm_pool *pool = (void *)1;

		kvmm_host_backend_init(&hb, PS + PS / 2, 0);
		assert_int_equal(kvmm_pool_create(&pp, &pool), -EINVAL);
		assert_null(pool);
	}
}

static void test_seals(void **state)
{
	struct kvmm_host_backend hb; /* must outlive the backend instance */
	struct kvmm_backend_ctx be;
	const int *fds;
	uint32_t nr, i;
	int seals, fl;

	(void)state;
	kvmm_host_backend_init(&hb, 2 * PS, 0);
	assert_int_equal(be_init(&be, &hb.ops, PS, 4), 0);
	assert_int_equal(kvmm_host_backend_chunks(&be, &fds, &nr, NULL), 0);
	assert_int_equal(nr, 2);
	for (i = 0; i < nr; i++) {
		seals = fcntl(fds[i], F_GET_SEALS);
		assert_true(seals >= 0);
		assert_true(seals & F_SEAL_SHRINK);
		assert_true(seals & F_SEAL_GROW);
		assert_true(seals & F_SEAL_SEAL);
		assert_false(seals & F_SEAL_WRITE);
		/* neither shrinking nor growing, nor removing the seals by adding more */
		assert_int_equal(ftruncate(fds[i], 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(fds[i], 4 * PS), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(fcntl(fds[i], F_ADD_SEALS, F_SEAL_WRITE), -1);
		assert_int_equal(errno, EPERM);
		/* the same holds through a duplicate, as a client receives it */
		{
			int dup = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);

			assert_true(dup >= 0);
			assert_int_equal(ftruncate(dup, PS), -1);
			close(dup);
		}
		fl = fcntl(fds[i], F_GETFD);
		assert_true(fl & FD_CLOEXEC);
	}
	/* the chunks still work after the failed attempts */
	memset(be.ops->frame_addr(&be, 3), 0x5a, PS);
	be.ops->fini(&be);
}

static void test_scrub(void **state)
{
	unsigned int modes[2] = {0, KVMM_HOST_PUNCH_SCRUB};
	unsigned int m;

	(void)state;
	for (m = 0; m < 2; m++) {
		struct kvmm_host_backend hb;
		struct kvmm_backend_ctx be;
		const int *fds;
		uint32_t nr;
		uint64_t cs, o;
		uint8_t *p, *q, *client;

		kvmm_host_backend_init(&hb, 2 * PS, modes[m] | KVMM_HOST_POPULATE);
		assert_int_equal(be_init(&be, &hb.ops, PS, 6), 0);
		p = be.ops->frame_addr(&be, 3);
		q = be.ops->frame_addr(&be, 2);
		memset(p, 0xee, PS);
		memset(q, 0xdd, PS);
		assert_int_equal(kvmm_host_backend_chunks(&be, &fds, &nr, &cs), 0);
		client = (uint8_t *)map_like_client(fds, nr, cs);

		assert_int_equal(be.ops->scrub(&be, 3), 0);
		for (o = 0; o < PS; o++) {
			assert_int_equal(p[o], 0);
			assert_int_equal(client[3 * PS + o], 0);
		}
		/* its neighbour in the same chunk is untouched */
		assert_int_equal(q[0], 0xdd);
		assert_int_equal(q[PS - 1], 0xdd);
		assert_int_equal(client[2 * PS], 0xdd);
		/* the frame is usable again */
		p[7] = 1;
		assert_int_equal(client[3 * PS + 7], 1);
		assert_int_equal(be.ops->scrub(&be, 6), -EINVAL);
		assert_int_equal(be.ops->copy(&be, 0, 6, PS), -EINVAL);
		assert_int_equal(be.ops->copy(&be, 0, 1, PS + 1), -EINVAL);
		munmap(client, nr * cs);
		be.ops->fini(&be);
	}
}

static void test_other_backend(void **state)
{
	struct kvmm_backend_ctx be;
	const int *fds;

	(void)state;
	assert_int_equal(be_init(&be, &kvmm_mmap_backend_ops, PS, 4), 0);
	assert_false(kvmm_is_host_backend(&be));
	assert_int_equal(kvmm_host_backend_chunks(&be, &fds, NULL, NULL), -EOPNOTSUPP);
	assert_null(kvmm_host_backend_base(&be));
	be.ops->fini(&be);
	assert_int_equal(kvmm_host_backend_chunks(NULL, &fds, NULL, NULL), -EOPNOTSUPP);
}

/* The backend under a real pool: one configuration, several pools (one per namespace). */
static void test_pool(void **state)
{
	struct kvmm_host_backend hb;
	struct kvmm_pool_params pp = {.page_size = PS, .nframes = 16, .backend = &hb.ops};
	struct kvmm_pool *a, *b;
	struct kvmm_ns *x, *y;
	struct kvmm_page *pg, *taken[16];
	const int *fds;
	uint32_t nr, frame, n = 0, i;
	uint64_t cs;
	uint8_t *p;
	char why[256];

	(void)state;
	kvmm_host_backend_init(&hb, 8 * PS, 0);
	assert_int_equal(kvmm_pool_create(&pp, &a), 0);
	assert_int_equal(kvmm_pool_create(&pp, &b), 0);
	assert_int_equal(kvmm_host_backend_chunks(&a->be, &fds, &nr, &cs), 0);
	assert_int_equal(nr, 2);
	assert_int_equal(cs, 8 * PS);
	assert_ptr_not_equal(kvmm_host_backend_base(&a->be), kvmm_host_backend_base(&b->be));
	assert_ptr_equal(kvmm_pool_frame_addr(a, 9),
			 (char *)kvmm_host_backend_base(&a->be) + 9 * PS);

	/* a frame written for namespace x is zero when y gets it */
	assert_int_equal(kvmm_ns_create(a, "x", 0, 0, &x), 0);
	assert_int_equal(kvmm_ns_create(a, "y", 0, 0, &y), 0);
	pg = kvmm_alloc_page(a, x, NULL);
	assert_non_null(pg);
	frame = kvmm_page_to_frame(a, pg);
	p = kvmm_pool_frame_addr(a, frame);
	memset(p, 0x77, PS);
	kvmm_free_page(a, pg, NULL);
	do {
		pg = kvmm_alloc_page(a, y, NULL);
		assert_non_null(pg);
		assert_true(n < ARRAY_SIZE(taken));
		taken[n++] = pg;
	} while (kvmm_page_to_frame(a, pg) != frame);
	assert_int_equal(p[0], 0);
	assert_int_equal(p[PS - 1], 0);
	for (i = 0; i < n; i++)
		kvmm_free_page(a, taken[i], NULL);
	if (kvmm_check_invariants(a, why, sizeof(why)))
		fail_msg("invariants: %s", why);

	kvmm_pool_destroy(a);
	kvmm_pool_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames_addressable),
		cmocka_unit_test(test_client_mapping_shares_bytes),
		cmocka_unit_test(test_default_chunk_size),
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_seals),
		cmocka_unit_test(test_scrub),
		cmocka_unit_test(test_other_backend),
		cmocka_unit_test(test_pool),
	};

	return cmocka_run_group_tests_name("host_backend", tests, NULL, NULL);
}
