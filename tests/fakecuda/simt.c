// SPDX-License-Identifier: MIT
/*
 * tests/fakecuda/simt.c - the SIMT emulator's scheduler: a block's threads as fibers on the
 * calling thread, each run until it finishes or waits at a barrier.
 *
 * A thread runs until it exits, calls __syncthreads (it waits for every thread of the block
 * that has not exited, as on Volta and later) or a warp shuffle (it waits for the 32 lanes of
 * its warp, whose values are then exchanged).  The block runs one warp at a time: its lanes
 * run in turn, each until it waits, and when all 32 wait at a shuffle they exchange and go
 * on, so a warp runs up to the next __syncthreads (or its end) before the next warp starts;
 * then, once every live thread waits there, the barrier opens.  The warps' order is shuffled
 * anew for every stretch between barriers (a seeded xorshift: simt_seed()), so a warp that
 * reads what another warp writes without a barrier in between reads it before it is written
 * in about half of the blocks, and gets the poison every block's shared memory starts with
 * (0xff bytes: NaN floats): a missing __syncthreads makes results wrong here, as it does on
 * a GPU now and then.  Anything that cannot go on is a deadlock the GPU would hang or
 * misbehave on (a shuffle some lanes of the warp never reach, a __syncthreads some threads
 * skip while others wait at a shuffle): the launch fails and says which threads wait where.
 * cp.async copies are queued per thread and carried out at its cp.async.wait_all, so reading
 * a staged tile before waiting reads the poison too.
 *
 * The lanes of a warp run in a new random order for every stretch between shuffles, so a lane
 * that reads what another lane of its warp writes without a shuffle or barrier in between
 * (code that assumes lockstep warps, wrong since Volta) reads it too early now and then.
 * Not caught: anything about speed, coalescing or registers.
 *
 * On x86-64 a switch is a dozen instructions of our own (callee-saved registers and the stack
 * pointer); elsewhere ucontext, whose every switch is also a
 * sigprocmask system call (ten times slower).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef __x86_64__
#include <ucontext.h>
#endif

#include "tests/fakecuda/simt.h"

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif

#ifdef SIMT_ASAN
/* ASan must be told when the stack changes (sanitizer/common_interface_defs.h) */
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
				     size_t *size_old);
void __asan_unpoison_memory_region(const volatile void *addr, size_t size);
#endif

#define STACK_SIZE ((size_t)256 << 10) /* virtual; a kernel frame needs a few KiB */
#define GUARD ((size_t)4096)

#if defined(__x86_64__)
/*
 * Save the callee-saved registers on the current stack, store the stack pointer in *from, load
 * @to and restore what it saved.  A new fiber's stack is laid out as if it had switched away
 * just before fiber_start (new_stack()).  The SSE and x87 control words, callee-saved too in
 * the ABI, are left alone: every fiber runs with the thread's, which nothing in a launch
 * changes (device code has no floating-point environment: CUDA rounds per instruction), and
 * saving and loading them took 80 % of the switch's time (perf, 2026-12-03).
 */
void simt_switch(void **from, void *to);
__asm__(".text\n"
	".p2align 4\n"
	".type simt_switch, @function\n"
	"simt_switch:\n"
	"	pushq %rbp\n"
	"	pushq %rbx\n"
	"	pushq %r12\n"
	"	pushq %r13\n"
	"	pushq %r14\n"
	"	pushq %r15\n"
	"	movq %rsp, (%rdi)\n"
	"	movq %rsi, %rsp\n"
	"	popq %r15\n"
	"	popq %r14\n"
	"	popq %r13\n"
	"	popq %r12\n"
	"	popq %rbx\n"
	"	popq %rbp\n"
	"	ret\n"
	".size simt_switch, .-simt_switch\n");
#define SIMT_ASM_SWITCH 1
#endif

enum fstate {
	F_RUN,	/* runnable */
	F_BAR,	/* at __syncthreads */
	F_WARP, /* at a warp shuffle */
	F_DONE, /* exited (or abandoned after a fault) */
};

