// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_remote.c - the remote tier end to end: a 3-master Redis Cluster
 * (Debian's redis-server, on free loopback ports in a temporary directory: tools/cluster/, the
 * same helper kvmm-bench remote uses) and two kvmmd ("machines" A and B) with separate pools whose
 * namespace alpha has the same provisioned secret.  A knows one seed (it learns the rest from
 * CLUSTER SLOTS), B all three.
 *
 *   - a prompt sealed through A is a hit through B, with identical bytes - through
 *     kvmm_prefix_lookup, through kvmm_submit (the SQE parks on the ring, its CQE comes in
 *     order) and through SEQ_PROMPT (kvmm_seq_prompt on the ring and on the socket);
 *   - remote_policy = demote: a third daemon with a small NVMe tier writes nothing when it
 *     seals, and pushes its oldest cached pages out to the cluster when it runs out of room;
 *   - values damaged in Redis (a flipped byte, a truncated value) are rejected, counted, and
 *     the lookup keeps only the blocks before the damage;
 *   - a node killed mid-run: lookups return (hits before the dead node's first block), nothing
 *     hangs; the node restarted on its port is reconnected and serves again;
 *   - a node stopped (SIGSTOP, a partition): lookups give up after remote_timeout_ms;
 *   - the whole cluster gone: lookups miss at once (every way of asking), seals still work,
 *     both daemons stop cleanly;
 *   - TLS (kvmm/remote_tls.c): a TLS-only redis-server, certificates made with openssl: names,
 *     CAs, client certificates checked, two kvmmd sharing a prompt over it;
 *   - the client itself (kvmm/remote_redis.c): a slot migrated under it (ASK while it
 *     migrates, MOVED once it moved), and a single Redis server without cluster mode that
 *     wants a password (AUTH: none, a wrong one, the right one).
 *
 * Skips (exit 77) with a message when redis-server is not installed or kvmmd is not built.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "itest.h"
#include "kvmm/remote.h"
#include "tools/cluster/redis_cluster.h"
#include "runtime/kvmm.h"
#include "runtime/kvmm_admin.h"

#define NODES 3
#define MAX_BLOCKS 64
#define TIMEOUT_MS 500

static struct rcluster cl;
static struct itest_daemon dA, dB;
static bool have_cluster;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The test's files in the cluster's directory, then the cluster. */
static void remove_cluster(void)
{
	static const char *const files[] = {"secret", "a.conf", "b.conf", "c.conf"};
	char path[256];

	for (size_t i = 0; cl.dir[0] && i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", cl.dir, files[i]);
		unlink(path);
	}
	rcluster_stop(&cl);
}

/* A daemon config: alpha's secret and the [remote] section with @nseeds seeds. */
static int write_conf_policy(const char *name, int nseeds, const char *policy, char *path,
			     size_t len)
{
	char seeds[256] = "";
	FILE *f;

	for (int i = 0; i < nseeds; i++)
		snprintf(seeds + strlen(seeds), sizeof(seeds) - strlen(seeds),
			 "%sredis://127.0.0.1:%d", i ? "," : "", cl.port[i]);
	snprintf(path, len, "%s/%s", cl.dir, name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"[namespace %s]\nsecret_file = %s/secret\n\n[remote]\nremote = %s\n"
		"remote_timeout_ms = %d\nremote_ttl = 1h\nremote_policy = %s\n",
		ITEST_NS_A, cl.dir, seeds, TIMEOUT_MS, policy);
	fclose(f);
	return 0;
}

static int write_conf(const char *name, int nseeds, char *path, size_t len)
{
	return write_conf_policy(name, nseeds, "seal", path, len);
}

static int group_setup(void **state)
{
	char secret[128], confA[128], confB[128];
	const char *extraA[] = {"--config", confA, NULL}, *extraB[] = {"--config", confB, NULL};
	int fd;

	(void)state;
	if (!rcluster_find(&cl)) {
		fprintf(stderr, "itest_remote: redis-server is not installed (apt-get install "
				"redis-server, or make deps): skipped\n");
		return 0;
	}
	if (!itest_daemon_find(&dA))
		return 0;
	dB = dA;
	if (rcluster_start(&cl, NODES))
		return -1;
	snprintf(secret, sizeof(secret), "%s/secret", cl.dir);
	fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "00112233445566778899aabbccddeeff\n", 33) != 33)
		return -1;
	close(fd);
	if (write_conf("a.conf", 1, confA, sizeof(confA)) ||
	    write_conf("b.conf", NODES, confB, sizeof(confB)))
		return -1;
	if (itest_daemon_start(&dA, extraA) || itest_daemon_start(&dB, extraB))
		return -1;
	have_cluster = true;
	return 0;
}

static int group_teardown(void **state)
{
	int ret = 0;

	(void)state;
	if (dA.pid && itest_daemon_stop(&dA) != 0)
		ret = -1;
	if (dB.pid && itest_daemon_stop(&dB) != 0)
		ret = -1;
	remove_cluster();
	return ret;
}

static void need_cluster(void)
{
	if (!have_cluster)
		skip();
}

static unsigned char pattern(unsigned int p, unsigned int b, size_t off)
{
	return (unsigned char)(0x3c ^ (p * 71) ^ (b * 37) ^ (off * 13) ^ (off >> 8));
}

static long long remote_value(const struct itest_daemon *d, const char *name)
{
	char *text = NULL;
	long long v;

	assert_int_equal(itest_admin_text(d, KVMM_OP_REMOTE, &text), 0);
	v = itest_text_value(text, name);
	free(text);
	return v;
}

/*
 * Seal prompt @p of @pages pages through daemon @d (its pages then cached, unmapped), under
 * @salt (a string; NULL: none).
 */
