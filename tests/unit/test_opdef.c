// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_opdef.c - the operation table (uapi/kvmm.h KVMM_OPS, kvmm/ipc/opdef.c):
 * every opcode of enum kvmm_op has exactly one row and nothing else has one, rows are in
 * opcode order, names are unique, the flags agree with the opcode ranges (admin verbs and
 * events never on the rings), payload rules are well formed, every request op has a handler
 * of the right kind in the daemon's row (a checker exactly for the variable payloads), and
 * proto.c's validation follows each row's rule at its exact boundaries.
 */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvmm/ipc/ipc.h"
#include "uapi/kvmm.h"

/*
 * Whether @op is an enumerator of enum kvmm_op.  No default: -Wswitch (in -Wall, and the
 * build's -Werror) fails this file when an opcode is added to the enum and not here, so
 * the table's completeness is checked against the enum itself, not a copy of the table.
 */
static bool enumerated(unsigned int op)
{
	switch ((enum kvmm_op)op) {
	case KVMM_OP_NONE:
		return false; /* never a valid opcode */
	case KVMM_OP_HELLO:
	case KVMM_OP_BYE:
	case KVMM_OP_ATTACH:
	case KVMM_OP_DETACH:
	case KVMM_OP_PING:
	case KVMM_OP_SEQ_CREATE:
	case KVMM_OP_SEQ_APPEND:
	case KVMM_OP_SEQ_FORK:
	case KVMM_OP_SEQ_TRUNCATE:
	case KVMM_OP_SEQ_FREE:
	case KVMM_OP_PREFIX_LOOKUP:
	case KVMM_OP_SEAL:
	case KVMM_OP_PIN:
	case KVMM_OP_UNPIN:
	case KVMM_OP_MAG_REFILL:
	case KVMM_OP_MAG_DRAIN:
	case KVMM_OP_SEQ_BLOCKS:
	case KVMM_OP_PREFETCH:
	case KVMM_OP_SEQ_APPEND_FRAMES:
	case KVMM_OP_SEQ_PROMPT:
	case KVMM_OP_SEQ_SEAL_FREE:
	case KVMM_OP_SEQ_SALT:
	case KVMM_OP_SEQ_PIN_RANGE:
	case KVMM_OP_SEQ_UNPIN_RANGE:
	case KVMM_OP_FAR_MAP:
	case KVMM_OP_SEQ_PIN_FAR:
	case KVMM_OP_STATUS:
	case KVMM_OP_MEMINFO:
	case KVMM_OP_VMSTAT:
	case KVMM_OP_BUDDYINFO:
	case KVMM_OP_CLIENTS:
	case KVMM_OP_NAMESPACES:
	case KVMM_OP_SEQS:
	case KVMM_OP_PAGETABLE:
	case KVMM_OP_LRU:
	case KVMM_OP_SWAP:
	case KVMM_OP_TRACE:
	case KVMM_OP_LIMIT:
	case KVMM_OP_DROP_CACHES:
	case KVMM_OP_RECLAIM:
	case KVMM_OP_SWAPON:
	case KVMM_OP_SWAPOFF:
	case KVMM_OP_FAULT_INJECT:
	case KVMM_OP_REMOTE:
	case KVMM_OP_NS_CREATE:
	case KVMM_OP_NS_SET:
	case KVMM_OP_NS_DELETE:
	case KVMM_OP_PREEMPT:
	case KVMM_OP_SHUTDOWN:
		return true;
	}
	return false;
}

