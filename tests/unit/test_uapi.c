// SPDX-License-Identifier: MIT
/*
 * Unit tests for uapi/kvmm.h, the ABI shared by kvmmd, libkvmm and kvmmctl. The header pins its
 * layout with static assertions; these tests pin it a second time against literal numbers at
 * run time (so a test log shows which field moved), and exercise every inline helper: PTE
 * encode/decode round trips at the field limits, type exclusivity, header validation, version
 * negotiation, opcode names, format and name checks. test_uapi_standalone.c is a second unit
 * that includes the header alone; comparing its answers with ours catches a header that only
 * compiles thanks to includes before it or that defines a symbol twice.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "uapi/kvmm.h"

/* from test_uapi_standalone.c */
size_t test_uapi_tu2_sizes(size_t *out, size_t n);
uint64_t test_uapi_tu2_pte(uint32_t frame, uint64_t flags, unsigned int tier, uint64_t slot,
			   int swap);
int test_uapi_tu2_hdr(struct kvmm_msg_hdr *hdr, unsigned int op, uint64_t seq);
const char *test_uapi_tu2_op_name(unsigned int op);

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Deterministic pseudo-random numbers (splitmix64) so a failure reproduces. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------------------------- */

struct size_case {
	const char *name;
	size_t size;
	size_t expect;
};

/* clang-format off */
#define SIZE_CASE(type, n) { #type, sizeof(type), n }
/* clang-format on */

/* Same order as test_uapi_standalone.c. */
static const struct size_case size_cases[] = {
	SIZE_CASE(struct kvmm_msg_hdr, 32),
	SIZE_CASE(struct kvmm_format, 24),
	SIZE_CASE(struct kvmm_hello_req, 48),
	SIZE_CASE(struct kvmm_hello_rep, 48),
	SIZE_CASE(struct kvmm_attach_req, 64),
	SIZE_CASE(struct kvmm_attach_rep, 56),
	SIZE_CASE(struct kvmm_attach_device, 16),
	SIZE_CASE(struct kvmm_seq_create_req, 16),
	SIZE_CASE(struct kvmm_seq_create_rep, 16),
	SIZE_CASE(struct kvmm_seq_append_req, 16),
	SIZE_CASE(struct kvmm_seq_append_rep, 16),
	SIZE_CASE(struct kvmm_seq_fork_req, 16),
	SIZE_CASE(struct kvmm_seq_fork_rep, 16),
	SIZE_CASE(struct kvmm_seq_truncate_req, 16),
	SIZE_CASE(struct kvmm_seq_free_req, 8),
	SIZE_CASE(struct kvmm_prefix_lookup_req, 16),
	SIZE_CASE(struct kvmm_prefix_lookup_rep, 16),
	SIZE_CASE(struct kvmm_seal_req, 16),
	SIZE_CASE(struct kvmm_pin_req, 8),
	SIZE_CASE(struct kvmm_pin_rep, 8),
	SIZE_CASE(struct kvmm_mag_req, 8),
	SIZE_CASE(struct kvmm_mag_rep, 8),
	SIZE_CASE(struct kvmm_preempt_event, 16),
	SIZE_CASE(struct kvmm_shutdown_event, 8),
	SIZE_CASE(struct kvmm_admin_req, 48),
	SIZE_CASE(struct kvmm_limit_req, 56),
	SIZE_CASE(struct kvmm_drop_caches_req, 8),
	SIZE_CASE(struct kvmm_reclaim_req, 16),
	SIZE_CASE(struct kvmm_reclaim_rep, 8),
	SIZE_CASE(struct kvmm_swapon_req, 304),
	SIZE_CASE(struct kvmm_swapoff_req, 296),
	SIZE_CASE(struct kvmm_seq_blocks_req, 16),
	SIZE_CASE(struct kvmm_seq_blocks_rep, 16),
	SIZE_CASE(struct kvmm_attach_model, 8),
	SIZE_CASE(struct kvmm_seq_salt_req, 16),
	SIZE_CASE(struct kvmm_pin_range_req, 24),
	SIZE_CASE(struct kvmm_far_map_rep, 40),
	SIZE_CASE(struct kvmm_pin_far_req, 24),
	SIZE_CASE(struct kvmm_pin_far_rep, 16),
};

static void test_struct_sizes(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(size_cases); i++) {
		if (size_cases[i].size != size_cases[i].expect)
			fail_msg("sizeof(%s) = %zu, ABI says %zu", size_cases[i].name,
				 size_cases[i].size, size_cases[i].expect);
		/* every payload keeps the records that carry it 8-byte aligned */
		assert_int_equal(size_cases[i].size % 8, 0);
	}
}

struct offset_case {
	const char *name;
	size_t off;
	size_t expect;
	size_t size;
};

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)
/* clang-format off */
#define OFF(type, field, n) { #type "." #field, offsetof(type, field), n, FIELD_SIZE(type, field) }
/* clang-format on */

