// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_async.c - asynchronous batched submission against the real
 * daemon: a 64-sequence engine step (create, then append one token to each, then block
 * tables, then free) submitted as bursts and reaped with kvmm_complete; completions matched
 * to their entries by user_data whatever order they come in; synchronous calls made while a
 * burst is in flight (their replies and the burst's must not be mixed up); entries that
 * cannot be sent completing at once with their error; range pins in a batch.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

#define STEP 64

/* Reap exactly n completions into cqe[user_data - base]. */
static void reap(kvmm_client_t *c, struct kvmm_cqe *by_id, unsigned int n, uint64_t base)
{
	struct kvmm_cqe cqes[STEP];
	unsigned int got = 0;
	bool seen[STEP] = {false};

	while (got < n) {
		int r = kvmm_complete(c, cqes, STEP, 1);

		assert_true(r > 0);
		for (int i = 0; i < r; i++) {
			uint64_t id = cqes[i].user_data - base;

			assert_false(cqes[i].flags & KVMM_CQE_F_EVENT);
			assert_true(id < n);
			assert_false(seen[id]);
			seen[id] = true;
			by_id[id] = cqes[i];
		}
		got += (unsigned int)r;
	}
}

static void test_step(void **state)
{
	struct kvmm_sqe sqes[STEP];
	struct kvmm_cqe cqes[STEP];
	uint64_t seqs[STEP], extra;
	uint32_t tokens[STEP];
	int32_t table[STEP * 4];
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	itest_tokens(tokens, STEP, 5);

	/* create 64 sequences in one burst */
	for (unsigned int i = 0; i < STEP; i++)
		sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_CREATE, .user_data = 1000 + i};
	assert_int_equal(kvmm_submit(c, sqes, STEP), STEP);
	assert_int_equal(kvmm_inflight(c), STEP);
	reap(c, cqes, STEP, 1000);
	assert_int_equal(kvmm_inflight(c), 0);
	for (unsigned int i = 0; i < STEP; i++) {
		assert_int_equal(cqes[i].res, 0);
		assert_true(cqes[i].seq != 0);
		seqs[i] = cqes[i].seq;
		for (unsigned int j = 0; j < i; j++)
			assert_true(seqs[j] != seqs[i]);
	}

	/* a decode step: one token each, with a synchronous call in the middle of the burst */
	for (unsigned int r = 1; r <= 3; r++) {
		for (unsigned int i = 0; i < STEP; i++)
			sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
						    .seq = seqs[i],
						    .nr = 1,
						    .data = &tokens[i],
						    .user_data = 2000 + i};
		assert_int_equal(kvmm_submit(c, sqes, STEP), STEP);
		assert_int_equal(kvmm_seq_create(c, 0, &extra), 0);
		assert_int_equal(kvmm_seq_free(c, extra), 0);
		reap(c, cqes, STEP, 2000);
		for (unsigned int i = 0; i < STEP; i++) {
			assert_int_equal(cqes[i].res, 0);
			assert_int_equal(cqes[i].nr_tokens, r);
		}
	}
	/* the block table of the whole batch: one block each */
	assert_int_equal(kvmm_block_table(c, seqs, STEP, table, 4), 0);
	for (unsigned int i = 0; i < STEP; i++) {
		assert_true(table[i * 4] >= 0);
		assert_int_equal(table[i * 4 + 1], KVMM_BLOCK_NONE);
		for (unsigned int j = 0; j < i; j++)
			assert_true(table[j * 4] != table[i * 4]);
	}

	/* pin the batch, a NOP, an entry that cannot be encoded, an unknown sequence */
	sqes[0] = (struct kvmm_sqe){.op = KVMM_SQE_PIN, .nr = STEP, .data = seqs, .user_data = 1};
	sqes[1] = (struct kvmm_sqe){.op = KVMM_SQE_NOP, .user_data = 2};
	sqes[2] = (struct kvmm_sqe){.op = 999, .user_data = 3};
	sqes[3] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_FREE, .seq = ~0ULL, .user_data = 4};
	sqes[4] = (struct kvmm_sqe){.op = KVMM_SQE_UNPIN, .nr = STEP, .data = seqs, .user_data = 5};
	assert_int_equal(kvmm_submit(c, sqes, 5), 5);
	reap(c, cqes, 5, 1);
	assert_int_equal(cqes[0].res, 0);
	assert_int_equal(cqes[0].nr_frames, STEP);
	assert_int_equal(cqes[1].res, 0);
	assert_int_equal(cqes[2].res, -EINVAL);
	assert_int_equal(cqes[3].res, -ENOENT);
	assert_int_equal(cqes[4].res, 0);

	/* nothing in flight: complete returns at once with nothing */
	assert_int_equal(kvmm_complete(c, cqes, STEP, 1), 0);

	for (unsigned int i = 0; i < STEP; i++)
		sqes[i] = (struct kvmm_sqe){
			.op = KVMM_SQE_SEQ_FREE, .seq = seqs[i], .user_data = 3000 + i};
	assert_int_equal(kvmm_submit(c, sqes, STEP), STEP);
	reap(c, cqes, STEP, 3000);
	for (unsigned int i = 0; i < STEP; i++)
		assert_int_equal(cqes[i].res, 0);
	kvmm_detach(c);
}

