// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/server.c - kvmmd's control-plane server: the listening SOCK_SEQPACKET socket, the
 * epoll event loop (the clients' shared-memory rings are polled by ring workers,
 * ring_worker.c, or here with ring_threads = 0), accepting clients (identity from SO_PEERCRED), receiving and
 * checking each record, and sending replies without ever blocking.  It owns one pool per
 * namespace (namespaces are physically partitioned in v0, so frame numbers are per namespace
 * and a client only ever receives its own namespace's chunk fds).  What a request does is
 * dispatch.c's business (by the operation table, opdef.c); this file only moves records.
 *
 * Why it cannot be stalled by one client: every socket is non-blocking, the loop reads at
 * most KVMM_RX_BURST records of one client per wakeup (level-triggered epoll brings it back),
 * and replies go out with MSG_DONTWAIT: a client that does not read its replies fills its
 * socket buffer and is disconnected instead of waited for.  Replies are small, so a
 * well-behaved client never gets there.  Stop comes through an eventfd, the only thing a
 * signal handler may touch.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "compiler.h"
#include "kmalloc.h"
#include "log.h"
#include "kvmm/backend/host.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/trace.h"

#define KVMM_RX_BURST 32  /* records of one client handled per wakeup */
#define KVMM_RX_MAX_FDS 8 /* descriptors a client may smuggle in one record (closed) */
#define KVMM_EPOLL_BATCH 64
#define KVMM_RING_SPIN_NS 50000ULL /* keep polling the rings this long after work */
/*
 * While the rings keep it spinning, the loop makes a system call (epoll_wait for the socket
 * side, sched_yield to let a client on this CPU run) at most this often instead of on every
 * round: in a VM a system call costs microseconds, as much as a whole request's work, and
 * used to sit between every two polls.  $KVMMD_SPIN_SYS_NS overrides it (0: every round, the
 * old loop), for measuring (kvmm-bench-ipc flow).
 */
#define KVMM_SPIN_SYS_NS 20000ULL

/* epoll tags for the two non-session fds: any two distinct addresses would do */
static char tag_listen, tag_stop, tag_obs, tag_remote, tag_reload, tag_kick;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- creation ------------------------------------------------------------------------- */

static int check_config(const struct kvmm_server_config *cfg)
{
	unsigned int i, j;

	if (!cfg->socket_path || !cfg->socket_path[0] || !cfg->ns || !cfg->nr_ns)
		return -EINVAL;
	if (cfg->nr_ns > KVMM_SERVER_MAX_NS)
		return -EINVAL;
	for (i = 0; i < cfg->nr_ns; i++) {
		const struct kvmm_ns_config *n = &cfg->ns[i];

		if (kvmm_ipc_ns_config_check(n)) {
			kvmm_err("ipc: namespace %d: bad name, size, limit or id list", i);
			return -EINVAL;
		}
		for (j = 0; j < i; j++) {
			if (!memcmp(cfg->ns[j].name, n->name, KVMM_NAME_LEN)) {
				kvmm_err("ipc: namespace %.32s listed twice", n->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/*
 * Make namespace @n's pool (its frames, namespace, secret, swap tiers, kvswapd, chunk fds).
 * On failure the caller destroys n->pool (NULL-safe).  Used at create and by ns_live.c.
 */
int kvmm_ipc_ns_open(struct kvmm_server *srv, struct kvmm_ipc_ns *n)
{
	struct kvmm_pool_params p = {
		.page_size = srv->cfg.page_size,
		.nframes = n->cfg.nframes,
		.wmark_min = srv->cfg.wmark_min,
		.wmark_low = srv->cfg.wmark_low,
		.wmark_high = srv->cfg.wmark_high,
		.backend = srv->cfg.backend,
	};
	kvmm_backend_chunks_fn chunks = srv->cfg.chunks;
	int ret;

	ret = kvmm_pool_create(&p, &n->pool);
	if (ret) {
		kvmm_err("ipc: namespace %s: pool of %u frames: %s", n->cfg.name, p.nframes,
			 strerror(-ret));
		return ret;
	}
	n->nr_devices = n->pool->be.nr_devices;
	ret = kvmm_ns_create(n->pool, n->cfg.name,
			     n->cfg.limit == n->cfg.nframes ? 0 : n->cfg.limit, n->cfg.priority,
			     &n->ns);
	if (!ret)
		ret = kvmm_ns_set_protection(n->ns, n->cfg.min, n->cfg.low);
	/* the daemon-wide budget the pools share (kvmm/budget.c) */
	if (!ret)
		ret = kvmm_budget_join(&srv->budget, n->pool, n->ns);
	if (ret)
		return ret;
	/* a provisioned secret (secret_file) first: a warm restart's index must match it */
	if (n->cfg.have_secret) {
		ret = kvmm_ns_set_secret(n->ns, n->cfg.secret);
		if (ret) {
			kvmm_err("ipc: namespace %s: secret: %s", n->cfg.name, strerror(-ret));
			return ret;
		}
	}
	/* reclaim hooks, swap tiers, fault points, kvswapd (swapd.c) */
	ret = kvmm_swapd_setup(srv, n);
	if (ret)
		return ret;
	if (!chunks && kvmm_is_host_backend(&n->pool->be))
		chunks = kvmm_host_backend_chunks;
	if (chunks) {
		ret = chunks(&n->pool->be, &n->fds, &n->nr_chunks, &n->chunk_size);
		if (ret) {
			kvmm_err("ipc: namespace %s: backend chunks: %s", n->cfg.name,
				 strerror(-ret));
			return ret;
		}
		if (n->nr_chunks > KVMM_SERVER_MAX_CHUNKS) {
			kvmm_err("ipc: namespace %s: %u chunks, at most %u can be passed",
				 n->cfg.name, n->nr_chunks, KVMM_SERVER_MAX_CHUNKS);
			return -E2BIG;
		}
	}
	return 0;
}

static int create_pools(struct kvmm_server *srv, const struct kvmm_ns_config *ns,
			unsigned int nr_ns)
{
	unsigned int i;
	int ret;

	for (i = 0; i < nr_ns; i++) {
		struct kvmm_ipc_ns *n = calloc(1, sizeof(*n));

		if (!n)
			return -ENOMEM;
		n->cfg = ns[i];
		n->id = i + 1;
		srv->ns[srv->nr_ns++] = n;
		ret = kvmm_ipc_ns_open(srv, n);
		if (ret)
			return ret;
	}
	return 0;
}

/* Remove @path if it is a socket nobody listens on; -EADDRINUSE if someone does. */
static int clear_stale_socket(const struct sockaddr_un *addr)
{
	struct stat st;
	int fd, ret;

	if (lstat(addr->sun_path, &st)) {
		if (errno == ENOENT)
			return 0;
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		kvmm_err("ipc: %s exists and is not a socket", addr->sun_path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ret = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
	close(fd);
	if (ret == 0) {
		kvmm_err("ipc: a daemon already listens on %s", addr->sun_path);
		return -EADDRINUSE;
	}
	if (errno != ECONNREFUSED && errno != ENOENT)
		return -errno;
	if (unlink(addr->sun_path) && errno != ENOENT)
		return -errno;
	kvmm_info("ipc: removed stale socket %s", addr->sun_path);
	return 0;
}

static int epoll_add(struct kvmm_server *srv, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};

	return epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int open_socket(struct kvmm_server *srv)
{
	struct sockaddr_un addr;
	int ret;

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (strlen(srv->socket_path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, srv->socket_path);
	ret = clear_stale_socket(&addr);
	if (ret)
		return ret;

	srv->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (srv->listen_fd < 0)
		return -errno;
	if (bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr)))
		return -errno;
	srv->socket_bound = true;
	/*
	 * Who may connect at all (the config's mode and group; kvmmd's default 0660 keeps other
	 * users out); then ATTACH checks the namespace's ids and admin verbs the group.
	 */
	if (srv->cfg.have_socket_gid && chown(srv->socket_path, (uid_t)-1, srv->cfg.socket_gid))
		return -errno;
	if (chmod(srv->socket_path, srv->cfg.socket_mode ? srv->cfg.socket_mode : 0666))
		return -errno;
	if (listen(srv->listen_fd, 128))
		return -errno;
	return epoll_add(srv, srv->listen_fd, EPOLLIN, &tag_listen);
}

/* How many ring workers: the config's ring_threads, or $KVMMD_RING_THREADS (measuring). */
static unsigned int ring_threads(const struct kvmm_server_config *cfg)
{
	const char *e = getenv("KVMMD_RING_THREADS");
	char *end;
	unsigned long v;

	if (e && *e) {
		v = strtoul(e, &end, 10);
		if (!*end && v <= KVMM_SERVER_MAX_RING_THREADS)
			return (unsigned int)v;
	}
	return cfg->ring_threads;
}

int kvmm_server_create(const struct kvmm_server_config *cfg, struct kvmm_server **out)
{
	struct kvmm_server *srv;
	unsigned int i;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg)
		return -EINVAL;
	ret = check_config(cfg);
	if (ret)
		return ret;

	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->cfg = *cfg;
	srv->listen_fd = srv->epoll_fd = srv->stop_fd = srv->reload_fd = srv->reserve_fd = -1;
	srv->kick_fd = -1;
	INIT_LIST_HEAD(&srv->sessions);
	srv->owner_uid = geteuid();
	srv->start_ns = now_ns();
	srv->ring_spin_ns = KVMM_RING_SPIN_NS;
	{
		/* for measuring the window (kvmm-bench-ipc flow), not a setting */
		const char *e = getenv("KVMMD_RING_SPIN_NS");
		char *end;
		unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;

		if (e && *e && !*end && v <= 1000000000ull)
			srv->ring_spin_ns = v;
		srv->spin_sys_ns = KVMM_SPIN_SYS_NS;
		e = getenv("KVMMD_SPIN_SYS_NS");
		v = e && *e ? strtoull(e, &end, 10) : 0;
		if (e && *e && !*end && v <= 1000000000ull)
			srv->spin_sys_ns = v;
	}
	if (!srv->cfg.max_clients)
		srv->cfg.max_clients = KVMM_SERVER_DEFAULT_MAX_CLIENTS;
	if (!srv->cfg.hello_timeout_ms)
		srv->cfg.hello_timeout_ms = KVMM_SERVER_DEFAULT_HELLO_MS;
	srv->socket_path = strdup(cfg->socket_path);
	srv->ns = calloc(KVMM_SERVER_MAX_NS, sizeof(*srv->ns));
	srv->rx = malloc(KVMM_MSG_MAX);
	srv->tx = malloc(KVMM_MSG_MAX);
	if (!srv->socket_path || !srv->ns || !srv->rx || !srv->tx) {
		ret = -ENOMEM;
		goto out_destroy;
	}
	srv->loop.rx = srv->rx;
	srv->loop.tx = srv->tx;
	srv->cfg.socket_path = srv->socket_path;
	srv->cfg.ns = NULL; /* use srv->ns[]->cfg */
	if (!srv->cfg.total_frames)
		for (i = 0; i < cfg->nr_ns; i++)
			srv->cfg.total_frames += cfg->ns[i].nframes;
	/* the host backend, configured with our chunk size, unless another one was asked for */
	if (!cfg->backend || cfg->backend == &kvmm_host_backend_ops) {
		kvmm_host_backend_init(&srv->host, cfg->chunk_size, 0);
		srv->cfg.backend = &srv->host.ops;
	}

	ret = kvmm_budget_init(&srv->budget, srv->cfg.total_frames);
	if (ret)
		goto out_destroy;
	srv->budget_init = true;
	ret = create_pools(srv, cfg->ns, cfg->nr_ns);
	if (ret)
		goto out_destroy;
	ret = kvmm_ipc_remote_setup(srv);
	if (ret)
		goto out_destroy;

	srv->ring_exec = kvmm_ipc_ring_exec; /* the data plane's SQEs: the same dispatch */
	srv->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	srv->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	srv->reload_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	srv->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (srv->epoll_fd < 0 || srv->stop_fd < 0 || srv->reload_fd < 0 || srv->reserve_fd < 0 ||
	    srv->kick_fd < 0) {
		ret = -errno;
		goto out_destroy;
	}
	ret = epoll_add(srv, srv->stop_fd, EPOLLIN, &tag_stop);
	if (!ret)
		ret = epoll_add(srv, srv->reload_fd, EPOLLIN, &tag_reload);
	if (!ret)
		ret = epoll_add(srv, srv->kick_fd, EPOLLIN, &tag_kick);
	if (ret)
		goto out_destroy;
	/* observability (trace ring and pump, /metrics): one fd in our set (metrics.c) */
	ret = kvmm_obs_create(srv, kvmm_admin_trace_pump);
	if (!ret)
		ret = epoll_add(srv, kvmm_obs_fd(srv->obs), EPOLLIN, &tag_obs);
	if (!ret && srv->remote)
		ret = epoll_add(srv, kvmm_remote_fd(srv->remote), EPOLLIN, &tag_remote);
	if (ret)
		goto out_destroy;
	ret = kvmm_ring_workers_start(srv, ring_threads(&srv->cfg));
	if (ret) {
		kvmm_err("ipc: ring workers: %s", strerror(-ret));
		goto out_destroy;
	}
	ret = open_socket(srv);
	if (ret) {
		kvmm_err("ipc: socket %s: %s", srv->socket_path, strerror(-ret));
		goto out_destroy;
	}
	kvmm_info("ipc: listening on %s, %u namespace(s)", srv->socket_path, srv->nr_ns);
	*out = srv;
	return 0;

out_destroy:
	kvmm_server_destroy(srv);
	return ret;
}

/* ---- sessions --------------------------------------------------------------------------- */

static void session_close(struct kvmm_session *s)
{
	struct kvmm_server *srv = s->srv;

	/* its ring worker lets go of it before anything of it goes */
	kvmm_ring_worker_del(s);
	if (s->park)
		kvmm_ipc_remote_cancel(s);
	kvmm_session_fini(s);
	epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	list_del(&s->node);
	KVMM_STAT_DEC(srv, clients);
	kvmm_debug("ipc: client %u closed", s->id);
	kvmm_free(s);
}

static void peer_identity(struct kvmm_session *s)
{
	socklen_t len = sizeof(s->cred);
	gid_t groups[ARRAY_SIZE(s->groups) - 1];
	unsigned int i, n;

	if (getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &s->cred, &len)) {
		/* cannot happen on a connected AF_UNIX socket; trust nobody */
		s->cred.pid = 0;
		s->cred.uid = (uid_t)-1;
		s->cred.gid = (gid_t)-1;
	}
	s->groups[0] = s->cred.gid;
	s->nr_groups = 1;
	len = sizeof(groups);
	if (!getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
		n = len / sizeof(gid_t);
		for (i = 0; i < n && s->nr_groups < ARRAY_SIZE(s->groups); i++)
			s->groups[s->nr_groups++] = groups[i];
	}
}

/*
 * Peers that are never locked out: root, the daemon's own user and the admin group.  An
 * unprivileged user holding every connection it can get must leave room for them.
 */
static bool session_privileged(const struct kvmm_session *s)
{
	return s->cred.uid == 0 || s->cred.uid == s->srv->owner_uid || kvmm_session_is_admin(s);
}

/* Connections now held by @uid (a walk: max_clients bounds it, and accepts are rare). */
static uint32_t uid_sessions(struct kvmm_server *srv, uid_t uid)
{
	struct kvmm_session *s;
	uint32_t n = 0;

	list_for_each_entry (s, &srv->sessions, node)
		n += s->cred.uid == uid && !s->refused;
	return n;
}

static void accept_one(struct kvmm_server *srv, int fd)
{
	struct kvmm_session *s;
	uint32_t nr = (uint32_t)__atomic_load_n(&srv->stats.clients, __ATOMIC_RELAXED);
	bool priv;

	KVMM_STAT_INC(srv, accepted);
	if (nr >= srv->cfg.max_clients + KVMM_SERVER_ADMIN_RESERVE) {
		KVMM_STAT_INC(srv, refused);
		kvmm_warn_ratelimited("ipc: %u clients, refusing another", nr);
		close(fd);
		return;
	}
	s = kvmm_calloc(1, sizeof(*s));
	if (!s || kvmm_session_init(s)) {
		kvmm_free(s);
		close(fd);
		return;
	}
	s->srv = srv;
	s->fd = fd;
	s->id = ++srv->next_client_id;
	s->accept_ns = now_ns();
	if (!srv->hello_next_ns)
		srv->hello_next_ns = s->accept_ns + (uint64_t)srv->cfg.hello_timeout_ms * 1000000;
	peer_identity(s);
	priv = session_privileged(s);
	if (!priv && nr >= srv->cfg.max_clients) {
		/* the last KVMM_SERVER_ADMIN_RESERVE places are for root and the admin group */
		KVMM_STAT_INC(srv, refused);
		kvmm_warn_ratelimited("ipc: %u clients, refusing uid %u (the rest is kept for "
				      "root and the admin group)",
				      nr, (unsigned int)s->cred.uid);
		s->refused = true;
	} else if (!priv && srv->cfg.max_clients_per_uid &&
		   uid_sessions(srv, s->cred.uid) >= srv->cfg.max_clients_per_uid) {
		KVMM_STAT_INC(srv, refused);
		kvmm_warn_ratelimited("ipc: uid %u holds %u connections (max_clients_per_uid), "
				      "refusing another",
				      (unsigned int)s->cred.uid, srv->cfg.max_clients_per_uid);
		s->refused = true;
	}
	if (epoll_add(srv, fd, EPOLLIN | EPOLLRDHUP, s)) {
		kvmm_session_fini(s);
		kvmm_free(s);
		close(fd);
		return;
	}
	list_add_tail(&s->node, &srv->sessions);
	KVMM_STAT_INC(srv, clients);
	kvmm_debug("ipc: client %u: pid %d uid %u gid %u", s->id, (int)s->cred.pid,
		   (unsigned int)s->cred.uid, (unsigned int)s->cred.gid);
}

static void accept_all(struct kvmm_server *srv)
{
	for (;;) {
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			accept_one(srv, fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if ((errno == EMFILE || errno == ENFILE) && srv->reserve_fd >= 0) {
			/* out of fds: take the client off the backlog rather than spin on it */
			close(srv->reserve_fd);
			fd = accept(srv->listen_fd, NULL, NULL);
			if (fd >= 0)
				close(fd);
			srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			KVMM_STAT_INC(srv, refused);
			kvmm_warn_ratelimited("ipc: out of file descriptors, refused a client");
			continue;
		}
		return; /* EAGAIN, or an error the next wakeup will see again */
	}
}

/* Count a bad message; past the limit the peer is not worth listening to. */
static void session_bad(struct kvmm_session *s)
{
	if (++s->nr_bad >= KVMM_SERVER_MAX_BAD_MSGS && !kvmm_session_dead(s)) {
		KVMM_STAT_INC(s->srv, disconnect_bad);
		kvmm_warn_ratelimited("ipc: client %u sent %u bad messages, disconnecting", s->id,
				      s->nr_bad);
		kvmm_session_set_dead(s);
	}
}

/* Close descriptors a client passed to us: we take none, and must not leak them. */
static void drop_fds(struct kvmm_session *s, struct msghdr *msg)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		size_t i, n;
		int fd;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			close(fd);
			KVMM_STAT_INC(s->srv, fds_dropped);
		}
	}
}

/* Read and handle up to KVMM_RX_BURST records.  Returns false when the peer is gone. */
static bool session_read(struct kvmm_session *s)
{
	struct kvmm_server *srv = s->srv;
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVMM_RX_MAX_FDS)];
		struct cmsghdr align;
	} cbuf;
	unsigned int burst;

	/* a parked lookup (remote_ipc.c) holds the session's next requests in its socket */
	for (burst = 0; burst < KVMM_RX_BURST && !kvmm_session_dead(s) &&
			!__atomic_load_n(&s->park, __ATOMIC_ACQUIRE);
	     burst++) {
		struct iovec iov = {.iov_base = srv->rx, .iov_len = KVMM_MSG_MAX};
		struct msghdr msg = {.msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf.buf,
				     .msg_controllen = sizeof(cbuf.buf)};
		struct kvmm_msg_hdr hdr;
		ssize_t n;
		size_t len;
		int ret;

		n = recvmsg(s->fd, &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return true;
			return false; /* ECONNRESET and friends: gone */
		}
		if (n == 0)
			return false; /* orderly hang-up */
		if (msg.msg_controllen)
			drop_fds(s, &msg);
		KVMM_STAT_INC(srv, requests);
		s->nr_requests++;
		/* MSG_TRUNC made n the record's real length: over KVMM_MSG_MAX fails the check */
		len = (size_t)n;
		ret = (msg.msg_flags & MSG_CTRUNC) ? -EBADMSG : 0;
		if (!ret)
			ret = kvmm_ipc_check_request(srv->rx,
						     len <= KVMM_MSG_MAX ? len : KVMM_MSG_MAX + 1);
		if (ret) {
			kvmm_ipc_error_hdr(&hdr, srv->rx, len < KVMM_MSG_MAX ? len : KVMM_MSG_MAX,
					   ret);
			kvmm_debug("ipc: client %u: bad record (%zu bytes): %s", s->id, len,
				   kvmm_errname(ret));
			KVMM_STAT_INC(srv, errors);
			KVMM_STAT_INC(srv, bad_msgs);
			kvmm_session_send(s, &hdr, sizeof(hdr), NULL, 0);
			session_bad(s);
			continue;
		}
		if (s->refused) {
			/* say why, then go: kvmm_attach() reports it as -EUSERS */
			kvmm_session_reply(s, (const struct kvmm_msg_hdr *)srv->rx, -EUSERS, NULL,
					   0);
			kvmm_session_set_dead(s);
			break;
		}
		kvmm_trace_clock_begin();
		kvmm_ipc_dispatch(s, (const struct kvmm_msg_hdr *)srv->rx);
		kvmm_trace_clock_end();
	}
	return !kvmm_session_dead(s);
}

