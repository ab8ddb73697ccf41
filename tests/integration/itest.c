// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest.c - the integration tests' harness: runs the real kvmmd in a
 * temporary directory (its stderr in a log file shown on failure), makes sure it never
 * outlives the test (PR_SET_PDEATHSIG in the daemon, an atexit handler in the test), stops it
 * with SIGTERM and reports its exit status, and speaks the raw protocol for the tests that
 * send malformed records or admin verbs (which libkvmm does not offer).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"

const struct kvmm_format itest_fmt = {
	.layers = 2,
	.kv_heads = 2,
	.head_dim = 64,
	.dtype = KVMM_DTYPE_FP16,
};

static struct itest_daemon *itest_running; /* the daemon atexit must not leave behind */

void itest_sleep_ms(unsigned int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool itest_daemon_find(struct itest_daemon *d)
{
	const char *env = getenv("KVMM_KVMMD");
	const char *path = env && env[0] ? env : "./kvmm/kvmmd";

	snprintf(d->bin, sizeof(d->bin), "%s", path);
	if (access(d->bin, X_OK) != 0) {
		fprintf(stderr, "SKIP: kvmmd not found at %s (build it first, or set KVMM_KVMMD)\n",
			d->bin);
		return false;
	}
	return true;
}

static void itest_cleanup_dir(struct itest_daemon *d)
{
	char path[256];

	if (!d->dir[0])
		return;
	unlink(d->sock);
	unlink(d->log);
	snprintf(path, sizeof(path), "%s/kvmmd.conf", d->dir);
	unlink(path);
	rmdir(d->dir);
	d->dir[0] = '\0';
}

static void itest_atexit(void)
{
	struct itest_daemon *d = itest_running;

	if (!d || d->owner != getpid() || !d->pid)
		return;
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
	itest_cleanup_dir(d);
}

void itest_daemon_dump_log(const struct itest_daemon *d)
{
	char buf[4096];
	ssize_t n;
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	fprintf(stderr, "---- kvmmd log (%s) ----\n", d->log);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	fprintf(stderr, "---- end of kvmmd log ----\n");
	close(fd);
}

bool itest_daemon_alive(struct itest_daemon *d)
{
	int status;

	if (!d->pid)
		return false;
	if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
		fprintf(stderr, "itest: kvmmd exited (status 0x%x)\n", status);
		d->pid = 0;
		return false;
	}
	return true;
}

