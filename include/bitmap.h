/* SPDX-License-Identifier: MIT */
/*
 * bitmap.h - bitmaps stored as arrays of unsigned long, bit nr living in word
 * nr / BITS_PER_LONG at position nr % BITS_PER_LONG. Swap slot maps, free-chunk maps and
 * per-frame flag words use them. Plain operations (bitmap_set_bit, ...) are for a bitmap one
 * owner serializes; the *_atomic and *_lock/_unlock operations use lock-free __atomic
 * read-modify-writes on the containing word, so they are also correct on a bitmap in shared
 * memory updated by several processes. Search results are bit numbers, with the bitmap's
 * size meaning "none". Bits of the last word past the size are ignored by every search and
 * count, and kept zero by bitmap_fill.
 */
#ifndef KVMM_BITMAP_H
#define KVMM_BITMAP_H

#include <string.h>

#include "compiler.h"

#define BITS_PER_LONG (__SIZEOF_LONG__ * CHAR_BIT)
#define BITS_TO_LONGS(nbits) DIV_ROUND_UP(nbits, BITS_PER_LONG)
#define BIT_WORD(nr) ((nr) / BITS_PER_LONG)
#define BIT_MASK(nr) (1UL << ((nr) % BITS_PER_LONG))
/* The valid bits of the last word of an nbits-long bitmap. */
#define BITMAP_LAST_WORD_MASK(nbits) \
	(((nbits) % BITS_PER_LONG) ? (1UL << ((nbits) % BITS_PER_LONG)) - 1 : ~0UL)

/* An nbits-long bitmap variable or struct member (uninitialized unless static). */
#define DECLARE_BITMAP(name, nbits) unsigned long name[BITS_TO_LONGS(nbits)]

static inline size_t bitmap_size(unsigned long nbits)
{
	return BITS_TO_LONGS(nbits) * sizeof(unsigned long);
}

static inline void bitmap_zero(unsigned long *map, unsigned long nbits)
{
	memset(map, 0, bitmap_size(nbits));
}

/* Set bits [0, nbits); the unused tail of the last word is cleared. */
static inline void bitmap_fill(unsigned long *map, unsigned long nbits)
{
	unsigned long full = nbits / BITS_PER_LONG;

	memset(map, 0xff, full * sizeof(unsigned long));
	if (nbits % BITS_PER_LONG)
		map[full] = BITMAP_LAST_WORD_MASK(nbits);
}

static inline void bitmap_copy(unsigned long *dst, const unsigned long *src, unsigned long nbits)
{
	memcpy(dst, src, bitmap_size(nbits));
}

/* ------------------------------------------------------------------------------------ */
/* Single bits, not atomic: the caller serializes all writers of the word */

static inline void bitmap_set_bit(unsigned long *map, unsigned long nr)
{
	map[BIT_WORD(nr)] |= BIT_MASK(nr);
}

static inline void bitmap_clear_bit(unsigned long *map, unsigned long nr)
{
	map[BIT_WORD(nr)] &= ~BIT_MASK(nr);
}

static inline bool bitmap_test_bit(const unsigned long *map, unsigned long nr)
{
	return map[BIT_WORD(nr)] & BIT_MASK(nr);
}

/* Set bit nr and return its old value. */
static inline bool bitmap_test_and_set_bit(unsigned long *map, unsigned long nr)
{
	bool old = bitmap_test_bit(map, nr);

	map[BIT_WORD(nr)] |= BIT_MASK(nr);
	return old;
}

/* Clear bit nr and return its old value. */
static inline bool bitmap_test_and_clear_bit(unsigned long *map, unsigned long nr)
{
	bool old = bitmap_test_bit(map, nr);

	map[BIT_WORD(nr)] &= ~BIT_MASK(nr);
	return old;
}

/* ------------------------------------------------------------------------------------ */
/* Single bits, atomic (safe against concurrent writers, also across processes) */

