// SPDX-License-Identifier: MIT
/*
 * kvmm/kvmmd.c - main() of kvmmd, the KV-cache memory daemon: it reads the configuration file
 * (kvmm/config.c), applies the command-line flags over it, sets up logging, daemonizes unless
 * told to stay in the foreground, creates the server (kvmm/ipc/: one host-backend pool per
 * namespace and the listening socket), tells the service manager it is ready, and serves
 * until SIGTERM or SIGINT.  Exit status: 0 after a clean stop, 1 when the daemon could not
 * start or its loop failed, 2 for a bad flag or configuration line.  Daemonizing is the
 * classic double fork; the first process waits on a pipe until the daemon is listening (or
 * has failed) so that `kvmmd && client` works and a startup error reaches the terminal.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "generated/autoconf.h"
#include "kvmm/backend/host.h"
#if CONFIG_KVMM_CUDA
#include "kvmm/backend/cuda.h"
#endif
#include "kvmm/config.h"
#include "kvmm/ipc/server.h"
#include "kvmm/mm.h"
#include "kvmm/notify.h"

#ifndef KVMM_VERSION
#define KVMM_VERSION "unknown"
#endif

#define EXIT_USAGE 2

/* the server the signal handlers stop; set before they are installed */
static struct kvmm_server *volatile the_server;

/* kept for the server's whole life: the pools reach their configuration through it */
static struct kvmm_host_backend host_backend;
#if CONFIG_KVMM_CUDA
static struct kvmm_cuda_backend cuda_backend;
#endif

enum {
	OPT_BACKEND = 256,
	OPT_PAGE_SIZE,
	OPT_CHUNK_SIZE,
	OPT_POOL_SIZE,
	OPT_FRAMES,
	OPT_WMARK_MIN,
	OPT_WMARK_LOW,
	OPT_WMARK_HIGH,
	OPT_ADMIN_GROUP,
	OPT_LOG_LEVEL,
	OPT_PREFAULT,
	OPT_MAX_CLIENTS,
	OPT_METRICS,
	OPT_DEVICE,
	OPT_PRINT_CONFIG,
	OPT_SWAP,
	OPT_SOCKET_MODE,
	OPT_SOCKET_GROUP,
	OPT_MAX_CLIENTS_PER_UID,
	OPT_HELLO_TIMEOUT,
	OPT_REMOTE,
	OPT_RING_THREADS,
	OPT_TRACE,
	OPT_RING_NICE,
};

