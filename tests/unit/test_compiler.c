// SPDX-License-Identifier: MIT
/*
 * test_compiler.c - unit tests for include/compiler.h: single evaluation and typing of
 * min/max/clamp, ARRAY_SIZE and container_of, alignment and power-of-two arithmetic at the
 * edges of uint64_t, the overflow checks, READ_ONCE/WRITE_ONCE, and the assertions:
 * KVMM_WARN_ON reports and returns its condition, KVMM_BUG_ON aborts a forked child with a
 * file:line report. The build-failure cases (ARRAY_SIZE of a pointer, container_of of the
 * wrong type, min of mixed types, an ignored overflow check) cannot be unit tests; they are
 * listed in Documentation/core-api/primitives.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "log.h"

/* File-scope compile-time checks must build. */
BUILD_BUG_ON(sizeof(uint64_t) != 8);
BUILD_BUG_ON_MSG(KVMM_CACHELINE_SIZE < 64, "cache line");

static int evals;

static int next(int v)
{
	evals++;
	return v;
}

static void test_min_max_clamp(void **state)
{
	unsigned long ul = 7;
	int64_t big = INT64_C(1) << 40;
	int i = 5;

	(void)state;
	evals = 0;
	assert_int_equal(min(next(3), next(9)), 3);
	assert_int_equal(max(next(3), next(9)), 9);
	assert_int_equal(evals, 4); /* each argument exactly once */
	assert_int_equal(min(i++, 100), 5);
	assert_int_equal(i, 6);
	assert_int_equal(max(-1, -2), -1);
	assert_int_equal(min(min(4, 2), min(3, 8)), 2); /* nesting does not shadow */
	assert_int_equal(max(max(1, max(2, 3)), 0), 3);
	assert_true(min(big, INT64_C(5)) == 5);
	assert_true(max(big, INT64_C(5)) == big);
	assert_int_equal(min(ul, 3UL), 3);

	/* min_t converts first: a negative int against an unsigned size */
	assert_int_equal(min_t(long, -1, ul), -1);
	assert_int_equal(max_t(unsigned int, 1, 2u), 2);
	assert_int_equal(min_t(uint8_t, i + 294, 50), 44); /* 300 -> 44 in uint8_t */

	evals = 0;
	assert_int_equal(clamp(next(15), 0, 10), 10);
	assert_int_equal(clamp(next(-3), 0, 10), 0);
	assert_int_equal(clamp(next(4), 0, 10), 4);
	assert_int_equal(evals, 3);
	assert_int_equal(clamp_t(int, 200u, 0, 100), 100);
	{
		int a = 1, b = 2;
		const char *p = "p", *q = "q";

		swap(a, b);
		assert_int_equal(a, 2);
		assert_int_equal(b, 1);
		swap(p, q);
		assert_string_equal(p, "q");
	}
}

struct outer {
	char c;
	int arr[7];
	struct inner {
		long x;
		short y;
	} in;
	uint64_t tail;
};

static void test_array_size_container_of(void **state)
{
	struct outer o;
	int local[13];
	const char *names[] = {"a", "b", "c"};
	struct inner *ip = &o.in;
	uint64_t *tp = &o.tail;
	void *vp = &o.arr;

	(void)state;
	assert_int_equal(ARRAY_SIZE(local), 13);
	assert_int_equal(ARRAY_SIZE(names), 3);
	assert_int_equal(ARRAY_SIZE(o.arr), 7);
	assert_ptr_equal(container_of(ip, struct outer, in), &o);
	assert_ptr_equal(container_of(tp, struct outer, tail), &o);
	assert_ptr_equal(container_of(vp, struct outer, arr), &o); /* void * is accepted */
	assert_ptr_equal(container_of(&o.in.y, struct inner, y), &o.in);
	assert_int_equal(sizeof_field(struct outer, arr), 7 * sizeof(int));
	assert_int_equal(offsetofend(struct outer, tail), sizeof(struct outer));
	assert_int_equal(__same_type(o.tail, uint64_t), 1);
	assert_int_equal(__same_type(o.tail, int), 0);
}