/* Every enumerator has exactly one row, found by its opcode; no other opcode has one. */
static void test_one_row_per_opcode(void **state)
{
	unsigned int op, rows = 0, enumerators = 0;
	int last_index = -1;

	(void)state;
	for (op = 0; op <= KVMM_OP_MASK; op++) {
		const struct kvmm_op_info *info = kvmm_op_info(op);

		enumerators += enumerated(op);
		if (!info) {
			if (enumerated(op))
				fail_msg("opcode 0x%04x is in enum kvmm_op but has no row", op);
			assert_int_equal(kvmm_op_index(op), -1);
			continue;
		}
		if (!enumerated(op))
			fail_msg("row %s has opcode 0x%04x, not in enum kvmm_op", info->name, op);
		assert_int_equal(info->op, op);
		/* rows in opcode order: the index grows with the opcode, one step per row */
		assert_int_equal(kvmm_op_index(op), last_index + 1);
		last_index = kvmm_op_index(op);
		rows++;
	}
	assert_int_equal(rows, KVMM_OP_COUNT);
	assert_int_equal(enumerators, KVMM_OP_COUNT);
	/* the reply bit is not part of an opcode: a reply has no row of its own */
	assert_null(kvmm_op_info(KVMM_OP_SEQ_CREATE | KVMM_OP_REPLY));
	assert_null(kvmm_op_info(0x10000U | KVMM_OP_HELLO));
}

static void test_names(void **state)
{
	unsigned int a, b;

	(void)state;
	for (a = 1; a <= KVMM_OP_MASK; a++) {
		const struct kvmm_op_info *x = kvmm_op_info(a);
		const char *c;

		if (!x)
			continue;
		assert_non_null(x->name);
		assert_true(x->name[0] != '\0');
		for (c = x->name; *c; c++)
			assert_true(islower((unsigned char)*c) || *c == '_');
		assert_string_equal(kvmm_op_name(a), x->name);
		assert_string_equal(kvmm_op_name(a | KVMM_OP_REPLY), x->name);
		for (b = a + 1; b <= KVMM_OP_MASK; b++) {
			const struct kvmm_op_info *y = kvmm_op_info(b);

			if (y && !strcmp(x->name, y->name))
				fail_msg("opcodes 0x%04x and 0x%04x are both named %s", a, b,
					 x->name);
		}
	}
}

/* The flags agree with the opcode ranges; the rings carry only an attached client's ops. */
static void test_flags(void **state)
{
	const uint32_t known = KVMM_OPF_ADMIN | KVMM_OPF_RING | KVMM_OPF_ATTACHED | KVMM_OPF_EVENT |
			       KVMM_OPF_RING_OUT;
	unsigned int op;

	(void)state;
	for (op = 1; op <= KVMM_OP_MASK; op++) {
		const struct kvmm_op_info *info = kvmm_op_info(op);

		if (!info)
			continue;
		assert_int_equal(info->flags & ~known, 0);
		assert_int_equal(!!(info->flags & KVMM_OPF_ADMIN), !!kvmm_op_is_admin(op));
		assert_int_equal(!!(info->flags & KVMM_OPF_EVENT), !!kvmm_op_is_event(op));
		assert_int_equal(!!(info->flags & KVMM_OPF_RING), !!kvmm_op_ring_ok(op));
		/* with the out area: every ring op, and those whose reply needs it */
		assert_int_equal(!!(info->flags & (KVMM_OPF_RING | KVMM_OPF_RING_OUT)),
				 !!kvmm_op_ring_out_ok(op));
		/* an op needs the out area or not: never both flags */
		assert_false((info->flags & KVMM_OPF_RING) && (info->flags & KVMM_OPF_RING_OUT));
		if (info->flags & KVMM_OPF_RING_OUT)
			assert_true(info->flags & KVMM_OPF_ATTACHED);
		if (info->flags & (KVMM_OPF_ADMIN | KVMM_OPF_EVENT)) {
			/* admin verbs and events are never accepted on the rings */
			assert_false(kvmm_op_ring_ok(op));
			assert_false(kvmm_op_ring_out_ok(op));
			assert_false(info->flags & KVMM_OPF_ATTACHED &&
				     info->flags & KVMM_OPF_EVENT);
		}
		if ((info->flags & KVMM_OPF_RING) && op != KVMM_OP_PING)
			assert_true(info->flags & KVMM_OPF_ATTACHED);
		/* completions carry the heads of memory ops' replies only */
		if (info->head != KVMM_RH_NONE)
			assert_true(info->flags & KVMM_OPF_ATTACHED);
	}
	/* and each head fits in a CQE's rep */
	assert_true(sizeof(struct kvmm_seq_create_rep) <= sizeof(((struct kvmm_ring_cqe *)0)->rep));
	assert_true(sizeof(struct kvmm_seq_append_rep) <= sizeof(((struct kvmm_ring_cqe *)0)->rep));
	assert_true(sizeof(struct kvmm_pin_rep) <= sizeof(((struct kvmm_ring_cqe *)0)->rep));
	assert_true(sizeof(struct kvmm_seq_prompt_rep) <= sizeof(((struct kvmm_ring_cqe *)0)->rep));
	assert_false(kvmm_op_ring_ok(KVMM_OP_SEQ_CREATE | KVMM_OP_REPLY));
	assert_false(kvmm_op_ring_ok(KVMM_OP_NONE));
	assert_false(kvmm_op_ring_ok(KVMM_OP_HELLO));
	assert_false(kvmm_op_ring_ok(KVMM_OP_STATUS));
	assert_true(kvmm_op_ring_ok(KVMM_OP_SEQ_APPEND));
}

