// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_adminc.c - libFuzzer harness: libkvmm's admin calls (runtime/admin.c) on
 * whatever a daemon answers.  A fake daemon thread (started once, its socket in a scratch
 * directory) answers HELLO properly and then every request with the input: its first byte
 * chooses the size of the records the rest is cut into (all but the last with
 * KVMM_MSG_F_MORE) and, when its top bit is set, a PREEMPT event before each record.  The
 * client reads it as a STATUS answer, the namespace list and the swap tiers, and walks the
 * text with kvmm_admin_value / _next / _field.  Every call must return 0 or a negative errno
 * and hand back well-formed results (terminated names, counts that match the records), never
 * crash or leak.  Built and run by tools/fuzz (Documentation/dev-tools/fuzzing.md).
 *
 * fuzz-libs: runtime/libkvmm.a
 * fuzz-ldlibs: -lpthread -ldl -lm
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/kvmm.h"
#include "tests/fuzz/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_sock[128];
static int fz_lfd = -1;
/* the current input, read by the daemon thread while the harness waits on its calls */
static const uint8_t *fz_data;
static size_t fz_size;

static void fz_send(int fd, const struct kvmm_msg_hdr *req, uint32_t flags, const void *p,
		    size_t len)
{
	unsigned char buf[KVMM_MSG_MAX] __attribute__((aligned(8)));
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf;

	kvmm_msg_hdr_init_reply(h, req, (uint32_t)(KVMM_MSG_HDR_SIZE + len), 0);
	h->flags = (uint16_t)flags;
	if (len)
		memcpy(buf + KVMM_MSG_HDR_SIZE, p, len);
	send(fd, buf, KVMM_MSG_HDR_SIZE + len, MSG_NOSIGNAL);
}

/* Answer one request with the input, cut into records. */
static void fz_answer(int fd, const struct kvmm_msg_hdr *req)
{
	size_t chunk, off = 0, len = fz_size ? fz_size - 1 : 0;
	const uint8_t *p = fz_data + (fz_size ? 1 : 0);
	bool events = fz_size && (fz_data[0] & 0x80);

	chunk = fz_size ? (size_t)(fz_data[0] & 0x7f) * 37 + 1 : 1;
	do {
		size_t n = len - off < chunk ? len - off : chunk;

		if (events) {
			struct kvmm_msg_hdr ev;

			kvmm_msg_hdr_init(&ev, KVMM_OP_PREEMPT, sizeof(ev), 0);
			send(fd, &ev, sizeof(ev), MSG_NOSIGNAL);
		}
		fz_send(fd, req, off + n < len ? KVMM_MSG_F_MORE : 0, p + off, n);
		off += n;
	} while (off < len);
}

static void *fz_daemon(void *arg)
{
	unsigned char buf[KVMM_MSG_MAX] __attribute__((aligned(8)));
	const struct kvmm_msg_hdr *h = (const void *)buf;
	struct kvmm_hello_rep hello = {.abi_version = KVMM_ABI_VERSION,
				       .abi_min = KVMM_ABI_MIN_COMPAT,
				       .abi_agreed = KVMM_ABI_VERSION,
				       .page_size = 16384,
				       .client_id = 1};

	(void)arg;
	for (;;) {
		int fd = accept(fz_lfd, NULL, NULL);
		ssize_t n;

		if (fd < 0)
			continue;
		while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
			if (kvmm_msg_hdr_check(h, (size_t)n))
				break;
			if (h->op == KVMM_OP_HELLO)
				fz_send(fd, h, 0, &hello, sizeof(hello));
			else
				fz_answer(fd, h);
		}
		close(fd);
	}
	return NULL;
}

static void fz_start(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	pthread_t thr;

	snprintf(fz_sock, sizeof(fz_sock), "%s/sock", fz_tmp("kvmm-fuzz-adminc"));
	fz_lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fz_lfd < 0)
		abort();
	strcpy(sa.sun_path, fz_sock);
	if (bind(fz_lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fz_lfd, 8))
		abort();
	if (pthread_create(&thr, NULL, fz_daemon, NULL))
		abort();
	pthread_detach(thr);
}

static void fz_check_err(int ret)
{
	if (ret > 0 || ret < -4095)
		abort(); /* 0 or a negative errno, nothing else */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmm_admin_ns *ns;
	struct kvmm_admin_tier *tiers;
	unsigned int nr, i;
	kvmm_admin_t *a;
	const char *l;
	char *text, b[16];
	int64_t v;
	int ret;

	if (size > (1u << 16))
		return -1;
	if (fz_lfd < 0)
		fz_start();
	fz_data = data;
	fz_size = size;
	ret = kvmm_admin_open(fz_sock, &a);
	if (ret)
		abort(); /* HELLO is the fake's own: it must work */

	ret = kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text);
	fz_check_err(ret);
	if (!ret) {
		(void)kvmm_admin_value(text, "Frames", &v);
		for (l = NULL; (l = kvmm_admin_next(text, "Client", l));)
			if (kvmm_admin_field(l, "name", b, sizeof(b)) >= (int)sizeof(b) ||
			    !memchr(b, '\0', sizeof(b)))
				abort();
		free(text);
	} else if (text) {
		abort();
	}

	ret = kvmm_admin_namespaces(a, NULL, &ns, &nr);
	fz_check_err(ret);
	if (ret && (ns || nr))
		abort();
	for (i = 0; i < nr; i++)
		if (!memchr(ns[i].name, '\0', sizeof(ns[i].name)) || !ns[i].name[0])
			abort();
	free(ns);

	ret = kvmm_admin_swap_tiers(a, NULL, &tiers, &nr);
	fz_check_err(ret);
	if (ret && (tiers || nr))
		abort();
	for (i = 0; i < nr; i++)
		if (!tiers[i].tier || tiers[i].tier > KVMM_SWAP_TIER_MAX ||
		    !memchr(tiers[i].ns, '\0', sizeof(tiers[i].ns)) ||
		    !memchr(tiers[i].kind, '\0', sizeof(tiers[i].kind)))
			abort();
	free(tiers);
	kvmm_admin_close(a);
	return 0;
}
