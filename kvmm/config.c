// SPDX-License-Identifier: MIT
/*
 * kvmm/config.c - kvmmd's configuration: the parser of the INI-like file, the per-key value
 * parsers that the command line reuses (so a flag and a line accept exactly the same text and
 * the flag, applied later, wins), and the final pass that turns what was given into one pool
 * per namespace.  The file has a [daemon] section and [namespace NAME] sections of
 * "key = value" lines; '#' or ';' start a comment at the beginning of a line or after blank
 * space.  Everything that can be checked on one line is checked there, so the message names
 * that line; what depends on several settings (a chunk size against the page size that a
 * flag may change) is checked by kvmm_config_finalize(), which names the line of the setting
 * at fault.  Nothing here touches the pool: kvmmd hands the result to the server.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler.h"
#include "generated/autoconf.h"
#include "log.h"
#include "kvmm/config.h"
#include "kvmm/mm.h"

#define LINE_MAX_LEN 4096

/* uids and gids are parsed as uint32_t */
_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
	       "uid_t and gid_t are 32-bit");
#define FILE_MAX_LEN (1u << 20)

static int msg(char *err, size_t len, const char *fmt, ...) __printf(3, 4);
static int msg(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (err && len) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* ---- value parsers ------------------------------------------------------------------- */

/* Decimal, or hex with 0x; no sign, no blank, no trailing text. */
static int parse_u64(const char *s, uint64_t *out)
{
	int base = 10;
	char *end;
	uint64_t v;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!isxdigit((unsigned char)s[0]))
			return -EINVAL;
	} else if (!isdigit((unsigned char)s[0])) {
		return -EINVAL;
	}
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int kvmm_config_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *u;
	char *end;
	uint64_t v, mul = 1;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		u = strchr(units, toupper((unsigned char)*end));
		if (u) {
			mul = UINT64_C(1) << (10 * (u - units + 1));
			end++;
			/* "2M", "2MB", "2MiB" */
			if (!strcasecmp(end, "b") || !strcasecmp(end, "ib"))
				end += strlen(end);
		} else if (toupper((unsigned char)*end) == 'B') {
			end++; /* "4096B" */
		}
		if (*end)
			return -EINVAL;
	}
	if (check_mul_overflow(v, mul, out))
		return -EINVAL;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"yes", "true", "on", "1"};
	static const char *const no[] = {"no", "false", "off", "0"};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_count(const char *s, uint64_t max, uint64_t *out, char *err, size_t len)
{
	if (parse_u64(s, out))
		return msg(err, len, "'%s' is not a number", s);
	if (*out > max)
		return msg(err, len, "%s is too large (at most %llu)", s, (unsigned long long)max);
	return 0;
}

/* "250ms", "5s", or a plain number of milliseconds */
static int parse_duration_ms(const char *s, uint64_t *out, char *err, size_t len)
{
	char num[32];
	size_t n = strlen(s), k = n;
	uint64_t mul = 1;

	if (n > 2 && !strcmp(s + n - 2, "ms")) {
		k = n - 2;
	} else if (n > 1 && s[n - 1] == 's') {
		k = n - 1;
		mul = 1000;
	}
	if (k >= sizeof(num))
		return msg(err, len, "'%s' is not a duration (e.g. 5s, 500ms)", s);
	memcpy(num, s, k);
	num[k] = '\0';
	if (parse_u64(num, out) || *out > UINT64_MAX / 1000)
		return msg(err, len, "'%s' is not a duration (e.g. 5s, 500ms)", s);
	*out *= mul;
	return 0;
}

static int parse_bytes(const char *s, uint64_t *out, char *err, size_t len)
{
	if (kvmm_config_parse_size(s, out))
		return msg(err, len, "'%s' is not a size (a number with an optional K, M, G or T)",
			   s);
	return 0;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/* A uid or gid by number or name. */
static int parse_id(const char *tok, bool group, uint32_t *out, char *err, size_t len)
{
	uint64_t v;

	if (all_digits(tok)) {
		/* (uid_t)-1 means "no id" to the kernel: never a real one */
		if (parse_u64(tok, &v) || v >= UINT32_MAX)
			return msg(err, len, "bad %s id '%s'", group ? "group" : "user", tok);
		*out = (uint32_t)v;
		return 0;
	}
	if (group) {
		struct group *gr = getgrnam(tok);

		if (!gr)
			return msg(err, len, "unknown group '%s'", tok);
		*out = gr->gr_gid;
	} else {
		struct passwd *pw = getpwnam(tok);

		if (!pw)
			return msg(err, len, "unknown user '%s'", tok);
		*out = pw->pw_uid;
	}
	return 0;
}

/* "alice, bob 1000": names or numbers separated by commas and/or blanks. */
static int parse_ids(const char *s, bool group, uint32_t *ids, unsigned int *nr, char *err,
		     size_t len)
{
	char buf[LINE_MAX_LEN], *tok, *save = NULL;
	unsigned int n = 0, i;
	int ret;

	if (strlen(s) >= sizeof(buf))
		return msg(err, len, "list too long");
	strcpy(buf, s);
	for (tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		uint32_t id;

		ret = parse_id(tok, group, &id, err, len);
		if (ret)
			return ret;
		for (i = 0; i < n; i++)
			if (ids[i] == id)
				break;
		if (i < n)
			continue;
		if (n == KVMM_CONFIG_MAX_IDS)
			return msg(err, len, "more than %d %s", KVMM_CONFIG_MAX_IDS,
				   group ? "groups" : "users");
		ids[n++] = id;
	}
	if (!n)
		return msg(err, len, "empty list");
	*nr = n;
	return 0;
}

/* ---- [daemon] keys ------------------------------------------------------------------- */

/* clang-format off */
static const struct {
	const char *name;
	enum kvmm_config_key key;
} daemon_keys[] = {
	{"socket", KVMM_CFG_SOCKET},
	{"backend", KVMM_CFG_BACKEND},
	{"page_size", KVMM_CFG_PAGE_SIZE},
	{"chunk_size", KVMM_CFG_CHUNK_SIZE},
	{"pool_size", KVMM_CFG_POOL_SIZE},
	{"frames", KVMM_CFG_POOL_SIZE},
	{"wmark_min", KVMM_CFG_WMARK_MIN},
	{"wmark_low", KVMM_CFG_WMARK_LOW},
	{"wmark_high", KVMM_CFG_WMARK_HIGH},
	{"admin_group", KVMM_CFG_ADMIN_GROUP},
	{"log_level", KVMM_CFG_LOG_LEVEL},
	{"foreground", KVMM_CFG_FOREGROUND},
	{"prefault", KVMM_CFG_PREFAULT},
	{"max_clients", KVMM_CFG_MAX_CLIENTS},
	{"metrics", KVMM_CFG_METRICS},
	{"device", KVMM_CFG_DEVICE},
	{"socket_mode", KVMM_CFG_SOCKET_MODE},
	{"socket_group", KVMM_CFG_SOCKET_GROUP},
	{"max_clients_per_uid", KVMM_CFG_MAX_CLIENTS_PER_UID},
	{"hello_timeout", KVMM_CFG_HELLO_TIMEOUT},
	{"ring_threads", KVMM_CFG_RING_THREADS},
	{"trace", KVMM_CFG_TRACE},
	{"ring_nice", KVMM_CFG_RING_NICE},
};

static const char *const trace_modes[] = {
	[KVMM_CONFIG_TRACE_FOLLOW] = "follow",
	[KVMM_CONFIG_TRACE_ALWAYS] = "always",
	[KVMM_CONFIG_TRACE_OFF] = "off",
};

/* the keys of [namespace]: two units of one setting share a slot (duplicate detection) */
static const struct {
	const char *name;
	enum kvmm_config_ns_key slot;
} ns_keys[] = {
	{"frames", KVMM_CFG_NS_FRAMES},
	{"size", KVMM_CFG_NS_FRAMES},
	{"limit", KVMM_CFG_NS_LIMIT},
	{"limit_size", KVMM_CFG_NS_LIMIT},
	{"max", KVMM_CFG_NS_LIMIT}, /* memcg's name for limit */
	{"min", KVMM_CFG_NS_MIN},
	{"low", KVMM_CFG_NS_LOW},
	{"priority", KVMM_CFG_NS_PRIORITY},
	{"uids", KVMM_CFG_NS_UIDS},
	{"gids", KVMM_CFG_NS_GIDS},
	{"secret_file", KVMM_CFG_NS_SECRET_FILE},
};
/* clang-format on */

/* "page-size" and "Page_Size" are "page_size". */
static void norm_key(char *dst, size_t len, const char *src)
{
	size_t i;

	for (i = 0; i + 1 < len && src[i]; i++)
		dst[i] = src[i] == '-' ? '_' : (char)tolower((unsigned char)src[i]);
	dst[i] = '\0';
}

static int find_daemon_key(const char *key)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(daemon_keys); i++)
		if (!strcmp(daemon_keys[i].name, key))
			return (int)i;
	return -1;
}

