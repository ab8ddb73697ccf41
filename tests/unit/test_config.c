// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_config.c - kvmmd's configuration (kvmm/config.c): defaults, every key of
 * [daemon] and [namespace NAME], size suffixes, comments, quotes and CRLF, every kind of bad
 * line with the line number in its message, the checks of the final pass, how namespaces
 * split the pool, flags overriding the file, loading from disk, and that the printed
 * configuration reads back the same.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/config.h"

#define NAME "kvmmd.conf"

static struct kvmm_config *cfg;
static char err[KVMM_CONFIG_ERR_LEN];

static int setup(void **state)
{
	(void)state;
	cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return -1;
	kvmm_config_init(cfg);
	err[0] = '\0';
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(cfg);
	cfg = NULL;
	return 0;
}

static void parse_ok(const char *text)
{
	if (kvmm_config_parse(cfg, NAME, text, err, sizeof(err)))
		fail_msg("unexpected error: %s", err);
}

static void finalize_ok(uid_t owner)
{
	if (kvmm_config_finalize(cfg, owner, err, sizeof(err)))
		fail_msg("unexpected finalize error: %s", err);
}

/* The text must fail with exactly this message. */
static void parse_bad(const char *text, const char *want)
{
	struct kvmm_config *c = malloc(sizeof(*c));
	int ret;

	assert_non_null(c);
	kvmm_config_init(c);
	err[0] = '\0';
	ret = kvmm_config_parse(c, NAME, text, err, sizeof(err));
	free(c);
	if (ret != -EINVAL || strcmp(err, want))
		fail_msg("text:\n%s\nreturned %d, message\n  '%s'\nwanted\n  '%s'", text, ret, err,
			 want);
}

/* kvmm_config_print(@c) as a string (free() it) */
static char *printed(const struct kvmm_config *c)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	kvmm_config_print(c, f);
	fclose(f);
	assert_non_null(text);
	return text;
}

static struct kvmm_config_ns *ns_named(const char *name)
{
	unsigned int i;