struct copy {
	void *dst;
	const void *src;
	unsigned int n;
};

/*
 * a shared-memory load the kernel declared (KVMM_SMEM_LOAD): where in the code, its first
 * 4-byte word, its size, and (smem_settle()) the number of its site among the warp's
 */
struct smem_load {
	uintptr_t site;
	uint32_t word, n, loc;
};

struct fiber {
#ifdef SIMT_ASM_SWITCH
	void *sp;
#else
	ucontext_t ctx;
#endif
	enum fstate state;
	struct simt_dim3 tid;
	char *stack;
	void *fake_stack;	    /* ASan's for this fiber */
	uint32_t shfl_in, shfl_out; /* the 32-bit words exchanged */
	unsigned int shfl_mask, shfl_src;
	/* a gather (simt_warp_gather) instead of a shuffle: n words in; else n 0 */
	const uint32_t *gather_in;
	unsigned int gather_n;
	struct copy *copies;
	unsigned int ncopies, capcopies;
	/* the loads since the warp last met (a shuffle, gather, barrier or exit) */
	struct smem_load *loads;
	unsigned int nloads, caploads;
};

struct simt_dim3 simt_thread_idx, simt_block_idx, simt_block_dim, simt_grid_dim;
char simt_dyn_smem[SIMT_DYN_SMEM_MAX] __attribute__((aligned(128)));
int (*simt_check_global)(const void *p, size_t n);
uint64_t simt_staged_bytes;
uint64_t simt_smem_requests, simt_smem_wavefronts, simt_smem_ideal, simt_smem_unpaired;

static struct {
#ifdef SIMT_ASM_SWITCH
	void *sched_sp;
#else
	ucontext_t sched;
#endif
	struct fiber *fibers; /* grown to the largest block launched, kept */
	unsigned int cap, nthreads;
	struct fiber *cur;
	/* each warp's words of its last gather, and the exchanges so far (their serials) */
	struct simt_gathered gathered[SIMT_MAX_THREADS / SIMT_WARP];
	uint64_t exchanges;
	const struct simt_kernel *k;
	const void *args;
	unsigned int smem;
	bool failed;
	bool no_banks;	  /* KVMM_FAKECUDA_BANKS=0: loads checked, bank conflicts not counted */
	uint32_t *sorted; /* smem_settle()'s: a warp's loads (indices) by lane, site, order */
	size_t capsorted;
	char why[256];
	uint64_t rng; /* the warp order */
	void *sched_fake_stack;
	const void *sched_bottom;
	size_t sched_size;
} S;

/* ---- switching ----------------------------------------------------------------------------- */

/* from the scheduler into fiber f */
static void enter_fiber(struct fiber *f)
{
	S.cur = f;
	simt_thread_idx = f->tid;
#ifdef SIMT_ASAN
	__sanitizer_start_switch_fiber(&S.sched_fake_stack, f->stack, STACK_SIZE);
#endif
#ifdef SIMT_ASM_SWITCH
	simt_switch(&S.sched_sp, f->sp);
#else
	swapcontext(&S.sched, &f->ctx);
#endif
#ifdef SIMT_ASAN
	__sanitizer_finish_switch_fiber(S.sched_fake_stack, NULL, NULL);
#endif
}

/* in a fiber that has just been entered */
static void arrived(struct fiber *f)
{
#ifdef SIMT_ASAN
	__sanitizer_finish_switch_fiber(f->fake_stack, &S.sched_bottom, &S.sched_size);
#else
	(void)f;
#endif
}

/* from the current fiber back to the scheduler; returns when the scheduler resumes it */
static void leave_fiber(bool for_good)
{
	struct fiber *f = S.cur;

#ifdef SIMT_ASAN
	__sanitizer_start_switch_fiber(for_good ? NULL : &f->fake_stack, S.sched_bottom,
				       S.sched_size);
#else
	(void)for_good;
#endif
#ifdef SIMT_ASM_SWITCH
	simt_switch(&f->sp, S.sched_sp);
#else
	swapcontext(&f->ctx, &S.sched);
#endif
	arrived(f);
}

