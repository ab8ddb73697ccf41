/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmmctl.h - what the files of kvmmctl share: the options, the exit codes, the
 * daemon calls (kvmmctl.c, over libkvmm's admin calls) and the tagged-text helpers that top
 * (ctl_top.c) uses too.
 */
#ifndef KVMM_TOOLS_KVMMCTL_H
#define KVMM_TOOLS_KVMMCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/kvmm.h"

/* exit codes (documented in kvmmctl(8)) */
enum {
	CTL_EXIT_OK = 0,
	CTL_EXIT_DAEMON = 1,   /* the daemon answered an error (or a local failure) */
	CTL_EXIT_USAGE = 2,    /* bad arguments */
	CTL_EXIT_NODAEMON = 3, /* no daemon at the socket (missing, refused, no answer) */
	CTL_EXIT_PERM = 4,     /* -EACCES / -EPERM */
};

struct ctl_opts {
	const char *socket;
	const char *ns;
	uint64_t client;
	uint64_t count;
	uint32_t events;  /* trace: event mask, 0 = all */
	int timeout_ms;	  /* --timeout: the daemon deadline; trace: stop when idle that long */
	bool timeout_set; /* --timeout given (else the deadline is $KVMM_DAEMON_TIMEOUT_MS) */
	bool json, raw, dump, clear, frames, noswap, force;
	/* ns create / set: --max V, --min V, --low V, --priority P as "key=V" settings */
	char ns_kv[8][48];
	unsigned int nr_ns_kv;
};

extern struct ctl_opts ctl;

void __attribute__((noreturn, format(printf, 2, 3))) ctl_die(int code, const char *fmt, ...);
void __attribute__((noreturn)) ctl_die_status(const char *verb, int status);
/* The daemon deadline --timeout asks for, as kvmm_admin_open_timeout() takes it. */
int ctl_daemon_timeout(void);
/* Connect and HELLO; exits with the right code when that fails.  The admin handle. */
kvmm_admin_t *ctl_connect(void);
/* A read verb's whole answer (malloc'd, NUL-terminated) in *text.  0 or the status. */
int ctl_read(kvmm_admin_t *h, unsigned int op, uint32_t flags, uint64_t id, uint32_t arg,
	     char **text);

long long ctl_tag(const char *text, const char *tag);
const char *ctl_kv(const char *line, const char *key, char *buf, size_t len);
unsigned long long ctl_kvu(const char *line, const char *key);
const char *ctl_first(const char *line, char *buf, size_t len);
const char *ctl_next(const char *text, const char *label, const char *prev);
const char *ctl_size(uint64_t frames, uint64_t page_size, char *buf, size_t len);

/* The socket kvmmctl connects to (--socket, $KVMM_SOCKET, kvmmd's default). */
const char *ctl_socket_path(void);

/* kvmmctl top (ctl_top.c): *h is replaced (or NULL) when it connects to a new daemon. */
void ctl_top(kvmm_admin_t **h);

#endif /* KVMM_TOOLS_KVMMCTL_H */
