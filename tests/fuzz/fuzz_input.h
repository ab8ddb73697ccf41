/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz_input.h - reading a fuzz input as a stream of little-endian integers.
 * Past the end every read gives 0, so any input decodes to something.  Each byte is read in
 * its own statement: the operands of | are evaluated in an unspecified order, and an input
 * must decode the same way under every compiler.
 */
#ifndef KVMM_TESTS_FUZZ_INPUT_H
#define KVMM_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct in {
	const uint8_t *p;
	size_t n;
};

static inline uint32_t u8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint32_t u16(struct in *in)
{
	uint32_t lo = u8(in);

	return lo | u8(in) << 8;
}

static inline uint32_t u32(struct in *in)
{
	uint32_t lo = u16(in);

	return lo | u16(in) << 16;
}

static inline uint64_t u64(struct in *in)
{
	uint64_t lo = u32(in);

	return lo | (uint64_t)u32(in) << 32;
}

#endif /* KVMM_TESTS_FUZZ_INPUT_H */
