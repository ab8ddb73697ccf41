/* SPDX-License-Identifier: MIT */
/*
 * list.h - intrusive linked lists, the way every kvmm subsystem keeps collections without
 * allocating: struct list_head is a circular doubly linked list whose head is a sentinel
 * node (free lists, LRU lists, per-client sequence lists); struct hlist_head/hlist_node is
 * a NULL-terminated list with a one-pointer head, used for hash buckets (see hashtable.h).
 * Objects embed the node and are recovered with container_of. Nothing here locks: the owner
 * of a list serializes access to it. These links are process-local pointers; never put them
 * in memory shared with another process.
 */
#ifndef KVMM_LIST_H
#define KVMM_LIST_H

#include "compiler.h"

/*
 * Values stored in the links of a deleted node. They sit in the never-mapped first page,
 * so touching a node after list_del() faults at once instead of corrupting a neighbour.
 */
#define LIST_POISON1 ((void *)(uintptr_t)0x100)
#define LIST_POISON2 ((void *)(uintptr_t)0x200)

/* ------------------------------------------------------------------------------------ */
/* Circular doubly linked list */

struct list_head {
	struct list_head *next;
	struct list_head *prev;
};

#define LIST_HEAD_INIT(name)                     \
	{                                        \
		.next = &(name), .prev = &(name) \
	}
#define LIST_HEAD(name) struct list_head name = LIST_HEAD_INIT(name)

/* An empty list (or a node that is on no list and may be tested with list_empty). */
static inline void INIT_LIST_HEAD(struct list_head *list)
{
	list->next = list;
	list->prev = list;
}

/* Link node between two adjacent nodes prev and next. */
static inline void list_link_between(struct list_head *node, struct list_head *prev,
				     struct list_head *next)
{
	node->next = next;
	node->prev = prev;
	next->prev = node;
	prev->next = node;
}

/* Insert node right after head: a stack push. */
static inline void list_add(struct list_head *node, struct list_head *head)
{
	list_link_between(node, head, head->next);
}

/* Insert node right before head, i.e. at the tail: a queue append. */
static inline void list_add_tail(struct list_head *node, struct list_head *head)
{
	list_link_between(node, head->prev, head);
}

/* Make prev and next neighbours, dropping whatever was between them. */
static inline void list_unlink_between(struct list_head *prev, struct list_head *next)
{
	next->prev = prev;
	prev->next = next;
}

/* Remove entry from its list; its links are poisoned until it is re-added or re-inited. */
static inline void list_del(struct list_head *entry)
{
	list_unlink_between(entry->prev, entry->next);
	entry->next = LIST_POISON1;
	entry->prev = LIST_POISON2;
}

/* Remove entry from its list and leave it as an empty list (list_empty(entry) is true). */
static inline void list_del_init(struct list_head *entry)
{
	list_unlink_between(entry->prev, entry->next);
	INIT_LIST_HEAD(entry);
}

/* Put node in old's place; old's links are left stale. */
static inline void list_replace(struct list_head *old, struct list_head *node)
{
	node->next = old->next;
	node->next->prev = node;
	node->prev = old->prev;
	node->prev->next = node;
}

static inline void list_replace_init(struct list_head *old, struct list_head *node)
{
	list_replace(old, node);
	INIT_LIST_HEAD(old);
}

/* Take entry off its list and add it after head. */
static inline void list_move(struct list_head *entry, struct list_head *head)
{
	list_unlink_between(entry->prev, entry->next);
	list_add(entry, head);
}

/* Take entry off its list and add it at the tail of head (LRU rotation). */
static inline void list_move_tail(struct list_head *entry, struct list_head *head)
{
	list_unlink_between(entry->prev, entry->next);
	list_add_tail(entry, head);
}

static inline bool list_empty(const struct list_head *head)
{
	return head->next == head;
}

/* Exactly one entry. */
static inline bool list_is_singular(const struct list_head *head)
{
	return !list_empty(head) && head->next == head->prev;
}

static inline bool list_is_head(const struct list_head *entry, const struct list_head *head)
{
	return entry == head;
}

static inline bool list_is_first(const struct list_head *entry, const struct list_head *head)
{
	return entry->prev == head;
}

static inline bool list_is_last(const struct list_head *entry, const struct list_head *head)
{
	return entry->next == head;
}

/* Move the first entry to the tail. */
static inline void list_rotate_left(struct list_head *head)
{
	if (!list_empty(head))
		list_move_tail(head->next, head);
}

