/* engine_scores.c — a scored prompt (echo with logprobs) scored from the
 * KV cache where it can be.
 *
 * A prompt's scores are each token's log-probability given the tokens
 * before it and the most likely alternatives there.  Our kernels give a
 * position the same logits whatever else is in the step and however the
 * prompt is cut, so a position's score is the same bits every time: the
 * cache keeps them with each full block a scoring request computed
 * (kv_layout.h), with the residual stream of the block's last position.
 * A scoring request then reuses the longest prefix of such blocks (only
 * those: a block without scores would need its logits again), takes its
 * scores from them, and scores the first token after it by unembedding
 * the kept residual (forward_unembed: the bits forward_step gives that
 * position).  It computes the rest as before, keeping each full block's
 * residual as the step passes it, and when its prompt is done its new
 * full blocks keep their scores.  Every score is computed with the most
 * alternatives anyone may ask for; a request shows its own number.
 *
 * Threads: scores_from_cache and scores_keep with e->lock held (admission
 * and publishing); scores_step on the engine thread during the step,
 * without it (it touches only the step's requests' own buffers). */
#include "config.h"

#include "engine/engine_shared.h"

#include "core/log.h"

#include <math.h>
#include <string.h>

_Static_assert(KV_SCORE_TOP == ENGINE_MAX_LOGPROBS,
               "the cache keeps every alternative a request may show");

static void score_from_kv(gen_token *t, const kv_token_score *k)
{
    t->logprob = k->logprob;
    t->n_top = k->n_top;
    for (size_t j = 0; j < k->n_top; j++)
        t->top[j] = (token_logprob){ .token = k->top_token[j],
                                     .logprob = k->top_logprob[j] };
}

static void score_to_kv(kv_token_score *k, const gen_token *t)
{
    memset(k, 0, sizeof *k);
    k->logprob = t->logprob;
    k->n_top = (uint32_t)t->n_top;
    for (size_t j = 0; j < t->n_top; j++) {
        k->top_token[j] = t->top[j].token;
        k->top_logprob[j] = t->top[j].logprob;
    }
}

void scores_from_cache(engine *e, gen_request *r, size_t seq, size_t reused)
{
    r->scored_reuse = 0;
    if (!r->score_prompt || reused == 0)
        return;
    /* the reuse is whole scored blocks (kv_begin.scored_only) */
    const size_t n_blocks = reused / KV_BLOCK_TOKENS;
    const kv_block_scores *last = NULL;
    for (size_t i = 0; i < n_blocks; i++) {
        last = kvcache_seq_scores(e->kv, seq, i);
        if (last == NULL) {
            log_error("engine: a scored prefix lost its scores");
            return; /* cannot happen; the prefill scores what it runs */
        }
        for (size_t t = 0; t < KV_BLOCK_TOKENS; t++) {
            const size_t pos = i * KV_BLOCK_TOKENS + t;
            if (pos > 0) { /* nothing predicts the first token */
                r->prompt_scores[pos].token = r->prompt[pos];
                score_from_kv(&r->prompt_scores[pos], &last->tokens[t]);
            }
        }
    }
    memcpy(r->boundary_residual, last->residual,
           e->m->config.n_embd * sizeof *r->boundary_residual);
    r->scored_reuse = reused;
}

/* The first token after a reused scored prefix: its logits are the kept
 * residual's unembedding. */
static int score_boundary(engine *e, gen_request *r, gpt2d_error *err)
{
    if (forward_unembed(e->fwd, e->m, e->pool, r->boundary_residual, 1,
                        e->score_logits, err) != 0)
        return -1;
    const size_t pos = r->scored_reuse;
    sample_result res;
    sampler_score(e->scratch[0], e->score_logits, e->vocab, r->prompt[pos],
                  ENGINE_MAX_LOGPROBS, &res);
    request_fill_token(&r->prompt_scores[pos], &res, ENGINE_MAX_LOGPROBS);
    return 0;
}

int scores_step(engine *e, size_t n_entries, gpt2d_error *err)
{
    const size_t C = e->m->config.n_embd;
    const float *x = forward_last_residuals(e->fwd);
    size_t row0 = 0;
    for (size_t b = 0; b < n_entries; b++) {
        const batch_entry *be = &e->entries[b];
        gen_request *r = be->r;
        const size_t rows = e->batch[b].n_tokens;
        if (be->prefill && !be->resume && r->score_prompt) {
            if (be->start == r->scored_reuse && r->scored_reuse > 0 &&
                score_boundary(e, r, err) != 0)
                return -1;
            /* each full block's last position, as it passes */
            const size_t full = r->n_prompt / KV_BLOCK_TOKENS;
            for (size_t j = 0; j < rows; j++) {
                const size_t pos = be->start + j;
                if ((pos + 1) % KV_BLOCK_TOKENS == 0 &&
                    pos / KV_BLOCK_TOKENS < full)
                    memcpy(r->block_residuals + pos / KV_BLOCK_TOKENS * C,
                           x + (row0 + j) * C, C * sizeof *x);
            }
        }
        row0 += rows;
    }
    return 0;
}

void scores_keep(engine *e, gen_request *r)
{
    const size_t C = e->m->config.n_embd;
    const size_t seq = r->seqs[0].kv;
    kv_block_scores *blob = e->score_blob;
    const size_t n_full = e->scores_cached ? r->n_prompt / KV_BLOCK_TOKENS : 0;
    for (size_t i = r->scored_reuse / KV_BLOCK_TOKENS; i < n_full; i++) {
        blob->filled = 0;
        for (size_t t = 0; t < KV_BLOCK_TOKENS; t++)
            score_to_kv(&blob->tokens[t],
                        &r->prompt_scores[i * KV_BLOCK_TOKENS + t]);
        memcpy(blob->residual, r->block_residuals + i * C,
               C * sizeof *blob->residual);
        kvcache_seq_keep_scores(e->kv, seq, i, blob);
    }
    /* each request shows the alternatives it asked for */
    for (size_t pos = 0; pos < r->n_prompt; pos++)
        if (r->prompt_scores[pos].n_top > r->n_top)
            r->prompt_scores[pos].n_top = r->n_top;
}
