// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_cuda_fake.c - a cuda-backend kvmmd end to end without a GPU: the
 * real kvmmd --backend cuda and real libkvmm clients over kvmm's fake CUDA driver
 * (tests/fakecuda/, Documentation/dev-tools/fake-cuda.md), selected with $KVMM_LIBCUDA in this
 * test's environment only (the daemon and the clients it starts inherit it).
 *
 * The daemon's pools are fake device memory (memfds behind cuMemCreate), their chunks exported
 * as fds; each client imports and maps them through runtime/cuda_map.c and addresses frames
 * with kvmm_frame_devptr().  One client writes a prompt's KV through its mapping and seals it;
 * a second client process (exec'd: CUDA does not survive fork, and the fake refuses it too)
 * looks the prompt up, must get the same frames and read the same bytes through its own
 * mapping.  The same with real KV and the GPU path's kernels (run by the fake's SIMT emulator,
 * KVMM_FAKECUDA_SIMT=1): one client writes a prompt's K and V into its frames with the CUDA
 * reshape_and_cache kernel (bit for bit the CPU kernel's bytes), another process decodes over
 * the shared frames with the CUDA decode kernel and matches the CPU decode of the same inputs.
 * Sequences larger than the pool swap out and back in through the host and NVMe
 * tiers (the backend's staging copies), identical afterwards.  A client killed with SIGKILL
 * leaks nothing in the daemon (its frames, its session, its descriptors).  The daemon exits 0
 * on SIGTERM, and the fake's report of its live objects at exit is all zeros, with no race
 * between streams and no pageable staging buffer.
 *
 * A second daemon mirrors its pool on a tensor-parallel group of two of the fake's three
 * devices (--device 2,0): clients on each member's GPU map that member's copy (found by UUID,
 * also from a process that sees the GPUs under other ordinals, KVMM_FAKECUDA_VISIBLE), a
 * client on the third GPU is refused, and copy-on-write and swap keep each device's own bytes.
 *
 * A third daemon has 2 MiB frames, a whole mapping granule each: a client maps every frame as
 * its own mapping, read-only, and its own unsealed pages read-write (runtime/wprotect.c with
 * cuMemSetAccess).  A copy into a sealed page, by the client that sealed it or by another,
 * fails in the writer (the fake's GPU faults: CUDA_ERROR_ILLEGAL_ADDRESS) and the page keeps
 * its bytes for every reader; a driver that maps allocations only whole or refuses read-only
 * access gets a writable pool (kvmm_write_protected() 0), as does KVMM_WPROTECT=0.
 *
 *   itest_cuda_fake                              the test
 *   itest_cuda_fake --reader SOCK N F0 F1 ...    the second client (internal)
 *   itest_cuda_fake --decoder SOCK N F0 F1 ...   the attention test's second client (internal)
 *   itest_cuda_fake --holder SOCK                a client that waits to be killed (internal)
 *   itest_cuda_fake --writer SOCK FRAME          copies into FRAME, must be refused (internal)
 *   itest_cuda_fake --sealer SOCK                writes, seals, writes again (internal)
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "kernels/cuda/cuda_drv.h"
#include "kernels/cuda/kvmm_cuda.h"
#include "kernels/kernels.h"
#include "runtime/kvmm.h"
#include "tests/fakecuda/fakecuda.h"

#define PROMPT_PAGES 4
#define MAXB 256
#define PROMPT_TAG 4242
#define ATTN_PAGES 16  /* the prompt the attention test shares */
#define ATTN_LAYER 1   /* the layer it writes and reads */
#define ATTN_Q_HEADS 8 /* GQA 4 over itest_fmt's 2 KV heads */

static pid_t daemon_pid;
static struct itest_swapdir sd;
static char fake[PATH_MAX], report[128];
static char self[PATH_MAX];

/* write (@write) or compare page @b of @tag at device address @dp; 0 or -1 */
static int page_io(const struct kvmm_cuda_drv *drv, uint64_t dp, uint64_t ps, uint64_t tag,
		   uint32_t b, bool write)
{
	uint8_t *buf = malloc(ps);
	int ret = 0;

	if (!buf)
		return -1;
	if (write) {
		for (uint32_t i = 0; i < ps; i++)
			buf[i] = itest_byte_at(tag, b, i);
		ret = drv->cuMemcpyHtoD(dp, buf, ps) ? -1 : 0;
	} else if (drv->cuMemcpyDtoH(buf, dp, ps)) {
		ret = -1;
	} else {
		for (uint32_t i = 0; i < ps && !ret; i++)
			if (buf[i] != itest_byte_at(tag, b, i)) {
				fprintf(stderr, "block %u byte %u is %u, want %u\n", b, i, buf[i],
					itest_byte_at(tag, b, i));
				ret = -1;
			}
	}
	free(buf);
	return ret;
}

/* ---- attention over the daemon's pool ------------------------------------------------------------ */

static float attn_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (float)(*x >> 40) / (float)(1u << 23) - 1.0f;
}

/* the prompt's K and V rows (fp32 [token][kv_heads][head_dim]) and the decode query */
static void attn_inputs(uint32_t ntok, float *k, float *v, float *q)
{
	uint64_t x = 0x5eed5eedull;
	uint64_t n = (uint64_t)ntok * itest_fmt.kv_heads * itest_fmt.head_dim;

	for (uint64_t i = 0; i < n; i++) {
		k[i] = attn_rand(&x);
		v[i] = attn_rand(&x);
	}
	for (uint32_t i = 0; i < ATTN_Q_HEADS * itest_fmt.head_dim; i++)
		q[i] = 2.0f * attn_rand(&x);
}

/* the kernels' view of the client's pool: struct kvmm_fmt for its page size; 0 or -1 */
static int attn_fmt(kvmm_client_t *c, struct kvmm_fmt *f)
{
	if (kvmm_fmt_init(f, &itest_fmt, kvmm_page_size(c)))
		return -1;
	return f->tokens_per_page == kvmm_tokens_per_page(c) ? 0 : -1;
}

static void *dev_copy(const void *h, size_t n)
{
	void *d = NULL;

	if (kvmm_cuda_malloc(&d, n))
		return NULL;
	if (h && kvmm_cuda_memcpy_htod(d, h, n)) {
		kvmm_cuda_free(d);
		return NULL;
	}
	return d;
}

/*
 * The CPU reference for one sequence of *ctx tokens (K and V rows k, v): host pages 0 .. nb - 1
 * (returned, calloc'd; NULL on failure) written by the CPU reshape_and_cache through slots,
 * and batch b over them with block table local (nb entries); slots and local are the caller's.
 */
static char *ref_batch(const struct kvmm_fmt *f, uint32_t nb, const uint32_t *ctx, const float *k,
		       const float *v, int64_t *slots, int32_t *local, struct kvmm_attn_batch *b)
{
	char *host = calloc(nb, f->page_size);

	if (!host)
		return NULL;
	for (uint32_t t = 0; t < *ctx; t++)
		slots[t] =
			kvmm_kv_slot(f, (int32_t)(t / f->tokens_per_page), t % f->tokens_per_page);
	for (uint32_t p = 0; p < nb; p++)
		local[p] = (int32_t)p;
	memset(b, 0, sizeof(*b));
	b->kv = (struct kvmm_kv_pages){host, f, ATTN_LAYER, nb};
	b->nr_seqs = 1;
	b->num_q_heads = ATTN_Q_HEADS;
	b->max_blocks = nb;
	b->block_tables = local;
	b->ctx_lens = ctx;
	if (kvmm_cpu_reshape_and_cache(&b->kv, *ctx, slots, k, v)) {
		free(host);
		return NULL;
	}
	return host;
}

/* 0 when the GPU path's n results are the CPU's within 1e-4 (relative), else -1 and why */
static int agree(const float *got, const float *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabsf(got[i] - want[i]) <= 1e-4f * (1.0f + fabsf(want[i])))) {
			fprintf(stderr, "%s element %zu: GPU path %g, CPU %g\n", what, i, got[i],
				want[i]);
			return -1;
		}
	return 0;
}