static void test_align(void **state)
{
	uint64_t huge = UINT64_C(0xFFFFFFFFFFFFF001);
	char buf[64];
	char *p;

	(void)state;
	assert_int_equal(ALIGN(0, 8), 0);
	assert_int_equal(ALIGN(1, 8), 8);
	assert_int_equal(ALIGN(8, 8), 8);
	assert_int_equal(ALIGN(9, 8), 16);
	assert_true(ALIGN(UINT64_C(0x100000001), 1 << 21) == UINT64_C(0x100200000));
	/* the mask has x's width: the high bits of a 64-bit value survive a small int align */
	assert_true(ALIGN_DOWN(huge, 4096) == UINT64_C(0xFFFFFFFFFFFFF000));
	assert_true(ALIGN_DOWN(UINT64_C(0x123456789), 16) == UINT64_C(0x123456780));
	assert_int_equal(ALIGN_DOWN(4095, 4096), 0);
	assert_true(IS_ALIGNED(UINT64_C(0x40000000), 1 << 30));
	assert_false(IS_ALIGNED(UINT64_C(0x40000001), 2));
	assert_true(IS_ALIGNED(0, 64));
	p = PTR_ALIGN(buf + 1, 16);
	assert_true(PTR_IS_ALIGNED(p, 16));
	assert_true(p > buf && p <= buf + 16);

	assert_true(IS_POWER_OF_2(1));
	assert_true(IS_POWER_OF_2(UINT64_C(1) << 63));
	assert_false(IS_POWER_OF_2(0));
	assert_false(IS_POWER_OF_2(6));
	assert_int_equal(DIV_ROUND_UP(0, 4), 0);
	assert_int_equal(DIV_ROUND_UP(1, 4), 1);
	assert_int_equal(DIV_ROUND_UP(8, 4), 2);
	assert_int_equal(DIV_ROUND_UP(9, 4), 3);
	assert_true(DIV_ROUND_UP(UINT64_MAX, 2) == (UINT64_C(1) << 63)); /* no overflow */
	{
		/* usable in constant expressions */
		char arr[DIV_ROUND_UP(10, 3)];

		assert_int_equal(sizeof(arr), 4);
	}
}

static void test_bit_helpers(void **state)
{
	(void)state;
	assert_int_equal(fls64(0), 0);
	assert_int_equal(fls64(1), 1);
	assert_int_equal(fls64(0x80), 8);
	assert_int_equal(fls64(UINT64_MAX), 64);
	assert_int_equal(ffs64(0), 0);
	assert_int_equal(ffs64(1), 1);
	assert_int_equal(ffs64(0x80), 8);
	assert_int_equal(ffs64(UINT64_C(1) << 63), 64);
	assert_int_equal(ffs64(UINT64_MAX), 1);
	assert_int_equal(ilog2(0), -1);
	assert_int_equal(ilog2(1), 0);
	assert_int_equal(ilog2(UINT64_MAX), 63);
	assert_true(roundup_pow_of_two(0) == 1);
	assert_true(roundup_pow_of_two(UINT64_C(1) << 63) == UINT64_C(1) << 63);
	assert_true(roundup_pow_of_two((UINT64_C(1) << 63) + 1) == 0);
	assert_true(rounddown_pow_of_two(0) == 0);
	assert_true(rounddown_pow_of_two(UINT64_MAX) == UINT64_C(1) << 63);
	assert_int_equal(order_base_2(0), 0);
	assert_int_equal(order_base_2(1), 0);
	assert_int_equal(order_base_2(2), 1);
	assert_int_equal(order_base_2(3), 2);

	/* around every power of two, against the definition */
	for (unsigned int k = 0; k < 64; k++) {
		uint64_t p = UINT64_C(1) << k;

		assert_int_equal(fls64(p), k + 1);
		assert_int_equal(ffs64(p), k + 1);
		assert_int_equal(ilog2(p), (int)k);
		assert_true(roundup_pow_of_two(p) == p);
		assert_true(rounddown_pow_of_two(p) == p);
		assert_int_equal(order_base_2(p), k);
		if (k >= 2) {
			assert_int_equal(ilog2(p - 1), (int)k - 1);
			assert_int_equal(ilog2(p + 1), (int)k);
			assert_true(roundup_pow_of_two(p - 1) == p);
			assert_true(rounddown_pow_of_two(p + 1) == p);
			assert_int_equal(order_base_2(p + 1), k + 1);
			assert_int_equal(order_base_2(p - 1), k);
			assert_int_equal(fls64(p | 1), k + 1);
			assert_int_equal(ffs64(p | 2), 2);
		}
	}
}

