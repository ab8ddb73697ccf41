// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_ring.c - the data plane against the real kvmmd: batches submitted
 * through the shared rings complete with the right results in order; block tables read from
 * the page-table mirror equal the daemon's SEQ_BLOCKS answers through appends, forks with
 * copy-on-write, truncates and frees; the magazine hands out distinct, writable frames and
 * takes them back, and gives its idle frames up to reclaim; replies longer than a CQE come
 * through the out area; more synchronous clients than CPUs (the crowded waits) all get their
 * answers; and hostile clients - one that corrupts its ring indexes, one that fills
 * its SQ with garbage, one that never reaps its CQ - are disconnected or held back while
 * another client keeps being served and the daemon lives on.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "atomic.h"
#include "itest.h"
#include "runtime/libkvmm.h"

#define NSEQ 64

static kvmm_client_t *attach_ns(const char *ns)
{
	kvmm_client_t *c = NULL;

	assert_int_equal(kvmm_attach(itest_d.sock, ns, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_has_rings(c), 1);
	return c;
}

/* Submit n entries and reap their n completions (in SQ order, as the ring runs them). */
static void run_batch(kvmm_client_t *c, const struct kvmm_sqe *sqes, struct kvmm_cqe *cqes,
		      unsigned int n)
{
	unsigned int got = 0;

	assert_int_equal(kvmm_submit(c, sqes, n), (int)n);
	while (got < n) {
		int r = kvmm_complete(c, cqes + got, n - got, n - got);

		assert_true(r > 0);
		got += (unsigned int)r;
	}
	assert_int_equal(kvmm_inflight(c), 0);
}

static void test_ring_batches(void **state)
{
	struct kvmm_sqe sqes[NSEQ];
	struct kvmm_cqe cqes[NSEQ];
	uint64_t seqs[NSEQ];
	uint32_t tok[NSEQ];
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_B);
	memset(sqes, 0, sizeof(sqes));
	for (unsigned int i = 0; i < NSEQ; i++)
		sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_CREATE, .user_data = 1000 + i};
	run_batch(c, sqes, cqes, NSEQ);
	for (unsigned int i = 0; i < NSEQ; i++) {
		assert_int_equal(cqes[i].user_data, 1000 + i);
		assert_int_equal(cqes[i].res, 0);
		assert_true(cqes[i].seq != 0);
		seqs[i] = cqes[i].seq;
	}
	/* 40 steps of one token per sequence: lengths come back right, blocks grow per page */
	for (unsigned int step = 1; step <= 40; step++) {
		itest_tokens(tok, NSEQ, step);
		for (unsigned int i = 0; i < NSEQ; i++)
			sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
						    .seq = seqs[i],
						    .nr = 1,
						    .data = &tok[i],
						    .user_data = (uint64_t)step << 32 | i};
		run_batch(c, sqes, cqes, NSEQ);
		for (unsigned int i = 0; i < NSEQ; i++) {
			assert_int_equal(cqes[i].user_data, (uint64_t)step << 32 | i);
			assert_int_equal(cqes[i].res, 0);
			assert_int_equal(cqes[i].nr_tokens, step);
			assert_int_equal(cqes[i].nr_blocks, (step + 15) / 16);
		}
	}
	/* a bad entry fails alone; the batch around it goes on */
	sqes[0] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_FREE, .seq = 999999, .user_data = 1};
	sqes[1] = (struct kvmm_sqe){.op = KVMM_SQE_NOP, .user_data = 2};
	sqes[2] = (struct kvmm_sqe){
		.op = KVMM_SQE_SEQ_TRUNCATE, .seq = seqs[0], .arg = 5, .user_data = 3};
	run_batch(c, sqes, cqes, 3);
	assert_int_equal(cqes[0].res, -ENOENT);
	assert_int_equal(cqes[1].res, 0);
	assert_int_equal(cqes[2].res, 0);
	assert_int_equal(cqes[2].user_data, 3);
	/* more entries than the ring holds: kvmm_submit makes room by reaping */
	{
		static struct kvmm_sqe many[3 * KVMM_RING_DEFAULT_ENTRIES];
		static struct kvmm_cqe out[3 * KVMM_RING_DEFAULT_ENTRIES];
		unsigned int n = 0, got = 0;

		for (unsigned int i = 0; i < 3 * KVMM_RING_DEFAULT_ENTRIES; i++)
			many[i] = (struct kvmm_sqe){.op = KVMM_SQE_NOP, .user_data = i};
		while (n < 3 * KVMM_RING_DEFAULT_ENTRIES) {
			int r = kvmm_submit(c, many + n, 3 * KVMM_RING_DEFAULT_ENTRIES - n);

			if (r == -EAGAIN)
				r = 0;
			assert_true(r >= 0);
			n += (unsigned int)r;
			if (!r) {
				int k = kvmm_complete(c, out + got,
						      3 * KVMM_RING_DEFAULT_ENTRIES - got, 1);

				assert_true(k > 0);
				got += (unsigned int)k;
			}
		}
		while (got < n) {
			int k = kvmm_complete(c, out + got, n - got, n - got);

			assert_true(k > 0);
			got += (unsigned int)k;
		}
		for (unsigned int i = 0; i < n; i++)
			assert_int_equal(out[i].user_data, i); /* in SQ order */
	}
	kvmm_detach(c);
}

/* The mirror's table of every sequence equals the socket's. */
static void check_tables(kvmm_client_t *c, const uint64_t *seqs, unsigned int n, uint32_t max)
{
	int32_t *a = calloc((size_t)n * max, sizeof(int32_t));
	int32_t *b = calloc((size_t)n * max, sizeof(int32_t));
	int ra, rb;

	assert_non_null(a);
	assert_non_null(b);
	ra = kvmm_block_table(c, seqs, n, a, max);
	pthread_mutex_lock(&c->lock);
	rb = kvmm_block_table_socket(c, seqs, n, b, max);
	pthread_mutex_unlock(&c->lock);
	assert_int_equal(ra, rb);
	assert_memory_equal(a, b, (size_t)n * max * sizeof(int32_t));
	free(a);
	free(b);
}

