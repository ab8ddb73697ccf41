/* SPDX-License-Identifier: MIT */
/*
 * kvmm/config.h - kvmmd's settings: the INI-like configuration file (default
 * /etc/kvmm/kvmmd.conf), command-line overrides through the same key parsers, and the final
 * pass that fills defaults and splits the pool between namespaces.  The reference for every
 * key is Documentation/admin-guide/kvmmd.md.
 *
 * Use: kvmm_config_init(), then kvmm_config_load() (or _parse() on a buffer), then
 * kvmm_config_set() / kvmm_config_set_ns() for each flag (so flags override the file), then
 * kvmm_config_finalize().  Every call that can fail returns 0 or -errno and writes a one-line
 * message to @err: "FILE:LINE: message" for a line of the file, "message" for a flag value
 * (the caller prefixes the flag's name).  kvmmd exits 2 on any of them.
 */
#ifndef KVMM_CONFIG_H
#define KVMM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "uapi/kvmm.h"

#define KVMM_CONFIG_DEFAULT_PATH "/etc/kvmm/kvmmd.conf"
#define KVMM_CONFIG_MAX_NS 32
#define KVMM_CONFIG_MAX_IDS 16
#define KVMM_CONFIG_ERR_LEN 512
#define KVMM_CONFIG_PATH_LEN 108 /* sizeof(struct sockaddr_un.sun_path) */

/* defaults (Documentation/admin-guide/kvmmd.md) */
#define KVMM_CONFIG_DEFAULT_PAGE_SIZE (UINT64_C(2) << 20) /* 16 tokens of an 8B model */
#define KVMM_CONFIG_DEFAULT_POOL_SIZE (UINT64_C(1) << 30)
#define KVMM_CONFIG_DEFAULT_MAX_CLIENTS 256
/* connections one unprivileged user may hold (root and the admin group are not counted) */
#define KVMM_CONFIG_DEFAULT_MAX_CLIENTS_PER_UID 64
/* the socket's mode: owner and group, never everyone by default */
#define KVMM_CONFIG_DEFAULT_SOCKET_MODE 0660
/* a connection that has not said HELLO within this is closed */
#define KVMM_CONFIG_DEFAULT_HELLO_TIMEOUT_MS 5000
#define KVMM_CONFIG_RING_THREADS_AUTO UINT32_MAX
#define KVMM_CONFIG_MAX_RING_THREADS 64
/*
 * The ring workers' nice value: ahead of the clients they serve when those crowd the CPUs
 * (Documentation/benchmarks/kvmm-bench.md, suite flow, session 21).  Best effort by default.
 */
#define KVMM_CONFIG_DEFAULT_RING_NICE (-5)
#define KVMM_CONFIG_DEFAULT_NS "default"

/* trace = ...: when the trace ring records (Documentation/admin-guide/kvmmctl.md, "trace") */
enum kvmm_config_trace {
	KVMM_CONFIG_TRACE_FOLLOW, /* while a follower (kvmmctl trace) is subscribed: the default */
	KVMM_CONFIG_TRACE_ALWAYS, /* always: a flight recorder for --dump */
	KVMM_CONFIG_TRACE_OFF,	  /* never */
};

/* keys of [daemon]; indexes into struct kvmm_config.line */
enum kvmm_config_key {
	KVMM_CFG_SOCKET,
	KVMM_CFG_BACKEND,
	KVMM_CFG_PAGE_SIZE,
	KVMM_CFG_CHUNK_SIZE,
	KVMM_CFG_POOL_SIZE, /* pool_size and frames: one setting, two units */
	KVMM_CFG_WMARK_MIN,
	KVMM_CFG_WMARK_LOW,
	KVMM_CFG_WMARK_HIGH,
	KVMM_CFG_ADMIN_GROUP,
	KVMM_CFG_LOG_LEVEL,
	KVMM_CFG_FOREGROUND,
	KVMM_CFG_PREFAULT,
	KVMM_CFG_MAX_CLIENTS,
	KVMM_CFG_METRICS,
	KVMM_CFG_DEVICE, /* cuda backend: the GPU ordinal */
	KVMM_CFG_SOCKET_MODE,
	KVMM_CFG_SOCKET_GROUP,
	KVMM_CFG_MAX_CLIENTS_PER_UID,
	KVMM_CFG_HELLO_TIMEOUT,
	KVMM_CFG_RING_THREADS,
	KVMM_CFG_TRACE,
	KVMM_CFG_RING_NICE,
	KVMM_CFG_KEY_COUNT,
};

