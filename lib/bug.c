// SPDX-License-Identifier: MIT
/*
 * lib/bug.c - the cold side of KVMM_BUG_ON and KVMM_WARN_ON (compiler.h): report where the
 * broken invariant was detected, through the log so it also reaches syslog in the daemon,
 * and for a BUG add a raw backtrace on stderr and abort(), leaving a core dump. Kept out of
 * line so a check costs its caller only a compare and a never-taken call.
 */
#include <execinfo.h>
#include <stdlib.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"

#define BUG_BACKTRACE_DEPTH 32

void kvmm_bug(const char *file, int line, const char *func, const char *expr)
{
	void *frames[BUG_BACKTRACE_DEPTH];
	int n;

	kvmm_log_write(KVMM_LOG_ERR, "BUG: %s at %s:%d (%s)", expr ? expr : "KVMM_BUG()", file,
		       line, func);
	n = backtrace(frames, (int)ARRAY_SIZE(frames));
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	abort();
}

void kvmm_warn_report(const char *file, int line, const char *func, const char *expr)
{
	kvmm_warn("WARNING: %s at %s:%d (%s)", expr, file, line, func);
}
