// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_cuda_attach.c - libkvmm's attach path for a daemon whose pools are in GPU
 * memory, checked without a GPU. A forked fake daemon answers HELLO and ATTACH on a Unix
 * socket in a temporary directory exactly as kvmmd does (SCM_RIGHTS chunk fds, memfds standing
 * in for the exported CUDA handles), saying KVMM_BACKEND_CUDA or KVMM_BACKEND_HOST. With the
 * driver forced absent ($KVMM_LIBCUDA pointing nowhere, so the result is the same on a machine
 * with a GPU), a cuda-backend attach must fail with -ENODEV, leave no descriptor behind and say
 * why; the same fake with the host backend must attach (so the fake is faithful and the
 * failure comes from the device mapping). Then the real server code (kvmm/ipc/, forked)
 * over a backend named "cuda" (host memory underneath): HELLO must report KVMM_BACKEND_CUDA
 * and KVMM_FEAT_CUDA_BACKEND, and libkvmm's attach must again end in -ENODEV with nothing
 * leaked. The real device path is tests/integration/itest_cuda,
 * run by tools/gpu-check where a GPU exists.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvmm/ipc/server.h"
#include "kvmm/mm.h"
#include "runtime/kvmm.h"

#define FAKE_PAGE_SIZE (UINT64_C(64) << 10)
#define FAKE_CHUNK_SIZE (UINT64_C(2) << 20)
#define FAKE_NR_CHUNKS 2U

static const struct kvmm_format fmt = {
	.layers = 2,
	.kv_heads = 2,
	.head_dim = 64,
	.dtype = KVMM_DTYPE_FP16,
};

struct fake {
	char dir[64];
	char sock[128];
	pid_t pid;
};

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

static int send_reply(int fd, const struct kvmm_msg_hdr *req, const void *payload, size_t len,
		      const int *fds, unsigned int nr_fds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 8)];
	} cbuf;
	struct kvmm_msg_hdr hdr;
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};

	kvmm_msg_hdr_init_reply(&hdr, req, (uint32_t)(sizeof(hdr) + len), 0);
	if (nr_fds) {
		struct cmsghdr *cm;

		memset(&cbuf, 0, sizeof(cbuf));
		hdr.flags |= KVMM_MSG_F_FDS;
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nr_fds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nr_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nr_fds);
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* The fake daemon: one connection, HELLO then ATTACH, then wait for the client to go. */
static int fake_serve(int lfd, uint16_t backend)
{
	unsigned char buf[KVMM_MSG_MAX];
	const struct kvmm_msg_hdr *req = (const struct kvmm_msg_hdr *)buf;
	int cfd, fds[FAKE_NR_CHUNKS];
	ssize_t n;

	cfd = accept(lfd, NULL, NULL);
	if (cfd < 0)
		return 10;
	for (unsigned int i = 0; i < FAKE_NR_CHUNKS; i++) {
		fds[i] = memfd_create("kvmm-fake-chunk", MFD_CLOEXEC);
		if (fds[i] < 0 || ftruncate(fds[i], (off_t)FAKE_CHUNK_SIZE))
			return 11;
	}
	while ((n = recv(cfd, buf, sizeof(buf), 0)) > 0) {
		if (kvmm_msg_hdr_check(req, (size_t)n))
			return 12;
		switch (kvmm_op_base(req->op)) {
		case KVMM_OP_HELLO: {
			struct kvmm_hello_rep rep = {
				.abi_version = KVMM_ABI_VERSION,
				.abi_min = KVMM_ABI_MIN_COMPAT,
				.abi_agreed = KVMM_ABI_VERSION,
				.backend = backend,
				.features =
					(backend == KVMM_BACKEND_CUDA ? KVMM_FEAT_CUDA_BACKEND
								      : KVMM_FEAT_HOST_BACKEND) |
					KVMM_FEAT_FD_PASSING,
				.page_size = FAKE_PAGE_SIZE,
				.nr_frames = FAKE_NR_CHUNKS * (FAKE_CHUNK_SIZE / FAKE_PAGE_SIZE),
				.client_id = 1,
				.nr_devices = 1,
				.max_msg = KVMM_MSG_MAX,
			};

			rep.features_supported = rep.features;
			if (send_reply(cfd, req, &rep, sizeof(rep), NULL, 0))
				return 13;
			break;
		}
		case KVMM_OP_ATTACH: {
			struct kvmm_attach_rep rep = {
				.tokens_per_page = 64,
				.bytes_per_token = 1024,
				.chunk_size = FAKE_CHUNK_SIZE,
				.nr_chunks = FAKE_NR_CHUNKS,
				.ns_id = 1,
				.nr_fds = FAKE_NR_CHUNKS,
				.nr_frames = FAKE_NR_CHUNKS * (FAKE_CHUNK_SIZE / FAKE_PAGE_SIZE),
			};

			if (send_reply(cfd, req, &rep, sizeof(rep), fds, FAKE_NR_CHUNKS))
				return 14;
			break;
		}
		case KVMM_OP_BYE:
			break;
		default:
			return 15; /* libkvmm sends nothing else during these tests */
		}
	}
	return 0;
}

