// SPDX-License-Identifier: MIT
/*
 * runtime/client.c - a libkvmm handle's connection to kvmmd: connecting, HELLO (version
 * negotiation), ATTACH (receiving the namespace's pool chunks as SCM_RIGHTS descriptors and
 * mapping them so that frame n is at base + n * page_size; a cuda-backend pool is mapped on the
 * GPU by cuda_map.c instead), detaching, and the message layer
 * every other call uses. The layer sends one SOCK_SEQPACKET record per request with
 * MSG_NOSIGNAL (a dead daemon is an error code, never SIGPIPE) and MSG_DONTWAIT: when the
 * socket is full it polls for both directions and keeps receiving while it waits, because the
 * daemon never blocks on a client and may be waiting for us to drain its replies. Every
 * request, synchronous or not, has an entry in the in-flight table until its reply arrives;
 * replies that come while the caller waits for another one are parked (synchronous: the record
 * is copied into the entry; asynchronous: it becomes a completion), so pipelined requests
 * (block tables, kvmm_submit) may be answered in any order. Records that name no request are
 * dropped, descriptors that ride on a record nobody asked for are closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/libkvmm.h"

/* Descriptors received with the last record, owned by the receiver until taken or closed. */
struct kvmm_rx {
	size_t len;
	int fds[KVMM_RX_FDS_MAX];
	unsigned int nr_fds;
};

static void rx_close_fds(struct kvmm_rx *rx)
{
	for (unsigned int i = 0; i < rx->nr_fds; i++)
		close(rx->fds[i]);
	rx->nr_fds = 0;
}

/* The connection is gone or cannot be trusted: remember why, fail what waits on it. */
static int client_broken(struct kvmm_client *c, int err)
{
	if (!c->err)
		c->err = err;
	kvmm_inflight_fail(c, -ENOTCONN);
	if (err == -ENOTCONN)
		kvmm_client_gone(c); /* the daemon hung up: said once, as an event */
	return err;
}

void kvmm_client_cause(struct kvmm_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	c->cause = err;
	va_start(ap, fmt);
	vsnprintf(c->cause_msg, sizeof(c->cause_msg), fmt, ap);
	va_end(ap);
}

/*
 * The state letter of process @pid in /proc/PID/stat ('R', 'S', 'D', 'T' stopped, 't'
 * traced, 'Z'), or 0 when it cannot be read (another PID namespace, gone, no /proc).
 */
static char peer_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) S ...": comm may hold anything, the state follows its last ')' */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] ? p[2] : 0;
}

static const char *state_text(char st)
{
	switch (st) {
	case 'T':
		return "it is stopped (SIGSTOP or a job-control stop): SIGCONT resumes it";
	case 't':
		return "it is stopped by a debugger (ptrace)";
	case 'Z':
	case 'X':
		return "it has exited";
	case 'D':
		return "it is blocked in the kernel (uninterruptible I/O)";
	case 'R':
	case 'S':
		return "it is running but does not answer (hung or overloaded)";
	default:
		return "its state is unknown here";
	}
}

const char *kvmm_peer_state_text(pid_t pid)
{
	return state_text(peer_state(pid));
}

bool kvmm_peer_alive(pid_t pid)
{
	char st = peer_state(pid);

	return st == 'R' || st == 'S' || st == 'D';
}

int kvmm_client_stalled(struct kvmm_client *c)
{
	char st = peer_state(c->peer_pid);

	if (c->peer_pid > 0)
		kvmm_client_cause(c, -ETIMEDOUT,
				  "kvmmd (pid %d) did not answer in %u ms: %s; this handle gave it "
				  "up (kvmm_reattach once it answers)",
				  (int)c->peer_pid, c->wait_ms, state_text(st));
	else
		kvmm_client_cause(c, -ETIMEDOUT,
				  "kvmmd did not answer in %u ms (stopped or hung); this handle "
				  "gave it up (kvmm_reattach once it answers)",
				  c->wait_ms);
	if (!c->err)
		c->err = -ETIMEDOUT;
	kvmm_inflight_fail(c, -ETIMEDOUT);
	if (c->dp)
		kvmm_ring_fail(c, -ETIMEDOUT);
	kvmm_client_gone_err(c, -ETIMEDOUT);
	return -ETIMEDOUT;
}

size_t kvmm_msg_payload_max(const struct kvmm_client *c)
{
	size_t max = c->max_msg ? c->max_msg : KVMM_MSG_MAX;

	if (max > KVMM_MSG_MAX)
		max = KVMM_MSG_MAX;
	return max - KVMM_MSG_HDR_SIZE;
}

/*
 * Receive one record into c->rx (and its descriptors into rx). block false: -EAGAIN when
 * nothing is there. The header is checked before anyone looks at it.
 */
