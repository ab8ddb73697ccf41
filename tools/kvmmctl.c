// SPDX-License-Identifier: MIT
/*
 * tools/kvmmctl.c - the admin's view of kvmmd: every read verb of the protocol (status,
 * meminfo, vmstat, buddyinfo, clients, namespaces, seqs, pagetable, lru, swap, trace) as a
 * human table in the manner of free, vmstat and ps, or as the daemon's own JSON (--json), and
 * the write verbs (limit, drop-caches, reclaim, swapon, swapoff, fault).  It is a client of
 * libkvmm's admin calls (runtime/kvmm_admin.h): kvmm_admin_open says HELLO, each verb is one
 * call (trace follows a subscription until interrupted), and no byte of the protocol is
 * spelled here.  The numbers are the daemon's: kvmmctl asks for tagged text ("Name:  value"
 * lines and "Record: first k=v" rows) and only lays it out.  `top` (tools/ctl_top.c)
 * refreshes a summary every second.
 * Exit codes (Documentation/admin-guide/kvmmctl.md): 0 ok, 1 the daemon answered an error,
 * 2 bad arguments, 3 no daemon at the socket, 4 no permission.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tools/kvmmctl.h"

#ifndef KVMM_VERSION
#define KVMM_VERSION "unknown"
#endif

struct ctl_opts ctl;
static kvmm_admin_t *ctl_handle; /* the connection, for the error messages that look up names */

/* Priorities (limit, swapon), as kvmmd's config takes them. */
/* marks a negative number among the arguments while getopt runs (main) */
#define CTL_NEG_MARK '\001'
#define CTL_PRIO_MIN (-1000)
#define CTL_PRIO_MAX 1000
/* kvmmd's default priorities of a host-memory tier and a swap file (kvmmd.md "[swap]") */
#define CTL_SWAP_HOST_PRIO 10
#define CTL_SWAP_FILE_PRIO 5

/* ---- errors and exit codes --------------------------------------------------------------- */

