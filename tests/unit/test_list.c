// SPDX-License-Identifier: MIT
/*
 * test_list.c - unit tests for include/list.h: every list_head and hlist operation checked
 * against the expected order in both directions, deletion while iterating, and a randomized
 * run against a plain array model of the list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "list.h"

struct item {
	int val;
	struct list_head node;
	struct hlist_node hnode;
};

#define NITEMS 16

static struct item items[NITEMS];

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < NITEMS; i++) {
		items[i].val = i;
		INIT_LIST_HEAD(&items[i].node);
		INIT_HLIST_NODE(&items[i].hnode);
	}
	return 0;
}

/*
 * Assert that head holds exactly the values in want[0..n), walking next pointers forward and
 * prev pointers backward, and that every node's neighbours point back at it.
 */
static void check_list(const struct list_head *head, const int *want, size_t n)
{
	const struct list_head *pos = head;
	size_t i;

	assert_int_equal(list_count_nodes(head), n);
	assert_int_equal(list_empty(head), n == 0);
	assert_int_equal(list_is_singular(head), n == 1);
	for (i = 0; i < n; i++) {
		assert_ptr_equal(pos->next->prev, pos);
		pos = pos->next;
		assert_ptr_not_equal(pos, head);
		assert_int_equal(list_entry(pos, struct item, node)->val, want[i]);
	}
	assert_ptr_equal(pos->next, head);
	assert_ptr_equal(head->prev, pos);
	pos = head;
	for (i = n; i > 0; i--) {
		pos = pos->prev;
		assert_int_equal(list_entry(pos, struct item, node)->val, want[i - 1]);
	}
	assert_ptr_equal(pos->prev, head);
}

static void test_init_empty(void **state)
{
	LIST_HEAD(static_head);
	struct list_head h;

	(void)state;
	INIT_LIST_HEAD(&h);
	assert_true(list_empty(&h));
	assert_true(list_empty(&static_head));
	assert_false(list_is_singular(&h));
	assert_int_equal(list_count_nodes(&h), 0);
	assert_null(list_first_entry_or_null(&h, struct item, node));
	check_list(&static_head, NULL, 0);
}

static void test_add_and_add_tail(void **state)
{
	LIST_HEAD(stack);
	LIST_HEAD(queue);
	struct list_head *q = &queue;

	(void)state;
	for (int i = 0; i < 4; i++)
		list_add(&items[i].node, &stack);
	check_list(&stack, (int[]){3, 2, 1, 0}, 4);
	for (int i = 4; i < 8; i++)
		list_add_tail(&items[i].node, q);
	check_list(q, (int[]){4, 5, 6, 7}, 4);

	assert_int_equal(list_first_entry(q, struct item, node)->val, 4);
	assert_int_equal(list_last_entry(q, struct item, node)->val, 7);
	assert_ptr_equal(list_first_entry_or_null(q, struct item, node), &items[4]);
	assert_true(list_is_first(&items[4].node, q));
	assert_false(list_is_first(&items[5].node, q));
	assert_true(list_is_last(&items[7].node, q));
	assert_false(list_is_last(&items[6].node, q));
	assert_true(list_is_head(q, q));
	assert_int_equal(list_next_entry(&items[5], node)->val, 6);
	assert_int_equal(list_prev_entry(&items[5], node)->val, 4);
}

static void test_del(void **state)
{
	LIST_HEAD(h);

	(void)state;
	for (int i = 0; i < 5; i++)
		list_add_tail(&items[i].node, &h);
	list_del(&items[0].node); /* first */
	check_list(&h, (int[]){1, 2, 3, 4}, 4);
	assert_ptr_equal(items[0].node.next, LIST_POISON1);
	assert_ptr_equal(items[0].node.prev, LIST_POISON2);
	list_del(&items[4].node); /* last */
	check_list(&h, (int[]){1, 2, 3}, 3);
	list_del_init(&items[2].node); /* middle */
	check_list(&h, (int[]){1, 3}, 2);
	assert_true(list_empty(&items[2].node));
	list_del(&items[1].node);
	check_list(&h, (int[]){3}, 1);
	list_del_init(&items[3].node);
	check_list(&h, NULL, 0);
	/* a del_init'ed node can be added again */
	list_add(&items[3].node, &h);
	check_list(&h, (int[]){3}, 1);
}

