// SPDX-License-Identifier: MIT
/*
 * tests/fakecuda/fakecuda.c - libcuda-fake.so, kvmm's own test double of the CUDA driver: every
 * entry point kernels/cuda/drv.c loads, with the driver's names and ABI (the types of
 * kernels/cuda/cuda_drv.h), backed by host memory, so that the host-side CUDA code (kvmmd's
 * cuda backend, libkvmm's mapping of its pool, swap staging) runs where there is no GPU.  Tests
 * select it with $KVMM_LIBCUDA; nothing in kvmm knows it exists.
 *
 * Fake devices (one by default, KVMM_FAKECUDA_DEVICES=N up to 8, each a "physical" device with
 * a UUID that is the same in every process; KVMM_FAKECUDA_VISIBLE=LIST chooses and orders the
 * ones this process sees, as CUDA_VISIBLE_DEVICES does), each with its own primary context,
 * whose "device memory" is host memory: cuMemCreate is a memfd of the size, named for its
 * physical device (memfd:kvmm-fakecuda-dev1), exporting it as a POSIX fd a dup of that memfd,
 * importing one a dup again, on the device its name says (which must be visible here); a
 * reservation (cuMemAddressReserve) is a PROT_NONE mapping, cuMemMap maps the memfd over it
 * (MAP_SHARED|MAP_FIXED, still inaccessible) and cuMemSetAccess makes it read-write.  A
 * CUdeviceptr is therefore a host address, and two processes that map the same exported fd see
 * the same bytes, as two processes mapping one GPU allocation do.  cuMemAlloc (on the current
 * context's device) and cuMemHostAlloc are aligned host allocations.  No peer access is
 * modelled: cuMemSetAccess for a device other than the allocation's is refused, which is what
 * catches a process mapping one group member's memory for another GPU.  No GPU code runs:
 * cuModuleLoadData says "no kernel image for this device", so the kernels skip.
 *
 * The point of a double is to fail where the real driver would, so each call checks what our
 * code could get wrong: sizes and addresses against the 2 MiB granularity, a mapping inside a
 * reservation and over nothing already mapped, handles live (a second release is refused),
 * device ranges of copies wholly mapped and made accessible (refused, never a segfault), a
 * current context for the calls that need one, work queued on a stream only while the stream's
 * context is current (a stream belongs to the context current at its creation; the legacy
 * stream is the current context's), and no use after fork (a child of a process that
 * initialised the driver is refused, like the real one).  Streams are queues for real:
 * asynchronous copies and memsets (and cuMemcpyDtoD and cuMemsetD8, which the driver does not
 * wait for either) happen only when something waits for them (stream, event or context
 * synchronisation, a synchronous copy, a free), so code that forgets to wait reads stale
 * bytes.  A context's legacy stream and its blocking streams form one queue; every non-blocking
 * stream is its own, and an operation touching memory that an unfinished operation of another
 * queue writes (or writing what it touches) counts as a race.  Live objects are counted for
 * leak checks (fakecuda.h); KVMM_FAKECUDA_FAIL injects a failure into the Nth call of an entry.
 * Event times come from a simulated clock (100 GB/s plus 2 us an operation), plausible and
 * deterministic.  One mutex serialises everything; the current context is per thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cuda/cuda_drv.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/simt.h"

#define API __attribute__((visibility("default")))

/* results cuda_drv.h has no name for (values from cuda.h) */
enum {
	FK_NOT_INITIALIZED = 3,
	FK_INVALID_CONTEXT = 201,
	FK_INVALID_HANDLE = 400,
	FK_NOT_FOUND = 500,
	FK_NOT_READY = 600,
	FK_LAUNCH_OUT_OF_RESOURCES = 701,
	FK_LAUNCH_FAILED = 719,
};

#define FATBIN_MAGIC 0xba55ed50u /* what cuModuleLoadData accepts in SIMT mode */
#define LAUNCH_ARGS_MAX 512	 /* the largest kernel argument struct (272 now) */

#define GRAN ((size_t)KVMM_FAKECUDA_GRANULARITY)
#define MEMFD_NAME "kvmm-fakecuda-dev" /* and the physical device: kvmm-fakecuda-dev1 */
#define MAX_DEVS KVMM_FAKECUDA_MAX_DEVICES
#define MAX_PENDING 4096 /* past this the "device" catches up: all queues are carried out */
#define HOST_ALIGN 4096
#define DEV_ALIGN 512

/* a physical allocation: cuMemCreate, or an imported fd */
struct fk_alloc {
	struct fk_alloc *next;
	kvmm_cu_mem_handle id;
	int fd;
	size_t size;
	int phys;      /* the physical device it is memory of */
	bool released; /* its handle is gone; alive while mapped */
	bool imported;
	unsigned int maps;
};

enum fk_kind {
	FK_RESERVE,
	FK_MAP,
	FK_DEVALLOC
};

/* a range of device addresses */
struct fk_range {
	struct fk_range *next;
	enum fk_kind kind;
	uintptr_t va;
	size_t size;
	struct fk_alloc *alloc; /* FK_MAP */
	bool access;		/* FK_MAP: after cuMemSetAccess; FK_DEVALLOC: always */
	bool ro;		/* FK_MAP: cuMemSetAccess PROT_READ: the device may not write */
	void *mem;		/* FK_DEVALLOC */
	int phys;		/* FK_DEVALLOC: the physical device */
};

struct fk_host {
	struct fk_host *next;
	char *p;
	size_t size;
};

/* a device's primary context (one a device, fk.ctx[] by ordinal) */
struct CUctx_st {
	int dev;  /* its ordinal in this process, also the number of its legacy queue */
	int phys; /* the physical device */
	unsigned int refs;
};

struct CUstream_st {
	struct CUstream_st *next;
	struct CUctx_st *ctx; /* current at its creation: work is queued only while it is */
	unsigned int flags;
	unsigned int queue; /* its context's legacy queue (ctx->dev), or its own */
};

struct CUevent_st {
	struct CUevent_st *next;
	bool recorded, done;
	unsigned int queue;
	uint64_t t_ns; /* simulated clock when it completed */
};

/* a kernel launch queued on a stream (SIMT mode) */
struct fk_launch {
	const struct simt_kernel *k;
	struct simt_dim3 grid, block;
	unsigned int smem;
	unsigned char args[LAUNCH_ARGS_MAX] __attribute__((aligned(16)));
};

/* an operation queued on a stream */
struct fk_op {
	struct fk_op *next;
	struct CUctx_st *ctx; /* its stream's */
	unsigned int queue;
	char *dst;	 /* NULL for an event or a launch */
	const char *src; /* NULL for a memset */
	size_t n;
	unsigned char val;
	struct CUevent_st *ev;
	struct fk_launch *launch;
};

/* the module handle of SIMT mode (there is one module: kernels/cuda/module.cu) */
struct CUmod_st {
	unsigned int loads;
};

static struct {
	pthread_mutex_t lock;
	bool init;
	pid_t pid;		       /* the process that called cuInit */
	int nphys;		       /* physical devices (KVMM_FAKECUDA_DEVICES) */
	int ndev;		       /* ordinals this process sees (KVMM_FAKECUDA_VISIBLE) */
	int phys[MAX_DEVS];	       /* ordinal -> physical device */
	struct CUctx_st ctx[MAX_DEVS]; /* primary contexts, by ordinal */
	struct fk_alloc *allocs;
	struct fk_range *ranges;
	struct fk_host *hosts;
	struct CUstream_st *streams;
	struct CUevent_st *events;
	struct fk_op *ops, **ops_tail;
	unsigned int next_queue; /* 0 to MAX_DEVS - 1 are the contexts' legacy queues */
	kvmm_cu_mem_handle next_id;
	uint64_t mem_total, sim_ns;  /* mem_total: each device's */
	uint64_t mem_used[MAX_DEVS]; /* by physical device; imports not counted */
	struct kvmm_fakecuda_stats st;
	bool verbose;
	bool simt; /* KVMM_FAKECUDA_SIMT=1: modules load and kernels run (simt.c) */
	struct CUmod_st mod;
	kvmm_cu_result sticky; /* a kernel failed: the context is unusable, as on a GPU */
	char sticky_why[256];
	char fail_call[64];
	unsigned int fail_nth;
	int fail_result;
} fk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.ops_tail = &fk.ops,
	.next_queue = MAX_DEVS - 1,
	.next_id = 0x1000,
};

static __thread struct CUctx_st *cur_ctx;

/* ---- bookkeeping --------------------------------------------------------------------------- */

