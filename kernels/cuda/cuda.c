// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/cuda.c - the host side of the CUDA kernels: loading the embedded module into the
 * chosen device's primary context and launching its kernels.
 *
 * kvmm_cuda_init() opens the driver through drv.c (dlopen: nothing here links libcuda), makes
 * the device's primary context current, loads kvmm_cuda_fatbin with cuModuleLoadData (the
 * driver picks the SASS for the GPU or JITs the PTX) and looks up every kernel once.  Each
 * launch wrapper checks what the host can check, turns the struct kvmm_fmt and the argument
 * struct of kernels/kernels.h into the fixed-layout struct of abi.h (byte offsets computed
 * here from the struct's derived fields, the arithmetic of lib/format.c's helpers), and
 * queues the kernel on the caller's stream.  The context is made current on every call, which
 * costs a few nanoseconds and lets any thread of the engine launch.  State is process-wide:
 * one device at a time, set up and torn down under a mutex; launches read it without one
 * (init must be complete before kernels are launched, and fini only once they are done).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/abi.h"
#include "kernels/cuda/cuda_drv.h"
#include "kernels/cuda/fatbin.h"
#include "kernels/cuda/kvmm_cuda.h"

enum {
	FN_DECODE,
	FN_PREFILL,
	FN_CACHE,
	FN_PER_DTYPE,
};

static const char *const dtype_names[KVMM_DTYPE_COUNT] = {
	[KVMM_DTYPE_FP32] = "fp32",
	[KVMM_DTYPE_FP16] = "fp16",
	[KVMM_DTYPE_BF16] = "bf16",
	[KVMM_DTYPE_INT8] = "int8",
};

static const char *const fn_prefix[FN_PER_DTYPE] = {"kvmm_decode_", "kvmm_prefill_", "kvmm_cache_"};

static struct {
	pthread_mutex_t lock;
	const struct kvmm_cuda_drv *drv;
	int ordinal; /* -1: not initialized */
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	kvmm_cu_module mod;
	kvmm_cu_function fn[KVMM_DTYPE_COUNT][FN_PER_DTYPE];
	kvmm_cu_function copy, merge, pmerge; /* copy_pages, decode's and prefill's merges */
	kvmm_cu_function tc[KVMM_DTYPE_COUNT], dtc[KVMM_DTYPE_COUNT]; /* tensor cores: not fp32 */
	int sms; /* for grid sizing: a few blocks per SM keeps a copy busy */
} cu = {.lock = PTHREAD_MUTEX_INITIALIZER, .ordinal = -1};

bool kvmm_cuda_fatbin_valid(const void *image, size_t bytes)
{
	const unsigned char *p = image;
	uint32_t magic;
	uint16_t version, hdr;
	uint64_t fat;

	/* struct { u32 magic; u16 version; u16 header_size; u64 fat_size; } then fat_size bytes */
	if (!p || bytes < 16)
		return false;
	memcpy(&magic, p, 4);
	memcpy(&version, p + 4, 2);
	memcpy(&hdr, p + 6, 2);
	memcpy(&fat, p + 8, 8);
	return magic == KVMM_CUDA_FATBIN_MAGIC && version == 1 && hdr >= 16 && fat > 0 &&
	       fat <= bytes - hdr;
}

const char *kvmm_cuda_why(void)
{
	return kvmm_cuda_drv_why();
}

int kvmm_cuda_device(void)
{
	return cu.ordinal;
}

static int fail(kvmm_cu_result r, const char *what)
{
	kvmm_cuda_drv_set_why("%s: %s (CUDA error %d)", what, kvmm_cuda_result_str(r), r);
	return kvmm_cuda_errno(r);
}

static void unload_locked(void)
{
	if (cu.mod)
		cu.drv->cuModuleUnload(cu.mod);
	if (cu.ordinal >= 0)
		kvmm_cuda_drv_put_device(cu.dev);
	cu.mod = NULL;
	cu.ordinal = -1;
	memset(cu.fn, 0, sizeof(cu.fn));
	memset(cu.tc, 0, sizeof(cu.tc));
	memset(cu.dtc, 0, sizeof(cu.dtc));
	cu.copy = NULL;
	cu.merge = NULL;
	cu.pmerge = NULL;
}