/*
 * Close connections that have not said HELLO within hello_timeout_ms (refused ones too):
 * idle sockets must not hold places that root or other users need.  Returns the
 * milliseconds until the next deadline, -1 when no connection is waiting for one.
 */
static int reap_silent(struct kvmm_server *srv)
{
	struct kvmm_session *s, *tmp;
	uint64_t now = now_ns(), limit = (uint64_t)srv->cfg.hello_timeout_ms * 1000000;
	int next = -1;

	/* the walk only when a deadline has come: the loop runs this on every round */
	if (!srv->hello_next_ns)
		return -1;
	if (now < srv->hello_next_ns)
		return (int)((srv->hello_next_ns - now + 999999) / 1000000);
	srv->hello_next_ns = 0;
	list_for_each_entry_safe (s, tmp, &srv->sessions, node) {
		uint64_t age;
		int left;

		if (s->state != KVMM_SESSION_NEW && !s->refused)
			continue;
		age = now - s->accept_ns;
		if (age >= limit) {
			KVMM_STAT_INC(srv, hello_timeouts);
			kvmm_info("ipc: client %u (uid %u) said no HELLO in %u ms, closing", s->id,
				  (unsigned int)s->cred.uid, srv->cfg.hello_timeout_ms);
			session_close(s);
			continue;
		}
		left = (int)((limit - age + 999999) / 1000000);
		if (next < 0 || left < next) {
			next = left;
			srv->hello_next_ns = s->accept_ns + limit;
		}
	}
	return next;
}

