// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ring.c - the data plane's shared-memory layout and ring protocol from
 * uapi/kvmm.h: the pinned sizes and offsets, kvmm_shm_layout() (every area aligned, inside
 * the region, disjoint, sizes out of range refused) and kvmm_shm_hdr_check() (any corrupted
 * field refused), then the protocol itself run by two threads over one region: a producer
 * publishing SQEs with release stores and a consumer copying them out with acquire loads,
 * free-running indexes wrapping past 2^32, a futex doorbell on the CQ tail, and a page-table
 * slot written under its seqcount while a reader checks it never sees a torn table.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "atomic.h"
#include "uapi/kvmm.h"

static void test_sizes(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct kvmm_shm_ring), 192);
	assert_int_equal(offsetof(struct kvmm_shm_ring, tail), 64);
	assert_int_equal(offsetof(struct kvmm_shm_ring, flags), 128);
	assert_int_equal(sizeof(struct kvmm_ring_sqe), 32);
	assert_int_equal(offsetof(struct kvmm_ring_sqe, user_data), 16);
	assert_int_equal(sizeof(struct kvmm_ring_cqe), 32);
	assert_int_equal(offsetof(struct kvmm_ring_cqe, rep), 16);
	assert_int_equal(sizeof(struct kvmm_pt_slot), 32);
	assert_int_equal(offsetof(struct kvmm_pt_slot, nr_tokens), 16);
	assert_int_equal(sizeof(struct kvmm_shm_hdr), 192);
	assert_int_equal(offsetof(struct kvmm_shm_hdr, mag_size), 128);
	/* every memory reply fits a CQE */
	assert_true(sizeof(struct kvmm_seq_create_rep) <= 16);
	assert_true(sizeof(struct kvmm_seq_append_rep) <= 16);
	assert_true(sizeof(struct kvmm_seq_fork_rep) <= 16);
	assert_true(sizeof(struct kvmm_prefix_lookup_rep) <= 16);
	assert_true(sizeof(struct kvmm_pin_rep) <= 16);
	assert_true(sizeof(struct kvmm_mag_rep) <= 16);
}

struct span {
	uint64_t off, len;
};

static void test_layout(void **state)
{
	static const uint32_t entries[] = {8, 16, 256, 4096};
	struct kvmm_shm_hdr h, plain;

	(void)state;
	/* each size without an out area, then with one (KVMM_FEAT_RING_OUT) */
	for (unsigned int i = 0; i < 2 * sizeof(entries) / sizeof(entries[0]); i++) {
		uint32_t out = i % 2 ? (uint32_t)KVMM_RING_OUT_SIZE : 0;
		uint64_t size = kvmm_shm_layout_out(&h, entries[i / 2], 7, 33, 5, out);
		struct span a[] = {
			{0, sizeof(h)},
			{h.sq_off, sizeof(struct kvmm_shm_ring)},
			{h.sqes_off, (uint64_t)h.ring_entries * sizeof(struct kvmm_ring_sqe)},
			{h.data_off, h.data_size},
			{h.cq_off, sizeof(struct kvmm_shm_ring)},
			{h.cqes_off, (uint64_t)h.ring_entries * sizeof(struct kvmm_ring_cqe)},
			{h.pt_off, (uint64_t)h.pt_slots * sizeof(struct kvmm_pt_slot)},
			{h.pt_frames_off, (uint64_t)h.pt_slots * h.pt_max_blocks * 4},
			{h.mag_off, sizeof(struct kvmm_shm_ring)},
			{h.mag_frames_off, (uint64_t)h.mag_size * 4},
			{h.ret_off, sizeof(struct kvmm_shm_ring)},
			{h.ret_frames_off, (uint64_t)h.mag_size * 4},
			{h.out_off,
			 h.out_size}, /* last: the areas an older client knows stay put */
		};
		unsigned int n = sizeof(a) / sizeof(a[0]) - (out ? 0 : 1);

		assert_true(size > 0);
		assert_int_equal(h.out_size, out);
		if (!out) {
			/* the layout an older client computes: no out area at all */
			assert_int_equal(kvmm_shm_layout(&plain, entries[i / 2], 7, 33, 5), size);
			assert_memory_equal(&plain, &h, sizeof(h));
			assert_int_equal(h.out_off, 0);
		} else {
			assert_true(size >= plain.size + KVMM_RING_OUT_SIZE);
			assert_true(h.out_size >=
				    sizeof(struct kvmm_ring_out) + KVMM_MSG_PAYLOAD_MAX);
		}
		assert_int_equal(size % 4096, 0);
		assert_int_equal(h.size, size);
		assert_int_equal(h.ring_entries, entries[i / 2]);
		assert_true(h.data_size >= KVMM_RING_DATA_MIN);
		assert_true(h.data_size >= 2 * (uint64_t)KVMM_MSG_PAYLOAD_MAX);
		for (unsigned int j = 0; j < n; j++) {
			assert_int_equal(a[j].off % KVMM_SHM_ALIGN, 0);
			assert_true(a[j].off + a[j].len <= size);
			for (unsigned int k = 0; k < j; k++)
				assert_true(a[k].off + a[k].len <=
					    a[j].off); /* in order, disjoint */
		}
		assert_int_equal(kvmm_shm_hdr_check(&h, size), 0);
	}
	/* out of range */
	assert_int_equal(kvmm_shm_layout(&h, 0, 1, 1, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 4, 1, 1, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 24, 1, 1, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 8192, 1, 1, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 8, 0, 1, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 8, 1, 0, 1), 0);
	assert_int_equal(kvmm_shm_layout(&h, 8, 1, 1, 0), 0);
	assert_int_equal(kvmm_shm_layout(&h, 8, 65537, 1, 1), 0);
	/* an out area is KVMM_RING_OUT_SIZE bytes or none */
	assert_int_equal(kvmm_shm_layout_out(&h, 8, 1, 1, 1, 4096), 0);
	assert_int_equal(kvmm_shm_layout_out(&h, 8, 1, 1, 1, KVMM_RING_OUT_SIZE + 1), 0);
}

