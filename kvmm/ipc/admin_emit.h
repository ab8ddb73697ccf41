/* SPDX-License-Identifier: MIT */
/*
 * kvmm/ipc/admin_emit.h - the admin verbs' emitter: every read verb writes each of its facts
 * once, through these calls, which render either tagged text ("Name:  value unit" lines,
 * "Record: first key=value ..." rows) or JSON (KVMM_ADMIN_F_JSON), so the two forms cannot
 * disagree; and the sending of an answer in as many records as it needs.
 */
#ifndef KVMM_IPC_ADMIN_EMIT_H
#define KVMM_IPC_ADMIN_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

struct kvmm_session;
struct kvmm_msg_hdr;

/* A growing text buffer; err (-ENOMEM, -EINVAL) sticks and makes later writes no-ops. */
struct kvmm_text {
	char *buf;
	size_t len, cap;
	int err;
};

/* Append printf-style to @t, growing it. */
__printf(2, 3) void kvmm_tprintf(struct kvmm_text *t, const char *fmt, ...);

#define KVMM_OUT_MAX_DEPTH 8

struct kvmm_out {
	struct kvmm_text t;
	bool json;
	int width; /* text: column of values after "Tag:"; 0 = "tag: value" */
	int rec;   /* text: fields written in the open inline record, -1 = none open */
	unsigned int depth;
	bool sep[KVMM_OUT_MAX_DEPTH]; /* json: something was written at this depth */
};

/* A fact: "Tag: value unit" in text, "tag": value in JSON (the key is the tag in snake_case). */
void kvmm_out_u64(struct kvmm_out *o, const char *tag, uint64_t v, const char *unit);
void kvmm_out_s64(struct kvmm_out *o, const char *tag, int64_t v, const char *unit);
/* A frame number, or "-" / null when none. */
void kvmm_out_frame(struct kvmm_out *o, const char *tag, uint32_t frame);
/* a count where 0 means none (a limit): "-" in text, null in JSON */
void kvmm_out_u64_opt(struct kvmm_out *o, const char *tag, uint64_t v, const char *unit);
void kvmm_out_str(struct kvmm_out *o, const char *tag, const char *s);
/* The whole answer's document: { } in JSON, nothing in text. */
void kvmm_out_open(struct kvmm_out *o);
void kvmm_out_close(struct kvmm_out *o);
/* A list of objects: JSON "tag":[ ... ]; nothing in text. */
void kvmm_out_list(struct kvmm_out *o, const char *tag);
void kvmm_out_list_end(struct kvmm_out *o);
/* An object in a list: text renders it as one "Label: first k=v ..." line. */
void kvmm_out_rec(struct kvmm_out *o, const char *label);
void kvmm_out_rec_end(struct kvmm_out *o);
/* An object in a list whose facts are text lines (a section, e.g. one namespace). */
void kvmm_out_sect(struct kvmm_out *o);
void kvmm_out_sect_end(struct kvmm_out *o);
/* JSON only: a key, and opening / closing an object or array at the next depth. */
void kvmm_out_key(struct kvmm_out *o, const char *tag);
void kvmm_out_push(struct kvmm_out *o, char c);
void kvmm_out_pop(struct kvmm_out *o, char c);

/*
 * Send @t as the answer to @req in records of at most KVMM_MSG_PAYLOAD_MAX bytes, split at
 * line ends, all but the last with KVMM_MSG_F_MORE (the last too with @more_after); t->err
 * set: the error reply instead.
 */
void kvmm_out_send(struct kvmm_session *s, const struct kvmm_msg_hdr *req, struct kvmm_text *t,
		   bool more_after);

#endif /* KVMM_IPC_ADMIN_EMIT_H */
