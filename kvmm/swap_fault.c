// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_fault.c - the swap fault points (swap.read, swap.write, swap.alloc): armed per
 * pool by kvmm_swap_fault_set() or a "point=...,..." spec (kvmmd's config, the admin verb
 * FAULT_INJECT), they make a chosen share of the tiers' I/O or slot allocations fail, from a
 * seeded generator, so tests and fuzzing reach the error paths on demand and reproducibly.
 * Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "compiler.h"
#include "kmalloc.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

static const char *const fault_names[KVMM_FAULT_POINTS] = {
	[FP_WRITE] = "swap.write",
	[FP_READ] = "swap.read",
	[FP_ALLOC] = "swap.alloc",
};

/* ---- fault injection ---------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

int kvmm_swap_fault_hit(struct kvmm_swap *sw, int point)
{
	struct swap_fault *f = &sw->fault[point];
	const struct kvmm_fault_attr *a = &f->attr;
	bool hit = false;

	if (likely(!f->armed))
		return -1;
	f->calls++;
	if (a->times && f->failures >= a->times)
		return -1;
	if (a->nth && f->calls == a->nth) {
		hit = true;
	} else if (a->interval || a->probability) {
		if (!a->interval || f->calls % a->interval == 0) {
			f->rng = mix64(f->rng + UINT64_C(0x9e3779b97f4a7c15));
			/* probability 0 with an interval: every interval-th call */
			hit = !a->probability || f->rng % 100 < a->probability;
		}
	}
	if (!hit)
		return -1;
	f->failures++;
	return (int)a->mode;
}

static int fault_index(const char *point)
{
	int i;

	for (i = 0; i < KVMM_FAULT_POINTS; i++)
		if (point && !strcmp(point, fault_names[i]))
			return i;
	return -1;
}

int kvmm_swap_fault_set(struct kvmm_pool *pool, const char *point,
			const struct kvmm_fault_attr *attr)
{
	struct kvmm_swap *sw;
	struct swap_fault *f;
	int i;

	if (!pool)
		return -EINVAL;
	i = fault_index(point);
	if (i < 0)
		return -ENOENT;
	if (attr && ((unsigned int)attr->mode >= KVMM_FAULT_MODE_COUNT || attr->probability > 100))
		return -EINVAL;
	/* a corrupted slot is something written: only the write point makes one */
	if (attr && attr->mode == KVMM_FAULT_CORRUPT && i != FP_WRITE)
		return -EINVAL;
	sw = kvmm_swap_get(pool);
	if (!sw)
		return -ENOMEM;
	f = &sw->fault[i];
	memset(f, 0, sizeof(*f));
	if (attr) {
		f->attr = *attr;
		f->armed = attr->nth || attr->interval || attr->probability;
		f->rng = attr->seed ? attr->seed : UINT64_C(0x6b766d6d2d666c74);
	}
	return 0;
}

int kvmm_swap_fault_stats(struct kvmm_pool *pool, const char *point, uint64_t *calls,
			  uint64_t *failures)
{
	int i = fault_index(point);

	if (!pool || i < 0)
		return -ENOENT;
	if (calls)
		*calls = pool->swap ? pool->swap->fault[i].calls : 0;
	if (failures)
		*failures = pool->swap ? pool->swap->fault[i].failures : 0;
	return 0;
}

static int parse_u64(const char *v, uint64_t *out)
{
	char *end;

	if (!*v || *v == '-')
		return -EINVAL;
	errno = 0;
	*out = strtoull(v, &end, 0);
	return errno || *end ? -EINVAL : 0;
}

int kvmm_swap_fault_parse(struct kvmm_pool *pool, const char *spec)
{
	struct kvmm_fault_attr a = {0};
	char buf[256], *save = NULL, *tok, *point;
	bool off = false;

	if (!pool || !spec || strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	point = strtok_r(buf, " \t,", &save);
	if (!point)
		return -EINVAL;
	while ((tok = strtok_r(NULL, " \t,", &save))) {
		char *eq = strchr(tok, '=');
		uint64_t v;

		if (!strcmp(tok, "off")) {
			off = true;
			continue;
		}
		if (!eq)
			return -EINVAL;
		*eq++ = '\0';
		if (!strcmp(tok, "mode")) {
			if (!strcmp(eq, "eio"))
				a.mode = KVMM_FAULT_EIO;
			else if (!strcmp(eq, "short"))
				a.mode = KVMM_FAULT_SHORT;
			else if (!strcmp(eq, "enospc"))
				a.mode = KVMM_FAULT_ENOSPC;
			else if (!strcmp(eq, "corrupt"))
				a.mode = KVMM_FAULT_CORRUPT;
			else
				return -EINVAL;
			continue;
		}
		if (parse_u64(eq, &v))
			return -EINVAL;
		if (!strcmp(tok, "nth"))
			a.nth = v;
		else if (!strcmp(tok, "seed"))
			a.seed = v;
		else if (v > UINT32_MAX)
			return -EINVAL;
		else if (!strcmp(tok, "interval"))
			a.interval = (uint32_t)v;
		else if (!strcmp(tok, "probability"))
			a.probability = (uint32_t)v;
		else if (!strcmp(tok, "times"))
			a.times = (uint32_t)v;
		else
			return -EINVAL;
	}
	return kvmm_swap_fault_set(pool, point, off ? NULL : &a);
}