/* keys of [namespace NAME]; indexes into struct kvmm_config_ns.line */
enum kvmm_config_ns_key {
	KVMM_CFG_NS_FRAMES, /* frames and size */
	KVMM_CFG_NS_LIMIT,  /* limit and limit_size */
	KVMM_CFG_NS_PRIORITY,
	KVMM_CFG_NS_UIDS,
	KVMM_CFG_NS_GIDS,
	KVMM_CFG_NS_SECRET_FILE,
	KVMM_CFG_NS_MIN, /* min: frames or a size */
	KVMM_CFG_NS_LOW, /* low: frames or a size */
	KVMM_CFG_NS_KEY_COUNT,
};

struct kvmm_config_ns {
	char name[KVMM_NAME_LEN];
	uint64_t frames; /* frames= (after finalize: this namespace's pool, always set) */
	uint64_t size;	 /* size= in bytes, turned into frames by finalize; 0 = unset */
	/*
	 * max= (memcg's max: the hard limit; the old keys limit= and limit_size= set the same)
	 * in frames, or in bytes when given with a size suffix; after finalize: frames, 0 = none
	 * (a max of the namespace's whole pool or more is none).
	 */
	uint64_t limit;
	uint64_t limit_size; /* in bytes, turned into limit by finalize */
	/* min= and low= (memcg's protections), frames or bytes like max; after finalize: frames */
	uint64_t min, min_size;
	uint64_t low, low_size;
	int priority;
	uid_t uids[KVMM_CONFIG_MAX_IDS];
	unsigned int nr_uids;
	gid_t gids[KVMM_CONFIG_MAX_IDS];
	unsigned int nr_gids;
	/*
	 * secret_file = PATH: the namespace's page-cache secret, 32 hex digits, read when the
	 * line is parsed.  Set: the namespace shares pages through the remote tier with every
	 * kvmmd whose namespace has the same secret.  Unset: a random secret, nothing shared.
	 */
	char secret_file[KVMM_PATH_LEN];
	uint64_t secret[2];
	bool have_secret;
	unsigned int section_line; /* line of its [namespace] header; 0: a flag or the default */
	unsigned int line[KVMM_CFG_NS_KEY_COUNT]; /* where each key was set; 0: not in the file */
};

/* [remote]: the remote tier (Documentation/admin-guide/remote.md) */
#define KVMM_CONFIG_REMOTE_DEFAULT_TIMEOUT_MS 100
#define KVMM_CONFIG_REMOTE_SEAL 1u   /* remote_policy = seal: pages are written when sealed */
#define KVMM_CONFIG_REMOTE_DEMOTE 2u /* remote_policy = demote: when they leave the tiers */
struct kvmm_config_remote {
	char seeds[512];     /* remote = redis://HOST:PORT,...: "HOST:PORT,..."; "" = off */
	uint32_t ttl_s;	     /* remote_ttl = DURATION, 0 = no expiry */
	uint32_t timeout_ms; /* remote_timeout_ms = N (connect, each read/write) */
	uint8_t store;	     /* remote_policy: KVMM_CONFIG_REMOTE_SEAL | _DEMOTE bits, 0 = lookup */
	uint64_t max_value;  /* remote_max_value = SIZE: larger frames are never stored */
	uint64_t max_queue;  /* remote_queue = SIZE: stores waiting beyond it are dropped */
	uint32_t max_blocks; /* remote_max_blocks = N: blocks one lookup asks for */
	char user[64];	     /* remote_user = NAME (AUTH NAME PASSWORD) */
	char password[128];  /* remote_password = TEXT or remote_password_file = PATH */
	bool tls;	     /* remote_tls = yes, or rediss:// seeds */
	char tls_ca[256];    /* remote_tls_ca = PATH (PEM CAs; "" = the system's) */
	char tls_cert[256];  /* remote_tls_cert = PATH (client certificate) */
	char tls_key[256];   /* remote_tls_key = PATH (its key) */
	char tls_name[256];  /* remote_tls_server_name = NAME (what certificates must carry) */
	unsigned int section_line;
};

