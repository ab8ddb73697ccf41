/* SPDX-License-Identifier: MIT */
/*
 * kvmm/notify.h - readiness and status notifications to a service manager (systemd's
 * sd_notify protocol, spoken directly, without libsystemd): one datagram of newline-separated
 * "VAR=value" assignments to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or an
 * abstract name written with a leading '@').  kvmmd sends "READY=1" once its socket listens
 * and "STOPPING=1" when it begins to shut down.
 */
#ifndef KVMM_NOTIFY_H
#define KVMM_NOTIFY_H

#include "compiler.h"

/*
 * Send @state (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET.  Returns 1 when sent, 0
 * when NOTIFY_SOCKET is unset or empty (not run by a service manager: nothing to do), or
 * -errno: -EINVAL (a NULL state, or a NOTIFY_SOCKET that is neither an absolute path
 * nor '@name'), -ENAMETOOLONG, -EAFNOSUPPORT (vsock: addresses), or what socket(2) and
 * sendto(2) return.
 */
int kvmm_sd_notify(const char *state);

/* printf-style kvmm_sd_notify(); -ENOMEM if the text does not fit in 4 KiB. */
int kvmm_sd_notifyf(const char *fmt, ...) __printf(1, 2);

#endif /* KVMM_NOTIFY_H */