static int set_daemon(struct kvmm_config *cfg, size_t idx, const char *val, char *err, size_t len)
{
	const char *name = daemon_keys[idx].name;
	uint64_t v;
	uint32_t id;
	bool b;
	int ret;

	switch (daemon_keys[idx].key) {
	case KVMM_CFG_SOCKET:
		if (strlen(val) >= sizeof(cfg->socket_path))
			return msg(err, len, "socket path too long (at most %zu bytes)",
				   sizeof(cfg->socket_path) - 1);
		strcpy(cfg->socket_path, val);
		return 0;
	case KVMM_CFG_BACKEND:
		if (!strcmp(val, "cuda") && !CONFIG_KVMM_CUDA)
			return msg(err, len,
				   "backend 'cuda': kvmmd was built without CUDA "
				   "(CONFIG_KVMM_CUDA=n or no nvcc)");
		if (strcmp(val, "host") && strcmp(val, "cuda"))
			return msg(err, len, "unknown backend '%s' (known: host, cuda)", val);
		strcpy(cfg->backend, val);
		return 0;
	case KVMM_CFG_PAGE_SIZE:
		ret = parse_bytes(val, &v, err, len);
		if (ret)
			return ret;
		if (v < 4096 || !IS_POWER_OF_2(v))
			return msg(err, len, "page_size %s is not a power of two of at least 4K",
				   val);
		cfg->page_size = v;
		return 0;
	case KVMM_CFG_CHUNK_SIZE:
		ret = parse_bytes(val, &v, err, len);
		if (ret)
			return ret;
		cfg->chunk_size = v;
		return 0;
	case KVMM_CFG_POOL_SIZE:
		/* the two units of one setting: the last one given wins */
		if (!strcmp(name, "frames")) {
			ret = parse_count(val, UINT32_MAX, &v, err, len);
			if (ret)
				return ret;
			if (!v)
				return msg(err, len, "frames must be at least 1");
			cfg->frames = v;
			cfg->pool_size = 0;
		} else {
			ret = parse_bytes(val, &v, err, len);
			if (ret)
				return ret;
			if (!v)
				return msg(err, len, "pool_size must not be 0");
			cfg->pool_size = v;
			cfg->frames = 0;
		}
		return 0;
	case KVMM_CFG_WMARK_MIN:
	case KVMM_CFG_WMARK_LOW:
	case KVMM_CFG_WMARK_HIGH:
		ret = parse_count(val, KVMM_MAX_FRAMES, &v, err, len);
		if (ret)
			return ret;
		if (daemon_keys[idx].key == KVMM_CFG_WMARK_MIN)
			cfg->wmark_min = (uint32_t)v;
		else if (daemon_keys[idx].key == KVMM_CFG_WMARK_LOW)
			cfg->wmark_low = (uint32_t)v;
		else
			cfg->wmark_high = (uint32_t)v;
		return 0;
	case KVMM_CFG_ADMIN_GROUP:
		ret = parse_id(val, true, &id, err, len);
		if (ret)
			return ret;
		cfg->admin_gid = (gid_t)id;
		cfg->have_admin_gid = true;
		return 0;
	case KVMM_CFG_LOG_LEVEL:
		ret = kvmm_log_level_from_string(val);
		if (ret < 0)
			return msg(err, len,
				   "unknown log level '%s' (err, warn, notice, info, debug)", val);
		cfg->log_level = ret;
		return 0;
	case KVMM_CFG_FOREGROUND:
	case KVMM_CFG_PREFAULT:
		if (parse_bool(val, &b))
			return msg(err, len, "'%s' is not a boolean (yes/no, true/false, on/off)",
				   val);
		if (daemon_keys[idx].key == KVMM_CFG_FOREGROUND)
			cfg->foreground = b;
		else
			cfg->prefault = b;
		return 0;
	case KVMM_CFG_SOCKET_MODE: {
		char *end;
		unsigned long m;

		errno = 0;
		m = strtoul(val, &end, 8);
		if (errno || end == val || *end || m > 0777 || val[0] == '-' || val[0] == '+')
			return msg(err, len, "'%s' is not an octal mode (0600, 0660, 0666...)",
				   val);
		if ((m & 0600) != 0600)
			return msg(err, len,
				   "socket_mode %04lo must let the owner read and write (0600)", m);
		cfg->socket_mode = (uint32_t)m;
		return 0;
	}
	case KVMM_CFG_SOCKET_GROUP:
		ret = parse_id(val, true, &id, err, len);
		if (ret)
			return ret;
		cfg->socket_gid = (gid_t)id;
		cfg->have_socket_gid = true;
		return 0;
	case KVMM_CFG_MAX_CLIENTS_PER_UID:
		ret = parse_count(val, 65536, &v, err, len);
		if (ret)
			return ret;
		cfg->max_clients_per_uid = (uint32_t)v;
		return 0;
	case KVMM_CFG_HELLO_TIMEOUT:
		/* milliseconds, or a number with s / ms */
		ret = parse_duration_ms(val, &v, err, len);
		if (ret)
			return ret;
		if (!v || v > 3600000)
			return msg(err, len, "hello_timeout must be 1 ms to 1 hour");
		cfg->hello_timeout_ms = (uint32_t)v;
		return 0;
	case KVMM_CFG_TRACE:
		for (unsigned int i = 0; i < sizeof(trace_modes) / sizeof(trace_modes[0]); i++) {
			if (!strcmp(val, trace_modes[i])) {
				cfg->trace = i;
				return 0;
			}
		}
		return msg(err, len, "trace must be follow, always or off, not '%s'", val);
	case KVMM_CFG_RING_THREADS:
		/* "auto" (one per two CPUs, at most 8), or 0 (the event loop polls every ring) to 64 */
		if (!strcmp(val, "auto")) {
			cfg->ring_threads = KVMM_CONFIG_RING_THREADS_AUTO;
			return 0;
		}
		ret = parse_count(val, KVMM_CONFIG_MAX_RING_THREADS, &v, err, len);
		if (ret)
			return ret;
		cfg->ring_threads = (uint32_t)v;
		return 0;
	case KVMM_CFG_RING_NICE: {
		/* a nice value, -20 (first) to 19 (last), as nice(1) takes it */
		char *end;
		long n;

		errno = 0;
		n = strtol(val, &end, 10);
		if (errno || end == val || *end)
			return msg(err, len, "'%s' is not a nice value", val);
		if (n < -20 || n > 19)
			return msg(err, len, "%s is out of range (-20 to 19)", val);
		cfg->ring_nice = (int)n;
		cfg->ring_nice_set = true;
		return 0;
	}
	case KVMM_CFG_MAX_CLIENTS:
		ret = parse_count(val, 65536, &v, err, len);
		if (ret)
			return ret;
		if (!v)
			return msg(err, len, "max_clients must be at least 1");
		cfg->max_clients = (uint32_t)v;
		return 0;
	case KVMM_CFG_DEVICE: {
		/* N, or N,M,... : a tensor-parallel group mirroring every frame */
		const char *p = val;
		unsigned int nr = 0;

		for (;;) {
			char *end;
			long d;

			errno = 0;
			d = strtol(p, &end, 10);
			if (errno || end == p || (*end && *end != ',') || d < 0 || d > 1023 ||
			    *p == '-' || *p == '+' || *p == ' ')
				return msg(err, len,
					   "device '%s' is not a CUDA device number (0-1023) or a "
					   "list of them (0,1,2,3)",
					   val);
			for (unsigned int j = 0; j < nr; j++)
				if (cfg->devices[j] == (int)d)
					return msg(err, len, "device %ld is named twice in '%s'", d,
						   val);
			if (nr == KVMM_CONFIG_MAX_DEVICES)
				return msg(err, len, "more than %d devices in '%s'",
					   KVMM_CONFIG_MAX_DEVICES, val);
			cfg->devices[nr++] = (int)d;
			if (!*end)
				break;
			p = end + 1;
		}
		cfg->nr_devices = nr;
		return 0;
	}
	case KVMM_CFG_METRICS: {
		/* IPV4:PORT, or off/no/empty; the listener checks the address itself */
		const char *colon = strrchr(val, ':');

		if (!val[0] || !strcmp(val, "off") || !strcmp(val, "no")) {
			cfg->metrics[0] = '\0';
			return 0;
		}
		if (strlen(val) >= sizeof(cfg->metrics) || !colon || colon == val || !colon[1] ||
		    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
		    strtoul(colon + 1, NULL, 10) > 65535)
			return msg(err, len,
				   "metrics wants ADDRESS:PORT (e.g. 127.0.0.1:9477) or off");
		strcpy(cfg->metrics, val);
		return 0;
	}
	case KVMM_CFG_KEY_COUNT:
		break;
	}
	return msg(err, len, "unknown key '%s'", name);
}

