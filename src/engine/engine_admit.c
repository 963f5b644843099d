/* engine_admit.c — who runs next: the wait queue, each step's admission
 * (free slots to waiting work, preemption for a caller below its share),
 * each caller's quotas (queued requests, busy sessions), and the KV
 * sequences a request is begun with and gives back.
 *
 * Threads: admit_enqueue runs on an HTTP thread (engine_submit), the rest
 * on the engine thread; all of it with e->lock held.
 *
 * Each step, while waiting work remains (engine_fair.c's rules say whose):
 *
 *   - Interactive callers before background (batch) ones; an interactive
 *     item's first victims are running background sequences, and a
 *     background item pauses only another background caller's.  No
 *     background item starts while an interactive request holds a slot:
 *     it would compute nothing there (engine_batch.c).
 *   - The caller owed the next slot offers its oldest waiting item: a
 *     paused sequence (in its request's admission order), else its first
 *     queued request (first come first served within a caller).
 *   - A paused sequence takes one slot; a request as many as it has
 *     sequences, or fewer (at least one), when only fewer are free or can
 *     be freed for it: the others wait paused, and start as slots come.
 *   - Without a free slot, the sequences engine_fair.c names are paused
 *     for it.  Its KV sequences begin first, beside the victims (the cache
 *     keeps two sequences per slot); when that is short of memory, the
 *     victims are paused first, so that what they reserved counts, and
 *     take their slots back at once (one row each run again) if even that
 *     is not enough.  Preemption frees slots and what the victims
 *     reserved, never another caller's running memory.
 *   - When the cache cannot hold an item yet (KV_NO_MEMORY), nothing
 *     passes it this step: a large request, or a paused sequence whose
 *     memory went to others meanwhile, is not starved by smaller ones; it
 *     starts as the running sequences end.
 *   - As many requests as the running set holds (max_queue + 2 x n_slots,
 *     paused ones included) run or stand paused: new ones wait for them.
 *   - A sequence beside its caller's running ones (a second request, a
 *     paused sequence resuming) takes no KV memory that other callers keep
 *     within their share (kvcache.h): it waits for its own to end, so
 *     another key's traffic never empties a conversation's cache between
 *     two turns.  While another caller runs or waits, so do a request's
 *     sequences past its first (KV_SHARES_KEPT): it starts with its first
 *     sequence only, and the others resume as they fit.  With no one else
 *     working, they may take any memory not in use: a lone key's wide
 *     request runs at once. */
#include "config.h"

#include "engine/engine_shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"

/* ---- the queue ---- */

/* Removes the queue's i-th request, keeping the others' order. */
static void queue_remove(engine *e, size_t i)
{
    for (size_t j = i; j + 1 < e->q_len; j++)
        e->queue[(e->q_head + j) % e->cfg.max_queue] =
            e->queue[(e->q_head + j + 1) % e->cfg.max_queue];
    e->q_len--;
}

/* Requests cancelled while queued never started: they are finished
 * (FINISH_CANCELLED) and leave the queue, the others keeping their order. */
void admit_drop_cancelled(engine *e)
{
    size_t kept = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        gen_request *r = engine_queue_at(e, i);
        if (atomic_load(&r->cancelled)) {
            request_finish_all(r, FINISH_CANCELLED);
            request_unref(r);
        } else {
            e->queue[(e->q_head + kept++) % e->cfg.max_queue] = r;
        }
    }
    e->q_len = kept;
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
bool admit_session_in_use(const engine *e, const uint8_t *owner,
                          const char *session, bool live_only)
{
    for (size_t i = 0; i < e->q_len; i++)
        if (holds_session(engine_queue_at(e, i), owner, session, live_only))
            return true;
    for (size_t i = 0; i < e->n_running; i++)
        if (holds_session(e->running[i], owner, session, live_only))
            return true;
    return false;
}

/* ---- a request's KV sequences ---- */

static void admit_count_reuse(gen_request *r, size_t reused)
{
    pthread_mutex_lock(&r->lock);
    size_t before = r->usage.cached_tokens;
    r->usage.cached_tokens = reused;
    pthread_mutex_unlock(&r->lock);
    if (reused > before)
        metrics_add_cached_tokens(reused - before);
}

/* What the request reuses from the cache, once known (a read from disk
 * may fail and leave those tokens to be computed): counted, and a scoring
 * request's scores of them taken. */
void admit_reused(engine *e, gen_request *r, size_t reused)
{
    scores_from_cache(e, r, r->seqs[0].kv, reused);
    admit_count_reuse(r, reused);
}