static void test_payload_rules(void **state)
{
	unsigned int op;

	(void)state;
	for (op = 1; op <= KVMM_OP_MASK; op++) {
		const struct kvmm_op_info *info = kvmm_op_info(op);

		if (!info)
			continue;
		switch ((enum kvmm_payload_rule)info->rule) {
		case KVMM_PAYLOAD_NONE:
		case KVMM_PAYLOAD_ANY:
			assert_int_equal(info->size, 0);
			break;
		case KVMM_PAYLOAD_ARRAY:
			assert_true(info->count_size == 4 || info->count_size == 8);
			assert_true(info->count_off + info->count_size <= info->size);
			assert_true(info->elem > 0);
			/* fall through */
		case KVMM_PAYLOAD_FIXED:
		case KVMM_PAYLOAD_MIN:
		case KVMM_PAYLOAD_VAR:
			assert_true(info->size > 0);
			assert_true(info->size <= KVMM_MSG_PAYLOAD_MAX);
			break;
		default:
			fail_msg("%s: rule %u", info->name, info->rule);
		}
		if (info->rule != KVMM_PAYLOAD_ARRAY)
			assert_true(!info->count_off && !info->count_size && !info->elem);
	}
}

/* The daemon's rows: a handler of the right kind for every request, none for events. */
static void test_daemon_rows(void **state)
{
	unsigned int op;

	(void)state;
	for (op = 1; op <= KVMM_OP_MASK; op++) {
		const struct kvmm_op_info *info = kvmm_op_info(op);
		const struct kvmm_ipc_opdef *d = kvmm_ipc_opdef(op);

		if (!info) {
			assert_null(d);
			continue;
		}
		assert_non_null(d);
		assert_int_equal(d->check != NULL, info->rule == KVMM_PAYLOAD_VAR);
		if (info->flags & KVMM_OPF_EVENT) {
			assert_true(!d->handle && !d->mem && !d->report);
			continue;
		}
		/* one way to answer on the socket: handle, a report, or the memory path */
		assert_int_equal(!!d->handle + !!d->report + (!d->handle && d->mem), 1);
		if (d->report)
			assert_true(info->flags & KVMM_OPF_ADMIN);
		/* the memory path runs under the pool lock of an attached session */
		if (d->mem && !d->handle)
			assert_true(info->flags & KVMM_OPF_ATTACHED);
		/* whatever the rings carry runs on the memory path */
		if (info->flags & KVMM_OPF_RING)
			assert_non_null(d->mem);
		/* only the memory path keeps the mirror */
		if (d->mirror != KVMM_MIRROR_NONE)
			assert_non_null(d->mem);
	}
	/* the ops that change a sequence's blocks keep the mirror; the readers do not */
	assert_int_equal(kvmm_ipc_opdef(KVMM_OP_SEQ_CREATE)->mirror, KVMM_MIRROR_NEW);
	assert_int_equal(kvmm_ipc_opdef(KVMM_OP_SEQ_APPEND)->mirror, KVMM_MIRROR_APPEND);
	assert_int_equal(kvmm_ipc_opdef(KVMM_OP_SEQ_BLOCKS)->mirror, KVMM_MIRROR_NONE);
	assert_int_equal(kvmm_ipc_opdef(KVMM_OP_PIN)->mirror, KVMM_MIRROR_NONE);
}

