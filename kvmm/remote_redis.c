// SPDX-License-Identifier: MIT
/*
 * kvmm/remote_redis.c - a Redis Cluster client over hiredis' synchronous API, written for the
 * remote tier's one worker thread (remote.c): nothing here is shared or locked.
 *
 * Routing.  The slot map (16384 slots -> node) comes from CLUSTER SLOTS, asked of the first
 * node that answers; a seed that answers it with an error (a server without cluster mode) makes
 * the client a one-node "cluster" where every slot is that server.  A key's slot is CRC16 of
 * its hash tag ("{...}", when not empty) or of the whole key, mod 16384.  A MOVED reply
 * rewrites the slot's owner at once and asks for a new map before the next batch; an ASK
 * sends the key once to the named node behind ASKING and leaves the map alone.  A batch
 * follows redirections for up to KVMM_REDIS_ROUNDS rounds.
 *
 * Batches.  Each batch of GETs (or SETs) is split by node and pipelined: every command of a
 * node is appended, then the replies are read, one round trip per node per round.
 *
 * Failure.  Every connect, read and write has the configured timeout.  A node that fails a
 * connect or a read is closed and not tried again for retry_ms (its keys fail at once with
 * -ECONNREFUSED meanwhile), then reconnected: a restarted node comes back by itself.  An
 * error never leaves a batch half-done: every op says how it went.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/remote.h"

#define KVMM_REDIS_ROUNDS 4
#define NO_NODE 0xffff

struct rnode {
	char host[64];
	int port;
	redisContext *c;
	struct kvmm_tls_conn *tls; /* c's TLS connection (remote_tls.c), NULL: plain TCP */
	uint64_t retry_at;	   /* CLOCK_MONOTONIC ns before which it is not tried again */
	uint64_t conn_at;	   /* when c was connected */
	uint64_t retried_in;	   /* the batch (its start) that already reconnected it once */
};

struct kvmm_redis {
	struct kvmm_redis_config cfg;
	struct kvmm_tls *tls; /* cfg.tls.enabled: the context every node's connection uses */
	struct rnode node[KVMM_REMOTE_MAX_NODES];
	unsigned int nr_nodes;
	unsigned int nr_seeds; /* node[0..nr_seeds) are the configured seeds */
	bool map_valid;	       /* slot[] came from CLUSTER SLOTS (or plain mode) */
	bool need_refresh;     /* a MOVED or a lost node: ask for the map again */
	uint64_t refresh_at;   /* not before this (ns): a dead cluster is not asked every batch */
	struct kvmm_redis_stats st;
	uint16_t slot[KVMM_REMOTE_SLOTS];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- pure helpers (unit tested) ----------------------------------------------------------- */

uint16_t kvmm_redis_crc16(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint16_t crc = 0;

	/* CRC16-CCITT, polynomial 0x1021, initial 0, no reflection (XMODEM) */
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned int kvmm_redis_keyslot(const char *key, size_t len)
{
	size_t open, close;

	for (open = 0; open < len; open++)
		if (key[open] == '{')
			break;
	if (open < len) {
		for (close = open + 1; close < len; close++)
			if (key[close] == '}')
				break;
		/* "{}" or no '}' at all: the whole key is hashed */
		if (close < len && close != open + 1)
			return kvmm_redis_crc16(key + open + 1, close - open - 1) & 16383;
	}
	return kvmm_redis_crc16(key, len) & 16383;
}

int kvmm_redis_parse_redirect(const char *err, unsigned int *slot, char *host, size_t hostlen,
			      int *port)
{
	const char *p, *colon;
	unsigned long s, pt;
	size_t hl;
	char *end;
	int kind;

	if (!strncmp(err, "MOVED ", 6))
		kind = 1;
	else if (!strncmp(err, "ASK ", 4))
		kind = 2;
	else
		return 0;
	p = err + (kind == 1 ? 6 : 4);
	errno = 0;
	s = strtoul(p, &end, 10);
	if (errno || end == p || *end != ' ' || s >= KVMM_REMOTE_SLOTS)
		return -EINVAL;
	p = end + 1;
	/* the port follows the last ':' (an IPv6 address holds several) */
	colon = strrchr(p, ':');
	if (!colon)
		return -EINVAL;
	hl = (size_t)(colon - p);
	if (hl >= hostlen)
		return -EINVAL;
	errno = 0;
	pt = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || !pt || pt > 65535)
		return -EINVAL;
	memcpy(host, p, hl);
	host[hl] = '\0';
	*slot = (unsigned int)s;
	*port = (int)pt;
	return kind;
}

/* ---- nodes -------------------------------------------------------------------------------- */

static int node_find(struct kvmm_redis *rc, const char *host, int port, bool add)
{
	unsigned int i;

	for (i = 0; i < rc->nr_nodes; i++)
		if (rc->node[i].port == port && !strcmp(rc->node[i].host, host))
			return (int)i;
	if (!add || rc->nr_nodes == KVMM_REMOTE_MAX_NODES ||
	    strlen(host) >= sizeof(rc->node[0].host))
		return -1;
	i = rc->nr_nodes++;
	memset(&rc->node[i], 0, sizeof(rc->node[i]));
	strcpy(rc->node[i].host, host);
	rc->node[i].port = port;
	rc->st.nodes = rc->nr_nodes;
	return (int)i;
}

static struct timeval tv_ms(uint32_t ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};