static const struct option long_opts[] = {
	{"config", required_argument, NULL, 'c'},
	{"socket", required_argument, NULL, 's'},
	{"backend", required_argument, NULL, OPT_BACKEND},
	{"page-size", required_argument, NULL, OPT_PAGE_SIZE},
	{"chunk-size", required_argument, NULL, OPT_CHUNK_SIZE},
	{"pool-size", required_argument, NULL, OPT_POOL_SIZE},
	{"frames", required_argument, NULL, OPT_FRAMES},
	{"wmark-min", required_argument, NULL, OPT_WMARK_MIN},
	{"wmark-low", required_argument, NULL, OPT_WMARK_LOW},
	{"wmark-high", required_argument, NULL, OPT_WMARK_HIGH},
	{"admin-group", required_argument, NULL, OPT_ADMIN_GROUP},
	{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
	{"foreground", no_argument, NULL, 'f'},
	{"prefault", no_argument, NULL, OPT_PREFAULT},
	{"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{"device", required_argument, NULL, OPT_DEVICE},
	{"namespace", required_argument, NULL, 'n'},
	{"print-config", no_argument, NULL, OPT_PRINT_CONFIG},
	{"swap", required_argument, NULL, OPT_SWAP},
	{"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
	{"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
	{"max-clients-per-uid", required_argument, NULL, OPT_MAX_CLIENTS_PER_UID},
	{"hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT},
	{"ring-threads", required_argument, NULL, OPT_RING_THREADS},
	{"ring-nice", required_argument, NULL, OPT_RING_NICE},
	{"trace", required_argument, NULL, OPT_TRACE},
	{"remote", required_argument, NULL, OPT_REMOTE},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvmmd [OPTION]...\n"
		"The kvmm KV-cache memory daemon.  Flags override the configuration file.\n"
		"\n"
		"  -c, --config FILE        configuration file (default %s;\n"
		"                           a missing default file means built-in defaults)\n"
		"  -s, --socket PATH        control socket (default "
		"$XDG_RUNTIME_DIR/kvmm/kvmmd.sock\n"
		"                           or /run/kvmm/kvmmd.sock)\n"
		"      --backend NAME       pool memory: host (default) or cuda (GPU memory)\n"
		"      --device N[,M...]    cuda backend: the CUDA device, or a tensor-parallel\n"
		"                           group mirroring every frame (default 0)\n"
		"      --page-size SIZE     bytes per frame, a power of two >= 4K (default 2M)\n"
		"      --chunk-size SIZE    bytes per shared memory chunk (default 64M)\n"
		"      --pool-size SIZE     total pool memory (default 1G), or\n"
		"      --frames N           total pool frames\n"
		"      --wmark-min N, --wmark-low N, --wmark-high N\n"
		"                           reclaim watermarks in frames, per namespace pool\n"
		"                           (default 1%%, 2%%, 3%%)\n"
		"      --admin-group GROUP  group allowed admin verbs besides root\n"
		"      --log-level LEVEL    err, warn, notice (default), info, debug\n"
		"  -f, --foreground         do not daemonize; log to stderr\n"
		"      --prefault           fault the whole pool in at start\n"
		"      --max-clients N      connections at most (default %d; root and the\n"
		"                           admin group get 16 more)\n"
		"      --max-clients-per-uid N  connections one other user may hold (default\n"
		"                           64, 0 = no cap)\n"
		"      --hello-timeout TIME close connections silent this long (default 5s)\n"
		"      --ring-threads N     threads polling the clients' rings, each serving\n"
		"                           whole namespaces (default auto: one per two CPUs,\n"
		"                           at most 8; 0 = the event loop polls them)\n"
		"      --ring-nice N        their nice value, -20..19 (default -5, when the\n"
		"                           daemon may raise its priority)\n"
		"      --trace MODE         when the trace ring records: follow (while a\n"
		"                           kvmmctl trace follows; default), always, off\n"
		"      --socket-mode MODE   the socket's permissions (default 0660)\n"
		"      --socket-group GROUP the socket's group (default the daemon's)\n"
		"      --metrics ADDR:PORT  serve Prometheus /metrics (loopback; default off)\n"
		"      --swap KEY=VALUE     a [swap] setting: swap_host=SIZE,\n"
		"                           swap_file=PATH:SIZE[:PRIO], swap_queue_depth=N,\n"
		"                           prefetch=N, kswapd=yes|no, fault=POINT:SPEC\n"
		"      --remote KEY=VALUE   a [remote] setting: remote=redis://HOST:PORT,...,\n"
		"                           remote_ttl=TIME, remote_timeout_ms=N,\n"
		"                           remote_policy=seal|demote|both|lookup, "
		"remote_password_file=PATH\n"
		"  -n, --namespace NAME[:AMOUNT[:USER,...]]\n"
		"                           add or change a namespace: AMOUNT is frames or a size\n"
		"                           with K/M/G/T; USERs (names or uids) may attach\n"
		"      --print-config       print the effective configuration and exit\n"
		"  -h, --help               this help\n"
		"  -V, --version            the version\n"
		"\n"
		"SIZE is bytes with an optional K, M, G or T suffix (powers of 1024).\n"
		"Exit status: 0 clean stop, 1 failure, 2 bad flag or configuration.\n"
		"See Documentation/admin-guide/kvmmd.md.\n",
		KVMM_CONFIG_DEFAULT_PATH, KVMM_CONFIG_DEFAULT_MAX_CLIENTS);
}

static void __noreturn die_usage(const char *fmt, ...) __printf(1, 2);
static void __noreturn die_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("kvmmd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvmmd --help' for more information.\n", stderr);
	exit(EXIT_USAGE);
}

/* The config key each value flag sets (same parser as the file: same text accepted). */
static const char *opt_key(int opt)
{
	switch (opt) {
	case 's':
		return "socket";
	case OPT_BACKEND:
		return "backend";
	case OPT_PAGE_SIZE:
		return "page_size";
	case OPT_CHUNK_SIZE:
		return "chunk_size";
	case OPT_POOL_SIZE:
		return "pool_size";
	case OPT_FRAMES:
		return "frames";
	case OPT_WMARK_MIN:
		return "wmark_min";
	case OPT_WMARK_LOW:
		return "wmark_low";
	case OPT_WMARK_HIGH:
		return "wmark_high";
	case OPT_ADMIN_GROUP:
		return "admin_group";
	case OPT_LOG_LEVEL:
		return "log_level";
	case 'f':
		return "foreground";
	case OPT_PREFAULT:
		return "prefault";
	case OPT_MAX_CLIENTS:
		return "max_clients";
	case OPT_METRICS:
		return "metrics";
	case OPT_DEVICE:
		return "device";
	case OPT_SOCKET_MODE:
		return "socket_mode";
	case OPT_SOCKET_GROUP:
		return "socket_group";
	case OPT_MAX_CLIENTS_PER_UID:
		return "max_clients_per_uid";
	case OPT_HELLO_TIMEOUT:
		return "hello_timeout";
	case OPT_RING_THREADS:
		return "ring_threads";
	case OPT_TRACE:
		return "trace";
	case OPT_RING_NICE:
		return "ring_nice";
	default:
		return NULL;
	}
}

static const char *opt_name(int opt)
{
	const struct option *o;

	for (o = long_opts; o->name; o++)
		if (o->val == opt)
			return o->name;
	return "?";
}

struct flag {
	int opt;
	const char *arg;
};

struct args {
	const char *config;
	bool print_config;
	struct flag *flags;
	unsigned int nr_flags;
};

/* First pass: collect; the file is read before any flag is applied. */
static void parse_args(int argc, char **argv, struct args *a)
{
	int opt;

	a->flags = calloc((size_t)argc, sizeof(*a->flags));
	if (!a->flags) {
		fputs("kvmmd: out of memory\n", stderr);
		exit(EXIT_FAILURE);
	}
	while ((opt = getopt_long(argc, argv, "c:s:fn:hV", long_opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			a->config = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		case 'V':
			printf("kvmmd %s (kvmm ABI %d)\n", KVMM_VERSION, KVMM_ABI_VERSION);
			exit(EXIT_SUCCESS);
		case OPT_PRINT_CONFIG:
			a->print_config = true;
			break;
		case '?':
			/* getopt_long has said what is wrong */
			fputs("Try 'kvmmd --help' for more information.\n", stderr);
			exit(EXIT_USAGE);
		default:
			a->flags[a->nr_flags].opt = opt;
			a->flags[a->nr_flags].arg = optarg ? optarg : "yes";
			a->nr_flags++;
			break;
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
}

/* The server's view of the configured namespaces: @ns has room for cfg->nr_ns. */
static void ns_configs(const struct kvmm_config *cfg, struct kvmm_ns_config *ns)
{
	unsigned int i;

	for (i = 0; i < cfg->nr_ns; i++) {
		const struct kvmm_config_ns *c = &cfg->ns[i];

		BUILD_BUG_ON(KVMM_NS_MAX_IDS < KVMM_CONFIG_MAX_IDS);
		memset(&ns[i], 0, sizeof(ns[i]));
		memcpy(ns[i].name, c->name, sizeof(ns[i].name));
		ns[i].nframes = (uint32_t)c->frames;
		ns[i].limit = (uint32_t)c->limit;
		ns[i].min = (uint32_t)c->min;
		ns[i].low = (uint32_t)c->low;
		ns[i].priority = c->priority;
		memcpy(ns[i].uids, c->uids, c->nr_uids * sizeof(uid_t));
		ns[i].nr_uids = c->nr_uids;
		memcpy(ns[i].gids, c->gids, c->nr_gids * sizeof(gid_t));
		ns[i].nr_gids = c->nr_gids;
		ns[i].have_secret = c->have_secret;
		ns[i].secret[0] = c->secret[0];
		ns[i].secret[1] = c->secret[1];
	}
}

/*
 * Read the file and apply the flags over it, then finalize.  0, or -errno with the message in
 * @err; @usage is set when a flag was at fault (kvmmd's start exits 2 with "--FLAG VALUE:").
 */
static int read_config(const struct args *a, struct kvmm_config *cfg, char *err, size_t len,
		       const struct flag **bad_flag)
{
	unsigned int i;
	int ret;

	*bad_flag = NULL;
	kvmm_config_init(cfg);
	ret = kvmm_config_load(cfg, a->config ? a->config : KVMM_CONFIG_DEFAULT_PATH, err, len);
	/* the default file is optional; one named on the command line is not */
	if (ret == -ENOENT && !a->config)
		kvmm_config_init(cfg);
	else if (ret)
		return ret;

	for (i = 0; i < a->nr_flags; i++) {
		const struct flag *f = &a->flags[i];

		if (f->opt == 'n') {
			ret = kvmm_config_set_ns(cfg, f->arg, err, len);
		} else if (f->opt == OPT_SWAP || f->opt == OPT_REMOTE) {
			/* --swap / --remote KEY=VALUE: one [swap] / [remote] line */
			char key[64];
			const char *eq = strchr(f->arg, '=');

			if (!eq || eq == f->arg || (size_t)(eq - f->arg) >= sizeof(key)) {
				snprintf(err, len, "expected KEY=VALUE");
				ret = -EINVAL;
			} else {
				memcpy(key, f->arg, (size_t)(eq - f->arg));
				key[eq - f->arg] = '\0';
				if (f->opt == OPT_SWAP)
					ret = kvmm_config_set_swap(cfg, key, eq + 1, err, len);
				else
					ret = kvmm_config_set_remote(cfg, key, eq + 1, err, len);
			}
		} else
			ret = kvmm_config_set(cfg, opt_key(f->opt), f->arg, err, len);
		if (ret) {
			*bad_flag = f;
			return ret;
		}
	}
	return kvmm_config_finalize(cfg, geteuid(), err, len);
}

static void load_config(const struct args *a, struct kvmm_config *cfg)
{
	char err[KVMM_CONFIG_ERR_LEN];
	const struct flag *f;
	int ret;

	ret = read_config(a, cfg, err, sizeof(err), &f);
	if (ret && f)
		die_usage("--%s %s: %s", opt_name(f->opt), f->arg, err);
	if (ret) {
		fprintf(stderr, "kvmmd: %s\n", err);
		exit(EXIT_USAGE);
	}
	if (!a->print_config) {
		long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

		ret = kvmm_config_check_memory(
			cfg, pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0, err,
			sizeof(err));
		if (ret) {
			fprintf(stderr, "kvmmd: %s\n", err);
			exit(EXIT_USAGE);
		}
	}
}

/* What the running daemon was started with that a reload cannot change. */
static struct {
	uint64_t frames, page_size; /* pool_size (or frames) in frames, page_size */
} running;

/*
 * A reloaded configuration whose pool size (pool_size or frames) or page size differs from
 * the running one: the error for the log, else 0.  The daemon-wide budget and every
 * namespace pool's span are sized from them at start, and the reloaded namespaces' sizes are
 * worked out from the new total, so nothing of such a file is applied: the operator changes
 * it back or restarts kvmmd.
 */
static int needs_restart(const struct kvmm_config *cfg, char *err, size_t len)
{
	if (cfg->page_size != running.page_size) {
		snprintf(err, len, "page_size changed (%llu -> %llu bytes): that needs a restart",
			 (unsigned long long)running.page_size, (unsigned long long)cfg->page_size);
		return -EINVAL;
	}
	if (cfg->frames != running.frames) {
		snprintf(err, len,
			 "pool_size changed (%llu -> %llu frames, %llu -> %llu MiB): the pool "
			 "size needs a restart",
			 (unsigned long long)running.frames, (unsigned long long)cfg->frames,
			 (unsigned long long)(running.frames * running.page_size >> 20),
			 (unsigned long long)(cfg->frames * cfg->page_size >> 20));
		return -EINVAL;
	}
	return 0;
}

/*
 * SIGHUP, on the server's loop: read the configuration again (file and the same flags) and
 * make the namespaces those it names (kvmm_server_ns_apply: new ones created, changed ones
 * updated, those it no longer names deleted unless clients are attached).  A configuration
 * that does not parse changes nothing: the old one stays, and the error is logged.  So does
 * one that changes the pool size or page size (needs_restart: logged).  Only the [namespace]
 * sections take effect; other settings wait for a restart.
 */
static void reload(struct kvmm_server *srv, void *arg)
{
	const struct args *a = arg;
	struct kvmm_ns_config *ns;
	char err[KVMM_CONFIG_ERR_LEN];
	const struct flag *f;
	struct kvmm_config *cfg;
	int ret;

	cfg = malloc(sizeof(*cfg));
	ns = calloc(KVMM_CONFIG_MAX_NS, sizeof(*ns));
	if (!cfg || !ns) {
		kvmm_err("reload: out of memory; the configuration is unchanged");
		goto out;
	}
	ret = read_config(a, cfg, err, sizeof(err), &f);
	if (ret) {
		if (f)
			kvmm_err("reload: --%s %s: %s; the configuration is unchanged",
				 opt_name(f->opt), f->arg, err);
		else
			kvmm_err("reload: %s; the configuration is unchanged", err);
		goto out;
	}
	if (needs_restart(cfg, err, sizeof(err))) {
		kvmm_err("reload: %s; the configuration is unchanged (set it back, or restart "
			 "kvmmd)",
			 err);
		goto out;
	}
	ns_configs(cfg, ns);
	ret = kvmm_server_ns_apply(srv, ns, cfg->nr_ns);
	if (ret)
		kvmm_warn("reload: %d namespace change%s could not be made (above)", ret,
			  ret == 1 ? "" : "s");
	else
		kvmm_notice("reload: %u namespace%s as configured", cfg->nr_ns,
			    cfg->nr_ns == 1 ? "" : "s");
out:
	free(ns);
	free(cfg);
}

/*
 * Make the socket path absolute (the daemon changes to /) and create its directory when that
 * is missing: only the last level, like systemd's RuntimeDirectory=, never a whole tree.
 */
static int prepare_socket_path(struct kvmm_config *cfg)
{
	char abs[KVMM_CONFIG_PATH_LEN], cwd[PATH_MAX], dir[KVMM_CONFIG_PATH_LEN], *slash;
	int n;

	if (cfg->socket_path[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		n = snprintf(abs, sizeof(abs), "%s/%s", cwd, cfg->socket_path);
		if (n < 0 || (size_t)n >= sizeof(abs))
			return -ENAMETOOLONG;
		strcpy(cfg->socket_path, abs);
	}
	strcpy(dir, cfg->socket_path);
	slash = strrchr(dir, '/');
	if (slash == dir)
		return 0;
	*slash = '\0';
	/* 0755: other users reach the socket; the namespaces decide who may attach */
	if (mkdir(dir, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * Detach from the terminal: fork, setsid, fork again (so the daemon can never reacquire a
 * controlling terminal).  The original process waits for one status byte on a pipe from the
 * daemon (0: listening) and exits with it; the daemon gets the pipe's write end in *notify_fd.
 */
static void daemonize(int *notify_fd)
{
	int pfd[2], devnull;
	unsigned char status = EXIT_FAILURE;
	pid_t pid;
	ssize_t r;

	if (pipe2(pfd, O_CLOEXEC)) {
		fprintf(stderr, "kvmmd: pipe: %s\n", strerror(errno));
		exit(EXIT_FAILURE);
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "kvmmd: fork: %s\n", strerror(errno));
		exit(EXIT_FAILURE);
	}
	if (pid > 0) {
		close(pfd[1]);
		do {
			r = read(pfd[0], &status, 1);
		} while (r < 0 && errno == EINTR);
		/* the middle process exits at once; reap it */
		waitpid(pid, NULL, 0);
		_exit(r == 1 ? status : EXIT_FAILURE);
	}
	close(pfd[0]);
	if (setsid() < 0)
		_exit(EXIT_FAILURE);
	pid = fork();
	if (pid < 0)
		_exit(EXIT_FAILURE);
	if (pid > 0)
		_exit(EXIT_SUCCESS);

	umask(022);
	if (chdir("/"))
		_exit(EXIT_FAILURE);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		/* stderr stays until startup is over: errors still reach the terminal */
		if (devnull > STDERR_FILENO)
			close(devnull);
	}
	*notify_fd = pfd[1];
}

static void report_startup(int *notify_fd, unsigned char status)
{
	int devnull;

	if (*notify_fd < 0)
		return;
	if (write(*notify_fd, &status, 1) != 1)
		kvmm_warn("could not report startup to the parent: %m");
	close(*notify_fd);
	*notify_fd = -1;
	/* from now on logs go to syslog only */
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, STDERR_FILENO);
		if (devnull > STDERR_FILENO)
			close(devnull);
	}
}

static void on_stop_signal(int sig)
{
	struct kvmm_server *srv = the_server;

	(void)sig;
	if (srv)
		kvmm_server_stop(srv);
}

static void on_reload_signal(int sig)
{
	struct kvmm_server *srv = the_server;

	(void)sig;
	if (srv)
		kvmm_server_reload(srv);
}

static int install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	/* a client hanging up mid-reply must not kill the daemon */
	if (sigaction(SIGPIPE, &sa, NULL))
		return -errno;
	sa.sa_handler = on_stop_signal;
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
		return -errno;
	/* SIGHUP: re-read the configuration's namespaces (reload()) */
	sa.sa_handler = on_reload_signal;
	if (sigaction(SIGHUP, &sa, NULL))
		return -errno;
	return 0;
}

/* What the server should serve, from the configuration; @ns has cfg->nr_ns entries. */
static void server_config(const struct kvmm_config *cfg, struct kvmm_ns_config *ns,
			  struct kvmm_server_config *sc)
{
	kvmm_host_backend_init(&host_backend, cfg->chunk_size,
			       cfg->prefault ? KVMM_HOST_POPULATE : 0);
	memset(sc, 0, sizeof(*sc));
	sc->socket_path = cfg->socket_path;
	sc->page_size = cfg->page_size;
	sc->chunk_size = cfg->chunk_size;
	sc->wmark_min = cfg->wmark_min;
	sc->wmark_low = cfg->wmark_low;
	sc->wmark_high = cfg->wmark_high;
	sc->admin_gid = cfg->admin_gid;
	sc->have_admin_gid = cfg->have_admin_gid;
	sc->backend = &host_backend.ops;
	sc->chunks = kvmm_host_backend_chunks;
#if CONFIG_KVMM_CUDA
	if (!strcmp(cfg->backend, "cuda")) {
		/* the config checked the list: no more than the backend takes, none twice */
		BUILD_BUG_ON(KVMM_CONFIG_MAX_DEVICES > KVMM_CUDA_MAX_DEVICES);
		kvmm_cuda_backend_init_group(&cuda_backend, cfg->devices, cfg->nr_devices,
					     cfg->chunk_size);
		sc->backend = &cuda_backend.ops;
		sc->chunks = kvmm_cuda_backend_chunks;
		sc->member = kvmm_cuda_backend_member;
		sc->device_info = kvmm_cuda_backend_device;
	}
#endif
	sc->max_clients = cfg->max_clients;
	sc->max_clients_per_uid = cfg->max_clients_per_uid;
	sc->hello_timeout_ms = cfg->hello_timeout_ms;
	sc->ring_threads = cfg->ring_threads;
	sc->ring_nice = cfg->ring_nice;
	sc->ring_nice_set = cfg->ring_nice_set;
	sc->trace_mode = cfg->trace == KVMM_CONFIG_TRACE_ALWAYS ? KVMM_SERVER_TRACE_ALWAYS
			 : cfg->trace == KVMM_CONFIG_TRACE_OFF	? KVMM_SERVER_TRACE_OFF
								: KVMM_SERVER_TRACE_FOLLOW;
	if (sc->ring_threads == KVMM_CONFIG_RING_THREADS_AUTO) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		/* one per two CPUs: the clients need the others */
		sc->ring_threads = cpus < 4 ? 1 : cpus > 16 ? 8 : (uint32_t)(cpus / 2);
	}
	sc->socket_mode = cfg->socket_mode;
	sc->socket_gid = cfg->socket_gid;
	sc->have_socket_gid = cfg->have_socket_gid;
	sc->metrics_addr = cfg->metrics;
	ns_configs(cfg, ns);
	sc->ns = ns;
	sc->nr_ns = cfg->nr_ns;
	sc->total_frames = cfg->frames; /* live namespaces take what the others leave */
	/* [swap] */
	BUILD_BUG_ON(KVMM_SERVER_MAX_FAULTS != KVMM_CONFIG_MAX_FAULTS);
	BUILD_BUG_ON(KVMM_FAULT_SPEC_LEN != KVMM_CONFIG_FAULT_LEN);
	sc->swap.host_size = cfg->swap.host_size;
	memcpy(sc->swap.file, cfg->swap.file, sizeof(sc->swap.file));
	sc->swap.file_size = cfg->swap.file_size;
	sc->swap.file_prio = cfg->swap.file_prio;
	sc->swap.queue_depth = cfg->swap.queue_depth;
	sc->swap.prefetch = cfg->swap.prefetch;
	sc->swap.prefetch_set = true;
	sc->swap.no_kswapd = !cfg->swap.kswapd;
	sc->swap.reclaim_inline = cfg->swap.reclaim_inline;
	sc->swap.no_index = !cfg->swap.warm_restart;
	memcpy(sc->swap.fault, cfg->swap.fault, sizeof(sc->swap.fault));
	sc->swap.nr_fault = cfg->swap.nr_fault;
	/* [remote] */
	if (cfg->remote.seeds[0]) {
		struct kvmm_remote_config *rc = &sc->remote.cfg;

		sc->remote.enabled = true;
		BUILD_BUG_ON(sizeof(rc->redis.seeds) != sizeof(cfg->remote.seeds));
		memcpy(rc->redis.seeds, cfg->remote.seeds, sizeof(rc->redis.seeds));
		rc->redis.timeout_ms = cfg->remote.timeout_ms;
		memcpy(rc->redis.user, cfg->remote.user, sizeof(rc->redis.user));
		memcpy(rc->redis.password, cfg->remote.password, sizeof(rc->redis.password));
		rc->redis.tls.enabled = cfg->remote.tls;
		BUILD_BUG_ON(sizeof(rc->redis.tls.ca_file) != sizeof(cfg->remote.tls_ca) ||
			     sizeof(rc->redis.tls.server_name) != sizeof(cfg->remote.tls_name));
		memcpy(rc->redis.tls.ca_file, cfg->remote.tls_ca, sizeof(rc->redis.tls.ca_file));
		memcpy(rc->redis.tls.cert_file, cfg->remote.tls_cert,
		       sizeof(rc->redis.tls.cert_file));
		memcpy(rc->redis.tls.key_file, cfg->remote.tls_key, sizeof(rc->redis.tls.key_file));
		memcpy(rc->redis.tls.server_name, cfg->remote.tls_name,
		       sizeof(rc->redis.tls.server_name));
		rc->ttl_s = cfg->remote.ttl_s;
		rc->max_value = cfg->remote.max_value;
		rc->max_queued_bytes = cfg->remote.max_queue;
		rc->max_blocks = cfg->remote.max_blocks;
		BUILD_BUG_ON(KVMM_REMOTE_POLICY_SEAL != KVMM_CONFIG_REMOTE_SEAL ||
			     KVMM_REMOTE_POLICY_DEMOTE != KVMM_CONFIG_REMOTE_DEMOTE);
		rc->policy = (enum kvmm_remote_policy)cfg->remote.store;
	}
}

/*
 * The daemon holds a descriptor per pool chunk (per device of a tensor-parallel group: 8 GPUs
 * of 128 chunks are 1024) and three per client (socket, data-plane region, doorbell), which the
 * usual soft limit of 1024 does not cover: take the hard limit, as much as we may.
 */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	/* an unlimited hard limit still stops at fs.nr_open (1048576 by default) */
	if (rl.rlim_max == RLIM_INFINITY && rl.rlim_cur >= 1048576)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		kvmm_warn("cannot raise the open-file limit to %llu: %s",
			  (unsigned long long)rl.rlim_cur, strerror(errno));
}

int main(int argc, char **argv)
{
	struct kvmm_ns_config ns[KVMM_CONFIG_MAX_NS];
	struct kvmm_server_config sc;
	struct kvmm_server *srv = NULL;
	struct kvmm_config *cfg;
	sigset_t stop_sigs, old_sigs;
	struct args a = {0};
	int notify_fd = -1;
	uint64_t assigned = 0;
	unsigned int i;
	int ret;

	parse_args(argc, argv, &a);
	cfg = malloc(sizeof(*cfg));
	if (!cfg) {
		fputs("kvmmd: out of memory\n", stderr);
		return EXIT_FAILURE;
	}
	load_config(&a, cfg);
	if (a.print_config) {
		kvmm_config_print(cfg, stdout);
		free(cfg);
		return EXIT_SUCCESS;
	}

	ret = prepare_socket_path(cfg);
	if (ret) {
		fprintf(stderr, "kvmmd: socket directory for %s: %s\n", cfg->socket_path,
			strerror(-ret));
		free(cfg);
		return EXIT_FAILURE;
	}
	if (!cfg->foreground)
		daemonize(&notify_fd);
	kvmm_log_init("kvmmd", (enum kvmm_log_level)cfg->log_level, !cfg->foreground);
	raise_nofile();
#if CONFIG_KVMM_CUDA
	/*
	 * No GPU, no driver: say so before anything else happens.  Only after daemonize(): a
	 * process cannot use CUDA once its parent has initialised it before fork(), so the
	 * driver must first be opened by the process that serves.  stderr still reaches the
	 * terminal until startup is reported.
	 */
	if (!strcmp(cfg->backend, "cuda")) {
		char why[256];

		for (i = 0; i < cfg->nr_devices; i++) {
			if (!kvmm_cuda_backend_probe(cfg->devices[i], why, sizeof(why)))
				continue;
			fprintf(stderr, "kvmmd: cuda backend on device %d: %s\n", cfg->devices[i],
				why);
			report_startup(&notify_fd, EXIT_FAILURE);
			free(cfg);
			return EXIT_FAILURE;
		}
	}
#endif

	server_config(cfg, ns, &sc);
	running.frames = cfg->frames;
	running.page_size = cfg->page_size;
	/*
	 * SIGTERM, SIGINT and SIGHUP wait until their handlers are in (install_signals()): the
	 * socket listens from kvmm_server_create() on, and a stop sent as soon as it answers
	 * must stop the daemon cleanly, not kill it.  The threads the server starts (ring
	 * workers, kvswapd) keep them blocked, so they are handled by this thread only.
	 */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, &old_sigs);
	ret = kvmm_server_create(&sc, &srv);
	if (ret) {
		kvmm_err("cannot start on %s: %s", cfg->socket_path, strerror(-ret));
		if (!cfg->foreground && notify_fd >= 0)
			fprintf(stderr, "kvmmd: cannot start on %s: %s\n", cfg->socket_path,
				strerror(-ret));
		report_startup(&notify_fd, EXIT_FAILURE);
		free(cfg);
		return EXIT_FAILURE;
	}
	the_server = srv;
	kvmm_server_set_reload(srv, reload, &a);
	ret = install_signals();
	/* a signal that came meanwhile is delivered now, to its handler */
	pthread_sigmask(SIG_SETMASK, &old_sigs, NULL);
	if (ret) {
		kvmm_err("signals: %s", strerror(-ret));
		report_startup(&notify_fd, EXIT_FAILURE);
		kvmm_server_destroy(srv);
		free(cfg);
		return EXIT_FAILURE;
	}

	for (i = 0; i < cfg->nr_ns; i++)
		assigned += cfg->ns[i].frames;
	kvmm_notice("kvmmd %s listening on %s: %u namespace%s, %llu frames of %llu KiB (%s "
		    "backend)",
		    KVMM_VERSION, cfg->socket_path, cfg->nr_ns, cfg->nr_ns == 1 ? "" : "s",
		    (unsigned long long)assigned, (unsigned long long)(cfg->page_size >> 10),
		    cfg->backend);
	if (assigned < cfg->frames)
		kvmm_notice("%llu frames of the pool are in no namespace",
			    (unsigned long long)(cfg->frames - assigned));
	ret = kvmm_sd_notifyf("READY=1\nMAINPID=%ld\nSTATUS=listening on %s", (long)getpid(),
			      cfg->socket_path);
	if (ret < 0)
		kvmm_warn("sd_notify: %s", strerror(-ret));
	report_startup(&notify_fd, EXIT_SUCCESS);

	ret = kvmm_server_run(srv);
	kvmm_sd_notify("STOPPING=1");
	if (ret)
		kvmm_err("event loop failed: %s", strerror(-ret));
	else
		kvmm_notice("stopped");
	the_server = NULL;
	kvmm_server_destroy(srv);
	free(cfg);
	free(a.flags);
	kvmm_log_close();
	return ret ? EXIT_FAILURE : EXIT_SUCCESS;
}
