/* engine.c — the scheduler (see engine.h).
 *
 * One engine thread loops over steps.  A step:
 *   1. drops cancelled requests (their blocks stay cached), cancels
 *      everything once a shutdown deadline has passed;
 *   2. admits queued requests fairly across callers while the KV cache can
 *      begin their sequences (a free sequence each, and every block they can
 *      come to need reserved; sequence 0 reuses the longest cached prefix):
 *      see "admission" below;
 *   3. builds one batch: a decode row for every generating sequence first,
 *      then prefill chunks of admitted prompts while they fit, unless
 *      prefill has had its share of the time while others decode;
 *   4. runs forward_step on the worker pool, then every sample (and prompt
 *      score) of the step on the pool too, one sampler_scratch per worker;
 *   5. appends the results to each request's output under its lock and wakes
 *      its reader.
 *
 * Inspect requests (inspect.h) prefill like a prompt that is scored: every
 * position computed, with their forward_capture on the batch, whose buffers
 * are taken as the request is admitted (a queued one holds none).  Then, with
 * a logit lens, their captured residual rows are unembedded in the steps
 * that follow, out of the prompt rows' budget (a lens row is one
 * unembedding, less work than a prompt row), and the top guesses of each
 * kept; the request ends when the last row is stored.
 *
 * Determinism.  A sequence's tokens must not depend on what else runs.
 * With the panel kernels forward_step is bit-identical per sequence
 * whatever shares the batch and however its prompt is chunked (test_forward
 * asserts both), and each sequence draws from its own RNG (seed + i).  The
 * OpenBLAS backend (--matmul blas) rounds a row by the rows that share its
 * sgemm call, so chunk boundaries stay a function of the sequence alone: a
 * request running alone then meets the same products every time.  A chunk
 * always ends at the next multiple of `chunk` positions, and when the step
 * cannot hold the whole next chunk the prompt waits for the next step
 * rather than run a shorter one.  The step
 * budget is max_batch_rows = chunk + n_slots, so one whole chunk always fits
 * beside every possible decode row and prefill never starves.
 *
 * n > 1 sequences of one prompt: sequence 0 prefills; when its last chunk
 * has run, the siblings fork its cache (full blocks shared) and every sequence
 * samples its first token from that same logits row with its own RNG, so
 * sequence 0 is exactly what the request with n = 1 would give.
 *
 * Locks.  e->lock guards the queue, the running list and the KV cache's
 * bookkeeping; the engine thread drops it while the model runs (forward_step
 * then writes only K/V of blocks its sequences alone hold, and the step's
 * tokens are committed once the lock is back).  A request's lock guards its
 * outputs.  Order: engine lock, then request lock — never the reverse, so
 * gen_request_cancel only sets an atomic flag. */
#include "config.h"

#include "engine/engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/forward.h"
#include "kv/kvcache.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"
#include "core/notify.h"
#include "engine/step_budget.h"
#include "text/textstream.h"
#include "core/thread.h"
#include "core/threadpool.h"

_Static_assert(ENGINE_SESSION_ID_MAX == KVCACHE_SESSION_ID_MAX,
               "session ids are stored in the KV cache");
_Static_assert(ENGINE_MAX_STOP <= TEXTSTREAM_MAX_STOP,
               "every stop string reaches the text stream");
_Static_assert(ENGINE_MAX_LOGPROBS <= SAMPLER_MAX_TOP_LOGPROBS,
               "the sampler reports every alternative we keep");

typedef enum seq_phase {
    SEQ_PREFILL,                /* sequence 0: prompt chunks still to run */
    SEQ_WAIT_PREFILL,           /* a sibling: waits for sequence 0's prefill */
    SEQ_DECODE,                 /* one row per step */
    SEQ_LENS,                   /* an inspect request: logit-lens rows to run */
    SEQ_DONE,
} seq_phase;

typedef struct seq_state {
    /* engine thread only */
    seq_phase phase;
    bool has_kv;                /* holds KV-cache sequence `kv` */
    size_t kv;
    sampler_rng rng;
    int32_t *generated;         /* [max_tokens] ids, for the penalties */
    int32_t next_token;         /* decode input: the last sampled token */
    double t_last_token;
    /* readers: under the request lock */
    gen_output out;
    gen_token *tokens;          /* [max_tokens] */
    size_t *text_end;           /* [max_tokens] */
    textstream ts;
} seq_state;

struct gen_request {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int refs;
    atomic_bool cancelled;      /* by its client, or by the drain deadline */
    uint64_t version;

    /* immutable after submit */
    int32_t *prompt;
    size_t n_prompt;
    size_t max_tokens;
    size_t n_seq;
    sampler_params sampling;    /* logit_bias points at `bias` */
    logit_bias_entry *bias;
    uint64_t seed;
    bool score_prompt;
    inspect_capture *inspect;   /* NULL, or what an inspect request keeps;
                                   written by the engine until it finishes */
    size_t n_top;               /* alternatives kept per token */
    char *session;              /* NULL or a copy */
    kv_identity id;             /* whose cache it may use */
    uint8_t account[SHA256_BYTES];  /* whose share of the engine it uses */
    size_t max_seqs;            /* that caller's limits (resolved) */
    size_t max_queued;
    size_t max_sessions;
    double cost;                /* prompt + n x max_tokens: what admission charges */
    double t_submit;

    /* engine thread only */
    bool first_token_seen;
    bool kv_deferred;           /* this admission pass: waits for memory
                                   another caller keeps, others pass it */
    bool kv_loading;            /* sequence 0 waits for blocks from disk */
    bool prefill_started;       /* a chunk of its prompt has run */
    size_t lens_done;           /* logit-lens rows stored */

    /* readers: under the lock */
    gen_token *prompt_scores;   /* [n_prompt] when score_prompt; shown to
                                   readers once complete */
    gen_usage usage;
    double queued_seconds;      /* from submit to admission; -1 before */
    size_t n_finished;
    seq_state *seqs;            /* [n_seq] */
};

/* What one forward_seq of the current batch stands for. */
typedef struct batch_entry {
    gen_request *r;
    size_t seq;
    bool prefill;
    size_t start;               /* position of the first row */
    size_t n_rows, n_logits;
} batch_entry;

/* A slice of one inspect request's logit-lens rows in the current step. */
typedef struct lens_entry {
    gen_request *r;
    size_t row0, n_rows;        /* its lens rows [row0, row0 + n_rows) */
    size_t first;               /* index of row0 among the step's lens rows */
} lens_entry;

/* One sample or prompt score of a step, run on the pool. */
typedef struct sample_job {
    gen_request *r;
    size_t seq;                 /* SIZE_MAX for a prompt score */
    size_t prompt_pos;          /* the scored prompt position */
    const float *logits;
    sample_result result;
} sample_job;

struct engine {
    const model *m;
    const tokenizer *tok;
    engine_config cfg;
    size_t vocab;
    size_t chunk;               /* prefill chunk: max_batch_rows - n_slots */
    step_budget budget;         /* engine thread: prefill rows beside decoding */
    size_t max_token_bytes;     /* longest token, sizes the text buffers */

    threadpool *pool;
    forward_state *fwd;
    sampler_scratch **scratch;  /* one per worker */
    size_t n_scratch;
    float *logits;              /* [max_batch_rows][vocab] */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    kv_cache *kv;
    size_t kv_blocks;           /* its size, fixed at creation */
    gen_request **queue;        /* ring of max_queue */
    size_t q_head, q_len;
    gen_request **running;      /* admission order; each holds its KV
                                   sequences */
    size_t n_running;
    struct caller_state *callers;   /* [n_callers_cap]: fairness bookkeeping */
    size_t n_callers_cap;
    double prefill_hold_until;  /* prefill waits until then while others decode */
    bool stopping;
    double deadline;
    bool thread_started, joined;
    pthread_t thread;
    notify_watchdog watchdog;   /* engine thread only, after create */

    /* step scratch, engine thread only */
    forward_seq *batch;         /* [max_batch_rows] */
    batch_entry *entries;
    sample_job *jobs;           /* [max_batch_rows + n_slots] */
    size_t n_jobs;
    lens_entry *lens;           /* [n_slots] */
    size_t n_lens, n_lens_rows;
    const float *lens_logits;   /* the lens rows' logits in `logits` */
};


/* ---- requests ---- */

