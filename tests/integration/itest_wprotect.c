// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_wprotect.c - read-only sealed and shared pages (runtime/wprotect.c)
 * with the real kvmmd. A client writes a prompt's KV and seals it; a second process looks it
 * up, writes its own new page (allowed) and then the sealed one: it must die of SIGSEGV, a
 * third client's lookup must still read the first one's bytes, the daemon must go on, and the
 * dead writer must leave no page behind. The same for a page shared by a fork, a page given
 * back to the magazine, a page of another client, and a page truncated away; and a handle
 * attached with KVMM_ATTACH_NO_WPROTECT writes anywhere (the opt-out).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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

#define PROMPT_PAGES 3
#define MAX_BLOCKS 16

static uint32_t prompt[PROMPT_PAGES * 16 + 5];

static unsigned char pattern(unsigned int b, size_t off)
{
	return (unsigned char)(0xc3 ^ (b * 29) ^ (off * 7));
}

/* What a forked writer does before its fatal (or not) write. */
enum writer_case {
	W_SEALED,	   /* look the prompt up, write the first sealed page */
	W_OWN_THEN_SEALED, /* write a page of its own (fine), then the sealed one */
	W_FORKED,	   /* write a full page shared with a forked child */
	W_MAG_RETURNED,	   /* write a magazine frame after giving it back */
	W_TRUNCATED,	   /* write a page truncated away */
	W_FOREIGN,	   /* write a frame no sequence of its own holds */
	W_OPT_OUT,	   /* KVMM_ATTACH_NO_WPROTECT: writes a sealed page, and lives */
	W_ASYNC, /* its own page of a kvmm_submit'd SEQ_PROMPT (fine), sealed by SEAL_FREE */
};

/*
 * The forked writer: attach on its own, set the case up, write. Exits 0 when the write went
 * through (the opt-out case), another code when something before it failed.
 */