/* Relaxed: no ordering of other memory against the set. */
static inline void bitmap_set_bit_atomic(unsigned long *map, unsigned long nr)
{
	__atomic_fetch_or(&map[BIT_WORD(nr)], BIT_MASK(nr), __ATOMIC_RELAXED);
}

/* Relaxed: no ordering of other memory against the clear. */
static inline void bitmap_clear_bit_atomic(unsigned long *map, unsigned long nr)
{
	__atomic_fetch_and(&map[BIT_WORD(nr)], ~BIT_MASK(nr), __ATOMIC_RELAXED);
}

/* A relaxed, untorn read of bit nr while others may be changing the word. */
static inline bool bitmap_test_bit_atomic(const unsigned long *map, unsigned long nr)
{
	return __atomic_load_n(&map[BIT_WORD(nr)], __ATOMIC_RELAXED) & BIT_MASK(nr);
}

/* Fully ordered (as smp_mb before and after): returns the old value of bit nr. */
static inline bool bitmap_test_and_set_bit_atomic(unsigned long *map, unsigned long nr)
{
	return __atomic_fetch_or(&map[BIT_WORD(nr)], BIT_MASK(nr), __ATOMIC_SEQ_CST) & BIT_MASK(nr);
}

/* Fully ordered (as smp_mb before and after): returns the old value of bit nr. */
static inline bool bitmap_test_and_clear_bit_atomic(unsigned long *map, unsigned long nr)
{
	return __atomic_fetch_and(&map[BIT_WORD(nr)], ~BIT_MASK(nr), __ATOMIC_SEQ_CST) &
	       BIT_MASK(nr);
}

/*
 * Bit locks (a frame's LOCKED flag): test_and_set_bit_lock is an acquire, so accesses in the
 * critical section cannot move before taking the bit; clear_bit_unlock is a release, so they
 * cannot move after dropping it. Returns true when the bit was already set (not acquired).
 */
static inline bool bitmap_test_and_set_bit_lock(unsigned long *map, unsigned long nr)
{
	return __atomic_fetch_or(&map[BIT_WORD(nr)], BIT_MASK(nr), __ATOMIC_ACQUIRE) & BIT_MASK(nr);
}