static void test_mirror(void **state)
{
	uint32_t tok[600];
	uint64_t seqs[8], child, hit;
	int32_t row[4];
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_B);
	itest_tokens(tok, 600, 5);
	for (unsigned int i = 0; i < 6; i++) {
		assert_int_equal(kvmm_seq_create(c, 0, &seqs[i]), 0);
		assert_int_equal(kvmm_seq_append(c, seqs[i], tok, 10 + 37 * i, NULL), 0);
	}
	check_tables(c, seqs, 6, 64);
	check_tables(c, seqs, 6, 3); /* short rows: -E2BIG from both */
	/* fork shares the pages; an append copies the shared partial tail */
	assert_int_equal(kvmm_seq_fork(c, seqs[2], KVMM_SEQ_ALL_TOKENS, &child), 0);
	seqs[6] = child;
	check_tables(c, seqs, 7, 64);
	assert_int_equal(kvmm_seq_append(c, child, tok, 3, NULL), 0);
	check_tables(c, seqs, 7, 64);
	/* seal, look the prompt up into a fresh sequence: the same frames */
	assert_int_equal(kvmm_seal(c, seqs[5], 0, 0), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &seqs[7]), 0);
	assert_int_equal(kvmm_prefix_lookup(c, seqs[7], tok, 10 + 37 * 5, &hit), 0);
	assert_true(hit >= 16);
	check_tables(c, seqs, 8, 64);
	assert_int_equal(kvmm_seq_truncate(c, seqs[4], 17), 0);
	check_tables(c, seqs, 8, 64);
	/*
	 * a sequence longer than a mirror slot: its row is SEQ_BLOCKS's, on the rings through
	 * their out area (no socket message)
	 */
	{
		static uint32_t big[16 * (KVMM_PT_DEFAULT_MAX_BLOCKS + 8)];
		static int32_t bigrow[KVMM_PT_DEFAULT_MAX_BLOCKS + 16];
		uint64_t s, msgs;

		itest_tokens(big, sizeof(big) / sizeof(big[0]), 8);
		assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
		assert_int_equal(kvmm_seq_append(c, s, big, sizeof(big) / sizeof(big[0]), NULL), 0);
		check_tables(c, &s, 1, KVMM_PT_DEFAULT_MAX_BLOCKS + 16);
		check_tables(c, &s, 1, 100);
		msgs = c->next_seq;
		assert_int_equal(
			kvmm_block_table(c, &s, 1, bigrow, KVMM_PT_DEFAULT_MAX_BLOCKS + 16), 0);
		assert_true(c->next_seq == msgs);
		assert_true(bigrow[KVMM_PT_DEFAULT_MAX_BLOCKS + 7] >= 0);
		assert_int_equal(bigrow[KVMM_PT_DEFAULT_MAX_BLOCKS + 8], KVMM_BLOCK_NONE);
		assert_int_equal(kvmm_seq_free(c, s), 0);
	}
	/* a freed sequence is gone from the mirror too */
	assert_int_equal(kvmm_seq_free(c, seqs[0]), 0);
	assert_int_equal(kvmm_block_table(c, seqs, 1, row, 4), -ENOENT);
	check_tables(c, seqs + 1, 7, 64);
	kvmm_detach(c);
}

static void test_magazine(void **state)
{
	uint32_t frames[300], more[8];
	kvmm_client_t *c;
	int n;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_B);
	assert_true(kvmm_mag_size(c) > 0);
	assert_int_equal(kvmm_mag_avail(c), 0); /* nothing is charged before it is asked for */
	n = kvmm_mag_alloc(c, frames, 10);
	assert_int_equal(n, 10);
	assert_true(kvmm_mag_avail(c) > 0); /* the refill brought a batch */
	for (int i = 0; i < n; i++) {
		unsigned char *p = kvmm_frame_addr(c, frames[i]);

		assert_non_null(p);
		memset(p, 0xa5, (size_t)kvmm_page_size(c));
		for (int j = 0; j < i; j++)
			assert_int_not_equal(frames[i], frames[j]);
	}
	/* a sequence never gets a frame the client holds */
	{
		uint32_t tok[64];
		uint64_t s;
		int32_t row[8];

		itest_tokens(tok, 64, 3);
		assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
		assert_int_equal(kvmm_seq_append(c, s, tok, 64, NULL), 0);
		assert_int_equal(kvmm_block_table(c, &s, 1, row, 8), 0);
		for (int b = 0; b < 4; b++)
			for (int i = 0; i < n; i++)
				assert_int_not_equal(row[b], (int32_t)frames[i]);
		assert_int_equal(kvmm_seq_free(c, s), 0);
	}
	assert_int_equal(kvmm_mag_free(c, frames, (uint32_t)n), 0);
	/* numbers it does not hold are ignored; bad ones refused */
	more[0] = 0;
	assert_int_equal(kvmm_mag_free(c, more, 1), 0);
	more[0] = kvmm_nr_frames(c);
	assert_int_equal(kvmm_mag_free(c, more, 1), -EINVAL);
	/* the whole magazine, given back more than once over: the return ring wraps */
	for (int round = 0; round < 3; round++) {
		uint32_t got = 0;

		while (got < kvmm_mag_size(c)) {
			n = kvmm_mag_alloc(c, frames + got, kvmm_mag_size(c) - got);
			assert_true(n > 0);
			got += (uint32_t)n;
		}
		assert_int_equal(kvmm_mag_free(c, frames, got), 0);
	}
	kvmm_detach(c);
}

/* The daemon's block table of seq (over the socket, not the mirror). */
static void socket_row(kvmm_client_t *c, uint64_t seq, int32_t *row, uint32_t max)
{
	pthread_mutex_lock(&c->lock);
	assert_int_equal(kvmm_block_table_socket(c, &seq, 1, row, max), 0);
	pthread_mutex_unlock(&c->lock);
}

static void fill_frame(kvmm_client_t *c, uint32_t frame, unsigned char v)
{
	unsigned char *p = kvmm_frame_addr(c, frame);

	assert_non_null(p);
	memset(p, v, (size_t)kvmm_page_size(c));
}