	return tv;
}

static void node_close(struct kvmm_redis *rc, struct rnode *n, bool failed)
{
	if (n->c) {
		redisFree(n->c);
		n->c = NULL;
		kvmm_tls_close(n->tls);
		n->tls = NULL;
		if (rc->st.nodes_up)
			rc->st.nodes_up--;
	}
	if (failed) {
		n->retry_at = now_ns() + (uint64_t)rc->cfg.retry_ms * 1000000;
		rc->need_refresh = true;
	}
}

static int node_auth(struct kvmm_redis *rc, redisContext *c)
{
	redisReply *r;
	int ret = 0;

	if (!rc->cfg.password[0])
		return 0;
	if (rc->cfg.user[0])
		r = redisCommand(c, "AUTH %s %s", rc->cfg.user, rc->cfg.password);
	else
		r = redisCommand(c, "AUTH %s", rc->cfg.password);
	if (!r)
		return -EIO;
	if (r->type == REDIS_REPLY_ERROR) {
		kvmm_err_ratelimited("remote: AUTH refused by the server: %s", r->str);
		ret = -EACCES;
	}
	freeReplyObject(r);
	return ret;
}

/* The node's connection, made if needed; NULL while it is down (back-off) or unreachable. */
static redisContext *node_conn(struct kvmm_redis *rc, struct rnode *n)
{
	redisContext *c;

	if (n->c && !n->c->err)
		return n->c;
	if (n->c)
		node_close(rc, n, true);
	if (n->retry_at && now_ns() < n->retry_at)
		return NULL;
	if (rc->tls) {
		int fd = kvmm_tls_connect(rc->tls, n->host, n->port, rc->cfg.timeout_ms, &n->tls);

		c = NULL;
		if (fd >= 0) {
			/* hiredis owns the fd from here: redisFree closes it */
			c = redisConnectFd(fd);
			if (!c)
				close(fd);
		} else {
			kvmm_warn_ratelimited("remote: cannot connect to %s:%d over TLS: %s",
					      n->host, n->port, strerror(-fd));
			rc->st.conn_fail++;
			n->retry_at = now_ns() + (uint64_t)rc->cfg.retry_ms * 1000000;
			return NULL;
		}
	} else {
		c = redisConnectWithTimeout(n->host, n->port, tv_ms(rc->cfg.timeout_ms));
	}
	if (!c || c->err) {
		kvmm_warn_ratelimited("remote: cannot connect to %s:%d: %s", n->host, n->port,
				      c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		kvmm_tls_close(n->tls);
		n->tls = NULL;
		rc->st.conn_fail++;
		n->retry_at = now_ns() + (uint64_t)rc->cfg.retry_ms * 1000000;
		return NULL;
	}
	if (redisSetTimeout(c, tv_ms(rc->cfg.timeout_ms)) != REDIS_OK || node_auth(rc, c)) {
		redisFree(c);
		kvmm_tls_close(n->tls);
		n->tls = NULL;
		rc->st.conn_fail++;
		n->retry_at = now_ns() + (uint64_t)rc->cfg.retry_ms * 1000000;
		return NULL;
	}
	/*
	 * Keep the reply buffer between replies: by default hiredis frees it whenever it is
	 * empty and larger than 16 KiB, so every frame-sized value grew a new one from nothing
	 * (reallocs, copies and fresh pages: most of a GET's cost on loopback).
	 */
	c->reader->maxbuf = 0;
	n->c = c;
	n->retry_at = 0;
	n->conn_at = now_ns();
	rc->st.connects++;
	rc->st.nodes_up++;
	return c;
}

/* ---- the slot map ------------------------------------------------------------------------- */

/* Fill the map from a CLUSTER SLOTS reply (asked of node @from); 0 or -EBADMSG. */
static int slots_parse(struct kvmm_redis *rc, const redisReply *r, const struct rnode *from)
{
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m;
		char host[64];
		long long lo, hi;
		int ni;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
			return -EBADMSG;
		m = e->element[2];
		if (e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER || m->type != REDIS_REPLY_ARRAY ||
		    m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER)
			return -EBADMSG;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		if (lo < 0 || hi < lo || hi >= KVMM_REMOTE_SLOTS)
			return -EBADMSG;
		/* an empty host means "the address you reached me at" */
		snprintf(host, sizeof(host), "%s",
			 m->element[0]->len ? m->element[0]->str : from->host);
		ni = node_find(rc, host, (int)m->element[1]->integer, true);
		if (ni < 0)
			return -EBADMSG;
		for (long long s = lo; s <= hi; s++)
			rc->slot[s] = (uint16_t)ni;
	}
	return 0;
}