/*
 * Decode the shared prompt (its frames in table) on the GPU path over this client's mapping
 * and on the CPU over pages built here from the same inputs; 0 when they agree.
 */
static int attn_decode_check(kvmm_client_t *c, const int32_t *table)
{
	const uint32_t tpp = kvmm_tokens_per_page(c), ntok = tpp * ATTN_PAGES;
	const uint32_t nelem = itest_fmt.kv_heads * itest_fmt.head_dim;
	const size_t qn = (size_t)ATTN_Q_HEADS * itest_fmt.head_dim;
	struct kvmm_attn_batch b;
	struct kvmm_fmt f;
	int32_t local[ATTN_PAGES];
	int64_t *slots = malloc(sizeof(int64_t) * ntok);
	float *k = malloc(sizeof(float) * ntok * nelem), *v = malloc(sizeof(float) * ntok * nelem);
	float q[ATTN_Q_HEADS * 256], want[ATTN_Q_HEADS * 256], got[ATTN_Q_HEADS * 256];
	char *host = NULL;
	void *dtab = NULL, *dctx = NULL, *dq = NULL, *dout = NULL;
	int ret = -1;

	if (!slots || !k || !v || itest_fmt.head_dim > 256 || attn_fmt(c, &f))
		goto out;
	attn_inputs(ntok, k, v, q);
	/* the reference: the same K and V in host pages 0 .. ATTN_PAGES - 1 */
	host = ref_batch(&f, ATTN_PAGES, &ntok, k, v, slots, local, &b);
	if (!host || kvmm_cpu_paged_decode(&b, q, want))
		goto out;
	/* the GPU path over the daemon's frames, through this process's mapping */
	dtab = dev_copy(table, sizeof(int32_t) * ATTN_PAGES);
	dctx = dev_copy(&ntok, sizeof(ntok));
	dq = dev_copy(q, sizeof(float) * qn);
	dout = dev_copy(NULL, sizeof(float) * qn);
	if (!dtab || !dctx || !dq || !dout)
		goto out;
	b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)kvmm_frame_devptr(c, 0), &f, ATTN_LAYER,
				      kvmm_nr_frames(c)};
	b.block_tables = dtab;
	b.ctx_lens = dctx;
	if (kvmm_cuda_paged_decode(&b, dq, dout, NULL) || kvmm_cuda_sync() ||
	    kvmm_cuda_memcpy_dtoh(got, dout, sizeof(float) * qn))
		goto out;
	ret = agree(got, want, qn, "decode");
out:
	kvmm_cuda_free(dtab);
	kvmm_cuda_free(dctx);
	kvmm_cuda_free(dq);
	kvmm_cuda_free(dout);
	free(host);
	free(slots);
	free(k);
	free(v);
	return ret;
}

/*
 * The second agent's own question over the shared prompt: append new tokens to seq (which
 * holds the prompt, tpp * ATTN_PAGES tokens, on shared frames), write their K and V into the
 * sequence's new private pages with the CUDA reshape_and_cache kernel, and prefill them over
 * the whole context with the CUDA prefill kernel; the CPU does the same over host pages built
 * from the same inputs.  0 when they agree.
 */
static int attn_prefill_check(kvmm_client_t *c, uint64_t seq)
{
	const uint32_t tpp = kvmm_tokens_per_page(c), np = tpp * ATTN_PAGES, nn = tpp + 3;
	const uint32_t ctx = np + nn, nelem = itest_fmt.kv_heads * itest_fmt.head_dim;
	const uint32_t nb = (ctx + tpp - 1) / tpp;
	const size_t qn = (size_t)nn * ATTN_Q_HEADS * itest_fmt.head_dim;
	struct kvmm_attn_batch b;
	struct kvmm_fmt f;
	uint32_t *ids = malloc(sizeof(uint32_t) * nn);
	uint64_t len = 0;
	int32_t table[MAXB], local[MAXB];
	int64_t *slots = malloc(sizeof(int64_t) * ctx), *dslots = NULL;
	float *k = malloc(sizeof(float) * ctx * nelem), *v = malloc(sizeof(float) * ctx * nelem);
	float *q = malloc(sizeof(float) * qn), *want = malloc(sizeof(float) * qn);
	float *got = malloc(sizeof(float) * qn), qd[ATTN_Q_HEADS * 256];
	void *dk = NULL, *dv = NULL, *dtab = NULL, *dctx = NULL, *dql = NULL, *dq = NULL;
	void *dout = NULL;
	char *host = NULL;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	int ret = -1;

	if (!ids || !slots || !k || !v || !q || !want || !got || nb >= MAXB || attn_fmt(c, &f))
		goto out;
	/* the prompt's rows as the first client wrote them, then the new ones */
	attn_inputs(np, k, v, qd);
	for (uint64_t i = (uint64_t)np * nelem; i < (uint64_t)ctx * nelem; i++) {
		k[i] = attn_rand(&x);
		v[i] = attn_rand(&x);
	}
	for (size_t i = 0; i < qn; i++)
		q[i] = 2.0f * attn_rand(&x);
	itest_tokens(ids, nn, 11);
	if (kvmm_seq_append(c, seq, ids, nn, &len) || len != ctx ||
	    kvmm_block_table(c, &seq, 1, table, MAXB) || table[nb - 1] == KVMM_BLOCK_NONE ||
	    table[nb] != KVMM_BLOCK_NONE)
		goto out;
	/* the reference: every row in host pages 0 .. nb - 1 */
	host = ref_batch(&f, nb, &ctx, k, v, slots, local, &b);
	if (!host)
		goto out;
	b.q_lens = &nn;
	if (kvmm_cpu_paged_prefill(&b, q, want))
		goto out;
	/* the GPU path: the new rows into the daemon's frames, then prefill over all of them */
	for (uint32_t t = np; t < ctx; t++)
		slots[t - np] = kvmm_kv_slot(&f, table[t / tpp], t % tpp);
	dslots = dev_copy(slots, sizeof(int64_t) * nn);
	dk = dev_copy(k + (size_t)np * nelem, sizeof(float) * nn * nelem);
	dv = dev_copy(v + (size_t)np * nelem, sizeof(float) * nn * nelem);
	dtab = dev_copy(table, sizeof(int32_t) * nb);
	dctx = dev_copy(&ctx, sizeof(ctx));
	dql = dev_copy(&nn, sizeof(nn));
	dq = dev_copy(q, sizeof(float) * qn);
	dout = dev_copy(NULL, sizeof(float) * qn);
	if (!dslots || !dk || !dv || !dtab || !dctx || !dql || !dq || !dout)
		goto out;
	b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)kvmm_frame_devptr(c, 0), &f, ATTN_LAYER,
				      kvmm_nr_frames(c)};
	b.block_tables = dtab;
	b.ctx_lens = dctx;
	b.q_lens = dql;
	if (kvmm_cuda_reshape_and_cache(&b.kv, nn, dslots, dk, dv, NULL) ||
	    kvmm_cuda_paged_prefill(&b, nn, dq, dout, NULL) || kvmm_cuda_sync() ||
	    kvmm_cuda_memcpy_dtoh(got, dout, sizeof(float) * qn))
		goto out;
	ret = agree(got, want, qn, "prefill");