	for (i = 0; i < cfg->nr_ns; i++)
		if (!strcmp(cfg->ns[i].name, name))
			return &cfg->ns[i];
	fail_msg("no namespace %s", name);
	return NULL;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_defaults(void **state)
{
	struct kvmm_config_ns *ns;

	(void)state;
	setenv("XDG_RUNTIME_DIR", "/tmp/kvmm-xdg-test", 1);
	finalize_ok(1234);
	assert_string_equal(cfg->socket_path, "/tmp/kvmm-xdg-test/kvmm/kvmmd.sock");
	assert_string_equal(cfg->backend, "host");
	assert_int_equal(cfg->page_size, KVMM_CONFIG_DEFAULT_PAGE_SIZE);
	assert_int_equal(cfg->chunk_size, 0);
	assert_int_equal(cfg->frames,
			 KVMM_CONFIG_DEFAULT_POOL_SIZE / KVMM_CONFIG_DEFAULT_PAGE_SIZE);
	assert_int_equal(cfg->wmark_min + cfg->wmark_low + cfg->wmark_high, 0);
	assert_false(cfg->have_admin_gid);
	assert_int_equal(cfg->log_level, KVMM_LOG_DEFAULT_LEVEL);
	assert_false(cfg->foreground);
	assert_false(cfg->prefault);
	assert_int_equal(cfg->max_clients, KVMM_CONFIG_DEFAULT_MAX_CLIENTS);
	assert_int_equal(cfg->ring_threads, KVMM_CONFIG_RING_THREADS_AUTO);
	/* one namespace, all frames, the owner and root only */
	assert_int_equal(cfg->nr_ns, 1);
	ns = &cfg->ns[0];
	assert_string_equal(ns->name, "default");
	assert_int_equal(ns->frames, cfg->frames);
	assert_int_equal(ns->limit, 0);
	assert_int_equal(ns->nr_uids, 2);
	assert_int_equal(ns->uids[0], 1234);
	assert_int_equal(ns->uids[1], 0);
	assert_int_equal(ns->nr_gids, 0);
}

static void test_default_socket(void **state)
{
	char buf[KVMM_CONFIG_PATH_LEN];
	char big[200];

	(void)state;
	unsetenv("XDG_RUNTIME_DIR");
	assert_int_equal(kvmm_config_default_socket(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/kvmm/kvmmd.sock");
	setenv("XDG_RUNTIME_DIR", "relative/dir", 1);
	assert_int_equal(kvmm_config_default_socket(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/kvmm/kvmmd.sock");
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	assert_int_equal(kvmm_config_default_socket(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/user/1000/kvmm/kvmmd.sock");
	memset(big, 'x', sizeof(big) - 1);
	big[0] = '/';
	big[sizeof(big) - 1] = '\0';
	setenv("XDG_RUNTIME_DIR", big, 1);
	assert_int_equal(kvmm_config_default_socket(buf, sizeof(buf)), -ENAMETOOLONG);
	/* finalize reports it instead of truncating */
	assert_int_equal(kvmm_config_finalize(cfg, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "socket"));
	unsetenv("XDG_RUNTIME_DIR");
}

static void test_every_daemon_key(void **state)
{
	(void)state;
	parse_ok("# kvmmd test configuration\n"
		 "[daemon]\n"
		 "socket = /tmp/k/kvmmd.sock\n"
		 "backend = host\n"
		 "page_size = 64K\n"
		 "chunk_size = 1M\n"
		 "pool_size = 32M\n"
		 "wmark_min = 2\n"
		 "wmark_low = 4\n"
		 "wmark_high = 8\n"
		 "admin_group = 0\n"
		 "log_level = debug\n"
		 "foreground = yes\n"
		 "prefault = on\n"
		 "max_clients = 17\n"
		 "ring_threads = 3\n");
	assert_string_equal(cfg->socket_path, "/tmp/k/kvmmd.sock");
	assert_string_equal(cfg->backend, "host");
	assert_int_equal(cfg->page_size, 64 << 10);
	assert_int_equal(cfg->chunk_size, 1 << 20);
	assert_int_equal(cfg->pool_size, 32 << 20);
	assert_int_equal(cfg->wmark_min, 2);
	assert_int_equal(cfg->wmark_low, 4);
	assert_int_equal(cfg->wmark_high, 8);
	assert_true(cfg->have_admin_gid);
	assert_int_equal(cfg->admin_gid, 0);
	assert_int_equal(cfg->log_level, KVMM_LOG_DEBUG);
	assert_true(cfg->foreground);
	assert_true(cfg->prefault);
	assert_int_equal(cfg->max_clients, 17);
	assert_int_equal(cfg->ring_threads, 3);
	assert_int_equal(cfg->line[KVMM_CFG_SOCKET], 3);
	assert_int_equal(cfg->line[KVMM_CFG_MAX_CLIENTS], 15);
	finalize_ok(0);
	assert_int_equal(cfg->frames, 512);
	assert_int_equal(cfg->ns[0].frames, 512);
	/* owner root: root once */
	assert_int_equal(cfg->ns[0].nr_uids, 1);
	assert_int_equal(cfg->ns[0].uids[0], 0);
}

/* device: one ordinal, or a tensor-parallel group in member order; printed back the same */
static void test_device_group(void **state)
{
	char *text;

	(void)state;
	assert_int_equal(cfg->nr_devices, 1); /* the default: device 0 */
	assert_int_equal(cfg->devices[0], 0);
	/* (no backend = cuda here: a build without CUDA refuses it) */
	parse_ok("[daemon]\ndevice = 3\n");
	assert_int_equal(cfg->nr_devices, 1);
	assert_int_equal(cfg->devices[0], 3);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\ndevice = 2,0,1023,5\n");
	assert_int_equal(cfg->nr_devices, 4);
	assert_int_equal(cfg->devices[0], 2);
	assert_int_equal(cfg->devices[1], 0);
	assert_int_equal(cfg->devices[2], 1023);
	assert_int_equal(cfg->devices[3], 5);
	strcpy(cfg->backend, "cuda"); /* the device list is printed for the cuda backend */
	text = printed(cfg);
	assert_non_null(strstr(text, "\ndevice = 2,0,1023,5\n"));
	free(text);
}

static void test_frames_key_and_names(void **state)
{
	(void)state;
	/* frames instead of pool_size; group by name; '-' for '_'; any case */
	parse_ok("[daemon]\nframes = 300\nadmin-group = root\nLog_Level = WARNING\n"
		 "foreground = false\n");
	assert_int_equal(cfg->frames, 300);
	assert_int_equal(cfg->pool_size, 0);
	assert_true(cfg->have_admin_gid);
	assert_int_equal(cfg->admin_gid, 0);
	assert_int_equal(cfg->log_level, KVMM_LOG_WARN);
	assert_false(cfg->foreground);
	finalize_ok(1000);
	assert_int_equal(cfg->frames, 300);
	assert_int_equal(cfg->ns[0].frames, 300);
}

static void test_namespace_keys(void **state)
{
	struct kvmm_config_ns *a, *b, *c;

	(void)state;
	parse_ok("[daemon]\n"
		 "page_size = 4K\n"
		 "frames = 1000\n"
		 "\n"
		 "[namespace alpha]\n"
		 "frames = 100\n"
		 "limit = 90\n"
		 "priority = -5\n"
		 "uids = root, 1000 0 ,2000\n"
		 "gids = root,100\n"
		 "[namespace \"beta\"]\n"
		 "size = 1M\n"
		 "limit_size = 512K\n"
		 "priority = 7\n"
		 "[namespace gamma.1_x-y]\n"
		 "gids = 5\n");
	assert_int_equal(cfg->nr_ns, 3);
	a = ns_named("alpha");
	assert_int_equal(a->frames, 100);
	assert_int_equal(a->limit, 90);
	assert_int_equal(a->priority, -5);
	/* root and 0 are one id */
	assert_int_equal(a->nr_uids, 3);
	assert_int_equal(a->uids[0], 0);
	assert_int_equal(a->uids[1], 1000);
	assert_int_equal(a->uids[2], 2000);
	assert_int_equal(a->nr_gids, 2);
	assert_int_equal(a->gids[0], 0);
	assert_int_equal(a->gids[1], 100);
	assert_int_equal(a->section_line, 5);
	assert_int_equal(a->line[KVMM_CFG_NS_UIDS], 9);
	b = ns_named("beta");
	assert_int_equal(b->size, 1 << 20);
	assert_int_equal(b->limit_size, 512 << 10);
	assert_int_equal(b->priority, 7);
	c = ns_named("gamma.1_x-y");

	finalize_ok(1000);
	assert_int_equal(b->frames, 256);
	assert_int_equal(b->limit, 128);
	/* gamma has no size: it gets the rest; it names a group, so no default uids */
	assert_int_equal(c->frames, 1000 - 100 - 256);
	assert_int_equal(c->nr_uids, 0);
	assert_int_equal(c->nr_gids, 1);
	/* beta names nobody: the owner and root */
	assert_int_equal(b->nr_uids, 2);
	assert_int_equal(b->uids[0], 1000);
	assert_int_equal(b->uids[1], 0);
}

static void test_split_rest(void **state)
{
	(void)state;
	parse_ok("[daemon]\npage_size=4K\nframes=101\n"
		 "[namespace a]\nframes=30\n[namespace b]\n[namespace c]\n[namespace d]\n");
	finalize_ok(0);
	/* 71 frames left for three: 24, 24, 23 */
	assert_int_equal(ns_named("a")->frames, 30);
	assert_int_equal(ns_named("b")->frames, 24);
	assert_int_equal(ns_named("c")->frames, 24);
	assert_int_equal(ns_named("d")->frames, 23);
	assert_int_equal(cfg->frames, 101);
}

/* Issue 26: the pool is a budget; the namespaces' pools may add up past it (overcommit). */
static void test_overcommit(void **state)
{
	(void)state;
	parse_ok("[daemon]\npage_size=4K\nframes=100\n"
		 "[namespace a]\nframes=100\nmin=30\nlow=60\n[namespace b]\nframes=80\nmax=70\n");
	finalize_ok(0);
	assert_int_equal(ns_named("a")->frames, 100);
	assert_int_equal(ns_named("a")->low, 60);
	assert_int_equal(ns_named("b")->frames, 80);
	assert_int_equal(ns_named("b")->limit, 70);
	assert_int_equal(cfg->frames, 100);
}

static void test_pool_from_namespaces(void **state)
{
	(void)state;
	/* no pool size and every namespace sized: the pool is their sum */
	parse_ok("[namespace a]\nframes=10\n[namespace b]\nsize=8M\n");
	finalize_ok(0);
	assert_int_equal(ns_named("a")->frames, 10);
	assert_int_equal(ns_named("b")->frames, 4);
	assert_int_equal(cfg->frames, 14);
}

static void test_sizes(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{"0", 0},
		{"4096", 4096},
		{"64K", 65536},
		{"64k", 65536},
		{"2M", 2 << 20},
		{"2MB", 2 << 20},
		{"2MiB", 2 << 20},
		{"2mib", 2 << 20},
		{"1G", UINT64_C(1) << 30},
		{"3T", UINT64_C(3) << 40},
		{"4096B", 4096},
		{"16777215T", UINT64_C(16777215) << 40},
	};
	static const char *const bad[] = {
		"",    "K",	"2X",	"2MM",	"-1",	     " 2",
		"2 M", "1.5M",	"0x10", "2Mb2", "16777216T", "18446744073709551616",
		"+4",  "2KiBB",
	};
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(good); i++) {
		v = 12345;
		if (kvmm_config_parse_size(good[i].s, &v) || v != good[i].v)
			fail_msg("'%s' -> %llu, want %llu", good[i].s, (unsigned long long)v,
				 (unsigned long long)good[i].v);
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++)
		if (kvmm_config_parse_size(bad[i], &v) != -EINVAL)
			fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)v);
	assert_int_equal(kvmm_config_parse_size(NULL, &v), -EINVAL);
}

static void test_syntax(void **state)
{
	(void)state;
	/* comments, blank lines, CRLF, quotes holding '#' and blanks, a comment after a value */
	parse_ok("; leading comment\r\n"
		 "\r\n"
		 "   [ daemon ]   # trailing\r\n"
		 "\tsocket = \"/tmp/a b#c/kvmmd.sock\"   # the socket\r\n"
		 "page_size=8K\t; comment after a tab\r\n"
		 "  # indented comment\r\n"
		 "frames = 0x40\r\n"
		 "max_clients=3");
	assert_string_equal(cfg->socket_path, "/tmp/a b#c/kvmmd.sock");
	assert_int_equal(cfg->page_size, 8192);
	assert_int_equal(cfg->line[KVMM_CFG_PAGE_SIZE], 5);
	assert_int_equal(cfg->frames, 64);
	assert_int_equal(cfg->max_clients, 3);
	assert_int_equal(cfg->line[KVMM_CFG_MAX_CLIENTS], 8);
}

static void test_syntax_value_with_semicolon(void **state)
{
	(void)state;
	parse_bad("[daemon]\npage_size=8K;x\n",
		  NAME ":2: page_size: '8K;x' is not a size (a number with an optional K, M, G "
		       "or T)");
	parse_ok("[daemon]\nframes = 0x40\nmax_clients=3");
	assert_int_equal(cfg->frames, 64);
	assert_int_equal(cfg->max_clients, 3);
}

static void test_bad_lines(void **state)
{
	static const struct {
		const char *text;
		const char *want;
	} cases[] = {
		{"[daemon]\nbogus = 1\n", NAME ":2: unknown key 'bogus' in [daemon]"},
		{"[daemon]\n\n\nframes = 12x\n", NAME ":4: frames: '12x' is not a number"},
		{"[daemon]\nframes = -3\n", NAME ":2: frames: '-3' is not a number"},
		{"[daemon]\nframes = 0\n", NAME ":2: frames: frames must be at least 1"},
		{"[daemon]\nring_threads = 65\n",
		 NAME ":2: ring_threads: 65 is too large (at most 64)"},
		{"[daemon]\nring_threads = many\n",
		 NAME ":2: ring_threads: 'many' is not a number"},
		{"[daemon]\nring_nice = -30\n",
		 NAME ":2: ring_nice: -30 is out of range (-20 to 19)"},
		{"[daemon]\ntrace = sometimes\n",
		 NAME ":2: trace: trace must be follow, always or off, not 'sometimes'"},
		{"[daemon]\nframes = 99999999999\n",
		 NAME ":2: frames: 99999999999 is too large (at most 4294967295)"},
		{"[daemon]\nframes = 1\n[daemon]\n",
		 NAME ":3: duplicate section [daemon] (first at line 1)"},
		{"[namespace a]\n[namespace b]\n# c\n[namespace a]\n",
		 NAME ":4: duplicate section [namespace a] (first at line 1)"},
		{"[daemon]\npage_size = 4K\npage_size = 8K\n",
		 NAME ":3: 'page_size' given again (already set at line 2)"},
		{"[daemon]\npool_size = 1G\nframes = 10\n",
		 NAME ":3: 'frames' given again (already set at line 2)"},
		{"[namespace a]\nsize = 1G\nframes = 10\n",
		 NAME ":3: 'frames' given again (already set at line 2)"},
		{"[namespace a]\nlimit = 1\nlimit_size = 10M\n",
		 NAME ":3: 'limit_size' given again (already set at line 2)"},
		{"frames = 3\n",
		 NAME ":1: 'frames' outside a section (start with [daemon] or [namespace NAME])"},
		{"[daemon]\nframes 3\n", NAME ":2: expected 'key = value' or '[section]'"},
		{"[daemon]\n = 3\n", NAME ":2: missing key before '='"},
		{"[daemon]\nframes =\n", NAME ":2: empty value for 'frames'"},
		{"[daemon\n", NAME ":1: section header without ']'"},
		{"[server]\n",
		 NAME ":1: unknown section [server] (known: [daemon], [namespace NAME], [swap], "
		      "[remote])"},
		{"[namespace]\n", NAME ":1: [namespace] needs a name: [namespace NAME]"},
		{"[namespace a/b]\n", NAME ":1: bad namespace name 'a/b' (use A-Z a-z 0-9 . _ -)"},
		{"[namespace aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n",
		 NAME ":1: namespace name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' is longer than 31 "
		      "bytes"},
		{"[namespace a]\nuids = root, no-such-user-kvmm\n",
		 NAME ":2: uids: unknown user 'no-such-user-kvmm'"},
		{"[namespace a]\ngids = no-such-group-kvmm\n",
		 NAME ":2: gids: unknown group 'no-such-group-kvmm'"},
		{"[namespace a]\nuids = 4294967295\n", NAME ":2: uids: bad user id '4294967295'"},
		{"[namespace a]\nuids = ,\n", NAME ":2: uids: empty list"},
		{"[namespace a]\nuids = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
		 NAME ":2: uids: more than 16 users"},
		{"[namespace a]\npriority = high\n",
		 NAME ":2: priority: priority 'high' is not a number in -1000..1000"},
		{"[namespace a]\npriority = 1001\n",
		 NAME ":2: priority: priority '1001' is not a number in -1000..1000"},
		{"[namespace a]\nsocket = /x\n", NAME ":2: unknown key 'socket' in [namespace a]"},
		{"[daemon]\nforeground = maybe\n",
		 NAME ":2: foreground: 'maybe' is not a boolean (yes/no, true/false, on/off)"},
		{"[daemon]\nlog_level = loud\n",
		 NAME ":2: log_level: unknown log level 'loud' (err, warn, notice, info, debug)"},
		{"[daemon]\npage_size = 3000\n",
		 NAME ":2: page_size: page_size 3000 is not a power of two of at least 4K"},
		{"[daemon]\npage_size = 2K\n",
		 NAME ":2: page_size: page_size 2K is not a power of two of at least 4K"},
		{"[daemon]\nbackend = tpu\n",
		 NAME ":2: backend: unknown backend 'tpu' (known: host, cuda)"},
		{"[daemon]\ndevice = gpu0\n",
		 NAME ":2: device: device 'gpu0' is not a CUDA device number (0-1023) or a list of "
		      "them (0,1,2,3)"},
		{"[daemon]\ndevice = 0,\n",
		 NAME ":2: device: device '0,' is not a CUDA device number (0-1023) or a list of "
		      "them (0,1,2,3)"},
		{"[daemon]\ndevice = 0, 1\n",
		 NAME ":2: device: device '0, 1' is not a CUDA device number (0-1023) or a list of "
		      "them (0,1,2,3)"},
		{"[daemon]\ndevice = 1024\n",
		 NAME ":2: device: device '1024' is not a CUDA device number (0-1023) or a list of "
		      "them (0,1,2,3)"},
		{"[daemon]\ndevice = 2,1,2\n",
		 NAME ":2: device: device 2 is named twice in '2,1,2'"},
		{"[daemon]\ndevice = 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\n", NAME
		 ":2: device: more than 16 devices in '0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16'"},
		{"[daemon]\nadmin_group = no-such-group-kvmm\n",
		 NAME ":2: admin_group: unknown group 'no-such-group-kvmm'"},
		{"[daemon]\nmax_clients = 0\n",
		 NAME ":2: max_clients: max_clients must be at least 1"},
		{"[daemon]\nsocket = "
		 "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		 NAME ":2: socket: socket path too long (at most 107 bytes)"},
		/* an opened quote is never taken literally (issue 26) */
		{"[daemon]\nsocket = \"/tmp/x.sock\n",
		 NAME ":2: unterminated quote in the value of 'socket'"},
		{"[daemon]\nsocket = \"\n", NAME ":2: unterminated quote in the value of 'socket'"},
		{"[namespace \"a]\n", NAME ":1: unterminated quote in the namespace name"},
		{"[swap]\nswap_queue_depth = 0\n", NAME
		 ":2: swap_queue_depth: swap_queue_depth must be at least 1 (an I/O queue of no "
		 "entries could never swap)"},
	};
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++)
		parse_bad(cases[i].text, cases[i].want);
}

static void test_too_many_namespaces(void **state)
{
	char text[KVMM_CONFIG_MAX_NS * 24 + 64], *p = text;
	char want[128];
	int i;

	(void)state;
	for (i = 0; i <= KVMM_CONFIG_MAX_NS; i++)
		p += sprintf(p, "[namespace n%d]\n", i);
	snprintf(want, sizeof(want), NAME ":%d: more than %d namespaces", KVMM_CONFIG_MAX_NS + 1,
		 KVMM_CONFIG_MAX_NS);
	parse_bad(text, want);
}

static void test_long_line(void **state)
{
	char *text = malloc(8192);

	(void)state;
	assert_non_null(text);
	strcpy(text, "[daemon]\nsocket = ");
	memset(text + strlen(text), 'a', 5000);
	strcpy(text + 18 + 5000, "\n");
	parse_bad(text, NAME ":2: line longer than 4095 bytes");
	free(text);
}

static void finalize_bad(const char *text, const char *want)
{
	int ret;

	kvmm_config_init(cfg);
	parse_ok(text);
	ret = kvmm_config_finalize(cfg, 0, err, sizeof(err));
	if (ret != -EINVAL || strcmp(err, want))
		fail_msg("text:\n%s\nfinalize returned %d, message\n  '%s'\nwanted\n  '%s'", text,
			 ret, err, want);
}

/*
 * memcg-style limits (issue 26): max (limit and limit_size are its old names), min and low in
 * frames or bytes; only the sum of min is held against the pool, a max of the whole pool or
 * more is none, and each namespace's own settings must agree (min <= low <= max <= frames).
 */
static void test_min_low_max(void **state)
{
	struct kvmm_config_ns *a, *b, *c;

	(void)state;
	parse_ok("[daemon]\npage_size = 4K\nframes = 100\n"
		 "[namespace a]\nframes = 40\nmax = 30\nmin = 10\nlow = 20\n"
		 "[namespace b]\nframes = 40\nmax = 1G\nmin = 5K\nlow = 8K\n"
		 "[namespace c]\nlimit = 90\n");
	a = ns_named("a");
	b = ns_named("b");
	c = ns_named("c");
	finalize_ok(1000);
	assert_int_equal(a->limit, 30);
	assert_int_equal(a->min, 10);
	assert_int_equal(a->low, 20);
	/* bytes: a max past the pool is none; protections round up to whole frames */
	assert_int_equal(b->limit, 0);
	assert_int_equal(b->min, 2);
	assert_int_equal(b->low, 2);
	/* the old key is max; more than its 20 frames: none (it used to stop kvmmd) */
	assert_int_equal(c->frames, 20);
	assert_int_equal(c->limit, 0);
	/* max = none, and a duplicate across old and new names */
	kvmm_config_init(cfg);
	parse_ok("[namespace a]\nmax = none\n");
	assert_int_equal(ns_named("a")->limit, 0);
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_parse(cfg, NAME, "[namespace a]\nlimit = 5\nmax = 6\n", err,
					   sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, NAME ":3: 'max' given again (already set at line 2)");
	kvmm_config_init(cfg);
	assert_int_equal(
		kvmm_config_parse(cfg, NAME, "[namespace a]\nmin = lots\n", err, sizeof(err)),
		-EINVAL);
	finalize_bad("[daemon]\nframes = 100\n[namespace a]\nframes = 50\nmin = 60\n"
		     "[namespace b]\nframes = 50\nmin = 45\n",
		     NAME ":2: the namespaces' min add up to 105 frames but the pool has 100");
	finalize_bad("[daemon]\nframes = 100\n[namespace a]\nframes = 50\nmin = 60\n",
		     NAME ":5: namespace a: min 60 frames is more than its 50 frames");
	finalize_bad("[daemon]\nframes = 100\n[namespace a]\nmin = 20\nlow = 10\n",
		     NAME ":5: namespace a: low (10 frames) is below min (20 frames)");
	finalize_bad("[daemon]\nframes = 100\n[namespace a]\nmax = 10\nlow = 20\n",
		     NAME ":4: namespace a: max 10 frames is below its min or low");
}

static void test_finalize_errors(void **state)
{
	(void)state;
	finalize_bad("[daemon]\npage_size = 64K\nchunk_size = 96K\n",
		     NAME ":3: chunk_size 98304 is not a multiple of page_size 65536");
	/* the pools may add up past the pool (overcommit: a budget), one alone may not */
	finalize_bad("[daemon]\npage_size = 4K\nframes = 10\n[namespace a]\nframes = 8\n"
		     "[namespace b]\nframes = 11\n",
		     NAME ":7: namespace b: 11 frames but the pool has 10");
	finalize_bad("[daemon]\npage_size = 4K\nframes = 10\n[namespace a]\nframes = 9\n"
		     "[namespace b]\n[namespace c]\n",
		     NAME ":3: 1 frames left for 2 namespaces without frames or size");
	finalize_bad("[daemon]\npage_size = 1M\npool_size = 512K\n",
		     NAME ":3: pool_size 524288 is less than one page (1048576)");
	finalize_bad("[daemon]\npage_size = 1M\n[namespace a]\n\nsize = 4K\n",
		     NAME ":5: namespace a: size 4096 is less than one page (1048576)");
	finalize_bad("[daemon]\nframes = 100\nwmark_min = 5\nwmark_low = 4\nwmark_high = 6\n",
		     NAME ":5: watermarks must be wmark_min <= wmark_low <= wmark_high (5, 4, 6)");
	finalize_bad("[daemon]\nframes = 100\nwmark_high = 40\n[namespace a]\nframes = 60\n"
		     "[namespace b]\n",
		     NAME ":3: wmark_high 40 must be below the frames of every namespace (the "
			  "smallest has 40)");
	/* a flag-set value has no line to name */
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_set(cfg, "page-size", "64K", err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_set(cfg, "chunk-size", "100K", err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_finalize(cfg, 0, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "chunk_size 102400 is not a multiple of page_size 65536");
}

/*
 * A host pool (and its host swap tiers) larger than the machine is refused at start: its memfd
 * chunks would fill lazily and the OOM killer would end kvmmd later (pool_size = 16T on a
 * 23 GiB machine started silently).  The cuda backend's frames are GPU memory.
 */
static void test_check_memory(void **state)
{
	(void)state;
	/* and the lock-out defaults (issue 26): not world-writable, a HELLO deadline, a cap */
	assert_int_equal(cfg->socket_mode, 0660);
	assert_int_equal(cfg->hello_timeout_ms, 5000);
	assert_int_equal(cfg->max_clients_per_uid, 64);
	parse_ok("[daemon]\npool_size = 2G\n[namespace a]\n[namespace b]\n"
		 "[swap]\nswap_host = 256M\n");
	finalize_ok(0);
	assert_int_equal(kvmm_config_check_memory(cfg, UINT64_C(3) << 30, err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_check_memory(cfg, UINT64_C(2) << 30, err, sizeof(err)),
			 -ENOMEM);
	assert_string_equal(err, "the pool (2048 MiB of frames and 512 MiB of host swap) is more "
				 "than this machine's memory (2048 MiB): lower pool_size, frames "
				 "or swap_host");
	/* unknown machine size: nothing to check against */
	assert_int_equal(kvmm_config_check_memory(cfg, 0, err, sizeof(err)), 0);
	/* GPU frames do not count, the host swap tiers still do */
	strcpy(cfg->backend, "cuda");
	assert_int_equal(kvmm_config_check_memory(cfg, UINT64_C(1) << 30, err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_check_memory(cfg, UINT64_C(256) << 20, err, sizeof(err)),
			 -ENOMEM);
}

static void test_flags_override(void **state)
{
	struct kvmm_config_ns *a;
	char spec[128];

	(void)state;
	parse_ok("[daemon]\npage_size = 4K\npool_size = 1M\nlog_level = info\n"
		 "socket = /tmp/file.sock\n"
		 "[namespace a]\nframes = 64\nuids = 1000\npriority = 3\n");
	/* a flag replaces the file's value */
	assert_int_equal(kvmm_config_set(cfg, "socket", "/tmp/flag.sock", err, sizeof(err)), 0);
	assert_string_equal(cfg->socket_path, "/tmp/flag.sock");
	assert_int_equal(kvmm_config_set(cfg, "log-level", "err", err, sizeof(err)), 0);
	assert_int_equal(cfg->log_level, KVMM_LOG_ERR);
	/* frames replaces pool_size from the file */
	assert_int_equal(kvmm_config_set(cfg, "frames", "200", err, sizeof(err)), 0);
	assert_int_equal(cfg->frames, 200);
	assert_int_equal(cfg->pool_size, 0);
	assert_int_equal(kvmm_config_set(cfg, "foreground", "yes", err, sizeof(err)), 0);
	assert_true(cfg->foreground);
	/* bad values and unknown keys change nothing */
	assert_int_equal(kvmm_config_set(cfg, "page_size", "5K", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "page_size 5K is not a power of two of at least 4K");
	assert_int_equal(cfg->page_size, 4096);
	assert_int_equal(kvmm_config_set(cfg, "nope", "1", err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "unknown setting 'nope'");

	/* --namespace: change a, add b (bytes) and c (frames, uids) */
	assert_int_equal(kvmm_config_set_ns(cfg, "a:32", err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_set_ns(cfg, "b:64K", err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_set_ns(cfg, "c:8:root,4242", err, sizeof(err)), 0);
	assert_int_equal(kvmm_config_set_ns(cfg, "d", err, sizeof(err)), 0);
	/* bad specs leave everything as it was */
	assert_int_equal(kvmm_config_set_ns(cfg, "a:lots", err, sizeof(err)), -EINVAL);
	assert_int_equal(kvmm_config_set_ns(cfg, "a:0", err, sizeof(err)), -EINVAL);
	assert_int_equal(kvmm_config_set_ns(cfg, "a:16:nobody-kvmm-x", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "unknown user 'nobody-kvmm-x'");
	assert_int_equal(kvmm_config_set_ns(cfg, "bad/name:4", err, sizeof(err)), -EINVAL);
	assert_int_equal(kvmm_config_set_ns(cfg, ":4", err, sizeof(err)), -EINVAL);
	assert_int_equal(cfg->nr_ns, 4);

	finalize_ok(1000);
	assert_string_equal(cfg->socket_path, "/tmp/flag.sock");
	a = ns_named("a");
	assert_int_equal(a->frames, 32);
	assert_int_equal(a->priority, 3); /* from the file, untouched by the flag */
	assert_int_equal(a->nr_uids, 1);
	assert_int_equal(a->uids[0], 1000);
	assert_int_equal(ns_named("b")->frames, 16);
	assert_int_equal(ns_named("c")->frames, 8);
	assert_int_equal(ns_named("c")->nr_uids, 2);
	assert_int_equal(ns_named("c")->uids[0], 0);
	assert_int_equal(ns_named("c")->uids[1], 4242);
	assert_int_equal(ns_named("d")->frames, 200 - 32 - 16 - 8);

	/* too many via flags */
	kvmm_config_init(cfg);
	for (int i = 0; i < KVMM_CONFIG_MAX_NS; i++) {
		snprintf(spec, sizeof(spec), "n%d:1", i);
		assert_int_equal(kvmm_config_set_ns(cfg, spec, err, sizeof(err)), 0);
	}
	assert_int_equal(kvmm_config_set_ns(cfg, "one-more", err, sizeof(err)), -EINVAL);
	assert_int_equal(cfg->nr_ns, KVMM_CONFIG_MAX_NS);
}

static void test_load(void **state)
{
	char dir[] = "/tmp/kvmm-config-test.XXXXXX";
	char path[256], want[512];
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/kvmmd.conf", dir);
	assert_int_equal(kvmm_config_load(cfg, path, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));

	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[daemon]\nframes = 77\npage_size = 16K\n[namespace x]\nlimit = 5\n", f);
	fclose(f);
	assert_int_equal(kvmm_config_load(cfg, path, err, sizeof(err)), 0);
	assert_string_equal(cfg->file, path);
	assert_int_equal(cfg->frames, 77);
	assert_int_equal(cfg->page_size, 16384);
	assert_int_equal(ns_named("x")->limit, 5);

	/* messages carry the path given */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[daemon]\nframes = 1\nwhat = 2\n", f);
	fclose(f);
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_load(cfg, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: unknown key 'what' in [daemon]", path);
	assert_string_equal(err, want);

	/* a directory is not a configuration */
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_load(cfg, dir, err, sizeof(err)), -EINVAL);
	/* NUL bytes */
	f = fopen(path, "w");
	assert_non_null(f);
	fwrite("[daemon]\n\0x", 1, 11, f);
	fclose(f);
	assert_int_equal(kvmm_config_load(cfg, path, err, sizeof(err)), -EINVAL);

	unlink(path);
	rmdir(dir);
}

static void test_print_round_trip(void **state)
{
	struct kvmm_config *back;
	unsigned int i;
	char *text;

	(void)state;
	parse_ok("[daemon]\nsocket = /tmp/x y.sock\npage_size = 64K\nchunk_size = 4M\n"
		 "pool_size = 64M\nwmark_min = 1\nwmark_low = 2\nwmark_high = 3\n"
		 "admin_group = 0\nlog_level = info\nforeground = yes\nprefault = yes\n"
		 "max_clients = 9\n"
		 "[namespace a]\nframes = 100\nlimit = 50\npriority = -2\nuids = 0, 7\n"
		 "gids = 8\n[namespace b]\n");
	finalize_ok(0);
	text = printed(cfg);

	back = malloc(sizeof(*back));
	assert_non_null(back);
	kvmm_config_init(back);
	if (kvmm_config_parse(back, "printed", text, err, sizeof(err)))
		fail_msg("printed config does not parse: %s\n%s", err, text);
	if (kvmm_config_finalize(back, 0, err, sizeof(err)))
		fail_msg("printed config does not finalize: %s\n%s", err, text);
	assert_string_equal(back->socket_path, cfg->socket_path);
	assert_int_equal(back->page_size, cfg->page_size);
	assert_int_equal(back->chunk_size, cfg->chunk_size);
	assert_int_equal(back->frames, cfg->frames);
	assert_int_equal(back->wmark_min, cfg->wmark_min);
	assert_int_equal(back->wmark_low, cfg->wmark_low);
	assert_int_equal(back->wmark_high, cfg->wmark_high);
	assert_int_equal(back->have_admin_gid, cfg->have_admin_gid);
	assert_int_equal(back->log_level, cfg->log_level);
	assert_int_equal(back->foreground, cfg->foreground);
	assert_int_equal(back->prefault, cfg->prefault);
	assert_int_equal(back->max_clients, cfg->max_clients);
	assert_int_equal(back->nr_ns, cfg->nr_ns);
	for (i = 0; i < cfg->nr_ns; i++) {
		const struct kvmm_config_ns *x = &cfg->ns[i], *y = &back->ns[i];

		assert_string_equal(x->name, y->name);
		assert_int_equal(x->frames, y->frames);
		assert_int_equal(x->limit, y->limit);
		assert_int_equal(x->priority, y->priority);
		assert_int_equal(x->nr_uids, y->nr_uids);
		assert_memory_equal(x->uids, y->uids, x->nr_uids * sizeof(uid_t));
		assert_int_equal(x->nr_gids, y->nr_gids);
		assert_memory_equal(x->gids, y->gids, x->nr_gids * sizeof(gid_t));
	}
	free(back);
	free(text);
}

/* [remote] and secret_file: every key, the print round trip, each bad value named */
/* ring_threads: auto (the default, resolved by kvmmd from the CPUs), 0 (none) .. 64 */
static void test_ring_threads(void **state)
{
	(void)state;
	parse_ok("[daemon]\nring_threads = 0\n");
	assert_int_equal(cfg->ring_threads, 0);
	assert_int_equal(cfg->line[KVMM_CFG_RING_THREADS], 2);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\nring_threads = auto\n");
	assert_int_equal(cfg->ring_threads, KVMM_CONFIG_RING_THREADS_AUTO);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\nring_threads = 64\n");
	assert_int_equal(cfg->ring_threads, 64);
}

/* ring_nice: -5 by default (not "set"), -20..19, printed back, each bad value named */
static void test_ring_nice(void **state)
{
	static const char *const bad[][2] = {
		{"-21", "ring_nice: -21 is out of range (-20 to 19)"},
		{"20", "ring_nice: 20 is out of range (-20 to 19)"},
		{"high", "ring_nice: 'high' is not a nice value"},
		{"-5x", "ring_nice: '-5x' is not a nice value"},
		{"", "ring_nice: '' is not a nice value"},
	};
	char err[256], *text;

	(void)state;
	assert_int_equal(cfg->ring_nice, -5);
	assert_false(cfg->ring_nice_set);
	parse_ok("[daemon]\nring_nice = -20\n");
	assert_int_equal(cfg->ring_nice, -20);
	assert_true(cfg->ring_nice_set);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\nring_nice = 19\n");
	assert_int_equal(cfg->ring_nice, 19);
	text = printed(cfg);
	assert_non_null(strstr(text, "\nring_nice = 19\n"));
	free(text);
	/* the flag's way in (kvmmd --ring-nice) */
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_set(cfg, "ring-nice", "0", err, sizeof(err)), 0);
	assert_int_equal(cfg->ring_nice, 0);
	assert_true(cfg->ring_nice_set);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_not_equal(kvmm_config_set(cfg, "ring_nice", bad[i][0], err, sizeof(err)),
				     0);
		assert_non_null(strstr(err, bad[i][1] + strlen("ring_nice: ")));
	}
}

/* trace: follow (the default), always, off */
static void test_trace_mode(void **state)
{
	(void)state;
	assert_int_equal(cfg->trace, KVMM_CONFIG_TRACE_FOLLOW);
	parse_ok("[daemon]\ntrace = always\n");
	assert_int_equal(cfg->trace, KVMM_CONFIG_TRACE_ALWAYS);
	assert_int_equal(cfg->line[KVMM_CFG_TRACE], 2);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\ntrace = off\n");
	assert_int_equal(cfg->trace, KVMM_CONFIG_TRACE_OFF);
	kvmm_config_init(cfg);
	parse_ok("[daemon]\ntrace = follow\n");
	assert_int_equal(cfg->trace, KVMM_CONFIG_TRACE_FOLLOW);
}

static void test_remote(void **state)
{
	char dir[] = "/tmp/kvmm-cfg-remote.XXXXXX", good[64], bad[64], pw[64], text[1024];
	struct kvmm_config *back;
	char *out;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(good, sizeof(good), "%s/good", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	snprintf(pw, sizeof(pw), "%s/pw", dir);
	f = fopen(good, "w");
	fputs("00112233445566778899AABBCCDDEEFF\n", f);
	fclose(f);
	f = fopen(bad, "w");
	fputs("0011\n", f);
	fclose(f);
	f = fopen(pw, "w");
	fputs("hunter2\n", f);
	fclose(f);

	snprintf(text, sizeof(text),
		 "[namespace a]\nsecret_file = %s\n[namespace b]\n[remote]\n"
		 "remote = redis://10.0.0.1:7000, 10.0.0.2:7001,redis://[::1]:7002\n"
		 "remote_ttl = 12h\nremote_timeout_ms = 50\nremote_policy = lookup\n"
		 "remote_max_value = 4M\nremote_queue = 128M\nremote_max_blocks = 512\n"
		 "remote_user = kv\nremote_password_file = %s\nremote_tls = no\n",
		 good, pw);
	parse_ok(text);
	finalize_ok(0);
	assert_true(ns_named("a")->have_secret);
	assert_int_equal(ns_named("a")->secret[0], 0x0011223344556677ull);
	assert_int_equal(ns_named("a")->secret[1], 0x8899aabbccddeeffull);
	assert_false(ns_named("b")->have_secret);
	assert_string_equal(cfg->remote.seeds, "10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");
	assert_int_equal(cfg->remote.ttl_s, 12 * 3600);
	assert_int_equal(cfg->remote.timeout_ms, 50);
	assert_false(cfg->remote.store);
	assert_int_equal(cfg->remote.max_value, 4u << 20);
	assert_int_equal(cfg->remote.max_queue, 128u << 20);
	assert_int_equal(cfg->remote.max_blocks, 512);
	assert_string_equal(cfg->remote.user, "kv");
	assert_string_equal(cfg->remote.password, "hunter2");

	/* printed and read back (the password is never printed) */
	out = printed(cfg);
	assert_null(strstr(out, "hunter2"));
	back = malloc(sizeof(*back));
	assert_non_null(back);
	kvmm_config_init(back);
	if (kvmm_config_parse(back, "printed", out, err, sizeof(err)))
		fail_msg("printed config does not parse: %s\n%s", err, out);
	assert_string_equal(back->remote.seeds, cfg->remote.seeds);
	assert_int_equal(back->remote.ttl_s, cfg->remote.ttl_s);
	assert_int_equal(back->remote.timeout_ms, cfg->remote.timeout_ms);
	assert_int_equal(back->remote.store, cfg->remote.store);
	assert_int_equal(back->remote.max_value, cfg->remote.max_value);
	assert_int_equal(back->remote.max_blocks, cfg->remote.max_blocks);
	free(back);
	free(out);

	/* defaults: timeout 100 ms, policy seal */
	kvmm_config_init(cfg);
	assert_int_equal(kvmm_config_set_remote(cfg, "remote", "h:1", err, sizeof(err)), 0);
	assert_int_equal(cfg->remote.timeout_ms, KVMM_CONFIG_REMOTE_DEFAULT_TIMEOUT_MS);
	assert_int_equal(cfg->remote.store, KVMM_CONFIG_REMOTE_SEAL);
	assert_string_equal(kvmm_config_remote_policy(cfg->remote.store), "seal");
	/* the policies: when this daemon writes to the tier */
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_policy", "demote", err, sizeof(err)),
			 0);
	assert_int_equal(cfg->remote.store, KVMM_CONFIG_REMOTE_DEMOTE);
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_policy", "both", err, sizeof(err)), 0);
	assert_int_equal(cfg->remote.store, KVMM_CONFIG_REMOTE_SEAL | KVMM_CONFIG_REMOTE_DEMOTE);
	assert_string_equal(kvmm_config_remote_policy(cfg->remote.store), "both");
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_policy", "always", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "demote"));
	assert_int_equal(cfg->remote.store, KVMM_CONFIG_REMOTE_SEAL | KVMM_CONFIG_REMOTE_DEMOTE);

	/* TLS: rediss:// seeds or remote_tls = yes, files that exist, a name */
	assert_int_equal(kvmm_config_set_remote(cfg, "remote", "rediss://h:1,rediss://g:2", err,
						sizeof(err)),
			 0);
	assert_true(cfg->remote.tls);
	assert_string_equal(cfg->remote.seeds, "h:1,g:2");
	assert_int_equal(
		kvmm_config_set_remote(cfg, "remote", "rediss://h:1,redis://g:2", err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "mixed"));
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls", "no", err, sizeof(err)), 0);
	assert_false(cfg->remote.tls);
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls", "yes", err, sizeof(err)), 0);
	assert_true(cfg->remote.tls);
	assert_int_equal(
		kvmm_config_set_remote(cfg, "remote_tls_ca", "/etc/hostname", err, sizeof(err)), 0);
	assert_string_equal(cfg->remote.tls_ca, "/etc/hostname");
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls_ca", "/nonexistent/ca.pem", err,
						sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "No such file"));
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls_cert", "/tmp", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls_server_name", "redis.example", err,
						sizeof(err)),
			 0);
	assert_string_equal(cfg->remote.tls_name, "redis.example");
	assert_int_equal(
		kvmm_config_set_remote(cfg, "remote_tls_server_name", "a b", err, sizeof(err)),
		-EINVAL);
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_tls", "maybe", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvmm_config_set_remote(cfg, "remote_nope", "1", err, sizeof(err)),
			 -ENOENT);

	parse_bad("[remote]\nremote = h\n", NAME ":2: remote: 'h' is not HOST:PORT");
	parse_bad("[remote]\nremote = h:0\n", NAME ":2: remote: 'h:0': bad port");
	parse_bad("[remote]\nremote = redis://:pw@h:1\n",
		  NAME ":2: remote: ':pw@h:1': expected redis://HOST:PORT (credentials go in "
		       "remote_user / remote_password_file)");
	parse_bad("[remote]\nremote_ttl = 500ms\n",
		  NAME ":2: remote_ttl: '500ms': Redis expires whole seconds (at least 1s)");
	parse_bad("[remote]\nremote_ttl = 5x\n",
		  NAME ":2: remote_ttl: '5x' is not a duration (e.g. 5s, 500ms)");
	parse_bad("[remote]\nremote_timeout_ms = 0\n",
		  NAME ":2: remote_timeout_ms: remote_timeout_ms must be at least 1");
	parse_bad("[remote]\nremote_policy = always\n",
		  NAME ":2: remote_policy: 'always' is not seal, demote, both or lookup");
	parse_bad("[remote]\nremote_max_value = 1G\n",
		  NAME ":2: remote_max_value: at most 512M (Redis' largest value)");
	parse_bad("[remote]\n[remote]\n", NAME ":2: duplicate section [remote] (first at line 1)");
	snprintf(text, sizeof(text), "[namespace a]\nsecret_file = %s\n", bad);
	err[0] = '\0';
	assert_int_equal(kvmm_config_parse(cfg, NAME, text, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "must hold 32 hex digits"));
	snprintf(text, sizeof(text), "[namespace c]\nsecret_file = %s/none\n", dir);
	assert_int_equal(kvmm_config_parse(cfg, NAME, text, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "cannot open"));
	/* a directory, a device: refused, never read (a FIFO would block) */
	snprintf(text, sizeof(text), "[namespace d]\nsecret_file = %s\n", dir);
	assert_int_equal(kvmm_config_parse(cfg, NAME, text, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	assert_int_equal(kvmm_config_parse(cfg, NAME, "[namespace e]\nsecret_file = /dev/zero\n",
					   err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));

	unlink(good);
	unlink(bad);
	unlink(pw);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_default_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_daemon_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_frames_key_and_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_namespace_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_rest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_overcommit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_from_namespaces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_syntax, setup, teardown),
		cmocka_unit_test_setup_teardown(test_syntax_value_with_semicolon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_many_namespaces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_finalize_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_min_low_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flags_override, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_print_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remote, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_nice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trace_mode, setup, teardown),
	};

	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
