/* notify.h — tells the service manager how the daemon is doing.
 *
 * systemd's readiness protocol (sd_notify(3)): each message is one datagram of
 * newline-separated VAR=value assignments — READY=1, STATUS=..., RELOADING=1,
 * STOPPING=1, WATCHDOG=1 — sent to the AF_UNIX socket named by $NOTIFY_SOCKET
 * (a file-system path, or '@' + a name in the abstract namespace).  With
 * libsystemd (HAVE_LIBSYSTEMD) its sd_notify does the sending; without it the
 * few lines of the protocol are spoken here.
 *
 * Without NOTIFY_SOCKET every call does nothing, so the daemon behaves the
 * same under systemd and from a shell.  A failed notification never stops
 * the daemon: the raw call returns the error, the wrappers log it.
 *
 * Threads: any function may be called from any thread once the environment is
 * no longer being changed (each send opens its own socket and holds no
 * state).  A notify_watchdog belongs to the one thread that kicks it — the
 * engine loop, so a wedged engine stops the pings and systemd restarts us. */
#ifndef GPT2D_NOTIFY_H
#define GPT2D_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/error.h"

/* Sends `state` as one message.  Returns 1 when it was sent, 0 when there is
 * no NOTIFY_SOCKET (not running under a service manager), -1 with `err`
 * filled when sending failed. */
int notify_send(const char *state, gpt2d_error *err);

/* The daemon's messages.  Each may carry a status line (printf format; NULL
 * for none); newlines in it become spaces so it stays one assignment.
 * Failures are logged as warnings and otherwise ignored. */
void notify_ready(const char *status_fmt, ...)
    __attribute__((format(printf, 1, 2)));
void notify_status(const char *status_fmt, ...)
    __attribute__((format(printf, 1, 2)));
void notify_reloading(void);
void notify_stopping(const char *status_fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* The watchdog systemd asks for with WatchdogSec=: it sets WATCHDOG_USEC
 * (the interval) and WATCHDOG_PID (whose watchdog it is). */
typedef struct notify_watchdog {
    uint64_t interval_usec; /* 0: no watchdog */
    uint64_t last_usec;     /* monotonic time of the last ping; 0: never */
    bool warned;            /* one warning, not one per ping */
} notify_watchdog;

/* Parses the two variables as systemd defines them.  Sets *interval_usec
 * (0 = no watchdog for this process: `usec` unset, or `pid` names another
 * process) and returns 0; returns -1 with `err` filled and *interval_usec 0
 * when a value is malformed.  `pid` may be NULL (unset). */
int notify_watchdog_parse(const char *usec, const char *pid, pid_t self,
                          uint64_t *interval_usec, gpt2d_error *err);

/* From this process's environment; a malformed value is logged and leaves
 * the watchdog off. */
void notify_watchdog_init(notify_watchdog *w);

/* Sends WATCHDOG=1 when a quarter of the interval has passed since the last
 * ping (so a ping is never the last chance), given the CLOCK_MONOTONIC time
 * `now_usec`.  Returns the microseconds until the next ping is due — the
 * caller sleeps no longer than that — or -1 when the watchdog is off. */
int64_t notify_watchdog_kick(notify_watchdog *w, uint64_t now_usec);

#endif