static void seal_only_salt(struct itest_daemon *d, unsigned int p, unsigned int pages,
			   const char *salt)
{
	uint32_t tokens[MAX_BLOCKS * 64], tpp, n;
	int32_t frames[MAX_BLOCKS + 1];
	kvmm_client_t *c;
	uint64_t seq, len;

	assert_int_equal(kvmm_attach(d->sock, ITEST_NS_A, &itest_fmt, &c), 0);
	tpp = kvmm_tokens_per_page(c);
	n = pages * tpp;
	itest_tokens(tokens, n, p);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, n, &len), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, frames, MAX_BLOCKS + 1), 0);
	for (unsigned int b = 0; b < pages; b++) {
		unsigned char *q = kvmm_frame_addr(c, (uint32_t)frames[b]);

		for (size_t off = 0; off < ITEST_PAGE_SIZE; off++)
			q[off] = pattern(p, b, off);
	}
	if (salt)
		assert_int_equal(kvmm_seal_salt(c, seq, 0, 0, salt, strlen(salt)), 0);
	else
		assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

static void seal_only(struct itest_daemon *d, unsigned int p, unsigned int pages)
{
	seal_only_salt(d, p, pages, NULL);
}

/* seal_only_salt(), then wait until its stores were tried. */
static void seal_prompt_salt(struct itest_daemon *d, unsigned int p, unsigned int pages,
			     const char *salt)
{
	long long before = remote_value(d, "Stores") + remote_value(d, "StoreErrors");

	seal_only_salt(d, p, pages, salt);
	for (uint64_t t0 = now_ms(); now_ms() - t0 < 5000; itest_sleep_ms(10))
		if (remote_value(d, "Stores") + remote_value(d, "StoreErrors") >= before + pages)
			return;
	fail_msg("the stores of prompt %u did not complete", p);
}

static void seal_prompt(struct itest_daemon *d, unsigned int p, unsigned int pages)
{
	seal_prompt_salt(d, p, pages, NULL);
}

/*
 * Look prompt @p (@pages pages) up through @d under @salt (NULL: none): the pages hit, each
 * byte checked; the time the lookup took in *ms.
 */
static unsigned int lookup_prompt_salt(struct itest_daemon *d, unsigned int p, unsigned int pages,
				       uint64_t *ms, const char *salt)
{
	uint32_t tokens[MAX_BLOCKS * 64], tpp, n;
	int32_t frames[MAX_BLOCKS + 1];
	kvmm_client_t *c;
	uint64_t seq, hit, t0;

	assert_int_equal(kvmm_attach(d->sock, ITEST_NS_A, &itest_fmt, &c), 0);
	tpp = kvmm_tokens_per_page(c);
	n = pages * tpp + 3;
	itest_tokens(tokens, n, p);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	t0 = now_ms();
	if (salt)
		assert_int_equal(
			kvmm_prefix_lookup_salt(c, seq, tokens, n, salt, strlen(salt), &hit), 0);
	else
		assert_int_equal(kvmm_prefix_lookup(c, seq, tokens, n, &hit), 0);
	if (ms)
		*ms = now_ms() - t0;
	assert_int_equal(hit % tpp, 0);
	assert_true(hit <= (uint64_t)pages * tpp);
	if (hit) {
		assert_int_equal(kvmm_block_table(c, &seq, 1, frames, MAX_BLOCKS + 1), 0);
		for (unsigned int b = 0; b < hit / tpp; b++) {
			const unsigned char *q = kvmm_frame_addr(c, (uint32_t)frames[b]);

			for (size_t off = 0; off < ITEST_PAGE_SIZE; off++)
				if (q[off] != pattern(p, b, off))
					fail_msg("prompt %u block %u byte %zu differs", p, b, off);
		}
	}
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
	return (unsigned int)(hit / tpp);
}

static unsigned int lookup_prompt(struct itest_daemon *d, unsigned int p, unsigned int pages,
				  uint64_t *ms)
{
	return lookup_prompt_salt(d, p, pages, ms, NULL);
}

/* (a) sealed through A, a hit through B with identical bytes; then a local hit in B */
static void test_share_across_daemons(void **state)
{
	long long lookups;
	uint64_t ms;

	(void)state;
	need_cluster();
	assert_int_equal(remote_value(&dA, "Remote"), 1);
	assert_int_equal(lookup_prompt(&dB, 1, 8, NULL), 0); /* nothing anywhere yet */
	seal_prompt(&dA, 1, 8);
	assert_int_equal(remote_value(&dA, "Stores"), 8);
	assert_int_equal(remote_value(&dA, "StoreErrors"), 0);
	/* A knew one seed: it found the other nodes through CLUSTER SLOTS */
	assert_int_equal(remote_value(&dA, "Cluster"), 1);
	assert_int_equal(remote_value(&dA, "Nodes"), NODES);
	assert_int_equal(lookup_prompt(&dB, 1, 8, &ms), 8);
	assert_true(remote_value(&dB, "Hits") >= 8);
	assert_int_equal(remote_value(&dB, "Corrupt"), 0);
	print_message("remote hit of 8 pages through the other daemon: %llu ms\n",
		      (unsigned long long)ms);
	/* now B has it locally: no remote lookup for it again */
	lookups = remote_value(&dB, "Lookups");
	assert_int_equal(lookup_prompt(&dB, 1, 8, NULL), 8);
	assert_int_equal(remote_value(&dB, "Lookups"), lookups);
	/* what B brought back is not stored again */
	assert_int_equal(remote_value(&dB, "Stores"), 0);
}

/*
 * (a') a salt (kvmm_seal_salt) is part of the key on every machine: a prompt sealed through A
 * under one salt is a hit through B under the same salt only, never without it or under
 * another (until session 15 salted pages were stored under the salt's keys but looked up
 * without it: they never hit)
 */