static void test_hdr_check(void **state)
{
	struct kvmm_shm_hdr good, h;
	uint64_t size;

	(void)state;
	/* without an out area and with one */
	for (int out = 0; out < 2; out++) {
		size = kvmm_shm_layout_out(&good, KVMM_RING_DEFAULT_ENTRIES, KVMM_PT_DEFAULT_SLOTS,
					   KVMM_PT_DEFAULT_MAX_BLOCKS, KVMM_MAG_DEFAULT_SIZE,
					   out ? (uint32_t)KVMM_RING_OUT_SIZE : 0);
		assert_true(size > 0);
		assert_int_equal(kvmm_shm_hdr_check(&good, size), 0);
		assert_int_equal(kvmm_shm_hdr_check(&good, size - 4096), -EBADMSG);
		assert_int_equal(kvmm_shm_hdr_check(&good, size + 4096), -EBADMSG);
		assert_int_equal(kvmm_shm_hdr_check(&good, 16), -EBADMSG);
		/* any single corrupted byte of the header is refused */
		for (size_t i = 0; i < sizeof(h); i++) {
			h = good;
			((uint8_t *)&h)[i] ^= 0x40;
			assert_int_equal(kvmm_shm_hdr_check(&h, size), -EBADMSG);
		}
	}
}

/* ---- the protocol, two threads over one region ------------------------------------------ */

#define NR_OPS 200000u

struct region {
	struct kvmm_shm_hdr h;
	uint8_t *base;
	struct kvmm_shm_ring *sq, *cq;
	struct kvmm_ring_sqe *sqes;
	struct kvmm_ring_cqe *cqes;
	uint8_t *data;
	uint32_t start; /* first index: near 2^32 so the counters wrap */
};

static void region_init(struct region *r, uint32_t entries)
{
	uint64_t size = kvmm_shm_layout(&r->h, entries, 4, 8, 8);

	assert_true(size > 0);
	r->base = aligned_alloc(4096, size);
	assert_non_null(r->base);
	memset(r->base, 0, size);
	r->sq = (void *)(r->base + r->h.sq_off);
	r->cq = (void *)(r->base + r->h.cq_off);
	r->sqes = (void *)(r->base + r->h.sqes_off);
	r->cqes = (void *)(r->base + r->h.cqes_off);
	r->data = r->base + r->h.data_off;
	r->start = UINT32_MAX - 1000;
	r->sq->head = r->sq->tail = r->cq->head = r->cq->tail = r->start;
}

