/* gen_request.c — the request shared by a connection and the engine (see
 * gen_request.h): made, its outputs' buffers sized, reference-counted and
 * freed; its outputs published under its own lock; and the readers'
 * functions.
 *
 * Threads: request_create runs on the submitting HTTP thread before the
 * request is shared; the engine thread writes the outputs (request_touch,
 * request_finish_seq, request_finish_all) under the request's lock, which
 * it takes after e->lock, never before (engine.c, "Locks"); a connection
 * reads them under that lock.  A request is freed by whichever side lets
 * go last. */
#include "config.h"

#include "engine/gen_request_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/monotonic.h"

_Static_assert(ENGINE_SESSION_ID_MAX == KVCACHE_SESSION_ID_MAX,
               "session ids are stored in the KV cache");
_Static_assert(ENGINE_MAX_STOP <= TEXTSTREAM_MAX_STOP,
               "every stop string reaches the text stream");
_Static_assert(ENGINE_MAX_LOGPROBS <= SAMPLER_MAX_TOP_LOGPROBS,
               "the sampler reports every alternative we keep");

/* ---- made and freed ---- */

void request_free(gen_request *r)
{
    if (r == NULL)
        return;
    if (r->seqs != NULL) {
        for (size_t i = 0; i < r->n_seq; i++) {
            seq_state *s = &r->seqs[i];
            free(s->history);
            free(s->tokens);
            free(s->text_end);
            textstream_free(&s->ts);
        }
        free(r->seqs);
    }
    free(r->prompt_scores);
    free(r->block_residuals);
    free(r->boundary_residual);
    inspect_capture_free(r->inspect);
    free(r->prompt);
    free(r->prediction);
    free(r->bias);
    free(r->session);
    if (r->grammar != NULL)
        grammar_release(r->grammar);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Under a constraint a stop string ends the text only where the text before
 * it is a whole answer; elsewhere it is part of the answer. */
static bool stop_ends_whole_answer(void *ctx, const char *text, size_t len)
{
    gen_request *r = ctx;
    grammar_state st;
    return grammar_advance_bytes(r->grammar, grammar_start(r->grammar), text,
                                 len, &st, NULL) == 0 &&
           grammar_accepts(r->grammar, st);
}

static int seq_init(const request_setup *setup, gen_request *r, seq_state *s,
                    size_t i, const gen_params *p)
{
    size_t n = r->max_tokens > 0 ? r->max_tokens : 1;
    /* the prompt, then what it generates: what a preempted sequence
     * recomputes when it resumes, in one piece */
    s->history = malloc((r->n_prompt + n) * sizeof *s->history);
    s->tokens = malloc(n * sizeof *s->tokens);
    s->text_end = malloc(n * sizeof *s->text_end);
    if (s->history == NULL || s->tokens == NULL || s->text_end == NULL)
        return -1;
    memcpy(s->history, r->prompt, r->n_prompt * sizeof *s->history);
    s->generated = s->history + r->n_prompt;
    s->t_paused = -1.0;
    if (textstream_init(&s->ts, r->max_tokens * setup->max_token_bytes, p->stop,
                        p->n_stop, NULL) != 0)
        return -1;
    sampler_rng_seed(&s->rng, p->seed + i);
    if (r->grammar != NULL) {
        s->constraint = grammar_start(r->grammar);
        textstream_set_stop_check(&s->ts, stop_ends_whole_answer, r);
    }
    s->phase = i == 0 ? SEQ_PREFILL : SEQ_WAIT_PREFILL;
    s->out.tokens = s->tokens;
    s->out.token_text_end = s->text_end;
    s->out.text = textstream_text(&s->ts);
    return 0;
}

gen_request *request_create(const gen_params *p, const request_setup *setup)
{
    gen_request *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    monotonic_cond_init(&r->cond);
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->n_seq = p->n_sequences;
    r->seed = p->seed;
    r->score_prompt = p->score_prompt;
    /* an inspect request generates nothing; background work does not
     * speculate: a draft buys one stream's latency with compute, which
     * batch work wants for throughput, and its steps stay ones an
     * interactive request can stop (engine.c) */
    if (p->inspect == NULL && !p->background &&
        (p->speculative > 0 || (p->speculative == 0 && setup->spec_default)))
        r->spec_max_draft = setup->spec_max_draft;
    r->n_top = p->logprobs ? p->n_top_logprobs : 0;
    r->sampling = p->sampling;
    r->sampling.n_top_logprobs = r->n_top;
    /* The sampled token's logprob is shown with logprobs and ranks best_of
     * sequences; otherwise the sampler can skip its log-sum-exp pass. */
    r->sampling.skip_logprob = !p->logprobs && r->n_seq == 1;
    r->usage.prompt_tokens = p->n_prompt;
    r->queued_seconds = -1.0;
    r->prompt = malloc(p->n_prompt * sizeof *r->prompt);
    r->seqs = calloc(r->n_seq, sizeof *r->seqs);
    if (r->prompt == NULL || r->seqs == NULL)
        goto fail;
    memcpy(r->prompt, p->prompt, p->n_prompt * sizeof *r->prompt);
    if (r->spec_max_draft > 0 && p->n_prediction > 0) {
        r->prediction = malloc(p->n_prediction * sizeof *r->prediction);
        if (r->prediction == NULL)
            goto fail;
        memcpy(r->prediction, p->prediction,
               p->n_prediction * sizeof *r->prediction);
        r->n_prediction = p->n_prediction;
    }
    if (p->sampling.n_logit_bias > 0) {
        r->bias = malloc(p->sampling.n_logit_bias * sizeof *r->bias);
        if (r->bias == NULL)
            goto fail;
        memcpy(r->bias, p->sampling.logit_bias,
               p->sampling.n_logit_bias * sizeof *r->bias);
    }
    r->sampling.logit_bias = r->bias;
    if (p->grammar != NULL) {
        r->grammar = p->grammar;
        grammar_ref(r->grammar);
    }
    if (p->session_id != NULL && (r->session = strdup(p->session_id)) == NULL)
        goto fail;
    r->id = p->identity;
    static const uint8_t zero[SHA256_BYTES];
    memcpy(r->account,
           memcmp(p->account, zero, SHA256_BYTES) != 0 ? p->account
                                                       : p->identity.owner,
           SHA256_BYTES);
    r->max_seqs = p->max_seqs > 0 ? p->max_seqs : setup->max_seqs;
    r->max_queued = p->max_queued > 0 ? p->max_queued : setup->max_queued;
    r->max_sessions = p->max_sessions > 0 ? p->max_sessions
                                          : setup->max_sessions;
    r->background = p->background;
    r->cost = (double)p->n_prompt +
              (double)p->n_sequences *
                  (double)(p->max_tokens > 0 ? p->max_tokens : 1);
    if (p->inspect != NULL) {
        /* its buffers come when it starts (engine_admit.c, start_inspect) */
        if (inspect_capture_create(&r->inspect, p->inspect, setup->model,
                                   p->n_prompt) != 0)
            goto fail;
        r->cost += (double)inspect_lens_rows(r->inspect);
    }
    if (r->score_prompt) {
        r->prompt_scores = calloc(p->n_prompt, sizeof *r->prompt_scores);
        if (r->prompt_scores == NULL)
            goto fail;
        /* nothing predicts the first token */
        r->prompt_scores[0].token = r->prompt[0];
        r->prompt_scores[0].logprob = NAN;
        const size_t C = setup->model->n_embd;
        r->block_residuals = calloc(p->n_prompt / KV_BLOCK_TOKENS * C + 1,
                                    sizeof *r->block_residuals);
        r->boundary_residual = calloc(C, sizeof *r->boundary_residual);
        if (r->block_residuals == NULL || r->boundary_residual == NULL)
            goto fail;
    }
    for (size_t i = 0; i < r->n_seq; i++) {
        if (seq_init(setup, r, &r->seqs[i], i, p) != 0)
            goto fail;
    }
    return r;
fail:
    request_free(r);
    return NULL;
}

void request_fill_token(gen_token *t, const sample_result *res, size_t n_top)
{
    t->token = res->token;
    t->logprob = res->logprob;
    t->n_top = res->n_top < n_top ? res->n_top : n_top;
    memcpy(t->top, res->top, t->n_top * sizeof t->top[0]);
}

void request_unref(gen_request *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        request_free(r);
}

/* ---- its outputs, published (the engine thread) ---- */

void request_touch(gen_request *r)
{
    r->version++;
    pthread_cond_broadcast(&r->cond);
}

/* With the request lock held: publishes the end of sequence i. */
void request_finish_seq(gen_request *r, size_t i, finish_reason why)
{
    seq_state *s = &r->seqs[i];
    if (s->phase == SEQ_DONE)
        return;
    textstream_finish(&s->ts);
    s->out.text_len = textstream_len(&s->ts);
    /* text held back for a stop string that never came belongs to the
     * last token */
    if (s->out.n_tokens > 0 && !textstream_stopped(&s->ts))
        s->text_end[s->out.n_tokens - 1] = s->out.text_len;
    s->out.finish = why;
    s->out.stop = textstream_stopped_by(&s->ts);
    s->phase = SEQ_DONE;
    r->n_finished++;
    request_touch(r);
}

void request_finish_all(gen_request *r, finish_reason why)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_seq; i++)
        request_finish_seq(r, i, why);
    pthread_mutex_unlock(&r->lock);
}

