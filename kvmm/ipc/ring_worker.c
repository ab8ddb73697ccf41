// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/ring_worker.c - ring workers: threads that poll the data-plane rings of the
 * sessions of the namespaces given to them (kvmmd.conf `ring_threads`), so that namespaces
 * are served on several CPUs at once.  The main loop (server.c) keeps everything else: the
 * sockets, HELLO/ATTACH, admin verbs, timers, the remote tier's completions, and every
 * session's lifetime.
 *
 * Who touches what:
 * - A namespace's rings all go to one worker (chosen at its first ring attach: the one with
 *   the fewest sessions), because every op of a namespace takes its pool lock: two workers
 *   on one pool would only hand that lock back and forth.  Namespaces on different workers
 *   share no lock on the request path (the daemon-wide budget's fast path takes none while
 *   it is not overcommitted, kvmm/budget.c).
 * - A worker holds its lock (w->lock) across each round over its sessions; the main loop
 *   takes it to add a session after the attach was answered and to take one out before its
 *   data plane goes (detach, close), so a session never goes while a worker looks at it.
 *   Order: w->lock, then a pool lock; never the other way round.
 * - The ring state a worker and the main loop can both reach (a ring's CQ when a parked
 *   remote lookup completes, the mirror and the magazine when a socket op or reclaim changes
 *   them) is changed under the pool lock only (ring.c).
 * - What a worker cannot do itself it asks the main loop for through kick_fd: closing a
 *   session whose ring is corrupt (ring_bad), PREEMPT events of sessions it does not poll.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "compiler.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"

#define RW_EPOLL_BATCH 16

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool kvmm_ring_loop_spin(struct kvmm_server *srv, struct kvmm_ring_loop *l, bool busy)
{
	uint64_t now = now_ns();

	if (l->yield_soon) {
		/* a client spinning on our CPU waits for what we just completed */
		l->yield_soon = false;
		sched_yield();
		l->last_yield_ns = now;
	}
	if (busy) {
		l->last_work = now;
		return true;
	}
	if (now - l->last_work >= srv->ring_spin_ns)
		return false;
	/*
	 * Spinning, but give the CPU away now and then: a client that wakes us tends to be
	 * scheduled on our CPU, and a pure spin would hold its next submission off for the whole
	 * window (that made a 64-sequence step cost the 50 us spin).  Not on every round: the
	 * system call is most of a round's cost; a client known to spin on our CPU got its yield
	 * above (yield_soon).
	 */
	if (now - l->last_yield_ns >= srv->spin_sys_ns) {
		sched_yield();
		l->last_yield_ns = now;
	} else {
		cpu_relax();
	}
	return true;
}

/*
 * The load hint counts the clients a loop served over a window of KVMM_LOAD_WINDOW_NS, not
 * in one round: synchronous clients take turns (each has one call in flight, answered
 * before the other's arrives), so a round rarely serves two of them, and two synchronous
 * clients on two CPUs read a load of 2 and spun beside the daemon instead of yielding to
 * each other (kvmm-bench.md, suite flow, session 21).
 */
void kvmm_ring_loop_served(struct kvmm_ring_loop *l, struct kvmm_session *s)
{
	if (s->load_win != l->win_id + 1) {
		s->load_win = l->win_id + 1;
		l->win_count++;
	}
}

uint32_t kvmm_ring_loop_load(struct kvmm_ring_loop *l)
{
	uint32_t load;

	/* last_work: the clock of the previous busy round, close enough for a 1 ms window */
	if (!l->win_count || l->last_work - l->win_start < KVMM_LOAD_WINDOW_NS)
		return 0;
	load = l->win_count + 1;
	l->win_start = l->last_work;
	l->win_id++;
	l->win_count = 0;
	if (load == l->load)
		return 0;
	l->load = load;
	return load;
}

void kvmm_ipc_kick(struct kvmm_server *srv)
{
	uint64_t one = 1;
	ssize_t n;

	if (__atomic_exchange_n(&srv->kick_pending, 1, __ATOMIC_ACQ_REL))
		return; /* written, not read yet: the main loop will look */
	n = write(srv->kick_fd, &one, sizeof(one));
	(void)n;
}