static int load_module_locked(void)
{
	kvmm_cu_result r;
	char name[64];

	if (!kvmm_cuda_fatbin_valid(kvmm_cuda_fatbin, kvmm_cuda_fatbin_size)) {
		kvmm_cuda_drv_set_why("the embedded CUDA fatbin is malformed");
		return -EIO;
	}
	r = cu.drv->cuModuleLoadData(&cu.mod, kvmm_cuda_fatbin);
	if (r) {
		cu.mod = NULL;
		return fail(r, "cuModuleLoadData (kernels built for sm_80, sm_90 and PTX 9.0)");
	}
	for (unsigned int dt = KVMM_DTYPE_FP32; dt < KVMM_DTYPE_COUNT; dt++) {
		for (unsigned int k = 0; k < FN_PER_DTYPE; k++) {
			snprintf(name, sizeof(name), "%s%s", fn_prefix[k], dtype_names[dt]);
			r = cu.drv->cuModuleGetFunction(&cu.fn[dt][k], cu.mod, name);
			if (r)
				return fail(r, name);
		}
	}
	for (unsigned int dt = KVMM_DTYPE_FP16; dt < KVMM_DTYPE_COUNT; dt++) {
		snprintf(name, sizeof(name), "kvmm_prefill_tc_%s", dtype_names[dt]);
		r = cu.drv->cuModuleGetFunction(&cu.tc[dt], cu.mod, name);
		if (r)
			return fail(r, name);
		snprintf(name, sizeof(name), "kvmm_decode_tc_%s", dtype_names[dt]);
		r = cu.drv->cuModuleGetFunction(&cu.dtc[dt], cu.mod, name);
		if (r)
			return fail(r, name);
	}
	r = cu.drv->cuModuleGetFunction(&cu.copy, cu.mod, "kvmm_copy_pages");
	if (r)
		return fail(r, "kvmm_copy_pages");
	r = cu.drv->cuModuleGetFunction(&cu.merge, cu.mod, "kvmm_decode_merge");
	if (r)
		return fail(r, "kvmm_decode_merge");
	r = cu.drv->cuModuleGetFunction(&cu.pmerge, cu.mod, "kvmm_prefill_merge");
	if (r)
		return fail(r, "kvmm_prefill_merge");
	return 0;
}

int kvmm_cuda_init(int device)
{
	const char *env;
	int ret = 0;

	pthread_mutex_lock(&cu.lock);
	if (cu.ordinal >= 0) {
		ret = cu.ordinal == device ? 0 : -EBUSY;
		if (!ret)
			ret = kvmm_cuda_errno(cu.drv->cuCtxSetCurrent(cu.ctx));
		goto out_unlock;
	}
	cu.drv = kvmm_cuda_drv_load();
	if (!cu.drv) {
		ret = -ENODEV;
		goto out_unlock;
	}
	ret = kvmm_cuda_drv_get_device(device, &cu.dev, &cu.ctx);
	if (ret)
		goto out_unlock;
	cu.ordinal = device;
	ret = load_module_locked();
	if (ret) {
		unload_locked();
		goto out_unlock;
	}
	env = getenv("KVMM_CUDA_PREFILL_TC");
	if (env && *env)
		kvmm_cuda_prefill_tc = strcmp(env, "0") != 0;
	env = getenv("KVMM_CUDA_DECODE_TC");
	if (env && *env)
		kvmm_cuda_decode_tc = !strcmp(env, "0") ? 0 : !strcmp(env, "2") ? 2 : 1;
	cu.sms = 0;
	if (cu.drv->cuDeviceGetAttribute(&cu.sms, KVMM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
					 cu.dev) ||
	    cu.sms <= 0)
		cu.sms = 32;
out_unlock:
	pthread_mutex_unlock(&cu.lock);
	return ret;
}

void kvmm_cuda_fini(void)
{
	pthread_mutex_lock(&cu.lock);
	if (cu.ordinal >= 0)
		unload_locked();
	pthread_mutex_unlock(&cu.lock);
}

/* every call: the context current in this thread */
static int enter(void)
{
	kvmm_cu_result r;

	if (cu.ordinal < 0) {
		kvmm_cuda_drv_set_why("kvmm_cuda_init() has not succeeded");
		return -ENODEV;
	}
	r = cu.drv->cuCtxSetCurrent(cu.ctx);
	return r ? fail(r, "cuCtxSetCurrent") : 0;
}

static int launch_smem(kvmm_cu_function fn, unsigned int gx, unsigned int gy, unsigned int gz,
		       unsigned int threads, unsigned int smem, void *args,
		       kvmm_cuda_stream_t stream, const char *what)
{
	void *params[] = {args};
	kvmm_cu_result r;

	r = cu.drv->cuLaunchKernel(fn, gx, gy, gz, threads, 1, 1, smem,
				   (struct CUstream_st *)stream, params, NULL);
	return r ? fail(r, what) : 0;
}