static const struct offset_case offset_cases[] = {
	OFF(struct kvmm_msg_hdr, magic, 0),
	OFF(struct kvmm_msg_hdr, abi, 4),
	OFF(struct kvmm_msg_hdr, op, 6),
	OFF(struct kvmm_msg_hdr, flags, 8),
	OFF(struct kvmm_msg_hdr, len, 12),
	OFF(struct kvmm_msg_hdr, seq, 16),
	OFF(struct kvmm_msg_hdr, status, 24),
	OFF(struct kvmm_msg_hdr, reserved, 28),

	OFF(struct kvmm_format, layers, 0),
	OFF(struct kvmm_format, kv_heads, 4),
	OFF(struct kvmm_format, head_dim, 8),
	OFF(struct kvmm_format, dtype, 12),
	OFF(struct kvmm_format, quant_group, 16),
	OFF(struct kvmm_format, reserved, 20),

	OFF(struct kvmm_hello_req, abi_version, 0),
	OFF(struct kvmm_hello_req, abi_min, 2),
	OFF(struct kvmm_hello_req, pid, 4),
	OFF(struct kvmm_hello_req, features, 8),
	OFF(struct kvmm_hello_req, name, 16),

	OFF(struct kvmm_hello_rep, abi_version, 0),
	OFF(struct kvmm_hello_rep, abi_min, 2),
	OFF(struct kvmm_hello_rep, abi_agreed, 4),
	OFF(struct kvmm_hello_rep, backend, 6),
	OFF(struct kvmm_hello_rep, features, 8),
	OFF(struct kvmm_hello_rep, features_supported, 16),
	OFF(struct kvmm_hello_rep, page_size, 24),
	OFF(struct kvmm_hello_rep, nr_frames, 32),
	OFF(struct kvmm_hello_rep, client_id, 36),
	OFF(struct kvmm_hello_rep, nr_devices, 40),
	OFF(struct kvmm_hello_rep, max_msg, 44),

	OFF(struct kvmm_attach_req, ns, 0),
	OFF(struct kvmm_attach_req, fmt, 32),
	OFF(struct kvmm_attach_req, flags, 56),
	OFF(struct kvmm_attach_req, ring_entries, 60),

	OFF(struct kvmm_attach_rep, tokens_per_page, 0),
	OFF(struct kvmm_attach_rep, bytes_per_token, 4),
	OFF(struct kvmm_attach_rep, chunk_size, 8),
	OFF(struct kvmm_attach_rep, nr_chunks, 16),
	OFF(struct kvmm_attach_rep, ns_id, 20),
	OFF(struct kvmm_attach_rep, shm_size, 24),
	OFF(struct kvmm_attach_rep, nr_fds, 32),
	OFF(struct kvmm_attach_rep, ring_entries, 36),
	OFF(struct kvmm_attach_rep, mag_size, 40),
	OFF(struct kvmm_attach_rep, nr_frames, 44),
	OFF(struct kvmm_attach_rep, device_index, 48),
	OFF(struct kvmm_attach_rep, nr_devices, 52),

	OFF(struct kvmm_seq_create_req, nr_tokens, 0),
	OFF(struct kvmm_seq_create_req, flags, 8),
	OFF(struct kvmm_seq_create_req, priority, 12),
	OFF(struct kvmm_seq_create_rep, seq, 0),
	OFF(struct kvmm_seq_create_rep, nr_blocks, 8),
	OFF(struct kvmm_seq_create_rep, reserved, 12),
	OFF(struct kvmm_seq_append_req, seq, 0),
	OFF(struct kvmm_seq_append_req, nr_tokens, 8),
	OFF(struct kvmm_seq_append_rep, nr_tokens, 0),
	OFF(struct kvmm_seq_append_rep, nr_blocks, 8),
	OFF(struct kvmm_seq_append_rep, first_new_block, 12),
	OFF(struct kvmm_seq_fork_req, seq, 0),
	OFF(struct kvmm_seq_fork_req, nr_tokens, 8),
	OFF(struct kvmm_seq_fork_rep, seq, 0),
	OFF(struct kvmm_seq_fork_rep, nr_blocks, 8),
	OFF(struct kvmm_seq_fork_rep, reserved, 12),
	OFF(struct kvmm_seq_truncate_req, seq, 0),
	OFF(struct kvmm_seq_truncate_req, nr_tokens, 8),
	OFF(struct kvmm_seq_free_req, seq, 0),
	OFF(struct kvmm_seq_blocks_req, seq, 0),
	OFF(struct kvmm_seq_blocks_req, block, 8),
	OFF(struct kvmm_seq_blocks_req, nr_blocks, 12),
	OFF(struct kvmm_seq_blocks_rep, nr_tokens, 0),
	OFF(struct kvmm_seq_blocks_rep, nr_blocks, 8),
	OFF(struct kvmm_seq_blocks_rep, count, 12),
	OFF(struct kvmm_prefix_lookup_req, seq, 0),
	OFF(struct kvmm_prefix_lookup_req, nr_tokens, 8),
	OFF(struct kvmm_prefix_lookup_req, flags, 12),
	OFF(struct kvmm_prefix_lookup_rep, nr_tokens, 0),
	OFF(struct kvmm_prefix_lookup_rep, nr_blocks, 8),
	OFF(struct kvmm_prefix_lookup_rep, reserved, 12),
	OFF(struct kvmm_seq_prompt_req, priority, 0),
	OFF(struct kvmm_seq_prompt_req, flags, 4),
	OFF(struct kvmm_seq_prompt_req, nr_tokens, 8),
	OFF(struct kvmm_seq_prompt_req, reserved, 12),
	OFF(struct kvmm_seq_prompt_rep, seq, 0),
	OFF(struct kvmm_seq_prompt_rep, nr_blocks, 8),
	OFF(struct kvmm_seq_prompt_rep, nr_hit, 12),
	OFF(struct kvmm_seal_req, seq, 0),
	OFF(struct kvmm_seal_req, block, 8),
	OFF(struct kvmm_seal_req, nr_blocks, 12),
	OFF(struct kvmm_pin_req, nr_seqs, 0),
	OFF(struct kvmm_pin_req, flags, 4),
	OFF(struct kvmm_pin_rep, nr_frames, 0),
	OFF(struct kvmm_pin_rep, nr_swapin, 4),
	OFF(struct kvmm_mag_req, nr_frames, 0),
	OFF(struct kvmm_mag_req, reserved, 4),
	OFF(struct kvmm_mag_rep, nr_frames, 0),
	OFF(struct kvmm_mag_rep, nr_held, 4),

	OFF(struct kvmm_preempt_event, seq, 0),
	OFF(struct kvmm_preempt_event, nr_frames, 8),
	OFF(struct kvmm_preempt_event, reason, 12),
	OFF(struct kvmm_shutdown_event, grace_ms, 0),
	OFF(struct kvmm_shutdown_event, reason, 4),

	OFF(struct kvmm_admin_req, flags, 0),
	OFF(struct kvmm_admin_req, reserved, 4),
	OFF(struct kvmm_admin_req, id, 8),
	OFF(struct kvmm_admin_req, ns, 16),
	OFF(struct kvmm_limit_req, ns, 0),
	OFF(struct kvmm_limit_req, max_frames, 32),
	OFF(struct kvmm_limit_req, low_frames, 40),
	OFF(struct kvmm_limit_req, priority, 48),
	OFF(struct kvmm_limit_req, valid, 52),
	OFF(struct kvmm_drop_caches_req, flags, 0),
	OFF(struct kvmm_drop_caches_req, reserved, 4),
	OFF(struct kvmm_reclaim_req, nr_frames, 0),
	OFF(struct kvmm_reclaim_req, flags, 8),
	OFF(struct kvmm_reclaim_req, reserved, 12),
	OFF(struct kvmm_reclaim_rep, nr_frames, 0),
	OFF(struct kvmm_swapon_req, tier, 0),
	OFF(struct kvmm_swapon_req, priority, 4),
	OFF(struct kvmm_swapon_req, size, 8),
	OFF(struct kvmm_swapon_req, path, 16),
	OFF(struct kvmm_swapon_req, ns, 272),
	OFF(struct kvmm_swapoff_req, tier, 0),
	OFF(struct kvmm_swapoff_req, reserved, 4),
	OFF(struct kvmm_swapoff_req, path, 8),
	OFF(struct kvmm_swapoff_req, ns, 264),
};

static void test_field_offsets(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(offset_cases); i++) {
		const struct offset_case *c = &offset_cases[i];

		if (c->off != c->expect)
			fail_msg("offsetof(%s) = %zu, ABI says %zu", c->name, c->off, c->expect);
		/* naturally aligned: no field relies on the compiler's packing choices */
		if (c->size <= 8 && c->off % c->size != 0)
			fail_msg("%s at %zu is not aligned to its size %zu", c->name, c->off,
				 c->size);
	}
}

/* The declared fields fill each struct with no hidden padding between or after them. */
static void test_no_hidden_padding(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct kvmm_msg_hdr), 4 + 2 + 2 + 4 + 4 + 8 + 4 + 4);
	assert_int_equal(sizeof(struct kvmm_format), 6 * 4);
	assert_int_equal(sizeof(struct kvmm_hello_req), 2 + 2 + 4 + 8 + KVMM_NAME_LEN);
	assert_int_equal(sizeof(struct kvmm_hello_rep), 4 * 2 + 3 * 8 + 4 * 4);
	assert_int_equal(sizeof(struct kvmm_attach_req),
			 KVMM_NAME_LEN + sizeof(struct kvmm_format) + 2 * 4);
	assert_int_equal(sizeof(struct kvmm_attach_rep), 10 * 4 + 2 * 8);
	assert_int_equal(sizeof(struct kvmm_limit_req), KVMM_NAME_LEN + 2 * 8 + 2 * 4);
	assert_int_equal(sizeof(struct kvmm_swapon_req), 4 + 4 + 8 + KVMM_PATH_LEN + KVMM_NAME_LEN);
	assert_int_equal(sizeof(struct kvmm_swapoff_req), 4 + 4 + KVMM_PATH_LEN + KVMM_NAME_LEN);
	assert_int_equal(sizeof(struct kvmm_admin_req), 4 + 4 + 8 + KVMM_NAME_LEN);
}

