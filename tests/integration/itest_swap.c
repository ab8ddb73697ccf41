// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_swap.c - swap with the real kvmmd: the test namespace "alpha"
 * (ITEST_NS_FRAMES frames) gets a host tier and an NVMe swap file in a temporary directory
 * (--swap swap_host=... --swap swap_file=...), kvswapd on, and real libkvmm clients whose
 * sequences hold more than the pool:
 *   - pages written while pinned come back identical after being swapped out (PIN faults
 *     them in and reports it in vmstat);
 *   - a sealed prefix pushed out of the pool is demoted, and a later lookup still hits it
 *     with identical bytes;
 *   - the FAULT_INJECT admin verb makes one sequence's PIN fail with -EIO while another's
 *     works, nothing is lost (the next PIN brings the same bytes) and swap_fail counts it;
 *   - SWAPOFF of the host tier with pages on it, then SWAPON again;
 *   - kvmm_prefetch brings a swapped-out sequence back without a PIN, asynchronously: the
 *     page table shows it present and the PIN after it reads nothing;
 *   - OOM: with every tier full, the lowest-priority sequence's client gets a PREEMPT event,
 *     and the sequence's ops answer -KVMM_EPREEMPTED until it is freed;
 *   - a PIN that cannot find room for a swapped sequence fails with -ENOMEM and keeps its KV;
 *   - kvmm_pin_range: a sequence longer than the pool, written and read back one range at a
 *     time (the rest swapped out meanwhile), every byte identical;
 *   - two clients whose sequences share a sealed prefix, more than the pool together: the
 *     prefix is swapped out of both, and both read everything back, also at the same time;
 *     one of them killed with SIGKILL meanwhile leaves the other's bytes and the daemon's
 *     checks intact.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/kvmm.h"
#include "runtime/libkvmm.h" /* the handle's data plane and socket counters */
#include "tests/integration/itest.h"

#define MAXB 256 /* block-table row */

static struct itest_swapdir sd;

static const char *extra[] = {"--swap", sd.hostarg, "--swap", sd.filearg, NULL};

static int setup(void **state)
{
	(void)state;
	/* 64 host slots and 256 file slots per namespace pool */
	if (itest_swapdir_make(&sd, "itswap", 64, 256))
		return -1;
	return itest_group_start(extra);
}

static int teardown(void **state)
{
	int ret = itest_group_teardown(state);

	itest_swapdir_remove(&sd);
	return ret;
}

static kvmm_client_t *attach(void)
{
	kvmm_client_t *c = NULL;

	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	return c;
}

/* PIN seq, then write (@write) or compare its pages with @tag's bytes, then UNPIN. */
static int touch(kvmm_client_t *c, uint64_t seq, uint64_t tag, bool write)
{
	int32_t table[MAXB];
	uint64_t ps = kvmm_page_size(c);
	uint32_t b, i, frames;
	int ret = kvmm_pin(c, &seq, 1, &frames);

	if (ret)
		return ret;
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, MAXB), 0);
	for (b = 0; b < MAXB && table[b] != KVMM_BLOCK_NONE; b++) {
		uint8_t *p = kvmm_frame_addr(c, (uint32_t)table[b]);

		for (i = 0; i < ps; i += 61) {
			if (write)
				p[i] = itest_byte_at(tag, b, i);
			else if (p[i] != itest_byte_at(tag, b, i))
				fail_msg("seq %llu block %u byte %u differs",
					 (unsigned long long)seq, b, i);
		}
	}
	assert_int_equal(kvmm_unpin(c, &seq, 1, NULL), 0);
	return 0;
}

static uint64_t mkseq(kvmm_client_t *c, int prio, uint32_t blocks, unsigned int p)
{
	uint32_t n = blocks * kvmm_tokens_per_page(c), *t = malloc(n * sizeof(*t));
	uint64_t seq;

	assert_non_null(t);
	itest_tokens(t, n, p);
	assert_int_equal(kvmm_seq_create(c, prio, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, t, n, NULL), 0);
	free(t);
	return seq;
}

/* Three sequences of 120 pages in a 256-frame pool: every one comes back identical. */
static void test_swap_roundtrip(void **state)
{
	kvmm_client_t *c;
	uint64_t s[3];
	int i, round;

	(void)state;
	itest_need_daemon();
	c = attach();
	for (i = 0; i < 3; i++) {
		s[i] = mkseq(c, 0, 120, 100 + i);
		assert_int_equal(touch(c, s[i], 1000 + i, true), 0);
	}
	for (round = 0; round < 2; round++)
		for (i = 0; i < 3; i++)
			assert_int_equal(touch(c, s[i], 1000 + i, false), 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "seq_swapout") > 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "pswpin") > 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(kvmm_seq_free(c, s[i]), 0);
	kvmm_detach(c);
}

/* A sealed prefix pushed out of the pool is demoted; a later lookup hits identical bytes. */
static void test_prefix_demoted(void **state)
{
	uint32_t tpp, n, *t;
	uint64_t p, big, l, hit = 0;
	long long demoted;
	int tries;
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	n = 4 * tpp;
	t = malloc(n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, 7);
	demoted = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote");
	p = mkseq(c, 0, 4, 7);
	assert_int_equal(touch(c, p, 77, true), 0);
	assert_int_equal(kvmm_seal(c, p, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, p), 0); /* its pages stay cached */
	big = mkseq(c, 0, 250, 8);		  /* under low: kvswapd takes the cache first */
	/* kvswapd runs on its own thread: wait for it (bounded), as for the OOM event below */
	for (tries = 0;
	     tries < 400 && itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") <= demoted;
	     tries++)
		usleep(5000);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") > demoted);
	assert_int_equal(kvmm_seq_create(c, 0, &l), 0);
	assert_int_equal(kvmm_prefix_lookup(c, l, t, n, &hit), 0);
	assert_int_equal(hit, n);
	assert_int_equal(touch(c, l, 77, false), 0);
	assert_int_equal(kvmm_seq_free(c, l), 0);
	assert_int_equal(kvmm_seq_free(c, big), 0);
	free(t);
	kvmm_detach(c);
}

