// SPDX-License-Identifier: MIT
/*
 * test_hashtable.c - unit tests for include/hashtable.h and include/hash.h: add, lookup and
 * delete in fixed and run-time sized tables, many keys forced into one bucket, iteration with
 * deletion, and the statistical and edge properties of the hash functions (exact, seeded
 * inputs, so the results are deterministic).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hashtable.h"

struct obj {
	uint64_t key;
	int payload;
	struct hlist_node node;
};

#define NOBJ 2048

static struct obj objs[NOBJ];

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < NOBJ; i++) {
		objs[i].key = 0;
		objs[i].payload = i;
		INIT_HLIST_NODE(&objs[i].node);
	}
	return 0;
}

/* Count the objects under key in a fixed table; *last receives the last one found. */
#define count_key(table, k, last)                            \
	({                                                   \
		struct obj *__o;                             \
		int __n = 0;                                 \
		hash_for_each_possible (table, __o, node, k) \
			if (__o->key == (k)) {               \
				__n++;                       \
				*(last) = __o;               \
			}                                    \
		__n;                                         \
	})

static void test_basic(void **state)
{
	DEFINE_HASHTABLE(table, 5);
	struct obj *found = NULL;

	(void)state;
	assert_int_equal(HASH_SIZE(table), 32);
	assert_int_equal(HASH_BITS(table), 5);
	assert_true(hash_empty(table));

	for (int i = 0; i < 100; i++) {
		objs[i].key = (uint64_t)i * 7919;
		hash_add(table, &objs[i].node, objs[i].key);
		assert_true(hash_hashed(&objs[i].node));
	}
	assert_false(hash_empty(table));
	for (int i = 0; i < 100; i++) {
		assert_int_equal(count_key(table, (uint64_t)i * 7919, &found), 1);
		assert_ptr_equal(found, &objs[i]);
	}
	assert_int_equal(count_key(table, (uint64_t)5, &found), 0);

	for (int i = 0; i < 100; i += 2)
		hash_del(&objs[i].node);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(count_key(table, (uint64_t)i * 7919, &found), i & 1);
		assert_int_equal(hash_hashed(&objs[i].node), i & 1);
	}
	hash_del(&objs[0].node); /* deleting an unhashed node is a no-op */
	for (int i = 1; i < 100; i += 2)
		hash_del(&objs[i].node);
	assert_true(hash_empty(table));
}

/* A table embedded in a struct, sized by DECLARE_HASHTABLE, keyed by 32-bit values. */
struct registry {
	int other;
	DECLARE_HASHTABLE(by_id, 3);
};

struct obj32 {
	uint32_t id;
	struct hlist_node node;
};

static void test_declared_u32_keys(void **state)
{
	struct registry reg;
	struct obj32 o[64], *it;
	unsigned int bkt;
	int n;

	(void)state;
	memset(&reg, 0xa5, sizeof(reg)); /* garbage until hash_init */
	hash_init(reg.by_id);
	assert_true(hash_empty(reg.by_id));
	assert_int_equal(HASH_SIZE(reg.by_id), 8);
	for (uint32_t i = 0; i < 64; i++) {
		o[i].id = 0xffff0000u + i;
		hash_add(reg.by_id, &o[i].node, o[i].id);
	}
	for (uint32_t i = 0; i < 64; i++) {
		n = 0;
		hash_for_each_possible (reg.by_id, it, node, o[i].id)
			n += it->id == o[i].id;
		assert_int_equal(n, 1);
	}
	n = 0;
	hash_for_each (reg.by_id, bkt, it, node)
		n++;
	assert_int_equal(n, 64);
}

/*
 * Many distinct keys that all land in the same bucket of a 16-bucket table: lookups must
 * still tell them apart by the full key, and deleting some must not disturb the others.
 */
static void test_colliding_keys(void **state)
{
	DEFINE_HASHTABLE(table, 4);
	struct obj *found = NULL, *it;
	uint64_t key = 0;
	unsigned int bkt;
	int n;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		while (hash_min(key, 4) != 0)
			key++;
		objs[i].key = key++;
		hash_add(table, &objs[i].node, objs[i].key);
	}
	/* they really share one bucket */
	n = 0;
	hlist_for_each_entry (it, &table[0], node)
		n++;
	assert_int_equal(n, 1000);
	for (unsigned int b = 1; b < HASH_SIZE(table); b++)
		assert_true(hlist_empty(&table[b]));

	for (int i = 0; i < 1000; i++) {
		assert_int_equal(count_key(table, objs[i].key, &found), 1);
		assert_ptr_equal(found, &objs[i]);
	}
	/* a key that shares the bucket but was never added */
	while (hash_min(key, 4) != 0)
		key++;
	assert_int_equal(count_key(table, key, &found), 0);

	/* delete every third object while walking the bucket */
	{
		struct hlist_node *tmp;

		/* clang-format off */
		hash_for_each_possible_safe(table, it, tmp, node, objs[0].key)
			if (it->payload % 3 == 0)
				hash_del(&it->node);
		/* clang-format on */
	}
	for (int i = 0; i < 1000; i++)
		assert_int_equal(count_key(table, objs[i].key, &found), i % 3 != 0);

	/* hash_for_each stops at a break with obj on the match */
	hash_for_each (table, bkt, it, node)
		if (it->payload == 500)
			break;
	assert_non_null(it);
	assert_int_equal(it->payload, 500);
	assert_int_equal(bkt, 0);
}