/* ---- sessions ------------------------------------------------------------------------- */

int kvmm_ring_worker_pick(struct kvmm_session *s)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_ipc_ns *n = s->ns;
	unsigned int i;

	if (!srv->nr_rw || !n)
		return srv->epoll_fd;
	if (!n->rw || !n->nr_rw_sessions) {
		/* the namespace's first ring: the worker with the fewest sessions */
		n->rw = &srv->rw[0];
		for (i = 1; i < srv->nr_rw; i++)
			if (READ_ONCE(srv->rw[i].nr_sessions) < READ_ONCE(n->rw->nr_sessions))
				n->rw = &srv->rw[i];
	}
	s->rw = n->rw;
	return s->rw->epoll_fd;
}

void kvmm_ring_worker_add(struct kvmm_session *s)
{
	struct kvmm_ring_worker *w = s->rw;

	if (!w || s->rw_linked || !s->dp)
		return;
	pthread_mutex_lock(&w->lock);
	list_add_tail(&s->rw_node, &w->sessions);
	WRITE_ONCE(w->nr_sessions, w->nr_sessions + 1);
	s->rw_linked = true;
	/*
	 * The worker's hints, not the main loop's that kvmm_dp_create() wrote: the worker
	 * rewrites them only when they change, which may be never (it writes them under w->lock
	 * too).
	 */
	if (w->loop.cpu)
		kvmm_dp_set_cpu(s, w->loop.cpu);
	if (w->loop.load)
		kvmm_dp_set_load(s, w->loop.load);
	pthread_mutex_unlock(&w->lock);
	s->ns->nr_rw_sessions++;
	/*
	 * The worker may be asleep, armed before this session was in its list (whose client
	 * then would not ring): wake it through the new doorbell; its next sleep arms this one
	 * too.
	 */
	kvmm_dp_kick(s);
}

void kvmm_ring_worker_del(struct kvmm_session *s)
{
	struct kvmm_ring_worker *w = s->rw;

	if (!w || !s->rw_linked)
		return;
	pthread_mutex_lock(&w->lock);
	list_del(&s->rw_node);
	WRITE_ONCE(w->nr_sessions, w->nr_sessions - 1);
	s->rw_linked = false;
	pthread_mutex_unlock(&w->lock);
	if (s->ns && s->ns->nr_rw_sessions)
		s->ns->nr_rw_sessions--;
}

void kvmm_ring_worker_preempt(struct kvmm_ring_worker *w)
{
	struct kvmm_session *s;

	/* our own sessions now (w->lock held by this round); the main loop does the rest */
	list_for_each_entry (s, &w->sessions, rw_node)
		kvmm_swapd_preempt_session(s);
	kvmm_ipc_kick(w->srv);
}

/* ---- the worker's loop ------------------------------------------------------------------ */

/* One round over our sessions (w->lock held): whether any had work; *blocked as server.c. */
static bool poll_round(struct kvmm_ring_worker *w, bool *blocked)
{
	struct kvmm_session *s;
	uint32_t load;
	bool busy = false;

	*blocked = false;
	list_for_each_entry (s, &w->sessions, rw_node) {
		int n;

		if (__atomic_load_n(&s->ring_bad, __ATOMIC_RELAXED))
			continue;
		n = kvmm_dp_poll(s, KVMM_RING_BURST);
		if (n < 0) {
			/* the main loop closes it (it owns the socket and the session) */
			__atomic_store_n(&s->ring_bad, 1, __ATOMIC_RELEASE);
			kvmm_ipc_kick(w->srv);
			continue;
		}
		if (n > 0) {
			busy = true;
			kvmm_ring_loop_served(&w->loop, s);
		} else if (kvmm_dp_pending(s)) {
			*blocked = true;
		}
	}
	load = busy ? kvmm_ring_loop_load(&w->loop) : 0;
	if (load)
		list_for_each_entry (s, &w->sessions, rw_node)
			kvmm_dp_set_load(s, load);
	/* victims chosen by another loop's allocations may be ours: send their events too */
	if (__atomic_load_n(&w->srv->preempt_pending, __ATOMIC_ACQUIRE))
		kvmm_ring_worker_preempt(w);
	return busy;
}

