// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_kill.c - clients killed at any moment leak nothing. Client
 * processes loop over attach, create, lookup, append, seal, fork, pin, unpin and free on a
 * few shared prompts; the test kills them with SIGKILL at random moments (several alive at
 * once, at least 200 kills in all), then checks that the daemon still serves and that every
 * frame came back: after dropping the prefix cache a fresh client can allocate exactly as many
 * pages as it could before the first kill (the daemon tears a dead client down within a
 * second, so the check retries for that long), and the daemon's own counters show no
 * invariant failure. Bounded: about a second of killing, well under a minute with sanitizers.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

#define NR_KILLS 200
#define NR_ALIVE 8
#define NR_PROMPTS 4
#define PROMPT_TOKENS 80 /* 5 pages of 16 tokens */
#define CHILD_SEQS 4

static void sleep_us(unsigned int us)
{
	struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * Pages a fresh client of ns can allocate: one sequence grown a page at a time until the
 * daemon says no. Frees it again. -errno if something other than running out went wrong.
 */
static long capacity(const char *ns)
{
	uint32_t tokens[64];
	kvmm_client_t *c;
	uint64_t seq;
	long pages = 0;
	uint32_t tpp;
	int err;

	err = kvmm_attach(itest_d.sock, ns, &itest_fmt, &c);
	if (err)
		return err;
	tpp = kvmm_tokens_per_page(c);
	err = kvmm_seq_create(c, 0, &seq);
	if (err)
		goto out;
	itest_tokens(tokens, tpp, 77);
	while ((err = kvmm_seq_append(c, seq, tokens, tpp, NULL)) == 0)
		pages++;
	if (err == -ENOMEM || err == -ENOSPC)
		err = 0;
	if (!err)
		err = kvmm_seq_free(c, seq);
out:
	kvmm_detach(c);
	return err ? err : pages;
}

/* write end of the pipe on which each worker says it attached (one byte) */
static int attached_fd = -1;

/* A client that works until it is killed. Never returns. */
static void __attribute__((noreturn)) worker(unsigned int seed)
{
	static uint32_t prompts[NR_PROMPTS][PROMPT_TOKENS];
	uint64_t seqs[CHILD_SEQS] = {0};
	kvmm_client_t *c;
	uint32_t tpp;

	for (unsigned int p = 0; p < NR_PROMPTS; p++)
		itest_tokens(prompts[p], PROMPT_TOKENS, 100 + p);
	if (kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c))
		_exit(1);
	if (write(attached_fd, "a", 1) != 1)
		_exit(1);
	tpp = kvmm_tokens_per_page(c);
	for (;;) {
		unsigned int slot = (unsigned int)rand_r(&seed) % CHILD_SEQS;
		unsigned int p = (unsigned int)rand_r(&seed) % NR_PROMPTS;
		uint64_t hit = 0, s = seqs[slot], child;
		uint32_t tok[8];
		int err;

		if (s) {
			switch (rand_r(&seed) % 7) {
			case 5: {
				/* through the data plane: an append on the ring, left in flight */
				struct kvmm_sqe sqe = {.op = KVMM_SQE_SEQ_APPEND,
						       .seq = s,
						       .nr = 1,
						       .data = tok,
						       .user_data = s};
				struct kvmm_cqe cqe;

				itest_tokens(tok, 1, seed);
				if (kvmm_submit(c, &sqe, 1) == 1 && rand_r(&seed) % 2)
					kvmm_complete(c, &cqe, 1, 1);
				break;
			}
			case 6: {
				/* magazine frames, some given back, the rest held until the kill */
				uint32_t frames[4];
				int n = kvmm_mag_alloc(c, frames, 4);

				if (n > 1)
					kvmm_mag_free(c, frames, (uint32_t)n / 2);
				break;
			}
			case 0:
				kvmm_seq_free(c, s);
				seqs[slot] = 0;
				break;
			case 1:
				if (kvmm_pin(c, &s, 1, NULL) == 0)
					kvmm_unpin(c, &s, 1, NULL);
				break;
			case 2:
				if (kvmm_seq_fork(c, s, KVMM_SEQ_ALL_TOKENS, &child) == 0)
					kvmm_seq_free(c, child);
				break;
			default:
				itest_tokens(tok, 8, seed);
				kvmm_seq_append(c, s, tok, 1 + (uint32_t)rand_r(&seed) % 8, NULL);
				break;
			}
			continue;
		}
		err = kvmm_seq_create(c, 0, &s);
		if (err == -ENOTCONN || err == -EPIPE)
			_exit(2);
		if (err)
			continue;
		seqs[slot] = s;
		kvmm_prefix_lookup(c, s, prompts[p], PROMPT_TOKENS, &hit);
		if (kvmm_seq_append(c, s, prompts[p] + hit, PROMPT_TOKENS - (uint32_t)hit, NULL) ==
		    0)
			kvmm_seal(c, s, 0, 0);
		(void)tpp;
	}
}

