// SPDX-License-Identifier: MIT
/* tests/unit/test_seeds_session.c - fuzz_session's committed seeds, replayed (fuzz_seeds.h) */
#include "tests/fuzz/fuzz_session.c"

#define FUZZ_NAME "session"
#include "fuzz_seeds.h"