static void assert_frame_filled(kvmm_client_t *c, uint32_t frame, unsigned char v)
{
	const unsigned char *p = kvmm_frame_addr(c, frame);

	assert_non_null(p);
	for (size_t i = 0; i < kvmm_page_size(c); i += 997)
		assert_int_equal(p[i], v);
}

/*
 * Frames popped from the magazine become the pages of a sequence: KV written into them
 * before the append is in the sequence's pages after it, on the socket and on the ring; a
 * frame that is not the client's to give (never popped, already a page, another client's)
 * or a wrong count is -EINVAL and nothing changes.
 */
static void test_magazine_append(void **state)
{
	const uint32_t tpp = 16; /* itest_fmt */
	uint32_t fr[8], tok[3 * 16], other_fr;
	int32_t row[8];
	uint64_t s, len = 0;
	kvmm_client_t *c, *other;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_B);
	other = attach_ns(ITEST_NS_B);
	assert_int_equal(kvmm_tokens_per_page(c), tpp);
	itest_tokens(tok, 3 * tpp, 7);
	assert_int_equal(kvmm_mag_alloc(c, fr, 8), 8);
	assert_int_equal(kvmm_mag_alloc(other, &other_fr, 1), 1);
	for (int i = 0; i < 8; i++)
		fill_frame(c, fr[i], (unsigned char)(0x10 + i));
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);

	/* socket: 2 pages' worth of tokens into fr[0], fr[1], written before the append */
	assert_int_equal(kvmm_seq_append_frames(c, s, tok, 2 * tpp, fr, 2, &len), 0);
	assert_int_equal(len, 2 * tpp);
	socket_row(c, s, row, 8);
	assert_int_equal(row[0], (int32_t)fr[0]);
	assert_int_equal(row[1], (int32_t)fr[1]);
	assert_int_equal(row[2], KVMM_BLOCK_NONE);
	assert_frame_filled(c, fr[0], 0x10);
	assert_frame_filled(c, fr[1], 0x11);

	/* refused, nothing changes: a frame already a page, a wrong count, twice the same, a
	 * frame of another client, a frame nobody popped, no frame at all */
	assert_int_equal(kvmm_seq_append_frames(c, s, tok, tpp, &fr[0], 1, NULL), -EINVAL);
	assert_int_equal(kvmm_seq_append_frames(c, s, tok, tpp, &fr[2], 2, NULL), -EINVAL);
	{
		uint32_t twice[2] = {fr[2], fr[2]};

		assert_int_equal(kvmm_seq_append_frames(c, s, tok, 2 * tpp, twice, 2, NULL),
				 -EINVAL);
	}
	assert_int_equal(kvmm_seq_append_frames(c, s, tok, tpp, &other_fr, 1, NULL), -EINVAL);
	{
		uint32_t never = 0;

		while (never == fr[0] || never == fr[1] || never == fr[2] || never == other_fr)
			never++;
		assert_int_equal(kvmm_seq_append_frames(c, s, tok, tpp, &never, 1, NULL), -EINVAL);
	}
	assert_int_equal(kvmm_seq_append_frames(c, s, tok, tpp, NULL, 0, NULL), -EINVAL);
	assert_int_equal(kvmm_seq_append(c, s, NULL, 0, &len), 0);
	assert_int_equal(len, 2 * tpp);
	socket_row(c, s, row, 8);
	assert_int_equal(row[2], KVMM_BLOCK_NONE);

	/* ring: one token opens block 2 in fr[2]; 15 more fill it with no new frame */
	{
		struct kvmm_sqe sqe[2] = {
			{.op = KVMM_SQE_SEQ_APPEND,
			 .seq = s,
			 .nr = 1,
			 .data = tok,
			 .arg = 1,
			 .frames = &fr[2],
			 .user_data = 1},
			{.op = KVMM_SQE_SEQ_APPEND,
			 .seq = s,
			 .nr = tpp - 1,
			 .data = tok,
			 .user_data = 2},
		};
		struct kvmm_cqe cqe[2];

		run_batch(c, sqe, cqe, 2);
		assert_int_equal(cqe[0].res, 0);
		assert_int_equal(cqe[0].nr_tokens, 2 * tpp + 1);
		assert_int_equal(cqe[0].nr_blocks, 3);
		assert_int_equal(cqe[1].res, 0);
		assert_int_equal(cqe[1].nr_tokens, 3 * tpp);
		/* and a bad one on the ring fails alone */
		sqe[0] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
					   .seq = s,
					   .nr = 1,
					   .data = tok,
					   .arg = 1,
					   .frames = &fr[2],
					   .user_data = 3};
		run_batch(c, sqe, cqe, 1);
		assert_int_equal(cqe[0].res, -EINVAL);
	}
	assert_int_equal(kvmm_block_table(c, &s, 1, row, 8), 0); /* the mirror agrees */
	assert_int_equal(row[2], (int32_t)fr[2]);
	assert_frame_filled(c, fr[2], 0x12);
	/* the frames now belong to the sequence: giving them back is ignored, freeing frees */
	assert_int_equal(kvmm_mag_free(c, fr, 3), 0);
	assert_int_equal(kvmm_seq_append(c, s, NULL, 0, &len), 0);
	assert_int_equal(len, 3 * tpp);
	socket_row(c, s, row, 8);
	assert_int_equal(row[0], (int32_t)fr[0]);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	assert_int_equal(kvmm_mag_free(c, fr + 3, 5), 0);
	kvmm_detach(other);
	kvmm_detach(c);
}

/* Only loads: wait for the daemon's loop to make at least @want frames ready. */
static uint32_t wait_avail(kvmm_client_t *c, uint32_t want)
{
	uint32_t avail = 0;

	for (int i = 0; i < 1000 && (avail = kvmm_mag_avail(c)) < want; i++)
		itest_sleep_ms(2);
	return avail;
}