int kvmm_config_set(struct kvmm_config *cfg, const char *key, const char *value, char *err,
		    size_t errlen)
{
	char k[64];
	int idx;

	norm_key(k, sizeof(k), key);
	idx = find_daemon_key(k);
	if (idx < 0) {
		msg(err, errlen, "unknown setting '%s'", key);
		return -ENOENT;
	}
	return set_daemon(cfg, (size_t)idx, value, err, errlen);
}

/* ---- [namespace] keys ---------------------------------------------------------------- */

/* The first line of a small file, trailing blanks cut: 0 or a message. */
static int read_line_file(const char *path, char *buf, size_t size, char *err, size_t len)
{
	struct stat st;
	ssize_t n;
	int fd;

	/* never block on a FIFO or a device named by mistake: a regular file or nothing */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return msg(err, len, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return msg(err, len, "'%s' is not a regular file", path);
	}
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return msg(err, len, "cannot read '%s': %s", path, strerror(errno));
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	while (n > 0 && buf[0] && isspace((unsigned char)buf[strlen(buf) - 1]))
		buf[strlen(buf) - 1] = '\0';
	return 0;
}

/* secret_file: exactly 32 hex digits (128 bits), not all zero */
static int read_secret(struct kvmm_config_ns *ns, const char *path, char *err, size_t len)
{
	char buf[128], word[17];
	uint64_t v[2];
	int ret;

	if (strlen(path) >= sizeof(ns->secret_file))
		return msg(err, len, "path too long");
	ret = read_line_file(path, buf, sizeof(buf), err, len);
	if (ret)
		return ret;
	if (strlen(buf) != 32 || strspn(buf, "0123456789abcdefABCDEF") != 32) {
		explicit_bzero(buf, sizeof(buf));
		return msg(err, len,
			   "'%s' must hold 32 hex digits (e.g. from `openssl rand -hex 16` or "
			   "`head -c16 /dev/urandom | xxd -p`)",
			   path);
	}
	for (int i = 0; i < 2; i++) {
		memcpy(word, buf + 16 * i, 16);
		word[16] = '\0';
		v[i] = strtoull(word, NULL, 16);
	}
	explicit_bzero(buf, sizeof(buf));
	explicit_bzero(word, sizeof(word));
	if (!v[0] && !v[1])
		return msg(err, len, "'%s': an all-zero secret is no secret", path);
	ns->secret[0] = v[0];
	ns->secret[1] = v[1];
	ns->have_secret = true;
	strcpy(ns->secret_file, path);
	return 0;
}

static int set_ns(struct kvmm_config_ns *ns, size_t i, const char *val, char *err, size_t len)
{
	const char *key = ns_keys[i].name;
	uint64_t v;
	long long p;
	char *end;
	int ret;

	if (!strcmp(key, "max") || !strcmp(key, "min") || !strcmp(key, "low")) {
		uint64_t *frames = &ns->limit, *bytes = &ns->limit_size;

		if (key[1] == 'i') {
			frames = &ns->min;
			bytes = &ns->min_size;
		} else if (key[0] == 'l') {
			frames = &ns->low;
			bytes = &ns->low_size;
		}
		*frames = 0;
		*bytes = 0;
		/* a plain number is frames, one with a size suffix bytes; max = none: no limit */
		if (key[1] == 'a' && !strcmp(val, "none"))
			return 0;
		if (all_digits(val))
			return parse_count(val, KVMM_MAX_FRAMES, frames, err, len);
		return parse_bytes(val, bytes, err, len);
	}
	if (!strcmp(key, "frames") || !strcmp(key, "limit")) {
		ret = parse_count(val, KVMM_MAX_FRAMES, &v, err, len);
		if (ret)
			return ret;
		if (key[0] == 'f') {
			if (!v)
				return msg(err, len, "frames must be at least 1");
			ns->frames = v;
			ns->size = 0;
		} else {
			ns->limit = v;
			ns->limit_size = 0;
		}
		return 0;
	}
	if (!strcmp(key, "size") || !strcmp(key, "limit_size")) {
		ret = parse_bytes(val, &v, err, len);
		if (ret)
			return ret;
		if (key[0] == 's') {
			if (!v)
				return msg(err, len, "size must not be 0");
			ns->size = v;
			ns->frames = 0;
		} else {
			ns->limit_size = v;
			ns->limit = 0;
		}
		return 0;
	}
	if (!strcmp(key, "priority")) {
		errno = 0;
		p = strtoll(val, &end, 10);
		if (errno || *end || end == val || isspace((unsigned char)val[0]) || p < -1000 ||
		    p > 1000)
			return msg(err, len, "priority '%s' is not a number in -1000..1000", val);
		ns->priority = (int)p;
		return 0;
	}
	if (!strcmp(key, "uids"))
		return parse_ids(val, false, (uint32_t *)ns->uids, &ns->nr_uids, err, len);
	if (!strcmp(key, "secret_file"))
		return read_secret(ns, val, err, len);
	return parse_ids(val, true, (uint32_t *)ns->gids, &ns->nr_gids, err, len);
}

static struct kvmm_config_ns *find_ns(struct kvmm_config *cfg, const char *name)
{
	unsigned int i;

	for (i = 0; i < cfg->nr_ns; i++)
		if (!strcmp(cfg->ns[i].name, name))
			return &cfg->ns[i];
	return NULL;
}

static int check_ns_name(const char *name, char *err, size_t len)
{
	char padded[KVMM_NAME_LEN] = {0};

	if (strlen(name) >= KVMM_NAME_LEN)
		return msg(err, len, "namespace name '%s' is longer than %d bytes", name,
			   KVMM_NAME_LEN - 1);
	strcpy(padded, name);
	if (kvmm_name_check(padded))
		return msg(err, len, "bad namespace name '%s' (use A-Z a-z 0-9 . _ -)", name);
	return 0;
}

static struct kvmm_config_ns *add_ns(struct kvmm_config *cfg, const char *name, char *err,
				     size_t len)
{
	struct kvmm_config_ns *ns;

	if (check_ns_name(name, err, len))
		return NULL;
	if (cfg->nr_ns == KVMM_CONFIG_MAX_NS) {
		msg(err, len, "more than %d namespaces", KVMM_CONFIG_MAX_NS);
		return NULL;
	}
	ns = &cfg->ns[cfg->nr_ns++];
	memset(ns, 0, sizeof(*ns));
	strcpy(ns->name, name);
	return ns;
}

