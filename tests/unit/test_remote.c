// SPDX-License-Identifier: MIT
/*
 * test_remote.c - unit tests for the remote tier's pure parts: CRC16 and key slots (values
 * checked against redis-server 7's CLUSTER KEYSLOT), hash tags, MOVED/ASK parsing, the value
 * header (encode, verify, every kind of damage rejected), the prefix digest, and the worker
 * against a cluster that does not exist (lookups complete as misses, quickly, nothing waits).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kvmm/remote.h"

static unsigned int slot_of(const char *k)
{
	return kvmm_redis_keyslot(k, strlen(k));
}

static void test_crc16(void **state)
{
	(void)state;
	/* the CRC16-CCITT (XMODEM) check value */
	assert_int_equal(kvmm_redis_crc16("123456789", 9), 0x31c3);
	assert_int_equal(kvmm_redis_crc16("", 0), 0);
}

static void test_keyslot(void **state)
{
	(void)state;
	/* redis-server 7.0 CLUSTER KEYSLOT */
	assert_int_equal(slot_of("123456789"), 12739);
	assert_int_equal(slot_of("foo"), 12182);
	assert_int_equal(slot_of("bar"), 5061);
	assert_int_equal(slot_of("hello"), 866);
}

static void test_hash_tags(void **state)
{
	(void)state;
	assert_int_equal(slot_of("{user1000}.following"), 3443);
	assert_int_equal(slot_of("{user1000}.followers"), 3443);
	/* "{}" is no tag: the whole key */
	assert_int_equal(slot_of("foo{}{bar}"), 8363);
	/* the tag runs from the first '{' to the next '}' */
	assert_int_equal(slot_of("foo{{bar}}zap"), 4015);
	assert_int_equal(slot_of("foo{bar}{zap}"), 5061);
	assert_int_equal(slot_of("{}"), 15257);
	/* an unclosed '{' is no tag */
	assert_int_equal(slot_of("a{b"), 13340);
	/* length-bounded: a tag past @len is not seen */
	assert_int_equal(kvmm_redis_keyslot("bar{x}", 3), 5061);
}