static int launch(kvmm_cu_function fn, unsigned int gx, unsigned int gy, unsigned int gz,
		  unsigned int threads, void *args, kvmm_cuda_stream_t stream, const char *what)
{
	return launch_smem(fn, gx, gy, gz, threads, 0, args, stream, what);
}

/* what a kernel needs of a layer's pages, or -EINVAL / -ENOTSUP */
static int pages_args(const struct kvmm_kv_pages *kv, struct kvmm_cuda_pages *pg)
{
	const struct kvmm_fmt *f = kv ? kv->fmt : NULL;

	if (!f || !kv->base || kv->layer >= f->layers || !f->tokens_per_page || !f->kv_heads ||
	    !f->head_dim)
		return -EINVAL;
	if (f->dtype <= KVMM_DTYPE_NONE || f->dtype >= KVMM_DTYPE_COUNT ||
	    (f->dtype == KVMM_DTYPE_INT8 && (!f->quant_group || f->head_dim % f->quant_group)))
		return -EINVAL;
	memset(pg, 0, sizeof(*pg));
	pg->base = (uint64_t)(uintptr_t)kv->base;
	pg->page_size = f->page_size;
	pg->k_off = ((uint64_t)kv->layer * 2) * f->slab_bytes;
	pg->v_off = pg->k_off + f->slab_bytes;
	if (f->dtype == KVMM_DTYPE_INT8) {
		pg->ks_off = pg->k_off + f->scale_off;
		pg->vs_off = pg->v_off + f->scale_off;
	}
	pg->row_bytes = f->row_bytes;
	pg->scale_row_bytes = f->scale_row_bytes;
	pg->kv_heads = f->kv_heads;
	pg->head_dim = f->head_dim;
	pg->gs = f->dtype == KVMM_DTYPE_INT8 ? f->quant_group : f->head_dim;
	pg->tokens_per_page = f->tokens_per_page;
	pg->nr_frames = kv->nr_frames;
	return 0;
}

static int attn_args(const struct kvmm_attn_batch *b, const float *q, float *out, bool prefill,
		     struct kvmm_cuda_attn_args *a)
{
	int ret;

	if (!b)
		return -EINVAL;
	ret = pages_args(&b->kv, &a->pg);
	if (ret)
		return ret;
	if (!b->num_q_heads || b->num_q_heads % b->kv.fmt->kv_heads)
		return -EINVAL;
	if (b->nr_seqs &&
	    (!b->block_tables || !b->ctx_lens || !b->max_blocks || (prefill && !b->q_lens)))
		return -EINVAL;
	if (b->kv.fmt->head_dim > KVMM_CUDA_MAX_HEAD_DIM)
		return -ENOTSUP;
	if (b->nr_seqs > 65535) /* grid y */
		return -ENOTSUP;
	a->block_tables = (uint64_t)(uintptr_t)b->block_tables;
	a->ctx_lens = (uint64_t)(uintptr_t)b->ctx_lens;
	a->q_lens = (uint64_t)(uintptr_t)b->q_lens;
	a->q = (uint64_t)(uintptr_t)q;
	a->out = (uint64_t)(uintptr_t)out;
	a->nr_seqs = b->nr_seqs;
	a->num_q_heads = b->num_q_heads;
	a->max_blocks = b->max_blocks;
	a->scale = b->scale != 0.0f ? b->scale : 1.0f / sqrtf((float)b->kv.fmt->head_dim);
	return 0;
}

/*
 * Split-K decode planning (Documentation/kernels/cuda.md, "decode").  Shapes first, from the
 * format alone: the query heads per block (all of a KV head's group, at most GMAX; a larger
 * group is spread evenly over nqg blocks), the thread layouts (powers of 2, so the kernel
 * uses shifts), the padded shared row, and the largest tile (64 tokens down to 8) whose
 * shared memory stays within KVMM_CUDA_DECODE_SMEM_BUDGET; a block may use up to
 * KVMM_CUDA_DECODE_SMEM_MAX (48 KiB, the most without an opt-in) when even 8 tokens do not
 * fit the budget, and fewer query heads per block when not even that fits.
 * Then the splits: with resident blocks able to run at once (occupancy times SMs; 0 means do
 * not split), each (sequence, KV head, query group) gets enough splits that the grid fills
 * kvmm_cuda_decode_waves times the resident blocks, each split whole tiles and at least
 * two, over the longest context the block tables can hold (the host cannot read ctx_lens).
 */
