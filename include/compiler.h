/* SPDX-License-Identifier: MIT */
/*
 * compiler.h - the small vocabulary every kvmm file speaks: attributes, branch hints,
 * compile-time checks, type-checked container_of/min/max, alignment and power-of-two
 * arithmetic, overflow-checked arithmetic, READ_ONCE/WRITE_ONCE and the KVMM_BUG_ON /
 * KVMM_WARN_ON assertions. Everything here is a macro or a static inline, except the cold
 * reporting functions behind KVMM_BUG_ON/KVMM_WARN_ON, which live in lib/bug.c so that the
 * error path costs one call in the caller. The macros lean on GNU C (statement expressions,
 * __typeof__, __auto_type, __builtin_*): kvmm builds as gnu11 with gcc or clang, and these
 * headers are C only.
 */
#ifndef KVMM_COMPILER_H
#define KVMM_COMPILER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------ */
/* Attributes */

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define __must_check __attribute__((__warn_unused_result__))
#define __maybe_unused __attribute__((__unused__))
#define __used __attribute__((__used__))
/* glibc's <sys/cdefs.h> also defines __always_inline (equivalently) and #undefs it first. */
#undef __always_inline
#define __always_inline inline __attribute__((__always_inline__))
#define __noinline __attribute__((__noinline__))
#define __packed __attribute__((__packed__))
#define __aligned(n) __attribute__((__aligned__(n)))
#define __noreturn __attribute__((__noreturn__))
#define __cold __attribute__((__cold__))
#define __pure __attribute__((__pure__))
#define __printf(fmt_idx, first_arg) __attribute__((__format__(__printf__, fmt_idx, first_arg)))
#define __weak __attribute__((__weak__))
/* Marks an intentional switch fall-through (-Wimplicit-fallthrough is part of -Wextra). */
#define fallthrough __attribute__((__fallthrough__))

/*
 * Cache line size used to keep independently written fields (ring heads and tails,
 * per-client counters) apart. 64 bytes is right for x86-64 and most arm64 parts.
 */
#define KVMM_CACHELINE_SIZE 64
#define __cacheline_aligned __aligned(KVMM_CACHELINE_SIZE)

/* Compiler-only barrier: the compiler may not move memory accesses across it. */
#define barrier() __asm__ __volatile__("" ::: "memory")
#define unreachable() __builtin_unreachable()

#define __KVMM_STRINGIFY_(x) #x
/* Turns the expansion of a macro into a string literal. */
#define __stringify(x) __KVMM_STRINGIFY_(x)
#define __KVMM_PASTE_(a, b) a##b
#define __KVMM_PASTE(a, b) __KVMM_PASTE_(a, b)
/* A fresh identifier per use, so nested macros never shadow each other's locals. */
#define __KVMM_UNIQUE(prefix) __KVMM_PASTE(__kvmm_##prefix##_, __COUNTER__)

/* ------------------------------------------------------------------------------------ */
/* Compile-time checks */

#define __same_type(a, b) __builtin_types_compatible_p(__typeof__(a), __typeof__(b))

/* Fails the build when cond is true. Usable at file scope and in blocks. */
#define BUILD_BUG_ON_MSG(cond, msg) _Static_assert(!(cond), msg)
#define BUILD_BUG_ON(cond) BUILD_BUG_ON_MSG(cond, "BUILD_BUG_ON(" #cond ")")

/*
 * Expression form: fails the build when e is true, otherwise is the int constant 0, so it
 * can be added into a larger constant expression (see ARRAY_SIZE).
 */
#define BUILD_BUG_ON_ZERO_MSG(e, msg)             \
	((int)(sizeof(struct {                    \
		       _Static_assert(!(e), msg); \
		       char __kvmm_c;             \
	       }) -                               \
	       1))
#define BUILD_BUG_ON_ZERO(e) BUILD_BUG_ON_ZERO_MSG(e, "BUILD_BUG_ON_ZERO(" #e ")")

/* An array decays to a pointer to its first element; a pointer is already one. */
#define __must_be_array(a) BUILD_BUG_ON_ZERO_MSG(__same_type((a), &(a)[0]), "not an array")

/* Number of elements of an array; does not build when given a pointer. */
#define ARRAY_SIZE(arr) (sizeof(arr) / sizeof((arr)[0]) + __must_be_array(arr))

#define sizeof_field(type, member) sizeof(((type *)0)->member)
#define offsetofend(type, member) (offsetof(type, member) + sizeof_field(type, member))

/*
 * container_of - the structure that embeds *ptr as its member @member. The build fails when
 * ptr does not point to something of member's type (a void * is accepted unchecked).
 */
