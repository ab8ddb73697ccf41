// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_cuda_fake.c - kvmmd's cuda backend (kvmm/backend/cuda.c) and libkvmm's
 * mapping of its pool (runtime/cuda_map.c) run for real, without a GPU, over kvmm's fake CUDA
 * driver (tests/fakecuda/, Documentation/dev-tools/fake-cuda.md), selected with $KVMM_LIBCUDA
 * in this process only.
 *
 * Group "fakecuda" first checks the double itself, so that a pass below means something: every
 * entry point kernels/cuda/drv.c loads resolves, and the fake refuses what the real driver
 * refuses where our code could go wrong (sizes off the granularity, a mapping outside a
 * reservation, a double release, access before cuMemSetAccess, copies over unmapped device
 * addresses, use after fork), its streams really defer work until it is waited for, and the
 * kernels report "skipped" with the reason.  Then several devices (KVMM_FAKECUDA_DEVICES,
 * KVMM_FAKECUDA_VISIBLE), in processes this program starts again with the environment set
 * (the fake reads it at cuInit, once): distinct UUIDs that are the documented bytes, a context
 * per device, memory on the device asked for, the device travelling with an exported fd to
 * another process, cuMemSetAccess refused for any device but the allocation's, a remapped
 * ordinal, work on a stream of a context that is not current refused, and bad values of the
 * variables refused with their reason.  Group "cuda_backend" then drives the backend
 * through the real core: pool create/destroy with the chunk fds checked, the chunk-size rule,
 * copy-on-write copy, scrub, swap staging, the chunk fds imported and mapped a second time by
 * kvmm_cuda_map_fds (the client's path) onto the same bytes, failures injected into every
 * driver call of setup and mapping (each must unwind completely), and random pages swapped out
 * and in through the host and NVMe tiers, identical afterwards.  Every test ends with the
 * fake's live-object counts back where they were and no descriptor left open.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "kernels/cuda/cuda_drv.h"
#include "kernels/cuda/kvmm_cuda.h"
#include "kvmm/backend/cuda.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "runtime/kvmm.h"
#include "tests/fakecuda/fakecuda.h"
#include "check_inv.h"
#include "swap_tier.h"

#define GRAN KVMM_FAKECUDA_GRANULARITY
#define FK_INVALID_HANDLE 400
#define FK_NOT_READY 600

static const struct kvmm_cuda_drv *d;
static kvmm_fakecuda_stats_fn fk_stats;
static kvmm_fakecuda_fail_fn fk_fail;
static kvmm_cu_device dev;
static kvmm_cu_ctx ctx;
static char fake_path[PATH_MAX];
static char self_exe[PATH_MAX]; /* this program, run again for the several-device checks */

/* ---- helpers ------------------------------------------------------------------------------- */

static int count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n - 1;
}

static struct kvmm_fakecuda_stats stats(void)
{
	struct kvmm_fakecuda_stats s;

	fk_stats(&s);
	return s;
}

/* what a test starts from, to compare with at its end */
struct mark {
	struct kvmm_fakecuda_stats s;
	int fds;
};

static struct mark mark(void)
{
	struct mark m = {stats(), count_fds()};

	return m;
}

