/* SPDX-License-Identifier: MIT */
/*
 * hash.h - fast non-cryptographic integer hashing for in-memory indexes. hash_32/hash_64
 * reduce an integer key to a bucket index of a power-of-two table by multiplying with the
 * golden-ratio constant and keeping the top bits (those mix every input bit);
 * kvmm_hash_mix64 is a full-avalanche 64-bit finalizer for building hashes of compound
 * keys. None of this resists an adversary choosing keys: content keys that tenants can
 * influence (the page cache) must use a keyed hash instead.
 */
#ifndef KVMM_HASH_H
#define KVMM_HASH_H

#include <string.h>

#include "compiler.h"

/* 2^32 / phi and 2^64 / phi, rounded to odd: multiplying by them spreads keys evenly. */
#define KVMM_GOLDEN_RATIO_32 UINT32_C(0x9E3779B9)
#define KVMM_GOLDEN_RATIO_64 UINT64_C(0x9E3779B97F4A7C15)

/* A bits-wide hash of val, 0 <= bits <= 32 (0 gives 0: a one-bucket table). */
static inline uint32_t hash_32(uint32_t val, unsigned int bits)
{
	uint32_t h = val * KVMM_GOLDEN_RATIO_32;

	if (bits >= 32)
		return h;
	return bits ? h >> (32 - bits) : 0;
}

/* A bits-wide hash of val, 0 <= bits <= 64 (0 gives 0: a one-bucket table). */
static inline uint64_t hash_64(uint64_t val, unsigned int bits)
{
	uint64_t h = val * KVMM_GOLDEN_RATIO_64;

	if (bits >= 64)
		return h;
	return bits ? h >> (64 - bits) : 0;
}

static inline uint32_t hash_ptr(const void *ptr, unsigned int bits)
{
	return (uint32_t)hash_64((uint64_t)(uintptr_t)ptr, min_t(unsigned int, bits, 32));
}

/*
 * A bijective 64-bit mixer: every output bit depends on every input bit, so the low bits are
 * as good as the high ones (a mask may replace a shift). The xor-shift/multiply structure
 * with these two multipliers is David Stafford's "Mix13" variant of the MurmurHash3
 * finalizer, which is also the output function of splitmix64.
 */
static inline uint64_t kvmm_hash_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xBF58476D1CE4E5B9);
	x ^= x >> 27;
	x *= UINT64_C(0x94D049BB133111EB);
	x ^= x >> 31;
	return x;
}

/* Fold v into the running hash h; order matters (combine(a, b) != combine(b, a)). */
static inline uint64_t kvmm_hash_combine64(uint64_t h, uint64_t v)
{
	return kvmm_hash_mix64(h ^ kvmm_hash_mix64(v + KVMM_GOLDEN_RATIO_64));
}

/*
 * Hash len bytes at data with a seed, eight bytes per step. The length is folded in last,
 * so inputs differing only in trailing zero bytes hash differently. Depends on host byte
 * order: only for in-memory tables, never for anything stored or sent.
 */
static inline uint64_t kvmm_hash_bytes(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	/* Any start value works; a fraction of pi keeps seed 0 away from mix64's fixed point 0. */
	uint64_t h = seed ^ UINT64_C(0x243F6A8885A308D3);
	uint64_t w;

	for (size_t left = len; left;) {
		size_t n = min(left, sizeof(w));

		w = 0;
		memcpy(&w, p, n);
		h = kvmm_hash_combine64(h, w);
		p += n;
		left -= n;
	}
	return kvmm_hash_mix64(h ^ ((uint64_t)len * KVMM_GOLDEN_RATIO_64));
}

#endif /* KVMM_HASH_H */