static void request_free(gen_request *r)
{
    if (r == NULL)
        return;
    if (r->seqs != NULL) {
        for (size_t i = 0; i < r->n_seq; i++) {
            seq_state *s = &r->seqs[i];
            free(s->generated);
            free(s->tokens);
            free(s->text_end);
            textstream_free(&s->ts);
        }
        free(r->seqs);
    }
    free(r->prompt_scores);
    inspect_capture_free(r->inspect);
    free(r->prompt);
    free(r->bias);
    free(r->session);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Whether the request could ever run; the API layer validates first, this
 * keeps a bad caller from wedging the engine. */
static bool params_valid(const engine *e, const gen_params *p)
{
    const model_config *c = &e->m->config;
    if (p->prompt == NULL || p->n_prompt == 0 || p->n_prompt > c->n_ctx
        || p->max_tokens > c->n_ctx - p->n_prompt)
        return false;
    if (p->n_sequences == 0 || p->n_sequences > e->cfg.n_slots)
        return false;
    if (p->n_stop > ENGINE_MAX_STOP || p->n_top_logprobs > ENGINE_MAX_LOGPROBS)
        return false;
    if (p->session_id != NULL && strlen(p->session_id) > ENGINE_SESSION_ID_MAX)
        return false;
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (size_t)p->prompt[i] >= c->vocab_size)
            return false;
    return p->inspect == NULL ||
           (inspect_params_valid(p->inspect, c) && p->max_tokens == 0 &&
            p->n_sequences == 1 && p->session_id == NULL && !p->score_prompt);
}

/* Whether the request computes every prompt position itself, reusing no
 * cached prefix: scoring and inspecting need each position's own rows. */
static bool computes_whole_prompt(const gen_request *r)
{
    return r->score_prompt || r->inspect != NULL;
}

static int seq_init(engine *e, gen_request *r, seq_state *s, size_t i,
                    const gen_params *p)
{
    size_t n = r->max_tokens > 0 ? r->max_tokens : 1;
    s->generated = malloc(n * sizeof *s->generated);
    s->tokens = malloc(n * sizeof *s->tokens);
    s->text_end = malloc(n * sizeof *s->text_end);
    if (s->generated == NULL || s->tokens == NULL || s->text_end == NULL)
        return -1;
    if (textstream_init(&s->ts, r->max_tokens * e->max_token_bytes,
                        p->stop, p->n_stop, NULL) != 0)
        return -1;
    sampler_rng_seed(&s->rng, p->seed + i);
    s->phase = i == 0 ? SEQ_PREFILL : SEQ_WAIT_PREFILL;
    s->out.tokens = s->tokens;
    s->out.token_text_end = s->text_end;
    s->out.text = textstream_text(&s->ts);
    return 0;
}

static gen_request *request_create(engine *e, const gen_params *p)
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
    r->n_top = p->logprobs ? p->n_top_logprobs : 0;
    r->sampling = p->sampling;
    r->sampling.n_top_logprobs = r->n_top;
    /* The sampled token's logprob is shown with logprobs and ranks best_of
     * sequences; otherwise the sampler can skip its log-sum-exp pass. */
    r->sampling.skip_logprob = !p->logprobs && r->n_seq == 1;
    r->usage.prompt_tokens = p->n_prompt;
    r->queued_seconds = -1.0;
    r->t_submit = monotonic_seconds();
    r->prompt = malloc(p->n_prompt * sizeof *r->prompt);
    r->seqs = calloc(r->n_seq, sizeof *r->seqs);
    if (r->prompt == NULL || r->seqs == NULL)
        goto fail;
    memcpy(r->prompt, p->prompt, p->n_prompt * sizeof *r->prompt);
    if (p->sampling.n_logit_bias > 0) {
        r->bias = malloc(p->sampling.n_logit_bias * sizeof *r->bias);
        if (r->bias == NULL)
            goto fail;
        memcpy(r->bias, p->sampling.logit_bias,
               p->sampling.n_logit_bias * sizeof *r->bias);
    }
    r->sampling.logit_bias = r->bias;
    if (p->session_id != NULL && (r->session = strdup(p->session_id)) == NULL)
        goto fail;
    r->id = p->identity;
    static const uint8_t zero[SHA256_BYTES];
    memcpy(r->account, memcmp(p->account, zero, SHA256_BYTES) != 0
                       ? p->account : p->identity.owner, SHA256_BYTES);
    r->max_seqs = p->max_seqs > 0 ? p->max_seqs : e->cfg.max_seqs_per_caller;
    r->max_queued = p->max_queued > 0 ? p->max_queued
                                      : e->cfg.max_queued_per_caller;
    r->max_sessions = p->max_sessions > 0 ? p->max_sessions
                                          : e->cfg.max_sessions_per_caller;
    r->cost = (double)p->n_prompt +
              (double)p->n_sequences * (double)(p->max_tokens > 0 ? p->max_tokens : 1);
    if (p->inspect != NULL) {
        /* its buffers come when it starts (start_inspect) */
        if (inspect_capture_create(&r->inspect, p->inspect, &e->m->config,
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
    }
    for (size_t i = 0; i < r->n_seq; i++) {
        if (seq_init(e, r, &r->seqs[i], i, p) != 0)
            goto fail;
    }
    return r;
fail:
    request_free(r);
    return NULL;
}

static void request_touch(gen_request *r)
{
    r->version++;
    pthread_cond_broadcast(&r->cond);
}

/* With the request lock held: publishes the end of sequence i. */
static void seq_finish(gen_request *r, size_t i, finish_reason why)
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
    s->phase = SEQ_DONE;
    r->n_finished++;
    request_touch(r);
}

static void request_finish_all(gen_request *r, finish_reason why)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_seq; i++)
        seq_finish(r, i, why);
    pthread_mutex_unlock(&r->lock);
}

/* ---- public request API ---- */

void gen_request_lock(gen_request *r) { pthread_mutex_lock(&r->lock); }
void gen_request_unlock(gen_request *r) { pthread_mutex_unlock(&r->lock); }

