/* SPDX-License-Identifier: MIT */
/*
 * kvmm/remote.h - the remote KV tier: sealed pages shared by every kvmmd pointed at one Redis
 * (Cluster or a single server), Documentation/admin-guide/remote.md.
 *
 * Three layers, one file each:
 *
 *   remote_value.c  what is stored: a 64-byte header (magic, version, format, lengths, the
 *                   block's place and a 128-bit digest of the whole prefix, an XXH3 checksum)
 *                   followed by the whole frame; the Redis key is the page's content key.
 *                   Pure functions, no I/O.
 *   remote_redis.c  a Redis Cluster client over hiredis (synchronous, one thread): the slot
 *                   map from CLUSTER SLOTS, CRC16 key slots with hash tags, MOVED and ASK,
 *                   reconnects with back-off, timeouts, AUTH; a single plain server works as
 *                   a cluster of one node.  Pipelined batches: one round trip per node.
 *   remote_tls.c    TLS under hiredis 0.14 (which has none): hiredis on one end of a
 *                   socketpair, a pump thread moving the bytes through OpenSSL to the node.
 *   remote.c        the tier: a worker thread that owns the client, a queue of lookups
 *                   (batches of GETs, verified on the worker) and of stores (SETs), the
 *                   completions handed back to kvmmd's loop through an eventfd, counters and
 *                   a latency histogram.  Nothing here ever blocks the caller.
 */
#ifndef KVMM_REMOTE_H
#define KVMM_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"

/* ---- the stored value (remote_value.c) ---------------------------------------------------- */

#define KVMM_REMOTE_MAGIC 0x524d564bu /* "KVMR" little-endian */
#define KVMM_REMOTE_VERSION 1
#define KVMM_REMOTE_FMT_FRAME 1 /* the payload is the whole frame (page_size bytes) */
#define KVMM_REMOTE_HDR_LEN 64
/* "kvmm:" + 16 hex digits of the content key + NUL */
#define KVMM_REMOTE_KEY_LEN 24

/* What a value says about its page; what a reader expects of the block it asks for. */
struct kvmm_remote_meta {
	uint64_t fmt_id;      /* kvmm_fmt_id() of the page's format */
	uint64_t payload_len; /* bytes of the frame that follow the header */
	uint32_t ntokens;     /* tokens in the block (a whole page) */
	uint32_t depth;	      /* block index in the prompt */
	uint64_t digest[2];   /* XXH3-128 of the prefix through this block (kvmm_remote_digest) */
};

/* Counted outcomes of kvmm_remote_value_check() */
enum kvmm_remote_verdict {
	KVMM_REMOTE_OK,
	KVMM_REMOTE_CORRUPT,  /* bad magic, version, lengths or checksum: the value is damaged */
	KVMM_REMOTE_MISMATCH, /* intact, but another block (format, place or prefix differ) */
	KVMM_REMOTE_VERDICT_COUNT,
};

/* The Redis key of content key @key: "kvmm:%016llx" (no hash tag: keys spread over slots). */
void kvmm_remote_key(char buf[KVMM_REMOTE_KEY_LEN], uint64_t key);
/* Write the header of @m, its checksum covering the header and @payload, into @hdr. */
void kvmm_remote_hdr_encode(uint8_t hdr[KVMM_REMOTE_HDR_LEN], const struct kvmm_remote_meta *m,
			    const void *payload);
/* Decode a header without checking it; -EBADMSG when @len is shorter than a header. */
int kvmm_remote_hdr_decode(const void *val, size_t len, struct kvmm_remote_meta *m);
/*
 * Check a value read back against what the reader asked for: header, length and checksum
 * (CORRUPT otherwise), then format, length, tokens, depth and prefix digest (MISMATCH).
 */
enum kvmm_remote_verdict kvmm_remote_value_check(const void *val, size_t len,
						 const struct kvmm_remote_meta *want);

/*
 * The prefix digest: XXH3-128 seeded with the namespace's hash seed over its secret, the
 * format id and every token id from the start of the prompt, taken after each block.  It
 * stands for the whole prefix (the 64-bit content key only indexes), so a reader never takes
 * a page computed over another prompt even if two content keys collide.
 */
struct kvmm_remote_digest {
	uint8_t state[576] __attribute__((aligned(64))); /* an XXH3_state_t */
};
void kvmm_remote_digest_init(struct kvmm_remote_digest *d, const uint64_t secret[2],
			     uint64_t hash_seed, uint64_t fmt_id);
void kvmm_remote_digest_update(struct kvmm_remote_digest *d, const uint32_t *tokens, size_t n);
void kvmm_remote_digest_get(const struct kvmm_remote_digest *d, uint64_t out[2]);

/* ---- the Redis Cluster client (remote_redis.c) ------------------------------------------- */