out:
	kvmm_cuda_free(dslots);
	kvmm_cuda_free(dk);
	kvmm_cuda_free(dv);
	kvmm_cuda_free(dtab);
	kvmm_cuda_free(dctx);
	kvmm_cuda_free(dql);
	kvmm_cuda_free(dq);
	kvmm_cuda_free(dout);
	free(host);
	free(ids);
	free(slots);
	free(k);
	free(v);
	free(q);
	free(want);
	free(got);
	return ret;
}

/* ---- the other processes ---------------------------------------------------------------------- */

/* look the attention test's prompt up (frames @frames), decode over it, prefill after it */
static int decoder(const char *sock, int n, char **frames)
{
	uint32_t tpp, tokens[ATTN_PAGES * 256];
	int32_t table[MAXB];
	uint64_t seq, hit = 0;
	kvmm_client_t *c;
	int ret;

	if (kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c))
		return 20;
	if (kvmm_cuda_init(0)) {
		fprintf(stderr, "decoder: %s\n", kvmm_cuda_why());
		return 21;
	}
	tpp = kvmm_tokens_per_page(c);
	if (n != ATTN_PAGES || tpp * ATTN_PAGES > sizeof(tokens) / sizeof(tokens[0]))
		return 22;
	itest_tokens(tokens, tpp * ATTN_PAGES, 7);
	if (kvmm_seq_create(c, 0, &seq) ||
	    kvmm_prefix_lookup(c, seq, tokens, tpp * ATTN_PAGES, &hit) || hit != tpp * ATTN_PAGES ||
	    kvmm_block_table(c, &seq, 1, table, MAXB))
		return 23;
	for (int b = 0; b < n; b++)
		if (table[b] != atoi(frames[b]))
			return 24;
	ret = attn_decode_check(c, table) ? 25 : 0;
	/* then a question of its own over the shared prompt */
	if (!ret && attn_prefill_check(c, seq))
		ret = 27;
	if (kvmm_seq_free(c, seq))
		return 26;
	kvmm_cuda_fini();
	kvmm_detach(c);
	return ret;
}

/* look the prompt up, check the frames are @frames and hold the first client's bytes */
static int reader(const char *sock, int n, char **frames)
{
	const struct kvmm_cuda_drv *drv;
	uint32_t tpp, tokens[PROMPT_PAGES * 64];
	int32_t table[MAXB];
	uint64_t seq, hit = 0, tag;
	kvmm_client_t *c;

	if (kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c)) {
		fprintf(stderr, "reader: attach: %s\n", kvmm_cuda_map_why());
		return 10;
	}
	/* a group member's copy of the prompt has bytes of its own (test_group_visible) */
	tag = PROMPT_TAG + 1000 * kvmm_device_index(c);
	drv = kvmm_cuda_drv_load();
	tpp = kvmm_tokens_per_page(c);
	if (!drv || n != PROMPT_PAGES || tpp * PROMPT_PAGES > sizeof(tokens) / sizeof(tokens[0]))
		return 11;
	itest_tokens(tokens, tpp * PROMPT_PAGES, 1);
	if (kvmm_seq_create(c, 0, &seq) ||
	    kvmm_prefix_lookup(c, seq, tokens, tpp * PROMPT_PAGES, &hit) ||
	    hit != tpp * PROMPT_PAGES)
		return 12;
	if (kvmm_block_table(c, &seq, 1, table, MAXB))
		return 13;
	for (int b = 0; b < n; b++) {
		if (table[b] != atoi(frames[b]))
			return 14;
		if (page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[b]), kvmm_page_size(c), tag,
			    (uint32_t)b, false))
			return 15;
	}
	if (kvmm_seq_free(c, seq))
		return 16;
	kvmm_detach(c);
	return 0;
}

/* take pages, write them, say so on stdout, wait to be killed */
static int holder(const char *sock)
{
	uint32_t tokens[32 * 64];
	int32_t table[MAXB];
	uint64_t seq;
	kvmm_client_t *c;
	uint32_t tpp;

	if (kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c))
		return 10;
	tpp = kvmm_tokens_per_page(c);
	itest_tokens(tokens, 32 * tpp, 9);
	if (kvmm_seq_create(c, 0, &seq) || kvmm_seq_append(c, seq, tokens, 32 * tpp, NULL) ||
	    kvmm_block_table(c, &seq, 1, table, MAXB))
		return 11;
	for (uint32_t b = 0; b < 32; b++)
		if (page_io(kvmm_cuda_drv_load(), kvmm_frame_devptr(c, (uint32_t)table[b]),
			    kvmm_page_size(c), 9, b, true))
			return 12;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

#define RO_TAG 55 /* the bytes and tokens of the --sealer's page */

/*
 * Copy one page into @frame, a page of another client this process was never given: 0 when
 * the copy failed in this process as a GPU write into read-only memory does.
 */
static int writer(const char *sock, uint32_t frame)
{
	const struct kvmm_cuda_drv *drv;
	kvmm_client_t *c;
	kvmm_cu_result r;
	uint8_t *buf;

	if (kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c))
		return 30;
	if (kvmm_write_protected(c) != 1)
		return 31;
	drv = kvmm_cuda_drv_load();
	buf = malloc(kvmm_page_size(c));
	if (!drv || !buf)
		return 32;
	memset(buf, 0x11, kvmm_page_size(c));
	r = drv->cuMemcpyHtoD(kvmm_frame_devptr(c, frame), buf, kvmm_page_size(c));
	free(buf);
	/* the context is lost after the fault: leave without detaching (the daemon cleans up) */
	return r == KVMM_CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : r ? 33 : 34;
}

/*
 * A page of its own: written (allowed), sealed, written again (refused in this process); the
 * page is left in the prefix cache with its first bytes (RO_TAG) for the test to read.
 */