static int msg_recv(struct kvmm_client *c, struct kvmm_rx *rx, bool block)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * KVMM_RX_FDS_MAX)];
	} cbuf;
	struct iovec iov = {.iov_base = c->rx, .iov_len = KVMM_MSG_MAX};
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cbuf.buf,
		.msg_controllen = sizeof(cbuf.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;
	int err;

	rx->nr_fds = 0;
	rx->len = 0;
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->err)
		return c->err;
	do {
		n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		/* blocking: SO_RCVTIMEO (the daemon deadline) passed without a record */
		if ((errno == EAGAIN || errno == EWOULDBLOCK) && block)
			return kvmm_client_stalled(c);
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		return client_broken(c, -ENOTCONN);
	}
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (rx->nr_fds < KVMM_RX_FDS_MAX)
				rx->fds[rx->nr_fds++] = fd;
			else
				close(fd);
		}
	}
	if (n == 0)
		return client_broken(c, -ENOTCONN); /* the daemon hung up */
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		/* a record or descriptors were cut off: the session can no longer be trusted */
		rx_close_fds(rx);
		return client_broken(c, -EBADMSG);
	}
	err = kvmm_msg_hdr_check((const struct kvmm_msg_hdr *)c->rx, (size_t)n);
	if (err) {
		rx_close_fds(rx);
		return client_broken(c, err);
	}
	rx->len = (size_t)n;
	return 0;
}

static struct kvmm_inflight *inflight_find(struct kvmm_client *c, uint64_t seq)
{
	for (unsigned int i = 0; i < c->nr_inflight; i++)
		if (c->inflight[i].seq == seq)
			return &c->inflight[i];
	return NULL;
}

static void inflight_remove(struct kvmm_client *c, struct kvmm_inflight *in)
{
	if (!in->sync)
		c->nr_async--;
	free(in->stash);
	*in = c->inflight[--c->nr_inflight];
}

int kvmm_cq_push(struct kvmm_client *c, const struct kvmm_cqe *cqe)
{
	if (c->cq_count == c->cq_cap) {
		unsigned int cap = c->cq_cap ? c->cq_cap * 2 : 64;
		struct kvmm_cqe *cq;

		/* events alone never grow the queue past a bound: nobody may be reaping them */
		if ((cqe->flags & KVMM_CQE_F_EVENT) && c->cq_cap >= 1024) {
			c->nr_events_dropped++;
			return -ENOSPC;
		}
		cq = malloc(sizeof(*cq) * cap);
		if (!cq)
			return -ENOMEM;
		for (unsigned int i = 0; i < c->cq_count; i++)
			cq[i] = c->cq[(c->cq_head + i) % c->cq_cap];
		free(c->cq);
		c->cq = cq;
		c->cq_cap = cap;
		c->cq_head = 0;
	}
	c->cq[(c->cq_head + c->cq_count) % c->cq_cap] = *cqe;
	c->cq_count++;
	return 0;
}

void kvmm_inflight_fail(struct kvmm_client *c, int err)
{
	while (c->nr_inflight) {
		struct kvmm_inflight *in = &c->inflight[c->nr_inflight - 1];

		if (!in->sync) {
			struct kvmm_cqe cqe = {.user_data = in->user_data, .res = err};

			/* a completion that cannot be queued is lost; the caller sees -ENOTCONN */
			kvmm_cq_push(c, &cqe);
		}
		inflight_remove(c, in);
	}
}

/* The reply's payload into rep (n bytes); false, and -EBADMSG in cqe, when it is shorter. */
static bool take_rep(void *rep, size_t n, const void *p, size_t plen, struct kvmm_cqe *cqe)
{
	if (plen < n) {
		cqe->res = -EBADMSG;
		return false;
	}
	memcpy(rep, p, n);
	return true;
}

/* Turn the reply of an asynchronous request into a completion. */
static void complete_async(struct kvmm_client *c, struct kvmm_inflight *in)
{
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	const unsigned char *p = c->rx + KVMM_MSG_HDR_SIZE;
	size_t plen = hdr->len - KVMM_MSG_HDR_SIZE;
	struct kvmm_cqe cqe = {.user_data = in->user_data, .res = hdr->status};

	if (cqe.res == 0) {
		switch (in->op) {
		case KVMM_SQE_SEQ_CREATE:
		case KVMM_SQE_SEQ_FORK: {
			struct kvmm_seq_create_rep rep; /* same layout as kvmm_seq_fork_rep */

			if (take_rep(&rep, sizeof(rep), p, plen, &cqe)) {
				cqe.seq = rep.seq;
				cqe.nr_blocks = rep.nr_blocks;
			}
			break;
		}
		case KVMM_SQE_SEQ_APPEND:
		case KVMM_SQE_PREFIX_LOOKUP: {
			/* same layout as kvmm_prefix_lookup_rep up to nr_blocks */
			struct kvmm_seq_append_rep rep;

			_Static_assert(
				sizeof(rep) == sizeof(struct kvmm_prefix_lookup_rep) &&
					offsetof(struct kvmm_seq_append_rep, nr_blocks) ==
						offsetof(struct kvmm_prefix_lookup_rep, nr_blocks),
				"append and lookup replies share their layout");

			if (take_rep(&rep, sizeof(rep), p, plen, &cqe)) {
				cqe.nr_tokens = rep.nr_tokens;
				cqe.nr_blocks = rep.nr_blocks;
			}
			break;
		}
		case KVMM_SQE_SEQ_PROMPT: {
			struct kvmm_seq_prompt_rep rep;

			if (take_rep(&rep, sizeof(rep), p, plen, &cqe)) {
				cqe.seq = rep.seq;
				cqe.nr_blocks = rep.nr_blocks;
				cqe.nr_tokens = (uint64_t)rep.nr_hit * c->tokens_per_page;
			}
			break;
		}
		case KVMM_SQE_PIN:
		case KVMM_SQE_UNPIN:
		case KVMM_SQE_PIN_RANGE:
		case KVMM_SQE_UNPIN_RANGE: {
			struct kvmm_pin_rep rep;

			if (take_rep(&rep, sizeof(rep), p, plen, &cqe))
				cqe.nr_frames = rep.nr_frames;
			break;
		}
		default:
			break;
		}
	}
	kvmm_wp_pending_done(c, in->seq, &cqe);
	if (in->op == KVMM_SQE_SEQ_CREATE || in->op == KVMM_SQE_SEQ_FORK ||
	    in->op == KVMM_SQE_SEQ_PROMPT)
		kvmm_live_cqe(c, KVMM_OP_SEQ_CREATE, &cqe); /* a new sequence of the handle */
	inflight_remove(c, in);
	kvmm_cq_push(c, &cqe);
}