static void fiber_main(void)
{
	struct fiber *f = S.cur;

	arrived(f);
	S.k->entry(S.args);
	f->state = F_DONE;
	leave_fiber(true);
	abort(); /* a finished fiber is never resumed */
}

/* ---- what the device code calls ------------------------------------------------------------- */

void simt_fail(const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!S.failed) {
		n = snprintf(S.why, sizeof(S.why),
			     "%s block (%u,%u,%u) thread (%u,%u,%u): ", S.k ? S.k->name : "?",
			     simt_block_idx.x, simt_block_idx.y, simt_block_idx.z,
			     simt_thread_idx.x, simt_thread_idx.y, simt_thread_idx.z);
		va_start(ap, fmt);
		if (n > 0 && (size_t)n < sizeof(S.why))
			vsnprintf(S.why + n, sizeof(S.why) - (size_t)n, fmt, ap);
		va_end(ap);
		S.failed = true;
	}
	if (!S.cur) {
		fprintf(stderr, "simt: %s (outside a kernel)\n", S.why);
		abort();
	}
	S.cur->state = F_DONE;
	leave_fiber(true);
	abort();
}

void simt_syncthreads(void)
{
	S.cur->state = F_BAR;
	leave_fiber(false);
}

uint32_t simt_shfl_xor(unsigned int mask, uint32_t v, int lane_mask)
{
	struct fiber *f = S.cur;
	unsigned int lane = (unsigned int)(f - S.fibers) % SIMT_WARP;

	if (lane_mask < 0 || lane_mask >= (int)SIMT_WARP)
		simt_fail("__shfl_xor_sync with lane mask %d", lane_mask);
	f->shfl_in = v;
	f->shfl_mask = mask;
	f->shfl_src = lane ^ (unsigned int)lane_mask;
	f->gather_n = 0;
	f->state = F_WARP;
	leave_fiber(false);
	return f->shfl_out;
}

const struct simt_gathered *simt_warp_gather(const uint32_t *in, unsigned int n)
{
	struct fiber *f = S.cur;

	if (!n || n > SIMT_GATHER_MAX)
		simt_fail("warp gather of %u words", n);
	f->gather_in = in;
	f->gather_n = n;
	f->shfl_mask = 0xffffffffu;
	f->state = F_WARP;
	leave_fiber(false);
	return &S.gathered[(unsigned int)(f - S.fibers) / SIMT_WARP];
}

static bool in_smem(const void *p, unsigned int n)
{
	const char *c = p;

	return c >= simt_dyn_smem && c + n <= simt_dyn_smem + S.smem;
}

/*
 * A fiber's log of *cap entries of size bytes made twice as large (first entries when empty):
 * the new log, *cap updated; NULL (the old log and *cap as they were) without memory.
 */
static void *grow_log(void *log, unsigned int *cap, size_t size, unsigned int first)
{
	unsigned int n = *cap ? 2 * *cap : first;
	void *p = realloc(log, n * size);

	if (p)
		*cap = n;
	return p;
}

void simt_cp_async(void *dst, const void *src, unsigned int n)
{
	struct fiber *f = S.cur;

	if (n != 4 && n != 8 && n != 16)
		simt_fail("cp.async of %u bytes", n);
	if (((uintptr_t)dst | (uintptr_t)src) % n)
		simt_fail("cp.async of %u bytes from %p to %p: not %u-byte aligned", n, src, dst,
			  n);
	if (!in_smem(dst, n))
		simt_fail("cp.async to %p: outside the %u bytes of dynamic shared memory", dst,
			  S.smem);
	if (simt_check_global && simt_check_global(src, n))
		simt_fail("cp.async from %p (%u bytes): not device memory", src, n);
	if (f->ncopies == f->capcopies) {
		struct copy *c = grow_log(f->copies, &f->capcopies, sizeof(*c), 64);

		if (!c)
			simt_fail("out of host memory for cp.async");
		f->copies = c;
	}
	f->copies[f->ncopies++] = (struct copy){dst, src, n};
	simt_staged_bytes += n;
}

