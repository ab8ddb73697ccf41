/* SPDX-License-Identifier: MIT */
/*
 * tools/demo_workload.h - the conversation workload shared by both halves of `make demo`:
 * tools/kvmm-agent (a libkvmm client of the real kvmmd) and tools/kvmm-demo (the core library
 * in one process).  Same token stream and same KV byte pattern, so the two runs compare.
 */
#ifndef KVMM_TOOLS_DEMO_WORKLOAD_H
#define KVMM_TOOLS_DEMO_WORKLOAD_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* A conversation so far: its token ids. */
struct demo_hist {
	uint32_t *tok;
	uint64_t len;
	uint64_t cap;
};

/* A small deterministic generator (xorshift64*): the demo is reproducible. */
static inline uint32_t demo_next_token(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (uint32_t)((*s * 0x2545f4914f6cdd1dull) >> 40) % 50000u;
}

static inline int demo_hist_push(struct demo_hist *h, uint32_t tok)
{
	if (h->len == h->cap) {
		uint64_t ncap = h->cap ? h->cap * 2 : 4096;
		uint32_t *n = realloc(h->tok, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		h->tok = n;
		h->cap = ncap;
	}
	h->tok[h->len++] = tok;
	return 0;
}

/* The KV "value" a model would write for token tok at position pos: a byte pattern. */
static inline uint8_t demo_kv_byte(uint32_t tok, uint64_t pos)
{
	return (uint8_t)(tok * 131u + pos * 7u + 1u);
}

#endif /* KVMM_TOOLS_DEMO_WORKLOAD_H */
