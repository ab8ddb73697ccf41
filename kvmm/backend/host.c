// SPDX-License-Identifier: MIT
/*
 * kvmm/backend/host.c - the shared host-memory backend: a pool's nframes * page_size bytes are
 * cut into memfd chunks (MFD_CLOEXEC | MFD_ALLOW_SEALING, sized once and sealed against
 * shrinking, growing and further sealing, so a client holding the fd cannot truncate the
 * memory under the daemon and turn its accesses into SIGBUS).  The daemon reserves one
 * PROT_NONE range of nr_chunks * chunk_size bytes and maps each chunk MAP_SHARED | MAP_FIXED
 * over its slot, so frames are contiguous here exactly as they are in clients that map the
 * same fds the same way.  copy is memcpy; scrub is memset, or, with KVMM_HOST_PUNCH_SCRUB, a
 * punched hole, which gives the memory back and refaults as zeroes in every mapping at once.
 * Chunk size and flags come from a struct kvmm_host_backend whose ops the pool was created
 * with (see host.h), or the defaults.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/mm.h"
#include "kvmm/backend/host.h"

/* per pool: struct kvmm_backend_ctx.priv */
struct host_mem {
	char *base;	     /* frame 0; nr_chunks * chunk_size bytes reserved */
	uint64_t bytes;	     /* nframes * page_size */
	uint64_t chunk_size; /* every chunk but maybe the last */
	uint32_t nr_chunks;
	unsigned int flags;
	int fds[]; /* nr_chunks memfds */
};

static uint64_t chunk_len(const struct host_mem *hm, uint32_t i)
{
	if (i + 1 < hm->nr_chunks)
		return hm->chunk_size;
	return hm->bytes - (uint64_t)i * hm->chunk_size;
}

static int pick_chunk_size(uint64_t want, uint64_t page_size, uint64_t bytes, uint64_t *out)
{
	long sys = sysconf(_SC_PAGESIZE);
	uint64_t cs;

	if (sys <= 0)
		sys = 4096;
	/* chunks are mapped at multiples of chunk_size: both sizes must be mmap-aligned */
	if (page_size % (uint64_t)sys)
		return -EINVAL;
	if (want) {
		if (want % page_size)
			return -EINVAL;
		cs = want;
	} else {
		cs = max_t(uint64_t, KVMM_HOST_CHUNK_DEFAULT / page_size * page_size, page_size);
		/* a large pool gets larger chunks: all of them must fit in one SCM_RIGHTS message */
		if (DIV_ROUND_UP(bytes, cs) > KVMM_HOST_DEFAULT_MAX_CHUNKS)
			cs = ALIGN(DIV_ROUND_UP(bytes, KVMM_HOST_DEFAULT_MAX_CHUNKS), page_size);
	}
	/* a chunk larger than the pool would only reserve address space for nothing */
	*out = min(cs, bytes);
	return 0;
}

static void host_teardown(struct host_mem *hm)
{
	uint32_t i;

	if (hm->base)
		munmap(hm->base, (size_t)(hm->chunk_size * hm->nr_chunks));
	for (i = 0; i < hm->nr_chunks; i++)
		if (hm->fds[i] >= 0)
			close(hm->fds[i]);
	free(hm);
}

static int map_chunk(struct host_mem *hm, uint32_t i)
{
	uint64_t len = chunk_len(hm, i);
	char name[32];
	int prot = PROT_READ | PROT_WRITE;
	int mflags = MAP_SHARED | MAP_FIXED;
	void *p;
	int fd;

	snprintf(name, sizeof(name), "kvmm-chunk-%u", i);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	hm->fds[i] = fd;
	if (ftruncate(fd, (off_t)len) < 0)
		return -errno;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	if (hm->flags & KVMM_HOST_POPULATE)
		mflags |= MAP_POPULATE;
	p = mmap(hm->base + (uint64_t)i * hm->chunk_size, (size_t)len, prot, mflags, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	return 0;
}

static int host_setup(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes,
		      uint64_t want_chunk, unsigned int flags)
{
	struct host_mem *hm;
	uint64_t bytes, cs, nr, reserve;
	uint32_t i;
	void *p;
	int ret;

	if (!page_size || !nframes || check_mul_overflow(page_size, (uint64_t)nframes, &bytes) ||
	    bytes > SIZE_MAX)
		return -EINVAL;
	ret = pick_chunk_size(want_chunk, page_size, bytes, &cs);
	if (ret)
		return ret;
	nr = DIV_ROUND_UP(bytes, cs);
	if (nr > UINT32_MAX || check_mul_overflow(nr, cs, &reserve) || reserve > SIZE_MAX)
		return -EINVAL;

	hm = calloc(1, sizeof(*hm) + nr * sizeof(int));
	if (!hm)
		return -ENOMEM;
	hm->bytes = bytes;
	hm->chunk_size = cs;
	hm->flags = flags;
	hm->nr_chunks = (uint32_t)nr;
	for (i = 0; i < hm->nr_chunks; i++)
		hm->fds[i] = -1;

	/* reserve the whole range first so the chunks land back to back */
	p = mmap(NULL, (size_t)reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		goto out_free;
	}
	hm->base = p;
	for (i = 0; i < hm->nr_chunks; i++) {
		ret = map_chunk(hm, i);
		if (ret)
			goto out_free;
	}
	be->page_size = page_size;
	be->nframes = nframes;
	be->priv = hm;
	kvmm_debug("host backend: %u frames of %llu bytes in %u chunks of %llu bytes", nframes,
		   (unsigned long long)page_size, hm->nr_chunks, (unsigned long long)cs);
	return 0;

out_free:
	host_teardown(hm);
	return ret;
}

/* the default table */
static int host_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	return host_setup(be, page_size, nframes, 0, 0);
}