void __attribute__((noreturn, format(printf, 2, 3))) ctl_die(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("kvmmctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* An -ENOENT answer to a request naming --ns: say so when that namespace is what is missing. */
static void die_if_no_ns(kvmm_admin_t *h, const char *verb)
{
	struct kvmm_admin_ns *list = NULL;
	unsigned int nr = 0;

	if (!ctl.ns)
		return;
	if (!h || kvmm_admin_namespaces(h, ctl.ns, &list, &nr) == -ENOENT)
		ctl_die(CTL_EXIT_DAEMON, "%s: no namespace '%s'", verb, ctl.ns);
	free(list);
}

/* The exit code and message for a daemon status. */
void __attribute__((noreturn)) ctl_die_status(const char *verb, int status)
{
	/* root is never refused an admin verb: its EACCES / EPERM is the daemon's own error */
	if ((status == -EACCES || status == -EPERM) && geteuid() != 0)
		ctl_die(CTL_EXIT_PERM,
			"%s: permission denied (admin verbs need root or the daemon's "
			"admin_group)",
			verb);
	if (status == -EACCES || status == -EPERM)
		ctl_die(CTL_EXIT_DAEMON, "%s: the daemon says: %s", verb, strerror(-status));
	if (status == -ENOENT)
		die_if_no_ns(ctl_handle, verb);
	if (status == -EOPNOTSUPP && !strcmp(verb, "trace"))
		ctl_die(CTL_EXIT_DAEMON,
			"trace: kvmmd keeps no trace ring (trace = off in its configuration)");
	if (status == -EOPNOTSUPP)
		ctl_die(CTL_EXIT_DAEMON, "%s: not supported by this daemon", verb);
	if (status == -ETIMEDOUT)
		/* the daemon was given up: libkvmm says who and in what state */
		ctl_die(CTL_EXIT_NODAEMON, "%s: %s", verb, kvmm_admin_why());
	ctl_die(CTL_EXIT_DAEMON, "%s: %s", verb, strerror(-status));
}

/* ---- the daemon, through libkvmm's admin calls ------------------------------------------- */

const char *ctl_socket_path(void)
{
	const char *env;
	static char buf[108];

	if (ctl.socket)
		return ctl.socket;
	env = getenv("KVMM_SOCKET");
	if (env && env[0])
		return env;
	/* kvmmd's own default (kvmm_config_default_socket): $XDG_RUNTIME_DIR when absolute */
	env = getenv("XDG_RUNTIME_DIR");
	if (env && env[0] == '/') {
		snprintf(buf, sizeof(buf), "%s/kvmm/kvmmd.sock", env);
		return buf;
	}
	return "/run/kvmm/kvmmd.sock";
}

/* --timeout MS: the daemon deadline for kvmm_admin_open_timeout (0 there: wait forever). */
int ctl_daemon_timeout(void)
{
	if (!ctl.timeout_set)
		return 0; /* libkvmm's default: $KVMM_DAEMON_TIMEOUT_MS, else 30 s */
	return ctl.timeout_ms ? ctl.timeout_ms : -1;
}

kvmm_admin_t *ctl_connect(void)
{
	const char *path = ctl_socket_path();
	kvmm_admin_t *h;
	int ret;

	ret = kvmm_admin_open_timeout(path, ctl_daemon_timeout(), &h);
	switch (ret) {
	case 0:
		return h;
	case -ENAMETOOLONG:
		ctl_die(CTL_EXIT_USAGE, "socket path too long: %s", path);
	case -EACCES:
	case -EPERM:
		ctl_die(CTL_EXIT_PERM, "%s: permission denied", path);
	case -ETIMEDOUT:
	case -ECONNRESET:
		/* connected, but HELLO got no answer */
		ctl_die(CTL_EXIT_NODAEMON, "%s", kvmm_admin_why());
	case -EPROTO:
	case -EINVAL:
	case -EBADMSG:
		/* the daemon answered HELLO, with a refusal */
		ctl_die(CTL_EXIT_DAEMON, "HELLO: %s (protocol version mismatch?)", strerror(-ret));
	case -ENOMEM:
		ctl_die(CTL_EXIT_DAEMON, "out of memory");
	default:
		ctl_die(CTL_EXIT_NODAEMON,
			"no daemon at %s (%s); is kvmmd running? (--socket, "
			"KVMM_SOCKET)",
			path, strerror(-ret));
	}
}

int ctl_read(kvmm_admin_t *h, unsigned int op, uint32_t flags, uint64_t id, uint32_t arg,
	     char **text)
{
	struct kvmm_admin_req req;

	memset(&req, 0, sizeof(req));
	req.flags = flags;
	req.id = id;
	req.reserved = arg;
	if (ctl.ns)
		strncpy(req.ns, ctl.ns, sizeof(req.ns) - 1);
	return kvmm_admin_read(h, op, &req, text);
}

/* ---- parsing the tagged text ------------------------------------------------------------------ */

/* Value of "Tag:   value ..." (first such line after @from), as a number; -1 when absent. */
long long ctl_tag(const char *text, const char *tag)
{
	int64_t v;
	int ret = kvmm_admin_value(text, tag, &v);

	if (ret == -ENOENT)
		return -1;
	return ret ? 0 : v;
}

/* Copy the value of " key=" in one record line (up to the newline) into buf; "" if absent. */
const char *ctl_kv(const char *line, const char *key, char *buf, size_t len)
{
	kvmm_admin_field(line, key, buf, len);
	return buf;
}

unsigned long long ctl_kvu(const char *line, const char *key)
{
	char b[32];

	return strtoull(ctl_kv(line, key, b, sizeof(b)), NULL, 10);
}

/* The first word after "Label:" of a record line. */
const char *ctl_first(const char *line, char *buf, size_t len)
{
	const char *p = strchr(line, ':');
	size_t n;

	buf[0] = '\0';
	if (!p)
		return buf;
	p += strspn(p + 1, " ") + 1;
	n = strcspn(p, " \n");
	if (n >= len)
		n = len - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return buf;
}

/* Each line of @text starting with "Label:" in turn: for (l = NULL; (l = ctl_next(...));) */
const char *ctl_next(const char *text, const char *label, const char *prev)
{
	return kvmm_admin_next(text, label, prev);
}

/* Frames as a size: "12.0M" style, or the frame count with --frames. */
const char *ctl_size(uint64_t frames, uint64_t page_size, char *buf, size_t len)
{
	static const char units[] = "BKMGTP";
	double v = (double)frames * (double)page_size;
	unsigned int u = 0;

	if (ctl.frames || !page_size) {
		snprintf(buf, len, "%" PRIu64, frames);
		return buf;
	}
	while (v >= 1024 && u + 1 < sizeof(units) - 1) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f%c", v, units[u]);
	else
		snprintf(buf, len, "%.1f%c", v, units[u]);
	return buf;
}

/* A namespace name as the protocol wants it (kvmm_name_check() reads the NUL padding too). */
static bool name_ok(const char *s)
{
	char buf[KVMM_NAME_LEN] = {0};

	if (strlen(s) >= sizeof(buf))
		return false;
	memcpy(buf, s, strlen(s));
	return !kvmm_name_check(buf);
}

/* ---- verbs -------------------------------------------------------------------------------------- */

static char *read_or_die(kvmm_admin_t *h, const char *verb, unsigned int op, uint32_t flags,
			 uint64_t id, uint32_t arg)
{
	char *text;
	int ret = ctl_read(h, op, flags, id, arg, &text);

	if (ret)
		ctl_die_status(verb, ret);
	return text;
}

/* --json and --raw print the daemon's answer as it is. */
static bool print_verbatim(kvmm_admin_t *h, const char *verb, unsigned int op, uint64_t id,
			   uint32_t arg)
{
	char *text;

	if (!ctl.json && !ctl.raw)
		return false;
	text = read_or_die(h, verb, op, ctl.json ? KVMM_ADMIN_F_JSON : 0, id, arg);
	fputs(text, stdout);
	free(text);
	return true;
}

static void verb_status(kvmm_admin_t *h)
{
	char *t;

	if (ctl.json) {
		print_verbatim(h, "status", KVMM_OP_STATUS, 0, 0);
		return;
	}
	/* tagged text is the human form of status (like /proc/meminfo) */
	t = read_or_die(h, "status", KVMM_OP_STATUS, 0, 0, 0);
	fputs(t, stdout);
	free(t);
}

static void verb_meminfo(kvmm_admin_t *h)
{
	const char *l = NULL, *bl;
	long long group = 1, ps0 = 0;
	uint64_t budget_free;
	char *t;

	if (print_verbatim(h, "meminfo", KVMM_OP_MEMINFO, 0, 0))
		return;
	t = read_or_die(h, "meminfo", KVMM_OP_MEMINFO, 0, 0, 0);
	bl = ctl_next(t, "Budget", NULL);
	budget_free = bl ? (uint64_t)ctl_tag(bl, "BudgetFree") : UINT64_MAX;
	printf("%-16s %9s %9s %9s %9s %9s %9s %9s %9s %6s\n", "namespace", "total", "used",
	       "cached", "shared", "free", "limit", "avail", "resident", "lowev");
	while ((l = ctl_next(t, "Namespace", l))) {
		char name[64], b[8][24];
		long long ps = ctl_tag(l, "PageSize"), nd = ctl_tag(l, "Devices");
		uint64_t total = (uint64_t)ctl_tag(l, "Total"), used = (uint64_t)ctl_tag(l, "Used");
		uint64_t cached = (uint64_t)ctl_tag(l, "Cached");
		uint64_t nfree = (uint64_t)ctl_tag(l, "Free") + (uint64_t)ctl_tag(l, "Magazines");
		/* no Limit line in this namespace's section: no limit */
		const char *ll = ctl_next(l, "Limit", NULL), *next = ctl_next(t, "Namespace", l);
		long long lim = ll && (!next || ll < next) ? ctl_tag(ll, "Limit") : -1;
		uint64_t limit = lim < 0 ? total : (uint64_t)lim;
		/* available: free plus reclaimable cache, within the limit */
		uint64_t avail = nfree + cached;

		if (limit < total && limit > used)
			avail = avail < limit - used ? avail : limit - used;
		else if (limit <= used)
			avail = 0;
		/* and within what the daemon-wide budget has left, plus its own cache */
		if (avail > budget_free + cached)
			avail = budget_free + cached;
		/* a frame mirrored on a tensor-parallel group takes PageSize on each device */
		if (nd > 1 && ps > 0) {
			ps *= nd;
			group = nd;
		}
		ctl_first(l, name, sizeof(name));
		ps0 = ps;
		printf("%-16s %9s %9s %9s %9s %9s %9s %9s %9s %6lld\n", name,
		       ctl_size(total, (uint64_t)ps, b[0], 24),
		       ctl_size(used, (uint64_t)ps, b[1], 24),
		       ctl_size(cached, (uint64_t)ps, b[2], 24),
		       ctl_size((uint64_t)ctl_tag(l, "Shared"), (uint64_t)ps, b[3], 24),
		       ctl_size(nfree, (uint64_t)ps, b[4], 24),
		       lim < 0 ? "none" : ctl_size(limit, (uint64_t)ps, b[5], 24),
		       ctl_size(avail, (uint64_t)ps, b[6], 24),
		       ctl_size((uint64_t)ctl_tag(l, "Resident"), (uint64_t)ps, b[7], 24),
		       ctl_tag(l, "LowEvents"));
	}
	/* the daemon-wide budget the namespaces share (an older daemon has none) */
	if (bl) {
		char b[4][24];

		printf("budget %s, used %s, free %s; pools span %s%s; %lld reclaims freed %lld "
		       "frames, %lld short, %lld preempted, %lld low events\n",
		       ctl_size((uint64_t)ctl_tag(bl, "Budget"), (uint64_t)ps0, b[0], 24),
		       ctl_size((uint64_t)ctl_tag(bl, "BudgetUsed"), (uint64_t)ps0, b[1], 24),
		       ctl_size(budget_free, (uint64_t)ps0, b[2], 24),
		       ctl_size((uint64_t)ctl_tag(bl, "BudgetSpan"), (uint64_t)ps0, b[3], 24),
		       ctl_tag(bl, "BudgetOvercommit") ? " (overcommitted)" : "",
		       ctl_tag(bl, "BudgetReclaims"), ctl_tag(bl, "BudgetFreed"),
		       ctl_tag(bl, "BudgetShort"), ctl_tag(bl, "BudgetPreempted"),
		       ctl_tag(bl, "BudgetLowEvents"));
	}
	if (group > 1)
		printf("(sizes are over the %lld devices that each hold every frame)\n", group);
	free(t);
}

static void verb_vmstat(kvmm_admin_t *h)
{
	char *t, *line, *save = NULL;

	if (print_verbatim(h, "vmstat", KVMM_OP_VMSTAT, 0, 0))
		return;
	t = read_or_die(h, "vmstat", KVMM_OP_VMSTAT, 0, 0, 0);
	printf("%-20s %16s\n", "counter", "value");
	for (line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':');

		if (!colon)
			continue;
		*colon = '\0';
		printf("%-20s %16s\n", line, colon + 1 + strspn(colon + 1, " "));
	}
	free(t);
}

static void verb_buddyinfo(kvmm_admin_t *h)
{
	char *t;

	if (print_verbatim(h, "buddyinfo", KVMM_OP_BUDDYINFO, 0, 0))
		return;
	t = read_or_die(h, "buddyinfo", KVMM_OP_BUDDYINFO, 0, 0, 0);
	fputs(t, stdout);
	free(t);
}

static void verb_clients(kvmm_admin_t *h)
{
	const char *l = NULL;
	char *t;

	if (print_verbatim(h, "clients", KVMM_OP_CLIENTS, ctl.client, 0))
		return;
	t = read_or_die(h, "clients", KVMM_OP_CLIENTS, 0, ctl.client, 0);
	printf("%6s %-16s %8s %6s %-9s %-16s %3s %6s %8s %10s\n", "ID", "NAME", "PID", "UID",
	       "STATE", "NAMESPACE", "DEV", "SEQS", "BLOCKS", "REQUESTS");
	while ((l = ctl_next(t, "Client", l))) {
		char id[16], name[40], st[16], ns[40];

		/* DEV: the member of a tensor-parallel device group it maps (0 otherwise) */
		printf("%6s %-16s %8llu %6llu %-9s %-16s %3llu %6llu %8llu %10llu\n",
		       ctl_first(l, id, sizeof(id)), ctl_kv(l, "name", name, sizeof(name)),
		       ctl_kvu(l, "pid"), ctl_kvu(l, "uid"), ctl_kv(l, "state", st, sizeof(st)),
		       ctl_kv(l, "ns", ns, sizeof(ns)), ctl_kvu(l, "device"), ctl_kvu(l, "seqs"),
		       ctl_kvu(l, "blocks"), ctl_kvu(l, "requests"));
	}
	free(t);
}

/*
 * A namespace's min and low from its NAMESPACES record ("-" when none, or not reported), and
 * the frames the daemon-wide budget charges it and its low events ("-" from an older daemon).
 */
static void ns_protection(kvmm_admin_t *h, const char *name, char *mn, char *lo, char *res,
			  char *lowev, size_t len)
{
	struct kvmm_admin_req req;
	char *t = NULL;

	strcpy(mn, "-");
	strcpy(lo, "-");
	strcpy(res, "-");
	strcpy(lowev, "-");
	memset(&req, 0, sizeof(req));
	snprintf(req.ns, sizeof(req.ns), "%s", name);
	if (kvmm_admin_read(h, KVMM_OP_NAMESPACES, &req, &t) || !t)
		return;
	if (kvmm_admin_field(t, "min", mn, len) <= 0)
		strcpy(mn, "-");
	if (kvmm_admin_field(t, "low", lo, len) <= 0)
		strcpy(lo, "-");
	if (kvmm_admin_field(t, "resident", res, len) <= 0)
		strcpy(res, "-");
	if (kvmm_admin_field(t, "low_events", lowev, len) <= 0)
		strcpy(lowev, "-");
	free(t);
}

static void verb_namespaces(kvmm_admin_t *h)
{
	struct kvmm_admin_ns *list;
	unsigned int nr, i;
	int ret;

	if (print_verbatim(h, "namespaces", KVMM_OP_NAMESPACES, 0, 0))
		return;
	ret = kvmm_admin_namespaces(h, ctl.ns, &list, &nr);
	if (ret)
		ctl_die_status("namespaces", ret);
	printf("%-16s %4s %9s %9s %9s %9s %9s %9s %9s %9s %6s %5s %7s %8s %10s %10s\n", "NAMESPACE",
	       "ID", "FRAMES", "LIMIT", "MIN", "LOW", "USED", "CACHED", "RESIDENT", "SHARED",
	       "LOWEV", "PRIO", "CLIENTS", "HIT%", "HITS", "EVICTED");
	for (i = 0; i < nr; i++) {
		const struct kvmm_admin_ns *n = &list[i];
		uint64_t lookups = n->hits + n->misses;
		char lim[24], mn[24], lo[24], res[24], lowev[24];

		/* "-": none (the pool's size is not a limit) */
		snprintf(lim, sizeof(lim), "%" PRIu64, n->limit);
		if (n->limit == KVMM_LIMIT_NONE)
			strcpy(lim, "-");
		ns_protection(h, n->name, mn, lo, res, lowev, sizeof(mn));
		printf("%-16s %4" PRIu32 " %9" PRIu64 " %9s %9s %9s %9" PRIu64 " %9" PRIu64
		       " %9s %9" PRIu64 " %6s %5" PRId32 " %7" PRIu64 " %7.1f%% %10" PRIu64
		       " %10" PRIu64 "\n",
		       n->name, n->id, n->frames, lim, mn, lo, n->used, n->cached, res, n->shared,
		       lowev, n->priority, n->clients,
		       lookups ? 100.0 * (double)n->hits / (double)lookups : 0.0, n->hits,
		       n->pgsteal);
	}
	free(list);
}

static void verb_seqs(kvmm_admin_t *h)
{
	const char *l = NULL;
	char *t;

	if (print_verbatim(h, "seqs", KVMM_OP_SEQS, ctl.client, 0))
		return;
	t = read_or_die(h, "seqs", KVMM_OP_SEQS, 0, ctl.client, 0);
	printf("%6s %8s %-16s %10s %8s %8s %8s %8s\n", "CLIENT", "SEQ", "NAMESPACE", "TOKENS",
	       "BLOCKS", "SEALED", "SHARED", "PINNED");
	while ((l = ctl_next(t, "Seq", l))) {
		char id[24], ns[40];

		printf("%6llu %8s %-16s %10llu %8llu %8llu %8llu %8llu\n", ctl_kvu(l, "client"),
		       ctl_first(l, id, sizeof(id)), ctl_kv(l, "ns", ns, sizeof(ns)),
		       ctl_kvu(l, "tokens"), ctl_kvu(l, "blocks"), ctl_kvu(l, "sealed"),
		       ctl_kvu(l, "shared"), ctl_kvu(l, "pinned"));
	}
	free(t);
}

static uint64_t parse_u64(const char *what, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		ctl_die(CTL_EXIT_USAGE, "%s: not a number: '%s'", what, s);
	return v;
}

/* PAGETABLE of client's seq; an unknown pair is named, not "No such file or directory". */
static char *ctl_read_pagetable(kvmm_admin_t *h, uint64_t seq, uint64_t client)
{
	char *text;
	int ret = ctl_read(h, KVMM_OP_PAGETABLE, ctl.json ? KVMM_ADMIN_F_JSON : 0, seq,
			   (uint32_t)client, &text);

	if (ret == -ENOENT)
		ctl_die(CTL_EXIT_DAEMON, "pagetable: no sequence %llu of client %llu",
			(unsigned long long)seq, (unsigned long long)client);
	if (ret)
		ctl_die_status("pagetable", ret);
	return text;
}

static void verb_pagetable(kvmm_admin_t *h, int argc, char **argv)
{
	uint64_t client = ctl.client, seq;
	const char *arg, *colon, *l = NULL;
	char *t;

	if (argc != 1)
		ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl pagetable CLIENT:SEQ (or --client ID SEQ)");
	arg = argv[0];
	colon = strchr(arg, ':');
	if (colon) {
		char c[32];

		if ((size_t)(colon - arg) >= sizeof(c))
			ctl_die(CTL_EXIT_USAGE, "pagetable: bad CLIENT:SEQ '%s'", arg);
		memcpy(c, arg, (size_t)(colon - arg));
		c[colon - arg] = '\0';
		client = parse_u64("pagetable client", c);
		seq = parse_u64("pagetable seq", colon + 1);
	} else {
		seq = parse_u64("pagetable seq", arg);
	}
	if (!client || client > UINT32_MAX || !seq)
		ctl_die(CTL_EXIT_USAGE, "pagetable: give the client: CLIENT:SEQ or --client ID");
	if (ctl.json || ctl.raw) {
		t = ctl_read_pagetable(h, seq, client);
		fputs(t, stdout);
		free(t);
		return;
	}
	t = ctl_read_pagetable(h, seq, client);
	{
		const char *nl = ctl_next(t, "Namespace", NULL);
		char ns[KVMM_NAME_LEN + 1] = "?";

		if (nl)
			ctl_first(nl, ns, sizeof(ns));
		printf("client %lld seq %lld (namespace %s): %lld tokens, %lld blocks, %lld "
		       "sealed\n",
		       ctl_tag(t, "Client"), ctl_tag(t, "Seq"), ns, ctl_tag(t, "Tokens"),
		       ctl_tag(t, "Blocks"), ctl_tag(t, "Sealed"));
	}
	printf("%8s %-8s %10s %-6s %6s %6s %8s\n", "BLOCK", "TYPE", "FRAME", "FLAGS", "REFS",
	       "PINS", "TOKENS");
	while ((l = ctl_next(t, "Pte", l))) {
		char b[16], type[16], frame[24], flags[16];

		ctl_kv(l, "type", type, sizeof(type));
		if (!strcmp(type, "swap")) {
			char tier[8], slot[24];

			snprintf(frame, sizeof(frame), "%s:%s",
				 ctl_kv(l, "tier", tier, sizeof(tier)),
				 ctl_kv(l, "slot", slot, sizeof(slot)));
		} else {
			ctl_kv(l, "frame", frame, sizeof(frame));
		}
		printf("%8s %-8s %10s %-6s %6llu %6llu %8llu\n", ctl_first(l, b, sizeof(b)), type,
		       frame[0] ? frame : "-", ctl_kv(l, "flags", flags, sizeof(flags)),
		       ctl_kvu(l, "refcount"), ctl_kvu(l, "pincount"), ctl_kvu(l, "tokens"));
	}
	printf("flags: W writable, D dirty, S sealed, H shared (copy on write)\n");
	free(t);
}

static void verb_lru(kvmm_admin_t *h)
{
	const char *sect = NULL;
	char *t;

	if (print_verbatim(h, "lru", KVMM_OP_LRU, ctl.count, 0))
		return;
	t = read_or_die(h, "lru", KVMM_OP_LRU, 0, ctl.count, 0);
	while ((sect = ctl_next(t, "Namespace", sect))) {
		const char *next = ctl_next(t, "Namespace", sect), *l = sect;
		char name[40];

		printf("%s: active %lld (%lld referenced), inactive %lld (%lld referenced); "
		       "scanned %lld, evicted %lld, activated %lld, deactivated %lld\n",
		       ctl_first(sect, name, sizeof(name)), ctl_tag(sect, "Active"),
		       ctl_tag(sect, "ActiveReferenced"), ctl_tag(sect, "Inactive"),
		       ctl_tag(sect, "InactiveReferenced"), ctl_tag(sect, "Scanned"),
		       ctl_tag(sect, "Stolen"), ctl_tag(sect, "Activated"),
		       ctl_tag(sect, "Deactivated"));
		printf("  %-9s %5s %10s %4s %8s\n", "LIST", "AGE", "FRAME", "REF", "TOKENS");
		while ((l = ctl_next(l, "Page", l == sect ? NULL : l)) && (!next || l < next)) {
			char list[16], fr[16];

			printf("  %-9s %5llu %10s %4llu %8llu\n",
			       ctl_kv(l, "list", list, sizeof(list)), ctl_kvu(l, "age"),
			       ctl_first(l, fr, sizeof(fr)), ctl_kvu(l, "referenced"),
			       ctl_kvu(l, "tokens"));
		}
	}
	printf("age: position from the list's tail; 0 on the inactive list is reclaimed next\n");
	free(t);
}

/* the remote tier: its counters as tagged text, like status */
static void verb_remote(kvmm_admin_t *h)
{
	char *t;

	if (print_verbatim(h, "remote", KVMM_OP_REMOTE, 0, 0))
		return;
	t = read_or_die(h, "remote", KVMM_OP_REMOTE, 0, 0, 0);
	if (ctl_tag(t, "Remote") == 0) {
		printf("no remote tier (kvmmd.conf [remote] remote = redis://HOST:PORT,...)\n");
		free(t);
		return;
	}
	fputs(t, stdout);
	free(t);
}

static void verb_swap(kvmm_admin_t *h)
{
	struct kvmm_admin_tier *list;
	unsigned int nr, i;
	int ret;

	if (print_verbatim(h, "swap", KVMM_OP_SWAP, 0, 0))
		return;
	ret = kvmm_admin_swap_tiers(h, ctl.ns, &list, &nr);
	if (ret)
		ctl_die_status("swap", ret);
	if (!nr) {
		printf("no swap tiers\n");
		free(list);
		return;
	}
	printf("%4s %-16s %-6s %5s %10s %10s %10s %10s %6s\n", "TIER", "NAMESPACE", "KIND", "PRIO",
	       "SLOTS", "USED", "OUT", "IN", "FAIL");
	for (i = 0; i < nr; i++) {
		const struct kvmm_admin_tier *t = &list[i];

		printf("%4" PRIu32 " %-16s %-6s %5" PRId32 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
		       " %10" PRIu64 " %6" PRIu64 "\n",
		       t->tier, t->ns, t->kind, t->priority, t->slots, t->used, t->pages_out,
		       t->pages_in, t->failures);
	}
	free(list);
}

/* ---- trace -------------------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_trace;

static void on_signal(int sig)
{
	(void)sig;
	stop_trace = 1;
}

static uint32_t parse_events(const char *list)
{
	char *dup = strdup(list), *tok, *save = NULL;
	uint32_t mask = 0;

	if (!dup)
		ctl_die(CTL_EXIT_DAEMON, "out of memory");
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int t = kvmm_admin_trace_event(tok);

		if (t < 0) {
			fprintf(stderr, "kvmmctl: unknown event '%s'; events:", tok);
			for (t = 0; kvmm_admin_trace_event_name((unsigned int)t); t++)
				fprintf(stderr, " %s",
					kvmm_admin_trace_event_name((unsigned int)t));
			fputc('\n', stderr);
			exit(CTL_EXIT_USAGE);
		}
		mask |= 1u << t;
	}
	free(dup);
	return mask;
}

/* Print trace lines; returns the number of events printed. */
static uint64_t trace_print(char *text, uint64_t budget)
{
	char *line, *save = NULL;
	uint64_t n = 0;

	for (line = strtok_r(text, "\n", &save); line && n < budget;
	     line = strtok_r(NULL, "\n", &save)) {
		char ts[32], type[16], ns[40], frame[16], b[24];

		if (ctl.json) {
			puts(line);
			n += line[0] == '{' && strstr(line, "\"seqno\"") != NULL;
			continue;
		}
		if (!strncmp(line, "Lost:", 5)) {
			printf("# %s (the ring or the socket overflowed)\n", line);
			continue;
		}
		if (strncmp(line, "Event:", 6))
			continue;
		printf("%14s %-8s client=%s ns=%s seq=%s frame=%s count=%s\n",
		       ctl_kv(line, "ts", ts, sizeof(ts)), ctl_kv(line, "type", type, sizeof(type)),
		       ctl_kv(line, "client", b, sizeof(b)), ctl_kv(line, "ns", ns, sizeof(ns)),
		       ctl_kv(line, "seq", b + 12, 12), ctl_kv(line, "frame", frame, sizeof(frame)),
		       ctl_kv(line, "count", ts + 16, 16));
		n++;
	}
	fflush(stdout);
	return n;
}

static void verb_trace(kvmm_admin_t *h)
{
	uint32_t flags = ctl.json ? KVMM_ADMIN_F_JSON : 0;
	uint64_t budget = ctl.count ? ctl.count : UINT64_MAX;
	struct sigaction sa;
	int ret;

	if (ctl.dump || ctl.clear) {
		char *t = read_or_die(h, "trace", KVMM_OP_TRACE,
				      flags | (ctl.clear ? KVMM_ADMIN_F_CLEAR : 0), ctl.client,
				      ctl.events);
		trace_print(t, budget);
		free(t);
		return;
	}
	ret = kvmm_admin_trace_follow(h, flags, ctl.client, ctl.events);
	if (ret == -ECONNRESET)
		ctl_die(CTL_EXIT_NODAEMON, "trace: %s", strerror(-ret));
	if (ret)
		ctl_die_status("trace", ret);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop_trace && budget) {
		char *t;

		ret = kvmm_admin_trace_next(h, ctl.timeout_ms ? ctl.timeout_ms : -1, &t);
		if (ret == -ETIMEDOUT)
			break;
		if (ret == -EINTR)
			continue; /* SIGINT or SIGTERM: stop_trace says */
		if (ret == -ECONNRESET)
			ctl_die(CTL_EXIT_DAEMON, "trace: the daemon closed the connection");
		if (ret == -ESHUTDOWN)
			ctl_die(CTL_EXIT_DAEMON, "trace: the daemon is shutting down");
		if (ret)
			ctl_die_status("trace", ret);
		budget -= trace_print(t, budget);
		free(t);
	}
}

