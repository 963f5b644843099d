/* api_completions.h — POST /v1/completions and POST /v1/chat/completions
 * (api_completions.c: one path for both), and the pieces of that path
 * that others use: /v1/completions' whole choice and the best_of ranking
 * (the unit tests), the error of a refused engine_submit (/v1/inspect).
 *
 * Threads: an HTTP connection's own thread; a handler blocks while its
 * body is parsed on the work pool and while the engine works. */
#ifndef GPT2D_API_COMPLETIONS_H
#define GPT2D_API_COMPLETIONS_H

#include <stddef.h>

#include <jansson.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"
#include "api/completion_run.h"
#include "api/completion_request.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

void api_completions(const api_ctx *ctx, const api_caller *who,
                     const char *body, size_t len, const api_client *client,
                     api_response *r);
void api_chat_completions(const api_ctx *ctx, const api_caller *who,
                          const char *body, size_t len,
                          const api_client *client, api_response *r);
/* POST /v1/responses (OpenAI's Responses API, read into chat's path;
 * api_responses.h). */
void api_responses(const api_ctx *ctx, const api_caller *who, const char *body,
                   size_t len, const api_client *client, api_response *r);

/* The one path both run, for an endpoint that is read and answers like a
 * completion (api_messages.c's): parse on the work pool, submit, then
 * the whole answer or the event stream (completion_run.h). */
void completion_serve(const api_ctx *ctx, const api_caller *who,
                      const char *body, size_t len, const api_client *client,
                      api_response *r, const completion_endpoint *ep);

/* The error `caller`'s refused engine_submit gets (429 with Retry-After
 * seconds in *retry_after, counted in the key's metrics; 409, 503, 500);
 * returns -1. */
int api_engine_error(const api_caller *caller, engine_status st,
                     const engine_refusal *why, api_error *e, int *retry_after);

/* Orders the `n_seq` outputs by cumulative logprob, best first, into
 * order[0..n_seq) (ties keep sequence order). */
void completion_rank(const gen_output *const *outs, size_t n_seq,
                     size_t *order);
/* One choice of a non-streamed /v1/completions response. */
json_t *completion_choice_json(const tokenizer *tok,
                               const completion_request *req,
                               size_t prompt_index, size_t index,
                               const gen_output *out);

#endif
