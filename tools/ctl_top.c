// SPDX-License-Identifier: MIT
/*
 * tools/ctl_top.c - `kvmmctl top`: a live view of kvmmd, redrawn every second with plain ANSI
 * escapes (no curses): pool usage per namespace, the prefix-cache hit rate, eviction and swap
 * traffic over the last interval, and the busiest clients by requests per second.  Each
 * refresh asks the daemon for STATUS, VMSTAT, NAMESPACES and CLIENTS on the one connection
 * and computes rates from the previous refresh.  The terminal is put in non-canonical mode
 * (when stdin is one) so that a single `q` quits; it is restored on every exit path.
 *
 * A daemon that goes away (its connection reset: stopped, restarted, crashed) does not end
 * top: it says so and connects again every second to the same socket, then goes on with
 * the new daemon (rates start again from its first sample).  A run that starts a kvmmd per
 * phase on one path (tools/kvmm-agents' modes) is then one top session.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "tools/kvmmctl.h"

#define TOP_MAX_CLIENTS 256
#define TOP_SHOW_CLIENTS 10

struct top_client {
	unsigned long long id, requests, rate;
	char line[512];
};

struct top_sample {
	unsigned long long hits, misses, pgsteal, swpout, swpin, requests;
	struct top_client clients[TOP_MAX_CLIENTS];
	unsigned int nr_clients;
};

static struct termios saved_tty;
static bool tty_raw;
static volatile sig_atomic_t top_stop;

static void tty_restore(void)
{
	if (tty_raw) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
		tty_raw = false;
	}
	fputs("\033[?25h", stdout); /* cursor back */
	fflush(stdout);
}

static void on_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

static void tty_setup(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty))
		return;
	t = saved_tty;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	if (!tcsetattr(STDIN_FILENO, TCSANOW, &t))
		tty_raw = true;
	atexit(tty_restore);
}

static unsigned long long vm(const char *vmstat, const char *name)
{
	long long v = ctl_tag(vmstat, name);

	return v < 0 ? 0 : (unsigned long long)v;
}

/* The connection is gone (the daemon stopped or crashed), not refused: wait for another. */
static bool daemon_gone(int ret)
{
	return ret == -ECONNRESET || ret == -ENOTCONN || ret == -EPIPE;
}

/* One read verb's answer; NULL when the daemon is gone (any other failure exits). */
static char *fetch(kvmm_admin_t *h, const char *verb, unsigned int op)
{
	char *t;
	int ret = ctl_read(h, op, 0, 0, 0, &t);

	if (daemon_gone(ret))
		return NULL;
	if (ret) {
		tty_restore();
		ctl_die_status(verb, ret);
	}
	return t;
}

