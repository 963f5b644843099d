/* api_completions.c — POST /v1/completions (OpenAI's legacy Completions)
 * and POST /v1/chat/completions: run a request, wait, build the answer.
 *
 * Each endpoint brings its completion_endpoint: the parser and the shapes
 * of its answer (/v1/completions' are below, with completion_request.c;
 * chat's are api_chat.c's, with chat_request.c).  The rest is one path: the
 * prompts go to the engine in one engine_submit, one engine request each
 * (each runs best_of sequences; the engine checks capacity and quotas, the
 * parsers only the request's shape), and
 * either the handler waits for all of them and builds one JSON response
 * here, or it hands the run to completion_stream.c, which turns the
 * engine's output into SSE chunks as it grows.
 *
 * Callers: http.c, on the connection's own thread; the handler blocks while
 * the body is parsed on the work pool (api_work) and while the engine
 * works, and looks at its socket every COMPLETION_WAIT_SLICE_MS. */
#include "api/api_completions.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_chat.h"
#include "api/api_responses.h"
#include "api/completion_run.h"
#include "api/completion_stream.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"

void completion_rank(const gen_output *const *outs, size_t n_seq, size_t *order)
{
    /* Insertion sort: n_seq is at most the slot count. */
    for (size_t i = 0; i < n_seq; i++) {
        size_t j = i;
        while (j > 0 &&
               outs[order[j - 1]]->cum_logprob < outs[i]->cum_logprob) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

json_t *completion_choice_json(const tokenizer *tok,
                               const completion_request *req,
                               size_t prompt_index, size_t index,
                               const gen_output *out)
{
    char *ptext = NULL;
    size_t plen = 0;
    if ((req->echo || req->logprobs) &&
        completion_prompt_bytes(tok, &req->prompts[prompt_index], &ptext,
                                &plen) != 0)
        return NULL;
    const size_t prompt_chars = utf8_chars(ptext, plen);
    if (!req->echo)
        plen = 0; /* offsets count the prompt; text omits it */
    size_t len = plen + out->text_len;
    char *text = malloc(len + 1);
    if (text == NULL) {
        free(ptext);
        return NULL;
    }
    if (plen > 0)
        memcpy(text, ptext, plen);
    if (out->text_len > 0)
        memcpy(text + plen, out->text, out->text_len);
    json_t *logprobs = json_null();
    if (req->logprobs) {
        bool scored = req->echo && out->prompt_scores != NULL;
        text_cursor at = { .chars = scored ? 0 : prompt_chars };
        json_decref(logprobs);
        logprobs = completion_logprobs_json(
            tok, scored ? out->prompt_scores : NULL,
            scored ? out->n_prompt_scored : 0, out->tokens, 0, out->n_tokens,
            &at, prompt_chars + utf8_chars(out->text, out->text_len));
    }
    const char *fin = completion_finish_string(out->finish);
    json_t *choice = json_pack(
        "{s:o, s:I, s:o, s:o}", "text", api_json_string_bytes(text, len),
        "index", (json_int_t)index, "logprobs",
        logprobs != NULL ? logprobs : json_null(), "finish_reason",
        fin != NULL ? json_string(fin) : json_null());
    free(text);
    free(ptext);
    if (choice != NULL && req->return_token_ids &&
        completion_add_token_ids(choice, &req->prompts[prompt_index],
                                 out->tokens, 0, out->n_tokens) != 0) {
        json_decref(choice);
        return NULL;
    }
    return choice;
}

static void params_for_prompt(const completion_run *run, size_t p,
                              gen_params *gp)
{
    const completion_request *req = &run->req;
    memset(gp, 0, sizeof *gp);
    gp->prompt = req->prompts[p].ids;
    gp->n_prompt = req->prompts[p].n;
    gp->max_tokens = req->max_tokens;
    gp->n_sequences = req->best_of;
    gp->sampling = req->sampling;
    gp->sampling.n_top_logprobs = req->logprobs ? req->n_logprobs : 0;
    /* Every prompt gets the same seed, so a prompt gives the same text alone
     * or inside an array. */
    gp->seed = req->seed;
    gp->speculative = req->speculative;
    gp->prediction = req->prediction;
    gp->n_prediction = req->n_prediction;
    for (size_t i = 0; i < req->n_stop; i++)
        gp->stop[i] = req->stop[i];
    gp->n_stop = req->n_stop;
    gp->logprobs = req->logprobs;
    gp->n_top_logprobs = req->logprobs ? req->n_logprobs : 0;
    gp->score_prompt = req->echo && req->logprobs;
    gp->session_id = req->session_id[0] != '\0' ? req->session_id : NULL;
    gp->grammar = run->grammar;
    memcpy(gp->account, run->caller.account, SHA256_BYTES);
    gp->max_seqs = run->caller.limits.max_seqs;
    gp->max_queued = run->caller.limits.max_queued;
    gp->background = run->caller.background;
    gp->identity = api_caller_identity(
        &run->caller, req->has_cache_salt ? req->cache_salt : NULL,
        req->cache_salt_len);
}

int api_engine_error(const api_caller *caller, engine_status st,
                     const engine_refusal *why, api_error *e, int *retry_after)
{
    const size_t key = caller->metrics_key;
    switch (st) {
    case ENGINE_QUEUE_FULL:
        *retry_after = 1;
        metrics_key_refused(key, METRICS_REFUSED_QUEUE_FULL);
        api_error_set(e, 429, NULL,
                      "the server is busy: the request queue is full, "
                      "retry shortly");
        e->code = "queue_full";
        return -1;
    case ENGINE_CALLER_QUEUE_FULL:
        *retry_after = 1;
        metrics_key_refused(key, METRICS_REFUSED_MAX_QUEUED);
        api_error_set(
            e, 429, NULL,
            "too many queued requests for this API key "
            "(or client address): it has %zu waiting, its limit "
            "(max-queued-per-key); retry when one of them has started",
            why->limit);
        e->code = "max_queued_per_key";
        return -1;
    case ENGINE_SESSION_QUOTA:
        *retry_after = 1;
        metrics_key_refused(key, METRICS_REFUSED_MAX_SESSIONS);
        api_error_set(e, 429, "session_id",
                      "too many sessions busy for this "
                      "API key (or client address): the limit "
                      "max-sessions-per-key is reached and none of its "
                      "sessions is idle; retry when one has finished");
        e->code = "max_sessions_per_key";
        return -1;
    case ENGINE_SESSION_BUSY:
        api_error_set(e, 409, "session_id",
                      "session is busy with another request");
        e->code = "session_busy";
        return -1;
    case ENGINE_STOPPING:
        return api_error_set(e, 503, NULL, "the server is shutting down");
    case ENGINE_INVALID:
        return api_error_set(e, 500, NULL,
                             "the request passed validation but "
                             "the engine refused it (a bug: please report it)");
    default:
        return api_error_set(e, 500, NULL, "out of memory");
    }
}

/* A request that needs no model work: max_tokens 0 without scoring. */
static bool run_is_trivial(const completion_request *req)
{
    return req->max_tokens == 0 && !(req->echo && req->logprobs) &&
           req->session_id[0] == '\0';
}

/* A client that hangs up and comes straight back with its session finds
 * its old request live until its connection thread notices (one wait slice)
 * and cancels it: a busy session is asked again for this long before the
 * answer is 409. */
#define SESSION_BUSY_GRACE_MS 250

/* The field that sets max_tokens, as the client would lower it. */
static const char *max_field(const completion_request *req)
{
    return req->max_param != NULL ? req->max_param : "max_completion_tokens";
}

/* Takes what the run may come to use from its caller's token budget: every
 * prompt token, and max_tokens for each sequence (best_of of them).  A
 * refusal names the field to change: the prompt when it alone is over the
 * whole budget (no max could help), else the max. */
static int run_charge(completion_run *run, api_error *e, int *retry_after)
{
    const completion_request *req = &run->req;
    uint64_t prompt = 0;
    for (size_t p = 0; p < req->n_prompts; p++)
        prompt += req->prompts[p].n;
    const size_t seqs = req->n_prompts * req->best_of;
    const uint64_t gen = (uint64_t)seqs * req->max_tokens;
    const uint64_t budget = run->caller.limits.tokens_per_minute;
    const char *param = max_field(req);
    char what[96], fix[96];
    snprintf(what, sizeof what, "prompt %ju + %zu x %s %zu", (uintmax_t)prompt,
             seqs, max_field(req), req->max_tokens);
    if (budget > 0 && prompt > budget) {
        param = run->ep->prompt_field;
        snprintf(fix, sizeof fix, "shorten the %s", param);
    } else if (req->max_param == NULL) {
        /* chat's default max is already what the budget allows (at least
         * 1): only fewer sequences or a shorter prompt can fit */
        param = seqs > 1 && prompt < budget ? "n" : run->ep->prompt_field;
        snprintf(fix, sizeof fix, "lower n or shorten the %s",
                 run->ep->prompt_field);
    } else {
        snprintf(fix, sizeof fix, "lower %s or %s", param, run->ep->n_fields);
    }
    return completion_run_charge(run, prompt + gen, what, param, fix, e,
                                 retry_after);
}

/* A request larger than the whole KV cache, named by the field the client
 * sent: its max, or (chat's default max being what the cache holds) n. */
static int refuse_kv_size(const completion_run *run, size_t need,
                          size_t n_prompt, size_t have, api_error *e)
{
    const completion_request *req = &run->req;
    const bool given = req->max_param != NULL;
    char lower[96];
    if (given)
        snprintf(lower, sizeof lower, "%s or %s", req->max_param,
                 run->ep->n_fields);
    else
        snprintf(lower, sizeof lower, "%s or the messages", run->ep->n_fields);
    return api_error_set(e, 400, given ? req->max_param : "n",
                         "this request needs up to %zu KV-cache blocks of %d "
                         "tokens (%zu prompt tokens + %s %zu, %zu sequences), "
                         "and the cache holds %zu: lower %s",
                         need, KV_BLOCK_TOKENS, n_prompt, max_field(req),
                         req->max_tokens, req->best_of, have, lower);
}

/* The token budget as the engine's gate: charged once the engine has
 * found that the run could run, before any of its prompts is queued. */
typedef struct charge_gate {
    completion_run *run;
    api_error *e;
    int *retry_after;
} charge_gate;

static int charge_at_gate(void *arg)
{
    charge_gate *g = arg;
    return run_charge(g->run, g->e, g->retry_after);
}

static int run_submit(completion_run *run, api_error *e, int *retry_after)
{
    run->reqs = calloc(run->req.n_prompts, sizeof *run->reqs);
    if (run->reqs == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    run->n_reqs = run->req.n_prompts;
    if (run_is_trivial(&run->req)) {
        run->short_cut = true;
        return run_charge(run, e, retry_after);
    }
    gen_params *gp = calloc(run->n_reqs, sizeof *gp);
    if (gp == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    for (size_t p = 0; p < run->n_reqs; p++)
        params_for_prompt(run, p, &gp[p]);
    charge_gate gate = { run, e, retry_after };
    const engine_submission sub = {
        .params = gp,
        .n_prompts = run->n_reqs,
        .gate = charge_at_gate,
        .gate_arg = &gate,
        .session_busy_wait_ms = SESSION_BUSY_GRACE_MS
    };
    engine_refusal why;
    engine_status st = engine_submit(run->model->eng, &sub, run->reqs, &why);
    free(gp);
    switch (st) {
    case ENGINE_OK:
        return 0;
    case ENGINE_GATE_CLOSED:
        return -1; /* run_charge wrote the refusal */
    /* The request's fault, not the server's load: 400 */
    case ENGINE_TOO_MANY_PROMPTS:
        return api_error_set(e, 400, "prompt",
                             "this request has %zu prompts "
                             "and this API key (or client address) may have "
                             "%zu waiting (max-queued-per-key): send at most "
                             "%zu prompts a request",
                             run->n_reqs, why.limit, why.limit);
    case ENGINE_TOO_LARGE:
        return refuse_kv_size(run, why.need, run->req.prompts[why.prompt].n,
                              why.have, e);
    default:
        completion_run_uncharge(run);
        return api_engine_error(&run->caller, st, &why, e, retry_after);
    }
}

/* Blocks until every engine request finished; false if the client left. */
static bool run_wait(completion_run *run, const api_client *client)
{
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        uint64_t version = 0;
        gen_request_lock(r);
        while (!gen_request_finished(r)) {
            gen_request_wait(r, &version, COMPLETION_WAIT_SLICE_MS);
            if (api_client_gone(client)) {
                gen_request_unlock(r);
                return false;
            }
        }
        gen_request_unlock(r);
    }
    return true;
}

/* Choices of one prompt: the n best of best_of, or all n in order. */
static int add_choices(const completion_run *run, size_t p, json_t *choices)
{
    const completion_request *req = &run->req;
    gen_request *r = run->reqs[p];
    if (r == NULL) {
        /* The trivial case: nothing generated. */
        gen_output empty = { 0 };
        empty.text = "";
        empty.finish = FINISH_LENGTH;
        for (size_t i = 0; i < req->n; i++) {
            json_t *c = run->ep->choice(run, p, p * req->n + i, &empty);
            if (c == NULL || json_array_append_new(choices, c) != 0)
                return -1;
        }
        return 0;
    }
    gen_request_lock(r);
    size_t n_seq = gen_request_n_sequences(r);
    const gen_output *outs[n_seq > 0 ? n_seq : 1];
    size_t order[n_seq > 0 ? n_seq : 1];
    for (size_t i = 0; i < n_seq; i++) {
        outs[i] = gen_request_output(r, i);
        order[i] = i;
    }
    if (req->best_of > req->n)
        completion_rank(outs, n_seq, order);
    int rc = 0;
    for (size_t i = 0; i < req->n && i < n_seq && rc == 0; i++) {
        json_t *c = run->ep->choice(run, p, p * req->n + i, outs[order[i]]);
        if (c == NULL || json_array_append_new(choices, c) != 0)
            rc = -1;
    }
    gen_request_unlock(r);
    return rc;
}

static bool run_any_cancelled(const completion_run *run)
{
    bool any = false;
    for (size_t p = 0; p < run->n_reqs && !any; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        for (size_t i = 0; i < gen_request_n_sequences(r); i++)
            if (gen_request_output(r, i)->finish == FINISH_CANCELLED)
                any = true;
        gen_request_unlock(r);
    }
    return any;
}

static void respond_whole(completion_run *run, api_response *r)
{
    api_error e;
    if (run->ep->whole != NULL) {
        const gen_usage u = completion_run_usage(run);
        json_t *body = run->ep->whole(run, u);
        if (body == NULL) {
            api_error_set(&e, 500, NULL, "out of memory building the response");
            api_response_error(r, &e);
            return;
        }
        api_response_set_counts(
            r, (api_counts){ .prompt_tokens = u.prompt_tokens,
                             .completion_tokens = u.completion_tokens,
                             .pauses = completion_run_pauses(run) });
        api_response_json(r, 200, body);
        return;
    }
    json_t *choices = json_array();
    for (size_t p = 0; p < run->n_reqs && choices != NULL; p++)
        if (add_choices(run, p, choices) != 0) {
            json_decref(choices);
            choices = NULL;
        }
    if (choices == NULL) {
        api_error_set(&e, 500, NULL, "out of memory building the response");
        api_response_error(r, &e);
        return;
    }
    gen_usage u = completion_run_usage(run);
    json_t *body = completion_envelope(run, choices);
    json_object_set_new(body, "usage", completion_usage_json(u));
    api_response_set_counts(
        r, (api_counts){ .prompt_tokens = u.prompt_tokens,
                         .completion_tokens = u.completion_tokens,
                         .pauses = completion_run_pauses(run) });
    api_response_json(r, 200, body);
}

/* The request's constraint compiled, or found compiled: a grammar's syntax
 * or size is the request's fault (400, naming where it came from). */
static int compile_constraint(completion_run *run, api_error *e)
{
    const api_constraint *c = &run->req.constraint;
    if (c->gbnf == NULL)
        return 0;
    gpt2d_error err;
    if (grammar_cache_get(run->model->grammars, c->gbnf, c->len, &run->grammar,
                          &err) != 0)
        return api_error_set(e, 400, c->param, "%s: %s", c->param, err.message);
    return 0;
}

/* The body into run->req for run->model, on the work pool (api_parse.h). */
static int parse_for_model(void *arg, json_t *root, api_error *e)
{
    completion_run *run = arg;
    const served_model *m = run->model;
    const completion_limits lim = {
        .n_ctx = m->mdl.config.n_ctx,
        .vocab_size = tokenizer_vocab_size(m->tok),
        .max_sequences = m->n_slots,
        .max_n = run->ctx->max_n,
        .max_stop_bytes = run->ctx->max_stop_bytes,
        .kv_blocks = engine_kv_blocks(m->eng),
        .token_budget = run->caller.limits.tokens_per_minute,
    };
    if (run->ep->parse(&run->req, run->ctx, &run->caller, m, &lim, root, e) !=
        0)
        return -1;
    return compile_constraint(run, e);
}

/* A body naming no model: the endpoint may name it (api_parse_for_model). */
static void name_model(void *arg, json_t *root)
{
    completion_run *run = arg;
    if (run->ep->name_model != NULL)
        run->ep->name_model(run->ctx, &run->caller, root);
}

void completion_serve(const api_ctx *ctx, const api_caller *who,
                      const char *body, size_t len, const api_client *client,
                      api_response *r, const completion_endpoint *ep)
{
    completion_run *run = completion_run_new(ep, ctx, who);
    api_error e;
    if (run == NULL) {
        api_error_set(&e, 500, NULL, "out of memory");
        api_response_error(r, &e);
        return;
    }
    if (api_parse_for_model(ctx, who, client, body, len, parse_for_model,
                            name_model, run, 0, NULL, &run->model, r) != 0) {
        completion_run_free(run);
        return;
    }
    completion_run_start(run);
    if (ctx->log_prompts)
        log_info("%s prompt: %.*s", ep->log_label,
                 (int)(len < 4096 ? len : 4096), body);
    api_response_set_id(r, run->id);
    int retry_after = 0;
    if (run_submit(run, &e, &retry_after) != 0) {
        api_response_set_retry_after(r, retry_after);
        api_response_error(r, &e);
        completion_run_free(run);
        return;
    }
    if (run->req.stream) {
        api_source stream;
        if ((ep->stream_open != NULL
                 ? ep->stream_open(run, &stream)
                 : completion_stream_open(run, &stream)) != 0) {
            completion_run_cancel(run);
            completion_run_free(run);
            api_error_set(&e, 500, NULL, "out of memory");
            api_response_error(r, &e);
            return;
        }
        api_response_source(r, 200, "text/event-stream", stream);
        return;
    }
    if (!run_wait(run, client)) {
        completion_run_cancel_for_client(run);
        api_response_gone(r);
    } else if (run_any_cancelled(run)) {
        api_error_set(&e, 503, NULL,
                      "the server is shutting down; the request was cancelled");
        api_response_error(r, &e);
    } else {
        respond_whole(run, r);
    }
    completion_run_free(run);
}

/* ---- /v1/completions' own shapes ---- */

static int text_parse(completion_request *req, const api_ctx *ctx,
                      const api_caller *caller, const served_model *served,
                      const completion_limits *lim, json_t *root, api_error *e)
{
    (void)ctx;
    (void)caller;
    return completion_request_parse_root(req, root, served->tok, lim, e);
}

static json_t *text_choice(const completion_run *run, size_t prompt,
                           size_t index, const gen_output *out)
{
    return completion_choice_json(run->model->tok, &run->req, prompt, index,
                                  out);
}

static json_t *text_chunk_logprobs(const completion_run *run,
                                   const gen_token *gen, size_t from, size_t to,
                                   text_cursor *at)
{
    return completion_logprobs_json(run->model->tok, NULL, 0, gen, from, to, at,
                                    SIZE_MAX);
}

static json_t *text_chunk_choice(size_t index, const char *text, size_t len,
                                 json_t *logprobs, const char *finish)
{
    return json_pack("{s:o, s:I, s:o, s:o}", "text",
                     api_json_string_bytes(text, len), "index",
                     (json_int_t)index, "logprobs",
                     logprobs != NULL ? logprobs : json_null(), "finish_reason",
                     finish != NULL ? json_string(finish) : json_null());
}

static const completion_endpoint text_endpoint = {
    .id_prefix = "cmpl-",
    .object = "text_completion",
    .chunk_object = "text_completion",
    .log_label = "completion",
    .n_fields = "n/best_of",
    .prompt_field = "prompt",
    .parse = text_parse,
    .choice = text_choice,
    .chunk_logprobs = text_chunk_logprobs,
    .chunk_choice = text_chunk_choice,
};

void api_completions(const api_ctx *ctx, const api_caller *who,
                     const char *body, size_t len, const api_client *client,
                     api_response *r)
{
    completion_serve(ctx, who, body, len, client, r, &text_endpoint);
}

void api_chat_completions(const api_ctx *ctx, const api_caller *who,
                          const char *body, size_t len,
                          const api_client *client, api_response *r)
{
    completion_serve(ctx, who, body, len, client, r, &chat_endpoint);
}

void api_responses(const api_ctx *ctx, const api_caller *who, const char *body,
                   size_t len, const api_client *client, api_response *r)
{
    completion_serve(ctx, who, body, len, client, r, &responses_endpoint);
}
