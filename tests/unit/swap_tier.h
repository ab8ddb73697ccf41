/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/swap_tier.h - swapon of a host-memory or an NVMe tier for the unit tests that
 * build their own pools, the NVMe one skipped (with the reason) where this machine cannot
 * run io_uring O_DIRECT on the test's file system.  Include after <cmocka.h>, <errno.h>,
 * <stdio.h>, <string.h> and "kvmm/swap.h".
 */
#ifndef KVMM_TESTS_SWAP_TIER_H
#define KVMM_TESTS_SWAP_TIER_H

/* Tier id of slots pages of page_size bytes in host memory, at priority prio: kvmm_swapon()'s. */
static inline int swapon_host(struct kvmm_pool *pool, unsigned int id, int prio, uint32_t slots,
			      uint64_t page_size)
{
	struct kvmm_swap_tier_params p = {.tier = id, .priority = prio, .size = slots * page_size};

	return kvmm_swapon(pool, &kvmm_swap_host_ops, &p);
}

/*
 * The same in a swap file at path, queue depth qd: kvmm_swapon()'s result, or skip() when
 * the machine cannot run the tier (ENOSYS, EPERM, EOPNOTSUPP: no io_uring, not allowed, no
 * O_DIRECT).
 */
static inline int swapon_nvme(struct kvmm_pool *pool, unsigned int id, int prio, uint32_t slots,
			      uint64_t page_size, const char *path, uint32_t qd)
{
	struct kvmm_swap_tier_params p = {.tier = id,
					  .priority = prio,
					  .size = slots * page_size,
					  .path = path,
					  .queue_depth = qd};
	int ret = kvmm_swapon(pool, &kvmm_swap_nvme_ops, &p);

	if (ret == -ENOSYS || ret == -EPERM || ret == -EOPNOTSUPP) {
		print_message("nvme tier unavailable here (%s): skipped\n", strerror(-ret));
		skip();
	}
	return ret;
}

#endif /* KVMM_TESTS_SWAP_TIER_H */
