// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_config.c - fuzz_config's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_config.c"

#define FUZZ_NAME "config"
#include "fuzz_seeds.h"
