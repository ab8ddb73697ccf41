// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/admin_emit.c - the admin verbs' emitter (admin_emit.h): one call per fact,
 * rendered as tagged text or JSON, and the sending of a whole answer.  The JSON key of a fact
 * is its tag in snake_case ("FramesFree" -> "frames_free"); the schema is in
 * Documentation/admin-guide/kvmmctl.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "kvmm/ipc/admin_emit.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/trace.h"

__printf(2, 3) void kvmm_tprintf(struct kvmm_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->err = -EINVAL;
			return;
		}
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t cap = max_t(size_t, t->cap * 2, t->len + (size_t)n + 1);
			char *b = realloc(t->buf, cap);

			if (!b) {
				t->err = -ENOMEM;
				return;
			}
			t->buf = b;
			t->cap = cap;
		}
	}
}

/* ---- the emitter: one call per fact, rendered as tagged text or JSON ---------------------- */

/* "FramesFree" -> "frames_free", "ABIMin" -> "abi_min", "pin_depth" stays. */
static void snake(const char *tag, char *buf, size_t len)
{
	size_t i, o = 0;

	for (i = 0; tag[i] && o + 2 < len; i++) {
		char c = tag[i];

		if (c >= 'A' && c <= 'Z') {
			bool prev_lower = i && ((tag[i - 1] >= 'a' && tag[i - 1] <= 'z') ||
						(tag[i - 1] >= '0' && tag[i - 1] <= '9'));
			bool acronym_end = i && tag[i - 1] >= 'A' && tag[i - 1] <= 'Z' &&
					   tag[i + 1] >= 'a' && tag[i + 1] <= 'z';

			if (o && (prev_lower || acronym_end))
				buf[o++] = '_';
			c = (char)(c - 'A' + 'a');
		} else if (c == '-') {
			c = '_';
		}
		buf[o++] = c;
	}
	buf[o] = '\0';
}