#define container_of(ptr, type, member) __container_of(ptr, type, member, __KVMM_UNIQUE(mptr))
#define __container_of(ptr, type, member, mp)                                 \
	({                                                                    \
		char *mp = (char *)(ptr);                                     \
		BUILD_BUG_ON_MSG(!__same_type(*(ptr), ((type *)0)->member) && \
					 !__same_type(*(ptr), void),          \
				 "pointer type mismatch in container_of()");  \
		((type *)(void *)(mp - offsetof(type, member)));              \
	})

/* ------------------------------------------------------------------------------------ */
/* min / max / clamp / swap: each argument evaluated once */

/*
 * min and max refuse arguments of different types (comparing &a with &b of distinct pointer
 * types is a diagnostic both compilers turn into an error under -Werror), because a signed
 * int compared with an unsigned size silently converts. Use min_t/max_t to pick a type.
 */
#define __kvmm_cmp(a, b, op, ua, ub)  \
	({                            \
		__auto_type ua = (a); \
		__auto_type ub = (b); \
		(void)(&ua == &ub);   \
		ua op ub ? ua : ub;   \
	})
#define __kvmm_cmp_t(type, a, b, op, ua, ub) \
	({                                   \
		type ua = (a);               \
		type ub = (b);               \
		ua op ub ? ua : ub;          \
	})

#define min(a, b) __kvmm_cmp(a, b, <, __KVMM_UNIQUE(min_a), __KVMM_UNIQUE(min_b))
#define max(a, b) __kvmm_cmp(a, b, >, __KVMM_UNIQUE(max_a), __KVMM_UNIQUE(max_b))
#define min_t(type, a, b) __kvmm_cmp_t(type, a, b, <, __KVMM_UNIQUE(min_a), __KVMM_UNIQUE(min_b))
#define max_t(type, a, b) __kvmm_cmp_t(type, a, b, >, __KVMM_UNIQUE(max_a), __KVMM_UNIQUE(max_b))
/* val limited to [lo, hi]; all three of one type, lo <= hi. */
#define clamp(val, lo, hi) min(max(val, lo), hi)
#define clamp_t(type, val, lo, hi) min_t(type, max_t(type, val, lo), hi)

#define swap(a, b) __kvmm_swap(a, b, __KVMM_UNIQUE(swap_tmp))
#define __kvmm_swap(a, b, t)           \
	do {                           \
		__typeof__(a) t = (a); \
		(a) = (b);             \
		(b) = t;               \
	} while (0)

/* ------------------------------------------------------------------------------------ */
/* Alignment and rounding (a must be a power of two; x evaluated once in ALIGN*) */

#define __ALIGN_MASK(x, mask) (((x) + (mask)) & ~(mask))
/* Round x up to a multiple of a, in x's type. */
#define ALIGN(x, a) __ALIGN_MASK(x, (__typeof__(x))(a)-1)
/* Round x down to a multiple of a, in x's type. */
#define ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a)-1))
#define IS_ALIGNED(x, a) (((x) & ((__typeof__(x))(a)-1)) == 0)
#define PTR_ALIGN(p, a) ((__typeof__(p))ALIGN((uintptr_t)(p), (a)))
#define PTR_IS_ALIGNED(p, a) IS_ALIGNED((uintptr_t)(p), (a))
/* True for 1, 2, 4, ...; false for 0. n is evaluated more than once: use constants. */
#define IS_POWER_OF_2(n) ((n) != 0 && ((n) & ((n)-1)) == 0)
/* n / d rounded up, without the overflow of (n + d - 1) / d. Evaluates n and d twice. */
#define DIV_ROUND_UP(n, d) ((n) / (d) + !!((n) % (d)))

/* ------------------------------------------------------------------------------------ */
/* Bit scanning on 64-bit values */

/* Position (1-based) of the most significant set bit; 0 when x == 0. fls64(1) == 1. */
static inline unsigned int fls64(uint64_t x)
{
	return x ? 64 - (unsigned int)__builtin_clzll(x) : 0;
}

/* Position (1-based) of the least significant set bit; 0 when x == 0. ffs64(1) == 1. */
static inline unsigned int ffs64(uint64_t x)
{
	return x ? (unsigned int)__builtin_ctzll(x) + 1 : 0;
}

/* floor(log2(n)); -1 when n == 0. */
static inline int ilog2(uint64_t n)
{
	return (int)fls64(n) - 1;
}

