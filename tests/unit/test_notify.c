// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_notify.c - the sd_notify protocol (kvmm/notify.c) against a datagram socket
 * of our own standing in for the service manager: a filesystem path and an abstract '@' name
 * both receive exactly the state sent, formatted states, and every way NOTIFY_SOCKET can be
 * unset, bad or point at nobody.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvmm/notify.h"

static char dir[64];
static char path[128];

static int setup(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/kvmm-notify-test.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/notify", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	unsetenv("NOTIFY_SOCKET");
	return 0;
}

/* A bound datagram socket: a path, or an abstract name when @abstract. */
static int manager_socket(const char *name, int abstract)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (abstract) {
		memcpy(sun.sun_path + 1, name, strlen(name));
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
	} else {
		strcpy(sun.sun_path, name);
		len = sizeof(sun);
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, len), 0);
	return fd;
}

static void expect_datagram(int fd, const char *want)
{
	char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
	/* exactly one */
	assert_int_equal(recv(fd, buf, sizeof(buf), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
}

static void test_unset(void **state)
{
	(void)state;
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(kvmm_sd_notify("READY=1"), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), 0);
	assert_int_equal(kvmm_sd_notifyf("MAINPID=%d", 1), 0);
}

static void test_path(void **state)
{
	int fd;

	(void)state;
	fd = manager_socket(path, 0);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), 1);
	expect_datagram(fd, "READY=1");
	assert_int_equal(kvmm_sd_notifyf("READY=1\nMAINPID=%d", (int)getpid()), 1);
	{
		char want[64];

		snprintf(want, sizeof(want), "READY=1\nMAINPID=%d", (int)getpid());
		expect_datagram(fd, want);
	}
	assert_int_equal(kvmm_sd_notify("STOPPING=1"), 1);
	expect_datagram(fd, "STOPPING=1");
	close(fd);
	/* a socket file nobody reads any more */
	assert_int_equal(kvmm_sd_notify("READY=1"), -ECONNREFUSED);
	unlink(path);
}

static void test_abstract(void **state)
{
	char name[64], env[72];
	int fd;

	(void)state;
	snprintf(name, sizeof(name), "kvmm-notify-test-%d", (int)getpid());
	fd = manager_socket(name, 1);
	snprintf(env, sizeof(env), "@%s", name);
	setenv("NOTIFY_SOCKET", env, 1);
	assert_int_equal(kvmm_sd_notify("READY=1\nSTATUS=serving"), 1);
	expect_datagram(fd, "READY=1\nSTATUS=serving");
	close(fd);

	/* the name is exact: no trailing NUL is part of the address */
	snprintf(env, sizeof(env), "@%s-x", name);
	setenv("NOTIFY_SOCKET", env, 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -ECONNREFUSED);
}

static void test_bad(void **state)
{
	char big[256];

	(void)state;
	setenv("NOTIFY_SOCKET", "relative/path", 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -EINVAL);
	setenv("NOTIFY_SOCKET", "@", 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -EINVAL);
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -EAFNOSUPPORT);
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '/';
	big[sizeof(big) - 1] = '\0';
	setenv("NOTIFY_SOCKET", big, 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -ENAMETOOLONG);
	big[0] = '@';
	assert_int_equal(kvmm_sd_notify("READY=1"), -ENAMETOOLONG);
	/* nobody listening there */
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(kvmm_sd_notify("READY=1"), -ENOENT);
	assert_int_equal(kvmm_sd_notify(NULL), -EINVAL);
	{
		char *huge = malloc(5000);

		assert_non_null(huge);
		memset(huge, 'x', 4999);
		huge[4999] = '\0';
		assert_int_equal(kvmm_sd_notifyf("%s", huge), -ENOMEM);
		free(huge);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unset),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_abstract),
		cmocka_unit_test(test_bad),
	};

	return cmocka_run_group_tests_name("notify", tests, setup, teardown);
}
