// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_rthreads.c - kvmmd's ring workers (ring_threads, kvmm/ipc/ring_worker.c).
 *
 * With --ring-threads 2 the two test namespaces' rings are polled by two threads at once.
 * Client processes of both namespaces run request flows through the rings at the same time
 * (kvmm_seq_prompt, writing the pages the cache did not have, kvmm_seq_seal_free; half of
 * them batched through kvmm_submit), every page a lookup hands out is checked to hold the
 * bytes its prompt and block call for (whoever wrote it, in whichever round), clients are
 * killed with SIGKILL in the middle, and afterwards: both ring threads did work (their CPU
 * time in /proc), no frame leaked (each namespace back to no used frames once the dead are
 * torn down), the daemon's invariant checks never failed.  The same flow also runs with
 * --ring-threads 0 (the event loop polls every ring, as before the workers).  TSan runs this
 * program (make check SAN=thread).
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

#ifndef NR_CLIENTS
#define NR_CLIENTS 4 /* two per namespace */
#endif
#define NR_VICTIMS 2 /* and one more per namespace, killed mid-flow */
#define NR_PROMPTS 6 /* per namespace, shared by its clients */
#define PROMPT_PAGES 6
#define ROUNDS 60
#define BATCH 4

static uint32_t tpp = 16;

/* The byte every position of block @b of prompt @p of namespace @ns holds. */
static uint8_t pattern(unsigned int ns, unsigned int p, unsigned int b)
{
	return (uint8_t)(1 + ns * 89 + p * 13 + b * 7);
}

static void prompt_tokens(uint32_t *tok, unsigned int ns, unsigned int p)
{
	itest_tokens(tok, (size_t)PROMPT_PAGES * tpp, 1000 * (ns + 1) + p);
}

/*
 * One request's pages: those that came from the cache must hold their pattern; the others
 * are ours to write.  Returns 0, or 3 when a page held the wrong bytes.
 */
static int check_and_fill(kvmm_client_t *c, unsigned int ns, unsigned int p, const int32_t *table,
			  uint64_t hit)
{
	size_t page = ITEST_PAGE_SIZE;
	uint32_t hit_blocks = (uint32_t)(hit / tpp);

	for (uint32_t b = 0; b < PROMPT_PAGES; b++) {
		uint8_t *m = kvmm_frame_addr(c, (uint32_t)table[b]), want = pattern(ns, p, b);

		if (!m)
			return 4;
		if (b < hit_blocks) {
			if (m[0] != want || m[page / 2] != want || m[page - 1] != want)
				return 3;
		} else {
			memset(m, want, page);
		}
	}
	return 0;
}

