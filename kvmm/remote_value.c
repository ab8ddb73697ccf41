// SPDX-License-Identifier: MIT
/*
 * kvmm/remote_value.c - what the remote tier stores for one sealed page, and the checks every
 * value read back passes before a byte of it reaches a frame.
 *
 * A value is a 64-byte header followed by the whole frame (KVMM_REMOTE_FMT_FRAME).  Whole
 * frames rather than layer slices: a page is what a lookup hits and maps, always all of it,
 * so one key per page means one GET per block and no partial pages to reassemble; a frame is
 * page_size bytes (2 MiB by default), far below Redis' 512 MiB value limit, and a pipelined
 * batch moves a prompt's frames in one round trip per node.  Slices would pay off only for
 * frames too large to move at once, which kvmm's page sizes never are (max_value refuses
 * larger ones).
 *
 * Header, all little-endian:
 *
 *   0  magic u32 "KVMR"       4  version u16, format u16     8  header length u32
 *  12  ntokens u32           16  payload length u64          24  fmt_id u64
 *  32  depth u32, 0 u32      40  prefix digest (2 x u64)     56  checksum u64
 *
 * The checksum is XXH3-64 of the first 56 header bytes and the payload: a truncated, torn or
 * overwritten value fails it.  The key (kvmm_remote_key) is the page's content key, which
 * includes the namespace secret; the prefix digest (XXH3-128 over the secret, the format and
 * every token id of the prefix) proves the value is this prefix's block and not the block of
 * a prompt whose 64-bit key collided.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "compiler.h"
#include "kvmm/remote.h"

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((struct kvmm_remote_digest *)0)->state),
	       "kvmm_remote_digest holds an XXH3 state");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "kvmm_remote_digest alignment");

#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_FORMAT 6
#define OFF_HDRLEN 8
#define OFF_NTOKENS 12
#define OFF_PAYLOAD 16
#define OFF_FMT_ID 24
#define OFF_DEPTH 32
#define OFF_DIGEST 40
#define OFF_CSUM 56

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void kvmm_remote_key(char buf[KVMM_REMOTE_KEY_LEN], uint64_t key)
{
	snprintf(buf, KVMM_REMOTE_KEY_LEN, "kvmm:%016llx", (unsigned long long)key);
}

static uint64_t checksum(const uint8_t *hdr, const void *payload, uint64_t len)
{
	XXH3_state_t st;

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, hdr, OFF_CSUM);
	XXH3_64bits_update(&st, payload, (size_t)len);
	return XXH3_64bits_digest(&st);
}

void kvmm_remote_hdr_encode(uint8_t hdr[KVMM_REMOTE_HDR_LEN], const struct kvmm_remote_meta *m,
			    const void *payload)
{
	memset(hdr, 0, KVMM_REMOTE_HDR_LEN);
	put32(hdr + OFF_MAGIC, KVMM_REMOTE_MAGIC);
	put16(hdr + OFF_VERSION, KVMM_REMOTE_VERSION);
	put16(hdr + OFF_FORMAT, KVMM_REMOTE_FMT_FRAME);
	put32(hdr + OFF_HDRLEN, KVMM_REMOTE_HDR_LEN);
	put32(hdr + OFF_NTOKENS, m->ntokens);
	put64(hdr + OFF_PAYLOAD, m->payload_len);
	put64(hdr + OFF_FMT_ID, m->fmt_id);
	put32(hdr + OFF_DEPTH, m->depth);
	put64(hdr + OFF_DIGEST, m->digest[0]);
	put64(hdr + OFF_DIGEST + 8, m->digest[1]);
	put64(hdr + OFF_CSUM, checksum(hdr, payload, m->payload_len));
}

int kvmm_remote_hdr_decode(const void *val, size_t len, struct kvmm_remote_meta *m)
{
	const uint8_t *h = val;

	if (!val || len < KVMM_REMOTE_HDR_LEN)
		return -EBADMSG;
	m->ntokens = get32(h + OFF_NTOKENS);
	m->payload_len = get64(h + OFF_PAYLOAD);
	m->fmt_id = get64(h + OFF_FMT_ID);
	m->depth = get32(h + OFF_DEPTH);
	m->digest[0] = get64(h + OFF_DIGEST);
	m->digest[1] = get64(h + OFF_DIGEST + 8);
	return 0;
}

enum kvmm_remote_verdict kvmm_remote_value_check(const void *val, size_t len,
						 const struct kvmm_remote_meta *want)
{
	const uint8_t *h = val;
	struct kvmm_remote_meta m;

	if (kvmm_remote_hdr_decode(val, len, &m))
		return KVMM_REMOTE_CORRUPT;
	if (get32(h + OFF_MAGIC) != KVMM_REMOTE_MAGIC ||
	    get16(h + OFF_VERSION) != KVMM_REMOTE_VERSION ||
	    get16(h + OFF_FORMAT) != KVMM_REMOTE_FMT_FRAME ||
	    get32(h + OFF_HDRLEN) != KVMM_REMOTE_HDR_LEN)
		return KVMM_REMOTE_CORRUPT;
	/* the length the header claims must be exactly what came back: truncated is corrupt */
	if (m.payload_len != len - KVMM_REMOTE_HDR_LEN)
		return KVMM_REMOTE_CORRUPT;
	if (get64(h + OFF_CSUM) != checksum(h, h + KVMM_REMOTE_HDR_LEN, m.payload_len))
		return KVMM_REMOTE_CORRUPT;
	if (m.fmt_id != want->fmt_id || m.payload_len != want->payload_len ||
	    m.ntokens != want->ntokens || m.depth != want->depth ||
	    m.digest[0] != want->digest[0] || m.digest[1] != want->digest[1])
		return KVMM_REMOTE_MISMATCH;
	return KVMM_REMOTE_OK;
}

void kvmm_remote_digest_init(struct kvmm_remote_digest *d, const uint64_t secret[2],
			     uint64_t hash_seed, uint64_t fmt_id)
{
	XXH3_state_t *st = (XXH3_state_t *)d->state;
	uint64_t hdr[3] = {secret[0], secret[1], fmt_id};

	XXH3_INITSTATE(st);
	XXH3_128bits_reset_withSeed(st, hash_seed);
	XXH3_128bits_update(st, hdr, sizeof(hdr));
}

void kvmm_remote_digest_update(struct kvmm_remote_digest *d, const uint32_t *tokens, size_t n)
{
	XXH3_128bits_update((XXH3_state_t *)d->state, tokens, n * sizeof(*tokens));
}

void kvmm_remote_digest_get(const struct kvmm_remote_digest *d, uint64_t out[2])
{
	XXH128_hash_t h = XXH3_128bits_digest((const XXH3_state_t *)d->state);

	out[0] = h.low64;
	out[1] = h.high64;
}