static void test_salted(void **state)
{
	(void)state;
	need_cluster();
	seal_prompt_salt(&dA, 21, 4, "tenant-1");
	assert_int_equal(lookup_prompt_salt(&dB, 21, 4, NULL, "tenant-2"), 0);
	assert_int_equal(lookup_prompt(&dB, 21, 4, NULL), 0);
	assert_int_equal(lookup_prompt_salt(&dB, 21, 4, NULL, "tenant-1"), 4);
	assert_int_equal(remote_value(&dB, "Corrupt"), 0);
}

/* Apply @what to every stored value of block @depth, on every node. Returns how many. */
static int damage(unsigned int depth, bool truncate)
{
	int done = 0;

	for (int i = 0; i < NODES; i++) {
		redisReply *keys = rcluster_cmd(&cl, i, "KEYS kvmm:*");

		assert_non_null(keys);
		for (size_t k = 0; k < keys->elements; k++) {
			const char *key = keys->element[k]->str;
			redisReply *v = rcluster_cmd(&cl, i, "GET %s", key), *r;
			uint32_t d;

			assert_non_null(v);
			assert_true(v->len > 64);
			memcpy(&d, v->str + 32, sizeof(d)); /* header: depth at 32, little-endian */
			if (d == depth) {
				if (truncate)
					r = rcluster_cmd(&cl, i, "SET %s %b", key, v->str,
							 v->len - 100);
				else
					r = rcluster_cmd(&cl, i, "SETRANGE %s 5000 %s", key,
							 "garbage");
				assert_non_null(r);
				assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
				freeReplyObject(r);
				done++;
			}
			freeReplyObject(v);
		}
		freeReplyObject(keys);
	}
	return done;
}

/* (b) a flipped value and a truncated one: rejected, counted, only the blocks before used */
static void test_corrupt_value(void **state)
{
	long long corrupt = remote_value(&dB, "Corrupt");

	(void)state;
	need_cluster();
	seal_prompt(&dA, 2, 8);
	assert_true(damage(3, false) >= 1);
	assert_true(damage(5, true) >= 1);
	assert_int_equal(lookup_prompt(&dB, 2, 8, NULL), 3);
	/* both damaged values of prompt 2 were checked (prompt 1's are local to B) */
	assert_int_equal(remote_value(&dB, "Corrupt"), corrupt + 2);
}

/* A lookup on its own thread (no cmocka calls here): hit and when it started and ended. */
struct parked {
	unsigned int p, pages, hit;
	int err;
	uint64_t start, end;
};

/* Every byte of @seq's first @pages blocks is prompt @p's pattern. */
static void check_bytes(kvmm_client_t *c, uint64_t seq, unsigned int p, unsigned int pages)
{
	int32_t frames[MAX_BLOCKS + 1];

	assert_int_equal(kvmm_block_table(c, &seq, 1, frames, MAX_BLOCKS + 1), 0);
	for (unsigned int b = 0; b < pages; b++) {
		const unsigned char *q = kvmm_frame_addr(c, (uint32_t)frames[b]);

		for (size_t off = 0; off < ITEST_PAGE_SIZE; off++)
			if (q[off] != pattern(p, b, off))
				fail_msg("prompt %u block %u byte %zu differs", p, b, off);
	}
}

/*
 * Prompt @p (@pages pages and 3 tokens more) through @d the asynchronous way: a batch of
 * PREFIX_LOOKUP then NOP on the rings (the lookup's CQE comes first, after the tier
 * answered), or SEQ_PROMPT (@prompt; the synchronous call, which rides the rings too, or the
 * socket with @socket).  Returns the pages hit, each byte checked; the time in *ms.
 */
static unsigned int lookup_async(struct itest_daemon *d, unsigned int p, unsigned int pages,
				 bool prompt, bool socket, uint64_t *ms)
{
	uint32_t tokens[MAX_BLOCKS * 64], tpp, n;
	kvmm_client_t *c;
	uint64_t seq, hit = 0, t0;

	if (socket)
		setenv("KVMM_NO_RINGS", "1", 1);
	assert_int_equal(kvmm_attach(d->sock, ITEST_NS_A, &itest_fmt, &c), 0);
	unsetenv("KVMM_NO_RINGS");
	assert_int_equal(kvmm_has_rings(c), socket ? 0 : 1);
	tpp = kvmm_tokens_per_page(c);
	n = pages * tpp + 3;
	itest_tokens(tokens, n, p);
	t0 = now_ms();
	if (prompt) {
		assert_int_equal(kvmm_seq_prompt(c, tokens, n, 0, &seq, &hit, NULL, 0), 0);
		if (ms)
			*ms = now_ms() - t0;
		assert_true(hit <= (uint64_t)pages * tpp && hit % tpp == 0);
		hit /= tpp;
	} else {
		struct kvmm_sqe sqe[2] = {
			{.op = KVMM_SQE_PREFIX_LOOKUP, .nr = n, .data = tokens, .user_data = 11},
			{.op = KVMM_SQE_NOP, .user_data = 12},
		};
		struct kvmm_cqe cqe[2];

		assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
		sqe[0].seq = seq;
		t0 = now_ms();
		assert_int_equal(kvmm_submit(c, sqe, 2), 2);
		assert_int_equal(kvmm_complete(c, cqe, 2, 2), 2);
		if (ms)
			*ms = now_ms() - t0;
		/* in submission order: the parked lookup, then what waited behind it */
		assert_int_equal(cqe[0].user_data, 11);
		assert_int_equal(cqe[0].res, 0);
		assert_int_equal(cqe[1].user_data, 12);
		assert_int_equal(cqe[1].res, 0);
		hit = cqe[0].nr_blocks;
		assert_true(hit <= pages);
		assert_int_equal(cqe[0].nr_tokens, hit * tpp);
	}
	if (hit)
		check_bytes(c, seq, p, (unsigned int)hit);
	if (prompt) {
		/* the rest of the prompt was appended after what came back: all n tokens */
		uint64_t len;

		assert_int_equal(kvmm_seq_append(c, seq, NULL, 0, &len), 0);
		assert_int_equal(len, n);
	}
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
	return (unsigned int)hit;
}