static void slots_refresh(struct kvmm_redis *rc)
{
	uint64_t now = now_ns();
	unsigned int i;

	if (rc->map_valid && !rc->need_refresh)
		return;
	if (now < rc->refresh_at)
		return;
	rc->refresh_at = now + (uint64_t)rc->cfg.retry_ms * 1000000 / 4;
	for (i = 0; i < rc->nr_nodes; i++) {
		struct rnode *n = &rc->node[i];
		redisContext *c = node_conn(rc, n);
		redisReply *r;

		if (!c)
			continue;
		r = redisCommand(c, "CLUSTER SLOTS");
		if (!r) {
			node_close(rc, n, true);
			continue;
		}
		rc->st.slot_refresh++;
		if (r->type == REDIS_REPLY_ERROR) {
			/* no cluster mode: this server holds every slot */
			for (unsigned int s = 0; s < KVMM_REMOTE_SLOTS; s++)
				rc->slot[s] = (uint16_t)i;
			rc->st.cluster = false;
		} else if (r->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			continue;
		} else {
			for (unsigned int s = 0; s < KVMM_REMOTE_SLOTS; s++)
				rc->slot[s] = NO_NODE;
			if (slots_parse(rc, r, n)) {
				kvmm_warn_ratelimited("remote: %s:%d: a CLUSTER SLOTS reply that "
						      "does not parse",
						      n->host, n->port);
				freeReplyObject(r);
				continue;
			}
			rc->st.cluster = true;
		}
		freeReplyObject(r);
		rc->map_valid = true;
		rc->need_refresh = false;
		return;
	}
}

/* The node that serves @slot: the map's, else any known node (it redirects us). */
static int route(struct kvmm_redis *rc, unsigned int slot)
{
	slots_refresh(rc);
	if (rc->map_valid && rc->slot[slot] != NO_NODE)
		return rc->slot[slot];
	return rc->nr_nodes ? 0 : -1;
}

/* ---- batches ------------------------------------------------------------------------------ */

struct kvmm_redis *kvmm_redis_create(const struct kvmm_redis_config *cfg)
{
	struct kvmm_redis *rc = calloc(1, sizeof(*rc));
	char buf[sizeof(cfg->seeds)], *tok, *save = NULL;

