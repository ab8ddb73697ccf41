// SPDX-License-Identifier: MIT
/*
 * runtime/prefetch.c - kvmm_prefetch(): tell kvmmd which sequences the next step will run, so
 * that it starts reading their swapped pages back while this step computes.  One PREFETCH
 * request per record's worth of ids; the daemon answers as soon as the reads are started (it
 * never waits for them), and the PIN of the next step finds the pages resident or joins the
 * reads in flight.  Nothing is pinned, so there is nothing to undo on an error.
 */
#include <errno.h>
#include <pthread.h>

#include "runtime/libkvmm.h"

int kvmm_prefetch(kvmm_client_t *c, const uint64_t *seqs, uint32_t nr_seqs, uint32_t *nr_started)
{
	uint32_t done = 0, started = 0;
	size_t per;
	int err = 0;

	if (!c || (nr_seqs && !seqs))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	per = (kvmm_msg_payload_max(c) - sizeof(struct kvmm_pin_req)) / sizeof(uint64_t);
	while (done < nr_seqs) {
		uint32_t k = nr_seqs - done > per ? (uint32_t)per : nr_seqs - done;
		struct kvmm_pin_req req = {.nr_seqs = k};
		struct kvmm_iov parts[2] = {{&req, sizeof(req)},
					    {seqs + done, k * sizeof(uint64_t)}};
		struct kvmm_pin_rep rep;

		err = kvmm_msg_call(c, KVMM_OP_PREFETCH, parts, 2, &rep, sizeof(rep));
		if (err)
			break;
		started += rep.nr_swapin;
		done += k;
	}
	pthread_mutex_unlock(&c->lock);
	if (!err && nr_started)
		*nr_started = started;
	return err;
}
