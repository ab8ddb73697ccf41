// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_python.c - runs the Python package's tests (runtime/python/tests,
 * pytest) under `make check`: Debian's /usr/bin/python3 with this build's libkvmm.so
 * ($KVMM_LIB) and kvmmd ($KVMM_KVMMD), each test module starting its own daemon. The tests'
 * conftest.py ends with cmocka's summary lines, so scripts/run-tests.sh counts every pytest
 * test. Exit 77 (skipped) without /usr/bin/python3 or pytest; tests that need torch skip
 * themselves when it is missing.
 *
 * Sanitizer builds (SAN=1): libkvmm.so is built with ASan, which must be the first library
 * of the process, so python runs with LD_PRELOAD of the compiler's libasan and libubsan
 * (their paths are compiled in, KVMM_LIBASAN / KVMM_LIBUBSAN, from gcc -print-file-name) and
 * leak detection off (CPython and torch keep memory until exit on purpose). A compiler that
 * names no libasan.so (clang links its runtime statically) skips.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"

#ifndef KVMM_LIBASAN
#define KVMM_LIBASAN ""
#endif
#ifndef KVMM_LIBUBSAN
#define KVMM_LIBUBSAN ""
#endif

/* Whether python can import pytest (0: yes). */
static int have_pytest(void)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execl(PYTHON, PYTHON, "-c", "import pytest", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ENOENT;
}

int main(void)
{
	const char *src = getenv("KVMM_SRCTREE");
	const char *san = getenv("KVMM_SANITIZE");
	char cwd[PATH_MAX], path[PATH_MAX + 64], tests[PATH_MAX + 64];

	if (access(PYTHON, X_OK) != 0 || have_pytest() != 0) {
		fprintf(stderr,
			"SKIP: %s with pytest is not installed (apt install "
			"python3-pytest python3-numpy python3-torch)\n",
			PYTHON);
		return 77;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		return 1;
	if (!src || !src[0])
		src = cwd;
	snprintf(path, sizeof(path), "%s/runtime/libkvmm.so", cwd);
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "SKIP: %s not built\n", path);
		return 77;
	}
	setenv("KVMM_LIB", path, 1);
	if (!getenv("KVMM_KVMMD")) {
		snprintf(path, sizeof(path), "%s/kvmm/kvmmd", cwd);
		setenv("KVMM_KVMMD", path, 1);
	}
	setenv("KVMM_CMOCKA_SUMMARY", "1", 1);
	setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
	if (san && strcmp(san, "y") == 0) {
		if (!KVMM_LIBASAN[0]) {
			fprintf(stderr,
				"SKIP: sanitizer build without a libasan path to preload\n");
			return 77;
		}
		snprintf(path, sizeof(path), "%s%s%s", KVMM_LIBASAN, KVMM_LIBUBSAN[0] ? " " : "",
			 KVMM_LIBUBSAN);
		setenv("LD_PRELOAD", path, 1);
		setenv("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1:abort_on_error=0", 1);
	}
	snprintf(tests, sizeof(tests), "%s/runtime/python/tests", src);
	fflush(stdout);
	execl(PYTHON, PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
	      "console_output_style=classic", tests, (char *)NULL);
	fprintf(stderr, "itest_python: exec %s: %s\n", PYTHON, strerror(errno));
	return 1;
}