/* Smallest power of two >= n (1 for n <= 1); 0 when that does not fit in 64 bits. */
static inline uint64_t roundup_pow_of_two(uint64_t n)
{
	if (n <= 1)
		return 1;
	if (n > (UINT64_C(1) << 63))
		return 0;
	return UINT64_C(1) << fls64(n - 1);
}

/* Largest power of two <= n; 0 when n == 0. */
static inline uint64_t rounddown_pow_of_two(uint64_t n)
{
	return n ? UINT64_C(1) << (fls64(n) - 1) : 0;
}

/* ceil(log2(n)): the buddy order that holds n units; 0 for n <= 1. */
static inline unsigned int order_base_2(uint64_t n)
{
	return n <= 1 ? 0 : fls64(n - 1);
}

/* ------------------------------------------------------------------------------------ */
/* Overflow-checked arithmetic */

static inline __must_check bool __kvmm_must_check_overflow(bool overflow)
{
	return unlikely(overflow);
}

/*
 * check_{add,sub,mul}_overflow(a, b, d): *d = a op b computed in infinite precision and
 * converted to *d's type; returns true (and the wrapped value in *d) when it did not fit.
 * The result must be used.
 */
#define check_add_overflow(a, b, d) __kvmm_must_check_overflow(__builtin_add_overflow(a, b, d))
#define check_sub_overflow(a, b, d) __kvmm_must_check_overflow(__builtin_sub_overflow(a, b, d))
#define check_mul_overflow(a, b, d) __kvmm_must_check_overflow(__builtin_mul_overflow(a, b, d))

/* n * size for an allocation, saturating at SIZE_MAX so that malloc fails on overflow. */
static inline size_t array_size(size_t n, size_t size)
{
	size_t bytes;

	if (check_mul_overflow(n, size, &bytes))
		return SIZE_MAX;
	return bytes;
}

/* ------------------------------------------------------------------------------------ */
/* READ_ONCE / WRITE_ONCE */

/*
 * One untorn load or store of an integer, enum, bool or pointer variable that another thread
 * or process may change concurrently. They are relaxed atomics: the compiler may not tear,
 * fuse, repeat or invent the access, and the C11 model sees no data race; they order
 * nothing (use the barriers in atomic.h for that).
 */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, val) __atomic_store_n(&(x), (val), __ATOMIC_RELAXED)

/* ------------------------------------------------------------------------------------ */
/* Assertions (reporting in lib/bug.c) */

/* Logs "BUG: <expr> at file:line (func)" at error level and aborts. expr may be NULL. */
__noreturn __cold void kvmm_bug(const char *file, int line, const char *func, const char *expr);
/* Logs "WARNING: <expr> at file:line (func)" at warning level and returns. */
__cold void kvmm_warn_report(const char *file, int line, const char *func, const char *expr);

/*
 * KVMM_BUG_ON(cond): cond is evaluated in every build; when true the process logs where and
 * aborts (leaving a core dump). For invariants whose violation means the shared state can no
 * longer be trusted. KVMM_BUG() aborts unconditionally.
 */
#define KVMM_BUG_ON(cond)                                              \
	do {                                                           \
		if (unlikely(cond))                                    \
			kvmm_bug(__FILE__, __LINE__, __func__, #cond); \
	} while (0)
#define KVMM_BUG() kvmm_bug(__FILE__, __LINE__, __func__, NULL)

/*
 * KVMM_WARN_ON(cond): logs a warning when cond is true and evaluates to cond, so it can guard
 * a recovery path: if (KVMM_WARN_ON(refcount < 0)) return -EINVAL;
 * KVMM_WARN_ON_ONCE warns only on the first true evaluation at that call site.
 */
#define KVMM_WARN_ON(cond) __KVMM_WARN_ON(cond, __KVMM_UNIQUE(warn))
#define __KVMM_WARN_ON(cond, w)                                                \
	({                                                                     \
		bool w = !!(cond);                                             \
		if (unlikely(w))                                               \
			kvmm_warn_report(__FILE__, __LINE__, __func__, #cond); \
		w;                                                             \
	})
#define KVMM_WARN_ON_ONCE(cond) __KVMM_WARN_ON_ONCE(cond, __KVMM_UNIQUE(warn), __KVMM_UNIQUE(once))
#define __KVMM_WARN_ON_ONCE(cond, w, once)                                              \
	({                                                                              \
		static bool once;                                                       \
		bool w = !!(cond);                                                      \
		if (unlikely(w) && !__atomic_exchange_n(&once, true, __ATOMIC_RELAXED)) \
			kvmm_warn_report(__FILE__, __LINE__, __func__, #cond);          \
		w;                                                                      \
	})

#endif /* KVMM_COMPILER_H */