static void writer(enum writer_case wc, int ready)
{
	struct kvmm_attach_opts opts = {.flags = KVMM_ATTACH_NO_WPROTECT};
	uint32_t n = (uint32_t)(sizeof(prompt) / sizeof(prompt[0]));
	int32_t table[MAX_BLOCKS];
	kvmm_client_t *c;
	uint64_t s, child, hit = 0;
	unsigned char *target = NULL;
	uint32_t fr[2];

	if (kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, wc == W_OPT_OUT ? &opts : NULL,
			   &c))
		_exit(10);
	if (kvmm_write_protected(c) != (wc == W_OPT_OUT ? 0 : 1))
		_exit(11);
	if (kvmm_seq_create(c, 0, &s))
		_exit(12);
	switch (wc) {
	case W_SEALED:
	case W_OWN_THEN_SEALED:
	case W_OPT_OUT:
		if (kvmm_prefix_lookup(c, s, prompt, n, &hit) || hit != PROMPT_PAGES * 16)
			_exit(13);
		if (kvmm_seq_append(c, s, prompt + hit, n - (uint32_t)hit, NULL))
			_exit(14);
		if (kvmm_block_table(c, &s, 1, table, MAX_BLOCKS))
			_exit(15);
		if (wc == W_OWN_THEN_SEALED) {
			/* its own partial last page: writable */
			memset(kvmm_frame_addr(c, (uint32_t)table[PROMPT_PAGES]), 0x77, 4096);
		}
		target = kvmm_frame_addr(c, (uint32_t)table[0]);
		break;
	case W_FORKED:
		if (kvmm_seq_append(c, s, prompt, n, NULL) ||
		    kvmm_block_table(c, &s, 1, table, MAX_BLOCKS))
			_exit(13);
		memset(kvmm_frame_addr(c, (uint32_t)table[0]), 0x55, 4096); /* before the fork */
		if (kvmm_seq_fork(c, s, KVMM_SEQ_ALL_TOKENS, &child))
			_exit(14);
		target = kvmm_frame_addr(c, (uint32_t)table[0]);
		break;
	case W_MAG_RETURNED:
		if (kvmm_mag_alloc(c, fr, 1) != 1)
			_exit(13);
		memset(kvmm_frame_addr(c, fr[0]), 0x66, 4096); /* taken: ours */
		if (kvmm_mag_free(c, fr, 1))
			_exit(14);
		target = kvmm_frame_addr(c, fr[0]);
		break;
	case W_TRUNCATED:
		if (kvmm_seq_append(c, s, prompt, n, NULL) ||
		    kvmm_block_table(c, &s, 1, table, MAX_BLOCKS))
			_exit(13);
		memset(kvmm_frame_addr(c, (uint32_t)table[2]), 0x44, 4096);
		if (kvmm_seq_truncate(c, s, 16))
			_exit(14);
		target = kvmm_frame_addr(c, (uint32_t)table[2]);
		break;
	case W_ASYNC: {
		/* the compound ops through kvmm_submit: a prompt of its own, then seal + free */
		static uint32_t own[PROMPT_PAGES * 16];
		struct kvmm_sqe sqe = {.op = KVMM_SQE_SEQ_PROMPT,
				       .nr = PROMPT_PAGES * 16,
				       .data = own,
				       .user_data = 1};
		struct kvmm_cqe cqe;

		itest_tokens(own, PROMPT_PAGES * 16, 4242);
		if (kvmm_submit(c, &sqe, 1) != 1 || kvmm_complete(c, &cqe, 1, 1) != 1 || cqe.res)
			_exit(13);
		if (kvmm_block_table(c, &cqe.seq, 1, table, MAX_BLOCKS))
			_exit(14);
		/* its own new page: writable from the block table on (it was not: SIGSEGV) */
		memset(kvmm_frame_addr(c, (uint32_t)table[0]), 0x33, 4096);
		sqe = (struct kvmm_sqe){
			.op = KVMM_SQE_SEQ_SEAL_FREE, .seq = cqe.seq, .user_data = 2};
		if (kvmm_submit(c, &sqe, 1) != 1 || kvmm_complete(c, &cqe, 1, 1) != 1 || cqe.res)
			_exit(15);
		/* sealed and cached now: read-only again */
		target = kvmm_frame_addr(c, (uint32_t)table[0]);
		break;
	}
	case W_FOREIGN:
		if (kvmm_seq_append(c, s, prompt, 16, NULL) ||
		    kvmm_block_table(c, &s, 1, table, MAX_BLOCKS))
			_exit(13);
		/* a frame next to its own page: not its own */
		target = kvmm_frame_addr(c, (uint32_t)table[0] ? (uint32_t)table[0] - 1
							       : (uint32_t)table[0] + 1);
		break;
	}
	if (!target)
		_exit(16);
	/* everything before the write went through: tell the parent, then write */
	if (write(ready, "w", 1) != 1)
		_exit(17);
	target[100] = 0x11;
	_exit(0);
}

/*
 * Run the writer in a child process: -signal when it died of one, else its exit code. The
 * death only counts when the child reached the write (it says so on a pipe first).
 */
static int run_writer(enum writer_case wc)
{
	int pfd[2], status;
	char ch;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* cmocka catches SIGSEGV to report a failed test: the writer must simply die */
		signal(SIGSEGV, SIG_DFL);
		close(pfd[0]);
		writer(wc, pfd[1]);
	}
	close(pfd[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (read(pfd[0], &ch, 1) != 1)
		fail_msg("the writer died before its write (status %#x)", status);
	close(pfd[0]);
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	return WEXITSTATUS(status);
}

static long long frames_free(void)
{
	return itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesFree");
}

/* The daemon noticed the writer's death: every frame it held is free again. */
/* Drop the namespaces' unmapped cached pages (the first client's prompt stays: it is mapped). */
static void drop_caches(void)
{
	kvmm_admin_t *admin;
	uint64_t dropped;

	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(kvmm_admin_drop_caches(admin, KVMM_DROP_F_DEVICE, &dropped), 0);
	kvmm_admin_close(admin);
}

static void expect_no_leak(long long before)
{
	long long now = -1;

	for (int i = 0; i < 200; i++) {
		now = frames_free();
		if (now == before)
			break;
		itest_sleep_ms(10);
	}
	assert_int_equal(now, before);
}

/* The prompt the first client wrote and sealed: still its bytes, through a new lookup. */
static void expect_prompt_intact(void)
{
	uint32_t n = (uint32_t)(sizeof(prompt) / sizeof(prompt[0]));
	int32_t table[MAX_BLOCKS];
	kvmm_client_t *c;
	uint64_t s, hit = 0;

	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_prefix_lookup(c, s, prompt, n, &hit), 0);
	assert_int_equal(hit, PROMPT_PAGES * 16);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	for (unsigned int b = 0; b < PROMPT_PAGES; b++) {
		const unsigned char *p = kvmm_frame_addr(c, (uint32_t)table[b]);

		for (size_t off = 0; off < kvmm_page_size(c); off += 97)
			if (p[off] != pattern(b, off))
				fail_msg("block %u offset %zu: %#x, not %#x", b, off, p[off],
					 pattern(b, off));
	}
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
}

