/* sse_out.h — the server-sent-event bytes a stream has written and the
 * server has not taken yet (sse_out.c): what every event stream
 * (completion_stream.c, responses_stream.c, messages_stream.c) queues, and
 * hands over from its api_source's read.
 *
 * Threads: one stream's, one call at a time. */
#ifndef GPT2D_SSE_OUT_H
#define GPT2D_SSE_OUT_H

#include <stddef.h>

#include <jansson.h>

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

#endif
