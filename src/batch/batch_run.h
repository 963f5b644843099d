/* batch_run.h — OpenAI's Batch API on the daemon's own disk: the batches
 * (batch_record.h) and the files (file_store.h) under --batch-dir, and
 * the workers that run each batch's lines through the same handlers an
 * interactive request goes through (api_completions, api_chat_completions),
 * as the caller that made the batch, at the engine's background priority
 * (gen_params.background: a batch line runs only on capacity no
 * interactive request wants, and gives way first).
 *
 * A line's answer is written when it is whole (one write, synced) to the
 * batch's output file (status 200) or error file (anything else, and
 * lines that are not a request); a line in flight when the daemon stops
 * is cancelled and not written, so after a restart the batch resumes with
 * the lines that have no answer: none is lost, none answered twice.
 * Refusals that pass (429: the key's queue or token budget; 503) are
 * retried after their Retry-After, not answered.
 *
 * Threads: every function from any thread; the service's lock guards the
 * batches.  `parallel` worker threads each run one line at a time. */
#ifndef GPT2D_BATCH_RUN_H
#define GPT2D_BATCH_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"
#include "batch/file_store.h"
#include "core/error.h"

/* Most batches kept, running and finished: past it, the oldest finished
 * one is forgotten (its files stay until deleted). */
#define BATCH_MAX_KEPT 1024

typedef struct batch_service batch_service;

/* Opens `dir` (files/ and batches/ in it), resumes the batches a previous
 * run left unfinished and starts `parallel` workers.  A new batch expires
 * `window` seconds after it is made (0: BATCH_WINDOW_SECONDS; shorter
 * only for the tests).  0 or -1. */
int batch_service_start(batch_service **out, const char *dir, size_t parallel,
                        unsigned window, const api_ctx *api, gpt2d_error *err);
/* Stops the workers: lines in flight are cancelled, not answered (a
 * restart runs them again).  Call before the engines stop. */
void batch_service_stop(batch_service *s);
void batch_service_free(batch_service *s);

file_store *batch_service_files(batch_service *s);

/* A new batch of `who` over its file `input_file_id` (purpose "batch")
 * for `endpoint`; `metadata` NULL or an object (a reference is taken).
 * 0 with the batch's object in *out, or -1 with the error in `e`. */
int batch_service_create(batch_service *s, const api_caller *who,
                         const char *input_file_id, const char *endpoint,
                         json_t *metadata, json_t **out, api_error *e);
/* `owner`'s batch `id`: its object, or NULL when it has none. */
json_t *batch_service_get(batch_service *s, const uint8_t *owner,
                          const char *id);
/* Cancels `owner`'s batch `id`: 0 with its object (cancelling, or as it
 * was when it had finished), or -1 with 404 in `e`. */
/* Cancels every unfinished batch whose owner `accepted` no longer accepts
 * (its API key was taken out of the keys file): its lines in flight end,
 * no other starts, as a cancel by its owner (logged).  How many. */
size_t batch_service_cancel_unaccepted(batch_service *s,
                                       bool (*accepted)(void *arg,
                                                        const uint8_t *owner),
                                       void *arg);
int batch_service_cancel(batch_service *s, const uint8_t *owner, const char *id,
                         json_t **out, api_error *e);
/* `owner`'s batches, newest first, after batch `after` (NULL: from the
 * newest), at most `limit`: OpenAI's list object. */
json_t *batch_service_list(batch_service *s, const uint8_t *owner,
                           const char *after, size_t limit);
/* Deletes `owner`'s file `id`: 0, -1 when it has none, 1 when one of its
 * unfinished batches reads it (kept).  Checked and deleted under the lock
 * batch_service_create looks the file up under. */
int batch_service_delete_file(batch_service *s, const uint8_t *owner,
                              const char *id);

#endif
