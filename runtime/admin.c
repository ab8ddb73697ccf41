// SPDX-License-Identifier: MIT
/*
 * runtime/admin.c - libkvmm's admin handle (runtime/kvmm_admin.h): a connection that says
 * HELLO and then only asks admin verbs, one at a time. It has its own small transport rather
 * than client.c's message layer because what it needs is different: no ATTACH, no descriptors,
 * no pipelining, but answers of many records (a read verb's text, reassembled until a record
 * comes without KVMM_MSG_F_MORE), a trace subscription that streams records for ever, and a
 * deadline on every wait, so that an operator's tool never hangs on a wedged daemon. Records
 * that are not the reply being waited for (events, a stale reply) are skipped; a SHUTDOWN
 * event ends a trace subscription. The tagged-text helpers at the end read the daemon's
 * "Name:  value" lines and "Label: first key=value" records.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "runtime/libkvmm.h"

struct kvmm_admin {
	pthread_mutex_t lock;
	int fd;
	uint32_t wait_ms;   /* the daemon deadline: silence this long gives it up; 0 never */
	pid_t peer_pid;	    /* the daemon (SO_PEERCRED), 0 unknown */
	bool following;	    /* a trace subscription owns the connection */
	uint64_t next_seq;  /* header seq of the next request, never 0 */
	uint64_t trace_seq; /* the subscription's seq */
	struct kvmm_hello_rep hello;
	unsigned char *rx; /* one record, KVMM_MSG_MAX bytes */
};

static __thread char admin_why[320];

static void __attribute__((format(printf, 1, 2))) set_why(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(admin_why, sizeof(admin_why), fmt, ap);
	va_end(ap);
}

