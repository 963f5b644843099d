/* sse_out.h — the server-sent-event bytes a stream has written and the
 * server has not taken yet (sse_out.c): what every event stream
 * (completion_stream.c, responses_stream.c, messages_stream.c) queues, and
 * hands over from its api_source's read.
 *
 * Threads: one stream's, one call at a time. */
#ifndef GPT2D_SSE_OUT_H
#define GPT2D_SSE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "api/api_common.h"

typedef struct sse_out {
    char *buf;
    size_t len, off, cap; /* bytes queued; of them, taken; allocated */
} sse_out;

/* Queues `n` bytes; 0, or -1 on OOM. */
int sse_out_append(sse_out *o, const char *data, size_t n);
/* Queues one event: `event: TYPE` (when `type` is non-NULL), then
 * `data: <obj>` and a blank line (a reference to obj is stolen; NULL is an
 * error).  0, or -1 on OOM. */
int sse_out_event(sse_out *o, const char *type, json_t *obj);
/* Copies up to `max` queued bytes into `buf`; returns how many, 0 when
 * nothing is queued (the buffer is then reused from its start). */
size_t sse_out_take(sse_out *o, char *buf, size_t max);
void sse_out_free(sse_out *o);

/* What an event stream does between reads (sse_out_drive). */
typedef struct sse_steps {
    /* Queues the events of what is new: 1 when the stream has ended (its
     * last events queued, its done flag set), 0 when more is to come
     * (*any: an event was queued), -1 on an error. */
    int (*step)(void *self, bool *any);
    /* Sleeps until the run changes (a slice at most); NULL when step
     * waits itself. */
    void (*wait)(void *self);
    /* The client left or an error ended the stream: cancels the run, once. */
    void (*cancel)(void *self);
} sse_steps;

/* An api_source's read for a stream over `out`: the queued bytes first;
 * then the end (API_SOURCE_END) once `*done`; the client gone (or `*gone`)
 * cancels the run (API_SOURCE_ERROR); otherwise steps, waiting while
 * nothing is new. */
ssize_t sse_out_drive(sse_out *out, const bool *done, const bool *gone,
                      const sse_steps *steps, void *self, char *buf, size_t max,
                      const api_client *client);

#endif