static void test_constants(void **state)
{
	static const char magic_le[4] = {'K', 'V', 'M', 'M'};
	uint32_t magic = KVMM_MAGIC;
	const uint16_t one = 1;

	(void)state;
	assert_int_equal(KVMM_ABI_VERSION, 0);
	assert_int_equal(KVMM_ABI_MIN_COMPAT, 0);
	assert_true(KVMM_ABI_MIN_COMPAT <= KVMM_ABI_VERSION);
	assert_int_equal(KVMM_MAGIC, 0x4d4d564bU);
	if (*(const uint8_t *)&one == 1)
		assert_memory_equal(&magic, magic_le, 4);
	assert_int_equal(KVMM_MSG_HDR_SIZE, 32);
	assert_int_equal(KVMM_MSG_MAX, 65536);
	assert_int_equal(KVMM_MSG_PAYLOAD_MAX, 65536 - 32);
	assert_int_equal(KVMM_MSG_F_MORE, 1);
	assert_int_equal(KVMM_MSG_F_FDS, 2);
	assert_int_equal(KVMM_MSG_F_ALL_V0, 3);
	assert_int_equal(KVMM_NAME_LEN, 32);
	assert_int_equal(KVMM_PATH_LEN, 256);
	assert_int_equal(KVMM_DTYPE_NONE, 0);
	assert_int_equal(KVMM_DTYPE_FP32, 1);
	assert_int_equal(KVMM_DTYPE_FP16, 2);
	assert_int_equal(KVMM_DTYPE_BF16, 3);
	assert_int_equal(KVMM_DTYPE_INT8, 4);
	assert_int_equal(KVMM_DTYPE_COUNT, 5);
	assert_int_equal(KVMM_BACKEND_HOST, 1);
	assert_int_equal(KVMM_BACKEND_CUDA, 2);
	assert_int_equal(KVMM_PREEMPT_OOM, 1);
	assert_int_equal(KVMM_PREEMPT_LIMIT, 2);
	assert_int_equal(KVMM_PREEMPT_ADMIN, 3);
	assert_int_equal(KVMM_SHUTDOWN_SIGNAL, 1);
	assert_int_equal(KVMM_SHUTDOWN_ADMIN, 2);
	assert_int_equal(KVMM_ADMIN_F_JSON, 1);
	assert_int_equal(KVMM_ADMIN_F_CLEAR, 2);
	assert_int_equal(KVMM_SEQ_NONE, 0);
	assert_true(KVMM_SEQ_ALL_TOKENS == UINT64_MAX);
}

static void test_feature_bits(void **state)
{
	static const uint64_t feats[] = {
		KVMM_FEAT_HOST_BACKEND, KVMM_FEAT_CUDA_BACKEND, KVMM_FEAT_PREFIX_CACHE,
		KVMM_FEAT_SWAP,		KVMM_FEAT_RINGS,	KVMM_FEAT_FD_PASSING,
		KVMM_FEAT_REMOTE,	KVMM_FEAT_KEY_DOMAIN,	KVMM_FEAT_PIN_RANGE,
		KVMM_FEAT_FAR,		KVMM_FEAT_RING_OUT,
	};
	uint64_t seen = 0;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(feats); i++) {
		/* bit i, exactly one bit, no two features share it */
		assert_true(feats[i] == (UINT64_C(1) << i));
		assert_int_equal(seen & feats[i], 0);
		seen |= feats[i];
	}
	assert_true(seen == KVMM_FEAT_ALL_V0);
	assert_true(KVMM_FEAT_ALL_V0 == UINT64_C(0x7ff));
}

/* ---------------------------------------------------------------------------------------- */

struct op_case {
	unsigned int op;
	unsigned int value;
	const char *name;
};

static const struct op_case op_cases[] = {
	{KVMM_OP_HELLO, 0x0001, "hello"},
	{KVMM_OP_BYE, 0x0002, "bye"},
	{KVMM_OP_ATTACH, 0x0003, "attach"},
	{KVMM_OP_DETACH, 0x0004, "detach"},
	{KVMM_OP_PING, 0x0005, "ping"},
	{KVMM_OP_SEQ_CREATE, 0x0100, "seq_create"},
	{KVMM_OP_SEQ_APPEND, 0x0101, "seq_append"},
	{KVMM_OP_SEQ_FORK, 0x0102, "seq_fork"},
	{KVMM_OP_SEQ_TRUNCATE, 0x0103, "seq_truncate"},
	{KVMM_OP_SEQ_FREE, 0x0104, "seq_free"},
	{KVMM_OP_PREFIX_LOOKUP, 0x0105, "prefix_lookup"},
	{KVMM_OP_SEAL, 0x0106, "seal"},
	{KVMM_OP_PIN, 0x0107, "pin"},
	{KVMM_OP_UNPIN, 0x0108, "unpin"},
	{KVMM_OP_MAG_REFILL, 0x0109, "mag_refill"},
	{KVMM_OP_MAG_DRAIN, 0x010a, "mag_drain"},
	{KVMM_OP_SEQ_BLOCKS, 0x010b, "seq_blocks"},
	{KVMM_OP_PREFETCH, 0x010c, "prefetch"},
	{KVMM_OP_SEQ_APPEND_FRAMES, 0x010d, "seq_append_frames"},
	{KVMM_OP_SEQ_PROMPT, 0x010e, "seq_prompt"},
	{KVMM_OP_SEQ_SEAL_FREE, 0x010f, "seq_seal_free"},
	{KVMM_OP_SEQ_SALT, 0x0110, "seq_salt"},
	{KVMM_OP_SEQ_PIN_RANGE, 0x0111, "seq_pin_range"},
	{KVMM_OP_SEQ_UNPIN_RANGE, 0x0112, "seq_unpin_range"},
	{KVMM_OP_FAR_MAP, 0x0113, "far_map"},
	{KVMM_OP_SEQ_PIN_FAR, 0x0114, "seq_pin_far"},
	{KVMM_OP_STATUS, 0x0200, "status"},
	{KVMM_OP_MEMINFO, 0x0201, "meminfo"},
	{KVMM_OP_VMSTAT, 0x0202, "vmstat"},
	{KVMM_OP_BUDDYINFO, 0x0203, "buddyinfo"},
	{KVMM_OP_CLIENTS, 0x0204, "clients"},
	{KVMM_OP_NAMESPACES, 0x0205, "namespaces"},
	{KVMM_OP_SEQS, 0x0206, "seqs"},
	{KVMM_OP_PAGETABLE, 0x0207, "pagetable"},
	{KVMM_OP_LRU, 0x0208, "lru"},
	{KVMM_OP_SWAP, 0x0209, "swap"},
	{KVMM_OP_TRACE, 0x020a, "trace"},
	{KVMM_OP_LIMIT, 0x020b, "limit"},
	{KVMM_OP_DROP_CACHES, 0x020c, "drop_caches"},
	{KVMM_OP_RECLAIM, 0x020d, "reclaim"},
	{KVMM_OP_SWAPON, 0x020e, "swapon"},
	{KVMM_OP_SWAPOFF, 0x020f, "swapoff"},
	{KVMM_OP_FAULT_INJECT, 0x0210, "fault_inject"},
	{KVMM_OP_REMOTE, 0x0211, "remote"},
	{KVMM_OP_NS_CREATE, 0x0212, "ns_add"},
	{KVMM_OP_NS_SET, 0x0213, "ns_set"},
	{KVMM_OP_NS_DELETE, 0x0214, "ns_del"},
	{KVMM_OP_PREEMPT, 0x0300, "preempt"},
	{KVMM_OP_SHUTDOWN, 0x0301, "shutdown"},
};

