// SPDX-License-Identifier: MIT
/*
 * runtime/far.c - far reads (KVMM_FEAT_FAR): the read-only window over the pool and kvmmd's
 * host swap tier, and the range pin that leaves sealed swapped pages where they lie.
 *
 * kvmm_far_map() asks FAR_MAP for the pool's chunks and the arena's memfd and maps them
 * read-only side by side: frame f is window page f, the arena's slot s page far_base + s,
 * so the paged kernels read a block table of kvmm_pin_far() entries over the window as
 * they read one of frames over the pool.  A window of the same size is mapped again in
 * place, so that views an engine keeps stay valid; the window outlives the session (views
 * may point into it) until the next map or kvmm_close(), but after the session is gone
 * its generation is forgotten: pins name frames only until it is mapped again.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/libkvmm.h"

/* The reply's sizes, checked against the pool this handle mapped at attach. */
static int far_rep_check(const struct kvmm_client *c, const struct kvmm_far_map_rep *rep,
			 unsigned int nr_fds)
{
	long sys_page = sysconf(_SC_PAGESIZE);
	uint64_t total = c->chunk_size * c->nr_chunks;

	if (rep->nr_fds != nr_fds || nr_fds != rep->nr_chunks + 1 || rep->reserved)
		return -EBADMSG;
	if (rep->nr_chunks != c->nr_chunks || rep->chunk_size != c->chunk_size || !rep->gen)
		return -EBADMSG;
	if (!rep->nr_slots || rep->far_base != total / c->page_size ||
	    rep->nr_slots > (uint64_t)INT32_MAX - rep->far_base)
		return -EBADMSG;
	if ((c->page_size * rep->nr_slots) % (uint64_t)sys_page ||
	    rep->nr_slots > (SIZE_MAX - total) / c->page_size)
		return -EBADMSG;
	return 0;
}

static int far_map_locked(struct kvmm_client *c, const void **base, uint64_t *nr_pages,
			  uint32_t *far_base)
{
	struct kvmm_far_map_rep rep;
	int fds[KVMM_RX_FDS_MAX];
	unsigned int nr_fds = 0, i;
	size_t total, len;
	char *win;
	int err = kvmm_client_usable(c);

	if (err)
		return err;
	if (!(c->features & KVMM_FEAT_FAR) || c->backend != KVMM_BACKEND_HOST || !c->base)
		return -EOPNOTSUPP;
	err = kvmm_msg_call_fds(c, KVMM_OP_FAR_MAP, &rep, sizeof(rep), fds, KVMM_RX_FDS_MAX,
				&nr_fds);
	if (err)
		return err;
	err = far_rep_check(c, &rep, nr_fds);
	if (err)
		goto out;
	total = c->chunk_size * c->nr_chunks;
	len = total + c->page_size * rep.nr_slots;
	/* the same size again: in place, so that views over the old window read the new one */
	if (c->far && c->far_len != len) {
		munmap(c->far, c->far_len);
		c->far = NULL;
		c->far_gen = 0;
	}
	win = c->far;
	if (!win) {
		win = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			   0);
		if (win == MAP_FAILED) {
			err = -errno;
			goto out;
		}
	}
	for (i = 0; i < nr_fds; i++) {
		size_t off = (size_t)i * c->chunk_size;
		size_t n = i < rep.nr_chunks ? c->chunk_size : len - total;

		if (mmap(win + off, n, PROT_READ, MAP_SHARED | MAP_FIXED, fds[i], 0) ==
		    MAP_FAILED) {
			err = -errno;
			munmap(win, len);
			c->far = NULL;
			c->far_gen = 0;
			goto out;
		}
	}
	c->far = win;
	c->far_len = len;
	c->far_gen = rep.gen;
	c->far_base = rep.far_base;
	c->far_pages = rep.far_base + rep.nr_slots;
	if (base)
		*base = win;
	if (nr_pages)
		*nr_pages = c->far_pages;
	if (far_base)
		*far_base = c->far_base;
out:
	/* the mappings hold the memory */
	for (i = 0; i < nr_fds; i++)
		close(fds[i]);
	return err;
}

int kvmm_far_map(kvmm_client_t *c, const void **base, uint64_t *nr_pages, uint32_t *far_base)
{
	if (!c)
		return -EINVAL;
	return LOCKED(c, far_map_locked(c, base, nr_pages, far_base));
}

static int pin_far_locked(struct kvmm_client *c, uint64_t seq, uint32_t block, uint32_t nr_blocks,
			  int32_t *entries, uint32_t *nr_far)
{
	struct kvmm_pin_far_req req = {
		.seq = seq, .block = block, .nr_blocks = nr_blocks, .gen = c->far_gen};
	struct kvmm_iov part = {&req, sizeof(req)};
	const uint8_t *payload = c->rx + KVMM_MSG_HDR_SIZE;
	struct kvmm_pin_far_rep rep;
	size_t plen = 0;
	int err;

	if (!(c->features & KVMM_FEAT_FAR))
		return -EOPNOTSUPP;
	if (nr_blocks > KVMM_PIN_FAR_MAX)
		return -E2BIG;
	/* on the rings with their out area (KVMM_FEAT_RING_OUT), else the socket */
	err = kvmm_msg_call_var(c, KVMM_OP_SEQ_PIN_FAR, &part, 1, &plen);
	if (err)
		return err;
	/* the struct, then the entries, in c->rx */
	if (plen < sizeof(rep))
		return -EBADMSG;
	memcpy(&rep, payload, sizeof(rep));
	if (rep.count != nr_blocks || plen < sizeof(rep) + (size_t)nr_blocks * sizeof(int32_t))
		return -EBADMSG; /* pinned, and we cannot say where: the unpin still ends it */
	memcpy(entries, payload + sizeof(rep), nr_blocks * sizeof(int32_t));
	for (uint32_t i = 0; i < nr_blocks; i++)
		if (entries[i] != KVMM_BLOCK_NONE &&
		    (entries[i] < 0 ||
		     (uint64_t)entries[i] >= (c->far_gen ? c->far_pages : c->nr_frames)))
			return -EBADMSG;
	if (nr_far)
		*nr_far = rep.nr_far;
	return 0;
}

int kvmm_pin_far(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		 int32_t *entries, uint32_t *nr_far)
{
	if (!c || !nr_blocks || !entries)
		return -EINVAL;
	return LOCKED(c, pin_far_locked(c, seq, block, nr_blocks, entries, nr_far));
}