/* (a') the same through kvmm_submit and SEQ_PROMPT: parked on the ring (or socket) */
static void test_share_async(void **state)
{
	long long hits;
	uint64_t ms;

	(void)state;
	need_cluster();
	seal_prompt(&dA, 11, 8);
	seal_prompt(&dA, 12, 8);
	seal_prompt(&dA, 13, 8);
	hits = remote_value(&dB, "Hits");
	assert_int_equal(lookup_async(&dB, 11, 8, false, false, &ms), 8);
	print_message("remote hit of 8 pages, kvmm_submit: %llu ms\n", (unsigned long long)ms);
	assert_int_equal(lookup_async(&dB, 12, 8, true, false, &ms), 8);
	print_message("remote hit of 8 pages, kvmm_seq_prompt: %llu ms\n", (unsigned long long)ms);
	assert_int_equal(lookup_async(&dB, 13, 8, true, true, &ms), 8);
	print_message("remote hit of 8 pages, kvmm_seq_prompt on the socket: %llu ms\n",
		      (unsigned long long)ms);
	assert_int_equal(remote_value(&dB, "Hits"), hits + 24);
	/* local in B now: the same answers without the tier */
	hits = remote_value(&dB, "Lookups");
	assert_int_equal(lookup_async(&dB, 11, 8, true, false, NULL), 8);
	assert_int_equal(lookup_async(&dB, 12, 8, false, false, NULL), 8);
	assert_int_equal(remote_value(&dB, "Lookups"), hits);
	/* a prompt nobody sealed: asked, missed, its pages all appended */
	assert_int_equal(lookup_async(&dB, 14, 8, true, false, NULL), 0);
	assert_int_equal(remote_value(&dB, "Lookups"), hits + 1);
}

/*
 * (e) remote_policy = demote: a third daemon C with a small NVMe tier writes nothing when it
 * seals; once its pool and its swap file are full, the file's oldest cached pages are pushed
 * out to the cluster to make room, and the first prompts are hits through B - and through C
 * itself, which no longer has them - with identical bytes.
 */
static void test_demote(void **state)
{
	struct itest_swapdir sd;
	struct itest_daemon dC = dA;
	char conf[128];
	const char *extra[] = {"--config", conf, "--swap", sd.filearg, NULL};
	long long demoted, done;
	const unsigned int first = 30, nr = 24, pages = 16;

	(void)state;
	need_cluster();
	assert_int_equal(itest_swapdir_make(&sd, "itremote", 0, 32), 0);
	assert_int_equal(write_conf_policy("c.conf", NODES, "demote", conf, sizeof(conf)), 0);
	dC.pid = 0;
	dC.dir[0] = '\0'; /* a directory of its own: itest_daemon_start reuses a halted one's */
	assert_int_equal(itest_daemon_start(&dC, extra), 0);
	seal_only(&dC, first, pages);
	/* nothing is written when sealed */
	assert_int_equal(remote_value(&dC, "Stores"), 0);
	assert_int_equal(remote_value(&dC, "Demoted"), 0);
	/* 24 prompts of 16 pages: 384 pages for 256 frames and 32 file slots */
	for (unsigned int p = first + 1; p < first + nr; p++)
		seal_only(&dC, p, pages);
	demoted = remote_value(&dC, "Demoted");
	print_message("demote: %lld pages pushed out to the cluster\n", demoted);
	assert_true(demoted >= 2 * pages);
	for (uint64_t t0 = now_ms(); now_ms() - t0 < 5000; itest_sleep_ms(10)) {
		done = remote_value(&dC, "Stores") + remote_value(&dC, "StoreErrors");
		if (done >= demoted)
			break;
	}
	assert_int_equal(remote_value(&dC, "Stores"), demoted);
	/* the oldest prompts went out: a hit through B, and through C again */
	assert_int_equal(lookup_prompt(&dB, first, pages, NULL), pages);
	assert_int_equal(lookup_prompt(&dB, first + 1, pages, NULL), pages);
	done = remote_value(&dC, "Hits");
	assert_int_equal(lookup_prompt(&dC, first, pages, NULL), pages);
	assert_true(remote_value(&dC, "Hits") >= done + pages);
	assert_int_equal(itest_daemon_stop(&dC), 0);
	itest_swapdir_remove(&sd);
	snprintf(conf, sizeof(conf), "%s/c.conf", cl.dir);
	unlink(conf);
}

static void *parked_lookup(void *arg)
{
	struct parked *pk = arg;
	uint32_t tokens[MAX_BLOCKS * 64], n;
	kvmm_client_t *c;
	uint64_t seq, hit = 0;

	pk->err = kvmm_attach(dB.sock, ITEST_NS_A, &itest_fmt, &c);
	if (pk->err)
		return NULL;
	n = pk->pages * kvmm_tokens_per_page(c) + 3;
	itest_tokens(tokens, n, pk->p);
	pk->err = kvmm_seq_create(c, 0, &seq);
	pk->start = now_ms();
	if (!pk->err)
		pk->err = kvmm_prefix_lookup(c, seq, tokens, n, &hit);
	pk->end = now_ms();
	pk->hit = (unsigned int)(hit / kvmm_tokens_per_page(c));
	kvmm_detach(c);
	return NULL;
}