static void session_event(struct kvmm_session *s, uint32_t events)
{
	bool alive = true;

	/* read what it sent before it hung up: a BYE or a last request */
	if (events & EPOLLIN)
		alive = session_read(s);
	if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
		alive = false;
	if (!alive) {
		if (!kvmm_session_dead(s))
			KVMM_STAT_INC(s->srv, hangups);
		session_close(s);
	}
}

static void send_shutdown(struct kvmm_session *s)
{
	struct {
		struct kvmm_msg_hdr hdr;
		struct kvmm_shutdown_event ev;
	} m;

	if (s->state == KVMM_SESSION_NEW)
		return;
	kvmm_msg_hdr_init(&m.hdr, KVMM_OP_SHUTDOWN, sizeof(m), 0);
	m.hdr.abi = s->abi;
	m.ev.grace_ms = 0;
	m.ev.reason = KVMM_SHUTDOWN_SIGNAL;
	if (!kvmm_session_send(s, &m, sizeof(m), NULL, 0))
		KVMM_STAT_INC(s->srv, events);
}

static void stop_all(struct kvmm_server *srv)
{
	struct kvmm_session *s, *tmp;

	/* stop accepting first: a client connecting now gets ECONNREFUSED, not silence */
	if (srv->listen_fd >= 0) {
		epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, srv->listen_fd, NULL);
		close(srv->listen_fd);
		srv->listen_fd = -1;
	}
	list_for_each_entry_safe (s, tmp, &srv->sessions, node) {
		send_shutdown(s);
		session_close(s);
	}
	kvmm_info("ipc: stopped");
}