/* swap.read fails once: that sequence's PIN is -EIO, another's works, nothing is lost. */
static void test_fault_inject(void **state)
{
	kvmm_admin_t *admin;
	long long fails;
	kvmm_client_t *c;
	uint64_t x, y, z;

	(void)state;
	itest_need_daemon();
	c = attach();
	x = mkseq(c, -5, 100, 20); /* lowest priority: swapped out first */
	assert_int_equal(touch(c, x, 2000, true), 0);
	y = mkseq(c, 0, 200, 21);
	assert_int_equal(touch(c, y, 2001, true), 0);
	/* room for x again, so that its fault-in is the first read after the fault is armed */
	assert_int_equal(kvmm_seq_free(c, y), 0);
	z = mkseq(c, 0, 10, 22);
	assert_int_equal(touch(c, z, 2002, true), 0);
	fails = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_fail");
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(kvmm_admin_fault_inject(admin, ITEST_NS_A, "swap.read nth=1 times=1"), 0);
	assert_int_equal(touch(c, x, 2000, false), -EIO);
	assert_int_equal(touch(c, z, 2002, false), 0);
	assert_int_equal(touch(c, x, 2000, false), 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_fail") > fails);
	/* a bad specification is refused */
	assert_int_equal(kvmm_admin_fault_inject(admin, ITEST_NS_A, "swap.nosuch nth=1"), -ENOENT);
	/* SWAPOFF of the host tier with pages on it, then SWAPON it again */
	y = mkseq(c, 0, 200, 21); /* x goes back to the tiers */
	assert_int_equal(touch(c, y, 2001, true), 0);
	{
		struct kvmm_swapoff_req off = {.tier = 1};
		struct kvmm_swapon_req on = {
			.tier = 1, .priority = 10, .size = 64 * ITEST_PAGE_SIZE};

		struct kvmm_admin_tier *t;
		unsigned int nr, k, host = 0;

		/* the host tier (1) is listed for alpha, with the pages on it */
		assert_int_equal(kvmm_admin_swap_tiers(admin, ITEST_NS_A, &t, &nr), 0);
		for (k = 0; k < nr; k++) {
			assert_string_equal(t[k].ns, ITEST_NS_A);
			if (t[k].tier == 1) {
				assert_int_equal(t[k].slots, 64);
				host++;
			}
		}
		free(t);
		assert_int_equal(host, 1);
		assert_int_equal(kvmm_admin_swapoff(admin, &off), 0);
		assert_int_equal(kvmm_admin_swapoff(admin, &off), -ENOENT);
		/* and gone after swapoff */
		assert_int_equal(kvmm_admin_swap_tiers(admin, ITEST_NS_A, &t, &nr), 0);
		for (k = 0; k < nr; k++)
			assert_int_not_equal(t[k].tier, 1);
		free(t);
		assert_int_equal(touch(c, x, 2000, false), 0);
		assert_int_equal(touch(c, y, 2001, false), 0);
		assert_int_equal(kvmm_admin_swapon(admin, &on), 0);
	}
	kvmm_admin_close(admin);
	assert_int_equal(touch(c, z, 2002, false), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	assert_int_equal(kvmm_seq_free(c, y), 0);
	assert_int_equal(kvmm_seq_free(c, z), 0);
	kvmm_detach(c);
}

/* The daemon's client id of the one sequence seq (SEQS lists "Seq: ID client=N ns=..."). */
static uint32_t client_of(kvmm_admin_t *admin, uint64_t seq)
{
	const char *l = NULL;
	uint32_t client = 0;
	char *text, b[32];

	assert_int_equal(kvmm_admin_read(admin, KVMM_OP_SEQS, NULL, &text), 0);
	while ((l = kvmm_admin_next(text, "Seq", l))) {
		if (strtoull(l + strlen("Seq:"), NULL, 10) != seq)
			continue;
		assert_true(kvmm_admin_field(l, "client", b, sizeof(b)) > 0);
		client = (uint32_t)strtoul(b, NULL, 10);
	}
	free(text);
	assert_int_not_equal(client, 0);
	return client;
}

/* Blocks of seq whose PTE says type (PAGETABLE of client:seq): "present", "swap". */
static unsigned int ptes_of_type(kvmm_admin_t *admin, uint32_t client, uint64_t seq,
				 const char *type)
{
	struct kvmm_admin_req req = {.id = seq, .reserved = client};
	const char *l = NULL;
	unsigned int n = 0;
	char *text, b[16];

	assert_int_equal(kvmm_admin_read(admin, KVMM_OP_PAGETABLE, &req, &text), 0);
	while ((l = kvmm_admin_next(text, "Pte", l)))
		if (kvmm_admin_field(l, "type", b, sizeof(b)) > 0 && !strcmp(b, type))
			n++;
	free(text);
	return n;
}

/*
 * kvmm_prefetch: a sequence swapped out under pressure is read back ahead of its PIN. The call
 * starts one read per swapped page (swap_ra) and returns without waiting for them; the PIN
 * that follows starts no read of its own (swap_ra does not move: it joins or installs the
 * prefetched ones), and afterwards the page table shows every block present with the bytes
 * written before the swap-out.
 */
static void test_prefetch(void **state)
{
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	uint32_t client, started = 0, none = 7;
	unsigned int swapped = 0, tries;
	uint64_t x, y, z, bogus = 999999, msgs;
	int64_t in0, ra0;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	c = attach();
	x = mkseq(c, -5, 60, 40); /* lowest priority: swapped out first */
	assert_int_equal(touch(c, x, 4000, true), 0);
	y = mkseq(c, 0, 100, 41);
	assert_int_equal(touch(c, y, 4001, true), 0);
	z = mkseq(c, 0, 100, 42); /* 260 pages in a 256-frame pool */
	assert_int_equal(touch(c, z, 4002, true), 0);
	client = client_of(admin, x);
	/* kvswapd works on its own thread: wait (bounded) until part of x is out */
	for (tries = 0; tries < 400; tries++) {
		swapped = ptes_of_type(admin, client, x, "swap");
		if (swapped)
			break;
		usleep(5000);
	}
	assert_true(swapped > 0);
	/* make room for x again, so that every read can start */
	assert_int_equal(kvmm_seq_free(c, z), 0);
	/* and let kvswapd finish what it was doing: the count holds still for 20 ms */
	for (tries = 0; tries < 100; tries++) {
		swapped = ptes_of_type(admin, client, x, "swap");
		usleep(20000);
		if (ptes_of_type(admin, client, x, "swap") == swapped)
			break;
	}
	ra0 = itest_vmstat(admin, "swap_ra");
	in0 = itest_vmstat(admin, "pswpin");

	msgs = c->next_seq;
	assert_int_equal(kvmm_prefetch(c, &x, 1, &started), 0);
	/* on the rings (no socket message) when the client has them */
	if (c->dp)
		assert_true(c->next_seq == msgs);
	assert_int_equal(started, swapped);
	assert_int_equal(itest_vmstat(admin, "swap_ra"), ra0 + (int64_t)swapped);
	usleep(20000); /* the reads go on while "this step computes" */
	ra0 = itest_vmstat(admin, "swap_ra");
	assert_int_equal(touch(c, x, 4000, false), 0);
	assert_int_equal(itest_vmstat(admin, "swap_ra"), ra0); /* the PIN started no read */
	assert_true(itest_vmstat(admin, "pswpin") >= in0 + (int64_t)swapped);
	assert_int_equal(ptes_of_type(admin, client, x, "swap"), 0);
	assert_int_equal(ptes_of_type(admin, client, x, "present"), 60);

	/* a resident batch starts nothing; an unknown sequence is refused; an empty batch is ok */
	assert_int_equal(kvmm_prefetch(c, &x, 1, &started), 0);
	assert_int_equal(started, 0);
	assert_int_equal(kvmm_prefetch(c, &bogus, 1, NULL), -ENOENT);
	assert_int_equal(kvmm_prefetch(c, NULL, 0, &none), 0);
	assert_int_equal(none, 0);
	assert_int_equal(kvmm_prefetch(NULL, &x, 1, NULL), -EINVAL);

	assert_int_equal(touch(c, y, 4001, false), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	assert_int_equal(kvmm_seq_free(c, y), 0);
	kvmm_detach(c);
	kvmm_admin_close(admin);
}

/* pin_range blocks [b0, b0 + n) of seq, write (@write) or compare them with @tag's bytes, unpin */
static int touch_range(kvmm_client_t *c, uint64_t seq, uint32_t b0, uint32_t n, uint64_t tag,
		       bool write, unsigned int flags)
{
	static int32_t table[1024];
	uint64_t ps = kvmm_page_size(c);
	uint32_t b, i, frames = 0;
	int ret = kvmm_pin_range(c, seq, b0, n, flags, &frames);

	if (ret)
		return ret;
	assert_int_equal(frames, n);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, 1024), 0);
	for (b = b0; b < b0 + n; b++) {
		uint8_t *p;

		assert_true(table[b] >= 0);
		p = kvmm_frame_addr(c, (uint32_t)table[b]);
		for (i = 0; i < ps; i += 61) {
			if (write)
				p[i] = itest_byte_at(tag, b, i);
			else if (p[i] != itest_byte_at(tag, b, i))
				fail_msg("seq %llu block %u byte %u differs",
					 (unsigned long long)seq, b, i);
		}
	}
	assert_int_equal(kvmm_unpin_range(c, seq, b0, n, &frames), 0);
	assert_int_equal(frames, n);
	return 0;
}

/*
 * A sequence of 320 pages in the 256-frame pool: no PIN of it can ever succeed, but range by
 * range it is written, then read back twice (forwards with the next range prefetched, then
 * backwards), the rest of it swapped out and in meanwhile, every byte identical.
 */
static void test_pin_range(void **state)
{
	const uint32_t total = 320, step = 40;
	uint32_t tpp, *t, b, pinned = 7;
	kvmm_client_t *c;
	int64_t in0;
	uint64_t s, bogus = 999999;
	kvmm_admin_t *admin;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	t = malloc((size_t)step * tpp * sizeof(*t));
	assert_non_null(t);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	for (b = 0; b < total; b += step) {
		itest_tokens(t, step * tpp, 700 + b);
		assert_int_equal(kvmm_seq_append(c, s, t, step * tpp, NULL), 0);
		assert_int_equal(touch_range(c, s, b, step, 7000, true, 0), 0);
	}
	free(t);
	in0 = itest_vmstat(admin, "pswpin");
	for (b = 0; b < total; b += step)
		assert_int_equal(touch_range(c, s, b, step, 7000, false, KVMM_PIN_RANGE_F_PREFETCH),
				 0);
	for (b = total; b > 0; b -= step)
		assert_int_equal(touch_range(c, s, b - step, step, 7000, false, 0), 0);
	assert_true(itest_vmstat(admin, "pswpin") > in0);
	/* the whole sequence does not fit: PIN cannot succeed, and changes nothing */
	assert_int_equal(kvmm_pin(c, &s, 1, NULL), -ENOMEM);
	assert_int_equal(touch_range(c, s, 100, 8, 7000, false, 0), 0);

	/* errors */
	assert_int_equal(kvmm_pin_range(NULL, s, 0, 1, 0, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_range(c, s, 0, 0, 0, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_range(c, s, 0, 1, 1U << 7, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_range(c, s, total - 1, 2, 0, NULL), -EINVAL);
	assert_int_equal(kvmm_pin_range(c, bogus, 0, 1, 0, NULL), -ENOENT);
	assert_int_equal(kvmm_unpin_range(c, s, 0, 1, NULL), -EINVAL); /* not pinned */
	assert_int_equal(kvmm_unpin_range(c, s, 0, 0, NULL), -EINVAL);
	/* pinned: the sequence cannot change; the pin is released by its unpin */
	assert_int_equal(kvmm_pin_range(c, s, 10, 4, 0, &pinned), 0);
	assert_int_equal(pinned, 4);
	assert_int_equal(kvmm_seq_free(c, s), -EBUSY);
	assert_int_equal(kvmm_unpin_range(c, s, 10, 4, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	kvmm_detach(c);
	kvmm_admin_close(admin);
}

/* ---- a sealed prefix two clients map, in a pool smaller than their union ------------------ */

#define SH_PREFIX 240u /* sealed pages both sequences map: nearly the whole pool */
#define SH_OWN 40u     /* pages each adds after them: 320 pages in all, the pool has 256 */
#define SH_STEP 20u

struct sh_agent {
	kvmm_client_t *c;
	uint64_t seq;
	uint64_t own_tag;
	int rounds, err;
	uint32_t bad_block;
};

/* touch_range's check, for any thread: -EILSEQ (and the block in bad_block) on a wrong byte */
static int sh_check_range(struct sh_agent *a, uint32_t b0, uint64_t tag)
{
	int32_t table[SH_PREFIX + SH_OWN];
	uint64_t ps = kvmm_page_size(a->c);
	uint32_t b, i, frames = 0;
	int ret = kvmm_pin_range(a->c, a->seq, b0, SH_STEP, 0, &frames);

	if (ret)
		return ret;
	ret = kvmm_block_table(a->c, &a->seq, 1, table, SH_PREFIX + SH_OWN);
	for (b = b0; !ret && b < b0 + SH_STEP; b++) {
		const uint8_t *p = table[b] >= 0 ? kvmm_frame_addr(a->c, (uint32_t)table[b]) : NULL;

		for (i = 0; i < ps && !ret; i += 61)
			if (!p || p[i] != itest_byte_at(tag, b, i)) {
				a->bad_block = b;
				ret = -EILSEQ;
			}
	}
	if (kvmm_unpin_range(a->c, a->seq, b0, SH_STEP, NULL) && !ret)
		ret = -EIO;
	return ret;
}

/* read [0, SH_PREFIX + SH_OWN) range by range (forwards, then backwards), checking the bytes */
static int sh_read_all(struct sh_agent *a)
{
	uint32_t b;
	int ret;

	for (b = 0; b < SH_PREFIX + SH_OWN; b += SH_STEP) {
		ret = sh_check_range(a, b, b < SH_PREFIX ? 9100 : a->own_tag);
		if (ret)
			return ret;
	}
	for (b = SH_PREFIX + SH_OWN; b > 0; b -= SH_STEP) {
		ret = sh_check_range(a, b - SH_STEP, b - SH_STEP < SH_PREFIX ? 9100 : a->own_tag);
		if (ret)
			return ret;
	}
	return 0;
}

static void *sh_thread(void *arg)
{
	struct sh_agent *a = arg;
	int r;

	for (r = 0; r < a->rounds && !a->err; r++)
		a->err = sh_read_all(a);
	return NULL;
}

/* @a's new sequence: the SH_PREFIX pages of tokens @t, written (tag 9100) a range at a time, sealed */
static void sh_prefix(struct sh_agent *a, const uint32_t *t)
{
	uint32_t tpp = kvmm_tokens_per_page(a->c), blk;

	assert_int_equal(kvmm_seq_create(a->c, 0, &a->seq), 0);
	for (blk = 0; blk < SH_PREFIX; blk += SH_STEP) {
		assert_int_equal(
			kvmm_seq_append(a->c, a->seq, t + (size_t)blk * tpp, SH_STEP * tpp, NULL),
			0);
		assert_int_equal(touch_range(a->c, a->seq, blk, SH_STEP, 9100, true, 0), 0);
	}
	assert_int_equal(kvmm_seal(a->c, a->seq, 0, 0), 0);
}

/* append SH_OWN pages of its own to @a's sequence and write them, a range at a time */
static void sh_own(struct sh_agent *a, unsigned int p)
{
	uint32_t tpp = kvmm_tokens_per_page(a->c), b, *t = malloc((size_t)SH_STEP * tpp * 4);

	assert_non_null(t);
	for (b = SH_PREFIX; b < SH_PREFIX + SH_OWN; b += SH_STEP) {
		itest_tokens(t, SH_STEP * tpp, p + b);
		assert_int_equal(kvmm_seq_append(a->c, a->seq, t, SH_STEP * tpp, NULL), 0);
		assert_int_equal(touch_range(a->c, a->seq, b, SH_STEP, a->own_tag, true, 0), 0);
	}
	free(t);
}

/*
 * Two clients' sequences share a sealed 240-page prefix and add 40 pages each: 320 pages in a
 * 256-frame pool, and the prefix and one range of 20 more pages do not fit.  The second one's
 * pages can only be written because kvmmd swaps the shared prefix out of both sequences
 * (swap_shared); then both read everything back range by range, first one after the other,
 * then at the same time from two threads, every byte identical.  (Before, no page two
 * sequences mapped was ever swapped: the second client's PIN failed with -ENOMEM.)
 */
static void test_shared_prefix_swapped(void **state)
{
	struct sh_agent a = {.own_tag = 9200, .rounds = 3}, b = {.own_tag = 9300, .rounds = 3};
	uint32_t tpp, n, *t;
	uint64_t hit = 0;
	kvmm_admin_t *admin;
	pthread_t th;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	a.c = attach();
	b.c = attach();
	tpp = kvmm_tokens_per_page(a.c);
	n = SH_PREFIX * tpp;
	t = malloc((size_t)n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, 4242);
	sh_prefix(&a, t);
	assert_int_equal(kvmm_seq_create(b.c, 0, &b.seq), 0);
	assert_int_equal(kvmm_prefix_lookup(b.c, b.seq, t, n, &hit), 0);
	assert_int_equal(hit, n);
	free(t);
	sh_own(&a, 100000);
	sh_own(&b, 200000);
	assert_true(itest_vmstat(admin, "swap_shared") > 0);

	assert_int_equal(sh_read_all(&a), 0);
	assert_int_equal(sh_read_all(&b), 0);
	/* both at once: each one's faults and reclaim under the other's pins */
	assert_int_equal(pthread_create(&th, NULL, sh_thread, &b), 0);
	sh_thread(&a);
	assert_int_equal(pthread_join(th, NULL), 0);
	if (a.err || b.err)
		fail_msg("concurrent reads: %d (block %u), %d (block %u)", a.err, a.bad_block,
			 b.err, b.bad_block);

	assert_int_equal(kvmm_seq_free(a.c, a.seq), 0);
	assert_int_equal(sh_read_all(&b), 0);
	assert_int_equal(kvmm_seq_free(b.c, b.seq), 0);
	kvmm_detach(a.c);
	kvmm_detach(b.c);
	kvmm_admin_close(admin);
}

/* The child of test_shared_prefix_kill9: maps the prefix, then reads it range by range. */
static void __attribute__((noreturn)) sh_child(int fd, const uint32_t *t, uint32_t n)
{
	struct sh_agent a = {0};
	uint64_t hit = 0;
	uint32_t r = 0;

	/*
	 * It reads until killed: if the test fails before it kills it, it must not outlive the
	 * test (holding the test's output open, the run would hang)
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
		_exit(1);
	if (kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a.c) ||
	    kvmm_seq_create(a.c, 0, &a.seq) || kvmm_prefix_lookup(a.c, a.seq, t, n, &hit) ||
	    hit != n)
		_exit(1);
	if (write(fd, "a", 1) != 1)
		_exit(1);
	for (;;) {
		if (sh_check_range(&a, (r % (SH_PREFIX / SH_STEP)) * SH_STEP, 9100) == -EILSEQ)
			_exit(2);
		r += 7;
	}
}

/*
 * A client that maps the shared prefix is killed (SIGKILL) while it and another read it in
 * turns, pages swapped out of both: the survivor still reads every byte, the daemon's checks
 * after the teardown (kvmm_check_invariants) found nothing, and freeing the survivor's
 * sequence leaves nothing of theirs on the tiers but demoted cache.
 */
static void test_shared_prefix_kill9(void **state)
{
	struct sh_agent a = {.own_tag = 9200};
	uint32_t tpp, n, *t;
	int64_t shared0;
	long long clients0;
	kvmm_admin_t *admin;
	char *text = NULL, c;
	int pfd[2], st = 0;
	pid_t pid;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	a.c = attach();
	tpp = kvmm_tokens_per_page(a.c);
	n = SH_PREFIX * tpp;
	t = malloc((size_t)n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, 4343);
	sh_prefix(&a, t);
	shared0 = itest_vmstat(admin, "swap_shared");
	assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &text), 0);
	clients0 = itest_text_value(text, "Clients");
	free(text);
	text = NULL;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		close(pfd[0]);
		sh_child(pfd[1], t, n);
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &c, 1), 1);
	close(pfd[0]);
	/* pages of its own beside the prefix the child maps too: the prefix goes out of both */
	sh_own(&a, 300000);
	assert_int_equal(sh_read_all(&a), 0);
	assert_int_equal(sh_read_all(&a), 0);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st)); /* not exited: no wrong byte (2), no failed setup (1) */
	assert_true(itest_vmstat(admin, "swap_shared") > shared0);

	assert_int_equal(sh_read_all(&a), 0);
	/* the dead client's session is torn down (and checked) within a second */
	for (unsigned int tries = 0; tries < 40; tries++) {
		assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &text), 0);
		if (itest_text_value(text, "Clients") == clients0)
			break;
		free(text);
		text = NULL;
		itest_sleep_ms(50);
	}
	assert_non_null(text);
	assert_int_equal(itest_text_value(text, "Clients"), clients0);
	assert_int_equal(itest_text_value(text, "InvariantFailures"), 0);
	free(text);
	assert_int_equal(kvmm_seq_free(a.c, a.seq), 0);
	free(t);
	kvmm_detach(a.c);
	kvmm_admin_close(admin);
}

