/* http_deadline.c — the reaper thread (see http_deadline.h): the request
 * deadline (--request-timeout) and, while a request is answered, the
 * write-progress deadline (--timeout).
 *
 * libmicrohttpd has only an idle timeout, which a client defeats by sending
 * a byte every few seconds (slowloris); the request deadline adds the total
 * one.  While a completion is answered that idle timeout is off (generating
 * may legitimately send nothing for minutes), so the same thread enforces a
 * write-progress deadline instead: a client that takes none of its waiting
 * response for --timeout seconds is cut. */
#include "http/http_deadline.h"

#include <linux/sockios.h> /* SIOCOUTQ */
#include <linux/tcp.h>     /* TCP_INFO with tcpi_bytes_received, _acked */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"
#include "core/thread.h"

/* One open connection, as the reaper's deadlines see it.  Created when MHD
 * reports the connection and freed when it reports it closed, which it does
 * before closing the socket: so while a watch is in the list (under
 * the lock) its fd is this connection's. */
typedef enum watch_state {
    WATCH_IDLE,      /* waiting for the first byte of a request */
    WATCH_RECEIVING, /* a request is arriving: `deadline` applies */
    WATCH_HANDLED,   /* the request is all in: being answered, and
                                 * the client must keep taking the answer */
} watch_state;

struct conn_watch {
    struct conn_watch *prev, *next;
    int fd;
    watch_state state;
    uint64_t idle_bytes; /* bytes the socket had received when it went idle */
    struct timespec deadline;
    uint64_t acked; /* answering: bytes the client had acknowledged */
    struct timespec
        progress_at;  /* answering: the last look that saw it take some,
                                 * or have nothing waiting */
    deadline_cut cut; /* cut by the reaper */
};

struct http_deadline {
    const settings *cfg;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t cond;  /* CLOCK_MONOTONIC: wakes the reaper */
    conn_watch *watches;
    bool started, stop;
    pthread_t thread;
};

/* From the first byte of a request until it is all in (headers and body),
 * a connection has request_timeout seconds; then the reaper thread shuts its
 * socket down, MHD sees the end of the stream and closes the connection.
 * Waiting between requests is the idle timeout's business, and answering has
 * no deadline (a stream may run for minutes) as long as the client keeps
 * taking the answer (stall_check).
 *
 * MHD says nothing before the headers are in, so the first byte is found
 * from the kernel's count of bytes received on the socket (TCP_INFO), which
 * the reaper reads every poll interval while a connection is idle: the
 * clock starts at most one interval late, never early. */

/* How often a connection is looked at: an eighth of the deadline that
 * applies, within [0.1 s, 1 s], so a clock starts late by little of it. */
static long poll_ms_for(unsigned seconds)
{
    long ms = (long)seconds * 1000 / 8;
    return ms < 100 ? 100 : ms > 1000 ? 1000 : ms;
}

static long watch_poll_ms(const http_deadline *d)
{
    return poll_ms_for(d->cfg->request_timeout);
}

/* The reaper has work when either deadline is on. */
bool http_deadline_needed(const settings *cfg)
{
    return cfg->request_timeout > 0 || cfg->connection_timeout > 0;
}

/* Bytes received on the socket so far; false when the kernel cannot say. */
static bool socket_bytes_received(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) +
                  sizeof ti.tcpi_bytes_received)
        return false;
    *out = ti.tcpi_bytes_received;
    return true;
}

/* What the client has taken of the socket's output: the bytes it has
 * acknowledged so far, and whether any are still waiting (unsent, or sent
 * and unacknowledged: SIOCOUTQ).  False when the kernel cannot say. */
static bool socket_output(int fd, uint64_t *acked, bool *pending)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    int queued = 0;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) +
                  sizeof ti.tcpi_bytes_acked ||
        ioctl(fd, SIOCOUTQ, &queued) != 0)
        return false;
    *acked = ti.tcpi_bytes_acked;
    *pending = queued > 0;
    return true;
}

/* Under watch_lock.  Each state that needs watching wakes the reaper,
 * which sleeps without a timeout while no connection needs a look. */
static void watch_start_receiving(http_deadline *d, conn_watch *w,
                                  const struct timespec *now)
{
    w->state = WATCH_RECEIVING;
    w->deadline = monotonic_after_ms(now, (long)d->cfg->request_timeout * 1000);
    pthread_cond_signal(&d->cond);
}

/* Under watch_lock: the request is all in; from now on the client must keep
 * taking the answer (see stall_check). */
static void watch_start_answering(http_deadline *d, conn_watch *w,
                                  const struct timespec *now)
{
    bool pending = false;
    w->state = WATCH_HANDLED;
    w->progress_at = *now;
    if (!socket_output(w->fd, &w->acked, &pending))
        w->acked = 0;
    pthread_cond_signal(&d->cond);
}

