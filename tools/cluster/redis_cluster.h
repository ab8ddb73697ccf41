/* SPDX-License-Identifier: MIT */
/*
 * tools/cluster/redis_cluster.h - a throw-away Redis Cluster on loopback for the remote tier's
 * integration test (tests/integration/itest_remote.c) and benchmark (tools/bench_remote.c):
 * N masters of Debian's redis-server on free ports in a temporary directory, slots split
 * evenly, met through CLUSTER MEET; nodes stopped, killed and restarted on their port.  Not
 * part of kvmmd or libkvmm: its own archive (tools/cluster/built-in.a), linked by those two.
 */
#ifndef KVMM_TOOLS_REDIS_CLUSTER_H
#define KVMM_TOOLS_REDIS_CLUSTER_H

#include <stdbool.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#define RCLUSTER_MAX_NODES 8

struct rcluster {
	char dir[64];  /* the temporary directory (nodes files, logs); "" before start */
	char bin[256]; /* redis-server */
	int nodes;
	int port[RCLUSTER_MAX_NODES];
	pid_t pid[RCLUSTER_MAX_NODES]; /* 0: not running */
	char seeds[256];	       /* "127.0.0.1:P,127.0.0.1:Q,..." */
	const char *const *extra;      /* more redis-server arguments for every node, or NULL */
	/*
	 * TLS, set before rcluster_start like extra (NULL: none): every node also listens on a
	 * TLS port with this certificate, key and CA (clients need no certificate), its cluster
	 * bus runs over TLS (tls-cluster: the bus port is the TLS port + 10000, so nodes meet on
	 * their TLS ports), and CLUSTER SLOTS asked over TLS names the TLS ports.  The plain
	 * port stays for the helper's own commands.
	 */
	const char *tls_cert, *tls_key, *tls_ca;
	int tls_port[RCLUSTER_MAX_NODES];
	char tls_seeds[256]; /* the TLS ports, as seeds */
};

/* Where redis-server is (cl->bin): true, or false when it is not installed. */
bool rcluster_find(struct rcluster *cl);
/*
 * Start @nodes masters (cl->extra set before, or NULL) and wait until every node says the
 * cluster is ok: 0, -ENOENT (no redis-server), -ETIMEDOUT, or -errno.  cl is zeroed first
 * except for extra; on failure what was started is stopped.
 */
int rcluster_start(struct rcluster *cl, int nodes);
/* A loopback port free now whose cluster bus port (+10000) is free too, or -1. */
int rcluster_pick_port(void);
/* Kill every node, remove the nodes files and logs, and the directory if it is empty. */
void rcluster_stop(struct rcluster *cl);
/* (Re)start node @i on its port (its nodes file keeps its slots): 0 or -errno. */
int rcluster_node_start(struct rcluster *cl, int i);
/* Send @sig to node @i; SIGKILL also reaps it. */
void rcluster_node_kill(struct rcluster *cl, int i, int sig);
/*
 * One command to node @i on a fresh connection (2 s timeout), hiredis' format (%b: a pointer
 * and a length); NULL when it did not answer.
 */
redisReply *rcluster_cmd(const struct rcluster *cl, int i, const char *fmt, ...);
/* Every running node says cluster_state:ok, knows every node and serves every slot. */
bool rcluster_ok(const struct rcluster *cl);
bool rcluster_wait_ok(const struct rcluster *cl, unsigned int ms);

#endif /* KVMM_TOOLS_REDIS_CLUSTER_H */