static void test_move_and_replace(void **state)
{
	LIST_HEAD(a);
	LIST_HEAD(b);

	(void)state;
	for (int i = 0; i < 4; i++)
		list_add_tail(&items[i].node, &a);
	list_move(&items[2].node, &b);
	list_move(&items[0].node, &b);
	check_list(&a, (int[]){1, 3}, 2);
	check_list(&b, (int[]){0, 2}, 2);
	list_move_tail(&items[1].node, &b);
	check_list(&a, (int[]){3}, 1);
	check_list(&b, (int[]){0, 2, 1}, 3);
	/* moving within the same list: LRU rotation of the head entry */
	list_move_tail(&items[0].node, &b);
	check_list(&b, (int[]){2, 1, 0}, 3);
	list_rotate_left(&b);
	check_list(&b, (int[]){1, 0, 2}, 3);
	list_rotate_left(&a); /* single entry: unchanged */
	check_list(&a, (int[]){3}, 1);

	list_replace(&items[0].node, &items[9].node);
	check_list(&b, (int[]){1, 9, 2}, 3);
	list_replace_init(&items[3].node, &items[8].node);
	check_list(&a, (int[]){8}, 1);
	assert_true(list_empty(&items[3].node));
}

static void test_splice(void **state)
{
	LIST_HEAD(a);
	LIST_HEAD(b);
	LIST_HEAD(empty);

	(void)state;
	for (int i = 0; i < 3; i++)
		list_add_tail(&items[i].node, &a);
	for (int i = 3; i < 6; i++)
		list_add_tail(&items[i].node, &b);

	list_splice_init(&b, &a);
	check_list(&a, (int[]){3, 4, 5, 0, 1, 2}, 6);
	check_list(&b, NULL, 0);

	/* empty source: destination untouched */
	list_splice(&empty, &a);
	list_splice_tail(&empty, &a);
	list_splice_init(&empty, &a);
	list_splice_tail_init(&empty, &a);
	check_list(&a, (int[]){3, 4, 5, 0, 1, 2}, 6);

	for (int i = 6; i < 8; i++)
		list_add_tail(&items[i].node, &b);
	list_splice_tail_init(&b, &a);
	check_list(&a, (int[]){3, 4, 5, 0, 1, 2, 6, 7}, 8);
	check_list(&b, NULL, 0);

	/* into an empty destination */
	list_splice_init(&a, &b);
	check_list(&b, (int[]){3, 4, 5, 0, 1, 2, 6, 7}, 8);
	check_list(&a, NULL, 0);

	/* non-init variants: source head is stale and must be re-initialized by the caller */
	list_add(&items[8].node, &a);
	list_splice(&a, &b);
	check_list(&b, (int[]){8, 3, 4, 5, 0, 1, 2, 6, 7}, 9);
	INIT_LIST_HEAD(&a);
	list_add(&items[9].node, &a);
	list_add_tail(&items[10].node, &a);
	list_splice_tail(&a, &b);
	check_list(&b, (int[]){8, 3, 4, 5, 0, 1, 2, 6, 7, 9, 10}, 11);
}

static void test_cut_position(void **state)
{
	LIST_HEAD(h);
	LIST_HEAD(cut);

	(void)state;
	for (int i = 0; i < 6; i++)
		list_add_tail(&items[i].node, &h);
	list_cut_position(&cut, &h, &h); /* nothing */
	check_list(&cut, NULL, 0);
	check_list(&h, (int[]){0, 1, 2, 3, 4, 5}, 6);

	list_cut_position(&cut, &h, &items[0].node); /* just the first */
	check_list(&cut, (int[]){0}, 1);
	check_list(&h, (int[]){1, 2, 3, 4, 5}, 5);

	list_cut_position(&cut, &h, &items[3].node); /* a middle prefix */
	check_list(&cut, (int[]){1, 2, 3}, 3);
	check_list(&h, (int[]){4, 5}, 2);

	list_cut_position(&cut, &h, &items[5].node); /* everything */
	check_list(&cut, (int[]){4, 5}, 2);
	check_list(&h, NULL, 0);

	list_cut_position(&cut, &h, &h); /* from an empty list */
	check_list(&cut, NULL, 0);
}