/* Every tier full: the lowest-priority sequence's client is told to preempt it. */
static void test_oom_preempt(void **state)
{
	uint32_t tpp, *t, n;
	kvmm_client_t *c;
	uint64_t v, w;
	int ret = 0, i, tries;
	bool got = false;

	(void)state;
	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	v = mkseq(c, -10, 50, 30);
	assert_int_equal(kvmm_seq_create(c, 0, &w), 0);
	n = 32 * tpp;
	t = calloc(n, sizeof(*t));
	assert_non_null(t);
	/* 256 frames + 320 slots: 700 pages cannot fit */
	for (i = 0; i < 22 && !ret; i++)
		ret = kvmm_seq_append(c, w, t, n, NULL);
	assert_int_equal(ret, -ENOMEM);
	for (tries = 0; tries < 200 && !got; tries++) {
		struct kvmm_cqe cqe[4];
		int k, nr = kvmm_complete(c, cqe, 4, 0);

		for (k = 0; k < nr; k++)
			if ((cqe[k].flags & KVMM_CQE_F_EVENT) && cqe[k].seq == v) {
				assert_int_equal(cqe[k].res, -KVMM_EPREEMPTED);
				got = true;
			}
		if (!got)
			usleep(5000);
	}
	assert_true(got);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom") >= 1);
	assert_int_equal(kvmm_seq_append(c, v, t, tpp, NULL), -KVMM_EPREEMPTED);
	assert_int_equal(kvmm_seq_free(c, v), 0);
	assert_int_equal(kvmm_seq_free(c, w), 0);
	free(t);
	kvmm_detach(c);
}