/* every live object of the fake and every descriptor back to @m; no race, no pageable copy */
static void check_clean(const struct mark *m)
{
	struct kvmm_fakecuda_stats s = stats();

	assert_int_equal(s.allocs, m->s.allocs);
	assert_int_equal(s.handles, m->s.handles);
	assert_int_equal(s.reservations, m->s.reservations);
	assert_int_equal(s.mappings, m->s.mappings);
	assert_int_equal(s.dev_allocs, m->s.dev_allocs);
	assert_int_equal(s.host_allocs, m->s.host_allocs);
	assert_int_equal(s.streams, m->s.streams);
	assert_int_equal(s.events, m->s.events);
	assert_int_equal(s.ctx_refs, m->s.ctx_refs);
	assert_int_equal(s.pending, 0);
	if (s.races != m->s.races)
		print_error("fake: %s\n", s.last_error);
	assert_int_equal(s.races, m->s.races);
	assert_int_equal(s.pageable_async, m->s.pageable_async);
	assert_int_equal(count_fds(), m->fds);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill_random(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rnd64();

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static void dev_write(kvmm_cu_ptr dst, const void *src, size_t n)
{
	assert_int_equal(d->cuMemcpyHtoD(dst, src, n), 0);
}

static void dev_read(void *dst, kvmm_cu_ptr src, size_t n)
{
	assert_int_equal(d->cuMemcpyDtoH(dst, src, n), 0);
}

/* ---- group setup: the fake, in this process only ------------------------------------------- */

static int group_setup(void **state)
{
	const char *env = getenv("KVMM_FAKECUDA");
	const char *rel = env && env[0] ? env : "tests/fakecuda/libcuda-fake.so";
	void *lib;

	(void)state;
	if (!realpath(rel, fake_path)) {
		print_error(
			"fake CUDA driver not found at %s (run from the top of the object tree, "
			"or set KVMM_FAKECUDA)\n",
			rel);
		return -1;
	}
	setenv("KVMM_LIBCUDA", fake_path, 1);
	setenv("KVMM_FAKECUDA_MEM", "0x1000000000", 1); /* 64 GiB (sparse memfds) */
	/* one device here, whatever the caller's environment; children set their own */
	unsetenv("KVMM_FAKECUDA_DEVICES");
	unsetenv("KVMM_FAKECUDA_VISIBLE");
	d = kvmm_cuda_drv_load();
	if (!d) {
		print_error("the fake does not load: %s\n", kvmm_cuda_drv_why());
		return -1;
	}
	/* the same library drv.c opened: its test hooks */
	lib = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!lib)
		return -1;
	fk_stats = (kvmm_fakecuda_stats_fn)dlsym(lib, KVMM_FAKECUDA_STATS);
	fk_fail = (kvmm_fakecuda_fail_fn)dlsym(lib, KVMM_FAKECUDA_FAIL);
	dlclose(lib); /* drv.c still holds it */
	if (!fk_stats || !fk_fail)
		return -1;
	/* our own context reference, for the copies the tests make */
	return kvmm_cuda_drv_get_device(0, &dev, &ctx) ? -1 : 0;
}

static int backend_setup(void **state)
{
	(void)state;
	return d && fk_stats ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	kvmm_cuda_drv_put_device(dev);
	return stats().ctx_refs == 0 ? 0 : -1;
}

/* ---- the fake's own contract ----------------------------------------------------------------- */

static void test_fake_loads(void **state)
{
	int v = 0, n = 0;
	size_t gran = 0;
	char name[64];
	kvmm_cu_uuid uuid;
	unsigned char want[16];
	struct kvmm_cu_mem_alloc_prop prop = {
		.type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED,
		.requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
	};

	(void)state;
	/* kvmm_cuda_drv_load() resolved every entry point of drv.c's table from the fake */
	assert_non_null(d);
	assert_string_equal(kvmm_cuda_drv_why(), "");
	assert_int_equal(d->cuDeviceGetCount(&n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(d->cuDeviceGetName(name, sizeof(name), dev), 0);
	assert_non_null(strstr(name, "fake"));
	/* one device by default: physical device 0's UUID, the bytes fakecuda.h documents */
	assert_int_equal(d->cuDeviceGetUuid(&uuid, dev), 0);
	kvmm_fakecuda_uuid(0, want);
	assert_memory_equal(uuid.bytes, want, 16);
	assert_memory_equal(uuid.bytes, "kvmm-fakecuda-d0", 16);
	assert_int_equal(d->cuDeviceGetUuid(&uuid, 1), KVMM_CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(stats().phys_devices, 1);
	assert_int_equal(stats().devices, 1);
	assert_int_equal(
		d->cuDeviceGetAttribute(
			&v, KVMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
		0);
	assert_int_equal(v, 1);
	assert_int_equal(d->cuMemGetAllocationGranularity(&gran, &prop,
							  KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM),
			 0);
	assert_int_equal(gran, GRAN);
	assert_int_equal(kvmm_cuda_backend_probe(0, name, sizeof(name)), 0);
	assert_int_equal(kvmm_cuda_backend_probe(1, name, sizeof(name)), -ENODEV);
	assert_true(name[0] != '\0');
}

/* the VMM calls refuse what the driver refuses, with an error and not a crash */
static void test_fake_vmm_checks(void **state)
{
	struct kvmm_cu_mem_alloc_prop prop = {
		.type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED,
		.requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
	};
	struct kvmm_cu_mem_access_desc acc = {{KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
					      KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	struct mark m = mark();
	kvmm_cu_mem_handle h = 0, h2 = 0;
	kvmm_cu_ptr va = 0, va2 = 0;
	unsigned char buf[64] = {1, 2, 3};
	int fd = -1, other;

	(void)state;
	assert_int_equal(d->cuMemAddressReserve(&va, GRAN + 4096, 0, 0, 0),
			 KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0), 0);
	assert_int_equal(va % GRAN, 0);
	assert_int_equal(d->cuMemCreate(&h, GRAN / 2, &prop, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemCreate(&h, GRAN, &prop, 0), 0);
	/* outside the reservation, straddling its end, not at a granule, bigger than the handle */
	assert_int_equal(d->cuMemAddressReserve(&va2, GRAN, 0, 0, 0), 0);
	assert_int_equal(d->cuMemAddressFree(va2, GRAN), 0);
	assert_int_equal(d->cuMemMap(va2, GRAN, 0, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemMap(va + 4096, GRAN, 0, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemMap(va, 2 * GRAN, 0, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemMap(va, GRAN, 0, h, 0), 0);
	assert_int_equal(d->cuMemMap(va, GRAN, 0, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	/* mapped but not yet accessible */
	assert_int_equal(d->cuMemcpyHtoD(va, buf, sizeof(buf)), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemSetAccess(va, 2 * GRAN, &acc, 1), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemSetAccess(va, GRAN, &acc, 1), 0);
	assert_int_equal(d->cuMemcpyHtoD(va + GRAN - sizeof(buf), buf, sizeof(buf)), 0);
	/* running off the mapping into reserved, unmapped addresses; an address never reserved */
	assert_int_equal(d->cuMemcpyHtoD(va + GRAN - 8, buf, sizeof(buf)),
			 KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemcpyDtoH(buf, va2, sizeof(buf)), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemsetD8(va + GRAN, 0, 1), KVMM_CUDA_ERROR_INVALID_VALUE);
	/* export, import: the same bytes at a second address */
	assert_int_equal(d->cuMemExportToShareableHandle(
				 &fd, h, KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			 0);
	assert_true(fd >= 0);
	assert_int_equal(
		d->cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)fd,
						  KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		0);
	assert_int_equal(d->cuMemMap(va + GRAN, GRAN, 0, h2, 0), 0);
	assert_int_equal(d->cuMemRelease(h2), 0);
	assert_int_equal(d->cuMemSetAccess(va + GRAN, GRAN, &acc, 1), 0);
	memset(buf, 0, sizeof(buf));
	dev_read(buf, va + 2 * GRAN - sizeof(buf), sizeof(buf));
	assert_int_equal(buf[0], 1);
	assert_int_equal(buf[2], 3);
	/* an fd that is not one of the driver's */
	other = memfd_create("not-cuda", MFD_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(ftruncate(other, (off_t)GRAN), 0);
	assert_int_equal(
		d->cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)other,
						  KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		KVMM_CUDA_ERROR_INVALID_VALUE);
	close(other);
	close(fd);
	/* release twice; free a range that is still mapped; unmap part of a mapping */
	assert_int_equal(d->cuMemRelease(h), 0);
	assert_int_equal(d->cuMemRelease(h), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemRelease(h2), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemAddressFree(va, 2 * GRAN), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(stats().allocs, m.s.allocs + 2); /* alive while mapped */
	assert_int_equal(d->cuMemUnmap(va, GRAN / 2), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemUnmap(va, 2 * GRAN), 0);
	assert_int_equal(d->cuMemAddressFree(va, GRAN), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemAddressFree(va, 2 * GRAN), 0);
	check_clean(&m);
}

/*
 * Part of an allocation mapped (offset and size in granules), as current drivers allow, and
 * read-only access: reads go through (a write would fault the context: itest_cuda_fake); a
 * driver that maps allocations whole ($KVMM_FAKECUDA_MAP_WHOLE) or has no read-only access
 * ($KVMM_FAKECUDA_NO_READONLY) refuses.
 */
static void test_fake_partial_ro(void **state)
{
	struct kvmm_cu_mem_alloc_prop prop = {
		.type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED,
		.requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
	};
	struct kvmm_cu_mem_access_desc rw = {{KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
					     KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	struct kvmm_cu_mem_access_desc ro = {{KVMM_CU_MEM_LOCATION_TYPE_DEVICE, 0},
					     KVMM_CU_MEM_ACCESS_FLAGS_PROT_READ};
	struct mark m = mark();
	kvmm_cu_mem_handle h = 0;
	kvmm_cu_ptr va = 0;
	unsigned char buf[16] = {7, 8, 9}, got[16];

	(void)state;
	assert_int_equal(d->cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0), 0);
	assert_int_equal(d->cuMemCreate(&h, 2 * GRAN, &prop, 0), 0);
	/* not at a granule, past the allocation's end; then the halves swapped */
	assert_int_equal(d->cuMemMap(va, GRAN, 4096, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemMap(va, 2 * GRAN, GRAN, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	setenv("KVMM_FAKECUDA_MAP_WHOLE", "1", 1);
	assert_int_equal(d->cuMemMap(va, GRAN, GRAN, h, 0), KVMM_CUDA_ERROR_INVALID_VALUE);
	unsetenv("KVMM_FAKECUDA_MAP_WHOLE");
	assert_int_equal(d->cuMemMap(va, GRAN, GRAN, h, 0), 0);
	assert_int_equal(d->cuMemMap(va + GRAN, GRAN, 0, h, 0), 0);
	assert_int_equal(d->cuMemRelease(h), 0);
	assert_int_equal(d->cuMemSetAccess(va, 2 * GRAN, &rw, 1), 0);
	/* the second half of the allocation is at va: seen through both mappings' order */
	assert_int_equal(d->cuMemcpyHtoD(va, buf, sizeof(buf)), 0);
	setenv("KVMM_FAKECUDA_NO_READONLY", "1", 1);
	assert_int_equal(d->cuMemSetAccess(va, GRAN, &ro, 1), KVMM_CUDA_ERROR_NOT_SUPPORTED);
	unsetenv("KVMM_FAKECUDA_NO_READONLY");
	/* one mapping read-only, alone: readable, the other still writable */
	assert_int_equal(d->cuMemSetAccess(va, GRAN, &ro, 1), 0);
	dev_read(got, va, sizeof(got));
	assert_memory_equal(got, buf, sizeof(buf));
	assert_int_equal(d->cuMemcpyHtoD(va + GRAN, buf, sizeof(buf)), 0);
	/* a range that cuts a mapping is refused */
	assert_int_equal(d->cuMemSetAccess(va, GRAN / 2, &rw, 1), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemSetAccess(va, GRAN, &rw, 1), 0);
	assert_int_equal(d->cuMemUnmap(va, 2 * GRAN), 0);
	assert_int_equal(d->cuMemAddressFree(va, 2 * GRAN), 0);
	check_clean(&m);
}

/* asynchronous work happens when waited for; racing streams are counted */
static void test_fake_streams(void **state)
{
	struct mark m = mark();
	kvmm_cu_stream s;
	kvmm_cu_event e0, e1;
	kvmm_cu_ptr p;
	unsigned char *pin, host[256];
	float ms = -1;

	(void)state;
	assert_int_equal(d->cuMemAlloc(&p, 4096), 0);
	assert_int_equal(d->cuMemHostAlloc((void **)&pin, 4096, KVMM_CU_MEMHOSTALLOC_PORTABLE), 0);
	assert_int_equal((uintptr_t)pin % 4096, 0);
	assert_int_equal(d->cuStreamCreate(&s, KVMM_CU_STREAM_NON_BLOCKING), 0);
	assert_int_equal(d->cuEventCreate(&e0, KVMM_CU_EVENT_DEFAULT), 0);
	assert_int_equal(d->cuEventCreate(&e1, KVMM_CU_EVENT_DEFAULT), 0);
	memset(host, 0, sizeof(host));
	dev_write(p, host, sizeof(host));
	memset(pin, 0x5a, 4096);
	assert_int_equal(d->cuEventRecord(e0, s), 0);
	assert_int_equal(d->cuMemcpyHtoDAsync(p, pin, 4096, s), 0);
	assert_int_equal(d->cuEventRecord(e1, s), 0);
	assert_int_equal(d->cuEventElapsedTime(&ms, e0, e1), FK_NOT_READY);
	assert_int_equal(stats().pending, 3);
	/* not waited for: still the old bytes, and reading them now is a race */
	dev_read(host, p, sizeof(host));
	assert_int_equal(host[0], 0);
	assert_int_equal(stats().races, m.s.races + 1);
	m.s.races++;
	assert_int_equal(d->cuEventSynchronize(e1), 0);
	dev_read(host, p, sizeof(host));
	assert_int_equal(host[255], 0x5a);
	assert_int_equal(d->cuEventElapsedTime(&ms, e0, e1), 0);
	assert_true(ms > 0 && ms < 1);
	/* a memset is queued on the legacy stream; a DtoD too */
	assert_int_equal(d->cuMemsetD8(p, 7, 16), 0);
	assert_int_equal(d->cuMemcpyDtoHAsync(pin, p, 16, NULL), 0);
	assert_int_equal(pin[0], 0x5a);
	assert_int_equal(d->cuStreamSynchronize(NULL), 0);
	assert_int_equal(pin[0], 7);
	/* pageable memory in an async copy is counted */
	assert_int_equal(d->cuMemcpyDtoHAsync(host, p, 16, s), 0);
	assert_int_equal(d->cuStreamSynchronize(s), 0);
	assert_int_equal(stats().pageable_async, m.s.pageable_async + 1);
	m.s.pageable_async++;
	/* handles that are not (any more) */
	assert_int_equal(d->cuStreamDestroy(s), 0);
	assert_int_equal(d->cuStreamSynchronize(s), FK_INVALID_HANDLE);
	assert_int_equal(d->cuEventDestroy(e0), 0);
	assert_int_equal(d->cuEventDestroy(e1), 0);
	assert_int_equal(d->cuMemFreeHost(pin), 0);
	assert_int_equal(d->cuMemFreeHost(pin), KVMM_CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(d->cuMemFree(p), 0);
	assert_int_equal(d->cuMemFree(p), KVMM_CUDA_ERROR_INVALID_VALUE);
	check_clean(&m);
}

/* no GPU code: the kernels say so; a forked child cannot use the parent's driver */
static void test_fake_no_kernels_no_fork(void **state)
{
	int status;
	pid_t pid;

	(void)state;
	assert_int_equal(kvmm_cuda_init(0), -ENODEV);
	assert_non_null(strstr(kvmm_cuda_why(), "cuModuleLoadData"));
	assert_non_null(strstr(kvmm_cuda_why(), "fake"));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(d->cuCtxSetCurrent(ctx) == 3 ? 0 : 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- several devices, in processes of their own ------------------------------------------- */

/*
 * KVMM_FAKECUDA_DEVICES and KVMM_FAKECUDA_VISIBLE are read at cuInit, once a process, so each
 * case runs in this program started again ("--child ROLE ARGS...") with its variables set; the
 * child checks with CHILD_CHECK (which says what failed, where, and the fake's last reason on
 * stderr) and exits 0 when all held.  fork and exec, not fork alone: a forked child of a process
 * that used the driver may not use it.
 */
static const char *child_role = "";

static int child_failed(int line, const char *what)
{
	struct kvmm_fakecuda_stats s;

	memset(&s, 0, sizeof(s));
	if (fk_stats)
		fk_stats(&s);
	fprintf(stderr, "test_cuda_fake --child %s: line %d: %s is false (the fake: %s)\n",
		child_role, line, what, s.last_error);
	return 1;
}

#define CHILD_CHECK(cond)                                     \
	do {                                                  \
		if (!(cond))                                  \
			return child_failed(__LINE__, #cond); \
	} while (0)

/* the fake's last refusal mentions @text */
static bool said(const char *text)
{
	return strstr(stats().last_error, text) != NULL;
}

/* "NAME=VALUE" strings for the child's environment, then NULL; argv[0] is filled in */
static int run_child(const char *const *env, const char **argv)
{
	int status;
	pid_t pid;

	argv[0] = self_exe;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		for (; *env; env++)
			putenv((char *)*env);
		execv(self_exe, (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* in a child: the fake through drv.c, as kvmm opens it, and its test hooks */
static int child_load(void)
{
	void *lib;

	d = kvmm_cuda_drv_load();
	if (!d) {
		fprintf(stderr, "test_cuda_fake --child %s: %s\n", child_role, kvmm_cuda_drv_why());
		return -1;
	}
	lib = dlopen(getenv("KVMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!lib)
		return -1;
	fk_stats = (kvmm_fakecuda_stats_fn)dlsym(lib, KVMM_FAKECUDA_STATS);
	fk_fail = (kvmm_fakecuda_fail_fn)dlsym(lib, KVMM_FAKECUDA_FAIL);
	dlclose(lib);
	return fk_stats && fk_fail ? 0 : -1;
}

/* nothing of the fake left alive in a child, and no race */
static bool child_clean(void)
{
	struct kvmm_fakecuda_stats s = stats();

	return !s.allocs && !s.handles && !s.reservations && !s.mappings && !s.dev_allocs &&
	       !s.host_allocs && !s.streams && !s.events && !s.ctx_refs && !s.pending && !s.races &&
	       !s.modules;
}

static struct kvmm_cu_mem_alloc_prop vmm_prop(int ordinal)
{
	struct kvmm_cu_mem_alloc_prop prop = {
		.type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED,
		.requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {KVMM_CU_MEM_LOCATION_TYPE_DEVICE, ordinal},
	};

	return prop;
}

static struct kvmm_cu_mem_access_desc rw_on(int ordinal)
{
	struct kvmm_cu_mem_access_desc acc = {{KVMM_CU_MEM_LOCATION_TYPE_DEVICE, ordinal},
					      KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

	return acc;
}

/* KVMM_FAKECUDA_DEVICES=2: two devices, their UUIDs, a context each, memory where asked */
static int child_devices(void)
{
	static const unsigned char uuid1[16] = {0x6b, 0x76, 0x6d, 0x6d, 0x2d, 0x66, 0x61, 0x6b,
						0x65, 0x63, 0x75, 0x64, 0x61, 0x2d, 0x64, 0x31};
	kvmm_cu_device d0, d1, dx;
	kvmm_cu_ctx c0, c1, again;
	kvmm_cu_uuid u[2];
	unsigned char want[16];
	kvmm_cu_ptr p0, p1;
	char name[2][64];
	size_t gran = 0;
	int n = 0, v;

	CHILD_CHECK(!child_load());
	CHILD_CHECK(stats().phys_devices == 2 && stats().devices == 2);
	CHILD_CHECK(d->cuDeviceGetCount(&n) == 0 && n == 2);
	CHILD_CHECK(d->cuDeviceGet(&dx, 2) == KVMM_CUDA_ERROR_INVALID_DEVICE);
	for (int i = 0; i < 2; i++) {
		struct kvmm_cu_mem_alloc_prop prop = vmm_prop(i);

		CHILD_CHECK(d->cuDeviceGet(&dx, i) == 0 && dx == i);
		CHILD_CHECK(d->cuDeviceGetUuid(&u[i], dx) == 0);
		kvmm_fakecuda_uuid(i, want);
		CHILD_CHECK(!memcmp(u[i].bytes, want, 16));
		CHILD_CHECK(d->cuDeviceGetName(name[i], sizeof(name[i]), dx) == 0);
		CHILD_CHECK(strstr(name[i], "fake") != NULL);
		v = 0;
		CHILD_CHECK(d->cuDeviceGetAttribute(
				    &v,
				    KVMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				    dx) == 0 &&
			    v == 1);
		CHILD_CHECK(d->cuDeviceGetAttribute(
				    &v, KVMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dx) ==
				    0 &&
			    v == 9);
		CHILD_CHECK(d->cuMemGetAllocationGranularity(
				    &gran, &prop, KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM) == 0 &&
			    gran == GRAN);
	}
	/* distinct, and the bytes fakecuda.h spells out */
	CHILD_CHECK(memcmp(u[0].bytes, u[1].bytes, 16) != 0);
	CHILD_CHECK(!memcmp(u[1].bytes, uuid1, 16));
	CHILD_CHECK(strcmp(name[0], name[1]) != 0);
	CHILD_CHECK(d->cuDeviceGetUuid(&u[0], 2) == KVMM_CUDA_ERROR_INVALID_DEVICE);
	CHILD_CHECK(d->cuDeviceGetAttribute(&v, KVMM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 2) ==
		    KVMM_CUDA_ERROR_INVALID_DEVICE);
	{
		struct kvmm_cu_mem_alloc_prop prop = vmm_prop(2);

		CHILD_CHECK(d->cuMemGetAllocationGranularity(
				    &gran, &prop, KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
			    KVMM_CUDA_ERROR_INVALID_DEVICE);
	}
	/* a primary context each, counted per device */
	CHILD_CHECK(kvmm_cuda_drv_get_device(0, &d0, &c0) == 0);
	CHILD_CHECK(kvmm_cuda_drv_get_device(1, &d1, &c1) == 0);
	CHILD_CHECK(c0 != c1 && stats().ctx_refs == 2);
	CHILD_CHECK(d->cuDevicePrimaryCtxRetain(&again, d0) == 0 && again == c0);
	CHILD_CHECK(d->cuDevicePrimaryCtxRelease(d0) == 0 && stats().ctx_refs == 2);
	/* cuMemAlloc: on the current context's device (device 1's was made current last) */
	CHILD_CHECK(d->cuMemAlloc(&p1, 4096) == 0);
	CHILD_CHECK(stats().dev_bytes[1] == 4096 && stats().dev_bytes[0] == 0);
	CHILD_CHECK(d->cuCtxSetCurrent(c0) == 0);
	CHILD_CHECK(d->cuMemAlloc(&p0, 8192) == 0);
	CHILD_CHECK(stats().dev_bytes[0] == 8192 && stats().dev_bytes[1] == 4096);
	CHILD_CHECK(d->cuMemFree(p1) == 0 && d->cuMemFree(p0) == 0);
	CHILD_CHECK(stats().dev_bytes[0] == 0 && stats().dev_bytes[1] == 0);
	/* device 1's context goes with its last reference; device 0's stays */
	kvmm_cuda_drv_put_device(d1);
	CHILD_CHECK(d->cuDevicePrimaryCtxRelease(d1) == 201);
	CHILD_CHECK(d->cuCtxSetCurrent(c1) == 201);
	CHILD_CHECK(d->cuCtxSetCurrent(c0) == 0 && stats().ctx_refs == 1);
	kvmm_cuda_drv_put_device(d0);
	CHILD_CHECK(child_clean());
	return 0;
}

/* a stream belongs to the context current at its creation; work on it only from there */
static int child_streams(void)
{
	const uint32_t image[4] = {0xba55ed50u}; /* the fatbin magic: SIMT mode's module */
	kvmm_cu_stream s0, b0;
	kvmm_cu_device d0, d1;
	kvmm_cu_ctx c0, c1;
	kvmm_cu_module mod;
	kvmm_cu_function fn;
	kvmm_cu_event e;
	unsigned char *pin, back[16];
	kvmm_cu_ptr p0;

	CHILD_CHECK(!child_load());
	CHILD_CHECK(kvmm_cuda_drv_get_device(1, &d1, &c1) == 0);
	CHILD_CHECK(kvmm_cuda_drv_get_device(0, &d0, &c0) == 0);
	CHILD_CHECK(d->cuMemAlloc(&p0, 4096) == 0);
	CHILD_CHECK(d->cuMemHostAlloc((void **)&pin, 4096, KVMM_CU_MEMHOSTALLOC_PORTABLE) == 0);
	memset(pin, 0x5a, 4096);
	CHILD_CHECK(d->cuStreamCreate(&s0, KVMM_CU_STREAM_NON_BLOCKING) == 0);
	CHILD_CHECK(d->cuStreamCreate(&b0, 0) == 0);
	CHILD_CHECK(d->cuModuleLoadData(&mod, image) == 0);
	CHILD_CHECK(d->cuModuleGetFunction(&fn, mod, "kvmm_copy_pages") == 0);
	/* device 1 current: device 0's streams take no work, and say why */
	CHILD_CHECK(d->cuCtxSetCurrent(c1) == 0);
	CHILD_CHECK(d->cuEventCreate(&e, KVMM_CU_EVENT_DEFAULT) == 0);
	CHILD_CHECK(d->cuMemcpyHtoDAsync(p0, pin, 4096, s0) == 201);
	CHILD_CHECK(said("cuMemcpyHtoDAsync") && said("belongs to device 0's context") &&
		    said("device 1's is current"));
	CHILD_CHECK(d->cuMemcpyDtoHAsync(pin, p0, 16, b0) == 201);
	CHILD_CHECK(d->cuMemcpyDtoDAsync(p0, p0 + 2048, 16, s0) == 201);
	CHILD_CHECK(d->cuEventRecord(e, s0) == 201);
	CHILD_CHECK(d->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, b0, NULL, NULL) == 201);
	CHILD_CHECK(said("cuLaunchKernel"));
	/* on its own legacy stream the launch gets as far as its (missing) arguments */
	CHILD_CHECK(d->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) ==
		    KVMM_CUDA_ERROR_INVALID_VALUE);
	CHILD_CHECK(stats().pending == 0);
	/* the legacy stream is the current context's: device 1 waiting leaves device 0's work */
	CHILD_CHECK(d->cuCtxSetCurrent(c0) == 0);
	CHILD_CHECK(d->cuMemsetD8(p0, 7, 16) == 0 && stats().pending == 1);
	CHILD_CHECK(d->cuCtxSetCurrent(c1) == 0);
	CHILD_CHECK(d->cuStreamSynchronize(NULL) == 0 && stats().pending == 1);
	CHILD_CHECK(d->cuCtxSynchronize() == 0 && stats().pending == 1);
	CHILD_CHECK(d->cuCtxSetCurrent(c0) == 0);
	CHILD_CHECK(d->cuStreamSynchronize(NULL) == 0 && stats().pending == 0);
	/* from its own context it works; waiting and destroying work from any context */
	CHILD_CHECK(d->cuMemcpyHtoDAsync(p0, pin, 16, s0) == 0 && stats().pending == 1);
	CHILD_CHECK(d->cuModuleUnload(mod) == 0);
	CHILD_CHECK(d->cuCtxSetCurrent(c1) == 0);
	CHILD_CHECK(d->cuStreamSynchronize(s0) == 0 && stats().pending == 0);
	CHILD_CHECK(d->cuStreamDestroy(s0) == 0 && d->cuStreamDestroy(b0) == 0);
	CHILD_CHECK(d->cuEventDestroy(e) == 0);
	CHILD_CHECK(d->cuCtxSetCurrent(c0) == 0);
	CHILD_CHECK(d->cuMemcpyDtoH(back, p0, sizeof(back)) == 0 && back[15] == 0x5a);
	CHILD_CHECK(d->cuMemFree(p0) == 0 && d->cuMemFreeHost(pin) == 0);
	kvmm_cuda_drv_put_device(d0);
	kvmm_cuda_drv_put_device(d1);
	CHILD_CHECK(child_clean());
	return 0;
}

/*
 * An importer: fd @argv[0] (an allocation of GRAN bytes of @argv[1]'s value) is imported, mapped
 * and read; access for ordinal @argv[2] works, for @argv[3] (if not -1) it is refused.  @argv[2]
 * -1: the import itself is refused (a device this process does not see).
 */
static int child_import(char **argv)
{
	int fd = atoi(argv[0]), val = atoi(argv[1]), good = atoi(argv[2]), bad = atoi(argv[3]);
	struct kvmm_cu_mem_access_desc acc;
	unsigned char buf[64];
	kvmm_cu_mem_handle h;
	kvmm_cu_device dv;
	kvmm_cu_ctx cx;
	kvmm_cu_ptr va;

	CHILD_CHECK(!child_load());
	if (good < 0) {
		CHILD_CHECK(d->cuMemImportFromShareableHandle(
				    &h, (void *)(uintptr_t)fd,
				    KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
			    KVMM_CUDA_ERROR_INVALID_DEVICE);
		CHILD_CHECK(said("does not see"));
		CHILD_CHECK(child_clean());
		return 0;
	}
	CHILD_CHECK(kvmm_cuda_drv_get_device(good, &dv, &cx) == 0);
	CHILD_CHECK(d->cuMemImportFromShareableHandle(
			    &h, (void *)(uintptr_t)fd,
			    KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0);
	CHILD_CHECK(d->cuMemAddressReserve(&va, GRAN, 0, 0, 0) == 0);
	CHILD_CHECK(d->cuMemMap(va, GRAN, 0, h, 0) == 0);
	CHILD_CHECK(d->cuMemRelease(h) == 0);
	if (bad >= 0) {
		acc = rw_on(bad);
		CHILD_CHECK(d->cuMemSetAccess(va, GRAN, &acc, 1) == KVMM_CUDA_ERROR_INVALID_DEVICE);
		CHILD_CHECK(said("no peer access"));
		/* nothing changed: still not accessible */
		CHILD_CHECK(d->cuMemcpyDtoH(buf, va, sizeof(buf)) == KVMM_CUDA_ERROR_INVALID_VALUE);
	}
	acc = rw_on(good);
	CHILD_CHECK(d->cuMemSetAccess(va, GRAN, &acc, 1) == 0);
	CHILD_CHECK(d->cuMemcpyDtoH(buf, va + GRAN - sizeof(buf), sizeof(buf)) == 0);
	CHILD_CHECK(buf[0] == val && buf[sizeof(buf) - 1] == val);
	CHILD_CHECK(d->cuMemUnmap(va, GRAN) == 0 && d->cuMemAddressFree(va, GRAN) == 0);
	kvmm_cuda_drv_put_device(dv);
	CHILD_CHECK(child_clean());
	return 0;
}

/*
 * KVMM_FAKECUDA_DEVICES=2: an allocation on each device, exported; other processes import
 * them and may give access only to the allocation's own device, whatever its ordinal there.
 */
static int child_export(void)
{
	static const char *const two[] = {"KVMM_FAKECUDA_DEVICES=2", NULL},
				 *const remapped[] = {"KVMM_FAKECUDA_DEVICES=2",
						      "KVMM_FAKECUDA_VISIBLE=1,0", NULL},
				 *const only0[] = {"KVMM_FAKECUDA_DEVICES=2",
						   "KVMM_FAKECUDA_VISIBLE=0", NULL};
	kvmm_cu_mem_handle h[2];
	kvmm_cu_ptr va;
	kvmm_cu_device dv[2];
	kvmm_cu_ctx cx[2];
	char fds[2][16], link[64], target[128];
	int fd[2];
	ssize_t n;

	CHILD_CHECK(!child_load());
	CHILD_CHECK(kvmm_cuda_drv_get_device(0, &dv[0], &cx[0]) == 0);
	CHILD_CHECK(kvmm_cuda_drv_get_device(1, &dv[1], &cx[1]) == 0);
	CHILD_CHECK(d->cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0) == 0);
	for (int i = 0; i < 2; i++) {
		struct kvmm_cu_mem_alloc_prop prop = vmm_prop(i);
		struct kvmm_cu_mem_access_desc acc = rw_on(1 - i);

		CHILD_CHECK(d->cuMemCreate(&h[i], GRAN, &prop, 0) == 0);
		CHILD_CHECK(stats().dev_bytes[i] == GRAN);
		CHILD_CHECK(d->cuMemMap(va + i * GRAN, GRAN, 0, h[i], 0) == 0);
		/* the other device: no peer access, here either */
		CHILD_CHECK(d->cuMemSetAccess(va + i * GRAN, GRAN, &acc, 1) ==
			    KVMM_CUDA_ERROR_INVALID_DEVICE);
		CHILD_CHECK(said("no peer access"));
		acc = rw_on(i);
		CHILD_CHECK(d->cuMemSetAccess(va + i * GRAN, GRAN, &acc, 1) == 0);
		CHILD_CHECK(d->cuCtxSetCurrent(cx[i]) == 0);
		CHILD_CHECK(d->cuMemsetD8(va + i * GRAN, (unsigned char)(0x10 + i), GRAN) == 0);
		CHILD_CHECK(d->cuCtxSynchronize() == 0);
		CHILD_CHECK(d->cuMemExportToShareableHandle(
				    &fd[i], h[i], KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    0) == 0);
		snprintf(fds[i], sizeof(fds[i]), "%d", fd[i]);
	}
	/* one descriptor for a range of both devices' mappings: refused, all or nothing */
	{
		struct kvmm_cu_mem_access_desc acc = rw_on(0);

		CHILD_CHECK(d->cuMemSetAccess(va, 2 * GRAN, &acc, 1) ==
			    KVMM_CUDA_ERROR_INVALID_DEVICE);
	}
	/* the exported fd names its physical device */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd[1]);
	n = readlink(link, target, sizeof(target) - 1);
	CHILD_CHECK(n > 0);
	target[n] = '\0';
	CHILD_CHECK(strstr(target, "memfd:kvmm-fakecuda-dev1") != NULL);
	/* device 1's memory: access on device 1 only; device 0's: device 0 only */
	CHILD_CHECK(run_child(two, (const char *[]){"", "--child", "import", fds[1], "17", "1", "0",
						    NULL}) == 0);
	CHILD_CHECK(run_child(two, (const char *[]){"", "--child", "import", fds[0], "16", "0", "1",
						    NULL}) == 0);
	/* where ordinal 0 is physical device 1, device 1's memory is ordinal 0's */
	CHILD_CHECK(run_child(remapped, (const char *[]){"", "--child", "import", fds[1], "17", "0",
							 "1", NULL}) == 0);
	CHILD_CHECK(run_child(remapped, (const char *[]){"", "--child", "import", fds[0], "16", "1",
							 "0", NULL}) == 0);
	/* a process that does not see device 1 cannot import its memory */
	CHILD_CHECK(run_child(only0, (const char *[]){"", "--child", "import", fds[1], "17", "-1",
						      "-1", NULL}) == 0);
	for (int i = 0; i < 2; i++) {
		close(fd[i]);
		CHILD_CHECK(d->cuMemRelease(h[i]) == 0);
	}
	CHILD_CHECK(d->cuMemUnmap(va, 2 * GRAN) == 0 && d->cuMemAddressFree(va, 2 * GRAN) == 0);
	CHILD_CHECK(stats().dev_bytes[0] == 0 && stats().dev_bytes[1] == 0);
	kvmm_cuda_drv_put_device(dv[0]);
	kvmm_cuda_drv_put_device(dv[1]);
	CHILD_CHECK(child_clean());
	return 0;
}

/* KVMM_FAKECUDA_VISIBLE: ordinal k is physical device argv[k] (UUID, memory, name) */
static int child_visible(int argc, char **argv)
{
	unsigned char want[16];
	kvmm_cu_uuid u;
	kvmm_cu_device dv;
	kvmm_cu_ctx cx;
	kvmm_cu_mem_handle h;
	kvmm_cu_ptr p;
	char name[64];
	int n = 0;

	CHILD_CHECK(!child_load());
	CHILD_CHECK(d->cuDeviceGetCount(&n) == 0 && n == argc);
	CHILD_CHECK(stats().devices == (uint64_t)argc);
	for (int i = 0; i < argc; i++) {
		int phys = atoi(argv[i]);
		struct kvmm_cu_mem_alloc_prop prop = vmm_prop(i);

		CHILD_CHECK(d->cuDeviceGetUuid(&u, i) == 0);
		kvmm_fakecuda_uuid(phys, want);
		CHILD_CHECK(!memcmp(u.bytes, want, 16));
		CHILD_CHECK(d->cuDeviceGetName(name, sizeof(name), i) == 0);
		CHILD_CHECK(phys == 0 || strstr(name, argv[i]));
		/* cuMemCreate for ordinal i and cuMemAlloc in its context: physical device phys */
		CHILD_CHECK(d->cuMemCreate(&h, GRAN, &prop, 0) == 0);
		CHILD_CHECK(stats().dev_bytes[phys] == GRAN);
		CHILD_CHECK(kvmm_cuda_drv_get_device(i, &dv, &cx) == 0);
		CHILD_CHECK(d->cuMemAlloc(&p, 4096) == 0);
		CHILD_CHECK(stats().dev_bytes[phys] == GRAN + 4096);
		CHILD_CHECK(d->cuMemFree(p) == 0 && d->cuMemRelease(h) == 0);
		CHILD_CHECK(stats().dev_bytes[phys] == 0);
		kvmm_cuda_drv_put_device(dv);
	}
	CHILD_CHECK(d->cuDeviceGetUuid(&u, argc) == KVMM_CUDA_ERROR_INVALID_DEVICE);
	CHILD_CHECK(child_clean());
	return 0;
}

/* cuInit of the fake, opened directly, fails (error 1) and its reason mentions @text */
static int child_refused(const char *text)
{
	kvmm_cu_result (*init)(unsigned int);
	kvmm_cu_result (*count)(int *);
	void *lib = dlopen(getenv("KVMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
	int n = -1;

	CHILD_CHECK(lib != NULL);
	init = (kvmm_cu_result(*)(unsigned int))dlsym(lib, "cuInit");
	count = (kvmm_cu_result(*)(int *))dlsym(lib, "cuDeviceGetCount");
	fk_stats = (kvmm_fakecuda_stats_fn)dlsym(lib, KVMM_FAKECUDA_STATS);
	CHILD_CHECK(init && count && fk_stats);
	CHILD_CHECK(init(0) == KVMM_CUDA_ERROR_INVALID_VALUE);
	CHILD_CHECK(said(text));
	CHILD_CHECK(count(&n) == 3 && n == -1); /* not initialised */
	dlclose(lib);
	return 0;
}

/* a device's copy of frame @fr of a group pool: write @src into it (@src NULL: read into @dst) */
static int member_frame(struct kvmm_backend_ctx *be, uint32_t k, uint32_t fr, const void *src,
			void *dst)
{
	kvmm_cu_ptr p = kvmm_cuda_backend_base_on(be, k) + (uint64_t)fr * be->page_size;

	return src ? d->cuMemcpyHtoD(p, src, be->page_size)
		   : d->cuMemcpyDtoH(dst, p, be->page_size);
}

/*
 * KVMM_FAKECUDA_DEVICES=3: the cuda backend over a tensor-parallel group {2, 0}: every device
 * holds every frame in chunks of its own, copy and scrub act on both, staging moves both
 * devices' bytes (member k's at k * page_size), members are found by UUID; a group naming a
 * missing device, or failing halfway through its second device, leaves nothing behind.
 */
static int child_backend_group(void)
{
	static const int group[] = {2, 0}, dup[] = {1, 1}, bad[] = {0, 3}, neg[] = {-1};
	static unsigned char a[2][64 << 10], b[64 << 10], host[2][64 << 10];
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be;
	unsigned char uuid[16], got[16];
	const int *fds;
	uint32_t nr, frames[1] = {3};
	uint64_t cs;
	int ord;

	CHILD_CHECK(child_load() == 0);
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, group, 0, 0) == -EINVAL);
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, dup, 2, 0) == -EINVAL);
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, neg, 1, 0) == -EINVAL);
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, group, KVMM_CUDA_MAX_DEVICES + 1, 0) ==
		    -EINVAL);

	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, group, 2, 4 * GRAN) == 0);
	memset(&be, 0, sizeof(be));
	be.ops = &cb.ops;
	CHILD_CHECK(be.ops->init(&be, 64 << 10, 200) == 0);
	CHILD_CHECK(be.nr_devices == 2);
	CHILD_CHECK(kvmm_cuda_backend_chunks(&be, &fds, &nr, &cs) == 0);
	CHILD_CHECK(nr == 2 && cs == 4 * GRAN); /* per device */
	for (uint32_t i = 0; i < 2 * nr; i++) {
		struct stat st;

		CHILD_CHECK(fstat(fds[i], &st) == 0 && (uint64_t)st.st_size == cs);
		for (uint32_t j = 0; j < i; j++)
			CHILD_CHECK(fds[i] != fds[j]);
	}
	CHILD_CHECK(stats().dev_bytes[2] == 2 * cs && stats().dev_bytes[0] == 2 * cs);
	CHILD_CHECK(stats().dev_bytes[1] == 0);
	for (int k = 0; k < 2; k++) {
		kvmm_fakecuda_uuid(group[k], uuid);
		CHILD_CHECK(kvmm_cuda_backend_member(&be, uuid) == k);
		CHILD_CHECK(kvmm_cuda_backend_device(&be, (uint32_t)k, &ord, got) == 0);
		CHILD_CHECK(ord == group[k] && !memcmp(got, uuid, 16));
		CHILD_CHECK(kvmm_cuda_backend_base_on(&be, (uint32_t)k) != 0);
	}
	kvmm_fakecuda_uuid(1, uuid);
	CHILD_CHECK(kvmm_cuda_backend_member(&be, uuid) == -ENODEV);
	CHILD_CHECK(kvmm_cuda_backend_device(&be, 2, &ord, got) == -EINVAL);
	CHILD_CHECK(kvmm_cuda_backend_base_on(&be, 2) == 0);
	CHILD_CHECK(kvmm_cuda_backend_base(&be) == kvmm_cuda_backend_base_on(&be, 0));

	/* each device's copy of frame 3 has its own bytes; copy-on-write copies both */
	for (uint32_t k = 0; k < 2; k++) {
		fill_random(a[k], sizeof(a[k]));
		CHILD_CHECK(member_frame(&be, k, 3, a[k], NULL) == 0);
	}
	CHILD_CHECK(be.ops->copy(&be, 7, 3, be.page_size) == 0);
	for (uint32_t k = 0; k < 2; k++) {
		CHILD_CHECK(member_frame(&be, k, 7, NULL, b) == 0);
		CHILD_CHECK(!memcmp(b, a[k], sizeof(b)));
	}
	/* staging: member k's copy at k * page_size of the frame's host bytes, and back */
	CHILD_CHECK(be.ops->copy_to_host(&be, host, frames, 1) == 0);
	CHILD_CHECK(be.ops->sync(&be) == 0);
	CHILD_CHECK(!memcmp(host[0], a[0], sizeof(b)) && !memcmp(host[1], a[1], sizeof(b)));
	frames[0] = 9;
	CHILD_CHECK(be.ops->copy_from_host(&be, frames, host, 1) == 0);
	CHILD_CHECK(be.ops->sync(&be) == 0);
	for (uint32_t k = 0; k < 2; k++) {
		CHILD_CHECK(member_frame(&be, k, 9, NULL, b) == 0);
		CHILD_CHECK(!memcmp(b, a[k], sizeof(b)));
	}
	/* scrub zeroes every device's copy */
	CHILD_CHECK(be.ops->scrub(&be, 7) == 0);
	for (uint32_t k = 0; k < 2; k++) {
		CHILD_CHECK(member_frame(&be, k, 7, NULL, b) == 0);
		for (size_t i = 0; i < sizeof(b); i++)
			CHILD_CHECK(b[i] == 0);
	}
	CHILD_CHECK(stats().races == 0);
	be.ops->fini(&be);
	CHILD_CHECK(child_clean());

	/* a group with a device that is not there: refused, nothing left of the first one */
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, bad, 2, 0) == 0);
	memset(&be, 0, sizeof(be));
	be.ops = &cb.ops;
	CHILD_CHECK(be.ops->init(&be, 64 << 10, 200) == -ENODEV);
	CHILD_CHECK(child_clean());
	/* the second device's first chunk fails: the first device's chunks go too */
	CHILD_CHECK(kvmm_cuda_backend_init_group(&cb, group, 2, 4 * GRAN) == 0);
	memset(&be, 0, sizeof(be));
	be.ops = &cb.ops;
	fk_fail("cuMemCreate", 3, KVMM_CUDA_ERROR_OUT_OF_MEMORY);
	CHILD_CHECK(be.ops->init(&be, 64 << 10, 200) == -ENOMEM);
	CHILD_CHECK(child_clean());
	return 0;
}

static int child_main(int argc, char **argv)
{
	child_role = argv[0];
	if (!strcmp(argv[0], "devices"))
		return child_devices();
	if (!strcmp(argv[0], "streams"))
		return child_streams();
	if (!strcmp(argv[0], "export"))
		return child_export();
	if (!strcmp(argv[0], "import") && argc == 5)
		return child_import(argv + 1);
	if (!strcmp(argv[0], "visible"))
		return child_visible(argc - 1, argv + 1);
	if (!strcmp(argv[0], "refused") && argc == 2)
		return child_refused(argv[1]);
	if (!strcmp(argv[0], "backend_group"))
		return child_backend_group();
	fprintf(stderr, "test_cuda_fake: no child role %s\n", argv[0]);
	return 2;
}

/* KVMM_FAKECUDA_DEVICES=2: count, UUIDs, names, attributes, contexts, memory per device */
static void test_fake_devices(void **state)
{
	static const char *const env[] = {"KVMM_FAKECUDA_DEVICES=2", NULL};

	(void)state;
	assert_int_equal(run_child(env, (const char *[]){"", "--child", "devices", NULL}), 0);
}

/* async work only on a stream of the current context; the legacy stream is the current one */
static void test_fake_stream_contexts(void **state)
{
	static const char *const env[] = {"KVMM_FAKECUDA_DEVICES=2", "KVMM_FAKECUDA_SIMT=1", NULL};

	(void)state;
	assert_int_equal(run_child(env, (const char *[]){"", "--child", "streams", NULL}), 0);
}

/* an exported fd keeps its device in other processes; access only for that device */
static void test_fake_peer_access(void **state)
{
	static const char *const env[] = {"KVMM_FAKECUDA_DEVICES=2", NULL};

	(void)state;
	assert_int_equal(run_child(env, (const char *[]){"", "--child", "export", NULL}), 0);
}

/* KVMM_FAKECUDA_VISIBLE remaps ordinals onto physical devices */
static void test_fake_visible(void **state)
{
	static const char *const swapped[] = {"KVMM_FAKECUDA_DEVICES=2",
					      "KVMM_FAKECUDA_VISIBLE=1,0", NULL},
				 *const one[] = {"KVMM_FAKECUDA_DEVICES=3",
						 "KVMM_FAKECUDA_VISIBLE=2", NULL},
				 *const all[] = {"KVMM_FAKECUDA_DEVICES=3", NULL};

	(void)state;
	assert_int_equal(
		run_child(swapped, (const char *[]){"", "--child", "visible", "1", "0", NULL}), 0);
	assert_int_equal(run_child(one, (const char *[]){"", "--child", "visible", "2", NULL}), 0);
	assert_int_equal(
		run_child(all, (const char *[]){"", "--child", "visible", "0", "1", "2", NULL}), 0);
}

/* bad values: cuInit refuses, saying why */
static void test_fake_bad_env(void **state)
{
	static const struct {
		const char *devices, *visible, *reason;
	} bad[] = {
		{"0", NULL, "1 to 8"},
		{"9", NULL, "1 to 8"},
		{"two", NULL, "KVMM_FAKECUDA_DEVICES=\"two\""},
		{"", NULL, "KVMM_FAKECUDA_DEVICES=\"\""},
		{"2 ", NULL, "1 to 8"},
		{NULL, "1", "no device 1"},
		{"2", "2", "no device 2"},
		{"2", "0,0", "device 0 is listed twice"},
		{"2", "0,,1", "item 2 is empty"},
		{"2", "1,", "item 2 is empty"},
		{"2", "", "item 1 is empty"},
		{"2", "-1", "item 1 is not a device index"},
		{"3", "0,1x", "item 2 is not a device index"},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char devices[64], visible[64];
		const char *env[3] = {NULL, NULL, NULL};
		int n = 0;

		if (bad[i].devices) {
			snprintf(devices, sizeof(devices), "KVMM_FAKECUDA_DEVICES=%s",
				 bad[i].devices);
			env[n++] = devices;
		}
		if (bad[i].visible) {
			snprintf(visible, sizeof(visible), "KVMM_FAKECUDA_VISIBLE=%s",
				 bad[i].visible);
			env[n++] = visible;
		}
		if (run_child(env,
			      (const char *[]){"", "--child", "refused", bad[i].reason, NULL})) {
			print_error(
				"KVMM_FAKECUDA_DEVICES=%s KVMM_FAKECUDA_VISIBLE=%s: not refused "
				"for \"%s\"\n",
				bad[i].devices ? bad[i].devices : "(unset)",
				bad[i].visible ? bad[i].visible : "(unset)", bad[i].reason);
			fail();
		}
	}
}

/* ---- the backend ------------------------------------------------------------------------------ */

static int be_init(struct kvmm_cuda_backend *cb, struct kvmm_backend_ctx *be, uint64_t ps,
		   uint32_t nframes, uint64_t chunk)
{
	kvmm_cuda_backend_init(cb, 0, chunk);
	memset(be, 0, sizeof(*be));
	be->ops = &cb->ops;
	return be->ops->init(be, ps, nframes);
}

/* pool create/destroy through the core; what the daemon passes to clients */
static void test_backend_pool(void **state)
{
	struct kvmm_pool_params p = {.page_size = 64 << 10, .nframes = 200};
	struct kvmm_cuda_backend cb;
	struct kvmm_pool *pool;
	struct mark m = mark();
	const int *fds;
	uint32_t nr;
	uint64_t cs;

	(void)state;
	kvmm_cuda_backend_init(&cb, 0, 4 * GRAN);
	p.backend = &cb.ops;
	assert_int_equal(kvmm_pool_create(&p, &pool), 0);
	assert_true(kvmm_is_cuda_backend(&pool->be));
	assert_int_equal(kvmm_cuda_backend_chunks(&pool->be, &fds, &nr, &cs), 0);
	assert_int_equal(cs, 4 * GRAN);
	assert_int_equal(nr, 2); /* 12.5 MiB in 8 MiB chunks, rounded up */
	for (uint32_t i = 0; i < nr; i++) {
		struct stat st;

		assert_int_equal(fstat(fds[i], &st), 0);
		assert_int_equal(st.st_size, cs);
		assert_true(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
	}
	assert_int_equal(kvmm_cuda_backend_base(&pool->be) % GRAN, 0);
	assert_null(kvmm_pool_frame_addr(pool, 0));
	assert_int_equal(stats().allocs, m.s.allocs + 2);
	assert_int_equal(stats().mappings, m.s.mappings + 2);
	assert_int_equal(stats().streams, m.s.streams + 1);
	kvmm_pool_destroy(pool);
	check_clean(&m);
	/* not a cuda backend */
	assert_int_equal(kvmm_cuda_backend_chunks(NULL, &fds, &nr, &cs), -EOPNOTSUPP);
}

/* chunks are whole pages and whole granules */
static void test_backend_chunk_rule(void **state)
{
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be;
	struct mark m = mark();
	uint32_t nr;
	uint64_t cs;

	(void)state;
	/* 96 KiB pages: lcm with 2 MiB is 6 MiB */
	assert_int_equal(be_init(&cb, &be, 96 << 10, 200, 0), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_int_equal(cs % (3 * GRAN), 0); /* 6 MiB */
	assert_int_equal(cs % (96 << 10), 0);
	assert_true((uint64_t)nr * cs >= 200ull * (96 << 10));
	be.ops->fini(&be);
	check_clean(&m);
	/* a pool of a whole GPU: larger chunks, so that every fd fits in one ATTACH reply */
	assert_int_equal(be_init(&cb, &be, 2 * GRAN, 10000, 0), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&be, NULL, &nr, &cs), 0);
	assert_true(nr <= KVMM_CUDA_DEFAULT_MAX_CHUNKS && nr > 64);
	assert_true((uint64_t)nr * cs >= 10000 * 2 * GRAN && cs % (2 * GRAN) == 0);
	be.ops->fini(&be);
	check_clean(&m);
	/* a chunk size that is no multiple of the granularity is refused at once */
	assert_int_equal(be_init(&cb, &be, 64 << 10, 100, GRAN + (64 << 10)), -EINVAL);
	assert_int_equal(be_init(&cb, &be, 64 << 10, 100, 96 << 10), -EINVAL);
	check_clean(&m);
}

#define RT_PAGE (UINT64_C(256) << 10)
#define RT_FRAMES 12U

/* staging in and out, copy-on-write, scrub, with random bytes */
static void test_backend_round_trip(void **state)
{
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be;
	struct mark m = mark();
	uint32_t all[RT_FRAMES], some[3] = {9, 2, 5};
	unsigned char *stage, *want, *got;
	uint64_t bytes = RT_FRAMES * RT_PAGE;
	kvmm_cu_ptr base;

	(void)state;
	for (uint32_t i = 0; i < RT_FRAMES; i++)
		all[i] = RT_FRAMES - 1 - i; /* frame list in reverse: lands in list order */
	assert_int_equal(be_init(&cb, &be, RT_PAGE, RT_FRAMES, 0), 0);
	base = kvmm_cuda_backend_base(&be);
	stage = be.ops->host_alloc(&be, bytes);
	want = malloc(bytes);
	got = malloc(bytes);
	assert_true(stage && want && got);
	assert_int_equal((uintptr_t)stage % 4096, 0);
	fill_random(stage, bytes);
	memcpy(want, stage, bytes);
	assert_int_equal(be.ops->copy_from_host(&be, all, stage, RT_FRAMES), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	dev_read(got, base, bytes);
	for (uint32_t i = 0; i < RT_FRAMES; i++)
		assert_memory_equal(got + all[i] * RT_PAGE, want + i * RT_PAGE, RT_PAGE);
	/* copy-on-write 3 -> 7 (part of a page), scrub 4 */
	memcpy(want, got, bytes); /* from now on: frame order */
	assert_int_equal(be.ops->copy(&be, 7, 3, RT_PAGE / 2), 0);
	memcpy(want + 7 * RT_PAGE, want + 3 * RT_PAGE, RT_PAGE / 2);
	assert_int_equal(be.ops->scrub(&be, 4), 0);
	memset(want + 4 * RT_PAGE, 0, RT_PAGE);
	assert_int_equal(stats().pending, 0); /* copy and scrub are synchronous */
	dev_read(got, base, bytes);
	assert_memory_equal(got, want, bytes);
	/* out to the host in any order; only after sync */
	memset(stage, 0xee, bytes);
	assert_int_equal(be.ops->copy_to_host(&be, stage, some, 3), 0);
	assert_int_equal(stage[0], 0xee);
	assert_int_equal(be.ops->sync(&be), 0);
	for (uint32_t i = 0; i < 3; i++)
		assert_memory_equal(stage + i * RT_PAGE, want + some[i] * RT_PAGE, RT_PAGE);
	/* a scrub right after a swap-out started still lets the swap-out read the old bytes */
	assert_int_equal(be.ops->copy_to_host(&be, stage, &some[0], 1), 0);
	assert_int_equal(be.ops->scrub(&be, some[0]), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	assert_memory_equal(stage, want + some[0] * RT_PAGE, RT_PAGE);
	/* bad frames */
	assert_int_equal(be.ops->copy(&be, RT_FRAMES, 0, RT_PAGE), -EINVAL);
	assert_int_equal(be.ops->copy(&be, 0, 1, RT_PAGE + 1), -EINVAL);
	assert_int_equal(be.ops->scrub(&be, RT_FRAMES), -EINVAL);
	some[1] = RT_FRAMES;
	assert_int_equal(be.ops->copy_to_host(&be, stage, some, 3), -EINVAL);
	assert_int_equal(be.ops->copy_from_host(&be, some, stage, 3), -EINVAL);
	assert_int_equal(be.ops->sync(&be), 0);
	be.ops->host_free(&be, stage, bytes);
	be.ops->fini(&be);
	free(want);
	free(got);
	check_clean(&m);
}

/* the client's path: the exported chunk fds imported and mapped again, onto the same bytes */
static void test_backend_export_import(void **state)
{
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be;
	struct kvmm_cuda_map *map;
	struct mark m = mark();
	unsigned char *a, *b;
	uint64_t cs, dp, bytes;
	const int *fds;
	uint32_t nr;

	(void)state;
	assert_int_equal(be_init(&cb, &be, 64 << 10, 200, 2 * GRAN), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&be, &fds, &nr, &cs), 0);
	assert_int_equal(nr, 4); /* 12.5 MiB in 4 MiB chunks */
	bytes = (uint64_t)nr * cs;
	a = malloc(bytes);
	b = malloc(bytes);
	assert_true(a && b);
	assert_int_equal(kvmm_cuda_map_fds(0, fds, nr, cs, &map, &dp), 0);
	assert_int_not_equal(dp, kvmm_cuda_backend_base(&be));
	fill_random(a, bytes);
	dev_write(dp, a, bytes);
	dev_read(b, kvmm_cuda_backend_base(&be), bytes);
	assert_memory_equal(a, b, bytes);
	kvmm_cuda_unmap(map);
	/*
	 * A chunk size that differs from the daemon's, a bad fd: refused, nothing left. (A
	 * smaller one only by drivers that map allocations whole: current ones map part of a
	 * chunk, so only the size in the ATTACH reply is right.)
	 */
	setenv("KVMM_FAKECUDA_MAP_WHOLE", "1", 1);
	assert_int_equal(kvmm_cuda_map_fds(0, fds, nr, cs / 2, &map, &dp), -EINVAL);
	unsetenv("KVMM_FAKECUDA_MAP_WHOLE");
	assert_int_equal(kvmm_cuda_map_fds(0, fds, nr, cs + 4096, &map, &dp), -EINVAL);
	assert_int_equal(kvmm_cuda_map_fds(0, (const int[]){fds[0], 0}, 2, cs, &map, &dp), -EINVAL);
	assert_int_equal(kvmm_cuda_map_fds(1, fds, nr, cs, &map, &dp), -ENODEV);
	be.ops->fini(&be);
	free(a);
	free(b);
	check_clean(&m);
}

/* a failure in any driver call of setup or mapping unwinds everything */
/* the backend over a group of devices (in a child: KVMM_FAKECUDA_DEVICES=3) */
static void test_backend_group(void **state)
{
	static const char *const env[] = {"KVMM_FAKECUDA_DEVICES=3", NULL};

	(void)state;
	assert_int_equal(run_child(env, (const char *[]){"", "--child", "backend_group", NULL}), 0);
}

static void test_backend_injected_failures(void **state)
{
	static const struct {
		const char *call;
		unsigned int nth;
	} setup_calls[] =
		{
			{"cuDevicePrimaryCtxRetain", 1},
			{"cuMemGetAllocationGranularity", 1},
			{"cuMemAddressReserve", 1},
			{"cuMemCreate", 1},
			{"cuMemCreate", 3},
			{"cuMemExportToShareableHandle", 2},
			{"cuMemMap", 3},
			{"cuMemSetAccess", 1},
			{"cuStreamCreate", 1},
		},
	  map_calls[] = {
		  {"cuMemAddressReserve", 1},
		  {"cuMemImportFromShareableHandle", 2},
		  {"cuMemMap", 3},
		  {"cuMemSetAccess", 1},
	  };
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be, good;
	struct kvmm_cuda_map *map;
	struct mark m = mark();
	const int *fds;
	uint64_t cs, dp;
	uint32_t nr;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(setup_calls); i++) {
		fk_fail(setup_calls[i].call, setup_calls[i].nth, KVMM_CUDA_ERROR_OUT_OF_MEMORY);
		assert_int_equal(be_init(&cb, &be, 64 << 10, 200, 2 * GRAN), -ENOMEM);
		assert_int_equal(stats().injected, m.s.injected + i + 1);
		check_clean(&m);
	}
	m = mark();
	assert_int_equal(be_init(&cb, &good, 64 << 10, 200, 2 * GRAN), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&good, &fds, &nr, &cs), 0);
	m = mark();
	for (size_t i = 0; i < ARRAY_SIZE(map_calls); i++) {
		fk_fail(map_calls[i].call, map_calls[i].nth, KVMM_CUDA_ERROR_OUT_OF_MEMORY);
		assert_int_equal(kvmm_cuda_map_fds(0, fds, nr, cs, &map, &dp), -ENOMEM);
		assert_non_null(strstr(kvmm_cuda_map_why(), map_calls[i].call));
		check_clean(&m);
	}
	good.ops->fini(&good);
}

/* ---- swap through the staging hooks, with the real core -------------------------------------- */

#define SW_PAGE 16384u
#define SW_FRAMES 64u
#define SW_MAXB 16u

struct fx {
	struct kvmm_cuda_backend cb;
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	struct mark m;
	char dir[64];
	char path[128];
	unsigned char want[SW_MAXB][SW_PAGE];
};

static kvmm_cu_ptr frame_dev(struct fx *f, uint32_t fr)
{
	return kvmm_cuda_backend_base(&f->pool->be) + (uint64_t)fr * SW_PAGE;
}

static int swap_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct kvmm_pool_params p = {.page_size = SW_PAGE, .nframes = SW_FRAMES};

	if (!f)
		return -1;
	f->m = mark();
	kvmm_cuda_backend_init(&f->cb, 0, 0);
	p.backend = &f->cb.ops;
	if (kvmm_pool_create(&p, &f->pool) || kvmm_ns_create(f->pool, "t", 0, 0, &f->ns) ||
	    kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP32}, SW_PAGE) ||
	    kvmm_aspace_create(f->pool, f->ns, &f->fmt, NULL, &f->as))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvmm-cuda-fake.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/swapfile", f->dir);
	*state = f;
	return 0;
}

static int swap_teardown(void **state)
{
	struct fx *f = *state;
	struct mark m = f->m;

	kvmm_pool_destroy(f->pool);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	check_clean(&m);
	return 0;
}

/* @nb full blocks of distinct tokens, every page random bytes written on the "device" */
static struct kvmm_seq *mkseq(struct fx *f, uint32_t nb, uint32_t base)
{
	uint32_t tpp = f->fmt.tokens_per_page;
	uint32_t *tok = calloc((size_t)nb * tpp, sizeof(*tok));
	struct kvmm_seq *seq;

	assert_non_null(tok);
	for (uint32_t i = 0; i < nb * tpp; i++)
		tok[i] = base + i;
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, nb * tpp, tok), 0);
	for (uint32_t b = 0; b < nb; b++) {
		fill_random(f->want[b], SW_PAGE);
		dev_write(frame_dev(f, kvmm_mm_seq_frame(seq, b)), f->want[b], SW_PAGE);
	}
	free(tok);
	return seq;
}

static void check_bytes(struct fx *f, struct kvmm_seq *seq, uint32_t nb)
{
	static unsigned char got[SW_PAGE];

	for (uint32_t b = 0; b < nb; b++) {
		uint32_t fr = kvmm_mm_seq_frame(seq, b);

		assert_int_not_equal(fr, KVMM_FRAME_NONE);
		dev_read(got, frame_dev(f, fr), SW_PAGE);
		assert_memory_equal(got, f->want[b], SW_PAGE);
	}
}

/* scribble over every frame not in use, so only a real copy brings bytes back */
static void poison_free(struct fx *f)
{
	for (uint32_t fr = 0; fr < SW_FRAMES; fr++)
		if (f->pool->pages[fr].state != KVMM_PAGE_MAPPED &&
		    f->pool->pages[fr].state != KVMM_PAGE_CACHED)
			assert_int_equal(d->cuMemsetD8(frame_dev(f, fr), 0xa5, SW_PAGE), 0);
	assert_int_equal(d->cuCtxSynchronize(), 0);
}

static void swap_roundtrip(struct fx *f, uint32_t nb)
{
	struct kvmm_seq *seq = mkseq(f, nb, 1);
	uint64_t copies = stats().copies;

	assert_int_equal(kvmm_mm_seq_swap_out(seq, 0, nb), (int)nb);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_nr_swapped(seq), nb);
	assert_int_equal(stats().pending, 0);
	assert_true(stats().copies - copies >= nb);
	poison_free(f);
	assert_int_equal(kvmm_swap_set_readahead(f->pool, 0), 0);
	assert_int_equal(kvmm_mm_seq_fault(seq, 0, nb), (int)nb);
	check_inv(f->pool);
	check_bytes(f, seq, nb);
	kvmm_mm_seq_free(seq);
	check_inv(f->pool);
}

static void test_swap_host_tier(void **state)
{
	struct fx *f = *state;
	struct kvmm_swap_tier_params p = {.tier = 1, .priority = 10, .size = 32 * SW_PAGE};
	uint64_t pinned = stats().host_allocs;

	assert_int_equal(kvmm_swapon(f->pool, &kvmm_swap_host_ops, &p), 0);
	/* the tier's arena is pinned memory from the backend */
	assert_int_equal(stats().host_allocs, pinned + 1);
	swap_roundtrip(f, SW_MAXB);
	swap_roundtrip(f, 5);
	assert_int_equal(kvmm_swapoff(f->pool, 1), 0);
	assert_int_equal(stats().host_allocs, pinned);
}

static void test_swap_nvme_tier(void **state)
{
	struct fx *f = *state;

	assert_int_equal(swapon_nvme(f->pool, 2, 0, 32, SW_PAGE, f->path, 4), 0);
	/* more pages than staging buffers: each reused only after its copy was waited for */
	swap_roundtrip(f, SW_MAXB);
	assert_int_equal(kvmm_swapoff(f->pool, 2), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest fake_tests[] = {
		cmocka_unit_test(test_fake_loads),
		cmocka_unit_test(test_fake_vmm_checks),
		cmocka_unit_test(test_fake_partial_ro),
		cmocka_unit_test(test_fake_streams),
		cmocka_unit_test(test_fake_no_kernels_no_fork),
		cmocka_unit_test(test_fake_devices),
		cmocka_unit_test(test_fake_stream_contexts),
		cmocka_unit_test(test_fake_peer_access),
		cmocka_unit_test(test_fake_visible),
		cmocka_unit_test(test_fake_bad_env),
	};
	const struct CMUnitTest backend_tests[] = {
		cmocka_unit_test(test_backend_pool),
		cmocka_unit_test(test_backend_chunk_rule),
		cmocka_unit_test(test_backend_round_trip),
		cmocka_unit_test(test_backend_export_import),
		cmocka_unit_test(test_backend_injected_failures),
		cmocka_unit_test(test_backend_group),
		cmocka_unit_test_setup_teardown(test_swap_host_tier, swap_setup, swap_teardown),
		cmocka_unit_test_setup_teardown(test_swap_nvme_tier, swap_setup, swap_teardown),
	};
	ssize_t n;
	int ret;

	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = '\0';
	if (argc >= 3 && !strcmp(argv[1], "--child"))
		return child_main(argc - 2, argv + 2);
	ret = cmocka_run_group_tests_name("fakecuda", fake_tests, group_setup, NULL);
	ret |= cmocka_run_group_tests_name("cuda_backend", backend_tests, backend_setup,
					   group_teardown);
	return ret;
}