void simt_smem_load(const void *p, unsigned int n, const void *site)
{
	struct fiber *f = S.cur;

	if (n != 1 && n != 2 && n != 4 && n != 8 && n != 16)
		simt_fail("shared-memory load of %u bytes", n);
	if ((uintptr_t)p % n)
		simt_fail("shared-memory load of %u bytes at %p: not %u-byte aligned", n, p, n);
	if (!in_smem(p, n))
		simt_fail("shared-memory load at %p: outside the %u bytes of dynamic shared memory",
			  p, S.smem);
	if (S.no_banks)
		return;
	if (f->nloads == f->caploads) {
		struct smem_load *l = grow_log(f->loads, &f->caploads, sizeof(*l), 256);

		if (!l)
			simt_fail("out of host memory for the shared-memory load log");
		f->loads = l;
	}
	f->loads[f->nloads++] = (struct smem_load){
		(uintptr_t)site, (uint32_t)(((const char *)p - simt_dyn_smem) / 4), n, 0};
}

/* distinct load sites a warp may use between two meetings (more is a launch failure) */
#define SETTLE_SITES 64u

/*
 * Warp w0..w1's loads (since it last met) by lane, site and order: each load's site numbered
 * in l->loc (in the order the warp first used them), then per lane a counting sort of the
 * loads' indices into S.sorted, lane after lane.  base[i], start[i][s] and cnt[i][s] say where
 * lane w0 + i's loads at site s are.  Counts and places are kept in registers along runs of
 * one site (a loop's loads), not bumped in memory per load.  Returns the number of sites, or
 * -1 (S.failed and S.why set).
 */
static int sort_loads(unsigned int w0, unsigned int w1, size_t *base,
		      unsigned int (*start)[SETTLE_SITES], unsigned int (*cnt)[SETTLE_SITES])
{
	uintptr_t sites[SETTLE_SITES];
	unsigned int nsites = 0, last = 0;
	size_t total = 0;

	for (unsigned int i = w0; i < w1; i++) {
		struct fiber *f = &S.fibers[i];
		unsigned int run = 0, len = 0;

		for (unsigned int j = 0; j < f->nloads; j++) {
			struct smem_load *l = &f->loads[j];

			if (!nsites || sites[last] != l->site) {
				for (last = 0; last < nsites && sites[last] != l->site; last++)
					;
				if (last == nsites) {
					if (nsites == SETTLE_SITES) {
						snprintf(
							S.why, sizeof(S.why),
							"%s: more than %u shared-memory load sites "
							"between two meetings of a warp",
							S.k->name, SETTLE_SITES);
						S.failed = true;
						return -1;
					}
					for (unsigned int k = 0; k < w1 - w0; k++)
						cnt[k][nsites] = 0;
					sites[nsites++] = l->site;
				}
			}
			l->loc = last;
			if (len && last == run) {
				len++;
			} else {
				if (len)
					cnt[i - w0][run] += len;
				run = last;
				len = 1;
			}
		}
		if (len)
			cnt[i - w0][run] += len;
		total += f->nloads;
	}
	if (total > S.capsorted) {
		uint32_t *m = realloc(S.sorted, total * sizeof(*m));

		if (!m) {
			snprintf(S.why, sizeof(S.why), "%s: out of host memory for the load log",
				 S.k->name);
			S.failed = true;
			return -1;
		}
		S.sorted = m;
		S.capsorted = total;
	}
	total = 0;
	for (unsigned int i = w0; i < w1; i++) {
		const struct fiber *f = &S.fibers[i];
		unsigned int *st = start[i - w0], next[SETTLE_SITES], at = 0, run = 0, pos = 0;
		uint32_t *out = S.sorted + total;

		for (unsigned int s = 0; s < (unsigned int)nsites; s++) {
			st[s] = next[s] = at;
			at += cnt[i - w0][s];
		}
		base[i - w0] = total;
		for (unsigned int j = 0; j < f->nloads; j++) {
			if (!j || f->loads[j].loc != run) {
				if (j)
					next[run] = pos;
				run = f->loads[j].loc;
				pos = next[run];
			}
			out[pos++] = j;
		}
		total += f->nloads;
	}
	return (int)nsites;
}