static void test_overflow(void **state)
{
	uint64_t u64;
	uint32_t u32;
	int64_t s64;
	uint8_t u8;
	size_t sz;

	(void)state;
	assert_false(check_add_overflow(UINT64_MAX - 1, 1, &u64));
	assert_true(u64 == UINT64_MAX);
	assert_true(check_add_overflow(UINT64_MAX, 1, &u64));
	assert_true(u64 == 0); /* the wrapped value */
	assert_false(check_add_overflow(200, 55, &u8));
	assert_true(check_add_overflow(200, 56, &u8)); /* the destination type decides */
	assert_true(check_sub_overflow(0u, 1u, &u32));
	assert_false(check_sub_overflow(0, 1, &s64));
	assert_true(s64 == -1);
	assert_true(check_sub_overflow(INT64_MIN, 1, &s64));
	assert_false(check_mul_overflow(UINT32_MAX, 1u, &u32));
	assert_true(check_mul_overflow(UINT32_C(65536), UINT32_C(65536), &u32));
	assert_false(check_mul_overflow(UINT64_C(65536), UINT64_C(65536), &u64));
	assert_true(u64 == UINT64_C(1) << 32);
	assert_true(check_mul_overflow(UINT64_C(1) << 32, UINT64_C(1) << 32, &u64));
	assert_true(check_add_overflow(-1, 0, &u64)); /* negative into unsigned */
	assert_false(check_mul_overflow(SIZE_MAX / 2, (size_t)2, &sz));

	assert_int_equal(array_size(10, 24), 240);
	assert_true(array_size(SIZE_MAX / 2 + 1, 2) == SIZE_MAX);
	assert_true(array_size(SIZE_MAX, SIZE_MAX) == SIZE_MAX);
	assert_int_equal(array_size(0, SIZE_MAX), 0);
}

static void test_once_and_hints(void **state)
{
	const int cval = 11;
	int ival = 0;
	bool flag = false;
	int *ptr = NULL;
	uint64_t wide = 0;

	(void)state;
	WRITE_ONCE(ival, 42);
	assert_int_equal(READ_ONCE(ival), 42);
	assert_int_equal(READ_ONCE(cval), 11);
	WRITE_ONCE(flag, true);
	assert_true(READ_ONCE(flag));
	WRITE_ONCE(ptr, &ival);
	assert_ptr_equal(READ_ONCE(ptr), &ival);
	WRITE_ONCE(wide, UINT64_MAX);
	assert_true(READ_ONCE(wide) == UINT64_MAX);

	assert_int_equal(likely(5), 1);
	assert_int_equal(unlikely(0), 0);
	assert_int_equal(unlikely(-3), 1);
	assert_string_equal(__stringify(KVMM_CACHELINE_SIZE), "64");
	barrier();
}

/* ------------------------------------------------------------------------------------ */
/* KVMM_WARN_ON / KVMM_BUG_ON */

static int saved_stderr = -1;
static int capture_fd = -1;

static void capture_start(void)
{
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(saved_stderr >= 0);
	capture_fd = memfd_create("kvmm-warn-capture", 0);
	assert_true(capture_fd >= 0);
	assert_true(dup2(capture_fd, STDERR_FILENO) == STDERR_FILENO);
}

static void capture_restore(void)
{
	if (saved_stderr >= 0) {
		dup2(saved_stderr, STDERR_FILENO);
		close(saved_stderr);
		saved_stderr = -1;
	}
}