static void handle_event(struct kvmm_client *c)
{
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	size_t plen = hdr->len - KVMM_MSG_HDR_SIZE;

	switch (kvmm_op_base(hdr->op)) {
	case KVMM_OP_PREEMPT: {
		struct kvmm_preempt_event ev;
		struct kvmm_cqe cqe = {.res = -KVMM_EPREEMPTED, .flags = KVMM_CQE_F_EVENT};

		if (plen < sizeof(ev))
			return;
		memcpy(&ev, c->rx + KVMM_MSG_HDR_SIZE, sizeof(ev));
		/* dropped because a swapped page failed its checksum: lost, not reclaimed */
		if (ev.reason == KVMM_PREEMPT_CORRUPT)
			cqe.res = -KVMM_ELOST;
		cqe.seq = ev.seq;
		cqe.nr_frames = ev.nr_frames;
		kvmm_cq_push(c, &cqe);
		break;
	}
	case KVMM_OP_SHUTDOWN:
		c->shutting_down = true;
		break;
	default:
		break; /* an event of a later version: ignore it */
	}
}

/*
 * A record arrived that the caller is not waiting for: park it where its owner will look.
 * The descriptors it carried are closed (only ATTACH's reply brings any, and that one is
 * taken by its waiter).
 */
static void dispatch(struct kvmm_client *c, struct kvmm_rx *rx)
{
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	struct kvmm_inflight *in;

	rx_close_fds(rx);
	if (kvmm_op_is_event(hdr->op) && !kvmm_op_is_reply(hdr->op)) {
		handle_event(c);
		return;
	}
	if (!kvmm_op_is_reply(hdr->op))
		return; /* the daemon sends us no requests */
	in = inflight_find(c, hdr->seq);
	if (!in || in->stash)
		return; /* a reply to nothing we asked (or a duplicate): drop it */
	if (in->sync) {
		in->stash = malloc(rx->len);
		if (!in->stash) {
			client_broken(c, -ENOMEM);
			return;
		}
		memcpy(in->stash, c->rx, rx->len);
		in->stash_len = rx->len;
		return;
	}
	complete_async(c, in);
}

int kvmm_msg_pump(struct kvmm_client *c, bool block)
{
	struct kvmm_rx rx;
	int err;

	err = msg_recv(c, &rx, block);
	if (err)
		return err;
	dispatch(c, &rx);
	return 0;
}

/* Send one record; while the socket is full, keep receiving so the daemon can go on. */
static int msg_sendv(struct kvmm_client *c, struct iovec *iov, unsigned int nr_iov)
{
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = nr_iov};

	for (;;) {
		struct pollfd pfd = {.fd = c->fd, .events = POLLOUT | POLLIN};
		ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		int ret;

		if (n >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return client_broken(c, -ENOTCONN); /* EPIPE: nobody at the other end */
		ret = poll(&pfd, 1, c->wait_ms ? (int)c->wait_ms : -1);
		if (ret < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (ret == 0)
			return kvmm_client_stalled(c); /* full, and the daemon reads nothing */
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			int err = kvmm_msg_pump(c, false);

			if (err && err != -EAGAIN)
				return err;
		}
	}
}

static int inflight_add(struct kvmm_client *c, uint64_t seq, bool sync, uint32_t op,
			uint64_t user_data)
{
	struct kvmm_inflight *in;

	if (c->nr_inflight == c->inflight_cap) {
		unsigned int cap = c->inflight_cap ? c->inflight_cap * 2 : 64;

		in = realloc(c->inflight, sizeof(*in) * cap);
		if (!in)
			return -ENOMEM;
		c->inflight = in;
		c->inflight_cap = cap;
	}
	in = &c->inflight[c->nr_inflight++];
	*in = (struct kvmm_inflight){.seq = seq, .sync = sync, .op = op, .user_data = user_data};
	if (!sync)
		c->nr_async++;
	return 0;
}

int kvmm_msg_send_tagged(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
			 unsigned int nr_parts, bool sync, uint32_t sqe_op, uint64_t user_data,
			 uint64_t *seqp)
{
	struct iovec iov[1 + KVMM_IOV_MAX];
	struct kvmm_msg_hdr hdr;
	size_t len = KVMM_MSG_HDR_SIZE;
	uint64_t seq;
	int err;

	err = kvmm_client_usable(c);
	if (err)
		return err;
	if (nr_parts > KVMM_IOV_MAX)
		return -EINVAL;
	for (unsigned int i = 0; i < nr_parts; i++) {
		iov[1 + i].iov_base = (void *)parts[i].base;
		iov[1 + i].iov_len = parts[i].len;
		len += parts[i].len;
	}
	if (len > KVMM_MSG_HDR_SIZE + kvmm_msg_payload_max(c))
		return -E2BIG;
	seq = c->next_seq++;
	if (c->next_seq == 0)
		c->next_seq = 1;
	kvmm_msg_hdr_init(&hdr, op, (uint32_t)len, seq);
	hdr.abi = c->abi;
	iov[0].iov_base = &hdr;
	iov[0].iov_len = sizeof(hdr);
	err = inflight_add(c, seq, sync, sqe_op, user_data);
	if (err)
		return err;
	err = msg_sendv(c, iov, 1 + nr_parts);
	if (err) {
		struct kvmm_inflight *in = inflight_find(c, seq);

		if (in)
			inflight_remove(c, in);
		return err;
	}
	if (seqp)
		*seqp = seq;
	return 0;
}