static void fake_start(struct fake *f, uint16_t backend)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd;

	strcpy(f->dir, "/tmp/kvmm-cuda-attach.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/kvmmd.sock", f->dir);
	strcpy(sa.sun_path, f->sock);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	f->pid = fork();
	assert_true(f->pid >= 0);
	if (f->pid == 0)
		_exit(fake_serve(lfd, backend));
	close(lfd);
}

/* The fake must have served the whole exchange and exited 0 once the client hung up. */
static void fake_stop(struct fake *f)
{
	int status = -1;

	assert_int_equal(waitpid(f->pid, &status, 0), f->pid);
	unlink(f->sock);
	rmdir(f->dir);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static int group_setup(void **state)
{
	(void)state;
	/* no driver, even on a machine with one: this test is about the failure path */
	setenv("KVMM_LIBCUDA", "/nonexistent/kvmm-test/libcuda.so.1", 1);
	unsetenv("KVMM_CUDA_DEVICE");
	unsetenv("KVMM_NO_RINGS");
	return 0;
}

static void test_cuda_attach_enodev_no_leak(void **state)
{
	kvmm_client_t *c = (kvmm_client_t *)(uintptr_t)1;
	struct fake f;
	int before, err;

	(void)state;
	fake_start(&f, KVMM_BACKEND_CUDA);
	before = count_fds();
	assert_true(before > 0);
	err = kvmm_attach(f.sock, "alpha", &fmt, &c);
	assert_int_equal(err, -ENODEV);
	assert_null(c);
	/* the socket and both chunk fds are closed again */
	assert_int_equal(count_fds(), before);
	assert_non_null(strstr(kvmm_cuda_map_why(), "CUDA"));
	assert_non_null(kvmm_strerror(err));
	fake_stop(&f);
}

static void test_cuda_attach_bad_device_env(void **state)
{
	kvmm_client_t *c = NULL;
	struct fake f;
	int before;

	(void)state;
	fake_start(&f, KVMM_BACKEND_CUDA);
	before = count_fds();
	setenv("KVMM_CUDA_DEVICE", "gpu0", 1);
	assert_int_equal(kvmm_attach(f.sock, "alpha", &fmt, &c), -EINVAL);
	unsetenv("KVMM_CUDA_DEVICE");
	assert_null(c);
	assert_int_equal(count_fds(), before);
	fake_stop(&f);
}

/*
 * KVMM_CUDA_DEVICE=none: a process with no GPU (here no driver at all) attaches to a cuda-
 * backend daemon without mapping the pool, to allocate and pass block tables to the ranks.
 */
static void test_cuda_attach_no_device(void **state)
{
	kvmm_client_t *c = NULL;
	struct fake f;
	int before;

	(void)state;
	fake_start(&f, KVMM_BACKEND_CUDA);
	before = count_fds();
	setenv("KVMM_CUDA_DEVICE", "none", 1);
	assert_int_equal(kvmm_attach(f.sock, "alpha", &fmt, &c), 0);
	unsetenv("KVMM_CUDA_DEVICE");
	assert_non_null(c);
	assert_int_equal(kvmm_device_index(c), KVMM_DEVICE_NONE);
	assert_int_equal(kvmm_nr_devices(c), 1);
	assert_int_equal(kvmm_nr_frames(c), FAKE_NR_CHUNKS * (FAKE_CHUNK_SIZE / FAKE_PAGE_SIZE));
	errno = 0;
	assert_int_equal(kvmm_frame_devptr(c, 0), 0);
	assert_int_equal(errno, EOPNOTSUPP);
	errno = 0;
	assert_null(kvmm_frame_addr(c, 0));
	assert_int_equal(errno, EOPNOTSUPP);
	/* the chunk fds were closed unmapped: only the socket is left */
	assert_int_equal(count_fds(), before + 1);
	kvmm_detach(c);
	assert_int_equal(count_fds(), before);
	fake_stop(&f);
}

/* The same fake with host memory attaches: frames have host addresses, no device ones. */
static void test_host_attach_through_fake(void **state)
{
	kvmm_client_t *c = NULL;
	uint32_t last;
	struct fake f;
	char *p;
	int before;

	(void)state;
	fake_start(&f, KVMM_BACKEND_HOST);
	before = count_fds();
	assert_int_equal(kvmm_attach(f.sock, "alpha", &fmt, &c), 0);
	assert_non_null(c);
	last = kvmm_nr_frames(c) - 1;
	assert_int_equal(kvmm_nr_frames(c), FAKE_NR_CHUNKS * (FAKE_CHUNK_SIZE / FAKE_PAGE_SIZE));
	p = kvmm_frame_addr(c, last);
	assert_non_null(p);
	/* the chunk is really mapped, to the end (read-only: the frame is no page of ours) */
	(void)*(volatile char *)&p[FAKE_PAGE_SIZE - 1];
	errno = 0;
	assert_int_equal(kvmm_frame_devptr(c, 0), 0);
	assert_int_equal(errno, EOPNOTSUPP);
	errno = 0;
	assert_null(kvmm_frame_addr(c, last + 1));
	assert_int_equal(errno, EINVAL);
	/* only the connection stays open: the chunk fds were closed after mapping */
	assert_int_equal(count_fds(), before + 1);
	kvmm_detach(c);
	assert_int_equal(count_fds(), before);
	fake_stop(&f);
}

/* ---- the real server over a backend that calls itself "cuda" ---------------------------- */

static int srv_chunk_fds[FAKE_NR_CHUNKS];
static struct kvmm_backend_ops cuda_named_ops;

static int srv_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr,
		      uint64_t *chunk_size)
{
	(void)be;
	*fds = srv_chunk_fds;
	*nr = FAKE_NR_CHUNKS;
	*chunk_size = FAKE_CHUNK_SIZE;
	return 0;
}