bool gen_request_wait(gen_request *r, uint64_t *version, int timeout_ms)
{
    const struct timespec now = monotonic_now();
    const struct timespec until = monotonic_after_ms(&now, timeout_ms > 0 ? timeout_ms : 0);
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

size_t gen_request_n_sequences(const gen_request *r) { return r->n_seq; }

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

static void request_unref(gen_request *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        request_free(r);
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

/* ---- the queue and the running set (engine lock held) ---- */

static gen_request *queue_at(const engine *e, size_t i)
{
    return e->queue[(e->q_head + i) % e->cfg.max_queue];
}

static bool holds_session(const gen_request *r, const uint8_t *owner,
                          const char *session, bool live_only)
{
    return r->session != NULL && strcmp(r->session, session) == 0 &&
           memcmp(r->id.owner, owner, SHA256_BYTES) == 0 &&
           !(live_only && atomic_load(&r->cancelled));
}

/* Whether a request of `session` is queued or running.  live_only skips
 * cancelled ones: the next step reaps them before it admits anything, so
 * a client that hangs up and comes straight back with its session is
 * queued behind its old request's last step rather than refused. */
static bool session_in_use(const engine *e, const uint8_t *owner,
                           const char *session, bool live_only)
{
    for (size_t i = 0; i < e->q_len; i++)
        if (holds_session(queue_at(e, i), owner, session, live_only))
            return true;
    for (size_t i = 0; i < e->n_running; i++)
        if (holds_session(e->running[i], owner, session, live_only))
            return true;
    return false;
}

static void release_kv(engine *e, seq_state *s, double now)
{
    if (s->has_kv) {
        kvcache_seq_end(e->kv, s->kv, now);
        s->has_kv = false;
    }
}

static void release_all_kv(engine *e, gen_request *r, double now)
{
    for (size_t i = 0; i < r->n_seq; i++)
        release_kv(e, &r->seqs[i], now);
}

/* Finishes what is left of a request with FINISH_CANCELLED.  (The API
 * counts cancelled requests: one HTTP request may be several here.) */
static void drop_cancelled(gen_request *r)
{
    request_finish_all(r, FINISH_CANCELLED);
}

static void caller_request_ended(engine *e, const gen_request *r, double now);

static void reap_cancelled(engine *e, double now)
{
    size_t kept = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        gen_request *r = queue_at(e, i);
        if (atomic_load(&r->cancelled)) {
            drop_cancelled(r);
            request_unref(r);
        } else {
            e->queue[(e->q_head + kept++) % e->cfg.max_queue] = r;
        }
    }
    e->q_len = kept;
    kept = 0;
    for (size_t i = 0; i < e->n_running; i++) {
        gen_request *r = e->running[i];
        if (atomic_load(&r->cancelled)) {
            release_all_kv(e, r, now);
            caller_request_ended(e, r, now);
            drop_cancelled(r);
            request_unref(r);
        } else {
            e->running[kept++] = r;
        }
    }
    e->n_running = kept;
}

static void cancel_everything(engine *e)
{
    for (size_t i = 0; i < e->q_len; i++)
        atomic_store(&queue_at(e, i)->cancelled, true);
    for (size_t i = 0; i < e->n_running; i++)
        atomic_store(&e->running[i]->cancelled, true);
}

/* What the request reuses from the cache, once known (a read from disk
 * may fail and leave those tokens to be computed). */
static void count_reuse(gen_request *r, size_t reused)
{
    pthread_mutex_lock(&r->lock);
    size_t before = r->usage.cached_tokens;
    r->usage.cached_tokens = reused;
    pthread_mutex_unlock(&r->lock);
    if (reused > before)
        metrics_add_cached_tokens(reused - before);
}

/* Begins the request's KV sequences (kvcache_seq_begin's status: anything
 * but KV_BEGUN, and the cache cannot hold them yet).  With `keep_others`,
 * its sequences past the first leave other accounts their kept share. */
static kv_begin_status begin_kv(engine *e, gen_request *r, bool keep_others,
                                double now)
{
    size_t seqs[r->n_seq], reused = 0;
    kv_begin b = { .who = &r->id, .account = r->account,
                   .session = r->session, .max_sessions = r->max_sessions,
                   .prompt = r->prompt,
                   .n_prompt = r->n_prompt,
                   .max_total = r->n_prompt + r->max_tokens,
                   .n_seq = r->n_seq, .reuse = !computes_whole_prompt(r),
                   .keep_others_share = keep_others, .now = now };
    kv_begin_status st = kvcache_seq_begin(e->kv, &b, seqs, &reused);
    if (st != KV_BEGUN)
        return st;
    for (size_t i = 0; i < r->n_seq; i++) {
        r->seqs[i].kv = seqs[i];
        r->seqs[i].has_kv = true;
    }
    r->kv_loading = kvcache_seq_loading(e->kv, seqs[0]);
    if (!r->kv_loading)
        count_reuse(r, reused);
    return KV_BEGUN;
}

/* ---- admission: fair across callers ----
 *
 * The queue holds requests in arrival order; each step picks from it:
 *
 *   - Across callers (an API key, or a client address), least served first:
 *     each caller's account holds the cost (prompt + n x max_tokens) of its
 *     running requests in full and of its finished ones halving every
 *     caller_memory_ms from their end, and the next request comes from the
 *     caller whose account is smallest.  This is deficit round robin by
 *     cost over a sliding horizon: a caller with one cheap request is not
 *     kept waiting behind another's flood, what a caller was served long
 *     ago stops counting, and one back from a pause comes first only until
 *     it has been served about what the others were lately.  (Halving from
 *     the end, not the start: a request running for minutes has not paid
 *     its cost off by the time it ends.)
 *   - Within a caller, first come first served.
 *   - While another caller is present (has a request queued or running, or
 *     ended one within caller_memory_ms: a client thinking between two
 *     requests is still there, and without preemption a slot given away in
 *     its pause is not back when it returns), a caller runs at most its
 *     max_seqs sequences: one key cannot hold more than half the slots by
 *     default.  Alone, it may use every slot.
 *   - A request that fits the free slots may pass a wider one; once the wider
 *     one has waited admit_age_ms, narrower ones are held back until the
 *     slots it needs are free, so it is never starved.
 *   - A request wider than its caller's whole share (n = 4 with a share of
 *     2) could otherwise run only when no other caller is present, and
 *     another caller's steady traffic would starve it.  Once it has waited
 *     admit_age_ms and its caller is the least served of the present ones,
 *     it is next, beyond the share: the slots drain to it.  Waiting for
 *     the caller's turn, not only for the age, keeps one key's wide
 *     requests from taking the whole machine every admit_age_ms; its
 *     account then holds its whole cost, which halves every
 *     caller_memory_ms once it has ended, so its next turn comes once the
 *     others' recent use weighs as much (as long as the others are not an endless stream
 *     of new callers, each starting at nothing).
 *   - While another caller is present, the sequences of a request past its
 *     first take no KV memory that other callers keep within their share
 *     (kvcache.h, KV_SHARES_KEPT): such a request waits, and others pass
 *     it, until that caller has gone or the request has waited
 *     caller_memory_ms.  So one wide request of another key cannot empty a
 *     conversation's cache between two of its turns, and is not starved
 *     by it either.
 *
 * Callers are kept in a small table (bounded by the queue plus the slots);
 * when it is full, the longest idle caller is forgotten. */

typedef struct caller_state {
    uint8_t account[SHA256_BYTES];
    bool used;
    double served;              /* cost of its ended requests, halving every
                                 * caller_memory */
    double t_served;            /* when `served` was last brought up to date */
    double last_active;         /* when it last had a request queued or running */
    /* recomputed each admission pass */
    double in_flight;           /* cost of its running requests */
    size_t running;             /* sequences holding a slot */
    size_t queued;
} caller_state;

static double caller_memory(const engine *e)
{
    return e->cfg.caller_memory_ms * 1e-3;
}

/* Brings c->served to `now`: it halves every caller_memory. */
static void caller_decay(const engine *e, caller_state *c, double now)
{
    if (now > c->t_served)
        c->served *= exp2(-(now - c->t_served) / caller_memory(e));
    c->t_served = now;
}

/* What admission weighs: what the caller runs, and what it ran lately. */
static double caller_account(const caller_state *c)
{
    return c->served + c->in_flight;
}

static caller_state *caller_find(engine *e, const uint8_t *account)
{
    for (size_t i = 0; i < e->n_callers_cap; i++)
        if (e->callers[i].used &&
            memcmp(e->callers[i].account, account, SHA256_BYTES) == 0)
            return &e->callers[i];
    return NULL;
}

/* Whether `account` has a request queued or running. */
static bool caller_busy(const engine *e, const uint8_t *account)
{
    for (size_t i = 0; i < e->q_len; i++)
        if (memcmp(queue_at(e, i)->account, account, SHA256_BYTES) == 0)
            return true;
    for (size_t k = 0; k < e->n_running; k++)
        if (memcmp(e->running[k]->account, account, SHA256_BYTES) == 0)
            return true;
    return false;
}

/* The caller's entry, made if need be.  At most max_queue + n_slots
 * callers have a request queued or running, and the table has room for one
 * more, so a free entry is always found: an unused one, or the longest idle
 * one, forgotten. */
static caller_state *caller_get(engine *e, const uint8_t *account, double now)
{
    caller_state *c = caller_find(e, account);
    if (c != NULL)
        return c;
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *x = &e->callers[i];
        if (!x->used) {
            c = x;
            break;
        }
        if ((c == NULL || x->last_active < c->last_active) &&
            !caller_busy(e, x->account))
            c = x;
    }
    memset(c, 0, sizeof *c);
    c->used = true;
    memcpy(c->account, account, SHA256_BYTES);
    c->t_served = c->last_active = now;
    return c;
}

/* Recounts each caller's running sequences and queued requests, and brings
 * what each was served up to `now`, so that accounts compare at one time. */
static void callers_count(engine *e, double now)
{
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *c = &e->callers[i];
        c->running = c->queued = 0;
        c->in_flight = 0.0;
        if (c->used)
            caller_decay(e, c, now);
    }
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        caller_state *c = caller_get(e, r->account, now);
        c->in_flight += r->cost;
        for (size_t i = 0; i < r->n_seq; i++)
            c->running += r->seqs[i].has_kv;
    }
    for (size_t i = 0; i < e->q_len; i++)
        caller_get(e, queue_at(e, i)->account, now)->queued++;
}

static bool caller_present(const engine *e, const caller_state *x, double now)
{
    return x->used && (x->running > 0 || x->queued > 0 ||
                       now - x->last_active < caller_memory(e));
}

/* Whether a caller other than `c` is present at `now`. */
static bool others_present(const engine *e, const caller_state *c, double now)
{
    for (size_t i = 0; i < e->n_callers_cap; i++)
        if (&e->callers[i] != c && caller_present(e, &e->callers[i], now))
            return true;
    return false;
}