int kvmm_msg_send(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		  unsigned int nr_parts, uint64_t *seq)
{
	return kvmm_msg_send_tagged(c, op, parts, nr_parts, true, 0, 0, seq);
}

/*
 * Wait for the reply to seq; it ends up in c->rx and its descriptors in rx (the caller owns
 * them). Returns 0 or a transport error.
 */
static int msg_wait_raw(struct kvmm_client *c, uint64_t seq, struct kvmm_rx *rx)
{
	for (;;) {
		struct kvmm_inflight *in = inflight_find(c, seq);
		const struct kvmm_msg_hdr *hdr;
		int err;

		if (!in)
			return c->err ? c->err : -ENOTCONN; /* failed while we waited */
		if (in->stash) {
			memcpy(c->rx, in->stash, in->stash_len);
			rx->len = in->stash_len;
			rx->nr_fds = 0;
			inflight_remove(c, in);
			return 0;
		}
		err = msg_recv(c, rx, true);
		if (err)
			return err;
		hdr = (const struct kvmm_msg_hdr *)c->rx;
		if (kvmm_op_is_reply(hdr->op) && hdr->seq == seq) {
			in = inflight_find(c, seq);
			if (in)
				inflight_remove(c, in);
			return 0;
		}
		dispatch(c, rx);
	}
}

/* Status and payload of the reply now in c->rx. */
static int reply_parse(struct kvmm_client *c, size_t len, void *rep, size_t rep_len)
{
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;

	if (hdr->status > 0)
		return client_broken(c, -EBADMSG);
	if (hdr->status < 0)
		return hdr->status;
	if (len - KVMM_MSG_HDR_SIZE < rep_len)
		return -EBADMSG;
	if (rep && rep_len)
		memcpy(rep, c->rx + KVMM_MSG_HDR_SIZE, rep_len);
	return 0;
}

int kvmm_msg_wait(struct kvmm_client *c, uint64_t seq, void *rep, size_t rep_len)
{
	struct kvmm_rx rx;
	int err;

	err = msg_wait_raw(c, seq, &rx);
	if (err)
		return err;
	rx_close_fds(&rx);
	return reply_parse(c, rx.len, rep, rep_len);
}

int kvmm_msg_call_fds(struct kvmm_client *c, unsigned int op, void *rep, size_t rep_len, int *fds,
		      unsigned int max_fds, unsigned int *nr_fds)
{
	struct kvmm_rx rx;
	uint64_t seq;
	int err;

	*nr_fds = 0;
	err = kvmm_msg_send(c, op, NULL, 0, &seq);
	if (err)
		return err;
	err = msg_wait_raw(c, seq, &rx);
	if (err)
		return err;
	err = reply_parse(c, rx.len, rep, rep_len);
	if (!err && rx.nr_fds > max_fds)
		err = -EBADMSG;
	if (err) {
		rx_close_fds(&rx);
		return err;
	}
	memcpy(fds, rx.fds, sizeof(int) * rx.nr_fds);
	*nr_fds = rx.nr_fds;
	return 0;
}

/*
 * Whether this daemon takes op on the rings: the operation table says which ops the rings
 * carry, and PREFETCH went there with the out area (KVMM_FEAT_RING_OUT): an older daemon
 * refuses it on the rings.
 */
static bool ring_takes(const struct kvmm_client *c, unsigned int op)
{
	if (op == KVMM_OP_PREFETCH && !(c->features & KVMM_FEAT_RING_OUT))
		return false;
	return kvmm_op_ring_ok(op);
}

int kvmm_msg_call(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		  unsigned int nr_parts, void *rep, size_t rep_len)
{
	uint64_t seq;
	int err;

	/*
	 * Every op the rings carry goes there (no system call while the daemon polls, a futex
	 * wait otherwise; a lookup waiting for a remote tier parks the ring, not the daemon);
	 * the socket keeps attach, fds, admin and the socket-only ops.
	 */
	if (c->dp && ring_takes(c, op)) {
		err = kvmm_client_usable(c);
		if (err)
			return err;
		err = kvmm_ring_call(c, op, parts, nr_parts, rep, rep_len);
		if (err <= 0)
			return err;
	}
	err = kvmm_msg_send(c, op, parts, nr_parts, &seq);
	if (err)
		return err;
	return kvmm_msg_wait(c, seq, rep, rep_len);
}

int kvmm_msg_call_var(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		      unsigned int nr_parts, size_t *plen)
{
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	int err;

	/* the rings, when the region has an out area: the reply lands where the socket's would */
	if (c->dp) {
		err = kvmm_client_usable(c);
		if (err)
			return err;
		err = kvmm_ring_call_out(c, op, parts, nr_parts, c->rx + KVMM_MSG_HDR_SIZE,
					 KVMM_MSG_PAYLOAD_MAX, plen);
		if (err <= 0)
			return err;
	}
	/* a KVMM_OPF_RING_OUT op is not a KVMM_OPF_RING one: kvmm_msg_call takes the socket */
	err = kvmm_msg_call(c, op, parts, nr_parts, NULL, 0);
	if (!err)
		*plen = hdr->len - KVMM_MSG_HDR_SIZE; /* checked against the buffer on receipt */
	return err;
}