/* Under watch_lock: the connection waits for its next request. */
static void watch_go_idle(http_deadline *d, conn_watch *w)
{
    uint64_t bytes = 0;
    w->state = WATCH_IDLE;
    /* Unknown: 0, so the next look starts the clock (strict, not lax). */
    w->idle_bytes = socket_bytes_received(w->fd, &bytes) ? bytes : 0;
    pthread_cond_signal(&d->cond);
}

static void watch_add(http_deadline *d, struct MHD_Connection *conn,
                      void **socket_context)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_watch *w = calloc(1, sizeof *w);
    if (ci == NULL || w == NULL) {
        /* Unwatched, the connection could trickle forever: refuse it. */
        if (ci != NULL)
            shutdown(ci->connect_fd, SHUT_RDWR);
        free(w);
        return;
    }
    w->fd = ci->connect_fd;
    w->state = WATCH_IDLE; /* idle_bytes 0: any byte starts the clock */
    pthread_mutex_lock(&d->lock);
    w->next = d->watches;
    if (w->next != NULL)
        w->next->prev = w;
    d->watches = w;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
    *socket_context = w;
}

static void watch_remove(http_deadline *d, conn_watch *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        d->watches = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&d->lock);
    free(w);
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened or closed. */
void http_deadline_on_connection(void *cls, struct MHD_Connection *conn,
                                 void **socket_context,
                                 enum MHD_ConnectionNotificationCode code)
{
    http_deadline *d = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = NULL;
        watch_add(d, conn, socket_context);
    } else {
        watch_remove(d, *socket_context);
        *socket_context = NULL;
    }
}

conn_watch *http_deadline_watch_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* The headers of a request are in.  If the reaper has not seen its first
 * byte yet, that byte came within the last poll interval: start now. */
void http_deadline_request_begun(http_deadline *d, conn_watch *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    if (w->state != WATCH_RECEIVING) {
        struct timespec now = monotonic_now();
        watch_start_receiving(d, w, &now);
    }
    pthread_mutex_unlock(&d->lock);
}

/* The request is all in: from here on it is answered, without a deadline
 * on the answer itself, only on the client's taking it. */
void http_deadline_request_received(http_deadline *d, conn_watch *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    if (w->cut == DEADLINE_CUT_NONE) {
        struct timespec now = monotonic_now();
        watch_start_answering(d, w, &now);
    }
    pthread_mutex_unlock(&d->lock);
}

/* How often request_done looks whether the client took the rest. */
#define DRAIN_POLL_MS 10

/* The request is over (answered or abandoned); says whether the reaper cut
 * it, and why.
 *
 * An answer libmicrohttpd has handed over whole may still sit in the
 * kernel, unread: a client that takes none of a body that fits the socket
 * buffers has not received its answer any more than one whose body backed
 * up.  So while output is waiting and the write timeout is on, the request
 * stays "answered" and the reaper keeps watching it: it ends when the
 * client has taken everything, or it is cut (499, counted) like any other
 * stalled answer.  A client that reads costs nothing here: nothing waits. */
deadline_cut http_deadline_request_done(http_deadline *d, conn_watch *w)
{
    if (w == NULL)
        return DEADLINE_CUT_NONE;
    pthread_mutex_lock(&d->lock);
    while (w->cut == DEADLINE_CUT_NONE && w->state == WATCH_HANDLED &&
           d->started && d->cfg->connection_timeout > 0) {
        uint64_t acked = 0;
        bool pending = false;
        if (!socket_output(w->fd, &acked, &pending) || !pending)
            break;
        /* a client that closed its side has left: nothing to wait for */
        struct pollfd pfd = { .fd = w->fd, .events = POLLRDHUP };
        if (poll(&pfd, 1, 0) != 0)
            break;
        pthread_mutex_unlock(&d->lock);
        monotonic_sleep_ms(DRAIN_POLL_MS);
        pthread_mutex_lock(&d->lock);
    }
    deadline_cut cut = w->cut;
    if (cut == DEADLINE_CUT_NONE)
        watch_go_idle(d, w);
    pthread_mutex_unlock(&d->lock);
    return cut;
}

/* Under watch_lock: one look at a connection being answered (the
 * write-progress deadline, --timeout).
 *
 * MHD's idle timeout is off while a completion is answered, so without this
 * a client that stops reading keeps its connection, its thread and, for a
 * stream, its KV slot as long as it likes.  What counts is not whether the
 * server writes but whether the client takes what was written, and the
 * kernel knows: output is waiting (SIOCOUTQ) and the count of bytes the
 * client acknowledged has not moved.  Nothing waiting means the server is
 * the slow one (generating, queued for a slot), which is never cut; a slow
 * reader that takes some bytes now and then restarts the clock each time.
 * The clock starts at the last look that saw progress, so a cut comes at
 * least --timeout after the client's last progress, never early.
 *
 * The cut resets the connection (SO_LINGER 0) rather than closing it: the
 * client is not reading, so a graceful close would leave the unsent bytes
 * and a FIN queued in the kernel behind a closed window for minutes, and an
 * SSE client would not learn that its stream was cut. */
