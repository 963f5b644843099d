/* engine_fair.c — who is owed a slot: each caller's (API key's, or client
 * address's) sequences running and work waiting, what it has been served,
 * and which sequence gives way when a caller below its share waits.
 *
 * A caller is an account and a class: a key's interactive requests are
 * one caller, its background (batch) requests another, so a key's batch
 * never eats its interactive share.  Background callers come below every
 * interactive one:
 *
 *   - Every interactive caller with waiting work is served before any
 *     background caller; among the callers of one class the rules below
 *     apply.
 *   - A waiting interactive item takes a slot from a running background
 *     sequence first (the youngest request's last sequence first, at any
 *     length, a prompt being computed too when engine_pause.c can pause
 *     it), whatever its own max_seqs: a background sequence computes
 *     nothing while interactive work holds a slot (engine_batch.c), so
 *     its slot is idle capacity.  Only then the fair-share and key-limit
 *     victims below, among interactive callers only.
 *   - A background item never pauses an interactive sequence: it takes
 *     free slots, or a slot of another background caller by the rules
 *     below, and only while no interactive request holds a slot
 *     (engine_admit.c: beside interactive work it would compute
 *     nothing).
 *
 * The rules within a class (engine_admit.c applies them each step):
 *
 *   - Never idle: a free slot goes to waiting work at the next step,
 *     whoever owns it.  A caller alone runs on every slot.
 *   - The caller running the fewest sequences is served first; among
 *     equals, the least served: its virtual time counts the rows (prompt,
 *     resumed and decode rows) the engine computed for it; among equals
 *     again, the one served longer ago.  A caller whose
 *     work arrives after a time without any starts at the least virtual
 *     time of those with work, so neither idle time (thinking between two
 *     requests) nor a flood counts for or against it later: nothing is
 *     kept for a caller that sends nothing, and nothing is lost by one
 *     that pauses.
 *   - When no slot is free, a waiting caller X that runs fewer than its
 *     max_seqs takes one from the caller Y running the most, when Y runs at
 *     least two more than X (fair share: slots split as evenly as whole
 *     sequences allow), or more than its own max_seqs (a key limited by
 *     the operator).  A caller at its own max_seqs takes only free slots.
 *     No two callers take a slot back and forth: after a fair-share move
 *     X runs no more than Y, and after a key-limit one Y is still at its
 *     max_seqs or over, where it takes only free slots.  Y's sequence is paused
 *     (engine_pause.c), youngest request first, its last sequence first;
 *     a sequence within PREEMPT_MIN_LEFT tokens of its end is left to
 *     finish (its slot is free within as many steps, sooner than a pause
 *     and a resume pay off), and inspects and prompts being computed are
 *     never paused (but a background prompt engine_pause.c can pause).
 *
 * Callers are kept in a table with an entry for every queued and every
 * running request (paused ones included) and one more, so a caller with
 * work always has one; when it is full, the longest idle caller is
 * forgotten (and starts again, if it comes back, at the others' least
 * virtual time).
 *
 * Threads: the engine thread, with e->lock held; fair_enqueued on an HTTP
 * thread in engine_submit, with e->lock held.  The table is this file's
 * own. */
#include "config.h"

#include "engine/engine_shared.h"

#include <stdlib.h>
#include <string.h>

#include "core/monotonic.h"

/* A sequence this close to its end is left to finish. */
#define PREEMPT_MIN_LEFT 4

struct caller_state {
    uint8_t account[SHA256_BYTES];
    bool background; /* the account's batch work, a caller of its own */
    bool used;
    double vtime;       /* rows computed for it, caught up on arrival */
    double t_charged;   /* when rows were last computed for it */
    double last_active; /* when it last had work queued or running */
    bool backlogged;    /* had work at the last refresh */
    /* recounted by fair_refresh, moved on by fair_started/fair_paused */
    size_t running; /* sequences holding a slot */
    size_t waiting; /* paused sequences and queued requests */
    size_t cap;     /* its max_seqs (the smallest its requests carry) */
    bool blocked;   /* nothing of it starts in this pass */
};

caller_state *fair_callers_create(size_t n)
{
    return calloc(n, sizeof(caller_state));
}

static bool same(const uint8_t *a, const uint8_t *b)
{
    return memcmp(a, b, SHA256_BYTES) == 0;
}

/* Whether r is c's: its account, and its class. */
static bool owns(const caller_state *c, const gen_request *r)
{
    return c->background == r->background && same(c->account, r->account);
}