uint32_t kvmm_cuda_decode_waves = 1;
uint32_t kvmm_cuda_prefill_tc = 1;
uint32_t kvmm_cuda_decode_tc = 1;

static uint32_t pow2_at_least(uint32_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

static uint32_t round_up16(uint64_t x)
{
	return (uint32_t)((x + 15) / 16 * 16);
}

/* the tile layout for tile tokens; false when it does not fit in limit bytes */
static bool decode_layout(struct kvmm_cuda_decode_args *d, uint32_t tile, uint32_t limit)
{
	const uint32_t dim = d->a.pg.head_dim;
	uint32_t tpt = KVMM_CUDA_DECODE_THREADS / tile, rs16 = d->chunks, slots = d->gb * d->rows;
	uint64_t stage, acc, total;

	/*
	 * Banks: a warp's 16-byte shared loads are served 8 lanes (128 bytes) at a time.  In the
	 * scores, those 8 lanes are 8 / tpt tokens times tpt consecutive chunks; their rows are
	 * row_stride apart, so with row_stride / 16 an odd multiple of tpt the 8 chunks fall in 8
	 * different 16-byte bank groups.  (tpt >= 8: one row per 8 lanes, nothing to pad.)
	 */
	if (tpt < 8)
		while (rs16 % tpt || !((rs16 / tpt) & 1))
			rs16++;
	/*
	 * The weighted sums: lpr lanes per V row, each loading vb bytes (16; int8 8), served
	 * 128 bytes (128 / vb lanes) at a time, so a phase holds r = 128 / vb / lpr rows of lu =
	 * lpr * vb / 16 units each.  Rows rs16 units apart fall in distinct bank groups when rs16
	 * has as many factors of 2 as lu; with fewer (the padding above is the scores'), rows vk =
	 * lu / 2^v2(rs16) apart do, and tile_values() gives a phase's lanes such rows.  (Counted
	 * on the emulator: Documentation/kernels/cuda.md, "Shared-memory banks".)
	 */
	d->vk = 1;
	{
		const uint32_t vb = d->ngroups ? 8 : 16, lu = d->lpr * vb / 16;

		if (d->lpr < 128 / vb && lu && __builtin_ctz(lu) > __builtin_ctz(rs16))
			d->vk = 1u << (__builtin_ctz(lu) - __builtin_ctz(rs16));
	}
	d->tile = tile;
	d->tpt = tpt;
	d->row_stride = rs16 * 16;
	d->v_soff = tile * d->row_stride;
	d->ks_soff = 2 * tile * d->row_stride;
	d->vs_soff = d->ks_soff + tile * d->ngroups * 4;
	d->ok_soff = d->vs_soff + tile * d->ngroups * 4;
	stage = round_up16((uint64_t)d->ok_soff + tile * 4);
	acc = (uint64_t)slots * dim * 4; /* the final sums, over the stages */
	total = round_up16(2 * stage > acc ? 2 * stage : acc);
	d->stage_bytes = (uint32_t)stage;
	d->q_soff = (uint32_t)total;
	total += (uint64_t)slots * d->qstride * 4;
	d->s_soff = (uint32_t)total;
	total += round_up16((uint64_t)slots * tile * 4);
	d->st_soff = (uint32_t)total;
	total += KVMM_CUDA_DECODE_ST_WORDS * 4;
	d->smem_bytes = (uint32_t)total;
	return total <= limit;
}

/*
 * The FMA kernel's slots and tile (attn.cu): the query heads per block (at most GMAX; a larger
 * group spread evenly over nqg blocks), prefill's rows (as many as fill the slots: GQA 4: 2,
 * MHA: 8; no more than max_q), then the largest tile that fits, with fewer slots when none
 * does; -ENOTSUP when not even one slot fits.
 */
static int fma_layout(struct kvmm_cuda_decode_args *d, uint32_t max_q)
{
	uint32_t tile = 0;

	d->nqg = (d->group + KVMM_CUDA_DECODE_GMAX - 1) / KVMM_CUDA_DECODE_GMAX;
	d->gb = (d->group + d->nqg - 1) / d->nqg;
	d->rows = 1;
	if (max_q) {
		d->rows = KVMM_CUDA_DECODE_GMAX / d->gb;
		d->rows = d->rows > max_q ? max_q : d->rows;
	}
	for (;;) {
		for (uint32_t t = 64; t >= 8 && !tile; t >>= 1)
			if (decode_layout(d, t, KVMM_CUDA_DECODE_SMEM_BUDGET))
				tile = t;
		if (!tile && decode_layout(d, 8, KVMM_CUDA_DECODE_SMEM_MAX))
			tile = 8;
		if (tile)
			return 0;
		/* fewer slots: prefill's rows first, then the query heads */
		if (d->rows > 1) {
			d->rows /= 2;
			continue;
		}
		if (d->gb == 1)
			return -ENOTSUP;
		d->nqg = (d->group + d->gb / 2 - 1) / (d->gb / 2);
		d->gb = (d->group + d->nqg - 1) / d->nqg;
	}
}

/*
 * The tensor-core kernels' layout (attn_tc.cu): tiles of KVMM_CUDA_TC_TILE tokens, rows an odd
 * number of 16-byte units apart (bank-conflict free fragment loads), two stages.  Prefill:
 * KVMM_CUDA_TC_SLOTS slots per block, then rows_before()'s words.  Decode (max_q 0): the gb
 * (at most 16) query heads of a KV head per block, and after the loop the four warps' states
 * over the stages (per warp 16 rows of max and sum, then 16 rows of head_dim sums).
 */
static void tc_layout(struct kvmm_cuda_decode_args *d, uint32_t max_q)
{
	const uint32_t tile = KVMM_CUDA_TC_TILE, slots = max_q ? KVMM_CUDA_TC_SLOTS : 16;
	uint32_t stage, comb;

	d->tc = 1;
	d->nqg = (d->group + slots - 1) / slots;
	d->gb = (d->group + d->nqg - 1) / d->nqg;
	d->rows = max_q ? KVMM_CUDA_TC_SLOTS / d->gb : 1;
	d->rows = d->rows > max_q && max_q ? max_q : d->rows;
	d->tile = tile;
	d->tpt = KVMM_CUDA_DECODE_THREADS / tile;
	d->row_stride = (d->chunks + 1 + d->chunks % 2) * 16;
	d->v_soff = tile * d->row_stride;
	d->ks_soff = 2 * tile * d->row_stride;
	d->vs_soff = d->ks_soff + tile * d->ngroups * 4;
	d->ok_soff = d->vs_soff + tile * d->ngroups * 4;
	stage = round_up16((uint64_t)d->ok_soff + tile * 4);
	d->stage_bytes = stage;
	comb = max_q ? 0 : KVMM_CUDA_DECODE_WARPS * 16 * (2 + d->a.pg.head_dim) * 4;
	d->q_soff = d->s_soff = d->st_soff = round_up16(2 * stage > comb ? 2 * stage : comb);
	d->smem_bytes = d->st_soff + (max_q ? KVMM_CUDA_DECODE_WARPS * 8 : 0);
}

/*
 * Whether attention of this dtype, head_dim and int8 group size runs on the tensor cores: fp16,
 * bf16, and int8 in scale groups of whole k-steps (16 elements); prefill (max_q > 0) whenever
 * kvmm_cuda_prefill_tc allows, decode where the FMA kernel would need 4 or more multiply-adds
 * per KV byte (group / element size >= 4: fp16 and bf16 groups of 8 and more, int8 of 4 and
 * more, about 57 % of an H200's fp32 FMA rate at its memory bandwidth) when
 * kvmm_cuda_decode_tc is 1, every group when it is 2 (cuda-bench's crossover rows).
 */
static bool tc_fits(uint32_t dtype, uint32_t dim, uint32_t gs, uint32_t group, uint32_t max_q)
{
	if (dim % 16 || dim > KVMM_CUDA_TC_MAX_DIM ||
	    !(dtype == KVMM_DTYPE_FP16 || dtype == KVMM_DTYPE_BF16 ||
	      (dtype == KVMM_DTYPE_INT8 && gs % 16 == 0)))
		return false;
	if (max_q)
		return kvmm_cuda_prefill_tc;
	if (kvmm_cuda_decode_tc >= 2)
		return true;
	return kvmm_cuda_decode_tc && group >= 4 * kvmm_dtype_size(dtype);
}

/* decode (max_q 0) or prefill of at most max_q new tokens per sequence */
static int attn_plan(const struct kvmm_cuda_attn_args *a, uint32_t dtype, uint32_t max_q,
		     uint32_t resident, struct kvmm_cuda_decode_args *d)
{
	const struct kvmm_cuda_pages *pg = &a->pg;
	uint32_t elem = kvmm_dtype_size(dtype), dim = pg->head_dim;
	uint64_t align, cap, pairs;

	if (!elem || !dim || dim > KVMM_CUDA_MAX_HEAD_DIM || !pg->kv_heads ||
	    a->num_q_heads % pg->kv_heads || !pg->tokens_per_page || !a->max_blocks)
		return -EINVAL;
	/* no sequence has more new tokens than its block table holds */
	cap = (uint64_t)a->max_blocks * pg->tokens_per_page;
	cap = cap > UINT32_MAX ? UINT32_MAX : cap;
	max_q = max_q > cap ? (uint32_t)cap : max_q;
	memset(d, 0, sizeof(*d));
	d->a = *a;
	d->group = a->num_q_heads / pg->kv_heads;
	d->chunks = (dim * elem + 15) / 16;
	d->sl = pow2_at_least(d->chunks);
	d->sl = d->sl > 32 ? 32 : d->sl;
	d->lpr = pow2_at_least((dim + KVMM_CUDA_DECODE_EPL - 1) / KVMM_CUDA_DECODE_EPL);
	/* chunks' queries an odd number of 16-byte units apart (attn.cu, dec_shape::qcs) */
	d->qstride = d->chunks * ((16 / elem / 4) | 1) * 4;
	if (dtype == KVMM_DTYPE_INT8) {
		if (!pg->gs || dim % pg->gs)
			return -EINVAL;
		d->ngroups = dim / pg->gs;
		d->gmagic = (65536 + pg->gs - 1) / pg->gs;
	}
	/* cp.async needs every row start 16-byte aligned (scales: 4) */
	align = pg->base | pg->page_size | pg->k_off | pg->v_off | pg->row_bytes | (dim * elem);
	d->vec = !(align & 15);
	if (dtype == KVMM_DTYPE_INT8 && ((pg->ks_off | pg->vs_off | pg->scale_row_bytes) & 3))
		d->vec = 0;
	if (tc_fits(dtype, dim, pg->gs, d->group, max_q))
		tc_layout(d, max_q);
	else if (fma_layout(d, max_q))
		return -ENOTSUP; /* cannot happen with head_dim <= 256 */
	d->max_q = max_q;
	d->row_tiles = max_q ? (max_q + d->rows - 1) / d->rows : 1;
	if ((uint64_t)d->row_tiles * d->nqg > INT32_MAX)
		return -ENOTSUP; /* grid x */

	d->nsplit = 1;
	pairs = (uint64_t)a->nr_seqs * pg->kv_heads * d->nqg * d->row_tiles;
	if (resident && pairs && kvmm_cuda_decode_waves) {
		uint64_t want = (uint64_t)resident * kvmm_cuda_decode_waves / pairs, per, n;

		if (want >= 2) {
			per = (cap + want - 1) / want;
			per = per < 2 * (uint64_t)d->tile ? 2 * (uint64_t)d->tile : per;
			per = (per + d->tile - 1) / d->tile * d->tile;
			n = (cap + per - 1) / per;
			if (n >= 2 && per <= UINT32_MAX && n * d->nqg * d->row_tiles <= INT32_MAX) {
				d->nsplit = (uint32_t)n;
				d->split_tokens = (uint32_t)per;
			}
		}
	}
	return 0;
}

int kvmm_cuda_decode_plan(const struct kvmm_cuda_attn_args *a, uint32_t dtype, uint32_t resident,
			  struct kvmm_cuda_decode_args *d)
{
	return attn_plan(a, dtype, 0, resident, d);
}

int kvmm_cuda_prefill_plan(const struct kvmm_cuda_attn_args *a, uint32_t dtype, uint32_t max_q_len,
			   uint32_t resident, struct kvmm_cuda_decode_args *d)
{
	return max_q_len ? attn_plan(a, dtype, max_q_len, resident, d) : -EINVAL;
}

int kvmm_cuda_batch_plan(const struct kvmm_attn_batch *b, uint32_t max_q_len,
			 struct kvmm_cuda_decode_args *d)
{
	struct kvmm_cuda_attn_args a;
	int ret = attn_args(b, NULL, NULL, max_q_len > 0, &a);

	return ret ? ret : attn_plan(&a, b->kv.fmt->dtype, max_q_len, 0, d);
}

/*
 * Decode (max_q 0) or prefill: plan, size the splits for this GPU, allocate the parts' scratch
 * on the stream, launch the kernel and, split, the merge; the scratch is freed after it in
 * stream order.
 */
static int attn_launch(const struct kvmm_attn_batch *b, uint32_t max_q, const float *q, float *out,
		       kvmm_cuda_stream_t stream)
{
	const bool pre = max_q > 0;
	struct kvmm_cuda_decode_args d;
	struct kvmm_cuda_attn_args a;
	kvmm_cu_function fn;
	kvmm_cu_ptr scratch = 0;
	uint32_t dt;
	int ret, occ = 0;

	if (!b || (b->nr_seqs && (!q || !out)))
		return -EINVAL;
	ret = attn_args(b, q, out, pre, &a);
	if (ret || !b->nr_seqs)
		return ret;
	dt = b->kv.fmt->dtype;
	if (b->kv.fmt->kv_heads > 65535) /* grid y */
		return -ENOTSUP;
	ret = attn_plan(&a, dt, max_q, 0, &d);
	if (ret)
		return ret;
	ret = enter();
	if (ret)
		return ret;
	fn = d.tc ? (pre ? cu.tc[dt] : cu.dtc[dt]) : cu.fn[dt][pre ? FN_PREFILL : FN_DECODE];
	if (kvmm_cuda_decode_waves && cu.drv->cuMemAllocAsync && cu.drv->cuMemFreeAsync &&
	    !cu.drv->cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, KVMM_CUDA_DECODE_THREADS,
								 d.smem_bytes) &&
	    occ > 0) {
		attn_plan(&a, dt, max_q, (uint32_t)occ * (uint32_t)cu.sms, &d);
	}
	if (d.nsplit > 1) {
		/* parts: [part row][split] rows of head_dim floats, then (max, sum) pairs */
		uint64_t rows =
			(uint64_t)b->nr_seqs * (pre ? d.max_q : 1) * b->num_q_heads * d.nsplit;

		if (cu.drv->cuMemAllocAsync(&scratch, rows * (d.a.pg.head_dim + 2) * sizeof(float),
					    (struct CUstream_st *)stream)) {
			scratch = 0; /* no memory for parts: unsplit */
			attn_plan(&a, dt, max_q, 0, &d);
		} else {
			d.part_acc = scratch;
			d.part_ml = scratch + rows * d.a.pg.head_dim * sizeof(float);
		}
	}
	ret = launch_smem(fn, d.nsplit * d.row_tiles * d.nqg, d.a.pg.kv_heads, b->nr_seqs,
			  KVMM_CUDA_DECODE_THREADS, d.smem_bytes, &d, stream,
			  pre ? "paged prefill launch" : "paged decode launch");
	if (!ret && d.nsplit > 1)
		ret = launch(pre ? cu.pmerge : cu.merge, b->num_q_heads, b->nr_seqs,
			     pre ? (d.max_q < 65535 ? d.max_q : 65535) : 1,
			     KVMM_CUDA_DECODE_THREADS, &d, stream,
			     pre ? "paged prefill merge launch" : "paged decode merge launch");
	if (scratch)
		cu.drv->cuMemFreeAsync(scratch, (struct CUstream_st *)stream);
	return ret;
}