int itest_daemon_start(struct itest_daemon *d, const char *const *extra)
{
	static bool atexit_done;
	char conf[256], frames[32], ns_a[64], ns_b[64], page[32];
	const char *argv[64];
	unsigned int argc = 0;
	int fd, err;

	if (!d->bin[0] && !itest_daemon_find(d))
		return -ENOENT;
	if (d->pid)
		return -EBUSY;
	/* a daemon halted by itest_daemon_halt() comes back in its directory, at its socket */
	if (!d->dir[0]) {
		snprintf(d->dir, sizeof(d->dir), "/tmp/kvmm-itest.XXXXXX");
		if (!mkdtemp(d->dir)) {
			d->dir[0] = '\0';
			return -errno;
		}
	}
	snprintf(d->sock, sizeof(d->sock), "%s/kvmmd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvmmd.log", d->dir);
	snprintf(conf, sizeof(conf), "%s/kvmmd.conf", d->dir);
	fd = open(conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	snprintf(page, sizeof(page), "%u", ITEST_PAGE_SIZE);
	snprintf(frames, sizeof(frames), "%u", ITEST_NS_FRAMES + ITEST_NS_B_FRAMES);
	snprintf(ns_a, sizeof(ns_a), "%s:%u", ITEST_NS_A, ITEST_NS_FRAMES);
	snprintf(ns_b, sizeof(ns_b), "%s:%u", ITEST_NS_B, ITEST_NS_B_FRAMES);

	argv[argc++] = d->bin;
	argv[argc++] = "--foreground";
	argv[argc++] = "--config";
	argv[argc++] = conf;
	argv[argc++] = "--socket";
	argv[argc++] = d->sock;
	argv[argc++] = "--page-size";
	argv[argc++] = page;
	argv[argc++] = "--frames";
	argv[argc++] = frames;
	argv[argc++] = "--namespace";
	argv[argc++] = ns_a;
	argv[argc++] = "--namespace";
	argv[argc++] = ns_b;
	/*
	 * Tests reach the socket as other users on purpose (to be refused by the daemon, not the
	 * file system); kvmmd's own default, 0660, is itest_lockout's.  A later flag wins.
	 */
	argv[argc++] = "--socket-mode";
	argv[argc++] = "0666";
	for (unsigned int i = 0; extra && extra[i] && argc < 63; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	d->owner = getpid();
	d->pid = fork();
	if (d->pid < 0) {
		err = -errno;
		d->pid = 0;
		return err;
	}
	if (d->pid == 0) {
		int logfd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		/* the daemon dies with the test, whatever way the test dies */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != d->owner)
			_exit(127);
		if (logfd >= 0) {
			dup2(logfd, STDOUT_FILENO);
			dup2(logfd, STDERR_FILENO);
		}
		execv(d->bin, (char *const *)argv);
		fprintf(stderr, "itest: exec %s: %s\n", d->bin, strerror(errno));
		_exit(127);
	}
	itest_running = d;
	if (!atexit_done) {
		atexit(itest_atexit);
		atexit_done = true;
	}
	/* ready when the socket accepts a connection (10 s, for slow sanitizer builds) */
	for (int i = 0; i < 1000; i++) {
		int s = itest_connect(d);

		if (s >= 0) {
			close(s);
			return 0;
		}
		if (!itest_daemon_alive(d))
			break;
		itest_sleep_ms(10);
	}
	fprintf(stderr, "itest: kvmmd did not come up on %s\n", d->sock);
	itest_daemon_dump_log(d);
	if (d->pid) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	itest_cleanup_dir(d);
	return -ETIMEDOUT;
}

int itest_daemon_halt(struct itest_daemon *d, bool crash)
{
	int status = 0;

	if (!d->pid)
		return -1;
	if (!crash) {
		char dir[sizeof(d->dir)];
		int ret;

		/* itest_daemon_stop, keeping the directory */
		memcpy(dir, d->dir, sizeof(dir));
		d->dir[0] = '\0';
		ret = itest_daemon_stop(d);
		memcpy(d->dir, dir, sizeof(dir));
		return ret;
	}
	kill(d->pid, SIGKILL);
	if (waitpid(d->pid, &status, 0) != d->pid)
		return -1;
	d->pid = 0;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : -1;
}

int itest_daemon_stop(struct itest_daemon *d)
{
	int status = 0, ret = -1;

	if (!d->pid) {
		itest_cleanup_dir(d);
		return -1;
	}
	kill(d->pid, SIGTERM);
	/* 20 s: a clean exit flushes, and sanitizers check for leaks on the way out */
	for (int i = 0; i < 2000; i++) {
		pid_t r = waitpid(d->pid, &status, WNOHANG);

		if (r == d->pid)
			break;
		if (i == 1999) {
			fprintf(stderr, "itest: kvmmd ignored SIGTERM; killing it\n");
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &status, 0);
			status = -1;
		}
		itest_sleep_ms(10);
	}
	d->pid = 0;
	if (status != -1 && WIFEXITED(status))
		ret = WEXITSTATUS(status);
	if (ret != 0) {
		fprintf(stderr, "itest: kvmmd stopped with status 0x%x\n", status);
		itest_daemon_dump_log(d);
	}
	itest_cleanup_dir(d);
	return ret;
}

/* ---- raw protocol -------------------------------------------------------------------- */