/* Equal keys may coexist; a lookup sees all of them. */
static void test_duplicate_keys(void **state)
{
	DEFINE_HASHTABLE(table, 6);
	struct obj *found = NULL;

	(void)state;
	for (int i = 0; i < 10; i++) {
		objs[i].key = 42;
		hash_add(table, &objs[i].node, objs[i].key);
	}
	assert_int_equal(count_key(table, (uint64_t)42, &found), 10);
	hash_del(&objs[3].node);
	assert_int_equal(count_key(table, (uint64_t)42, &found), 9);
}

static void test_for_each_safe_delete_all(void **state)
{
	DEFINE_HASHTABLE(table, 7);
	struct hlist_node *tmp;
	struct obj *it;
	unsigned int bkt;
	int n = 0;

	(void)state;
	for (int i = 0; i < NOBJ; i++) {
		objs[i].key = (uint64_t)rand() << 20 | (uint64_t)i;
		hash_add(table, &objs[i].node, objs[i].key);
	}
	hash_for_each_safe (table, bkt, tmp, it, node) {
		hash_del(&it->node);
		n++;
	}
	assert_int_equal(n, NOBJ);
	assert_true(hash_empty(table));
	for (int i = 0; i < NOBJ; i++)
		assert_false(hash_hashed(&objs[i].node));
}

static void test_runtime_sized(void **state)
{
	struct kvmm_htable ht;
	struct hlist_node *tmp;
	struct obj *it;
	size_t bkt;
	int n;

	(void)state;
	assert_int_equal(kvmm_htable_init(&ht, KVMM_HTABLE_MAX_BITS + 1), -EINVAL);
	assert_null(ht.buckets);
	assert_int_equal(kvmm_htable_init(&ht, 0), 0); /* a single bucket works */
	assert_int_equal(kvmm_htable_size(&ht), 1);
	kvmm_htable_add(&ht, &objs[0].node, 77);
	assert_ptr_equal(kvmm_htable_bucket(&ht, 1), kvmm_htable_bucket(&ht, 77));
	kvmm_htable_del(&objs[0].node);
	assert_true(kvmm_htable_empty(&ht));
	kvmm_htable_destroy(&ht);

	assert_int_equal(kvmm_htable_init(&ht, 9), 0);
	assert_int_equal(kvmm_htable_size(&ht), 512);
	assert_true(kvmm_htable_empty(&ht));
	for (int i = 0; i < NOBJ; i++) {
		objs[i].key = UINT64_C(0x100000000) * (uint64_t)i; /* low 32 bits all zero */
		kvmm_htable_add(&ht, &objs[i].node, objs[i].key);
	}
	for (int i = 0; i < NOBJ; i++) {
		n = 0;
		/* clang-format off */
		kvmm_htable_for_each_possible(&ht, it, node, objs[i].key) {
			if (it->key == objs[i].key) {
				assert_ptr_equal(it, &objs[i]);
				n++;
			}
		}
		/* clang-format on */
		assert_int_equal(n, 1);
	}
	/* clang-format off */
	n = 0;
	kvmm_htable_for_each(&ht, bkt, it, node)
		n++;
	assert_int_equal(n, NOBJ);
	/* a break leaves bkt on the bucket that holds the object */
	kvmm_htable_for_each(&ht, bkt, it, node)
		if (it == &objs[1234])
			break;
	assert_ptr_equal(it, &objs[1234]);
	assert_ptr_equal(&ht.buckets[bkt], kvmm_htable_bucket(&ht, objs[1234].key));

	kvmm_htable_for_each_possible_safe(&ht, it, tmp, node, objs[5].key)
		if (it->key == objs[5].key)
			kvmm_htable_del(&it->node);
	assert_false(hash_hashed(&objs[5].node));
	n = 0;
	kvmm_htable_for_each_safe(&ht, bkt, tmp, it, node) {
		kvmm_htable_del(&it->node);
		n++;
	}
	/* clang-format on */
	assert_int_equal(n, NOBJ - 1);
	assert_true(kvmm_htable_empty(&ht));
	kvmm_htable_destroy(&ht);
	assert_null(ht.buckets);
}

static void test_hash_ranges(void **state)
{
	(void)state;
	for (uint64_t v = 0; v < 100000; v += 97) {
		for (unsigned int bits = 1; bits < 32; bits++) {
			assert_true(hash_32((uint32_t)v, bits) < (UINT32_C(1) << bits));
			assert_true(hash_64(v, bits) < (UINT64_C(1) << bits));
		}
		assert_int_equal(hash_32((uint32_t)v, 0), 0);
		assert_int_equal(hash_64(v, 0), 0);
		assert_int_equal(hash_32((uint32_t)v, 32), (uint32_t)v * KVMM_GOLDEN_RATIO_32);
		assert_int_equal(hash_64(v, 64), v * KVMM_GOLDEN_RATIO_64);
		assert_true(hash_64(v << 40, 63) < (UINT64_C(1) << 63));
	}
	assert_true(hash_ptr(&objs[1], 10) < 1024);
	assert_true(hash_ptr(&objs[1], 40) <= UINT32_MAX);
}

