// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_cuda_simt.c - test_cuda.c's cases with the fake CUDA driver in SIMT mode
 * (tests/fakecuda/simt.h): kernels/cuda's kernels, built for the host from the same .cu
 * files, checked against the CPU kernels through the real host wrappers (kernels/cuda/cuda.c)
 * on machines without a GPU.  It checks the kernels' logic (indexing, the decode plan and its
 * shared-memory layout, barriers, shuffles, cp.async, split and merge), not their speed.
 */
#define KVMM_TEST_SIMT 1
#include "test_cuda.c"