int itest_connect(const struct itest_daemon *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int itest_send(int fd, const void *buf, size_t len)
{
	if (send(fd, buf, len, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

ssize_t itest_recv(int fd, void *buf, size_t len, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	ssize_t n;
	int r;

	do {
		r = poll(&pfd, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	n = recv(fd, buf, len, 0);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	return n;
}

int itest_hello(int fd)
{
	struct {
		struct kvmm_msg_hdr hdr;
		struct kvmm_hello_req req;
	} msg = {0};
	unsigned char rep[KVMM_MSG_MAX];
	const struct kvmm_msg_hdr *rh = (const void *)rep;
	ssize_t n;
	int err;

	kvmm_msg_hdr_init(&msg.hdr, KVMM_OP_HELLO, sizeof(msg), 1);
	msg.req.abi_version = KVMM_ABI_VERSION;
	msg.req.abi_min = KVMM_ABI_MIN_COMPAT;
	msg.req.pid = (uint32_t)getpid();
	strcpy(msg.req.name, "itest");
	err = itest_send(fd, &msg, sizeof(msg));
	if (err)
		return err;
	n = itest_recv(fd, rep, sizeof(rep), 10000);
	if (n < 0)
		return (int)n;
	if (n < (ssize_t)sizeof(*rh))
		return -ECONNRESET;
	return rh->status;
}

int itest_admin_open(const struct itest_daemon *d, kvmm_admin_t **h)
{
	return kvmm_admin_open(d->sock, h);
}

int itest_admin_text(const struct itest_daemon *d, unsigned int op, char **text)
{
	kvmm_admin_t *h;
	int err;

	*text = NULL;
	err = kvmm_admin_open(d->sock, &h);
	if (err)
		return err;
	err = kvmm_admin_read(h, op, NULL, text);
	kvmm_admin_close(h);
	return err;
}

long long itest_text_value(const char *text, const char *name)
{
	int64_t v;

	return kvmm_admin_value(text, name, &v) ? -1 : v;
}

int64_t itest_vmstat(kvmm_admin_t *admin, const char *name)
{
	int64_t v = -1;
	char *text;

	assert_int_equal(kvmm_admin_read(admin, KVMM_OP_VMSTAT, NULL, &text), 0);
	assert_int_equal(kvmm_admin_value(text, name, &v), 0);
	free(text);
	return v;
}

uint8_t itest_byte_at(uint64_t tag, uint32_t block, uint32_t i)
{
	uint64_t z = tag * 0x9e3779b97f4a7c15ull ^ ((uint64_t)block << 32 | i);

	z ^= z >> 31;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 29;
	return (uint8_t)z;
}

void itest_tokens(uint32_t *tokens, size_t n, unsigned int p)
{
	for (size_t i = 0; i < n; i++)
		tokens[i] = (uint32_t)(p * 1000003u + i * 7919u + 17u) % 50000u;
}

struct itest_daemon itest_d;
bool itest_have_daemon, itest_no_daemon;

int itest_group_start(const char *const *extra)
{
	if (!itest_daemon_find(&itest_d)) {
		itest_no_daemon = true;
		return 0;
	}
	if (itest_daemon_start(&itest_d, extra))
		return -1;
	itest_have_daemon = true;
	return 0;
}

int itest_group_setup(void **state)
{
	(void)state;
	return itest_group_start(NULL);
}

int itest_group_teardown(void **state)
{
	(void)state;
	if (!itest_have_daemon)
		return 0;
	itest_have_daemon = false;
	return itest_daemon_stop(&itest_d) == 0 ? 0 : -1;
}

void itest_need_daemon(void)
{
	if (!itest_have_daemon)
		skip();
}

long long itest_admin_value(const struct itest_daemon *d, unsigned int op, const char *name)
{
	char *text = NULL;
	long long v;

	assert_int_equal(itest_admin_text(d, op, &text), 0);
	v = itest_text_value(text, name);
	free(text);
	return v;
}

int itest_swapdir_make(struct itest_swapdir *s, const char *name, unsigned int host_slots,
		       unsigned int file_slots)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/kvmm-%s.XXXXXX", name);
	if (!mkdtemp(s->dir)) {
		s->dir[0] = '\0';
		return -1;
	}
	snprintf(s->file, sizeof(s->file), "%s/swapfile", s->dir);
	snprintf(s->hostarg, sizeof(s->hostarg), "swap_host=%u", host_slots * ITEST_PAGE_SIZE);
	snprintf(s->filearg, sizeof(s->filearg), "swap_file=%s:%u", s->file,
		 file_slots * ITEST_PAGE_SIZE);
	return 0;
}

void itest_swapdir_remove(struct itest_swapdir *s)
{
	static const char *const ns[] = {ITEST_NS_A, ITEST_NS_B};
	char p[sizeof(s->file) + 16];

	if (!s->dir[0])
		return;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		snprintf(p, sizeof(p), "%s.%s", s->file, ns[i]);
		unlink(p);
		snprintf(p, sizeof(p), "%s.%s.index", s->file, ns[i]);
		unlink(p);
	}
	rmdir(s->dir);
	s->dir[0] = '\0';
}

/*
 * Run argv (NULL-terminated) with stdout+stderr captured into *out (malloc'd); as @uid when
 * not -1.  Returns the exit status, or -1 when it died of a signal.
 */
int itest_run(char **out, uid_t uid, const char *const *argv)
{
	int pfd[2], status;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	pid_t pid;

	assert_non_null(buf);
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		if (uid != (uid_t)-1 && (setgroups(0, NULL) || setgid(uid) || setuid(uid)))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		ssize_t n;

		if (cap - len < 1024) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		n = read(pfd[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- kvmmctl ----------------------------------------------------------------------------- */

const char *itest_ctl_bin(void)
{
	static char bin[4096];
	const char *env;

	if (!bin[0]) {
		env = getenv("KVMM_KVMMCTL");
		snprintf(bin, sizeof(bin), "%s", env && env[0] ? env : "./tools/kvmmctl");
	}
	return bin;
}

bool itest_have_ctl(const char *who)
{
	if (!access(itest_ctl_bin(), X_OK))
		return true;
	fprintf(stderr, "%s: %s not built\n", who, itest_ctl_bin());
	return false;
}

int itest_ctl(char **out, ...)
{
	const char *argv[32];
	int argc = 0;
	va_list ap;

	argv[argc++] = itest_ctl_bin();
	argv[argc++] = "--socket";
	argv[argc++] = itest_d.sock;
	va_start(ap, out);
	while (argc < 31 && (argv[argc] = va_arg(ap, const char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	return itest_run(out, (uid_t)-1, argv);
}

/* ---- a tiny JSON validator: one value, then only white space (or, lines: one per line) --- */

static const char *ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *jvalue(const char *p, int depth);

static const char *jstring(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p && *p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
						return NULL;
				p += 4;
			} else if (!strchr("\"\\/bfnrt", *p) || !*p) {
				return NULL;
			}
		}
		p++;
	}
	return *p == '"' ? p + 1 : NULL;
}

static const char *jvalue(const char *p, int depth)
{
	p = ws(p);
	if (depth > 32)
		return NULL;
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';
		bool obj = *p == '{';

		p = ws(p + 1);
		if (*p == close)
			return p + 1;
		for (;;) {
			if (obj) {
				p = jstring(ws(p));
				if (!p)
					return NULL;
				p = ws(p);
				if (*p++ != ':')
					return NULL;
			}
			p = jvalue(p, depth + 1);
			if (!p)
				return NULL;
			p = ws(p);
			if (*p == ',') {
				p++;
				continue;
			}
			return *p == close ? p + 1 : NULL;
		}
	}
	if (*p == '"')
		return jstring(p);
	if (!strncmp(p, "null", 4) || !strncmp(p, "true", 4))
		return p + 4;
	if (!strncmp(p, "false", 5))
		return p + 5;
	if (*p == '-' || (*p >= '0' && *p <= '9')) {
		char *end;

		strtod(p, &end);
		return end == p ? NULL : end;
	}
	return NULL;
}

bool itest_json_ok(const char *text)
{
	const char *p = jvalue(text, 0);

	return p && !*ws(p);
}

/* JSON Lines: every non-empty line one JSON value */
bool itest_json_lines_ok(const char *text)
{
	char *dup = strdup(text), *line, *save = NULL;
	bool ok = true;

	assert_non_null(dup);
	for (line = strtok_r(dup, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save))
		ok = itest_json_ok(line);
	free(dup);
	return ok;
}
