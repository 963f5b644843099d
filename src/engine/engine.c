/* engine.c — the scheduler (see engine.h): its thread's step loop, its
 * life (create, shutdown, destroy), engine_submit, sessions and gauges.
 *
 * One engine thread loops over steps.  A step:
 *   1. drops cancelled requests (their blocks stay cached), cancels
 *      everything once a shutdown deadline has passed;
 *   2. gives free slots to waiting work (paused sequences, queued
 *      requests) fairly across callers, pausing another caller's sequence
 *      for one below its share, while the KV cache can begin their
 *      sequences (every block they can come to need reserved; sequence 0
 *      reuses the longest cached prefix): engine_admit.c, engine_fair.c,
 *      engine_pause.c;
 *   3. builds one batch: a decode row for every generating sequence first,
 *      then prefill chunks of admitted prompts while they fit, unless
 *      prefill has had its share of the time while others decode
 *      (engine_batch.c); background (batch) sequences only while no
 *      interactive request holds a slot, and then a bounded step;
 *   4. runs forward_step on the worker pool, then every sample (and prompt
 *      score) of the step on the pool too, one sampler_scratch per worker;
 *      a step of background work alone is stopped between two layers when
 *      an interactive request is queued meanwhile (step_abandon), and its
 *      sequences give back the room they grew into, as if it had not run;
 *   5. appends the results to each request's output under its lock and wakes
 *      its reader (engine_publish.c), and retires finished requests.
 *
 * Inspect requests (inspect.h) prefill like a prompt that is scored: every
 * position computed, with their forward_capture on the batch, whose buffers
 * are taken as the request is admitted (a queued one holds none).  Then, with
 * a logit lens, their captured residual rows are unembedded in the steps
 * that follow, out of the prompt rows' budget (a lens row is one
 * unembedding, less work than a prompt row), and the top guesses of each
 * kept; the request ends when the last row is stored (engine_lens.c).
 *
 * Locks.  e->lock guards the queue, the running list and the KV cache's
 * bookkeeping; the engine thread drops it while the model runs (forward_step
 * then writes only K/V of blocks its sequences alone hold, and the step's
 * tokens are committed once the lock is back).  A request's lock guards its
 * outputs.  Order: engine lock, then request lock — never the reverse, so
 * gen_request_cancel only sets an atomic flag. */
#include "config.h"

#include "engine/engine.h"

#include "engine/engine_shared.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"
#include "core/thread.h"

/* ---- the step loop ---- */

