// SPDX-License-Identifier: MIT
/*
 * kvmm/remote.c - the remote tier's worker: one thread that owns the Redis client
 * (remote_redis.c) and serves two queues, lookups first (a client waits for each) and then
 * stores (nobody waits).  The caller - kvmmd's loop - only ever queues and collects: it never
 * waits on the network, so a slow, partitioned or dead cluster costs lookups their remote
 * hits (after remote_timeout_ms at most), never the daemon its loop.
 *
 * A lookup is a struct kvmm_remote_req of n consecutive blocks of one prompt, each with its
 * content key and what its value must say (struct kvmm_remote_meta).  The worker GETs every
 * key in one pipelined batch (one round trip per node), checks every value it got back
 * (header, checksum, then the block's identity: kvmm_remote_value_check), keeps the verified
 * run from the first block on and frees the rest, then puts the request on the done list and
 * writes the eventfd.  The loop collects it with kvmm_remote_complete().  A lookup whose
 * client went away meanwhile is cancelled (owner NULL) and only freed.
 *
 * A store is one page: the frame bytes are copied when it is queued (the page may be evicted
 * right after), and the worker writes the header and checksum and SETs it, batching what is
 * queued.  Stores past max_queued_bytes are dropped and counted: the tier is a cache, never
 * a reason to hold memory without bound.
 *
 * Locking: r->lock guards the queues, the counters and the copy of the client's counters; the
 * client itself is the worker's alone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/remote.h"

#define STORE_BATCH 32
#define STORE_BATCH_BYTES (64u << 20)

const uint32_t kvmm_remote_lat_bounds_us[KVMM_REMOTE_LAT_BUCKETS] = {
	100,   250,   500,    1000,   2500,   5000,    10000,
	25000, 50000, 100000, 250000, 500000, 1000000, 5000000};

struct kvmm_remote {
	struct kvmm_remote_config cfg;
	struct kvmm_redis *rc; /* the worker's */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* work queued, or stop */
	pthread_cond_t idle; /* a store batch finished (kvmm_remote_flush) */
	bool stop;
	int efd;
	struct list_head lookups; /* queued */
	struct list_head stores;  /* queued */
	struct list_head done;	  /* finished lookups for the loop */
	struct kvmm_remote_req *running;
	uint32_t stores_running;
	struct kvmm_remote_stats st;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct kvmm_remote_req *kvmm_remote_req_alloc(uint32_t n)
{
	struct kvmm_remote_req *req = calloc(1, sizeof(*req) + (size_t)n * sizeof(req->blk[0]));

	if (!req)
		return NULL;
	INIT_LIST_HEAD(&req->node);
	req->n = n;
	return req;
}

void kvmm_remote_req_free(struct kvmm_remote_req *req)
{
	if (!req)
		return;
	for (uint32_t i = 0; i < req->n; i++)
		free(req->blk[i].val);
	free(req);
}

static void lat_account(struct kvmm_remote_stats *st, uint64_t us)
{
	unsigned int b;

	for (b = 0; b < KVMM_REMOTE_LAT_BUCKETS; b++)
		if (us <= kvmm_remote_lat_bounds_us[b])
			break;
	st->lat_bucket[b]++;
	st->lat_sum_us += us;
	if (us > st->lat_max_us)
		st->lat_max_us = us;
}