int kvmm_config_set_ns(struct kvmm_config *cfg, const char *spec, char *err, size_t errlen)
{
	char buf[LINE_MAX_LEN], *name, *amount, *uids;
	struct kvmm_config_ns *ns, tmp;
	uint64_t v;
	int ret;

	if (strlen(spec) >= sizeof(buf))
		return msg(err, errlen, "namespace spec too long");
	strcpy(buf, spec);
	name = buf;
	amount = strchr(name, ':');
	uids = NULL;
	if (amount) {
		*amount++ = '\0';
		uids = strchr(amount, ':');
		if (uids)
			*uids++ = '\0';
	}
	ret = check_ns_name(name, err, errlen);
	if (ret)
		return ret;
	ns = find_ns(cfg, name);
	/* work on a copy: a bad spec leaves the configuration as it was */
	if (ns) {
		tmp = *ns;
	} else {
		memset(&tmp, 0, sizeof(tmp));
		strcpy(tmp.name, name);
	}
	if (amount && *amount) {
		if (all_digits(amount)) {
			ret = parse_count(amount, KVMM_MAX_FRAMES, &v, err, errlen);
			if (ret)
				return ret;
			if (!v)
				return msg(err, errlen, "frames must be at least 1");
			tmp.frames = v;
			tmp.size = 0;
		} else {
			ret = parse_bytes(amount, &v, err, errlen);
			if (ret)
				return ret;
			if (!v)
				return msg(err, errlen, "size must not be 0");
			tmp.size = v;
			tmp.frames = 0;
		}
	}
	if (uids && *uids) {
		ret = parse_ids(uids, false, (uint32_t *)tmp.uids, &tmp.nr_uids, err, errlen);
		if (ret)
			return ret;
	}
	if (!ns) {
		ns = add_ns(cfg, name, err, errlen);
		if (!ns)
			return -EINVAL;
	}
	*ns = tmp;
	return 0;
}

/* ---- [swap] keys ------------------------------------------------------------------------- */

/* "PATH:SIZE[:PRIO]"; the path may not hold a ':' */
static int parse_swap_file(struct kvmm_config_swap *sw, const char *v, char *err, size_t len)
{
	char buf[KVMM_PATH_LEN + 64], *size, *prio, *end;
	long pr = 5;
	int ret;

	if (strlen(v) >= sizeof(buf))
		return msg(err, len, "too long");
	strcpy(buf, v);
	size = strchr(buf, ':');
	if (!size || size == buf)
		return msg(err, len, "expected PATH:SIZE[:PRIO], got '%s'", v);
	*size++ = '\0';
	prio = strchr(size, ':');
	if (prio) {
		*prio++ = '\0';
		errno = 0;
		pr = strtol(prio, &end, 10);
		if (errno || end == prio || *end || pr < -32768 || pr > 32767)
			return msg(err, len, "'%s' is not a priority", prio);
	}
	if (strlen(buf) >= sizeof(sw->file))
		return msg(err, len, "path too long");
	ret = parse_bytes(size, &sw->file_size, err, len);
	if (ret)
		return ret;
	if (!sw->file_size)
		return msg(err, len, "swap_file size must not be 0");
	strcpy(sw->file, buf);
	sw->file_prio = (int)pr;
	return 0;
}

int kvmm_config_set_swap(struct kvmm_config *cfg, const char *key, const char *value, char *err,
			 size_t errlen)
{
	struct kvmm_config_swap *sw = &cfg->swap;
	char k[64];
	uint64_t n;
	int ret;

	if (strlen(key) >= sizeof(k)) {
		msg(err, errlen, "unknown key");
		return -ENOENT;
	}
	norm_key(k, sizeof(k), key);
	if (!strcmp(k, "swap_host"))
		return parse_bytes(value, &sw->host_size, err, errlen);
	if (!strcmp(k, "swap_file"))
		return parse_swap_file(sw, value, err, errlen);
	if (!strcmp(k, "swap_queue_depth")) {
		ret = parse_count(value, 4096, &n, err, errlen);
		if (!ret && !n)
			ret = msg(err, errlen,
				  "swap_queue_depth must be at least 1 (an I/O queue "
				  "of no entries could never swap)");
		if (!ret)
			sw->queue_depth = (uint32_t)n;
		return ret;
	}
	if (!strcmp(k, "prefetch")) {
		ret = parse_count(value, 64, &n, err, errlen);
		if (!ret)
			sw->prefetch = (uint32_t)n;
		return ret;
	}
	if (!strcmp(k, "kswapd")) {
		if (parse_bool(value, &sw->kswapd))
			return msg(err, errlen, "'%s' is not yes or no", value);
		return 0;
	}
	if (!strcmp(k, "reclaim_inline")) {
		if (parse_bool(value, &sw->reclaim_inline))
			return msg(err, errlen, "'%s' is not yes or no", value);
		return 0;
	}
	if (!strcmp(k, "warm_restart")) {
		if (parse_bool(value, &sw->warm_restart))
			return msg(err, errlen, "'%s' is not yes or no", value);
		return 0;
	}
	if (!strcmp(k, "fault")) {
		/* POINT:SPEC -> "POINT SPEC" as kvmm_swap_fault_parse() reads it */
		const char *colon = strchr(value, ':');
		int w;

		if (sw->nr_fault == KVMM_CONFIG_MAX_FAULTS)
			return msg(err, errlen, "at most %d fault lines", KVMM_CONFIG_MAX_FAULTS);
		if (!colon || colon == value)
			return msg(err, errlen, "expected POINT:SPEC, got '%s'", value);
		w = snprintf(sw->fault[sw->nr_fault], KVMM_CONFIG_FAULT_LEN, "%.*s %s",
			     (int)(colon - value), value, colon + 1);
		if (w < 0 || w >= KVMM_CONFIG_FAULT_LEN)
			return msg(err, errlen, "too long");
		sw->nr_fault++;
		return 0;
	}
	msg(err, errlen, "unknown key '%s' in [swap]", k);
	return -ENOENT;
}

/* ---- [remote] keys ------------------------------------------------------------------------ */

/* "redis://h:p,h:p" or "h:p,redis://h:p": every seed a HOST:PORT, stored without the scheme */
static int parse_remote_seeds(struct kvmm_config_remote *rm, const char *v, char *err, size_t len)
{
	char buf[sizeof(rm->seeds)], out[sizeof(rm->seeds)] = "", *tok, *save = NULL;
	bool tls = false, plain = false;

	if (strlen(v) >= sizeof(buf))
		return msg(err, len, "too long");
	strcpy(buf, v);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		char *colon, *end;
		unsigned long port;

		/* rediss://: TLS to every node (remote_tls = yes) */
		if (!strncmp(tok, "rediss://", 9)) {
			tls = true;
			tok += 9;
		} else if (!strncmp(tok, "redis://", 8)) {
			plain = true;
			tok += 8;
		}
		if (tls && plain)
			return msg(err, len,
				   "redis:// and rediss:// seeds mixed: one cluster is "
				   "either TLS or not");
		if (strchr(tok, '@') || strchr(tok, '/'))
			return msg(err, len,
				   "'%s': expected redis://HOST:PORT (credentials go in "
				   "remote_user / remote_password_file)",
				   tok);
		colon = strrchr(tok, ':');
		if (!colon || colon == tok)
			return msg(err, len, "'%s' is not HOST:PORT", tok);
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || !port || port > 65535)
			return msg(err, len, "'%s': bad port", tok);
		if ((size_t)(colon - tok) >= 64)
			return msg(err, len, "'%s': host name too long", tok);
		if (strlen(out) + strlen(tok) + 2 > sizeof(out))
			return msg(err, len, "too many seeds");
		if (out[0])
			strcat(out, ",");
		strcat(out, tok);
	}
	if (!out[0])
		return msg(err, len, "no HOST:PORT given");
	strcpy(rm->seeds, out);
	if (tls)
		rm->tls = true;
	return 0;
}

