// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_share.c - prefix sharing between processes, and the wall between
 * namespaces, with the real kvmmd and libkvmm. Four client processes of one namespace: the
 * first appends a prompt, writes its KV bytes through kvmm_frame_addr and seals; three
 * forked processes, each attaching on its own, look the prompt up and must get the same frame
 * numbers and see the first one's bytes through their own mappings. A client of another
 * namespace gets no hit, and its pool is other memory: what it writes at a frame number is
 * not what the first namespace sees at that number, and the reverse.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

#define PROMPT_PAGES 4
#define PROMPT_EXTRA 5 /* tokens past the last full page: never shared */
#define MAX_BLOCKS 16

/* The byte client 1 writes at offset off of block b of the prompt. */
static unsigned char pattern(unsigned int b, size_t off)
{
	return (unsigned char)(0x5a ^ (b * 37) ^ (off * 13) ^ (off >> 8));
}

/*
 * A forked client: attach on its own, look the prompt up, compare frames and bytes. Returns
 * an exit code: 0 ok, else the step that failed (and a line on stderr).
 */
static int sharer(unsigned int id, const uint32_t *tokens, uint32_t n, const int32_t *frames)
{
	kvmm_client_t *c;
	uint64_t seq, hit = 0, len = 0;
	int32_t table[MAX_BLOCKS];
	uint32_t tpp;
	int err;

	err = kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c);
	if (err) {
		fprintf(stderr, "sharer %u: attach: %s\n", id, kvmm_strerror(err));
		return 10;
	}
	tpp = kvmm_tokens_per_page(c);
	err = kvmm_seq_create(c, 0, &seq);
	if (!err)
		err = kvmm_prefix_lookup(c, seq, tokens, n, &hit);
	if (err || hit != (uint64_t)PROMPT_PAGES * tpp) {
		fprintf(stderr, "sharer %u: lookup: %s, hit %llu\n", id, kvmm_strerror(err),
			(unsigned long long)hit);
		return 11;
	}
	err = kvmm_seq_append(c, seq, tokens + hit, n - (uint32_t)hit, &len);
	if (err || len != n) {
		fprintf(stderr, "sharer %u: append: %s, len %llu\n", id, kvmm_strerror(err),
			(unsigned long long)len);
		return 12;
	}
	err = kvmm_block_table(c, &seq, 1, table, MAX_BLOCKS);
	if (err) {
		fprintf(stderr, "sharer %u: block table: %s\n", id, kvmm_strerror(err));
		return 13;
	}
	for (unsigned int b = 0; b < PROMPT_PAGES; b++) {
		const unsigned char *p = kvmm_frame_addr(c, (uint32_t)table[b]);

		if (table[b] != frames[b]) {
			fprintf(stderr, "sharer %u: block %u frame %d, want %d\n", id, b, table[b],
				frames[b]);
			return 14;
		}
		for (size_t off = 0; off < kvmm_page_size(c); off++)
			if (!p || p[off] != pattern(b, off)) {
				fprintf(stderr, "sharer %u: block %u byte %zu differs\n", id, b,
					off);
				return 15;
			}
	}
	/* the partial last page is this client's own */
	if (table[PROMPT_PAGES] == KVMM_BLOCK_NONE || table[PROMPT_PAGES] == frames[PROMPT_PAGES]) {
		fprintf(stderr, "sharer %u: tail block frame %d (first client's %d)\n", id,
			table[PROMPT_PAGES], frames[PROMPT_PAGES]);
		return 16;
	}
	memset(kvmm_frame_addr(c, (uint32_t)table[PROMPT_PAGES]), 0xa0 + (int)id, 64);
	err = kvmm_seq_free(c, seq);
	if (err) {
		fprintf(stderr, "sharer %u: free: %s\n", id, kvmm_strerror(err));
		return 17;
	}
	kvmm_detach(c);
	return 0;
}

