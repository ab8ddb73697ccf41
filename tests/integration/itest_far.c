// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_far.c - far reads with the real kvmmd: the test namespace "alpha"
 * (ITEST_NS_FRAMES frames) gets a host swap tier of 512 slots (--swap swap_host=...), and real
 * libkvmm clients read sealed pages kvmmd swapped there in place, through the read-only far
 * window (kvmm_far_map) and the entries of kvmm_pin_far:
 *   - a sealed sequence of 320 pages in the 256-frame pool: one kvmm_pin_far of all of it
 *     pins the resident pages and leaves the others on the tier (no page read back), and the
 *     window shows every byte; the same pin twice nests, kvmm_unpin_range ends each;
 *   - after kvmm_far_map, the client's prefix lookups map the cached pages on the tier where
 *     they lie (vmstat far_map), nothing read back, and its far pin reads them there;
 *   - the tier full of demoted cache gives way to a sequence's pages (swap_drop, no oom);
 *   - the window is read-only: a write into it is a SIGSEGV of the writer;
 *   - bad input: unknown sequence, empty or out-of-range blocks, over KVMM_PIN_FAR_MAX, an
 *     unpin of no pin; a namespace without a host tier (beta's swapped off: -ENODEV);
 *   - swapoff of the tier waits for far pins (-EBUSY), then the old window's pins are
 *     -ESTALE until the window is mapped again over the new tier;
 *   - a client killed (SIGKILL) holding far pins leaves none: swapoff then succeeds.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/kvmm.h"
#include "runtime/kvmm_admin.h"
#include "runtime/libkvmm.h" /* the handle's data plane and socket counters */
#include "tests/integration/itest.h"

#define TOTAL 320u /* pages of the test sequence: the pool has 256 frames */
#define STEP 40u
#define HOST_SLOTS 512u

static struct itest_swapdir sd;

static const char *extra[] = {"--swap", sd.hostarg, NULL};

static int setup(void **state)
{
	(void)state;
	if (itest_swapdir_make(&sd, "itfar", HOST_SLOTS, 0))
		return -1;
	return itest_group_start(extra);
}

static int teardown(void **state)
{
	int ret = itest_group_teardown(state);

	itest_swapdir_remove(&sd);
	return ret;
}

static kvmm_client_t *attach(const char *ns)
{
	kvmm_client_t *c = NULL;

	assert_int_equal(kvmm_attach(itest_d.sock, ns, &itest_fmt, &c), 0);
	return c;
}

/*
 * The test's sealed pages stay cached on the host tier and in the pool: dropped at its end,
 * so that the next test's sequence finds the room it needs.
 */
static void drop_caches(void)
{
	kvmm_admin_t *admin;

	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(kvmm_admin_drop_caches(admin, KVMM_DROP_F_DEVICE | KVMM_DROP_F_SWAP, NULL),
			 0);
	kvmm_admin_close(admin);
}

/*
 * A sealed sequence of TOTAL pages, each written with @tag's bytes while its range was
 * pinned: more than the pool, so kvmmd swapped most of the early ones to the host tier.
 */
static uint64_t mkseq(kvmm_client_t *c, uint64_t tag)
{
	static int32_t table[TOTAL];
	uint32_t tpp = kvmm_tokens_per_page(c), b, k, i, *t;
	uint64_t ps = kvmm_page_size(c), s;

	t = malloc((size_t)STEP * tpp * sizeof(*t));
	assert_non_null(t);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	for (b = 0; b < TOTAL; b += STEP) {
		itest_tokens(t, STEP * tpp, (unsigned int)(tag + b));
		assert_int_equal(kvmm_seq_append(c, s, t, STEP * tpp, NULL), 0);
		assert_int_equal(kvmm_pin_range(c, s, b, STEP, 0, NULL), 0);
		assert_int_equal(kvmm_block_table(c, &s, 1, table, TOTAL), 0);
		for (k = b; k < b + STEP; k++) {
			uint8_t *p = kvmm_frame_addr(c, (uint32_t)table[k]);

			for (i = 0; i < ps; i += 61)
				p[i] = itest_byte_at(tag, k, i);
		}
		assert_int_equal(kvmm_unpin_range(c, s, b, STEP, NULL), 0);
		assert_int_equal(kvmm_seal(c, s, b, STEP), 0);
	}
	free(t);
	return s;
}

/* Every byte of blocks [b0, b0 + n) read through the window at @e's entries. */
static void check_far(kvmm_client_t *c, const uint8_t *win, const int32_t *e, uint32_t b0,
		      uint32_t n, uint64_t tag)
{
	uint64_t ps = kvmm_page_size(c);

	for (uint32_t k = 0; k < n; k++) {
		const uint8_t *p;

		assert_true(e[k] >= 0);
		p = win + (uint64_t)e[k] * ps;
		for (uint32_t i = 0; i < ps; i += 61)
			if (p[i] != itest_byte_at(tag, b0 + k, i))
				fail_msg("block %u (entry %d) byte %u differs", b0 + k, e[k], i);
	}
}

/*
 * Far reads, with the pins on the rings (their replies through the region's out area,
 * KVMM_FEAT_RING_OUT: no socket message) or, @socket, a client without rings.
 */
static void far_read(bool socket)
{
	static int32_t e[TOTAL], e2[TOTAL];
	uint32_t far_base = 0, nr_far = 0, nr_far2 = 0, k, nfar = 0;
	uint64_t pages = 0, s, msgs;
	const void *win = NULL;
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	int64_t in0, pin0;

	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	if (socket)
		setenv("KVMM_NO_RINGS", "1", 1);
	c = attach(ITEST_NS_A);
	unsetenv("KVMM_NO_RINGS");
	if (socket) {
		assert_null(c->dp);
	} else {
		struct kvmm_shm_hdr h;

		assert_true(c->features & KVMM_FEAT_RING_OUT);
		memcpy(&h, c->shm, sizeof(h));
		assert_int_equal(h.out_size, KVMM_RING_OUT_SIZE);
		assert_true(h.out_off + h.out_size <= c->shm_len);
	}
	s = mkseq(c, 5000);
	/* without a window every entry is a frame: the swapped pages are read back */
	assert_int_equal(kvmm_pin_far(c, s, 0, 8, e, &nr_far), 0);
	assert_int_equal(nr_far, 0);
	for (k = 0; k < 8; k++)
		assert_true(e[k] >= 0 && (uint32_t)e[k] < kvmm_nr_frames(c));
	assert_int_equal(kvmm_unpin_range(c, s, 0, 8, NULL), 0);

	assert_int_equal(kvmm_far_map(c, &win, &pages, &far_base), 0);
	assert_non_null(win);
	assert_true(far_base >= kvmm_nr_frames(c));
	assert_int_equal(pages, far_base + HOST_SLOTS);
	in0 = itest_vmstat(admin, "pswpin");
	pin0 = itest_vmstat(admin, "far_pin");
	msgs = c->next_seq;
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e, &nr_far), 0);
	/* the rings carried it (no socket message), or the socket did */
	assert_true(socket ? c->next_seq != msgs : c->next_seq == msgs);
	/* nothing was read back: what is not resident is read where it lies */
	assert_int_equal(itest_vmstat(admin, "pswpin"), in0);
	assert_int_equal(itest_vmstat(admin, "far_pin"), pin0 + nr_far);
	assert_true(nr_far >= TOTAL - kvmm_nr_frames(c));
	for (k = 0; k < TOTAL; k++)
		nfar += e[k] >= (int32_t)far_base;
	assert_int_equal(nfar, nr_far);
	check_far(c, win, e, 0, TOTAL, 5000);
	/* the same range again nests; each unpin ends one, a third finds none */
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e2, &nr_far2), 0);
	check_far(c, win, e2, 0, TOTAL, 5000);
	assert_int_equal(kvmm_seq_free(c, s), -EBUSY); /* pinned: it cannot change */
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), 0);
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), 0);
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), -EINVAL);
	/* a part of it, and mapping again in place */
	assert_int_equal(kvmm_far_map(c, &win, &pages, &far_base), 0);
	assert_int_equal(kvmm_pin_far(c, s, 100, 50, e, NULL), 0);
	check_far(c, win, e, 100, 50, 5000);
	assert_int_equal(kvmm_unpin_range(c, s, 100, 50, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
	kvmm_admin_close(admin);
	drop_caches();
}

static void test_far_read(void **state)
{
	(void)state;
	far_read(false);
}

static void test_far_read_socket(void **state)
{
	(void)state;
	far_read(true);
}

/*
 * After kvmm_far_map, a client's prefix lookups map the cached pages they find on the host
 * tier where they lie (vmstat far_map), none read back; its far pin then reads them there.
 */
static void test_far_lookup(void **state)
{
	static int32_t e[TOTAL];
	uint32_t tpp, b, *t, nr_far = 0;
	uint64_t s, x, hit = 0;
	const void *win = NULL;
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	int64_t in0, map0;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	c = attach(ITEST_NS_A);
	tpp = kvmm_tokens_per_page(c);
	s = mkseq(c, 9000);
	assert_int_equal(kvmm_seq_free(c, s), 0); /* cached: most of it on the host tier */
	t = malloc((size_t)TOTAL * tpp * sizeof(*t));
	assert_non_null(t);
	for (b = 0; b < TOTAL; b += STEP)
		itest_tokens(t + (size_t)b * tpp, STEP * tpp, 9000 + b);
	assert_int_equal(kvmm_far_map(c, &win, NULL, NULL), 0);
	in0 = itest_vmstat(admin, "pswpin");
	map0 = itest_vmstat(admin, "far_map");
	assert_int_equal(kvmm_seq_create(c, 0, &x), 0);
	assert_int_equal(kvmm_prefix_lookup(c, x, t, TOTAL * tpp, &hit), 0);
	assert_int_equal(hit, (uint64_t)TOTAL * tpp);
	assert_int_equal(itest_vmstat(admin, "pswpin"), in0);
	assert_true(itest_vmstat(admin, "far_map") >= map0 + TOTAL - kvmm_nr_frames(c));
	assert_int_equal(kvmm_pin_far(c, x, 0, TOTAL, e, &nr_far), 0);
	assert_true(nr_far >= TOTAL - kvmm_nr_frames(c));
	check_far(c, win, e, 0, TOTAL, 9000);
	assert_int_equal(kvmm_unpin_range(c, x, 0, TOTAL, NULL), 0);
	/* a plain pin brings everything back, the same bytes */
	assert_int_equal(kvmm_pin_range(c, x, 0, 100, 0, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &x, 1, e, TOTAL), 0);
	check_far(c, kvmm_frame_addr(c, 0), e, 0, 100, 9000);
	assert_int_equal(kvmm_unpin_range(c, x, 0, 100, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	free(t);
	kvmm_detach(c);
	kvmm_admin_close(admin);
	drop_caches();
}

/*
 * The host tier full of demoted cache and the pool of one sequence's pages: the sequence's
 * next pages need its own pages swapped out, so the demoted cache gives way (swap_drop)
 * rather than the sequence being preempted (oom).  (It was preempted before.)
 */
static void test_cache_gives_way(void **state)
{
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	int64_t oom0, drop0;
	uint64_t s[3];
	int i;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	c = attach(ITEST_NS_A);
	oom0 = itest_vmstat(admin, "oom");
	drop0 = itest_vmstat(admin, "swap_drop");
	/* 960 sealed pages written, more than pool and tier hold together (768) */
	for (i = 0; i < 3; i++) {
		s[i] = mkseq(c, 10000 + 1000 * (unsigned int)i);
		if (i < 2)
			assert_int_equal(kvmm_seq_free(c, s[i]), 0);
	}
	assert_int_equal(itest_vmstat(admin, "oom"), oom0);
	assert_true(itest_vmstat(admin, "swap_drop") > drop0);
	assert_int_equal(kvmm_seq_free(c, s[2]), 0);
	kvmm_detach(c);
	kvmm_admin_close(admin);
	drop_caches();
}

/* The window is read-only: a process writing into it dies of SIGSEGV, the page unharmed. */
static void test_far_readonly(void **state)
{
	static int32_t e[TOTAL];
	uint32_t far_base = 0, nr_far = 0, k;
	const void *win = NULL;
	kvmm_client_t *c;
	int32_t target = -1;
	uint64_t s;
	pid_t pid;
	int st;

	(void)state;
	itest_need_daemon();
	c = attach(ITEST_NS_A);
	s = mkseq(c, 6000);
	assert_int_equal(kvmm_far_map(c, &win, NULL, &far_base), 0);
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e, &nr_far), 0);
	assert_true(nr_far > 0);
	for (k = 0; k < TOTAL && target < 0; k++)
		if (e[k] >= (int32_t)far_base)
			target = e[k];
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		volatile uint8_t *p = (uint8_t *)win + (uint64_t)target * kvmm_page_size(c);

		signal(SIGSEGV, SIG_DFL); /* not cmocka's handler: the default, death */
		p[0] ^= 0xff;		  /* must fault */
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	check_far(c, win, e, 0, TOTAL, 6000);
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
	drop_caches();
}

static void test_far_errors(void **state)
{
	static int32_t e[TOTAL];
	struct kvmm_swapoff_req off = {.tier = 1};
	struct kvmm_swapon_req on = {
		.tier = 1, .priority = 10, .size = HOST_SLOTS * ITEST_PAGE_SIZE};
	kvmm_admin_t *admin;
	kvmm_client_t *c, *b;
	uint64_t s;

	(void)state;
	itest_need_daemon();
	c = attach(ITEST_NS_A);
	s = mkseq(c, 7000);
	assert_int_equal(kvmm_far_map(NULL, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(kvmm_far_map(c, NULL, NULL, NULL), 0);
	assert_int_equal(kvmm_pin_far(NULL, s, 0, 1, e, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_far(c, s, 0, 1, NULL, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_far(c, s, 0, 0, e, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_far(c, s, TOTAL - 1, 2, e, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_far(c, s, TOTAL, 1, e, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_far(c, 999999, 0, 1, e, NULL), -ENOENT);
	assert_int_equal(kvmm_pin_far(c, s, 0, (uint32_t)KVMM_PIN_FAR_MAX + 1, e, NULL), -E2BIG);
	assert_int_equal(kvmm_unpin_range(c, s, 0, 5, NULL), -EINVAL); /* no pin of it */
	assert_int_equal(kvmm_seq_free(c, s), 0);
	/* a namespace without a host tier (beta's, swapped off for the test) */
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	memcpy(off.ns, ITEST_NS_B, sizeof(ITEST_NS_B));
	memcpy(on.ns, ITEST_NS_B, sizeof(ITEST_NS_B));
	assert_int_equal(kvmm_admin_swapoff(admin, &off), 0);
	b = attach(ITEST_NS_B);
	assert_int_equal(kvmm_far_map(b, NULL, NULL, NULL), -ENODEV);
	assert_int_equal(kvmm_admin_swapon(admin, &on), 0);
	assert_int_equal(kvmm_far_map(b, NULL, NULL, NULL), 0);
	kvmm_detach(b);
	kvmm_detach(c);
	kvmm_admin_close(admin);
	drop_caches();
}

/*
 * Swapoff of the host tier waits for the far pins; afterwards the old window's generation is
 * -ESTALE, and a window mapped again over the new tier works.  A client killed holding far
 * pins leaves none behind.
 */
static void test_far_swapoff_kill9(void **state)
{
	static int32_t e[TOTAL];
	struct kvmm_swapoff_req off = {.tier = 1};
	struct kvmm_swapon_req on = {
		.tier = 1, .priority = 10, .size = HOST_SLOTS * ITEST_PAGE_SIZE};
	uint32_t nr_far = 0;
	const void *win = NULL;
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	int pipefd[2];
	uint64_t s;
	pid_t pid;
	char ch;
	int st;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	memcpy(off.ns, ITEST_NS_A, sizeof(ITEST_NS_A));
	memcpy(on.ns, ITEST_NS_A, sizeof(ITEST_NS_A));
	c = attach(ITEST_NS_A);
	s = mkseq(c, 8000);
	assert_int_equal(kvmm_far_map(c, &win, NULL, NULL), 0);
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e, &nr_far), 0);
	assert_true(nr_far > 0);
	assert_int_equal(kvmm_admin_swapoff(admin, &off), -EBUSY);
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	assert_int_equal(kvmm_admin_swapoff(admin, &off), 0);
	assert_int_equal(kvmm_admin_swapon(admin, &on), 0);
	s = mkseq(c, 8100);
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e, NULL), -ESTALE);
	assert_int_equal(kvmm_far_map(c, &win, NULL, NULL), 0);
	assert_int_equal(kvmm_pin_far(c, s, 0, TOTAL, e, &nr_far), 0);
	assert_true(nr_far > 0);
	check_far(c, win, e, 0, TOTAL, 8100);
	assert_int_equal(kvmm_unpin_range(c, s, 0, TOTAL, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
	drop_caches();

	/* a child holds far pins and is killed */
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		kvmm_client_t *k = NULL;
		uint64_t ks;

		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
			_exit(1);
		if (kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &k))
			_exit(1);
		ks = mkseq(k, 8200);
		if (kvmm_far_map(k, NULL, NULL, NULL) ||
		    kvmm_pin_far(k, ks, 0, TOTAL, e, &nr_far) || !nr_far ||
		    write(pipefd[1], "p", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &ch, 1), 1);
	close(pipefd[0]);
	assert_int_equal(kvmm_admin_swapoff(admin, &off), -EBUSY);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* the daemon notices the hang-up and drops the pins (and the sequence) */
	for (int i = 0; i < 200; i++) {
		int r = kvmm_admin_swapoff(admin, &off);

		if (r != -EBUSY) {
			assert_int_equal(r, 0);
			break;
		}
		itest_sleep_ms(10);
	}
	assert_int_equal(kvmm_admin_swapon(admin, &on), 0);
	kvmm_admin_close(admin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_far_read),	  cmocka_unit_test(test_far_read_socket),
		cmocka_unit_test(test_far_lookup),	  cmocka_unit_test(test_cache_gives_way),
		cmocka_unit_test(test_far_readonly),	  cmocka_unit_test(test_far_errors),
		cmocka_unit_test(test_far_swapoff_kill9),
	};
	int ret = cmocka_run_group_tests_name("itest_far", tests, setup, teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
