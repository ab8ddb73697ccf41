// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_cuda.c - a cuda-backend kvmmd end to end, for a machine with a GPU
 * (tools/gpu-check runs it; make check runs it too, and it skips in a second without one).
 * The real kvmmd is started with --backend cuda in a temporary directory; a libkvmm client
 * attaches (HELLO says KVMM_BACKEND_CUDA, the chunk fds are imported and mapped on the GPU),
 * writes a pattern into one frame with cuMemcpyHtoD at kvmm_frame_devptr(), and a second
 * client, a freshly exec'd process (CUDA does not survive fork), attaches to the same
 * namespace and reads the frame back with cuMemcpyDtoH: the frame-to-offset rule holds on the
 * device across processes. Exit 77 (skip, with the reason) without a CUDA driver or GPU.
 *
 *   itest_cuda                      the test (KVMM_CUDA_DEVICE picks the GPU, default 0)
 *   itest_cuda --read SOCK FRAME    the reader (internal)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "kernels/cuda/cuda_drv.h"
#include "runtime/kvmm.h"

#define TEST_FRAME 37U

static unsigned char pattern_byte(uint64_t i)
{
	return (unsigned char)((i * 131 + 7) ^ (i >> 9));
}

static int device_env(void)
{
	const char *env = getenv("KVMM_CUDA_DEVICE");

	return env && env[0] ? atoi(env) : 0;
}

/* The second process: attach, read the frame on the device, compare. */
static int reader(const char *sock, uint32_t frame)
{
	const struct kvmm_cuda_drv *d;
	kvmm_client_t *c;
	unsigned char *buf;
	uint64_t ps, dp;
	int err, ret = 1;

	err = kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c);
	if (err) {
		fprintf(stderr, "itest_cuda reader: attach: %s (%s)\n", kvmm_strerror(err),
			kvmm_cuda_map_why());
		return 1;
	}
	ps = kvmm_page_size(c);
	dp = kvmm_frame_devptr(c, frame);
	d = kvmm_cuda_drv_load();
	buf = malloc(ps);
	if (!dp || !d || !buf) {
		fprintf(stderr, "itest_cuda reader: no device pointer / driver / memory\n");
		goto out;
	}
	memset(buf, 0, ps);
	if (d->cuMemcpyDtoH(buf, dp, ps)) {
		fprintf(stderr, "itest_cuda reader: cuMemcpyDtoH failed\n");
		goto out;
	}
	for (uint64_t i = 0; i < ps; i++) {
		if (buf[i] != pattern_byte(i)) {
			fprintf(stderr, "itest_cuda reader: byte %llu is %u, want %u\n",
				(unsigned long long)i, buf[i], pattern_byte(i));
			goto out;
		}
	}
	ret = 0;
out:
	free(buf);
	kvmm_detach(c);
	return ret;
}

int main(int argc, char **argv)
{
	struct itest_daemon d = {0};
	const struct kvmm_cuda_drv *drv;
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	kvmm_client_t *c = NULL;
	unsigned char *buf = NULL;
	char frame_s[16], dev_s[16];
	const char *const args[] = {"--backend", "cuda", "--device", dev_s, NULL};
	uint64_t ps, dp;
	int err, status, ret = 1;
	pid_t pid;

	if (argc == 4 && !strcmp(argv[1], "--read"))
		return reader(argv[2], (uint32_t)strtoul(argv[3], NULL, 10));
	if (!itest_daemon_find(&d))
		return 77;
	if (kvmm_cuda_drv_get_device(device_env(), &dev, &ctx)) {
		printf("itest_cuda: skipped: %s\n", kvmm_cuda_drv_why());
		return 77;
	}
	kvmm_cuda_drv_put_device(dev);
	snprintf(dev_s, sizeof(dev_s), "%d", device_env());
	setenv("KVMM_CUDA_DEVICE", dev_s, 1);
	/* the daemon sees the same GPUs as we do: --device is its ordinal, and ours */
	err = itest_daemon_start(&d, args);
	if (err) {
		fprintf(stderr, "itest_cuda: kvmmd --backend cuda did not start: %s\n",
			strerror(-err));
		return 1;
	}
	err = kvmm_attach(d.sock, ITEST_NS_A, &itest_fmt, &c);
	if (err) {
		fprintf(stderr, "itest_cuda: attach: %s (%s)\n", kvmm_strerror(err),
			kvmm_cuda_map_why());
		goto out;
	}
	ps = kvmm_page_size(c);
	errno = 0;
	if (kvmm_frame_addr(c, TEST_FRAME) || errno != EOPNOTSUPP) {
		fprintf(stderr, "itest_cuda: a device pool has a host address?\n");
		goto out;
	}
	dp = kvmm_frame_devptr(c, TEST_FRAME);
	if (!dp || dp != kvmm_frame_devptr(c, 0) + TEST_FRAME * ps) {
		fprintf(stderr, "itest_cuda: kvmm_frame_devptr breaks base + n * page_size\n");
		goto out;
	}
	drv = kvmm_cuda_drv_load();
	buf = malloc(ps);
	if (!drv || !buf)
		goto out;
	for (uint64_t i = 0; i < ps; i++)
		buf[i] = pattern_byte(i);
	if (drv->cuMemcpyHtoD(dp, buf, ps) || drv->cuCtxSynchronize()) {
		fprintf(stderr, "itest_cuda: cuMemcpyHtoD into frame %u failed\n", TEST_FRAME);
		goto out;
	}
	snprintf(frame_s, sizeof(frame_s), "%u", TEST_FRAME);
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "--read", d.sock, frame_s, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "itest_cuda: the second client did not read the frame back\n");
		goto out;
	}
	printf("itest_cuda: frame %u written through one process's mapping, read back by another\n",
	       TEST_FRAME);
	ret = 0;
out:
	free(buf);
	kvmm_detach(c);
	if (itest_daemon_stop(&d) != 0) {
		fprintf(stderr, "itest_cuda: kvmmd did not exit cleanly\n");
		ret = 1;
	}
	if (ret)
		itest_daemon_dump_log(&d);
	return ret;
}