/* ---- write verbs --------------------------------------------------------------------------------- */

static uint64_t parse_size_frames(const char *s)
{
	char *end;
	unsigned long long v;

	if (!strcmp(s, "none") || !strcmp(s, "max"))
		return KVMM_LIMIT_NONE;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		ctl_die(CTL_EXIT_USAGE, "limit: not a size: '%s'", s);
	if (*end == '\0' || !strcmp(end, "f"))
		return v; /* frames */
	ctl_die(CTL_EXIT_USAGE, "limit: give frames (a number) or 'none': '%s'", s);
}

static void verb_limit(kvmm_admin_t *h, int argc, char **argv)
{
	struct kvmm_limit_req req;
	int ret;

	if (argc < 2 || argc > 3)
		ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl limit NAMESPACE FRAMES|none [PRIORITY]");
	memset(&req, 0, sizeof(req));
	if (!name_ok(argv[0]))
		ctl_die(CTL_EXIT_USAGE, "limit: bad namespace name '%s'", argv[0]);
	strcpy(req.ns, argv[0]);
	req.max_frames = parse_size_frames(argv[1]);
	req.valid = KVMM_LIMIT_SET_MAX;
	if (argc == 3) {
		char *end;
		long p = strtol(argv[2], &end, 10);

		if (*end || end == argv[2])
			ctl_die(CTL_EXIT_USAGE, "limit: bad priority '%s'", argv[2]);
		if (p < CTL_PRIO_MIN || p > CTL_PRIO_MAX)
			ctl_die(CTL_EXIT_USAGE, "limit: priority %ld is not in %d..%d", p,
				CTL_PRIO_MIN, CTL_PRIO_MAX);
		req.priority = (int32_t)p;
		req.valid |= KVMM_LIMIT_SET_PRIORITY;
	}
	ret = kvmm_admin_limit(h, &req);
	if (ret == -ENOENT)
		ctl_die(CTL_EXIT_DAEMON, "limit: no namespace '%s'", argv[0]);
	if (ret)
		ctl_die_status("limit", ret);
	if (req.max_frames == KVMM_LIMIT_NONE)
		printf("%s: no limit\n", argv[0]);
	else
		printf("%s: limit %" PRIu64 " frames\n", argv[0], (uint64_t)req.max_frames);
}