/* [swap]: tiers, readahead and fault points of every namespace pool (kvmmd.md "[swap]") */
#define KVMM_CONFIG_MAX_FAULTS 4
#define KVMM_CONFIG_FAULT_LEN 224
struct kvmm_config_swap {
	uint64_t host_size;	  /* swap_host = SIZE: host tier bytes per pool, 0 = none */
	char file[KVMM_PATH_LEN]; /* swap_file = PATH:SIZE[:PRIO]; "" = none */
	uint64_t file_size;
	int file_prio;	      /* default 5 (the host tier is 10) */
	uint32_t queue_depth; /* swap_queue_depth = N, 0 = default */
	uint32_t prefetch;    /* prefetch = N (readahead depth), default 2 */
	bool kswapd;	      /* kswapd = yes|no, default yes */
	bool reclaim_inline;  /* reclaim_inline = yes|no: drop-only reclaim in the loop, yes */
	bool warm_restart;    /* warm_restart = yes|no: swap_file keeps an index, default yes */
	char fault[KVMM_CONFIG_MAX_FAULTS][KVMM_CONFIG_FAULT_LEN]; /* fault = POINT:SPEC */
	unsigned int nr_fault;
	unsigned int section_line;
};

#define KVMM_CONFIG_MAX_DEVICES 16 /* = KVMM_CUDA_MAX_DEVICES */

struct kvmm_config {
	char file[KVMM_CONFIG_PATH_LEN * 2];	/* the file read, for messages ("" = none) */
	char socket_path[KVMM_CONFIG_PATH_LEN]; /* "" until finalize picks the default */
	char backend[16];
	/* backend cuda: CUDA device ordinals, one or a tensor-parallel group (default 0) */
	int devices[KVMM_CONFIG_MAX_DEVICES];
	unsigned int nr_devices;
	uint64_t page_size;
	uint64_t chunk_size; /* 0 = the backend's default */
	uint64_t pool_size;  /* bytes, 0 = unset */
	uint64_t frames;     /* 0 = unset (after finalize: frames of all namespaces' pools) */
	uint32_t wmark_min, wmark_low, wmark_high; /* frames, per namespace pool; 0,0,0 = auto */
	gid_t admin_gid;
	bool have_admin_gid;
	int log_level; /* enum kvmm_log_level */
	bool foreground;
	bool prefault;
	uint32_t max_clients;
	uint32_t max_clients_per_uid; /* 0 = no per-user cap */
	uint32_t socket_mode;	      /* permission bits of the socket file */
	gid_t socket_gid;	      /* its group, when have_socket_gid */
	bool have_socket_gid;
	uint32_t hello_timeout_ms;
	/* ring worker threads (kvmm/ipc/ring_worker.c); KVMM_CONFIG_RING_THREADS_AUTO: by CPUs */
	uint32_t ring_threads;
	int ring_nice;	    /* their nice value, -20..19 */
	bool ring_nice_set; /* ring_nice was given (file or flag), not the default */
	unsigned int trace; /* enum kvmm_config_trace */
	char metrics[64];   /* "IPV4:PORT" of the Prometheus /metrics listener, "" = off */
	struct kvmm_config_ns ns[KVMM_CONFIG_MAX_NS];
	unsigned int nr_ns;
	struct kvmm_config_swap swap;
	struct kvmm_config_remote remote;
	bool daemon_seen;		       /* a [daemon] section was read */
	unsigned int daemon_line;	       /* its header line */
	unsigned int line[KVMM_CFG_KEY_COUNT]; /* where each key was set; 0: not in the file */
};

/* Defaults for everything; no namespace yet. */
void kvmm_config_init(struct kvmm_config *cfg);
/* remote_policy's name for a store value: lookup, seal, demote, both */
const char *kvmm_config_remote_policy(unsigned int store);