static void test_sealed_pages_read_only(void **state)
{
	uint32_t n = (uint32_t)(sizeof(prompt) / sizeof(prompt[0]));
	int32_t table[MAX_BLOCKS];
	kvmm_client_t *c;
	uint64_t s;
	long long before;
	static const struct {
		enum writer_case wc;
		const char *what;
	} cases[] = {
		{W_SEALED, "a sealed page"},
		{W_OWN_THEN_SEALED, "its own page, then a sealed one"},
		{W_FORKED, "a page shared with a fork"},
		{W_MAG_RETURNED, "a magazine frame given back"},
		{W_TRUNCATED, "a page truncated away"},
		{W_FOREIGN, "a frame that is not its own"},
		{W_ASYNC, "its own page sealed by an asynchronous SEQ_SEAL_FREE"},
	};

	(void)state;
	itest_need_daemon();
	itest_tokens(prompt, n, 42);

	/* the first client writes the prompt's KV, then seals it */
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_write_protected(c), 1);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, prompt, n, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	for (unsigned int b = 0; b < PROMPT_PAGES; b++) {
		unsigned char *p = kvmm_frame_addr(c, (uint32_t)table[b]);

		for (size_t off = 0; off < kvmm_page_size(c); off++)
			p[off] = pattern(b, off);
	}
	assert_int_equal(kvmm_seal(c, s, 0, 0), 0);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret;

		/* the asynchronous case leaves its sealed page cached: counted without the cache */
		if (cases[i].wc == W_ASYNC)
			drop_caches();
		before = frames_free();
		ret = run_writer(cases[i].wc);
		if (cases[i].wc == W_ASYNC)
			drop_caches();
		print_message("writer into %s: %s\n", cases[i].what,
			      ret == -SIGSEGV ? "SIGSEGV" : "no fault");
		if (ret != -SIGSEGV)
			fail_msg("a write into %s: %d, not SIGSEGV", cases[i].what, ret);
		assert_true(itest_daemon_alive(&itest_d));
		expect_no_leak(before);
		expect_prompt_intact();
	}

	/* the writer of a sealed page was the only one to suffer: the owner goes on */
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
}

/* KVMM_ATTACH_NO_WPROTECT: the pool is writable everywhere (and the write lands). */
static void test_opt_out(void **state)
{
	uint32_t n = (uint32_t)(sizeof(prompt) / sizeof(prompt[0]));
	int32_t table[MAX_BLOCKS];
	kvmm_client_t *c;
	uint64_t s, hit = 0;

	(void)state;
	itest_need_daemon();
	itest_tokens(prompt, n, 43);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, prompt, n, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	memset(kvmm_frame_addr(c, (uint32_t)table[0]), 0, 4096);
	assert_int_equal(kvmm_seal(c, s, 0, 0), 0);

	assert_int_equal(run_writer(W_OPT_OUT), 0);
	assert_int_equal(((unsigned char *)kvmm_frame_addr(c, (uint32_t)table[0]))[100], 0x11);

	/* an unknown flag or a reserved field is refused */
	{
		struct kvmm_attach_opts bad = {.flags = 1U << 31};
		kvmm_client_t *x = NULL;

		assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &bad, &x),
				 -EINVAL);
		bad.flags = 0;
		bad.reserved[2] = 1;
		assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &bad, &x),
				 -EINVAL);
		assert_null(x);
	}
	(void)hit;
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
}

/*
 * What an engine does keeps working: append, write the new page through the block table,
 * seal; a fork's child appends into the shared partial page (a copy) and writes it; an
 * asynchronous append's page is writable after its completion; a magazine frame named in an
 * append stays writable; a truncated-to partial page can be appended to and written again;
 * the compound SEQ_PROMPT's new pages are writable.
 */