static int sealer(const char *sock)
{
	const struct kvmm_cuda_drv *drv;
	uint32_t tpp, *tokens;
	kvmm_client_t *c;
	int32_t table[2];
	uint64_t seq;
	uint8_t *buf;
	kvmm_cu_result r;

	if (kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c))
		return 40;
	drv = kvmm_cuda_drv_load();
	tpp = kvmm_tokens_per_page(c);
	tokens = malloc(sizeof(*tokens) * tpp);
	buf = malloc(kvmm_page_size(c));
	if (!drv || !tokens || !buf || kvmm_write_protected(c) != 1)
		return 41;
	itest_tokens(tokens, tpp, RO_TAG);
	if (kvmm_seq_create(c, 0, &seq) || kvmm_seq_append(c, seq, tokens, tpp, NULL) ||
	    kvmm_block_table(c, &seq, 1, table, 2) || table[0] < 0)
		return 42;
	if (page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[0]), kvmm_page_size(c), RO_TAG, 0,
		    true))
		return 43; /* its own unsealed page: writable */
	if (kvmm_seal(c, seq, 0, 0))
		return 44;
	memset(buf, 0x22, kvmm_page_size(c));
	r = drv->cuMemcpyHtoD(kvmm_frame_devptr(c, (uint32_t)table[0]), buf, kvmm_page_size(c));
	return r == KVMM_CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : r ? 45 : 46;
}

/* ---- the test's daemon ------------------------------------------------------------------------ */

static int setup(void **state)
{
	const char *extra[] = {"--backend", "cuda",	"--swap", sd.hostarg,
			       "--swap",    sd.filearg, NULL};
	const char *env = getenv("KVMM_FAKECUDA");

	(void)state;
	if (!itest_daemon_find(&itest_d))
		return 0;
	if (!realpath(env && env[0] ? env : "tests/fakecuda/libcuda-fake.so", fake)) {
		fprintf(stderr, "itest_cuda_fake: the fake CUDA driver is not built\n");
		return -1;
	}
	if (!realpath("/proc/self/exe", self))
		return -1;
	if (itest_swapdir_make(&sd, "itcudafake", 64, 256))
		return -1;
	snprintf(report, sizeof(report), "%s/fakecuda.report", sd.dir);
	/* this process, the daemon and every client: the fake, and its report at exit */
	setenv("KVMM_LIBCUDA", fake, 1);
	setenv("KVMM_FAKECUDA_REPORT", report, 1);
	setenv("KVMM_FAKECUDA_SIMT", "1", 1); /* the clients' kernels run */
	unsetenv("KVMM_CUDA_DEVICE");
	if (itest_daemon_start(&itest_d, extra))
		return -1;
	daemon_pid = itest_d.pid;
	itest_have_daemon = true;
	return 0;
}

/* the daemon's line of the fake's report: every live object gone, no race */
static int check_report(void)
{
	char line[512], want[32];
	int found = 0, bad = 0;
	FILE *f = fopen(report, "r");

	if (!f) {
		fprintf(stderr, "itest_cuda_fake: no report from the fake at %s\n", report);
		return -1;
	}
	snprintf(want, sizeof(want), "pid=%d ", (int)daemon_pid);
	while (fgets(line, sizeof(line), f)) {
		static const char *const zero[] = {
			" allocs=0 ",	" handles=0 ",	  " reservations=0 ",
			" mappings=0 ", " dev_allocs=0 ", " host_allocs=0 ",
			" streams=0 ",	" events=0 ",	  " ctx_refs=0 ",
			" pending=0 ",	" races=0 ",	  " pageable_async=0 "};

		if (!strstr(line, want))
			continue;
		found = 1;
		for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
			if (!strstr(line, zero[i]))
				bad = 1;
		if (bad)
			fprintf(stderr, "itest_cuda_fake: kvmmd left: %s", line);
	}
	fclose(f);
	return found && !bad ? 0 : -1;
}

static int teardown(void **state)
{
	int ret = 0;

	(void)state;
	if (itest_have_daemon) {
		ret = itest_daemon_stop(&itest_d) == 0 ? 0 : -1;
		if (ret)
			fprintf(stderr, "itest_cuda_fake: kvmmd did not exit 0 on SIGTERM\n");
		else if (check_report())
			ret = -1;
		if (ret)
			itest_daemon_dump_log(&itest_d);
	}
	itest_have_daemon = false;
	if (report[0])
		unlink(report);
	itest_swapdir_remove(&sd);
	return ret;
}

static kvmm_client_t *attach(void)
{
	kvmm_client_t *c = NULL;
	int err = kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c);

	if (err)
		fail_msg("attach: %s (%s)", kvmm_strerror(err), kvmm_cuda_map_why());
	return c;
}