/*
 * The data plane's share of the loop: consume every client's SQ (a bounded burst each, so
 * one busy client cannot starve the others), closing a client whose ring is corrupt.  Returns
 * whether any work was done; *blocked says some SQ holds entries that a full CQ holds back.
 */
static bool poll_rings(struct kvmm_server *srv, bool *blocked)
{
	struct kvmm_session *s, *tmp;
	uint32_t load;
	bool busy = false;

	*blocked = false;
	list_for_each_entry_safe (s, tmp, &srv->sessions, node) {
		int n;

		/* a ring worker's session (ring_worker.c) is polled there */
		if (!s->dp || kvmm_session_dead(s) || s->rw)
			continue;
		n = kvmm_dp_poll(s, KVMM_RING_BURST);
		if (n < 0) {
			KVMM_STAT_INC(srv, disconnect_bad);
			kvmm_session_set_dead(s);
			session_close(s);
			continue;
		}
		if (n > 0) {
			busy = true;
			kvmm_ring_loop_served(&srv->loop, s);
		} else if (kvmm_dp_pending(s)) {
			*blocked = true;
		}
	}
	/* how crowded the daemon is, for the clients' waits: only when it changes */
	load = busy ? kvmm_ring_loop_load(&srv->loop) : 0;
	if (load)
		list_for_each_entry (s, &srv->sessions, node)
			if (!s->rw)
				kvmm_dp_set_load(s, load);
	return busy;
}

