/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/check_inv.h - kvmm_check_invariants() over a whole pool as a cmocka assertion,
 * for the unit tests that build their own pools (the ones on mm_fixture use mmf_check()).
 * Include after <cmocka.h> and "kvmm/mm.h".
 */
#ifndef KVMM_TESTS_CHECK_INV_H
#define KVMM_TESTS_CHECK_INV_H

/* The pool's invariants hold, else the test fails with kvmm_check_invariants()' reason. */
static inline void check_inv(struct kvmm_pool *pool)
{
	char why[256];
	int ret = kvmm_check_invariants(pool, why, sizeof(why));

	if (ret)
		print_error("invariants: %s\n", why);
	assert_int_equal(ret, 0);
}

#endif /* KVMM_TESTS_CHECK_INV_H */
