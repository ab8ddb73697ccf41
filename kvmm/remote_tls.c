// SPDX-License-Identifier: MIT
/*
 * kvmm/remote_tls.c - TLS to the Redis nodes for a hiredis without it (Debian 12's 0.14).
 * hiredis talks plain RESP over one end of a socketpair (redisConnectFd); a pump thread per
 * connection moves the bytes between the other end and an OpenSSL connection to the node.
 *
 *   hiredis --(AF_UNIX socketpair)--> pump thread --(SSL over TCP)--> redis-server --tls-port
 *
 * The connection is made in kvmm_tls_connect(), on the caller's thread, within the configured
 * timeout: TCP connect, then the TLS handshake, which verifies the node's certificate chain
 * against the CA file (or the system's) and its name (DNS name or IP address) against
 * server_name or else the host the client dialled; a client certificate is sent when one is
 * configured (tls-auth-clients on the server).  Only then does the pump start: both of its
 * sockets non-blocking, one poll() loop, a buffer each way, so that a node that answers a
 * long pipeline while hiredis is still writing never deadlocks the two.  The pump ends when
 * hiredis closes its end (redisFree), when the node closes or breaks the TLS connection
 * (hiredis then reads EOF: an I/O error, as with a plain socket), and hiredis' own read and
 * write timeouts work unchanged on its end of the pair.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "kvmm/remote.h"

#define PUMP_BUF (64u << 10)

struct kvmm_tls {
	SSL_CTX *ctx;
	char server_name[256];
};

struct kvmm_tls_conn {
	SSL *ssl;
	int tcp;  /* to the node */
	int pair; /* the pump's end of the socketpair */
	pthread_t thread;
	uint8_t up[PUMP_BUF]; /* from hiredis, to the node */
	uint8_t down[PUMP_BUF];
	size_t up_off, up_len, down_off, down_len;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* OpenSSL's first queued error as text in @buf (its queue emptied). */
static const char *ssl_err(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (!e)
		snprintf(buf, len, "%s", "no detail");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

struct kvmm_tls *kvmm_tls_create(const struct kvmm_redis_tls *cfg, char *err, size_t errlen)
{
	struct kvmm_tls *t = calloc(1, sizeof(*t));
	char e[256];

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx) {
		snprintf(err, errlen, "SSL_CTX_new: %s", ssl_err(e, sizeof(e)));
		goto out_free;
	}
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(t->ctx,
			 SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (cfg->ca_file[0] ? SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, NULL) != 1
			    : SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		snprintf(err, errlen, "CA %s: %s", cfg->ca_file[0] ? cfg->ca_file : "(system)",
			 ssl_err(e, sizeof(e)));
		goto out_free;
	}
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	if (cfg->cert_file[0] || cfg->key_file[0]) {
		if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file) != 1 ||
		    SSL_CTX_use_PrivateKey_file(t->ctx,
						cfg->key_file[0] ? cfg->key_file : cfg->cert_file,
						SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(t->ctx) != 1) {
			snprintf(err, errlen, "client certificate %s / key %s: %s", cfg->cert_file,
				 cfg->key_file, ssl_err(e, sizeof(e)));
			goto out_free;
		}
	}
	snprintf(t->server_name, sizeof(t->server_name), "%s", cfg->server_name);
	return t;

out_free:
	SSL_CTX_free(t->ctx);
	free(t);
	return NULL;
}

void kvmm_tls_destroy(struct kvmm_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

/* Wait for @fd to be ready for @events until @deadline (ms): 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		uint64_t now = now_ms();
		int n;

		if (now >= deadline)
			return -ETIMEDOUT;
		n = poll(&p, 1, (int)(deadline - now));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* A non-blocking TCP connection to @host:@port made within @deadline: the fd or -errno. */
static int tcp_connect(const char *host, int port, uint64_t deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai, *a;
	char service[16];
	int fd = -1, ret = -EHOSTUNREACH;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &ai))
		return -EHOSTUNREACH;
	for (a = ai; a; a = a->ai_next) {
		int one = 1, soerr = 0;
		socklen_t len = sizeof(soerr);

		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    a->ai_protocol);
		if (fd < 0) {
			ret = -errno;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
			ret = -errno;
		} else {
			ret = wait_fd(fd, POLLOUT, deadline);
			if (!ret && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
				ret = -errno;
			else if (!ret && soerr)
				ret = -soerr;
		}
		if (!ret)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd >= 0 ? fd : ret;
}

/*
 * A write to a connection the node reset raises SIGPIPE (OpenSSL writes with write(2)): the
 * library never lets that kill its host.  The pump thread blocks it for good; the caller's
 * thread blocks it around the handshake and the close_notify, and discards one raised
 * meanwhile before its mask is restored.
 */
static void sigpipe_block(sigset_t *old)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, old);
}

static void sigpipe_restore(const sigset_t *old)
{
	struct timespec zero = {0, 0};
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	if (!sigismember(old, SIGPIPE))
		while (sigtimedwait(&s, NULL, &zero) > 0)
			;
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* ---- the pump ----------------------------------------------------------------------------- */

static bool want_io(SSL *ssl, int r, short *ev)
{
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
		*ev |= POLLIN;
		return true;
	case SSL_ERROR_WANT_WRITE:
		*ev |= POLLOUT;
		return true;
	default:
		return false; /* closed by the node, or broken */
	}
}

