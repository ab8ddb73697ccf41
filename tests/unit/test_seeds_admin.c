// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_admin.c - fuzz_admin's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_admin.c"

#define FUZZ_NAME "admin"
#include "fuzz_seeds.h"