static size_t slots_held(const engine *e)
{
    size_t held = 0;
    for (size_t k = 0; k < e->n_running; k++)
        for (size_t i = 0; i < e->running[k]->n_seq; i++)
            held += e->running[k]->seqs[i].has_kv;
    return held;
}

/* Removes the queue's i-th request, keeping the others' order. */
static void queue_remove(engine *e, size_t i)
{
    for (size_t j = i; j + 1 < e->q_len; j++)
        e->queue[(e->q_head + j) % e->cfg.max_queue] =
            e->queue[(e->q_head + j + 1) % e->cfg.max_queue];
    e->q_len--;
}

/* Whether no other present caller has been served less than `c`. */
static bool least_served(const engine *e, const caller_state *c, double now)
{
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        const caller_state *x = &e->callers[i];
        if (x != c && caller_account(x) < caller_account(c) &&
            caller_present(e, x, now))
            return false;
    }
    return true;
}

/* The queue index of the request to admit next, or SIZE_MAX for none
 * this step. */
static size_t pick_next(engine *e, double now)
{
    const size_t free_slots = e->cfg.n_slots - slots_held(e);
    const double age = e->cfg.admit_age_ms * 1e-3;
    size_t best = SIZE_MAX, oldest_blocked = SIZE_MAX;
    const caller_state *best_c = NULL;
    for (size_t i = 0; i < e->q_len; i++) {
        gen_request *r = queue_at(e, i);
        caller_state *c = caller_find(e, r->account);
        /* only the caller's first queued request is a candidate */
        bool head = true;
        for (size_t j = 0; j < i && head; j++)
            head = memcmp(queue_at(e, j)->account, r->account,
                          SHA256_BYTES) != 0;
        if (!head || r->kv_deferred)
            continue;
        if (c->running + r->n_seq > r->max_seqs && others_present(e, c, now)) {
            /* Over its share while others want theirs.  One wider than the
             * whole share would wait for every other caller to leave: once
             * it has waited admit_age_ms and its caller is the least
             * served, it is next, and the slots drain to it. */
            if (r->n_seq <= r->max_seqs || now - r->t_submit < age ||
                !least_served(e, c, now))
                continue;
            return r->n_seq <= free_slots ? i : SIZE_MAX;
        }
        if (r->n_seq > free_slots) {
            if (oldest_blocked == SIZE_MAX)
                oldest_blocked = i;     /* the queue is in arrival order */
            continue;
        }
        if (best_c == NULL || caller_account(c) < caller_account(best_c)) {
            best = i;
            best_c = c;
        }
    }
    /* an aged wide request that fits its share: the slots drain to it */
    if (oldest_blocked != SIZE_MAX &&
        now - queue_at(e, oldest_blocked)->t_submit >= age &&
        (best == SIZE_MAX || queue_at(e, best)->t_submit >
                                 queue_at(e, oldest_blocked)->t_submit))
        return SIZE_MAX;
    return best;
}

/* An inspect's capture buffers are taken as it starts, not at submit:
 * queued inspects hold none.  Short of memory, it ends (cancelled) rather
 * than wait for memory that may never come. */
static bool start_inspect(engine *e, gen_request *r, double now)
{
    if (r->inspect == NULL || inspect_capture_alloc(r->inspect) == 0)
        return true;
    log_error("engine: out of memory for an inspect's buffers (%zu tokens)",
              r->n_prompt);
    release_all_kv(e, r, now);
    request_finish_all(r, FINISH_CANCELLED);
    caller_find(e, r->account)->queued--;
    request_unref(r);
    return false;
}

static void admit(engine *e, double now)
{
    if (e->q_len == 0)
        return;
    callers_count(e, now);
    for (size_t i = 0; i < e->q_len; i++)
        queue_at(e, i)->kv_deferred = false;
    for (;;) {
        size_t i = pick_next(e, now);
        if (i == SIZE_MAX)
            break;
        gen_request *r = queue_at(e, i);
        caller_state *c = caller_find(e, r->account);
        /* another caller's kept memory: only until it has gone, or for
         * caller_memory at most */
        const bool keep_others = others_present(e, c, now) &&
                                 now - r->t_submit < caller_memory(e);
        kv_begin_status st = begin_kv(e, r, keep_others, now);
        if (st == KV_SHARES_KEPT) {
            r->kv_deferred = true;      /* others pass it this step */
            continue;
        }
        /* when the cache cannot hold it yet, nothing passes it this step */
        if (st != KV_BEGUN)
            break;
        queue_remove(e, i);
        if (!start_inspect(e, r, now))
            continue;
        metrics_add_prompt_tokens(r->n_prompt);
        e->running[e->n_running++] = r;
        gen_request_lock(r);
        r->queued_seconds = now - r->t_submit;
        gen_request_unlock(r);
        c->in_flight += r->cost;
        c->queued--;
        c->running += r->n_seq;
        c->last_active = now;
    }
}

/* A request left the running set (finished or cancelled): its whole cost
 * joins what its caller was served, and halves from now on. */
static void caller_request_ended(engine *e, const gen_request *r, double now)
{
    caller_state *c = caller_find(e, r->account);
    if (c == NULL)
        return;
    caller_decay(e, c, now);
    c->served += r->cost;
    c->last_active = now;
}

/* ---- one step ---- */

/* Positions the sequence has cached. */
static size_t seq_len(const engine *e, const seq_state *s)
{
    return kvcache_seq_len(e->kv, s->kv);
}

/* Makes room in the sequence's blocks for its rows of this step. */
static size_t add_entry(engine *e, size_t n, gen_request *r, size_t seq,
                        bool prefill, size_t start, const int32_t *tokens,
                        size_t n_rows, size_t n_logits)
{
    const size_t kv = r->seqs[seq].kv;
    kvcache_seq_grow(e->kv, kv, n_rows);
    e->batch[n] = (forward_seq){ .blocks = kvcache_seq_blocks(e->kv, kv),
                                 .pos0 = start, .tokens = tokens,
                                 .n_tokens = n_rows, .n_logits = n_logits,
                                 .capture = r->inspect != NULL
                                     ? inspect_forward_capture(r->inspect)
                                     : NULL };
    e->entries[n] = (batch_entry){ .r = r, .seq = seq, .prefill = prefill,
                                   .start = start, .n_rows = n_rows,
                                   .n_logits = n_logits };
    return n + 1;
}

typedef enum share_action {
    SHARE_NONE,                 /* nothing to gain from another prefill */
    SHARE_WAIT,                 /* an earlier prompt is computing our prefix */
    SHARE_REBEGIN,              /* it has: begin again to pick it up */
} share_action;

/* A prompt that shares more than it reused with a prompt admitted before
 * it waits while that one computes the shared blocks, then picks them up,
 * rather than computing them twice (a prompt array over one context, as
 * lm-eval's multiple choice sends).  Only before its own prefill starts,
 * only within one isolation domain, never for sessions (their history is
 * their own); only earlier prompts, so no two wait for each other. */
static share_action shared_prefill(const engine *e, size_t k,
                                   const gen_request *r)
{
    if (r->session != NULL || computes_whole_prompt(r) || r->n_prompt < 2)
        return SHARE_NONE;
    const size_t reused = r->usage.cached_tokens;   /* the engine's own write */
    for (size_t j = 0; j < k; j++) {
        const gen_request *q = e->running[j];
        if (q->session != NULL ||
            memcmp(q->id.domain, r->id.domain, SHA256_BYTES) != 0)
            continue;
        size_t common = 0, lim = q->n_prompt < r->n_prompt - 1
                                 ? q->n_prompt : r->n_prompt - 1;
        while (common < lim && q->prompt[common] == r->prompt[common])
            common++;
        common = common / KV_BLOCK_TOKENS * KV_BLOCK_TOKENS;
        if (common < reused + KV_BLOCK_TOKENS)
            continue;
        const seq_state *qs = &q->seqs[0];
        size_t done = qs->phase != SEQ_PREFILL ? q->n_prompt
                      : q->kv_loading ? 0 : seq_len(e, qs);
        return done >= common ? SHARE_REBEGIN : SHARE_WAIT;
    }
    return SHARE_NONE;
}

/* Whether a sequence of a caller other than r's is generating. */
static bool others_decoding(const engine *e, const gen_request *r)
{
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *q = e->running[k];
        if (memcmp(q->account, r->account, SHA256_BYTES) == 0)
            continue;
        for (size_t i = 0; i < q->n_seq; i++)
            if (q->seqs[i].phase == SEQ_DECODE)
                return true;
    }
    return false;
}