static inline void bitmap_clear_bit_unlock(unsigned long *map, unsigned long nr)
{
	__atomic_fetch_and(&map[BIT_WORD(nr)], ~BIT_MASK(nr), __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------------------ */
/* Ranges */

/* Set bits [start, start + len). */
static inline void bitmap_set(unsigned long *map, unsigned long start, unsigned long len)
{
	unsigned long *p = map + BIT_WORD(start);
	unsigned long end = start + len;
	unsigned long mask = ~0UL << (start % BITS_PER_LONG);

	if (!len)
		return;
	/* Whole words from start's word up to, not including, the word of the last bit. */
	while (BIT_WORD(start) < BIT_WORD(end - 1)) {
		*p++ |= mask;
		start = ALIGN_DOWN(start, BITS_PER_LONG) + BITS_PER_LONG;
		mask = ~0UL;
	}
	*p |= mask & BITMAP_LAST_WORD_MASK(end);
}

/* Clear bits [start, start + len). */
static inline void bitmap_clear(unsigned long *map, unsigned long start, unsigned long len)
{
	unsigned long *p = map + BIT_WORD(start);
	unsigned long end = start + len;
	unsigned long mask = ~0UL << (start % BITS_PER_LONG);

	if (!len)
		return;
	while (BIT_WORD(start) < BIT_WORD(end - 1)) {
		*p++ &= ~mask;
		start = ALIGN_DOWN(start, BITS_PER_LONG) + BITS_PER_LONG;
		mask = ~0UL;
	}
	*p &= ~(mask & BITMAP_LAST_WORD_MASK(end));
}

/* ------------------------------------------------------------------------------------ */
/* Searching and counting */

/*
 * First bit >= start in [0, size) that is set in map ^ invert (invert = 0: set bits,
 * invert = ~0UL: clear bits); size when there is none.
 */
static inline unsigned long kvmm_bitmap_find_next(const unsigned long *map, unsigned long size,
						  unsigned long start, unsigned long invert)
{
	unsigned long idx, word, bit;

	if (start >= size)
		return size;
	idx = BIT_WORD(start);
	word = (map[idx] ^ invert) & (~0UL << (start % BITS_PER_LONG));
	while (!word) {
		idx++;
		if (idx >= BITS_TO_LONGS(size))
			return size;
		word = map[idx] ^ invert;
	}
	bit = idx * BITS_PER_LONG + (unsigned long)__builtin_ctzl(word);
	/* A hit in the tail of the last word, past size, is no hit. */
	return bit < size ? bit : size;
}

static inline unsigned long find_next_bit(const unsigned long *map, unsigned long size,
					  unsigned long start)
{
	return kvmm_bitmap_find_next(map, size, start, 0);
}

static inline unsigned long find_next_zero_bit(const unsigned long *map, unsigned long size,
					       unsigned long start)
{
	return kvmm_bitmap_find_next(map, size, start, ~0UL);
}

static inline unsigned long find_first_bit(const unsigned long *map, unsigned long size)
{
	return kvmm_bitmap_find_next(map, size, 0, 0);
}

static inline unsigned long find_first_zero_bit(const unsigned long *map, unsigned long size)
{
	return kvmm_bitmap_find_next(map, size, 0, ~0UL);
}

/* Highest set bit in [0, size); size when none is set. */
static inline unsigned long find_last_bit(const unsigned long *map, unsigned long size)
{
	unsigned long idx, word;

	if (!size)
		return size;
	idx = BIT_WORD(size - 1);
	word = map[idx] & BITMAP_LAST_WORD_MASK(size);
	for (;;) {
		if (word)
			return idx * BITS_PER_LONG + BITS_PER_LONG - 1 -
			       (unsigned long)__builtin_clzl(word);
		if (!idx)
			return size;
		word = map[--idx];
	}
}

/*
 * First index >= start of a run of nr clear bits inside [0, size); size when there is no
 * such run. For allocating contiguous slots (a swap cluster).
 */
static inline unsigned long bitmap_find_next_zero_area(const unsigned long *map, unsigned long size,
						       unsigned long start, unsigned long nr)
{
	for (;;) {
		unsigned long index = find_next_zero_bit(map, size, start);
		unsigned long busy;

		if (index >= size || nr > size - index)
			return size;
		busy = find_next_bit(map, index + nr, index);
		if (busy >= index + nr)
			return index;
		start = busy + 1;
	}
}

/* Number of set bits in [0, nbits). */
static inline unsigned long bitmap_weight(const unsigned long *map, unsigned long nbits)
{
	unsigned long full = nbits / BITS_PER_LONG;
	unsigned long w = 0;

	for (unsigned long i = 0; i < full; i++)
		w += (unsigned long)__builtin_popcountl(map[i]);
	if (nbits % BITS_PER_LONG)
		w += (unsigned long)__builtin_popcountl(map[full] & BITMAP_LAST_WORD_MASK(nbits));
	return w;
}

static inline bool bitmap_empty(const unsigned long *map, unsigned long nbits)
{
	return find_first_bit(map, nbits) >= nbits;
}

static inline bool bitmap_full(const unsigned long *map, unsigned long nbits)
{
	return find_first_zero_bit(map, nbits) >= nbits;
}

/* bit walks the set (clear) bits of [0, size) upwards; bits may be changed in the body. */
#define for_each_set_bit(bit, map, size)                        \
	for ((bit) = find_first_bit(map, size); (bit) < (size); \
	     (bit) = find_next_bit(map, size, (bit) + 1))

#define for_each_clear_bit(bit, map, size)                           \
	for ((bit) = find_first_zero_bit(map, size); (bit) < (size); \
	     (bit) = find_next_zero_bit(map, size, (bit) + 1))

#endif /* KVMM_BITMAP_H */