/*
 * How long epoll_wait may sleep.  Spin (0) while the rings were busy within the last
 * KVMM_RING_SPIN_NS: a cross-core wake-up costs tens of microseconds, a poll a few loads.
 * Before sleeping, ask every client to ring its doorbell (NEED_WAKEUP), then look once more:
 * an SQ tail published before the flag was seen must not be slept through.  A client held
 * back by its own full CQ is looked at again every few milliseconds (it should ring the
 * doorbell after reaping, but is not trusted to).
 */
static int loop_timeout(struct kvmm_server *srv, bool busy, bool blocked, bool *armed)
{
	struct kvmm_session *s;

	if (kvmm_ring_loop_spin(srv, &srv->loop, busy))
		return 0;
	list_for_each_entry (s, &srv->sessions, node)
		if (!s->rw)
			kvmm_dp_need_wakeup(s, true);
	*armed = true;
	/*
	 * Full barrier: the flag stores must be visible before the SQ tails are loaded again;
	 * pairs with the client's smp_mb between its tail store and its flag load.
	 */
	smp_mb();
	list_for_each_entry (s, &srv->sessions, node)
		if (!s->rw && kvmm_dp_runnable(s))
			return 0;
	return blocked ? KVMM_RING_BLOCKED_MS : -1;
}

