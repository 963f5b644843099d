/* engine_draft.c — speculative decoding with a draft model: a smaller
 * model of the same vocabulary (--draft) proposes the tokens a decode row
 * carries as drafts, where prompt lookup (engine_spec.c) proposes them
 * from the text.  Verifying them is engine_spec.c's and never changes the
 * answer; this file only makes good guesses, cheaply.
 *
 * The draft model keeps a KV cache of its own: a sequence that drafts
 * holds a sequence in it, begun the first time it drafts (the prompt and
 * the answer so far, its longest cached prefix reused, in the caller's
 * own domain, so a conversation's next turn finds its history there too)
 * and ended when the sequence ends or is paused.  Before the step's
 * forward pass the draft model runs `passes` passes over every drafting
 * sequence at once: the first feeds what the draft has not seen yet (its
 * backlog: the tokens the target accepted last step, the target's own
 * token, or the whole text the first time) and each pass after it the
 * previous pass's guess; each pass's guess is its most likely token
 * (greedy), written where the decode row reads its drafts.  After the
 * step, the draft keeps the K/V of its backlog and of the drafts the
 * target accepted (they are the text now); the rest goes back.
 *
 * A greedy draft is the standard rejection rule's deterministic case
 * (accept d with probability p(d), else draw from p without d), which the
 * sampler's coupling gives (engine_spec.c): a seed gives the same text
 * with or without a draft model, and greedy is bit-identical.
 *
 * Threads: the engine thread; draft_run without e->lock (the step's
 * sequences stay put and their draft blocks are theirs alone, as the
 * target's are), everything else with it. */
#include "config.h"

#include "engine/engine_shared.h"

#include "core/metrics.h"
#include "core/monotonic.h"

/* A sequence whose draft sequence could not begin (the draft cache's
 * memory or sequences were short) tries again after this many tokens. */
#define DRAFT_RETRY_TOKENS 16
/* Each pass's time weighs this much in the running average. */
#define DRAFT_PASS_WEIGHT 0.1

/* Tokens of the text the sequence knows: its prompt and its answer,
 * next_token included. */
static size_t text_len(const gen_request *r, const seq_state *s)
{
    return r->n_prompt + s->out.n_tokens; /* the engine's own write */
}

/* The positions the draft may compute for the request: its own, within
 * the draft's context. */
static size_t draft_end(const engine *e, const gen_request *r)
{
    const size_t end = r->n_prompt + r->max_tokens;
    return end < e->draft->config.n_ctx ? end : e->draft->config.n_ctx;
}

bool draft_begin(engine *e, gen_request *r, seq_state *s, double now)
{
    if (s->draft_has_kv)
        return true;
    const size_t len = text_len(r, s);
    if (len < s->draft_retry_at)
        return false;
    const size_t max_total = draft_end(e, r);
    const kv_begin b = { .who = &r->id,
                         .account = r->account,
                         .prompt = s->history,
                         .n_prompt = len,
                         .max_total = max_total,
                         .n_seq = 1,
                         .reuse = true,
                         .now = now };
    size_t seq = 0, reused = 0;
    if (len > max_total ||
        kvcache_seq_begin(e->draft_kv, &b, &seq, &reused) != KV_BEGUN) {
        s->draft_retry_at = len + DRAFT_RETRY_TOKENS;
        return false;
    }
    s->draft_has_kv = true;
    s->draft_kv = seq;
    s->draft_len = reused;
    return true;
}

size_t draft_bound(const engine *e, const gen_request *r, const seq_state *s)
{
    /* it computes positions up to len + k - 2 */
    const size_t end = draft_end(e, r);
    const size_t len = text_len(r, s);
    return end + 1 > len ? end + 1 - len : 0;
}

/* Tokens of its text the draft model has not computed. */
static size_t draft_backlog(const gen_request *r, const seq_state *s)
{
    return text_len(r, s) - s->draft_len;
}

void draft_release(engine *e, seq_state *s, double now)
{
    if (!s->draft_has_kv)
        return;
    kvcache_seq_end(e->draft_kv, s->draft_kv, now);
    s->draft_has_kv = false;
    s->draft_len = 0;
}

size_t draft_take(engine *e, size_t b, size_t k, draft_first_pass *room)
{
    batch_entry *be = &e->entries[b];
    gen_request *r = be->r;
    seq_state *s = &r->seqs[be->seq];
    size_t backlog = draft_backlog(r, s);
    /* a step leaves at most its own token and its accepted guesses */
    const bool catching_up = backlog > 1 + e->cfg.spec_max_draft;
    size_t fits = room->rows;
    if (catching_up && room->catch_up < fits)
        fits = room->catch_up;
    if (backlog > fits) { /* catches up this much; drafts later */
        backlog = fits;
        k = 0;
    }
    if (backlog == 0)
        return 0;
    room->rows -= backlog;
    if (catching_up)
        room->catch_up -= backlog;
    kvcache_seq_grow(e->draft_kv, s->draft_kv, backlog + (k > 0 ? k - 1 : 0));
    draft_seq *d = &e->draft_seqs[e->n_draft_seqs++];
    *d = (draft_seq){ .entry = b,
                      .k = k,
                      .fs = { .blocks = kvcache_seq_blocks(e->draft_kv,
                                                           s->draft_kv),
                              .pos0 = s->draft_len,
                              .tokens = s->history + s->draft_len,
                              .n_tokens = backlog,
                              .n_logits = k > 0 ? 1 : 0 } };
    be->draft_rows = backlog;
    if (k > e->draft_passes)
        e->draft_passes = k;
    return k;
}