static struct kvmm_fakecuda_stats fake_stats(void)
{
	struct kvmm_fakecuda_stats s;
	void *lib = dlopen(fake, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	kvmm_fakecuda_stats_fn fn;

	assert_non_null(lib);
	fn = (kvmm_fakecuda_stats_fn)dlsym(lib, KVMM_FAKECUDA_STATS);
	assert_non_null(fn);
	fn(&s);
	dlclose(lib);
	return s;
}

/* Run this program again with @argv (argv[0]: self); its exit status. */
static int run_self(char *const *argv)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		execv(self, argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/*
 * Run this program again as a second client (role "--reader" or "--decoder") that must find
 * the prompt in frames[0..n); its exit status (0: all it checked was right).
 */
static int exec_client(const char *role, const int32_t *frames, int n)
{
	char num[MAXB][16], nstr[16];
	char *argv[5 + MAXB];

	assert_true(n <= MAXB);
	argv[0] = self;
	argv[1] = (char *)role;
	argv[2] = itest_d.sock;
	snprintf(nstr, sizeof(nstr), "%d", n);
	argv[3] = nstr;
	for (int b = 0; b < n; b++) {
		snprintf(num[b], sizeof(num[b]), "%d", frames[b]);
		argv[4 + b] = num[b];
	}
	argv[4 + n] = NULL;
	return run_self(argv);
}

/* ---- tests ------------------------------------------------------------------------------------ */

/* the pool is device memory: no host address, device pointers by the frame rule */
static void test_attach_devptr(void **state)
{
	kvmm_client_t *c;
	uint64_t ps;

	(void)state;
	itest_need_daemon();
	c = attach();
	ps = kvmm_page_size(c);
	errno = 0;
	assert_null(kvmm_frame_addr(c, 3));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_not_equal(kvmm_frame_devptr(c, 0), 0);
	assert_int_equal(kvmm_frame_devptr(c, 37), kvmm_frame_devptr(c, 0) + 37 * ps);
	assert_int_equal(kvmm_frame_devptr(c, kvmm_nr_frames(c)), 0);
	assert_true(fake_stats().mappings >= 1);
	/* 16 KiB frames are smaller than a 2 MiB mapping granule: no read-only frames */
	assert_int_equal(kvmm_write_protected(c), 0);
	kvmm_detach(c);
	/* detach unmapped everything this process had of the pool */
	assert_int_equal(fake_stats().mappings, 0);
	assert_int_equal(fake_stats().reservations, 0);
	assert_int_equal(fake_stats().allocs, 0);
}

/* KV written through one client's mapping, read by another process through its own */
static void test_share_between_processes(void **state)
{
	const struct kvmm_cuda_drv *drv;
	uint32_t tpp, tokens[PROMPT_PAGES * 64];
	int32_t table[MAXB];
	kvmm_client_t *c;
	uint64_t seq;

	(void)state;
	itest_need_daemon();
	c = attach();
	drv = kvmm_cuda_drv_load();
	assert_non_null(drv);
	tpp = kvmm_tokens_per_page(c);
	assert_true(tpp * PROMPT_PAGES <= sizeof(tokens) / sizeof(tokens[0]));
	itest_tokens(tokens, tpp * PROMPT_PAGES, 1);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, tpp * PROMPT_PAGES, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, MAXB), 0);
	for (uint32_t b = 0; b < PROMPT_PAGES; b++)
		assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[b]),
					 kvmm_page_size(c), PROMPT_TAG, b, true),
				 0);
	assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
	assert_int_equal(exec_client("--reader", table, PROMPT_PAGES), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

/* the prompt's ATTN_PAGES frames (table) through this client's device mapping, into dst */
static void read_frames(kvmm_client_t *c, const int32_t *table, char *dst)
{
	uint64_t ps = kvmm_page_size(c);

	for (uint32_t p = 0; p < ATTN_PAGES; p++)
		assert_int_equal(
			kvmm_cuda_memcpy_dtoh(
				dst + p * ps,
				(void *)(uintptr_t)kvmm_frame_devptr(c, (uint32_t)table[p]), ps),
			0);
}

/*
 * An engine's attention over the daemon's pool, on the GPU path (the kernels run on the fake
 * driver's SIMT emulator): this process writes a prompt's K and V into the frames kvmmd gave
 * it with the CUDA reshape_and_cache kernel (bit for bit what the CPU kernel writes) and seals
 * the prompt; a second, exec'd process looks it up, gets the same frames and decodes over
 * them through its own mapping with the CUDA decode kernel, matching the CPU decode of the
 * same inputs; then it appends its own question after the shared prompt and prefills it with
 * the CUDA kernels (attn_prefill_check), matching the CPU prefill.
 */
static void test_attention_over_shared_pool(void **state)
{
	uint32_t tpp, ntok, nelem, tokens[ATTN_PAGES * 256];
	int32_t table[MAXB];
	struct kvmm_kv_pages kv;
	struct kvmm_fmt f;
	kvmm_client_t *c;
	int64_t *slots, *dslots;
	float *k, *v, *dk, *dv, q[ATTN_Q_HEADS * 256];
	char *before, *after;
	uint64_t seq, ps;

	(void)state;
	itest_need_daemon();
	c = attach();
	assert_int_equal(kvmm_cuda_init(0), 0);
	assert_int_equal(attn_fmt(c, &f), 0);
	tpp = kvmm_tokens_per_page(c);
	ps = kvmm_page_size(c);
	ntok = tpp * ATTN_PAGES;
	nelem = itest_fmt.kv_heads * itest_fmt.head_dim;
	assert_true(ntok <= sizeof(tokens) / sizeof(tokens[0]));
	itest_tokens(tokens, ntok, 7);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, ntok, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, MAXB), 0);

	/* K and V through the CUDA kernel into the daemon's frames */
	slots = malloc(sizeof(int64_t) * ntok);
	k = malloc(sizeof(float) * ntok * nelem);
	v = malloc(sizeof(float) * ntok * nelem);
	before = malloc(ATTN_PAGES * ps);
	after = malloc(ATTN_PAGES * ps);
	assert_true(slots && k && v && before && after);
	attn_inputs(ntok, k, v, q);
	for (uint32_t t = 0; t < ntok; t++)
		slots[t] = kvmm_kv_slot(&f, table[t / tpp], t % tpp);
	read_frames(c, table, before);
	dslots = dev_copy(slots, sizeof(int64_t) * ntok);
	dk = dev_copy(k, sizeof(float) * ntok * nelem);
	dv = dev_copy(v, sizeof(float) * ntok * nelem);
	assert_true(dslots && dk && dv);
	kv = (struct kvmm_kv_pages){(void *)(uintptr_t)kvmm_frame_devptr(c, 0), &f, ATTN_LAYER,
				    kvmm_nr_frames(c)};
	assert_int_equal(kvmm_cuda_reshape_and_cache(&kv, ntok, dslots, dk, dv, NULL), 0);
	assert_int_equal(kvmm_cuda_sync(), 0);
	read_frames(c, table, after);
	/* what the CPU kernel writes over the same bytes, in local frames 0 .. */
	for (uint32_t t = 0; t < ntok; t++)
		slots[t] = kvmm_kv_slot(&f, (int32_t)(t / tpp), t % tpp);
	kv = (struct kvmm_kv_pages){before, &f, ATTN_LAYER, ATTN_PAGES};
	assert_int_equal(kvmm_cpu_reshape_and_cache(&kv, ntok, slots, k, v), 0);
	assert_memory_equal(after, before, ATTN_PAGES * ps);
	kvmm_cuda_free(dslots);
	kvmm_cuda_free(dk);
	kvmm_cuda_free(dv);
	/* this process's decode agrees too */
	assert_int_equal(attn_decode_check(c, table), 0);
	assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
	assert_int_equal(exec_client("--decoder", table, ATTN_PAGES), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	free(slots);
	free(k);
	free(v);
	free(before);
	free(after);
	kvmm_cuda_fini();
	kvmm_detach(c);
}

/* PIN, then write or compare every page of seq through the device mapping, then UNPIN */
static void touch(kvmm_client_t *c, uint64_t seq, uint64_t tag, bool write)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	int32_t table[MAXB];

	assert_int_equal(kvmm_pin(c, &seq, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, MAXB), 0);
	for (uint32_t b = 0; b < MAXB && table[b] != KVMM_BLOCK_NONE; b++)
		if (page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[b]), kvmm_page_size(c), tag,
			    b, write))
			fail_msg("seq %llu block %u differs", (unsigned long long)seq, b);
	assert_int_equal(kvmm_unpin(c, &seq, 1, NULL), 0);
}

/* three sequences of 120 pages in a 256-frame pool: swapped out and in, identical */
static void test_swap_roundtrip(void **state)
{
	uint32_t tpp, n, *t;
	kvmm_client_t *c;
	uint64_t s[3];

	(void)state;
	itest_need_daemon();
	c = attach();
	tpp = kvmm_tokens_per_page(c);
	n = 120 * tpp;
	t = malloc(n * sizeof(*t));
	assert_non_null(t);
	for (int i = 0; i < 3; i++) {
		itest_tokens(t, n, 100 + (unsigned int)i);
		assert_int_equal(kvmm_seq_create(c, 0, &s[i]), 0);
		assert_int_equal(kvmm_seq_append(c, s[i], t, n, NULL), 0);
		touch(c, s[i], 1000 + (uint64_t)i, true);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3; i++)
			touch(c, s[i], 1000 + (uint64_t)i, false);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "seq_swapout") > 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "pswpin") > 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(kvmm_seq_free(c, s[i]), 0);
	free(t);
	kvmm_detach(c);
}

static int count_daemon_fds(void)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)daemon_pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

/*
 * The daemon's descriptors once it has closed the admin connections this test just made (it
 * does so when it sees the hangup): the count, stable over a few samples.
 */
static int settled_daemon_fds(void)
{
	int last = -1, same = 0;

	for (int i = 0; i < 100 && same < 3; i++) {
		int n = count_daemon_fds();

		same = n == last ? same + 1 : 0;
		last = n;
		itest_sleep_ms(20);
	}
	return last;
}

