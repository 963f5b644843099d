/* engine_spec.c — speculative decoding by prompt lookup: a decode row
 * carries drafts (prompt_lookup.h) in the rows after it, the forward pass
 * computes them all in one step, and the sequence keeps every token up to
 * the first draft the model disagrees with, plus the model's own token
 * there: 1 to 1 + k tokens a step for one read of the weights.
 *
 * The answer never changes.  Each row's token is drawn exactly as plain
 * decoding would draw it (the same logits: the kernels give a row the same
 * bits however many rows share its step; the same RNG, one draw per kept
 * token; the penalties and the constraint over the tokens before it), and
 * a draft is accepted only when it is that token.  With a deterministic
 * draft this is the standard rejection rule (accept a draft d with
 * probability p(d), else draw from p without d), coupled to the RNG so
 * that a seed gives the same text with or without speculation.  Rows
 * after the first disagreement were computed on a wrong token: their K/V
 * is not committed and their blocks go back (kvcache_seq_trim).
 *
 * How many drafts: spec_policy.h's rule, with each row count's measured
 * step time (spec_cost.h: the engine's own decode steps, drafts or not)
 * and each sequence's measured acceptance.  That acceptance is per
 * sequence, recent trials weighing more (SPEC_MEMORY per step), and drifts
 * back to even odds while the sequence does not draft, so a sequence whose drafts failed tries again
 * now and then: a draft that is always wrong costs a row every few steps.
 *
 * Threads: the engine thread, with e->lock held. */
#include "config.h"

#include "engine/engine_shared.h"

#include <assert.h>
#include <string.h>

#include "core/metrics.h"
#include "engine/prompt_lookup.h"
#include "engine/spec_cost.h"
#include "engine/spec_policy.h"

/* Each step a trial's weight falls by this much. */
#define SPEC_MEMORY 0.95
/* Until any step is measured: a row costs this fraction of a step (on
 * this machine kind a batch of 16 streams about doubles a 124M model's
 * step). */
#define SPEC_ROW_SHARE (1.0 / 16.0)

/* The highest draft count sequence s may have at its length: its inputs
 * stay where plain decoding would feed tokens (the reservation, the
 * context). */
static size_t spec_bound(const engine *e, const gen_request *r,
                         const seq_state *s)
{
    const size_t g = s->out.n_tokens;         /* the engine's own write */
    size_t end = r->n_prompt + r->max_tokens; /* positions it may fill */
    if (end > e->m->config.n_ctx)
        end = e->m->config.n_ctx;
    /* plain decoding feeds token g - 1 at position n_prompt + g - 1, the
     * last one at end - 2 */
    const size_t next = r->n_prompt + g - 1;
    if (end < 2 || end - 2 <= next)
        return 0;
    size_t k = end - 2 - next;
    return k < r->spec_max_draft ? k : r->spec_max_draft;
}

/* The drafts for what follows a sequence's g tokens, at most max: the
 * client's prediction (Predicted Outputs) where the answer so far is its
 * beginning, else where the text's end occurs in it (after an edit the
 * answer joins it again), else an earlier occurrence in the text. */
static size_t propose(const gen_request *r, const seq_state *s, size_t g,
                      size_t max, const int32_t **draft)
{
    const size_t len = r->n_prompt + g;
    if (r->n_prediction > g &&
        memcmp(r->prediction, s->generated, g * sizeof *s->generated) == 0) {
        const size_t avail = r->n_prediction - g;
        *draft = r->prediction + g;
        return avail < max ? avail : max;
    }
    size_t n = prompt_lookup(r->prediction, r->n_prediction, s->history, len,
                             max, draft);
    if (n == 0)
        n = prompt_lookup(s->history, len, s->history, len, max, draft);
    return n;
}

/* Whether entry b's row may carry drafts this step (decays its
 * acceptance's memory when it may). */