/* After the first refill the daemon keeps the magazine topped up without being asked. */
static void test_magazine_topup(void **state)
{
	static uint32_t fr[KVMM_MAG_DEFAULT_SIZE];
	kvmm_client_t *c;
	uint32_t size, low, got;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_B);
	size = kvmm_mag_size(c);
	low = KVMM_MAG_LOW_MARK(size);
	assert_true(size <= KVMM_MAG_DEFAULT_SIZE && low > 0);
	/* the one round trip: a refill of a small batch (64 frames), one taken */
	assert_int_equal(kvmm_mag_alloc(c, fr, 1), 1);
	got = 1;
	/*
	 * the daemon fills the whole ring on its own, far beyond what was asked: the frame
	 * taken is the client's and does not count against the magazine's size
	 */
	assert_int_equal(wait_avail(c, size), size);
	/* take frames until fewer than the low mark are ready: no request is made */
	while (kvmm_mag_avail(c) >= low && got < size) {
		assert_int_equal(kvmm_mag_alloc(c, fr + got, 1), 1);
		got++;
	}
	assert_true(got <= size);
	assert_int_equal(kvmm_mag_free(c, fr, got), 0);
	/* returned frames are published again (cached, still charged), without a request */
	assert_true(wait_avail(c, low) >= low);
	assert_true(kvmm_mag_avail(c) <= size);
	kvmm_detach(c);
}

/*
 * Frames parked in a magazine are the first thing reclaim takes once the cache is gone: a
 * client whose magazine holds most of a namespace does not make another client's long
 * sequence fail.  Frames it popped stay its own, untouched, and its next allocation gets new
 * ones with a refill.
 */
static void test_magazine_reclaim(void **state)
{
	static uint32_t tok[(ITEST_NS_FRAMES - 24) * 16];
	uint32_t fr[200], held, got, n = sizeof(tok) / sizeof(tok[0]);
	long long freed0;
	kvmm_client_t *c, *big;
	uint64_t s;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_A);
	/* 200 frames popped, one kept, the rest given back: they stay charged, published again */
	for (got = 0; got < 200;) {
		int r = kvmm_mag_alloc(c, fr + got, 200 - got);

		assert_true(r > 0);
		got += (uint32_t)r;
	}
	fill_frame(c, fr[0], 0x5a);
	assert_int_equal(kvmm_mag_free(c, fr + 1, 199), 0);
	held = wait_avail(c, 150);
	assert_true(held >= 150);
	freed0 = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "shrinker_freed");

	big = attach_ns(ITEST_NS_A);
	itest_tokens(tok, n, 11);
	assert_int_equal(kvmm_seq_create(big, 0, &s), 0);
	/* more pages than are free beside the magazine: its frames are taken back */
	assert_int_equal(kvmm_seq_append(big, s, tok, n, NULL), 0);
	assert_true(kvmm_mag_avail(c) < held);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "shrinker_freed") > freed0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom"), 0);
	assert_frame_filled(c, fr[0], 0x5a);
	assert_int_equal(kvmm_seq_free(big, s), 0);
	kvmm_detach(big);

	/* the magazine still works: emptied, it refills with a round trip */
	for (got = 1; got < 16;) {
		int r = kvmm_mag_alloc(c, fr + got, 16 - got);

		assert_true(r > 0);
		got += (uint32_t)r;
	}
	for (int i = 1; i < 16; i++)
		assert_int_not_equal(fr[i], fr[0]);
	assert_frame_filled(c, fr[0], 0x5a);
	assert_int_equal(kvmm_mag_free(c, fr, 16), 0);
	kvmm_detach(c);
}

/*
 * A namespace full of cached prefix pages (sealed, then freed: reclaimable, not used) must not
 * starve the magazine: a refill reclaims them as an append would (issue 25's -ENOMEM).
 */
static void test_magazine_reclaims_cache(void **state)
{
	static uint32_t tok[ITEST_NS_B_FRAMES * 16];
	static const struct {
		const char *ns;
		uint32_t frames;
	} fill[] = {{ITEST_NS_A, ITEST_NS_FRAMES}, {ITEST_NS_B, ITEST_NS_B_FRAMES}};
	uint32_t fr[32], got;
	kvmm_client_t *c, *filler;
	uint64_t s;

	(void)state;
	itest_need_daemon();
	/* both namespaces, so the whole pool, full of cached pages */
	for (unsigned int i = 0; i < 2; i++) {
		uint32_t n = fill[i].frames * 16;

		filler = attach_ns(fill[i].ns);
		itest_tokens(tok, n, 23 + i);
		assert_int_equal(kvmm_seq_create(filler, 0, &s), 0);
		assert_int_equal(kvmm_seq_append(filler, s, tok, n, NULL), 0);
		assert_int_equal(kvmm_seal(filler, s, 0, 0), 0);
		assert_int_equal(kvmm_seq_free(filler, s), 0);
		kvmm_detach(filler);
	}

	c = attach_ns(ITEST_NS_A);
	/* an engine's request flow: look up, allocate what is missing, append, seal, free */
	for (unsigned int req = 0; req < 64; req++) {
		uint32_t ptok[64 * 16], pfr[64];
		uint64_t hit = 0, ps;
		uint32_t need;

		itest_tokens(ptok, 32 * 16, 99);
		itest_tokens(ptok + 32 * 16, 32 * 16, 1000 + req);
		assert_int_equal(kvmm_seq_create(c, 0, &ps), 0);
		assert_int_equal(kvmm_prefix_lookup(c, ps, ptok, 64 * 16, &hit), 0);
		need = (uint32_t)(64 - hit / 16);
		for (got = 0; got < need;) {
			int r = kvmm_mag_alloc(c, pfr + got, need - got);

			if (r <= 0)
				fail_msg("request %u: kvmm_mag_alloc: %d (%u of %u)", req, r, got,
					 need);
			got += (uint32_t)r;
		}
		assert_int_equal(kvmm_seq_append_frames(c, ps, ptok + hit,
							(uint32_t)(64 * 16 - hit), pfr, need, NULL),
				 0);
		assert_int_equal(kvmm_seal(c, ps, 0, 0), 0);
		assert_int_equal(kvmm_seq_free(c, ps), 0);
	}
	for (int round = 0; round < 4; round++) {
		for (got = 0; got < 32;) {
			int r = kvmm_mag_alloc(c, fr + got, 32 - got);

			assert_true(r > 0);
			got += (uint32_t)r;
		}
		assert_int_equal(kvmm_mag_free(c, fr, 32), 0);
	}
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom"), 0);
	kvmm_detach(c);
}