/* phase_wavefronts() where some bank must deliver two words or more: count them */
static __attribute__((noinline)) unsigned int conflict_wavefronts(const struct smem_load *const *at,
								  unsigned int lo, unsigned int hi,
								  unsigned int words)
{
	uint32_t bank[SIMT_WARP][SIMT_WARP]; /* a phase loads at most 32 words */
	unsigned int cnt[SIMT_WARP] = {0}, worst = 1;

	for (unsigned int i = lo; i < hi; i++) {
		if (!at[i])
			continue;
		for (uint32_t w = at[i]->word; w < at[i]->word + words; w++) {
			unsigned int b = w % SIMT_WARP, j;

			for (j = 0; j < cnt[b] && bank[b][j] != w; j++)
				;
			if (j == cnt[b]) {
				bank[b][cnt[b]++] = w;
				worst = cnt[b] > worst ? cnt[b] : worst;
			}
		}
	}
	return worst;
}

/*
 * The wavefronts one phase takes: the loads at[lo..hi) (NULL: a lane inactive in it) of n
 * bytes each, each bank delivering its distinct words one per wavefront.  0: no lane active.
 * Most phases ask no bank for two words: one wavefront, found with a mask of the banks seen.
 */
static unsigned int phase_wavefronts(const struct smem_load *const *at, unsigned int lo,
				     unsigned int hi, unsigned int n)
{
	uint32_t seen = 0, word[SIMT_WARP];
	unsigned int words = (n + 3) / 4, any = 0;

	for (unsigned int i = lo; i < hi; i++) {
		if (!at[i])
			continue;
		any = 1;
		for (uint32_t w = at[i]->word; w < at[i]->word + words; w++) {
			unsigned int b = w % SIMT_WARP;

			if (!(seen >> b & 1)) {
				seen |= 1u << b;
				word[b] = w;
			} else if (word[b] != w) {
				return conflict_wavefronts(at, lo, hi, words);
			}
		}
	}
	return any;
}

/*
 * The bank conflicts of the loads warp w0..w1 made since it last met.  The m-th load a lane
 * made at one place in the code (one KVMM_SMEM_LOAD) is one warp-wide instruction with the
 * m-th loads of the other lanes there, as the warp runs in lockstep (a lane that made fewer,
 * in a shorter loop or a branch, is inactive for the rest), and it is served as the hardware
 * serves it: 32 banks of 4-byte words, lanes reading the same word share it; loads of 8 bytes
 * in two phases of 16 lanes, of 16 bytes in four of 8.  A phase takes as many wavefronts as
 * the most distinct words one bank must deliver (1: conflict-free).
 */