int kvmm_cuda_paged_decode(const struct kvmm_attn_batch *b, const float *q, float *out,
			   kvmm_cuda_stream_t stream)
{
	return attn_launch(b, 0, q, out, stream);
}

int kvmm_cuda_paged_prefill(const struct kvmm_attn_batch *b, uint32_t max_q_len, const float *q,
			    float *out, kvmm_cuda_stream_t stream)
{
	struct kvmm_cuda_attn_args a;

	/* no new tokens: nothing to compute, but the arguments are still checked */
	if (!max_q_len)
		return !b || (b->nr_seqs && (!q || !out)) ? -EINVAL
							  : attn_args(b, q, out, true, &a);
	return attn_launch(b, max_q_len, q, out, stream);
}

int kvmm_cuda_reshape_and_cache(const struct kvmm_kv_pages *kv, uint32_t nr_tokens,
				const int64_t *slots, const float *k, const float *v,
				kvmm_cuda_stream_t stream)
{
	struct kvmm_cuda_cache_args a;
	int ret;

	memset(&a, 0, sizeof(a));
	ret = pages_args(kv, &a.pg);
	if (ret)
		return ret;
	if (nr_tokens && (!slots || !k || !v))
		return -EINVAL;
	if (!nr_tokens)
		return 0;
	if (nr_tokens > 0x7fffffffu) /* grid x */
		return -ENOTSUP;
	ret = enter();
	if (ret)
		return ret;
	a.slots = (uint64_t)(uintptr_t)slots;
	a.k = (uint64_t)(uintptr_t)k;
	a.v = (uint64_t)(uintptr_t)v;
	a.nr_tokens = nr_tokens;
	return launch(cu.fn[kv->fmt->dtype][FN_CACHE], nr_tokens, 1, 1, 128, &a, stream,
		      "reshape_and_cache launch");
}