static void cancel_everything(engine *e)
{
    for (size_t i = 0; i < e->q_len; i++)
        atomic_store(&engine_queue_at(e, i)->cancelled, true);
    for (size_t i = 0; i < e->n_running; i++)
        atomic_store(&e->running[i]->cancelled, true);
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

/* What the step computes for each caller counts toward its share. */
static void charge_step(engine *e, size_t n_entries, double now)
{
    for (size_t b = 0; b < n_entries; b++)
        fair_charge(e, e->entries[b].r, e->entries[b].n_rows, now);
    for (size_t i = 0; i < e->n_lens; i++)
        fair_charge(e, e->lens[i].r, e->lens[i].n_rows, now);
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

/* Whether the step of n entries may be stopped for an interactive
 * request: background work alone, with nothing that happens only once
 * (a draft model's passes, drafts to verify, scores, lens rows). */
static bool abandonable(const engine *e, size_t n)
{
    if (n == 0 || e->n_lens > 0 || e->n_draft_seqs > 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        const batch_entry *b = &e->entries[i];
        if (!b->r->background || b->n_draft > 0 || b->draft_rows > 0 ||
            b->r->score_prompt)
            return false;
    }
    return true;
}

/* A background step stopped for an interactive request: its sequences
 * give back the room they grew into, as if it had not run; they run it
 * again when their turn comes. */
static void abandon_step(engine *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const batch_entry *b = &e->entries[i];
        kvcache_seq_trim(e->kv, b->r->seqs[b->seq].kv);
    }
    metrics_background_step_abandoned();
}

static void *engine_main(void *arg)
{
    engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!has_work(e) && !e->stopping)
            idle_wait(e);
        if (!has_work(e))
            break; /* stopping and drained */
        double now = monotonic_seconds();
        if (e->stopping && now >= e->deadline)
            cancel_everything(e);
        admit_drop_cancelled(e);
        retire_cancelled(e, now);
        admit_schedule(e, now);
        if (!has_work(e))
            continue; /* everything was cancelled */
        size_t rows = 0, prefill_rows = 0;
        bool mixed = false;
        size_t n = batch_build(e, &rows, &prefill_rows, &mixed, now);
        charge_step(e, n, now);
        if (n == 0 && e->n_lens == 0) {
            /* nothing runs, and what waits cannot start yet (blocks on
             * their way from disk, or memory short): look again soon */
            pthread_mutex_unlock(&e->lock);
            monotonic_sleep_ms(5);
            pthread_mutex_lock(&e->lock);
            retire_finished(e, now);
            continue;
        }
        e->step_abandonable = abandonable(e, n);
        atomic_store(&e->step_abandon, false);
        pthread_mutex_unlock(&e->lock);
        watchdog_kick(e);

        if (e->cfg.share != NULL)
            compute_share_begin(e->cfg.share, &e->turns);
        const double t_step = monotonic_seconds();
        gpt2d_error err = { { 0 } };
        int rc = e->n_draft_seqs > 0 ? draft_run(e, &err) : 0;
        /* what the draft model took is not the step's price */
        const double t_draft = monotonic_seconds() - t_step;
        if (rc == 0)
            rc = forward_step(e->fwd, e->m, e->pool, kvcache_geometry(e->kv),
                              e->batch, n, e->logits, &err);
        const bool abandoned = rc == FORWARD_ABANDONED;
        if (abandoned) {
            rc = -1; /* nothing of it is used: skip to its undoing */
            err.message[0] = '\0';
        }
        double t_forward = 0.0;
        if (rc == 0)
            rc = scores_step(e, n, &err);
        if (rc == 0) {
            t_forward = monotonic_seconds() - t_step - t_draft;
            metrics_observe_batch_rows(rows);
            batch_sample(e, n);
            if (e->n_lens > 0)
                rc = lens_run(e, batch_logit_rows(e, n), &err);
        }
        if (rc == 0) {
            const double whole = monotonic_seconds() - t_step;
            metrics_observe_step(whole);
            log_debug("step: %zu decode rows, %zu prompt rows, %.2f ms "
                      "(forward %.2f ms, draft %.2f ms)",
                      rows - prefill_rows, prefill_rows, whole * 1e3,
                      t_forward * 1e3, t_draft * 1e3);
            const double took = whole - t_draft;
            /* lens rows cost less than the prompt rows the budget
             * learns the price of: their steps teach it nothing */
            if (e->n_lens == 0)
                step_budget_observe(&e->budget, rows - prefill_rows,
                                    prefill_rows, took);
            spec_observe(e, rows, prefill_rows, took);
        }
        if (e->cfg.share != NULL)
            compute_share_end(e->cfg.share, &e->turns,
                              monotonic_seconds() - t_step);
        pad_step(e, t_step);
        /* the hold follows how long the streams waited for the step (a
         * test's step floor included) */
        if (rc == 0 && mixed) {
            const double t_end = monotonic_seconds();
            e->prefill_hold_until = t_end + (t_end - t_step) *
                                                (1.0 - e->cfg.prefill_share) /
                                                e->cfg.prefill_share;
        }

        pthread_mutex_lock(&e->lock);
        e->step_abandonable = false;
        now = monotonic_seconds();
        if (abandoned)
            abandon_step(e, n);
        else if (rc != 0)
            publish_failure(e, n, &err);
        else {
            kvcache_note_compute(e->kv, rows, t_forward);
            publish_step(e, n, now);
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
    /* a request waits queued or runs; running, its sequences may all be
     * paused */
    e->running_cap = e->cfg.max_queue + 2 * e->cfg.n_slots;
    e->running = calloc(e->running_cap, sizeof *e->running);
    e->plan = calloc(e->cfg.n_slots, sizeof *e->plan);
    e->spec_offers = calloc(rows, sizeof *e->spec_offers);
    e->spec_drafts = calloc(rows, sizeof *e->spec_drafts);
    e->spec_seconds = calloc(rows + 1, sizeof *e->spec_seconds);
    e->spec_by_model = calloc(rows, sizeof *e->spec_by_model);
    e->spec_order = calloc(rows, sizeof *e->spec_order);
    /* blas rounds a row by the rows beside it: a score kept from one step
     * is not what a cold run's step computes, so none are kept there */
    e->scores_cached = e->m->matmul != MODEL_MATMUL_BLAS;
    e->score_logits = malloc(e->vocab * sizeof *e->score_logits);
    e->score_blob = calloc(1, sizeof *e->score_blob +
                                  e->m->config.n_embd * sizeof(float));
    e->spec_entry = calloc(rows, sizeof *e->spec_entry);
    /* an entry for every caller with work: at most one per queued or
     * running request, and one more (engine_fair.c) */
    e->n_callers_cap = e->cfg.max_queue + e->running_cap + 1;
    e->callers = fair_callers_create(e->n_callers_cap);
    e->n_scratch = threadpool_size(e->pool);
    e->scratch = calloc(e->n_scratch, sizeof *e->scratch);
    e->mask_words = (e->vocab + 63) / 64;
    e->masks = calloc(e->n_scratch * e->mask_words, sizeof *e->masks);
    if (!e->logits || !e->batch || !e->entries || !e->jobs || !e->lens ||
        !e->queue || !e->running || !e->plan || !e->spec_offers ||
        !e->spec_drafts || !e->spec_seconds || !e->spec_by_model ||
        !e->spec_order || !e->spec_entry ||
        spec_cost_init(&e->spec_cost, rows) != 0 || !e->callers ||
        !e->scratch || !e->masks || !e->score_logits || !e->score_blob)
        return error_set(err, "engine: out of memory for %zu batch rows", rows);
    /* Touched now, as the KV pool is: a step may fill every row (a chunk
     * of echo scoring, the logit lens), and the memory is the daemon's from
     * the start rather than creeping up as such steps come. */
    memset(e->logits, 0, rows * e->vocab * sizeof *e->logits);
    for (size_t i = 0; i < e->n_scratch; i++)
        if (sampler_scratch_create(&e->scratch[i], e->vocab, err) != 0)
            return -1;
    return 0;
}

/* The KV cache's identity: everything that decides a K/V value or what a
 * kept token id means, so that blocks (and sessions) made under anything
 * else are never taken for ours — on disk across restarts above all, where
 * another model or other settings may have run on the same directory.
 *   weights     the digest of every byte of the checkpoint (model.h);
 *   shapes      config.json's, and LayerNorm's epsilon;
 *   dtype       how the weights are held (--dtype: float, half or int8
 *               panels; blas: float32);
 *   arithmetic  how they are multiplied (forward_state_arithmetic:
 *               portable or FMA panels, or OpenBLAS's build and core;
 *               AVX2 and AVX-512 give the same bits, so share a cache);
 *   KV dtype    --kv-dtype;
 *   tokenizer   vocab.json and merges.txt (a session's history is ids);
 *   release     a new release may change a kernel's arithmetic.
 * With a disk tier it is logged, digests shortened, so that an operator
 * can tell why another run's files are "of other models or settings". */
static void cache_identity(const model *m, const tokenizer *tok,
                           const forward_state *fwd, bool kv_half, bool log,
                           uint8_t out[SHA256_BYTES])
{
    const model_config *c = &m->config;
    char arithmetic[256], text[512];
    forward_state_arithmetic(fwd, arithmetic, sizeof arithmetic);
    snprintf(text, sizeof text,
             "release=%s layers=%zu heads=%zu embd=%zu ctx=%zu vocab=%zu "
             "eps=%a dtype=%s arithmetic=%s kv=%s",
             PACKAGE_VERSION, c->n_layer, c->n_head, c->n_embd, c->n_ctx,
             c->vocab_size, (double)c->layer_norm_epsilon,
             model_dtype_name(m->dtype), arithmetic,
             kvcache_dtype_name(kv_half));
    uint8_t tok_digest[SHA256_BYTES];
    tokenizer_digest(tok, tok_digest);
    static const char label[] = "gpt2d kv v2";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, m->weights_digest, SHA256_BYTES);
    sha256_update(&h, tok_digest, SHA256_BYTES);
    sha256_update(&h, text, strlen(text) + 1);
    sha256_final(&h, out);
    if (!log)
        return;
    char hex[3][17];
    const uint8_t *digests[3] = { out, m->weights_digest, tok_digest };
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 8; i++)
            snprintf(hex[d] + 2 * i, 3, "%02x", digests[d][i]);
    log_info("KV cache identity %s: weights %s, tokenizer %s, %s", hex[0],
             hex[1], hex[2], text);
}