static bool stall_check(http_deadline *d, conn_watch *w,
                        const struct timespec *now, struct timespec *wake)
{
    unsigned limit = d->cfg->connection_timeout;
    if (limit == 0)
        return false;
    uint64_t acked = 0;
    bool pending = false;
    /* A socket the kernel says nothing about counts as progressing: cutting
     * a working stream would lose an answer on a guess. */
    if (!socket_output(w->fd, &acked, &pending) || !pending ||
        acked != w->acked) {
        w->acked = acked;
        w->progress_at = *now;
    }
    struct timespec deadline = monotonic_after_ms(&w->progress_at,
                                                  (long)limit * 1000);
    if (monotonic_before(now, &deadline)) {
        struct timespec next = monotonic_after_ms(now, poll_ms_for(limit));
        if (monotonic_before(&deadline, &next))
            next = deadline;
        if (monotonic_before(&next, wake))
            *wake = next;
        return true;
    }
    struct linger reset = { .l_onoff = 1, .l_linger = 0 };
    setsockopt(w->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    /* As for the request deadline, MHD's thread sees the shut-down socket
     * (a stream's content reader polls it too) and closes the connection;
     * its completion callback cancels a generation still running. */
    shutdown(w->fd, SHUT_RDWR);
    w->cut = DEADLINE_CUT_STALLED;
    metrics_write_timeout();
    log_info("closed a connection whose client took none of its response for "
             "%u s (timeout)",
             limit);
    return false;
}

/* Under watch_lock: one look at a connection at `now`.  Lowers *wake to
 * when it next needs a look; returns false when it needs none. */
static bool watch_check(http_deadline *d, conn_watch *w,
                        const struct timespec *now, struct timespec *wake)
{
    if (w->cut != DEADLINE_CUT_NONE)
        return false;
    if (w->state == WATCH_HANDLED)
        return stall_check(d, w, now, wake);
    if (d->cfg->request_timeout == 0)
        return false;
    if (w->state == WATCH_IDLE) {
        uint64_t bytes = 0;
        if (socket_bytes_received(w->fd, &bytes) && bytes <= w->idle_bytes) {
            struct timespec next = monotonic_after_ms(now, watch_poll_ms(d));
            if (monotonic_before(&next, wake))
                *wake = next;
            return true;
        }
        watch_start_receiving(d, w, now);
    }
    if (monotonic_before(now, &w->deadline)) {
        if (monotonic_before(&w->deadline, wake))
            *wake = w->deadline;
        return true;
    }
    /* MHD's thread reads the end of the stream and closes the connection;
     * the fd stays open (and ours) until MHD reports it closed. */
    shutdown(w->fd, SHUT_RDWR);
    w->cut = DEADLINE_CUT_REQUEST;
    metrics_request_timeout();
    log_info("closed a connection whose request was not received within %u s "
             "(request-timeout)",
             d->cfg->request_timeout);
    return false;
}

static void *reaper_main(void *arg)
{
    http_deadline *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop) {
        struct timespec now = monotonic_now();
        struct timespec wake = monotonic_after_ms(&now, 3600 * 1000L);
        bool any = false;
        for (conn_watch *w = d->watches; w != NULL; w = w->next)
            any |= watch_check(d, w, &now, &wake);
        /* Nothing to watch: sleep until a connection arrives (signalled). */
        if (any)
            pthread_cond_timedwait(&d->cond, &d->lock, &wake);
        else
            pthread_cond_wait(&d->cond, &d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

int http_deadline_start(http_deadline **out, const settings *cfg,
                        gpt2d_error *err)
{
    *out = NULL;
    http_deadline *d = calloc(1, sizeof *d);
    if (d == NULL)
        return error_set(err, "out of memory");
    d->cfg = cfg;
    if (monotonic_cond_init(&d->cond) != 0) {
        free(d);
        return error_set(err,
                         "cannot create the connection-deadline condition");
    }
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        pthread_cond_destroy(&d->cond);
        free(d);
        return error_set(err, "cannot create the connection-deadline lock");
    }
    *out = d;
    if (!http_deadline_needed(cfg))
        return 0;
    if (thread_start(&d->thread, reaper_main, d, "gpt2d-deadline") != 0)
        return error_set(err, "cannot start the connection-deadline thread");
    d->started = true;
    return 0;
}

void http_deadline_stop(http_deadline *d)
{
    if (!d->started)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    d->started = false;
}

/* After MHD stopped: it reported every connection closed, so the list is
 * empty; anything left is freed all the same. */
void http_deadline_free(http_deadline *d)
{
    while (d->watches != NULL) {
        conn_watch *w = d->watches;
        d->watches = w->next;
        free(w);
    }
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
