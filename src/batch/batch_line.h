/* batch_line.h — one line of a batch (batch_line.c): the request it holds,
 * checked (JSON, custom_id, method, url, body, no stream) and answered
 * through the same handler as the same request sent alone, as the batch's
 * caller at the engine's background priority; the JSON line of its answer
 * or of its error; the id each answer line carries (the batch's and the
 * line's index, from which a restart knows it is answered); and the
 * custom_ids seen while a batch is validated.
 *
 * Threads: any; a line's context is read only. */
#ifndef GPT2D_BATCH_LINE_H
#define GPT2D_BATCH_LINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api_ctx.h"
#include "batch/batch_record.h"

/* What answering a line needs of its batch and its service. */
typedef struct batch_line_ctx {
    const api_ctx *api;
    /* the batch: its id, endpoint, owner, principal and limits, which do
     * not change while it runs */
    const batch_record *rec;
    size_t metrics_key;          /* its key's series in /metrics */
    const atomic_bool *stopping; /* the service stops: every line gives up */
    const atomic_bool *stop;     /* the batch was cancelled or expired */
} batch_line_ctx;

/* Answers line `line` (text[len], one JSONL line): its answer line
 * (*is_error: it belongs in the error file), or NULL when it gave up
 * (stopping, stop) or memory ran out: it is not answered.  A refusal that
 * passes (429, 503) is retried after its Retry-After, never answered. */
char *batch_line_answer(const batch_line_ctx *c, size_t line, const char *text,
                        size_t len, bool *is_error);
/* The error line of a line that is not a request the batch can run (or
 * could not be run): OpenAI's {"id", "custom_id", "response": null,
 * "error": {code, message}}; NULL on OOM. */
char *batch_line_error(const batch_record *rec, size_t line, json_t *custom_id,
                       const char *code, const char *message);
/* The line an answer line's id names, when it is one of this batch's. */
bool batch_line_of_id(const batch_record *rec, const char *id, size_t *line);
/* Appends `line` and a newline to fd in one write, synced.  0 or -1. */
int batch_line_append(int fd, const char *line);

/* The custom_ids of the lines read so far, as 64 bits of each one's
 * SHA-256 in an open-addressed table (0: empty).  Two different ids share
 * them with a chance of about n^2 / 2^65: 7e-11 for 50,000 lines.  Zeroed:
 * empty. */
typedef struct batch_ids {
    uint64_t *slot;
    size_t cap, n;
} batch_ids;

/* Whether the line's custom_id (if it has one) was in the set; adds it.
 * A line that is not a request has none: it gets its error line later. */
bool batch_ids_seen(batch_ids *set, const char *text, size_t len);
void batch_ids_free(batch_ids *set);

#endif
