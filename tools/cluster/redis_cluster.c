// SPDX-License-Identifier: MIT
/*
 * tools/cluster/redis_cluster.c - a local Redis Cluster for the remote tier's test and
 * benchmark (redis_cluster.h).  Each node is a child process (PR_SET_PDEATHSIG: it dies with
 * whoever started it) on a loopback port whose cluster bus port (+10000) is free too, with
 * short node timeouts and reads allowed while the cluster is down, so a test that kills a node
 * sees the others go on.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/cluster/redis_cluster.h"

#define MAX_ARGS 64

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

bool rcluster_find(struct rcluster *cl)
{
	static const char *const dirs[] = {"/usr/bin", "/usr/local/bin", "/usr/sbin"};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(cl->bin, sizeof(cl->bin), "%s/redis-server", dirs[i]);
		if (!access(cl->bin, X_OK))
			return true;
	}
	cl->bin[0] = '\0';
	return false;
}

static bool port_free(int p)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (fd >= 0)
		close(fd);
	return ok;
}

int rcluster_pick_port(void)
{
	for (int tries = 0; tries < 200; tries++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t len = sizeof(sa);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), p;

		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    getsockname(fd, (struct sockaddr *)&sa, &len)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		close(fd);
		p = ntohs(sa.sin_port);
		if (p < 55000 && port_free(p + 10000))
			return p;
	}
	return -1;
}

redisReply *rcluster_cmd(const struct rcluster *cl, int i, const char *fmt, ...)
{
	struct timeval tv = {.tv_sec = 2};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", cl->port[i], tv);
	redisReply *r = NULL;
	va_list ap;

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return r;
}

int rcluster_node_start(struct rcluster *cl, int i)
{
	char p[16], tp[16], conf[64], log[128];
	const char *argv[MAX_ARGS];
	int argc = 0;
	uint64_t t0;

	snprintf(p, sizeof(p), "%d", cl->port[i]);
	snprintf(tp, sizeof(tp), "%d", cl->tls_port[i]);
	snprintf(conf, sizeof(conf), "nodes-%d.conf", cl->port[i]);
	snprintf(log, sizeof(log), "%s/redis-%d.log", cl->dir, cl->port[i]);
	{
		const char *base[] = {cl->bin,	   "--port",
				      p,	   "--bind",
				      "127.0.0.1", "--dir",
				      cl->dir,	   "--cluster-enabled",
				      "yes",	   "--cluster-config-file",
				      conf,	   "--cluster-node-timeout",
				      "1000",	   "--cluster-require-full-coverage",
				      "no",	   "--cluster-allow-reads-when-down",
				      "yes",	   "--save",
				      "",	   "--appendonly",
				      "no",	   "--logfile",
				      log,	   "--protected-mode",
				      "no"};

		for (size_t k = 0; k < sizeof(base) / sizeof(base[0]); k++)
			argv[argc++] = base[k];
	}
	for (int k = 0; cl->extra && cl->extra[k] && argc < MAX_ARGS - 1; k++)
		argv[argc++] = cl->extra[k];
	if (cl->tls_cert && argc < MAX_ARGS - 13) {
		const char *tls[] = {
			"--tls-port",	      tp,	    "--tls-cluster",	  "yes",
			"--tls-cert-file",    cl->tls_cert, "--tls-key-file",	  cl->tls_key,
			"--tls-ca-cert-file", cl->tls_ca,   "--tls-auth-clients", "no"};

		for (size_t k = 0; k < sizeof(tls) / sizeof(tls[0]); k++)
			argv[argc++] = tls[k];
	}
	argv[argc] = NULL;
	cl->pid[i] = fork();
	if (cl->pid[i] < 0) {
		cl->pid[i] = 0;
		return -errno;
	}
	if (cl->pid[i] == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		execv(cl->bin, (char *const *)argv);
		_exit(127);
	}
	for (t0 = now_ms(); now_ms() - t0 < 5000; sleep_ms(20)) {
		redisReply *r = rcluster_cmd(cl, i, "PING");

		if (r) {
			freeReplyObject(r);
			return 0;
		}
	}
	fprintf(stderr, "redis-server on port %d did not answer (log: %s)\n", cl->port[i], log);
	return -ETIMEDOUT;
}

void rcluster_node_kill(struct rcluster *cl, int i, int sig)
{
	if (cl->pid[i] <= 0)
		return;
	kill(cl->pid[i], sig);
	if (sig == SIGKILL) {
		waitpid(cl->pid[i], NULL, 0);
		cl->pid[i] = 0;
	}
}

bool rcluster_ok(const struct rcluster *cl)
{
	char known[40];

	snprintf(known, sizeof(known), "cluster_known_nodes:%d", cl->nodes);
	for (int i = 0; i < cl->nodes; i++) {
		redisReply *r;
		bool ok;

		if (cl->pid[i] <= 0)
			continue;
		r = rcluster_cmd(cl, i, "CLUSTER INFO");
		ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
		     strstr(r->str, known) && strstr(r->str, "cluster_slots_ok:16384");
		freeReplyObject(r);
		if (!ok)
			return false;
	}
	return true;
}

bool rcluster_wait_ok(const struct rcluster *cl, unsigned int ms)
{
	for (uint64_t t0 = now_ms(); now_ms() - t0 < ms; sleep_ms(50))
		if (rcluster_ok(cl))
			return true;
	return false;
}

int rcluster_start(struct rcluster *cl, int nodes)
{
	const char *const *extra = cl->extra;
	const char *cert = cl->tls_cert, *key = cl->tls_key, *ca = cl->tls_ca;
	int ret = 0;

	memset(cl, 0, sizeof(*cl));
	cl->extra = extra;
	cl->tls_cert = cert;
	cl->tls_key = key;
	cl->tls_ca = ca;
	if (nodes < 1 || nodes > RCLUSTER_MAX_NODES)
		return -EINVAL;
	if (!rcluster_find(cl))
		return -ENOENT;
	snprintf(cl->dir, sizeof(cl->dir), "/tmp/kvmm-redis.XXXXXX");
	if (!mkdtemp(cl->dir)) {
		cl->dir[0] = '\0';
		return -errno;
	}
	cl->nodes = nodes;
	for (int i = 0; i < nodes && !ret; i++) {
		cl->port[i] = rcluster_pick_port();
		if (cl->tls_cert) {
			/* not the plain port's neighbour: both bus ports must be free */
			do
				cl->tls_port[i] = rcluster_pick_port();
			while (cl->tls_port[i] == cl->port[i]);
		}
		ret = cl->port[i] < 0 || cl->tls_port[i] < 0 ? -EADDRINUSE
							     : rcluster_node_start(cl, i);
		snprintf(cl->seeds + strlen(cl->seeds), sizeof(cl->seeds) - strlen(cl->seeds),
			 "%s127.0.0.1:%d", i ? "," : "", cl->port[i]);
		snprintf(cl->tls_seeds + strlen(cl->tls_seeds),
			 sizeof(cl->tls_seeds) - strlen(cl->tls_seeds), "%s127.0.0.1:%d",
			 i ? "," : "", cl->tls_port[i]);
	}
	for (int i = 0; i < nodes && !ret; i++) {
		redisReply *r = rcluster_cmd(cl, i, "CLUSTER ADDSLOTSRANGE %d %d",
					     16384 * i / nodes, 16384 * (i + 1) / nodes - 1);

		if (!r || r->type == REDIS_REPLY_ERROR) {
			fprintf(stderr, "CLUSTER ADDSLOTSRANGE on port %d: %s\n", cl->port[i],
				r ? r->str : "no reply");
			ret = -EIO;
		}
		freeReplyObject(r);
	}
	for (int i = 1; i < nodes && !ret; i++) {
		/* with tls-cluster the bus listens beside the TLS port */
		redisReply *r = rcluster_cmd(cl, 0, "CLUSTER MEET 127.0.0.1 %d",
					     cl->tls_cert ? cl->tls_port[i] : cl->port[i]);

		if (!r || r->type == REDIS_REPLY_ERROR)
			ret = -EIO;
		freeReplyObject(r);
	}
	if (!ret && !rcluster_wait_ok(cl, 10000)) {
		fprintf(stderr, "the Redis Cluster in %s did not come up\n", cl->dir);
		ret = -ETIMEDOUT;
	}
	if (ret)
		rcluster_stop(cl);
	return ret;
}

void rcluster_stop(struct rcluster *cl)
{
	char path[256];

	for (int i = 0; i < cl->nodes; i++) {
		/* a stopped (SIGSTOP) node must run to die */
		if (cl->pid[i] > 0 && kill(cl->pid[i], SIGCONT) == 0)
			rcluster_node_kill(cl, i, SIGKILL);
		snprintf(path, sizeof(path), "%s/nodes-%d.conf", cl->dir, cl->port[i]);
		unlink(path);
		snprintf(path, sizeof(path), "%s/redis-%d.log", cl->dir, cl->port[i]);
		unlink(path);
	}
	if (cl->dir[0])
		rmdir(cl->dir);
	cl->dir[0] = '\0';
	cl->nodes = 0;
}