static bool may_draft(const engine *e, size_t b)
{
    const batch_entry *be = &e->entries[b];
    gen_request *r = be->r;
    seq_state *s = &r->seqs[be->seq];
    if (r->spec_max_draft == 0 || be->prefill)
        return false;
    s->spec_hits *= SPEC_MEMORY;
    s->spec_trials *= SPEC_MEMORY;
    const size_t g = s->out.n_tokens; /* the engine's own write */
    return g > 0 && s->generated[g - 1] == s->next_token;
}

/* Its drafts' measured chance of acceptance, even odds to begin with. */
static double acceptance(const seq_state *s)
{
    return (s->spec_hits + 1.0) / (s->spec_trials + 2.0);
}

/* Whether the draft model guesses for entry b (may_draft said it may):
 * with one, for every request that sent no prediction (and under
 * cfg.draft_agree_percent, for those that did: their prediction is what
 * it agrees with). */
static bool drafts_by_model(const engine *e, size_t b)
{
    return e->draft != NULL && (e->entries[b].r->n_prediction == 0 ||
                                e->cfg.draft_agree_percent > 0);
}

/* Finds entry b's drafts by lookup: their start in *draft, the offer's
 * count and acceptance.  None for a row that may not speculate, or whose
 * drafts the draft model makes (*by_model). */
static void find_drafts(engine *e, size_t b, spec_offer *o,
                        const int32_t **draft, bool *by_model)
{
    const batch_entry *be = &e->entries[b];
    gen_request *r = be->r;
    seq_state *s = &r->seqs[be->seq];
    *o = (spec_offer){ 0 };
    *draft = NULL;
    *by_model = false;
    if (!may_draft(e, b))
        return;
    if (drafts_by_model(e, b)) {
        *by_model = true;
        return;
    }
    o->avail = propose(r, s, s->out.n_tokens, spec_bound(e, r, s), draft);
    o->accept = acceptance(s);
}

/* seconds[d], d = 0..room: a step of n + d rows, as measured
 * (spec_cost.h); until a row count is measured, a row at 1/16 of a step. */
static void step_seconds(const engine *e, size_t n, size_t room,
                         double *seconds)
{
    for (size_t d = 0; d <= room; d++) {
        const double t = spec_cost_seconds(&e->spec_cost, n + d);
        seconds[d] = t > 0.0 ? t : 1.0 + SPEC_ROW_SHARE * (double)(n + d);
    }
}

/* Makes entry b's row carry k drafts: from `draft`, or (NULL) the draft
 * model's, written there before the forward pass. */
static void add_drafts(engine *e, size_t b, const int32_t *draft, size_t k)
{
    batch_entry *be = &e->entries[b];
    seq_state *s = &be->r->seqs[be->seq];
    const size_t g = s->out.n_tokens;
    /* the drafts come before the history's end; they go after it */
    if (draft != NULL)
        memcpy(s->generated + g, draft, k * sizeof *draft);
    kvcache_seq_grow(e->kv, s->kv, 1 + k); /* from the committed length */
    forward_seq *fs = &e->batch[b];
    fs->tokens = s->generated + g - 1; /* next_token, then the drafts */
    fs->n_tokens = fs->n_logits = 1 + k;
    be->n_rows = be->n_logits = 1 + k;
    be->n_draft = k;
}

/* The draft model's part of the plan: offers for the rows it guesses for
 * (their sequences begun in its cache), the number of passes and who
 * takes them (spec_policy_passes), within `room` rows; `base` decode
 * rows and lookup drafts are in the step already.  Returns the rows
 * added. */
