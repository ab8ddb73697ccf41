// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_kernels.c - fuzz_kernels's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_kernels.c"

#define FUZZ_NAME "kernels"
#include "fuzz_seeds.h"