static void test_own_pages_writable(void **state)
{
	uint32_t tok[64];
	int32_t table[MAX_BLOCKS], t2[MAX_BLOCKS];
	struct kvmm_sqe sqe;
	struct kvmm_cqe cqe;
	kvmm_client_t *c;
	uint64_t s, child, hit;
	uint32_t fr[2], b;

	(void)state;
	itest_need_daemon();
	itest_tokens(tok, 64, 44);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_write_protected(c), 1);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, tok, 20, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	memset(kvmm_frame_addr(c, (uint32_t)table[0]), 1, kvmm_page_size(c));
	memset(kvmm_frame_addr(c, (uint32_t)table[1]), 1, kvmm_page_size(c));

	/* fork: the child's copy of the partial page is its own */
	assert_int_equal(kvmm_seq_fork(c, s, KVMM_SEQ_ALL_TOKENS, &child), 0);
	assert_int_equal(kvmm_seq_append(c, child, tok + 20, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &child, 1, t2, MAX_BLOCKS), 0);
	assert_int_not_equal(t2[1], table[1]);
	memset(kvmm_frame_addr(c, (uint32_t)t2[1]), 2, kvmm_page_size(c));
	/* the parent's too, once it appends */
	assert_int_equal(kvmm_seq_append(c, s, tok + 20, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	memset(kvmm_frame_addr(c, (uint32_t)table[1]), 3, kvmm_page_size(c));
	assert_int_equal(kvmm_seq_free(c, child), 0);

	/* asynchronous append into a new page */
	sqe = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND, .seq = s, .nr = 16, .data = tok + 21};
	assert_int_equal(kvmm_submit(c, &sqe, 1), 1);
	assert_int_equal(kvmm_complete(c, &cqe, 1, 1), 1);
	assert_int_equal(cqe.res, 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	memset(kvmm_frame_addr(c, (uint32_t)table[2]), 4, kvmm_page_size(c));

	/* magazine frames named in an append */
	if (kvmm_has_rings(c)) {
		assert_int_equal(kvmm_mag_alloc(c, fr, 1), 1);
		memset(kvmm_frame_addr(c, fr[0]), 5, kvmm_page_size(c));
		/* 27 tokens: block 2's last 11, then 16 in block 3, the magazine frame */
		assert_int_equal(kvmm_seq_append_frames(c, s, tok, 27, fr, 1, NULL), 0);
		memset(kvmm_frame_addr(c, fr[0]), 6, kvmm_page_size(c));
	}

	/* truncate into a sealed page: the next append copies it, and the copy is writable */
	assert_int_equal(kvmm_seal(c, s, 0, 0), 0);
	assert_int_equal(kvmm_seq_truncate(c, s, 24), 0);
	assert_int_equal(kvmm_seq_append(c, s, tok, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, table, MAX_BLOCKS), 0);
	memset(kvmm_frame_addr(c, (uint32_t)table[1]), 7, kvmm_page_size(c));

	/* the compound flow: a prompt's pages past its cache hits are its own, then let go */
	assert_int_equal(kvmm_seq_prompt(c, tok, 40, 0, &child, &hit, t2, MAX_BLOCKS), 0);
	for (b = (uint32_t)(hit / 16); b < 3; b++)
		memset(kvmm_frame_addr(c, (uint32_t)t2[b]), 8, kvmm_page_size(c));
	assert_int_equal(kvmm_seq_seal_free(c, child, 0, 0), 0);

	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
}

/* The same over the socket alone (no data plane: $KVMM_NO_RINGS). */
static void test_own_pages_writable_socket(void **state)
{
	setenv("KVMM_NO_RINGS", "1", 1);
	test_own_pages_writable(state);
	unsetenv("KVMM_NO_RINGS");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sealed_pages_read_only),
		cmocka_unit_test(test_opt_out),
		cmocka_unit_test(test_own_pages_writable),
		cmocka_unit_test(test_own_pages_writable_socket),
	};

	return cmocka_run_group_tests_name("wprotect", tests, itest_group_setup,
					   itest_group_teardown);
}