/* (c) a node killed mid-run, restarted; a node stopped (partition) */
static void test_node_killed(void **state)
{
	uint64_t ms;
	unsigned int hit;

	(void)state;
	need_cluster();
	seal_prompt(&dA, 3, 16);
	seal_prompt(&dA, 4, 16);
	rcluster_node_kill(&cl, 1, SIGKILL);
	/* B gets what lies before the dead node's first block, at once */
	hit = lookup_prompt(&dB, 3, 16, &ms);
	print_message("node killed: %u of 16 pages, %llu ms\n", hit, (unsigned long long)ms);
	assert_true(ms < 3000);
	assert_true(hit == 16 || remote_value(&dB, "Errors") > 0);

	/* restarted on its port (its nodes file keeps its slots); the daemons reconnect */
	assert_int_equal(rcluster_node_start(&cl, 1), 0);
	assert_true(rcluster_wait_ok(&cl, 10000));
	itest_sleep_ms(1100); /* past the client's retry back-off */
	seal_prompt(&dA, 5, 8);
	assert_int_equal(lookup_prompt(&dB, 5, 8, NULL), 8);

	/*
	 * A partition: a node that accepts nothing, answers nothing.  The lookup waits for
	 * remote_timeout_ms, parked; meanwhile another client of the same daemon is served.
	 */
	rcluster_node_kill(&cl, 2, SIGSTOP);
	{
		struct parked pk = {.p = 4, .pages = 16};
		uint64_t t0, t1;
		pthread_t th;

		assert_int_equal(pthread_create(&th, NULL, parked_lookup, &pk), 0);
		itest_sleep_ms(100);
		t0 = now_ms();
		assert_int_equal(lookup_prompt(&dB, 5, 8, NULL), 8); /* local now */
		t1 = now_ms();
		assert_int_equal(pthread_join(th, NULL), 0);
		assert_int_equal(pk.err, 0);
		print_message("node stopped: %u of 16 pages, %llu ms; another client's lookup "
			      "meanwhile: %llu ms\n",
			      pk.hit, (unsigned long long)(pk.end - pk.start),
			      (unsigned long long)(t1 - t0));
		/* it did wait for the stopped node, and no longer than the timeout allows */
		assert_true(pk.end - pk.start >= TIMEOUT_MS - 50);
		assert_true(pk.end - pk.start < 3 * TIMEOUT_MS + 1000);
		/* the other client was answered while the lookup was parked */
		assert_true(t1 < pk.end);
	}
	kill(cl.pid[2], SIGCONT);
	assert_true(itest_daemon_alive(&dA));
	assert_true(itest_daemon_alive(&dB));
}

/* (d) the cluster gone: lookups miss at once, seals work, the daemons are fine */
static void test_cluster_gone(void **state)
{
	long long stores;
	uint64_t ms;

	(void)state;
	need_cluster();
	for (int i = 0; i < NODES; i++)
		rcluster_node_kill(&cl, i, SIGKILL);
	stores = remote_value(&dA, "StoreErrors");
	seal_prompt(&dA, 6, 8);
	assert_true(remote_value(&dA, "StoreErrors") > stores);
	/* A has it locally; B has nothing to ask */
	assert_int_equal(lookup_prompt(&dA, 6, 8, NULL), 8);
	assert_int_equal(lookup_prompt(&dB, 6, 8, &ms), 0);
	assert_true(ms < 2000);
	assert_int_equal(lookup_prompt(&dB, 7, 8, &ms), 0);
	assert_true(ms < 2000);
	/* the asynchronous ways miss too, never block */
	assert_int_equal(lookup_async(&dB, 7, 8, false, false, &ms), 0);
	assert_true(ms < 2000);
	assert_int_equal(lookup_async(&dB, 7, 8, true, false, &ms), 0);
	assert_true(ms < 2000);
	assert_int_equal(lookup_async(&dB, 7, 8, true, true, &ms), 0);
	assert_true(ms < 2000);
	assert_true(itest_daemon_alive(&dA));
	assert_true(itest_daemon_alive(&dB));
}

static redisReply *expect(redisReply *r)
{
	assert_non_null(r);
	if (r->type == REDIS_REPLY_ERROR)
		fail_msg("redis: %s", r->str);
	return r;
}

static void node_id(int i, char *id, size_t len)
{
	redisReply *r = expect(rcluster_cmd(&cl, i, "CLUSTER MYID"));

	snprintf(id, len, "%s", r->str);
	freeReplyObject(r);
}

static int rc_op(struct kvmm_redis *rc, bool set, const char *key, const char *val, char *out,
		 size_t outlen)
{
	struct kvmm_redis_op op = {.key = key, .keylen = strlen(key)};

	if (set) {
		op.val = (void *)val;
		op.len = strlen(val);
		kvmm_redis_set(rc, &op, 1, 60);
		return op.res;
	}
	kvmm_redis_get(rc, &op, 1);
	if (!op.res) {
		snprintf(out, outlen, "%.*s", (int)op.len, (char *)op.val);
		free(op.val);
	}
	return op.res;
}