/* ---- the readers (a connection) ---- */

void gen_request_lock(gen_request *r)
{
    pthread_mutex_lock(&r->lock);
}
void gen_request_unlock(gen_request *r)
{
    pthread_mutex_unlock(&r->lock);
}

bool gen_request_wait(gen_request *r, uint64_t *version, int timeout_ms)
{
    const struct timespec now = monotonic_now();
    const struct timespec until = monotonic_after_ms(
        &now, timeout_ms > 0 ? timeout_ms : 0);
    while (r->version == *version) {
        if (timeout_ms == 0)
            return false;
        int rc = timeout_ms < 0
                     ? pthread_cond_wait(&r->cond, &r->lock)
                     : pthread_cond_timedwait(&r->cond, &r->lock, &until);
        if (rc == ETIMEDOUT && r->version == *version)
            return false;
    }
    *version = r->version;
    return true;
}

size_t gen_request_n_sequences(const gen_request *r)
{
    return r->n_seq;
}

const gen_output *gen_request_output(const gen_request *r, size_t sequence)
{
    return sequence < r->n_seq ? &r->seqs[sequence].out : NULL;
}

bool gen_request_finished(const gen_request *r)
{
    return r->n_finished == r->n_seq;
}

double gen_request_queued_seconds(const gen_request *r)
{
    return r->queued_seconds;
}

gen_usage gen_request_usage(const gen_request *r)
{
    return r->usage;
}

size_t gen_request_pauses(const gen_request *r, double *seconds)
{
    if (seconds != NULL)
        *seconds = r->paused_seconds;
    return r->pauses;
}

const inspect_capture *gen_request_inspect(const gen_request *r)
{
    return r->inspect;
}

void gen_request_cancel(gen_request *r)
{
    atomic_store(&r->cancelled, true);
    /* No engine lock here (lock order); the engine never sleeps while it
     * has a request, so it sees the flag at its next step. */
}

/* Only connections call this (the engine drops its reference with
 * request_unref): a client that lets go wants nothing more, so an unfinished
 * request is cancelled rather than computed for nobody. */
void gen_request_release(gen_request *r)
{
    if (r == NULL)
        return;
    gen_request_cancel(r);
    request_unref(r);
}