static void *pump(void *arg)
{
	struct kvmm_tls_conn *c = arg;
	sigset_t old;

	sigpipe_block(&old);

	for (;;) {
		short tcp_ev = 0, pair_ev = 0;
		bool moved = false;
		ssize_t n;
		int r;

		/* hiredis -> buffer */
		if (c->up_off == c->up_len) {
			c->up_off = c->up_len = 0;
			n = read(c->pair, c->up, sizeof(c->up));
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				break; /* hiredis closed its end */
			if (n > 0) {
				c->up_len = (size_t)n;
				moved = true;
			} else {
				pair_ev |= POLLIN;
			}
		}
		/* buffer -> node */
		if (c->up_off < c->up_len) {
			r = SSL_write(c->ssl, c->up + c->up_off, (int)(c->up_len - c->up_off));
			if (r > 0) {
				c->up_off += (size_t)r;
				moved = true;
			} else if (!want_io(c->ssl, r, &tcp_ev)) {
				break;
			}
		}
		/* node -> buffer */
		if (c->down_off == c->down_len) {
			c->down_off = c->down_len = 0;
			r = SSL_read(c->ssl, c->down, sizeof(c->down));
			if (r > 0) {
				c->down_len = (size_t)r;
				moved = true;
			} else if (!want_io(c->ssl, r, &tcp_ev)) {
				break;
			}
		}
		/* buffer -> hiredis */
		if (c->down_off < c->down_len) {
			n = send(c->pair, c->down + c->down_off, c->down_len - c->down_off,
				 MSG_NOSIGNAL);
			if (n > 0) {
				c->down_off += (size_t)n;
				moved = true;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				break;
			} else {
				pair_ev |= POLLOUT;
			}
		}
		if (!moved) {
			struct pollfd p[2] = {{.fd = c->pair, .events = pair_ev},
					      {.fd = c->tcp, .events = tcp_ev}};

			/* a hang-up of either side is reported whatever the events */
			if (poll(p, 2, -1) < 0 && errno != EINTR)
				break;
			if ((p[0].revents & (POLLHUP | POLLERR)) && !(p[0].revents & POLLIN))
				break;
		}
	}
	/*
	 * hiredis reads EOF (an I/O error) from now on; its writes still go into the pair's
	 * buffer (no EPIPE, no SIGPIPE) until it notices.
	 */
	shutdown(c->pair, SHUT_WR);
	return NULL;
}

int kvmm_tls_connect(struct kvmm_tls *t, const char *host, int port, uint32_t timeout_ms,
		     struct kvmm_tls_conn **out)
{
	uint64_t deadline = now_ms() + (timeout_ms ? timeout_ms : 200);
	const char *name = t->server_name[0] ? t->server_name : host;
	struct kvmm_tls_conn *c;
	int sv[2] = {-1, -1}, ret;
	sigset_t mask;
	char e[256];

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->pair = -1;
	c->tcp = tcp_connect(host, port, deadline);
	if (c->tcp < 0) {
		ret = c->tcp;
		goto out_free;
	}
	c->ssl = SSL_new(t->ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, c->tcp) != 1) {
		ret = -ENOMEM;
		goto out_free;
	}
	/* the name the certificate must carry: an IP address, or a DNS name (also sent as SNI) */
	{
		struct in6_addr a6;
		struct in_addr a4;

		if (inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1) {
			if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name) != 1) {
				ret = -EINVAL;
				goto out_free;
			}
		} else if (SSL_set_tlsext_host_name(c->ssl, name) != 1 ||
			   SSL_set1_host(c->ssl, name) != 1) {
			ret = -EINVAL;
			goto out_free;
		}
	}
	sigpipe_block(&mask);
	for (;;) {
		short ev = 0;

		ret = SSL_connect(c->ssl);
		if (ret == 1)
			break;
		if (!want_io(c->ssl, ret, &ev)) {
			long v = SSL_get_verify_result(c->ssl);

			kvmm_warn_ratelimited("remote: TLS to %s:%d (name %s): %s", host, port,
					      name,
					      v != X509_V_OK ? X509_verify_cert_error_string(v)
							     : ssl_err(e, sizeof(e)));
			ERR_clear_error();
			ret = -ECONNREFUSED;
			break;
		}
		ret = wait_fd(c->tcp, ev, deadline);
		if (ret)
			break;
	}
	sigpipe_restore(&mask);
	if (ret != 1)
		goto out_free;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		ret = -errno;
		goto out_free;
	}
	c->pair = sv[1];
	if (fcntl(c->pair, F_SETFL, O_NONBLOCK)) {
		ret = -errno;
		goto out_free;
	}
	ret = -pthread_create(&c->thread, NULL, pump, c);
	if (ret)
		goto out_free;
	*out = c;
	return sv[0];

out_free:
	if (sv[0] >= 0)
		close(sv[0]);
	if (c->pair >= 0)
		close(c->pair);
	SSL_free(c->ssl);
	if (c->tcp >= 0)
		close(c->tcp);
	free(c);
	ERR_clear_error();
	return ret;
}

void kvmm_tls_close(struct kvmm_tls_conn *c)
{
	sigset_t mask;

	if (!c)
		return;
	/* hiredis' end is closed (redisFree) before this: the pump sees it and stops */
	shutdown(c->pair, SHUT_RDWR);
	pthread_join(c->thread, NULL);
	/* close_notify to a node that may have reset the connection */
	sigpipe_block(&mask);
	SSL_shutdown(c->ssl);
	sigpipe_restore(&mask);
	SSL_free(c->ssl);
	close(c->tcp);
	close(c->pair);
	free(c);
	ERR_clear_error();
}
