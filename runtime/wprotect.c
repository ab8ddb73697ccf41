// SPDX-License-Identifier: MIT
/*
 * runtime/wprotect.c - read-only pool pages in the client. The pool is mapped read-only (host
 * memory: PROT_READ; GPU memory: cuMemSetAccess read-only, each frame its own mapping, see
 * cuda_map.c); a frame's range is made writable (mprotect, or cuMemSetAccess read-write) only
 * while this handle holds it as
 * its own page that nobody else can see: a page of one of its sequences that is neither
 * sealed nor shared, or a frame taken from its magazine. Sealing, forking (which shares the
 * parent's pages with the child), truncating, freeing, a preemption and giving a magazine
 * frame back make it read-only again, before the daemon can hand the frame to anyone else. A
 * write into a sealed or shared page, or into another client's page, is then a SIGSEGV in the
 * writer instead of silent corruption in every reader of the prefix cache.
 *
 * What a sequence may write is tracked here without asking the daemon: its blocks [0, w) are
 * sealed, mapped from the prefix cache or shared with a fork (kvmm keeps those a prefix of the
 * sequence: sealing goes in order, lookups map whole sealed pages at the start, a fork shares
 * the parent's first pages), blocks [w, nr_blocks) are its own. Each operation's reply moves
 * w (an append makes the block of its first token and every later one the sequence's own: the
 * daemon copies a shared or sealed partial last page first). Frames are granted lazily, when
 * the engine learns them: kvmm_block_table (the only way to learn a sequence's frames) makes
 * [w, nr_blocks) writable, and notices a frame that changed under a block (a swap-in) and
 * revokes the old one. A magazine frame is writable from kvmm_mag_alloc until kvmm_mag_free,
 * or, named in an append, until its sequence lets it go like any other page.
 *
 * Every frame has one owner here (a sequence id, the magazine, or none); a revocation only
 * touches a frame its sequence still owns. If the kernel refuses an mprotect (ENOMEM past
 * vm.max_map_count) or memory for the bookkeeping runs out, the handle falls back to a
 * writable pool (kvmm_write_protected() then says 0) rather than fault a correct engine.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hashtable.h"
#include "runtime/libkvmm.h"

#define WP_OWNER_NONE 0
#define WP_OWNER_MAG UINT64_MAX
#define WP_SEQ_BITS 10

/* One sequence of the handle. */
struct wp_seq {
	struct hlist_node node;
	uint64_t id;
	uint64_t len; /* tokens */
	uint32_t w;   /* blocks below are read-only (sealed, cached, shared) */
	uint32_t cap; /* entries of blk */
	int32_t *blk; /* frame granted at each block, KVMM_BLOCK_NONE if none */
};

/* An asynchronous operation on its way: what its completion will mean. */
struct wp_pending {
	uint64_t tag; /* socket: header seq; ring: KVMM_WP_RING_TAG | SQ position */
	struct kvmm_wp_op op;
	uint32_t *frames; /* APPEND_FRAMES: a copy of the frames named */
};

struct kvmm_wp {
	uint64_t *owner; /* per frame */
	DECLARE_HASHTABLE(seqs, WP_SEQ_BITS);
	/* a ring of pend_cap entries from pend_head; a consumed entry has tag 0 */
	struct wp_pending *pend;
	unsigned int pend_head, nr_pend, pend_cap;
	/*
	 * Frames whose owner went from none to someone or back since the last flush: the flush
	 * makes each one's protection match its owner, adjacent frames in one mprotect.
	 */
	uint8_t *state; /* per frame: WP_ST_* */
	uint32_t *dirty;
	uint32_t nr_dirty, dirty_cap;
};

#define WP_ST_RW 1U    /* mprotected writable */
#define WP_ST_DIRTY 2U /* in dirty[] */

