/* batch_api.h — the routes of OpenAI's Files and Batch APIs (batch_api.c):
 *   POST /v1/files                 upload (multipart/form-data: file,
 *                                  purpose "batch")
 *   GET  /v1/files                 list (purpose, limit, after, order)
 *   GET  /v1/files/{id}            the file's object
 *   GET  /v1/files/{id}/content    its bytes
 *   DELETE /v1/files/{id}
 *   POST /v1/batches               create (input_file_id, endpoint,
 *                                  completion_window "24h", metadata)
 *   GET  /v1/batches               list (limit, after)
 *   GET  /v1/batches/{id}
 *   POST /v1/batches/{id}/cancel
 * Each answers with OpenAI's objects and error object; a caller sees only
 * its own files and batches (another's are "not found", as missing ones).
 * Without --batch-dir the service is NULL and every route is a 404 that
 * says so.
 *
 * Threads: an HTTP connection's own thread; any number at once. */
#ifndef GPT2D_BATCH_API_H
#define GPT2D_BATCH_API_H

#include <stddef.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "batch/batch_run.h"

/* An upload's bytes as they arrive, kept on disk (file_store_spool) so
 * that a file of --max-file-bytes takes no memory while it comes. */
typedef struct batch_upload batch_upload;

/* A new upload's spool; NULL without the service or when it cannot be
 * made (the caller then keeps the body in memory). */
batch_upload *batch_upload_begin(batch_service *s);
/* Appends n bytes: 0, or -1 (the disk failed). */
int batch_upload_write(batch_upload *u, const char *data, size_t n);
void batch_upload_free(batch_upload *u);

/* One request to these routes, as http/ hands it over. */
typedef struct batch_call {
    const char *method;       /* "GET", "POST", "DELETE" */
    const char *rest;         /* the path after /v1/files or /v1/batches: "",
                         * "/{id}", "/{id}/content", "/{id}/cancel" */
    const char *content_type; /* NULL when the request has none */
    const char *body;         /* the body, unless it was spooled: */
    size_t len;
    batch_upload *upload; /* NULL, or where the body is */
    /* A query parameter's value, or NULL when absent. */
    const char *(*query)(void *arg, const char *name);
    void *query_arg;
} batch_call;

void batch_api_files(batch_service *s, const api_caller *who,
                     const batch_call *c, api_response *r);
void batch_api_batches(batch_service *s, const api_caller *who,
                       const batch_call *c, api_response *r);

#endif