static void smem_settle(unsigned int w0, unsigned int w1)
{
	unsigned int start[SIMT_WARP][SETTLE_SITES], cnt[SIMT_WARP][SETTLE_SITES];
	size_t base[SIMT_WARP];
	unsigned int i;
	int nsites;

	for (i = w0; i < w1 && !S.fibers[i].nloads; i++)
		;
	if (i == w1)
		return; /* no loads: a shuffle in the softmax, say */
	nsites = sort_loads(w0, w1, base, start, cnt);
	for (int site = 0; site < nsites; site++) {
		unsigned int most = 0;

		for (i = 0; i < w1 - w0; i++)
			most = cnt[i][site] > most ? cnt[i][site] : most;
		for (unsigned int m = 0; m < most; m++) {
			const struct smem_load *at[SIMT_WARP];
			unsigned int n = 0, phases, per;
			bool same = true;

			/* the m-th load of each lane at this site; NULL: inactive in it */
			for (i = 0; i < w1 - w0; i++) {
				at[i] = m < cnt[i][site]
						? &S.fibers[w0 + i].loads
							   [S.sorted[base[i] + start[i][site] + m]]
						: NULL;
				if (!at[i])
					continue;
				if (!n)
					n = at[i]->n;
				else if (at[i]->n != n)
					same = false;
			}
			if (!same) {
				simt_smem_unpaired++; /* one place, different sizes: not one instruction */
				continue;
			}
			simt_smem_requests++;
			phases = n <= 4 ? 1 : n / 4;
			per = SIMT_WARP / phases;
			for (unsigned int ph = 0; ph < phases; ph++) {
				unsigned int hi =
					(ph + 1) * per < w1 - w0 ? (ph + 1) * per : w1 - w0;
				unsigned int wf =
					ph * per < hi ? phase_wavefronts(at, ph * per, hi, n) : 0;

				simt_smem_wavefronts += wf;
				simt_smem_ideal += wf > 0;
			}
		}
	}
	for (i = w0; i < w1; i++)
		S.fibers[i].nloads = 0;
}

void simt_cp_async_commit(void)
{
	/* groups are only waited for all at once (cp.async.wait_all): nothing to mark */
}

void simt_cp_async_wait_all(void)
{
	struct fiber *f = S.cur;

	for (unsigned int i = 0; i < f->ncopies; i++)
		memcpy(f->copies[i].dst, f->copies[i].src, f->copies[i].n);
	f->ncopies = 0;
}

/* ---- the scheduler ------------------------------------------------------------------------ */

static int grow(unsigned int n)
{
	struct fiber *fs;

	if (n <= S.cap)
		return 0;
	fs = realloc(S.fibers, n * sizeof(*fs));
	if (!fs)
		return -1;
	memset(fs + S.cap, 0, (n - S.cap) * sizeof(*fs));
	S.fibers = fs;
	for (unsigned int i = S.cap; i < n; i++) {
		/* a guard page below each stack: an overflow faults instead of corrupting */
		char *m = mmap(NULL, STACK_SIZE + GUARD, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED)
			return -1;
		mprotect(m, GUARD, PROT_NONE);
		fs[i].stack = m + GUARD;
		S.cap = i + 1;
	}
	return 0;
}

static const char *state_name(enum fstate s)
{
	return s == F_RUN    ? "running"
	       : s == F_BAR  ? "__syncthreads"
	       : s == F_WARP ? "a shuffle"
			     : "exited";
}

/* a random permutation of order[0..n) (warps between barriers, lanes between shuffles) */
static void shuffle_order(unsigned int *order, unsigned int n)
{
	if (n < 2)
		return;
	for (unsigned int i = n - 1; i > 0; i--) {
		unsigned int j, x;

		S.rng ^= S.rng << 13;
		S.rng ^= S.rng >> 7;
		S.rng ^= S.rng << 17;
		/* the high 32 bits scaled to [0, i] (no division) */
		j = (unsigned int)(((S.rng >> 32) * (i + 1)) >> 32);
		x = order[i];
		order[i] = order[j];
		order[j] = x;
	}
}

/*
 * Run warp w's lanes until none can go on without another warp: whenever all 32 lanes wait
 * at a shuffle, exchange and go on.  Returns false when the warp's lanes wait at a shuffle
 * that not all of them reached (an error the deadlock report describes, unless a mask is bad).
 */