/* The most likely token of a logits row (the lowest id among equals). */
static int32_t most_likely(const float *logits, size_t vocab)
{
    size_t best = 0;
    for (size_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

/* cfg.draft_agree_percent (benchmarks): the guess at answer position
 * `at` becomes the prediction's token there with that probability, and a
 * token other than it otherwise, each position drawn on its own; a guess
 * past the prediction stays the draft's. */
static int32_t agreeing_guess(engine *e, const gen_request *r, size_t at,
                              int32_t guess, size_t vocab)
{
    if (e->cfg.draft_agree_percent == 0 || at >= r->n_prediction)
        return guess;
    /* splitmix64 */
    uint64_t z = (e->draft_agree_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    const int32_t truth = r->prediction[at];
    if (z % 100 < e->cfg.draft_agree_percent)
        return truth;
    return (int32_t)(((size_t)truth + 1) % vocab);
}

int draft_run(engine *e, gpt2d_error *err)
{
    const double t_run = monotonic_seconds();
    size_t passes = 0;
    const size_t V = e->draft->config.vocab_size;
    forward_seq *pass = e->draft_batch;
    size_t n = e->n_draft_seqs;
    for (size_t i = 0; i < n; i++)
        pass[i] = e->draft_seqs[i].fs;
    for (size_t p = 0; p < e->draft_passes || (p == 0 && n > 0); p++) {
        const double t0 = monotonic_seconds();
        size_t rows = 0;
        for (size_t i = 0; i < n; i++)
            rows += pass[i].n_tokens;
        if (forward_step(e->draft_fwd, e->draft, e->pool,
                         kvcache_geometry(e->draft_kv), pass, n,
                         e->draft_logits, err) != 0)
            return -1;
        passes++;
        /* each drafting sequence's guess, then its next pass */
        size_t kept = 0, row = 0;
        for (size_t i = 0; i < n; i++) {
            draft_seq *d = &e->draft_seqs[i];
            if (pass[i].n_logits == 0)
                continue; /* caught up; no drafts */
            const batch_entry *be = &e->entries[d->entry];
            seq_state *s = &be->r->seqs[be->seq];
            const size_t g = s->out.n_tokens;
            int32_t *slot = s->generated + g + p;
            *slot = agreeing_guess(
                e, be->r, g + p, most_likely(e->draft_logits + row * V, V), V);
            row++;
            if (p + 1 >= d->k)
                continue;
            e->draft_seqs[kept] = *d;
            pass[kept] = (forward_seq){ .blocks = pass[i].blocks,
                                        .pos0 = pass[i].pos0 + pass[i].n_tokens,
                                        .tokens = slot,
                                        .n_tokens = 1,
                                        .n_logits = 1 };
            kept++;
        }
        /* a pass of one row a sequence is what the cost rule prices */
        if (rows == n) {
            const double t = monotonic_seconds() - t0;
            e->draft_pass_seconds = e->draft_pass_seconds > 0.0
                                        ? (1.0 - DRAFT_PASS_WEIGHT) *
                                                  e->draft_pass_seconds +
                                              DRAFT_PASS_WEIGHT * t
                                        : t;
        }
        n = kept;
        if (n == 0)
            break;
    }
    metrics_spec_draft_passes(passes, monotonic_seconds() - t_run);
    return 0;
}

void draft_settle(engine *e, const batch_entry *be, size_t accepted)
{
    if (be->draft_rows == 0)
        return;
    seq_state *s = &be->r->seqs[be->seq];
    /* the draft computed K/V for its backlog and its first n_draft - 1
     * guesses; those the target accepted are the text now */
    size_t keep = be->draft_rows;
    if (be->n_draft > 0)
        keep += accepted < be->n_draft - 1 ? accepted : be->n_draft - 1;
    kvcache_seq_commit(e->draft_kv, s->draft_kv, s->history + s->draft_len,
                       keep);
    kvcache_seq_trim(e->draft_kv, s->draft_kv);
    s->draft_len += keep;
}

double draft_pass_estimate(const engine *e, double target_step)
{
    if (e->draft_pass_seconds > 0.0)
        return e->draft_pass_seconds;
    return target_step * e->draft_share;
}

/* What a pass reads, in parameters: its layers' weights and the
 * unembedding. */
static double model_params(const model_config *c)
{
    const double d = (double)c->n_embd;
    return 12.0 * (double)c->n_layer * d * d + (double)c->vocab_size * d;
}

double draft_share_of(const model *target, const model *draft)
{
    return model_params(&draft->config) / model_params(&target->config);
}
