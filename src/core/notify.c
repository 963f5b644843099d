/* notify.c — the service manager's readiness protocol (see notify.h).
 *
 * With libsystemd (HAVE_LIBSYSTEMD), its sd_notify sends; without it, our
 * own implementation: one AF_UNIX datagram per message.  The socket is
 * opened per message rather than kept: the daemon sends a handful of
 * messages plus a watchdog ping every few seconds, so there is nothing to
 * gain from shared state that two threads would have to guard.
 * The send never blocks (MSG_DONTWAIT): if the manager's queue is full, a
 * ping is dropped and the next one follows — the engine loop must not stall
 * on a notification.
 *
 * The manager learns who sent a datagram from the kernel's SCM_CREDENTIALS,
 * which carry the process id for every thread alike, so the engine thread's
 * pings count as the main process's (NotifyAccess=main). */
#include "core/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "core/log.h"

/* Longest message we build: a state and a status line. */
enum { NOTIFY_MSG_MAX = 1024 };

/* The least time between two pings, whatever WATCHDOG_USEC says, so a
 * silly tiny interval cannot turn the engine's idle wait into a spin. */
enum { WATCHDOG_MIN_PERIOD_USEC = 1000 };

#ifndef HAVE_LIBSYSTEMD
/* $NOTIFY_SOCKET as a socket address: "/path" or "@abstract".  The abstract
 * name is not NUL-terminated: its length is part of the address. */
static int notify_address(const char *name, struct sockaddr_un *sa,
                          socklen_t *len, gpt2d_error *err)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (name[0] != '/' && name[0] != '@')
        return error_set(err,
                         "NOTIFY_SOCKET '%s' is neither an absolute path "
                         "nor an @abstract name",
                         name);
    if (n < 2 || n > sizeof sa->sun_path ||
        (name[0] == '/' && n == sizeof sa->sun_path))
        return error_set(err, "NOTIFY_SOCKET '%s' is not a usable socket name",
                         name);
    memcpy(sa->sun_path, name, n);
    if (name[0] == '@')
        sa->sun_path[0] = '\0';
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                       (name[0] == '/' ? 1 : 0));
    return 0;
}

static int send_datagram(const char *name, const char *msg, gpt2d_error *err)
{
    struct sockaddr_un sa;
    socklen_t sa_len = 0;
    if (notify_address(name, &sa, &sa_len, err) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return error_set(err, "notify socket: %s", strerror(errno));
    size_t len = strlen(msg);
    ssize_t sent = sendto(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT,
                          (const struct sockaddr *)&sa, sa_len);
    int saved = errno;
    close(fd);
    if (sent < 0)
        return error_set(err, "notify to %s: %s", name, strerror(saved));
    if ((size_t)sent != len)
        return error_set(err, "notify to %s: message cut short", name);
    return 1;
}
#endif

int notify_send(const char *state, gpt2d_error *err)
{
    /* Empty counts as unset, as systemd leaves variables (libsystemd would
     * call an empty name an error). */
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0')
        return 0;
#ifdef HAVE_LIBSYSTEMD
    int r = sd_notify(0, state);
    if (r < 0)
        return error_set(err, "sd_notify to %s: %s", name, strerror(-r));
    return r > 0 ? 1 : 0;
#else
    return send_datagram(name, state, err);
#endif
}

/* "STATE\nSTATUS=text" (either part optional), with any newline of the
 * status text turned into a space: it would otherwise end the assignment
 * and let the rest pass for another one. */
static void build_message(char *buf, size_t size, const char *state,
                          const char *status_fmt, va_list ap)
{
    int n = snprintf(buf, size, "%s", state != NULL ? state : "");
    if (status_fmt == NULL || n < 0 || (size_t)n + 1 >= size)
        return;
    if (n > 0)
        buf[n++] = '\n';
    int m = snprintf(buf + n, size - (size_t)n, "STATUS=");
    if (m < 0 || (size_t)(n + m) >= size)
        return;
    char *text = buf + n + m;
    vsnprintf(text, size - (size_t)(n + m), status_fmt, ap);
    for (char *p = text; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static void notify_vsend(const char *state, const char *status_fmt, va_list ap)
{
    char msg[NOTIFY_MSG_MAX];
    build_message(msg, sizeof msg, state, status_fmt, ap);
    gpt2d_error err = { { 0 } };
    if (msg[0] != '\0' && notify_send(msg, &err) < 0)
        log_warn("service manager notification failed: %s", err.message);
}

void notify_ready(const char *status_fmt, ...)
{
    va_list ap;
    va_start(ap, status_fmt);
    notify_vsend("READY=1", status_fmt, ap);
    va_end(ap);
}

void notify_status(const char *status_fmt, ...)
{
    va_list ap;
    va_start(ap, status_fmt);
    notify_vsend(NULL, status_fmt, ap);
    va_end(ap);
}

void notify_stopping(const char *status_fmt, ...)
{
    va_list ap;
    va_start(ap, status_fmt);
    notify_vsend("STOPPING=1", status_fmt, ap);
    va_end(ap);
}

void notify_reloading(void)
{
    gpt2d_error err = { { 0 } };
    if (notify_send("RELOADING=1", &err) < 0)
        log_warn("service manager notification failed: %s", err.message);
}

/* ---- watchdog ---- */

/* A whole decimal number without sign or spaces, as systemd writes them. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || *end != '\0')
        return false;
    *out = (uint64_t)v;
    return true;
}

int notify_watchdog_parse(const char *usec, const char *pid, pid_t self,
                          uint64_t *interval_usec, gpt2d_error *err)
{
    *interval_usec = 0;
    if (usec == NULL || usec[0] == '\0')
        return 0;
    uint64_t interval = 0, owner = 0;
    /* UINT64_MAX is systemd's "infinity": not an interval anyone can keep. */
    if (!parse_u64(usec, &interval) || interval == 0 || interval == UINT64_MAX)
        return error_set(err,
                         "WATCHDOG_USEC '%s' is not a number of "
                         "microseconds",
                         usec);
    if (pid != NULL && pid[0] != '\0') {
        if (!parse_u64(pid, &owner) || owner == 0)
            return error_set(err, "WATCHDOG_PID '%s' is not a process id", pid);
        /* The variables were meant for another process — a parent that
         * passed its environment on — so this one has no watchdog. */
        if (owner != (uint64_t)self)
            return 0;
    }
    *interval_usec = interval;
    return 0;
}

void notify_watchdog_init(notify_watchdog *w)
{
    memset(w, 0, sizeof *w);
    gpt2d_error err = { { 0 } };
    if (notify_watchdog_parse(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"),
                              getpid(), &w->interval_usec, &err) != 0)
        log_warn("watchdog off: %s", err.message);
}

int64_t notify_watchdog_kick(notify_watchdog *w, uint64_t now_usec)
{
    if (w->interval_usec == 0)
        return -1;
    uint64_t period = w->interval_usec / 4;
    if (period < WATCHDOG_MIN_PERIOD_USEC)
        period = WATCHDOG_MIN_PERIOD_USEC;
    if (w->last_usec == 0 || now_usec < w->last_usec ||
        now_usec - w->last_usec >= period) {
        gpt2d_error err = { { 0 } };
        if (notify_send("WATCHDOG=1", &err) < 0 && !w->warned) {
            log_warn("watchdog ping failed (further failures not logged): %s",
                     err.message);
            w->warned = true;
        }
        /* A failed ping still counts: retrying at once would only spin. */
        w->last_usec = now_usec;
    }
    uint64_t due = w->last_usec + period - now_usec;
    return due > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)due;
}