/*
 * The trigger of issue 25's -ENOMEM: an engine takes the frames of a whole step's requests
 * before it names any of them in an append, more than the magazine's size, in a namespace full
 * of cached pages.  Frames a client popped are its own (charged to the namespace, as pages it
 * appended would be), so they must not count against what the magazine may park: the refill
 * used to answer "0 frames" once the client held mag_size of them, and kvmm_mag_alloc said
 * -ENOMEM with thousands of reclaimable frames in the namespace.
 */
static void test_magazine_step_beyond_size(void **state)
{
	enum {
		REQS = 24,
		OWN = 32
	}; /* 24 x 32 = 768 frames, three magazines' worth */
	static uint32_t tok[ITEST_NS_B_FRAMES * 16], fr[REQS][OWN];
	static uint32_t ptok[REQS][OWN * 16];
	uint64_t seqs[REQS], s;
	kvmm_client_t *c, *filler;
	uint32_t size;

	(void)state;
	itest_need_daemon();
	/* the namespace full of cached pages sealed by another client that has gone */
	filler = attach_ns(ITEST_NS_B);
	itest_tokens(tok, ITEST_NS_B_FRAMES * 16, 77);
	assert_int_equal(kvmm_seq_create(filler, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(filler, s, tok, ITEST_NS_B_FRAMES * 16, NULL), 0);
	assert_int_equal(kvmm_seal(filler, s, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(filler, s), 0);
	kvmm_detach(filler);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesCached") >=
		    ITEST_NS_B_FRAMES);

	c = attach_ns(ITEST_NS_B);
	size = kvmm_mag_size(c);
	assert_true(REQS * OWN > 2 * size);
	for (int round = 0; round < 2; round++) {
		/* the whole step's frames first (the engine writes their KV), then the appends */
		for (unsigned int r = 0; r < REQS; r++) {
			for (uint32_t got = 0; got < OWN;) {
				int n = kvmm_mag_alloc(c, fr[r] + got, OWN - got);

				if (n <= 0)
					fail_msg("round %d request %u: kvmm_mag_alloc: %d after %u "
						 "frames of the step",
						 round, r, n, r * OWN + got);
				got += (uint32_t)n;
			}
		}
		for (unsigned int r = 0; r < REQS; r++) {
			itest_tokens(ptok[r], OWN * 16, 5000 + round * 100 + r);
			assert_int_equal(kvmm_seq_create(c, 0, &seqs[r]), 0);
			assert_int_equal(kvmm_seq_append_frames(c, seqs[r], ptok[r], OWN * 16,
								fr[r], OWN, NULL),
					 0);
			assert_int_equal(kvmm_seal(c, seqs[r], 0, 0), 0);
		}
		for (unsigned int r = 0; r < REQS; r++)
			assert_int_equal(kvmm_seq_free(c, seqs[r]), 0);
	}
	/* a step's worth taken and given back: the magazine keeps mag_size, the rest goes back */
	for (unsigned int r = 0; r < REQS; r++)
		for (uint32_t got = 0; got < OWN;) {
			int n = kvmm_mag_alloc(c, fr[r] + got, OWN - got);

			assert_true(n > 0);
			got += (uint32_t)n;
		}
	for (unsigned int r = 0; r < REQS; r++)
		assert_int_equal(kvmm_mag_free(c, fr[r], OWN), 0);
	assert_true(kvmm_mag_avail(c) <= size);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom"), 0);
	kvmm_detach(c);
	/* all of it went back at detach: nothing is left charged */
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesUsed"), 0);
}

/*
 * The compound ops: a request's start (SEQ_PROMPT: create, lookup, append the misses, block
 * table) and end (SEQ_SEAL_FREE) in one call each, on the rings and on the socket alike, one
 * completion per entry in a batch; all or nothing on failure.
 */
static void prompt_flow(kvmm_client_t *c, unsigned int salt)
{
	const uint32_t tpp = 16; /* itest_fmt */
	uint32_t tok[3 * 16 + 5], big[300 * 16];
	int32_t t1[8], t2[8], small[2];
	uint64_t s, hit = 7;

	itest_tokens(tok, 3 * 16 + 5, 4000 + salt);
	/* cold: nothing hits, 4 blocks (the last partial), the table from the same call */
	assert_int_equal(kvmm_seq_prompt(c, tok, 3 * 16 + 5, 0, &s, &hit, t1, 8), 0);
	assert_int_equal(hit, 0);
	for (int b = 0; b < 8; b++)
		assert_true(b < 4 ? t1[b] >= 0 : t1[b] == KVMM_BLOCK_NONE);
	assert_int_equal(kvmm_seq_seal_free(c, s, 0, 0), 0);
	/* the sequence is gone, its 3 full pages are cached: the same prompt hits them */
	assert_int_equal(kvmm_seq_free(c, s), -ENOENT);
	assert_int_equal(kvmm_seq_prompt(c, tok, 3 * 16 + 5, 0, &s, &hit, t2, 8), 0);
	assert_int_equal(hit, 3 * tpp);
	for (int b = 0; b < 3; b++)
		assert_int_equal(t2[b], t1[b]);
	assert_true(t2[3] >= 0 && t2[4] == KVMM_BLOCK_NONE);
	/* a seal that fails frees nothing */
	assert_int_equal(kvmm_seq_seal_free(c, s, 9, 1), -EINVAL);
	assert_int_equal(kvmm_seq_seal_free(c, s, 0, 0), 0);
	assert_int_equal(kvmm_seq_seal_free(c, s, 0, 0), -ENOENT);
	/* a row too short: -E2BIG, but the sequence exists (its first blocks are in the row) */
	assert_int_equal(kvmm_seq_prompt(c, tok, 3 * 16 + 5, 0, &s, NULL, small, 2), -E2BIG);
	assert_int_equal(small[0], t1[0]);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	/* more than the namespace could ever hold: nothing is left behind */
	itest_tokens(big, 300 * 16, 5000 + salt);
	assert_int_equal(kvmm_seq_prompt(c, big, 300 * 16, 0, &s, NULL, NULL, 0), -E2BIG);
	/* bad arguments */
	assert_int_equal(kvmm_seq_prompt(c, tok, KVMM_SEQ_PROMPT_MAX + 1, 0, &s, NULL, NULL, 0),
			 -E2BIG);
	assert_int_equal(kvmm_seq_prompt(c, NULL, 4, 0, &s, NULL, NULL, 0), -EINVAL);
	assert_int_equal(kvmm_seq_prompt(c, tok, 4, 0, NULL, NULL, NULL, 0), -EINVAL);
	assert_int_equal(kvmm_seq_prompt(c, tok, 4, 0, &s, NULL, t1, 0), -EINVAL);
	assert_int_equal(kvmm_seq_prompt(NULL, tok, 4, 0, &s, NULL, NULL, 0), -EINVAL);
	assert_int_equal(kvmm_seq_seal_free(NULL, 1, 0, 0), -EINVAL);
}

static void test_compound(void **state)
{
	uint32_t tok[4][2 * 16 + 1];
	struct kvmm_sqe sqe[4];
	struct kvmm_cqe cqe[4];
	kvmm_client_t *c, *cs;
	uint64_t seqs[4];

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_A);
	setenv("KVMM_NO_RINGS", "1", 1);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &cs), 0);
	unsetenv("KVMM_NO_RINGS");
	assert_int_equal(kvmm_has_rings(cs), 0);
	prompt_flow(c, 1);
	prompt_flow(cs, 2);

	/* a batch of starts, then a batch of ends: one completion each, with its own result */
	for (int round = 0; round < 2; round++) {
		for (unsigned int i = 0; i < 4; i++) {
			itest_tokens(tok[i], 2 * 16 + 1, 6000 + i);
			sqe[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_PROMPT,
						   .nr = 2 * 16 + 1,
						   .data = tok[i],
						   .arg = (uint64_t)(int64_t)-1,
						   .user_data = 10 + i};
		}
		run_batch(round ? cs : c, sqe, cqe, 4);
		for (unsigned int i = 0; i < 4; i++) {
			assert_int_equal(cqe[i].res, 0);
			assert_int_equal(cqe[i].user_data, 10 + i);
			assert_int_equal(cqe[i].nr_blocks, 3);
			/* the second round finds what the first sealed (the 4th was not sealed) */
			assert_int_equal(cqe[i].nr_tokens, round && i < 3 ? 2 * 16 : 0);
			seqs[i] = cqe[i].seq;
		}
		for (unsigned int i = 0; i < 4; i++)
			sqe[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_SEAL_FREE,
						   .seq = i == 3 ? 1u << 30 : seqs[i],
						   .user_data = 20 + i};
		run_batch(round ? cs : c, sqe, cqe, 4);
		for (unsigned int i = 0; i < 4; i++)
			assert_int_equal(cqe[i].res, i == 3 ? -ENOENT : 0);
		assert_int_equal(kvmm_seq_free(round ? cs : c, seqs[3]), 0);
	}
	kvmm_detach(cs);
	kvmm_detach(c);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesUsed"), 0);
}