static const struct op_case *find_op_case(unsigned int op)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(op_cases); i++)
		if (op_cases[i].op == op)
			return &op_cases[i];
	return NULL;
}

static void test_op_values_and_names(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(op_cases); i++) {
		const struct op_case *c = &op_cases[i];

		assert_int_equal(c->op, c->value);
		assert_string_equal(kvmm_op_name(c->op), c->name);
		assert_string_equal(kvmm_op_name(c->op | KVMM_OP_REPLY), c->name);
		assert_true(kvmm_op_known(c->op));
		assert_true(kvmm_op_known(c->op | KVMM_OP_REPLY));
		assert_int_equal(kvmm_op_base(c->op | KVMM_OP_REPLY), c->op);
		assert_false(kvmm_op_is_reply(c->op));
		assert_true(kvmm_op_is_reply(c->op | KVMM_OP_REPLY));
	}
	assert_int_equal(KVMM_OP_REPLY, 0x8000);
	assert_int_equal(KVMM_OP_SESSION_LAST, KVMM_OP_PING);
	assert_int_equal(KVMM_OP_MEM_LAST, KVMM_OP_SEQ_PIN_FAR);
	assert_int_equal(KVMM_OP_ADMIN_LAST, KVMM_OP_NS_DELETE);
	assert_int_equal(KVMM_OP_EVENT_LAST, KVMM_OP_SHUTDOWN);
}

/* Every 16-bit value: known exactly when listed above, names unique, "?" otherwise. */
static void test_op_name_exhaustive(void **state)
{
	unsigned int op, nr_known = 0;

	(void)state;
	for (op = 0; op <= 0xffff; op++) {
		const struct op_case *c = find_op_case(kvmm_op_base(op));
		const char *name = kvmm_op_name(op);

		assert_non_null(name);
		if (!c) {
			if (strcmp(name, "?") != 0)
				fail_msg("opcode 0x%04x unexpectedly named %s", op, name);
			assert_false(kvmm_op_known(op));
			continue;
		}
		assert_string_equal(name, c->name);
		if (!kvmm_op_is_reply(op))
			nr_known++;
	}
	assert_int_equal(nr_known, ARRAY_SIZE(op_cases));

	/* names are unique, so kvmmctl can map a verb back to its opcode */
	for (op = 0; op < ARRAY_SIZE(op_cases); op++) {
		unsigned int j;

		for (j = op + 1; j < ARRAY_SIZE(op_cases); j++)
			assert_string_not_equal(op_cases[op].name, op_cases[j].name);
	}

	assert_string_equal(kvmm_op_name(KVMM_OP_NONE), "?");
	assert_string_equal(kvmm_op_name(0x0006), "?");
	assert_string_equal(kvmm_op_name(0x0115), "?");
	assert_string_equal(kvmm_op_name(0x0215), "?");
	assert_string_equal(kvmm_op_name(0x0302), "?");
	assert_string_equal(kvmm_op_name(0x0400), "?");
	assert_string_equal(kvmm_op_name(0x7fff), "?");
	assert_string_equal(kvmm_op_name(0xffff), "?");
	assert_string_equal(kvmm_op_name(0x10001), "?");
}

static void test_op_ranges(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(op_cases); i++) {
		unsigned int op = op_cases[i].op;
		unsigned int range = op & 0xff00;

		assert_true(op <= KVMM_OP_EVENT_LAST);
		assert_int_equal(kvmm_op_is_admin(op), range == 0x0200);
		assert_int_equal(kvmm_op_is_admin(op | KVMM_OP_REPLY), range == 0x0200);
		assert_int_equal(kvmm_op_is_event(op), range == 0x0300);
		switch (range) {
		case KVMM_OP_SESSION_BASE:
			assert_true(op <= KVMM_OP_SESSION_LAST);
			break;
		case KVMM_OP_MEM_BASE:
			assert_true(op <= KVMM_OP_MEM_LAST);
			break;
		case KVMM_OP_ADMIN_BASE:
			assert_true(op <= KVMM_OP_ADMIN_LAST);
			break;
		case KVMM_OP_EVENT_BASE:
			assert_true(op <= KVMM_OP_EVENT_LAST);
			break;
		default:
			fail_msg("opcode 0x%04x outside the defined ranges", op);
		}
	}
	/* the ranges are dense: everything from base to last is defined */
	for (i = KVMM_OP_SESSION_BASE + 1; i <= KVMM_OP_SESSION_LAST; i++)
		assert_true(kvmm_op_known((unsigned int)i));
	for (i = KVMM_OP_MEM_BASE; i <= KVMM_OP_MEM_LAST; i++)
		assert_true(kvmm_op_known((unsigned int)i));
	for (i = KVMM_OP_ADMIN_BASE; i <= KVMM_OP_ADMIN_LAST; i++)
		assert_true(kvmm_op_known((unsigned int)i));
	for (i = KVMM_OP_EVENT_BASE; i <= KVMM_OP_EVENT_LAST; i++)
		assert_true(kvmm_op_known((unsigned int)i));
	assert_false(kvmm_op_is_admin(0x0300));
	assert_false(kvmm_op_is_event(0x0400));
	assert_false(kvmm_op_is_admin(0x01ff));
}

/* ---------------------------------------------------------------------------------------- */

static void test_hdr_init_and_reply(void **state)
{
	struct kvmm_msg_hdr req, rep;

	(void)state;
	memset(&req, 0xa5, sizeof(req));
	kvmm_msg_hdr_init(&req, KVMM_OP_SEQ_APPEND, 48, 77);
	assert_int_equal(req.magic, KVMM_MAGIC);
	assert_int_equal(req.abi, KVMM_ABI_VERSION);
	assert_int_equal(req.op, KVMM_OP_SEQ_APPEND);
	assert_int_equal(req.flags, 0);
	assert_int_equal(req.len, 48);
	assert_int_equal(req.seq, 77);
	assert_int_equal(req.status, 0);
	assert_int_equal(req.reserved, 0);
	assert_int_equal(kvmm_msg_hdr_check(&req, 48), 0);

	memset(&rep, 0x5a, sizeof(rep));
	kvmm_msg_hdr_init_reply(&rep, &req, sizeof(rep), -ENOMEM);
	assert_int_equal(rep.magic, KVMM_MAGIC);
	assert_int_equal(rep.abi, req.abi);
	assert_int_equal(rep.op, KVMM_OP_SEQ_APPEND | KVMM_OP_REPLY);
	assert_int_equal(rep.seq, 77);
	assert_int_equal(rep.status, -ENOMEM);
	assert_int_equal(rep.flags, 0);
	assert_int_equal(rep.reserved, 0);
	assert_int_equal(rep.len, 32);
	/* a reply may carry a negative status */
	assert_int_equal(kvmm_msg_hdr_check(&rep, sizeof(rep)), 0);

	/* flags the ABI defines pass */
	req.len = 32;
	req.flags = KVMM_MSG_F_MORE | KVMM_MSG_F_FDS;
	assert_int_equal(kvmm_msg_hdr_check(&req, 32), 0);

	/* the largest record passes */
	req.len = KVMM_MSG_MAX;
	assert_int_equal(kvmm_msg_hdr_check(&req, KVMM_MSG_MAX), 0);
}

