/* engine_batch.c — composing a step: its rows (a decode row for every
 * generating sequence, then prompt chunks and logit-lens rows while the
 * step has room and prefill its share of the time) and, once the forward
 * pass has run, its sample jobs on the worker pool.
 *
 * Background (batch) work has steps of its own: while an interactive
 * request holds a slot, background sequences get no rows; a step with
 * background work only carries at most cfg.background_step_rows rows.
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
 * beside every possible decode row and prefill never starves.  So under
 * blas a background step's bound does not cut prompts (its step may carry
 * a whole chunk); with the panel kernels it cuts them anywhere.
 *
 * Threads: the engine thread; batch_build with e->lock held, batch_sample
 * without it (the step's requests stay put: only the engine thread changes
 * the running set). */
#include "config.h"

#include "engine/engine_shared.h"

#include <stdint.h>
#include <string.h>

#include "core/log.h"
#include "core/metrics.h"

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
    e->batch[n] = (forward_seq){
        .blocks = kvcache_seq_blocks(e->kv, kv),
        .pos0 = start,
        .tokens = tokens,
        .n_tokens = n_rows,
        .n_logits = n_logits,
        .capture = r->inspect != NULL ? inspect_forward_capture(r->inspect)
                                      : NULL
    };
    e->entries[n] = (batch_entry){ .r = r,
                                   .seq = seq,
                                   .prefill = prefill,
                                   .resume = false,
                                   .start = start,
                                   .n_rows = n_rows,
                                   .n_logits = n_logits };
    return n + 1;
}

typedef enum share_action {
    SHARE_NONE,    /* nothing to gain from another prefill */
    SHARE_WAIT,    /* an earlier prompt is computing our prefix */
    SHARE_REBEGIN, /* it has: begin again to pick it up */
} share_action;

/* A prompt that shares more than it reused with a prompt admitted before
 * it waits while that one computes the shared blocks, then picks them up,
 * rather than computing them twice (a prompt array over one context, as
 * lm-eval's multiple choice sends).  Only before its own prefill starts,
 * only within one isolation domain, never for sessions (their history is
 * their own); only earlier prompts, so no two wait for each other.  A
 * scoring prompt reuses only scored blocks: it waits only for a scoring
 * prompt, until that one is done (engine_scores.c). */
static share_action shared_prefill(const engine *e, size_t k,
                                   const gen_request *r)
{
    if (r->session != NULL || r->inspect != NULL || r->n_prompt < 2 ||
        (r->score_prompt && !e->scores_cached))
        return SHARE_NONE;
    const size_t reused = r->usage.cached_tokens; /* the engine's own write */
    for (size_t j = 0; j < k; j++) {
        const gen_request *q = e->running[j];
        if (q->session != NULL ||
            memcmp(q->id.domain, r->id.domain, SHA256_BYTES) != 0)
            continue;
        if (q->background && !r->background)
            continue; /* it computes nothing while r runs */
        if (r->score_prompt && !q->score_prompt)
            continue; /* it keeps no scores for r to reuse */
        size_t common = 0, lim = q->n_prompt < r->n_prompt - 1
                                     ? q->n_prompt
                                     : r->n_prompt - 1;
        while (common < lim && q->prompt[common] == r->prompt[common])
            common++;
        common = common / KV_BLOCK_TOKENS * KV_BLOCK_TOKENS;
        if (common < reused + KV_BLOCK_TOKENS)
            continue;
        const seq_state *qs = &q->seqs[0];
        /* a scoring prompt keeps its blocks' scores once it is done */
        size_t done = qs->phase != SEQ_PREFILL           ? q->n_prompt
                      : q->kv_loading || r->score_prompt ? 0
                                                         : seq_len(e, qs);
        return done >= common ? SHARE_REBEGIN : SHARE_WAIT;
    }
    return SHARE_NONE;
}

/* Whether a sequence of an interactive caller other than r's is
 * generating.  Background prompts are never held back: a step with
 * background work is short already (background_step_rows). */
