/* api_inspect.c — POST /v1/inspect: look inside the model on one prompt.
 *
 * The body is parsed by inspect_request.c; the prompt then runs as an
 * engine request of its own (engine.h, gen_params.inspect): queued,
 * admitted and prefilled like any prompt, beside other streams, under the
 * caller's limits and share of the engine, its prompt tokens charged to
 * the caller's token budget.  It computes every position itself, as a
 * prompt scored with echo + logprobs does: a cached prefix holds keys and
 * values, not the attention rows or residuals of its positions.  Its K/V
 * blocks join the cache in the caller's isolation domain like any
 * prompt's (with its cache_salt, as a completion's), so a completion of
 * the same caller and salt may reuse them.  The handler waits, then
 * inspect_answer.c writes the answer.
 *
 * An answer may hold tens of megabytes and waits whole until its client
 * reads it, so it is charged to --response-memory (and its caller's half
 * of it) as /tokenize's are: its bound (inspect_answer_bound) before the
 * request is queued, waiting for it as a /tokenize job does and refused
 * when it does not come (503 response_memory_full, 429
 * response_memory_per_key) before the engine does any work; then, once written,
 * what it holds, until the answer is freed (sent, or its client gone).  A
 * bound past a caller's half could never be charged: 400, naming it.
 *
 * Callers: http.c, on the connection's own thread; the handler blocks while
 * the engine works and looks at its socket every COMPLETION_WAIT_SLICE_MS. */
#include "api/api_inspect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_completions.h"
#include "api/completion_run.h"
#include "api/inspect_answer.h"
#include "api/inspect_request.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"

static gen_params params_of(const inspect_request *req, const api_caller *who)
{
    gen_params gp;
    memset(&gp, 0, sizeof gp);
    gp.prompt = req->prompt.ids;
    gp.n_prompt = req->prompt.n;
    gp.n_sequences = 1;
    sampler_params_default(&gp.sampling);
    gp.inspect = &req->params;
    memcpy(gp.account, who->account, SHA256_BYTES);
    gp.max_seqs = who->limits.max_seqs;
    gp.max_queued = who->limits.max_queued;
    gp.identity = api_caller_identity(
        who, req->has_cache_salt ? req->cache_salt : NULL, req->cache_salt_len);
    return gp;
}

/* What the request used of the `charged` prompt tokens (nothing, when it
 * was cancelled before it started), for the key's metrics; the rest goes
 * back to its token budget. */
static void settle(const api_ctx *ctx, const api_caller *who, gen_request *g,
                   uint64_t charged)
{
    uint64_t used = 0;
    if (g != NULL) {
        gen_request_lock(g);
        const gen_usage u = gen_request_usage(g);
        const double queued = gen_request_queued_seconds(g);
        gen_request_unlock(g);
        if (queued >= 0) {
            used = u.prompt_tokens;
            metrics_key_queue_wait(who->metrics_key, queued);
        }
    }
    metrics_key_tokens(who->metrics_key, (size_t)used, 0);
    if (charged > used)
        token_budget_refund(ctx->budget, who->account,
                            who->limits.tokens_per_minute, charged - used,
                            monotonic_seconds());
}

/* Waits for the request to finish; false when the client left first. */
static bool wait_done(gen_request *g, const api_client *client)
{
    uint64_t version = 0;
    bool left = false;
    gen_request_lock(g);
    while (!gen_request_finished(g) && !left) {
        gen_request_wait(g, &version, COMPLETION_WAIT_SLICE_MS);
        left = api_client_gone(client);
    }
    gen_request_unlock(g);
    return !left;
}

/* A written answer and its charge, sent as the client reads it. */
typedef struct inspect_body {
    char *data;
    size_t len, at;
    work_charge charge;
} inspect_body;

static ssize_t body_read(void *self, char *buf, size_t max,
                         const api_client *client)
{
    (void)client;
    inspect_body *b = self;
    size_t n = b->len - b->at < max ? b->len - b->at : max;
    if (n == 0)
        return API_SOURCE_END;
    memcpy(buf, b->data + b->at, n);
    b->at += n;
    return (ssize_t)n;
}

static void body_free(void *self)
{
    inspect_body *b = self;
    free(b->data);
    work_charge_release(&b->charge);
    free(b);
}

/* Nothing to run: api_work only takes the answer's charge. */
static void charge_only(void *arg)
{
    (void)arg;
}

/* The answer of a finished request, or an error; `charge` (its bound) is
 * the answer's from now on, or released. */
static void respond(const served_model *served, const inspect_request *req,
                    gen_request *g, size_t bound, work_charge *charge,
                    api_response *r)
{
    api_error e;
    gen_request_lock(g);
    const bool cancelled = gen_request_output(g, 0)->finish == FINISH_CANCELLED;
    gpt2d_buf body = GPT2D_BUF_INIT;
    /* the bound at once: the answer never outgrows its charge */
    int rc = cancelled ? 0
             : buf_reserve(&body, bound) != 0
                 ? -1
                 : inspect_answer_write(&body, r->id, gen_request_inspect(g),
                                        req->prompt.ids, served->tok,
                                        served->id);
    gen_request_unlock(g);
    inspect_body *b = NULL;
    if (!cancelled && rc == 0 && body.len <= bound &&
        (b = calloc(1, sizeof *b)) != NULL) {
        /* what it holds, not what it might have */
        char *fit = realloc(body.data, body.len > 0 ? body.len : 1);
        b->data = fit != NULL ? fit : (char *)body.data;
        b->len = body.len;
        b->charge = *charge;
        work_charge_shrink(&b->charge, body.len);
        *charge = (work_charge){ 0 };
        metrics_add_inspect_bytes(b->len);
        api_response_source(r, 200, "application/json",
                            (api_source){ .self = b,
                                          .length = b->len,
                                          .read = body_read,
                                          .free = body_free });
        /* an inspect is never paused (engine_fair.c) */
        api_response_set_counts(r,
                                (api_counts){ .prompt_tokens = req->prompt.n });
        return;
    }
    work_charge_release(charge);
    if (cancelled) {
        api_error_set(&e, 503, NULL,
                      "the server is shutting down; the request "
                      "was cancelled");
        api_response_error(r, &e);
        return;
    }
    buf_free(&body);
    /* past its bound is a bug in inspect_answer_bound: refused, not sent */
    api_error_set(&e, 500, NULL, "out of memory building the answer");
    api_response_error(r, &e);
}

