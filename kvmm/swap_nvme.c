// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_nvme.c - the NVMe swap tier: a swap file opened O_DIRECT and driven through
 * io_uring (liburing 2.3).
 *
 * The file is created (or reused) at the tier's size with fallocate, so a write into any slot
 * never needs new blocks.  I/O goes through a staging pool of queue_depth page-size buffers,
 * page aligned as O_DIRECT wants, registered with io_uring_register_buffers() once (so the
 * kernel pins them once, not per I/O), and the file descriptor is registered too
 * (IOSQE_FIXED_FILE).  Frames are never handed to the kernel directly: a frame may be device
 * memory (the CUDA backend), and the staging copy is where its device-to-host DMA goes: the
 * backend's copy_to_host / copy_from_host hooks move the page (kvmm_swap_io_to_host), and the
 * staging pool is then pinned host memory from its host_alloc when that succeeds.
 * submit() copies a page into a free staging buffer (writes; a staged copy is only started)
 * and queues an SQE; flush() waits for started staging copies (the backend's sync) and submits
 * all queued SQEs with one io_uring_submit() - a batch costs one system call; poll() reaps
 * CQEs, copies reads out of their buffer (synchronously) and reports each I/O.  A result other than a
 * whole page is an error: a negative one as it is, a short one (a truncated file, a torn
 * write) as -EIO.  When every staging buffer is busy, submit() says -EAGAIN and the core
 * polls before it retries: the queue depth bounds the I/O in flight.
 *
 * Fallbacks, each logged once: a file system that refuses O_DIRECT (EINVAL) gets buffered
 * I/O; a failed buffer or file registration (RLIMIT_MEMLOCK) gets plain READ/WRITE SQEs.
 * Locking: the pool lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

struct nvme_buf {
	struct kvmm_swap_io *io; /* the I/O using it, NULL when free */
	uint8_t *mem;
	uint32_t idx;
};

struct nvme_tier {
	int fd;
	struct io_uring ring;
	uint8_t *staging;
	struct nvme_buf *bufs;
	uint32_t *free; /* stack of free buffer indices */
	uint32_t nfree;
	uint32_t qd;
	uint32_t queued; /* SQEs not submitted yet */
	uint64_t staging_size;
	bool fixed_bufs, fixed_file;
	bool pinned;	/* staging from kvmm_swap_host_alloc() */
	bool need_sync; /* staging copies started, not waited for */
};

static void nvme_free(struct kvmm_swap_tier *t, struct nvme_tier *n)
{
	free(n->bufs);
	free(n->free);
	if (n->pinned)
		kvmm_swap_host_free(t, n->staging, n->staging_size);
	else
		free(n->staging);
	free(n);
}

/* Open (or create: *created) the swap file; O_DIRECT when its file system takes it. */
static int open_swapfile(struct kvmm_swap_tier *t, const char *path, bool *created)
{
	int flags = O_RDWR | O_CLOEXEC, fd;
	bool missing;

	t->direct = true;
	fd = open(path, flags | O_DIRECT);
	/* not there: ours to create, and to remove again if the tier cannot be set up */
	missing = fd < 0 && errno == ENOENT;
	if (missing)
		fd = open(path, flags | O_DIRECT | O_CREAT, 0600);
	if (fd < 0 && errno == EINVAL) {
		kvmm_warn("swap tier %u: %s refuses O_DIRECT, using buffered I/O", t->id, path);
		t->direct = false;
		fd = open(path, flags | (missing ? O_CREAT : 0), 0600);
	}
	*created = missing && fd >= 0;
	return fd < 0 ? -errno : fd;
}

static int nvme_init(struct kvmm_swap_tier *t, const struct kvmm_swap_tier_params *p)
{
	struct nvme_tier *n;
	struct iovec *iov = NULL;
	bool created = false;
	uint32_t i;
	int ret;

	if (!p->path || !p->path[0] || t->page_size % 4096)
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->qd = p->queue_depth ? p->queue_depth : KVMM_SWAP_QD_DEFAULT;
	n->bufs = calloc(n->qd, sizeof(*n->bufs));
	n->free = calloc(n->qd, sizeof(*n->free));
	iov = calloc(n->qd, sizeof(*iov));
	n->staging_size = (uint64_t)n->qd * t->page_size;
	n->staging = kvmm_swap_host_alloc(t, n->staging_size);
	n->pinned = n->staging != NULL;
	if (!n->bufs || !n->free || !iov ||
	    (!n->pinned && posix_memalign((void **)&n->staging, 4096, n->staging_size))) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < n->qd; i++) {
		n->bufs[i].mem = n->staging + (size_t)i * t->page_size;
		n->bufs[i].idx = i;
		n->free[n->nfree++] = n->qd - 1 - i;
		iov[i].iov_base = n->bufs[i].mem;
		iov[i].iov_len = t->page_size;
	}

	ret = open_swapfile(t, p->path, &created);
	if (ret < 0)
		goto out_free;
	n->fd = ret;
	if (fallocate(n->fd, 0, 0, (off_t)p->size)) {
		ret = -errno;
		/* a file system without fallocate: a sparse file of the size still works */
		if (ret != -EOPNOTSUPP || ftruncate(n->fd, (off_t)p->size))
			goto out_close;
	}
	ret = io_uring_queue_init(n->qd, &n->ring, 0);
	if (ret < 0)
		goto out_close;
	n->fixed_bufs = !io_uring_register_buffers(&n->ring, iov, n->qd);
	n->fixed_file = !io_uring_register_files(&n->ring, &n->fd, 1);
	if (!n->fixed_bufs || !n->fixed_file)
		kvmm_warn("swap tier %u: io_uring registration failed (buffers %d, file %d)", t->id,
			  n->fixed_bufs, n->fixed_file);
	free(iov);
	t->priv = n;
	return 0;

out_close:
	close(n->fd);
	/* a failed swapon leaves no file behind that it made (a 0-byte one, typically) */
	if (created)
		unlink(p->path);
out_free:
	free(iov);
	nvme_free(t, n);
	return ret;
}