	if (!rc) {
		errno = ENOMEM;
		return NULL;
	}
	rc->cfg = *cfg;
	if (!rc->cfg.timeout_ms)
		rc->cfg.timeout_ms = 200;
	if (!rc->cfg.retry_ms)
		rc->cfg.retry_ms = 1000;
	for (unsigned int s = 0; s < KVMM_REMOTE_SLOTS; s++)
		rc->slot[s] = NO_NODE;
	snprintf(buf, sizeof(buf), "%s", cfg->seeds);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':'), *end;
		unsigned long port;

		if (!colon || colon == tok)
			continue;
		*colon = '\0';
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (errno || *end || !port || port > 65535)
			continue;
		/* "[::1]:7000": the brackets only delimit an IPv6 address */
		if (tok[0] == '[' && colon[-1] == ']') {
			colon[-1] = '\0';
			tok++;
		}
		node_find(rc, tok, (int)port, true);
	}
	if (!rc->nr_nodes) {
		free(rc);
		errno = EINVAL;
		return NULL;
	}
	if (cfg->tls.enabled) {
		char err[512];

		rc->tls = kvmm_tls_create(&cfg->tls, err, sizeof(err));
		if (!rc->tls) {
			kvmm_err("remote: TLS: %s", err);
			free(rc);
			errno = EINVAL;
			return NULL;
		}
	}
	rc->nr_seeds = rc->nr_nodes;
	return rc;
}

void kvmm_redis_destroy(struct kvmm_redis *rc)
{
	if (!rc)
		return;
	for (unsigned int i = 0; i < rc->nr_nodes; i++) {
		if (rc->node[i].c)
			redisFree(rc->node[i].c);
		kvmm_tls_close(rc->node[i].tls);
	}
	kvmm_tls_destroy(rc->tls);
	free(rc);
}

static int io_err(const redisContext *c)
{
	if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -ETIMEDOUT;
	return -EIO;
}

/* What one reply means for its op: 1 done, 0 redirected (go again), with *ask set for ASK. */
static int take_reply(struct kvmm_redis *rc, struct kvmm_redis_op *op, redisReply *r, bool set,
		      int *ask)
{
	char host[64];
	unsigned int slot;
	int port, kind, ni;

	switch (r->type) {
	case REDIS_REPLY_NIL:
		op->res = -ENOENT;
		return 1;
	case REDIS_REPLY_STRING:
		if (set) {
			op->res = 0;
			return 1;
		}
		/* take the bulk string hiredis allocated with malloc: no copy of the frame */
		op->val = r->str;
		op->len = r->len;
		r->str = NULL;
		op->res = 0;
		return 1;
	case REDIS_REPLY_STATUS:
		op->res = set ? 0 : -EBADMSG;
		return 1;
	case REDIS_REPLY_ERROR:
		kind = kvmm_redis_parse_redirect(r->str, &slot, host, sizeof(host), &port);
		if (kind > 0) {
			ni = node_find(rc, host, port, true);
			if (ni < 0) {
				op->res = -EIO;
				return 1;
			}
			if (kind == 1) {
				rc->slot[slot] = (uint16_t)ni;
				rc->need_refresh = true;
				rc->st.moved++;
			} else {
				*ask = ni + 1; /* 0 is "no ASK" */
				rc->st.ask++;
			}
			return 0;
		}
		kvmm_warn_ratelimited("remote: %s", r->str);
		/* CLUSTERDOWN, TRYAGAIN, LOADING, OOM...: this key fails this time */
		op->res = -EAGAIN;
		return 1;
	default:
		op->res = -EBADMSG;
		return 1;
	}
}