static void json_str(struct kvmm_text *t, const char *s)
{
	kvmm_tprintf(t, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			kvmm_tprintf(t, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			kvmm_tprintf(t, "\\u%04x", c);
		else
			kvmm_tprintf(t, "%c", c);
	}
	kvmm_tprintf(t, "\"");
}

static void jsep(struct kvmm_out *o)
{
	if (o->sep[o->depth])
		kvmm_tprintf(&o->t, ",");
	o->sep[o->depth] = true;
}

void kvmm_out_key(struct kvmm_out *o, const char *tag)
{
	char k[64];

	jsep(o);
	snake(tag, k, sizeof(k));
	json_str(&o->t, k);
	kvmm_tprintf(&o->t, ":");
}

void kvmm_out_push(struct kvmm_out *o, char c)
{
	kvmm_tprintf(&o->t, "%c", c);
	if (o->depth + 1 < KVMM_OUT_MAX_DEPTH)
		o->depth++;
	o->sep[o->depth] = false;
}

void kvmm_out_pop(struct kvmm_out *o, char c)
{
	kvmm_tprintf(&o->t, "%c", c);
	if (o->depth)
		o->depth--;
}

/* text: start a fact; false when it was written inline (in a record) */
static void text_fact(struct kvmm_out *o, const char *tag, const char *val, const char *unit)
{
	if (o->rec >= 0) {
		if (o->rec++)
			kvmm_tprintf(&o->t, " %s=%s", tag, val);
		else
			kvmm_tprintf(&o->t, " %s", val);
		return;
	}
	if (o->width) {
		int n = (int)strlen(tag) + 1;

		kvmm_tprintf(&o->t, "%s:%*s%s", tag, n < o->width ? o->width - n : 1, "", val);
	} else {
		kvmm_tprintf(&o->t, "%s: %s", tag, val);
	}
	if (unit)
		kvmm_tprintf(&o->t, " %s", unit);
	kvmm_tprintf(&o->t, "\n");
}

void kvmm_out_u64(struct kvmm_out *o, const char *tag, uint64_t v, const char *unit)
{
	char b[24];

	if (o->json) {
		kvmm_out_key(o, tag);
		kvmm_tprintf(&o->t, "%" PRIu64, v);
		return;
	}
	snprintf(b, sizeof(b), "%" PRIu64, v);
	text_fact(o, tag, b, unit);
}

void kvmm_out_s64(struct kvmm_out *o, const char *tag, int64_t v, const char *unit)
{
	char b[24];

	if (o->json) {
		kvmm_out_key(o, tag);
		kvmm_tprintf(&o->t, "%" PRId64, v);
		return;
	}
	snprintf(b, sizeof(b), "%" PRId64, v);
	text_fact(o, tag, b, unit);
}

/* A frame number, or "-" / null when none. */
void kvmm_out_frame(struct kvmm_out *o, const char *tag, uint32_t frame)
{
	if (frame == KVMM_TRACE_NONE || frame == KVMM_FRAME_NONE) {
		if (o->json) {
			kvmm_out_key(o, tag);
			kvmm_tprintf(&o->t, "null");
		} else {
			text_fact(o, tag, "-", NULL);
		}
		return;
	}
	kvmm_out_u64(o, tag, frame, NULL);
}

/* A count that may be absent (a limit): "-" / null when @v is 0. */
void kvmm_out_u64_opt(struct kvmm_out *o, const char *tag, uint64_t v, const char *unit)
{
	if (v) {
		kvmm_out_u64(o, tag, v, unit);
	} else if (o->json) {
		kvmm_out_key(o, tag);
		kvmm_tprintf(&o->t, "null");
	} else {
		text_fact(o, tag, "-", NULL);
	}
}

void kvmm_out_str(struct kvmm_out *o, const char *tag, const char *s)
{
	if (o->json) {
		kvmm_out_key(o, tag);
		json_str(&o->t, s);
		return;
	}
	text_fact(o, tag, s[0] ? s : "-", NULL);
}

void kvmm_out_open(struct kvmm_out *o)
{
	o->rec = -1;
	if (o->json)
		kvmm_out_push(o, '{');
}

void kvmm_out_close(struct kvmm_out *o)
{
	if (o->json) {
		kvmm_out_pop(o, '}');
		kvmm_tprintf(&o->t, "\n");
	}
}

/* A list of objects: JSON "tag":[ ... ]; nothing in text. */
void kvmm_out_list(struct kvmm_out *o, const char *tag)
{
	if (o->json) {
		kvmm_out_key(o, tag);
		kvmm_out_push(o, '[');
	}
}

void kvmm_out_list_end(struct kvmm_out *o)
{
	if (o->json)
		kvmm_out_pop(o, ']');
}

/* An object in a list: text renders it as one "Label: first k=v ..." line. */
void kvmm_out_rec(struct kvmm_out *o, const char *label)
{
	if (o->json) {
		jsep(o);
		kvmm_out_push(o, '{');
		return;
	}
	kvmm_tprintf(&o->t, "%s:", label);
	o->rec = 0;
}

void kvmm_out_rec_end(struct kvmm_out *o)
{
	if (o->json) {
		kvmm_out_pop(o, '}');
		return;
	}
	kvmm_tprintf(&o->t, "\n");
	o->rec = -1;
}

/* An object in a list whose facts are text lines (a section, e.g. one namespace). */
void kvmm_out_sect(struct kvmm_out *o)
{
	if (o->json) {
		jsep(o);
		kvmm_out_push(o, '{');
	}
}

void kvmm_out_sect_end(struct kvmm_out *o)
{
	if (o->json)
		kvmm_out_pop(o, '}');
}

/* ---- sending ------------------------------------------------------------------------------- */

/* Send the text in records of at most KVMM_MSG_PAYLOAD_MAX bytes, split at line ends. */
void kvmm_out_send(struct kvmm_session *s, const struct kvmm_msg_hdr *req, struct kvmm_text *t,
		   bool more_after)
{
	struct kvmm_msg_hdr *rep = (struct kvmm_msg_hdr *)s->srv->tx;
	size_t off = 0;

	if (t->err) {
		kvmm_session_reply(s, req, t->err, NULL, 0);
		return;
	}
	do {
		size_t n = t->len - off;
		bool more = more_after;

		if (n > KVMM_MSG_PAYLOAD_MAX) {
			n = KVMM_MSG_PAYLOAD_MAX;
			while (n > 1 && t->buf[off + n - 1] != '\n')
				n--;
			if (n <= 1)
				n = KVMM_MSG_PAYLOAD_MAX;
			more = true;
		}
		kvmm_msg_hdr_init_reply(rep, req, (uint32_t)(sizeof(*rep) + n), 0);
		if (more)
			rep->flags |= KVMM_MSG_F_MORE;
		if (n)
			memcpy(rep + 1, t->buf + off, n);
		if (kvmm_session_send(s, rep, sizeof(*rep) + n, NULL, 0))
			return;
		off += n;
	} while (off < t->len);
}
