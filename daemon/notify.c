/* systemd integration: socket activation (sd_listen_fds) and Type=notify (READY=1, STATUS=...,
 * STOPPING=1). Built without libsystemd (meson option `systemd`), these are no-ops and the daemon
 * binds its own socket. */
#include "kd.h"

#include <stdio.h>
#include <string.h>

#if KD_HAVE_SYSTEMD
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#endif

int kd_notify_listen_fd(void)
{
#if KD_HAVE_SYSTEMD
    int n = sd_listen_fds(1); /* 1: unset $LISTEN_FDS so children do not inherit it */
    if (n <= 0)
        return -1;
    if (n > 1)
        kt_log_warn(KD_LOG_MAIN, "systemd passed %d sockets; using the first", n);
    int fd = SD_LISTEN_FDS_START;
    if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0) {
        kt_log_err(KD_LOG_MAIN, "the socket systemd passed is not a listening Unix stream socket");
        return -1;
    }
    return fd;
#else
    return -1;
#endif
}

void kd_notify_ready(void)
{
#if KD_HAVE_SYSTEMD
    sd_notify(0, "READY=1");
#endif
}

void kd_notify_stopping(void)
{
#if KD_HAVE_SYSTEMD
    sd_notify(0, "STOPPING=1");
#endif
}

void kd_notify_status(kd_daemon *d)
{
    int counts[CACHE_JOB_STATE_COUNT];
    kd_jobs_count(d, counts);
    char status[sizeof(d->status)];
    snprintf(status, sizeof(status), "%s%d queued, %d running; %d of %d GPUs up",
             d->stopping ? "stopping: " : "", counts[CACHE_JOB_QUEUED], counts[CACHE_JOB_RUNNING],
             kd_gpus_usable(d), d->n_gpus);
    if (strcmp(status, d->status) == 0)
        return;
    memcpy(d->status, status, sizeof(status));
#if KD_HAVE_SYSTEMD
    sd_notifyf(0, "STATUS=%s", status);
#endif
}