/* The server of kvmm/ipc/ in this (forked) process; one byte on @ready once it listens. */
static int real_serve(const char *sock, int ready)
{
	static struct kvmm_ns_config ns[1];
	struct kvmm_server_config cfg;
	struct kvmm_server *srv;

	for (unsigned int i = 0; i < FAKE_NR_CHUNKS; i++) {
		srv_chunk_fds[i] = memfd_create("kvmm-fake-chunk", MFD_CLOEXEC);
		if (srv_chunk_fds[i] < 0 || ftruncate(srv_chunk_fds[i], (off_t)FAKE_CHUNK_SIZE))
			return 20;
	}
	cuda_named_ops = kvmm_mmap_backend_ops;
	cuda_named_ops.name = "cuda"; /* what kvmm/backend/cuda.c calls itself */
	memset(ns, 0, sizeof(ns));
	strcpy(ns[0].name, "alpha");
	ns[0].nframes = FAKE_NR_CHUNKS * (FAKE_CHUNK_SIZE / FAKE_PAGE_SIZE);
	memset(&cfg, 0, sizeof(cfg));
	cfg.socket_path = sock;
	cfg.page_size = FAKE_PAGE_SIZE;
	cfg.chunk_size = FAKE_CHUNK_SIZE;
	cfg.chunks = srv_chunks;
	cfg.backend = &cuda_named_ops;
	cfg.ns = ns;
	cfg.nr_ns = 1;
	if (kvmm_server_create(&cfg, &srv))
		return 21;
	if (write(ready, "1", 1) != 1)
		return 22;
	close(ready);
	return kvmm_server_run(srv) ? 23 : 0;
}