/* (a) four processes of one namespace share a prefix: same frames, same bytes */
static void test_share_prefix(void **state)
{
	uint32_t n = 0, tokens[PROMPT_PAGES * 64 + PROMPT_EXTRA];
	int32_t frames[MAX_BLOCKS];
	kvmm_client_t *c;
	uint64_t seq, len, hit;
	uint32_t tpp;
	pid_t pids[3];

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	tpp = kvmm_tokens_per_page(c);
	assert_int_equal(kvmm_page_size(c), ITEST_PAGE_SIZE);
	assert_true(tpp >= 1 && tpp <= 64);
	assert_int_equal(tpp, ITEST_PAGE_SIZE / kvmm_bytes_per_token(c));
	n = PROMPT_PAGES * tpp + PROMPT_EXTRA;
	itest_tokens(tokens, n, 1);

	/* nothing is cached yet */
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_prefix_lookup(c, seq, tokens, n, &hit), 0);
	assert_int_equal(hit, 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, n, &len), 0);
	assert_int_equal(len, n);
	assert_int_equal(kvmm_block_table(c, &seq, 1, frames, MAX_BLOCKS), 0);
	for (unsigned int b = 0; b <= PROMPT_PAGES; b++) {
		unsigned char *p = kvmm_frame_addr(c, (uint32_t)frames[b]);

		assert_true(frames[b] >= 0 && (uint32_t)frames[b] < kvmm_nr_frames(c));
		assert_non_null(p);
		for (size_t off = 0; off < kvmm_page_size(c); off++)
			p[off] = pattern(b, off);
	}
	assert_int_equal(frames[PROMPT_PAGES + 1], KVMM_BLOCK_NONE);
	assert_null(kvmm_frame_addr(c, kvmm_nr_frames(c)));
	assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);

	for (unsigned int i = 0; i < 3; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			_exit(sharer(i + 2, tokens, n, frames));
	}
	for (unsigned int i = 0; i < 3; i++) {
		int status;

		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	/* the sharers wrote only their own tail pages: client 1's pages are as it left them */
	for (unsigned int b = 0; b <= PROMPT_PAGES; b++) {
		const unsigned char *p = kvmm_frame_addr(c, (uint32_t)frames[b]);

		for (size_t off = 0; off < kvmm_page_size(c); off++)
			if (p[off] != pattern(b, off))
				fail_msg("block %u byte %zu changed", b, off);
	}
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

/* (b) another namespace: no hit, and its frames are other memory */
static void test_namespace_wall(void **state)
{
	uint32_t n, tokens[PROMPT_PAGES * 64 + PROMPT_EXTRA];
	int32_t fa[MAX_BLOCKS], fb[MAX_BLOCKS];
	kvmm_client_t *a, *b;
	uint64_t sa, sb, hit = 1;
	unsigned char *pa, *pb;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	n = PROMPT_PAGES * kvmm_tokens_per_page(a) + PROMPT_EXTRA;
	itest_tokens(tokens, n, 2);

	/* alpha caches the prompt, its first page written before the seal */
	assert_int_equal(kvmm_seq_create(a, 0, &sa), 0);
	assert_int_equal(kvmm_seq_append(a, sa, tokens, n, NULL), 0);
	assert_int_equal(kvmm_block_table(a, &sa, 1, fa, MAX_BLOCKS), 0);
	pa = kvmm_frame_addr(a, (uint32_t)fa[0]);
	assert_non_null(pa);
	memset(pa, 0x11, 4096);
	assert_int_equal(kvmm_seal(a, sa, 0, 0), 0);

	/* beta looks it up: nothing, it is another namespace's cache */
	assert_int_equal(kvmm_seq_create(b, 0, &sb), 0);
	assert_int_equal(kvmm_prefix_lookup(b, sb, tokens, n, &hit), 0);
	assert_int_equal(hit, 0);
	assert_int_equal(kvmm_seq_append(b, sb, tokens, n, NULL), 0);
	assert_int_equal(kvmm_block_table(b, &sb, 1, fb, MAX_BLOCKS), 0);

	/*
	 * The same frame number in both namespaces is two different pages: beta's mapping is
	 * a different memfd, so what beta writes into its own pages is not seen in alpha's.
	 */
	for (unsigned int i = 0; i < MAX_BLOCKS && fb[i] != KVMM_BLOCK_NONE; i++) {
		pb = kvmm_frame_addr(b, (uint32_t)fb[i]);
		assert_non_null(pb);
		memset(pb, 0x22, 4096);
		if (fb[i] == fa[0])
			assert_int_equal(pa[0], 0x11);
	}
	assert_int_equal(pa[0], 0x11);
	assert_int_equal(pa[4095], 0x11);
	/* sequence ids are per client: beta cannot name alpha's sequence either */
	if (sa != sb)
		assert_true(kvmm_seq_free(b, sa) < 0);

	assert_int_equal(kvmm_seq_free(a, sa), 0);
	assert_int_equal(kvmm_seq_free(b, sb), 0);
	kvmm_detach(a);
	kvmm_detach(b);
}

/* A client of ITEST_NS_A with model identity id (NULL: none). */
static kvmm_client_t *attach_model(const char *id)
{
	struct kvmm_attach_opts o = {.model = id, .model_len = id ? (uint32_t)strlen(id) : 0};
	kvmm_client_t *c = NULL;

	assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &o, &c), 0);
	return c;
}

