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
	struct kvmm_pin_rep sum;
	uint32_t done;
	int err;

	if (!c || (nr_seqs && !seqs))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = kvmm_seq_batch_locked(c, KVMM_OP_PREFETCH, seqs, nr_seqs, &done, &sum);
	pthread_mutex_unlock(&c->lock);
	if (!err && nr_started)
		*nr_started = sum.nr_swapin;
	return err;
}