static kvmm_cu_result refuse(kvmm_cu_result r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static kvmm_cu_result refuse(kvmm_cu_result r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(fk.st.last_error, sizeof(fk.st.last_error), fmt, ap);
	va_end(ap);
	fk.st.refused++;
	if (fk.verbose)
		fprintf(stderr, "fakecuda[%d]: refused (%d): %s\n", (int)getpid(), r,
			fk.st.last_error);
	return r;
}

static bool overlap(const char *a, size_t an, const char *b, size_t bn)
{
	return an && bn && a < b + bn && b < a + an;
}

/* the op about to run in @queue conflicts with an unfinished op of another queue */
static void check_race(unsigned int queue, const char *dst, const char *src, size_t n)
{
	for (struct fk_op *o = fk.ops; o; o = o->next) {
		if (o->queue == queue || !o->dst)
			continue;
		if (overlap(dst, n, o->dst, o->n) || (dst && overlap(dst, n, o->src, o->n)) ||
		    overlap(src, n, o->dst, o->n)) {
			fk.st.races++;
			snprintf(fk.st.last_error, sizeof(fk.st.last_error),
				 "race: an operation of queue %u touches %zu bytes at %p while one "
				 "of "
				 "queue %u on %p is unfinished",
				 queue, n, (const void *)(dst ? dst : src), o->queue,
				 (void *)o->dst);
			if (fk.verbose)
				fprintf(stderr, "fakecuda[%d]: %s\n", (int)getpid(),
					fk.st.last_error);
			return;
		}
	}
}

static void run_launch(const struct fk_launch *l)
{
	char why[256];

	if (fk.sticky)
		return; /* the GPU runs nothing more once a kernel has faulted */
	if (simt_launch(l->k, l->grid, l->block, l->smem, l->args, why, sizeof(why))) {
		fk.sticky = FK_LAUNCH_FAILED;
		snprintf(fk.sticky_why, sizeof(fk.sticky_why), "%s", why);
		/* loud whatever KVMM_FAKECUDA_VERBOSE says: a kernel bug, not a refused call */
		fprintf(stderr, "fakecuda[%d]: kernel failed: %s\n", (int)getpid(), why);
	}
	fk.st.launches++;
	fk.sim_ns += 5000;
}

static void run_op(struct fk_op *o)
{
	if (o->launch)
		run_launch(o->launch);
	if (o->dst && o->src)
		memmove(o->dst, o->src, o->n);
	else if (o->dst)
		memset(o->dst, o->val, o->n);
	if (o->dst) {
		fk.st.copies++;
		fk.st.copy_bytes += o->n;
		fk.sim_ns += 2000 + o->n / 100;
	}
	if (o->ev) {
		o->ev->done = true;
		o->ev->t_ns = fk.sim_ns;
	}
}

/* carry out, in order, the ops of @ctx (of @queue when @ctx is NULL; all when @all) */
static void flush_ops(unsigned int queue, const struct CUctx_st *ctx, bool all)
{
	struct fk_op **pp = &fk.ops;

	while (*pp) {
		struct fk_op *o = *pp;

		if (!all && (ctx ? o->ctx != ctx : o->queue != queue)) {
			pp = &o->next;
			continue;
		}
		*pp = o->next;
		run_op(o);
		free(o->launch);
		free(o);
		fk.st.pending--;
	}
	for (pp = &fk.ops; *pp; pp = &(*pp)->next)
		;
	fk.ops_tail = pp;
}

/* carry out the ops of @queue (all queues when @all), in order */
static void flush(unsigned int queue, bool all)
{
	flush_ops(queue, NULL, all);
}

/* the current context's legacy queue (a call that needs a context: there is one) */
static unsigned int legacy_queue(void)
{
	return cur_ctx ? (unsigned int)cur_ctx->dev : 0;
}

static kvmm_cu_result enqueue_op(unsigned int queue, char *dst, const char *src, size_t n,
				 unsigned char val, struct CUevent_st *ev, struct fk_launch *launch)
{
	struct fk_op *o;

	if (fk.st.pending >= MAX_PENDING)
		flush(0, true);
	o = calloc(1, sizeof(*o));
	if (!o)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "no memory to queue an operation");
	if (dst)
		check_race(queue, dst, src, n);
	*o = (struct fk_op){.ctx = cur_ctx, /* the stream's: checked by stream_for_work() */
			    .queue = queue,
			    .dst = dst,
			    .src = src,
			    .n = n,
			    .val = val,
			    .ev = ev,
			    .launch = launch};
	*fk.ops_tail = o;
	fk.ops_tail = &o->next;
	fk.st.pending++;
	return KVMM_CUDA_SUCCESS;
}

static kvmm_cu_result enqueue(unsigned int queue, char *dst, const char *src, size_t n,
			      unsigned char val, struct CUevent_st *ev)
{
	return enqueue_op(queue, dst, src, n, val, ev, NULL);
}

static struct fk_range *find_range(uintptr_t va, enum fk_kind kind)
{
	for (struct fk_range *r = fk.ranges; r; r = r->next)
		if (r->kind == kind && va >= r->va && va - r->va < r->size)
			return r;
	return NULL;
}

static struct fk_range *add_range(enum fk_kind kind, uintptr_t va, size_t size)
{
	struct fk_range *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->kind = kind;
	r->va = va;
	r->size = size;
	r->next = fk.ranges;
	fk.ranges = r;
	return r;
}

static void del_range(struct fk_range *r)
{
	for (struct fk_range **pp = &fk.ranges; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			free(r);
			return;
		}
	}
}

/*
 * [p, p + n) is device memory this process may touch (accessible mappings or cuMemAlloc), and
 * write with @write: 0, else 1 (a byte at *bad is not mapped), 2 (*bad is mapped without
 * access), 3 (a bad range) or 4 (a write and *bad is mapped read-only)
 */
static int dev_check(uintptr_t p, size_t n, bool write, uintptr_t *bad)
{
	uintptr_t cur = p, end;

	if (!p || __builtin_add_overflow(cur, n, &end))
		return 3;
	while (cur < end) {
		struct fk_range *r = find_range(cur, FK_MAP);

		if (!r)
			r = find_range(cur, FK_DEVALLOC);
		*bad = cur;
		if (!r)
			return 1;
		if (!r->access)
			return 2;
		if (write && r->ro)
			return 4;
		cur = r->va + r->size < end ? r->va + r->size : end;
	}
	return 0;
}

static kvmm_cu_result dev_ok(kvmm_cu_ptr p, size_t n, bool write, const char *what)
{
	uintptr_t bad = 0;

	switch (dev_check((uintptr_t)p, n, write, &bad)) {
	case 0:
		return KVMM_CUDA_SUCCESS;
	case 1:
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "%s: device address 0x%llx is not mapped (range 0x%llx + %zu)", what,
			      (unsigned long long)bad, (unsigned long long)p, n);
	case 2:
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "%s: device address 0x%llx is mapped but cuMemSetAccess was not "
			      "called for it",
			      what, (unsigned long long)bad);
	case 4:
		/*
		 * The GPU's MMU faults on a write into a read-only mapping: the context is lost
		 * (sticky), as after a kernel's illegal address; the bytes stay as they were.
		 */
		fk.sticky = KVMM_CUDA_ERROR_ILLEGAL_ADDRESS;
		snprintf(fk.sticky_why, sizeof(fk.sticky_why),
			 "%s wrote device address 0x%llx, mapped read-only", what,
			 (unsigned long long)bad);
		fprintf(stderr, "fakecuda[%d]: %s\n", (int)getpid(), fk.sticky_why);
		return refuse(KVMM_CUDA_ERROR_ILLEGAL_ADDRESS, "%s", fk.sticky_why);
	default:
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "%s: bad device range 0x%llx + %zu",
			      what, (unsigned long long)p, n);
	}
}

/* simt_check_global: what a kernel's cp.async reads (called under the lock, in a flush) */
static int kernel_readable(const void *p, size_t n)
{
	uintptr_t bad;

	return dev_check((uintptr_t)p, n, false, &bad) ? -1 : 0;
}

static bool is_pinned(const void *p, size_t n)
{
	for (struct fk_host *h = fk.hosts; h; h = h->next)
		if ((const char *)p >= h->p && (const char *)p + n <= h->p + h->size)
			return true;
	return false;
}