/* The draft model's pass scratch and KV cache: as many blocks as the
 * model's (each smaller; at least one full context of its own), for as
 * many sequences, no disk tier (its K/V
 * are quick to compute again and decide no answer). */
static int draft_create(engine *e, const tokenizer *tok,
                        const kv_cache_config *target, gpt2d_error *err)
{
    const model *d = e->cfg.draft;
    const model_config *c = &d->config;
    if (c->vocab_size != e->vocab)
        return error_set(err,
                         "draft model %s has %zu tokens, model %s %zu: a "
                         "draft must share the model's vocabulary",
                         d->name, c->vocab_size, e->m->name, e->vocab);
    e->draft = d;
    e->draft_share = draft_share_of(e->m, d);
    e->draft_agree_state = 0x9e3779b97f4a7c15u;
    /* a step's decode rows are at most its slots, and as many again while
     * preemption hands slots over */
    e->draft_cap = 2 * e->cfg.n_slots;
    e->draft_seqs = calloc(e->draft_cap, sizeof *e->draft_seqs);
    e->draft_batch = calloc(e->draft_cap, sizeof *e->draft_batch);
    e->draft_logits = calloc(e->draft_cap * c->vocab_size,
                             sizeof *e->draft_logits);
    if (e->draft_seqs == NULL || e->draft_batch == NULL ||
        e->draft_logits == NULL)
        return error_set(err, "engine: out of memory for the draft model");
    if (forward_state_create(&e->draft_fwd, d, e->cfg.max_batch_rows,
                             e->cfg.n_threads, err) != 0)
        return -1;
    const kv_shape shape = { .n_layer = c->n_layer,
                             .n_head = c->n_head,
                             .n_embd = c->n_embd,
                             .n_ctx = c->n_ctx };
    const size_t context = kvcache_blocks_per_context(&shape);
    const kv_cache_config kc = { .n_blocks = target->n_blocks > context
                                                 ? target->n_blocks
                                                 : context,
                                 .max_seqs = target->max_seqs,
                                 .half = target->half,
                                 .now = target->now };
    uint8_t identity[SHA256_BYTES];
    cache_identity(d, tok, e->draft_fwd, kc.half, false, identity);
    return kvcache_create(&e->draft_kv, &shape, &kc, identity, err);
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
        return error_set(err,
                         "engine: max batch rows (%zu) must exceed the "
                         "slots (%zu): a step holds every slot's decode row "
                         "plus a prefill chunk",
                         cfg->max_batch_rows, cfg->n_slots);
    engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return error_set(err, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->cfg = *cfg;
    if (e->cfg.max_seqs_per_caller == 0)
        e->cfg.max_seqs_per_caller = cfg->n_slots / 2 > 0 ? cfg->n_slots / 2
                                                          : 1;
    if (e->cfg.max_queued_per_caller == 0)
        e->cfg.max_queued_per_caller = cfg->max_queue / 2 > 0
                                           ? cfg->max_queue / 2
                                           : 1;
    if (e->cfg.max_sessions_per_caller == 0)
        e->cfg.max_sessions_per_caller = ENGINE_SESSIONS_PER_CALLER;
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
        .n_blocks = cfg->kv_blocks > 0
                        ? cfg->kv_blocks
                        : cfg->n_slots * kvcache_blocks_per_context(&shape),
        /* a waiting request's sequences begin before those it takes the
         * slots of are paused (engine_admit.c) */
        .max_seqs = 2 * cfg->n_slots,
        .half = cfg->kv_half,
        .disk_dir = cfg->kv_disk_dir,
        .disk_bytes = cfg->kv_disk_bytes,
        .now = monotonic_seconds()
    };
    e->kv_blocks = kc.n_blocks;
    e->pool = cfg->pool;
    e->own_pool = e->pool == NULL;
    if ((e->own_pool &&
         threadpool_create(&e->pool, cfg->n_threads, err) != 0) ||
        forward_state_create(&e->fwd, m, cfg->max_batch_rows, cfg->n_threads,
                             err) != 0 ||
        engine_alloc_step(e, err) != 0) {
        engine_destroy(e);
        return -1;
    }
    atomic_init(&e->step_abandon, false);
    forward_state_set_abandon(e->fwd, &e->step_abandon);
    uint8_t identity[SHA256_BYTES];
    cache_identity(m, tok, e->fwd, cfg->kv_half,
                   cfg->kv_disk_dir != NULL && cfg->kv_disk_dir[0] != '\0',
                   identity);
    if (kvcache_create(&e->kv, &shape, &kc, identity, err) != 0 ||
        (cfg->draft != NULL && draft_create(e, tok, &kc, err) != 0)) {
        engine_destroy(e);
        return -1;
    }
    if (cfg->share != NULL) {
        compute_share_join(cfg->share, &e->turns);
        e->joined_share = true;
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
    e->deadline = monotonic_seconds() +
                  (drain_ms > 0 ? drain_ms / 1000.0 : 0.0);
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
    free(e->masks);
    free(e->running);
    free(e->plan);
    free(e->spec_offers);
    free(e->spec_drafts);
    free(e->spec_seconds);
    free(e->spec_by_model);
    free(e->spec_order);
    free(e->spec_entry);
    kvcache_free(e->draft_kv);
    free(e->draft_seqs);
    free(e->draft_batch);
    free(e->draft_logits);
    forward_state_free(e->draft_fwd);
    spec_cost_free(&e->spec_cost);
    free(e->callers);
    free(e->queue);
    free(e->jobs);
    free(e->lens);
    free(e->entries);
    free(e->batch);
    free(e->logits);
    free(e->score_logits);
    free(e->score_blob);
    forward_state_free(e->fwd);
    if (e->own_pool)
        threadpool_destroy(e->pool);
    if (e->joined_share)
        compute_share_leave(e->cfg.share, &e->turns);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* ---- submit ---- */

size_t engine_kv_blocks(const engine *e)
{
    return e->kv_blocks;
}

/* Whether the request could ever run; the API layer validates first, this
 * keeps a bad caller from wedging the engine. */
static bool params_valid(const engine *e, const gen_params *p)
{
    const model_config *c = &e->m->config;
    if (p->prompt == NULL || p->n_prompt == 0 || p->n_prompt > c->n_ctx ||
        p->max_tokens > c->n_ctx - p->n_prompt)
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

/* A busy session is asked again every this many ms (engine_submission's
 * session_busy_wait_ms). */
#define SESSION_BUSY_RETRY_MS 5

/* Queues the requests, unless the engine is stopping. */
static engine_status enqueue(engine *e, gen_request **r, size_t n,
                             engine_refusal *why)
{
    pthread_mutex_lock(&e->lock);
    engine_status st = e->stopping ? ENGINE_STOPPING
                                   : admit_enqueue(e, r, n, why);
    pthread_mutex_unlock(&e->lock);
    return st;
}

engine_status engine_submit(engine *e, const engine_submission *s,
                            gen_request **out, engine_refusal *why)
{
    const size_t n = s->n_prompts;
    engine_refusal unused;
    if (why == NULL)
        why = &unused;
    memset(why, 0, sizeof *why);
    for (size_t k = 0; k < n; k++)
        out[k] = NULL;
    /* Not ENGINE_QUEUE_FULL: retrying could never help.  The API layer
     * checks the request's shape first, so this is a caller bug. */
    if (n == 0)
        return ENGINE_INVALID;
    for (size_t k = 0; k < n; k++)
        if (!params_valid(e, &s->params[k]))
            return ENGINE_INVALID;
    engine_status st = admit_could_run(e, s->params, n, why);
    if (st != ENGINE_OK)
        return st;
    if (s->gate != NULL && s->gate(s->gate_arg) != 0)
        return ENGINE_GATE_CLOSED;
    const request_setup setup = {
        .model = &e->m->config,
        .max_token_bytes = e->max_token_bytes,
        .max_seqs = e->cfg.max_seqs_per_caller,
        .max_queued = e->cfg.max_queued_per_caller,
        .max_sessions = e->cfg.max_sessions_per_caller,
        .spec_max_draft = e->cfg.spec_max_draft,
        .spec_default = e->cfg.spec_default
    };
    for (size_t k = 0; k < n && st == ENGINE_OK; k++)
        if ((out[k] = request_create(&s->params[k], &setup)) == NULL)
            st = ENGINE_NO_MEMORY;
    if (st == ENGINE_OK)
        st = enqueue(e, out, n, why);
    for (int waited = 0;
         st == ENGINE_SESSION_BUSY && waited < s->session_busy_wait_ms;
         waited += SESSION_BUSY_RETRY_MS) {
        monotonic_sleep_ms(SESSION_BUSY_RETRY_MS);
        st = enqueue(e, out, n, why);
    }
    if (st != ENGINE_OK)
        for (size_t k = 0; k < n; k++) {
            request_free(out[k]);
            out[k] = NULL;
        }
    return st;
}

/* ---- sessions and gauges ---- */

size_t engine_sessions(engine *e, const uint8_t owner[SHA256_BYTES],
                       engine_session_info *out, size_t cap)
{
    kv_session_info *info = cap > 0 ? calloc(cap, sizeof *info) : NULL;
    if (cap > 0 && info == NULL)
        cap = 0; /* still counts them */
    pthread_mutex_lock(&e->lock);
    /* Read under the lock: a session released while we waited for it
     * carries a later time than one read before (idle_seconds would be
     * negative). */
    double now = monotonic_seconds();
    size_t n = kvcache_sessions(e->kv, owner, info, cap);
    /* a session whose request waits paused holds no KV sequence, but is
     * as busy as a running one (engine_session_delete) */
    for (size_t i = 0; i < n && i < cap; i++)
        info[i].busy = info[i].busy ||
                       admit_session_in_use(e, owner, info[i].id, false);
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
    /* a queued request of this session has not begun yet, a paused one
     * holds no KV sequence: still "busy" */
    int rc = admit_session_in_use(e, owner, id, false)
                 ? -2
                 : kvcache_session_delete(e->kv, owner, id);
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
        for (size_t i = 0; i < r->n_seq; i++) {
            st.running += r->seqs[i].has_kv;
            st.paused += r->seqs[i].phase == SEQ_PAUSED;
        }
    }
    st.kv = kvcache_stats(e->kv);
    pthread_mutex_unlock(&e->lock);
    st.slots_total = e->cfg.n_slots;
    st.slots_busy = st.running;
    if (e->joined_share)
        st.compute_seconds = compute_share_seconds(e->cfg.share, &e->turns);
    return st;
}
