// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-step-bench.c - the C side of tools/bench_python.py: one engine step's batch
 * calls (pin, block table, unpin) for nr_seqs sequences, timed from C against the same daemon
 * the Python side uses, so the script can print Python's cost as a ratio of C's in one run.
 *
 *   kvmm-step-bench SOCKET NS NR_SEQS BLOCKS STEPS REPEATS
 *
 * Attaches with the script's format (2 layers, 2 KV heads of 64, fp16), makes NR_SEQS
 * sequences of BLOCKS full pages, then runs REPEATS times STEPS steps and prints one line
 * "c_step_ns N" per repeat (the mean of that repeat), and "c_ok" at the end. Exit 1 on any
 * failed call, with its message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/kvmm.h"

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

int main(int argc, char **argv)
{
	struct kvmm_format fmt = {
		.layers = 2, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};
	uint32_t nr, blocks, steps, repeats, tpp, *tokens;
	uint64_t *seqs;
	int32_t *table;
	kvmm_client_t *c;
	int err;

	if (argc != 7) {
		fprintf(stderr, "usage: kvmm-step-bench SOCKET NS NR_SEQS BLOCKS STEPS REPEATS\n");
		return 2;
	}
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
	printf("c_ok\n");
	err = 0;
out:
	free(tokens);
	free(table);
	free(seqs);
	kvmm_detach(c);
	return err ? 1 : 0;
}