/* After the step's prompt rows: logit-lens rows of inspect requests whose
 * prompt has run, up to the next multiple of `chunk` rows as prefill takes
 * them and held back like prefill while others decode.  They come out of
 * what is left of the prompt rows' budget (`left`): a lens row is one
 * unembedding, less work than a prompt row, so a step with lens rows is
 * never longer than one with as many prompt rows. */
static void plan_lens(engine *e, size_t *left, bool *mixed_out, double now)
{
    e->n_lens = e->n_lens_rows = 0;
    for (size_t k = 0; k < e->n_running && *left > 0; k++) {
        gen_request *r = e->running[k];
        if (r->seqs[0].phase != SEQ_LENS)
            continue;
        const bool others = others_decoding(e, r);
        if (others && now < e->prefill_hold_until)
            continue;
        const size_t total = inspect_lens_rows(r->inspect);
        size_t end = (r->lens_done / e->chunk + 1) * e->chunk;
        if (end > total)
            end = total;
        size_t len = end - r->lens_done;
        if (len > *left)
            len = *left;
        e->lens[e->n_lens++] = (lens_entry){ .r = r, .row0 = r->lens_done,
                                             .n_rows = len,
                                             .first = e->n_lens_rows };
        e->n_lens_rows += len;
        *left -= len;
        *mixed_out = *mixed_out || others;
    }
}

/* Decode rows first (they always fit: at most one per slot), then prefill
 * chunks in admission order while the step has room.
 *
 * Beside decoding streams, the step's prompt rows are also bounded by the
 * step budget (--step-cost): every stream waits for the whole step, so a
 * step carries only the prompt rows that keep it within a multiple of a
 * full batch's decode step, and the rest of a chunk goes in the next
 * steps.  Where a
 * prompt is cut never changes its results (the kernels give the same bits
 * however a prompt is cut; test_engine_chunked_prefill_matches_unchunked).
 *
 * A step with a prefill chunk lasts many decode steps, and every stream
 * waits for it: so while another caller's sequences decode, a caller's
 * prompts take at most cfg.prefill_share of the time.  After a step that
 * carried both, such prefill waits (prefill_hold_until) while steps
 * without it run for as long as that share asks.
 * A caller's own prompts never wait for its own streams: one tenant's
 * burst is not slowed for its own sake.  *mixed_out says whether the
 * step carried both. */
static size_t build_batch(engine *e, size_t *rows_out, size_t *prefill_out,
                          bool *mixed_out, double now)
{
    size_t n = 0, rows = 0;
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        for (size_t i = 0; i < r->n_seq; i++) {
            seq_state *s = &r->seqs[i];
            if (s->phase != SEQ_DECODE)
                continue;
            n = add_entry(e, n, r, i, false, seq_len(e, s), &s->next_token,
                          1, 1);
            rows++;
        }
    }
    *mixed_out = false;
    const size_t decode_rows = rows, room = e->cfg.max_batch_rows - rows;
    const size_t budget = step_budget_prefill_rows(
        &e->budget, decode_rows, e->cfg.n_slots, room);
    size_t prefill_left = budget;
    bool bounded = false;
    for (size_t k = 0; k < e->n_running && prefill_left > 0; k++) {
        gen_request *r = e->running[k];
        seq_state *s = &r->seqs[0];
        if (s->phase != SEQ_PREFILL)
            continue;
        const bool others = others_decoding(e, r);
        if (others && now < e->prefill_hold_until)
            continue;
        if (r->kv_loading) {
            size_t reused;
            if (!kvcache_seq_ready(e->kv, s->kv, &reused))
                continue;       /* its blocks are still on their way */
            r->kv_loading = false;
            count_reuse(r, reused);
        }
        if (!r->prefill_started) {
            share_action a = shared_prefill(e, k, r);
            if (a == SHARE_WAIT)
                continue;
            if (a == SHARE_REBEGIN) {
                release_all_kv(e, r, now);
                if (begin_kv(e, r, false, now) != KV_BEGUN) {
                    /* it held more than it needs now: cannot happen */
                    log_error("engine: a prompt could not begin again");
                    request_finish_all(r, FINISH_CANCELLED);
                    continue;
                }
                if (r->kv_loading)
                    continue;
            }
        }
        size_t start = seq_len(e, s);
        size_t end = (start / e->chunk + 1) * e->chunk;
        if (end > r->n_prompt)
            end = r->n_prompt;
        if (end - start > prefill_left) {
            if (budget >= room)
                break;          /* unbounded: whole chunks, as they fit */
            end = start + prefill_left;
            bounded = true;
        }
        size_t len = end - start;
        size_t n_logits = r->score_prompt ? len
                          : (end == r->n_prompt && r->max_tokens > 0);
        n = add_entry(e, n, r, 0, true, start, r->prompt + start, len,
                      n_logits);
        r->prefill_started = true;
        rows += len;
        prefill_left -= len;
        *mixed_out = *mixed_out || others;
    }
    plan_lens(e, &prefill_left, mixed_out, now);
    if (bounded)
        metrics_prefill_bounded();
    *rows_out = rows;
    *prefill_out = rows - decode_rows;
    return n;
}

static void add_job(engine *e, gen_request *r, size_t seq, size_t pos,
                    const float *logits)
{
    sample_job *j = &e->jobs[e->n_jobs++];
    j->r = r;
    j->seq = seq;
    j->prompt_pos = pos;
    j->logits = logits;
}

/* Logits rows the forward pass wrote for the step's first n entries. */
static size_t n_logit_rows(const engine *e, size_t n_entries)
{
    size_t L = 0;
    for (size_t b = 0; b < n_entries; b++)
        L += e->entries[b].n_logits;
    return L;
}

/* The samples and scores the step's logits feed.  The siblings of a prompt
 * whose last chunk ran sample from its last logits row. */
static void plan_jobs(engine *e, size_t n_entries)
{
    const float *row = e->logits;
    const size_t V = e->vocab;
    e->n_jobs = 0;
    for (size_t b = 0; b < n_entries; b++) {
        const batch_entry *be = &e->entries[b];
        gen_request *r = be->r;
        if (!be->prefill) {
            add_job(e, r, be->seq, 0, row);
            row += V;
            continue;
        }
        if (r->score_prompt) {
            for (size_t j = 0; j < be->n_rows; j++)
                if (be->start + j + 1 < r->n_prompt)
                    add_job(e, r, SIZE_MAX, be->start + j + 1, row + j * V);
        }
        bool last = be->start + be->n_rows == r->n_prompt;
        if (last && r->max_tokens > 0) {
            const float *next = row + (be->n_logits - 1) * V;
            for (size_t i = 0; i < r->n_seq; i++)
                add_job(e, r, i, 0, next);
        }
        row += be->n_logits * V;
    }
}

static void run_job(void *ctx, size_t task, size_t worker)
{
    engine *e = ctx;
    sample_job *j = &e->jobs[task];
    gen_request *r = j->r;
    if (j->seq == SIZE_MAX) {
        sampler_score(e->scratch[worker], j->logits, e->vocab,
                      r->prompt[j->prompt_pos], r->n_top, &j->result);
        return;
    }
    seq_state *s = &r->seqs[j->seq];
    sampler_sample(&r->sampling, &s->rng, e->scratch[worker], j->logits,
                   e->vocab, r->prompt, r->n_prompt, s->generated,
                   s->out.n_tokens, &j->result);
}

/* ---- the logit lens of inspect requests ---- */

/* Unembeds the step's lens rows (forward_unembed: the model's own final
 * LayerNorm and lm_head) into the logits rows after the n_logits rows the
 * forward pass wrote; the step's budget holds both. */
static int lens_unembed(engine *e, size_t n_logits, gpt2d_error *err)
{
    float *out = e->logits + n_logits * e->vocab;
    e->lens_logits = out;
    for (size_t i = 0; i < e->n_lens; i++) {
        const lens_entry *le = &e->lens[i];
        if (forward_unembed(e->fwd, e->m, e->pool,
                            inspect_lens_input(le->r->inspect, le->row0),
                            le->n_rows, out + le->first * e->vocab, err) != 0)
            return -1;
    }
    return 0;
}

/* One lens row on the pool: its k best guesses, as the sampler reports the
 * model's top alternatives. */