/*
 * Before sleeping (w->lock held): ask every client to ring its doorbell, then look once
 * more, as server.c's loop does.  Returns the epoll timeout: 0 = do not sleep after all.
 */
static int arm(struct kvmm_ring_worker *w, bool blocked)
{
	struct kvmm_session *s;

	list_for_each_entry (s, &w->sessions, rw_node)
		kvmm_dp_need_wakeup(s, true);
	/* full barrier: pairs with the client's smp_mb between its tail store and flag load */
	smp_mb();
	list_for_each_entry (s, &w->sessions, rw_node)
		if (kvmm_dp_runnable(s))
			return 0;
	return blocked ? KVMM_RING_BLOCKED_MS : -1;
}

/* A place among the idle spinners (srv->rw_max_spinning): true when this worker may spin. */
static bool spin_get(struct kvmm_ring_worker *w)
{
	struct kvmm_server *srv = w->srv;
	int n = __atomic_load_n(&srv->rw_spinning, __ATOMIC_RELAXED);

	if (w->spinning)
		return true;
	while (n < srv->rw_max_spinning)
		if (__atomic_compare_exchange_n(&srv->rw_spinning, &n, n + 1, false,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			w->spinning = true;
			return true;
		}
	return false;
}

static void spin_put(struct kvmm_ring_worker *w)
{
	if (!w->spinning)
		return;
	w->spinning = false;
	__atomic_fetch_sub(&w->srv->rw_spinning, 1, __ATOMIC_RELAXED);
}

/*
 * The worker's nice value (ring_nice): ahead of the clients when they outnumber the CPUs.
 * With eight clients yielding for their completions on two CPUs, the scheduler gave a worker
 * at nice 0 about three quarters of a CPU; at -5 compound_sync from eight clients went up
 * 1.4x (kvmm-bench.md, suite flow, session 21).  setpriority() on a thread id sets that
 * thread alone (Linux); lowering a nice value needs CAP_SYS_NICE (or RLIMIT_NICE), so the
 * default is best effort.
 */
static void set_nice(struct kvmm_ring_worker *w)
{
	const struct kvmm_server_config *cfg = &w->srv->cfg;
	id_t tid = (id_t)syscall(SYS_gettid);
	int err = setpriority(PRIO_PROCESS, tid, cfg->ring_nice) ? errno : 0, cur;

	/* what it runs at, taken or not (getpriority may return -1: errno tells) */
	errno = 0;
	cur = getpriority(PRIO_PROCESS, tid);
	if (errno)
		cur = 0;
	__atomic_store_n(&w->nice, cur, __ATOMIC_RELAXED);
	if (err && cfg->ring_nice_set)
		kvmm_warn("ipc: ring worker %u: cannot run at nice %d (ring_nice): %s", w->index,
			  cfg->ring_nice, strerror(err));
	else if (err && !w->index)
		kvmm_info("ipc: ring workers stay at nice %d: %s (ring_nice = %d needs "
			  "CAP_SYS_NICE)",
			  cur, strerror(err), cfg->ring_nice);
}

static void *worker_main(void *arg)
{
	struct kvmm_ring_worker *w = arg;
	struct epoll_event evs[RW_EPOLL_BATCH];
	char name[16];

	snprintf(name, sizeof(name), "kvmmd-ring%u", w->index);
	pthread_setname_np(pthread_self(), name);
	set_nice(w);
	__atomic_store_n(&w->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		struct kvmm_session *s;
		bool busy, blocked;
		int cpu = sched_getcpu(), timeout;

		pthread_mutex_lock(&w->lock);
		/* the clients' waits yield only to a loop on their CPU: say where we run */
		if (cpu >= 0 && (uint32_t)cpu + 1 != w->loop.cpu) {
			w->loop.cpu = (uint32_t)cpu + 1;
			list_for_each_entry (s, &w->sessions, rw_node)
				kvmm_dp_set_cpu(s, w->loop.cpu);
		}
		busy = poll_round(w, &blocked);
		pthread_mutex_unlock(&w->lock);
		if (busy)
			spin_put(w); /* working, not waiting */
		if (kvmm_ring_loop_spin(w->srv, &w->loop, busy) && (busy || spin_get(w)))
			continue;
		spin_put(w);

		pthread_mutex_lock(&w->lock);
		timeout = arm(w, blocked);
		pthread_mutex_unlock(&w->lock);
		if (timeout && epoll_wait(w->epoll_fd, evs, RW_EPOLL_BATCH, timeout) < 0 &&
		    errno != EINTR) {
			kvmm_err("ipc: ring worker %u: epoll_wait: %s", w->index, strerror(errno));
			break;
		}
		/* awake: clients need not ring until we are about to sleep again */
		pthread_mutex_lock(&w->lock);
		list_for_each_entry (s, &w->sessions, rw_node)
			kvmm_dp_need_wakeup(s, false);
		pthread_mutex_unlock(&w->lock);
	}
	return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------- */

int kvmm_ring_workers_start(struct kvmm_server *srv, unsigned int n)
{
	unsigned int i;
	int ret;

	if (!n)
		return 0;
	srv->rw = calloc(n, sizeof(*srv->rw));
	if (!srv->rw)
		return -ENOMEM;
	{
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		srv->rw_max_spinning = cpus >= 4 ? (int)(cpus / 2) : 1;
	}
	for (i = 0; i < n; i++) {
		struct kvmm_ring_worker *w = &srv->rw[i];
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};

		w->srv = srv;
		w->index = i;
		w->epoll_fd = w->stop_fd = -1;
		INIT_LIST_HEAD(&w->sessions);
		pthread_mutex_init(&w->lock, NULL);
		srv->nr_rw = i + 1;
		w->loop.rx = malloc(KVMM_MSG_MAX);
		w->loop.tx = malloc(KVMM_MSG_MAX);
		if (!w->loop.rx || !w->loop.tx)
			return -ENOMEM;
		w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
		w->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (w->epoll_fd < 0 || w->stop_fd < 0)
			return -errno;
		if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->stop_fd, &ev))
			return -errno;
		ret = pthread_create(&w->thread, NULL, worker_main, w);
		if (ret)
			return -ret;
		w->started = true;
		/*
		 * Before the socket opens: a client or an admin must not see a worker without its
		 * name or nice value (STATUS RingNice read 0 while it had not run yet).
		 */
		while (!__atomic_load_n(&w->ready, __ATOMIC_ACQUIRE))
			sched_yield();
	}
	kvmm_info("ipc: %u ring worker thread(s)", n);
	return 0;
}

void kvmm_ring_workers_stop(struct kvmm_server *srv)
{
	unsigned int i;

	for (i = 0; i < srv->nr_rw; i++) {
		struct kvmm_ring_worker *w = &srv->rw[i];
		uint64_t one = 1;
		ssize_t n;

		if (!w->started)
			continue;
		__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
		n = write(w->stop_fd, &one, sizeof(one));
		(void)n;
		pthread_join(w->thread, NULL);
		w->started = false;
	}
}

void kvmm_ring_workers_free(struct kvmm_server *srv)
{
	unsigned int i;

	kvmm_ring_workers_stop(srv);
	for (i = 0; i < srv->nr_rw; i++) {
		struct kvmm_ring_worker *w = &srv->rw[i];

		if (w->epoll_fd >= 0)
			close(w->epoll_fd);
		if (w->stop_fd >= 0)
			close(w->stop_fd);
		free(w->loop.rx);
		free(w->loop.tx);
		pthread_mutex_destroy(&w->lock);
	}
	free(srv->rw);
	srv->rw = NULL;
	srv->nr_rw = 0;
}
