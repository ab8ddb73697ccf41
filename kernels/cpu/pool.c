// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/pool.c - the small persistent thread pool behind the CPU kernels' threads.
 *
 * kvmm_cpu_set_threads(n) (or KVMM_KERNEL_THREADS=n at first use) makes the attention kernels
 * split their work over n threads: the caller and n - 1 workers created once and kept.  A job
 * is a function run by every participant with its index; the participants share the work
 * through an atomic counter of their own (attn.c), so a job is correct with any number of
 * them, the caller alone included.  That is what keeps the kernels reentrant: one caller at a
 * time owns the pool (a trylock), and a second, concurrent caller simply runs its job alone.
 * Waking a sleeping thread on another core costs 65-80 us on the development VM, a large part
 * of a decode step, so both sides spin for a while first: workers for SPIN_NS after a job
 * (back-to-back steps of an engine find them awake), the caller until the last worker is done.
 * Sleeping is a futex on the generation word (workers) or the done count (caller).  Workers
 * block every signal, so they never run an engine's handlers.  A child of fork() has no
 * workers: the pool forgets them there and creates new ones at the next job.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

#define SPIN_NS 200000u /* a worker spins this long after a job before it sleeps */

struct cpu_pool {
	pthread_mutex_t lock; /* held by the caller running a job (trylock), and by set_threads */
	uint32_t want;	      /* threads a kernel uses, the caller included; 0 = not chosen yet */
	uint32_t nr_workers;  /* workers created */
	uint32_t gen;	      /* futex word: bumped once per job (and to stop) */
	uint32_t done;	      /* futex word: participating workers finished this job */
	uint32_t active;      /* workers 1..active take part in this job */
	uint32_t sleepers;    /* workers in (or about to enter) a futex wait on gen */
	bool stop;
	void (*fn)(void *arg, uint32_t w);
	void *arg;
	pthread_t tid[KVMM_CPU_MAX_THREADS];
	uint32_t born[KVMM_CPU_MAX_THREADS]; /* gen when each was created: its first job is after */
};

static struct cpu_pool pool = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void futex_wait(uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	barrier();
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	uint32_t seen = pool.born[id - 1]; /* not gen now: the job that created us bumped it */

	for (;;) {
		uint64_t deadline = now_ns() + SPIN_NS;
		uint32_t g, spins = 0;

		/* spin, then sleep, until the next job (or stop) */
		while ((g = __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE)) == seen) {
			cpu_relax();
			if (++spins % 64 || now_ns() < deadline)
				continue;
			__atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
			futex_wait(&pool.gen, seen);
			__atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
		}
		seen = g;
		if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE))
			return NULL;
		if (id > __atomic_load_n(&pool.active, __ATOMIC_ACQUIRE))
			continue;
		pool.fn(pool.arg, id);
		if (__atomic_add_fetch(&pool.done, 1, __ATOMIC_ACQ_REL) ==
		    __atomic_load_n(&pool.active, __ATOMIC_RELAXED))
			futex_wake(&pool.done);
	}
}

/* Publish the next generation and wake whoever sleeps on it; pool.lock held. */
static void bump_gen(void)
{
	__atomic_add_fetch(&pool.gen, 1, __ATOMIC_SEQ_CST);
	/* a worker counts itself a sleeper before it checks gen in futex_wait: no lost wake-up */
	if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST))
		futex_wake(&pool.gen);
}

static void atfork_child(void)
{
	/* the workers do not exist in the child; the lock was not held by a running job */
	pthread_mutex_init(&pool.lock, NULL);
	pool.nr_workers = 0;
	pool.sleepers = 0;
}

static void atfork_register(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

/* Create workers until there are n; pool.lock held.  Returns 0 or -errno (some may exist). */
static int grow(uint32_t n)
{
	sigset_t all, old;
	int err = 0;

	pthread_once(&atfork_once, atfork_register);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (pool.nr_workers < n) {
		uint32_t id = pool.nr_workers + 1;

		pool.born[id - 1] = pool.gen;
		err = -pthread_create(&pool.tid[pool.nr_workers], NULL, worker_main,
				      (void *)(uintptr_t)id);
		if (err)
			break;
		pool.nr_workers++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

/* Stop and join every worker; pool.lock held. */
static void shrink_all(void)
{
	if (!pool.nr_workers)
		return;
	__atomic_store_n(&pool.stop, true, __ATOMIC_RELEASE);
	bump_gen();
	for (uint32_t i = 0; i < pool.nr_workers; i++)
		pthread_join(pool.tid[i], NULL);
	pool.nr_workers = 0;
	__atomic_store_n(&pool.stop, false, __ATOMIC_RELEASE);
}

static uint32_t threads_from_env(void)
{
	const char *env = getenv("KVMM_KERNEL_THREADS");
	char *end;
	long n;

	if (!env || !*env)
		return 1;
	n = strtol(env, &end, 10);
	if (*end || n < 0)
		return 1;
	if (n == 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	return (uint32_t)(n < 1 ? 1 : n > KVMM_CPU_MAX_THREADS ? KVMM_CPU_MAX_THREADS : n);
}

uint32_t kvmm_cpu_get_threads(void)
{
	uint32_t n = __atomic_load_n(&pool.want, __ATOMIC_RELAXED);

	if (!n) {
		n = threads_from_env();
		__atomic_store_n(&pool.want, n, __ATOMIC_RELAXED);
	}
	return n;
}

int kvmm_cpu_set_threads(uint32_t n)
{
	int err = 0;

	if (n == 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		n = c < 1 ? 1 : (uint32_t)c;
	}
	if (n > KVMM_CPU_MAX_THREADS)
		n = KVMM_CPU_MAX_THREADS;
	pthread_mutex_lock(&pool.lock);
	if (n == 1)
		shrink_all(); /* single-threaded again: no threads left behind */
	else
		err = grow(n - 1);
	if (!err)
		__atomic_store_n(&pool.want, n, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&pool.lock);
	return err;
}

uint32_t kvmm_cpu_pool_run(void (*fn)(void *arg, uint32_t w), void *arg, uint32_t n)
{
	uint32_t active, spins = 0;

	if (n > 1 && !pthread_mutex_trylock(&pool.lock)) {
		/* workers are created here at the first job after set_threads or fork */
		if (pool.nr_workers < n - 1)
			grow(n - 1);
		active = min_t(uint32_t, n - 1, pool.nr_workers);
		pool.fn = fn;
		pool.arg = arg;
		__atomic_store_n(&pool.done, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&pool.active, active, __ATOMIC_RELEASE);
		if (active)
			bump_gen();
		fn(arg, 0);
		for (;;) {
			uint32_t d = __atomic_load_n(&pool.done, __ATOMIC_ACQUIRE);

			if (d == active)
				break;
			if (++spins < (1u << 14))
				cpu_relax();
			else
				futex_wait(&pool.done, d);
		}
		pthread_mutex_unlock(&pool.lock);
		return active + 1;
	}
	fn(arg, 0);
	return 1;
}
