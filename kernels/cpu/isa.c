// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/isa.c - which vector code the CPU kernels run.
 *
 * At the first kernel call (or the first kvmm_cpu_isa_get) the best ISA this CPU supports is
 * chosen, unless KVMM_KERNEL_ISA names one (scalar, avx2, avx512): tests and benchmarks use it
 * to compare the variants, and a forced ISA the CPU lacks is refused with a warning rather
 * than run into SIGILL.  The choice is one word read with relaxed atomics on every call; a
 * racing first use computes the same answer twice, which is harmless.
 * Support means the instructions and the OS saving their registers: __builtin_cpu_supports
 * checks both for AVX2, FMA and AVX-512; F16C (vcvtph2ps), which it cannot name on clang 14,
 * comes from CPUID leaf 1 (ECX bit 29) and every CPU with AVX2 has it anyway.
 */
#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define ISA_UNSET (-1)

static int isa_now = ISA_UNSET;

static const char *const isa_names[KVMM_CPU_ISA_COUNT] = {
	[KVMM_CPU_ISA_SCALAR] = "scalar",
	[KVMM_CPU_ISA_AVX2] = "avx2",
	[KVMM_CPU_ISA_AVX512] = "avx512",
};

const char *kvmm_cpu_isa_name(enum kvmm_cpu_isa isa)
{
	return (unsigned int)isa < KVMM_CPU_ISA_COUNT ? isa_names[isa] : "?";
}

static bool has_f16c(void)
{
	unsigned int a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	return c & bit_F16C;
}

bool kvmm_cpu_isa_supported(enum kvmm_cpu_isa isa)
{
	__builtin_cpu_init();
	switch (isa) {
	case KVMM_CPU_ISA_SCALAR:
		return true;
	case KVMM_CPU_ISA_AVX2:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       has_f16c();
	case KVMM_CPU_ISA_AVX512:
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && has_f16c();
	default:
		return false;
	}
}

static enum kvmm_cpu_isa isa_choose(void)
{
	const char *env = getenv("KVMM_KERNEL_ISA");
	int isa;

	if (env && *env) {
		for (isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++)
			if (!strcmp(env, isa_names[isa]))
				break;
		if (isa == KVMM_CPU_ISA_COUNT)
			fprintf(stderr,
				"kvmm: KVMM_KERNEL_ISA=%s is not scalar|avx2|avx512; ignored\n",
				env);
		else if (!kvmm_cpu_isa_supported(isa))
			fprintf(stderr,
				"kvmm: KVMM_KERNEL_ISA=%s: not supported by this CPU; ignored\n",
				env);
		else
			return isa;
	}
	for (isa = KVMM_CPU_ISA_COUNT - 1; isa > KVMM_CPU_ISA_SCALAR; isa--)
		if (kvmm_cpu_isa_supported(isa))
			return isa;
	return KVMM_CPU_ISA_SCALAR;
}

enum kvmm_cpu_isa kvmm_cpu_isa_get(void)
{
	int isa = __atomic_load_n(&isa_now, __ATOMIC_RELAXED);

	if (isa == ISA_UNSET) {
		isa = isa_choose();
		__atomic_store_n(&isa_now, isa, __ATOMIC_RELAXED);
	}
	return isa;
}

int kvmm_cpu_isa_set(enum kvmm_cpu_isa isa)
{
	if (!kvmm_cpu_isa_supported(isa))
		return -ENOTSUP;
	__atomic_store_n(&isa_now, (int)isa, __ATOMIC_RELAXED);
	return 0;
}

const struct kvmm_cpu_ops *kvmm_cpu_ops(uint32_t dtype)
{
	static const struct kvmm_cpu_ops *const tables[KVMM_CPU_ISA_COUNT] = {
		[KVMM_CPU_ISA_SCALAR] = kvmm_cpu_ops_scalar,
		[KVMM_CPU_ISA_AVX2] = kvmm_cpu_ops_avx2,
		[KVMM_CPU_ISA_AVX512] = kvmm_cpu_ops_avx512,
	};

	return &tables[kvmm_cpu_isa_get()][dtype];
}