/* Begins the KV sequences of the request's first n_run sequences
 * (kvcache_seq_begin's status: anything but KV_BEGUN, and the cache cannot
 * hold them yet); the others wait paused.  With `keep_others`, its
 * sequences past the first leave other accounts their kept share. */
kv_begin_status admit_begin_kv(engine *e, gen_request *r, size_t n_run,
                               bool keep_others, double now)
{
    size_t seqs[n_run], reused = 0;
    kv_begin b = { .who = &r->id,
                   .account = r->account,
                   .session = r->session,
                   .max_sessions = r->max_sessions,
                   .prompt = r->prompt,
                   .n_prompt = r->n_prompt,
                   .max_total = r->n_prompt + r->max_tokens,
                   .n_seq = n_run,
                   /* an inspect computes every position; a scoring
                    * request only what no scored block holds */
                   .reuse = r->inspect == NULL &&
                            (!r->score_prompt || e->scores_cached),
                   .scored_only = r->score_prompt,
                   .keep_others_share = keep_others,
                   .now = now };
    kv_begin_status st = kvcache_seq_begin(e->kv, &b, seqs, &reused);
    if (st != KV_BEGUN)
        return st;
    for (size_t i = 0; i < n_run; i++) {
        r->seqs[i].kv = seqs[i];
        r->seqs[i].has_kv = true;
    }
    pause_unstarted(r, n_run);
    r->kv_loading = kvcache_seq_loading(e->kv, seqs[0]);
    if (!r->kv_loading)
        admit_reused(e, r, reused);
    return KV_BEGUN;
}

void admit_release_kv(engine *e, seq_state *s, double now)
{
    if (s->has_kv) {
        kvcache_seq_end(e->kv, s->kv, now);
        s->has_kv = false;
    }
    draft_release(e, s, now);
}

void admit_release_all_kv(engine *e, gen_request *r, double now)
{
    for (size_t i = 0; i < r->n_seq; i++)
        admit_release_kv(e, &r->seqs[i], now);
}

/* ---- each step: free slots to waiting work ---- */

/* An inspect's capture buffers are taken as it starts, not at submit:
 * queued inspects hold none.  Short of memory, it ends (cancelled) rather
 * than wait for memory that may never come. */
static bool start_inspect(engine *e, gen_request *r, double now)
{
    if (r->inspect == NULL || inspect_capture_alloc(r->inspect) == 0)
        return true;
    log_error("engine: out of memory for an inspect's buffers (%zu tokens)",
              r->n_prompt);
    admit_release_all_kv(e, r, now);
    request_finish_all(r, FINISH_CANCELLED);
    request_unref(r);
    return false;
}

/* What a caller offers for the next slot: a paused sequence of a running
 * request, or a queued request. */
typedef struct waiting_item {
    gen_request *r;
    size_t seq;   /* paused: its index */
    size_t queue; /* queued: its queue index; SIZE_MAX for a paused one */
} waiting_item;

/* The caller's oldest waiting item that may start now. */
static bool oldest_waiting(const engine *e, const caller_state *c,
                           waiting_item *out)
{
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        if (!fair_owns(c, r))
            continue;
        for (size_t i = 0; i < r->n_seq; i++)
            if (pause_resumable(r, i)) {
                *out = (waiting_item){ .r = r, .seq = i, .queue = SIZE_MAX };
                return true;
            }
    }
    for (size_t i = 0; i < e->q_len; i++) {
        gen_request *r = engine_queue_at(e, i);
        if (fair_owns(c, r)) {
            *out = (waiting_item){ .r = r, .queue = i };
            return true;
        }
    }
    return false;
}

bool admit_interactive_running(const engine *e)
{
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *r = e->running[k];
        if (r->background)
            continue;
        for (size_t i = 0; i < r->n_seq; i++)
            if (r->seqs[i].has_kv)
                return true;
    }
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

/* A queued request started with n_run sequences: it leaves the queue for
 * the running set. */
static void start_request(engine *e, caller_state *c, size_t queue_index,
                          size_t n_run, double now)
{
    gen_request *r = engine_queue_at(e, queue_index);
    queue_remove(e, queue_index);
    fair_started(c, n_run);
    fair_new_waiting(e, r, r->n_seq - n_run);
    if (!start_inspect(e, r, now))
        return;
    metrics_add_prompt_tokens(r->n_prompt);
    e->running[e->n_running++] = r;
    gen_request_lock(r);
    r->queued_seconds = now - r->t_submit;
    gen_request_unlock(r);
}