/* A client of namespace @ns: ROUNDS requests (or until killed).  Exit status 0 = all good. */
static void __attribute__((noreturn)) client(unsigned int ns, unsigned int seed, bool forever)
{
	static uint32_t tok[BATCH][PROMPT_PAGES * 16];
	int32_t table[BATCH][PROMPT_PAGES + 1];
	kvmm_client_t *c;
	int err;

	if (kvmm_attach(itest_d.sock, ns ? ITEST_NS_B : ITEST_NS_A, &itest_fmt, &c))
		_exit(1);
	tpp = kvmm_tokens_per_page(c);
	for (unsigned int r = 0; forever || r < ROUNDS; r++) {
		unsigned int p[BATCH];
		uint64_t seq[BATCH], hit[BATCH];

		if (r % 2 == 0) {
			/* one request, the synchronous compound calls */
			p[0] = (unsigned int)rand_r(&seed) % NR_PROMPTS;
			prompt_tokens(tok[0], ns, p[0]);
			err = kvmm_seq_prompt(c, tok[0], PROMPT_PAGES * tpp, 0, &seq[0], &hit[0],
					      table[0], PROMPT_PAGES + 1);
			if (err) {
				fprintf(stderr, "client of namespace %u: kvmm_seq_prompt: %s\n", ns,
					kvmm_strerror(err));
				_exit(2);
			}
			/* the pages a client writes are its own from the first block table on */
			if (kvmm_block_table(c, seq, 1, &table[0][0], PROMPT_PAGES + 1) < 0)
				_exit(9);
			err = check_and_fill(c, ns, p[0], table[0], hit[0]);
			if (err)
				_exit(err);
			if (kvmm_seq_seal_free(c, seq[0], 0, PROMPT_PAGES))
				_exit(5);
			continue;
		}
		/* a batch behind one doorbell: BATCH prompts, then their seal+frees */
		{
			struct kvmm_sqe sqe[BATCH];
			struct kvmm_cqe cqe[BATCH];
			unsigned int got = 0;

			memset(sqe, 0, sizeof(sqe));
			for (unsigned int i = 0; i < BATCH; i++) {
				p[i] = (unsigned int)rand_r(&seed) % NR_PROMPTS;
				prompt_tokens(tok[i], ns, p[i]);
				sqe[i].op = KVMM_SQE_SEQ_PROMPT;
				sqe[i].data = tok[i];
				sqe[i].nr = PROMPT_PAGES * tpp;
				sqe[i].user_data = i;
			}
			if (kvmm_submit(c, sqe, BATCH) != BATCH)
				_exit(6);
			while (got < BATCH) {
				int n = kvmm_complete(c, cqe + got, BATCH - got, BATCH - got);

				if (n < 0)
					_exit(7);
				got += (unsigned int)n;
			}
			for (unsigned int i = 0; i < BATCH; i++) {
				unsigned int k = (unsigned int)cqe[i].user_data;

				if (cqe[i].res)
					_exit(8);
				seq[k] = cqe[i].seq;
				hit[k] = cqe[i].nr_tokens;
			}
			if (kvmm_block_table(c, seq, BATCH, &table[0][0], PROMPT_PAGES + 1) < 0)
				_exit(9);
			for (unsigned int i = 0; i < BATCH; i++) {
				err = check_and_fill(c, ns, p[i], table[i], hit[i]);
				if (err)
					_exit(err);
				if (kvmm_seq_seal_free(c, seq[i], 0, PROMPT_PAGES))
					_exit(5);
			}
		}
	}
	kvmm_detach(c);
	_exit(0);
}

/* CPU time (user + system clock ticks) of the daemon's thread named @comm, -1: no such thread. */
static long thread_stat(pid_t pid, const char *comm, long *nice)
{
	char path[320], buf[512];
	struct dirent *de;
	long ticks = -1;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((de = readdir(dir))) {
		char name[64] = "";
		unsigned long ut = 0, st = 0;
		FILE *f;
		char *p;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
		p = strchr(buf, '(');
		if (!p || sscanf(p + 1, "%63[^)]", name) != 1 || strcmp(name, comm))
			continue;
		p = strrchr(buf, ')');
		/*
		 * after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
		 * utime stime cutime cstime priority nice
		 */
		if (p &&
		    sscanf(p + 2,
			   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %ld",
			   &ut, &st, nice) == 3)
			ticks = (long)(ut + st);
	}
	closedir(dir);
	return ticks;
}

/* The CPU ticks (user + system) of @pid's thread named @comm, or -1 without one. */
static long thread_ticks(pid_t pid, const char *comm)
{
	long nice;

	return thread_stat(pid, comm, &nice);
}

/* kvmm-STATUS "FramesUsed" reaches 0 once the dead are torn down (mapped pages gone). */
static void wait_no_used(void)
{
	long long used = -1;

	for (unsigned int tries = 0; tries < 50; tries++) {
		used = itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesUsed");
		if (used == 0)
			break;
		itest_sleep_ms(100);
	}
	assert_int_equal(used, 0);
}

static void run_flows(bool kill_some)
{
	pid_t pids[NR_CLIENTS], victims[NR_VICTIMS];
	unsigned int seed = (unsigned int)time(NULL) ^ (unsigned int)getpid();

	print_message("ring threads: seed %u\n", seed);
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			client(i & 1, seed + i, false);
	}
	for (unsigned int i = 0; kill_some && i < NR_VICTIMS; i++) {
		victims[i] = fork();
		assert_true(victims[i] >= 0);
		if (victims[i] == 0)
			client(i & 1, seed + 100 + i, true);
	}
	if (kill_some) {
		itest_sleep_ms(150 + seed % 200);
		for (unsigned int i = 0; i < NR_VICTIMS; i++) {
			int status = 0;

			assert_int_equal(kill(victims[i], SIGKILL), 0);
			assert_int_equal(waitpid(victims[i], &status, 0), victims[i]);
			/* killed in the middle of its work, not failed before it */
			assert_true(WIFSIGNALED(status));
		}
	}
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		int status = -1;

		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			print_message("client %u (namespace %u): status 0x%x\n", i, i & 1, status);
		assert_true(WIFEXITED(status));
		/* 3: a page from the cache held other bytes than its prompt's */
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	assert_true(itest_daemon_alive(&itest_d));
	wait_no_used();
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "InvariantFailures"), 0);
}