#define KVMM_REMOTE_SLOTS 16384
#define KVMM_REMOTE_MAX_NODES 64

/* CRC16-CCITT (XMODEM) as Redis Cluster uses it */
uint16_t kvmm_redis_crc16(const void *buf, size_t len);
/* The key's slot: CRC16 of the hash tag (the text between the first '{' and the next '}',
 * when not empty) or of the whole key, mod 16384. */
unsigned int kvmm_redis_keyslot(const char *key, size_t len);
/*
 * Parse a redirection error "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381":
 * 1 for MOVED, 2 for ASK with slot, host and port filled, 0 for any other error text,
 * -EINVAL for a MOVED/ASK that does not parse.
 */
int kvmm_redis_parse_redirect(const char *err, unsigned int *slot, char *host, size_t hostlen,
			      int *port);

/* TLS to every node (remote_tls.c): OpenSSL under hiredis, which has none here */
struct kvmm_redis_tls {
	bool enabled;
	char ca_file[256];     /* PEM CAs the nodes' certificates must chain to; "" = system's */
	char cert_file[256];   /* client certificate (PEM chain), "" = none */
	char key_file[256];    /* its key ("" = in cert_file) */
	char server_name[256]; /* the name every node's certificate must carry (DNS or IP) and
				* the SNI; "" = the host dialled */
};

struct kvmm_redis_config {
	char seeds[512];     /* "host:port,host:port" */
	uint32_t timeout_ms; /* connect and each read/write; 0 = 200 */
	char user[64];	     /* AUTH user ("" = AUTH password alone) */
	char password[128];  /* "" = no AUTH */
	uint32_t retry_ms;   /* a node that failed is not tried again for this long (0 = 1000) */
	struct kvmm_redis_tls tls;
};

/*
 * TLS connections (remote_tls.c): a context made once from @cfg (NULL with a reason in @err:
 * a CA, certificate or key that does not load), and per node a connection whose plain end
 * hiredis talks over (redisConnectFd): the fd, or -errno (-ECONNREFUSED: the handshake or the
 * certificate check failed, -ETIMEDOUT).  kvmm_tls_close() after redisFree().
 */
struct kvmm_tls;
struct kvmm_tls_conn;
struct kvmm_tls *kvmm_tls_create(const struct kvmm_redis_tls *cfg, char *err, size_t errlen);
void kvmm_tls_destroy(struct kvmm_tls *t);
int kvmm_tls_connect(struct kvmm_tls *t, const char *host, int port, uint32_t timeout_ms,
		     struct kvmm_tls_conn **out);
void kvmm_tls_close(struct kvmm_tls_conn *c);

struct kvmm_redis;

/* A client; connects lazily. NULL with errno (-EINVAL: no seed parses). */
struct kvmm_redis *kvmm_redis_create(const struct kvmm_redis_config *cfg);
void kvmm_redis_destroy(struct kvmm_redis *rc);

/* One key of a batch.  GET: @val (malloc'd, the caller frees) and @len out.  SET: @val in. */
struct kvmm_redis_op {
	const char *key;
	size_t keylen;
	void *val;
	size_t len;
	int res; /* 0 found/stored, -ENOENT (GET: no such key), -EIO/-ETIMEDOUT/-ECONNREFUSED... */
};

struct kvmm_redis_stats {
	uint64_t moved, ask;	      /* redirections followed */
	uint64_t connects, conn_fail; /* connections made, connections that failed */
	uint64_t io_errors;	      /* a connection lost or timed out mid-batch */
	uint64_t slot_refresh;	      /* CLUSTER SLOTS read */
	bool cluster;		      /* the seeds answered CLUSTER SLOTS (else: one server) */
	uint32_t nodes;		      /* nodes known */
	uint32_t nodes_up;	      /* of them, connected now */
};

/* GET each key (pipelined per node); each op's res says how it went.  Never fails itself. */
void kvmm_redis_get(struct kvmm_redis *rc, struct kvmm_redis_op *ops, size_t n);
/* SET each key (with EX @ttl_s unless 0), pipelined per node. */
void kvmm_redis_set(struct kvmm_redis *rc, struct kvmm_redis_op *ops, size_t n, uint32_t ttl_s);
void kvmm_redis_get_stats(struct kvmm_redis *rc, struct kvmm_redis_stats *st);

/* ---- the tier (remote.c) ----------------------------------------------------------------- */

/* Bits: when this daemon writes pages of its sharing namespaces to the tier. */
enum kvmm_remote_policy {
	KVMM_REMOTE_POLICY_OFF = 0,    /* lookups only: this daemon never writes */
	KVMM_REMOTE_POLICY_SEAL = 1,   /* every newly sealed page is written */
	KVMM_REMOTE_POLICY_DEMOTE = 2, /* a page is written when it leaves this machine's tiers */
	KVMM_REMOTE_POLICY_BOTH = 3,
};