/*
 * Sequential keys and keys with only high bits varying (frame numbers, page offsets) must
 * spread over the buckets: no bucket gets more than twice its fair share.
 */
static void test_hash_distribution(void **state)
{
	enum {
		BITS = 8,
		NB = 1 << BITS,
		NKEYS = NB * 32
	};
	unsigned int load32[NB], load64[NB], load_hi[NB];

	(void)state;
	memset(load32, 0, sizeof(load32));
	memset(load64, 0, sizeof(load64));
	memset(load_hi, 0, sizeof(load_hi));
	for (uint32_t k = 0; k < NKEYS; k++) {
		load32[hash_32(k, BITS)]++;
		load64[hash_64(k, BITS)]++;
		load_hi[hash_64((uint64_t)k << 21, BITS)]++;
	}
	for (int b = 0; b < NB; b++) {
		assert_true(load32[b] <= 2 * NKEYS / NB);
		assert_true(load64[b] <= 2 * NKEYS / NB);
		assert_true(load_hi[b] <= 2 * NKEYS / NB);
		assert_true(load64[b] > 0);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_mix64(void **state)
{
	enum {
		N = 1 << 16
	};
	uint64_t *out = calloc(N, sizeof(*out));
	unsigned long flips = 0, trials = 0;

	(void)state;
	assert_non_null(out);
	/* bijective: no two of N inputs collide */
	for (uint64_t i = 0; i < N; i++)
		out[i] = kvmm_hash_mix64(i);
	qsort(out, N, sizeof(*out), cmp_u64);
	for (int i = 1; i < N; i++)
		assert_true(out[i] != out[i - 1]);
	free(out);
	assert_int_equal(kvmm_hash_mix64(0), 0); /* a fixed point of the structure */

	/* avalanche: flipping one input bit flips about half of the output bits */
	for (uint64_t x = 1; x < 2000; x++) {
		uint64_t v = x * UINT64_C(0x0123456789ABCDEF);

		for (int bit = 0; bit < 64; bit++) {
			flips += (unsigned long)__builtin_popcountll(
				kvmm_hash_mix64(v) ^ kvmm_hash_mix64(v ^ (UINT64_C(1) << bit)));
			trials++;
		}
	}
	assert_true(flips > trials * 31 && flips < trials * 33);

	assert_true(kvmm_hash_combine64(1, 2) != kvmm_hash_combine64(2, 1));
	assert_true(kvmm_hash_combine64(0, 0) != 0);
}

static void test_hash_bytes(void **state)
{
	unsigned char buf[64] = {0};
	unsigned char *unaligned;
	uint64_t h[17];

	(void)state;
	/* all-zero inputs of lengths 0..16 must all differ */
	for (size_t len = 0; len <= 16; len++) {
		h[len] = kvmm_hash_bytes(buf, len, 0);
		for (size_t j = 0; j < len; j++)
			assert_true(h[len] != h[j]);
	}
	memcpy(buf, "the quick brown fox jumps over the lazy dog", 43);
	assert_int_equal(kvmm_hash_bytes(buf, 43, 7), kvmm_hash_bytes(buf, 43, 7));
	assert_true(kvmm_hash_bytes(buf, 43, 7) != kvmm_hash_bytes(buf, 43, 8));
	/* the same bytes at an odd address hash the same */
	unaligned = malloc(64);
	assert_non_null(unaligned);
	memcpy(unaligned + 3, buf, 43);
	assert_int_equal(kvmm_hash_bytes(unaligned + 3, 43, 7), kvmm_hash_bytes(buf, 43, 7));
	/* one changed byte anywhere changes the hash */
	for (size_t i = 0; i < 43; i++) {
		unaligned[3 + i] ^= 1;
		assert_true(kvmm_hash_bytes(unaligned + 3, 43, 7) != kvmm_hash_bytes(buf, 43, 7));
		unaligned[3 + i] ^= 1;
	}
	free(unaligned);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_basic, setup),
		cmocka_unit_test_setup(test_declared_u32_keys, setup),
		cmocka_unit_test_setup(test_colliding_keys, setup),
		cmocka_unit_test_setup(test_duplicate_keys, setup),
		cmocka_unit_test_setup(test_for_each_safe_delete_all, setup),
		cmocka_unit_test_setup(test_runtime_sized, setup),
		cmocka_unit_test(test_hash_ranges),
		cmocka_unit_test(test_hash_distribution),
		cmocka_unit_test(test_mix64),
		cmocka_unit_test(test_hash_bytes),
	};

	return cmocka_run_group_tests_name("hashtable", tests, NULL, NULL);
}