/* (e) the client: ASK while a slot migrates, MOVED once it moved; a plain server */
static void test_client_redirects(void **state)
{
	struct kvmm_redis_config cfg = {0};
	struct kvmm_redis_stats st;
	unsigned int slot = kvmm_redis_keyslot("{rt}", 4);
	int src = (int)(slot * NODES / 16384), dst = (src + 1) % NODES, plain;
	char ids[NODES][64], got[64];
	struct kvmm_redis *rc;
	redisReply *r;

	(void)state;
	need_cluster();
	for (int i = 0; i < NODES; i++)
		node_id(i, ids[i], sizeof(ids[i]));
	snprintf(cfg.seeds, sizeof(cfg.seeds), "127.0.0.1:%d", cl.port[dst]);
	cfg.timeout_ms = 1000;
	rc = kvmm_redis_create(&cfg);
	assert_non_null(rc);
	assert_int_equal(rc_op(rc, true, "{rt}a", "v1", NULL, 0), 0);
	assert_int_equal(rc_op(rc, false, "{rt}a", NULL, got, sizeof(got)), 0);
	assert_string_equal(got, "v1");
	r = expect(rcluster_cmd(&cl, src, "GET {rt}a")); /* it went to the slot's owner */
	assert_string_equal(r->str, "v1");
	freeReplyObject(r);

	/* migrating: a key the source no longer has is asked of the target */
	freeReplyObject(
		expect(rcluster_cmd(&cl, dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, ids[src])));
	freeReplyObject(
		expect(rcluster_cmd(&cl, src, "CLUSTER SETSLOT %u MIGRATING %s", slot, ids[dst])));
	assert_int_equal(rc_op(rc, true, "{rt}b", "v2", NULL, 0), 0);
	assert_int_equal(rc_op(rc, false, "{rt}b", NULL, got, sizeof(got)), 0);
	assert_string_equal(got, "v2");
	assert_int_equal(rc_op(rc, false, "{rt}none", NULL, got, sizeof(got)), -ENOENT);
	kvmm_redis_get_stats(rc, &st);
	assert_true(st.ask >= 3);
	assert_int_equal(st.moved, 0);
	assert_true(st.cluster);
	assert_int_equal(st.nodes, NODES);

	/* moved: the client's map is stale, the source answers MOVED */
	freeReplyObject(
		expect(rcluster_cmd(&cl, src, "MIGRATE 127.0.0.1 %d {rt}a 0 5000", cl.port[dst])));
	for (int i = 0; i < NODES; i++)
		freeReplyObject(
			expect(rcluster_cmd(&cl, i, "CLUSTER SETSLOT %u NODE %s", slot, ids[dst])));
	assert_int_equal(rc_op(rc, false, "{rt}a", NULL, got, sizeof(got)), 0);
	assert_string_equal(got, "v1");
	kvmm_redis_get_stats(rc, &st);
	assert_int_equal(st.moved, 1);
	assert_int_equal(rc_op(rc, false, "{rt}a", NULL, got, sizeof(got)), 0);
	kvmm_redis_get_stats(rc, &st);
	assert_int_equal(st.moved, 1); /* the map learnt it */
	kvmm_redis_destroy(rc);
	assert_true(rcluster_wait_ok(&cl, 5000));

	/* a single server without cluster mode is a one-node cluster */
	plain = rcluster_pick_port();
	assert_true(plain > 0);
	{
		char p[16];
		pid_t pid = fork();

		snprintf(p, sizeof(p), "%d", plain);
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execl(cl.bin, cl.bin, "--port", p, "--bind", "127.0.0.1", "--save", "",
			      "--appendonly", "no", "--logfile", "/dev/null", "--requirepass",
			      "s3cret", (char *)NULL);
			_exit(127);
		}
		assert_true(pid > 0);
		snprintf(cfg.seeds, sizeof(cfg.seeds), "127.0.0.1:%d", plain);
		/* it wants a password: without one, every command fails (NOAUTH) */
		cfg.retry_ms = 50;
		rc = kvmm_redis_create(&cfg);
		assert_non_null(rc);
		for (uint64_t t0 = now_ms(); now_ms() - t0 < 5000; itest_sleep_ms(20))
			if (rc_op(rc, true, "{rt}a", "p1", NULL, 0) == -EAGAIN)
				break;
		assert_int_equal(rc_op(rc, false, "{rt}a", NULL, got, sizeof(got)), -EAGAIN);
		kvmm_redis_destroy(rc);
		/* a wrong password: the connection is refused at AUTH, counted */
		strcpy(cfg.password, "wrong");
		rc = kvmm_redis_create(&cfg);
		assert_non_null(rc);
		assert_int_equal(rc_op(rc, true, "{rt}a", "p1", NULL, 0), -ECONNREFUSED);
		kvmm_redis_get_stats(rc, &st);
		assert_true(st.conn_fail >= 1);
		kvmm_redis_destroy(rc);
		/* the right one */
		strcpy(cfg.password, "s3cret");
		rc = kvmm_redis_create(&cfg);
		assert_non_null(rc);
		assert_int_equal(rc_op(rc, true, "{rt}a", "p1", NULL, 0), 0);
		assert_int_equal(rc_op(rc, true, "x", "p2", NULL, 0), 0);
		assert_int_equal(rc_op(rc, false, "{rt}a", NULL, got, sizeof(got)), 0);
		assert_string_equal(got, "p1");
		assert_int_equal(rc_op(rc, false, "x", NULL, got, sizeof(got)), 0);
		assert_string_equal(got, "p2");
		kvmm_redis_get_stats(rc, &st);
		assert_false(st.cluster);
		assert_int_equal(st.nodes, 1);
		kvmm_redis_destroy(rc);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* ---- TLS ----------------------------------------------------------------------------- */

static char tdir[128];

static int __printf(1, 2) sh(const char *fmt, ...)
{
	char cmdline[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmdline, sizeof(cmdline), fmt, ap);
	va_end(ap);
	return system(cmdline);
}

/*
 * A test CA (ca.*), a server certificate it signs for DNS redis.test and IP 127.0.0.1
 * (srv.*), a client certificate (cli.*), and an unrelated CA (other.*), in @dir.
 */
static int make_certs(const char *dir)
{
	const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

	return sh("cd %s && printf 'subjectAltName=DNS:redis.test,IP:127.0.0.1\n' > san.ext && "
		  "openssl req -x509 %s -keyout ca.key -out ca.crt -days 1 -subj /CN=kvmm-ca "
		  ">/dev/null 2>&1 && "
		  "openssl req -x509 %s -keyout other.key -out other.crt -days 1 "
		  "-subj /CN=other-ca >/dev/null 2>&1 && "
		  "openssl req %s -keyout srv.key -out srv.csr -subj /CN=redis.test "
		  ">/dev/null 2>&1 && "
		  "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
		  "-out srv.crt -days 1 -extfile san.ext >/dev/null 2>&1 && "
		  "openssl req %s -keyout cli.key -out cli.csr -subj /CN=kvmmd >/dev/null 2>&1 && "
		  "openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
		  "-out cli.crt -days 1 >/dev/null 2>&1",
		  dir, ec, ec, ec, ec);
}

static void tls_cfg(struct kvmm_redis_config *cfg, int port, const char *ca, const char *name,
		    bool client_cert)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->seeds, sizeof(cfg->seeds), "127.0.0.1:%d", port);
	cfg->timeout_ms = 2000;
	cfg->retry_ms = 10;
	cfg->tls.enabled = true;
	snprintf(cfg->tls.ca_file, sizeof(cfg->tls.ca_file), "%s/%s", tdir, ca);
	snprintf(cfg->tls.server_name, sizeof(cfg->tls.server_name), "%s", name);
	if (client_cert) {
		snprintf(cfg->tls.cert_file, sizeof(cfg->tls.cert_file), "%s/cli.crt", tdir);
		snprintf(cfg->tls.key_file, sizeof(cfg->tls.key_file), "%s/cli.key", tdir);
	}
}