/* Lines of the daemon's log that contain @what. */
static unsigned int log_count(const char *what)
{
	char line[1024];
	unsigned int n = 0;
	FILE *f = fopen(itest_d.log, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/*
 * An OOM storm (dozens of sequences preempted by one append) writes a bounded number of
 * "preempted" lines: the message is rate-limited per call site (include/log.h), while the oom
 * counter still counts every event.  (kvmmd once wrote 950k such lines in two minutes.)
 */
static void test_oom_log_ratelimited(void **state)
{
	uint64_t small[60], w;
	uint32_t tpp, *t, n;
	unsigned int lines0, lines;
	long long oom0, oom;
	kvmm_client_t *c;
	int ret = 0;

	(void)state;
	itest_need_daemon();
	lines0 = log_count(" preempted (");
	oom0 = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom");
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	for (unsigned int i = 0; i < 60; i++)
		small[i] = mkseq(c, -10, 2, 100 + i);
	assert_int_equal(kvmm_seq_create(c, 0, &w), 0);
	n = 32 * tpp;
	t = calloc(n, sizeof(*t));
	assert_non_null(t);
	/* 256 frames + 320 slots: 704 pages cannot fit */
	for (int i = 0; i < 22 && !ret; i++)
		ret = kvmm_seq_append(c, w, t, n, NULL);
	assert_int_equal(ret, -ENOMEM);
	/* each append that still finds no room preempts one more small sequence */
	for (int i = 0; i < 80; i++)
		kvmm_seq_append(c, w, t, tpp, NULL);
	oom = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "oom") - oom0;
	lines = log_count(" preempted (") - lines0;
	print_message("oom storm: %lld preemptions, %u log lines\n", oom, lines);
	assert_true(oom >= 15);
	assert_true(lines <= 10);
	assert_true(lines >= 1);
	for (unsigned int i = 0; i < 60; i++)
		assert_int_equal(kvmm_seq_free(c, small[i]), 0);
	assert_int_equal(kvmm_seq_free(c, w), 0);
	free(t);
	kvmm_detach(c);
}

/*
 * Swap-preempt: a step that needs a swapped-out sequence gets its frames by swapping out an
 * idle one, whatever their priorities, while a tier has room; when nothing can make room (the
 * rest of the pool pinned by a running step), the PIN fails with -ENOMEM and the sequence's KV
 * stays on its tier: it is never preempted (dropped) for it, and comes back on a later PIN.
 */
static void test_swap_not_dropped(void **state)
{
	kvmm_client_t *c, *c2;
	uint32_t frames;
	uint64_t x, y;
	int round;

	(void)state;
	itest_need_daemon();
	c = attach();
	c2 = attach();
	x = mkseq(c, 0, 150, 50);
	assert_int_equal(touch(c, x, 5000, true), 0);
	y = mkseq(c2, 10, 200, 51); /* pushes part of x out */
	assert_int_equal(touch(c2, y, 5001, true), 0);
	for (round = 0; round < 2; round++) {
		assert_int_equal(touch(c, x, 5000, false), 0);
		assert_int_equal(touch(c2, y, 5001, false), 0);
	}
	/* y pinned by its step: x cannot come back now, and is not dropped for it */
	assert_int_equal(kvmm_pin(c2, &y, 1, &frames), 0);
	assert_int_equal(kvmm_pin(c, &x, 1, &frames), -ENOMEM);
	assert_int_equal(kvmm_unpin(c2, &y, 1, NULL), 0);
	assert_int_equal(touch(c, x, 5000, false), 0);
	assert_int_equal(touch(c2, y, 5001, false), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	assert_int_equal(kvmm_seq_free(c2, y), 0);
	kvmm_detach(c2);
	kvmm_detach(c);
}

/* A field (index_restored, ...) of namespace alpha's file tier ("Tier: 2 ns=alpha ..."). */
static long long index_field(const char *name)
{
	char *text = NULL, *line, buf[32];
	long long v = -1;

	assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_SWAP, &text), 0);
	line = strstr(text, "Tier: 2 ns=" ITEST_NS_A " ");
	if (line && kvmm_admin_field(line, name, buf, sizeof(buf)) > 0)
		v = strtoll(buf, NULL, 10);
	free(text);
	return v;
}