/* Tokens of a new sequence of c that a lookup (with salt, if any) maps from the cache. */
static uint64_t hits(kvmm_client_t *c, const uint32_t *tokens, uint32_t n, const char *salt)
{
	uint64_t s, hit = 0;

	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	if (salt)
		assert_int_equal(kvmm_prefix_lookup_salt(c, s, tokens, n, salt, strlen(salt), &hit),
				 0);
	else
		assert_int_equal(kvmm_prefix_lookup(c, s, tokens, n, &hit), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	return hit;
}

/* Cache a prompt from c (sealed with salt, if any); the sequence is freed, its pages stay. */
static void cache_prompt(kvmm_client_t *c, const uint32_t *tokens, uint32_t n, const char *salt)
{
	uint64_t s;

	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, tokens, n, NULL), 0);
	if (salt)
		assert_int_equal(kvmm_seal_salt(c, s, 0, 0, salt, strlen(salt)), 0);
	else
		assert_int_equal(kvmm_seal(c, s, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
}

/*
 * Model identity and salt: two models of the same shape in one namespace never share a page,
 * the same model does (across clients); a salt separates requests of one model, the same salt
 * shares; a sequence's salt cannot change under its sealed pages.
 */
static void test_model_and_salt(void **state)
{
	uint32_t tokens[2 * 16 + 3], n = 2 * 16 + 3;
	kvmm_client_t *a, *a2, *b, *none;
	struct kvmm_attach_opts bad = {.model = "x", .model_len = KVMM_MODEL_ID_MAX + 1};
	kvmm_client_t *x = NULL;
	uint64_t s, hit;
	char big[KVMM_SALT_MAX + 1];

	(void)state;
	itest_need_daemon();
	itest_tokens(tokens, n, 77);
	a = attach_model("llama-3-8b@main+lora:sql");
	a2 = attach_model("llama-3-8b@main+lora:sql");
	b = attach_model("llama-3-8b@main+lora:chat"); /* same shape, another adapter */
	none = attach_model(NULL);

	cache_prompt(a, tokens, n, NULL);
	assert_int_equal(hits(a2, tokens, n, NULL), 32); /* same identity: shared */
	assert_int_equal(hits(b, tokens, n, NULL), 0);	 /* another model: never */
	assert_int_equal(hits(none, tokens, n, NULL), 0);
	cache_prompt(none, tokens, n, NULL);
	assert_int_equal(hits(none, tokens, n, NULL), 32);
	assert_int_equal(hits(b, tokens, n, NULL), 0);

	/* salts inside one model */
	assert_int_equal(hits(a, tokens, n, "alice"), 0); /* the unsalted pages are not hers */
	cache_prompt(a, tokens, n, "alice");
	assert_int_equal(hits(a2, tokens, n, "alice"), 32); /* same model and salt: shared */
	assert_int_equal(hits(a2, tokens, n, "bob"), 0);
	assert_int_equal(hits(b, tokens, n, "alice"), 0); /* same salt, another model */
	assert_int_equal(hits(a2, tokens, n, NULL), 32);  /* the unsalted pages are still there */

	/* the salt is the sequence's: fixed once it has sealed pages */
	assert_int_equal(kvmm_seq_create(a, 0, &s), 0);
	assert_int_equal(kvmm_prefix_lookup_salt(a, s, tokens, n, "alice", 5, &hit), 0);
	assert_int_equal(hit, 32);
	assert_int_equal(kvmm_seal_salt(a, s, 0, 0, "alice", 5), 0); /* the same: fine */
	assert_int_equal(kvmm_seal_salt(a, s, 0, 0, "bob", 3), -EBUSY);
	assert_int_equal(kvmm_seq_free(a, s), 0);

	/* bad arguments */
	memset(big, 'x', sizeof(big));
	assert_int_equal(kvmm_seq_create(a, 0, &s), 0);
	assert_int_equal(kvmm_prefix_lookup_salt(a, s, tokens, n, big, sizeof(big), &hit), -EINVAL);
	assert_int_equal(kvmm_prefix_lookup_salt(a, s, tokens, n, NULL, 3, &hit), -EINVAL);
	assert_int_equal(kvmm_seq_free(a, s), 0);
	assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &bad, &x), -EINVAL);
	assert_null(x);

	kvmm_detach(a);
	kvmm_detach(a2);
	kvmm_detach(b);
	kvmm_detach(none);
}

