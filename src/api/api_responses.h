/* api_responses.h — OpenAI's Responses API (api_responses.c): how
 * api_completions.c finds POST /v1/responses' parser and shapes, and the
 * stored responses' routes.
 *
 * Threads: an HTTP connection's own. */
#ifndef GPT2D_API_RESPONSES_H
#define GPT2D_API_RESPONSES_H

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"
#include "api/completion_run.h"

extern const completion_endpoint responses_endpoint;

/* A request's query parameters: value(arg, name) is one's value, or NULL
 * when absent. */
typedef struct api_query {
    const char *(*value)(void *arg, const char *name);
    void *arg;
} api_query;

/* `method` (GET or DELETE) on /v1/responses/`rest`: GET {id} (the Response
 * as it was answered), DELETE {id}, GET {id}/input_items (the request's
 * own input items: limit 1-100 (20), order asc|desc (desc), after an item
 * id).  Another account's id is not found (404), as a missing one. */
void api_response_stored(const api_ctx *ctx, const api_caller *who,
                         const char *method, const char *rest,
                         const api_query *q, api_response *r);

#endif