static long long index_restored(void)
{
	return index_field("index_restored");
}

/* The test daemon goes away: killed (kill -9) or stopped cleanly; the same one starts again. */
static void restart_daemon(bool crash)
{
	if (crash) {
		assert_int_equal(kill(itest_d.pid, SIGKILL), 0);
		assert_int_equal(waitpid(itest_d.pid, NULL, 0), itest_d.pid);
		itest_d.pid = 0;
		itest_daemon_stop(&itest_d); /* its directory */
	} else {
		assert_int_equal(itest_daemon_stop(&itest_d), 0);
	}
	itest_have_daemon = false;
	assert_int_equal(itest_group_start(extra), 0);
}

/*
 * Push the cache (4 pages at least: @demoted + 4 demotions) out to the swap file: a big
 * sequence makes the pool demote it to the host tier, then two more fill the host tier so
 * that its pages move down to the file (400 pages in 256 frames + 64 host slots).  The two
 * sequences, still allocated, in *a and *b.
 */
static void push_to_file(kvmm_client_t *c, unsigned int p, long long demoted, uint64_t *a,
			 uint64_t *b)
{
	uint64_t big = mkseq(c, 0, 250, p + 1);
	int tries;

	for (tries = 0; tries < 400 &&
			itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") < demoted + 4;
	     tries++)
		usleep(5000);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") >= demoted + 4);
	assert_int_equal(kvmm_seq_free(c, big), 0);
	*a = mkseq(c, 0, 200, p + 2);
	*b = mkseq(c, 0, 200, p + 3);
}