/* A well-behaved client does some work while the others misbehave: it must be served. */
static void good_client_works(kvmm_client_t *g, unsigned int round)
{
	struct kvmm_sqe sqe[4];
	struct kvmm_cqe cqe[4];
	uint32_t tok[4];
	uint64_t s;

	assert_int_equal(kvmm_seq_create(g, 0, &s), 0);
	itest_tokens(tok, 4, round);
	for (unsigned int i = 0; i < 4; i++)
		sqe[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
					   .seq = s,
					   .nr = 1,
					   .data = &tok[i],
					   .user_data = i};
	run_batch(g, sqe, cqe, 4);
	assert_int_equal(cqe[3].nr_tokens, 4);
	assert_int_equal(kvmm_seq_free(g, s), 0);
}

/* A ring call of @g: wakes the thread polling its namespace's rings, which polls them all. */
static void wake_rings(kvmm_client_t *g)
{
	uint64_t s;

	assert_int_equal(kvmm_seq_create(g, 0, &s), 0);
	assert_int_equal(kvmm_seq_free(g, s), 0);
}

static void test_hostile(void **state)
{
	kvmm_client_t *good, *bad_idx, *garbage, *noreap;
	struct kvmm_shm_hdr h;
	struct kvmm_shm_ring *sq, *cq;
	struct kvmm_ring_sqe *sqes;
	uint64_t s;
	int err = 0;

	(void)state;
	itest_need_daemon();
	good = attach_ns(ITEST_NS_A);
	bad_idx = attach_ns(ITEST_NS_A);
	garbage = attach_ns(ITEST_NS_A);
	noreap = attach_ns(ITEST_NS_A);
	good_client_works(good, 1);

	/* 1. an SQ tail far past its head: the daemon closes that client */
	memcpy(&h, bad_idx->shm, sizeof(h));
	sq = (struct kvmm_shm_ring *)((char *)bad_idx->shm + h.sq_off);
	smp_store_release(&sq->tail, READ_ONCE(sq->head) + 100000u);
	/*
	 * No doorbell of its own (a synchronous ring call would publish our own, sane, tail
	 * over the bad one before the daemon looks): the good client's ring calls wake the
	 * thread polling this namespace's rings, which looks at every ring it serves; a
	 * request on the socket (SEQ_BLOCKS, the mirror's fallback) tells when we are cut off.
	 */
	for (int i = 0; i < 100; i++) {
		int32_t row;

		wake_rings(good);
		s = 1u << 30; /* no such sequence: -ENOENT until the daemon closes us */
		err = kvmm_block_table_socket(bad_idx, &s, 1, &row, 1);
		if (err != -ENOENT)
			break;
		itest_sleep_ms(10);
	}
	assert_true(err == -ENOTCONN || err == -EPIPE || err == -ECONNRESET);
	good_client_works(good, 2);

	/* 2. garbage SQEs: each fails on its own, then the client is cut off as a bad peer */
	memcpy(&h, garbage->shm, sizeof(h));
	sq = (struct kvmm_shm_ring *)((char *)garbage->shm + h.sq_off);
	sqes = (struct kvmm_ring_sqe *)((char *)garbage->shm + h.sqes_off);
	for (uint32_t i = 0; i < 32; i++) {
		sqes[i].op = (uint16_t)(0x7000 + i);
		sqes[i].len = 0xffffffffu - i;
		sqes[i].data_off = 0xfffffff0u;
		sqes[i].flags = (uint16_t)i;
		sqes[i].user_data = i;
	}
	smp_store_release(&sq->tail, READ_ONCE(sq->head) + 32);
	/* woken by the good client's ring, as in 1. (a ring call would write over these) */
	for (int i = 0; i < 100; i++) {
		int32_t row;

		wake_rings(good);
		s = 1u << 30;
		err = kvmm_block_table_socket(garbage, &s, 1, &row, 1);
		if (err != -ENOENT)
			break;
		itest_sleep_ms(10);
	}
	assert_true(err == -ENOTCONN || err == -EPIPE || err == -ECONNRESET);
	good_client_works(good, 3);

	/* 3. a client that never reaps: its SQ stays full of NOPs, the daemon just stops there */
	memcpy(&h, noreap->shm, sizeof(h));
	sq = (struct kvmm_shm_ring *)((char *)noreap->shm + h.sq_off);
	cq = (struct kvmm_shm_ring *)((char *)noreap->shm + h.cq_off);
	sqes = (struct kvmm_ring_sqe *)((char *)noreap->shm + h.sqes_off);
	for (uint32_t i = 0; i < h.ring_entries; i++)
		sqes[i] = (struct kvmm_ring_sqe){.op = KVMM_OP_PING, .user_data = i};
	for (int round = 0; round < 4; round++) {
		/* refill what the daemon consumed; it can take at most one CQ's worth */
		smp_store_release(&sq->tail, READ_ONCE(sq->head) + h.ring_entries);
		good_client_works(good, 10 + (unsigned int)round);
		itest_sleep_ms(5);
	}
	assert_int_equal(READ_ONCE(cq->tail) - READ_ONCE(cq->head), h.ring_entries);
	assert_true(itest_daemon_alive(&itest_d));
	/* it is still a client: once it reaps, it is served again */
	smp_store_release(&cq->head, READ_ONCE(cq->tail));
	good_client_works(good, 20);

	kvmm_detach(noreap);
	kvmm_detach(garbage);
	kvmm_detach(bad_idx);
	kvmm_detach(good);
}