static caller_state *caller_find(engine *e, const gen_request *r)
{
    for (size_t i = 0; i < e->n_callers_cap; i++)
        if (e->callers[i].used && owns(&e->callers[i], r))
            return &e->callers[i];
    return NULL;
}

/* Whether caller c has a request queued or running. */
static bool caller_busy(const engine *e, const caller_state *c)
{
    for (size_t i = 0; i < e->q_len; i++)
        if (owns(c, engine_queue_at(e, i)))
            return true;
    for (size_t k = 0; k < e->n_running; k++)
        if (owns(c, e->running[k]))
            return true;
    return false;
}

/* The entry of r's caller, made if need be.  At most max_queue plus the
 * running requests' callers have work, and the table has room for one
 * more, so a free entry is always found: an unused one, or the longest
 * idle one, forgotten. */
static caller_state *caller_get(engine *e, const gen_request *r, double now)
{
    caller_state *c = caller_find(e, r);
    if (c != NULL)
        return c;
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *x = &e->callers[i];
        if (!x->used) {
            c = x;
            break;
        }
        if ((c == NULL || x->last_active < c->last_active) &&
            !caller_busy(e, x))
            c = x;
    }
    if (c == NULL)
        abort(); /* more callers with work than requests: a bug */
    memset(c, 0, sizeof *c);
    c->used = true;
    memcpy(c->account, r->account, SHA256_BYTES);
    c->background = r->background;
    c->last_active = now;
    c->cap = SIZE_MAX;
    return c;
}

void fair_enqueued(engine *e, const gen_request *r)
{
    const double now = monotonic_seconds();
    caller_get(e, r, now)->last_active = now;
}

static void count_request(caller_state *c, const gen_request *r)
{
    if (r->max_seqs < c->cap)
        c->cap = r->max_seqs;
}

void fair_refresh(engine *e, double now)
{
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *c = &e->callers[i];
        c->running = c->waiting = 0;
        c->cap = SIZE_MAX;
        c->blocked = false;
    }
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        caller_state *c = caller_get(e, r, now);
        count_request(c, r);
        for (size_t i = 0; i < r->n_seq; i++) {
            c->running += r->seqs[i].has_kv;
            c->waiting += r->seqs[i].phase == SEQ_PAUSED;
        }
    }
    for (size_t i = 0; i < e->q_len; i++) {
        gen_request *r = engine_queue_at(e, i);
        caller_state *c = caller_get(e, r, now);
        count_request(c, r);
        c->waiting++;
    }
    /* A caller with work again starts at the least virtual time of those
     * of its class that had work: its idle time earns it nothing, costs it
     * nothing.  (Virtual times are compared within a class only.) */
    double floor[2] = { -1.0, -1.0 };
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        const caller_state *c = &e->callers[i];
        double *f = &floor[c->background];
        if (c->used && c->backlogged && (*f < 0.0 || c->vtime < *f))
            *f = c->vtime;
    }
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *c = &e->callers[i];
        if (!c->used)
            continue;
        const bool has_work = c->running > 0 || c->waiting > 0;
        if (has_work && !c->backlogged && floor[c->background] > c->vtime)
            c->vtime = floor[c->background];
        if (has_work)
            c->last_active = now;
        c->backlogged = has_work;
    }
}

/* Whether a owes its next slot before b. */
static bool served_before(const caller_state *a, const caller_state *b)
{
    if (a->background != b->background)
        return !a->background; /* interactive first */
    if (a->running != b->running)
        return a->running < b->running;
    if (a->vtime != b->vtime)
        return a->vtime < b->vtime;
    return a->t_charged < b->t_charged; /* the one served longer ago */
}

caller_state *fair_next(engine *e)
{
    caller_state *best = NULL;
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        caller_state *c = &e->callers[i];
        if (c->used && c->waiting > 0 && !c->blocked &&
            (best == NULL || served_before(c, best)))
            best = c;
    }
    return best;
}

bool fair_owns(const caller_state *c, const gen_request *r)
{
    return owns(c, r);
}

bool fair_background(const caller_state *c)
{
    return c->background;
}

void fair_block(caller_state *c)
{
    c->blocked = true;
}

void fair_started(caller_state *c, size_t n_seq)
{
    c->running += n_seq;
    c->waiting--;
}

void fair_paused(engine *e, const gen_request *r, bool later_resumed)
{
    caller_state *c = caller_find(e, r);
    c->running--;
    c->waiting += later_resumed;
}

void fair_new_waiting(engine *e, const gen_request *r, size_t n)
{
    caller_find(e, r)->waiting += n;
}