/* a client killed with pages in use: its frames, session and descriptors all come back */
static void test_kill9_leaks_nothing(void **state)
{
	long long free_before;
	int fds_before, pipefd[2], tries;
	char buf[8] = "";
	pid_t pid;

	(void)state;
	itest_need_daemon();
	free_before = itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesFree");
	fds_before = settled_daemon_fds();
	assert_true(free_before > 0 && fds_before > 0);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* a failed check below must not leave it waiting forever */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execl(self, self, "--holder", itest_d.sock, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	assert_true(read(pipefd[0], buf, sizeof(buf) - 1) > 0);
	close(pipefd[0]);
	assert_string_equal(buf, "ready\n");
	assert_true(itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesFree") <= free_before - 32);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	for (tries = 0; tries < 50; tries++) {
		if (itest_admin_value(&itest_d, KVMM_OP_STATUS, "Clients") == 1 &&
		    itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesFree") == free_before &&
		    settled_daemon_fds() == fds_before)
			break;
		itest_sleep_ms(100);
	}
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "Clients"), 1);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "FramesFree"), free_before);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "InvariantFailures"), 0);
	assert_int_equal(settled_daemon_fds(), fds_before);
	assert_true(itest_daemon_alive(&itest_d));
}

/* ---- a tensor-parallel group: the pool mirrored on two of the fake's three GPUs ---------------- */

#define GROUP_DEVICES "2,0" /* member 0 on ordinal 2, member 1 on ordinal 0; ordinal 1 outside */

static int setup_group(void **state)
{
	const char *extra[] = {"--backend", "cuda",   "--device", GROUP_DEVICES, "--swap",
			       sd.hostarg,  "--swap", sd.filearg, NULL};
	struct rlimit rl, low;
	int ret;

	(void)state;
	if (!itest_daemon_find(&itest_d))
		return 0;
	/* slots of two devices' frames: the same number of frames as the first daemon's */
	if (itest_swapdir_make(&sd, "itcudatp", 2 * 64, 2 * 256))
		return -1;
	snprintf(report, sizeof(report), "%s/fakecuda.report", sd.dir);
	setenv("KVMM_FAKECUDA_REPORT", report, 1);
	/* started with a low soft open-file limit, which it must raise (test_group_attach) */
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -1;
	low = rl;
	if (low.rlim_max > 256)
		low.rlim_cur = 256;
	if (setrlimit(RLIMIT_NOFILE, &low))
		return -1;
	ret = itest_daemon_start(&itest_d, extra);
	if (setrlimit(RLIMIT_NOFILE, &rl) || ret)
		return -1;
	daemon_pid = itest_d.pid;
	itest_have_daemon = true;
	return 0;
}

/* a client on CUDA device @ordinal of this process */
static kvmm_client_t *attach_on(int ordinal)
{
	char dev[16];
	kvmm_client_t *c;

	snprintf(dev, sizeof(dev), "%d", ordinal);
	setenv("KVMM_CUDA_DEVICE", dev, 1);
	c = attach();
	unsetenv("KVMM_CUDA_DEVICE");
	return c;
}

/* page_io on device @ordinal's primary context (each member's memory is its device's) */
static int member_io(kvmm_client_t *c, int ordinal, uint32_t frame, uint64_t tag, uint32_t b,
		     bool write)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	int ret;

	if (kvmm_cuda_drv_get_device(ordinal, &dev, &ctx) || drv->cuCtxSetCurrent(ctx))
		return -1;
	ret = page_io(drv, kvmm_frame_devptr(c, frame), kvmm_page_size(c), tag, b, write);
	kvmm_cuda_drv_put_device(dev);
	return ret;
}

/* write (or check) blocks [from, to) of @seq (table @t) on both members: tags tag, tag + 1000 */
static void group_io(kvmm_client_t *m0, kvmm_client_t *m1, const int32_t *t, uint32_t from,
		     uint32_t to, uint64_t tag, bool write)
{
	for (uint32_t b = from; b < to; b++) {
		if (member_io(m0, 2, (uint32_t)t[b], tag, b, write))
			fail_msg("member 0 (device 2): block %u frame %d differs", b, t[b]);
		if (member_io(m1, 0, (uint32_t)t[b], tag + 1000, b, write))
			fail_msg("member 1 (device 0): block %u frame %d differs", b, t[b]);
	}
}

/* the daemon's answer to admin verb @op has both strings in it */
static void admin_says(unsigned int op, const char *a, const char *b)
{
	char *text = NULL;

	assert_int_equal(itest_admin_text(&itest_d, op, &text), 0);
	if (!strstr(text, a) || !strstr(text, b))
		fail_msg("%s: no '%s' or no '%s' in:\n%s", kvmm_op_name(op), a, b, text);
	free(text);
}

/* a descriptor per chunk per device: kvmmd took the hard open-file limit (setup_group) */
static void nofile_raised(void)
{
	char path[64], line[256];
	bool seen = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)daemon_pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char soft[32], hard[32];

		if (sscanf(line, "Max open files %31s %31s", soft, hard) == 2) {
			assert_string_equal(soft, hard);
			seen = true;
		}
	}
	fclose(f);
	assert_true(seen);
}

/* touch() for a group: PIN (faulting seq in), write or check its @nb blocks on both, UNPIN */
static void group_touch(kvmm_client_t *m0, kvmm_client_t *m1, uint64_t seq, uint32_t nb,
			uint64_t tag, bool write)
{
	int32_t t[MAXB];

	assert_int_equal(kvmm_pin(m0, &seq, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(m0, &seq, 1, t, MAXB), 0);
	group_io(m0, m1, t, 0, nb, tag, write);
	assert_int_equal(kvmm_unpin(m0, &seq, 1, NULL), 0);
}

/* each member's client maps its own device's copy; a GPU outside the group is refused */
static void test_group_attach(void **state)
{
	kvmm_client_t *m0, *m1, *c = NULL;
	int err;

	(void)state;
	itest_need_daemon();
	m0 = attach_on(2);
	m1 = attach_on(0);
	assert_int_equal(kvmm_nr_devices(m0), 2);
	assert_int_equal(kvmm_nr_devices(m1), 2);
	assert_int_equal(kvmm_device_index(m0), 0);
	assert_int_equal(kvmm_device_index(m1), 1);
	assert_int_equal(kvmm_page_size(m0), ITEST_PAGE_SIZE);
	/* a scheduler with no device of its own: allocates, maps nothing */
	{
		kvmm_client_t *sched;
		uint32_t tok[64];
		int32_t t[4];
		uint64_t seq;

		setenv("KVMM_CUDA_DEVICE", "none", 1);
		sched = attach();
		unsetenv("KVMM_CUDA_DEVICE");
		assert_int_equal(kvmm_device_index(sched), KVMM_DEVICE_NONE);
		assert_int_equal(kvmm_nr_devices(sched), 2);
		assert_int_equal(kvmm_frame_devptr(sched, 0), 0);
		itest_tokens(tok, 64, 77);
		assert_int_equal(kvmm_seq_create(sched, 0, &seq), 0);
		assert_int_equal(kvmm_seq_append(sched, seq, tok, 64, NULL), 0);
		assert_int_equal(kvmm_block_table(sched, &seq, 1, t, 4), 0);
		assert_true(t[0] >= 0 && (uint32_t)t[0] < kvmm_nr_frames(m0));
		kvmm_detach(sched);
	}
	/* two devices' copies: two mappings of the pool in this process, apart */
	assert_int_not_equal(kvmm_frame_devptr(m0, 0), kvmm_frame_devptr(m1, 0));
	assert_int_equal(kvmm_frame_devptr(m1, 9), kvmm_frame_devptr(m1, 0) + 9 * ITEST_PAGE_SIZE);
	setenv("KVMM_CUDA_DEVICE", "1", 1);
	err = kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c);
	unsetenv("KVMM_CUDA_DEVICE");
	assert_int_equal(err, -ENODEV);
	assert_null(c);
	assert_non_null(strstr(kvmm_cuda_map_why(), "not one of the daemon's"));
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "Devices"), 2);
	/* which GPU each member is: ordinals 2 and 0, UUIDs as nvidia-smi writes them */
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "Device0"), 2);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "Device1"), 0);
	/* physical device 0's UUID: "kvmm-fakecuda-d0" (fakecuda.h) */
	admin_says(KVMM_OP_STATUS, "Device1Uuid:", "GPU-6b766d6d-2d66-616b-6563-7564612d6430");
	nofile_raised();
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "Devices"), 2);
	/* kvmmctl clients: each client's member of the group */
	admin_says(KVMM_OP_CLIENTS, " device=0", " device=1");
	kvmm_detach(m1);
	kvmm_detach(m0);
	assert_int_equal(fake_stats().mappings, 0);
}