static void test_two_threads(void **state)
{
	static const char *const extra[] = {"--ring-threads", "2", NULL};
	long long r0, r1;
	long t0, t1;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_daemon_stop(&itest_d), 0);
	assert_int_equal(itest_daemon_start(&itest_d, extra), 0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThreads"), 2);
	run_flows(true);
	/* the threads are there, each namespace went to one of its own, and each ran its SQEs */
	t0 = thread_ticks(itest_d.pid, "kvmmd-ring0");
	t1 = thread_ticks(itest_d.pid, "kvmmd-ring1");
	r0 = itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThread0Requests");
	r1 = itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThread1Requests");
	print_message("ring threads: CPU ticks %ld and %ld, requests %lld and %lld\n", t0, t1, r0,
		      r1);
	assert_true(t0 >= 0 && t1 >= 0);
	assert_true(r0 > 0 && r1 > 0);
	/* every client gone: none left on either */
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThread0Clients"), 0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThread1Clients"), 0);
}

static void test_no_threads(void **state)
{
	static const char *const extra[] = {"--ring-threads", "0", NULL};

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_daemon_stop(&itest_d), 0);
	assert_int_equal(itest_daemon_start(&itest_d, extra), 0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingThreads"), 0);
	assert_int_equal(thread_ticks(itest_d.pid, "kvmmd-ring0"), -1);
	run_flows(false);
}

/*
 * ring_nice: the workers run at it (the highest value, 19, needs no privilege), STATUS says
 * so, the main loop keeps the daemon's own; the default, -5, is taken where the daemon may
 * take it, and where it may not the workers keep the nice value they were started with.
 */
static void test_ring_nice(void **state)
{
	static const char *const set[] = {"--ring-threads", "2", "--ring-nice", "19", NULL};
	static const char *const dflt[] = {"--ring-threads", "1", NULL};
	id_t self = (id_t)syscall(SYS_gettid);
	long nice = 99, want;
	int mine;

	(void)state;
	itest_need_daemon();
	errno = 0;
	mine = getpriority(PRIO_PROCESS, self); /* the daemon inherits it */
	assert_int_equal(errno, 0);
	assert_int_equal(itest_daemon_stop(&itest_d), 0);
	assert_int_equal(itest_daemon_start(&itest_d, set), 0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingNice"), 19);
	assert_true(thread_stat(itest_d.pid, "kvmmd-ring0", &nice) >= 0);
	assert_int_equal(nice, 19);
	assert_true(thread_stat(itest_d.pid, "kvmmd-ring1", &nice) >= 0);
	assert_int_equal(nice, 19);
	assert_true(thread_stat(itest_d.pid, "kvmmd", &nice) >= 0);
	assert_int_equal(nice, mine);

	/* may a process here take nice -5, as the daemon will try?  (then put ours back) */
	want = setpriority(PRIO_PROCESS, self, -5) == 0 ? -5 : mine;
	setpriority(PRIO_PROCESS, self, mine);
	assert_int_equal(itest_daemon_stop(&itest_d), 0);
	assert_int_equal(itest_daemon_start(&itest_d, dflt), 0);
	assert_true(thread_stat(itest_d.pid, "kvmmd-ring0", &nice) >= 0);
	print_message("ring_nice default: the worker runs at %ld\n", nice);
	assert_int_equal(nice, want);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "RingNice"), want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_threads),
		cmocka_unit_test(test_no_threads),
		cmocka_unit_test(test_ring_nice),
	};
	int ret = cmocka_run_group_tests_name("itest_rthreads", tests, itest_group_setup,
					      itest_group_teardown);
	return ret == 0 && itest_no_daemon ? 77 : ret;
}
