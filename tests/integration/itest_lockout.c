// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_lockout.c - an unprivileged local user cannot lock root or other
 * users out of kvmmd (issue 26, defect 1: 256 idle connections held by one user made root's
 * kvmmctl fail): connections that say no HELLO are closed after hello_timeout; one user holds
 * at most max_clients_per_uid, and the next one is told why (-EUSERS from kvmm_attach, not a
 * bare hang-up); when every place is taken, root still gets one of the reserved ones; the
 * socket file is 0660 unless configured otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/libkvmm.h"

#define PER_UID 4
#define MAX_CLIENTS 12
#define NOBODY 65534

static int setup(void **state)
{
	static const char *const extra[] = {"--max-clients-per-uid",
					    "4",
					    "--max-clients",
					    "12",
					    "--hello-timeout",
					    "700ms",
					    NULL};

	(void)state;
	return itest_group_start(extra);
}

/* a raw connection that says nothing */
static int silent_connect(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", itest_d.sock);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -errno;
	}
	return fd;
}

/* whether the daemon has closed fd (EOF within timeout_ms) */
static bool closed_within(int fd, int timeout_ms)
{
	char b[64];

	return itest_recv(fd, b, sizeof(b), timeout_ms) == 0;
}

/* Attach as root: 0 or the error. */
static int root_attach(void)
{
	kvmm_client_t *c = NULL;
	int ret = kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c);

	if (!ret)
		kvmm_detach(c);
	return ret;
}

/* The socket file gets the configured mode (kvmmd's default, 0660: test_config). */
static void test_socket_mode(void **state)
{
	static const char *const extra[] = {"--socket-mode", "0640", NULL};
	struct itest_daemon d = {0};
	struct stat st;

	(void)state;
	itest_need_daemon();
	assert_int_equal(stat(itest_d.sock, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0666); /* what itest.c asks for */
	assert_true(itest_daemon_find(&d));
	assert_int_equal(itest_daemon_start(&d, extra), 0);
	assert_int_equal(stat(d.sock, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	assert_int_equal(itest_daemon_stop(&d), 0);
}

/* Silent connections go after hello_timeout; the daemon serves others meanwhile. */
static void test_hello_deadline(void **state)
{
	int fd[3];

	(void)state;
	itest_need_daemon();
	for (int i = 0; i < 3; i++) {
		fd[i] = silent_connect();
		assert_true(fd[i] >= 0);
	}
	assert_int_equal(root_attach(), 0);
	assert_false(closed_within(fd[0], 100));
	for (int i = 0; i < 3; i++) {
		assert_true(closed_within(fd[i], 3000));
		close(fd[i]);
	}
	assert_true(itest_admin_value(&itest_d, KVMM_OP_STATUS, "HelloTimeouts") >= 3);
}

/*
 * In a child running as nobody: hold PER_UID connections, then attach once more: -EUSERS.
 * Exit 0 when all went as expected, 1 + step otherwise.  Holds the connections until
 * stdin (a pipe from the parent) closes.
 */
static int as_nobody(int hold_fd)
{
	int fds[PER_UID], ret;
	kvmm_client_t *c = NULL;
	char b;

	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		return 2;
	for (int i = 0; i < PER_UID; i++) {
		fds[i] = silent_connect();
		if (fds[i] < 0)
			return 3;
	}
	ret = kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c);
	if (ret != -EUSERS) {
		fprintf(stderr, "attach over the cap: %d\n", ret);
		return 4;
	}
	/* tell the parent we hold them, then wait for it */
	if (write(hold_fd, "x", 1) != 1)
		return 5;
	(void)!read(hold_fd, &b, 1);
	return 0;
}

/*
 * One user holds its cap; the next connection is refused with a reason; root and another
 * user are served meanwhile.  Then enough users fill max_clients: root still gets in.
 */
static void test_per_uid_cap_and_reserve(void **state)
{
	int sv[2], status;
	char b;
	pid_t pid;

	(void)state;
	itest_need_daemon();
	if (geteuid() != 0)
		skip();
	assert_int_equal(chmod(itest_d.dir, 0755), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		close(sv[0]);
		_exit(as_nobody(sv[1]));
	}
	close(sv[1]);
	/* the child holds its PER_UID connections (or failed: its exit status says how) */
	if (read(sv[0], &b, 1) != 1) {
		assert_int_equal(waitpid(pid, &status, 0), pid);
		fail_msg("child exited %d", WEXITSTATUS(status));
	}
	assert_int_equal(root_attach(), 0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_STATUS, "Refused") >= 1);
	close(sv[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	/* every ordinary place taken (root's own silent connections count): root still in */
	{
		int fds[MAX_CLIENTS];

		for (int i = 0; i < MAX_CLIENTS; i++) {
			fds[i] = silent_connect();
			assert_true(fds[i] >= 0);
		}
		assert_int_equal(root_attach(), 0);
		for (int i = 0; i < MAX_CLIENTS; i++)
			close(fds[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_socket_mode),
		cmocka_unit_test(test_hello_deadline),
		cmocka_unit_test(test_per_uid_cap_and_reserve),
	};
	int ret = cmocka_run_group_tests_name("itest_lockout", tests, setup, itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