/*
 * Copy-on-write of a shared partial page copies it on both devices; sequences larger than the
 * pool swap out and back in with each device's bytes where they were.
 */
static void test_group_cow_and_swap(void **state)
{
	kvmm_client_t *m0, *m1;
	int32_t t[MAXB], tc[MAXB];
	uint32_t tpp, n, *tok;
	uint64_t s[3], child;

	(void)state;
	itest_need_daemon();
	m0 = attach_on(2);
	m1 = attach_on(0);
	tpp = kvmm_tokens_per_page(m0);
	n = 120 * tpp;
	tok = malloc((n + 1) * sizeof(*tok));
	assert_non_null(tok);

	/* 3 blocks, the last one partial, shared with a fork: the fork's append copies it */
	itest_tokens(tok, 2 * tpp + 1, 50);
	assert_int_equal(kvmm_seq_create(m0, 0, &s[0]), 0);
	assert_int_equal(kvmm_seq_append(m0, s[0], tok, 2 * tpp + 1, NULL), 0);
	assert_int_equal(kvmm_block_table(m0, &s[0], 1, t, MAXB), 0);
	group_io(m0, m1, t, 0, 3, 500, true);
	assert_int_equal(kvmm_seq_fork(m0, s[0], KVMM_SEQ_ALL_TOKENS, &child), 0);
	assert_int_equal(kvmm_seq_append(m0, child, tok, 1, NULL), 0);
	assert_int_equal(kvmm_block_table(m0, &child, 1, tc, MAXB), 0);
	assert_int_equal(tc[0], t[0]);
	assert_int_not_equal(tc[2], t[2]);
	group_io(m0, m1, tc, 0, 3, 500, false); /* the copy has both devices' bytes */
	assert_int_equal(kvmm_seq_free(m0, child), 0);
	assert_int_equal(kvmm_seq_free(m0, s[0]), 0);

	/* 360 pages in a 256-frame pool: each sequence's turn swaps the others out */
	for (int i = 0; i < 3; i++) {
		itest_tokens(tok, n, 200 + (unsigned int)i);
		assert_int_equal(kvmm_seq_create(m0, 0, &s[i]), 0);
		assert_int_equal(kvmm_seq_append(m0, s[i], tok, n, NULL), 0);
		group_touch(m0, m1, s[i], 120, 600 + (uint64_t)i, true);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3; i++)
			group_touch(m0, m1, s[i], 120, 600 + (uint64_t)i, false);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "seq_swapout") > 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "pswpin") > 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(kvmm_seq_free(m0, s[i]), 0);
	free(tok);
	kvmm_detach(m1);
	kvmm_detach(m0);
}

