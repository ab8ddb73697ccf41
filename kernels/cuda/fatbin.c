// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/fatbin.c - the CUDA module, kernels/cuda/kvmm.fatbin (built by nvcc from
 * module.cu), embedded in the object as kvmm_cuda_fatbin.
 *
 * The bytes come in with the assembler's .incbin, which needs no generated source and keeps
 * what `ld -r -b binary` does not: an aligned symbol (cuModuleLoadData reads the fatbin header
 * as 8-byte words; we align to 64), a non-executable-stack note (this is a C file), and a size
 * the C code can read as an object.  KVMM_CUDA_FATBIN is the file's path, set by the Kbuild file,
 * and the Kbuild file makes this object depend on it.
 */
#include <stddef.h>

#include "kernels/cuda/fatbin.h"

#ifndef KVMM_CUDA_FATBIN
#error "KVMM_CUDA_FATBIN (the path of kvmm.fatbin) must be defined by the build"
#endif

__asm__(".section .rodata\n"
	".balign 64\n"
	".globl kvmm_cuda_fatbin\n"
	".hidden kvmm_cuda_fatbin\n" /* libkvmm-internal: not exported from the .so */
	".type kvmm_cuda_fatbin, @object\n"
	"kvmm_cuda_fatbin:\n"
	".incbin \"" KVMM_CUDA_FATBIN "\"\n"
	"kvmm_cuda_fatbin_end:\n"
	".size kvmm_cuda_fatbin, kvmm_cuda_fatbin_end - kvmm_cuda_fatbin\n"
	".balign 8\n"
	".globl kvmm_cuda_fatbin_size\n"
	".hidden kvmm_cuda_fatbin_size\n"
	".type kvmm_cuda_fatbin_size, @object\n"
	"kvmm_cuda_fatbin_size:\n"
	".quad kvmm_cuda_fatbin_end - kvmm_cuda_fatbin\n"
	".size kvmm_cuda_fatbin_size, 8\n"
	".previous\n");
