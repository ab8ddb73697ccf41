// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_index.c - warm restart: a file tier's index of the sealed pages it holds, so that
 * a kvmmd started again on the same swap file (after a crash, kill -9 included, or an upgrade)
 * serves those prefixes again.
 *
 * The index is a second file beside the swap file, PATH.index (mode 0600, like the swap file:
 * it holds the namespace's secret, and the swap file its KV).  A 4 KiB header names what it
 * indexes - magic, version, the slot size and count, the namespace by name and its 128-bit
 * secret - followed by one fixed-size record per slot of the tier:
 *
 *   magic, token count, content key, parent key, format id, depth, the XXH3-64 of the page's
 *   bytes as written to the slot, the token ids (up to KVMM_INDEX_TOKENS), and an XXH3-64 of
 *   the record itself.
 *
 * Writing.  The medium computes the checksum of every page it writes (at completion, from the
 * staging buffer that went to the file: kvmm_swap_index_csum).  When a slot of the tier comes
 * to name a page-cache entry (a demotion, a move down from the host tier, a sealed page
 * swapped out with its sequence: kvmm_swap_index_note), its record is written with pwrite;
 * when the slot is let go (kvmm_swap_index_forget) the record's magic is cleared.  No fsync:
 * the records are there for a restarted process at once (the kernel's page cache), and a
 * machine crash can only lose or tear records, which the checks below reject.
 *
 * Restoring (kvmm_swap_index_attach, at swapon).  Records are taken in depth order; one
 * counts only when its own checksum holds, its key hashes again from its fields under the
 * namespace's secret, its page's bytes in the swap file have the checksum it names (read once
 * at swapon: a slot torn by a crash, or reused after the record was written and before it
 * was cleared, fails here), and it is not a duplicate.  Each becomes a swapped page-cache
 * entry (kvmm_pagecache_restore) that holds its slot, exactly as if it had just been demoted;
 * a lookup faults it in.  One whose parent was not restored - resident in the pool at the
 * crash, so never in the file - is restored pending: unreachable, until an engine that
 * recomputed that prefix seals its last block again; then it (with what was restored under
 * it) is adopted by that entry and hit like the rest (pagecache.c).  The rest is counted as
 * rejected and cleared.  So nothing stale or torn is ever served: at worst a
 * prefix is recomputed.  The namespace takes the header's secret when it has nothing yet
 * and was given no secret of its own (kvmm_ns_set_secret: its keys must be the ones the
 * records were made under); if it already has pages, has a provisioned secret that differs
 * (kvmmd's secret_file), or the header does not match the tier, the index starts over.
 *
 * Verifying.  The same per-slot checksums are checked on every read from the file
 * (kvmm_swap_index_verify, from the medium's completion): a page whose bytes changed after
 * they were written - a corrupted or torn slot, the file written by someone else - fails the
 * read with -EBADMSG and is dropped (kvmm_swap_slot_corrupt): its prefix misses, its sequence
 * is reported like an OOM victim; torn data is never installed.  Counted (swap_csum_bad,
 * the tier's csum_bad) and logged, rate-limited.
 *
 * The index is detached before the pool is torn down (kvmm_swap_index_detach), so a clean
 * shutdown leaves it as it was: the pages stay restorable.  Locking: the pool lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "bitmap.h"
#include "compiler.h"
#include "log.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

#define IDX_MAGIC "KVMMIDX1"
#define IDX_VERSION 1
#define IDX_HDR_SIZE 4096u
#define REC_MAGIC 0x4b565249u /* "IRVK" */
#define RESTORE_BATCH 64u     /* records read per pread at restore */

struct idx_hdr {
	char magic[8];
	uint32_t version;
	uint32_t rec_size;
	uint64_t page_size;
	uint64_t nslots;
	uint32_t max_tokens;
	uint32_t pad;
	char ns_name[32];
	uint64_t secret[2];
	uint64_t csum; /* XXH3-64 of the header up to here */
};

struct idx_rec {
	uint32_t magic; /* REC_MAGIC, or 0: no record */
	uint32_t ntokens;
	uint64_t key, parent_key, fmt_id;
	uint32_t depth;
	uint32_t pad;
	uint64_t page_csum;
	uint64_t csum; /* XXH3-64 of the record (this field 0) with its tokens */
	uint32_t tokens[KVMM_INDEX_TOKENS];
};

struct kvmm_swap_index {
	int fd;
	struct kvmm_ns *ns;
	unsigned long *map; /* slots with a live record */
	uint64_t *csum;	    /* per slot: XXH3-64 of the last page written there */
	uint64_t nr_records, restored, rejected, pending, write_errors;
	char path[KVMM_PATH_LEN + 8];
};

static uint64_t rec_csum(struct idx_rec *r)
{
	uint64_t saved = r->csum, c;

	r->csum = 0;
	c = XXH3_64bits(r,
			offsetof(struct idx_rec, tokens) + (size_t)r->ntokens * sizeof(uint32_t));
	r->csum = saved;
	return c;
}

static off_t rec_off(uint64_t slot)
{
	return (off_t)(IDX_HDR_SIZE + slot * sizeof(struct idx_rec));
}

static void hdr_init(struct idx_hdr *h, const struct kvmm_swap_tier *t, const struct kvmm_ns *ns)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, IDX_MAGIC, sizeof(h->magic));
	h->version = IDX_VERSION;
	h->rec_size = sizeof(struct idx_rec);
	h->page_size = t->page_size;
	h->nslots = t->nslots;
	h->max_tokens = KVMM_INDEX_TOKENS;
	memcpy(h->ns_name, ns->name, sizeof(h->ns_name));
	h->secret[0] = ns->secret[0];
	h->secret[1] = ns->secret[1];
	h->csum = XXH3_64bits(h, offsetof(struct idx_hdr, csum));
}

/* A fresh index for @t: the header of @ns, every record empty (a sparse file). */
static int index_reset(struct kvmm_swap_index *x, const struct kvmm_swap_tier *t)
{
	unsigned char page[IDX_HDR_SIZE] = {0};
	struct idx_hdr h;

	hdr_init(&h, t, x->ns);
	memcpy(page, &h, sizeof(h));
	if (ftruncate(x->fd, 0) || ftruncate(x->fd, rec_off(t->nslots)))
		return -errno;
	if (pwrite(x->fd, page, sizeof(page), 0) != (ssize_t)sizeof(page))
		return -EIO;
	memset(x->map, 0, bitmap_size(t->nslots));
	x->nr_records = 0;
	return 0;
}

/* Does the header on disk describe @t, indexed for a namespace called like @ns? */
static bool hdr_matches(const struct idx_hdr *h, const struct kvmm_swap_tier *t,
			const struct kvmm_ns *ns)
{
	return !memcmp(h->magic, IDX_MAGIC, sizeof(h->magic)) && h->version == IDX_VERSION &&
	       h->csum == XXH3_64bits(h, offsetof(struct idx_hdr, csum)) &&
	       h->rec_size == sizeof(struct idx_rec) && h->page_size == t->page_size &&
	       h->nslots == t->nslots && h->max_tokens == KVMM_INDEX_TOKENS &&
	       !strncmp(h->ns_name, ns->name, sizeof(h->ns_name)) && (h->secret[0] || h->secret[1]);
}

static void rec_clear(struct kvmm_swap_index *x, uint64_t slot)
{
	uint32_t zero = 0;

	if (pwrite(x->fd, &zero, sizeof(zero), rec_off(slot)) != (ssize_t)sizeof(zero))
		x->write_errors++;
}

struct restore_item {
	uint64_t slot;
	struct idx_rec rec;
};

static int by_depth(const void *a, const void *b)
{
	const struct restore_item *x = a, *y = b;

	if (x->rec.depth != y->rec.depth)
		return x->rec.depth < y->rec.depth ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* The records of the index that pass their own checks, or NULL (then *n is 0). */
static struct restore_item *read_records(struct kvmm_swap_index *x, const struct kvmm_swap_tier *t,
					 uint64_t *n)
{
	struct idx_rec *buf = malloc(RESTORE_BATCH * sizeof(*buf));
	struct restore_item *items = NULL;
	uint64_t s, cap = 0;

	*n = 0;
	if (!buf)
		return NULL;
	for (s = 0; s < t->nslots; s += RESTORE_BATCH) {
		uint64_t k, nr = min_t(uint64_t, RESTORE_BATCH, t->nslots - s);
		ssize_t got = pread(x->fd, buf, nr * sizeof(*buf), rec_off(s));

		if (got < 0)
			break;
		nr = min_t(uint64_t, nr, (uint64_t)got / sizeof(*buf));
		for (k = 0; k < nr; k++) {
			struct idx_rec *r = &buf[k];

			if (r->magic != REC_MAGIC)
				continue;
			if (r->ntokens > KVMM_INDEX_TOKENS || r->csum != rec_csum(r)) {
				x->rejected++;
				rec_clear(x, s + k);
				continue;
			}
			if (*n == cap) {
				struct restore_item *m;

				cap = cap ? cap * 2 : 64;
				m = realloc(items, cap * sizeof(*items));
				if (!m)
					goto out;
				items = m;
			}
			items[*n].slot = s + k;
			items[(*n)++].rec = *r;
		}
	}
out:
	free(buf);
	return items;
}

/* Restore the records of the index into @t's slots and the page cache; returns how many. */
static uint64_t index_restore(struct kvmm_swap_index *x, struct kvmm_swap_tier *t)
{
	struct kvmm_pool *pool = t->pool;
	struct kvmm_swap *sw = pool->swap;
	uint64_t i, n, done = 0;
	struct restore_item *items = read_records(x, t, &n);
	void *page = NULL;
	int dfd = open(t->path, O_RDONLY | O_CLOEXEC);

	if (dfd < 0 || posix_memalign(&page, 4096, t->page_size)) {
		x->rejected += n;
		n = 0;
	}
	if (n)
		qsort(items, n, sizeof(*items), by_depth);
	for (i = 0; i < n; i++) {
		struct idx_rec *r = &items[i].rec;
		uint64_t s = items[i].slot;
		struct kvmm_cache_desc d = {.key = r->key,
					    .parent_key = r->parent_key,
					    .fmt_id = r->fmt_id,
					    .depth = r->depth,
					    .ntokens = r->ntokens,
					    .tokens = r->tokens};
		struct kvmm_cache_ent *ent;

		/* the page's bytes, as the record says they were written */
		if (pread(dfd, page, t->page_size, (off_t)(s * t->page_size)) !=
			    (ssize_t)t->page_size ||
		    XXH3_64bits(page, t->page_size) != r->page_csum) {
			x->rejected++;
			rec_clear(x, s);
			continue;
		}
		ent = kvmm_pagecache_restore(pool, x->ns, &d, swp_entry(t->id, s));
		if (!ent) {
			x->rejected++;
			rec_clear(x, s);
			continue;
		}
		if (kvmm_pagecache_ent_pending(ent))
			x->pending++;
		kvmm_swap_slot_claim(t, s);
		t->slots[s].ent = ent;
		t->slots[s].ntokens = r->ntokens;
		t->slots[s].ns_id = x->ns->id;
		t->slots[s].swapped_at = ++sw->clock;
		x->csum[s] = r->page_csum;
		bitmap_set_bit(x->map, s);
		x->nr_records++;
		done++;
	}
	free(page);
	free(items);
	if (dfd >= 0)
		close(dfd);
	return done;
}

int kvmm_swap_index_attach(struct kvmm_swap_tier *t, struct kvmm_ns *ns)
{
	struct kvmm_swap_index *x;
	struct idx_hdr h;
	const char *why = NULL;
	int ret;

	if (!t->path[0] || !ns || ns->pool != t->pool)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->ns = ns;
	x->map = calloc(1, bitmap_size(t->nslots));
	x->csum = calloc(t->nslots, sizeof(*x->csum));
	if (!x->map || !x->csum) {
		ret = -ENOMEM;
		goto out_free;
	}
	snprintf(x->path, sizeof(x->path), "%s.index", t->path);
	x->fd = open(x->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (x->fd < 0) {
		ret = -errno;
		goto out_free;
	}
	if (pread(x->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		why = "new";
	else if (!hdr_matches(&h, t, ns))
		why = "made for another tier or namespace: starting over";
	else if ((h.secret[0] != ns->secret[0] || h.secret[1] != ns->secret[1]) && ns->secret_set)
		why = "made under another secret than the namespace's own: starting over";
	else if ((h.secret[0] != ns->secret[0] || h.secret[1] != ns->secret[1]) &&
		 kvmm_ns_set_secret(ns, h.secret))
		why = "the namespace already has pages: starting over";
	if (why) {
		ret = index_reset(x, t);
		if (ret)
			goto out_close;
		if (strcmp(why, "new"))
			kvmm_info("swap tier %u: index %s %s", t->id, x->path, why);
	} else {
		t->index = x;
		x->restored = index_restore(x, t);
		kvmm_info("swap tier %u: warm restart from %s: %llu sealed pages of namespace %s "
			  "restored (%llu waiting for their parent to be sealed again), "
			  "%llu records rejected",
			  t->id, x->path, (unsigned long long)x->restored, ns->name,
			  (unsigned long long)x->pending, (unsigned long long)x->rejected);
	}
	t->index = x;
	return 0;

out_close:
	close(x->fd);
out_free:
	free(x->map);
	free(x->csum);
	free(x);
	return ret;
}

void kvmm_swap_index_detach(struct kvmm_swap_tier *t)
{
	struct kvmm_swap_index *x = t->index;

	if (!x)
		return;
	t->index = NULL;
	close(x->fd);
	free(x->map);
	free(x->csum);
	free(x);
}

bool kvmm_swap_index_verify(struct kvmm_swap_tier *t, uint64_t slot, const void *page)
{
	/* 0: no checksum known for the slot (never written since the index was made) */
	if (!t->index || slot >= t->nslots || !t->index->csum[slot])
		return true;
	return XXH3_64bits(page, t->page_size) == t->index->csum[slot];
}

void kvmm_swap_index_csum(struct kvmm_swap_tier *t, uint64_t slot, const void *page)
{
	if (t->index && slot < t->nslots)
		t->index->csum[slot] = XXH3_64bits(page, t->page_size);
}

void kvmm_swap_index_note(struct kvmm_swap_tier *t, uint64_t slot)
{
	struct kvmm_swap_index *x = t->index;
	const struct kvmm_swap_slot *sl = &t->slots[slot];
	struct kvmm_cache_desc d;
	struct idx_rec r;
	size_t len;

	if (!x || !sl->ent || sl->ns_id != x->ns->id)
		return;
	kvmm_pagecache_ent_desc(sl->ent, &d);
	if (d.ntokens > KVMM_INDEX_TOKENS)
		return; /* not restorable: the block is longer than a record holds */
	memset(&r, 0, offsetof(struct idx_rec, tokens));
	r.magic = REC_MAGIC;
	r.ntokens = d.ntokens;
	r.key = d.key;
	r.parent_key = d.parent_key;
	r.fmt_id = d.fmt_id;
	r.depth = d.depth;
	r.page_csum = x->csum[slot];
	memcpy(r.tokens, d.tokens, (size_t)d.ntokens * sizeof(*d.tokens));
	r.csum = rec_csum(&r);
	len = offsetof(struct idx_rec, tokens) + (size_t)d.ntokens * sizeof(*d.tokens);
	if (pwrite(x->fd, &r, len, rec_off(slot)) != (ssize_t)len) {
		x->write_errors++;
		kvmm_warn_ratelimited("swap tier %u: index %s: a record write failed", t->id,
				      x->path);
		return;
	}
	if (!bitmap_test_bit(x->map, slot)) {
		bitmap_set_bit(x->map, slot);
		x->nr_records++;
	}
}

void kvmm_swap_index_forget(struct kvmm_swap_tier *t, uint64_t slot)
{
	struct kvmm_swap_index *x = t->index;

	if (!x || !bitmap_test_bit(x->map, slot))
		return;
	bitmap_clear_bit(x->map, slot);
	x->nr_records--;
	rec_clear(x, slot);
}

void kvmm_swap_index_info(const struct kvmm_swap_tier *t, struct kvmm_swap_tier_info *info)
{
	const struct kvmm_swap_index *x = t->index;

	info->indexed = x != NULL;
	if (!x)
		return;
	info->index_restored = x->restored;
	info->index_rejected = x->rejected;
	info->index_pending = x->pending;
	info->index_records = x->nr_records;
}