static void free_alloc(struct fk_alloc *a)
{
	for (struct fk_alloc **pp = &fk.allocs; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	close(a->fd);
	if (!a->imported)
		fk.mem_used[a->phys] -= a->size;
	fk.st.allocs--;
	fk.st.alloc_bytes -= a->size;
	free(a);
}

static struct fk_alloc *find_alloc(kvmm_cu_mem_handle h)
{
	for (struct fk_alloc *a = fk.allocs; a; a = a->next)
		if (a->id == h && !a->released)
			return a;
	return NULL;
}

static struct CUstream_st *find_stream(kvmm_cu_stream s)
{
	for (struct CUstream_st *x = fk.streams; x; x = x->next)
		if (x == s)
			return x;
	return NULL;
}

static struct CUevent_st *find_event(kvmm_cu_event e)
{
	for (struct CUevent_st *x = fk.events; x; x = x->next)
		if (x == e)
			return x;
	return NULL;
}

/*
 * The queue of stream @s (NULL and the legacy/per-thread handles: the current context's legacy
 * queue); its context in *@ctx if @ctx.
 */
static kvmm_cu_result stream_queue(kvmm_cu_stream s, unsigned int *queue, struct CUctx_st **ctx)
{
	struct CUstream_st *x;

	if ((uintptr_t)s <= 2) { /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
		*queue = legacy_queue();
		if (ctx)
			*ctx = cur_ctx;
		return KVMM_CUDA_SUCCESS;
	}
	x = find_stream(s);
	if (!x)
		return refuse(FK_INVALID_HANDLE, "stream %p does not exist", (void *)s);
	*queue = x->queue;
	if (ctx)
		*ctx = x->ctx;
	return KVMM_CUDA_SUCCESS;
}

/*
 * The queue of stream @s, to put work on: only while the stream's context is current.  The
 * driver runs work on the context it is issued in, so code that forgot to make the device
 * current first would run it on the wrong GPU; the fake refuses it instead (waiting for and
 * destroying a stream work from any context).
 */
static kvmm_cu_result stream_for_work(kvmm_cu_stream s, unsigned int *queue, const char *what)
{
	struct CUctx_st *ctx = NULL;
	kvmm_cu_result r = stream_queue(s, queue, &ctx);

	if (r || ctx == cur_ctx)
		return r;
	return refuse(FK_INVALID_CONTEXT,
		      "%s: stream %p belongs to device %d's context, but device %d's is current "
		      "(make the stream's device current first)",
		      what, (void *)s, ctx->dev, cur_ctx->dev);
}

/* ---- entry and exit of every call ------------------------------------------------------------ */

static void fail_arm(const char *call, unsigned int nth, int result)
{
	snprintf(fk.fail_call, sizeof(fk.fail_call), "%s", call ? call : "");
	fk.fail_nth = call ? nth : 0;
	fk.fail_result = result;
}

static kvmm_cu_result fk_enter(const char *call, bool need_init, bool need_ctx)
{
	pthread_mutex_lock(&fk.lock);
	if (fk.fail_nth && !strcmp(call, fk.fail_call) && !--fk.fail_nth) {
		fk.st.injected++;
		snprintf(fk.st.last_error, sizeof(fk.st.last_error), "%s: injected failure %d",
			 call, fk.fail_result);
		return fk.fail_result;
	}
	if (fk.init && fk.pid != getpid())
		return refuse(FK_NOT_INITIALIZED,
			      "%s: the driver was initialised by process %d before a fork; CUDA "
			      "cannot be used in the child",
			      call, (int)fk.pid);
	if (need_init && !fk.init)
		return refuse(FK_NOT_INITIALIZED, "%s before cuInit", call);
	if (need_ctx && (!cur_ctx || !cur_ctx->refs))
		return refuse(FK_INVALID_CONTEXT, "%s: no current context in this thread", call);
	if (need_ctx && fk.sticky)
		return refuse(fk.sticky, "%s: a kernel failed earlier (%s)", call, fk.sticky_why);
	return KVMM_CUDA_SUCCESS;
}

/* a call that carried out a failing launch (a synchronisation) reports the failure */
static kvmm_cu_result fk_leave(kvmm_cu_result r, bool need_ctx)
{
	if (!r && need_ctx && fk.sticky)
		r = refuse(fk.sticky, "a kernel failed: %s", fk.sticky_why);
	pthread_mutex_unlock(&fk.lock);
	return r;
}

/* each entry point: enter (locks), check, do, leave (unlocks) */
#define FK_CALL(name, need_init, need_ctx, call)                         \
	do {                                                             \
		kvmm_cu_result r_ = fk_enter(name, need_init, need_ctx); \
		if (!r_)                                                 \
			r_ = call;                                       \
		return fk_leave(r_, need_ctx);                           \
	} while (0)

/* ---- initialisation, devices, contexts ------------------------------------------------------- */

/* a bad KVMM_FAKECUDA_* value: cuInit fails, and says why on stderr whatever VERBOSE says */
static kvmm_cu_result env_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static kvmm_cu_result env_refuse(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(fk.st.last_error, sizeof(fk.st.last_error), fmt, ap);
	va_end(ap);
	fk.st.refused++;
	fprintf(stderr, "fakecuda[%d]: cuInit refused: %s\n", (int)getpid(), fk.st.last_error);
	return KVMM_CUDA_ERROR_INVALID_VALUE;
}

/* a whole decimal number, digits only (no sign, no blanks), in *@v; the end in *@end */
static bool parse_index(const char *p, long *v, const char **end)
{
	char *e;

	if (*p < '0' || *p > '9')
		return false;
	errno = 0;
	*v = strtol(p, &e, 10);
	*end = e;
	return !errno;
}

/*
 * KVMM_FAKECUDA_DEVICES=N physical devices (1 to 8, default 1) and KVMM_FAKECUDA_VISIBLE=LIST,
 * the physical devices this process sees, in the order of its ordinals (default all, in
 * order).  Anything else is refused: a test with a typo must not quietly get one device.
 */
static kvmm_cu_result init_devices(void)
{
	const char *n = getenv("KVMM_FAKECUDA_DEVICES"), *vis = getenv("KVMM_FAKECUDA_VISIBLE");
	const char *p, *end;
	bool seen[MAX_DEVS] = {false};
	long v;

	fk.nphys = 1;
	if (n) {
		if (!parse_index(n, &v, &end) || *end || v < 1 || v > MAX_DEVS)
			return env_refuse("KVMM_FAKECUDA_DEVICES=\"%s\": a number of devices, "
					  "1 to %d, expected",
					  n, MAX_DEVS);
		fk.nphys = (int)v;
	}
	fk.ndev = 0;
	if (!vis) {
		for (int i = 0; i < fk.nphys; i++)
			fk.phys[fk.ndev++] = i;
		return KVMM_CUDA_SUCCESS;
	}
	for (p = vis;; p = end + 1) {
		if (!*p || *p == ',')
			return env_refuse("KVMM_FAKECUDA_VISIBLE=\"%s\": item %d is empty", vis,
					  fk.ndev + 1);
		if (!parse_index(p, &v, &end) || (*end && *end != ','))
			return env_refuse("KVMM_FAKECUDA_VISIBLE=\"%s\": item %d is not a device "
					  "index (comma-separated physical indexes expected)",
					  vis, fk.ndev + 1);
		if (v >= fk.nphys)
			return env_refuse("KVMM_FAKECUDA_VISIBLE=\"%s\": there is no device %ld "
					  "(KVMM_FAKECUDA_DEVICES=%d: 0 to %d)",
					  vis, v, fk.nphys, fk.nphys - 1);
		if (seen[v])
			return env_refuse("KVMM_FAKECUDA_VISIBLE=\"%s\": device %ld is listed "
					  "twice",
					  vis, v);
		seen[v] = true;
		fk.phys[fk.ndev++] = (int)v;
		if (!*end)
			return KVMM_CUDA_SUCCESS;
	}
}

static kvmm_cu_result do_init(unsigned int flags)
{
	const char *mem = getenv("KVMM_FAKECUDA_MEM");
	kvmm_cu_result r;

	if (flags)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
	if (!fk.init) {
		r = init_devices();
		if (r)
			return r;
		for (int i = 0; i < fk.ndev; i++)
			fk.ctx[i] = (struct CUctx_st){.dev = i, .phys = fk.phys[i]};
		fk.init = true;
		fk.pid = getpid();
		fk.mem_total = mem && *mem ? strtoull(mem, NULL, 0) : UINT64_C(8) << 30;
		fk.verbose = getenv("KVMM_FAKECUDA_VERBOSE") != NULL;
		fk.simt =
			getenv("KVMM_FAKECUDA_SIMT") && !strcmp(getenv("KVMM_FAKECUDA_SIMT"), "1");
		simt_check_global = kernel_readable;
		if (getenv("KVMM_FAKECUDA_SIMT_SEED"))
			simt_seed(strtoull(getenv("KVMM_FAKECUDA_SIMT_SEED"), NULL, 0));
	}
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuInit(unsigned int flags)
{
	FK_CALL("cuInit", false, false, do_init(flags));
}

API kvmm_cu_result cuDriverGetVersion(int *version)
{
	if (!version)
		return KVMM_CUDA_ERROR_INVALID_VALUE;
	*version = 12080;
	return KVMM_CUDA_SUCCESS;
}

static const char *result_text(kvmm_cu_result r)
{
	switch (r) {
	case KVMM_CUDA_SUCCESS:
		return "no error";
	case KVMM_CUDA_ERROR_INVALID_VALUE:
		return "invalid argument";
	case KVMM_CUDA_ERROR_OUT_OF_MEMORY:
		return "out of memory";
	case FK_NOT_INITIALIZED:
		return "initialization error";
	case KVMM_CUDA_ERROR_NO_DEVICE:
		return "no CUDA-capable device is detected";
	case KVMM_CUDA_ERROR_INVALID_DEVICE:
		return "invalid device ordinal";
	case FK_INVALID_CONTEXT:
		return "invalid device context";
	case KVMM_CUDA_ERROR_NO_BINARY_FOR_GPU:
		return "no kernel image is available for execution on the device (kvmm's fake "
		       "CUDA driver runs no GPU code)";
	case FK_INVALID_HANDLE:
		return "invalid resource handle";
	case FK_NOT_FOUND:
		return "named symbol not found";
	case FK_NOT_READY:
		return "device not ready";
	case FK_LAUNCH_OUT_OF_RESOURCES:
		return "too many resources requested for launch";
	case FK_LAUNCH_FAILED:
		return "unspecified launch failure (a kernel failed on kvmm's SIMT emulator; "
		       "stderr says why)";
	case KVMM_CUDA_ERROR_NOT_SUPPORTED:
		return "operation not supported";
	case KVMM_CUDA_ERROR_ILLEGAL_ADDRESS:
		return "an illegal memory access was encountered";
	default:
		return NULL;
	}
}

API kvmm_cu_result cuGetErrorString(kvmm_cu_result err, const char **str)
{
	if (!str)
		return KVMM_CUDA_ERROR_INVALID_VALUE;
	*str = result_text(err);
	return *str ? KVMM_CUDA_SUCCESS : KVMM_CUDA_ERROR_INVALID_VALUE;
}

static kvmm_cu_result do_device_count(int *count)
{
	if (!count)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount: NULL");
	*count = fk.ndev;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuDeviceGetCount(int *count)
{
	FK_CALL("cuDeviceGetCount", true, false, do_device_count(count));
}

/* a CUdevice is the ordinal, as in the driver */
static kvmm_cu_result check_dev(kvmm_cu_device dev, const char *what)
{
	if (dev < 0 || dev >= fk.ndev)
		return refuse(KVMM_CUDA_ERROR_INVALID_DEVICE, "%s: no device %d (%d device%s)",
			      what, dev, fk.ndev, fk.ndev == 1 ? "" : "s");
	return KVMM_CUDA_SUCCESS;
}

static kvmm_cu_result do_device_get(kvmm_cu_device *dev, int ordinal)
{
	kvmm_cu_result r;

	if (!dev)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDeviceGet: NULL");
	r = check_dev(ordinal, "cuDeviceGet");
	if (r)
		return r;
	*dev = ordinal;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuDeviceGet(kvmm_cu_device *dev, int ordinal)
{
	FK_CALL("cuDeviceGet", true, false, do_device_get(dev, ordinal));
}

static kvmm_cu_result do_device_name(char *name, int len, kvmm_cu_device dev)
{
	kvmm_cu_result r = check_dev(dev, "cuDeviceGetName");

	if (r)
		return r;
	if (!name || len <= 0)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName: bad buffer");
	/* physical device 0 keeps the one device's old name; the others say which they are */
	if (!fk.phys[dev])
		snprintf(name, (size_t)len, "kvmm fake CUDA device (host memory)");
	else
		snprintf(name, (size_t)len, "kvmm fake CUDA device %d (host memory)", fk.phys[dev]);
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuDeviceGetName(char *name, int len, kvmm_cu_device dev)
{
	FK_CALL("cuDeviceGetName", true, false, do_device_name(name, len, dev));
}

static kvmm_cu_result do_attribute(int *value, int attrib, kvmm_cu_device dev)
{
	kvmm_cu_result r = check_dev(dev, "cuDeviceGetAttribute");

	if (r)
		return r;
	if (!value)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: NULL");
	switch (attrib) {
	case KVMM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*value = 8;
		return KVMM_CUDA_SUCCESS;
	case KVMM_CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
		*value = 1593000;
		return KVMM_CUDA_SUCCESS;
	case KVMM_CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
		*value = 5120;
		return KVMM_CUDA_SUCCESS;
	case KVMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*value = 9;
		return KVMM_CUDA_SUCCESS;
	case KVMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*value = 0;
		return KVMM_CUDA_SUCCESS;
	case KVMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case KVMM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*value = 1;
		return KVMM_CUDA_SUCCESS;
	default:
		/* an attribute kvmm does not use yet: say so rather than invent a value */
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuDeviceGetAttribute: attribute %d is not modelled by the fake",
			      attrib);
	}
}

API kvmm_cu_result cuDeviceGetAttribute(int *value, int attrib, kvmm_cu_device dev)
{
	FK_CALL("cuDeviceGetAttribute", true, false, do_attribute(value, attrib, dev));
}

static kvmm_cu_result do_uuid(kvmm_cu_uuid *uuid, kvmm_cu_device dev)
{
	kvmm_cu_result r = check_dev(dev, "cuDeviceGetUuid");

	if (r)
		return r;
	if (!uuid)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDeviceGetUuid: NULL");
	kvmm_fakecuda_uuid(fk.phys[dev], uuid->bytes); /* the physical device's, as in fakecuda.h */
	return KVMM_CUDA_SUCCESS;
}

/* _v2 (CUDA 11.4 on) differs only for MIG instances, which the fake does not model */
API kvmm_cu_result cuDeviceGetUuid_v2(kvmm_cu_uuid *uuid, kvmm_cu_device dev)
{
	FK_CALL("cuDeviceGetUuid", true, false, do_uuid(uuid, dev));
}

API kvmm_cu_result cuDeviceGetUuid(kvmm_cu_uuid *uuid, kvmm_cu_device dev)
{
	FK_CALL("cuDeviceGetUuid", true, false, do_uuid(uuid, dev));
}

static kvmm_cu_result do_retain(kvmm_cu_ctx *ctx, kvmm_cu_device dev)
{
	kvmm_cu_result r = check_dev(dev, "cuDevicePrimaryCtxRetain");

	if (r)
		return r;
	if (!ctx)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain: NULL");
	fk.ctx[dev].refs++;
	fk.st.ctx_refs++;
	*ctx = &fk.ctx[dev];
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuDevicePrimaryCtxRetain(kvmm_cu_ctx *ctx, kvmm_cu_device dev)
{
	FK_CALL("cuDevicePrimaryCtxRetain", true, false, do_retain(ctx, dev));
}

static kvmm_cu_result do_release(kvmm_cu_device dev)
{
	kvmm_cu_result r = check_dev(dev, "cuDevicePrimaryCtxRelease");

	if (r)
		return r;
	if (!fk.ctx[dev].refs)
		return refuse(FK_INVALID_CONTEXT,
			      "cuDevicePrimaryCtxRelease: device %d's primary context is not "
			      "retained",
			      dev);
	if (!--fk.ctx[dev].refs)
		flush_ops(0, &fk.ctx[dev], false); /* the context goes: its work is done first */
	fk.st.ctx_refs--;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuDevicePrimaryCtxRelease_v2(kvmm_cu_device dev)
{
	FK_CALL("cuDevicePrimaryCtxRelease", true, false, do_release(dev));
}

/* @ctx is one of this process's primary contexts, retained */
static bool ctx_alive(kvmm_cu_ctx ctx)
{
	for (int i = 0; i < fk.ndev; i++)
		if (ctx == &fk.ctx[i])
			return fk.ctx[i].refs;
	return false;
}

static kvmm_cu_result do_set_current(kvmm_cu_ctx ctx)
{
	if (ctx && !ctx_alive(ctx))
		return refuse(FK_INVALID_CONTEXT, "cuCtxSetCurrent: context %p is not alive",
			      (void *)ctx);
	cur_ctx = ctx;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuCtxSetCurrent(kvmm_cu_ctx ctx)
{
	FK_CALL("cuCtxSetCurrent", true, false, do_set_current(ctx));
}

/* the current context's work, not the other devices' */
static kvmm_cu_result do_ctx_sync(void)
{
	flush_ops(0, cur_ctx, false);
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuCtxSynchronize(void)
{
	FK_CALL("cuCtxSynchronize", true, true, do_ctx_sync());
}

/* ---- modules: none, or in SIMT mode the host build of kernels/cuda (simt.c) ------------- */

static kvmm_cu_result do_module_load(kvmm_cu_module *mod, const void *image)
{
	uint32_t magic;

	if (!mod || !image)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuModuleLoadData: NULL");
	*mod = NULL;
	if (!fk.simt) {
		snprintf(fk.st.last_error, sizeof(fk.st.last_error),
			 "cuModuleLoadData: the fake driver runs no GPU code "
			 "(KVMM_FAKECUDA_SIMT=1 runs kvmm's kernels on the host)");
		return KVMM_CUDA_ERROR_NO_BINARY_FOR_GPU;
	}
	/* the image is not read (the kernels are built in), but it must be a fatbin */
	memcpy(&magic, image, sizeof(magic));
	if (magic != FATBIN_MAGIC)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuModuleLoadData: not a fatbin (magic %#x)", magic);
	fk.mod.loads++;
	fk.st.modules++;
	*mod = &fk.mod;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuModuleLoadData(kvmm_cu_module *mod, const void *image)
{
	FK_CALL("cuModuleLoadData", true, true, do_module_load(mod, image));
}

static kvmm_cu_result check_module(kvmm_cu_module mod, const char *what)
{
	if (!fk.simt || mod != &fk.mod || !fk.mod.loads)
		return refuse(FK_INVALID_HANDLE, "%s: module %p is not loaded", what, (void *)mod);
	return KVMM_CUDA_SUCCESS;
}

static kvmm_cu_result do_module_unload(kvmm_cu_module mod)
{
	kvmm_cu_result r = check_module(mod, "cuModuleUnload");

	if (r)
		return r;
	flush(0, true); /* the driver waits for the module's kernels */
	fk.mod.loads--;
	fk.st.modules--;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuModuleUnload(kvmm_cu_module mod)
{
	FK_CALL("cuModuleUnload", true, true, do_module_unload(mod));
}

static kvmm_cu_result do_get_function(kvmm_cu_function *fn, kvmm_cu_module mod, const char *name)
{
	kvmm_cu_result r = check_module(mod, "cuModuleGetFunction");

	if (r)
		return r;
	if (!fn || !name)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuModuleGetFunction: NULL");
	for (unsigned int i = 0; i < simt_nr_kernels; i++) {
		if (!strcmp(simt_kernels[i].name, name)) {
			*fn = (kvmm_cu_function)(uintptr_t)&simt_kernels[i];
			return KVMM_CUDA_SUCCESS;
		}
	}
	return refuse(FK_NOT_FOUND, "cuModuleGetFunction: no kernel named %s", name);
}

API kvmm_cu_result cuModuleGetFunction(kvmm_cu_function *fn, kvmm_cu_module mod, const char *name)
{
	FK_CALL("cuModuleGetFunction", true, true, do_get_function(fn, mod, name));
}

/* the kernel behind a function handle, or NULL (refused) */
static const struct simt_kernel *find_kernel(kvmm_cu_function fn, const char *what)
{
	for (unsigned int i = 0; i < simt_nr_kernels; i++)
		if ((const void *)fn == (const void *)&simt_kernels[i] && fk.mod.loads)
			return &simt_kernels[i];
	refuse(FK_INVALID_HANDLE, "%s: function %p is not a loaded kernel", what, (void *)fn);
	return NULL;
}

static kvmm_cu_result do_launch(kvmm_cu_function fn, struct simt_dim3 grid, struct simt_dim3 block,
				unsigned int smem, kvmm_cu_stream stream, void **params,
				void **extra)
{
	const struct simt_kernel *k = find_kernel(fn, "cuLaunchKernel");
	uint64_t threads = (uint64_t)block.x * block.y * block.z;
	struct fk_launch *l;
	unsigned int queue = 0;
	kvmm_cu_result r;

	if (!k)
		return FK_INVALID_HANDLE;
	r = stream_for_work(stream, &queue, "cuLaunchKernel");
	if (r)
		return r;
	/* the limits of a compute capability 9.0 device, and the kernel's own */
	if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 ||
	    grid.x > 0x7fffffffu || !threads || threads > SIMT_MAX_THREADS || block.z > 64)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuLaunchKernel %s: grid (%u,%u,%u) of blocks (%u,%u,%u)", k->name,
			      grid.x, grid.y, grid.z, block.x, block.y, block.z);
	if (threads > k->max_threads)
		return refuse(FK_LAUNCH_OUT_OF_RESOURCES,
			      "cuLaunchKernel %s: %llu threads a block, __launch_bounds__ %u",
			      k->name, (unsigned long long)threads, k->max_threads);
	if (smem > SIMT_DYN_SMEM_MAX)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuLaunchKernel %s: %u bytes of dynamic shared memory (48 KiB "
			      "without cuFuncSetAttribute)",
			      k->name, smem);
	if (!params || !params[0] || extra)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuLaunchKernel %s: the argument must come in params[0]", k->name);
	if (k->arg_size > LAUNCH_ARGS_MAX)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel %s: argument too big",
			      k->name);
	l = calloc(1, sizeof(*l));
	if (!l)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "no memory to queue a launch");
	*l = (struct fk_launch){.k = k, .grid = grid, .block = block, .smem = smem};
	memcpy(l->args, params[0], k->arg_size); /* by value, at launch time */
	r = enqueue_op(queue, NULL, NULL, 0, 0, NULL, l);
	if (r)
		free(l);
	return r;
}

API kvmm_cu_result cuLaunchKernel(kvmm_cu_function fn, unsigned int gx, unsigned int gy,
				  unsigned int gz, unsigned int bx, unsigned int by,
				  unsigned int bz, unsigned int shared_bytes, kvmm_cu_stream stream,
				  void **params, void **extra)
{
	FK_CALL("cuLaunchKernel", true, true,
		do_launch(fn, (struct simt_dim3){gx, gy, gz}, (struct simt_dim3){bx, by, bz},
			  shared_bytes, stream, params, extra));
}

/* what a 9.0 device allows an SM: 2048 threads, 32 blocks, 227 KiB of shared memory */
static kvmm_cu_result do_occupancy(int *blocks, kvmm_cu_function fn, int threads,
				   size_t shared_bytes)
{
	const struct simt_kernel *k =
		find_kernel(fn, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
	size_t n;

	if (!k)
		return FK_INVALID_HANDLE;
	if (!blocks || threads <= 0)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuOccupancyMaxActiveBlocksPerMultiprocessor: bad arguments");
	if ((unsigned int)threads > k->max_threads || shared_bytes > SIMT_DYN_SMEM_MAX) {
		*blocks = 0;
		return KVMM_CUDA_SUCCESS;
	}
	n = 2048 / (size_t)threads;
	if (n > 32)
		n = 32;
	if (shared_bytes && (227u << 10) / (shared_bytes + 1024) < n)
		n = (227u << 10) / (shared_bytes + 1024);
	*blocks = (int)n;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, kvmm_cu_function fn,
							       int threads, size_t shared_bytes)
{
	FK_CALL("cuOccupancyMaxActiveBlocksPerMultiprocessor", true, true,
		do_occupancy(blocks, fn, threads, shared_bytes));
}

/* ---- linear device memory and pinned host memory ---------------------------------------------- */

static kvmm_cu_result do_mem_alloc(kvmm_cu_ptr *p, size_t bytes)
{
	size_t sz = (bytes + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
	struct fk_range *r;
	void *mem = NULL;

	int phys = cur_ctx->phys; /* the current context's device */

	if (!p || !bytes)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: NULL or 0 bytes");
	if (sz < bytes || fk.mem_used[phys] + sz > fk.mem_total)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes", bytes);
	if (posix_memalign(&mem, DEV_ALIGN, sz))
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes", bytes);
	r = add_range(FK_DEVALLOC, (uintptr_t)mem, sz);
	if (!r) {
		free(mem);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: bookkeeping");
	}
	r->access = true;
	r->mem = mem;
	r->phys = phys;
	fk.mem_used[phys] += sz;
	fk.st.dev_allocs++;
	*p = (kvmm_cu_ptr)(uintptr_t)mem;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemAlloc_v2(kvmm_cu_ptr *p, size_t bytes)
{
	FK_CALL("cuMemAlloc", true, true, do_mem_alloc(p, bytes));
}

static kvmm_cu_result do_mem_free(kvmm_cu_ptr p)
{
	struct fk_range *r = find_range((uintptr_t)p, FK_DEVALLOC);

	if (!r || r->va != (uintptr_t)p)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemFree: 0x%llx is not a cuMemAlloc allocation",
			      (unsigned long long)p);
	flush(0, true);
	fk.mem_used[r->phys] -= r->size;
	free(r->mem);
	del_range(r);
	fk.st.dev_allocs--;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemFree_v2(kvmm_cu_ptr p)
{
	FK_CALL("cuMemFree", true, true, do_mem_free(p));
}

/* stream-ordered allocation: the memory is there at once, freed once the stream got there */
static kvmm_cu_result do_mem_alloc_async(kvmm_cu_ptr *p, size_t bytes, kvmm_cu_stream s)
{
	unsigned int queue = 0;
	kvmm_cu_result r = stream_for_work(s, &queue, "cuMemAllocAsync");

	return r ? r : do_mem_alloc(p, bytes);
}

API kvmm_cu_result cuMemAllocAsync(kvmm_cu_ptr *p, size_t bytes, kvmm_cu_stream s)
{
	FK_CALL("cuMemAllocAsync", true, true, do_mem_alloc_async(p, bytes, s));
}

static kvmm_cu_result do_mem_free_async(kvmm_cu_ptr p, kvmm_cu_stream s)
{
	unsigned int queue = 0;
	kvmm_cu_result r = stream_for_work(s, &queue, "cuMemFreeAsync");

	if (r)
		return r;
	flush(queue, false);
	return do_mem_free(p);
}

API kvmm_cu_result cuMemFreeAsync(kvmm_cu_ptr p, kvmm_cu_stream s)
{
	FK_CALL("cuMemFreeAsync", true, true, do_mem_free_async(p, s));
}

static kvmm_cu_result do_host_alloc(void **p, size_t bytes, unsigned int flags)
{
	struct fk_host *h;
	void *mem = NULL;

	if (!p || !bytes || (flags & ~0xfu))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: bad arguments");
	h = calloc(1, sizeof(*h));
	if (!h || posix_memalign(&mem, HOST_ALIGN, bytes)) {
		free(h);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc: %zu bytes", bytes);
	}
	h->p = mem;
	h->size = bytes;
	h->next = fk.hosts;
	fk.hosts = h;
	fk.st.host_allocs++;
	*p = mem;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
	FK_CALL("cuMemHostAlloc", true, true, do_host_alloc(p, bytes, flags));
}

static kvmm_cu_result do_free_host(void *p)
{
	for (struct fk_host **pp = &fk.hosts; *pp; pp = &(*pp)->next) {
		struct fk_host *h = *pp;

		if (h->p != p)
			continue;
		flush(0, true);
		*pp = h->next;
		free(h->p);
		free(h);
		fk.st.host_allocs--;
		return KVMM_CUDA_SUCCESS;
	}
	return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost: %p is not from cuMemHostAlloc",
		      p);
}

API kvmm_cu_result cuMemFreeHost(void *p)
{
	FK_CALL("cuMemFreeHost", true, true, do_free_host(p));
}

/* ---- copies and memsets ---------------------------------------------------------------------- */

/* a copy the host waits for (HtoD, DtoH): the legacy queue first, then at once */
static kvmm_cu_result copy_now(char *dst, const char *src, size_t n, kvmm_cu_ptr dev,
			       const char *what)
{
	kvmm_cu_result r;

	if (!n)
		return KVMM_CUDA_SUCCESS;
	if (!dst || !src)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "%s: NULL host pointer", what);
	/* HtoD writes the device side, DtoH reads it */
	r = dev_ok(dev, n, (uintptr_t)dev == (uintptr_t)dst, what);
	if (r)
		return r;
	flush(legacy_queue(), false);
	check_race(legacy_queue(), dst, src, n);
	memmove(dst, src, n);
	fk.st.copies++;
	fk.st.copy_bytes += n;
	fk.sim_ns += 2000 + n / 100;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemcpyHtoD_v2(kvmm_cu_ptr dst, const void *src, size_t bytes)
{
	FK_CALL("cuMemcpyHtoD", true, true,
		copy_now((char *)(uintptr_t)dst, src, bytes, dst, "cuMemcpyHtoD"));
}

API kvmm_cu_result cuMemcpyDtoH_v2(void *dst, kvmm_cu_ptr src, size_t bytes)
{
	FK_CALL("cuMemcpyDtoH", true, true,
		copy_now(dst, (const char *)(uintptr_t)src, bytes, src, "cuMemcpyDtoH"));
}

/*
 * a queued copy: @ddst / @dsrc are the device sides to check (0: host), @s the stream;
 * @host the host side of an async HtoD / DtoH, which should be pinned memory
 */
static kvmm_cu_result copy_async(char *dst, const char *src, size_t n, kvmm_cu_ptr ddst,
				 kvmm_cu_ptr dsrc, const void *host, kvmm_cu_stream s,
				 const char *what)
{
	unsigned int queue = 0;
	kvmm_cu_result r;

	if (!n)
		return KVMM_CUDA_SUCCESS;
	if (!dst || !src)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "%s: NULL pointer", what);
	r = ddst ? dev_ok(ddst, n, true, what) : KVMM_CUDA_SUCCESS;
	if (!r && dsrc)
		r = dev_ok(dsrc, n, false, what);
	if (!r)
		r = stream_for_work(s, &queue, what);
	if (r)
		return r;
	if (host && !is_pinned(host, n))
		fk.st.pageable_async++;
	return enqueue(queue, dst, src, n, 0, NULL);
}

API kvmm_cu_result cuMemcpyDtoD_v2(kvmm_cu_ptr dst, kvmm_cu_ptr src, size_t bytes)
{
	/* device to device: the driver does not wait for it either (legacy stream) */
	FK_CALL("cuMemcpyDtoD", true, true,
		copy_async((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, bytes, dst, src,
			   NULL, NULL, "cuMemcpyDtoD"));
}

API kvmm_cu_result cuMemcpyHtoDAsync_v2(kvmm_cu_ptr dst, const void *src, size_t bytes,
					kvmm_cu_stream s)
{
	FK_CALL("cuMemcpyHtoDAsync", true, true,
		copy_async((char *)(uintptr_t)dst, src, bytes, dst, 0, src, s,
			   "cuMemcpyHtoDAsync"));
}

API kvmm_cu_result cuMemcpyDtoHAsync_v2(void *dst, kvmm_cu_ptr src, size_t bytes, kvmm_cu_stream s)
{
	FK_CALL("cuMemcpyDtoHAsync", true, true,
		copy_async(dst, (const char *)(uintptr_t)src, bytes, 0, src, dst, s,
			   "cuMemcpyDtoHAsync"));
}

API kvmm_cu_result cuMemcpyDtoDAsync_v2(kvmm_cu_ptr dst, kvmm_cu_ptr src, size_t bytes,
					kvmm_cu_stream s)
{
	FK_CALL("cuMemcpyDtoDAsync", true, true,
		copy_async((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, bytes, dst, src,
			   NULL, s, "cuMemcpyDtoDAsync"));
}

static kvmm_cu_result do_memset(kvmm_cu_ptr dst, unsigned char v, size_t n)
{
	kvmm_cu_result r;

	if (!n)
		return KVMM_CUDA_SUCCESS;
	r = dev_ok(dst, n, true, "cuMemsetD8");
	if (r)
		return r;
	/* a memset of device memory does not wait either: queued on the legacy stream */
	return enqueue(legacy_queue(), (char *)(uintptr_t)dst, NULL, n, v, NULL);
}

API kvmm_cu_result cuMemsetD8_v2(kvmm_cu_ptr dst, unsigned char v, size_t n)
{
	FK_CALL("cuMemsetD8", true, true, do_memset(dst, v, n));
}

/* ---- streams and events ---------------------------------------------------------------------- */

static kvmm_cu_result do_stream_create(kvmm_cu_stream *s, unsigned int flags)
{
	struct CUstream_st *x;

	if (!s || (flags & ~KVMM_CU_STREAM_NON_BLOCKING))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: bad arguments");
	x = calloc(1, sizeof(*x));
	if (!x)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuStreamCreate");
	x->ctx = cur_ctx;
	x->flags = flags;
	/* a blocking stream is ordered with its context's legacy stream: one queue */
	x->queue = (flags & KVMM_CU_STREAM_NON_BLOCKING) ? ++fk.next_queue : legacy_queue();
	x->next = fk.streams;
	fk.streams = x;
	fk.st.streams++;
	*s = x;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuStreamCreate(kvmm_cu_stream *s, unsigned int flags)
{
	FK_CALL("cuStreamCreate", true, true, do_stream_create(s, flags));
}

static kvmm_cu_result do_stream_destroy(kvmm_cu_stream s)
{
	for (struct CUstream_st **pp = &fk.streams; *pp; pp = &(*pp)->next) {
		struct CUstream_st *x = *pp;

		if (x != s)
			continue;
		flush(x->queue, false); /* its work still completes */
		*pp = x->next;
		free(x);
		fk.st.streams--;
		return KVMM_CUDA_SUCCESS;
	}
	return refuse(FK_INVALID_HANDLE, "cuStreamDestroy: stream %p does not exist", (void *)s);
}

API kvmm_cu_result cuStreamDestroy_v2(kvmm_cu_stream s)
{
	FK_CALL("cuStreamDestroy", true, true, do_stream_destroy(s));
}

/* from any context (NULL: the current context's legacy stream) */
static kvmm_cu_result do_stream_sync(kvmm_cu_stream s)
{
	unsigned int queue = 0;
	kvmm_cu_result r = stream_queue(s, &queue, NULL);

	if (!r)
		flush(queue, false);
	return r;
}

API kvmm_cu_result cuStreamSynchronize(kvmm_cu_stream s)
{
	FK_CALL("cuStreamSynchronize", true, true, do_stream_sync(s));
}

static kvmm_cu_result do_event_create(kvmm_cu_event *e, unsigned int flags)
{
	struct CUevent_st *x;

	if (!e || (flags & ~0xfu))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuEventCreate: bad arguments");
	x = calloc(1, sizeof(*x));
	if (!x)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuEventCreate");
	x->next = fk.events;
	fk.events = x;
	fk.st.events++;
	*e = x;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuEventCreate(kvmm_cu_event *e, unsigned int flags)
{
	FK_CALL("cuEventCreate", true, true, do_event_create(e, flags));
}

static kvmm_cu_result do_event_destroy(kvmm_cu_event e)
{
	for (struct CUevent_st **pp = &fk.events; *pp; pp = &(*pp)->next) {
		struct CUevent_st *x = *pp;

		if (x != e)
			continue;
		for (struct fk_op *o = fk.ops; o; o = o->next)
			if (o->ev == x)
				o->ev = NULL;
		*pp = x->next;
		free(x);
		fk.st.events--;
		return KVMM_CUDA_SUCCESS;
	}
	return refuse(FK_INVALID_HANDLE, "cuEventDestroy: event %p does not exist", (void *)e);
}

API kvmm_cu_result cuEventDestroy_v2(kvmm_cu_event e)
{
	FK_CALL("cuEventDestroy", true, true, do_event_destroy(e));
}

static kvmm_cu_result do_event_record(kvmm_cu_event e, kvmm_cu_stream s)
{
	struct CUevent_st *x = find_event(e);
	unsigned int queue = 0;
	kvmm_cu_result r;

	if (!x)
		return refuse(FK_INVALID_HANDLE, "cuEventRecord: event %p does not exist",
			      (void *)e);
	r = stream_for_work(s, &queue, "cuEventRecord");
	if (r)
		return r;
	for (struct fk_op *o = fk.ops; o; o = o->next) /* re-recorded: the old one is moot */
		if (o->ev == x)
			o->ev = NULL;
	x->recorded = true;
	x->done = false;
	x->queue = queue;
	return enqueue(queue, NULL, NULL, 0, 0, x);
}

API kvmm_cu_result cuEventRecord(kvmm_cu_event e, kvmm_cu_stream s)
{
	FK_CALL("cuEventRecord", true, true, do_event_record(e, s));
}

static kvmm_cu_result do_event_sync(kvmm_cu_event e)
{
	struct CUevent_st *x = find_event(e);

	if (!x)
		return refuse(FK_INVALID_HANDLE, "cuEventSynchronize: event %p does not exist",
			      (void *)e);
	if (x->recorded && !x->done)
		flush(x->queue, false);
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuEventSynchronize(kvmm_cu_event e)
{
	FK_CALL("cuEventSynchronize", true, true, do_event_sync(e));
}

static kvmm_cu_result do_elapsed(float *ms, kvmm_cu_event a, kvmm_cu_event b)
{
	struct CUevent_st *x = find_event(a), *y = find_event(b);

	if (!ms || !x || !y)
		return refuse(FK_INVALID_HANDLE, "cuEventElapsedTime: bad event");
	if (!x->recorded || !y->recorded)
		return refuse(FK_INVALID_HANDLE, "cuEventElapsedTime: event never recorded");
	if (!x->done || !y->done)
		return FK_NOT_READY;
	*ms = (float)((double)((int64_t)(y->t_ns - x->t_ns)) / 1e6);
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuEventElapsedTime_v2(float *ms, kvmm_cu_event start, kvmm_cu_event end)
{
	FK_CALL("cuEventElapsedTime", true, true, do_elapsed(ms, start, end));
}

API kvmm_cu_result cuEventElapsedTime(float *ms, kvmm_cu_event start, kvmm_cu_event end)
{
	FK_CALL("cuEventElapsedTime", true, true, do_elapsed(ms, start, end));
}

/* ---- virtual memory management ----------------------------------------------------------------- */

static kvmm_cu_result check_prop(const struct kvmm_cu_mem_alloc_prop *prop, const char *what)
{
	if (!prop)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "%s: NULL properties", what);
	if (prop->type != KVMM_CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != KVMM_CU_MEM_LOCATION_TYPE_DEVICE)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "%s: only pinned device allocations are modelled", what);
	if (prop->location.id < 0 || prop->location.id >= fk.ndev)
		return refuse(KVMM_CUDA_ERROR_INVALID_DEVICE, "%s: no device %d (%d device%s)",
			      what, prop->location.id, fk.ndev, fk.ndev == 1 ? "" : "s");
	if (prop->requested_handle_types & ~KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return refuse(KVMM_CUDA_ERROR_NOT_SUPPORTED,
			      "%s: only POSIX file descriptor handles are modelled", what);
	return KVMM_CUDA_SUCCESS;
}

static kvmm_cu_result do_granularity(size_t *gran, const struct kvmm_cu_mem_alloc_prop *prop,
				     int option)
{
	kvmm_cu_result r = check_prop(prop, "cuMemGetAllocationGranularity");

	if (r)
		return r;
	if (!gran || (option != KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
		      option != KVMM_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemGetAllocationGranularity: bad arguments");
	*gran = GRAN;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemGetAllocationGranularity(size_t *gran,
						 const struct kvmm_cu_mem_alloc_prop *prop,
						 int option)
{
	FK_CALL("cuMemGetAllocationGranularity", true, false, do_granularity(gran, prop, option));
}

static kvmm_cu_result check_size(size_t bytes, const char *what)
{
	if (!bytes || bytes % GRAN)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "%s: %zu bytes is not a multiple of the granularity (%zu)", what,
			      bytes, GRAN);
	return KVMM_CUDA_SUCCESS;
}

static struct fk_alloc *new_alloc(int fd, size_t size, int phys, bool imported)
{
	struct fk_alloc *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->id = fk.next_id++;
	a->fd = fd;
	a->size = size;
	a->phys = phys;
	a->imported = imported;
	a->next = fk.allocs;
	fk.allocs = a;
	fk.st.allocs++;
	fk.st.handles++;
	fk.st.alloc_bytes += size;
	if (!imported)
		fk.mem_used[phys] += size;
	return a;
}

static kvmm_cu_result do_mem_create(kvmm_cu_mem_handle *h, size_t bytes,
				    const struct kvmm_cu_mem_alloc_prop *prop,
				    unsigned long long flags)
{
	kvmm_cu_result r = check_prop(prop, "cuMemCreate");
	char name[32];
	struct fk_alloc *a;
	int fd, phys;

	if (!r)
		r = check_size(bytes, "cuMemCreate");
	if (r)
		return r;
	if (!h || flags)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemCreate: bad arguments");
	phys = fk.phys[prop->location.id];
	if (fk.mem_used[phys] + bytes > fk.mem_total)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: %zu bytes on device %d",
			      bytes, prop->location.id);
	/* the name carries the physical device to the processes the fd is passed to */
	snprintf(name, sizeof(name), MEMFD_NAME "%d", phys);
	fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: memfd: %s",
			      strerror(errno));
	if (ftruncate(fd, (off_t)bytes) || !(a = new_alloc(fd, bytes, phys, false))) {
		close(fd);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: %zu bytes", bytes);
	}
	*h = a->id;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemCreate(kvmm_cu_mem_handle *h, size_t bytes,
			       const struct kvmm_cu_mem_alloc_prop *prop, unsigned long long flags)
{
	FK_CALL("cuMemCreate", true, false, do_mem_create(h, bytes, prop, flags));
}

static kvmm_cu_result do_mem_release(kvmm_cu_mem_handle h)
{
	struct fk_alloc *a = find_alloc(h);

	if (!a)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemRelease: handle 0x%llx is not alive (released twice?)",
			      (unsigned long long)h);
	a->released = true;
	fk.st.handles--;
	if (!a->maps)
		free_alloc(a);
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemRelease(kvmm_cu_mem_handle h)
{
	FK_CALL("cuMemRelease", true, false, do_mem_release(h));
}

static kvmm_cu_result do_export(void *shareable, kvmm_cu_mem_handle h, int type,
				unsigned long long flags)
{
	struct fk_alloc *a = find_alloc(h);
	int fd;

	if (!a)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemExportToShareableHandle: handle 0x%llx is not alive",
			      (unsigned long long)h);
	if (!shareable || flags || type != KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemExportToShareableHandle: bad arguments");
	fd = dup(a->fd); /* a new descriptor the caller owns; not close-on-exec */
	if (fd < 0)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemExportToShareableHandle: %s",
			      strerror(errno));
	memcpy(shareable, &fd, sizeof(fd));
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemExportToShareableHandle(void *shareable, kvmm_cu_mem_handle h, int type,
						unsigned long long flags)
{
	FK_CALL("cuMemExportToShareableHandle", true, false, do_export(shareable, h, type, flags));
}

/* the ordinal here of physical device @phys, or -1 when this process does not see it */
static int phys_ordinal(long phys)
{
	for (int i = 0; i < fk.ndev; i++)
		if (fk.phys[i] == phys)
			return i;
	return -1;
}

/*
 * The physical device of the fd whose /proc/self/fd link is @target, one of the fake's memfds
 * ("/memfd:kvmm-fakecuda-dev1 (deleted)"), or -1 when it is not one.
 */
static long memfd_phys(const char *target)
{
	static const char pre[] = "/memfd:" MEMFD_NAME;
	const char *end;
	long phys;

	if (strncmp(target, pre, strlen(pre)) || !parse_index(target + strlen(pre), &phys, &end) ||
	    phys >= MAX_DEVS)
		return -1;
	return !*end || !strcmp(end, " (deleted)") ? phys : -1;
}

static kvmm_cu_result do_import(kvmm_cu_mem_handle *h, void *os_handle, int type)
{
	int fd = (int)(intptr_t)os_handle, dupfd;
	char link[64], target[256];
	struct fk_alloc *a;
	struct stat st;
	long phys;
	ssize_t n;

	if (!h || type != KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemImportFromShareableHandle: bad arguments");
	/* only what this driver exported: a memfd of ours (another kind of fd is refused) */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0 || fstat(fd, &st))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemImportFromShareableHandle: fd %d is not open", fd);
	target[n] = '\0';
	phys = memfd_phys(target);
	if (phys < 0)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemImportFromShareableHandle: fd %d (%s) was not exported by this "
			      "driver",
			      fd, target);
	/* an allocation of a GPU this process does not see cannot be imported */
	if (phys_ordinal(phys) < 0)
		return refuse(KVMM_CUDA_ERROR_INVALID_DEVICE,
			      "cuMemImportFromShareableHandle: fd %d is memory of physical device "
			      "%ld, which this process does not see (KVMM_FAKECUDA_DEVICES=%d, "
			      "KVMM_FAKECUDA_VISIBLE=%s)",
			      fd, phys, fk.nphys,
			      getenv("KVMM_FAKECUDA_VISIBLE") ? getenv("KVMM_FAKECUDA_VISIBLE")
							      : "(all)");
	if (check_size((size_t)st.st_size, "cuMemImportFromShareableHandle"))
		return KVMM_CUDA_ERROR_INVALID_VALUE;
	dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dupfd < 0)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemImportFromShareableHandle: %s",
			      strerror(errno));
	a = new_alloc(dupfd, (size_t)st.st_size, (int)phys, true);
	if (!a) {
		close(dupfd);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemImportFromShareableHandle");
	}
	*h = a->id;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemImportFromShareableHandle(kvmm_cu_mem_handle *h, void *os_handle, int type)
{
	FK_CALL("cuMemImportFromShareableHandle", true, false, do_import(h, os_handle, type));
}

static kvmm_cu_result do_reserve(kvmm_cu_ptr *p, size_t bytes, size_t align, kvmm_cu_ptr addr,
				 unsigned long long flags)
{
	size_t a = align > GRAN ? align : GRAN, len;
	kvmm_cu_result r = check_size(bytes, "cuMemAddressReserve");
	char *m, *start;

	(void)addr; /* a hint, as for the driver */
	if (r)
		return r;
	if (!p || flags || (align & (align - 1)))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve: bad arguments");
	if (__builtin_add_overflow(bytes, a, &len))
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: %zu bytes",
			      bytes);
	m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: %s",
			      strerror(errno));
	start = (char *)(((uintptr_t)m + a - 1) & ~(uintptr_t)(a - 1));
	if (start > m)
		munmap(m, (size_t)(start - m));
	if (start + bytes < m + len)
		munmap(start + bytes, (size_t)(m + len - (start + bytes)));
	if (!add_range(FK_RESERVE, (uintptr_t)start, bytes)) {
		munmap(start, bytes);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: bookkeeping");
	}
	fk.st.reservations++;
	*p = (kvmm_cu_ptr)(uintptr_t)start;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemAddressReserve(kvmm_cu_ptr *p, size_t bytes, size_t align, kvmm_cu_ptr addr,
				       unsigned long long flags)
{
	FK_CALL("cuMemAddressReserve", true, false, do_reserve(p, bytes, align, addr, flags));
}

static bool any_map_in(uintptr_t va, size_t size)
{
	for (struct fk_range *r = fk.ranges; r; r = r->next)
		if (r->kind == FK_MAP && overlap((char *)r->va, r->size, (char *)va, size))
			return true;
	return false;
}

static kvmm_cu_result do_address_free(kvmm_cu_ptr p, size_t bytes)
{
	struct fk_range *r = find_range((uintptr_t)p, FK_RESERVE);

	if (!r || r->va != (uintptr_t)p || r->size != bytes)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemAddressFree: 0x%llx + %zu is not a reservation",
			      (unsigned long long)p, bytes);
	if (any_map_in(r->va, r->size))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemAddressFree: 0x%llx still has mappings (cuMemUnmap first)",
			      (unsigned long long)p);
	munmap((void *)r->va, r->size);
	del_range(r);
	fk.st.reservations--;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemAddressFree(kvmm_cu_ptr p, size_t bytes)
{
	FK_CALL("cuMemAddressFree", true, false, do_address_free(p, bytes));
}

static kvmm_cu_result do_map(kvmm_cu_ptr p, size_t bytes, size_t offset, kvmm_cu_mem_handle h,
			     unsigned long long flags)
{
	struct fk_range *res = find_range((uintptr_t)p, FK_RESERVE), *m;
	struct fk_alloc *a = find_alloc(h);
	kvmm_cu_result r = check_size(bytes, "cuMemMap");
	uintptr_t va = (uintptr_t)p;

	if (r)
		return r;
	if (!a)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemMap: handle 0x%llx is not alive",
			      (unsigned long long)h);
	if (flags)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemMap: flags must be 0");
	if (va % GRAN || !res || bytes > res->size - (va - res->va))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemMap: 0x%llx + %zu is not inside one reservation",
			      (unsigned long long)p, bytes);
	/*
	 * Current drivers map part of an allocation (offset and size multiples of the
	 * granularity); older ones only whole allocations, offset 0: $KVMM_FAKECUDA_MAP_WHOLE=1.
	 */
	if (getenv("KVMM_FAKECUDA_MAP_WHOLE") && (offset || bytes != a->size))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemMap: %zu bytes at offset %zu of a %zu-byte allocation (this "
			      "driver maps allocations whole)",
			      bytes, offset, a->size);
	if (offset % GRAN || offset > a->size || bytes > a->size - offset)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemMap: %zu bytes at offset %zu of a %zu-byte allocation", bytes,
			      offset, a->size);
	if (any_map_in(va, bytes))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemMap: 0x%llx + %zu is already mapped", (unsigned long long)p,
			      bytes);
	m = add_range(FK_MAP, va, bytes);
	if (!m)
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap: bookkeeping");
	/* mapped but not accessible until cuMemSetAccess */
	if (mmap((void *)va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)offset) ==
	    MAP_FAILED) {
		del_range(m);
		return refuse(KVMM_CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap: mmap: %s", strerror(errno));
	}
	m->alloc = a;
	a->maps++;
	fk.st.mappings++;
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemMap(kvmm_cu_ptr p, size_t bytes, size_t offset, kvmm_cu_mem_handle h,
			    unsigned long long flags)
{
	FK_CALL("cuMemMap", true, false, do_map(p, bytes, offset, h, flags));
}

/* [va, va + bytes) is exactly a run of whole mappings */
static bool whole_maps(uintptr_t va, size_t bytes)
{
	uintptr_t cur = va, end = va + bytes;

	if (!bytes)
		return false;
	while (cur < end) {
		struct fk_range *m = find_range(cur, FK_MAP);

		if (!m || m->va != cur || m->size > end - cur)
			return false;
		cur += m->size;
	}
	return true;
}

static kvmm_cu_result do_unmap(kvmm_cu_ptr p, size_t bytes)
{
	uintptr_t cur = (uintptr_t)p, end = cur + bytes;

	if (!whole_maps(cur, bytes))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemUnmap: 0x%llx + %zu is not a run of whole mappings",
			      (unsigned long long)p, bytes);
	flush(0, true); /* nothing may still be copying there */
	while (cur < end) {
		struct fk_range *m = find_range(cur, FK_MAP);
		struct fk_alloc *a = m->alloc;

		cur += m->size;
		/* back to reserved, inaccessible address space */
		mmap((void *)m->va, m->size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		del_range(m);
		fk.st.mappings--;
		if (!--a->maps && a->released)
			free_alloc(a);
	}
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemUnmap(kvmm_cu_ptr p, size_t bytes)
{
	FK_CALL("cuMemUnmap", true, false, do_unmap(p, bytes));
}

static kvmm_cu_result do_set_access(kvmm_cu_ptr p, size_t bytes,
				    const struct kvmm_cu_mem_access_desc *desc, size_t count)
{
	uintptr_t cur = (uintptr_t)p, end = cur + bytes;
	int prot, dev;

	if (!desc || count != 1)
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemSetAccess: one descriptor (the allocation's device) expected; "
			      "the fake models no peer access");
	dev = desc->location.id;
	if (desc->location.type != KVMM_CU_MEM_LOCATION_TYPE_DEVICE || dev < 0 || dev >= fk.ndev)
		return refuse(KVMM_CUDA_ERROR_INVALID_DEVICE,
			      "cuMemSetAccess: bad location (type %d, device %d of %d)",
			      desc->location.type, dev, fk.ndev);
	if (desc->flags == KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		prot = PROT_READ | PROT_WRITE;
	else if (desc->flags == KVMM_CU_MEM_ACCESS_FLAGS_PROT_READ &&
		 getenv("KVMM_FAKECUDA_NO_READONLY"))
		return refuse(KVMM_CUDA_ERROR_NOT_SUPPORTED,
			      "cuMemSetAccess: read-only access is not supported "
			      "($KVMM_FAKECUDA_NO_READONLY)");
	else if (desc->flags == KVMM_CU_MEM_ACCESS_FLAGS_PROT_READ)
		prot = PROT_READ;
	else if (desc->flags == 0)
		prot = PROT_NONE;
	else
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: flags %d",
			      desc->flags);
	if (!whole_maps(cur, bytes))
		return refuse(KVMM_CUDA_ERROR_INVALID_VALUE,
			      "cuMemSetAccess: 0x%llx + %zu is not wholly mapped",
			      (unsigned long long)p, bytes);
	/*
	 * Only the allocation's own device: a process that maps a group member's memory and
	 * asks access for another GPU (its ordinal of the wrong device) is refused, all or
	 * nothing.
	 */
	for (uintptr_t c = cur; c < end;) {
		struct fk_range *m = find_range(c, FK_MAP);
		int mine = phys_ordinal(m->alloc->phys);

		if (m->alloc->phys != fk.phys[dev])
			return refuse(
				KVMM_CUDA_ERROR_INVALID_DEVICE,
				"cuMemSetAccess: 0x%llx: allocation on device %d, access asked "
				"for device %d; the fake models no peer access (physical "
				"devices %d and %d)",
				(unsigned long long)m->va, mine, dev, m->alloc->phys, fk.phys[dev]);
		c += m->size;
	}
	while (cur < end) {
		struct fk_range *m = find_range(cur, FK_MAP);

		mprotect((void *)m->va, m->size, prot);
		m->access = prot != PROT_NONE;
		m->ro = prot == PROT_READ;
		cur += m->size;
	}
	return KVMM_CUDA_SUCCESS;
}

API kvmm_cu_result cuMemSetAccess(kvmm_cu_ptr p, size_t bytes,
				  const struct kvmm_cu_mem_access_desc *desc, size_t count)
{
	FK_CALL("cuMemSetAccess", true, false, do_set_access(p, bytes, desc, count));
}

/* ---- for tests (fakecuda.h) ------------------------------------------------------------------ */

API int kvmm_fakecuda_stats(struct kvmm_fakecuda_stats *st)
{
	pthread_mutex_lock(&fk.lock);
	*st = fk.st;
	st->staged_bytes = simt_staged_bytes;
	st->smem_requests = simt_smem_requests;
	st->smem_wavefronts = simt_smem_wavefronts;
	st->smem_ideal = simt_smem_ideal;
	st->smem_unpaired = simt_smem_unpaired;
	st->phys_devices = (uint64_t)fk.nphys;
	st->devices = (uint64_t)fk.ndev;
	for (int i = 0; i < MAX_DEVS; i++)
		st->dev_bytes[i] = fk.mem_used[i];
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

API void kvmm_fakecuda_fail(const char *call, unsigned int nth, int result)
{
	pthread_mutex_lock(&fk.lock);
	fail_arm(call, nth, result);
	pthread_mutex_unlock(&fk.lock);
}

__attribute__((constructor)) static void fk_load(void)
{
	const char *f = getenv("KVMM_FAKECUDA_FAIL");
	char call[64];
	unsigned int nth = 0;
	int result = KVMM_CUDA_ERROR_OUT_OF_MEMORY;

	if (f && sscanf(f, "%63[^:]:%u:%d", call, &nth, &result) >= 2)
		fail_arm(call, nth, result);
}

__attribute__((destructor)) static void fk_report(void)
{
	const char *path = getenv("KVMM_FAKECUDA_REPORT");
	const struct kvmm_fakecuda_stats *s = &fk.st;
	char line[512];
	int fd, n;

	/* only the process that used the driver (not a forked child that inherited it) */
	if (!path || !*path || !fk.init || fk.pid != getpid())
		return;
	n = snprintf(line, sizeof(line),
		     "fakecuda pid=%d allocs=%llu handles=%llu reservations=%llu mappings=%llu "
		     "dev_allocs=%llu host_allocs=%llu streams=%llu events=%llu ctx_refs=%llu "
		     "pending=%llu races=%llu pageable_async=%llu refused=%llu copies=%llu\n",
		     (int)getpid(), (unsigned long long)s->allocs, (unsigned long long)s->handles,
		     (unsigned long long)s->reservations, (unsigned long long)s->mappings,
		     (unsigned long long)s->dev_allocs, (unsigned long long)s->host_allocs,
		     (unsigned long long)s->streams, (unsigned long long)s->events,
		     (unsigned long long)s->ctx_refs, (unsigned long long)s->pending,
		     (unsigned long long)s->races, (unsigned long long)s->pageable_async,
		     (unsigned long long)s->refused, (unsigned long long)s->copies);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) != n)
		n = -1; /* nothing more to do about it at exit */
	close(fd);
}