/*
 * ns create|set|delete NAME [KEY=VALUE ...]: live namespaces.  Amounts are frames (a plain
 * number) or bytes with a K, M, G or T suffix (turned into frames with the daemon's page
 * size once connected); max also takes "none".
 */
struct ns_args {
	unsigned int op;
	struct kvmm_ns_req req;
	uint64_t bytes[4]; /* frames, max, min, low given as sizes; 0: in frames */
};

static void ns_amount(const char *key, const char *v, uint64_t *frames, uint64_t *bytes)
{
	char *end;
	unsigned long long n;
	const char *u;

	*bytes = 0;
	if (!strcmp(key, "max") && !strcmp(v, "none")) {
		*frames = KVMM_LIMIT_NONE;
		return;
	}
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v || !isdigit((unsigned char)v[0]))
		ctl_die(CTL_EXIT_USAGE, "ns: %s: not a number of frames or a size: '%s'", key, v);
	if (!*end) {
		*frames = n;
		return;
	}
	u = strchr("KMGT", toupper((unsigned char)*end));
	if (!u || !*u || (end[1] && strcasecmp(end + 1, "B") && strcasecmp(end + 1, "iB")))
		ctl_die(CTL_EXIT_USAGE, "ns: %s: not a number of frames or a size: '%s'", key, v);
	for (int k = 0; k <= u - "KMGT"; k++) {
		if (n > UINT64_MAX / 1024)
			ctl_die(CTL_EXIT_USAGE, "ns: %s: too large: '%s'", key, v);
		n *= 1024;
	}
	*bytes = n;
	*frames = 0;
}

