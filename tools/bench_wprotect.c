// SPDX-License-Identifier: MIT
/*
 * tools/bench_wprotect.c - kvmm-bench-ipc's wprotect suite: what read-only pool pages
 * (runtime/wprotect.c) cost an engine. Two handles on one kvmmd, one attached as usual
 * (pages write-protected) and one with KVMM_ATTACH_NO_WPROTECT, run the same work in
 * interleaved rounds (a shared machine's load hits both alike); each row is the median of the
 * per-round times, its baseline the same work unprotected, so the ratio is the cost:
 *
 *   decode   64 sequences append one token each (rings), read their block table and write
 *            the token's KV into the last page; every tokens_per_page steps each sequence
 *            opens a page (a grant); a sequence that reaches 128 tokens is sealed and
 *            freed, and a new one starts (revocations). Per step.
 *   prefill  a sequence of 256 tokens (32 pages): append, block table, write every page
 *            whole, seal, free. Per page.
 *   magazine 64 frames taken one per kvmm_mag_alloc, a byte written into each, given back
 *            with one kvmm_mag_free. Per page.
 *
 * and, as the yardstick of both, what the kernel charges for one frame made writable and
 * read-only again: an mprotect pair on a 16 KiB range of a shared memfd mapping with its
 * pages present, which is the least protection can cost per page it hands out and takes back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "runtime/kvmm.h"

#define WP_SEQS 64
#define WP_LIFE 128 /* tokens a decode sequence lives for */
#define WP_PREFILL 256

static const struct kvmm_format wp_fmt = {
	.layers = 4, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};

struct wp_decode {
	kvmm_client_t *c;
	uint64_t seqs[WP_SEQS];
	uint64_t len[WP_SEQS];
	int32_t table[WP_SEQS * 16];
};

static int decode_start(struct wp_decode *d, unsigned int i)
{
	uint32_t pre[WP_LIFE] = {0};

	/* staggered lengths: page boundaries spread over the steps */
	d->len[i] = (i * 7) % (WP_LIFE / 2);
	if (kvmm_seq_create(d->c, 0, &d->seqs[i]))
		return -1;
	return kvmm_seq_append(d->c, d->seqs[i], pre, (uint32_t)d->len[i], NULL) ? -1 : 0;
}

/* steps engine steps; ns per step, or 0 on a failure. */
static double decode_run(struct wp_decode *d, unsigned int steps)
{
	struct kvmm_sqe sqes[WP_SEQS];
	struct kvmm_cqe cqes[WP_SEQS];
	uint32_t tpp = kvmm_tokens_per_page(d->c), bpt = kvmm_bytes_per_token(d->c);
	uint32_t tok[WP_SEQS];
	uint64_t t0 = bench_now_ns();

	for (unsigned int s = 0; s < steps; s++) {
		unsigned int got = 0;

		for (unsigned int i = 0; i < WP_SEQS; i++) {
			tok[i] = s + i;
			sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
						    .seq = d->seqs[i],
						    .nr = 1,
						    .data = &tok[i],
						    .user_data = i};
		}
		if (kvmm_submit(d->c, sqes, WP_SEQS) != WP_SEQS)
			return 0;
		while (got < WP_SEQS) {
			int r = kvmm_complete(d->c, cqes + got, WP_SEQS - got, WP_SEQS - got);

			if (r <= 0)
				return 0;
			got += (unsigned int)r;
		}
		if (kvmm_block_table(d->c, d->seqs, WP_SEQS, d->table, 16))
			return 0;
		for (unsigned int i = 0; i < WP_SEQS; i++) {
			uint64_t pos = d->len[i]++;
			uint8_t *page =
				kvmm_frame_addr(d->c, (uint32_t)d->table[i * 16 + pos / tpp]);

			/* the token's KV (one row's worth of bytes at its slot) */
			memset(page + (pos % tpp) * bpt, (int)s, bpt);
			if (d->len[i] == WP_LIFE) {
				if (kvmm_seal(d->c, d->seqs[i], 0, 0) ||
				    kvmm_seq_free(d->c, d->seqs[i]) || decode_start(d, i))
					return 0;
			}
		}
	}
	return (double)(bench_now_ns() - t0) / steps;
}

/* rounds prefills; ns per page, or 0 on a failure. */
static double prefill_run(kvmm_client_t *c, unsigned int rounds, unsigned int salt)
{
	static uint32_t tok[WP_PREFILL];
	uint32_t tpp = kvmm_tokens_per_page(c), pages = WP_PREFILL / tpp;
	int32_t table[WP_PREFILL];
	uint64_t t0 = bench_now_ns();

	for (unsigned int r = 0; r < rounds; r++) {
		uint64_t s;

		/* a prompt never seen before: nothing is found in the cache */
		for (unsigned int i = 0; i < WP_PREFILL; i++)
			tok[i] = salt * 1000003u + r * 7919u + i;
		if (kvmm_seq_create(c, 0, &s) || kvmm_seq_append(c, s, tok, WP_PREFILL, NULL) ||
		    kvmm_block_table(c, &s, 1, table, WP_PREFILL))
			return 0;
		for (uint32_t b = 0; b < pages; b++)
			memset(kvmm_frame_addr(c, (uint32_t)table[b]), (int)r, kvmm_page_size(c));
		if (kvmm_seal(c, s, 0, 0) || kvmm_seq_free(c, s))
			return 0;
	}
	return (double)(bench_now_ns() - t0) / ((double)rounds * pages);
}