/*
 * Range pins in a batch (KVMM_SQE_PIN_RANGE, KVMM_SQE_UNPIN_RANGE): a chunked attention step
 * ends one chunk's pin and starts the next one's in one submission; entries run in order.
 */
static void test_range(void **state)
{
	struct kvmm_sqe sqes[5];
	struct kvmm_cqe cqes[5];
	uint32_t tokens[STEP * 4], tpp, nr = 0;
	uint64_t seq, len = 0;
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	tpp = kvmm_tokens_per_page(c);
	assert_true(tpp >= 1 && 4 * tpp <= STEP * 4);
	itest_tokens(tokens, 4 * tpp, 9);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, 4 * tpp, &len), 0);
	assert_int_equal(len, 4 * tpp);

	/* an unpin of a range never pinned, a pin, a range past the end, an empty range */
	sqes[0] = (struct kvmm_sqe){
		.op = KVMM_SQE_UNPIN_RANGE, .seq = seq, .arg = 0, .nr = 2, .user_data = 1};
	sqes[1] = (struct kvmm_sqe){
		.op = KVMM_SQE_PIN_RANGE, .seq = seq, .arg = 0, .nr = 2, .user_data = 2};
	sqes[2] = (struct kvmm_sqe){
		.op = KVMM_SQE_PIN_RANGE, .seq = seq, .arg = 3, .nr = 2, .user_data = 3};
	sqes[3] = (struct kvmm_sqe){
		.op = KVMM_SQE_PIN_RANGE, .seq = seq, .arg = 0, .nr = 0, .user_data = 4};
	sqes[4] = (struct kvmm_sqe){
		.op = KVMM_SQE_PIN_RANGE, .seq = seq, .arg = 1ULL << 40, .nr = 1, .user_data = 5};
	assert_int_equal(kvmm_submit(c, sqes, 5), 5);
	reap(c, cqes, 5, 1);
	assert_int_equal(cqes[0].res, -EINVAL);
	assert_int_equal(cqes[1].res, 0);
	assert_int_equal(cqes[1].nr_frames, 2);
	assert_int_equal(cqes[2].res, -EINVAL);
	assert_int_equal(cqes[3].res, -EINVAL);
	assert_int_equal(cqes[4].res, -EINVAL);

	/* the next chunk: end the first pin and take the second in one batch */
	sqes[0] = (struct kvmm_sqe){
		.op = KVMM_SQE_UNPIN_RANGE, .seq = seq, .arg = 0, .nr = 2, .user_data = 1};
	sqes[1] = (struct kvmm_sqe){
		.op = KVMM_SQE_PIN_RANGE, .seq = seq, .arg = 2, .nr = 2, .user_data = 2};
	assert_int_equal(kvmm_submit(c, sqes, 2), 2);
	reap(c, cqes, 2, 1);
	assert_int_equal(cqes[0].res, 0);
	assert_int_equal(cqes[0].nr_frames, 2);
	assert_int_equal(cqes[1].res, 0);
	assert_int_equal(cqes[1].nr_frames, 2);
	/* the batch's unpin ended the first pin, its pin holds the second */
	assert_int_equal(kvmm_unpin_range(c, seq, 0, 2, &nr), -EINVAL);
	assert_int_equal(kvmm_unpin_range(c, seq, 2, 2, &nr), 0);
	assert_int_equal(nr, 2);
	assert_int_equal(kvmm_unpin_range(c, seq, 2, 2, &nr), -EINVAL);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

/* Submitted work left unreaped at detach is not a leak (the daemon frees the sequences). */
static void test_detach_inflight(void **state)
{
	struct kvmm_sqe sqes[STEP];
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	for (unsigned int i = 0; i < STEP; i++)
		sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_CREATE, .user_data = i};
	assert_int_equal(kvmm_submit(c, sqes, STEP), STEP);
	kvmm_detach(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_detach_inflight),
	};
	int ret = cmocka_run_group_tests_name("itest_async", tests, itest_group_setup,
					      itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