static void test_hdr_check_malformed(void **state)
{
	struct kvmm_msg_hdr h;
	unsigned int bit;

	(void)state;
	kvmm_msg_hdr_init(&h, KVMM_OP_PING, 32, 1);
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), 0);

	/* short records */
	assert_int_equal(kvmm_msg_hdr_check(&h, 0), -EBADMSG);
	assert_int_equal(kvmm_msg_hdr_check(&h, 31), -EBADMSG);
	/* len field disagrees with the record */
	assert_int_equal(kvmm_msg_hdr_check(&h, 40), -EBADMSG);
	h.len = 40;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.len = 31;
	assert_int_equal(kvmm_msg_hdr_check(&h, 31), -EBADMSG);
	/* too large, even when consistent */
	h.len = KVMM_MSG_MAX + 1;
	assert_int_equal(kvmm_msg_hdr_check(&h, KVMM_MSG_MAX + 1), -EBADMSG);
	h.len = 32;

	/* magic */
	h.magic = 0;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.magic = 0x4b564d4dU; /* byte-swapped */
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.magic = KVMM_MAGIC ^ 1;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.magic = KVMM_MAGIC;

	/* every undefined flag bit is rejected */
	for (bit = 0; bit < 32; bit++) {
		h.flags = 1U << bit;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32),
				 (h.flags & KVMM_MSG_F_ALL_V0) ? 0 : -EBADMSG);
	}
	h.flags = 0;

	/* reserved must be zero */
	h.reserved = 1;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.reserved = 0x80000000U;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.reserved = 0;

	/* a request or an event carries no status */
	h.status = -EINVAL;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.op = KVMM_OP_PREEMPT;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);
	h.op = KVMM_OP_PING | KVMM_OP_REPLY;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), 0);
	h.status = 0;

	/* a malformed record is EBADMSG even when its version is also wrong */
	h.abi = KVMM_ABI_VERSION + 1;
	h.magic = 0;
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), -EBADMSG);

	/* unknown opcodes are not the header's business */
	kvmm_msg_hdr_init(&h, 0x7777, 32, 1);
	assert_int_equal(kvmm_msg_hdr_check(&h, 32), 0);
}

static void test_hdr_check_version(void **state)
{
	struct kvmm_msg_hdr h;
	unsigned int abi;

	(void)state;
	for (abi = 0; abi <= 0xffff; abi++) {
		int in_range = (int)abi >= KVMM_ABI_MIN_COMPAT && (int)abi <= KVMM_ABI_VERSION;

		kvmm_msg_hdr_init(&h, KVMM_OP_SEQ_CREATE, 32, 9);
		h.abi = (uint16_t)abi;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32), in_range ? 0 : -EPROTO);

		/* HELLO, both ways, is read whatever the version */
		h.op = KVMM_OP_HELLO;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32), 0);
		h.op = KVMM_OP_HELLO | KVMM_OP_REPLY;
		h.status = -EPROTO;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32), 0);

		/* replies and events are held to the version like requests */
		h.op = KVMM_OP_SEQ_CREATE | KVMM_OP_REPLY;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32), in_range ? 0 : -EPROTO);
		h.op = KVMM_OP_SHUTDOWN;
		h.status = 0;
		h.seq = 0;
		assert_int_equal(kvmm_msg_hdr_check(&h, 32), in_range ? 0 : -EPROTO);
	}
}

static void test_abi_negotiate(void **state)
{
	(void)state;
	assert_int_equal(kvmm_abi_negotiate(KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, KVMM_ABI_VERSION,
					    KVMM_ABI_MIN_COMPAT),
			 KVMM_ABI_VERSION);
	assert_int_equal(kvmm_abi_negotiate(0, 0, 0, 0), 0);
	/* overlap: the older maximum wins, symmetric */
	assert_int_equal(kvmm_abi_negotiate(3, 1, 2, 0), 2);
	assert_int_equal(kvmm_abi_negotiate(2, 0, 3, 1), 2);
	assert_int_equal(kvmm_abi_negotiate(7, 2, 9, 7), 7);
	assert_int_equal(kvmm_abi_negotiate(9, 7, 7, 2), 7);
	assert_int_equal(kvmm_abi_negotiate(65535, 0, 65535, 65535), 65535);
	/* no overlap */
	assert_int_equal(kvmm_abi_negotiate(5, 4, 3, 0), -EPROTO);
	assert_int_equal(kvmm_abi_negotiate(3, 0, 5, 4), -EPROTO);
	assert_int_equal(kvmm_abi_negotiate(1, 1, 0, 0), -EPROTO);
	/* an upside-down range is a protocol error, not an accident to paper over */
	assert_int_equal(kvmm_abi_negotiate(0, 1, 5, 0), -EPROTO);
	assert_int_equal(kvmm_abi_negotiate(5, 0, 2, 3), -EPROTO);
}

/* ---------------------------------------------------------------------------------------- */

static void check_present(uint64_t pte, uint32_t frame, uint64_t flags)
{
	assert_true(kvmm_pte_is_present(pte));
	assert_false(kvmm_pte_is_none(pte));
	assert_false(kvmm_pte_is_swap(pte));
	assert_int_equal(kvmm_pte_frame(pte), frame);
	assert_true(kvmm_pte_flags(pte) == (flags & KVMM_PTE_FLAGS_MASK));
	assert_int_equal(kvmm_pte_swap_tier(pte), 0);
	assert_true(kvmm_pte_swap_slot(pte) == 0);
	assert_int_equal(kvmm_pte_valid(pte), frame != KVMM_FRAME_NONE);
	assert_int_equal(kvmm_pte_block(pte),
			 frame <= KVMM_BLOCK_FRAME_MAX ? (int32_t)frame : KVMM_BLOCK_NONE);
}

static void check_swap(uint64_t pte, unsigned int tier, uint64_t slot, uint64_t flags)
{
	assert_true(kvmm_pte_is_swap(pte));
	assert_false(kvmm_pte_is_none(pte));
	assert_false(kvmm_pte_is_present(pte));
	assert_int_equal(kvmm_pte_swap_tier(pte), tier);
	assert_true(kvmm_pte_swap_slot(pte) == slot);
	assert_true(kvmm_pte_flags(pte) == (flags & KVMM_PTE_FLAGS_MASK));
	assert_int_equal(kvmm_pte_frame(pte), KVMM_FRAME_NONE);
	assert_true(kvmm_pte_valid(pte));
	assert_int_equal(kvmm_pte_block(pte), KVMM_BLOCK_NONE);
}

