/* SPDX-License-Identifier: MIT */
/*
 * log.h - leveled logging for the daemon, the runtime library and the tools. A message at or
 * above the current level (err is highest priority, debug lowest) is formatted once and
 * written with a single write(2) to stderr as "<UTC timestamp> <ident>[<pid>]: <level>:
 * <message>", or handed to syslog(3) when syslog was chosen at kvmm_log_init. The level
 * test is an inline compare against one global before any argument is evaluated, so
 * disabled kvmm_debug() calls cost a load and a branch. Implementation in lib/log.c.
 */
#ifndef KVMM_LOG_H
#define KVMM_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"

/* Values equal the syslog(3) priorities LOG_ERR..LOG_DEBUG; smaller is more severe. */
enum kvmm_log_level {
	KVMM_LOG_ERR = 3,
	KVMM_LOG_WARN = 4,
	KVMM_LOG_NOTICE = 5,
	KVMM_LOG_INFO = 6,
	KVMM_LOG_DEBUG = 7,
};

/* Default level before kvmm_log_init (and after kvmm_log_close). */
#define KVMM_LOG_DEFAULT_LEVEL KVMM_LOG_NOTICE

/* Longest line written, including the header; longer messages end in "...". */
#define KVMM_LOG_LINE_MAX 4096

/* The current level; read it through kvmm_log_enabled(), set it with kvmm_log_set_level(). */
extern int kvmm_log_max_level;

/*
 * Set the identity shown in every line (copied; NULL keeps "kvmm"), the level, and the sink:
 * use_syslog != 0 sends messages to syslog(3) (facility LOG_DAEMON, with the pid) instead of
 * stderr. Call before starting threads. Returns 0, or -EINVAL for a bad level (nothing is
 * changed then).
 */
int kvmm_log_init(const char *ident, enum kvmm_log_level level, int use_syslog);

/* Close syslog if open and return to stderr, identity "kvmm" and the default level. */
void kvmm_log_close(void);

/* Change the level at any time, from any thread. Returns 0 or -EINVAL. */
int kvmm_log_set_level(enum kvmm_log_level level);
enum kvmm_log_level kvmm_log_get_level(void);

/*
 * Parse a level name: "err"/"error", "warn"/"warning", "notice", "info", "debug" (any case),
 * or the syslog number "3".."7". Returns the level, or -EINVAL.
 */
int kvmm_log_level_from_string(const char *s);

/* "err", "warn", "notice", "info", "debug"; "?" for anything else. */
const char *kvmm_log_level_name(enum kvmm_log_level level);

/*
 * Format and emit one message regardless of the current level (the macros below filter
 * first). A trailing newline in fmt is optional. errno is preserved, so "%m" works and
 * logging between a failing call and "return -errno" is safe. Not async-signal-safe.
 */
void kvmm_log_write(enum kvmm_log_level level, const char *fmt, ...) __printf(2, 3);
void kvmm_log_vwrite(enum kvmm_log_level level, const char *fmt, va_list ap) __printf(2, 0);

static inline bool kvmm_log_enabled(enum kvmm_log_level level)
{
	return (int)level <= __atomic_load_n(&kvmm_log_max_level, __ATOMIC_RELAXED);
}

/* Arguments are evaluated only when the message is emitted. */
#define kvmm_log(level, fmt, ...)                                  \
	do {                                                       \
		if (kvmm_log_enabled(level))                       \
			kvmm_log_write(level, fmt, ##__VA_ARGS__); \
	} while (0)

#define kvmm_err(fmt, ...) kvmm_log(KVMM_LOG_ERR, fmt, ##__VA_ARGS__)
#define kvmm_warn(fmt, ...) kvmm_log(KVMM_LOG_WARN, fmt, ##__VA_ARGS__)
#define kvmm_notice(fmt, ...) kvmm_log(KVMM_LOG_NOTICE, fmt, ##__VA_ARGS__)
#define kvmm_info(fmt, ...) kvmm_log(KVMM_LOG_INFO, fmt, ##__VA_ARGS__)
#define kvmm_debug(fmt, ...) kvmm_log(KVMM_LOG_DEBUG, fmt, ##__VA_ARGS__)

/*
 * Rate limiting for messages a client or a storm can repeat without end (an OOM preemption per
 * sequence, a failed swap write per page, a misbehaving client per message): each call site
 * gets its own window.  At most KVMM_LOG_RL_BURST messages of one site pass per
 * KVMM_LOG_RL_INTERVAL_MS; the rest are counted, and the first message that passes once the
 * window is over is preceded by one line saying how many were suppressed, and where (the site's
 * function).  A flood that stops is reported at the site's next message, as the kernel's
 * printk_ratelimit() does.  Thread-safe (one lock, taken only on the way to emitting).
 */
#define KVMM_LOG_RL_INTERVAL_MS 5000
#define KVMM_LOG_RL_BURST 10

struct kvmm_log_ratelimit {
	uint64_t begin_ms; /* start of the current window (CLOCK_MONOTONIC), 0: none yet */
	uint32_t passed;   /* messages let through in this window */
	uint32_t missed;   /* messages suppressed since the last report */
};

/*
 * Whether a message of the site @rl may be emitted now (a report of what was suppressed is
 * written first when one is due, at @level, naming @site).  Counts the message otherwise.
 */
bool kvmm_log_ratelimit(struct kvmm_log_ratelimit *rl, enum kvmm_log_level level, const char *site);

/* kvmm_log() through its call site's rate limit; arguments evaluated only when emitted. */
#define kvmm_log_ratelimited(level, fmt, ...)                                                  \
	do {                                                                                   \
		static struct kvmm_log_ratelimit kvmm_rl_;                                     \
		if (kvmm_log_enabled(level) && kvmm_log_ratelimit(&kvmm_rl_, level, __func__)) \
			kvmm_log_write(level, fmt, ##__VA_ARGS__);                             \
	} while (0)

#define kvmm_err_ratelimited(fmt, ...) kvmm_log_ratelimited(KVMM_LOG_ERR, fmt, ##__VA_ARGS__)
#define kvmm_warn_ratelimited(fmt, ...) kvmm_log_ratelimited(KVMM_LOG_WARN, fmt, ##__VA_ARGS__)
#define kvmm_notice_ratelimited(fmt, ...) kvmm_log_ratelimited(KVMM_LOG_NOTICE, fmt, ##__VA_ARGS__)

#endif /* KVMM_LOG_H */
