/* http_deadline.h — the reaper: one thread, with its own lock, that cuts a
 * connection whose request is not all in --request-timeout seconds after
 * its first byte (slowloris), and one whose client takes none of its
 * waiting answer for --timeout seconds while it is answered (a stalled
 * reader), by shutting its socket down; MHD then closes it.
 *
 * Owns the list of open connections (conn_watch, one per connection) and
 * the thread.  http_deadline_start, _stop and _free are called from the
 * main thread (http_start, http_stop); http_deadline_on_connection by MHD
 * (MHD_OPTION_NOTIFY_CONNECTION, with the http_deadline as its closure);
 * http_deadline_watch_of and the http_deadline_request_* calls from the
 * connection's own thread, in the order a request goes through them. */
#ifndef GPT2D_HTTP_DEADLINE_H
#define GPT2D_HTTP_DEADLINE_H

#include <stdbool.h>

#include <microhttpd.h>

#include "core/error.h"
#include "core/settings.h"

typedef struct http_deadline http_deadline;
typedef struct conn_watch conn_watch;

/* Why the reaper cut a connection. */
typedef enum deadline_cut {
    DEADLINE_CUT_NONE,
    DEADLINE_CUT_REQUEST, /* the request did not arrive in time (408) */
    DEADLINE_CUT_STALLED, /* the client stopped reading its answer (499) */
} deadline_cut;

/* Either deadline is on: connections must be reported to
 * http_deadline_on_connection (otherwise none is watched). */
bool http_deadline_needed(const settings *cfg);
/* The lock, and the thread when http_deadline_needed.  `cfg` must outlive
 * it.  On failure *out may be set: stop and free it. */
int http_deadline_start(http_deadline **out, const settings *cfg,
                        gpt2d_error *err);
/* Joins the thread; before MHD stops, so no socket is cut while MHD closes
 * it. */
void http_deadline_stop(http_deadline *d);
/* After MHD stopped. */
void http_deadline_free(http_deadline *d);

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened (it is watched from
 * now on; one that cannot be is refused) or closed. */
void http_deadline_on_connection(void *cls, struct MHD_Connection *conn,
                                 void **socket_context,
                                 enum MHD_ConnectionNotificationCode code);
/* The connection's watch; NULL when nothing is watched. */
conn_watch *http_deadline_watch_of(struct MHD_Connection *conn);
/* A request's headers are in: its deadline runs (from its first byte). */
void http_deadline_request_begun(http_deadline *d, conn_watch *w);
/* It is all in: from now on the client must keep taking the answer. */
void http_deadline_request_received(http_deadline *d, conn_watch *w);
/* It is over; says whether the reaper cut it, and why.  The connection
 * goes idle (waiting is the idle timeout's business). */
deadline_cut http_deadline_request_done(http_deadline *d, conn_watch *w);

#endif