/*
 * Warm restart: a sealed prompt demoted to the swap file survives kvmmd - killed with -9 in the
 * middle of other work, or stopped cleanly - and a client of the restarted daemon hits the
 * whole prompt with the bytes written before (swap_index.c).
 */
static void warm_restart(bool crash, unsigned int p)
{
	uint32_t tpp, n, *t;
	uint64_t s, big, l, hit = 0;
	long long demoted;
	kvmm_client_t *c;

	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	n = 4 * tpp;
	t = malloc(n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, p);
	demoted = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote");
	s = mkseq(c, 0, 4, p);
	assert_int_equal(touch(c, s, 9000 + p, true), 0);
	assert_int_equal(kvmm_seal(c, s, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, s), 0);
	push_to_file(c, p, demoted, &big, &s);
	if (!crash) {
		assert_int_equal(kvmm_seq_free(c, big), 0);
		assert_int_equal(kvmm_seq_free(c, s), 0);
		kvmm_detach(c);
	}
	restart_daemon(crash);
	if (crash)
		kvmm_detach(c); /* its daemon is gone: only the client side is left to free */

	/* the restart said what it restored (kvmmctl swap --raw: index_restored) */
	assert_true(index_restored() >= 4);
	c = attach();
	assert_int_equal(kvmm_seq_create(c, 0, &l), 0);
	assert_int_equal(kvmm_prefix_lookup(c, l, t, n, &hit), 0);
	assert_int_equal(hit, n);
	assert_int_equal(touch(c, l, 9000 + p, false), 0);
	assert_int_equal(kvmm_seq_free(c, l), 0);
	free(t);
	kvmm_detach(c);
}