static uint32_t div_up(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

/* Frames [first, first + n) read-write (@rw) or read-only: 0 or -errno. */
static int wp_prot(struct kvmm_client *c, uint32_t first, uint32_t n, bool rw)
{
	uint64_t off = (uint64_t)first * c->page_size, len = (uint64_t)n * c->page_size;

	if (!c->base) /* GPU memory, mapped a frame a mapping */
		return kvmm_client_cuda_protect(c, off, len, rw);
	return mprotect((char *)c->base + off, len, rw ? PROT_READ | PROT_WRITE : PROT_READ)
		       ? -errno
		       : 0;
}

/* The whole pool writable: 0 or -errno. */
static int wp_all_rw(struct kvmm_client *c)
{
	if (!c->base)
		return c->cuda_ro ? wp_prot(c, 0, c->nr_frames, true) : 0;
	return mprotect(c->base, c->map_len, PROT_READ | PROT_WRITE) ? -errno : 0;
}

/* Fall back to a writable pool: protection is best effort, a correct engine never faults. */
static void wp_off(struct kvmm_client *c, int why)
{
	if (!c->wp)
		return;
	wp_all_rw(c);
	kvmm_wp_free(c);
	c->wp_off_reason = why;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Make the protection of every frame changed since the last flush match its owner (writable
 * iff it has one), before the call that changed it returns. The frames are sorted first, so
 * that adjacent ones that change the same way are one mprotect: a bulk append's pages come in
 * runs, and so do the pages of a step's appends to different sequences. 0, or -1 when
 * protection went off.
 */
int kvmm_wp_flush(struct kvmm_client *c)
{
	struct kvmm_wp *wp = c->wp;
	uint32_t i = 0;
	int ret;

	if (!wp || !wp->nr_dirty)
		return 0;
	if (wp->nr_dirty > 1)
		qsort(wp->dirty, wp->nr_dirty, sizeof(*wp->dirty), cmp_u32);
	while (i < wp->nr_dirty) {
		uint32_t first = wp->dirty[i], n = 1;
		bool rw = wp->owner[first] != WP_OWNER_NONE;

		wp->state[first] &= ~WP_ST_DIRTY;
		if (rw == !!(wp->state[first] & WP_ST_RW)) {
			i++;
			continue; /* changed and changed back */
		}
		while (i + n < wp->nr_dirty && wp->dirty[i + n] == first + n &&
		       (wp->owner[first + n] != WP_OWNER_NONE) == rw &&
		       rw != !!(wp->state[first + n] & WP_ST_RW)) {
			wp->state[first + n] &= ~WP_ST_DIRTY;
			n++;
		}
		ret = wp_prot(c, first, n, rw);
		if (ret) {
			wp_off(c, ret);
			return -1;
		}
		for (uint32_t k = 0; k < n; k++)
			wp->state[first + k] = rw ? WP_ST_RW : 0;
		i += n;
	}
	wp->nr_dirty = 0;
	return 0;
}

/* frame's owner changed between none and someone: its protection is due at the flush. */
static int frame_mark(struct kvmm_client *c, uint32_t frame)
{
	struct kvmm_wp *wp = c->wp;

	if (wp->state[frame] & WP_ST_DIRTY)
		return 0;
	if (wp->nr_dirty == wp->dirty_cap) {
		uint32_t cap = wp->dirty_cap ? wp->dirty_cap * 2 : 256;
		uint32_t *d = realloc(wp->dirty, sizeof(*d) * cap);

		if (!d) {
			wp_off(c, -ENOMEM);
			return -1;
		}
		wp->dirty = d;
		wp->dirty_cap = cap;
	}
	wp->dirty[wp->nr_dirty++] = frame;
	wp->state[frame] |= WP_ST_DIRTY;
	return 0;
}

/* Make frame writable for owner. 0, or -1 when protection just went off. */
static int wp_grant(struct kvmm_client *c, uint32_t frame, uint64_t owner)
{
	struct kvmm_wp *wp = c->wp;

	if (frame >= c->nr_frames)
		return 0;
	if (wp->owner[frame] == WP_OWNER_NONE && frame_mark(c, frame))
		return -1;
	wp->owner[frame] = owner;
	return 0;
}

/* Make frame read-only if owner still holds it. */
static int wp_revoke(struct kvmm_client *c, uint32_t frame, uint64_t owner)
{
	struct kvmm_wp *wp = c->wp;

	if (frame >= c->nr_frames || wp->owner[frame] != owner)
		return 0;
	if (frame_mark(c, frame))
		return -1;
	wp->owner[frame] = WP_OWNER_NONE;
	return 0;
}

int kvmm_wp_setup(struct kvmm_client *c)
{
	long sys_page = sysconf(_SC_PAGESIZE);
	struct kvmm_wp *wp;

	c->wp = NULL;
	if (!c->base && !c->cuda_ro) {
		/*
		 * A pool in GPU memory mapped read-write (cuda_map.c said why, or no device is
		 * mapped: $KVMM_CUDA_DEVICE=none)
		 */
		if (!c->wp_off_reason)
			c->wp_off_reason = -EOPNOTSUPP;
		return 0;
	}
	if (c->base && (sys_page <= 0 || c->page_size % (uint64_t)sys_page)) {
		/* a frame smaller than (or not made of) whole pages cannot be protected alone */
		c->wp_off_reason = -EOPNOTSUPP;
		return wp_all_rw(c);
	}
	wp = calloc(1, sizeof(*wp));
	if (wp) {
		wp->owner = calloc(c->nr_frames ? c->nr_frames : 1, sizeof(*wp->owner));
		wp->state = calloc(c->nr_frames ? c->nr_frames : 1, sizeof(*wp->state));
	}
	if (!wp || !wp->owner || !wp->state) {
		if (wp) {
			free(wp->owner);
			free(wp->state);
		}
		free(wp);
		c->wp_off_reason = -ENOMEM;
		return wp_all_rw(c);
	}
	hash_init(wp->seqs);
	c->wp = wp;
	c->wp_off_reason = 0;
	return 0;
}

void kvmm_wp_free(struct kvmm_client *c)
{
	struct kvmm_wp *wp = c->wp;
	struct hlist_node *tmp;
	struct wp_seq *s;
	unsigned int bkt;

	if (!wp)
		return;
	hash_for_each_safe (wp->seqs, bkt, tmp, s, node) {
		hash_del(&s->node);
		free(s->blk);
		free(s);
	}
	for (unsigned int i = 0; i < wp->nr_pend; i++)
		free(wp->pend[(wp->pend_head + i) % wp->pend_cap].frames);
	free(wp->pend);
	free(wp->dirty);
	free(wp->state);
	free(wp->owner);
	free(wp);
	c->wp = NULL;
}

static struct wp_seq *seq_find(struct kvmm_wp *wp, uint64_t id)
{
	struct wp_seq *s;

	hash_for_each_possible (wp->seqs, s, node, id)
		if (s->id == id)
			return s;
	return NULL;
}

static struct wp_seq *seq_new(struct kvmm_client *c, uint64_t id)
{
	struct wp_seq *s = seq_find(c->wp, id);

	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s) {
		wp_off(c, -ENOMEM);
		return NULL;
	}
	s->id = id;
	hash_add(c->wp->seqs, &s->node, id);
	return s;
}

/* Room for block b in s->blk. 0 or -1 (protection went off). */
static int seq_reserve(struct kvmm_client *c, struct wp_seq *s, uint32_t nr)
{
	uint32_t cap = s->cap ? s->cap : 8;
	int32_t *blk;

	if (nr <= s->cap)
		return 0;
	while (cap < nr)
		cap *= 2;
	blk = realloc(s->blk, sizeof(*blk) * cap);
	if (!blk) {
		wp_off(c, -ENOMEM);
		return -1;
	}
	for (uint32_t i = s->cap; i < cap; i++)
		blk[i] = KVMM_BLOCK_NONE;
	s->blk = blk;
	s->cap = cap;
	return 0;
}

/* Revoke what s was granted at blocks [from, to). 0 or -1 (protection went off). */
static int seq_revoke(struct kvmm_client *c, struct wp_seq *s, uint32_t from, uint32_t to)
{
	if (to > s->cap)
		to = s->cap;
	for (uint32_t b = from; b < to; b++) {
		if (s->blk[b] == KVMM_BLOCK_NONE)
			continue;
		if (wp_revoke(c, (uint32_t)s->blk[b], s->id))
			return -1;
		s->blk[b] = KVMM_BLOCK_NONE;
	}
	return 0;
}

static void seq_drop(struct kvmm_client *c, struct wp_seq *s)
{
	if (seq_revoke(c, s, 0, s->cap))
		return; /* wp_off freed s */
	hash_del(&s->node);
	free(s->blk);
	free(s);
}

/* w rises to (at least) nw: the blocks below become read-only. */
static void seq_raise_w(struct kvmm_client *c, struct wp_seq *s, uint32_t nw)
{
	if (nw <= s->w)
		return;
	if (seq_revoke(c, s, s->w, nw))
		return;
	s->w = nw;
}

static void wp_done(struct kvmm_client *c, const struct kvmm_wp_op *op, const struct kvmm_cqe *res)
{
	uint32_t tpp = c->tokens_per_page;
	struct wp_seq *s;

	if (!c->wp || !tpp)
		return;
	if (op->op == KVMM_OP_SEQ_CREATE) {
		s = seq_new(c, res->seq);
		if (s) {
			s->len = 0;
			s->w = 0;
		}
		return;
	}
	if (op->op == KVMM_OP_SEQ_PROMPT) {
		/* a new sequence of op->nr tokens, its first pages (res->nr_tokens) shared hits */
		s = seq_new(c, res->seq);
		if (s) {
			s->len = op->nr;
			s->w = div_up(res->nr_tokens, tpp);
		}
		return;
	}
	s = seq_find(c->wp, op->seq);
	if (!s)
		return; /* not one we track: nothing of it is writable */
	switch (op->op) {
	case KVMM_OP_SEQ_APPEND:
	case KVMM_OP_SEQ_APPEND_FRAMES: {
		uint64_t old = res->nr_tokens - op->nr;
		uint32_t first = (uint32_t)(old / tpp), nb_old = div_up(old, tpp);

		s->len = res->nr_tokens;
		if (!op->nr)
			break; /* an empty append (asking the length) changes no page */
		/* the block of the first new token on: ours (a shared or sealed one was copied) */
		if (first < s->w) {
			/* a copy replaced the block's frame: the old one is not ours to keep */
			if (seq_revoke(c, s, first, s->w))
				return;
			s->w = first;
		}
		s->len = res->nr_tokens;
		if (op->op == KVMM_OP_SEQ_APPEND_FRAMES && op->frames) {
			/* the magazine frames named are now blocks nb_old .. of the sequence */
			if (seq_reserve(c, s, nb_old + op->nr_frames))
				return;
			for (uint32_t i = 0; i < op->nr_frames; i++) {
				uint32_t f = op->frames[i];

				if (f < c->nr_frames && c->wp->owner[f] == WP_OWNER_MAG) {
					c->wp->owner[f] = s->id;
					s->blk[nb_old + i] = (int32_t)f;
				}
			}
		}
		break;
	}
	case KVMM_OP_PREFIX_LOOKUP:
		s->len = res->nr_tokens;
		seq_raise_w(c, s, div_up(s->len, tpp));
		break;
	case KVMM_OP_SEAL: {
		uint64_t full = s->len / tpp;
		uint64_t end = op->nr ? (uint64_t)op->arg + op->nr : full;

		seq_raise_w(c, s, (uint32_t)(end < full ? end : full));
		break;
	}
	case KVMM_OP_SEQ_FORK: {
		struct wp_seq *child;
		uint64_t len = op->arg < s->len ? op->arg : s->len;

		/* both now see the parent's first pages: neither may write them in place */
		seq_raise_w(c, s, res->nr_blocks);
		child = seq_new(c, res->seq);
		if (child) {
			child->len = len;
			child->w = res->nr_blocks;
		}
		break;
	}
	case KVMM_OP_SEQ_TRUNCATE: {
		uint32_t nb = div_up(op->arg, tpp);

		if (seq_revoke(c, s, nb, s->cap))
			return;
		s->len = op->arg;
		if (s->w > nb)
			s->w = nb;
		break;
	}
	case KVMM_OP_SEQ_FREE:
	case KVMM_OP_SEQ_SEAL_FREE:
		seq_drop(c, s);
		break;
	default:
		break;
	}
}

static void wp_row(struct kvmm_client *c, uint64_t seq, const int32_t *row, uint32_t n)
{
	struct wp_seq *s;

	if (!c->wp)
		return;
	s = seq_find(c->wp, seq);
	if (!s || n <= s->w)
		return;
	if (seq_reserve(c, s, n))
		return;
	for (uint32_t b = s->w; b < n; b++) {
		int32_t f = row[b];

		if (f == s->blk[b])
			continue;
		/* a swap-in moved the block: the frame it left may be someone else's by now */
		if (s->blk[b] != KVMM_BLOCK_NONE && wp_revoke(c, (uint32_t)s->blk[b], s->id))
			return;
		s->blk[b] = KVMM_BLOCK_NONE;
		if (f < 0 || (uint32_t)f >= c->nr_frames)
			continue;
		if (wp_grant(c, (uint32_t)f, s->id))
			return;
		s->blk[b] = f;
	}
}

void kvmm_wp_done(struct kvmm_client *c, const struct kvmm_wp_op *op, const struct kvmm_cqe *res)
{
	if (!c->wp)
		return;
	wp_done(c, op, res);
	kvmm_wp_flush(c);
}

void kvmm_wp_row(struct kvmm_client *c, uint64_t seq, const int32_t *row, uint32_t n)
{
	if (c->wp)
		wp_row(c, seq, row, n);
}

void kvmm_wp_mag(struct kvmm_client *c, const uint32_t *frames, uint32_t n, bool taken)
{
	for (uint32_t i = 0; i < n && c->wp; i++) {
		if (taken)
			wp_grant(c, frames[i], WP_OWNER_MAG);
		else
			wp_revoke(c, frames[i], WP_OWNER_MAG);
	}
	kvmm_wp_flush(c);
}

int kvmm_wp_pending_add(struct kvmm_client *c, uint64_t tag, const struct kvmm_wp_op *op)
{
	struct kvmm_wp *wp = c->wp;
	struct wp_pending *p;

	if (!wp)
		return 0;
	switch (op->op) {
	case KVMM_OP_SEQ_CREATE:
	case KVMM_OP_SEQ_APPEND:
	case KVMM_OP_SEQ_APPEND_FRAMES:
	case KVMM_OP_SEQ_FORK:
	case KVMM_OP_SEQ_TRUNCATE:
	case KVMM_OP_SEQ_FREE:
	case KVMM_OP_PREFIX_LOOKUP:
	case KVMM_OP_SEAL:
	/*
	 * The compound ones too: an asynchronous SEQ_PROMPT's new sequence was never tracked
	 * (its own new pages stayed read-only: SIGSEGV in the engine writing them), and a
	 * SEQ_SEAL_FREE left its sealed pages writable.
	 */
	case KVMM_OP_SEQ_PROMPT:
	case KVMM_OP_SEQ_SEAL_FREE:
		break;
	default:
		return 0; /* changes nothing of what is writable */
	}
	if (wp->nr_pend == wp->pend_cap) {
		unsigned int cap = wp->pend_cap ? wp->pend_cap * 2 : 64;

		p = malloc(sizeof(*p) * cap);
		if (!p) {
			wp_off(c, -ENOMEM);
			return 0;
		}
		for (unsigned int i = 0; i < wp->nr_pend; i++)
			p[i] = wp->pend[(wp->pend_head + i) % wp->pend_cap];
		free(wp->pend);
		wp->pend = p;
		wp->pend_cap = cap;
		wp->pend_head = 0;
	}
	p = &wp->pend[(wp->pend_head + wp->nr_pend) % wp->pend_cap];
	p->tag = tag;
	p->op = *op;
	p->frames = NULL;
	if (op->frames && op->nr_frames) {
		p->frames = malloc(sizeof(uint32_t) * op->nr_frames);
		if (!p->frames) {
			wp_off(c, -ENOMEM);
			return 0;
		}
		memcpy(p->frames, op->frames, sizeof(uint32_t) * op->nr_frames);
	}
	p->op.frames = p->frames;
	wp->nr_pend++;
	return 0;
}

void kvmm_wp_pending_done(struct kvmm_client *c, uint64_t tag, const struct kvmm_cqe *cqe)
{
	struct kvmm_wp *wp = c->wp;
	struct wp_pending p;

	if (!wp || !tag)
		return;
	/* completions come in submission order, mostly: the match is usually the first entry */
	for (unsigned int i = 0; i < wp->nr_pend; i++) {
		struct wp_pending *e = &wp->pend[(wp->pend_head + i) % wp->pend_cap];

		if (e->tag != tag)
			continue;
		p = *e;
		e->tag = 0;
		e->frames = NULL;
		while (wp->nr_pend && wp->pend[wp->pend_head].tag == 0) {
			wp->pend_head = (wp->pend_head + 1) % wp->pend_cap;
			wp->nr_pend--;
		}
		if (cqe->res == 0)
			wp_done(c, &p.op, cqe); /* applied at the next kvmm_wp_flush */
		free(p.frames);
		return;
	}
}

int kvmm_write_protected(const kvmm_client_t *c)
{
	return c && c->wp ? 1 : 0;
}