/* Begins the item with n_run sequences (1 for a paused one): KV_BEGUN, or
 * why not.  A request kept from other callers' memory for its siblings
 * starts with its first sequence alone. */
static kv_begin_status begin_item(engine *e, const caller_state *c,
                                  const waiting_item *w, size_t *n_run,
                                  double now)
{
    if (w->queue == SIZE_MAX)
        return pause_resume(e, w->r, w->seq, now);
    const bool keep_others = fair_others_have_work(e, c);
    kv_begin_status st = admit_begin_kv(e, w->r, *n_run, keep_others, now);
    if (st == KV_SHARES_KEPT && *n_run > 1) {
        *n_run = 1;
        st = admit_begin_kv(e, w->r, 1, keep_others, now);
    }
    return st;
}

/* The plan's victims [from, to) give their slots back: paused. */
static void pause_victims(engine *e, const preempt_plan *p, size_t from,
                          size_t to, double now)
{
    for (size_t v = from; v < to; v++)
        pause_seq(e, p->victims[v].r, p->victims[v].seq, now);
}

/* ... and take them again at once: nothing lost but the row each runs
 * again (a sibling still waiting for its prompt stays paused, as it would
 * have without a slot). */
static void unpause_victims(engine *e, const preempt_plan *p, size_t from,
                            size_t to, double now)
{
    for (size_t v = from; v < to; v++) {
        const preempt_victim *x = &p->victims[v];
        if (pause_resumable(x->r, x->seq))
            pause_resume(e, x->r, x->seq, now);
    }
}

/* Begins the item in its n_run slots, pausing the victims they take.
 * First with the victims still holding what they reserved; when that is
 * short of memory, they are paused first, so that what they reserved
 * counts, and taken back if even that is not enough.  Returns the begin's
 * status; on KV_BEGUN, *n_pause victims stand paused. */
static kv_begin_status begin_with_victims(engine *e, const caller_state *c,
                                          const waiting_item *w, size_t *n_run,
                                          size_t free_slots,
                                          const preempt_plan *p,
                                          size_t *n_pause, double now)
{
    kv_begin_status st = begin_item(e, c, w, n_run, now);
    if (st == KV_BEGUN) {
        *n_pause = *n_run > free_slots ? *n_run - free_slots : 0;
        pause_victims(e, p, 0, *n_pause, now);
        return st;
    }
    if (st != KV_NO_MEMORY || p->n == 0)
        return st;
    pause_victims(e, p, 0, p->n, now);
    st = begin_item(e, c, w, n_run, now);
    *n_pause = st != KV_BEGUN        ? 0
               : *n_run > free_slots ? *n_run - free_slots
                                     : 0;
    unpause_victims(e, p, *n_pause, p->n, now);
    return st;
}

void admit_schedule(engine *e, double now)
{
    fair_refresh(e, now);
    size_t free_slots = e->cfg.n_slots - slots_held(e);
    preempt_plan plan = { .victims = e->plan, .cap = e->cfg.n_slots };
    for (caller_state *c; (c = fair_next(e)) != NULL;) {
        /* interactive callers come first: past them, only background
         * ones, which would compute nothing beside interactive work
         * (engine_batch.c) but hold a slot and memory; they start once
         * none holds a slot */
        if (fair_background(c) && admit_interactive_running(e))
            break;
        waiting_item w;
        if (!oldest_waiting(e, c, &w)) {
            fair_block(c);
            continue;
        }
        const size_t want = w.queue == SIZE_MAX ? 1 : w.r->n_seq;
        plan.n = 0;
        plan.given = free_slots < want ? free_slots : want;
        while (free_slots + plan.n < want && fair_plan_victim(e, c, &plan))
            ;
        size_t n_run = free_slots + plan.n < want ? free_slots + plan.n : want;
        if (n_run == 0) {
            fair_block(c); /* no slot for it this step */
            continue;
        }
        if (w.queue != SIZE_MAX && e->n_running == e->running_cap) {
            /* as many requests run or stand paused as the running set
             * holds (max_queue + 2 x n_slots): new ones wait for them */
            fair_block(c);
            continue;
        }
        size_t n_pause = 0;
        kv_begin_status st = begin_with_victims(e, c, &w, &n_run, free_slots,
                                                &plan, &n_pause, now);
        if (st == KV_NO_MEMORY)
            break; /* the cache cannot hold it yet: nothing passes it */
        if (st != KV_BEGUN) {
            fair_block(c); /* its session is busy or at its quota */
            continue;
        }
        for (size_t v = 0; v < n_pause; v++) {
            const preempt_victim *x = &plan.victims[v];
            pause_count(x->r, x->why);
            fair_paused(e, x->r, true);
        }
        free_slots = free_slots + n_pause - n_run;
        if (w.queue == SIZE_MAX)
            fair_started(c, 1);
        else
            start_request(e, c, w.queue, n_run, now);
    }
}