int kvmm_cuda_copy_pages(const struct kvmm_fmt *f, void *dst_base, const void *src_base,
			 const int32_t *dst, const int32_t *src, uint32_t nr, uint32_t ntokens,
			 kvmm_cuda_stream_t stream)
{
	struct kvmm_cuda_copy_args a;
	unsigned int gx;
	int ret;

	if (!f || !f->tokens_per_page || ntokens > f->tokens_per_page || !f->layers)
		return -EINVAL;
	if (nr && (!dst_base || !src_base || !dst || !src))
		return -EINVAL;
	if (!nr)
		return 0;
	if (nr > 65535) /* grid y */
		return -ENOTSUP;
	ret = enter();
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.dst_base = (uint64_t)(uintptr_t)dst_base;
	a.src_base = (uint64_t)(uintptr_t)src_base;
	a.dst = (uint64_t)(uintptr_t)dst;
	a.src = (uint64_t)(uintptr_t)src;
	a.page_size = f->page_size;
	a.slab_bytes = f->slab_bytes;
	a.row_bytes = f->row_bytes;
	a.scale_off = f->scale_off;
	a.scale_row_bytes = f->scale_row_bytes;
	a.nslabs = f->layers * 2;
	a.used = (uint64_t)a.nslabs * f->slab_bytes;
	a.ntokens = ntokens;
	a.nr = nr;
	/*
	 * Whole pages: enough blocks in all to fill the GPU a few times over, at least one per
	 * 64 KiB of a page.  Partial: a block per slab.
	 */
	if (ntokens) {
		gx = a.nslabs;
	} else {
		uint64_t want = (uint64_t)cu.sms * 8 / nr + 1;
		uint64_t cap = a.used / (64u << 10) + 1;

		gx = (unsigned int)(want < cap ? want : cap);
	}
	return launch(cu.copy, gx, nr, 1, 256, &a, stream, "copy_pages launch");
}