/*
 * The out area (KVMM_FEAT_RING_OUT): an SQE with KVMM_SQE_F_OUT has its whole reply written
 * there as well as into its CQE; SEQ_PIN_FAR, whose reply is longer than a CQE, rides the
 * rings only that way; an SQE flag this version does not know is refused.
 */
static void test_out_area(void **state)
{
	kvmm_client_t *c, *raw, *good;
	struct kvmm_seq_create_req cr = {0};
	struct kvmm_seq_create_rep crep;
	struct kvmm_pin_far_req pr = {0};
	struct kvmm_pin_far_rep prep;
	struct kvmm_iov part;
	struct kvmm_shm_hdr h;
	struct kvmm_shm_ring *sq, *cq;
	struct kvmm_ring_sqe *sqes;
	struct kvmm_ring_cqe *cqes, cqe;
	uint8_t out[KVMM_MSG_PAYLOAD_MAX];
	uint32_t t[64], tail;
	int32_t e[2];
	size_t len = 0;
	uint64_t s;
	int i;

	(void)state;
	itest_need_daemon();
	c = attach_ns(ITEST_NS_A);
	assert_true(c->features & KVMM_FEAT_RING_OUT);
	memcpy(&h, c->shm, sizeof(h));
	assert_int_equal(h.out_size, KVMM_RING_OUT_SIZE);
	assert_true(h.out_off >= h.ret_frames_off && h.out_off + h.out_size <= c->shm_len);

	/* an ordinary ring op with its reply in the out area: the same bytes as its CQE's */
	part = (struct kvmm_iov){&cr, sizeof(cr)};
	assert_int_equal(
		kvmm_ring_call_out(c, KVMM_OP_SEQ_CREATE, &part, 1, out, sizeof(out), &len), 0);
	assert_int_equal(len, sizeof(crep));
	memcpy(&crep, out, sizeof(crep));
	s = crep.seq;
	assert_true(s != 0);
	itest_tokens(t, 2 * kvmm_tokens_per_page(c), 3);
	assert_int_equal(kvmm_seq_append(c, s, t, 2 * kvmm_tokens_per_page(c), NULL), 0);

	/* SEQ_PIN_FAR: not on the rings without the out area, with it the whole reply */
	pr.seq = s;
	pr.nr_blocks = 2;
	part = (struct kvmm_iov){&pr, sizeof(pr)};
	assert_int_equal(kvmm_ring_call(c, KVMM_OP_SEQ_PIN_FAR, &part, 1, NULL, 0), -EOPNOTSUPP);
	assert_int_equal(
		kvmm_ring_call_out(c, KVMM_OP_SEQ_PIN_FAR, &part, 1, out, sizeof(out), &len), 0);
	assert_int_equal(len, sizeof(prep) + sizeof(e));
	memcpy(&prep, out, sizeof(prep));
	memcpy(e, out + sizeof(prep), sizeof(e));
	assert_int_equal(prep.count, 2);
	assert_int_equal(prep.nr_far, 0); /* no window mapped: every entry is a frame */
	for (i = 0; i < 2; i++)
		assert_true(e[i] >= 0 && (uint32_t)e[i] < kvmm_nr_frames(c));
	assert_int_equal(kvmm_unpin_range(c, s, 0, 2, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);

	/* an SQE flag we do not know: -EBADMSG in its CQE, the daemon goes on */
	good = attach_ns(ITEST_NS_A);
	raw = attach_ns(ITEST_NS_A);
	memcpy(&h, raw->shm, sizeof(h));
	sq = (struct kvmm_shm_ring *)((char *)raw->shm + h.sq_off);
	cq = (struct kvmm_shm_ring *)((char *)raw->shm + h.cq_off);
	sqes = (struct kvmm_ring_sqe *)((char *)raw->shm + h.sqes_off);
	cqes = (struct kvmm_ring_cqe *)((char *)raw->shm + h.cqes_off);
	tail = READ_ONCE(sq->tail);
	sqes[tail & (h.ring_entries - 1)] =
		(struct kvmm_ring_sqe){.op = KVMM_OP_PING, .flags = 1u << 1, .user_data = 77};
	smp_store_release(&sq->tail, tail + 1);
	for (i = 0; i < 200 && smp_load_acquire(&cq->tail) == READ_ONCE(cq->head); i++) {
		wake_rings(good); /* the worker polls every ring of the namespace */
		itest_sleep_ms(5);
	}
	assert_int_not_equal(smp_load_acquire(&cq->tail), READ_ONCE(cq->head));
	cqe = cqes[READ_ONCE(cq->head) & (h.ring_entries - 1)];
	assert_int_equal(cqe.user_data, 77);
	assert_int_equal(cqe.res, -EBADMSG);
	good_client_works(good, 30);
	kvmm_detach(raw);
	kvmm_detach(good);
	kvmm_detach(c);
}

/* A client's SQ in its region (the load and cpu hints are there). */
static struct kvmm_shm_ring *client_sq(kvmm_client_t *c)
{
	struct kvmm_shm_hdr h;

	memcpy(&h, c->shm, sizeof(h));
	return (struct kvmm_shm_ring *)((char *)c->shm + h.sq_off);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CROWD_CLIENTS 6
#define CROWD_CALLS 3000

/*
 * More synchronous clients than CPUs: the daemon's load hint says crowded, their waits yield
 * instead of spinning and then sleep (runtime/ring.c, KVMM_RING_CROWD_NS).  Every call of every
 * client completes with its own answer; the exit status says what went wrong, and whether the
 * client saw the hint (bit 7).
 */
static int crowd_child(void)
{
	kvmm_client_t *c = NULL;
	struct kvmm_shm_ring *sq;
	bool crowded = false;
	cpu_set_t set;
	uint32_t cpus;

	if (kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c) || !kvmm_has_rings(c))
		return 1;
	cpus = sched_getaffinity(0, sizeof(set), &set) ? 1 : (uint32_t)CPU_COUNT(&set);
	sq = client_sq(c);
	for (int i = 0; i < CROWD_CALLS; i++) {
		uint64_t s = 0, t = 0;

		if (kvmm_seq_create(c, 0, &s) || !s || kvmm_seq_create(c, 0, &t) || t == s)
			return 2;
		if (kvmm_seq_free(c, s) || kvmm_seq_free(c, t) || kvmm_seq_free(c, s) != -ENOENT)
			return 3;
		crowded |= READ_ONCE(sq->load) > cpus;
	}
	kvmm_detach(c);
	return crowded ? 0x80 : 0;
}

static void test_crowd(void **state)
{
	pid_t pid[CROWD_CLIENTS];
	int seen = 0;

	(void)state;
	itest_need_daemon();
	for (int i = 0; i < CROWD_CLIENTS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			_exit(crowd_child());
	}
	for (int i = 0; i < CROWD_CLIENTS; i++) {
		int st = 0;

		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st) & 0x7f, 0);
		seen += !!(WEXITSTATUS(st) & 0x80);
	}
	print_message("crowd: %d of %d clients saw the load hint above their CPUs\n", seen,
		      CROWD_CLIENTS);
	assert_true(itest_daemon_alive(&itest_d));
}