static bool run_warp(unsigned int w)
{
	unsigned int w0 = w * SIMT_WARP,
		     w1 = w0 + SIMT_WARP < S.nthreads ? w0 + SIMT_WARP : S.nthreads;
	unsigned int lanes[SIMT_WARP];

	for (unsigned int i = 0; i < w1 - w0; i++)
		lanes[i] = w0 + i;
	for (;;) {
		unsigned int waiting = 0;

		/* the lanes in a new order each time: nothing orders them but shuffles */
		shuffle_order(lanes, w1 - w0);
		for (unsigned int i = 0; i < w1 - w0 && !S.failed; i++)
			if (S.fibers[lanes[i]].state == F_RUN)
				enter_fiber(&S.fibers[lanes[i]]);
		if (S.failed)
			return true;
		smem_settle(w0, w1);
		for (unsigned int i = w0; i < w1; i++)
			waiting += S.fibers[i].state == F_WARP;
		if (!waiting)
			return true;
		/* lanes exited or at __syncthreads, or a partial warp: a deadlock */
		if (waiting != SIMT_WARP)
			return false;
		for (unsigned int i = w0; i < w1; i++) {
			struct fiber *f = &S.fibers[i];

			if (f->gather_n != S.fibers[w0].gather_n) {
				snprintf(S.why, sizeof(S.why),
					 "%s block (%u,%u,%u): thread %u is at a %s (%u words) "
					 "while "
					 "thread %u is at a %s (%u words)",
					 S.k->name, simt_block_idx.x, simt_block_idx.y,
					 simt_block_idx.z, i,
					 f->gather_n ? "warp gather" : "shuffle",
					 f->gather_n ? f->gather_n : 1, w0,
					 S.fibers[w0].gather_n ? "warp gather" : "shuffle",
					 S.fibers[w0].gather_n ? S.fibers[w0].gather_n : 1);
				S.failed = true;
				return true;
			}
			if (f->gather_n) {
				/* each lane's words into the warp's buffer (the lanes still wait) */
				memcpy(S.gathered[w].words + (i - w0) * f->gather_n, f->gather_in,
				       f->gather_n * sizeof(uint32_t));
				continue;
			}
			if (f->shfl_mask != 0xffffffffu) {
				snprintf(S.why, sizeof(S.why),
					 "%s block (%u,%u,%u): thread %u shuffles with mask %#x; "
					 "the kernels' shuffles are full-warp",
					 S.k->name, simt_block_idx.x, simt_block_idx.y,
					 simt_block_idx.z, i, f->shfl_mask);
				S.failed = true;
				return true;
			}
			f->shfl_out = S.fibers[w0 + f->shfl_src].shfl_in;
		}
		S.gathered[w].serial = ++S.exchanges;
		S.gathered[w].warp = w;
		for (unsigned int i = w0; i < w1; i++)
			S.fibers[i].state = F_RUN;
	}
}

static void deadlock(void)
{
	int len = snprintf(S.why, sizeof(S.why), "%s block (%u,%u,%u): deadlock:", S.k->name,
			   simt_block_idx.x, simt_block_idx.y, simt_block_idx.z);

	/* the first few threads per state, enough to see the pattern */
	for (unsigned int st = F_BAR; st <= F_DONE && len > 0 && (size_t)len < sizeof(S.why);
	     st++) {
		unsigned int shown = 0, count = 0;

		for (unsigned int i = 0; i < S.nthreads; i++)
			if (S.fibers[i].state == (enum fstate)st && count++ < 4) {
				len += snprintf(S.why + len, sizeof(S.why) - (size_t)len, "%s%u",
						shown++ ? "," : " at ", i);
				if (len < 0 || (size_t)len >= sizeof(S.why))
					return;
			}
		if (count)
			len += snprintf(S.why + len, sizeof(S.why) - (size_t)len, "%s %s (%u)",
					count > 4 ? ",..." : "", state_name((enum fstate)st),
					count);
	}
	S.failed = true;
}

/* f starts at fiber_main when next entered */
static void new_stack(struct fiber *f)
{
#ifdef SIMT_ASM_SWITCH
	/* what simt_switch pops: r15 ... rbp, then fiber_main as the return */
	uint64_t *top = (uint64_t *)(f->stack + STACK_SIZE), *sp = top - 8;

	memset(sp, 0, 8 * sizeof(*sp));
	sp[6] = (uint64_t)(uintptr_t)fiber_main;
	sp[7] = 0; /* fiber_main's return address: it never returns (rsp = 8 mod 16 at entry) */
	f->sp = sp;
#else
	getcontext(&f->ctx);
	f->ctx.uc_stack.ss_sp = f->stack;
	f->ctx.uc_stack.ss_size = STACK_SIZE;
	f->ctx.uc_link = NULL;
	makecontext(&f->ctx, fiber_main, 0);
#endif
}