bool fair_others_have_work(const engine *e, const caller_state *c)
{
    /* the KV cache keeps shares by account: the same key's other class
     * is no other account */
    for (size_t i = 0; i < e->n_callers_cap; i++) {
        const caller_state *x = &e->callers[i];
        if (x->used && !same(x->account, c->account) &&
            (x->running > 0 || x->waiting > 0))
            return true;
    }
    return false;
}

void fair_charge(engine *e, const gen_request *r, size_t rows, double now)
{
    caller_state *c = caller_find(e, r);
    if (c != NULL) {
        c->vtime += (double)rows;
        c->t_charged = now;
    }
}

/* ---- who gives way ---- */

static bool planned(const preempt_plan *p, const gen_request *r, size_t seq)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->victims[i].r == r && p->victims[i].seq == seq)
            return true;
    return false;
}

/* Sequences of `c` the plan pauses already. */
static size_t planned_of(const preempt_plan *p, const caller_state *c)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += owns(c, p->victims[i].r);
    return n;
}

/* Whether sequence i may be paused; `for_interactive`: a background
 * sequence for an interactive item, which it would never let compute
 * again before it ends (so none is left to finish). */
static bool preemptible(const engine *e, const gen_request *r, size_t i,
                        bool for_interactive)
{
    const seq_state *s = &r->seqs[i];
    if (!s->has_kv || r->inspect != NULL || atomic_load(&r->cancelled))
        return false;
    if (s->phase == SEQ_WAIT_PREFILL)
        return true; /* nothing computed of its own yet */
    if (s->phase == SEQ_PREFILL)
        return r->background && pause_prefill_ok(r);
    if (s->phase != SEQ_DECODE)
        return false;
    if (for_interactive)
        return true;
    const size_t done = s->out.n_tokens,
                 room = e->m->config.n_ctx - r->n_prompt;
    const size_t end = r->max_tokens < room ? r->max_tokens : room;
    return end > done + PREEMPT_MIN_LEFT;
}

/* Y's sequence to pause: its youngest request's last preemptible one.
 * y NULL: any background caller's, for an interactive item. */
static bool youngest_of(const engine *e, const caller_state *y,
                        const preempt_plan *p, preempt_victim *out)
{
    for (size_t k = e->n_running; k-- > 0;) {
        gen_request *r = e->running[k];
        if (y != NULL ? !owns(y, r) : !r->background)
            continue;
        for (size_t i = r->n_seq; i-- > 0;)
            if (preemptible(e, r, i, y == NULL) && !planned(p, r, i)) {
                out->r = r;
                out->seq = i;
                return true;
            }
    }
    return false;
}

static bool was_tried(const caller_state *const *tried, size_t n,
                      const caller_state *c)
{
    for (size_t i = 0; i < n; i++)
        if (tried[i] == c)
            return true;
    return false;
}

bool fair_plan_victim(const engine *e, const caller_state *x, preempt_plan *p)
{
    if (p->n >= p->cap)
        return false;
    if (!x->background && youngest_of(e, NULL, p, &p->victims[p->n])) {
        p->victims[p->n++].why = PREEMPT_BACKGROUND;
        return true;
    }
    const size_t xr = x->running + p->given + p->n;
    if (xr >= x->cap)
        return false;
    /* callers with nothing to pause; only running ones are tried, and at
     * most n_slots run */
    const caller_state *tried[e->cfg.n_slots];
    size_t n_tried = 0;
    for (;;) {
        const caller_state *y = NULL;
        size_t y_run = 0;
        preempt_reason why = PREEMPT_FAIR_SHARE;
        for (size_t i = 0; i < e->n_callers_cap; i++) {
            const caller_state *c = &e->callers[i];
            if (c == x || !c->used || c->running == 0 ||
                c->background != x->background || was_tried(tried, n_tried, c))
                continue;
            const size_t cr = c->running - planned_of(p, c);
            const bool over_share = cr >= xr + 2, over_cap = cr > c->cap;
            if (!over_share && !over_cap)
                continue;
            if (y == NULL || cr > y_run ||
                (cr == y_run && c->vtime > y->vtime)) {
                y = c;
                y_run = cr;
                why = over_share ? PREEMPT_FAIR_SHARE : PREEMPT_KEY_LIMIT;
            }
        }
        if (y == NULL)
            return false;
        preempt_victim *v = &p->victims[p->n];
        if (youngest_of(e, y, p, v)) {
            v->why = why;
            p->n++;
            return true;
        }
        tried[n_tried++] = y; /* nothing of it may pause */
    }
}
