/* completion_run.c — a completion in flight (see completion_run.h): made,
 * named and dated, charged to its caller's token budget, cancelled,
 * counted, released; and the answer's shared pieces, the envelope, usage, the
 * token ids of return_token_ids and the logprobs object
 * (completion_logprobs_json).
 *
 * Callers: api_completions.c and completion_stream.c, on the thread that
 * owns the run; gen_request outputs are read under their own locks. */
#include "api/completion_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "core/monotonic.h"

completion_run *completion_run_new(const completion_endpoint *ep,
                                   const api_ctx *ctx, const api_caller *who)
{
    completion_run *run = calloc(1, sizeof *run);
    if (run == NULL)
        return NULL;
    run->ep = ep;
    run->ctx = ctx;
    run->caller = *who;
    return run;
}

void completion_run_start(completion_run *run)
{
    completion_request_default_seed(&run->req, api_random_u64);
    api_random_id(run->id, sizeof run->id, run->ep->id_prefix);
    run->created = time(NULL);
}

int completion_run_charge(completion_run *run, uint64_t tokens,
                          const char *what, const char *param, const char *fix,
                          api_error *e, int *retry_after)
{
    return api_charge_tokens(run->ctx, &run->caller, tokens, what, param, fix,
                             &run->charged, e, retry_after);
}

void completion_run_uncharge(completion_run *run)
{
    token_budget_refund(run->ctx->budget, run->caller.account,
                        run->caller.limits.tokens_per_minute, run->charged,
                        monotonic_seconds());
    run->charged = 0;
}

void completion_run_cancel(completion_run *run)
{
    if (run->cancelled)
        return;
    run->cancelled = true;
    for (size_t i = 0; i < run->n_reqs; i++)
        if (run->reqs[i] != NULL)
            gen_request_cancel(run->reqs[i]);
}

void completion_run_cancel_for_client(completion_run *run)
{
    bool unfinished = false;
    for (size_t i = 0; !run->cancelled && i < run->n_reqs; i++) {
        gen_request *r = run->reqs[i];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        unfinished = unfinished || !gen_request_finished(r);
        gen_request_unlock(r);
    }
    if (unfinished)
        metrics_cancelled();
    completion_run_cancel(run);
}

/* What the run used of what it was charged: the prompts that started (a
 * prompt cancelled while queued cost nothing) and every token generated. */
static void run_settle(completion_run *run)
{
    const size_t key = run->caller.metrics_key;
    uint64_t prompt = 0, completion = 0;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL) {
            if (run->short_cut)
                prompt += run->req.prompts[p].n;
            continue; /* else never submitted */
        }
        gen_request_lock(r);
        gen_usage u = gen_request_usage(r);
        double queued = gen_request_queued_seconds(r), paused;
        size_t pauses = gen_request_pauses(r, &paused);
        gen_request_unlock(r);
        metrics_key_paused(key, pauses, paused);
        if (queued >= 0) {
            prompt += u.prompt_tokens;
            metrics_key_queue_wait(key, queued);
        }
        completion += u.completion_tokens;
    }
    metrics_key_tokens(key, (size_t)prompt, (size_t)completion);
    if (run->charged > prompt + completion)
        token_budget_refund(run->ctx->budget, run->caller.account,
                            run->caller.limits.tokens_per_minute,
                            run->charged - prompt - completion,
                            monotonic_seconds());
}

void completion_run_free(completion_run *run)
{
    if (run->reqs != NULL)
        run_settle(run);
    for (size_t i = 0; i < run->n_reqs; i++)
        if (run->reqs[i] != NULL)
            gen_request_release(run->reqs[i]);
    free(run->reqs);
    if (run->grammar != NULL)
        grammar_release(run->grammar);
    completion_request_free(&run->req);
    api_model_release(run->ctx, run->model);
    free(run);
}

gen_usage completion_run_usage(const completion_run *run)
{
    gen_usage u = { 0 };
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL) {
            u.prompt_tokens += run->req.prompts[p].n;
            continue;
        }
        gen_request_lock(r);
        gen_usage g = gen_request_usage(r);
        gen_request_unlock(r);
        u.prompt_tokens += g.prompt_tokens;
        u.cached_tokens += g.cached_tokens;
        u.completion_tokens += g.completion_tokens;
        u.draft_tokens += g.draft_tokens;
        u.accepted_tokens += g.accepted_tokens;
    }
    return u;
}

size_t completion_run_pauses(const completion_run *run)
{
    size_t pauses = 0;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        pauses += gen_request_pauses(r, NULL);
        gen_request_unlock(r);
    }
    return pauses;
}

/* OpenAI's usage; speculative decoding's drafts under its names for
 * Predicted Outputs' (accepted / rejected prediction tokens). */
json_t *completion_usage_json(gen_usage u)
{
    return json_pack(
        "{s:I, s:I, s:I, s:{s:I}, s:{s:I, s:I}}", "prompt_tokens",
        (json_int_t)u.prompt_tokens, "completion_tokens",
        (json_int_t)u.completion_tokens, "total_tokens",
        (json_int_t)(u.prompt_tokens + u.completion_tokens),
        "prompt_tokens_details", "cached_tokens", (json_int_t)u.cached_tokens,
        "completion_tokens_details", "accepted_prediction_tokens",
        (json_int_t)u.accepted_tokens, "rejected_prediction_tokens",
        (json_int_t)(u.draft_tokens - u.accepted_tokens));
}

