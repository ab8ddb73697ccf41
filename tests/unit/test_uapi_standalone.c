// SPDX-License-Identifier: MIT
/*
 * Second translation unit of test_uapi: it includes uapi/kvmm.h and nothing before it, so the
 * header must compile on its own, and linking it next to test_uapi.c proves the header defines
 * nothing with external linkage (two copies would clash). It reports what it sees of the ABI so
 * the main test can compare the two units' views.
 */
#include "uapi/kvmm.h"

size_t test_uapi_tu2_sizes(size_t *out, size_t n);
uint64_t test_uapi_tu2_pte(uint32_t frame, uint64_t flags, unsigned int tier, uint64_t slot,
			   int swap);
int test_uapi_tu2_hdr(struct kvmm_msg_hdr *hdr, unsigned int op, uint64_t seq);
const char *test_uapi_tu2_op_name(unsigned int op);

/* Sizes in the order test_uapi.c lists them; returns how many it knows. */
size_t test_uapi_tu2_sizes(size_t *out, size_t n)
{
	const size_t sizes[] = {
		sizeof(struct kvmm_msg_hdr),	       sizeof(struct kvmm_format),
		sizeof(struct kvmm_hello_req),	       sizeof(struct kvmm_hello_rep),
		sizeof(struct kvmm_attach_req),	       sizeof(struct kvmm_attach_rep),
		sizeof(struct kvmm_attach_device),     sizeof(struct kvmm_seq_create_req),
		sizeof(struct kvmm_seq_create_rep),    sizeof(struct kvmm_seq_append_req),
		sizeof(struct kvmm_seq_append_rep),    sizeof(struct kvmm_seq_fork_req),
		sizeof(struct kvmm_seq_fork_rep),      sizeof(struct kvmm_seq_truncate_req),
		sizeof(struct kvmm_seq_free_req),      sizeof(struct kvmm_prefix_lookup_req),
		sizeof(struct kvmm_prefix_lookup_rep), sizeof(struct kvmm_seal_req),
		sizeof(struct kvmm_pin_req),	       sizeof(struct kvmm_pin_rep),
		sizeof(struct kvmm_mag_req),	       sizeof(struct kvmm_mag_rep),
		sizeof(struct kvmm_preempt_event),     sizeof(struct kvmm_shutdown_event),
		sizeof(struct kvmm_admin_req),	       sizeof(struct kvmm_limit_req),
		sizeof(struct kvmm_drop_caches_req),   sizeof(struct kvmm_reclaim_req),
		sizeof(struct kvmm_reclaim_rep),       sizeof(struct kvmm_swapon_req),
		sizeof(struct kvmm_swapoff_req),       sizeof(struct kvmm_seq_blocks_req),
		sizeof(struct kvmm_seq_blocks_rep),    sizeof(struct kvmm_attach_model),
		sizeof(struct kvmm_seq_salt_req),      sizeof(struct kvmm_pin_range_req),
		sizeof(struct kvmm_far_map_rep),       sizeof(struct kvmm_pin_far_req),
		sizeof(struct kvmm_pin_far_rep),
	};
	size_t i, nr = sizeof(sizes) / sizeof(sizes[0]);

	for (i = 0; i < nr && i < n; i++)
		out[i] = sizes[i];
	return nr;
}

uint64_t test_uapi_tu2_pte(uint32_t frame, uint64_t flags, unsigned int tier, uint64_t slot,
			   int swap)
{
	if (swap)
		return kvmm_pte_set_flags(kvmm_pte_mk_swap(tier, slot), flags);
	return kvmm_pte_mk_present(frame, flags);
}

int test_uapi_tu2_hdr(struct kvmm_msg_hdr *hdr, unsigned int op, uint64_t seq)
{
	kvmm_msg_hdr_init(hdr, op, KVMM_MSG_HDR_SIZE, seq);
	return kvmm_msg_hdr_check(hdr, KVMM_MSG_HDR_SIZE);
}

const char *test_uapi_tu2_op_name(unsigned int op)
{
	return kvmm_op_name(op);
}