/* ---- attach -------------------------------------------------------------------------- */

int kvmm_socket_path_default(char *buf, size_t len)
{
	const char *env = getenv("KVMM_SOCKET");
	int n;

	if (env && env[0])
		n = snprintf(buf, len, "%s", env);
	else if ((env = getenv("XDG_RUNTIME_DIR")) && env[0])
		n = snprintf(buf, len, "%s/%s", env, KVMM_XDG_SOCKET);
	else
		n = snprintf(buf, len, "%s", KVMM_DEFAULT_SOCKET);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Connect to c->sock_path (resolved at attach: kvmm_reattach comes back to the same one). */
static int client_connect(struct kvmm_client *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int err;

	_Static_assert(sizeof(c->sock_path) == sizeof(sa.sun_path), "a socket path as sun_path");
	memcpy(sa.sun_path, c->sock_path, sizeof(sa.sun_path));
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	while (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EINTR)
			continue;
		err = -errno;
		close(c->fd);
		c->fd = -1;
		kvmm_client_cause(c, err, "cannot connect to kvmmd at %s: %s", c->sock_path,
				  strerror(-err));
		return err;
	}
	{
		struct ucred cred;
		socklen_t len = sizeof(cred);

		c->peer_pid =
			getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ? 0 : cred.pid;
	}
	/* the daemon deadline: a blocking receive gives up after it (kvmm_client_stalled) */
	if (c->wait_ms) {
		struct timeval tv = {c->wait_ms / 1000, (long)(c->wait_ms % 1000) * 1000};

		if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
			err = -errno;
			close(c->fd);
			c->fd = -1;
			return err;
		}
	}
	return 0;
}

/* Our name in kvmmctl clients: the program's, cut to the characters a kvmm name allows. */
void kvmm_client_name(char name[KVMM_NAME_LEN])
{
	const char *prog = program_invocation_short_name;
	size_t n = 0;

	memset(name, 0, KVMM_NAME_LEN);
	for (; prog && *prog && n < KVMM_NAME_LEN - 1; prog++) {
		char ch = *prog;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-')
			name[n++] = ch;
	}
	if (n == 0)
		memcpy(name, "libkvmm", sizeof("libkvmm"));
}

static int client_hello(struct kvmm_client *c)
{
	struct kvmm_hello_req req = {
		.abi_version = KVMM_ABI_VERSION,
		.abi_min = KVMM_ABI_MIN_COMPAT,
		.pid = (uint32_t)getpid(),
		.features = KVMM_FEAT_HOST_BACKEND | KVMM_FEAT_CUDA_BACKEND |
			    KVMM_FEAT_PREFIX_CACHE | KVMM_FEAT_FD_PASSING | KVMM_FEAT_REMOTE |
			    KVMM_FEAT_KEY_DOMAIN | KVMM_FEAT_PIN_RANGE | KVMM_FEAT_FAR,
	};
	const char *no_rings = getenv("KVMM_NO_RINGS");

	/* the data plane unless the user asked for the socket only ($KVMM_NO_RINGS=1) */
	if (!no_rings || !no_rings[0] || !strcmp(no_rings, "0"))
		req.features |= KVMM_FEAT_RINGS | KVMM_FEAT_RING_OUT;
	struct kvmm_iov part = {&req, sizeof(req)};
	struct kvmm_hello_rep rep;
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	struct kvmm_rx rx;
	uint64_t seq;
	int err;

	kvmm_client_name(req.name);
	err = kvmm_msg_send(c, KVMM_OP_HELLO, &part, 1, &seq);
	if (err)
		return err;
	err = msg_wait_raw(c, seq, &rx);
	if (err)
		return err;
	rx_close_fds(&rx);
	if (hdr->status == -EPROTO)
		return -EPROTO; /* rep holds the daemon's range; the status says it all */
	err = reply_parse(c, rx.len, &rep, sizeof(rep));
	if (err)
		return err;
	/* trust nothing: the daemon's choice must be one we speak */
	if ((unsigned int)rep.abi_agreed - KVMM_ABI_MIN_COMPAT >
	    (unsigned int)(KVMM_ABI_VERSION - KVMM_ABI_MIN_COMPAT))
		return -EPROTO;
	if (rep.page_size == 0 || rep.page_size > (UINT64_C(1) << 40))
		return -EBADMSG;
	c->abi = rep.abi_agreed;
	c->features = rep.features;
	c->page_size = rep.page_size;
	c->client_id = rep.client_id;
	c->max_msg = rep.max_msg;
	if (c->max_msg && c->max_msg < 4096)
		return -EBADMSG; /* too small for our fixed structs plus some ids */
	/* a daemon before backends were reported (NONE) has host memory */
	c->backend = rep.backend == KVMM_BACKEND_NONE ? KVMM_BACKEND_HOST : rep.backend;
	if (c->backend >= KVMM_BACKEND_COUNT)
		return -EPROTO; /* pool memory of a kind this libkvmm cannot map */
	c->nr_devices = rep.nr_devices;
	return 0;
}