static void lens_task(void *ctx, size_t task, size_t worker)
{
    engine *e = ctx;
    size_t i = 0;
    while (task >= e->lens[i].first + e->lens[i].n_rows)
        i++;
    const lens_entry *le = &e->lens[i];
    inspect_capture *c = le->r->inspect;
    sample_result res;
    sampler_score(e->scratch[worker], e->lens_logits + task * e->vocab,
                  e->vocab, 0, inspect_capture_params(c)->logit_lens, &res);
    inspect_lens_store(c, le->row0 + (task - le->first), res.top, res.n_top);
}

/* With the engine lock held, after the step: lens rows count as done, and a
 * request whose last row is stored ends. */
static void lens_progress(engine *e)
{
    for (size_t i = 0; i < e->n_lens; i++) {
        gen_request *r = e->lens[i].r;
        r->lens_done += e->lens[i].n_rows;
        if (r->lens_done < inspect_lens_rows(r->inspect))
            continue;
        inspect_lens_done(r->inspect);
        pthread_mutex_lock(&r->lock);
        seq_finish(r, 0, FINISH_LENGTH);
        pthread_mutex_unlock(&r->lock);
    }
}

static void fill_token(gen_token *t, const sample_result *res, size_t n_top)
{
    t->token = res->token;
    t->logprob = res->logprob;
    t->n_top = res->n_top < n_top ? res->n_top : n_top;
    memcpy(t->top, res->top, t->n_top * sizeof t->top[0]);
}

/* With the request lock held: what a new prompt score changes. */
static void apply_score(gen_request *r, const sample_job *j)
{
    /* published all at once when the prefill ends (prefill_done) */
    fill_token(&r->prompt_scores[j->prompt_pos], &j->result, r->n_top);
}

static void observe_timing(gen_request *r, seq_state *s, double now)
{
    if (!r->first_token_seen) {
        r->first_token_seen = true;
        metrics_observe_ttft(now - r->t_submit);
    }
    if (s->out.n_tokens > 0)
        metrics_observe_token_latency(now - s->t_last_token);
    s->t_last_token = now;
}

/* With the request lock held: appends a sampled token to sequence i and
 * decides whether it goes on. */
static void apply_sample(engine *e, gen_request *r, size_t i,
                         const sample_result *res, double now)
{
    seq_state *s = &r->seqs[i];
    observe_timing(r, s, now);
    /* <|endoftext|> ends the text; it is neither shown nor counted */
    if (res->token == TOKENIZER_EOT) {
        seq_finish(r, i, FINISH_STOP);
        return;
    }
    size_t g = s->out.n_tokens;
    fill_token(&s->tokens[g], res, r->n_top);
    s->generated[g] = res->token;
    s->out.n_tokens = g + 1;
    s->out.cum_logprob += res->logprob;
    r->usage.completion_tokens++;
    metrics_add_generated_tokens(1);

    size_t len = 0;
    const char *bytes = tokenizer_token_bytes(e->tok, res->token, &len);
    textstream_status st = textstream_push(&s->ts, bytes, len);
    s->out.text_len = textstream_len(&s->ts);
    s->text_end[g] = s->out.text_len;

    if (st == TEXTSTREAM_STOPPED)
        seq_finish(r, i, FINISH_STOP);
    else if (st == TEXTSTREAM_FULL || g + 1 >= r->max_tokens
             || r->n_prompt + g + 1 >= e->m->config.n_ctx)
        seq_finish(r, i, FINISH_LENGTH);
    else {
        s->next_token = res->token;
        s->phase = SEQ_DECODE;
        request_touch(r);
    }
}

/* Applies the step's prompt scores (`scores`) or its samples.  The engine
 * applies the scores, publishes finished prefills, then the samples: a
 * first token may end a request (max_tokens 1, EOT, a stop string), and a
 * reader woken by that must find the prompt's scores already there. */
static void apply_jobs(engine *e, bool scores, double now)
{
    for (size_t k = 0; k < e->n_jobs; k++) {
        const sample_job *j = &e->jobs[k];
        gen_request *r = j->r;
        if ((j->seq == SIZE_MAX) != scores)
            continue;
        pthread_mutex_lock(&r->lock);
        if (scores)
            apply_score(r, j);
        else
            apply_sample(e, r, j->seq, &j->result, now);
        pthread_mutex_unlock(&r->lock);
    }
}

/* After the scores, before the samples: a prompt whose last chunk ran is
 * fully scored, and one that generates nothing (max_tokens 0: scoring
 * only) is done. */
static void prefill_done(engine *e, size_t n_entries)
{
    for (size_t b = 0; b < n_entries; b++) {
        const batch_entry *be = &e->entries[b];
        gen_request *r = be->r;
        if (!be->prefill || be->start + be->n_rows != r->n_prompt)
            continue;
        pthread_mutex_lock(&r->lock);
        if (r->score_prompt) {
            for (size_t i = 0; i < r->n_seq; i++) {
                r->seqs[i].out.prompt_scores = r->prompt_scores;
                r->seqs[i].out.n_prompt_scored = r->n_prompt;
            }
            request_touch(r);
        }
        if (r->inspect != NULL && inspect_lens_rows(r->inspect) > 0)
            r->seqs[0].phase = SEQ_LENS;
        else if (r->max_tokens == 0)
            for (size_t i = 0; i < r->n_seq; i++)
                seq_finish(r, i, FINISH_LENGTH);
        pthread_mutex_unlock(&r->lock);
    }
}

/* The step's K/V are written: its tokens count as cached now, and a prompt
 * whose last chunk ran hands its cache to its siblings.  Before apply_jobs,
 * which moves each sequence's next_token on. */
static void commit_step(engine *e, size_t n_entries)
{
    for (size_t b = 0; b < n_entries; b++) {
        const batch_entry *be = &e->entries[b];
        gen_request *r = be->r;
        const seq_state *s = &r->seqs[be->seq];
        kvcache_seq_commit(e->kv, s->kv, e->batch[b].tokens, be->n_rows);
        if (be->prefill && be->start + be->n_rows == r->n_prompt &&
            r->max_tokens > 0)
            for (size_t i = 1; i < r->n_seq; i++)
                kvcache_seq_fork(e->kv, s->kv, r->seqs[i].kv);
    }
}

/* Finished requests leave the running set; their blocks stay cached. */
static void retire_finished(engine *e, double now)
{
    size_t kept = 0;
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        bool done = true;
        /* phase is the engine thread's own: no request lock needed */
        for (size_t i = 0; i < r->n_seq; i++) {
            seq_state *s = &r->seqs[i];
            if (s->phase != SEQ_DONE)
                done = false;
            /* a sibling still running does not pin this one's blocks */
            if (s->phase == SEQ_DONE)
                release_kv(e, s, now);
        }
        if (done) {
            caller_request_ended(e, r, now);
            request_unref(r);
        } else {
            e->running[kept++] = r;
        }
    }
    e->n_running = kept;
}

/* A failed step (a bug, or out of memory for scratch) ends the requests it
 * carried rather than retrying them forever. */
static void fail_batch(engine *e, size_t n_entries, const gpt2d_error *err)
{
    log_error("engine: forward step failed: %s", err->message);
    for (size_t b = 0; b < n_entries; b++)
        request_finish_all(e->entries[b].r, FINISH_CANCELLED);
    for (size_t i = 0; i < e->n_lens; i++)
        request_finish_all(e->lens[i].r, FINISH_CANCELLED);
}

static bool has_work(const engine *e)
{
    return e->q_len > 0 || e->n_running > 0;
}

/* The service manager's watchdog is kicked from this loop, not from a timer
 * thread, so a wedged step stops the pings and gets the daemon restarted.
 * Called without e->lock: the ping is a syscall. */
static int64_t watchdog_kick(engine *e)
{
    return notify_watchdog_kick(&e->watchdog,
                                (uint64_t)(monotonic_seconds() * 1e6));
}

/* Waits (e->lock held) for work or shutdown; with a watchdog, wakes in time
 * for the next ping so an idle daemon is not taken for a hung one. */
static void idle_wait(engine *e)
{
    if (e->watchdog.interval_usec == 0) {
        pthread_cond_wait(&e->cond, &e->lock);
        return;
    }
    pthread_mutex_unlock(&e->lock);
    int64_t due_us = watchdog_kick(e);
    pthread_mutex_lock(&e->lock);
    if (has_work(e) || e->stopping)
        return;
    const struct timespec now = monotonic_now();
    const struct timespec until = monotonic_after_us(&now, due_us);
    pthread_cond_timedwait(&e->cond, &e->lock, &until);
}

