// SPDX-License-Identifier: MIT
/*
 * kvmm/notify.c - the sd_notify protocol spoken by hand, so that kvmmd needs no libsystemd:
 * a service manager started with Type=notify hands us the address of a datagram socket in
 * $NOTIFY_SOCKET, and we send it newline-separated assignments ("READY=1", "MAINPID=..",
 * "STATUS=..", "STOPPING=1").  The address is a filesystem path, or an abstract socket name
 * written with a leading '@' (the '@' becomes the NUL that starts an abstract sun_path and
 * the address length covers exactly the name, without a trailing NUL).  One socket per call:
 * notifications are rare, and nothing is kept open across fork or daemonizing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvmm/notify.h"

int kvmm_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	size_t n, len;
	socklen_t alen;
	ssize_t sent;
	int fd, ret;

	if (!state)
		return -EINVAL;
	if (!path || !path[0])
		return 0;
	n = strlen(path);
	if (path[0] == '@') {
		/* abstract: sun_path = NUL + name, the length covers the name only */
		if (n < 2)
			return -EINVAL;
		if (n > sizeof(sun.sun_path))
			return -ENAMETOOLONG;
		memcpy(sun.sun_path + 1, path + 1, n - 1);
		alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else if (path[0] == '/') {
		if (n >= sizeof(sun.sun_path))
			return -ENAMETOOLONG;
		memcpy(sun.sun_path, path, n + 1);
		alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	} else if (!strncmp(path, "vsock:", 6)) {
		return -EAFNOSUPPORT;
	} else {
		return -EINVAL;
	}

	len = strlen(state);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	do {
		sent = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&sun, alen);
	} while (sent < 0 && errno == EINTR);
	if (sent < 0)
		ret = -errno;
	else if ((size_t)sent != len)
		ret = -EMSGSIZE;
	else
		ret = 1;
	close(fd);
	return ret;
}

int kvmm_sd_notifyf(const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -ENOMEM;
	return kvmm_sd_notify(buf);
}