/* processes that see the GPUs under other ordinals still map their own GPU's copy */
static void test_group_visible(void **state)
{
	kvmm_client_t *m0, *m1;
	uint32_t tpp, tokens[PROMPT_PAGES * 64];
	int32_t t[MAXB];
	uint64_t seq;

	(void)state;
	itest_need_daemon();
	m0 = attach_on(2);
	m1 = attach_on(0);
	tpp = kvmm_tokens_per_page(m0);
	assert_true(tpp * PROMPT_PAGES <= sizeof(tokens) / sizeof(tokens[0]));
	itest_tokens(tokens, tpp * PROMPT_PAGES, 1);
	assert_int_equal(kvmm_seq_create(m0, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(m0, seq, tokens, tpp * PROMPT_PAGES, NULL), 0);
	assert_int_equal(kvmm_block_table(m0, &seq, 1, t, MAXB), 0);
	group_io(m0, m1, t, 0, PROMPT_PAGES, PROMPT_TAG, true);
	assert_int_equal(kvmm_seal(m0, seq, 0, 0), 0);
	/* GPU 2 as ordinal 0: member 0's bytes; GPU 0 as ordinal 1: member 1's (the reader checks) */
	setenv("KVMM_FAKECUDA_VISIBLE", "2", 1);
	assert_int_equal(exec_client("--reader", t, PROMPT_PAGES), 0);
	setenv("KVMM_FAKECUDA_VISIBLE", "1,0", 1);
	setenv("KVMM_CUDA_DEVICE", "1", 1);
	assert_int_equal(exec_client("--reader", t, PROMPT_PAGES), 0);
	/* GPU 1 as ordinal 0: outside the group, the attach fails */
	setenv("KVMM_FAKECUDA_VISIBLE", "1", 1);
	unsetenv("KVMM_CUDA_DEVICE");
	assert_int_equal(exec_client("--reader", t, PROMPT_PAGES), 10);
	unsetenv("KVMM_FAKECUDA_VISIBLE");
	assert_int_equal(kvmm_seq_free(m0, seq), 0);
	kvmm_detach(m1);
	kvmm_detach(m0);
}

/* ---- read-only pages in GPU memory (a daemon with 2 MiB frames) -------------------------------- */

#define RO_FRAMES 16 /* namespace alpha's */

static int setup_ro(void **state)
{
	static char frames[16], ns_a[32];
	const char *extra[] = {"--backend",   "cuda",	       "--page-size", "2M",
			       "--frames",    frames,	       "--namespace", ns_a,
			       "--namespace", ITEST_NS_B ":8", NULL};

	(void)state;
	if (!itest_daemon_find(&itest_d))
		return 0;
	snprintf(frames, sizeof(frames), "%u", RO_FRAMES + 8);
	snprintf(ns_a, sizeof(ns_a), "%s:%u", ITEST_NS_A, RO_FRAMES);
	if (itest_swapdir_make(&sd, "itcudaro", 1, 1))
		return -1;
	snprintf(report, sizeof(report), "%s/fakecuda.report", sd.dir);
	setenv("KVMM_FAKECUDA_REPORT", report, 1);
	unsetenv("KVMM_FAKECUDA_SIMT");
	if (itest_daemon_start(&itest_d, extra))
		return -1;
	daemon_pid = itest_d.pid;
	itest_have_daemon = true;
	return 0;
}

/* run this program again as @role (with one more argument, @arg, unless NULL): its status */
static int exec_role(const char *role, const char *arg)
{
	char *argv[] = {self, (char *)role, itest_d.sock, (char *)arg, NULL};

	return run_self(argv);
}

/*
 * Each frame its own mapping, read-only but for the handle's own unsealed pages: a sealed
 * page refuses a copy from the client that sealed it and from another, and keeps its bytes.
 */
static void test_ro_sealed_pages(void **state)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	uint32_t tpp, *tokens;
	uint64_t seq, seq2, hit = 0;
	int32_t table[4], t2[4];
	kvmm_client_t *c;
	char frame[16];

	(void)state;
	itest_need_daemon();
	c = attach();
	assert_non_null(drv);
	assert_int_equal(kvmm_write_protected(c), 1);
	assert_int_equal(kvmm_page_size(c), 2u << 20);
	assert_int_equal(fake_stats().mappings, kvmm_nr_frames(c)); /* a frame a mapping */
	tpp = kvmm_tokens_per_page(c);
	tokens = malloc(sizeof(*tokens) * (3 * tpp));
	assert_non_null(tokens);
	itest_tokens(tokens, 3 * tpp, 3);
	/* two full pages and a partial one, all this handle's own: writable */
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, 2 * tpp + 5, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, 4), 0);
	for (uint32_t b = 0; b < 3; b++)
		assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[b]),
					 kvmm_page_size(c), PROMPT_TAG, b, true),
				 0);
	/* sealed: pages 0 and 1 read-only, another process cannot write them either */
	assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
	snprintf(frame, sizeof(frame), "%d", table[1]);
	assert_int_equal(exec_role("--writer", frame), 0);
	/* a page of another handle this process never saw: also refused */
	snprintf(frame, sizeof(frame), "%d", table[2]);
	assert_int_equal(exec_role("--writer", frame), 0);
	for (uint32_t b = 0; b < 3; b++)
		assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[b]),
					 kvmm_page_size(c), PROMPT_TAG, b, false),
				 0);
	/* the partial page is still ours: written again */
	assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[2]), kvmm_page_size(c),
				 PROMPT_TAG + 1, 2, true),
			 0);
	/* a client that writes its own page after sealing it faults; the cache keeps the bytes */
	assert_int_equal(exec_role("--sealer", NULL), 0);
	itest_tokens(tokens, tpp, RO_TAG);
	assert_int_equal(kvmm_seq_create(c, 0, &seq2), 0);
	assert_int_equal(kvmm_prefix_lookup(c, seq2, tokens, tpp, &hit), 0);
	assert_int_equal(hit, tpp);
	assert_int_equal(kvmm_block_table(c, &seq2, 1, t2, 4), 0);
	assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)t2[0]), kvmm_page_size(c),
				 RO_TAG, 0, false),
			 0);
	assert_int_equal(kvmm_seq_free(c, seq2), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	/* this process's context never faulted: its own copies went through */
	assert_int_equal(drv->cuCtxSynchronize(), 0);
	free(tokens);
	kvmm_detach(c);
	assert_int_equal(fake_stats().mappings, 0);
}

/* a client that attaches with @env set gets a writable pool of whole-chunk mappings */
static void ro_off_with(const char *env, const char *value)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	uint32_t tpp, *tokens;
	int32_t table[2];
	kvmm_client_t *c;
	uint64_t seq;

	setenv(env, value, 1);
	c = attach();
	unsetenv(env);
	assert_int_equal(kvmm_write_protected(c), 0);
	assert_true(fake_stats().mappings < kvmm_nr_frames(c)); /* whole chunks */
	tpp = kvmm_tokens_per_page(c);
	tokens = malloc(sizeof(*tokens) * tpp);
	assert_non_null(tokens);
	itest_tokens(tokens, tpp, 9);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, tpp, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, 2), 0);
	assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
	/* unprotected: even the sealed page takes the copy (the opt-out's price) */
	assert_int_equal(page_io(drv, kvmm_frame_devptr(c, (uint32_t)table[0]), kvmm_page_size(c),
				 9, 0, true),
			 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	free(tokens);
	kvmm_detach(c);
	assert_int_equal(fake_stats().mappings, 0);
}

/* drivers without partial mappings or read-only access, and the opt-out: a writable pool */
static void test_ro_fallback(void **state)
{
	(void)state;
	itest_need_daemon();
	ro_off_with("KVMM_FAKECUDA_MAP_WHOLE", "1");
	ro_off_with("KVMM_FAKECUDA_NO_READONLY", "1");
	ro_off_with("KVMM_WPROTECT", "0");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_devptr),
		cmocka_unit_test(test_share_between_processes),
		cmocka_unit_test(test_attention_over_shared_pool),
		cmocka_unit_test(test_swap_roundtrip),
		cmocka_unit_test(test_kill9_leaks_nothing),
	};
	const struct CMUnitTest group[] = {
		cmocka_unit_test(test_group_attach),
		cmocka_unit_test(test_group_cow_and_swap),
		cmocka_unit_test(test_group_visible),
		cmocka_unit_test(test_kill9_leaks_nothing),
	};
	const struct CMUnitTest ro[] = {
		cmocka_unit_test(test_ro_sealed_pages),
		cmocka_unit_test(test_ro_fallback),
	};

	int ret;

	if (argc >= 4 && !strcmp(argv[1], "--reader"))
		return reader(argv[2], atoi(argv[3]), argv + 4);
	if (argc >= 4 && !strcmp(argv[1], "--decoder"))
		return decoder(argv[2], atoi(argv[3]), argv + 4);
	if (argc == 3 && !strcmp(argv[1], "--holder"))
		return holder(argv[2]);
	/* these leave with the handle attached and a lost context: no exit handlers (LSan) */
	if (argc == 4 && !strcmp(argv[1], "--writer"))
		_exit(writer(argv[2], (uint32_t)atoi(argv[3])));
	if (argc == 3 && !strcmp(argv[1], "--sealer"))
		_exit(sealer(argv[2]));
	/* three fake GPUs for every process here: the first daemon uses device 0 alone */
	setenv("KVMM_FAKECUDA_DEVICES", "3", 1);
	unsetenv("KVMM_FAKECUDA_VISIBLE");
	ret = cmocka_run_group_tests_name("itest_cuda_fake", tests, setup, teardown);
	if (ret || !daemon_pid)
		return ret == 0 && !daemon_pid ? 77 : ret;
	ret = cmocka_run_group_tests_name("itest_cuda_fake_group", group, setup_group, teardown);
	if (ret)
		return ret;
	return cmocka_run_group_tests_name("itest_cuda_fake_ro", ro, setup_ro, teardown);
}