int kvmm_cuda_malloc(void **dptr, size_t bytes)
{
	kvmm_cu_ptr p = 0;
	kvmm_cu_result r;
	int ret = enter();

	if (ret)
		return ret;
	r = cu.drv->cuMemAlloc(&p, bytes);
	if (r)
		return fail(r, "cuMemAlloc");
	*dptr = (void *)(uintptr_t)p;
	return 0;
}

void kvmm_cuda_free(void *dptr)
{
	if (dptr && !enter())
		cu.drv->cuMemFree((kvmm_cu_ptr)(uintptr_t)dptr);
}

int kvmm_cuda_memcpy_htod(void *dst, const void *src, size_t bytes)
{
	int ret = enter();
	kvmm_cu_result r;

	if (ret)
		return ret;
	r = cu.drv->cuMemcpyHtoD((kvmm_cu_ptr)(uintptr_t)dst, src, bytes);
	return r ? fail(r, "cuMemcpyHtoD") : 0;
}

int kvmm_cuda_memcpy_dtoh(void *dst, const void *src, size_t bytes)
{
	int ret = enter();
	kvmm_cu_result r;

	if (ret)
		return ret;
	r = cu.drv->cuMemcpyDtoH(dst, (kvmm_cu_ptr)(uintptr_t)src, bytes);
	return r ? fail(r, "cuMemcpyDtoH") : 0;
}

int kvmm_cuda_memcpy_dtod(void *dst, const void *src, size_t bytes)
{
	int ret = enter();
	kvmm_cu_result r;

	if (ret)
		return ret;
	r = cu.drv->cuMemcpyDtoD((kvmm_cu_ptr)(uintptr_t)dst, (kvmm_cu_ptr)(uintptr_t)src, bytes);
	return r ? fail(r, "cuMemcpyDtoD") : 0;
}

int kvmm_cuda_memset(void *dst, int byte, size_t bytes)
{
	int ret = enter();
	kvmm_cu_result r;

	if (ret)
		return ret;
	r = cu.drv->cuMemsetD8((kvmm_cu_ptr)(uintptr_t)dst, (unsigned char)byte, bytes);
	return r ? fail(r, "cuMemsetD8") : 0;
}

int kvmm_cuda_sync(void)
{
	int ret = enter();
	kvmm_cu_result r;

	if (ret)
		return ret;
	r = cu.drv->cuCtxSynchronize();
	return r ? fail(r, "cuCtxSynchronize (a kernel failed)") : 0;
}