static bool others_decoding(const engine *e, const gen_request *r)
{
    if (r->background)
        return false;
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *q = e->running[k];
        if (q->background || memcmp(q->account, r->account, SHA256_BYTES) == 0)
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
static void plan_lens(engine *e, bool background, size_t *left, bool *mixed_out,
                      double now)
{
    e->n_lens = e->n_lens_rows = 0;
    for (size_t k = 0; k<e->n_running && * left> 0; k++) {
        gen_request *r = e->running[k];
        if (r->seqs[0].phase != SEQ_LENS || r->background != background)
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
        e->lens[e->n_lens++] = (lens_entry){
            .r = r, .row0 = r->lens_done, .n_rows = len, .first = e->n_lens_rows
        };
        e->n_lens_rows += len;
        *left -= len;
        *mixed_out = *mixed_out || others;
    }
}

/* Resumed sequences' histories, before any prompt: up to the next
 * multiple of `chunk` positions each, as prompts are cut, within the
 * step's prompt rows.  Usually one row each (all but the last token is
 * still cached).  Not held back like prefill: a resumed stream is one of
 * the streams prefill would wait for. */
static size_t add_resumed(engine *e, bool background, size_t n, size_t *rows,
                          size_t *left)
{
    for (size_t k = 0; k<e->n_running && * left> 0; k++) {
        gen_request *r = e->running[k];
        if (r->background != background)
            continue;
        for (size_t i = 0; i<r->n_seq && * left> 0; i++) {
            seq_state *s = &r->seqs[i];
            if (s->phase != SEQ_RESUME)
                continue;
            if (s->kv_loading) {
                size_t reused;
                if (!kvcache_seq_ready(e->kv, s->kv, &reused))
                    continue; /* its blocks are still on their way */
                s->kv_loading = false;
            }
            const size_t total = r->n_prompt + s->out.n_tokens;
            const size_t start = seq_len(e, s);
            size_t end = (start / e->chunk + 1) * e->chunk;
            if (end > total)
                end = total;
            if (end - start > *left)
                end = start + *left;
            n = add_entry(e, n, r, i, true, start, s->history + start,
                          end - start, end == total);
            e->entries[n - 1].resume = true;
            *rows += end - start;
            *left -= end - start;
        }
    }
    return n;
}

/* Whether a running request of the step's class has prompt rows (or lens
 * rows, or a resumed history) still to compute. */
static bool prompt_work(const engine *e, bool background)
{
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *r = e->running[k];
        if (r->background != background)
            continue;
        if (r->seqs[0].phase == SEQ_PREFILL || r->seqs[0].phase == SEQ_LENS)
            return true;
        for (size_t i = 0; i < r->n_seq; i++)
            if (r->seqs[i].phase == SEQ_RESUME)
                return true;
    }
    return false;
}

/* The most rows the step may carry: a background step's are bounded, so
 * an interactive request that arrives during it waits little. */
static size_t step_limit(const engine *e, bool background)
{
    const size_t bound = e->cfg.background_step_rows;
    return background && bound > 0 && bound < e->cfg.max_batch_rows
               ? bound
               : e->cfg.max_batch_rows;
}

/* Decode rows of the step's class: one for every generating sequence, at
 * most `limit` (only a background step's bound can be below the slots);
 * when they are more, they take turns, from where the last cut step
 * stopped.  Returns the entries (one row each). */
static size_t add_decode_rows(engine *e, bool background, size_t limit)
{
    size_t want = 0;
    for (size_t k = 0; k < e->n_running; k++) {
        const gen_request *r = e->running[k];
        if (r->background != background)
            continue;
        for (size_t i = 0; i < r->n_seq; i++)
            want += r->seqs[i].phase == SEQ_DECODE;
    }
    const size_t first = want > limit ? e->decode_turn % want : 0;
    size_t n = 0, j = 0;
    for (size_t k = 0; k < e->n_running; k++) {
        gen_request *r = e->running[k];
        if (r->background != background)
            continue;
        for (size_t i = 0; i < r->n_seq; i++) {
            seq_state *s = &r->seqs[i];
            if (s->phase != SEQ_DECODE)
                continue;
            const size_t turn = (j++ + want - first) % want;
            if (turn >= limit)
                continue; /* its turn comes in a next step */
            n = add_entry(e, n, r, i, false, seq_len(e, s), &s->next_token, 1,
                          1);
        }
    }
    if (want > limit)
        e->decode_turn = first + limit;
    return n;
}