static void run_block(void)
{
	unsigned int nw = (S.nthreads + SIMT_WARP - 1) / SIMT_WARP,
		     order[SIMT_MAX_THREADS / SIMT_WARP];

	for (unsigned int i = 0; i < S.nthreads; i++) {
		struct fiber *f = &S.fibers[i];

		f->state = F_RUN;
		f->ncopies = 0;
		f->nloads = 0;
		f->fake_stack = NULL;
		f->tid = (struct simt_dim3){i % simt_block_dim.x,
					    i / simt_block_dim.x % simt_block_dim.y,
					    i / (simt_block_dim.x * simt_block_dim.y)};
		new_stack(f);
	}
	/* shared memory starts as garbage on the GPU: here as NaNs */
	memset(simt_dyn_smem, 0xff, S.smem);
	for (unsigned int w = 0; w < nw; w++)
		order[w] = w;
	for (;;) {
		unsigned int live = 0, at_bar = 0;

		shuffle_order(order, nw);
		for (unsigned int w = 0; w < nw && !S.failed; w++)
			if (!run_warp(order[w])) {
				deadlock();
				break;
			}
		if (S.failed)
			break;
		for (unsigned int i = 0; i < S.nthreads; i++) {
			live += S.fibers[i].state != F_DONE;
			at_bar += S.fibers[i].state == F_BAR;
		}
		if (!live)
			break;
		if (at_bar != live) {
			deadlock();
			break;
		}
		for (unsigned int i = 0; i < S.nthreads; i++)
			if (S.fibers[i].state == F_BAR)
				S.fibers[i].state = F_RUN;
	}
	S.cur = NULL;
}

void simt_seed(uint64_t seed)
{
	S.rng = seed ? seed : 0x9e3779b97f4a7c15ull; /* xorshift must not start at 0 */
}

int simt_launch(const struct simt_kernel *k, struct simt_dim3 grid, struct simt_dim3 block,
		unsigned int smem, const void *args, char *err, size_t errlen)
{
	unsigned int n = block.x * block.y * block.z;

	if (!n || n > SIMT_MAX_THREADS || !grid.x || !grid.y || !grid.z ||
	    smem > SIMT_DYN_SMEM_MAX) {
		snprintf(err, errlen, "%s: bad launch dimensions", k->name);
		return -1;
	}
	if (grow(n)) {
		snprintf(err, errlen, "%s: no host memory for %u fibers", k->name, n);
		return -1;
	}
	if (!S.rng)
		simt_seed(0);
	{
		const char *e = getenv("KVMM_FAKECUDA_BANKS");

		S.no_banks = e && !strcmp(e, "0");
	}
	S.k = k;
	S.args = args;
	S.smem = smem;
	S.nthreads = n;
	S.failed = false;
	simt_block_dim = block;
	simt_grid_dim = grid;
	for (unsigned int z = 0; z < grid.z && !S.failed; z++)
		for (unsigned int y = 0; y < grid.y && !S.failed; y++)
			for (unsigned int x = 0; x < grid.x && !S.failed; x++) {
				simt_block_idx = (struct simt_dim3){x, y, z};
				run_block();
			}
	if (S.failed) {
#ifdef SIMT_ASAN
		/* abandoned frames leave their redzones poisoned: the stacks are reused */
		for (unsigned int i = 0; i < n; i++)
			__asan_unpoison_memory_region(S.fibers[i].stack, STACK_SIZE);
#endif
		snprintf(err, errlen, "%s", S.why);
	}
	S.k = NULL;
	return S.failed ? -1 : 0;
}