static void batch(struct kvmm_redis *rc, struct kvmm_redis_op *ops, size_t n, bool set,
		  uint32_t ttl_s)
{
	int *node = malloc(n * sizeof(*node) * 2);
	int *ask = node ? node + n : NULL;
	uint64_t start = now_ns();
	char ttl[16];
	size_t i;

	for (i = 0; i < n; i++) {
		ops[i].res = 1; /* pending */
		if (ask)
			ask[i] = 0;
		if (!set) {
			ops[i].val = NULL;
			ops[i].len = 0;
		}
	}
	if (!node) {
		for (i = 0; i < n; i++)
			ops[i].res = -ENOMEM;
		return;
	}
	snprintf(ttl, sizeof(ttl), "%u", ttl_s);
	for (int round = 0; round < KVMM_REDIS_ROUNDS; round++) {
		bool pending = false;

		for (i = 0; i < n; i++) {
			node[i] = -1;
			if (ops[i].res != 1)
				continue;
			if (ask[i] > 0)
				node[i] = ask[i] - 1;
			else
				node[i] = route(rc, kvmm_redis_keyslot(ops[i].key, ops[i].keylen));
			if (node[i] < 0)
				ops[i].res = -ECONNREFUSED;
			else
				pending = true;
		}
		if (!pending)
			break;
		/* send: every node's commands appended, nothing written yet */
		for (unsigned int ni = 0; ni < rc->nr_nodes; ni++) {
			redisContext *c = NULL;
			bool used = false;

			for (i = 0; i < n; i++) {
				const char *argv[5];
				size_t argl[5];
				int argc;

				if (node[i] != (int)ni)
					continue;
				if (!used) {
					c = node_conn(rc, &rc->node[ni]);
					used = true;
				}
				if (!c) {
					ops[i].res = -ECONNREFUSED;
					node[i] = -1;
					continue;
				}
				if (ask[i] > 0)
					redisAppendCommand(c, "ASKING");
				argv[0] = set ? "SET" : "GET";
				argl[0] = 3;
				argv[1] = ops[i].key;
				argl[1] = ops[i].keylen;
				argc = 2;
				if (set) {
					argv[2] = ops[i].val;
					argl[2] = ops[i].len;
					argc = 3;
					if (ttl_s) {
						argv[3] = "EX";
						argl[3] = 2;
						argv[4] = ttl;
						argl[4] = strlen(ttl);
						argc = 5;
					}
				}
				redisAppendCommandArgv(c, argc, argv, argl);
			}
		}
		/*
		 * Write every node's commands before reading any reply, so that the nodes work
		 * at once (redisGetReply would write a node's only when its replies are wanted:
		 * one node after the other).  A failed write leaves c->err for the read below.
		 */
		for (unsigned int ni = 0; ni < rc->nr_nodes; ni++) {
			redisContext *c = rc->node[ni].c;
			int done = 0;

			for (i = 0; i < n && node[i] != (int)ni; i++)
				;
			if (i == n || !c || c->err)
				continue;
			while (!done && redisBufferWrite(c, &done) == REDIS_OK)
				;
		}
		/* receive, node by node, in the order sent */
		for (unsigned int ni = 0; ni < rc->nr_nodes; ni++) {
			struct rnode *nd = &rc->node[ni];
			int err = 0;

			for (i = 0; i < n; i++) {
				redisReply *r = NULL;
				int a = 0, was_ask = ask[i];

				if (node[i] != (int)ni)
					continue;
				if (err) {
					ops[i].res = err;
					continue;
				}
				if (was_ask > 0) {
					/* ASKING's +OK */
					if (redisGetReply(nd->c, (void **)&r) != REDIS_OK) {
						err = io_err(nd->c);
						ops[i].res = err;
						continue;
					}
					freeReplyObject(r);
					r = NULL;
				}
				if (redisGetReply(nd->c, (void **)&r) != REDIS_OK || !r) {
					err = io_err(nd->c);
					ops[i].res = err;
					continue;
				}
				/* a redirection goes again next round (to the ASK node if any) */
				take_reply(rc, &ops[i], r, set, &a);
				ask[i] = a;
				freeReplyObject(r);
			}
			if (err && err != -ETIMEDOUT && nd->conn_at < start &&
			    nd->retried_in != start) {
				/*
				 * A connection from an earlier batch broke (the node restarted
				 * since): reconnect once and send what was not answered again.
				 */
				nd->retried_in = start;
				node_close(rc, nd, false);
				rc->st.io_errors++;
				for (i = 0; i < n; i++)
					if (node[i] == (int)ni && ops[i].res == err)
						ops[i].res = 1;
			} else if (err) {
				kvmm_warn_ratelimited("remote: %s:%d: %s", nd->host, nd->port,
						      err == -ETIMEDOUT ? "timed out"
									: "connection lost");
				rc->st.io_errors++;
				node_close(rc, nd, true);
			}
		}
	}
	for (i = 0; i < n; i++)
		if (ops[i].res == 1)
			ops[i].res = -ELOOP; /* still redirected after every round */
	free(node);
}

void kvmm_redis_get(struct kvmm_redis *rc, struct kvmm_redis_op *ops, size_t n)
{
	batch(rc, ops, n, false, 0);
}

void kvmm_redis_set(struct kvmm_redis *rc, struct kvmm_redis_op *ops, size_t n, uint32_t ttl_s)
{
	batch(rc, ops, n, true, ttl_s);
}

void kvmm_redis_get_stats(struct kvmm_redis *rc, struct kvmm_redis_stats *st)
{
	*st = rc->st;
}