static void test_warm_restart_kill9(void **state)
{
	(void)state;
	warm_restart(true, 60);
}

static void test_warm_restart_clean(void **state)
{
	(void)state;
	warm_restart(false, 70);
}

/*
 * Warm restart of the children of a resident parent: an 8-page prompt whose first 4 pages a
 * pinned sequence keeps resident while the other 4 go to the swap file; kvmmd is killed
 * with -9.  The restarted daemon restores pages 4-7 pending (their parent was never on the
 * file): the prompt misses.  An engine recomputes pages 0-3 and seals them, which adopts
 * 4-7 (cache_adopt); the whole prompt then hits, with the bytes written before the crash.
 */
static void test_warm_restart_resident_parent(void **state)
{
	const unsigned int p = 80;
	uint32_t tpp, n, *t, frames;
	uint64_t a, b, big, big2, r, l, hit = 0;
	long long demoted, adopt0;
	kvmm_client_t *c;

	(void)state;
	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	n = 8 * tpp;
	t = malloc(n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, p);
	a = mkseq(c, 0, 8, p);
	assert_int_equal(touch(c, a, 9000 + p, true), 0);
	assert_int_equal(kvmm_seal(c, a, 0, 0), 0);
	/* b maps pages 0-3 and stays pinned: they are resident, never written to a tier */
	assert_int_equal(kvmm_seq_create(c, 0, &b), 0);
	assert_int_equal(kvmm_prefix_lookup(c, b, t, 4 * tpp, &hit), 0);
	assert_int_equal(hit, 4 * tpp);
	assert_int_equal(kvmm_pin(c, &b, 1, &frames), 0);
	assert_int_equal(kvmm_seq_free(c, a), 0);
	/* pages 4-7 are cache now: to the host tier, and on to the file as it fills */
	demoted = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote");
	push_to_file(c, p, demoted, &big, &big2);
	restart_daemon(true);
	kvmm_detach(c); /* its daemon is gone: only the client side is left to free */

	/* 4-7 came back, waiting for page 3's key; nothing hits yet */
	print_message("restored %lld, pending %lld\n", index_restored(),
		      index_field("index_pending"));
	assert_int_equal(index_field("index_pending"), 4);
	adopt0 = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "cache_adopt");
	c = attach();
	assert_int_equal(kvmm_seq_create(c, 0, &l), 0);
	assert_int_equal(kvmm_prefix_lookup(c, l, t, n, &hit), 0);
	assert_int_equal(hit, 0);
	assert_int_equal(kvmm_seq_free(c, l), 0);
	/* the engine recomputes the parent prefix (same bytes) and seals it */
	r = mkseq(c, 0, 4, p);
	assert_int_equal(touch(c, r, 9000 + p, true), 0);
	assert_int_equal(kvmm_seal(c, r, 0, 0), 0);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "cache_adopt") - adopt0, 4);
	/* the full prompt hits all 8 pages: 4-7 read from the file, checked, identical */
	assert_int_equal(kvmm_seq_create(c, 0, &l), 0);
	assert_int_equal(kvmm_prefix_lookup(c, l, t, n, &hit), 0);
	assert_int_equal(hit, n);
	assert_int_equal(touch(c, l, 9000 + p, false), 0);
	assert_int_equal(kvmm_seq_free(c, l), 0);
	assert_int_equal(kvmm_seq_free(c, r), 0);
	free(t);
	kvmm_detach(c);
}

/*
 * swap.write fails: every failed write is counted and logged (rate-limited), the page stays
 * resident, and every sequence still reads back its own bytes.
 */
