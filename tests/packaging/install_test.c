// SPDX-License-Identifier: MIT
/*
 * tests/packaging/install_test.c - a program of an engine's, built by check-install.sh against
 * the installed tree alone (pkg-config --cflags --libs kvmm): the public headers under
 * <kvmm/...> and libkvmm.so, nothing of the source tree.
 *
 * It lays out one small fp32 format with the format layer, writes K and V rows into two pages
 * through kvmm_cpu_reshape_and_cache, runs kvmm_cpu_paged_decode over a sequence spanning
 * both pages (block table in reverse frame order) and compares the result with softmax
 * attention computed here from the same rows, so a library that links but computes nothing
 * fails.  It also checks a bad format is -EINVAL and kvmm_strerror() says so.  Exit 0 or 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvmm/kernels.h>
#include <kvmm/kvmm.h>

#define LAYERS 2
#define KV_HEADS 2
#define Q_HEADS 4
#define DIM 8
#define NTOK 11 /* over two pages: 8 tokens a page (see below) */

static int fail(const char *what)
{
	fprintf(stderr, "install_test: %s\n", what);
	return 1;
}

/* a value that differs by token, head, element and K/V, in [-1, 1] */
static float val(unsigned int t, unsigned int h, unsigned int d, unsigned int kv)
{
	return sinf(0.37f * (float)t + 1.1f * (float)h + 0.23f * (float)d + 2.0f * (float)kv);
}

int main(void)
{
	const struct kvmm_format in = {LAYERS, KV_HEADS, DIM, KVMM_DTYPE_FP32, 0, 0};
	const struct kvmm_format bad = {LAYERS, KV_HEADS, DIM, KVMM_DTYPE_INT8, 0, 0};
	float k[NTOK][KV_HEADS][DIM], v[NTOK][KV_HEADS][DIM], q[Q_HEADS][DIM], out[Q_HEADS][DIM];
	int64_t slots[NTOK];
	int32_t table[2] = {1, 0}; /* logical block 0 in frame 1, block 1 in frame 0 */
	uint32_t ctx = NTOK;
	struct kvmm_fmt fmt, untouched;
	struct kvmm_kv_pages kv;
	struct kvmm_attn_batch b;
	double max_err = 0;
	void *pages;
	int ret;

	/* 2 layers x K,V x 8 tokens x 2 heads x 8 dims x 4 bytes = 2 KiB a page */
	ret = kvmm_fmt_init(&fmt, &in, 2048);
	if (ret || fmt.tokens_per_page != 8 || memcmp(&fmt.format, &in, sizeof(in)))
		return fail("kvmm_fmt_init: not 8 tokens per page of the format given");
	memset(&untouched, 0, sizeof(untouched));
	if (kvmm_fmt_init(&untouched, &bad, 2048) != -EINVAL)
		return fail("kvmm_fmt_init: int8 without a quant_group is not -EINVAL");
	if (!strstr(kvmm_strerror(-EINVAL), "nvalid"))
		return fail("kvmm_strerror(-EINVAL) does not say invalid");

	pages = calloc(2, fmt.page_size);
	if (!pages)
		return fail("out of memory");
	for (unsigned int t = 0; t < NTOK; t++) {
		slots[t] =
			kvmm_kv_slot(&fmt, table[t / fmt.tokens_per_page], t % fmt.tokens_per_page);
		for (unsigned int h = 0; h < KV_HEADS; h++)
			for (unsigned int d = 0; d < DIM; d++) {
				k[t][h][d] = val(t, h, d, 0);
				v[t][h][d] = val(t, h, d, 1);
			}
	}
	for (unsigned int h = 0; h < Q_HEADS; h++)
		for (unsigned int d = 0; d < DIM; d++)
			q[h][d] = 0.5f * val(h, d, 3, 1);

	kv = (struct kvmm_kv_pages){pages, &fmt, 1, 2};
	ret = kvmm_cpu_reshape_and_cache(&kv, NTOK, slots, &k[0][0][0], &v[0][0][0]);
	if (ret)
		return fail(kvmm_strerror(ret));
	memset(&b, 0, sizeof(b));
	b.kv = kv;
	b.nr_seqs = 1;
	b.num_q_heads = Q_HEADS;
	b.block_tables = table;
	b.max_blocks = 2;
	b.ctx_lens = &ctx;
	ret = kvmm_cpu_paged_decode(&b, &q[0][0], &out[0][0]);
	if (ret)
		return fail(kvmm_strerror(ret));

	/* reference: query head j reads KV head j / (Q_HEADS / KV_HEADS), scale 1/sqrt(DIM) */
	for (unsigned int j = 0; j < Q_HEADS; j++) {
		unsigned int h = j / (Q_HEADS / KV_HEADS);
		double s[NTOK], m = -INFINITY, sum = 0;

		for (unsigned int t = 0; t < NTOK; t++) {
			s[t] = 0;
			for (unsigned int d = 0; d < DIM; d++)
				s[t] += (double)q[j][d] * k[t][h][d];
			s[t] /= sqrt(DIM);
			m = s[t] > m ? s[t] : m;
		}
		for (unsigned int t = 0; t < NTOK; t++)
			sum += exp(s[t] - m);
		for (unsigned int d = 0; d < DIM; d++) {
			double o = 0;

			for (unsigned int t = 0; t < NTOK; t++)
				o += exp(s[t] - m) / sum * v[t][h][d];
			max_err = fmax(max_err, fabs(o - out[j][d]));
		}
	}
	free(pages);
	if (!(max_err < 1e-5))
		return fail("kvmm_cpu_paged_decode differs from the reference");
	printf("install_test: decode of %u tokens over 2 pages on %s matches (max error %.2g); "
	       "kvmm_strerror(-EINVAL): %s\n",
	       NTOK, kvmm_cpu_isa_name(kvmm_cpu_isa_get()), max_err, kvmm_strerror(-EINVAL));
	return 0;
}