static size_t plan_model_drafts(engine *e, size_t n_entries, const bool *mine,
                                size_t base, size_t room, double now)
{
    spec_offer *offers = e->spec_offers;
    size_t m = 0;
    for (size_t b = 0; b < n_entries && m < e->draft_cap; b++) {
        if (!mine[b])
            continue;
        gen_request *r = e->entries[b].r;
        seq_state *s = &r->seqs[e->entries[b].seq];
        size_t bound = spec_bound(e, r, s);
        const size_t room_in_draft = draft_bound(e, r, s);
        if (room_in_draft < bound)
            bound = room_in_draft;
        if (bound == 0 || !draft_begin(e, r, s, now))
            continue;
        offers[m] = (spec_offer){ .avail = bound, .accept = acceptance(s) };
        e->spec_entry[m++] = b;
    }
    if (m == 0)
        return 0;
    step_seconds(e, base, room, e->spec_seconds);
    size_t passes = 0;
    spec_policy_passes(offers, m, (double)n_entries, room, e->spec_seconds,
                       draft_pass_estimate(e, e->spec_seconds[0]),
                       e->cfg.spec_ignore_cost, e->spec_order, &passes);
    /* the first pass carries every backlog, at most a step's rows; the
     * backlogs of sequences catching up (a new one's is its whole text) at
     * most the prompt rows the step budget lets a step carry beside these
     * streams, so catching up never pauses them longer than a prompt
     * chunk would (a draft's row costs less than the model's); the rest
     * goes in the next steps */
    size_t added = 0;
    draft_first_pass left = { .rows = e->cfg.max_batch_rows,
                              .catch_up = step_budget_prefill_rows(
                                  &e->budget, n_entries, e->cfg.n_slots,
                                  e->cfg.max_batch_rows) };
    for (size_t i = 0; i < m && left.rows > 0; i++) {
        const size_t b = e->spec_entry[i];
        if (offers[i].k == 0)
            continue;
        const size_t k = draft_take(e, b, offers[i].k, &left);
        if (k > 0) {
            add_drafts(e, b, NULL, k);
            added += k;
        }
    }
    return added;
}

size_t spec_plan(engine *e, size_t n_entries, size_t room, double now)
{
    spec_offer *offers = e->spec_offers;
    const int32_t **drafts = e->spec_drafts;
    bool *mine = e->spec_by_model;
    bool any = false, any_model = false;
    e->n_draft_seqs = 0;
    e->draft_passes = 0;
    for (size_t b = 0; b < n_entries; b++) {
        find_drafts(e, b, &offers[b], &drafts[b], &mine[b]);
        any = any || offers[b].avail > 0;
        any_model = any_model || mine[b];
    }
    if (!any && !any_model)
        return 0;
    /* batch_build's room is what its decode rows (one an entry) left */
    assert(n_entries + room <= e->cfg.max_batch_rows);
    size_t added = 0;
    if (any) {
        step_seconds(e, n_entries, room, e->spec_seconds);
        added = spec_policy_allocate(offers, n_entries, room, e->spec_seconds,
                                     e->cfg.spec_ignore_cost);
        for (size_t b = 0; b < n_entries; b++)
            if (offers[b].k > 0)
                add_drafts(e, b, drafts[b], offers[b].k);
    }
    if (any_model && added < room)
        added += plan_model_drafts(e, n_entries, mine, n_entries + added,
                                   room - added, now);
    return added;
}

void spec_settle(engine *e, const batch_entry *be)
{
    if (be->n_draft == 0) { /* the draft model only caught up */
        draft_settle(e, be, 0);
        return;
    }
    seq_state *s = &be->r->seqs[be->seq];
    const size_t k = be->n_draft;
    const sample_job *j = &e->jobs[be->job];
    const size_t accepted = j->n_emitted - 1;
    /* the drafts it reached: up to the first rejected one */
    s->spec_hits += (double)accepted;
    s->spec_trials += (double)(accepted < k ? accepted + 1 : k);
    metrics_spec_verified(k, accepted);
    /* those the answer took are its text */
    draft_settle(e, be, j->n_applied > 0 ? j->n_applied - 1 : 0);
}

void spec_observe(engine *e, size_t rows, size_t prompt_rows, double seconds)
{
    if (prompt_rows == 0 && e->n_lens == 0)
        spec_cost_observe(&e->spec_cost, rows, seconds);
}