static void test_kill_loop(void **state)
{
	pid_t alive[NR_ALIVE] = {0};
	unsigned int seed = (unsigned int)time(NULL) ^ (unsigned int)getpid();
	kvmm_admin_t *admin;
	uint64_t dropped;
	long before, after = -1, attached = 0;
	char *text = NULL, buf[64];
	int pfd[2];
	ssize_t got;

	(void)state;
	itest_need_daemon();
	assert_int_equal(pipe2(pfd, O_NONBLOCK | O_CLOEXEC), 0);
	attached_fd = pfd[1];
	before = capacity(ITEST_NS_A);
	assert_true(before > 0);
	print_message("kill loop: seed %u, %ld pages allocatable before\n", seed, before);

	for (unsigned int i = 0; i < NR_KILLS + NR_ALIVE; i++) {
		unsigned int slot = i % NR_ALIVE;

		if (alive[slot]) {
			assert_int_equal(kill(alive[slot], SIGKILL), 0);
			assert_int_equal(waitpid(alive[slot], NULL, 0), alive[slot]);
			alive[slot] = 0;
		}
		if (i >= NR_KILLS)
			continue;
		alive[slot] = fork();
		assert_true(alive[slot] >= 0);
		if (alive[slot] == 0)
			worker(seed + i);
		/* a quarter die young (in the middle of attaching), the others mid-work */
		if (rand_r(&seed) % 4 == 0)
			sleep_us((unsigned int)rand_r(&seed) % 400);
		else
			sleep_us((unsigned int)rand_r(&seed) % 6000);
	}
	assert_true(itest_daemon_alive(&itest_d));
	close(pfd[1]);
	while ((got = read(pfd[0], buf, sizeof(buf))) > 0)
		attached += got;
	close(pfd[0]);
	print_message("kill loop: %ld of %u workers attached before they were killed\n", attached,
		      NR_KILLS);

	/*
	 * Every frame comes back: the cache is dropped (sealed pages are the only ones allowed
	 * to outlive their clients), then a fresh client allocates as much as before. Dead
	 * clients are torn down within a second of their death: retry for that long.
	 */
	for (unsigned int tries = 0; tries < 20; tries++) {
		assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
		assert_int_equal(kvmm_admin_drop_caches(admin, KVMM_DROP_F_DEVICE, &dropped), 0);
		kvmm_admin_close(admin);
		after = capacity(ITEST_NS_A);
		if (after == before)
			break;
		sleep_us(100000);
	}
	print_message("kill loop: %ld pages allocatable after %u kills\n", after, NR_KILLS);
	assert_int_equal(after, before);

	/*
	 * The daemon's own view (STATUS): no session left but the one asking, and its
	 * consistency check after each teardown (kvmm_check_invariants) never failed.
	 */
	for (unsigned int tries = 0; tries < 20; tries++) {
		assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &text), 0);
		if (itest_text_value(text, "Clients") == 1)
			break;
		free(text);
		text = NULL;
		sleep_us(50000);
	}
	assert_non_null(text);
	assert_int_equal(itest_text_value(text, "Clients"), 1);
	assert_int_equal(itest_text_value(text, "InvariantFailures"), 0);
	/* a worker killed young may never have connected: count those that attached */
	assert_true(itest_text_value(text, "Accepted") >= attached);
	assert_true(attached > 0);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_loop),
	};
	int ret = cmocka_run_group_tests_name("itest_kill", tests, itest_group_setup,
					      itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