static void ns_parse_args(int argc, char **argv, struct ns_args *a)
{
	static const char *const keys[] = {"frames", "max", "min", "low"};
	static const uint32_t bits[] = {KVMM_NS_SET_FRAMES, KVMM_NS_SET_MAX, KVMM_NS_SET_MIN,
					KVMM_NS_SET_LOW};
	uint64_t *fields[4];
	int i;

	memset(a, 0, sizeof(*a));
	fields[0] = &a->req.frames;
	fields[1] = &a->req.max_frames;
	fields[2] = &a->req.min_frames;
	fields[3] = &a->req.low_frames;
	if (argc < 2)
		ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl ns create|set|delete NAME [KEY=VALUE ...]");
	if (!strcmp(argv[0], "create"))
		a->op = KVMM_OP_NS_CREATE;
	else if (!strcmp(argv[0], "set"))
		a->op = KVMM_OP_NS_SET;
	else if (!strcmp(argv[0], "delete"))
		a->op = KVMM_OP_NS_DELETE;
	else
		ctl_die(CTL_EXIT_USAGE, "ns: unknown action '%s' (create, set or delete)", argv[0]);
	if (!name_ok(argv[1]))
		ctl_die(CTL_EXIT_USAGE, "ns: bad namespace name '%s'", argv[1]);
	strcpy(a->req.ns, argv[1]);
	for (i = 2; i < argc; i++) {
		const char *eq = strchr(argv[i], '=');
		char key[16];
		size_t k;

		if (a->op == KVMM_OP_NS_DELETE)
			ctl_die(CTL_EXIT_USAGE,
				"ns delete: takes no settings ('%s'); --force to "
				"shut its clients out",
				argv[i]);
		if (!eq || eq == argv[i] || (size_t)(eq - argv[i]) >= sizeof(key))
			ctl_die(CTL_EXIT_USAGE, "ns: expected KEY=VALUE: '%s'", argv[i]);
		memcpy(key, argv[i], (size_t)(eq - argv[i]));
		key[eq - argv[i]] = '\0';
		if (!strcmp(key, "priority")) {
			char *end;
			long p;

			errno = 0;
			p = strtol(eq + 1, &end, 10);
			if (errno || *end || end == eq + 1)
				ctl_die(CTL_EXIT_USAGE, "ns: bad priority '%s'", eq + 1);
			if (p < CTL_PRIO_MIN || p > CTL_PRIO_MAX)
				ctl_die(CTL_EXIT_USAGE, "ns: priority %ld is not in %d..%d", p,
					CTL_PRIO_MIN, CTL_PRIO_MAX);
			a->req.priority = (int32_t)p;
			a->req.valid |= KVMM_NS_SET_PRIORITY;
			continue;
		}
		for (k = 0; k < 4 && strcmp(keys[k], key); k++)
			;
		if (k == 4 || (k == 0 && a->op != KVMM_OP_NS_CREATE))
			ctl_die(CTL_EXIT_USAGE,
				"ns: unknown setting '%s' (%s max, min, low, priority)", key,
				a->op == KVMM_OP_NS_CREATE ? "frames," : "a pool's size is fixed;");
		ns_amount(key, eq + 1, fields[k], &a->bytes[k]);
		a->req.valid |= bits[k];
	}
	if (a->op == KVMM_OP_NS_DELETE && ctl.force)
		a->req.flags = KVMM_NS_F_FORCE;
	if (a->op == KVMM_OP_NS_SET && !a->req.valid)
		ctl_die(CTL_EXIT_USAGE, "ns set: nothing to set (max=, min=, low=, priority=)");
	if (a->op == KVMM_OP_NS_CREATE && !(a->req.valid & KVMM_NS_SET_FRAMES) &&
	    (!(a->req.valid & KVMM_NS_SET_MAX) || a->req.max_frames == KVMM_LIMIT_NONE))
		ctl_die(CTL_EXIT_USAGE, "ns create: give its size, frames= or max=");
}

