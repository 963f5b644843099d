/* engine_admit.c — who runs next: the wait queue, fair admission across
 * callers, each caller's quotas (queued requests, busy sessions), and the
 * KV sequences a request is begun with and gives back.
 *
 * Threads: admit_enqueue runs on an HTTP thread (engine_submit), the rest
 * on the engine thread; all of it with e->lock held.  The caller table is
 * this file's own.
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
#include "config.h"

#include "engine/engine_shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"

typedef struct caller_state {
    uint8_t account[SHA256_BYTES];
    bool used;
    double served;      /* cost of its ended requests, halving every
                                 * caller_memory */
    double t_served;    /* when `served` was last brought up to date */
    double last_active; /* when it last had a request queued or running */
    /* recomputed each admission pass */
    double in_flight; /* cost of its running requests */
    size_t running;   /* sequences holding a slot */
    size_t queued;
} caller_state;

caller_state *admit_callers_create(size_t n)
{
    return calloc(n, sizeof(caller_state));
}

/* ---- the queue ---- */

gen_request *admit_queue_at(const engine *e, size_t i)
{
    return e->queue[(e->q_head + i) % e->cfg.max_queue];
}

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
        gen_request *r = admit_queue_at(e, i);
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
        if (holds_session(admit_queue_at(e, i), owner, session, live_only))
            return true;
    for (size_t i = 0; i < e->n_running; i++)
        if (holds_session(e->running[i], owner, session, live_only))
            return true;
    return false;
}

/* ---- a request's KV sequences ---- */

/* What the request reuses from the cache, once known (a read from disk
 * may fail and leave those tokens to be computed). */
void admit_count_reuse(gen_request *r, size_t reused)
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
kv_begin_status admit_begin_kv(engine *e, gen_request *r, bool keep_others,
                               double now)
{
    size_t seqs[r->n_seq], reused = 0;
    kv_begin b = { .who = &r->id,
                   .account = r->account,
                   .session = r->session,
                   .max_sessions = r->max_sessions,
                   .prompt = r->prompt,
                   .n_prompt = r->n_prompt,
                   .max_total = r->n_prompt + r->max_tokens,
                   .n_seq = r->n_seq,
                   .reuse = !request_computes_whole_prompt(r),
                   .keep_others_share = keep_others,
                   .now = now };
    kv_begin_status st = kvcache_seq_begin(e->kv, &b, seqs, &reused);
    if (st != KV_BEGUN)
        return st;
    for (size_t i = 0; i < r->n_seq; i++) {
        r->seqs[i].kv = seqs[i];
        r->seqs[i].has_kv = true;
    }
    r->kv_loading = kvcache_seq_loading(e->kv, seqs[0]);
    if (!r->kv_loading)
        admit_count_reuse(r, reused);
    return KV_BEGUN;
}

void admit_release_kv(engine *e, seq_state *s, double now)
{
    if (s->has_kv) {
        kvcache_seq_end(e->kv, s->kv, now);
        s->has_kv = false;
    }
}

void admit_release_all_kv(engine *e, gen_request *r, double now)
{
    for (size_t i = 0; i < r->n_seq; i++)
        admit_release_kv(e, &r->seqs[i], now);
}

/* ---- fair across callers ---- */

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
        if (memcmp(admit_queue_at(e, i)->account, account, SHA256_BYTES) == 0)
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
        caller_get(e, admit_queue_at(e, i)->account, now)->queued++;
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
        gen_request *r = admit_queue_at(e, i);
        caller_state *c = caller_find(e, r->account);
        /* only the caller's first queued request is a candidate */
        bool head = true;
        for (size_t j = 0; j < i && head; j++)
            head = memcmp(admit_queue_at(e, j)->account, r->account,
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
                oldest_blocked = i; /* the queue is in arrival order */
            continue;
        }
        if (best_c == NULL || caller_account(c) < caller_account(best_c)) {
            best = i;
            best_c = c;
        }
    }
    /* an aged wide request that fits its share: the slots drain to it */
    if (oldest_blocked != SIZE_MAX &&
        now - admit_queue_at(e, oldest_blocked)->t_submit >= age &&
        (best == SIZE_MAX || admit_queue_at(e, best)->t_submit >
                                 admit_queue_at(e, oldest_blocked)->t_submit))
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
    admit_release_all_kv(e, r, now);
    request_finish_all(r, FINISH_CANCELLED);
    caller_find(e, r->account)->queued--;
    request_unref(r);
    return false;
}

void admit_queued(engine *e, double now)
{
    if (e->q_len == 0)
        return;
    callers_count(e, now);
    for (size_t i = 0; i < e->q_len; i++)
        admit_queue_at(e, i)->kv_deferred = false;
    for (;;) {
        size_t i = pick_next(e, now);
        if (i == SIZE_MAX)
            break;
        gen_request *r = admit_queue_at(e, i);
        caller_state *c = caller_find(e, r->account);
        /* another caller's kept memory: only until it has gone, or for
         * caller_memory at most */
        const bool keep_others = others_present(e, c, now) &&
                                 now - r->t_submit < caller_memory(e);
        kv_begin_status st = admit_begin_kv(e, r, keep_others, now);
        if (st == KV_SHARES_KEPT) {
            r->kv_deferred = true; /* others pass it this step */
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
void admit_request_ended(engine *e, const gen_request *r, double now)
{
    caller_state *c = caller_find(e, r->account);
    if (c == NULL)
        return;
    caller_decay(e, c, now);
    c->served += r->cost;
    c->last_active = now;
}

/* ---- quotas: what a caller may have queued ---- */

/* Requests of `account` waiting in the queue. */
static size_t caller_queued_count(const engine *e, const uint8_t *account)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++)
        n += memcmp(admit_queue_at(e, i)->account, account, SHA256_BYTES) == 0;
    return n;
}

/* Sessions of `account` with a request queued or running. */
static size_t caller_sessions_in_use(const engine *e, const uint8_t *account)
{
    size_t n = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        const gen_request *q = admit_queue_at(e, i);
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

/* A request of `account` joins the queue: its caller is present. */
static void caller_backlogged(engine *e, const uint8_t *account)
{
    const double now = monotonic_seconds();
    caller_get(e, account, now)->last_active = now;
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
    if (caller_queued_count(e, r->account) >= r->max_queued) {
        why->limit = r->max_queued;
        return ENGINE_CALLER_QUEUE_FULL;
    }
    /* its wait starts now, not at a busy session's first refusal */
    r->t_submit = monotonic_seconds();
    caller_backlogged(e, r->account);
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
    return ENGINE_OK;
}