/* The sequence calls, each against what it should do. */
static void test_seq_ops(void **state)
{
	uint32_t tokens[200];
	uint64_t s, child, len, seqs[2];
	int32_t table[2 * MAX_BLOCKS];
	uint32_t tpp, nr_frames;
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	tpp = kvmm_tokens_per_page(c);
	itest_tokens(tokens, 200, 3);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, tokens, 3 * tpp + 2, &len), 0);
	assert_int_equal(len, 3 * tpp + 2);
	assert_int_equal(kvmm_seq_append(c, s, NULL, 0, &len), 0);
	assert_int_equal(len, 3 * tpp + 2);

	assert_int_equal(kvmm_seq_fork(c, s, KVMM_SEQ_ALL_TOKENS, &child), 0);
	assert_true(child != s);
	seqs[0] = s;
	seqs[1] = child;
	assert_int_equal(kvmm_block_table(c, seqs, 2, table, MAX_BLOCKS), 0);
	/* full pages are shared by the fork */
	for (unsigned int b = 0; b < 3; b++)
		assert_int_equal(table[b], table[MAX_BLOCKS + b]);
	assert_int_equal(table[4], KVMM_BLOCK_NONE);

	/* a row too short for the sequence: -E2BIG, the row holds what fits */
	assert_int_equal(kvmm_block_table(c, seqs, 1, table, 2), -E2BIG);
	assert_true(table[0] >= 0 && table[1] >= 0);

	assert_int_equal(kvmm_pin(c, seqs, 2, &nr_frames), 0);
	assert_true(nr_frames >= 4);
	assert_int_equal(kvmm_unpin(c, seqs, 2, NULL), 0);

	assert_int_equal(kvmm_seq_truncate(c, child, tpp), 0);
	assert_int_equal(kvmm_block_table(c, &child, 1, table, MAX_BLOCKS), 0);
	assert_true(table[0] >= 0);
	assert_int_equal(table[1], KVMM_BLOCK_NONE);
	assert_true(kvmm_seq_truncate(c, child, 10 * tpp) < 0);

	assert_int_equal(kvmm_seq_free(c, child), 0);
	assert_int_equal(kvmm_seq_free(c, child), -ENOENT);
	assert_int_equal(kvmm_block_table(c, &child, 1, table, MAX_BLOCKS), -ENOENT);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, "no/such", &itest_fmt, &(kvmm_client_t *){0}),
			 -EINVAL);
	kvmm_detach(c);
}

/*
 * A long prompt, more token ids than one 64 KiB record holds (and fewer pages than the
 * namespace has): libkvmm splits the append over several records, the seal is one.
 */
static uint32_t *long_prompt(kvmm_client_t *c, uint32_t *n)
{
	uint32_t tpp = kvmm_tokens_per_page(c), *tokens;

	*n = (KVMM_MSG_MAX / 4 / tpp + 8) * tpp;
	assert_true(*n / tpp + 8 <= kvmm_nr_frames(c) / 2);
	tokens = malloc(sizeof(*tokens) * *n);
	assert_non_null(tokens);
	itest_tokens(tokens, *n, 4);
	return tokens;
}

static void test_long_append(void **state)
{
	kvmm_client_t *c;
	uint64_t s1, len;
	uint32_t n, *tokens;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &c), 0);
	tokens = long_prompt(c, &n);
	assert_int_equal(kvmm_seq_create(c, 0, &s1), 0);
	assert_int_equal(kvmm_seq_append(c, s1, tokens, n, &len), 0);
	assert_int_equal(len, n);
	assert_int_equal(kvmm_seal(c, s1, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, s1), 0);
	free(tokens);
	kvmm_detach(c);
}

/* ... and its lookup, split too: each part continues where the previous one stopped. */
static void test_long_lookup(void **state)
{
	kvmm_client_t *c;
	uint64_t s1, s2, hit;
	uint32_t n, *tokens;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &c), 0);
	tokens = long_prompt(c, &n);
	assert_int_equal(kvmm_seq_create(c, 0, &s1), 0);
	assert_int_equal(kvmm_seq_append(c, s1, tokens, n, NULL), 0);
	assert_int_equal(kvmm_seal(c, s1, 0, 0), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &s2), 0);
	assert_int_equal(kvmm_prefix_lookup(c, s2, tokens, n, &hit), 0);
	assert_int_equal(hit, n);
	assert_int_equal(kvmm_seq_free(c, s2), 0);
	assert_int_equal(kvmm_seq_free(c, s1), 0);
	free(tokens);
	kvmm_detach(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_share_prefix), cmocka_unit_test(test_namespace_wall),
		cmocka_unit_test(test_seq_ops),	     cmocka_unit_test(test_long_append),
		cmocka_unit_test(test_long_lookup),  cmocka_unit_test(test_model_and_salt),
	};
	int ret = cmocka_run_group_tests_name("itest_share", tests, itest_group_setup,
					      itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
