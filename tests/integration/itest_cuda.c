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
 * On a machine with two GPUs or more, the same over a tensor-parallel group (--device 0,1):
 * each GPU's client maps its own copy of the pool and writes its own bytes into the frame, and
 * a reader on each GPU finds that GPU's bytes (skipped, saying so, with one GPU).
 *
 * Then read-only pages on the GPU: a daemon with 2 MiB frames (a mapping granule each), a
 * client that writes its own page and seals it, and a second process whose copy into that
 * sealed frame must fail (the GPU faults its context) while the frame keeps its bytes; a
 * driver that cannot map part of an allocation or refuses read-only access leaves the pool
 * writable (kvmm_write_protected() 0): reported as "not verified", not failed.
 *
 *   itest_cuda                      the test (KVMM_CUDA_DEVICE picks the GPU, default 0)
 *   itest_cuda --read SOCK FRAME    the reader (internal)
 *   itest_cuda --rowrite SOCK FRAME a copy into a sealed frame, which must fail (internal)
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

/* the bytes group member @m writes (member 0: the one-GPU test's) */
static unsigned char member_byte(uint32_t m, uint64_t i)
{
	return pattern_byte(i + (uint64_t)m * 4099);
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
		unsigned char want = member_byte(kvmm_device_index(c), i);

		if (buf[i] != want) {
			fprintf(stderr, "itest_cuda reader: member %u byte %llu is %u, want %u\n",
				kvmm_device_index(c), (unsigned long long)i, buf[i], want);
			goto out;
		}
	}
	ret = 0;
out:
	free(buf);
	kvmm_detach(c);
	return ret;
}

/* exec the reader on GPU @dev of this process; 0 when it found its member's bytes */
static int exec_reader(const char *argv0, const char *sock, int dev)
{
	char frame_s[16], dev_s[16];
	int status;
	pid_t pid;

	snprintf(frame_s, sizeof(frame_s), "%u", TEST_FRAME);
	snprintf(dev_s, sizeof(dev_s), "%d", dev);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		setenv("KVMM_CUDA_DEVICE", dev_s, 1);
		execl("/proc/self/exe", argv0, "--read", sock, frame_s, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	return 0;
}

/* client on GPU @dev writes member_byte(its member) into TEST_FRAME; 0 or -1 */
static int group_write(const struct kvmm_cuda_drv *drv, kvmm_client_t *c, int dev, uint32_t want)
{
	uint64_t ps = kvmm_page_size(c);
	unsigned char *buf = malloc(ps);
	kvmm_cu_device d;
	kvmm_cu_ctx ctx;
	int ret = -1;

	if (!buf || kvmm_device_index(c) != want || kvmm_nr_devices(c) != 2) {
		fprintf(stderr, "itest_cuda: GPU %d: member %u of %u, want %u of 2\n", dev,
			kvmm_device_index(c), kvmm_nr_devices(c), want);
		free(buf);
		return -1;
	}
	for (uint64_t i = 0; i < ps; i++)
		buf[i] = member_byte(want, i);
	if (!kvmm_cuda_drv_get_device(dev, &d, &ctx)) {
		if (!drv->cuCtxSetCurrent(ctx) &&
		    !drv->cuMemcpyHtoD(kvmm_frame_devptr(c, TEST_FRAME), buf, ps) &&
		    !drv->cuCtxSynchronize())
			ret = 0;
		kvmm_cuda_drv_put_device(d);
	}
	free(buf);
	return ret;
}

/* The pool mirrored on GPUs 0 and 1: each GPU's clients see that GPU's copy. */
static int group_test(const char *argv0)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	const char *const args[] = {"--backend", "cuda", "--device", "0,1", NULL};
	struct itest_daemon d = {0};
	kvmm_client_t *c[2] = {NULL, NULL};
	int count = 0, err, ret = 1;

	if (!drv || drv->cuDeviceGetCount(&count) || count < 2) {
		printf("itest_cuda: tensor-parallel group: skipped: %d GPU(s) here, it needs 2\n",
		       count);
		return 0;
	}
	if (!itest_daemon_find(&d))
		return 1;
	err = itest_daemon_start(&d, args);
	if (err) {
		fprintf(stderr, "itest_cuda: kvmmd --device 0,1 did not start: %s\n",
			strerror(-err));
		return 1;
	}
	for (int g = 0; g < 2; g++) {
		setenv("KVMM_CUDA_DEVICE", g ? "1" : "0", 1);
		err = kvmm_attach(d.sock, ITEST_NS_A, &itest_fmt, &c[g]);
		if (err) {
			fprintf(stderr, "itest_cuda: group attach on GPU %d: %s (%s)\n", g,
				kvmm_strerror(err), kvmm_cuda_map_why());
			goto out;
		}
		if (group_write(drv, c[g], g, (uint32_t)g))
			goto out;
	}
	if (exec_reader(argv0, d.sock, 1) || exec_reader(argv0, d.sock, 0)) {
		fprintf(stderr, "itest_cuda: a group reader did not find its GPU's bytes\n");
		goto out;
	}
	printf("itest_cuda: frame %u of a 2-GPU group: each GPU's copy read back by another "
	       "process on that GPU\n",
	       TEST_FRAME);
	ret = 0;
out:
	kvmm_detach(c[1]);
	kvmm_detach(c[0]);
	if (itest_daemon_stop(&d) != 0) {
		fprintf(stderr, "itest_cuda: kvmmd (group) did not exit cleanly\n");
		ret = 1;
	}
	if (ret)
		itest_daemon_dump_log(&d);
	return ret;
}

