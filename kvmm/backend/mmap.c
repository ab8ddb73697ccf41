// SPDX-License-Identifier: MIT
/*
 * kvmm/backend/mmap.c - the plain host-memory backend: one private anonymous mapping of
 * nframes * page_size bytes, frame n at base + n * page_size.  MAP_NORESERVE so that a large
 * pool costs nothing until its frames are touched; copy is memcpy and scrub is memset.  It
 * serves the unit tests and benchmarks; kvmmd's shared pools (memfd, CUDA) are other
 * backends behind the same struct kvmm_backend_ops.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "kvmm/mm.h"

static int mmap_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	uint64_t bytes;
	void *base;

	if (!page_size || !nframes || check_mul_overflow(page_size, (uint64_t)nframes, &bytes) ||
	    bytes > SIZE_MAX)
		return -EINVAL;
	base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return -errno;
	be->page_size = page_size;
	be->nframes = nframes;
	be->priv = base;
	return 0;
}

static void mmap_fini(struct kvmm_backend_ctx *be)
{
	if (be->priv)
		munmap(be->priv, (size_t)(be->page_size * be->nframes));
	be->priv = NULL;
}

static void *mmap_frame_addr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	if (!be->priv || frame >= be->nframes)
		return NULL;
	return (char *)be->priv + (size_t)frame * be->page_size;
}

static int mmap_copy(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes)
{
	if (!be->priv || dst >= be->nframes || src >= be->nframes || bytes > be->page_size)
		return -EINVAL;
	if (dst != src)
		memcpy(mmap_frame_addr(be, dst), mmap_frame_addr(be, src), (size_t)bytes);
	return 0;
}

static int mmap_scrub(struct kvmm_backend_ctx *be, uint32_t frame)
{
	if (!be->priv || frame >= be->nframes)
		return -EINVAL;
	memset(mmap_frame_addr(be, frame), 0, (size_t)be->page_size);
	return 0;
}

/* Private anonymous memory: MADV_DONTNEED drops it, and it refaults as zeroes. */
static int mmap_discard(struct kvmm_backend_ctx *be, uint32_t first, uint32_t nr)
{
	if (!be->priv || first >= be->nframes || nr > be->nframes - first)
		return -EINVAL;
	if (madvise(mmap_frame_addr(be, first), (size_t)nr * be->page_size, MADV_DONTNEED))
		return -errno;
	return 0;
}

const struct kvmm_backend_ops kvmm_mmap_backend_ops = {
	.name = "mmap",
	.init = mmap_init,
	.fini = mmap_fini,
	.frame_addr = mmap_frame_addr,
	.copy = mmap_copy,
	.scrub = mmap_scrub,
	.discard = mmap_discard,
};
