/* api_ctx.c — what a handler does with the shared parts of its api_ctx
 * for a caller: runs work on the work pool (api_work: parsing and
 * tokenizing, each answer's memory charged to the caller's share) and
 * takes tokens from the caller's token budget (api_charge_tokens).  A
 * refusal is an error in the response (api_work) or in the caller's
 * api_error, named and counted under the caller's key in /metrics.
 *
 * Callers: the endpoints, on their connection's thread; the work pool and
 * the token budget have their own locks. */
#include "api/api_ctx.h"

#include <stdint.h>

#include "core/metrics.h"
#include "core/monotonic.h"

int api_work(const api_ctx *ctx, const api_caller *who,
             const api_client *client, void (*fn)(void *), void *arg,
             size_t memory, work_charge *charge, api_response *r)
{
    work_job job = {
        .run = fn,
        .arg = arg,
        .account = who->account,
        .memory = memory,
        .gone = client != NULL ? client->gone : NULL,
        .gone_arg = client != NULL ? client->arg : NULL,
    };
    work_charge none;
    work_status st = workpool_run(ctx->work, &job,
                                  charge != NULL ? charge : &none);
    if (st == WORK_DONE)
        return 0;
    api_error e;
    switch (st) {
    case WORK_GONE:
        metrics_cancelled(); /* dropped before it began, but dropped */
        api_response_gone(r);
        return -1;
    case WORK_STOPPING:
        api_error_set(&e, 503, NULL, "the server is shutting down");
        api_response_error(r, &e);
        return -1;
    case WORK_CALLER_MEMORY:
        api_error_set(
            &e, 429, NULL,
            "answers of this API key (or client address) "
            "that its clients have not yet read hold its share of the "
            "server's response-memory; retry once they are read");
        e.code = "response_memory_per_key";
        metrics_key_refused(who->metrics_key, METRICS_REFUSED_RESPONSE_MEMORY);
        break;
    case WORK_NO_MEMORY:
        api_error_set(&e, 503, NULL,
                      "answers that clients have not yet read hold "
                      "the server's response-memory; retry shortly");
        e.code = "response_memory_full";
        break;
    default:
        api_error_set(&e, 503, NULL,
                      "the server is busy parsing and tokenizing "
                      "other requests; retry shortly");
        e.code = "tokenizer_busy";
        break;
    }
    api_response_error(r, &e);
    api_response_set_retry_after(r, 1);
    return -1;
}

int api_charge_tokens(const api_ctx *ctx, const api_caller *caller,
                      uint64_t tokens, const char *what, const char *param,
                      const char *fix, uint64_t *charged, api_error *e,
                      int *retry_after)
{
    const uint64_t per_minute = caller->limits.tokens_per_minute;
    uint64_t available = 0;
    unsigned wait = 0;
    switch (token_budget_charge(ctx->budget, caller->account, per_minute,
                                tokens, monotonic_seconds(), &available,
                                &wait)) {
    case TOKEN_BUDGET_OK:
        *charged = per_minute > 0 ? tokens : 0;
        return 0;
    case TOKEN_BUDGET_NEVER:
        api_error_set(e, 400, param,
                      "this request may use %ju tokens (%s), "
                      "more than the whole token budget of this API key (or "
                      "client address), %ju tokens per minute: it can never "
                      "run; %s",
                      (uintmax_t)tokens, what, (uintmax_t)per_minute, fix);
        e->code = "token_budget";
        return -1;
    case TOKEN_BUDGET_WAIT:
        break;
    }
    *retry_after = (int)wait;
    metrics_key_refused(caller->metrics_key, METRICS_REFUSED_TOKEN_BUDGET);
    api_error_set(e, 429, NULL,
                  "the token budget of this API key (or client "
                  "address) is spent for now: this request may use %ju tokens "
                  "(%s), and %ju of its %ju tokens per minute are left; retry "
                  "in %u s",
                  (uintmax_t)tokens, what, (uintmax_t)available,
                  (uintmax_t)per_minute, wait);
    e->code = "token_budget";
    return -1;
}

/* How long a client that found every model's memory in use should wait:
 * a request holds its model for seconds, not minutes. */
#define MODEL_BUSY_RETRY_SECONDS 5

/* The answer to a name no model has; `err` is fleet_no_such_model's. */
static int model_not_found(api_error *e, const gpt2d_error *err)
{
    api_error_set(e, 404, "model", "%s", err->message);
    e->code = "model_not_found";
    return -1;
}

int api_model_acquire(const api_ctx *ctx, const char *name, bool wait,
                      served_model **out, api_error *e, int *retry_after)
{
    gpt2d_error err = { { 0 } };
    switch (fleet_acquire(ctx->models, name, wait, out, &err)) {
    case FLEET_OK:
        return 0;
    case FLEET_NOT_LOADED:
        return 1;
    case FLEET_UNKNOWN:
        return model_not_found(e, &err);
    case FLEET_NO_ROOM:
        api_error_set(e, 503, "model",
                      "model '%.200s' cannot be loaded now: the memory for "
                      "models (--models-memory, --models-max) is held by "
                      "models that are in use; try again later",
                      name != NULL ? name : "");
        e->code = "model_unavailable";
        *retry_after = MODEL_BUSY_RETRY_SECONDS;
        return -1;
    case FLEET_STOPPING:
        api_error_set(e, 503, NULL, "the server is shutting down");
        e->code = "model_unavailable";
        *retry_after = MODEL_BUSY_RETRY_SECONDS;
        return -1;
    case FLEET_LOAD_FAILED:
        break;
    }
    /* the reason names the operator's files: it goes to the log */
    api_error_set(e, 500, "model",
                  "model '%.200s' could not be loaded (the server's log "
                  "says why)",
                  name != NULL ? name : "");
    e->code = "model_load_failed";
    return -1;
}