struct kvmm_remote_config {
	struct kvmm_redis_config redis;
	uint32_t ttl_s;		   /* EX of every SET, 0 = none (the cluster's maxmemory-policy) */
	uint64_t max_value;	   /* frames larger than this are never stored (0 = 512 MiB) */
	uint64_t max_queued_bytes; /* SETs waiting beyond this are dropped (0 = 64 MiB) */
	uint32_t max_blocks;	   /* blocks one lookup asks for (0 = 1024) */
	enum kvmm_remote_policy policy;
};

/* One block of a lookup: what to ask for and, once done, what came back. */
struct kvmm_remote_blk {
	uint64_t key;
	struct kvmm_remote_meta want;
	void *val; /* done: the verified value (header + frame) or NULL */
	size_t len;
};

/* A lookup of @n consecutive blocks (a prompt's remote part), or a store. */
struct kvmm_remote_req {
	struct list_head node;
	bool store;
	void *owner; /* the caller's (kvmmd: the parked session); NULL = cancelled */
	uint32_t n;
	uint32_t found; /* done: blocks verified, consecutive from the first */
	uint64_t t_submit_ns;
	struct kvmm_remote_blk blk[];
};

struct kvmm_remote_stats {
	uint64_t lookups;	/* lookups sent (batches) */
	uint64_t lookup_blocks; /* blocks asked for */
	uint64_t hits, misses;	/* blocks found verified / not found (or after a miss) */
	uint64_t errors;	/* blocks lost to a connection error or timeout */
	uint64_t corrupt;	/* values rejected by their header or checksum */
	uint64_t mismatch;	/* intact values for another block (collision, format) */
	uint64_t bytes_in, bytes_out;
	uint64_t stores, store_errors, store_dropped; /* pages written / failed / not queued */
	uint64_t cancelled;			      /* lookups whose client went meanwhile */
	uint64_t demoted;    /* of the stores, pages queued as they left this machine's tiers */
	uint64_t lat_sum_us; /* over lookups */
	uint64_t lat_max_us;
#define KVMM_REMOTE_LAT_BUCKETS 14
	uint64_t
		lat_bucket[KVMM_REMOTE_LAT_BUCKETS + 1]; /* <= kvmm_remote_lat_bounds_us[i], +Inf */
	uint64_t queued_bytes;				 /* stores waiting now */
	struct kvmm_redis_stats redis;
};

extern const uint32_t kvmm_remote_lat_bounds_us[KVMM_REMOTE_LAT_BUCKETS];

struct kvmm_remote;

/* Start the tier (the worker thread); the cluster is reached lazily.  0 or -errno. */
int kvmm_remote_create(const struct kvmm_remote_config *cfg, struct kvmm_remote **out);
/* Stop the worker, free everything queued or done. NULL is a no-op. */
void kvmm_remote_destroy(struct kvmm_remote *r);
/* The eventfd that becomes readable when completions wait (kvmmd's epoll). */
int kvmm_remote_fd(const struct kvmm_remote *r);
const struct kvmm_remote_config *kvmm_remote_cfg(const struct kvmm_remote *r);

/* A request of @n blocks (zeroed), for the caller to fill; NULL when out of memory. */
struct kvmm_remote_req *kvmm_remote_req_alloc(uint32_t n);
void kvmm_remote_req_free(struct kvmm_remote_req *req);
/* Queue a lookup (ownership passes; it comes back through kvmm_remote_complete). */
void kvmm_remote_lookup(struct kvmm_remote *r, struct kvmm_remote_req *req);
/*
 * Queue a store of one page: @key, its header meta and the frame bytes copied now.  Never
 * waits; dropped (counted) when the queue holds max_queued_bytes already.  0 or -errno.
 */
int kvmm_remote_store(struct kvmm_remote *r, uint64_t key, const struct kvmm_remote_meta *m,
		      const void *frame);
/* Count a queued store as a demotion (kvmm_remote_stats.demoted). */
void kvmm_remote_note_demoted(struct kvmm_remote *r);
/* Take the next finished lookup (the eventfd is drained first), NULL when none. */
struct kvmm_remote_req *kvmm_remote_complete(struct kvmm_remote *r);
/* Cancel a queued or running lookup of @owner: it completes with owner NULL. */
void kvmm_remote_cancel(struct kvmm_remote *r, void *owner);
/* Wait until every queued store went out (tests, benchmarks). */
void kvmm_remote_flush(struct kvmm_remote *r);
void kvmm_remote_get_stats(struct kvmm_remote *r, struct kvmm_remote_stats *st);

#endif /* KVMM_REMOTE_H */