/* Decode rows first (they always fit: at most one per slot), then prefill
 * chunks in admission order while the step has room.
 *
 * A step is interactive (an interactive request holds a slot) or
 * background; only its class's requests have rows in it.  A background
 * step carries at most cfg.background_step_rows rows, its decode rows
 * and drafts included, and its prompts are cut to fit (under blas only
 * whole chunks: such a step may carry one).
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
size_t batch_build(engine *e, size_t *rows_out, size_t *prefill_out,
                   bool *mixed_out, double now)
{
    /* Background work runs only in steps no interactive request is in:
     * while one holds a slot, background sequences compute nothing (they
     * keep their slots and their blocks, and wait; nothing of theirs moves
     * on, and a row's bits never depend on the step it runs in).
     * Interactive work that holds no slot (queued, paused) could not start
     * this step, whatever it waits for (memory, a session, a slot no one
     * gives up): background work runs meanwhile, so that what it holds
     * comes free. */
    const bool background = !admit_interactive_running(e);
    const size_t limit = step_limit(e, background);
    size_t n = add_decode_rows(e, background, limit), rows = n;
    *mixed_out = false;
    /* drafts leave a whole chunk to waiting prompts */
    size_t draft_room = limit - rows;
    if (prompt_work(e, background))
        draft_room = draft_room > e->chunk ? draft_room - e->chunk : 0;
    rows += spec_plan(e, n, draft_room, now);
    /* Under blas a background step's prompts still take whole chunks (the
     * determinism above), which may outlast the bound; with the panel
     * kernels a cut anywhere gives the same bits. */
    const bool blas = e->m->matmul == MODEL_MATMUL_BLAS;
    const bool bg_cut = limit < e->cfg.max_batch_rows && !blas;
    const size_t decode_rows = rows,
                 room = (blas ? e->cfg.max_batch_rows : limit) - rows;
    const size_t budget = step_budget_prefill_rows(&e->budget, decode_rows,
                                                   e->cfg.n_slots, room);
    size_t prefill_left = budget;
    bool bounded = false;
    n = add_resumed(e, background, n, &rows, &prefill_left);
    for (size_t k = 0; k < e->n_running && prefill_left > 0; k++) {
        gen_request *r = e->running[k];
        seq_state *s = &r->seqs[0];
        if (s->phase != SEQ_PREFILL || r->background != background)
            continue;
        const bool others = others_decoding(e, r);
        if (others && now < e->prefill_hold_until)
            continue;
        if (r->kv_loading) {
            size_t reused;
            if (!kvcache_seq_ready(e->kv, s->kv, &reused))
                continue; /* its blocks are still on their way */
            r->kv_loading = false;
            admit_reused(e, r, reused);
        }
        if (!r->prefill_started) {
            share_action a = shared_prefill(e, k, r);
            if (a == SHARE_WAIT) {
                r->share_waited = true;
                continue;
            }
            /* the prompt it waited for has ended (one token, or none, to
             * generate: in the step that computed the prefix): the blocks
             * are cached, unreferenced */
            if (a == SHARE_NONE && r->share_waited)
                a = SHARE_REBEGIN;
            if (a == SHARE_REBEGIN) {
                r->share_waited = false;
                size_t n_run = 0;
                for (size_t i = 0; i < r->n_seq; i++)
                    n_run += r->seqs[i].has_kv;
                admit_release_all_kv(e, r, now);
                if (admit_begin_kv(e, r, n_run, false, now) != KV_BEGUN) {
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
            if (budget >= room && !bg_cut)
                break; /* unbounded: whole chunks, as they fit */
            end = start + prefill_left;
            bounded = bounded || budget < room; /* --step-cost's cut */
        }
        size_t len = end - start;
        size_t n_logits = r->score_prompt
                              ? len
                              : (end == r->n_prompt && r->max_tokens > 0);
        n = add_entry(e, n, r, 0, true, start, r->prompt + start, len,
                      n_logits);
        r->prefill_started = true;
        rows += len;
        prefill_left -= len;
        *mixed_out = *mixed_out || others;
    }
    plan_lens(e, background, &prefill_left, mixed_out, now);
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
    *j = (sample_job){
        .r = r, .seq = seq, .prompt_pos = pos, .logits = logits, .n_emitted = 1
    };
}

/* Logits rows the forward pass wrote for the step's first n entries. */
size_t batch_logit_rows(const engine *e, size_t n_entries)
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
            e->entries[b].job = e->n_jobs;
            add_job(e, r, be->seq, 0, row);
            e->jobs[e->n_jobs - 1].n_draft = be->n_draft;
            for (size_t t = 1; t <= be->n_draft; t++) {
                add_job(e, r, be->seq, 0, row + t * V);
                e->jobs[e->n_jobs - 1].follower = true;
            }
            row += (1 + be->n_draft) * V;
            continue;
        }
        if (be->resume) {
            if (be->n_logits > 0)
                add_job(e, r, be->seq, 0, row);
            row += be->n_logits * V;
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
                if (i == 0 || r->seqs[i].has_kv) /* not a paused one */
                    add_job(e, r, i, 0, next);
        }
        row += be->n_logits * V;
    }
}