static void real_start(struct fake *f)
{
	int ready[2];
	char ok = 0;

	strcpy(f->dir, "/tmp/kvmm-cuda-attach.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/kvmmd.sock", f->dir);
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	f->pid = fork();
	assert_true(f->pid >= 0);
	if (f->pid == 0) {
		close(ready[0]);
		_exit(real_serve(f->sock, ready[1]));
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], &ok, 1), 1); /* EOF (0) if the server could not start */
	close(ready[0]);
}

static void real_stop(struct fake *f)
{
	int status;

	kill(f->pid, SIGKILL);
	assert_int_equal(waitpid(f->pid, &status, 0), f->pid);
	unlink(f->sock);
	rmdir(f->dir);
}

/* HELLO by hand: the daemon must name the backend its pools really use. */
static void test_server_hello_reports_cuda(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct kvmm_hello_req req = {
		.abi_version = KVMM_ABI_VERSION,
		.abi_min = KVMM_ABI_MIN_COMPAT,
		.features = KVMM_FEAT_HOST_BACKEND | KVMM_FEAT_CUDA_BACKEND | KVMM_FEAT_FD_PASSING,
	};
	unsigned char msg[sizeof(struct kvmm_msg_hdr) + sizeof(req)];
	unsigned char buf[KVMM_MSG_MAX];
	struct kvmm_hello_rep rep;
	struct kvmm_msg_hdr hdr;
	struct fake f;
	ssize_t n;
	int fd;

	(void)state;
	real_start(&f);
	strcpy(sa.sun_path, f.sock);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	kvmm_msg_hdr_init(&hdr, KVMM_OP_HELLO, sizeof(msg), 1);
	memcpy(msg, &hdr, sizeof(hdr));
	memcpy(msg + sizeof(hdr), &req, sizeof(req));
	assert_int_equal(send(fd, msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
	n = recv(fd, buf, sizeof(buf), 0);
	assert_int_equal(n, (ssize_t)(sizeof(hdr) + sizeof(rep)));
	memcpy(&hdr, buf, sizeof(hdr));
	assert_int_equal(hdr.status, 0);
	memcpy(&rep, buf + sizeof(hdr), sizeof(rep));
	assert_int_equal(rep.backend, KVMM_BACKEND_CUDA);
	assert_true(rep.features & KVMM_FEAT_CUDA_BACKEND);
	assert_false(rep.features & KVMM_FEAT_HOST_BACKEND);
	assert_true(rep.features_supported & KVMM_FEAT_CUDA_BACKEND);
	assert_false(rep.features_supported & KVMM_FEAT_HOST_BACKEND);
	assert_int_equal(rep.nr_devices, 1);
	close(fd);
	real_stop(&f);
}

/* libkvmm against the real server code: -ENODEV, nothing leaked, the server carries on. */
static void test_server_attach_enodev(void **state)
{
	kvmm_client_t *c = NULL;
	struct fake f;
	int before;

	(void)state;
	real_start(&f);
	before = count_fds();
	for (int i = 0; i < 2; i++) {
		assert_int_equal(kvmm_attach(f.sock, "alpha", &fmt, &c), -ENODEV);
		assert_null(c);
		assert_int_equal(count_fds(), before);
	}
	assert_int_equal(waitpid(f.pid, NULL, WNOHANG), 0); /* still serving */
	real_stop(&f);
}

static void test_devptr_args(void **state)
{
	(void)state;
	errno = 0;
	assert_int_equal(kvmm_frame_devptr(NULL, 0), 0);
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_attach_enodev_no_leak),
		cmocka_unit_test(test_cuda_attach_bad_device_env),
		cmocka_unit_test(test_cuda_attach_no_device),
		cmocka_unit_test(test_host_attach_through_fake),
		cmocka_unit_test(test_devptr_args),
		cmocka_unit_test(test_server_hello_reports_cuda),
		cmocka_unit_test(test_server_attach_enodev),
	};

	return cmocka_run_group_tests_name("cuda_attach", tests, group_setup, NULL);
}