static void nvme_fini(struct kvmm_swap_tier *t)
{
	struct nvme_tier *n = t->priv;

	KVMM_WARN_ON(n->nfree != n->qd);
	io_uring_queue_exit(&n->ring);
	close(n->fd);
	nvme_free(t, n);
	t->priv = NULL;
}

static int nvme_flush(struct kvmm_swap_tier *t)
{
	struct nvme_tier *n = t->priv;
	int ret;

	if (!n->queued)
		return 0;
	if (n->need_sync) {
		/* the writes must not reach the device before their pages reach staging */
		ret = kvmm_swap_io_sync(t);
		if (ret < 0)
			return ret;
		n->need_sync = false;
	}
	ret = io_uring_submit(&n->ring);
	if (ret < 0)
		return ret;
	n->queued -= min_t(uint32_t, n->queued, (uint32_t)ret);
	return 0;
}

static int nvme_submit(struct kvmm_swap_tier *t, struct kvmm_swap_io *io)
{
	struct nvme_tier *n = t->priv;
	struct io_uring_sqe *sqe;
	struct nvme_buf *b;
	int fd = n->fixed_file ? 0 : n->fd;
	uint64_t off = io->slot * t->page_size;
	int ret;

	if (io->slot >= t->nslots)
		return -EINVAL;
	if (!n->nfree)
		return -EAGAIN;
	/* the top free buffer: taken below only once an SQE is there for it */
	b = &n->bufs[n->free[n->nfree - 1]];
	if (io->write) {
		/* a staged copy is waited for in flush(), once for the batch */
		ret = kvmm_swap_io_to_host(t, io, b->mem, false);
		if (ret)
			return ret;
		n->need_sync |= !io->buf;
	}
	sqe = io_uring_get_sqe(&n->ring);
	if (!sqe) {
		nvme_flush(t);
		sqe = io_uring_get_sqe(&n->ring);
		if (!sqe)
			return -EAGAIN;
	}
	n->nfree--;
	b->io = io;
	if (io->write) {
		if (n->fixed_bufs)
			io_uring_prep_write_fixed(sqe, fd, b->mem, (unsigned int)t->page_size, off,
						  (int)b->idx);
		else
			io_uring_prep_write(sqe, fd, b->mem, (unsigned int)t->page_size, off);
	} else {
		if (n->fixed_bufs)
			io_uring_prep_read_fixed(sqe, fd, b->mem, (unsigned int)t->page_size, off,
						 (int)b->idx);
		else
			io_uring_prep_read(sqe, fd, b->mem, (unsigned int)t->page_size, off);
	}
	if (n->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, b);
	n->queued++;
	return 0;
}

static int nvme_poll(struct kvmm_swap_tier *t, bool wait)
{
	struct nvme_tier *n = t->priv;
	int done = 0, ret;

	ret = nvme_flush(t);
	if (ret < 0)
		return ret;
	while (n->nfree < n->qd) {
		struct io_uring_cqe *cqe;
		struct kvmm_swap_io *io;
		struct nvme_buf *b;
		int res;

		if (wait && !done)
			ret = io_uring_wait_cqe(&n->ring, &cqe);
		else
			ret = io_uring_peek_cqe(&n->ring, &cqe);
		if (ret == -EAGAIN)
			break;
		if (ret == -EINTR)
			continue;
		if (ret < 0)
			return ret;
		b = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&n->ring, cqe);
		io = b->io;
		if (res == (int)t->page_size) {
			/*
			 * back into the frame before the buffer is reused or the page is used,
			 * but only bytes that are what was written there (swap_index.c)
			 */
			if (!io->write && !kvmm_swap_index_verify(t, io->slot, b->mem))
				io->res = -EBADMSG;
			else
				io->res =
					io->write ? 0 : kvmm_swap_io_from_host(t, io, b->mem, true);
			/* what went to the file, for the slot's warm-restart record */
			if (io->write)
				kvmm_swap_index_csum(t, io->slot, b->mem);
		} else {
			/* short: the file was truncated under us, or the write was torn */
			io->res = res < 0 ? res : -EIO;
		}
		b->io = NULL;
		n->free[n->nfree++] = b->idx;
		io->end_io(io);
		done++;
	}
	return done;
}

const struct kvmm_swap_ops kvmm_swap_nvme_ops = {
	.name = "nvme",
	.init = nvme_init,
	.fini = nvme_fini,
	.submit = nvme_submit,
	.flush = nvme_flush,
	.poll = nvme_poll,
};
