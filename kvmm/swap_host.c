// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_host.c - the host-memory swap tier: an anonymous arena of size bytes, one slot
 * per page, written and read with memcpy.
 *
 * It is the first tier below the device pool: demoted cached pages and swapped sequence pages
 * land here at memory speed, and kvmm_swap_move_down() later moves the cold ones to the NVMe
 * tier.  The copy happens at submit time; the I/O is only reported complete from poll(), like
 * every tier's, so that the core's completion handling is the same for all of them.
 * Swap-out write-back does not go through submit(): slot_addr() gives the core the slot's
 * address and the core copies into it with the pool lock let go (kvmm_swap_writeback).  On a
 * backend whose frames the host cannot address (CUDA) the page moves straight between the
 * frame and its arena slot through the backend's copy_to_host / copy_from_host hooks (a DMA),
 * and the arena is pinned host memory from its host_alloc when that succeeds (else the same
 * anonymous mapping, which the DMA then stages through).  Every page written gets a checksum
 * (t->csum, XXH3, in this process's memory beside the arena) and every read is verified
 * against it (kvmm_swap_mem_read, also on the core's unlocked copies): a slot whose bytes
 * changed - a stray write into the arena, bit rot - fails the read with -EBADMSG and is
 * dropped like a corrupt file slot (kvmm_swap_slot_corrupt), never installed.  On a pool in
 * host memory the arena is a memfd, which clients map read-only to read sealed pages where
 * they lie (far reads: ops->arena_fd, kvmm_swap_far_pin).  Locking: the pool lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compiler.h"
#include "list.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

struct host_tier {
	uint8_t *arena;
	size_t size;
	bool pinned;	       /* from kvmm_swap_host_alloc(), not mmap */
	int fd;		       /* the arena's memfd (clients map it for far reads), or -1 */
	struct list_head done; /* struct kvmm_swap_io.node: copied, not yet reported */
};

static int host_init(struct kvmm_swap_tier *t, const struct kvmm_swap_tier_params *p)
{
	struct host_tier *h;

	if (p->size > SIZE_MAX)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fd = -1;
	h->arena = kvmm_swap_host_alloc(t, p->size);
	h->pinned = h->arena != NULL;
	/*
	 * Reserved lazily: a large, mostly empty tier costs nothing until it is used.  A pool
	 * whose frames the host addresses gets a memfd, so that clients can map it (far reads);
	 * without one (no memfd here) the tier works the same, without far reads.
	 */
	if (!h->pinned && !swap_staged(t->pool)) {
		h->fd = memfd_create("kvmm-swap-host", MFD_CLOEXEC);
		if (h->fd >= 0 && ftruncate(h->fd, (off_t)p->size) == 0)
			h->arena = mmap(NULL, (size_t)p->size, PROT_READ | PROT_WRITE,
					MAP_SHARED | MAP_NORESERVE, h->fd, 0);
		if (h->fd >= 0 && (!h->arena || h->arena == MAP_FAILED)) {
			close(h->fd);
			h->fd = -1;
			h->arena = NULL;
		}
	}
	if (!h->pinned && !h->arena)
		h->arena = mmap(NULL, (size_t)p->size, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (h->arena == MAP_FAILED) {
		free(h);
		return -ENOMEM;
	}
	h->size = (size_t)p->size;
	/* one checksum per slot, verified on every read (kvmm_swap_mem_read) */
	t->csum = calloc(t->nslots, sizeof(*t->csum));
	if (!t->csum) {
		if (h->pinned)
			kvmm_swap_host_free(t, h->arena, h->size);
		else
			munmap(h->arena, h->size);
		if (h->fd >= 0)
			close(h->fd);
		free(h);
		return -ENOMEM;
	}
	INIT_LIST_HEAD(&h->done);
	t->priv = h;
	t->direct = true;
	return 0;
}

static void host_fini(struct kvmm_swap_tier *t)
{
	struct host_tier *h = t->priv;

	KVMM_WARN_ON(!list_empty(&h->done));
	if (h->pinned)
		kvmm_swap_host_free(t, h->arena, h->size);
	else
		munmap(h->arena, h->size);
	if (h->fd >= 0)
		close(h->fd); /* clients' mappings keep the memory until they unmap it */
	free(h);
	free(t->csum);
	t->csum = NULL;
	t->priv = NULL;
}

static int host_submit(struct kvmm_swap_tier *t, struct kvmm_swap_io *io)
{
	struct host_tier *h = t->priv;
	uint8_t *slot;
	int ret;

	if (io->slot >= t->nslots)
		return -EINVAL;
	slot = h->arena + io->slot * t->page_size;
	if (io->write) {
		ret = kvmm_swap_mem_write(t, io, io->slot, slot, true);
	} else {
		ret = kvmm_swap_mem_read(t, io, io->slot, slot, true);
		if (ret == -EBADMSG) {
			/* a spoilt slot is a failed read, reported like any I/O's result */
			io->res = ret;
			list_add_tail(&io->node, &h->done);
			return 0;
		}
	}
	if (ret)
		return ret;
	io->res = 0;
	list_add_tail(&io->node, &h->done);
	return 0;
}

static void *host_slot_addr(struct kvmm_swap_tier *t, uint64_t slot)
{
	struct host_tier *h = t->priv;

	return h->arena + slot * t->page_size;
}

static int host_arena_fd(struct kvmm_swap_tier *t)
{
	const struct host_tier *h = t->priv;

	return h->fd;
}

static int host_flush(struct kvmm_swap_tier *t)
{
	(void)t;
	return 0;
}

static int host_poll(struct kvmm_swap_tier *t, bool wait)
{
	struct host_tier *h = t->priv;
	int n = 0;

	(void)wait; /* everything submitted is already done */
	while (!list_empty(&h->done)) {
		struct kvmm_swap_io *io = list_first_entry(&h->done, struct kvmm_swap_io, node);

		list_del(&io->node);
		io->end_io(io);
		n++;
	}
	return n;
}

const struct kvmm_swap_ops kvmm_swap_host_ops = {
	.name = "host",
	.init = host_init,
	.fini = host_fini,
	.submit = host_submit,
	.flush = host_flush,
	.poll = host_poll,
	.slot_addr = host_slot_addr,
	.arena_fd = host_arena_fd,
};