/* ---- quotas: what a caller may have queued ---- */

/* Requests of `account` waiting in the queue. */
/* Requests of `account` in the same class as `background` waiting in the
 * queue: a key's batch lines (at most --batch-parallel at once) never
 * take its interactive requests' places, nor these theirs. */
static size_t caller_queued_count(const engine *e, const uint8_t *account,
                                  bool background)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        const gen_request *q = engine_queue_at(e, i);
        n += memcmp(q->account, account, SHA256_BYTES) == 0 &&
             q->background == background;
    }
    return n;
}

/* Sessions of `account` with a request queued or running. */
static size_t caller_sessions_in_use(const engine *e, const uint8_t *account)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        const gen_request *q = engine_queue_at(e, i);
        n += q->session != NULL &&
             memcmp(q->account, account, SHA256_BYTES) == 0;
    }
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *q = e->running[k];
        n += q->session != NULL &&
             memcmp(q->account, account, SHA256_BYTES) == 0;
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

engine_status admit_could_run(const engine *e, const gen_params *p, size_t n,
                              engine_refusal *why)
{
    /* Each prompt waits as a request of its own: more than the caller may
     * have queued could never all be taken (its 429 retried in vain). */
    const size_t max_queued = p[0].max_queued > 0
                                  ? p[0].max_queued
                                  : e->cfg.max_queued_per_caller;
    if (n > max_queued) {
        why->limit = max_queued;
        return ENGINE_TOO_MANY_PROMPTS;
    }
    /* Admission waits for blocks in FIFO order: a request no amount of
     * waiting can fit would hold up everyone behind it. */
    for (size_t k = 0; k < n; k++) {
        size_t need = kvcache_blocks_needed(
            p[k].n_prompt, p[k].n_prompt + p[k].max_tokens, p[k].n_sequences);
        if (need > e->kv_blocks) {
            *why = (engine_refusal){ .prompt = k,
                                     .need = need,
                                     .have = e->kv_blocks };
            return ENGINE_TOO_LARGE;
        }
    }
    return ENGINE_OK;
}

/* Queues `r`, or finishes it when it has nothing to compute. */
static engine_status enqueue_one(engine *e, gen_request *r, engine_refusal *why)
{
    if (r->session != NULL &&
        admit_session_in_use(e, r->id.owner, r->session, true))
        return ENGINE_SESSION_BUSY;
    if (over_session_quota(e, r))
        return ENGINE_SESSION_QUOTA;
    if (r->max_tokens == 0 && !r->score_prompt && r->inspect == NULL) {
        /* nothing to compute: finished before it starts */
        request_finish_all(r, FINISH_LENGTH);
        atomic_store(&r->refs, 1);
        return ENGINE_OK;
    }
    if (e->q_len >= e->cfg.max_queue)
        return ENGINE_QUEUE_FULL;
    if (caller_queued_count(e, r->account, r->background) >= r->max_queued) {
        why->limit = r->max_queued;
        return ENGINE_CALLER_QUEUE_FULL;
    }
    /* its wait starts now, not at a busy session's first refusal */
    r->t_submit = monotonic_seconds();
    fair_enqueued(e, r);
    atomic_store(&r->refs, 2);
    e->queue[(e->q_head + e->q_len++) % e->cfg.max_queue] = r;
    return ENGINE_OK;
}

engine_status admit_enqueue(engine *e, gen_request **r, size_t n,
                            engine_refusal *why)
{
    const size_t q_len = e->q_len;
    for (size_t k = 0; k < n; k++) {
        engine_status st = enqueue_one(e, r[k], why);
        if (st != ENGINE_OK) {
            /* the lock is still held: no one saw the prompts queued
             * before this one, which leave the queue's tail again */
            e->q_len = q_len;
            return st;
        }
    }
    if (e->q_len > q_len)
        pthread_cond_signal(&e->cond);
    /* background work alone is running: it gives way within a layer */
    for (size_t k = 0; k < n && e->step_abandonable; k++)
        if (!r[k]->background)
            atomic_store(&e->step_abandon, true);
    return ENGINE_OK;
}