/* Samples job j's row as the sequence's token number `g` (the tokens
 * before it are generated[0..g)), from constraint state `state`. */
static void sample_row(engine *e, sample_job *j, size_t worker, size_t g,
                       grammar_state state)
{
    gen_request *r = j->r;
    seq_state *s = &r->seqs[j->seq];
    if (r->grammar == NULL) {
        sampler_sample(&r->sampling, &s->rng, e->scratch[worker], j->logits,
                       e->vocab, r->prompt, r->n_prompt, s->generated, g,
                       &j->result);
        return;
    }
    /* Constrained: the state's mask (computed here, on the pool, or served
     * from the grammar's cache) goes under every processor, and the state
     * moves on by the drawn token. */
    uint64_t *mask = e->masks + worker * e->mask_words;
    j->constraint_failed = true;
    if (grammar_mask(r->grammar, state, mask, NULL) != 0) {
        j->result.token = -1;
        j->result.n_top = 0;
        return;
    }
    sampler_params p = r->sampling;
    p.allowed = mask;
    sampler_sample(&p, &s->rng, e->scratch[worker], j->logits, e->vocab,
                   r->prompt, r->n_prompt, s->generated, g, &j->result);
    j->constraint_failed = grammar_advance(r->grammar, state, j->result.token,
                                           &j->constraint, NULL) != 0;
}

/* A decode row with drafts (engine_spec.c): row t's token is drawn as
 * plain decoding would draw it, and the next row counts only while that
 * token is the draft row t + 1 was computed on.  generated[g..g+k) holds
 * the drafts, so the penalties of row t see exactly the tokens before it. */
static void verify_drafts(engine *e, sample_job *head, size_t worker)
{
    const gen_request *r = head->r;
    const seq_state *s = &r->seqs[head->seq];
    const size_t g = s->out.n_tokens, k = head->n_draft;
    grammar_state state = s->constraint;
    for (size_t t = 0;; t++) {
        sample_job *j = head + t;
        sample_row(e, j, worker, g + t, state);
        head->n_emitted = t + 1;
        const int32_t tok = j->result.token;
        /* nor past a token that ends the answer as plain decoding would
         * (the end token, a constraint failed or complete) */
        if (t == k || tok != s->generated[g + t] || tok == TOKENIZER_EOT ||
            (r->grammar != NULL &&
             (j->constraint_failed ||
              grammar_complete(r->grammar, j->constraint))))
            return;
        state = j->constraint;
    }
}

static void run_job(void *ctx, size_t task, size_t worker)
{
    engine *e = ctx;
    sample_job *j = &e->jobs[task];
    gen_request *r = j->r;
    if (j->follower)
        return; /* its head samples it */
    if (j->seq == SIZE_MAX) {
        sampler_score(e->scratch[worker], j->logits, e->vocab,
                      r->prompt[j->prompt_pos], ENGINE_MAX_LOGPROBS,
                      &j->result);
        return;
    }
    if (j->n_draft > 0) {
        verify_drafts(e, j, worker);
        return;
    }
    const seq_state *s = &r->seqs[j->seq];
    sample_row(e, j, worker, s->out.n_tokens, s->constraint);
}

void batch_sample(engine *e, size_t n_entries)
{
    plan_jobs(e, n_entries);
    threadpool_run(e->pool, e->n_jobs, run_job, e);
}