/* The second process of ro_test: 0 when its copy into @frame (read-only here) failed. */
static int ro_writer(const char *sock, uint32_t frame)
{
	const struct kvmm_cuda_drv *d = kvmm_cuda_drv_load();
	kvmm_client_t *c;
	unsigned char *buf;
	kvmm_cu_result r;

	if (!d || kvmm_attach(sock, ITEST_NS_A, &itest_fmt, &c))
		return 2;
	if (kvmm_write_protected(c) != 1)
		return 3;
	buf = malloc(kvmm_page_size(c));
	if (!buf)
		return 2;
	memset(buf, 0x5a, kvmm_page_size(c));
	r = d->cuMemcpyHtoD(kvmm_frame_devptr(c, frame), buf, kvmm_page_size(c));
	if (!r)
		r = d->cuCtxSynchronize();
	printf("itest_cuda: a copy into a sealed frame of another process: %s (CUDA error %d)\n",
	       r ? kvmm_cuda_result_str(r) : "went through", r);
	fflush(stdout);
	return r ? 0 : 1;
}

/* Sealed pages read-only on the GPU (libkvmm.md, "Read-only pages"). */
static int ro_test(const char *argv0)
{
	const struct kvmm_cuda_drv *drv = kvmm_cuda_drv_load();
	char dev_s[16], frame_s[16];
	const char *const args[] = {
		"--backend",   "cuda",		"--device", dev_s,	   "--page-size",
		"2M",	       "--frames",	"24",	    "--namespace", ITEST_NS_A ":16",
		"--namespace", ITEST_NS_B ":8", NULL};
	struct itest_daemon d = {0};
	kvmm_client_t *c = NULL;
	unsigned char *buf = NULL, *back = NULL;
	uint32_t tpp, *tokens = NULL;
	int32_t table[2];
	uint64_t seq, ps;
	int err, status, ret = 1;
	pid_t pid;

	snprintf(dev_s, sizeof(dev_s), "%d", device_env());
	if (!drv || !itest_daemon_find(&d))
		return 1;
	err = itest_daemon_start(&d, args);
	if (err) {
		fprintf(stderr, "itest_cuda: kvmmd --page-size 2M did not start: %s\n",
			strerror(-err));
		return 1;
	}
	err = kvmm_attach(d.sock, ITEST_NS_A, &itest_fmt, &c);
	if (err) {
		fprintf(stderr, "itest_cuda: attach (2 MiB frames): %s (%s)\n", kvmm_strerror(err),
			kvmm_cuda_map_why());
		goto out;
	}
	if (kvmm_write_protected(c) != 1) {
		printf("itest_cuda: read-only pages: NOT VERIFIED: this driver left the pool "
		       "writable (%s)\n",
		       kvmm_cuda_map_why());
		ret = 0;
		goto out;
	}
	ps = kvmm_page_size(c);
	tpp = kvmm_tokens_per_page(c);
	tokens = malloc(sizeof(*tokens) * tpp);
	buf = malloc(ps);
	back = malloc(ps);
	if (!tokens || !buf || !back)
		goto out;
	itest_tokens(tokens, tpp, 5);
	for (uint64_t i = 0; i < ps; i++)
		buf[i] = pattern_byte(i);
	if (kvmm_seq_create(c, 0, &seq) || kvmm_seq_append(c, seq, tokens, tpp, NULL) ||
	    kvmm_block_table(c, &seq, 1, table, 2) || table[0] < 0)
		goto out;
	/* its own page: writable */
	if (drv->cuMemcpyHtoD(kvmm_frame_devptr(c, (uint32_t)table[0]), buf, ps) ||
	    drv->cuCtxSynchronize()) {
		fprintf(stderr, "itest_cuda: a copy into the client's own page failed\n");
		goto out;
	}
	if (kvmm_seal(c, seq, 0, 0))
		goto out;
	snprintf(frame_s, sizeof(frame_s), "%d", table[0]);
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		execl("/proc/self/exe", argv0, "--rowrite", d.sock, frame_s, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr,
			"itest_cuda: a copy into a sealed frame was not refused (status "
			"%d)\n",
			status);
		goto out;
	}
	if (drv->cuMemcpyDtoH(back, kvmm_frame_devptr(c, (uint32_t)table[0]), ps) ||
	    memcmp(back, buf, ps)) {
		fprintf(stderr, "itest_cuda: the sealed frame lost its bytes\n");
		goto out;
	}
	kvmm_seq_free(c, seq);
	printf("itest_cuda: read-only pages: a sealed 2 MiB frame refused another process's copy "
	       "and kept its bytes\n");
	ret = 0;
out:
	free(tokens);
	free(buf);
	free(back);
	kvmm_detach(c);
	if (itest_daemon_stop(&d) != 0) {
		fprintf(stderr, "itest_cuda: kvmmd (2 MiB frames) did not exit cleanly\n");
		ret = 1;
	}
	if (ret)
		itest_daemon_dump_log(&d);
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
	/* a lost context and the handle attached: leave without exit handlers (LSan) */
	if (argc == 4 && !strcmp(argv[1], "--rowrite"))
		_exit(ro_writer(argv[2], (uint32_t)strtoul(argv[3], NULL, 10)));
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
	kvmm_detach(c);
	c = NULL;
	if (itest_daemon_stop(&d) != 0) {
		fprintf(stderr, "itest_cuda: kvmmd did not exit cleanly\n");
		itest_daemon_dump_log(&d);
		return 1;
	}
	free(buf);
	if (ro_test(argv[0]))
		return 1;
	return group_test(argv[0]);
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