static void verb_ns(kvmm_admin_t *h, struct ns_args *a)
{
	const struct kvmm_hello_rep *hello = kvmm_admin_hello(h);
	uint64_t ps = hello && hello->page_size ? hello->page_size : 0;
	uint64_t *fields[4] = {&a->req.frames, &a->req.max_frames, &a->req.min_frames,
			       &a->req.low_frames};
	const char *what = a->op == KVMM_OP_NS_CREATE ? "ns create"
			   : a->op == KVMM_OP_NS_SET  ? "ns set"
						      : "ns delete";
	int ret, k;

	for (k = 0; k < 4; k++) {
		if (!a->bytes[k])
			continue;
		if (!ps)
			ctl_die(CTL_EXIT_DAEMON, "%s: the daemon gave no page size", what);
		/* protections cover the bytes asked (rounded up), sizes and max what fits */
		*fields[k] = k >= 2 ? (a->bytes[k] + ps - 1) / ps : a->bytes[k] / ps;
	}
	ret = kvmm_admin_ns(h, a->op, &a->req);
	if (ret == -ENOENT)
		ctl_die(CTL_EXIT_DAEMON, "%s: no namespace '%s'", what, a->req.ns);
	if (ret == -EEXIST)
		ctl_die(CTL_EXIT_DAEMON, "%s: namespace '%s' exists", what, a->req.ns);
	if (ret == -ENOSPC)
		ctl_die(CTL_EXIT_DAEMON,
			"%s: no room: a pool larger than the daemon's budget, namespaces' min "
			"adding up past it (kvmmctl meminfo), or 32 namespaces exist",
			what);
	if (ret == -EBUSY && a->op == KVMM_OP_NS_SET)
		ctl_die(CTL_EXIT_DAEMON,
			"%s: '%s' still holds more than that max after reclaim (mapped or pinned "
			"pages, no swap tier to take them): max unchanged, nothing preempted",
			what, a->req.ns);
	if (ret == -EBUSY)
		ctl_die(CTL_EXIT_DAEMON,
			"%s: '%s' is busy: clients are attached (--force shuts them out), or it "
			"is the last namespace",
			what, a->req.ns);
	if (ret == -EINVAL)
		ctl_die(CTL_EXIT_DAEMON,
			"%s: the daemon refused the settings (min <= low <= max <= the pool's "
			"frames; a pool's size cannot change)",
			what);
	if (ret)
		ctl_die_status(what, ret);
	if (a->op == KVMM_OP_NS_DELETE)
		printf("%s: deleted\n", a->req.ns);
	else
		printf("%s: %s\n", a->req.ns, a->op == KVMM_OP_NS_CREATE ? "created" : "set");
}

static void verb_drop_caches(kvmm_admin_t *h, int argc, char **argv)
{
	uint32_t flags = 0;
	uint64_t dropped = 0;
	int ret, i;

	/* what is named, or the device pool alone */
	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "swap"))
			flags |= KVMM_DROP_F_SWAP;
		else if (!strcmp(argv[i], "device"))
			flags |= KVMM_DROP_F_DEVICE;
		else
			ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl drop-caches [device] [swap]");
	}
	if (!flags)
		flags = KVMM_DROP_F_DEVICE;
	ret = kvmm_admin_drop_caches(h, flags, &dropped);
	if (ret)
		ctl_die_status("drop-caches", ret);
	printf("dropped %" PRIu64 " cached pages\n", dropped);
}

static void verb_reclaim(kvmm_admin_t *h, int argc, char **argv)
{
	uint64_t want, got = 0;
	int ret;

	if (argc != 1)
		ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl reclaim FRAMES");
	want = parse_u64("reclaim", argv[0]);
	if (!want)
		ctl_die(CTL_EXIT_USAGE, "reclaim: give at least 1 frame");
	ret = kvmm_admin_reclaim(h, want, ctl.noswap ? KVMM_RECLAIM_F_NOSWAP : 0, &got);
	if (ret)
		ctl_die_status("reclaim", ret);
	printf("reclaimed %" PRIu64 " of %" PRIu64 " frames\n", got, want);
}

/* A size as kvmmd takes one: bytes, or with K, M, G, T (KiB ..., "B"/"iB" optional). */
static uint64_t parse_bytes(const char *what, const char *s)
{
	static const char units[] = "KMGT";
	const char *u;
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || !isdigit((unsigned char)s[0]))
		ctl_die(CTL_EXIT_USAGE, "%s: not a size: '%s'", what, s);
	if (*end) {
		u = strchr(units, toupper((unsigned char)*end));
		if (u) {
			mul = UINT64_C(1) << (10 * (u - units + 1));
			end++;
			if (!strcasecmp(end, "b") || !strcasecmp(end, "ib"))
				end += strlen(end);
		} else if (toupper((unsigned char)*end) == 'B') {
			end++;
		}
		if (*end)
			ctl_die(CTL_EXIT_USAGE, "%s: not a size: '%s' (bytes, or K, M, G, T)", what,
				s);
	}
	if (v > UINT64_MAX / mul)
		ctl_die(CTL_EXIT_USAGE, "%s: too large: '%s'", what, s);
	return (uint64_t)v * mul;
}

static int32_t parse_prio(const char *what, const char *s)
{
	char *end;
	long p;

	errno = 0;
	p = strtol(s, &end, 10);
	if (errno || end == s || *end)
		ctl_die(CTL_EXIT_USAGE, "%s: bad priority '%s'", what, s);
	if (p < CTL_PRIO_MIN || p > CTL_PRIO_MAX)
		ctl_die(CTL_EXIT_USAGE, "%s: priority %ld is not in %d..%d", what, p, CTL_PRIO_MIN,
			CTL_PRIO_MAX);
	return (int32_t)p;
}