static json_t *envelope(const completion_run *run, const char *object,
                        json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", run->id, "object",
                     object, "created", (json_int_t)run->created, "model",
                     run->model->id, "choices", choices);
}

json_t *completion_envelope(const completion_run *run, json_t *choices)
{
    return envelope(run, run->ep->object, choices);
}

json_t *completion_chunk_envelope(const completion_run *run, json_t *choices)
{
    return envelope(run, run->ep->chunk_object, choices);
}

const char *completion_finish_string(finish_reason f)
{
    switch (f) {
    case FINISH_STOP:
        return "stop";
    case FINISH_LENGTH:
        return "length";
    default:
        return NULL;
    }
}

int completion_prompt_bytes(const tokenizer *tok, const completion_prompt *p,
                            char **out, size_t *len)
{
    gpt2d_error err;
    return tokenizer_decode(tok, p->ids, p->n, out, len, &err);
}

/* JSON number, or null for the values JSON cannot carry. */
static json_t *logprob_json(float lp)
{
    return isfinite(lp) ? json_real(lp) : json_null();
}

/* One top_logprobs entry, OpenAI's way: the n_top most likely tokens and
 * the token itself, whose logprob is always there.  So logprobs 0 gives
 * the token alone, and k alternatives give k entries, or k + 1 when the
 * token is not among them (it comes last then).  Keys are token strings,
 * and two ids may render alike (ids past the tokenizer's vocabulary all
 * render ""): the token's own key holds its own logprob, so that
 * top_logprobs[i][tokens[i]] == token_logprobs[i] always; among the others
 * the likelier one keeps a key. */
static json_t *top_json(const tokenizer *tok, const gen_token *t)
{
    json_t *o = json_object();
    char *own = api_token_string(tok, t->token);
    if (o == NULL || own == NULL) {
        free(own);
        return o;
    }
    bool own_set = false;
    for (size_t k = 0; k < t->n_top; k++) {
        if (t->top[k].token == t->token) {
            json_object_set_new(o, own, logprob_json(t->logprob));
            own_set = true;
            continue;
        }
        char *s = api_token_string(tok, t->top[k].token);
        if (s != NULL && strcmp(s, own) != 0 && json_object_get(o, s) == NULL)
            json_object_set_new(o, s, logprob_json(t->top[k].logprob));
        free(s);
    }
    if (!own_set)
        json_object_set_new(o, own, logprob_json(t->logprob));
    free(own);
    return o;
}

/* Moves `at` past token id's bytes. */
static void cursor_advance(text_cursor *at, const tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *b = tokenizer_token_bytes(tok, id, &len);
    if (b != NULL)
        at->chars += utf8_count_starts(&at->utf8, b, len);
}

/* Appends one token's entries to the four logprobs arrays. */
static void logprobs_append(json_t *lp, const tokenizer *tok,
                            const gen_token *t, bool first_prompt,
                            size_t offset)
{
    char *s = api_token_string(tok, t->token);
    json_array_append_new(json_object_get(lp, "tokens"),
                          s != NULL ? api_json_string_bytes(s, strlen(s))
                                    : json_null());
    free(s);
    json_array_append_new(json_object_get(lp, "token_logprobs"),
                          first_prompt ? json_null()
                                       : logprob_json(t->logprob));
    json_array_append_new(json_object_get(lp, "top_logprobs"),
                          first_prompt ? json_null() : top_json(tok, t));
    json_array_append_new(json_object_get(lp, "text_offset"),
                          json_integer((json_int_t)offset));
}

json_t *completion_logprobs_json(const tokenizer *tok, const gen_token *prompt,
                                 size_t n_prompt, const gen_token *gen,
                                 size_t from, size_t to, text_cursor *at,
                                 size_t max_offset)
{
    json_t *lp = json_pack("{s:[], s:[], s:[], s:[]}", "tokens",
                           "token_logprobs", "top_logprobs", "text_offset");
    if (lp == NULL)
        return NULL;
    for (size_t i = 0; prompt != NULL && i < n_prompt; i++) {
        logprobs_append(lp, tok, &prompt[i], i == 0, at->chars);
        cursor_advance(at, tok, prompt[i].token);
    }
    if (prompt != NULL)
        at->utf8 = (utf8_decoder){ 0 };
    for (size_t i = from; i < to; i++) {
        logprobs_append(lp, tok, &gen[i], false,
                        at->chars < max_offset ? at->chars : max_offset);
        cursor_advance(at, tok, gen[i].token);
    }
    return lp;
}

json_t *completion_ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

int completion_add_token_ids(json_t *choice, const completion_prompt *prompt,
                             const gen_token *gen, size_t from, size_t to)
{
    if (prompt != NULL &&
        json_object_set_new(choice, "prompt_token_ids",
                            completion_ids_json(prompt->ids, prompt->n)) != 0)
        return -1;
    json_t *ids = json_array();
    for (size_t i = from; ids != NULL && i < to; i++)
        if (json_array_append_new(ids, json_integer(gen[i].token)) != 0) {
            json_decref(ids);
            ids = NULL;
        }
    return json_object_set_new(choice, "token_ids", ids);
}
