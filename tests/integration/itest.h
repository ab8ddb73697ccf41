/* SPDX-License-Identifier: MIT */
/*
 * tests/integration/itest.h - what every integration test shares: starting the real kvmmd in
 * a temporary directory and stopping it (SIGTERM, exit status 0 expected), raw protocol
 * access for the tests that must send what libkvmm never would (itest_proto), and shorthands
 * over libkvmm's admin calls (runtime/kvmm_admin.h) for the daemon's counters. Tests run
 * from the top of the object tree (./tests/integration/itest_x) and find the daemon at
 * ./kvmm/kvmmd, or wherever $KVMM_KVMMD says. When it is not built they skip (exit 77).
 */
#ifndef KVMM_TESTS_ITEST_H
#define KVMM_TESTS_ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/kvmm.h"

struct itest_daemon {
	pid_t pid;    /* 0 when not running */
	pid_t owner;  /* the process that started it (forked clients must not stop it) */
	char dir[64]; /* the temporary directory */
	char sock[100];
	char log[100]; /* the daemon's stderr */
	char bin[4096];
};

/* The namespaces and sizes the tests' daemon is started with. */
#define ITEST_NS_A "alpha"
#define ITEST_NS_B "beta"
#define ITEST_PAGE_SIZE 16384
#define ITEST_NS_FRAMES 256
#define ITEST_NS_B_FRAMES 4096 /* room for a prompt longer than one record */

/* The model format every test attaches with: 1024 bytes per token, 16 tokens per page. */
extern const struct kvmm_format itest_fmt;

/* Path of kvmmd in d->bin; false (and a message) when there is none to run. */
bool itest_daemon_find(struct itest_daemon *d);
/*
 * Start kvmmd --foreground in a new temporary directory with the two test namespaces, plus
 * extra (NULL-terminated, may be NULL) arguments, and wait until its socket answers. Also
 * arranges for it to die with the test (PDEATHSIG, atexit). 0 or -errno (the log is shown).
 */
int itest_daemon_start(struct itest_daemon *d, const char *const *extra);
/* SIGTERM it and wait; returns its exit status (0..255), or -1 if it died of a signal or hung. */
int itest_daemon_stop(struct itest_daemon *d);
/*
 * Make it go away and keep its directory, so that itest_daemon_start() brings it back at the
 * same socket (and log): crash, kill -9; else SIGTERM as itest_daemon_stop(). 0 (killed, or
 * stopped with status 0) or -1.
 */
int itest_daemon_halt(struct itest_daemon *d, bool crash);
/* Whether it is still running (reaps it if not). */
bool itest_daemon_alive(struct itest_daemon *d);
/* Print the daemon's log to stderr (after a failure). */
void itest_daemon_dump_log(const struct itest_daemon *d);

/* ---- raw protocol -------------------------------------------------------------------- */

/* A connected SOCK_SEQPACKET socket to the daemon, or -errno. */
int itest_connect(const struct itest_daemon *d);
/* Send len bytes as one record. 0 or -errno. */
int itest_send(int fd, const void *buf, size_t len);
/*
 * Receive one record (waits up to timeout_ms): its length, 0 when the daemon closed the
 * connection, -ETIMEDOUT, or -errno.
 */
ssize_t itest_recv(int fd, void *buf, size_t len, int timeout_ms);
/* HELLO with this header's version on fd; 0 or the reply's status. */
int itest_hello(int fd);
/* ---- admin verbs, through libkvmm ----------------------------------------------------- */

/* kvmm_admin_open() on the daemon's socket. */
int itest_admin_open(const struct itest_daemon *d, kvmm_admin_t **h);
/*
 * An admin read verb (op) on a new admin handle: the text of the answer (kvmm_admin_read()),
 * malloc'd and NUL-terminated in *text. 0 or -errno / the daemon's status.
 */
int itest_admin_text(const struct itest_daemon *d, unsigned int op, char **text);
/* The value of "Name:  value" in admin text (kvmm_admin_value()), or -1 if absent. */
long long itest_text_value(const char *text, const char *name);

/*
 * The value of "Name: value" in the answer to admin read verb op (KVMM_OP_VMSTAT,
 * KVMM_OP_STATUS, ...), or -1 if absent; fails the test when the verb fails.
 */
long long itest_admin_value(const struct itest_daemon *d, unsigned int op, const char *name);

/* Sleep ms milliseconds (signals do not cut it short). */
void itest_sleep_ms(unsigned int ms);

/*
 * A temporary directory for a daemon's swap tiers, and the --swap arguments for host_slots
 * host-memory slots and file_slots slots of a swap file in it (per namespace pool; the daemon
 * makes one file per namespace, <file>.<ns>).  itest_swapdir_make() returns 0 or -1;
 * itest_swapdir_remove() deletes the files of the test namespaces and the directory.
 */
struct itest_swapdir {
	char dir[64];
	char file[128];
	char hostarg[64];
	char filearg[192];
};
int itest_swapdir_make(struct itest_swapdir *s, const char *name, unsigned int host_slots,
		       unsigned int file_slots);
void itest_swapdir_remove(struct itest_swapdir *s);

/* The value of vmstat counter @name (the first namespace's), read through @admin. */
int64_t itest_vmstat(kvmm_admin_t *admin, const char *name);

/* A deterministic byte of a test page: byte i of block @block of the pages tagged @tag. */
uint8_t itest_byte_at(uint64_t tag, uint32_t block, uint32_t i);

/* Deterministic token ids for prompt number p (tokens[i] depends on p and i). */
void itest_tokens(uint32_t *tokens, size_t n, unsigned int p);

/*
 * The daemon of a test program's group, for cmocka_run_group_tests_name(): the setup starts
 * it (or notes that kvmmd is not built: itest_no_daemon), the teardown stops it and fails
 * unless it exits 0.  Tests call itest_need_daemon() first: cmocka 1.1 counts a skip() in a
 * setup function as an error.  A program whose tests all skipped returns 77.
 */
extern struct itest_daemon itest_d;
extern bool itest_have_daemon, itest_no_daemon;
int itest_group_setup(void **state);
/* The same with extra daemon arguments (itest_daemon_start()), for a setup of its own. */
int itest_group_start(const char *const *extra);
int itest_group_teardown(void **state);
void itest_need_daemon(void);

/*
 * Run argv (NULL-terminated) with stdout+stderr captured into *out (malloc'd; NULL: dropped);
 * as @uid when not -1.  Returns the exit status, or -1 when it died of a signal.
 */
int itest_run(char **out, uid_t uid, const char *const *argv);

/* kvmmctl: $KVMM_KVMMCTL, else ./tools/kvmmctl. */
const char *itest_ctl_bin(void);
/* Is it built (executable)?  If not, says so on stderr for test program @who. */
bool itest_have_ctl(const char *who);
/* Run kvmmctl --socket <itest_d.sock> ARGS... (NULL-terminated): itest_run()'s result. */
int itest_ctl(char **out, ...);
/* Is @text one JSON value and nothing else (a syntax check)?  Lines: one value per line. */
bool itest_json_ok(const char *text);
bool itest_json_lines_ok(const char *text);

#endif /* KVMM_TESTS_ITEST_H */
