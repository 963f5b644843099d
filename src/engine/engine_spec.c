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
static size_t draft_bound(const engine *e, const gen_request *r,
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

/* Finds entry b's drafts: their start in *draft, the offer's count and
 * acceptance.  None for a row that may not speculate. */
static void find_drafts(engine *e, size_t b, spec_offer *o,
                        const int32_t **draft)
{
    const batch_entry *be = &e->entries[b];
    gen_request *r = be->r;
    seq_state *s = &r->seqs[be->seq];
    *o = (spec_offer){ 0 };
    *draft = NULL;
    if (r->spec_max_draft == 0 || be->prefill)
        return;
    s->spec_hits *= SPEC_MEMORY;
    s->spec_trials *= SPEC_MEMORY;
    const size_t g = s->out.n_tokens; /* the engine's own write */
    if (g == 0 || s->generated[g - 1] != s->next_token)
        return;
    o->avail = propose(r, s, g, draft_bound(e, r, s), draft);
    o->accept = (s->spec_hits + 1.0) / (s->spec_trials + 2.0);
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

/* Makes entry b's row carry k drafts from `draft`. */
static void add_drafts(engine *e, size_t b, const int32_t *draft, size_t k)
{
    batch_entry *be = &e->entries[b];
    seq_state *s = &be->r->seqs[be->seq];
    const size_t g = s->out.n_tokens;
    /* the drafts come before the history's end; they go after it */
    memcpy(s->generated + g, draft, k * sizeof *draft);
    kvcache_seq_grow(e->kv, s->kv, 1 + k); /* from the committed length */
    forward_seq *fs = &e->batch[b];
    fs->tokens = s->generated + g - 1; /* next_token, then the drafts */
    fs->n_tokens = fs->n_logits = 1 + k;
    be->n_rows = be->n_logits = 1 + k;
    be->n_draft = k;
}

size_t spec_plan(engine *e, size_t n_entries, size_t room)
{
    spec_offer *offers = e->spec_offers;
    const int32_t **drafts = e->spec_drafts;
    bool any = false;
    for (size_t b = 0; b < n_entries; b++) {
        find_drafts(e, b, &offers[b], &drafts[b]);
        any = any || offers[b].avail > 0;
    }
    if (!any)
        return 0;
    /* batch_build's room is what its decode rows (one an entry) left */
    assert(n_entries + room <= e->cfg.max_batch_rows);
    step_seconds(e, n_entries, room, e->spec_seconds);
    size_t added = spec_policy_allocate(
        offers, n_entries, room, e->spec_seconds, e->cfg.spec_ignore_cost);
    for (size_t b = 0; b < n_entries; b++)
        if (offers[b].k > 0)
            add_drafts(e, b, drafts[b], offers[b].k);
    return added;
}

void spec_settle(engine *e, const batch_entry *be)
{
    seq_state *s = &be->r->seqs[be->seq];
    const size_t k = be->n_draft;
    const size_t accepted = e->jobs[be->job].n_emitted - 1;
    /* the drafts it reached: up to the first rejected one */
    s->spec_hits += (double)accepted;
    s->spec_trials += (double)(accepted < k ? accepted + 1 : k);
    metrics_spec_verified(k, accepted);
}

void spec_observe(engine *e, size_t rows, size_t prompt_rows, double seconds)
{
    if (prompt_rows == 0 && e->n_lens == 0)
        spec_cost_observe(&e->spec_cost, rows, seconds);
}