static char *capture_end(void)
{
	off_t size;
	char *buf;

	capture_restore();
	size = lseek(capture_fd, 0, SEEK_END);
	assert_true(size >= 0);
	buf = calloc(1, (size_t)size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(capture_fd, buf, (size_t)size, 0), size);
	close(capture_fd);
	capture_fd = -1;
	return buf;
}

static int teardown(void **state)
{
	(void)state;
	capture_restore();
	if (capture_fd >= 0) {
		close(capture_fd);
		capture_fd = -1;
	}
	kvmm_log_close();
	return 0;
}

static int warn_once_site(int v)
{
	return KVMM_WARN_ON_ONCE(v > 2);
}

static void test_warn_on(void **state)
{
	char *out, *hit;
	int hits = 0;

	(void)state;
	capture_start();
	evals = 0;
	assert_false(KVMM_WARN_ON(next(0) != 0));
	assert_true(KVMM_WARN_ON(next(3) > 2));
	assert_int_equal(evals, 2);
	for (int v = 0; v < 6; v++)
		hits += warn_once_site(v);
	out = capture_end();
	assert_int_equal(hits, 3); /* the value is returned every time ... */
	hit = strstr(out, "warn: WARNING: next(3) > 2 at ");
	assert_non_null(hit);
	assert_non_null(strstr(hit, "test_compiler.c:"));
	assert_non_null(strstr(hit, "(test_warn_on)"));
	assert_null(strstr(out, "next(0)"));
	hit = strstr(out, "WARNING: v > 2 at ");
	assert_non_null(hit);
	assert_null(strstr(hit + 1, "WARNING: v > 2")); /* ... but it is reported once */
	free(out);

	/* warnings follow the log level */
	kvmm_log_set_level(KVMM_LOG_ERR);
	capture_start();
	assert_true(KVMM_WARN_ON(1));
	out = capture_end();
	assert_string_equal(out, "");
	free(out);
}

static void test_bug_on_false(void **state)
{
	(void)state;
	evals = 0;
	KVMM_BUG_ON(next(0));
	KVMM_BUG_ON(next(1) == 2);
	assert_int_equal(evals, 2);
}

/* Run fn in a child with stderr on a pipe; returns the child's wait status and its output. */
static int run_child(void (*fn)(int), int arg, char *out, size_t outsz)
{
	int pfd[2], status;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};

		setrlimit(RLIMIT_CORE, &no_core); /* no core file for an expected abort */
		dup2(pfd[1], STDERR_FILENO);
		close(pfd[0]);
		fn(arg);
		_exit(0);
	}
	close(pfd[1]);
	while (len < outsz - 1 && (n = read(pfd[0], out + len, outsz - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void bug_on_child(int x)
{
	KVMM_BUG_ON(x == 3);
}

static void bug_child(int x)
{
	(void)x;
	KVMM_BUG();
}

static void test_bug_on_aborts(void **state)
{
	char out[8192];
	int status;

	(void)state;
	status = run_child(bug_on_child, 2, out, sizeof(out));
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_string_equal(out, "");

	status = run_child(bug_on_child, 3, out, sizeof(out));
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	assert_non_null(strstr(out, "err: BUG: x == 3 at "));
	assert_non_null(strstr(out, "test_compiler.c:"));
	assert_non_null(strstr(out, "(bug_on_child)"));

	status = run_child(bug_child, 0, out, sizeof(out));
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	assert_non_null(strstr(out, "BUG: KVMM_BUG() at "));
	assert_non_null(strstr(out, "(bug_child)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_min_max_clamp),
		cmocka_unit_test(test_array_size_container_of),
		cmocka_unit_test(test_align),
		cmocka_unit_test(test_bit_helpers),
		cmocka_unit_test(test_overflow),
		cmocka_unit_test(test_once_and_hints),
		cmocka_unit_test_teardown(test_warn_on, teardown),
		cmocka_unit_test(test_bug_on_false),
		cmocka_unit_test_teardown(test_bug_on_aborts, teardown),
	};

	return cmocka_run_group_tests_name("compiler", tests, NULL, NULL);
}