static void verb_swapon(kvmm_admin_t *h, int argc, char **argv, bool on)
{
	const char *verb = on ? "swapon" : "swapoff";
	int ret;

	if (on) {
		struct kvmm_swapon_req req;

		if (argc < 2 || argc > 4)
			ctl_die(CTL_EXIT_USAGE,
				"usage: kvmmctl swapon TIER SIZE [PATH|host] [PRIORITY] "
				"[--ns NS]");
		memset(&req, 0, sizeof(req));
		if (ctl.ns)
			strncpy(req.ns, ctl.ns, sizeof(req.ns) - 1);
		req.tier = (uint32_t)parse_u64("swapon tier", argv[0]);
		req.size = parse_bytes("swapon size", argv[1]);
		if (!req.tier || req.tier > KVMM_SWAP_TIER_MAX)
			ctl_die(CTL_EXIT_USAGE, "swapon: tier must be 1..%u", KVMM_SWAP_TIER_MAX);
		if (argc >= 3 && strcmp(argv[2], "host")) {
			if (strlen(argv[2]) >= sizeof(req.path))
				ctl_die(CTL_EXIT_USAGE, "swapon: path too long");
			strcpy(req.path, argv[2]);
		}
		/* kvmmd's defaults: a host tier 10, a swap file 5 */
		req.priority = req.path[0] ? CTL_SWAP_FILE_PRIO : CTL_SWAP_HOST_PRIO;
		if (argc == 4)
			req.priority = parse_prio("swapon", argv[3]);
		ret = kvmm_admin_swapon(h, &req);
	} else {
		struct kvmm_swapoff_req req;

		if (argc < 1 || argc > 2)
			ctl_die(CTL_EXIT_USAGE, "usage: kvmmctl swapoff TIER [PATH] [--ns NS]");
		memset(&req, 0, sizeof(req));
		if (ctl.ns)
			strncpy(req.ns, ctl.ns, sizeof(req.ns) - 1);
		req.tier = (uint32_t)parse_u64("swapoff tier", argv[0]);
		if (argc == 2 && strcmp(argv[1], "host")) {
			if (strlen(argv[1]) >= sizeof(req.path))
				ctl_die(CTL_EXIT_USAGE, "swapoff: path too long");
			strcpy(req.path, argv[1]);
		}
		ret = kvmm_admin_swapoff(h, &req);
	}
	if (ret == -EOPNOTSUPP)
		ctl_die(CTL_EXIT_DAEMON,
			"%s: this daemon has no swap support yet (the request is "
			"defined but kvmmd answers 'not supported')",
			verb);
	if (ret == -ENOENT)
		die_if_no_ns(h, verb);
	if (ret == -ENOENT && !on)
		ctl_die(CTL_EXIT_DAEMON, "swapoff: no tier %s%s%s", argv[0],
			ctl.ns ? " in namespace " : "", ctl.ns ? ctl.ns : "");
	if (ret)
		ctl_die_status(verb, ret);
	printf("%s: tier %s done%s%s\n", verb, argv[0], ctl.ns ? " in " : "", ctl.ns ? ctl.ns : "");
}

/* fault POINT [KEY=VALUE...|off]: arm a swap fault point (--ns: one namespace, else all) */
static void verb_fault(kvmm_admin_t *h, int argc, char **argv)
{
	char spec[KVMM_FAULT_SPEC_LEN] = {0};
	size_t len = 0;
	int i, ret;

	for (i = 0; i < argc; i++) {
		size_t n = strlen(argv[i]);

		if (len + n + 2 > sizeof(spec))
			ctl_die(CTL_EXIT_USAGE, "fault: specification too long");
		if (i)
			spec[len++] = ' ';
		memcpy(spec + len, argv[i], n);
		len += n;
	}
	ret = kvmm_admin_fault_inject(h, ctl.ns, spec);
	if (ret == -ENOENT) {
		char point[64];

		die_if_no_ns(h, "fault");
		snprintf(point, sizeof(point), "%.*s", (int)strcspn(spec, " "), spec);
		ctl_die(CTL_EXIT_DAEMON,
			"fault: no fault point '%s' (swap.read, swap.write, "
			"swap.alloc)",
			point);
	}
	if (ret)
		ctl_die_status("fault", ret);
	printf("fault: %s\n", spec);
}