/* remote_tls_ca / _cert / _key: a regular file that exists now (read again at start) */
static int tls_path(char *dst, size_t size, const char *value, char *err, size_t errlen)
{
	struct stat st;

	if (!value[0] || strlen(value) >= size)
		return msg(err, errlen, "'%s': expected a path (at most %zu bytes)", value,
			   size - 1);
	if (stat(value, &st))
		return msg(err, errlen, "'%s': %s", value, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return msg(err, errlen, "'%s' is not a regular file", value);
	strcpy(dst, value);
	return 0;
}

int kvmm_config_set_remote(struct kvmm_config *cfg, const char *key, const char *value, char *err,
			   size_t errlen)
{
	struct kvmm_config_remote *rm = &cfg->remote;
	char k[64];
	uint64_t n;
	bool b;
	int ret;

	if (strlen(key) >= sizeof(k)) {
		msg(err, errlen, "unknown key");
		return -ENOENT;
	}
	norm_key(k, sizeof(k), key);
	if (!strcmp(k, "remote"))
		return parse_remote_seeds(rm, value, err, errlen);
	if (!strcmp(k, "remote_ttl")) {
		size_t vl = strlen(value);

		/* also minutes, hours and days: "30m", "12h", "7d" */
		if (vl > 1 && vl < 24 && strchr("mhd", value[vl - 1]) &&
		    isdigit((unsigned char)value[vl - 2])) {
			char num[24];
			uint64_t mul = value[vl - 1] == 'm'   ? 60
				       : value[vl - 1] == 'h' ? 3600
							      : 86400;

			memcpy(num, value, vl - 1);
			num[vl - 1] = '\0';
			if (parse_u64(num, &n) || n > UINT32_MAX / mul)
				return msg(err, errlen,
					   "'%s' is not a duration (e.g. 3600s, 12h, 7d)", value);
			rm->ttl_s = (uint32_t)(n * mul);
			return 0;
		}
		ret = parse_duration_ms(value, &n, err, errlen);
		if (!ret && n / 1000 > UINT32_MAX)
			ret = msg(err, errlen, "'%s' is too long", value);
		if (!ret && n && n < 1000)
			ret = msg(err, errlen, "'%s': Redis expires whole seconds (at least 1s)",
				  value);
		if (!ret)
			rm->ttl_s = (uint32_t)(n / 1000);
		return ret;
	}
	if (!strcmp(k, "remote_timeout_ms")) {
		ret = parse_count(value, 60000, &n, err, errlen);
		if (!ret && !n)
			ret = msg(err, errlen, "remote_timeout_ms must be at least 1");
		if (!ret)
			rm->timeout_ms = (uint32_t)n;
		return ret;
	}
	if (!strcmp(k, "remote_policy")) {
		if (!strcmp(value, "seal"))
			rm->store = KVMM_CONFIG_REMOTE_SEAL;
		else if (!strcmp(value, "demote"))
			rm->store = KVMM_CONFIG_REMOTE_DEMOTE;
		else if (!strcmp(value, "both"))
			rm->store = KVMM_CONFIG_REMOTE_SEAL | KVMM_CONFIG_REMOTE_DEMOTE;
		else if (!strcmp(value, "lookup"))
			rm->store = 0;
		else
			return msg(err, errlen, "'%s' is not seal, demote, both or lookup", value);
		return 0;
	}
	if (!strcmp(k, "remote_max_value") || !strcmp(k, "remote_queue")) {
		ret = parse_bytes(value, &n, err, errlen);
		if (!ret && !n)
			ret = msg(err, errlen, "must not be 0");
		if (!ret && k[7] == 'm' && n > (512u << 20))
			ret = msg(err, errlen, "at most 512M (Redis' largest value)");
		if (!ret) {
			if (k[7] == 'm')
				rm->max_value = n;
			else
				rm->max_queue = n;
		}
		return ret;
	}
	if (!strcmp(k, "remote_max_blocks")) {
		ret = parse_count(value, 65536, &n, err, errlen);
		if (!ret && !n)
			ret = msg(err, errlen, "remote_max_blocks must be at least 1");
		if (!ret)
			rm->max_blocks = (uint32_t)n;
		return ret;
	}
	if (!strcmp(k, "remote_user")) {
		if (strlen(value) >= sizeof(rm->user))
			return msg(err, errlen, "too long");
		strcpy(rm->user, value);
		return 0;
	}
	if (!strcmp(k, "remote_password")) {
		if (strlen(value) >= sizeof(rm->password))
			return msg(err, errlen, "too long");
		strcpy(rm->password, value);
		return 0;
	}
	if (!strcmp(k, "remote_password_file")) {
		ret = read_line_file(value, rm->password, sizeof(rm->password), err, errlen);
		if (!ret && !rm->password[0])
			ret = msg(err, errlen, "'%s' is empty", value);
		return ret;
	}
	if (!strcmp(k, "remote_tls")) {
		if (parse_bool(value, &b))
			return msg(err, errlen, "'%s' is not yes or no", value);
		rm->tls = b;
		return 0;
	}
	if (!strcmp(k, "remote_tls_ca"))
		return tls_path(rm->tls_ca, sizeof(rm->tls_ca), value, err, errlen);
	if (!strcmp(k, "remote_tls_cert"))
		return tls_path(rm->tls_cert, sizeof(rm->tls_cert), value, err, errlen);
	if (!strcmp(k, "remote_tls_key"))
		return tls_path(rm->tls_key, sizeof(rm->tls_key), value, err, errlen);
	if (!strcmp(k, "remote_tls_server_name")) {
		if (!value[0] || strlen(value) >= sizeof(rm->tls_name) || strpbrk(value, " \t/"))
			return msg(err, errlen, "'%s' is not a host name or address", value);
		strcpy(rm->tls_name, value);
		return 0;
	}
	msg(err, errlen, "unknown key '%s' in [remote]", k);
	return -ENOENT;
}

/* ---- the file ------------------------------------------------------------------------ */

struct parser {
	struct kvmm_config *cfg;
	const char *name;
	unsigned int lineno;
	struct kvmm_config_ns *ns; /* current [namespace] section */
	bool in_daemon;		   /* in [daemon] */
	bool in_swap;		   /* in [swap] */
	bool in_remote;		   /* in [remote] */
	char *err;
	size_t errlen;
};

static int line_err(struct parser *p, const char *fmt, ...) __printf(2, 3);
static int line_err(struct parser *p, const char *fmt, ...)
{
	char m[KVMM_CONFIG_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	return msg(p->err, p->errlen, "%s:%u: %s", p->name, p->lineno, m);
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/*
 * "x" -> x, so that a value can hold blanks or a '#'.  NULL for a quote that is opened and
 * never closed (taking it literally would give the socket or a name a stray '"').
 */
static char *unquote(char *s)
{
	size_t n = strlen(s);

	if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
		s[n - 1] = '\0';
		return s + 1;
	}
	if (n && s[0] == '"')
		return NULL;
	return s;
}

/* Cut a comment that starts after blank space (or at the start); not inside quotes. */
static void strip_comment(char *s)
{
	bool quoted = false;
	char *c;

	for (c = s; *c; c++) {
		if (*c == '"')
			quoted = !quoted;
		if (!quoted && (*c == '#' || *c == ';') &&
		    (c == s || isspace((unsigned char)c[-1]))) {
			*c = '\0';
			return;
		}
	}
}

static int parse_section(struct parser *p, char *line)
{
	struct kvmm_config *cfg = p->cfg;
	size_t n = strlen(line);
	char *in, *name;
	char m[KVMM_CONFIG_ERR_LEN];

	if (line[n - 1] != ']')
		return line_err(p, "section header without ']'");
	line[n - 1] = '\0';
	in = trim(line + 1);
	p->ns = NULL;
	p->in_daemon = false;
	p->in_swap = false;
	p->in_remote = false;
	if (!strcmp(in, "remote")) {
		if (cfg->remote.section_line)
			return line_err(p, "duplicate section [remote] (first at line %u)",
					cfg->remote.section_line);
		cfg->remote.section_line = p->lineno;
		p->in_remote = true;
		return 0;
	}
	if (!strcmp(in, "swap")) {
		if (cfg->swap.section_line)
			return line_err(p, "duplicate section [swap] (first at line %u)",
					cfg->swap.section_line);
		cfg->swap.section_line = p->lineno;
		p->in_swap = true;
		return 0;
	}
	if (!strcmp(in, "daemon")) {
		if (cfg->daemon_seen)
			return line_err(p, "duplicate section [daemon] (first at line %u)",
					cfg->daemon_line);
		cfg->daemon_seen = true;
		cfg->daemon_line = p->lineno;
		p->in_daemon = true;
		return 0;
	}
	if (!strncmp(in, "namespace", 9) && isspace((unsigned char)in[9])) {
		name = unquote(trim(in + 9));
		if (!name)
			return line_err(p, "unterminated quote in the namespace name");
		p->ns = find_ns(cfg, name);
		if (p->ns)
			return line_err(p, "duplicate section [namespace %s] (first at line %u)",
					name, p->ns->section_line);
		p->ns = add_ns(cfg, name, m, sizeof(m));
		if (!p->ns)
			return line_err(p, "%s", m);
		p->ns->section_line = p->lineno;
		return 0;
	}
	if (!strcmp(in, "namespace"))
		return line_err(p, "[namespace] needs a name: [namespace NAME]");
	return line_err(
		p, "unknown section [%s] (known: [daemon], [namespace NAME], [swap], [remote])",
		in);
}

static int parse_line(struct parser *p, char *line)
{
	char key[64], m[KVMM_CONFIG_ERR_LEN], *eq, *k, *v;
	unsigned int *seen;
	size_t i;
	int idx, ret;

	strip_comment(line);
	line = trim(line);
	if (!*line)
		return 0;
	if (line[0] == '[')
		return parse_section(p, line);

	eq = strchr(line, '=');
	if (!eq)
		return line_err(p, "expected 'key = value' or '[section]'");
	*eq = '\0';
	k = trim(line);
	v = unquote(trim(eq + 1));
	if (!*k)
		return line_err(p, "missing key before '='");
	if (!v)
		return line_err(p, "unterminated quote in the value of '%.40s'", k);
	if (strlen(k) >= sizeof(key))
		return line_err(p, "unknown key '%.40s...'", k);
	norm_key(key, sizeof(key), k);
	if (!*v)
		return line_err(p, "empty value for '%s'", key);

	if (p->in_daemon) {
		idx = find_daemon_key(key);
		if (idx < 0)
			return line_err(p, "unknown key '%s' in [daemon]", key);
		seen = &p->cfg->line[daemon_keys[idx].key];
		if (*seen)
			return line_err(p, "'%s' given again (already set at line %u)", key, *seen);
		ret = set_daemon(p->cfg, (size_t)idx, v, m, sizeof(m));
		if (ret)
			return line_err(p, "%s: %s", key, m);
		*seen = p->lineno;
		return 0;
	}
	if (p->in_swap) {
		ret = kvmm_config_set_swap(p->cfg, key, v, m, sizeof(m));
		if (ret == -ENOENT)
			return line_err(p, "%s", m);
		if (ret)
			return line_err(p, "%s: %s", key, m);
		return 0;
	}
	if (p->in_remote) {
		ret = kvmm_config_set_remote(p->cfg, key, v, m, sizeof(m));
		if (ret == -ENOENT)
			return line_err(p, "%s", m);
		if (ret)
			return line_err(p, "%s: %s", key, m);
		return 0;
	}
	if (p->ns) {
		for (i = 0; i < ARRAY_SIZE(ns_keys); i++)
			if (!strcmp(ns_keys[i].name, key))
				break;
		if (i == ARRAY_SIZE(ns_keys))
			return line_err(p, "unknown key '%s' in [namespace %s]", key, p->ns->name);
		seen = &p->ns->line[ns_keys[i].slot];
		if (*seen)
			return line_err(p, "'%s' given again (already set at line %u)", key, *seen);
		ret = set_ns(p->ns, i, v, m, sizeof(m));
		if (ret)
			return line_err(p, "%s: %s", key, m);
		*seen = p->lineno;
		return 0;
	}
	return line_err(p, "'%s' outside a section (start with [daemon] or [namespace NAME])", key);
}

int kvmm_config_parse(struct kvmm_config *cfg, const char *name, const char *text, char *err,
		      size_t errlen)
{
	struct parser p = {
		.cfg = cfg, .name = name ? name : "config", .err = err, .errlen = errlen};
	char line[LINE_MAX_LEN];
	const char *s = text, *nl;
	size_t n;
	int ret;

	if (name) {
		if (strlen(name) >= sizeof(cfg->file))
			return msg(err, errlen, "%.64s...: file name too long", name);
		strcpy(cfg->file, name);
	}
	while (*s) {
		p.lineno++;
		nl = strchr(s, '\n');
		n = nl ? (size_t)(nl - s) : strlen(s);
		if (n >= sizeof(line))
			return line_err(&p, "line longer than %d bytes", LINE_MAX_LEN - 1);
		memcpy(line, s, n);
		line[n] = '\0';
		if (memchr(s, '\0', n))
			return line_err(&p, "NUL byte in line");
		ret = parse_line(&p, line);
		if (ret)
			return ret;
		s += n + (nl ? 1 : 0);
	}
	return 0;
}

int kvmm_config_load(struct kvmm_config *cfg, const char *path, char *err, size_t errlen)
{
	struct stat st;
	char *text = NULL;
	size_t got = 0;
	ssize_t r;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		msg(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		msg(err, errlen, "%s: %s", path, strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = msg(err, errlen, "%s: not a regular file", path);
		goto out_close;
	}
	if (st.st_size > FILE_MAX_LEN) {
		msg(err, errlen, "%s: larger than %u bytes", path, FILE_MAX_LEN);
		ret = -EFBIG;
		goto out_close;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		ret = -ENOMEM;
		msg(err, errlen, "%s: out of memory", path);
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		r = read(fd, text + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			msg(err, errlen, "%s: %s", path, strerror(-ret));
			goto out_free;
		}
		if (!r)
			break;
		got += (size_t)r;
	}
	text[got] = '\0';
	if (strlen(text) != got) {
		ret = msg(err, errlen, "%s: NUL byte in file", path);
		goto out_free;
	}
	ret = kvmm_config_parse(cfg, path, text, err, errlen);
out_free:
	free(text);
out_close:
	close(fd);
	return ret;
}

const char *kvmm_config_remote_policy(unsigned int store)
{
	static const char *const names[] = {"lookup", "seal", "demote", "both"};

	return names[store & 3];
}

/* ---- defaults and the whole ---------------------------------------------------------- */

void kvmm_config_init(struct kvmm_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->backend, "host");
	cfg->swap.prefetch = 2;
	cfg->swap.kswapd = true;
	cfg->swap.reclaim_inline = true;
	cfg->swap.warm_restart = true;
	cfg->remote.timeout_ms = KVMM_CONFIG_REMOTE_DEFAULT_TIMEOUT_MS;
	cfg->remote.store = KVMM_CONFIG_REMOTE_SEAL;
	cfg->page_size = KVMM_CONFIG_DEFAULT_PAGE_SIZE;
	cfg->nr_devices = 1; /* device 0 */
	cfg->log_level = KVMM_LOG_DEFAULT_LEVEL;
	cfg->max_clients = KVMM_CONFIG_DEFAULT_MAX_CLIENTS;
	cfg->max_clients_per_uid = KVMM_CONFIG_DEFAULT_MAX_CLIENTS_PER_UID;
	cfg->socket_mode = KVMM_CONFIG_DEFAULT_SOCKET_MODE;
	cfg->hello_timeout_ms = KVMM_CONFIG_DEFAULT_HELLO_TIMEOUT_MS;
	cfg->ring_threads = KVMM_CONFIG_RING_THREADS_AUTO;
	cfg->ring_nice = KVMM_CONFIG_DEFAULT_RING_NICE;
	cfg->trace = KVMM_CONFIG_TRACE_FOLLOW;
}

int kvmm_config_default_socket(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	/* a relative XDG_RUNTIME_DIR is invalid by the spec: ignore it */
	if (xdg && xdg[0] == '/')
		n = snprintf(buf, len, "%s/kvmm/kvmmd.sock", xdg);
	else
		n = snprintf(buf, len, "/run/kvmm/kvmmd.sock");
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

static int fin_err(const struct kvmm_config *cfg, unsigned int line, char *err, size_t len,
		   const char *fmt, ...) __printf(5, 6);
static int fin_err(const struct kvmm_config *cfg, unsigned int line, char *err, size_t len,
		   const char *fmt, ...)
{
	char m[KVMM_CONFIG_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	if (line && cfg->file[0])
		return msg(err, len, "%s:%u: %s", cfg->file, line, m);
	return msg(err, len, "%s", m);
}

static int finalize_namespaces(struct kvmm_config *cfg, uint64_t total, bool total_given, char *err,
			       size_t len)
{
	uint64_t sized = 0, mins = 0, left, each, extra;
	unsigned int i, unsized = 0;

	for (i = 0; i < cfg->nr_ns; i++) {
		struct kvmm_config_ns *ns = &cfg->ns[i];
		unsigned int l = ns->line[KVMM_CFG_NS_FRAMES];

		if (ns->size) {
			ns->frames = ns->size / cfg->page_size;
			if (!ns->frames)
				return fin_err(
					cfg, l, err, len,
					"namespace %s: size %llu is less than one page (%llu)",
					ns->name, (unsigned long long)ns->size,
					(unsigned long long)cfg->page_size);
		}
		if (ns->frames)
			sized += ns->frames;
		else
			unsized++;
		if (ns->limit_size)
			ns->limit = max_t(uint64_t, ns->limit_size / cfg->page_size, 1);
		/* a protection in bytes covers them all: rounded up */
		if (ns->min_size)
			ns->min = (ns->min_size + cfg->page_size - 1) / cfg->page_size;
		if (ns->low_size)
			ns->low = (ns->low_size + cfg->page_size - 1) / cfg->page_size;
		if (ns->low && ns->min > ns->low)
			return fin_err(cfg, ns->line[KVMM_CFG_NS_LOW], err, len,
				       "namespace %s: low (%llu frames) is below min (%llu frames)",
				       ns->name, (unsigned long long)ns->low,
				       (unsigned long long)ns->min);
		mins += ns->min;
	}
	if (!total_given && !unsized)
		total = sized;
	/* what min guarantees must exist: the one sum that may not exceed the pool */
	if (mins > total)
		return fin_err(cfg, cfg->line[KVMM_CFG_POOL_SIZE], err, len,
			       "the namespaces' min add up to %llu frames but the pool has %llu",
			       (unsigned long long)mins, (unsigned long long)total);
	/*
	 * The pool is a budget the namespaces' pools share (kvmm/budget.c): their sizes may add
	 * up past it (overcommit), one alone may not.
	 */
	for (i = 0; i < cfg->nr_ns; i++)
		if (cfg->ns[i].frames > total)
			return fin_err(cfg, cfg->ns[i].line[KVMM_CFG_NS_FRAMES], err, len,
				       "namespace %s: %llu frames but the pool has %llu",
				       cfg->ns[i].name, (unsigned long long)cfg->ns[i].frames,
				       (unsigned long long)total);
	left = total - min(sized, total);
	if (unsized && left < unsized)
		return fin_err(cfg, cfg->line[KVMM_CFG_POOL_SIZE], err, len,
			       "%llu frames left for %u namespaces without frames or size",
			       (unsigned long long)left, unsized);
	each = unsized ? left / unsized : 0;
	extra = unsized ? left % unsized : 0;
	for (i = 0; i < cfg->nr_ns; i++) {
		struct kvmm_config_ns *ns = &cfg->ns[i];

		if (!ns->frames) {
			ns->frames = each + (extra ? 1 : 0);
			if (extra)
				extra--;
		}
		if (ns->frames > KVMM_MAX_FRAMES)
			return fin_err(cfg, ns->line[KVMM_CFG_NS_FRAMES], err, len,
				       "namespace %s: %llu frames, at most %u per namespace",
				       ns->name, (unsigned long long)ns->frames, KVMM_MAX_FRAMES);
		/* a max of the whole pool or more limits nothing: none */
		if (ns->limit >= ns->frames)
			ns->limit = 0;
		if (ns->min > ns->frames || ns->low > ns->frames)
			return fin_err(
				cfg,
				ns->line[ns->min > ns->frames ? KVMM_CFG_NS_MIN : KVMM_CFG_NS_LOW],
				err, len,
				"namespace %s: %s %llu frames is more than its %llu frames",
				ns->name, ns->min > ns->frames ? "min" : "low",
				(unsigned long long)max(ns->min, ns->low),
				(unsigned long long)ns->frames);
		if (ns->limit && (ns->min > ns->limit || ns->low > ns->limit))
			return fin_err(cfg, ns->line[KVMM_CFG_NS_LIMIT], err, len,
				       "namespace %s: max %llu frames is below its min or low",
				       ns->name, (unsigned long long)ns->limit);
	}
	cfg->frames = total;
	return 0;
}

int kvmm_config_finalize(struct kvmm_config *cfg, uid_t owner, char *err, size_t errlen)
{
	uint64_t total, smallest = UINT64_MAX;
	bool total_given = true;
	unsigned int i;
	int ret;

	if (!cfg->socket_path[0]) {
		ret = kvmm_config_default_socket(cfg->socket_path, sizeof(cfg->socket_path));
		if (ret)
			return fin_err(cfg, 0, err, errlen,
				       "default socket path too long ($XDG_RUNTIME_DIR); "
				       "set socket");
	}
	if (cfg->chunk_size && cfg->chunk_size % cfg->page_size)
		return fin_err(cfg, cfg->line[KVMM_CFG_CHUNK_SIZE], err, errlen,
			       "chunk_size %llu is not a multiple of page_size %llu",
			       (unsigned long long)cfg->chunk_size,
			       (unsigned long long)cfg->page_size);

	if (cfg->frames) {
		total = cfg->frames;
	} else if (cfg->pool_size) {
		total = cfg->pool_size / cfg->page_size;
		if (!total)
			return fin_err(cfg, cfg->line[KVMM_CFG_POOL_SIZE], err, errlen,
				       "pool_size %llu is less than one page (%llu)",
				       (unsigned long long)cfg->pool_size,
				       (unsigned long long)cfg->page_size);
	} else {
		total = max_t(uint64_t, KVMM_CONFIG_DEFAULT_POOL_SIZE / cfg->page_size, 1);
		total_given = false;
	}

	if (!cfg->nr_ns) {
		/* nobody configured: the daemon's own user and root, never everyone */
		struct kvmm_config_ns *ns = add_ns(cfg, KVMM_CONFIG_DEFAULT_NS, err, errlen);

		if (!ns)
			return -EINVAL;
		ns->uids[ns->nr_uids++] = owner;
		if (owner != 0)
			ns->uids[ns->nr_uids++] = 0;
	}
	for (i = 0; i < cfg->nr_ns; i++) {
		struct kvmm_config_ns *ns = &cfg->ns[i];

		/* a namespace that names nobody is the daemon's own user's (and root's) */
		if (!ns->nr_uids && !ns->nr_gids) {
			ns->uids[ns->nr_uids++] = owner;
			if (owner != 0)
				ns->uids[ns->nr_uids++] = 0;
		}
	}
	ret = finalize_namespaces(cfg, total, total_given, err, errlen);
	if (ret)
		return ret;

	for (i = 0; i < cfg->nr_ns; i++)
		smallest = min(smallest, cfg->ns[i].frames);
	if (cfg->wmark_min || cfg->wmark_low || cfg->wmark_high) {
		unsigned int l = cfg->line[KVMM_CFG_WMARK_HIGH];

		if (cfg->wmark_min > cfg->wmark_low || cfg->wmark_low > cfg->wmark_high)
			return fin_err(cfg, l, err, errlen,
				       "watermarks must be wmark_min <= wmark_low <= wmark_high "
				       "(%u, %u, %u)",
				       cfg->wmark_min, cfg->wmark_low, cfg->wmark_high);
		if (cfg->wmark_high >= smallest)
			return fin_err(cfg, l, err, errlen,
				       "wmark_high %u must be below the frames of every namespace "
				       "(the smallest has %llu)",
				       cfg->wmark_high, (unsigned long long)smallest);
	}
	return 0;
}

/* ---- printing ------------------------------------------------------------------------ */

static void print_size(FILE *f, const char *key, uint64_t v)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && v && !(v & 1023)) {
		v >>= 10;
		u++;
	}
	if (u < 0)
		fprintf(f, "%s = %llu\n", key, (unsigned long long)v);
	else
		fprintf(f, "%s = %llu%c\n", key, (unsigned long long)v, units[u]);
}

static void print_ids(FILE *f, const char *key, const uint32_t *ids, unsigned int n)
{
	unsigned int i;

	if (!n)
		return;
	fprintf(f, "%s =", key);
	for (i = 0; i < n; i++)
		fprintf(f, "%s %u", i ? "," : "", ids[i]);
	fputc('\n', f);
}

void kvmm_config_print(const struct kvmm_config *cfg, FILE *f)
{
	unsigned int i;

	fprintf(f, "[daemon]\n");
	if (cfg->socket_path[0])
		fprintf(f, "socket = \"%s\"\n", cfg->socket_path);
	fprintf(f, "backend = %s\n", cfg->backend);
	if (!strcmp(cfg->backend, "cuda")) {
		fprintf(f, "device = ");
		for (i = 0; i < cfg->nr_devices; i++)
			fprintf(f, "%s%d", i ? "," : "", cfg->devices[i]);
		fprintf(f, "\n");
	}
	print_size(f, "page_size", cfg->page_size);
	if (cfg->chunk_size)
		print_size(f, "chunk_size", cfg->chunk_size);
	if (cfg->frames)
		fprintf(f, "frames = %llu\n", (unsigned long long)cfg->frames);
	else if (cfg->pool_size)
		print_size(f, "pool_size", cfg->pool_size);
	fprintf(f, "wmark_min = %u\nwmark_low = %u\nwmark_high = %u\n", cfg->wmark_min,
		cfg->wmark_low, cfg->wmark_high);
	if (cfg->have_admin_gid)
		fprintf(f, "admin_group = %u\n", (unsigned int)cfg->admin_gid);
	fprintf(f, "log_level = %s\n", kvmm_log_level_name(cfg->log_level));
	fprintf(f, "foreground = %s\n", cfg->foreground ? "yes" : "no");
	fprintf(f, "prefault = %s\n", cfg->prefault ? "yes" : "no");
	fprintf(f, "max_clients = %u\n", cfg->max_clients);
	fprintf(f, "max_clients_per_uid = %u\n", cfg->max_clients_per_uid);
	fprintf(f, "socket_mode = %04o\n", (unsigned int)cfg->socket_mode);
	if (cfg->have_socket_gid)
		fprintf(f, "socket_group = %u\n", (unsigned int)cfg->socket_gid);
	fprintf(f, "hello_timeout = %ums\n", cfg->hello_timeout_ms);
	if (cfg->ring_threads == KVMM_CONFIG_RING_THREADS_AUTO)
		fprintf(f, "ring_threads = auto\n");
	else
		fprintf(f, "ring_threads = %u\n", cfg->ring_threads);
	fprintf(f, "ring_nice = %d\n", cfg->ring_nice);
	fprintf(f, "trace = %s\n", trace_modes[cfg->trace]);
	if (cfg->metrics[0])
		fprintf(f, "metrics = %s\n", cfg->metrics);
	for (i = 0; i < cfg->nr_ns; i++) {
		const struct kvmm_config_ns *ns = &cfg->ns[i];

		fprintf(f, "\n[namespace %s]\n", ns->name);
		if (ns->frames)
			fprintf(f, "frames = %llu\n", (unsigned long long)ns->frames);
		else if (ns->size)
			print_size(f, "size", ns->size);
		if (ns->limit)
			fprintf(f, "max = %llu\n", (unsigned long long)ns->limit);
		else if (ns->limit_size)
			print_size(f, "max", ns->limit_size);
		if (ns->min)
			fprintf(f, "min = %llu\n", (unsigned long long)ns->min);
		else if (ns->min_size)
			print_size(f, "min", ns->min_size);
		if (ns->low)
			fprintf(f, "low = %llu\n", (unsigned long long)ns->low);
		else if (ns->low_size)
			print_size(f, "low", ns->low_size);
		fprintf(f, "priority = %d\n", ns->priority);
		print_ids(f, "uids", (const uint32_t *)ns->uids, ns->nr_uids);
		print_ids(f, "gids", (const uint32_t *)ns->gids, ns->nr_gids);
		if (ns->have_secret)
			fprintf(f, "secret_file = \"%s\"\n", ns->secret_file);
	}
	fprintf(f, "\n[swap]\n");
	if (cfg->swap.host_size)
		print_size(f, "swap_host", cfg->swap.host_size);
	if (cfg->swap.file[0])
		fprintf(f, "swap_file = \"%s:%llu:%d\"\n", cfg->swap.file,
			(unsigned long long)cfg->swap.file_size, cfg->swap.file_prio);
	if (cfg->swap.queue_depth)
		fprintf(f, "swap_queue_depth = %u\n", cfg->swap.queue_depth);
	fprintf(f, "prefetch = %u\n", cfg->swap.prefetch);
	fprintf(f, "kswapd = %s\n", cfg->swap.kswapd ? "yes" : "no");
	fprintf(f, "reclaim_inline = %s\n", cfg->swap.reclaim_inline ? "yes" : "no");
	fprintf(f, "warm_restart = %s\n", cfg->swap.warm_restart ? "yes" : "no");
	for (i = 0; i < cfg->swap.nr_fault; i++) {
		const char *sp = strchr(cfg->swap.fault[i], ' ');

		if (sp)
			fprintf(f, "fault = \"%.*s:%s\"\n", (int)(sp - cfg->swap.fault[i]),
				cfg->swap.fault[i], sp + 1);
	}
	if (cfg->remote.seeds[0]) {
		/* the password is never printed */
		fprintf(f, "\n[remote]\nremote = \"%s\"\n", cfg->remote.seeds);
		fprintf(f, "remote_ttl = %us\n", cfg->remote.ttl_s);
		fprintf(f, "remote_timeout_ms = %u\n", cfg->remote.timeout_ms);
		fprintf(f, "remote_policy = %s\n", kvmm_config_remote_policy(cfg->remote.store));
		if (cfg->remote.max_value)
			print_size(f, "remote_max_value", cfg->remote.max_value);
		if (cfg->remote.max_queue)
			print_size(f, "remote_queue", cfg->remote.max_queue);
		if (cfg->remote.max_blocks)
			fprintf(f, "remote_max_blocks = %u\n", cfg->remote.max_blocks);
		if (cfg->remote.user[0])
			fprintf(f, "remote_user = %s\n", cfg->remote.user);
		if (cfg->remote.tls)
			fprintf(f, "remote_tls = yes\n");
		if (cfg->remote.tls_ca[0])
			fprintf(f, "remote_tls_ca = \"%s\"\n", cfg->remote.tls_ca);
		if (cfg->remote.tls_cert[0])
			fprintf(f, "remote_tls_cert = \"%s\"\n", cfg->remote.tls_cert);
		if (cfg->remote.tls_key[0])
			fprintf(f, "remote_tls_key = \"%s\"\n", cfg->remote.tls_key);
		if (cfg->remote.tls_name[0])
			fprintf(f, "remote_tls_server_name = %s\n", cfg->remote.tls_name);
	}
}

int kvmm_config_check_memory(const struct kvmm_config *cfg, uint64_t ram_bytes, char *err,
			     size_t errlen)
{
	uint64_t pool = 0, swap;

	if (!strcmp(cfg->backend, "host"))
		pool = cfg->frames * cfg->page_size;
	swap = cfg->swap.host_size * cfg->nr_ns;
	if (!ram_bytes || pool + swap <= ram_bytes)
		return 0;
	snprintf(err, errlen,
		 "the pool (%llu MiB%s%llu MiB of host swap) is more than this machine's memory "
		 "(%llu MiB): lower pool_size, frames or swap_host",
		 (unsigned long long)(pool >> 20), pool ? " of frames and " : ", ",
		 (unsigned long long)(swap >> 20), (unsigned long long)(ram_bytes >> 20));
	return -ENOMEM;
}