/* True, with a 400 in r, when the answer's bound is more than one caller
 * may ever hold (half of --response-memory, set by hand below what the
 * inspect limits allow: main.c warns at start).  No wait would make it
 * fit, so it is not the 429 a client retries, and it names the numbers. */
static bool never_fits(const api_ctx *ctx, const inspect_request *req,
                       size_t bound, api_response *r)
{
    workpool_stats ws;
    workpool_get_stats(ctx->work, &ws);
    if (bound <= ws.memory / 2)
        return false;
    api_error e;
    api_error_set(&e, 400, NULL,
                  "the answer of this inspect (%zu tokens, %zu layers, "
                  "attention %s, logit_lens %zu) may hold %zu bytes, more "
                  "than the %zu one API key (or client address) may hold, "
                  "half of this server's response-memory: it can never be "
                  "answered; ask for fewer layers or tokens, no attention or "
                  "a shorter logit_lens",
                  req->prompt.n, req->params.n_layers,
                  req->params.attention ? "true" : "false",
                  req->params.logit_lens, bound, ws.memory / 2);
    e.code = "response_memory_per_key";
    api_response_error(r, &e);
    return true;
}

typedef struct inspect_parse_job {
    const api_ctx *ctx;
    inspect_request *req;
    served_model *model;
} inspect_parse_job;

/* The body into j->req for j->model, on the work pool (api_ctx.h). */
static int inspect_parse(void *arg, json_t *root, api_error *e)
{
    inspect_parse_job *j = arg;
    const model_config *cfg = &j->model->mdl.config;
    const inspect_limits lim = {
        .n_ctx = cfg->n_ctx,
        .max_tokens = j->ctx->inspect_max_tokens,
        .max_attention = j->ctx->inspect_max_attention,
        .n_layer = cfg->n_layer,
        .n_head = cfg->n_head,
        .vocab_size = tokenizer_vocab_size(j->model->tok),
    };
    return inspect_request_parse_root(j->req, root, j->model->tok, &lim, e);
}

/* The rest of an inspect, its request parsed for `served`. */
static void serve_parsed(const api_ctx *ctx, const api_caller *who,
                         served_model *served, const inspect_request *req,
                         const char *body, size_t len, const api_client *client,
                         api_response *r)
{
    api_error e;
    if (ctx->log_prompts)
        log_info("inspect prompt: %.*s", (int)(len < 4096 ? len : 4096), body);
    /* the answer's id, and its X-Request-Id unless the client sent one */
    char id[sizeof r->id];
    api_random_id(id, sizeof id, "insp-");
    api_response_set_id(r, id);
    /* an inspect generates nothing: its prompt is what it costs (first:
     * a key over its budget is told so at once, not after a memory wait) */
    char what[48];
    snprintf(what, sizeof what, "prompt %zu", req->prompt.n);
    uint64_t charged = 0;
    int retry_after = 0;
    if (api_charge_tokens(ctx, who, req->prompt.n, what, "prompt",
                          "send fewer tokens", &charged, &e,
                          &retry_after) != 0) {
        api_response_set_retry_after(r, retry_after);
        api_response_error(r, &e);
        return;
    }
    /* the answer's memory before the engine's work: waited for as a
     * /tokenize job's is, refused if it does not come */
    const size_t bound = inspect_answer_bound(
        &req->params, req->prompt.n, served->mdl.config.n_head,
        served->token_text_most, strlen(id), strlen(served->id));
    work_charge charge = { 0 };
    if (never_fits(ctx, req, bound, r) ||
        api_work(ctx, who, client, charge_only, NULL, bound, &charge, r) != 0) {
        settle(ctx, who, NULL, charged); /* the tokens go back */
        return;
    }
    const gen_params gp = params_of(req, who);
    gen_request *g = NULL;
    engine_refusal why;
    engine_status st = engine_submit(
        served->eng, &(engine_submission){ .params = &gp, .n_prompts = 1 }, &g,
        &why);
    if (st != ENGINE_OK) {
        api_engine_error(who, st, &why, &e, &r->retry_after);
        api_response_error(r, &e);
    } else if (!wait_done(g, client)) {
        metrics_cancelled();
        api_response_gone(r);
    } else {
        respond(served, req, g, bound, &charge, r);
    }
    work_charge_release(&charge); /* unless the answer took it */
    settle(ctx, who, g, charged);
    gen_request_release(g);
}

void api_inspect(const api_ctx *ctx, const api_caller *who, const char *body,
                 size_t len, const api_client *client, api_response *r)
{
    inspect_request req;
    memset(&req, 0, sizeof req);
    inspect_parse_job pj = { ctx, &req, NULL };
    if (api_parse_for_model(ctx, who, client, body, len, inspect_parse, NULL,
                            &pj, 0, NULL, &pj.model, r) != 0)
        return;
    serve_parsed(ctx, who, pj.model, &req, body, len, client, r);
    inspect_request_free(&req);
    api_model_release(ctx, pj.model);
}