/* rounds of 64 magazine frames taken one per call, each written, then given back: ns/page */
static double mag_run(kvmm_client_t *c, unsigned int rounds)
{
	uint32_t frames[64];
	uint64_t t0 = bench_now_ns();

	for (unsigned int r = 0; r < rounds; r++) {
		for (unsigned int i = 0; i < 64; i++) {
			if (kvmm_mag_alloc(c, &frames[i], 1) != 1)
				return 0;
			*(volatile uint8_t *)kvmm_frame_addr(c, frames[i]) = (uint8_t)i;
		}
		if (kvmm_mag_free(c, frames, 64))
			return 0;
	}
	return (double)(bench_now_ns() - t0) / ((double)rounds * 64);
}

/* ns per mprotect pair (writable, one write, read-only) on frames of a memfd; 0 on failure. */
static double mprotect_pair(unsigned int n)
{
	const size_t ps = 16384, nr = 256;
	uint64_t t0, t1;
	char *b;
	int fd = memfd_create("kvmm-bench-wprotect", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, (off_t)(ps * nr))) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	b = mmap(NULL, ps * nr, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (b == MAP_FAILED)
		return 0;
	memset(b, 1, ps * nr);
	mprotect(b, ps * nr, PROT_READ);
	t0 = bench_now_ns();
	for (unsigned int i = 0; i < n; i++) {
		/* every other frame, so that each change splits and merges a mapping as in a pool */
		char *f = b + (size_t)((i * 37) % (nr / 2) * 2 + 1) * ps;

		mprotect(f, ps, PROT_READ | PROT_WRITE);
		f[i % ps] = (char)i;
		mprotect(f, ps, PROT_READ);
	}
	t1 = bench_now_ns();
	munmap(b, ps * nr);
	return (double)(t1 - t0) / n;
}

int bench_suite_wprotect(const struct bench_opts *o)
{
	unsigned int rounds = o->quick ? 5 : 15, steps = o->quick ? 100 : 400;
	unsigned int prefills = o->quick ? 20 : 100;
	struct kvmm_attach_opts off = {.flags = KVMM_ATTACH_NO_WPROTECT};
	struct wp_decode on_d = {0}, off_d = {0};
	double dec_on[32], dec_off[32], pre_on[32], pre_off[32], mp[32], mag_on[32], mag_off[32];
	struct bench_kvmmd d = {0};
	uint32_t tpp = 0;
	int err;

	err = bench_kvmmd_start(&d, "16384", "8192");
	if (err == -ENOENT)
		return 0;
	if (err) {
		bench_kvmmd_stop(&d);
		return err;
	}
	err = kvmm_attach(d.sock, "bench", &wp_fmt, &on_d.c);
	if (!err)
		err = kvmm_attach_ex(d.sock, "bench", &wp_fmt, &off, &off_d.c);
	if (!err && (!kvmm_write_protected(on_d.c) || kvmm_write_protected(off_d.c)))
		err = -EOPNOTSUPP; /* e.g. $KVMM_WPROTECT=0 in the environment */
	for (unsigned int i = 0; !err && i < WP_SEQS; i++)
		if (decode_start(&on_d, i) || decode_start(&off_d, i))
			err = -EIO;
	for (unsigned int r = 0; !err && r < rounds; r++) {
		/* alternate which goes first, so neither always runs on a warmer cache */
		bool on_first = r % 2 == 0;

		dec_on[r] = on_first ? decode_run(&on_d, steps) : 0;
		dec_off[r] = decode_run(&off_d, steps);
		if (!on_first)
			dec_on[r] = decode_run(&on_d, steps);
		pre_on[r] = prefill_run(on_d.c, prefills, 2 * r);
		pre_off[r] = prefill_run(off_d.c, prefills, 2 * r + 1);
		mp[r] = mprotect_pair(o->quick ? 200 : 500);
		mag_on[r] = kvmm_has_rings(on_d.c) ? mag_run(on_d.c, o->quick ? 10 : 40) : 1;
		mag_off[r] = kvmm_has_rings(off_d.c) ? mag_run(off_d.c, o->quick ? 10 : 40) : 1;
		if (!dec_on[r] || !dec_off[r] || !pre_on[r] || !pre_off[r] || !mp[r] ||
		    !mag_on[r] || !mag_off[r])
			err = -EIO;
	}
	if (on_d.c)
		tpp = kvmm_tokens_per_page(on_d.c);
	kvmm_detach(on_d.c);
	kvmm_detach(off_d.c);
	bench_kvmmd_stop(&d);
	if (err) {
		fprintf(stderr, "wprotect: %s\n", kvmm_strerror(err));
		return err;
	}
	{
		double don = bench_median(dec_on, rounds), doff = bench_median(dec_off, rounds);
		double pon = bench_median(pre_on, rounds), poff = bench_median(pre_off, rounds);
		double pair = bench_median(mp, rounds);

		bench_report("wprotect baseline: mprotect pair, one 16 KiB frame", pair, "ns", "",
			     0);
		bench_report("wprotect decode step, 64 seqs (protected)", don, "ns/step",
			     "the same unprotected", doff);
		bench_report("wprotect prefill, write + seal (protected)", pon, "ns/page",
			     "the same unprotected", poff);
		/* a decode step opens WP_SEQS / tpp pages and seals as many */
		bench_report("wprotect decode: added cost per page opened and sealed",
			     (don - doff) * tpp / WP_SEQS, "ns/page", "mprotect pair", pair);
		bench_report("wprotect prefill: added cost per page", pon - poff, "ns/page",
			     "mprotect pair", pair);
		bench_report("wprotect magazine alloc + write + free, 1 per call (protected)",
			     bench_median(mag_on, rounds), "ns/page", "the same unprotected",
			     bench_median(mag_off, rounds));
	}
	bench_note("wprotect: %u interleaved rounds of %u decode steps and %u prefills of %u "
		   "tokens; medians",
		   rounds, steps, prefills, WP_PREFILL);
	return 0;
}