/* With cfg.min_step_usec (tests only), sleeps out the rest of the step. */
static void pad_step(const engine *e, double t_step)
{
    if (e->cfg.min_step_usec == 0)
        return;
    double left = t_step + e->cfg.min_step_usec * 1e-6 - monotonic_seconds();
    if (left <= 0.0)
        return;
    struct timespec ts = { (time_t)left,
                           (long)((left - (double)(time_t)left) * 1e9) };
    nanosleep(&ts, NULL);
}

static void *engine_main(void *arg)
{
    engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!has_work(e) && !e->stopping)
            idle_wait(e);
        if (!has_work(e))
            break;              /* stopping and drained */
        double now = monotonic_seconds();
        if (e->stopping && now >= e->deadline)
            cancel_everything(e);
        reap_cancelled(e, now);
        admit(e, now);
        if (!has_work(e))
            continue;           /* everything was cancelled */
        size_t rows = 0, prefill_rows = 0;
        bool mixed = false;
        size_t n = build_batch(e, &rows, &prefill_rows, &mixed, now);
        if (n == 0 && e->n_lens == 0) {
            /* nothing runs, and what is queued may not start yet (a wide
             * request waiting for its age or its caller's turn, or for
             * memory another present caller keeps): look again soon */
            pthread_mutex_unlock(&e->lock);
            monotonic_sleep_ms(5);
            pthread_mutex_lock(&e->lock);
            retire_finished(e, now);
            continue;
        }
        pthread_mutex_unlock(&e->lock);
        watchdog_kick(e);

        const double t_step = monotonic_seconds();
        gpt2d_error err = { { 0 } };
        int rc = forward_step(e->fwd, e->m, e->pool, kvcache_geometry(e->kv),
                              e->batch, n, e->logits, &err);
        double t_forward = 0.0;
        if (rc == 0) {
            t_forward = monotonic_seconds() - t_step;
            metrics_observe_batch_rows(rows);
            plan_jobs(e, n);
            threadpool_run(e->pool, e->n_jobs, run_job, e);
            if (e->n_lens > 0) {
                rc = lens_unembed(e, n_logit_rows(e, n), &err);
                if (rc == 0)
                    threadpool_run(e->pool, e->n_lens_rows, lens_task, e);
            }
        }
        if (rc == 0) {
            double took = monotonic_seconds() - t_step;
            metrics_observe_step(took);
            log_debug("step: %zu decode rows, %zu prompt rows, %.2f ms "
                      "(forward %.2f ms)", rows - prefill_rows, prefill_rows,
                      took * 1e3, t_forward * 1e3);
            /* lens rows cost less than the prompt rows the budget
             * learns the price of: their steps teach it nothing */
            if (e->n_lens == 0)
                step_budget_observe(&e->budget, rows - prefill_rows,
                                    prefill_rows, took);
        }
        pad_step(e, t_step);
        /* the hold follows how long the streams waited for the step (a
         * test's step floor included) */
        if (rc == 0 && mixed) {
            const double t_end = monotonic_seconds();
            e->prefill_hold_until = t_end + (t_end - t_step) *
                (1.0 - e->cfg.prefill_share) / e->cfg.prefill_share;
        }

        pthread_mutex_lock(&e->lock);
        now = monotonic_seconds();
        if (rc != 0)
            fail_batch(e, n, &err);
        else {
            kvcache_note_compute(e->kv, rows, t_forward);
            commit_step(e, n);
            apply_jobs(e, true, now);
            prefill_done(e, n);
            apply_jobs(e, false, now);
            lens_progress(e);
        }
        retire_finished(e, now);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- lifecycle ---- */

static size_t longest_token(const tokenizer *tok)
{
    size_t longest = 1;
    for (size_t i = 0; i < tokenizer_vocab_size(tok); i++) {
        size_t len = 0;
        tokenizer_token_bytes(tok, (int32_t)i, &len);
        if (len > longest)
            longest = len;
    }
    return longest;
}

static int engine_alloc_step(engine *e, gpt2d_error *err)
{
    const size_t rows = e->cfg.max_batch_rows;
    if (e->vocab > SIZE_MAX / sizeof(float) / rows)
        return error_set(err, "engine: logits buffer overflows");
    e->logits = malloc(rows * e->vocab * sizeof *e->logits);
    e->batch = calloc(rows, sizeof *e->batch);
    e->entries = calloc(rows, sizeof *e->entries);
    e->jobs = calloc(rows + e->cfg.n_slots, sizeof *e->jobs);
    e->lens = calloc(e->cfg.n_slots, sizeof *e->lens);
    e->queue = calloc(e->cfg.max_queue, sizeof *e->queue);
    e->running = calloc(e->cfg.n_slots, sizeof *e->running);
    e->n_callers_cap = e->cfg.max_queue + e->cfg.n_slots + 1;
    e->callers = calloc(e->n_callers_cap, sizeof *e->callers);
    e->n_scratch = threadpool_size(e->pool);
    e->scratch = calloc(e->n_scratch, sizeof *e->scratch);
    if (!e->logits || !e->batch || !e->entries || !e->jobs || !e->lens
        || !e->queue || !e->running || !e->callers || !e->scratch)
        return error_set(err, "engine: out of memory for %zu batch rows",
                         rows);
    /* Touched now, as the KV pool is: a step may fill every row (a chunk
     * of echo scoring, the logit lens), and the memory is the daemon's from
     * the start rather than creeping up as such steps come. */
    memset(e->logits, 0, rows * e->vocab * sizeof *e->logits);
    for (size_t i = 0; i < e->n_scratch; i++)
        if (sampler_scratch_create(&e->scratch[i], e->vocab, err) != 0)
            return -1;
    return 0;
}

/* What the cached K/V were computed by: the model's shapes, its weights'
 * precision and the cache's.  Part of every block's identity. */
static void cache_fingerprint(const model *m, bool kv_half,
                              uint8_t out[SHA256_BYTES])
{
    const model_config *c = &m->config;
    char text[256];
    int n = snprintf(text, sizeof text,
                     "gpt2d kv v1 layers=%zu heads=%zu embd=%zu ctx=%zu "
                     "vocab=%zu eps=%a weights=%d kv=%s", c->n_layer,
                     c->n_head, c->n_embd, c->n_ctx, c->vocab_size,
                     (double)c->layer_norm_epsilon, (int)m->panel_dtype,
                     kvcache_dtype_name(kv_half));
    sha256(text, (size_t)n, out);
}

/* However tight --step-cost, a step beside streams carries this many
 * prompt rows: with fewer, the fixed cost of each step (every weight read
 * once) would take most of the time prefill gets, and a burst's prompts
 * would need many more steps (doc/performance.md, "Smooth streams").  At
 * most a quarter of a chunk, so that a small engine (the tests') still cuts
 * its prompts. */
static size_t step_min_prompt_rows(size_t chunk)
{
    const size_t rows = 48;
    return chunk / 4 >= rows ? rows : chunk / 4 > 0 ? chunk / 4 : 1;
}