/* Map the pool chunks (and the data-plane region if one came first); takes the fds. */
static int client_map(struct kvmm_client *c, const struct kvmm_attach_rep *rep, int *fds,
		      unsigned int nr_fds)
{
	long sys_page = sysconf(_SC_PAGESIZE);
	/* with the data plane, its region and its doorbell come before the chunks */
	unsigned int first_chunk = rep->shm_size ? 2 : 0;
	uint64_t total;
	int err = 0;

	if (nr_fds != rep->nr_fds || nr_fds != first_chunk + rep->nr_chunks)
		return -EBADMSG;
	if (rep->nr_chunks == 0 || rep->chunk_size == 0 || rep->chunk_size % c->page_size != 0 ||
	    rep->chunk_size % (uint64_t)sys_page != 0)
		return -EBADMSG;
	if (rep->chunk_size > SIZE_MAX / rep->nr_chunks)
		return -EBADMSG;
	total = rep->chunk_size * rep->nr_chunks;
	if (total / c->page_size > KVMM_FRAME_MAX)
		return -EBADMSG;
	if (rep->nr_frames && rep->nr_frames > total / c->page_size)
		return -EBADMSG;

	if (rep->shm_size) {
		if (!(c->features & KVMM_FEAT_RINGS) || rep->shm_size > SIZE_MAX)
			return -EBADMSG;
		c->shm = mmap(NULL, rep->shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
		if (c->shm == MAP_FAILED) {
			c->shm = NULL;
			return -errno;
		}
		c->shm_len = rep->shm_size;
		err = kvmm_dp_client_setup(c, fds[1], rep->ring_entries, rep->mag_size);
		if (err)
			return err;
	}
	/* GPU memory: the chunks are imported on the device, not mmap()ed (cuda_map.c) */
	if (c->backend == KVMM_BACKEND_CUDA) {
		err = kvmm_client_cuda_map(c, fds + first_chunk, rep->nr_chunks, rep->chunk_size);
		goto out_sizes;
	}
	/*
	 * Reserve the whole window first so the chunks land side by side. A reattach whose pool
	 * has the old size maps the new chunks over the old window, in place: a pointer the
	 * engine kept then reads the new pool rather than fault (reattach.c).
	 */
	if (c->base && c->map_len != total) {
		munmap(c->base, c->map_len);
		c->base = NULL;
		c->map_len = 0;
	}
	if (!c->base) {
		c->base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (c->base == MAP_FAILED) {
			c->base = NULL;
			return -errno;
		}
		c->map_len = total;
	}
	/*
	 * Read-only unless the pages are not to be protected: wprotect.c makes a frame writable
	 * while it is this handle's own unsealed page. (mprotect keeps VM_MAYWRITE: the fds were
	 * opened read-write.)
	 */
	for (uint32_t i = 0; i < rep->nr_chunks; i++) {
		void *want = (char *)c->base + (size_t)i * rep->chunk_size;
		void *p =
			mmap(want, rep->chunk_size, c->wp_want ? PROT_READ : PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_FIXED, fds[first_chunk + i], 0);

		if (p == MAP_FAILED) {
			err = -errno;
			break;
		}
	}
out_sizes:
	c->chunk_size = rep->chunk_size;
	c->nr_chunks = rep->nr_chunks;
	c->nr_frames = rep->nr_frames ? rep->nr_frames : (uint32_t)(total / c->page_size);
	if (!err && c->wp_want && (c->base || c->backend == KVMM_BACKEND_CUDA))
		err = kvmm_wp_setup(c);
	return err;
}

static int client_attach(struct kvmm_client *c)
{
	struct kvmm_attach_req req = {
		.fmt = c->fmt,
		.flags = (c->features & KVMM_FEAT_RINGS) ? KVMM_ATTACH_F_RINGS : 0,
	};
	struct kvmm_attach_device dev;
	/* what follows the request: the device, then the model identity */
	unsigned char tail[sizeof(dev) + sizeof(struct kvmm_attach_model) + KVMM_MODEL_ID_MAX];
	size_t tail_len = 0;
	struct kvmm_iov part[2] = {{&req, sizeof(req)}, {tail, 0}};
	const struct kvmm_msg_hdr *hdr = (const struct kvmm_msg_hdr *)c->rx;
	struct kvmm_attach_rep rep;
	struct kvmm_rx rx;
	int *fds = NULL;
	unsigned int nr_fds = 0;
	bool have_rep = false, more;
	uint64_t seq;
	int err;

	memcpy(req.ns, c->ns, sizeof(req.ns)); /* NUL-padded */
	/*
	 * A pool in GPU memory: name our GPU, so that the daemon passes the chunks of the copy
	 * of the pool on it (a tensor-parallel group mirrors every frame on each of its
	 * devices), or refuses when it holds none (mapping another GPU's memory would be peer
	 * access at best).
	 */
	if (c->backend == KVMM_BACKEND_CUDA) {
		err = kvmm_client_cuda_uuid(c, dev.uuid);
		if (err < 0)
			return err;
		if (!err) {
			req.flags |= KVMM_ATTACH_F_DEVICE; /* else $KVMM_CUDA_DEVICE=none */
			memcpy(tail, &dev, sizeof(dev));
			tail_len = sizeof(dev);
		}
	}
	if (c->model_len) {
		struct kvmm_attach_model m = {.len = c->model_len};

		/* a daemon without key domains would share this model's pages with any other */
		if (!(c->features & KVMM_FEAT_KEY_DOMAIN))
			return -EOPNOTSUPP;
		req.flags |= KVMM_ATTACH_F_MODEL;
		memcpy(tail + tail_len, &m, sizeof(m));
		memcpy(tail + tail_len + sizeof(m), c->model, c->model_len);
		tail_len += sizeof(m) + c->model_len;
	}
	part[1].len = tail_len;
	err = kvmm_msg_send(c, KVMM_OP_ATTACH, part, tail_len ? 2 : 1, &seq);
	if (err)
		return err;
	err = msg_wait_raw(c, seq, &rx);
	if (err)
		return err;
	/*
	 * A pool of more chunks than one record carries comes in several records of the same
	 * seq, all but the last with KVMM_MSG_F_MORE; the struct rides in the first.
	 */
	for (;;) {
		int *grown;

		more = hdr->flags & KVMM_MSG_F_MORE;
		if (hdr->status < 0) {
			err = hdr->status;
			if (err == -ENODEV && (req.flags & KVMM_ATTACH_F_DEVICE))
				kvmm_client_cuda_refused(c); /* our GPU holds no copy of the pool */
			rx_close_fds(&rx);
			goto out_fds;
		}
		if (!have_rep) {
			err = reply_parse(c, rx.len, &rep, sizeof(rep));
			if (err) {
				rx_close_fds(&rx);
				goto out_fds;
			}
			have_rep = true;
		}
		grown = realloc(fds, sizeof(int) * (nr_fds + rx.nr_fds + 1));
		if (!grown) {
			rx_close_fds(&rx);
			err = -ENOMEM;
			goto out_fds;
		}
		fds = grown;
		memcpy(fds + nr_fds, rx.fds, sizeof(int) * rx.nr_fds);
		nr_fds += rx.nr_fds;
		rx.nr_fds = 0;
		if (!more)
			break;
		/* the continuation records: anything else in between is dispatched */
		for (;;) {
			err = msg_recv(c, &rx, true);
			if (err)
				goto out_fds;
			if (kvmm_op_is_reply(hdr->op) && hdr->seq == seq)
				break;
			dispatch(c, &rx);
		}
	}
	if (rep.tokens_per_page == 0 || rep.bytes_per_token == 0) {
		err = -EBADMSG;
		goto out_fds;
	}
	/* a daemon before device groups sends zeros: one device, member 0 */
	if (rep.nr_devices > 1 && rep.nr_devices != c->nr_devices) {
		err = -EBADMSG;
		goto out_fds;
	}
	if (rep.device_index >= (c->nr_devices ? c->nr_devices : 1)) {
		err = -EBADMSG;
		goto out_fds;
	}
	c->tokens_per_page = rep.tokens_per_page;
	c->bytes_per_token = rep.bytes_per_token;
	c->ns_id = rep.ns_id;
	c->device_index = c->backend == KVMM_BACKEND_CUDA && !(req.flags & KVMM_ATTACH_F_DEVICE)
				  ? KVMM_DEVICE_NONE
				  : rep.device_index;
	err = client_map(c, &rep, fds, nr_fds);
out_fds:
	/* mappings hold the memory; the descriptors are not needed any more */
	for (unsigned int i = 0; i < nr_fds; i++)
		close(fds[i]);
	free(fds);
	return err;
}

void kvmm_client_close_session(struct kvmm_client *c)
{
	/* the window stays mapped (views may point into it) but names nothing any more */
	c->far_gen = 0;
	kvmm_inflight_fail(c, -ENOTCONN);
	kvmm_wp_free(c);
	c->wp_off_reason = 0;
	kvmm_dp_client_free(c);
	kvmm_client_cuda_unmap(c);
	if (c->shm)
		munmap(c->shm, c->shm_len);
	c->shm = NULL;
	c->shm_len = 0;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->err = 0;
	c->shutting_down = false;
}

static void client_free(struct kvmm_client *c)
{
	kvmm_client_close_session(c);
	if (c->base)
		munmap(c->base, c->map_len);
	if (c->far)
		munmap(c->far, c->far_len);
	kvmm_reattach_free(c);
	pthread_mutex_destroy(&c->lock);
	free(c->inflight);
	free(c->cq);
	free(c->rx);
	free(c);
}

int kvmm_client_open(struct kvmm_client *c)
{
	int err;

	/* a new session: nothing agreed with the last daemon carries over */
	c->abi = 0;
	c->features = 0;
	c->max_msg = 0;
	err = client_connect(c);

	if (!err) {
		err = client_hello(c);
		/* a stall (-ETIMEDOUT) has said why already */
		if (err && err != -ETIMEDOUT)
			kvmm_client_cause(c, err, "kvmmd at %s refused HELLO: %s", c->sock_path,
					  kvmm_strerror(err));
	}
	if (!err) {
		err = client_attach(c);
		if (err && err != -ETIMEDOUT)
			kvmm_client_cause(c, err,
					  "kvmmd at %s refused ATTACH to namespace \"%s\": %s",
					  c->sock_path, c->ns, kvmm_strerror(err));
	}
	if (!err) {
		c->cause = 0;
		c->cause_msg[0] = '\0';
	}
	return err;
}

/* $KVMM_DAEMON_TIMEOUT_MS: the deadline in ms (0: wait forever), else the default. */
uint32_t kvmm_daemon_timeout_env(void)
{
	const char *e = getenv("KVMM_DAEMON_TIMEOUT_MS");
	unsigned long long v;
	char *end;

	if (!e || !*e)
		return KVMM_DAEMON_TIMEOUT_DEFAULT_MS;
	errno = 0;
	v = strtoull(e, &end, 10);
	if (errno || *end || *e == '-' || v > INT32_MAX)
		return KVMM_DAEMON_TIMEOUT_DEFAULT_MS; /* not a number: the default, not "never" */
	return (uint32_t)v;
}

/* $KVMM_WPROTECT=0 turns the protection of pool pages off (default on). */
static bool wprotect_env(void)
{
	const char *env = getenv("KVMM_WPROTECT");

	return !env || !env[0] || strcmp(env, "0") != 0;
}

int kvmm_attach(const char *socket_path, const char *ns, const struct kvmm_format *fmt,
		kvmm_client_t **out)
{
	return kvmm_attach_ex(socket_path, ns, fmt, NULL, out);
}

int kvmm_attach_ex(const char *socket_path, const char *ns, const struct kvmm_format *fmt,
		   const struct kvmm_attach_opts *opts, kvmm_client_t **out)
{
	char name[KVMM_NAME_LEN] = {0};
	struct kvmm_client *c;
	int err = 0;

	if (!out || !ns || !fmt)
		return -EINVAL;
	*out = NULL;
	if (opts && (opts->flags & ~KVMM_ATTACH_OPT_ALL))
		return -EINVAL;
	if (opts && (opts->model_len > KVMM_MODEL_ID_MAX || (opts->model_len && !opts->model)))
		return -EINVAL;
	for (unsigned int i = 0; opts && i < sizeof(opts->reserved) / sizeof(opts->reserved[0]);
	     i++)
		if (opts->reserved[i])
			return -EINVAL;
	if (opts && opts->reserved32)
		return -EINVAL;
	if (strlen(ns) >= KVMM_NAME_LEN)
		return -EINVAL;
	memcpy(name, ns, strlen(ns));
	if (kvmm_name_check(name) || kvmm_format_check(fmt))
		return -EINVAL;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->next_seq = 1;
	c->pid = getpid();
	c->wp_want = wprotect_env() && !(opts && (opts->flags & KVMM_ATTACH_NO_WPROTECT));
	/* the daemon deadline: the option, else $KVMM_DAEMON_TIMEOUT_MS, else 30 s */
	if (opts && opts->daemon_timeout_ms)
		c->deadline_ms =
			opts->daemon_timeout_ms < 0 ? 0 : (uint32_t)opts->daemon_timeout_ms;
	else
		c->deadline_ms = kvmm_daemon_timeout_env();
	c->wait_ms = c->deadline_ms;
	pthread_mutex_init(&c->lock, NULL);
	/* what a reattach needs to do it again (reattach.c) */
	memcpy(c->ns, name, sizeof(c->ns));
	c->fmt = *fmt;
	if (opts) {
		c->opt_flags = opts->flags;
		c->model_len = opts->model_len;
		if (opts->model_len)
			memcpy(c->model, opts->model, opts->model_len);
	}
	if (socket_path) {
		if (strlen(socket_path) >= sizeof(c->sock_path))
			err = -ENAMETOOLONG;
		else
			strcpy(c->sock_path, socket_path);
	} else {
		err = kvmm_socket_path_default(c->sock_path, sizeof(c->sock_path));
	}
	if (err)
		goto out_free;
	c->rx = malloc(KVMM_MSG_MAX);
	if (!c->rx) {
		err = -ENOMEM;
		goto out_free;
	}
	c->reattaching = true; /* no automatic reattach, no GONE event while attaching */
	err = kvmm_client_open(c);
	c->reattaching = false;
	if (err)
		goto out_free;
	*out = c;
	return 0;

out_free:
	client_free(c);
	return err;
}

void kvmm_detach(kvmm_client_t *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	/* a forked child holds a copy of the parent's socket: its BYE would end the parent's */
	if (c->fd >= 0 && !c->err && c->pid == getpid()) {
		struct kvmm_msg_hdr hdr;

		kvmm_msg_hdr_init(&hdr, KVMM_OP_BYE, sizeof(hdr), c->next_seq++);
		hdr.abi = c->abi;
		/* best effort: closing the socket tears the session down anyway */
		send(c->fd, &hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	pthread_mutex_unlock(&c->lock);
	client_free(c);
}

uint64_t kvmm_page_size(const kvmm_client_t *c)
{
	return c->page_size;
}

uint32_t kvmm_tokens_per_page(const kvmm_client_t *c)
{
	return c->tokens_per_page;
}

uint32_t kvmm_bytes_per_token(const kvmm_client_t *c)
{
	return c->bytes_per_token;
}

uint32_t kvmm_nr_frames(const kvmm_client_t *c)
{
	return c->nr_frames;
}

uint32_t kvmm_nr_devices(const kvmm_client_t *c)
{
	return c->nr_devices ? c->nr_devices : 1;
}

uint32_t kvmm_device_index(const kvmm_client_t *c)
{
	return c->device_index;
}

void *kvmm_frame_addr(const kvmm_client_t *c, uint32_t frame)
{
	if (!c || !c->base || frame >= c->nr_frames) {
		/* a cuda-backend pool is not in host memory: kvmm_frame_devptr() */
		errno = c && c->backend == KVMM_BACKEND_CUDA ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	return (char *)c->base + (size_t)frame * c->page_size;
}