/* Insert all entries of list (non-empty) between prev and next; list itself is untouched. */
static inline void list_splice_between(const struct list_head *list, struct list_head *prev,
				       struct list_head *next)
{
	struct list_head *first = list->next;
	struct list_head *last = list->prev;

	first->prev = prev;
	prev->next = first;
	last->next = next;
	next->prev = last;
}

/* Join list's entries at the front of head. list's own links are stale afterwards. */
static inline void list_splice(const struct list_head *list, struct list_head *head)
{
	if (!list_empty(list))
		list_splice_between(list, head, head->next);
}

/* Join list's entries at the tail of head. list's own links are stale afterwards. */
static inline void list_splice_tail(const struct list_head *list, struct list_head *head)
{
	if (!list_empty(list))
		list_splice_between(list, head->prev, head);
}

/* Join list's entries at the front of head and leave list empty. */
static inline void list_splice_init(struct list_head *list, struct list_head *head)
{
	if (!list_empty(list)) {
		list_splice_between(list, head, head->next);
		INIT_LIST_HEAD(list);
	}
}

/* Join list's entries at the tail of head and leave list empty. */
static inline void list_splice_tail_init(struct list_head *list, struct list_head *head)
{
	if (!list_empty(list)) {
		list_splice_between(list, head->prev, head);
		INIT_LIST_HEAD(list);
	}
}

/*
 * Move the entries of head from the first up to and including entry into list, which must
 * be empty (or its entries are lost). entry == head moves nothing. Used to take a batch off
 * an LRU in O(1) once the batch boundary is known.
 */
static inline void list_cut_position(struct list_head *list, struct list_head *head,
				     struct list_head *entry)
{
	struct list_head *first = head->next;

	INIT_LIST_HEAD(list);
	if (list_empty(head) || entry == head)
		return;
	list->next = first;
	first->prev = list;
	list->prev = entry;
	head->next = entry->next;
	entry->next->prev = head;
	entry->next = list;
}

/* Number of entries; O(n), for tests and debug checks. */
static inline size_t list_count_nodes(const struct list_head *head)
{
	size_t n = 0;

	for (const struct list_head *pos = head->next; pos != head; pos = pos->next)
		n++;
	return n;
}

#define list_entry(ptr, type, member) container_of(ptr, type, member)
/* The list must be non-empty. */
#define list_first_entry(head, type, member) list_entry((head)->next, type, member)
#define list_last_entry(head, type, member) list_entry((head)->prev, type, member)
#define list_first_entry_or_null(head, type, member) \
	(list_empty(head) ? NULL : list_first_entry(head, type, member))
#define list_next_entry(pos, member) list_entry((pos)->member.next, __typeof__(*(pos)), member)
#define list_prev_entry(pos, member) list_entry((pos)->member.prev, __typeof__(*(pos)), member)
/* True when the entry cursor pos has come back around to the sentinel head. */
#define list_entry_is_head(pos, head, member) (&(pos)->member == (head))

#define list_for_each(pos, head) for (pos = (head)->next; pos != (head); pos = pos->next)
#define list_for_each_reverse(pos, head) for (pos = (head)->prev; pos != (head); pos = pos->prev)
/* n caches pos->next so pos may be deleted (or moved elsewhere) in the body. */
#define list_for_each_safe(pos, n, head) \
	for (pos = (head)->next, n = pos->next; pos != (head); pos = n, n = pos->next)

#define list_for_each_entry(pos, head, member)                         \
	for (pos = list_first_entry(head, __typeof__(*(pos)), member); \
	     !list_entry_is_head(pos, head, member); pos = list_next_entry(pos, member))

#define list_for_each_entry_reverse(pos, head, member)                \
	for (pos = list_last_entry(head, __typeof__(*(pos)), member); \
	     !list_entry_is_head(pos, head, member); pos = list_prev_entry(pos, member))

/* Resume after pos (which must be an entry of head, or head itself via list_entry). */
#define list_for_each_entry_continue(pos, head, member)                                  \
	for (pos = list_next_entry(pos, member); !list_entry_is_head(pos, head, member); \
	     pos = list_next_entry(pos, member))

/* n caches the next entry so pos may be deleted (or moved elsewhere) in the body. */
#define list_for_each_entry_safe(pos, n, head, member)                 \
	for (pos = list_first_entry(head, __typeof__(*(pos)), member), \
	    n = list_next_entry(pos, member);                          \
	     !list_entry_is_head(pos, head, member); pos = n, n = list_next_entry(n, member))

