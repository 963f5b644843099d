/* api_ctx.h — everything a handler needs, shared by all connections, and
 * what a handler does with its shared parts for a caller (api_ctx.c): runs
 * work on the work pool and takes tokens from the caller's token budget.
 *
 * Threads: main fills the api_ctx before the server starts; from then on
 * it is read-only, and its functions may be called from any connection's
 * thread at once (the work pool and the token budget have their own
 * locks). */
#ifndef GPT2D_API_CTX_H
#define GPT2D_API_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/response_store.h"
#include "api/token_budget.h"
#include "api/workpool.h"
#include "engine/engine.h"
#include "fleet/fleet.h"
#include "text/chat_template.h"

typedef struct api_ctx {
    fleet *models;             /* the models a request names (fleet.h) */
    workpool *work;            /* parsing and tokenizing run here (api_work) */
    size_t max_n;              /* --max-n: a lower bound of our own; 0 = none */
    size_t max_stop_bytes;     /* --max-stop-bytes; 0 = none */
    size_t inspect_max_tokens; /* --inspect-max-tokens; 0: the context */
    size_t inspect_max_attention; /* --inspect-max-attention; 0: none */
    bool log_prompts;
    time_t started;            /* reported as the model's `created` */
    const chat_template *chat; /* how /v1/chat/completions writes a prompt */
    token_budget *budget;      /* each caller's tokens per minute (its own
                                 * lock: the one shared object a handler
                                 * writes) */
    response_store *responses; /* stored responses (its own lock); NULL:
                                 * none kept */
} api_ctx;

/* ---- the model a request names (fleet.h) ----
 *
 * `name`: the request's "model" (NULL or "": the default).  0 with *out
 * held (give it back with api_model_release); 1 when `wait` is false and
 * the model must load first (call again with `wait` from a thread that
 * may block for seconds: the connection's); -1 with `e` set: 404
 * model_not_found, 503 model_unavailable with *retry_after (the memory is
 * held by models in use, or the server is stopping), 500 model_load_failed. */
int api_model_acquire(const api_ctx *ctx, const char *name, bool wait,
                      served_model **out, api_error *e, int *retry_after);
void api_model_release(const api_ctx *ctx, served_model *m);

/* A body that names a model, parsed on the work pool as api_work runs a
 * job (with `memory` and `charge` as there): its JSON, then the model it
 * names (held in *served, which must be NULL; a body naming none is first
 * given to name_model(arg, root) when that is not NULL, which may set its
 * "model"), then parse(arg, root, e) with *served set.  When the model must load first, that happens on this
 * thread, and the job runs again.  0 when parse succeeded; -1 with the
 * answer in `r` (the JSON's 400, the model's error, parse's error, or
 * api_work's), *charge released and *served given back. */
int api_parse_for_model(const api_ctx *ctx, const api_caller *who,
                        const api_client *client, const char *body, size_t len,
                        int (*parse)(void *arg, json_t *root, api_error *e),
                        void (*name_model)(void *arg, json_t *root), void *arg,
                        size_t memory, work_charge *charge,
                        served_model **served, api_response *r);

/* api_parse_for_model for work that needs only the named model's
 * tokenizer (fleet_tokenizer): its JSON, then the tokenizer (in *tok),
 * then parse(arg, root, e).  The model is neither loaded nor counted as
 * used, and the tokenizer outlives every request.  0 when parse
 * succeeded; -1 with the answer in `r` (the JSON's 400, 404
 * model_not_found, parse's error, or api_work's) and *charge released. */
int api_parse_for_tokenizer(const api_ctx *ctx, const api_caller *who,
                            const api_client *client, const char *body,
                            size_t len,
                            int (*parse)(void *arg, json_t *root, api_error *e),
                            void *arg, size_t memory, work_charge *charge,
                            const tokenizer **tok, api_response *r);

/* ---- work outside the engine (workpool.h) ----
 *
 * Runs fn(arg) on ctx->work for `who`, waiting for a worker and for
 * `memory` bytes of the answers' budget.  0 when it ran, *charge holding
 * them (NULL: memory must be 0).  -1 when it did not, and r says why: the
 * client left (r->cancelled), or an error with Retry-After: 503
 * `tokenizer_busy` or `response_memory_full`, 429
 * `response_memory_per_key` (the caller's own unread answers hold its
 * share), 503 when the server is stopping. */
int api_work(const api_ctx *ctx, const api_caller *who,
             const api_client *client, void (*fn)(void *), void *arg,
             size_t memory, work_charge *charge, api_response *r);

/* Takes `tokens` (what a request may come to use; `what` says how that is
 * counted, "prompt 12 + 2 x max_tokens 16") from the caller's token budget
 * (token_budget.h): 0, with *charged what to give back of it; or -1 with a
 * 400 naming `param` (and `fix` saying what to change) when the whole
 * budget is smaller, or a 429 with Retry-After seconds in *retry_after
 * while the budget is spent, counted in the key's metrics. */
int api_charge_tokens(const api_ctx *ctx, const api_caller *caller,
                      uint64_t tokens, const char *what, const char *param,
                      const char *fix, uint64_t *charged, api_error *e,
                      int *retry_after);

#endif