static void test_pte_limits_and_literals(void **state)
{
	(void)state;
	assert_int_equal(KVMM_FRAME_NONE, 0xffffffffU);
	assert_int_equal(KVMM_FRAME_MAX, 0xfffffffeU);
	assert_int_equal(KVMM_SWAP_TIER_MAX, 31);
	assert_true(KVMM_SWAP_SLOT_MAX == UINT64_C(0xffffffffff));
	assert_true(KVMM_PTE_FLAGS_MASK == UINT64_C(0xfffc));
	assert_true(KVMM_PTE_WRITABLE == 0x4);
	assert_true(KVMM_PTE_DIRTY == 0x8);
	assert_true(KVMM_PTE_SEALED == 0x10);
	assert_true(KVMM_PTE_SHARED == 0x20);
	assert_true(KVMM_PTE_FLAGS_V0 == 0x3c);
	assert_int_equal(KVMM_BLOCK_NONE, -1);
	assert_int_equal(KVMM_BLOCK_FRAME_MAX, INT32_MAX);
	assert_int_equal((int32_t)KVMM_FRAME_NONE, KVMM_BLOCK_NONE);

	/* the documented bit layout, literally */
	assert_true(kvmm_pte_none() == 0);
	assert_true(kvmm_pte_mk_present(0, 0) == 0x1);
	assert_true(kvmm_pte_mk_present(0x12345678, KVMM_PTE_WRITABLE | KVMM_PTE_SEALED) ==
		    UINT64_C(0x1234567800000015));
	assert_true(kvmm_pte_mk_present(KVMM_FRAME_MAX, KVMM_PTE_FLAGS_V0) ==
		    UINT64_C(0xfffffffe0000003d));
	assert_true(kvmm_pte_mk_swap(0, 0) == 0x2);
	assert_true(kvmm_pte_mk_swap(2, 0xabcdef) == UINT64_C(0x0000abcdef020002));
	assert_true(kvmm_pte_mk_swap(KVMM_SWAP_TIER_MAX, KVMM_SWAP_SLOT_MAX) ==
		    UINT64_C(0xffffffffff1f0002));
	assert_true(kvmm_pte_set_flags(kvmm_pte_mk_swap(1, 1), KVMM_PTE_SEALED) ==
		    UINT64_C(0x0000000001010012));
}

static void test_pte_none(void **state)
{
	uint64_t pte = kvmm_pte_none();

	(void)state;
	assert_true(kvmm_pte_is_none(pte));
	assert_false(kvmm_pte_is_present(pte));
	assert_false(kvmm_pte_is_swap(pte));
	assert_int_equal(kvmm_pte_frame(pte), KVMM_FRAME_NONE);
	assert_true(kvmm_pte_flags(pte) == 0);
	assert_int_equal(kvmm_pte_swap_tier(pte), 0);
	assert_true(kvmm_pte_swap_slot(pte) == 0);
	assert_true(kvmm_pte_valid(pte));
	assert_int_equal(kvmm_pte_block(pte), KVMM_BLOCK_NONE);
	/* none has no flags to set */
	assert_true(kvmm_pte_set_flags(pte, KVMM_PTE_FLAGS_MASK) == 0);
	assert_true(kvmm_pte_clear_flags(pte, KVMM_PTE_FLAGS_MASK) == 0);
}

static void test_pte_present_roundtrip(void **state)
{
	static const uint32_t edge[] = {
		0,	    1,		2,	    0xff,	0xffff,	    0x10000,
		0x7ffffffe, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffd, KVMM_FRAME_MAX,
	};
	uint64_t rng = 1, flags;
	size_t i;

	(void)state;
	/* every edge frame with every flag combination of the 14-bit field */
	for (i = 0; i < ARRAY_SIZE(edge); i++)
		for (flags = 0; flags <= KVMM_PTE_FLAGS_MASK; flags += 1U << KVMM_PTE_FLAGS_SHIFT)
			check_present(kvmm_pte_mk_present(edge[i], flags), edge[i], flags);
	/* and random frames with random flags */
	for (i = 0; i < 100000; i++) {
		uint64_t r = rng_next(&rng);
		uint32_t frame = (uint32_t)(r >> 32);

		if (frame == KVMM_FRAME_NONE)
			continue;
		check_present(kvmm_pte_mk_present(frame, r), frame, r);
	}
}

static void test_pte_swap_roundtrip(void **state)
{
	static const uint64_t edge[] = {
		0,
		1,
		2,
		0xffffffffU,
		UINT64_C(0x100000000),
		UINT64_C(0x7fffffffff),
		UINT64_C(0x8000000000),
		KVMM_SWAP_SLOT_MAX - 1,
		KVMM_SWAP_SLOT_MAX,
	};
	uint64_t rng = 2;
	unsigned int tier;
	size_t i;

	(void)state;
	for (tier = 0; tier <= KVMM_SWAP_TIER_MAX; tier++) {
		for (i = 0; i < ARRAY_SIZE(edge); i++) {
			uint64_t pte = kvmm_pte_mk_swap(tier, edge[i]);

			check_swap(pte, tier, edge[i], 0);
			/* flags ride along without touching tier or slot */
			pte = kvmm_pte_set_flags(pte, KVMM_PTE_SEALED | KVMM_PTE_SHARED);
			check_swap(pte, tier, edge[i], KVMM_PTE_SEALED | KVMM_PTE_SHARED);
			pte = kvmm_pte_set_flags(pte, KVMM_PTE_FLAGS_MASK);
			check_swap(pte, tier, edge[i], KVMM_PTE_FLAGS_MASK);
			pte = kvmm_pte_clear_flags(pte, KVMM_PTE_FLAGS_MASK);
			check_swap(pte, tier, edge[i], 0);
			assert_true(pte == kvmm_pte_mk_swap(tier, edge[i]));
		}
	}
	for (i = 0; i < 100000; i++) {
		uint64_t r = rng_next(&rng);
		uint64_t slot = r & KVMM_SWAP_SLOT_MAX;

		tier = (unsigned int)(r >> 59);
		check_swap(kvmm_pte_mk_swap(tier, slot), tier, slot, 0);
	}
}

/* Out-of-range arguments are cut to their field; they never change the type or a neighbour. */
static void test_pte_masking(void **state)
{
	uint64_t pte;

	(void)state;
	pte = kvmm_pte_mk_present(5, ~UINT64_C(0));
	check_present(pte, 5, KVMM_PTE_FLAGS_MASK);
	assert_true((pte & KVMM_PTE_PRESENT_RSV_MASK) == 0);

	pte = kvmm_pte_mk_swap(KVMM_SWAP_TIER_MAX + 1, 7);
	check_swap(pte, 0, 7, 0);
	pte = kvmm_pte_mk_swap(3, KVMM_SWAP_SLOT_MAX + 1);
	check_swap(pte, 3, 0, 0);
	pte = kvmm_pte_mk_swap(~0U, ~UINT64_C(0));
	check_swap(pte, KVMM_SWAP_TIER_MAX, KVMM_SWAP_SLOT_MAX, 0);
	assert_true((pte & KVMM_PTE_SWAP_RSV_MASK) == 0);

	/* set/clear only ever touch the flag field */
	pte = kvmm_pte_mk_present(0xdeadbeef, 0);
	assert_true(kvmm_pte_set_flags(pte, ~UINT64_C(0)) == (pte | KVMM_PTE_FLAGS_MASK));
	assert_true(kvmm_pte_clear_flags(kvmm_pte_set_flags(pte, ~UINT64_C(0)), ~UINT64_C(0)) ==
		    pte);
	pte = kvmm_pte_mk_present(9, KVMM_PTE_WRITABLE | KVMM_PTE_DIRTY);
	pte = kvmm_pte_clear_flags(pte, KVMM_PTE_WRITABLE);
	check_present(pte, 9, KVMM_PTE_DIRTY);
	pte = kvmm_pte_set_flags(pte, KVMM_PTE_SEALED);
	check_present(pte, 9, KVMM_PTE_DIRTY | KVMM_PTE_SEALED);
	/* a flag bit this version does not name still survives a round trip */
	pte = kvmm_pte_mk_present(9, UINT64_C(1) << 15);
	check_present(pte, 9, UINT64_C(1) << 15);
}