static void serve_lookup(struct kvmm_remote *r, struct kvmm_remote_req *req)
{
	struct kvmm_redis_op *ops = calloc(req->n, sizeof(*ops));
	char(*keys)[KVMM_REMOTE_KEY_LEN] = calloc(req->n, sizeof(*keys));
	uint64_t hits = 0, misses = 0, errors = 0, corrupt = 0, mismatch = 0, bytes = 0, t0;
	bool run = true;
	uint32_t i;

	req->found = 0;
	if (!ops || !keys) {
		free(ops);
		free(keys);
		pthread_mutex_lock(&r->lock);
		r->st.errors += req->n;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	for (i = 0; i < req->n; i++) {
		kvmm_remote_key(keys[i], req->blk[i].key);
		ops[i].key = keys[i];
		ops[i].keylen = strlen(keys[i]);
	}
	t0 = now_ns();
	kvmm_redis_get(r->rc, ops, req->n);
	t0 = (now_ns() - t0) / 1000;
	for (i = 0; i < req->n; i++) {
		struct kvmm_remote_blk *b = &req->blk[i];
		enum kvmm_remote_verdict v = KVMM_REMOTE_VERDICT_COUNT;

		if (ops[i].res == 0) {
			bytes += ops[i].len;
			v = kvmm_remote_value_check(ops[i].val, ops[i].len, &b->want);
			if (v == KVMM_REMOTE_CORRUPT) {
				corrupt++;
				kvmm_warn_ratelimited(
					"remote: %s: corrupt value (%zu bytes) rejected", keys[i],
					ops[i].len);
			} else if (v == KVMM_REMOTE_MISMATCH) {
				mismatch++;
			}
		} else if (ops[i].res != -ENOENT) {
			errors++;
		}
		/* only the run from the first block can be mapped: a hole ends it */
		if (run && v == KVMM_REMOTE_OK) {
			b->val = ops[i].val;
			b->len = ops[i].len;
			req->found++;
			hits++;
		} else {
			run = false;
			free(ops[i].val);
			misses++;
		}
	}
	pthread_mutex_lock(&r->lock);
	r->st.hits += hits;
	r->st.misses += misses;
	r->st.errors += errors;
	r->st.corrupt += corrupt;
	r->st.mismatch += mismatch;
	r->st.bytes_in += bytes;
	lat_account(&r->st, t0);
	kvmm_redis_get_stats(r->rc, &r->st.redis);
	pthread_mutex_unlock(&r->lock);
	if (errors)
		kvmm_warn_ratelimited(
			"remote: %llu of %u blocks lost to cluster errors (counted as "
			"misses)",
			(unsigned long long)errors, req->n);
	free(ops);
	free(keys);
}

static void serve_stores(struct kvmm_remote *r, struct list_head *batch, uint32_t n)
{
	struct kvmm_redis_op ops[STORE_BATCH];
	char keys[STORE_BATCH][KVMM_REMOTE_KEY_LEN];
	struct kvmm_remote_req *req, *tmp;
	uint64_t ok = 0, failed = 0, bytes = 0, freed = 0;
	uint32_t i = 0;

	list_for_each_entry (req, batch, node) {
		struct kvmm_remote_blk *b = &req->blk[0];

		kvmm_remote_hdr_encode(b->val, &b->want, (uint8_t *)b->val + KVMM_REMOTE_HDR_LEN);
		kvmm_remote_key(keys[i], b->key);
		ops[i].key = keys[i];
		ops[i].keylen = strlen(keys[i]);
		ops[i].val = b->val;
		ops[i].len = b->len;
		i++;
	}
	kvmm_redis_set(r->rc, ops, n, r->cfg.ttl_s);
	i = 0;
	list_for_each_entry_safe (req, tmp, batch, node) {
		if (ops[i].res == 0) {
			ok++;
			bytes += ops[i].len;
		} else {
			failed++;
		}
		freed += req->blk[0].len;
		list_del(&req->node);
		kvmm_remote_req_free(req);
		i++;
	}
	pthread_mutex_lock(&r->lock);
	r->st.stores += ok;
	r->st.store_errors += failed;
	r->st.bytes_out += bytes;
	r->st.queued_bytes -= freed;
	kvmm_redis_get_stats(r->rc, &r->st.redis);
	pthread_mutex_unlock(&r->lock);
	if (failed)
		kvmm_warn_ratelimited("remote: %llu page stores failed",
				      (unsigned long long)failed);
}

static void *worker(void *arg)
{
	struct kvmm_remote *r = arg;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct kvmm_remote_req *req;

		while (!r->stop && list_empty(&r->lookups) && list_empty(&r->stores))
			pthread_cond_wait(&r->wake, &r->lock);
		if (r->stop)
			break;
		if (!list_empty(&r->lookups)) {
			uint64_t one = 1;
			bool live;

			req = list_first_entry(&r->lookups, struct kvmm_remote_req, node);
			list_del_init(&req->node);
			r->running = req;
			live = req->owner; /* a cancelled lookup is not worth the round trip */
			pthread_mutex_unlock(&r->lock);
			if (live)
				serve_lookup(r, req);
			pthread_mutex_lock(&r->lock);
			r->running = NULL;
			list_add_tail(&req->node, &r->done);
			if (write(r->efd, &one, sizeof(one)) < 0)
				kvmm_warn_ratelimited("remote: eventfd: %m");
		} else {
			LIST_HEAD(batch);
			uint64_t bytes = 0;
			uint32_t n = 0;

			while (!list_empty(&r->stores) && n < STORE_BATCH &&
			       bytes < STORE_BATCH_BYTES) {
				req = list_first_entry(&r->stores, struct kvmm_remote_req, node);
				list_move_tail(&req->node, &batch);
				bytes += req->blk[0].len;
				n++;
			}
			r->stores_running = n;
			pthread_mutex_unlock(&r->lock);
			serve_stores(r, &batch, n);
			pthread_mutex_lock(&r->lock);
			r->stores_running = 0;
			pthread_cond_broadcast(&r->idle);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int kvmm_remote_create(const struct kvmm_remote_config *cfg, struct kvmm_remote **out)
{
	struct kvmm_remote *r = calloc(1, sizeof(*r));
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->cfg = *cfg;
	if (!r->cfg.max_value)
		r->cfg.max_value = 512u << 20;
	if (!r->cfg.max_queued_bytes)
		r->cfg.max_queued_bytes = 64u << 20;
	if (!r->cfg.max_blocks)
		r->cfg.max_blocks = 1024;
	INIT_LIST_HEAD(&r->lookups);
	INIT_LIST_HEAD(&r->stores);
	INIT_LIST_HEAD(&r->done);
	r->rc = kvmm_redis_create(&r->cfg.redis);
	if (!r->rc) {
		ret = -errno;
		goto out_free;
	}
	kvmm_redis_get_stats(r->rc, &r->st.redis); /* the seeds, before any batch */
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->efd < 0) {
		ret = -errno;
		goto out_redis;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	pthread_cond_init(&r->idle, NULL);
	ret = -pthread_create(&r->thread, NULL, worker, r);
	if (ret)
		goto out_efd;
	*out = r;
	return 0;

out_efd:
	pthread_cond_destroy(&r->idle);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	close(r->efd);
out_redis:
	kvmm_redis_destroy(r->rc);
out_free:
	free(r);
	return ret;
}

static void free_list(struct list_head *head)
{
	struct kvmm_remote_req *req, *tmp;

	list_for_each_entry_safe (req, tmp, head, node) {
		list_del(&req->node);
		kvmm_remote_req_free(req);
	}
}

void kvmm_remote_destroy(struct kvmm_remote *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	free_list(&r->lookups);
	free_list(&r->stores);
	free_list(&r->done);
	kvmm_redis_destroy(r->rc);
	close(r->efd);
	pthread_cond_destroy(&r->idle);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int kvmm_remote_fd(const struct kvmm_remote *r)
{
	return r->efd;
}

const struct kvmm_remote_config *kvmm_remote_cfg(const struct kvmm_remote *r)
{
	return &r->cfg;
}

void kvmm_remote_lookup(struct kvmm_remote *r, struct kvmm_remote_req *req)
{
	req->store = false;
	req->t_submit_ns = now_ns();
	pthread_mutex_lock(&r->lock);
	r->st.lookups++;
	r->st.lookup_blocks += req->n;
	list_add_tail(&req->node, &r->lookups);
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
}

void kvmm_remote_note_demoted(struct kvmm_remote *r)
{
	pthread_mutex_lock(&r->lock);
	r->st.demoted++;
	pthread_mutex_unlock(&r->lock);
}

int kvmm_remote_store(struct kvmm_remote *r, uint64_t key, const struct kvmm_remote_meta *m,
		      const void *frame)
{
	size_t len = KVMM_REMOTE_HDR_LEN + m->payload_len;
	struct kvmm_remote_req *req;
	bool full;

	if (m->payload_len > r->cfg.max_value)
		return -EFBIG;
	pthread_mutex_lock(&r->lock);
	full = r->st.queued_bytes + len > r->cfg.max_queued_bytes;
	if (full)
		r->st.store_dropped++;
	pthread_mutex_unlock(&r->lock);
	if (full) {
		kvmm_notice_ratelimited("remote: store queue full (%llu bytes), page not written",
					(unsigned long long)r->cfg.max_queued_bytes);
		return -ENOBUFS;
	}
	req = kvmm_remote_req_alloc(1);
	if (!req)
		return -ENOMEM;
	req->blk[0].val = malloc(len);
	if (!req->blk[0].val) {
		kvmm_remote_req_free(req);
		return -ENOMEM;
	}
	/* the header (and its checksum) is the worker's job: only the copy happens here */
	memcpy((uint8_t *)req->blk[0].val + KVMM_REMOTE_HDR_LEN, frame, m->payload_len);
	req->blk[0].len = len;
	req->blk[0].key = key;
	req->blk[0].want = *m;
	req->store = true;
	req->n = 1;
	pthread_mutex_lock(&r->lock);
	r->st.queued_bytes += len;
	list_add_tail(&req->node, &r->stores);
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

struct kvmm_remote_req *kvmm_remote_complete(struct kvmm_remote *r)
{
	struct kvmm_remote_req *req = NULL;
	uint64_t v;

	/* drain first: a completion queued after this read writes the eventfd again */
	if (read(r->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		kvmm_warn_ratelimited("remote: eventfd: %m");
	pthread_mutex_lock(&r->lock);
	if (!list_empty(&r->done)) {
		req = list_first_entry(&r->done, struct kvmm_remote_req, node);
		list_del_init(&req->node);
	}
	pthread_mutex_unlock(&r->lock);
	return req;
}

void kvmm_remote_cancel(struct kvmm_remote *r, void *owner)
{
	struct kvmm_remote_req *req;

	pthread_mutex_lock(&r->lock);
	list_for_each_entry (req, &r->lookups, node)
		if (req->owner == owner) {
			req->owner = NULL;
			r->st.cancelled++;
		}
	list_for_each_entry (req, &r->done, node)
		if (req->owner == owner) {
			req->owner = NULL;
			r->st.cancelled++;
		}
	if (r->running && r->running->owner == owner) {
		r->running->owner = NULL;
		r->st.cancelled++;
	}
	pthread_mutex_unlock(&r->lock);
}

void kvmm_remote_flush(struct kvmm_remote *r)
{
	pthread_mutex_lock(&r->lock);
	while (!list_empty(&r->stores) || r->stores_running)
		pthread_cond_wait(&r->idle, &r->lock);
	pthread_mutex_unlock(&r->lock);
}

void kvmm_remote_get_stats(struct kvmm_remote *r, struct kvmm_remote_stats *st)
{
	pthread_mutex_lock(&r->lock);
	*st = r->st;
	pthread_mutex_unlock(&r->lock);
}
