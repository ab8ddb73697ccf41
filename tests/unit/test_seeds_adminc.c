// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_adminc.c - fuzz_adminc's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_adminc.c"

#define FUZZ_NAME "adminc"
#include "fuzz_seeds.h"