/* For any 64-bit word at most one type predicate holds, and exactly one for a valid PTE. */
static void test_pte_types_exclusive(void **state)
{
	uint64_t rng = 3, words[64 * 3 + 8];
	size_t i, n = 0, k;

	(void)state;
	words[n++] = 0;
	words[n++] = 1;
	words[n++] = 2;
	words[n++] = 3;
	words[n++] = ~UINT64_C(0);
	words[n++] = kvmm_pte_mk_present(KVMM_FRAME_MAX, KVMM_PTE_FLAGS_MASK);
	words[n++] = kvmm_pte_mk_swap(KVMM_SWAP_TIER_MAX, KVMM_SWAP_SLOT_MAX);
	words[n++] = UINT64_C(1) << 63;
	for (k = 0; k < 64; k++) {
		words[n++] = UINT64_C(1) << k;
		words[n++] = (UINT64_C(1) << k) | KVMM_PTE_TYPE_PRESENT;
		words[n++] = (UINT64_C(1) << k) | KVMM_PTE_TYPE_SWAP;
	}
	for (i = 0; i < n + 200000; i++) {
		uint64_t w = i < n ? words[i] : rng_next(&rng);
		int none = kvmm_pte_is_none(w), present = kvmm_pte_is_present(w);
		int swap = kvmm_pte_is_swap(w);

		assert_true(none + present + swap <= 1);
		if (kvmm_pte_valid(w))
			assert_int_equal(none + present + swap, 1);
		if ((w & KVMM_PTE_TYPE_MASK) == 3)
			assert_false(kvmm_pte_valid(w));
		/* a valid entry rebuilds bit for bit from its decoded fields */
		if (kvmm_pte_valid(w) && present)
			assert_true(kvmm_pte_mk_present(kvmm_pte_frame(w), kvmm_pte_flags(w)) == w);
		if (kvmm_pte_valid(w) && swap)
			assert_true(kvmm_pte_set_flags(kvmm_pte_mk_swap(kvmm_pte_swap_tier(w),
									kvmm_pte_swap_slot(w)),
						       kvmm_pte_flags(w)) == w);
	}
}

static void test_pte_valid(void **state)
{
	uint64_t bit;

	(void)state;
	/* type 3 is never valid */
	assert_false(kvmm_pte_valid(3));
	assert_false(kvmm_pte_valid(~UINT64_C(0)));
	/* a "none" with any bit set is garbage */
	for (bit = 2; bit < 64; bit++)
		assert_false(kvmm_pte_valid(UINT64_C(1) << bit));
	/* present: reserved bits 16..31 */
	for (bit = 16; bit < 32; bit++)
		assert_false(kvmm_pte_valid(kvmm_pte_mk_present(1, 0) | (UINT64_C(1) << bit)));
	assert_false(kvmm_pte_valid(kvmm_pte_mk_present(KVMM_FRAME_NONE, 0)));
	assert_true(kvmm_pte_valid(kvmm_pte_mk_present(KVMM_FRAME_MAX, 0)));
	/* swap: reserved bits 21..23 */
	for (bit = 21; bit < 24; bit++)
		assert_false(kvmm_pte_valid(kvmm_pte_mk_swap(1, 1) | (UINT64_C(1) << bit)));
	assert_true(kvmm_pte_valid(kvmm_pte_mk_swap(KVMM_SWAP_TIER_MAX, KVMM_SWAP_SLOT_MAX)));
}

static void test_pte_block(void **state)
{
	(void)state;
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_present(0, 0)), 0);
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_present(12345, KVMM_PTE_SEALED)), 12345);
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_present(0x7fffffff, 0)), INT32_MAX);
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_present(0x80000000U, 0)), KVMM_BLOCK_NONE);
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_present(KVMM_FRAME_MAX, 0)), KVMM_BLOCK_NONE);
	assert_int_equal(kvmm_pte_block(kvmm_pte_mk_swap(1, 12345)), KVMM_BLOCK_NONE);
	assert_int_equal(kvmm_pte_block(kvmm_pte_none()), KVMM_BLOCK_NONE);
	assert_int_equal(kvmm_pte_block(3), KVMM_BLOCK_NONE);
}

/* ---------------------------------------------------------------------------------------- */

static void test_dtype(void **state)
{
	(void)state;
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_FP32), 4);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_FP16), 2);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_BF16), 2);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_INT8), 1);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_NONE), 0);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_COUNT), 0);
	assert_int_equal(kvmm_dtype_size(~0U), 0);
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_FP32), "fp32");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_FP16), "fp16");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_BF16), "bf16");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_INT8), "int8");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_NONE), "?");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_COUNT), "?");
}

static void test_format_check(void **state)
{
	const struct kvmm_format good = {
		.layers = 32,
		.kv_heads = 8,
		.head_dim = 128,
		.dtype = KVMM_DTYPE_FP16,
	};
	struct kvmm_format f;

	(void)state;
	assert_int_equal(kvmm_format_check(&good), 0);
	f = good;
	f.dtype = KVMM_DTYPE_BF16;
	assert_int_equal(kvmm_format_check(&f), 0);
	f.dtype = KVMM_DTYPE_FP32;
	assert_int_equal(kvmm_format_check(&f), 0);

	/* zero and oversize dimensions */
	f = good;
	f.layers = 0;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.layers = KVMM_FORMAT_MAX_LAYERS;
	assert_int_equal(kvmm_format_check(&f), 0);
	f.layers = KVMM_FORMAT_MAX_LAYERS + 1;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f = good;
	f.kv_heads = 0;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.kv_heads = KVMM_FORMAT_MAX_KV_HEADS + 1;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f = good;
	f.head_dim = 0;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.head_dim = KVMM_FORMAT_MAX_HEAD_DIM + 1;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);

	/* dtype and reserved */
	f = good;
	f.dtype = KVMM_DTYPE_NONE;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.dtype = KVMM_DTYPE_COUNT;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f = good;
	f.reserved = 1;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);

	/* quantization group: required for INT8, dividing head_dim; forbidden otherwise */
	f = good;
	f.quant_group = 32;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.dtype = KVMM_DTYPE_INT8;
	assert_int_equal(kvmm_format_check(&f), 0);
	f.quant_group = 128;
	assert_int_equal(kvmm_format_check(&f), 0);
	f.quant_group = 48;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.quant_group = 256;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
	f.quant_group = 0;
	assert_int_equal(kvmm_format_check(&f), -EINVAL);
}

