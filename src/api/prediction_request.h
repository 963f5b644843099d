/* prediction_request.h — the `prediction` field of a completion or chat
 * request (OpenAI's Predicted Outputs): what the client expects most of the
 * answer to be, {"type": "content", "content": "..." or [text parts]}, or (as a prompt
 * may be) an array of token ids.
 * Speculative decoding proposes from it first (engine_spec.c); it never
 * changes the answer, only how fast it comes.
 *
 * Threads: any; pure but for the allocation it returns. */
#ifndef GPT2D_PREDICTION_REQUEST_H
#define GPT2D_PREDICTION_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api_common.h"
#include "text/tokenizer.h"

/* Reads root's `prediction`: *ids (malloc'ed, the caller frees) and *n its
 * tokens; NULL and 0 when absent, null or empty.  A prediction of more
 * tokens than the context (n_ctx) could never be used: 400, as is any
 * other shape. */
int api_prediction_parse(json_t *root, const tokenizer *tok, size_t n_ctx,
                         int32_t **ids, size_t *n, api_error *e);

#endif