static int by_rate(const void *a, const void *b)
{
	const struct top_client *x = a, *y = b;

	if (x->rate != y->rate)
		return x->rate < y->rate ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void bar(char *buf, size_t width, double frac)
{
	size_t i, n = (size_t)(frac * (double)width + 0.5);

	for (i = 0; i < width; i++)
		buf[i] = i < n ? '#' : '.';
	buf[width] = '\0';
}

static void draw(struct top_sample *now, const struct top_sample *prev, const char *status,
		 const char *nss, double dt)
{
	unsigned long long dh = now->hits - prev->hits, dm = now->misses - prev->misses;
	long long ps = ctl_tag(status, "PageSize");
	const char *l = NULL;
	char b[5][24], gauge[32];
	long long frames = ctl_tag(status, "Frames"), used = ctl_tag(status, "FramesUsed");
	long long cached = ctl_tag(status, "FramesCached"), nfree = ctl_tag(status, "FramesFree");
	unsigned int i;

	if (dt <= 0)
		dt = 1;
	printf("\033[H\033[2J");
	printf("kvmmctl top - kvmmd up %llds, %lld clients, %lld namespaces      (q quits)\n",
	       ctl_tag(status, "Uptime"), ctl_tag(status, "Clients"),
	       ctl_tag(status, "Namespaces"));
	bar(gauge, 20, frames > 0 ? (double)(used + cached) / (double)frames : 0);
	printf("Pool:   [%s] %s total, %s used, %s cached, %s shared, %s free\n", gauge,
	       ctl_size((uint64_t)frames, (uint64_t)ps, b[0], 24),
	       ctl_size((uint64_t)used, (uint64_t)ps, b[1], 24),
	       ctl_size((uint64_t)cached, (uint64_t)ps, b[2], 24),
	       ctl_size((uint64_t)ctl_tag(status, "FramesShared"), (uint64_t)ps, b[3], 24),
	       ctl_size((uint64_t)nfree, (uint64_t)ps, b[4], 24));
	printf("Cache:  hit rate %5.1f%% now, %5.1f%% overall; %.0f hits/s, %.0f misses/s, "
	       "%.0f evicted/s\n",
	       dh + dm ? 100.0 * (double)dh / (double)(dh + dm) : 0.0,
	       now->hits + now->misses
		       ? 100.0 * (double)now->hits / (double)(now->hits + now->misses)
		       : 0.0,
	       (double)dh / dt, (double)dm / dt, (double)(now->pgsteal - prev->pgsteal) / dt);
	printf("Swap:   %.0f pages/s out, %.0f pages/s in (total %llu out, %llu in)\n",
	       (double)(now->swpout - prev->swpout) / dt, (double)(now->swpin - prev->swpin) / dt,
	       now->swpout, now->swpin);
	printf("\n%-16s %9s %9s %9s %9s %6s %6s %7s\n", "NAMESPACE", "FRAMES", "USED", "CACHED",
	       "LIMIT", "USE%", "HIT%", "CLIENTS");
	while ((l = ctl_next(nss, "Namespace", l))) {
		char name[40];
		unsigned long long fr = ctl_kvu(l, "frames"), u = ctl_kvu(l, "used");
		unsigned long long c = ctl_kvu(l, "cached"), h = ctl_kvu(l, "hits");
		unsigned long long m = ctl_kvu(l, "misses");

		char lim[24];

		/* "-": no limit */
		lim[0] = '\0';
		ctl_kv(l, "limit", lim, sizeof(lim));
		printf("%-16s %9llu %9llu %9llu %9s %5.1f%% %5.1f%% %7llu\n",
		       ctl_first(l, name, sizeof(name)), fr, u, c, lim[0] ? lim : "-",
		       fr ? 100.0 * (double)(u + c) / (double)fr : 0.0,
		       h + m ? 100.0 * (double)h / (double)(h + m) : 0.0, ctl_kvu(l, "clients"));
	}
	/* requests per second per client, from the previous sample */
	for (i = 0; i < now->nr_clients; i++) {
		unsigned int j;

		now->clients[i].rate = now->clients[i].requests;
		for (j = 0; j < prev->nr_clients; j++)
			if (prev->clients[j].id == now->clients[i].id)
				now->clients[i].rate -= prev->clients[j].requests;
	}
	qsort(now->clients, now->nr_clients, sizeof(now->clients[0]), by_rate);
	printf("\n%6s %-16s %8s %-16s %6s %8s %8s\n", "ID", "NAME", "PID", "NAMESPACE", "SEQS",
	       "BLOCKS", "REQ/S");
	for (i = 0; i < now->nr_clients && i < TOP_SHOW_CLIENTS; i++) {
		const char *c = now->clients[i].line;
		char name[40], ns[40];

		printf("%6llu %-16s %8llu %-16s %6llu %8llu %8.0f\n", now->clients[i].id,
		       ctl_kv(c, "name", name, sizeof(name)), ctl_kvu(c, "pid"),
		       ctl_kv(c, "ns", ns, sizeof(ns)), ctl_kvu(c, "seqs"), ctl_kvu(c, "blocks"),
		       (double)now->clients[i].rate / dt);
	}
	fflush(stdout);
}

/* 0, or -ECONNRESET when the daemon went away (nothing to free then). */
static int sample(kvmm_admin_t *h, struct top_sample *s, char **status, char **nss)
{
	char *vmstat = fetch(h, "vmstat", KVMM_OP_VMSTAT);
	char *clients = vmstat ? fetch(h, "clients", KVMM_OP_CLIENTS) : NULL;
	const char *l = NULL;

	*status = clients ? fetch(h, "status", KVMM_OP_STATUS) : NULL;
	*nss = *status ? fetch(h, "namespaces", KVMM_OP_NAMESPACES) : NULL;
	if (!*nss) {
		free(vmstat);
		free(clients);
		free(*status);
		*status = NULL;
		return -ECONNRESET;
	}
	s->hits = vm(vmstat, "cache_hit");
	s->misses = vm(vmstat, "cache_miss");
	s->pgsteal = vm(vmstat, "pgsteal");
	s->swpout = vm(vmstat, "pswpout");
	s->swpin = vm(vmstat, "pswpin");
	s->nr_clients = 0;
	while ((l = ctl_next(clients, "Client", l)) && s->nr_clients < TOP_MAX_CLIENTS) {
		struct top_client *c = &s->clients[s->nr_clients++];
		char id[24];
		size_t n = strcspn(l, "\n");

		c->id = strtoull(ctl_first(l, id, sizeof(id)), NULL, 10);
		c->requests = ctl_kvu(l, "requests");
		if (n >= sizeof(c->line))
			n = sizeof(c->line) - 1;
		memcpy(c->line, l, n);
		c->line[n] = '\0';
	}
	free(vmstat);
	free(clients);
	return 0;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The daemon is gone: close the handle, say so, and connect to the socket again every
 * second until one answers (the new handle and a first sample in *prev), q quits, or
 * --count refreshes are spent.  false when top should end.
 */
static bool reconnect(kvmm_admin_t **h, struct top_sample *prev, uint64_t *rounds)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	const char *path = ctl_socket_path();

	kvmm_admin_close(*h);
	*h = NULL;
	while (!top_stop) {
		char *st, *ns;
		char c;

		printf("\033[H\033[2Jkvmmctl top - kvmmd at %s is gone; connecting again every "
		       "second      (q quits)\n",
		       path);
		fflush(stdout);
		if (ctl.count && ++*rounds >= ctl.count)
			return false;
		if (poll(&p, 1, 1000) > 0) {
			if (read(STDIN_FILENO, &c, 1) == 1) {
				if (c == 'q' || c == 'Q')
					return false;
			} else {
				p.fd = -1;
			}
		}
		if (kvmm_admin_open_timeout(path, ctl_daemon_timeout(), h))
			continue;
		if (!sample(*h, prev, &st, &ns)) {
			free(st);
			free(ns);
			return true;
		}
		kvmm_admin_close(*h); /* gone again at once */
		*h = NULL;
	}
	return false;
}

void ctl_top(kvmm_admin_t **hp)
{
	struct top_sample *cur = calloc(2, sizeof(*cur)), *prev;
	kvmm_admin_t *h = *hp;
	struct sigaction sa;
	uint64_t rounds = 0;
	bool up = true;
	double t0, t1;

	if (!cur)
		ctl_die(CTL_EXIT_DAEMON, "out of memory");
	prev = cur + 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	tty_setup();
	fputs("\033[?25l", stdout); /* hide the cursor while drawing */
	{
		char *st, *ns;

		if (sample(h, prev, &st, &ns))
			up = reconnect(&h, prev, &rounds);
		else {
			free(st);
			free(ns);
		}
	}
	t0 = mono() - 1;
	while (up && !top_stop) {
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		struct top_sample *tmp;
		char *status, *nss;
		int deadline_ms = 1000;
		double start;

		if (sample(h, cur, &status, &nss)) {
			if (!reconnect(&h, prev, &rounds))
				break;
			t0 = mono();
			continue;
		}
		t1 = mono();
		draw(cur, prev, status, nss, t1 - t0);
		free(status);
		free(nss);
		t0 = t1;
		tmp = prev;
		prev = cur;
		cur = tmp;
		if (ctl.count && ++rounds >= ctl.count)
			break;
		/* wait a second for a key; q (or Q) quits, anything else redraws at once */
		start = mono();
		while (!top_stop && deadline_ms > 0) {
			char c;
			int r = poll(&p, 1, deadline_ms);

			if (r < 0 && errno != EINTR)
				break;
			if (r > 0) {
				if (read(STDIN_FILENO, &c, 1) == 1) {
					if (c == 'q' || c == 'Q')
						top_stop = 1;
					else
						break;
				} else {
					p.fd = -1; /* stdin at EOF: just refresh */
				}
			}
			deadline_ms = 1000 - (int)((mono() - start) * 1000);
		}
	}
	tty_restore();
	printf("\n");
	free(cur < prev ? cur : prev);
	*hp = h;
}