static void tls_remove(void)
{
	static const char *const f[] = {"san.ext",   "ca.key",	"ca.crt",  "ca.srl",  "other.key",
					"other.crt", "srv.key", "srv.csr", "srv.crt", "cli.key",
					"cli.csr",   "cli.crt", "d.conf",  "e.conf",  "redis.log"};
	char path[256];

	if (!tdir[0])
		return;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tdir, f[i]);
		unlink(path);
	}
	rmdir(tdir);
	tdir[0] = '\0';
}

/* A daemon config for the TLS server: rediss:// and the CA, client certificate, name. */
static int write_tls_conf(const char *name, int tport, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/%s", tdir, name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"[namespace %s]\nsecret_file = %s/secret\n\n[remote]\nremote = "
		"rediss://127.0.0.1:%d\n"
		"remote_timeout_ms = 2000\nremote_tls_ca = %s/ca.crt\nremote_tls_cert = "
		"%s/cli.crt\n"
		"remote_tls_key = %s/cli.key\nremote_tls_server_name = redis.test\n",
		ITEST_NS_A, cl.dir, tport, tdir, tdir, tdir);
	fclose(f);
	return 0;
}

/*
 * (f) TLS to the nodes (kvmm/remote_tls.c under hiredis 0.14): a redis-server with only a TLS
 * port, its certificate from a CA made here with the openssl CLI, client certificates
 * required.  The client verifies the chain and the name (IP or DNS), sends its certificate;
 * a wrong name, a wrong CA, no client certificate all fail without hanging; two kvmmd share a
 * prompt over it; then the same over a 3-master cluster whose nodes and bus speak only TLS to
 * clients and each other.  Skipped when openssl is missing or redis-server has no TLS.
 */
