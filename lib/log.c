// SPDX-License-Identifier: MIT
/*
 * lib/log.c - the sink behind log.h. Each message is formatted into one stack buffer (header
 * and text together) and leaves with one write(2) on stderr, so lines from concurrent threads
 * and processes sharing the descriptor never interleave (a pipe guarantees that up to
 * PIPE_BUF bytes, which is KVMM_LOG_LINE_MAX). With syslog chosen, the text goes to
 * syslog(3), which adds its own time and pid. No locks on the way out: the identity and sink
 * are set by kvmm_log_init before threads start; only the level changes later, atomically.
 * The rate limits (kvmm_log_ratelimit) share one mutex, taken only for a message that is
 * enabled at its level.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

int kvmm_log_max_level = KVMM_LOG_DEFAULT_LEVEL;

#define IDENT_MAX 64
#define TRUNC_MARK "..."

/* openlog() keeps the pointer it is given, so the identity must outlive every message. */
static char log_ident[IDENT_MAX] = "kvmm";
static bool log_use_syslog;

static const char *const level_names[] = {
	[KVMM_LOG_ERR] = "err",	  [KVMM_LOG_WARN] = "warn",   [KVMM_LOG_NOTICE] = "notice",
	[KVMM_LOG_INFO] = "info", [KVMM_LOG_DEBUG] = "debug",
};

static bool level_valid(int level)
{
	return level >= KVMM_LOG_ERR && level <= KVMM_LOG_DEBUG;
}

const char *kvmm_log_level_name(enum kvmm_log_level level)
{
	return level_valid((int)level) ? level_names[level] : "?";
}

int kvmm_log_level_from_string(const char *s)
{
	static const struct {
		const char *name;
		enum kvmm_log_level level;
	} names[] = {
		{"err", KVMM_LOG_ERR},	    {"error", KVMM_LOG_ERR},	 {"warn", KVMM_LOG_WARN},
		{"warning", KVMM_LOG_WARN}, {"notice", KVMM_LOG_NOTICE}, {"info", KVMM_LOG_INFO},
		{"debug", KVMM_LOG_DEBUG},
	};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcasecmp(s, names[i].name))
			return (int)names[i].level;
	if (s[0] >= '0' + KVMM_LOG_ERR && s[0] <= '0' + KVMM_LOG_DEBUG && s[1] == '\0')
		return s[0] - '0';
	return -EINVAL;
}

int kvmm_log_set_level(enum kvmm_log_level level)
{
	if (!level_valid((int)level))
		return -EINVAL;
	__atomic_store_n(&kvmm_log_max_level, (int)level, __ATOMIC_RELAXED);
	return 0;
}

enum kvmm_log_level kvmm_log_get_level(void)
{
	return (enum kvmm_log_level)__atomic_load_n(&kvmm_log_max_level, __ATOMIC_RELAXED);
}

int kvmm_log_init(const char *ident, enum kvmm_log_level level, int use_syslog)
{
	if (!level_valid((int)level))
		return -EINVAL;
	if (log_use_syslog)
		closelog();
	snprintf(log_ident, sizeof(log_ident), "%s", ident ? ident : "kvmm");
	log_use_syslog = use_syslog != 0;
	if (log_use_syslog)
		openlog(log_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	return kvmm_log_set_level(level);
}

void kvmm_log_close(void)
{
	if (log_use_syslog)
		closelog();
	log_use_syslog = false;
	snprintf(log_ident, sizeof(log_ident), "%s", "kvmm");
	kvmm_log_set_level(KVMM_LOG_DEFAULT_LEVEL);
}

/* "2025-01-31T23:59:59.123Z " into buf; returns the length, 0 if the clock failed. */
static size_t format_timestamp(char *buf, size_t size)
{
	struct timespec ts;
	struct tm tm;
	size_t n;
	int m;

	if (clock_gettime(CLOCK_REALTIME, &ts) || !gmtime_r(&ts.tv_sec, &tm))
		return 0;
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!n)
		return 0;
	m = snprintf(buf + n, size - n, ".%03ldZ ", ts.tv_nsec / 1000000);
	if (m < 0 || (size_t)m >= size - n)
		return 0;
	return n + (size_t)m;
}

/* Write all of buf to fd, retrying on signals; one write(2) in every ordinary case. */
static void write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

void kvmm_log_vwrite(enum kvmm_log_level level, const char *fmt, va_list ap)
{
	char line[KVMM_LOG_LINE_MAX];
	int saved_errno = errno;
	size_t hdr = 0, len;
	int n;

	if (!level_valid((int)level))
		level = KVMM_LOG_ERR;

	if (!log_use_syslog) {
		hdr = format_timestamp(line, sizeof(line));
		n = snprintf(line + hdr, sizeof(line) - hdr, "%s[%ld]: %s: ", log_ident,
			     (long)getpid(), level_names[level]);
		if (n > 0)
			hdr += min_t(size_t, (size_t)n, sizeof(line) - hdr - 1);
	}

	/* Leave room for the newline; restore errno first so that %m names the caller's error. */
	errno = saved_errno;
	n = vsnprintf(line + hdr, sizeof(line) - hdr - 1, fmt, ap);
	if (n < 0)
		n = 0;
	len = hdr + (size_t)n;
	if (len > sizeof(line) - 2) {
		len = sizeof(line) - 2;
		memcpy(line + len - strlen(TRUNC_MARK), TRUNC_MARK, strlen(TRUNC_MARK));
	}
	while (len > hdr && line[len - 1] == '\n')
		len--;

	if (log_use_syslog) {
		line[len] = '\0';
		syslog((int)level, "%s", line);
	} else {
		line[len++] = '\n';
		write_all(STDERR_FILENO, line, len);
	}
	errno = saved_errno;
}

void kvmm_log_write(enum kvmm_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kvmm_log_vwrite(level, fmt, ap);
	va_end(ap);
}

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* never 0, which marks a window not begun */
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
}

bool kvmm_log_ratelimit(struct kvmm_log_ratelimit *rl, enum kvmm_log_level level, const char *site)
{
	uint64_t now = now_ms();
	uint32_t missed = 0;
	bool pass;

	pthread_mutex_lock(&rl_lock);
	if (!rl->begin_ms || now - rl->begin_ms >= KVMM_LOG_RL_INTERVAL_MS) {
		/* a new window: report what the last ones held back, then let this one through */
		missed = rl->missed;
		rl->missed = 0;
		rl->begin_ms = now;
		rl->passed = 0;
	}
	pass = rl->passed < KVMM_LOG_RL_BURST;
	if (pass)
		rl->passed++;
	else
		rl->missed++;
	pthread_mutex_unlock(&rl_lock);
	if (missed)
		kvmm_log_write(level,
			       "%s: %" PRIu32
			       " similar message%s suppressed (rate limit: %d per %d s)",
			       site ? site : "?", missed, missed == 1 ? "" : "s", KVMM_LOG_RL_BURST,
			       KVMM_LOG_RL_INTERVAL_MS / 1000);
	return pass;
}