/* A ring worker asked (kvmm_ipc_kick): PREEMPT events for every session, bad rings closed. */
static void kick_event(struct kvmm_server *srv)
{
	struct kvmm_session *s, *tmp;
	uint64_t v;

	if (read(srv->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		kvmm_warn_ratelimited("ipc: kick: %s", strerror(errno));
	__atomic_store_n(&srv->kick_pending, 0, __ATOMIC_RELEASE);
	kvmm_swapd_preempt_run(srv);
	list_for_each_entry_safe (s, tmp, &srv->sessions, node) {
		if (!__atomic_load_n(&s->ring_bad, __ATOMIC_ACQUIRE))
			continue;
		KVMM_STAT_INC(srv, disconnect_bad);
		kvmm_session_set_dead(s);
		session_close(s);
	}
}

int kvmm_server_run(struct kvmm_server *srv)
{
	struct epoll_event evs[KVMM_EPOLL_BATCH];
	bool armed = false, busy = false, blocked = false;
	struct kvmm_session *s;

	if (!srv)
		return -EINVAL;
	for (;;) {
		int i, n, timeout, hello, cpu = sched_getcpu();
		bool kick = false;

		/* the clients' waits yield only to a loop on their CPU: say where it runs */
		if (cpu >= 0 && (uint32_t)cpu + 1 != srv->loop.cpu) {
			srv->loop.cpu = (uint32_t)cpu + 1;
			list_for_each_entry (s, &srv->sessions, node)
				if (!s->rw)
					kvmm_dp_set_cpu(s, srv->loop.cpu);
		}
		timeout = loop_timeout(srv, busy, blocked, &armed);
		hello = reap_silent(srv);

		if (hello >= 0 && (timeout < 0 || hello < timeout))
			timeout = hello;
		if (timeout == 0 && !armed && now_ns() - srv->last_sys_ns < srv->spin_sys_ns) {
			/* spinning on the rings: the socket side waits for the next epoll round */
			n = 0;
		} else {
			n = epoll_wait(srv->epoll_fd, evs, KVMM_EPOLL_BATCH, timeout);
			if (timeout == 0)
				srv->last_sys_ns = now_ns();
		}

		if (armed) {
			/* awake: clients need not ring until we are about to sleep again */
			list_for_each_entry (s, &srv->sessions, node)
				if (!s->rw)
					kvmm_dp_need_wakeup(s, false);
			armed = false;
		}

		if (n < 0) {
			if (errno == EINTR)
				continue;
			kvmm_err("ipc: epoll_wait: %s", strerror(errno));
			stop_all(srv);
			return -errno;
		}
		for (i = 0; i < n; i++) {
			void *ptr = evs[i].data.ptr;

			if (ptr == &tag_stop) {
				stop_all(srv);
				return 0;
			}
			if (ptr == &tag_listen) {
				accept_all(srv);
				continue;
			}
			if (ptr == &tag_reload) {
				uint64_t v;

				/* SIGHUP: read the counter, then re-read the config (kvmmd.c) */
				if (read(srv->reload_fd, &v, sizeof(v)) == sizeof(v) &&
				    srv->reload_fn)
					srv->reload_fn(srv, srv->reload_arg);
				/* the loop goes on with this round's other events: none was closed */
				continue;
			}
			if (ptr == &tag_obs) {
				kvmm_obs_event(srv);
				continue;
			}
			if (ptr == &tag_remote) {
				kvmm_ipc_remote_event(srv);
				continue;
			}
			/*
			 * After the round's other events: it closes sessions (bad rings) whose
			 * socket events may come later in evs[], which would then point at freed
			 * sessions (itest_ring test_hostile crashed kvmmd 1 run in 3 so).
			 */
			if (ptr == &tag_kick) {
				kick = true;
				continue;
			}
			/* a doorbell (session | 1): every ring is polled below anyway */
			if ((uintptr_t)ptr & 1)
				continue;
			session_event(ptr, evs[i].events);
		}
		if (kick)
			kick_event(srv);
		busy = poll_rings(srv, &blocked);
		/* OOM victims chosen during this round: free them, tell their clients */
		kvmm_swapd_preempt_run(srv);
	}
}

void kvmm_server_stop(struct kvmm_server *srv)
{
	uint64_t one = 1;
	ssize_t ret;

	/* write(2) is async-signal-safe; an eventfd counter cannot fill up in practice */
	ret = write(srv->stop_fd, &one, sizeof(one));
	(void)ret;
}

void kvmm_server_reload(struct kvmm_server *srv)
{
	uint64_t one = 1;
	ssize_t ret;

	ret = write(srv->reload_fd, &one, sizeof(one));
	(void)ret;
}

void kvmm_server_set_reload(struct kvmm_server *srv, void (*fn)(struct kvmm_server *, void *),
			    void *arg)
{
	srv->reload_fn = fn;
	srv->reload_arg = arg;
}

void kvmm_server_destroy(struct kvmm_server *srv)
{
	struct kvmm_session *s, *tmp;
	unsigned int i;

	if (!srv)
		return;
	/* background reclaimers and ring workers first: nothing may run while sessions go */
	for (i = 0; srv->ns && i < srv->nr_ns; i++)
		kvmm_kswapd_stop(srv->ns[i]->pool);
	kvmm_ring_workers_stop(srv);
	list_for_each_entry_safe (s, tmp, &srv->sessions, node)
		session_close(s);
	kvmm_ring_workers_free(srv);
	kvmm_ipc_remote_destroy(srv);
	kvmm_obs_destroy(srv);
	if (srv->listen_fd >= 0)
		close(srv->listen_fd);
	if (srv->socket_bound)
		unlink(srv->socket_path);
	if (srv->epoll_fd >= 0)
		close(srv->epoll_fd);
	if (srv->stop_fd >= 0)
		close(srv->stop_fd);
	if (srv->reload_fd >= 0)
		close(srv->reload_fd);
	if (srv->kick_fd >= 0)
		close(srv->kick_fd);
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	for (i = 0; srv->ns && i < srv->nr_ns; i++) {
		kvmm_pool_destroy(srv->ns[i]->pool);
		free(srv->ns[i]);
	}
	if (srv->budget_init)
		kvmm_budget_fini(&srv->budget);
	free(srv->ns);
	free(srv->socket_path);
	free(srv->rx);
	free(srv->tx);
	free(srv);
}

void kvmm_server_get_stats(struct kvmm_server *srv, struct kvmm_server_stats *st)
{
	kvmm_obs_server_stats(srv, st);
}

struct kvmm_pool *kvmm_server_ns_pool(struct kvmm_server *srv, const char *name)
{
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++)
		if (!strncmp(srv->ns[i]->cfg.name, name, KVMM_NAME_LEN))
			return srv->ns[i]->pool;
	return NULL;
}