static void test_tls(void **state)
{
	struct kvmm_redis_config cfg;
	struct kvmm_redis_stats st;
	struct kvmm_redis *rc;
	struct itest_daemon dD = dA, dE = dA;
	struct rcluster tc = {0};
	char p[16], crt[192], key[192], ca[192], log[192], confD[192], confE[192], got[32];
	const char *extraD[] = {"--config", confD, NULL}, *extraE[] = {"--config", confE, NULL};
	int tport, ret = -1, status;
	pid_t pid;

	(void)state;
	need_cluster();
	if (access("/usr/bin/openssl", X_OK)) {
		print_message("TLS: skipped: no /usr/bin/openssl\n");
		skip();
	}
	snprintf(tdir, sizeof(tdir), "%s/tls.XXXXXX", cl.dir);
	assert_non_null(mkdtemp(tdir));
	if (make_certs(tdir)) {
		tls_remove();
		fail_msg("openssl could not make the test certificates");
	}
	tport = rcluster_pick_port();
	assert_true(tport > 0);
	snprintf(p, sizeof(p), "%d", tport);
	snprintf(crt, sizeof(crt), "%s/srv.crt", tdir);
	snprintf(key, sizeof(key), "%s/srv.key", tdir);
	snprintf(ca, sizeof(ca), "%s/ca.crt", tdir);
	snprintf(log, sizeof(log), "%s/redis.log", tdir);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(cl.bin, cl.bin, "--port", "0", "--tls-port", p, "--bind", "127.0.0.1",
		      "--tls-cert-file", crt, "--tls-key-file", key, "--tls-ca-cert-file", ca,
		      "--tls-auth-clients", "yes", "--save", "", "--appendonly", "no", "--logfile",
		      log, (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	/* up when a verified SET goes through; a redis-server without TLS exits at once */
	tls_cfg(&cfg, tport, "ca.crt", "", true);
	rc = kvmm_redis_create(&cfg);
	assert_non_null(rc);
	for (uint64_t t0 = now_ms(); now_ms() - t0 < 5000; itest_sleep_ms(50)) {
		ret = rc_op(rc, true, "t1", "over-tls", NULL, 0);
		if (!ret || waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	if (ret) {
		kvmm_redis_destroy(rc);
		if (waitpid(pid, &status, WNOHANG) == pid) {
			print_message(
				"TLS: skipped: this redis-server does not run with --tls-port "
				"(built without TLS?)\n");
			tls_remove();
			skip();
		}
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		tls_remove();
		fail_msg("no TLS connection to redis-server: %s", strerror(-ret));
	}
	/* the certificate names IP 127.0.0.1, the host dialled */
	assert_int_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), 0);
	assert_string_equal(got, "over-tls");
	kvmm_redis_get_stats(rc, &st);
	assert_true(st.connects >= 1);
	kvmm_redis_destroy(rc);
	/* ... and DNS redis.test */
	tls_cfg(&cfg, tport, "ca.crt", "redis.test", true);
	rc = kvmm_redis_create(&cfg);
	assert_int_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), 0);
	assert_string_equal(got, "over-tls");
	kvmm_redis_destroy(rc);
	/* another name: the certificate does not carry it */
	tls_cfg(&cfg, tport, "ca.crt", "evil.test", true);
	rc = kvmm_redis_create(&cfg);
	assert_int_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), -ECONNREFUSED);
	kvmm_redis_get_stats(rc, &st);
	assert_true(st.conn_fail >= 1);
	assert_int_equal(st.connects, 0);
	kvmm_redis_destroy(rc);
	/* a CA that did not sign it */
	tls_cfg(&cfg, tport, "other.crt", "", true);
	rc = kvmm_redis_create(&cfg);
	assert_int_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), -ECONNREFUSED);
	kvmm_redis_destroy(rc);
	/* no client certificate: the server refuses (at the handshake or the first read) */
	tls_cfg(&cfg, tport, "ca.crt", "", false);
	rc = kvmm_redis_create(&cfg);
	assert_int_not_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), 0);
	kvmm_redis_destroy(rc);
	/* a CA file that is no certificate: the client is not made */
	tls_cfg(&cfg, tport, "san.ext", "", true);
	assert_null(kvmm_redis_create(&cfg));
	/* plain RESP to the TLS port: an error, not a hang */
	cfg.tls.enabled = false;
	rc = kvmm_redis_create(&cfg);
	assert_int_not_equal(rc_op(rc, false, "t1", NULL, got, sizeof(got)), 0);
	kvmm_redis_destroy(rc);

	/* two daemons over it: sealed through D, a hit through E with identical bytes */
	assert_int_equal(write_tls_conf("d.conf", tport, confD, sizeof(confD)), 0);
	assert_int_equal(write_tls_conf("e.conf", tport, confE, sizeof(confE)), 0);
	dD.pid = dE.pid = 0;
	dD.dir[0] = dE.dir[0] = '\0'; /* directories of their own, not A's */
	assert_int_equal(itest_daemon_start(&dD, extraD), 0);
	assert_int_equal(itest_daemon_start(&dE, extraE), 0);
	seal_prompt(&dD, 41, 8);
	assert_int_equal(remote_value(&dD, "Stores"), 8);
	assert_int_equal(remote_value(&dD, "StoreErrors"), 0);
	assert_int_equal(lookup_prompt(&dE, 41, 8, NULL), 8);
	assert_int_equal(lookup_async(&dE, 41, 8, true, false, NULL), 8);
	assert_int_equal(itest_daemon_stop(&dD), 0);
	assert_int_equal(itest_daemon_stop(&dE), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	/*
	 * A Redis Cluster whose nodes speak TLS, bus included (tls-cluster): seeded with one
	 * node's TLS port, the client learns the slots over TLS (which names the TLS ports),
	 * reaches every node, and two daemons share a prompt through it.
	 */
	tc.tls_cert = crt;
	tc.tls_key = key;
	tc.tls_ca = ca;
	if (rcluster_start(&tc, NODES)) {
		tls_remove();
		fail_msg("no TLS Redis Cluster");
	}
	tls_cfg(&cfg, tc.tls_port[1], "ca.crt", "redis.test", false);
	rc = kvmm_redis_create(&cfg);
	assert_non_null(rc);
	for (int k = 0; k < 24; k++) {
		char name[16], val[16];

		snprintf(name, sizeof(name), "tc%d", k);
		snprintf(val, sizeof(val), "v%d", k);
		assert_int_equal(rc_op(rc, true, name, val, NULL, 0), 0);
	}
	for (int k = 0; k < 24; k++) {
		char name[16], val[16];

		snprintf(name, sizeof(name), "tc%d", k);
		snprintf(val, sizeof(val), "v%d", k);
		assert_int_equal(rc_op(rc, false, name, NULL, got, sizeof(got)), 0);
		assert_string_equal(got, val);
	}
	kvmm_redis_get_stats(rc, &st);
	assert_true(st.cluster);
	assert_int_equal(st.nodes, NODES);
	assert_true(st.connects >= NODES);
	kvmm_redis_destroy(rc);
	assert_int_equal(write_tls_conf("d.conf", tc.tls_port[0], confD, sizeof(confD)), 0);
	assert_int_equal(write_tls_conf("e.conf", tc.tls_port[2], confE, sizeof(confE)), 0);
	dD.pid = dE.pid = 0;
	dD.dir[0] = dE.dir[0] = '\0';
	assert_int_equal(itest_daemon_start(&dD, extraD), 0);
	assert_int_equal(itest_daemon_start(&dE, extraE), 0);
	seal_prompt(&dD, 42, 8);
	assert_int_equal(remote_value(&dD, "StoreErrors"), 0);
	assert_int_equal(remote_value(&dD, "Cluster"), 1);
	assert_int_equal(remote_value(&dD, "Nodes"), NODES);
	assert_int_equal(lookup_prompt(&dE, 42, 8, NULL), 8);
	assert_int_equal(itest_daemon_stop(&dD), 0);
	assert_int_equal(itest_daemon_stop(&dE), 0);
	rcluster_stop(&tc);
	tls_remove();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_share_across_daemons),
		cmocka_unit_test(test_share_async),
		cmocka_unit_test(test_salted),
		cmocka_unit_test(test_demote),
		cmocka_unit_test(test_corrupt_value),
		cmocka_unit_test(test_client_redirects),
		cmocka_unit_test(test_node_killed),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_cluster_gone),
	};
	int ret;

	ret = cmocka_run_group_tests_name("itest_remote", tests, group_setup, group_teardown);
	if (!have_cluster)
		return 77;
	return ret;
}