/* ---- main ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvmmctl [OPTIONS] VERB [ARGS]\n"
		"Inspect and administer kvmmd.\n"
		"\n"
		"Read verbs (human tables; --json for the daemon's JSON):\n"
		"  status                 daemon and pool summary\n"
		"  meminfo                frames per namespace, like free(1)\n"
		"  vmstat                 event counters\n"
		"  buddyinfo              free blocks per order\n"
		"  clients                connections, like ps(1)\n"
		"  namespaces             namespaces, limits, hit rates\n"
		"  seqs [--client ID]     sequences and what they map\n"
		"  pagetable CLIENT:SEQ   one sequence's page table\n"
		"  lru [--count N]        LRU lists, the oldest N pages of each\n"
		"  swap                   swap tiers\n"
		"  remote                 the remote tier (Redis): hits, misses, bytes, latency\n"
		"  trace                  stream trace events (--event, --client, --dump, "
		"--clear)\n"
		"  top                    live view, refreshed every second (q quits)\n"
		"Admin verbs:\n"
		"  limit NS FRAMES|none [PRIORITY]   set a namespace's limit\n"
		"  ns create NS frames=N|SIZE [max=N|SIZE|none] [min=..] [low=..] [priority=P]\n"
		"  ns set NS [max=..] [min=..] [low=..] [priority=P]   change a live namespace\n"
		"  ns delete NS [--force]            delete one (--force: shut its clients out)\n"
		"  drop-caches [device] [swap]       drop unmapped cached pages (device: the\n"
		"                                    pool, the default; swap: demoted ones)\n"
		"  reclaim FRAMES [--noswap]         reclaim up to FRAMES cached frames\n"
		"  swapon TIER SIZE [PATH|host] [PRIO], swapoff TIER [PATH]   (--ns NS: one\n"
		"                                    namespace, else all)\n"
		"  fault POINT [nth=N interval=N probability=P times=N "
		"mode=eio|short|enospc|corrupt|off]\n"
		"\n"
		"Options:\n"
		"  -s, --socket PATH   the daemon's socket (default $KVMM_SOCKET, else\n"
		"                      /run/kvmm/kvmmd.sock)\n"
		"  -j, --json          JSON (trace: JSON Lines)\n"
		"  -r, --raw           the daemon's tagged text as it is\n"
		"  -n, --ns NAME       only this namespace\n"
		"  -c, --client ID     only this client (seqs, clients, trace, pagetable)\n"
		"  -e, --event LIST    trace: only these events (comma separated)\n"
		"      --count N       trace: stop after N events; lru: pages shown per list;\n"
		"                      top: refresh N times\n"
		"      --timeout MS    give a silent kvmmd up after MS milliseconds (0: wait\n"
		"                      forever; default $KVMM_DAEMON_TIMEOUT_MS, else 30000);\n"
		"                      trace: also stop when no event comes for MS ms\n"
		"      --dump          trace: print what the ring holds and exit\n"
		"      --clear         trace: like --dump, then forget those events\n"
		"      --frames        sizes in frames, not bytes\n"
		"      --noswap        reclaim: drop cache only, swap nothing out\n"
		"      --force         ns delete: even with clients attached (they are shut out)\n"
		"      --max V, --min V, --low V, --priority P\n"
		"                      ns create / set: the same as max=V, min=V, low=V, "
		"priority=P\n"
		"  -h, --help, -V, --version\n"
		"\n"
		"Exit status: 0 ok, 1 the daemon answered an error, 2 bad arguments, 3 no daemon,\n"
		"4 permission denied.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
		{"raw", no_argument, NULL, 'r'},	  {"ns", required_argument, NULL, 'n'},
		{"client", required_argument, NULL, 'c'}, {"event", required_argument, NULL, 'e'},
		{"count", required_argument, NULL, 1},	  {"timeout", required_argument, NULL, 2},
		{"dump", no_argument, NULL, 3},		  {"clear", no_argument, NULL, 4},
		{"frames", no_argument, NULL, 5},	  {"noswap", no_argument, NULL, 6},
		{"force", no_argument, NULL, 7},	  {"help", no_argument, NULL, 'h'},
		{"max", required_argument, NULL, 8},	  {"min", required_argument, NULL, 9},
		{"low", required_argument, NULL, 10},	  {"priority", required_argument, NULL, 11},
		{"version", no_argument, NULL, 'V'},	  {NULL, 0, NULL, 0},
	};
	struct ns_args ns_args;
	const char *verb;
	char **vargv;
	kvmm_admin_t *h;
	int opt, vargc;

	/*
	 * A negative number ("limit default none -5") is an argument, not an option: marked so
	 * that getopt passes it over, unmarked below.
	 */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		char *a;

		if (argv[i][0] != '-' || !isdigit((unsigned char)argv[i][1]))
			continue;
		a = malloc(strlen(argv[i]) + 2);
		if (!a)
			ctl_die(CTL_EXIT_DAEMON, "out of memory");
		a[0] = CTL_NEG_MARK;
		strcpy(a + 1, argv[i]);
		argv[i] = a;
	}
	/* GNU getopt permutes: options may come before or after the verb and its arguments */
	while ((opt = getopt_long(argc, argv, "s:jrn:c:e:hV", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			ctl.socket = optarg;
			break;
		case 'j':
			ctl.json = true;
			break;
		case 'r':
			ctl.raw = true;
			break;
		case 'n':
			if (!name_ok(optarg))
				ctl_die(CTL_EXIT_USAGE, "bad namespace name '%s'", optarg);
			ctl.ns = optarg;
			break;
		case 'c':
			ctl.client = parse_u64("--client", optarg);
			if (ctl.client > UINT32_MAX)
				ctl_die(CTL_EXIT_USAGE, "--client: no such client id");
			break;
		case 'e':
			ctl.events = parse_events(optarg);
			break;
		case 1:
			ctl.count = parse_u64("--count", optarg);
			break;
		case 2:
			if (parse_u64("--timeout", optarg) > INT32_MAX)
				ctl_die(CTL_EXIT_USAGE, "--timeout: at most %d ms", INT32_MAX);
			ctl.timeout_ms = (int)parse_u64("--timeout", optarg);
			ctl.timeout_set = true;
			break;
		case 3:
			ctl.dump = true;
			break;
		case 4:
			ctl.clear = true;
			break;
		case 5:
			ctl.frames = true;
			break;
		case 6:
			ctl.noswap = true;
			break;
		case 7:
			ctl.force = true;
			break;
		case 8:
		case 9:
		case 10:
		case 11: {
			static const char *const keys[] = {"max", "min", "low", "priority"};
			/* a negative priority was marked as an argument (above) */
			const char *v = optarg[0] == CTL_NEG_MARK ? optarg + 1 : optarg;
			int n;

			/* the same as ns create / set's max=V, min=V, low=V, priority=P */
			if (ctl.nr_ns_kv == sizeof(ctl.ns_kv) / sizeof(ctl.ns_kv[0]))
				ctl_die(CTL_EXIT_USAGE, "too many --max/--min/--low/--priority");
			n = snprintf(ctl.ns_kv[ctl.nr_ns_kv], sizeof(ctl.ns_kv[0]), "%s=%s",
				     keys[opt - 8], v);
			if (n < 0 || (size_t)n >= sizeof(ctl.ns_kv[0]))
				ctl_die(CTL_EXIT_USAGE, "--%s: '%s' is too long", keys[opt - 8],
					optarg);
			ctl.nr_ns_kv++;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvmmctl %s (kvmm ABI %d)\n", KVMM_VERSION, KVMM_ABI_VERSION);
			return 0;
		default:
			fputs("Try 'kvmmctl --help' for more information.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
	verb = argv[optind];
	vargv = argv + optind + 1;
	vargc = argc - optind - 1;
	for (int i = 0; i < vargc; i++)
		if (vargv[i][0] == CTL_NEG_MARK)
			vargv[i]++;
	{
		if (!strcmp(verb, "help")) {
			usage(stdout);
			return 0;
		}
		/* check the verb and its arity before connecting: bad arguments are exit 2 */
		{
			static const struct {
				const char *name;
				int min, max;
			} verbs[] = {
				{"status", 0, 0},    {"meminfo", 0, 0},	    {"vmstat", 0, 0},
				{"buddyinfo", 0, 0}, {"clients", 0, 0},	    {"namespaces", 0, 0},
				{"seqs", 0, 0},	     {"pagetable", 1, 1},   {"lru", 0, 0},
				{"swap", 0, 0},	     {"trace", 0, 0},	    {"top", 0, 0},
				{"limit", 2, 3},     {"drop-caches", 0, 2}, {"reclaim", 1, 1},
				{"swapon", 2, 4},    {"swapoff", 1, 2},	    {"fault", 1, 8},
				{"remote", 0, 0},    {"ns", 2, 8},
			};
			size_t k;

			for (k = 0; k < sizeof(verbs) / sizeof(verbs[0]); k++)
				if (!strcmp(verbs[k].name, verb))
					break;
			if (k == sizeof(verbs) / sizeof(verbs[0])) {
				fprintf(stderr, "kvmmctl: unknown verb '%s'\n", verb);
				fputs("Try 'kvmmctl --help' for more information.\n", stderr);
				return CTL_EXIT_USAGE;
			}
			if (vargc < verbs[k].min || vargc > verbs[k].max)
				ctl_die(CTL_EXIT_USAGE,
					"%s: wrong number of arguments (see --help)", verb);
			if (ctl.json && ctl.raw)
				ctl_die(CTL_EXIT_USAGE, "--json and --raw exclude each other");
		}
		if (!strcmp(verb, "ns")) {
			char *all[64];
			int n = 0;

			for (int i = 0; i < vargc && n < 56; i++)
				all[n++] = vargv[i];
			for (unsigned int i = 0; i < ctl.nr_ns_kv; i++)
				all[n++] = ctl.ns_kv[i];
			ns_parse_args(n, all, &ns_args);
		} else if (ctl.nr_ns_kv) {
			ctl_die(CTL_EXIT_USAGE, "--max, --min, --low and --priority are for ns "
						"create and ns set");
		}
		h = ctl_connect();
		ctl_handle = h;
		if (!strcmp(verb, "status"))
			verb_status(h);
		else if (!strcmp(verb, "meminfo"))
			verb_meminfo(h);
		else if (!strcmp(verb, "vmstat"))
			verb_vmstat(h);
		else if (!strcmp(verb, "buddyinfo"))
			verb_buddyinfo(h);
		else if (!strcmp(verb, "clients"))
			verb_clients(h);
		else if (!strcmp(verb, "namespaces"))
			verb_namespaces(h);
		else if (!strcmp(verb, "seqs"))
			verb_seqs(h);
		else if (!strcmp(verb, "pagetable"))
			verb_pagetable(h, vargc, vargv);
		else if (!strcmp(verb, "lru"))
			verb_lru(h);
		else if (!strcmp(verb, "swap"))
			verb_swap(h);
		else if (!strcmp(verb, "remote"))
			verb_remote(h);
		else if (!strcmp(verb, "trace"))
			verb_trace(h);
		else if (!strcmp(verb, "top"))
			ctl_top(&h);
		else if (!strcmp(verb, "limit"))
			verb_limit(h, vargc, vargv);
		else if (!strcmp(verb, "drop-caches"))
			verb_drop_caches(h, vargc, vargv);
		else if (!strcmp(verb, "reclaim"))
			verb_reclaim(h, vargc, vargv);
		else if (!strcmp(verb, "swapon"))
			verb_swapon(h, vargc, vargv, true);
		else if (!strcmp(verb, "swapoff"))
			verb_swapon(h, vargc, vargv, false);
		else if (!strcmp(verb, "fault"))
			verb_fault(h, vargc, vargv);
		else if (!strcmp(verb, "ns"))
			verb_ns(h, &ns_args);
		kvmm_admin_close(h);
	}
	return fflush(stdout) ? CTL_EXIT_DAEMON : 0;
}