/*
 * Two synchronous clients taking turns, never in flight together, so that no poll round of
 * the daemon serves both: the load hint still counts them both (the clients served over
 * KVMM_LOAD_WINDOW_NS, plus the daemon's thread), which a count per round did not.  Then
 * one of them alone: the hint comes back down to one client.
 */
static void test_load_window(void **state)
{
	kvmm_client_t *a = NULL, *b = NULL;
	struct kvmm_shm_ring *sqa, *sqb;
	uint32_t most = 0, least = UINT32_MAX;
	uint64_t t0;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &b), 0);
	if (!kvmm_has_rings(a) || !kvmm_has_rings(b)) {
		kvmm_detach(b);
		kvmm_detach(a);
		skip();
	}
	sqa = client_sq(a);
	sqb = client_sq(b);
	/* one client alone first (earlier tests' clients may have left the hint high) */
	t0 = mono_ns();
	do {
		uint64_t s = 0;

		assert_int_equal(kvmm_seq_create(a, 0, &s), 0);
		assert_int_equal(kvmm_seq_free(a, s), 0);
		least = min_t(uint32_t, least, READ_ONCE(sqa->load));
	} while (mono_ns() - t0 < 50000000ull);
	print_message("load window: one client alone read %u\n", least);
	assert_int_equal(least, 2);
	t0 = mono_ns();
	do {
		uint64_t s = 0;

		assert_int_equal(kvmm_seq_create(a, 0, &s), 0);
		assert_int_equal(kvmm_seq_free(a, s), 0);
		assert_int_equal(kvmm_seq_create(b, 0, &s), 0);
		assert_int_equal(kvmm_seq_free(b, s), 0);
		most = max_t(uint32_t, most,
			     min_t(uint32_t, READ_ONCE(sqa->load), READ_ONCE(sqb->load)));
	} while (mono_ns() - t0 < 50000000ull);
	print_message("load window: then two taking turns read %u\n", most);
	assert_int_equal(most, 3);
	kvmm_detach(b);
	kvmm_detach(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_batches),
		cmocka_unit_test(test_mirror),
		cmocka_unit_test(test_magazine),
		cmocka_unit_test(test_magazine_append),
		cmocka_unit_test(test_magazine_topup),
		cmocka_unit_test(test_magazine_reclaim),
		cmocka_unit_test(test_magazine_reclaims_cache),
		cmocka_unit_test(test_magazine_step_beyond_size),
		cmocka_unit_test(test_compound),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_out_area),
		cmocka_unit_test(test_crowd),
		cmocka_unit_test(test_load_window),
	};
	int ret;

	ret = cmocka_run_group_tests_name("itest_ring", tests, itest_group_setup,
					  itest_group_teardown);
	return ret == 0 && itest_no_daemon ? 77 : ret;
}