static void test_iterate(void **state)
{
	LIST_HEAD(h);
	struct list_head *pos;
	struct item *it;
	int expect;

	(void)state;
	list_for_each_entry (it, &h, node)
		fail_msg("iterated an empty list");
	for (int i = 0; i < 5; i++)
		list_add_tail(&items[i].node, &h);

	expect = 0;
	list_for_each (pos, &h)
		assert_int_equal(list_entry(pos, struct item, node)->val, expect++);
	assert_int_equal(expect, 5);
	/* clang-format off */
	list_for_each_reverse(pos, &h)
		assert_int_equal(list_entry(pos, struct item, node)->val, --expect);
	/* clang-format on */
	assert_int_equal(expect, 0);

	list_for_each_entry (it, &h, node)
		assert_int_equal(it->val, expect++);
	assert_int_equal(expect, 5);
	assert_true(list_entry_is_head(it, &h, node));
	list_for_each_entry_reverse (it, &h, node)
		assert_int_equal(it->val, --expect);
	assert_int_equal(expect, 0);

	/* resume a scan after an entry, e.g. a reclaim pass continuing where it stopped */
	it = &items[2];
	expect = 3;
	/* clang-format off */
	list_for_each_entry_continue(it, &h, node)
		assert_int_equal(it->val, expect++);
	/* clang-format on */
	assert_int_equal(expect, 5);

	/* break leaves the cursor on the entry */
	list_for_each_entry (it, &h, node)
		if (it->val == 3)
			break;
	assert_ptr_equal(it, &items[3]);
}

static void test_safe_delete_while_iterating(void **state)
{
	LIST_HEAD(h);
	LIST_HEAD(other);
	struct list_head *pos, *n;
	struct item *it, *tmp;
	int seen = 0;

	(void)state;
	for (int i = 0; i < NITEMS; i++)
		list_add_tail(&items[i].node, &h);

	/* delete every odd entry (list_del poisons the links the loop must not follow) */
	list_for_each_entry_safe (it, tmp, &h, node) {
		seen++;
		if (it->val & 1)
			list_del(&it->node);
	}
	assert_int_equal(seen, NITEMS);
	check_list(&h, (int[]){0, 2, 4, 6, 8, 10, 12, 14}, 8);

	/* move entries to another list while walking backwards */
	list_for_each_entry_safe_reverse (it, tmp, &h, node)
		if (it->val % 4 == 0)
			list_move_tail(&it->node, &other);
	check_list(&h, (int[]){2, 6, 10, 14}, 4);
	check_list(&other, (int[]){12, 8, 4, 0}, 4);

	/* delete everything with the plain-node safe iterator */
	seen = 0;
	list_for_each_safe (pos, n, &h) {
		list_del(pos);
		seen++;
	}
	assert_int_equal(seen, 4);
	check_list(&h, NULL, 0);

	/* list_del_init of the cursor entry is as safe as list_del */
	list_for_each_entry_safe (it, tmp, &other, node)
		list_del_init(&it->node);
	check_list(&other, NULL, 0);
}

/*
 * Random operations on a list and on an array holding the same values in the same order;
 * after every step both must agree exactly.
 */
static void test_random_model(void **state)
{
	int model[NITEMS];
	bool on_list[NITEMS] = {false};
	size_t n = 0;
	LIST_HEAD(h);

	(void)state;
	srand(12345);
	for (int step = 0; step < 20000; step++) {
		int v = rand() % NITEMS;
		int op = rand() % 4;
		size_t i;

		if (!on_list[v]) {
			if (op & 1) {
				list_add(&items[v].node, &h);
				memmove(&model[1], &model[0], n * sizeof(int));
				model[0] = v;
			} else {
				list_add_tail(&items[v].node, &h);
				model[n] = v;
			}
			n++;
			on_list[v] = true;
		} else {
			for (i = 0; model[i] != v; i++)
				;
			memmove(&model[i], &model[i + 1], (n - i - 1) * sizeof(int));
			n--;
			switch (op) {
			case 0:
				list_del(&items[v].node);
				on_list[v] = false;
				break;
			case 1:
				list_del_init(&items[v].node);
				on_list[v] = false;
				break;
			case 2:
				list_move(&items[v].node, &h);
				memmove(&model[1], &model[0], n * sizeof(int));
				model[0] = v;
				n++;
				break;
			default:
				list_move_tail(&items[v].node, &h);
				model[n++] = v;
				break;
			}
		}
		check_list(&h, model, n);
	}
}