static void test_name_check(void **state)
{
	char name[KVMM_NAME_LEN];

	(void)state;
	memset(name, 0, sizeof(name));
	strcpy(name, "default");
	assert_int_equal(kvmm_name_check(name), 0);
	memset(name, 0, sizeof(name));
	strcpy(name, "Tenant-01.prod_a");
	assert_int_equal(kvmm_name_check(name), 0);
	memset(name, 0, sizeof(name));
	name[0] = 'x';
	assert_int_equal(kvmm_name_check(name), 0);

	/* 31 characters fit, 32 leave no room for the NUL */
	memset(name, 'a', sizeof(name));
	name[KVMM_NAME_LEN - 1] = '\0';
	assert_int_equal(kvmm_name_check(name), 0);
	memset(name, 'a', sizeof(name));
	assert_int_equal(kvmm_name_check(name), -EINVAL);

	/* empty */
	memset(name, 0, sizeof(name));
	assert_int_equal(kvmm_name_check(name), -EINVAL);

	/* characters outside [A-Za-z0-9._-] */
	memset(name, 0, sizeof(name));
	strcpy(name, "a b");
	assert_int_equal(kvmm_name_check(name), -EINVAL);
	strcpy(name, "a/b");
	assert_int_equal(kvmm_name_check(name), -EINVAL);
	strcpy(name, "a:b");
	assert_int_equal(kvmm_name_check(name), -EINVAL);
	name[0] = (char)0xc3;
	assert_int_equal(kvmm_name_check(name), -EINVAL);

	/* garbage after the NUL */
	memset(name, 0, sizeof(name));
	strcpy(name, "ok");
	name[KVMM_NAME_LEN - 1] = 'x';
	assert_int_equal(kvmm_name_check(name), -EINVAL);
	name[KVMM_NAME_LEN - 1] = '\0';
	name[3] = 'y';
	assert_int_equal(kvmm_name_check(name), -EINVAL);
}

static void test_errname(void **state)
{
	static const struct {
		int status;
		const char *name;
	} cases[] = {
		{0, "OK"},
		{-EPROTO, "EPROTO"},
		{-EBADMSG, "EBADMSG"},
		{-EOPNOTSUPP, "EOPNOTSUPP"},
		{-EINVAL, "EINVAL"},
		{-E2BIG, "E2BIG"},
		{-ENOMEM, "ENOMEM"},
		{-ENOSPC, "ENOSPC"},
		{-EAGAIN, "EAGAIN"},
		{-EACCES, "EACCES"},
		{-EPERM, "EPERM"},
		{-ENOENT, "ENOENT"},
		{-EEXIST, "EEXIST"},
		{-EBUSY, "EBUSY"},
		{-EIO, "EIO"},
		{-ENOTCONN, "ENOTCONN"},
		{-ESHUTDOWN, "ESHUTDOWN"},
		{-KVMM_EPREEMPTED, "EPREEMPTED"},
		{-KVMM_ELOST, "ELOST"},
	};
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++)
		assert_string_equal(kvmm_errname(cases[i].status), cases[i].name);
	/* positive values are not statuses */
	assert_string_equal(kvmm_errname(EPROTO), "?");
	assert_string_equal(kvmm_errname(-ECHILD), "?");
	assert_string_equal(kvmm_errname(-KVMM_ERRNO_MAX), "?");
	assert_string_equal(kvmm_errname(INT_MIN), "?");

	/* kvmm codes sit above every system errno (Linux MAX_ERRNO is 4095) */
	assert_int_equal(KVMM_ERRNO_BASE, 4096);
	assert_int_equal(KVMM_EPREEMPTED, 4097);
	assert_int_equal(KVMM_ELOST, 4098);
	assert_true(KVMM_EPREEMPTED > KVMM_ERRNO_BASE && KVMM_EPREEMPTED <= KVMM_ERRNO_MAX);
	assert_true(KVMM_ELOST > KVMM_ERRNO_BASE && KVMM_ELOST <= KVMM_ERRNO_MAX);
	assert_true(EPROTO < KVMM_ERRNO_BASE && EBADMSG < KVMM_ERRNO_BASE &&
		    ESHUTDOWN < KVMM_ERRNO_BASE && EOPNOTSUPP < KVMM_ERRNO_BASE);
}

/* ---------------------------------------------------------------------------------------- */

static void test_standalone_unit(void **state)
{
	size_t sizes[ARRAY_SIZE(size_cases) + 4];
	struct kvmm_msg_hdr h;
	uint64_t rng = 4;
	size_t i, n;

	(void)state;
	n = test_uapi_tu2_sizes(sizes, ARRAY_SIZE(sizes));
	assert_int_equal(n, ARRAY_SIZE(size_cases));
	for (i = 0; i < n; i++)
		if (sizes[i] != size_cases[i].size)
			fail_msg("%s: %zu here, %zu in the standalone unit", size_cases[i].name,
				 size_cases[i].size, sizes[i]);

	for (i = 0; i < 1000; i++) {
		uint64_t r = rng_next(&rng);
		uint32_t frame = (uint32_t)r;
		uint64_t flags = r >> 17;
		unsigned int tier = (unsigned int)(r >> 40) & 31;
		uint64_t slot = r >> 24;

		assert_true(test_uapi_tu2_pte(frame, flags, 0, 0, 0) ==
			    kvmm_pte_mk_present(frame, flags));
		assert_true(test_uapi_tu2_pte(0, flags, tier, slot, 1) ==
			    kvmm_pte_set_flags(kvmm_pte_mk_swap(tier, slot), flags));
	}

	assert_int_equal(test_uapi_tu2_hdr(&h, KVMM_OP_ATTACH, 5), 0);
	assert_int_equal(h.magic, KVMM_MAGIC);
	assert_int_equal(h.op, KVMM_OP_ATTACH);
	assert_int_equal(h.seq, 5);
	assert_int_equal(kvmm_msg_hdr_check(&h, sizeof(h)), 0);

	for (i = 0; i < ARRAY_SIZE(op_cases); i++)
		assert_string_equal(test_uapi_tu2_op_name(op_cases[i].op), op_cases[i].name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_struct_sizes),
		cmocka_unit_test(test_field_offsets),
		cmocka_unit_test(test_no_hidden_padding),
		cmocka_unit_test(test_constants),
		cmocka_unit_test(test_feature_bits),
		cmocka_unit_test(test_op_values_and_names),
		cmocka_unit_test(test_op_name_exhaustive),
		cmocka_unit_test(test_op_ranges),
		cmocka_unit_test(test_hdr_init_and_reply),
		cmocka_unit_test(test_hdr_check_malformed),
		cmocka_unit_test(test_hdr_check_version),
		cmocka_unit_test(test_abi_negotiate),
		cmocka_unit_test(test_pte_limits_and_literals),
		cmocka_unit_test(test_pte_none),
		cmocka_unit_test(test_pte_present_roundtrip),
		cmocka_unit_test(test_pte_swap_roundtrip),
		cmocka_unit_test(test_pte_masking),
		cmocka_unit_test(test_pte_types_exclusive),
		cmocka_unit_test(test_pte_valid),
		cmocka_unit_test(test_pte_block),
		cmocka_unit_test(test_dtype),
		cmocka_unit_test(test_format_check),
		cmocka_unit_test(test_name_check),
		cmocka_unit_test(test_errname),
		cmocka_unit_test(test_standalone_unit),
	};

	return cmocka_run_group_tests_name("uapi", tests, NULL, NULL);
}
