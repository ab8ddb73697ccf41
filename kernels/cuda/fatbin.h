/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/fatbin.h - the module image embedded in libkvmm (fatbin.c), for cuda.c and the
 * tests.  Not part of the public API (kvmm_cuda.h): libkvmm.so does not export it.
 */
#ifndef KVMM_KERNELS_CUDA_FATBIN_H
#define KVMM_KERNELS_CUDA_FATBIN_H

#include <stdbool.h>
#include <stddef.h>

/* The embedded fatbin (fatbin.c) and a check of its header (magic, version, sizes). */
extern const unsigned char kvmm_cuda_fatbin[];
extern const size_t kvmm_cuda_fatbin_size;
#define KVMM_CUDA_FATBIN_MAGIC 0xba55ed50u
bool kvmm_cuda_fatbin_valid(const void *image, size_t bytes);

#endif /* KVMM_KERNELS_CUDA_FATBIN_H */