const char *kvmm_admin_why(void)
{
	return admin_why[0] ? admin_why : "no kvmm_admin_open failed in this thread";
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The daemon said nothing for a->wait_ms: give it up with -ETIMEDOUT, and say why in
 * kvmm_admin_why() ("kvmmd (pid N) did not answer in N ms: it is stopped ...").
 */
static int stalled(const struct kvmm_admin *a)
{
	if (a->peer_pid > 0)
		set_why("kvmmd (pid %d) did not answer in %u ms: %s", (int)a->peer_pid, a->wait_ms,
			kvmm_peer_state_text(a->peer_pid));
	else
		set_why("kvmmd did not answer in %u ms (stopped or hung)", a->wait_ms);
	return -ETIMEDOUT;
}

/* The deadline of a wait that starts now: silence for a->wait_ms, -1 none. */
static int64_t deadline_from_now(const struct kvmm_admin *a)
{
	return a->wait_ms ? now_ms() + a->wait_ms : -1;
}

/*
 * Receive one well-formed record into a->rx before the deadline (-1: none): its length, or
 * -ETIMEDOUT, -EINTR (only when eintr: the caller wants to see signals), -ECONNRESET (the
 * daemon closed the connection), -errno. Malformed records are skipped.
 */
static int recv_rec(struct kvmm_admin *a, int64_t deadline, bool eintr)
{
	for (;;) {
		struct pollfd p = {.fd = a->fd, .events = POLLIN};
		int timeout = -1, r;
		ssize_t n;

		if (deadline >= 0) {
			int64_t left = deadline - now_ms();

			timeout = left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
		}
		r = poll(&p, 1, timeout);
		if (r < 0) {
			if (errno == EINTR && !eintr)
				continue;
			return -errno;
		}
		if (!r)
			return -ETIMEDOUT;
		n = recv(a->fd, a->rx, KVMM_MSG_MAX, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return errno == ECONNRESET ? -ECONNRESET : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		if (kvmm_msg_hdr_check((const struct kvmm_msg_hdr *)a->rx, (size_t)n))
			continue; /* not a record we can read: nothing waits for it */
		return (int)n;
	}
}

/* Send one request; its seq in *seq. */
static int send_req(struct kvmm_admin *a, unsigned int op, const void *payload, size_t len,
		    uint64_t *seq)
{
	struct kvmm_msg_hdr hdr;
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	ssize_t n;

	if (len > KVMM_MSG_MAX - KVMM_MSG_HDR_SIZE)
		return -E2BIG;
	*seq = a->next_seq++;
	if (!a->next_seq)
		a->next_seq = 1;
	kvmm_msg_hdr_init(&hdr, op, (uint32_t)(sizeof(hdr) + len), *seq);
	if (a->hello.abi_agreed)
		hdr.abi = a->hello.abi_agreed;
	for (;;) {
		struct pollfd p = {.fd = a->fd, .events = POLLOUT};
		int r;

		n = sendmsg(a->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == EPIPE ? -ECONNRESET : -errno;
		/* the socket is full: the daemon reads nothing */
		r = poll(&p, 1, a->wait_ms ? (int)a->wait_ms : -1);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (!r)
			return stalled(a);
	}
}

/*
 * Wait for the next record of the reply to seq: its payload length (the payload is at a->rx +
 * KVMM_MSG_HDR_SIZE), or the daemon's status, or a transport error. *more: whether more
 * records of the reply follow.  Silence for the handle's deadline gives the daemon up
 * (-ETIMEDOUT, kvmm_admin_why() says why) - except, for a @slow verb (a write: reclaim and
 * swapoff may take a while), while the daemon runs: that waits up to
 * KVMM_ADMIN_WRITE_TIMEOUT_MS in all, or the deadline if longer.
 */
static int wait_rec(struct kvmm_admin *a, uint64_t seq, bool slow, bool *more)
{
	const struct kvmm_msg_hdr *h = (const struct kvmm_msg_hdr *)a->rx;
	int64_t start = now_ms(), deadline = deadline_from_now(a);

	for (;;) {
		int n = recv_rec(a, deadline, false);

		if (n == -ETIMEDOUT && slow && now_ms() - start < KVMM_ADMIN_WRITE_TIMEOUT_MS &&
		    kvmm_peer_alive(a->peer_pid)) {
			deadline = start + KVMM_ADMIN_WRITE_TIMEOUT_MS;
			continue;
		}
		if (n == -ETIMEDOUT)
			return stalled(a);
		if (n < 0)
			return n;
		if (!kvmm_op_is_reply(h->op) || h->seq != seq)
			continue; /* an event, or a reply nobody waits for any more */
		if (h->status > 0)
			return -EBADMSG;
		if (h->status)
			return h->status;
		*more = h->flags & KVMM_MSG_F_MORE;
		return n - KVMM_MSG_HDR_SIZE;
	}
}

/* One round trip of a single-record reply: up to rep_len bytes of payload into rep. */
static int call(struct kvmm_admin *a, unsigned int op, const void *req, size_t len, void *rep,
		size_t rep_len, bool slow)
{
	uint64_t seq;
	bool more;
	int n;

	n = send_req(a, op, req, len, &seq);
	if (n)
		return n;
	n = wait_rec(a, seq, slow, &more);
	if (n < 0)
		return n;
	if ((size_t)n < rep_len)
		return -EBADMSG;
	if (rep_len)
		memcpy(rep, a->rx + KVMM_MSG_HDR_SIZE, rep_len);
	return 0;
}

static int hello(struct kvmm_admin *a)
{
	struct kvmm_hello_req req = {
		.abi_version = KVMM_ABI_VERSION,
		.abi_min = KVMM_ABI_MIN_COMPAT,
		.pid = (uint32_t)getpid(),
	};
	struct kvmm_hello_rep rep;
	int err;

	kvmm_client_name(req.name);
	err = call(a, KVMM_OP_HELLO, &req, sizeof(req), &rep, sizeof(rep), false);
	if (err)
		return err;
	/* trust nothing: the daemon's choice must be one we speak */
	if ((unsigned int)rep.abi_agreed - KVMM_ABI_MIN_COMPAT >
	    (unsigned int)(KVMM_ABI_VERSION - KVMM_ABI_MIN_COMPAT))
		return -EPROTO;
	a->hello = rep;
	return 0;
}

static void admin_free(struct kvmm_admin *a)
{
	if (a->fd >= 0)
		close(a->fd);
	pthread_mutex_destroy(&a->lock);
	free(a->rx);
	free(a);
}

int kvmm_admin_open(const char *socket_path, kvmm_admin_t **out)
{
	return kvmm_admin_open_timeout(socket_path, 0, out);
}

int kvmm_admin_open_timeout(const char *socket_path, int timeout_ms, kvmm_admin_t **out)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char path[sizeof(sa.sun_path)];
	struct kvmm_admin *a;
	int64_t deadline;
	int err;

	if (!out) {
		set_why("no place for the handle (out is NULL)");
		return -EINVAL;
	}
	*out = NULL;
	if (socket_path) {
		if (strlen(socket_path) >= sizeof(path)) {
			set_why("socket path too long: %s", socket_path);
			return -ENAMETOOLONG;
		}
		strcpy(path, socket_path);
	} else if (kvmm_socket_path_default(path, sizeof(path))) {
		set_why("the default socket path is too long");
		return -ENAMETOOLONG;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		set_why("out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&a->lock, NULL);
	a->next_seq = 1;
	/* the daemon deadline, as kvmm_attach_opts.daemon_timeout_ms: 0 default, < 0 never */
	a->wait_ms = timeout_ms > 0   ? (uint32_t)timeout_ms
		     : timeout_ms < 0 ? 0
				      : kvmm_daemon_timeout_env();
	a->rx = malloc(KVMM_MSG_MAX);
	/* non-blocking: every wait is a poll with the deadline (recv, send and connect) */
	a->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (!a->rx || a->fd < 0) {
		err = a->rx ? -errno : -ENOMEM;
		set_why("socket: %s", strerror(-err));
		goto out_free;
	}
	strcpy(sa.sun_path, path);
	deadline = deadline_from_now(a);
	while (connect(a->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EINTR)
			continue;
		/* a full backlog: the daemon accepts nothing (stopped, or swamped) */
		if (errno == EAGAIN && (deadline < 0 || now_ms() < deadline)) {
			usleep(10000);
			continue;
		}
		err = -errno;
		if (err == -EAGAIN) {
			err = -ETIMEDOUT;
			set_why("%s: kvmmd accepts no connection (its backlog stayed full for %u "
				"ms: stopped or hung?)",
				path, a->wait_ms);
		} else {
			set_why("connect to %s: %s", path, strerror(-err));
		}
		goto out_free;
	}
	{
		struct ucred cred;
		socklen_t len = sizeof(cred);

		if (!getsockopt(a->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
			a->peer_pid = cred.pid;
	}
	err = hello(a);
	if (err) {
		if (err == -ECONNRESET)
			set_why("%s: no answer to HELLO (connection closed)", path);
		else if (err == -ETIMEDOUT) {
			/* stalled() said who and in what state; name the socket too */
			char why[sizeof(admin_why)];

			snprintf(why, sizeof(why), "%s", admin_why);
			set_why("%s: no answer to HELLO: %s", path, why);
		} else
			set_why("HELLO: %s", kvmm_strerror(err));
		goto out_free;
	}
	*out = a;
	return 0;

out_free:
	admin_free(a);
	return err;
}

void kvmm_admin_close(kvmm_admin_t *a)
{
	if (a)
		admin_free(a); /* closing the socket ends the session and any subscription */
}

const struct kvmm_hello_rep *kvmm_admin_hello(const kvmm_admin_t *a)
{
	return &a->hello;
}

/* 0 if the handle may send a request now. */
static int admin_usable(const struct kvmm_admin *a)
{
	if (a->fd < 0)
		return -ENOTCONN;
	return a->following ? -EBUSY : 0;
}

int kvmm_admin_read(kvmm_admin_t *a, unsigned int op, const struct kvmm_admin_req *req, char **text)
{
	struct kvmm_admin_req r = {0};
	char *out = NULL;
	size_t len = 0;
	uint64_t seq;
	bool more = true;
	int err;

	if (!a || !text)
		return -EINVAL;
	*text = NULL;
	/* the read verbs: STATUS .. TRACE, and REMOTE (added after the write verbs) */
	if ((op < KVMM_OP_STATUS || op > KVMM_OP_TRACE) && op != KVMM_OP_REMOTE)
		return -EINVAL;
	if (req)
		r = *req;
	if (r.flags & KVMM_ADMIN_F_FOLLOW)
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	err = admin_usable(a);
	if (!err)
		err = send_req(a, op, &r, sizeof(r), &seq);
	while (!err && more) {
		int n = wait_rec(a, seq, false, &more);
		char *grown;

		if (n < 0) {
			err = n;
			break;
		}
		grown = realloc(out, len + (size_t)n + 1);
		if (!grown) {
			err = -ENOMEM;
			break;
		}
		out = grown;
		memcpy(out + len, a->rx + KVMM_MSG_HDR_SIZE, (size_t)n);
		len += (size_t)n;
		out[len] = '\0';
	}
	pthread_mutex_unlock(&a->lock);
	if (err) {
		free(out);
		return err;
	}
	*text = out ? out : strdup("");
	return *text ? 0 : -ENOMEM;
}

/* The number of " key=" on a record line into *v; false when it is absent or not a number. */
static bool field_u64(const char *line, const char *key, uint64_t *v)
{
	char b[32], *end;

	if (kvmm_admin_field(line, key, b, sizeof(b)) <= 0)
		return false;
	errno = 0;
	*v = strtoull(b, &end, 10);
	return !*end && !errno && b[0] != '-';
}

/* A limit: a number, or "-" for none (KVMM_LIMIT_NONE); false when absent or neither. */
static bool field_limit(const char *line, const char *key, uint64_t *v)
{
	char b[4];

	if (kvmm_admin_field(line, key, b, sizeof(b)) == 1 && b[0] == '-') {
		*v = KVMM_LIMIT_NONE;
		return true;
	}
	return field_u64(line, key, v);
}

static int ns_parse(const char *line, struct kvmm_admin_ns *n)
{
	const char *p = line + strlen("Namespace:");
	uint64_t id;
	char b[32], *end;
	long long prio;
	size_t len;

	memset(n, 0, sizeof(*n));
	p += strspn(p, " ");
	len = strcspn(p, " \n");
	if (!len || len >= sizeof(n->name))
		return -EBADMSG;
	memcpy(n->name, p, len);
	if (!field_u64(line, "id", &id) || id > UINT32_MAX ||
	    !field_u64(line, "frames", &n->frames) || !field_limit(line, "limit", &n->limit) ||
	    !field_u64(line, "used", &n->used) ||
	    kvmm_admin_field(line, "priority", b, sizeof(b)) <= 0)
		return -EBADMSG;
	n->id = (uint32_t)id;
	errno = 0;
	prio = strtoll(b, &end, 10);
	if (*end || errno || prio < INT32_MIN || prio > INT32_MAX)
		return -EBADMSG;
	n->priority = (int32_t)prio;
	/* the counters: 0 when a daemon does not report one */
	field_u64(line, "cached", &n->cached);
	field_u64(line, "shared", &n->shared);
	field_u64(line, "clients", &n->clients);
	field_u64(line, "chunks", &n->chunks);
	field_u64(line, "hits", &n->hits);
	field_u64(line, "misses", &n->misses);
	field_u64(line, "pgsteal", &n->pgsteal);
	return 0;
}

/*
 * A read verb's records labelled label, each parsed by parse into an elem-byte entry of a
 * malloc'd array: *list and *nr. ns filters (NULL or "": all).
 */
static int read_records(struct kvmm_admin *a, unsigned int op, const char *ns, const char *label,
			size_t elem, int (*parse)(const char *line, void *entry), void **list,
			unsigned int *nr)
{
	struct kvmm_admin_req req = {0};
	unsigned int n = 0, cap = 0;
	const char *l = NULL;
	char *out = NULL, *text;
	int err;

	if (!list || !nr)
		return -EINVAL;
	*list = NULL;
	*nr = 0;
	if (ns && strlen(ns) >= sizeof(req.ns))
		return -EINVAL;
	if (ns)
		strcpy(req.ns, ns);
	err = kvmm_admin_read(a, op, &req, &text);
	if (err)
		return err;
	while (!err && (l = kvmm_admin_next(text, label, l))) {
		if (n == cap) {
			char *grown;

			cap = cap ? cap * 2 : 8;
			grown = realloc(out, elem * cap);
			if (!grown) {
				err = -ENOMEM;
				break;
			}
			out = grown;
		}
		err = parse(l, out + elem * n);
		if (!err)
			n++;
	}
	free(text);
	if (err) {
		free(out);
		return err;
	}
	*list = out;
	*nr = n;
	return 0;
}

static int ns_parse_one(const char *line, void *entry)
{
	return ns_parse(line, entry);
}

int kvmm_admin_namespaces(kvmm_admin_t *a, const char *ns, struct kvmm_admin_ns **list,
			  unsigned int *nr)
{
	return read_records(a, KVMM_OP_NAMESPACES, ns, "Namespace", sizeof(**list), ns_parse_one,
			    (void **)list, nr);
}

/* The word after "Label:" of a record line into buf (len bytes); false when empty or long. */
static bool first_word(const char *line, char *buf, size_t len)
{
	const char *p = strchr(line, ':');
	size_t n;

	if (!p)
		return false;
	p += 1 + strspn(p + 1, " ");
	n = strcspn(p, " \n");
	if (!n || n >= len)
		return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

static int tier_parse(const char *line, void *entry)
{
	struct kvmm_admin_tier *t = entry;
	uint64_t tier;
	char b[32], *end;
	long long prio;

	memset(t, 0, sizeof(*t));
	if (!first_word(line, b, sizeof(b)))
		return -EBADMSG;
	errno = 0;
	tier = strtoull(b, &end, 10);
	if (*end || errno || !tier || tier > KVMM_SWAP_TIER_MAX)
		return -EBADMSG;
	t->tier = (uint32_t)tier;
	if (kvmm_admin_field(line, "ns", t->ns, sizeof(t->ns)) <= 0 ||
	    kvmm_admin_field(line, "priority", b, sizeof(b)) <= 0 ||
	    !field_u64(line, "slots", &t->slots) || !field_u64(line, "used", &t->used))
		return -EBADMSG;
	errno = 0;
	prio = strtoll(b, &end, 10);
	if (*end || errno || prio < INT32_MIN || prio > INT32_MAX)
		return -EBADMSG;
	t->priority = (int32_t)prio;
	kvmm_admin_field(line, "kind", t->kind, sizeof(t->kind));
	field_u64(line, "kept", &t->kept);
	field_u64(line, "pages_out", &t->pages_out);
	field_u64(line, "clean_out", &t->clean_out);
	field_u64(line, "pages_in", &t->pages_in);
	field_u64(line, "bytes_out", &t->bytes_out);
	field_u64(line, "bytes_in", &t->bytes_in);
	field_u64(line, "failures", &t->failures);
	field_u64(line, "direct", &t->direct);
	return 0;
}

int kvmm_admin_swap_tiers(kvmm_admin_t *a, const char *ns, struct kvmm_admin_tier **list,
			  unsigned int *nr)
{
	return read_records(a, KVMM_OP_SWAP, ns, "Tier", sizeof(**list), tier_parse, (void **)list,
			    nr);
}

/* A write verb: one request, one reply of rep_len payload bytes (rep may be NULL). */
static int write_verb(struct kvmm_admin *a, unsigned int op, const void *req, size_t len, void *rep,
		      size_t rep_len)
{
	int err;

	if (!a)
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	err = admin_usable(a);
	if (!err)
		err = call(a, op, req, len, rep, rep_len, true);
	pthread_mutex_unlock(&a->lock);
	return err;
}

int kvmm_admin_limit(kvmm_admin_t *a, const struct kvmm_limit_req *req)
{
	if (!req)
		return -EINVAL;
	return write_verb(a, KVMM_OP_LIMIT, req, sizeof(*req), NULL, 0);
}

int kvmm_admin_ns(kvmm_admin_t *a, unsigned int op, const struct kvmm_ns_req *req)
{
	if (!req || (op != KVMM_OP_NS_CREATE && op != KVMM_OP_NS_SET && op != KVMM_OP_NS_DELETE))
		return -EINVAL;
	return write_verb(a, op, req, sizeof(*req), NULL, 0);
}

int kvmm_admin_drop_caches(kvmm_admin_t *a, uint32_t flags, uint64_t *nr_dropped)
{
	struct kvmm_drop_caches_req req = {.flags = flags};
	struct kvmm_reclaim_rep rep;
	int err;

	err = write_verb(a, KVMM_OP_DROP_CACHES, &req, sizeof(req), &rep, sizeof(rep));
	if (!err && nr_dropped)
		*nr_dropped = rep.nr_frames;
	return err;
}

int kvmm_admin_reclaim(kvmm_admin_t *a, uint64_t nr_frames, uint32_t flags, uint64_t *nr_reclaimed)
{
	struct kvmm_reclaim_req req = {.nr_frames = nr_frames, .flags = flags};
	struct kvmm_reclaim_rep rep;
	int err;

	err = write_verb(a, KVMM_OP_RECLAIM, &req, sizeof(req), &rep, sizeof(rep));
	if (!err && nr_reclaimed)
		*nr_reclaimed = rep.nr_frames;
	return err;
}

int kvmm_admin_swapon(kvmm_admin_t *a, const struct kvmm_swapon_req *req)
{
	if (!req)
		return -EINVAL;
	return write_verb(a, KVMM_OP_SWAPON, req, sizeof(*req), NULL, 0);
}

int kvmm_admin_swapoff(kvmm_admin_t *a, const struct kvmm_swapoff_req *req)
{
	if (!req)
		return -EINVAL;
	return write_verb(a, KVMM_OP_SWAPOFF, req, sizeof(*req), NULL, 0);
}

int kvmm_admin_fault_inject(kvmm_admin_t *a, const char *ns, const char *spec)
{
	struct kvmm_fault_inject_req req;

	memset(&req, 0, sizeof(req));
	if (!spec || strlen(spec) >= sizeof(req.spec) || (ns && strlen(ns) >= sizeof(req.ns)))
		return -EINVAL;
	if (ns)
		strcpy(req.ns, ns);
	strcpy(req.spec, spec);
	return write_verb(a, KVMM_OP_FAULT_INJECT, &req, sizeof(req), NULL, 0);
}

/* ---- trace ------------------------------------------------------------------------------ */

/*
 * The event types' names as the daemon writes them in trace lines ("type=swap-out"), indexed
 * by the bit a TRACE mask sets for them: both are part of the protocol (kvmm/trace.h has the
 * daemon's table; tests/unit/test_admin.c checks that the two agree).
 */
static const char *const trace_events[] = {
	"alloc",    "free",    "seal",	"hit", "miss",	 "reclaim",
	"swap-out", "swap-in", "fault", "oom", "attach", "detach",
};

int kvmm_admin_trace_event(const char *name)
{
	if (!name)
		return -EINVAL;
	for (unsigned int i = 0; i < sizeof(trace_events) / sizeof(trace_events[0]); i++)
		if (!strcmp(name, trace_events[i]))
			return (int)i;
	return -EINVAL;
}

const char *kvmm_admin_trace_event_name(unsigned int type)
{
	return type < sizeof(trace_events) / sizeof(trace_events[0]) ? trace_events[type] : NULL;
}

int kvmm_admin_trace_follow(kvmm_admin_t *a, uint32_t flags, uint64_t client, uint32_t events)
{
	struct kvmm_admin_req req = {
		.flags = flags | KVMM_ADMIN_F_FOLLOW,
		.reserved = events,
		.id = client,
	};
	uint64_t seq;
	bool more;
	int err;

	if (!a || (flags & ~KVMM_ADMIN_F_JSON))
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	err = admin_usable(a);
	if (!err)
		err = send_req(a, KVMM_OP_TRACE, &req, sizeof(req), &seq);
	if (!err) {
		/* the daemon acknowledges at once: status 0, KVMM_MSG_F_MORE, no payload */
		err = wait_rec(a, seq, false, &more);
		if (err >= 0) {
			err = more ? 0 : -EBADMSG;
			a->following = more;
			a->trace_seq = seq;
		}
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

int kvmm_admin_trace_next(kvmm_admin_t *a, int timeout_ms, char **text)
{
	const struct kvmm_msg_hdr *h;
	int64_t deadline;
	int err;

	if (!a || !text)
		return -EINVAL;
	*text = NULL;
	h = (const struct kvmm_msg_hdr *)a->rx;
	deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	pthread_mutex_lock(&a->lock);
	if (!a->following) {
		err = -EINVAL; /* no subscription (or it ended) */
		goto out;
	}
	for (;;) {
		int n = recv_rec(a, deadline, true);

		if (n < 0) {
			err = n;
			break;
		}
		if (kvmm_op_base(h->op) == KVMM_OP_SHUTDOWN && !kvmm_op_is_reply(h->op)) {
			err = -ESHUTDOWN;
			break;
		}
		if (!kvmm_op_is_reply(h->op) || h->seq != a->trace_seq)
			continue;
		if (h->status) {
			err = h->status > 0 ? -EBADMSG : h->status;
			break;
		}
		a->following = h->flags & KVMM_MSG_F_MORE;
		*text = malloc((size_t)n - KVMM_MSG_HDR_SIZE + 1);
		if (!*text) {
			err = -ENOMEM;
			break;
		}
		memcpy(*text, a->rx + KVMM_MSG_HDR_SIZE, (size_t)n - KVMM_MSG_HDR_SIZE);
		(*text)[n - KVMM_MSG_HDR_SIZE] = '\0';
		err = 0;
		break;
	}
out:
	pthread_mutex_unlock(&a->lock);
	return err;
}

/* ---- tagged text ------------------------------------------------------------------------- */

/* The line after the one at p, or NULL. */
static const char *next_line(const char *p)
{
	p = strchr(p, '\n');
	return p ? p + 1 : NULL;
}

int kvmm_admin_value(const char *text, const char *name, int64_t *value)
{
	size_t nl;

	if (!text || !name || !value)
		return -EINVAL;
	nl = strlen(name);
	for (const char *p = text; p && *p; p = next_line(p)) {
		char *end;
		long long v;

		if (strncmp(p, name, nl) || p[nl] != ':')
			continue;
		errno = 0;
		v = strtoll(p + nl + 1, &end, 10);
		if (end == p + nl + 1 || errno)
			return -ERANGE;
		*value = v;
		return 0;
	}
	return -ENOENT;
}

const char *kvmm_admin_next(const char *text, const char *label, const char *prev)
{
	size_t ll;
	const char *p;

	if (!text || !label)
		return NULL;
	ll = strlen(label);
	p = prev ? next_line(prev) : text;
	for (; p && *p; p = next_line(p))
		if (!strncmp(p, label, ll) && p[ll] == ':')
			return p;
	return NULL;
}

int kvmm_admin_field(const char *line, const char *key, char *buf, size_t len)
{
	const char *end, *p;
	size_t kl;

	if (!line || !key || !buf || !len)
		return -EINVAL;
	buf[0] = '\0';
	kl = strlen(key);
	end = strchr(line, '\n');
	if (!end)
		end = line + strlen(line);
	for (p = line; (p = strstr(p, key)) && p < end; p += kl) {
		size_t n;

		if (p == line || p[-1] != ' ' || p[kl] != '=' || p + kl >= end)
			continue;
		n = strcspn(p + kl + 1, " \n");
		if (n >= len)
			n = len - 1;
		memcpy(buf, p + kl + 1, n);
		buf[n] = '\0';
		return (int)n;
	}
	return -ENOENT;
}
