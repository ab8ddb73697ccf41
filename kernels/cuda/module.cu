// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/module.cu - the one translation unit nvcc compiles into kernels/cuda/kvmm.fatbin
 * (SASS for sm_80 and sm_90, PTX for compute_90 so newer GPUs JIT it), which fatbin.c embeds
 * and cuda.c loads with cuModuleLoadData.  It includes the kernel files so that the module is
 * one compilation (one fatbin, one load) while each concept keeps its own file.  Every entry
 * point is extern "C", so cuModuleGetFunction finds it by its plain name; abi.h lists them.
 */
#include "common.cuh"
#include "device.cuh"

#include "attn.cu"
#include "attn_tc.cu"
#include "cache.cu"
#include "copy.cu"
