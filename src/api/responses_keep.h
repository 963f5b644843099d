/* responses_keep.h — a finished Responses answer kept in the response
 * store (responses_keep.c) when it was asked to be (store, the default),
 * before the client sees it end, so a client that continues at once finds
 * it.
 *
 * The record (response_store.h keeps it as given):
 *   {"response": the Response object, exactly as the client got it,
 *    "conversation": the items the next turn inherits before this
 *                    response's output (responses_request.h), without the
 *                    instructions (a continuation sends its own),
 *    "input_items": this request's own input items, with their ids,
 *    "cache_salt": the conversation's salt, when it has one}
 *
 * Threads: the run's. */
#ifndef GPT2D_RESPONSES_KEEP_H
#define GPT2D_RESPONSES_KEEP_H

#include <jansson.h>

#include "api/completion_run.h"

/* Keeps `response` (borrowed), the Response object of `run` as it
 * finished, when its `store` is true and it did not fail.  When the store
 * cannot keep it (the disk failed), it says so in the log and in the
 * object: `store` becomes false. */
void responses_keep(const completion_run *run, json_t *response);

#endif