int engine_create(engine **out, const model *m, const tokenizer *tok,
                  const engine_config *cfg, gpt2d_error *err)
{
    *out = NULL;
    if (cfg->n_threads == 0 || cfg->n_slots == 0 || cfg->max_queue == 0)
        return error_set(err, "engine: threads, slots and queue size must "
                         "be at least 1");
    if (cfg->max_batch_rows <= cfg->n_slots)
        return error_set(err, "engine: max batch rows (%zu) must exceed the "
                         "slots (%zu): a step holds every slot's decode row "
                         "plus a prefill chunk", cfg->max_batch_rows,
                         cfg->n_slots);
    engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return error_set(err, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->cfg = *cfg;
    if (e->cfg.max_seqs_per_caller == 0)
        e->cfg.max_seqs_per_caller = cfg->n_slots / 2 > 0 ? cfg->n_slots / 2 : 1;
    if (e->cfg.max_queued_per_caller == 0)
        e->cfg.max_queued_per_caller = cfg->max_queue / 2 > 0 ? cfg->max_queue / 2 : 1;
    if (e->cfg.max_sessions_per_caller == 0)
        e->cfg.max_sessions_per_caller = ENGINE_SESSIONS_PER_CALLER;
    if (e->cfg.admit_age_ms == 0)
        e->cfg.admit_age_ms = 2000;
    if (e->cfg.caller_memory_ms == 0)
        e->cfg.caller_memory_ms = ENGINE_CALLER_MEMORY_MS;
    if (!(e->cfg.prefill_share > 0.0))
        e->cfg.prefill_share = 0.5;
    if (e->cfg.prefill_share > 1.0)
        e->cfg.prefill_share = 1.0;
    e->vocab = m->config.vocab_size;
    e->chunk = cfg->max_batch_rows - cfg->n_slots;
    step_budget_init(&e->budget, cfg->step_cost_limit,
                     step_min_prompt_rows(e->chunk));
    e->max_token_bytes = longest_token(tok);
    pthread_mutex_init(&e->lock, NULL);
    /* Monotonic, for the watchdog's timed idle wait. */
    monotonic_cond_init(&e->cond);
    notify_watchdog_init(&e->watchdog);
    const kv_shape shape = { .n_layer = m->config.n_layer,
                             .n_head = m->config.n_head,
                             .n_embd = m->config.n_embd,
                             .n_ctx = m->config.n_ctx };
    kv_cache_config kc = {
        .n_blocks = cfg->kv_blocks > 0 ? cfg->kv_blocks
                    : cfg->n_slots * kvcache_blocks_per_context(&shape),
        .max_seqs = cfg->n_slots, .half = cfg->kv_half,
        .disk_dir = cfg->kv_disk_dir, .disk_bytes = cfg->kv_disk_bytes,
        .now = monotonic_seconds() };
    uint8_t fingerprint[SHA256_BYTES];
    cache_fingerprint(m, cfg->kv_half, fingerprint);
    e->kv_blocks = kc.n_blocks;
    if (threadpool_create(&e->pool, cfg->n_threads, err) != 0
        || forward_state_create(&e->fwd, m, cfg->max_batch_rows,
                                   cfg->n_threads, err) != 0
        || engine_alloc_step(e, err) != 0
        || kvcache_create(&e->kv, &shape, &kc, fingerprint, err) != 0) {
        engine_destroy(e);
        return -1;
    }
    if (thread_start(&e->thread, engine_main, e, "gpt2d-step") != 0) {
        engine_destroy(e);
        return error_set(err, "engine: cannot start the engine thread");
    }
    e->thread_started = true;
    *out = e;
    return 0;
}

void engine_shutdown(engine *e, int drain_ms)
{
    if (e == NULL || !e->thread_started || e->joined)
        return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    e->deadline = monotonic_seconds() + (drain_ms > 0 ? drain_ms / 1000.0 : 0.0);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    e->joined = true;
}

void engine_destroy(engine *e)
{
    if (e == NULL)
        return;
    engine_shutdown(e, 0);
    kvcache_free(e->kv);
    if (e->scratch != NULL)
        for (size_t i = 0; i < e->n_scratch; i++)
            sampler_scratch_free(e->scratch[i]);
    free(e->scratch);
    free(e->running);
    free(e->callers);
    free(e->queue);
    free(e->jobs);
    free(e->lens);
    free(e->entries);
    free(e->batch);
    free(e->logits);
    forward_state_free(e->fwd);
    threadpool_destroy(e->pool);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

size_t engine_kv_blocks(const engine *e)
{
    return e->kv_blocks;
}

void engine_caller_defaults(const engine *e, size_t *max_seqs,
                            size_t *max_queued)
{
    *max_seqs = e->cfg.max_seqs_per_caller;
    *max_queued = e->cfg.max_queued_per_caller;
}

/* Requests of `account` waiting in the queue. */
static size_t caller_queued_count(const engine *e, const uint8_t *account)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++)
        n += memcmp(queue_at(e, i)->account, account, SHA256_BYTES) == 0;
    return n;
}

/* Sessions of `account` with a request queued or running. */
static size_t caller_sessions_in_use(const engine *e, const uint8_t *account)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        const gen_request *q = queue_at(e, i);
        n += q->session != NULL && memcmp(q->account, account, SHA256_BYTES) == 0;
    }
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *q = e->running[k];
        n += q->session != NULL && memcmp(q->account, account, SHA256_BYTES) == 0;
    }
    return n;
}

/* Whether `r` starts a session its caller has no room for: every one of
 * its max_sessions is busy, so none of its own can be forgotten for it
 * (kvcache.h, "Sessions per account"). */
static bool over_session_quota(const engine *e, const gen_request *r)
{
    return r->session != NULL &&
           !kvcache_session_known(e->kv, r->id.owner, r->session) &&
           caller_sessions_in_use(e, r->account) >= r->max_sessions;
}

/* A request of `account` joins the queue: its caller is present. */
static void caller_backlogged(engine *e, const uint8_t *account)
{
    const double now = monotonic_seconds();
    caller_get(e, account, now)->last_active = now;
}

engine_status engine_submit(engine *e, const gen_params *p, gen_request **out)
{
    *out = NULL;
    /* Not ENGINE_QUEUE_FULL: retrying could never help.  The API layer
     * validates the same limits first, so this is a caller bug. */
    if (!params_valid(e, p))
        return ENGINE_INVALID;
    /* Admission waits for blocks in FIFO order: a request no amount of
     * waiting can fit would hold up everyone behind it. */
    if (kvcache_blocks_needed(p->n_prompt, p->n_prompt + p->max_tokens,
                              p->n_sequences) > e->kv_blocks)
        return ENGINE_TOO_LARGE;
    gen_request *r = request_create(e, p);
    if (r == NULL)
        return ENGINE_NO_MEMORY;
    pthread_mutex_lock(&e->lock);
    engine_status st = ENGINE_OK;
    if (e->stopping)
        st = ENGINE_STOPPING;
    else if (r->session != NULL &&
             session_in_use(e, r->id.owner, r->session, true))
        st = ENGINE_SESSION_BUSY;
    else if (over_session_quota(e, r))
        st = ENGINE_SESSION_QUOTA;
    else if (p->max_tokens == 0 && !p->score_prompt && p->inspect == NULL) {
        /* nothing to compute: finished before it starts */
        request_finish_all(r, FINISH_LENGTH);
        atomic_store(&r->refs, 1);
    } else if (e->q_len >= e->cfg.max_queue)
        st = ENGINE_QUEUE_FULL;
    else if (caller_queued_count(e, r->account) >= r->max_queued)
        st = ENGINE_CALLER_QUEUE_FULL;
    else {
        caller_backlogged(e, r->account);
        atomic_store(&r->refs, 2);
        e->queue[(e->q_head + e->q_len++) % e->cfg.max_queue] = r;
        pthread_cond_signal(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
    if (st != ENGINE_OK) {
        request_free(r);
        return st;
    }
    *out = r;
    return ENGINE_OK;
}

/* ---- sessions and gauges ---- */

size_t engine_sessions(engine *e, const uint8_t owner[SHA256_BYTES],
                       engine_session_info *out, size_t cap)
{
    kv_session_info *info = cap > 0 ? calloc(cap, sizeof *info) : NULL;
    if (cap > 0 && info == NULL)
        cap = 0;                /* still counts them */
    pthread_mutex_lock(&e->lock);
    /* Read under the lock: a session released while we waited for it
     * carries a later time than one read before (idle_seconds would be
     * negative). */
    double now = monotonic_seconds();
    size_t n = kvcache_sessions(e->kv, owner, info, cap);
    pthread_mutex_unlock(&e->lock);
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i].kv = info[i];
        out[i].idle_seconds = info[i].busy ? 0.0 : now - info[i].last_used;
    }
    free(info);
    return n;
}

int engine_session_delete(engine *e, const uint8_t owner[SHA256_BYTES],
                          const char *id)
{
    pthread_mutex_lock(&e->lock);
    int rc = kvcache_session_delete(e->kv, owner, id);
    /* a queued request of this session has not begun yet: still "busy" */
    if (rc == -1 && session_in_use(e, owner, id, false))
        rc = -2;
    pthread_mutex_unlock(&e->lock);
    return rc;
}

engine_stats engine_get_stats(engine *e)
{
    engine_stats st = { 0 };
    pthread_mutex_lock(&e->lock);
    st.queue_depth = e->q_len;
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *r = e->running[k];
        for (size_t i = 0; i < r->n_seq; i++)
            st.running += r->seqs[i].phase != SEQ_DONE;
    }
    st.kv = kvcache_stats(e->kv);
    pthread_mutex_unlock(&e->lock);
    st.slots_total = st.kv.seqs_total;
    st.slots_busy = st.kv.seqs_running;
    return st;
}