#define list_for_each_entry_safe_reverse(pos, n, head, member)        \
	for (pos = list_last_entry(head, __typeof__(*(pos)), member), \
	    n = list_prev_entry(pos, member);                         \
	     !list_entry_is_head(pos, head, member); pos = n, n = list_prev_entry(n, member))

/* ------------------------------------------------------------------------------------ */
/* Singly headed, NULL-terminated list for hash buckets */

struct hlist_node {
	struct hlist_node *next;
	/* The pointer that points at us: the head's first, or the previous node's next. */
	struct hlist_node **pprev;
};

struct hlist_head {
	struct hlist_node *first;
};

#define HLIST_HEAD_INIT       \
	{                     \
		.first = NULL \
	}
#define HLIST_HEAD(name) struct hlist_head name = HLIST_HEAD_INIT

static inline void INIT_HLIST_HEAD(struct hlist_head *h)
{
	h->first = NULL;
}

/* A node that is on no list: hlist_unhashed() is true for it. */
static inline void INIT_HLIST_NODE(struct hlist_node *n)
{
	n->next = NULL;
	n->pprev = NULL;
}

static inline bool hlist_unhashed(const struct hlist_node *n)
{
	return !n->pprev;
}

static inline bool hlist_empty(const struct hlist_head *h)
{
	return !h->first;
}

static inline void hlist_add_head(struct hlist_node *n, struct hlist_head *h)
{
	struct hlist_node *first = h->first;

	n->next = first;
	if (first)
		first->pprev = &n->next;
	h->first = n;
	n->pprev = &h->first;
}

/* Insert n before next, which is on a list. */
static inline void hlist_add_before(struct hlist_node *n, struct hlist_node *next)
{
	n->pprev = next->pprev;
	n->next = next;
	next->pprev = &n->next;
	*n->pprev = n;
}

/* Insert n after prev, which is on a list. */
static inline void hlist_add_behind(struct hlist_node *n, struct hlist_node *prev)
{
	n->next = prev->next;
	prev->next = n;
	n->pprev = &prev->next;
	if (n->next)
		n->next->pprev = &n->next;
}

static inline void hlist_unlink(struct hlist_node *n)
{
	struct hlist_node *next = n->next;

	*n->pprev = next;
	if (next)
		next->pprev = n->pprev;
}

/* Remove n (which must be hashed); its links are poisoned. */
static inline void hlist_del(struct hlist_node *n)
{
	hlist_unlink(n);
	n->next = LIST_POISON1;
	n->pprev = LIST_POISON2;
}

/* Remove n if it is on a list and leave it unhashed; safe to call twice. */
static inline void hlist_del_init(struct hlist_node *n)
{
	if (!hlist_unhashed(n)) {
		hlist_unlink(n);
		INIT_HLIST_NODE(n);
	}
}

#define hlist_entry(ptr, type, member) container_of(ptr, type, member)
/* Like hlist_entry, but NULL stays NULL. ptr is evaluated once. */
#define hlist_entry_safe(ptr, type, member) __hlist_entry_safe(ptr, type, member, __KVMM_UNIQUE(p))
#define __hlist_entry_safe(ptr, type, member, p)         \
	({                                               \
		__typeof__(ptr) p = (ptr);               \
		p ? hlist_entry(p, type, member) : NULL; \
	})

#define hlist_for_each(pos, head) for (pos = (head)->first; pos; pos = pos->next)
/* n (a struct hlist_node *) caches pos->next so pos may be deleted in the body. */
#define hlist_for_each_safe(pos, n, head)                \
	for (pos = (head)->first; pos && ({              \
					  n = pos->next; \
					  1;             \
				  });                    \
	     pos = n)

#define hlist_for_each_entry(pos, head, member)                                      \
	for (pos = hlist_entry_safe((head)->first, __typeof__(*(pos)), member); pos; \
	     pos = hlist_entry_safe((pos)->member.next, __typeof__(*(pos)), member))

/* n (a struct hlist_node *) caches the next link so pos may be deleted in the body. */
#define hlist_for_each_entry_safe(pos, n, head, member)                         \
	for (pos = hlist_entry_safe((head)->first, __typeof__(*(pos)), member); \
	     pos && ({                                                          \
		     n = (pos)->member.next;                                    \
		     1;                                                         \
	     });                                                                \
	     pos = hlist_entry_safe(n, __typeof__(*(pos)), member))

#endif /* KVMM_LIST_H */