void api_model_release(const api_ctx *ctx, served_model *m)
{
    fleet_release(ctx->models, m);
}

typedef struct model_parse_job {
    const api_ctx *ctx;
    const char *body;
    size_t len;
    int (*parse)(void *arg, json_t *root, api_error *e);
    void (*name_model)(void *arg, json_t *root);
    void *arg;
    served_model **model;
    json_t *root; /* the body parsed; kept when the model must load */
    api_error e;
    int retry_after;
    int rc; /* 0, -1 (e), or 1: the model must load first */
} model_parse_job;

/* The "model" a body names: NULL when it names none (or not as a string,
 * which the parse refuses). */
static const char *model_named(json_t *root)
{
    return json_string_value(json_object_get(root, "model"));
}

/* The body as a JSON object whose "model", if any, is a string (or
 * null): 0 with *root set (once: a job that runs again keeps it), or -1
 * with `e` set. */
static int parse_naming_body(json_t **root, const char *body, size_t len,
                             api_error *e)
{
    if (*root == NULL && (*root = api_parse_object(body, len, e)) == NULL)
        return -1;
    const json_t *named = json_object_get(*root, "model");
    if (named != NULL && !json_is_string(named) && !json_is_null(named))
        return api_error_set(e, 400, "model", "model must be a string");
    return 0;
}

static void model_parse_run(void *arg)
{
    model_parse_job *j = arg;
    if ((j->rc = parse_naming_body(&j->root, j->body, j->len, &j->e)) != 0)
        return;
    if (*j->model == NULL && j->name_model != NULL &&
        model_named(j->root) == NULL)
        j->name_model(j->arg, j->root);
    if (*j->model == NULL &&
        (j->rc = api_model_acquire(j->ctx, model_named(j->root), false,
                                   j->model, &j->e, &j->retry_after)) != 0)
        return;
    j->rc = j->parse(j->arg, j->root, &j->e);
}

int api_parse_for_model(const api_ctx *ctx, const api_caller *who,
                        const api_client *client, const char *body, size_t len,
                        int (*parse)(void *arg, json_t *root, api_error *e),
                        void (*name_model)(void *arg, json_t *root), void *arg,
                        size_t memory, work_charge *charge,
                        served_model **served, api_response *r)
{
    model_parse_job j = { .ctx = ctx,
                          .body = body,
                          .len = len,
                          .parse = parse,
                          .name_model = name_model,
                          .arg = arg,
                          .model = served,
                          .rc = -1 };
    int rc = api_work(ctx, who, client, model_parse_run, &j, memory, charge, r);
    if (rc == 0 && j.rc == 1) {
        /* the memory is not held while the model loads */
        if (charge != NULL)
            work_charge_release(charge);
        j.rc = api_model_acquire(ctx, model_named(j.root), true, served, &j.e,
                                 &j.retry_after);
        if (j.rc == 0)
            rc = api_work(ctx, who, client, model_parse_run, &j, memory, charge,
                          r);
    }
    json_decref(j.root);
    if (rc == 0 && j.rc != 0) {
        if (charge != NULL)
            work_charge_release(charge);
        api_response_set_retry_after(r, j.retry_after);
        api_response_error(r, &j.e);
        rc = -1;
    }
    if (rc != 0) {
        api_model_release(ctx, *served);
        *served = NULL;
    }
    return rc;
}

typedef struct tokenizer_parse_job {
    const api_ctx *ctx;
    const char *body;
    size_t len;
    int (*parse)(void *arg, json_t *root, api_error *e);
    void *arg;
    const tokenizer **tok;
    api_error e;
    int rc; /* 0 or -1 (e) */
} tokenizer_parse_job;

static void tokenizer_parse_run(void *arg)
{
    tokenizer_parse_job *j = arg;
    json_t *root = NULL;
    gpt2d_error err = { { 0 } };
    if ((j->rc = parse_naming_body(&root, j->body, j->len, &j->e)) == 0) {
        *j->tok = fleet_tokenizer(j->ctx->models, model_named(root), &err);
        j->rc = *j->tok == NULL ? model_not_found(&j->e, &err)
                                : j->parse(j->arg, root, &j->e);
    }
    json_decref(root);
}

int api_parse_for_tokenizer(const api_ctx *ctx, const api_caller *who,
                            const api_client *client, const char *body,
                            size_t len,
                            int (*parse)(void *arg, json_t *root, api_error *e),
                            void *arg, size_t memory, work_charge *charge,
                            const tokenizer **tok, api_response *r)
{
    tokenizer_parse_job j = { .ctx = ctx,
                              .body = body,
                              .len = len,
                              .parse = parse,
                              .arg = arg,
                              .tok = tok,
                              .rc = -1 };
    if (api_work(ctx, who, client, tokenizer_parse_run, &j, memory, charge,
                 r) != 0)
        return -1;
    if (j.rc == 0)
        return 0;
    if (charge != NULL)
        work_charge_release(charge);
    api_response_error(r, &j.e);
    return -1;
}