/*
 * Read the file at @path into @cfg.  -ENOENT (with a message) when it does not exist, so that
 * the caller can accept a missing default file; -EINVAL for a bad line; -EFBIG past 1 MiB;
 * other -errno from reading.
 */
int kvmm_config_load(struct kvmm_config *cfg, const char *path, char *err, size_t errlen);

/* Parse configuration text; @name is the file name used in messages. */
int kvmm_config_parse(struct kvmm_config *cfg, const char *name, const char *text, char *err,
		      size_t errlen);

/*
 * Set one [daemon] key as a flag does: the file's value (if any) is replaced.  Key names are
 * those of the file; '-' and '_' are the same ("page-size").  -EINVAL (bad value) or -ENOENT
 * (unknown key).
 */
int kvmm_config_set(struct kvmm_config *cfg, const char *key, const char *value, char *err,
		    size_t errlen);

/*
 * --namespace NAME[:AMOUNT[:UID,...]]: add namespace NAME, or change the one the file
 * defined.  AMOUNT is frames (a plain number) or bytes (with a K/M/G/T suffix).  UIDs
 * (names or numbers) replace the namespace's uids when given.
 */
int kvmm_config_set_ns(struct kvmm_config *cfg, const char *spec, char *err, size_t errlen);

/*
 * Set one [remote] key (--remote KEY=VALUE does it for a flag): remote, remote_ttl,
 * remote_timeout_ms, remote_policy, remote_max_value, remote_queue, remote_max_blocks,
 * remote_user, remote_password, remote_password_file, remote_tls, remote_tls_ca,
 * remote_tls_cert, remote_tls_key, remote_tls_server_name.  -EINVAL or -ENOENT.
 */
int kvmm_config_set_remote(struct kvmm_config *cfg, const char *key, const char *value, char *err,
			   size_t errlen);

/*
 * Fill what is left: the socket path (kvmm_config_default_socket()), a namespace "default"
 * open to @owner and root when none was configured, frames for every namespace (sizes in
 * bytes become frames; namespaces without a size share what the others leave of the pool),
 * limits, and check what only makes sense as a whole (chunk and page sizes, watermarks against
 * the smallest namespace pool).  The message names the line of the setting at fault.
 */
int kvmm_config_finalize(struct kvmm_config *cfg, uid_t owner, char *err, size_t errlen);

/*
 * After finalize: whether the host memory a host-backend pool takes (every frame, plus the
 * host swap tier of each namespace pool) fits @ram_bytes, this machine's memory
 * (sysconf(_SC_PHYS_PAGES) * page size in kvmmd).  The memfd chunks are filled lazily, so a
 * pool larger than the machine would start and then die under the OOM killer at some later
 * allocation.  0, or -ENOMEM with a message naming the sizes.  The cuda backend's frames are
 * GPU memory: only its host swap tier counts.
 */
int kvmm_config_check_memory(const struct kvmm_config *cfg, uint64_t ram_bytes, char *err,
			     size_t errlen);

/*
 * The default socket path: $XDG_RUNTIME_DIR/kvmm/kvmmd.sock when XDG_RUNTIME_DIR is set
 * (absolute), else /run/kvmm/kvmmd.sock.  0 or -ENAMETOOLONG.
 */
int kvmm_config_default_socket(char *buf, size_t len);

/*
 * Size with an optional binary suffix: "4096", "64K", "2M", "1G", "1T" (any case, optionally
 * followed by "B" or "iB").  0 or -EINVAL (not a size, overflow).
 */
int kvmm_config_parse_size(const char *s, uint64_t *out);

/*
 * One [swap] key as the file gives it ("swap_host", "64M"), for kvmmd --swap KEY=VALUE.
 * Keys: swap_host, swap_file, swap_queue_depth, prefetch, kswapd, fault (may repeat).
 * -EINVAL (bad value) or -ENOENT (unknown key).
 */
int kvmm_config_set_swap(struct kvmm_config *cfg, const char *key, const char *value, char *err,
			 size_t errlen);

/* Write the effective configuration in the file's own syntax (kvmmd --print-config). */
void kvmm_config_print(const struct kvmm_config *cfg, FILE *f);

#endif /* KVMM_CONFIG_H */
