// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_ring.c - fuzz_ring's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_ring.c"

#define FUZZ_NAME "ring"
#include "fuzz_seeds.h"