static void test_hlist(void **state)
{
	HLIST_HEAD(h);
	struct hlist_node *pos, *n;
	struct item *it;
	int vals[NITEMS], cnt;

	(void)state;
	assert_true(hlist_empty(&h));
	assert_true(hlist_unhashed(&items[0].hnode));
	hlist_for_each_entry (it, &h, hnode)
		fail_msg("iterated an empty hlist");

	for (int i = 0; i < 4; i++)
		hlist_add_head(&items[i].hnode, &h);
	assert_false(hlist_empty(&h));
	assert_false(hlist_unhashed(&items[0].hnode));
	cnt = 0;
	hlist_for_each_entry (it, &h, hnode)
		vals[cnt++] = it->val;
	assert_int_equal(cnt, 4);
	assert_memory_equal(vals, ((int[]){3, 2, 1, 0}), sizeof(int) * 4);

	hlist_add_before(&items[10].hnode, &items[3].hnode); /* new first */
	hlist_add_before(&items[11].hnode, &items[1].hnode);
	hlist_add_behind(&items[12].hnode, &items[0].hnode); /* new last */
	hlist_add_behind(&items[13].hnode, &items[2].hnode);
	cnt = 0;
	hlist_for_each (pos, &h) {
		assert_ptr_equal(*pos->pprev, pos);
		vals[cnt++] = hlist_entry(pos, struct item, hnode)->val;
	}
	assert_int_equal(cnt, 8);
	assert_memory_equal(vals, ((int[]){10, 3, 2, 13, 11, 1, 0, 12}), sizeof(int) * 8);

	hlist_del(&items[10].hnode); /* first */
	assert_ptr_equal(items[10].hnode.next, LIST_POISON1);
	hlist_del_init(&items[12].hnode); /* last */
	assert_true(hlist_unhashed(&items[12].hnode));
	hlist_del_init(&items[12].hnode); /* second del_init is a no-op */
	hlist_del(&items[11].hnode);	  /* middle */
	cnt = 0;
	hlist_for_each_entry (it, &h, hnode)
		vals[cnt++] = it->val;
	assert_int_equal(cnt, 5);
	assert_memory_equal(vals, ((int[]){3, 2, 13, 1, 0}), sizeof(int) * 5);

	/* delete all but val 2 while iterating */
	cnt = 0;
	hlist_for_each_entry_safe (it, n, &h, hnode) {
		cnt++;
		if (it->val != 2)
			hlist_del_init(&it->hnode);
	}
	assert_int_equal(cnt, 5);
	assert_ptr_equal(h.first, &items[2].hnode);
	assert_null(items[2].hnode.next);
	assert_ptr_equal(items[2].hnode.pprev, &h.first);

	hlist_for_each_safe (pos, n, &h)
		hlist_del(pos);
	assert_true(hlist_empty(&h));
	assert_null(hlist_entry_safe(h.first, struct item, hnode));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_init_empty, setup),
		cmocka_unit_test_setup(test_add_and_add_tail, setup),
		cmocka_unit_test_setup(test_del, setup),
		cmocka_unit_test_setup(test_move_and_replace, setup),
		cmocka_unit_test_setup(test_splice, setup),
		cmocka_unit_test_setup(test_cut_position, setup),
		cmocka_unit_test_setup(test_iterate, setup),
		cmocka_unit_test_setup(test_safe_delete_while_iterating, setup),
		cmocka_unit_test_setup(test_random_model, setup),
		cmocka_unit_test_setup(test_hlist, setup),
	};

	return cmocka_run_group_tests_name("list", tests, NULL, NULL);
}