static void test_redirect_parse(void **state)
{
	char host[64];
	unsigned int slot = 0;
	int port = 0;

	(void)state;
	assert_int_equal(kvmm_redis_parse_redirect("MOVED 3999 127.0.0.1:6381", &slot, host,
						   sizeof(host), &port),
			 1);
	assert_int_equal(slot, 3999);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 6381);
	assert_int_equal(
		kvmm_redis_parse_redirect("ASK 16383 ::1:7000", &slot, host, sizeof(host), &port),
		2);
	assert_int_equal(slot, 16383);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 7000);
	/* other errors are not redirections */
	assert_int_equal(kvmm_redis_parse_redirect("CLUSTERDOWN The cluster is down", &slot, host,
						   sizeof(host), &port),
			 0);
	assert_int_equal(
		kvmm_redis_parse_redirect("ERR unknown command", &slot, host, sizeof(host), &port),
		0);
	/* malformed ones are refused, never half-parsed */
	assert_int_equal(
		kvmm_redis_parse_redirect("MOVED 16384 h:1", &slot, host, sizeof(host), &port),
		-EINVAL);
	assert_int_equal(kvmm_redis_parse_redirect("MOVED x h:1", &slot, host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(
		kvmm_redis_parse_redirect("MOVED 1 nocolon", &slot, host, sizeof(host), &port),
		-EINVAL);
	assert_int_equal(kvmm_redis_parse_redirect("ASK 1 h:0", &slot, host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(
		kvmm_redis_parse_redirect("ASK 1 h:70000", &slot, host, sizeof(host), &port),
		-EINVAL);
	assert_int_equal(kvmm_redis_parse_redirect("ASK 1 h:12x", &slot, host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(kvmm_redis_parse_redirect("MOVED 1 averyveryverylonghostname:1", &slot,
						   host, 8, &port),
			 -EINVAL);
}

static void test_key(void **state)
{
	char k[KVMM_REMOTE_KEY_LEN];

	(void)state;
	kvmm_remote_key(k, 0x0123456789abcdefull);
	assert_string_equal(k, "kvmm:0123456789abcdef");
	kvmm_remote_key(k, 0);
	assert_string_equal(k, "kvmm:0000000000000000");
}

#define PAYLOAD 4096

static uint8_t *make_value(struct kvmm_remote_meta *m)
{
	uint8_t *v = malloc(KVMM_REMOTE_HDR_LEN + PAYLOAD);

	assert_non_null(v);
	m->fmt_id = 0x1111;
	m->payload_len = PAYLOAD;
	m->ntokens = 16;
	m->depth = 3;
	m->digest[0] = 0xaaaa;
	m->digest[1] = 0xbbbb;
	for (int i = 0; i < PAYLOAD; i++)
		v[KVMM_REMOTE_HDR_LEN + i] = (uint8_t)(i * 7);
	kvmm_remote_hdr_encode(v, m, v + KVMM_REMOTE_HDR_LEN);
	return v;
}

static void test_value_ok(void **state)
{
	struct kvmm_remote_meta m, d;
	uint8_t *v = make_value(&m);

	(void)state;
	assert_int_equal(kvmm_remote_value_check(v, KVMM_REMOTE_HDR_LEN + PAYLOAD, &m),
			 KVMM_REMOTE_OK);
	assert_int_equal(kvmm_remote_hdr_decode(v, KVMM_REMOTE_HDR_LEN + PAYLOAD, &d), 0);
	assert_memory_equal(&d, &m, sizeof(m));
	free(v);
}

static void test_value_corrupt(void **state)
{
	struct kvmm_remote_meta m;
	uint8_t *v = make_value(&m);
	size_t len = KVMM_REMOTE_HDR_LEN + PAYLOAD;

	(void)state;
	/* one flipped bit anywhere: in the frame, in the header, in the checksum */
	for (size_t off = 0; off < len; off += 61) {
		v[off] ^= 0x10;
		assert_int_equal(kvmm_remote_value_check(v, len, &m), KVMM_REMOTE_CORRUPT);
		v[off] ^= 0x10;
	}
	assert_int_equal(kvmm_remote_value_check(v, len, &m), KVMM_REMOTE_OK);
	/* truncated, shorter than a header, empty */
	assert_int_equal(kvmm_remote_value_check(v, len - 1, &m), KVMM_REMOTE_CORRUPT);
	assert_int_equal(kvmm_remote_value_check(v, KVMM_REMOTE_HDR_LEN, &m), KVMM_REMOTE_CORRUPT);
	assert_int_equal(kvmm_remote_value_check(v, 10, &m), KVMM_REMOTE_CORRUPT);
	assert_int_equal(kvmm_remote_value_check(NULL, 0, &m), KVMM_REMOTE_CORRUPT);
	/* something else stored under the key (another program's value) */
	assert_int_equal(kvmm_remote_value_check("hello, world: not a kvmm value at all, padding "
						 "to be longer than one header of sixty-four bytes",
						 96, &m),
			 KVMM_REMOTE_CORRUPT);
	free(v);
}

static void test_value_mismatch(void **state)
{
	struct kvmm_remote_meta m, w;
	uint8_t *v = make_value(&m);
	size_t len = KVMM_REMOTE_HDR_LEN + PAYLOAD;

	(void)state;
	/* intact values of another block: each field the reader asks for is compared */
	w = m;
	w.digest[1]++;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	w = m;
	w.digest[0]++;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	w = m;
	w.depth++;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	w = m;
	w.fmt_id++;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	w = m;
	w.ntokens++;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	w = m;
	w.payload_len *= 2;
	assert_int_equal(kvmm_remote_value_check(v, len, &w), KVMM_REMOTE_MISMATCH);
	free(v);
}

static void test_digest(void **state)
{
	uint64_t secret[2] = {1, 2}, other[2] = {1, 3}, a[2], b[2], c[2];
	uint32_t toks[64];
	struct kvmm_remote_digest d;

	(void)state;
	for (int i = 0; i < 64; i++)
		toks[i] = (uint32_t)i;
	/* streaming in blocks equals one update over the whole prefix */
	kvmm_remote_digest_init(&d, secret, 7, 9);
	kvmm_remote_digest_update(&d, toks, 16);
	kvmm_remote_digest_update(&d, toks + 16, 48);
	kvmm_remote_digest_get(&d, a);
	kvmm_remote_digest_init(&d, secret, 7, 9);
	kvmm_remote_digest_update(&d, toks, 64);
	kvmm_remote_digest_get(&d, b);
	assert_memory_equal(a, b, sizeof(a));
	/* the secret, the format and every token count */
	kvmm_remote_digest_init(&d, other, 7, 9);
	kvmm_remote_digest_update(&d, toks, 64);
	kvmm_remote_digest_get(&d, c);
	assert_memory_not_equal(a, c, sizeof(a));
	kvmm_remote_digest_init(&d, secret, 7, 10);
	kvmm_remote_digest_update(&d, toks, 64);
	kvmm_remote_digest_get(&d, c);
	assert_memory_not_equal(a, c, sizeof(a));
	toks[0] = 99;
	kvmm_remote_digest_init(&d, secret, 7, 9);
	kvmm_remote_digest_update(&d, toks, 64);
	kvmm_remote_digest_get(&d, c);
	assert_memory_not_equal(a, c, sizeof(a));
}

static void test_seeds_parse(void **state)
{
	struct kvmm_redis_config cfg = {0};
	struct kvmm_redis *rc;

	(void)state;
	strcpy(cfg.seeds, "nonsense,:1,host:0,host:99999");
	errno = 0;
	assert_null(kvmm_redis_create(&cfg));
	assert_int_equal(errno, EINVAL);
	strcpy(cfg.seeds, "127.0.0.1:1,127.0.0.1:2");
	rc = kvmm_redis_create(&cfg);
	assert_non_null(rc);
	kvmm_redis_destroy(rc);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Nothing listens on the seed: a lookup completes (as misses) and the caller never waits. */
static void test_worker_dead_cluster(void **state)
{
	struct kvmm_remote_config cfg = {0};
	struct kvmm_remote_stats st;
	struct kvmm_remote_req *req, *got;
	struct kvmm_remote *r;
	struct kvmm_remote_meta m = {.payload_len = 64};
	uint8_t frame[64] = {0};
	struct pollfd pfd;
	uint64_t t0;
	int owner;

	(void)state;
	/* port 1 on loopback: connection refused at once */
	strcpy(cfg.redis.seeds, "127.0.0.1:1");
	cfg.redis.timeout_ms = 100;
	assert_int_equal(kvmm_remote_create(&cfg, &r), 0);
	req = kvmm_remote_req_alloc(4);
	assert_non_null(req);
	req->owner = &owner;
	for (uint32_t i = 0; i < 4; i++)
		req->blk[i].key = i;
	t0 = now_ms();
	kvmm_remote_lookup(r, req);
	assert_true(now_ms() - t0 < 50); /* queued, not served, by the caller */
	pfd.fd = kvmm_remote_fd(r);
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	got = kvmm_remote_complete(r);
	assert_ptr_equal(got, req);
	assert_int_equal(got->found, 0);
	assert_ptr_equal(got->owner, &owner);
	kvmm_remote_req_free(got);
	assert_null(kvmm_remote_complete(r));
	/* a store to a dead cluster fails, counted; flush returns */
	assert_int_equal(kvmm_remote_store(r, 5, &m, frame), 0);
	kvmm_remote_flush(r);
	kvmm_remote_get_stats(r, &st);
	assert_int_equal(st.lookups, 1);
	assert_int_equal(st.lookup_blocks, 4);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.misses, 4);
	assert_int_equal(st.errors, 4);
	assert_int_equal(st.store_errors, 1);
	assert_int_equal(st.queued_bytes, 0);
	assert_true(st.redis.conn_fail >= 1);
	/* too large a frame is refused before anything is copied */
	m.payload_len = (uint64_t)1 << 40;
	assert_int_equal(kvmm_remote_store(r, 5, &m, frame), -EFBIG);
	/* a cancelled lookup comes back ownerless */
	req = kvmm_remote_req_alloc(1);
	req->owner = &owner;
	kvmm_remote_lookup(r, req);
	kvmm_remote_cancel(r, &owner);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	got = kvmm_remote_complete(r);
	assert_ptr_equal(got, req);
	assert_null(got->owner);
	kvmm_remote_req_free(got);
	kvmm_remote_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16),
		cmocka_unit_test(test_keyslot),
		cmocka_unit_test(test_hash_tags),
		cmocka_unit_test(test_redirect_parse),
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_value_ok),
		cmocka_unit_test(test_value_corrupt),
		cmocka_unit_test(test_value_mismatch),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_seeds_parse),
		cmocka_unit_test(test_worker_dead_cluster),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