/* a table inside a struct kvmm_host_backend (only kvmm_host_backend_init installs this) */
static int host_init_cfg(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	const struct kvmm_host_backend *hb = container_of(be->ops, struct kvmm_host_backend, ops);

	return host_setup(be, page_size, nframes, hb->chunk_size, hb->flags);
}

static void host_fini(struct kvmm_backend_ctx *be)
{
	if (be->priv)
		host_teardown(be->priv);
	be->priv = NULL;
}

static void *host_frame_addr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	struct host_mem *hm = be->priv;

	if (!hm || frame >= be->nframes)
		return NULL;
	return hm->base + (uint64_t)frame * be->page_size;
}

static int host_copy(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes)
{
	if (!be->priv || dst >= be->nframes || src >= be->nframes || bytes > be->page_size)
		return -EINVAL;
	if (dst != src)
		memcpy(host_frame_addr(be, dst), host_frame_addr(be, src), (size_t)bytes);
	return 0;
}

static int host_scrub(struct kvmm_backend_ctx *be, uint32_t frame)
{
	struct host_mem *hm = be->priv;
	uint64_t off;
	uint32_t chunk;

	if (!hm || frame >= be->nframes)
		return -EINVAL;
	if (hm->flags & KVMM_HOST_PUNCH_SCRUB) {
		/* chunk_size is a multiple of page_size: a frame never straddles two chunks */
		off = (uint64_t)frame * be->page_size;
		chunk = (uint32_t)(off / hm->chunk_size);
		off -= (uint64_t)chunk * hm->chunk_size;
		if (!fallocate(hm->fds[chunk], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       (off_t)off, (off_t)be->page_size))
			return 0;
		/* no hole punching here: zero it by hand */
	}
	memset(host_frame_addr(be, frame), 0, (size_t)be->page_size);
	return 0;
}

/*
 * Punch frames [first, first + nr) out of their memfds (the budget's discard): the memory goes
 * back to the system and every mapping of it, the clients' too, stays valid and reads zeroes.
 * A range may cross chunks; one hole per chunk.
 */
static int host_discard(struct kvmm_backend_ctx *be, uint32_t first, uint32_t nr)
{
	struct host_mem *hm = be->priv;
	uint64_t off, end;

	if (!hm || first >= be->nframes || nr > be->nframes - first)
		return -EINVAL;
	off = (uint64_t)first * be->page_size;
	end = off + (uint64_t)nr * be->page_size;
	while (off < end) {
		uint32_t chunk = (uint32_t)(off / hm->chunk_size);
		uint64_t in = off - (uint64_t)chunk * hm->chunk_size;
		uint64_t len = min(end - off, chunk_len(hm, chunk) - in);

		if (fallocate(hm->fds[chunk], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)in,
			      (off_t)len))
			return -errno;
		off += len;
	}
	return 0;
}

const struct kvmm_backend_ops kvmm_host_backend_ops = {
	.name = "host",
	.init = host_init,
	.fini = host_fini,
	.frame_addr = host_frame_addr,
	.copy = host_copy,
	.scrub = host_scrub,
	.discard = host_discard,
};

void kvmm_host_backend_init(struct kvmm_host_backend *hb, uint64_t chunk_size, unsigned int flags)
{
	hb->ops = kvmm_host_backend_ops;
	hb->ops.init = host_init_cfg;
	hb->chunk_size = chunk_size;
	hb->flags = flags;
}

bool kvmm_is_host_backend(const struct kvmm_backend_ctx *be)
{
	return be && be->ops && (be->ops->init == host_init || be->ops->init == host_init_cfg);
}

int kvmm_host_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size)
{
	struct host_mem *hm;

	if (!kvmm_is_host_backend(be))
		return -EOPNOTSUPP;
	hm = be->priv;
	if (!hm)
		return -EINVAL;
	if (fds)
		*fds = hm->fds;
	if (nr_chunks)
		*nr_chunks = hm->nr_chunks;
	if (chunk_size)
		*chunk_size = hm->chunk_size;
	return 0;
}

void *kvmm_host_backend_base(struct kvmm_backend_ctx *be)
{
	struct host_mem *hm;

	if (!kvmm_is_host_backend(be))
		return NULL;
	hm = be->priv;
	return hm ? hm->base : NULL;
}