/*
 * proto.c validates by the rows: for every request op, its smallest valid payload (zeroed:
 * counts of 0, no flags) passes, one byte more or less does not where the rule is exact.
 */
static void test_validation_by_rule(void **state)
{
	static uint8_t buf[KVMM_MSG_PAYLOAD_MAX + 8];
	unsigned int op;

	(void)state;
	memset(buf, 0, sizeof(buf));
	for (op = 1; op <= KVMM_OP_MASK; op++) {
		const struct kvmm_op_info *info = kvmm_op_info(op);
		size_t n;

		if (!info)
			continue;
		n = info->size;
		if (info->flags & KVMM_OPF_EVENT) {
			/* an event is never a request */
			assert_int_equal(kvmm_ipc_check_payload(op, buf, n), -EBADMSG);
			continue;
		}
		assert_int_equal(kvmm_ipc_check_payload(op, buf, n), 0);
		assert_int_equal(kvmm_ipc_check_payload(op | KVMM_OP_REPLY, buf, n), -EBADMSG);
		switch ((enum kvmm_payload_rule)info->rule) {
		case KVMM_PAYLOAD_ANY:
			assert_int_equal(kvmm_ipc_check_payload(op, buf, KVMM_MSG_PAYLOAD_MAX), 0);
			break;
		case KVMM_PAYLOAD_MIN:
			assert_int_equal(kvmm_ipc_check_payload(op, buf, n + 1), 0);
			assert_int_equal(kvmm_ipc_check_payload(op, buf, n - 1), -EBADMSG);
			break;
		default:
			assert_int_equal(kvmm_ipc_check_payload(op, buf, n + 1), -EBADMSG);
			if (n)
				assert_int_equal(kvmm_ipc_check_payload(op, buf, n - 1), -EBADMSG);
			break;
		}
		assert_int_equal(kvmm_ipc_check_payload(op, buf, KVMM_MSG_PAYLOAD_MAX + 1),
				 -EBADMSG);
	}
	/* an ARRAY's count sizes its tail exactly: PIN of 3 sequence ids */
	{
		struct kvmm_pin_req r = {.nr_seqs = 3};

		memcpy(buf, &r, sizeof(r));
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PIN, buf, sizeof(r) + 24), 0);
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PIN, buf, sizeof(r) + 16),
				 -EBADMSG);
		memset(buf, 0, sizeof(r));
	}
	/* a 64-bit count that would overflow the record is refused, not wrapped */
	{
		struct kvmm_seq_append_req r = {.nr_tokens = UINT64_MAX / 4 + 1};

		memcpy(buf, &r, sizeof(r));
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, sizeof(r)),
				 -EBADMSG);
		memset(buf, 0, sizeof(r));
	}
	assert_int_equal(kvmm_ipc_check_payload(0x01ff, buf, 0), -EOPNOTSUPP);
	assert_int_equal(kvmm_ipc_check_payload(0x0400, buf, 0), -EOPNOTSUPP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_row_per_opcode),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_payload_rules),
		cmocka_unit_test(test_daemon_rows),
		cmocka_unit_test(test_validation_by_rule),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