/* The daemon's side: consume SQEs, answer each with the sum of its payload. */
static void *consumer(void *arg)
{
	struct region *r = arg;
	uint32_t mask = r->h.ring_entries - 1, head = r->start, ctail = r->start;
	uint32_t done = 0;

	while (done < NR_OPS) {
		uint32_t tail = smp_load_acquire(&r->sq->tail);

		if (tail == head) {
			cpu_relax();
			continue;
		}
		while (head != tail && ctail - smp_load_acquire(&r->cq->head) < r->h.ring_entries) {
			struct kvmm_ring_sqe e = r->sqes[head & mask];
			struct kvmm_ring_cqe c = {.user_data = e.user_data, .op = e.op};
			uint64_t sum = 0;

			for (uint32_t i = 0; i < e.len; i++)
				sum += r->data[e.data_off + i];
			memcpy(c.rep, &sum, sizeof(sum));
			r->cqes[ctail & mask] = c;
			head++;
			ctail++;
			done++;
		}
		smp_store_release(&r->sq->head, head);
		smp_store_release(&r->cq->tail, ctail);
		smp_mb();
		if (READ_ONCE(r->cq->flags) & KVMM_CQ_F_WAITING)
			syscall(SYS_futex, &r->cq->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	return NULL;
}

static void test_spsc(void **state)
{
	struct region r;
	pthread_t t;
	uint32_t mask, tail, chead, sent = 0, got = 0, sleeps = 0;

	(void)state;
	region_init(&r, 16);
	mask = r.h.ring_entries - 1;
	tail = chead = r.start;
	assert_int_equal(pthread_create(&t, NULL, consumer, &r), 0);
	while (got < NR_OPS) {
		/* produce while there is room: payload of 1..8 bytes, each slot its own data */
		while (sent < NR_OPS && tail - smp_load_acquire(&r.sq->head) < r.h.ring_entries) {
			struct kvmm_ring_sqe *e = &r.sqes[tail & mask];
			uint32_t len = 1 + sent % 8, off = (tail & mask) * 8;

			for (uint32_t i = 0; i < len; i++)
				r.data[off + i] = (uint8_t)(sent + i);
			*e = (struct kvmm_ring_sqe){
				.op = KVMM_OP_PING, .len = len, .data_off = off, .user_data = sent};
			tail++;
			sent++;
		}
		smp_store_release(&r.sq->tail, tail);
		/* reap in order and check each answer */
		for (;;) {
			uint32_t ct = smp_load_acquire(&r.cq->tail);

			if (ct != chead)
				break;
			if (got + (tail - chead) < NR_OPS && tail - chead < r.h.ring_entries)
				goto produce_more;
			/* sleep on the futex now and then, as libkvmm does after spinning */
			if (++sleeps % 64 == 0) {
				struct timespec ts = {0, 1000000};

				WRITE_ONCE(r.cq->flags, KVMM_CQ_F_WAITING);
				smp_mb();
				if (READ_ONCE(r.cq->tail) == chead)
					syscall(SYS_futex, &r.cq->tail, FUTEX_WAIT, chead, &ts,
						NULL, 0);
				WRITE_ONCE(r.cq->flags, 0);
			}
			cpu_relax();
		}
		while (chead != smp_load_acquire(&r.cq->tail)) {
			struct kvmm_ring_cqe c = r.cqes[chead & mask];
			uint32_t len = 1 + got % 8;
			uint64_t sum, want = 0;

			for (uint32_t i = 0; i < len; i++)
				want += (uint8_t)(got + i);
			memcpy(&sum, c.rep, sizeof(sum));
			if (c.user_data != got || sum != want || c.op != KVMM_OP_PING)
				fail_msg("cqe %u: user_data %llu sum %llu want %llu", got,
					 (unsigned long long)c.user_data, (unsigned long long)sum,
					 (unsigned long long)want);
			chead++;
			got++;
		}
		smp_store_release(&r.cq->head, chead);
produce_more:;
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(tail < r.start); /* the free-running indexes did wrap */
	free(r.base);
}

/* ---- seqcount on a mirror slot ------------------------------------------------------------ */

#define MIRROR_WRITES 100000u
#define MIRROR_BLOCKS 8

struct mirror {
	struct kvmm_pt_slot slot;
	int32_t frames[MIRROR_BLOCKS];
	uint32_t stop;
};

/* Each write makes every entry equal to the generation, and nr_tokens too. */
static void *mirror_writer(void *arg)
{
	struct mirror *m = arg;

	for (uint32_t g = 1; g <= MIRROR_WRITES; g++) {
		kvmm_seqcount_write_begin((struct kvmm_seqcount *)&m->slot.seqcount);
		WRITE_ONCE(m->slot.nr_tokens, g);
		WRITE_ONCE(m->slot.nr_blocks, 1 + g % MIRROR_BLOCKS);
		for (int b = 0; b < MIRROR_BLOCKS; b++)
			WRITE_ONCE(m->frames[b], (int32_t)g);
		kvmm_seqcount_write_end((struct kvmm_seqcount *)&m->slot.seqcount);
	}
	smp_store_release(&m->stop, 1);
	return NULL;
}

static void test_mirror_seqcount(void **state)
{
	struct mirror m;
	pthread_t t;
	uint64_t reads = 0;

	(void)state;
	memset(&m, 0, sizeof(m));
	assert_int_equal(pthread_create(&t, NULL, mirror_writer, &m), 0);
	while (!smp_load_acquire(&m.stop)) {
		uint32_t sc, nb;
		uint64_t nt;
		int32_t f[MIRROR_BLOCKS];

		if (!kvmm_seqcount_try_read_begin((struct kvmm_seqcount *)&m.slot.seqcount, &sc))
			continue;
		nt = READ_ONCE(m.slot.nr_tokens);
		nb = READ_ONCE(m.slot.nr_blocks);
		for (int b = 0; b < MIRROR_BLOCKS; b++)
			f[b] = READ_ONCE(m.frames[b]);
		if (kvmm_seqcount_read_retry((struct kvmm_seqcount *)&m.slot.seqcount, sc))
			continue;
		reads++;
		if (nt)
			assert_int_equal(nb, 1 + nt % MIRROR_BLOCKS);
		for (int b = 0; b < MIRROR_BLOCKS; b++)
			assert_int_equal(f[b], (int32_t)nt); /* never a torn table */
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(m.slot.seqcount, 2 * MIRROR_WRITES);
	(void)reads;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_hdr_check),	cmocka_unit_test(test_spsc),
		cmocka_unit_test(test_mirror_seqcount),
	};

	return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