static void test_swap_write_fail_logged(void **state)
{
	kvmm_admin_t *admin;
	long long fails0, fails;
	unsigned int lines0, lines;
	kvmm_client_t *c;
	uint64_t x, y;

	(void)state;
	itest_need_daemon();
	c = attach();
	x = mkseq(c, -5, 100, 30); /* lowest priority: what reclaim writes out first */
	assert_int_equal(touch(c, x, 3000, true), 0);
	fails0 = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_fail");
	lines0 = log_count("swap: write of slot");
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(kvmm_admin_fault_inject(admin, ITEST_NS_A, "swap.write nth=1 times=3"), 0);
	y = mkseq(c, 0, 200, 31); /* pushes x out: its first writes fail */
	assert_int_equal(touch(c, y, 3001, true), 0);
	fails = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_fail") - fails0;
	lines = log_count("swap: write of slot") - lines0;
	print_message("swap write failures: %lld counted, %u logged\n", fails, lines);
	assert_true(fails >= 1);
	assert_true(lines >= 1);
	assert_true(lines <= (unsigned int)fails);
	assert_int_equal(touch(c, x, 3000, false), 0);
	assert_int_equal(touch(c, y, 3001, false), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	assert_int_equal(kvmm_seq_free(c, y), 0);
	kvmm_admin_close(admin);
	kvmm_detach(c);
}

/*
 * A host-tier slot spoilt after it was written (swap.write mode=corrupt): the sequence's next
 * PIN fails with -KVMM_ELOST (not EIO, not EPREEMPTED), its PREEMPT event says lost
 * (-KVMM_ELOST), swap_csum_bad counts it, the log says so, other sequences are intact, and
 * freeing it gives everything back.
 */
static void test_host_corrupt(void **state)
{
	long long bad0;
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	uint64_t x, y, z;
	uint32_t tok = 1;
	bool got = false;
	int tries;

	(void)state;
	itest_need_daemon();
	c = attach();
	bad0 = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_csum_bad");
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	/* the first page written to the tiers (the host tier: the higher priority) is spoilt */
	assert_int_equal(
		kvmm_admin_fault_inject(admin, ITEST_NS_A, "swap.write nth=1 times=1 mode=corrupt"),
		0);
	x = mkseq(c, -5, 40, 40); /* lowest priority: swapped out first */
	assert_int_equal(touch(c, x, 4000, true), 0);
	z = mkseq(c, -4, 20, 42);
	assert_int_equal(touch(c, z, 4002, true), 0);
	y = mkseq(c, 0, 230, 41); /* pushes x and z out */
	assert_int_equal(kvmm_seq_free(c, y), 0);
	assert_int_equal(touch(c, x, 4000, false), -KVMM_ELOST);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_csum_bad") - bad0, 1);
	for (tries = 0; tries < 200 && !got; tries++) {
		struct kvmm_cqe cqe[4];
		int k, nr = kvmm_complete(c, cqe, 4, 0);

		for (k = 0; k < nr; k++)
			if ((cqe[k].flags & KVMM_CQE_F_EVENT) && cqe[k].seq == x) {
				assert_int_equal(cqe[k].res, -KVMM_ELOST);
				got = true;
			}
		if (!got)
			usleep(5000);
	}
	assert_true(got);
	assert_int_equal(kvmm_seq_append(c, x, &tok, 1, NULL), -KVMM_ELOST);
	assert_string_equal(kvmm_errname(-KVMM_ELOST), "ELOST");
	assert_non_null(strstr(kvmm_strerror(-KVMM_ELOST), "checksum"));
	assert_true(log_count("failed its checksum") >= 1);
	assert_true(log_count("dropped: a swapped page failed its checksum") >= 1);
	/* the other sequence comes back with its bytes */
	assert_int_equal(touch(c, z, 4002, false), 0);
	assert_int_equal(kvmm_seq_free(c, x), 0);
	assert_int_equal(kvmm_seq_free(c, z), 0);
	kvmm_admin_close(admin);
	kvmm_detach(c);
}

/*
 * SEQ_PROMPT over a swapped prefix longer than the free frames maps all of it, as
 * PREFIX_LOOKUP does (kvmm_mm_prefix_lookup_reclaim: room made by swapping out what can go,
 * the prompt's own first pages and an idle sequence), not only what fit: the rest would be
 * recomputed by the engine although it was in swap.
 */
static void test_prompt_past_free_frames(void **state)
{
	const uint32_t pages = 160, hold = 140;
	uint32_t tpp, n, *t;
	uint64_t p, big, hog, seq, hit = 0, dropped = 0;
	kvmm_admin_t *admin;
	kvmm_client_t *c;
	int tries;
	long long demoted;

	(void)state;
	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	n = pages * tpp;
	assert_true(n <= KVMM_SEQ_PROMPT_MAX);
	t = malloc(n * sizeof(*t));
	assert_non_null(t);
	itest_tokens(t, n, 31);
	/* the prefix, sealed and freed, then pushed to swap by a sequence that fills the pool */
	p = mkseq(c, 0, pages, 31);
	assert_int_equal(touch(c, p, 31, true), 0);
	assert_int_equal(kvmm_seal(c, p, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, p), 0);
	demoted = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote");
	big = mkseq(c, 0, 250, 32);
	for (tries = 0; tries < 400 && itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") <
					       demoted + pages / 2;
	     tries++)
		usleep(5000);
	assert_int_equal(kvmm_seq_free(c, big), 0);
	/* an idle sequence holds most of the pool: fewer free frames than the prefix has pages */
	hog = mkseq(c, 0, hold, 33);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "Free") < pages);
	assert_int_equal(kvmm_seq_prompt(c, t, n, 0, &seq, &hit, NULL, 0), 0);
	assert_int_equal(hit, n);
	assert_int_equal(touch(c, seq, 31, false), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	assert_int_equal(kvmm_seq_free(c, hog), 0);
	free(t);
	kvmm_detach(c);
	/* the 160 cached pages would fill the tiers the next tests swap into */
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(
		kvmm_admin_drop_caches(admin, KVMM_DROP_F_DEVICE | KVMM_DROP_F_SWAP, &dropped), 0);
	kvmm_admin_close(admin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_swap_roundtrip),
		cmocka_unit_test(test_prefix_demoted),
		cmocka_unit_test(test_fault_inject),
		cmocka_unit_test(test_prefetch),
		cmocka_unit_test(test_pin_range),
		cmocka_unit_test(test_oom_preempt),
		cmocka_unit_test(test_oom_log_ratelimited),
		cmocka_unit_test(test_swap_not_dropped),
		cmocka_unit_test(test_warm_restart_kill9),
		cmocka_unit_test(test_warm_restart_clean),
		cmocka_unit_test(test_warm_restart_resident_parent),
		cmocka_unit_test(test_swap_write_fail_logged),
		cmocka_unit_test(test_host_corrupt),
		cmocka_unit_test(test_prompt_past_free_frames),
		cmocka_unit_test(test_shared_prefix_swapped),
		cmocka_unit_test(test_shared_prefix_kill9),
	};
	int ret = cmocka_run_group_tests_name("itest_swap", tests, setup, teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
