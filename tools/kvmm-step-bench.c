// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-step-bench.c - the C side of tools/bench_python.py: one engine step's batch
 * calls (pin, block table, unpin) for nr_seqs sequences, timed from C against the same daemon
 * the Python side uses, so the script can print Python's cost as a ratio of C's in one run.
 *
 *   kvmm-step-bench SOCKET NS NR_SEQS BLOCKS STEPS REPEATS [DECODE_STEPS]
 *
 * Attaches with the script's format (2 layers, 2 KV heads of 64, fp16), makes NR_SEQS
 * sequences of BLOCKS full pages, then runs REPEATS times STEPS steps and prints one line
 * "c_step_ns N" per repeat (the mean of that repeat). With DECODE_STEPS, it then runs
 * REPEATS times DECODE_STEPS calls of kvmm_cpu_paged_decode over layer 0 of those sequences
 * (4 query heads, every token of every page) and prints "c_decode_ns N" per repeat. "c_ok"
 * at the end. Exit 1 on any failed call, with its message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"
#include "runtime/kvmm.h"

#define Q_HEADS 4

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "kvmm-step-bench: %s: %s\n", what, kvmm_strerror(err));
	return 1;
}

/* kvmm_cpu_paged_decode over layer 0 of the batch whose block table is table. */
static int decode(kvmm_client_t *c, uint32_t nr, uint32_t blocks, const int32_t *table,
		  uint32_t repeats, uint32_t steps)
{
	struct kvmm_format format = {
		.layers = 2, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};
	struct kvmm_attn_batch b = {0};
	struct kvmm_fmt f;
	size_t nq = (size_t)nr * Q_HEADS * 64;
	uint32_t *ctx = calloc(nr, sizeof(*ctx));
	float *q = calloc(nq, sizeof(*q)), *o = calloc(nq, sizeof(*o));
	int err = -ENOMEM;

	if (!ctx || !q || !o)
		goto out;
	err = kvmm_fmt_init(&f, &format, kvmm_page_size(c));
	if (err)
		goto out;
	for (uint32_t i = 0; i < nr; i++)
		ctx[i] = blocks * f.tokens_per_page;
	for (size_t i = 0; i < nq; i++)
		q[i] = (float)(i % 7) * 0.125f;
	b.kv.base = kvmm_frame_addr(c, 0);
	b.kv.fmt = &f;
	b.kv.nr_frames = kvmm_nr_frames(c);
	b.nr_seqs = nr;
	b.num_q_heads = Q_HEADS;
	b.block_tables = table;
	b.max_blocks = blocks;
	b.ctx_lens = ctx;
	for (uint32_t r = 0; r < repeats; r++) {
		uint64_t t0 = now_ns();

		for (uint32_t s = 0; s < steps; s++) {
			err = kvmm_cpu_paged_decode(&b, q, o);
			if (err)
				goto out;
		}
		printf("c_decode_ns %llu\n", (unsigned long long)((now_ns() - t0) / steps));
	}
out:
	if (err)
		fail("kvmm_cpu_paged_decode", err);
	free(ctx);
	free(q);
	free(o);
	return err;
}

int main(int argc, char **argv)
{
	struct kvmm_format fmt = {
		.layers = 2, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};
	uint32_t nr, blocks, steps, repeats, decode_steps = 0, tpp, *tokens;
	uint64_t *seqs;
	int32_t *table;
	kvmm_client_t *c;
	int err;

	if (argc != 7 && argc != 8) {
		fprintf(stderr, "usage: kvmm-step-bench SOCKET NS NR_SEQS BLOCKS STEPS REPEATS "
				"[DECODE_STEPS]\n");
		return 2;
	}
	if (argc == 8)
		decode_steps = (uint32_t)strtoul(argv[7], NULL, 0);
	nr = (uint32_t)strtoul(argv[3], NULL, 0);
	blocks = (uint32_t)strtoul(argv[4], NULL, 0);
	steps = (uint32_t)strtoul(argv[5], NULL, 0);
	repeats = (uint32_t)strtoul(argv[6], NULL, 0);
	if (!nr || !blocks || !steps || !repeats || nr > 4096 || blocks > 4096) {
		fprintf(stderr, "kvmm-step-bench: bad sizes\n");
		return 2;
	}
	err = kvmm_attach(argv[1], argv[2], &fmt, &c);
	if (err)
		return fail("kvmm_attach", err);
	tpp = kvmm_tokens_per_page(c);
	seqs = calloc(nr, sizeof(*seqs));
	table = calloc((size_t)nr * blocks, sizeof(*table));
	tokens = calloc((size_t)tpp * blocks, sizeof(*tokens));
	if (!seqs || !table || !tokens) {
		err = fail("calloc", -12);
		goto out;
	}
	for (uint32_t i = 0; i < nr; i++) {
		err = kvmm_seq_create(c, 0, &seqs[i]);
		if (!err)
			err = kvmm_seq_append(c, seqs[i], tokens, tpp * blocks, NULL);
		if (err) {
			err = fail("kvmm_seq_create/append", err);
			goto out;
		}
	}
	for (uint32_t r = 0; r < repeats; r++) {
		uint64_t t0 = now_ns();

		for (uint32_t s = 0; s < steps; s++) {
			err = kvmm_pin(c, seqs, nr, NULL);
			if (!err)
				err = kvmm_block_table(c, seqs, nr, table, blocks);
			if (!err)
				err = kvmm_unpin(c, seqs, nr, NULL);
			if (err) {
				err = fail("step", err);
				goto out;
			}
		}
		printf("c_step_ns %llu\n", (unsigned long long)((now_ns() - t0) / steps));
	}
	if (decode_steps) {
		err = decode(c, nr, blocks, table, repeats, decode_steps);
		if (err)
			goto out;
	}
	printf("c_ok\n");
	err = 0;
out:
	free(tokens);
	free(table);
	free(seqs);
	kvmm_detach(c);
	return err ? 1 : 0;
}
