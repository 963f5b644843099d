/* engine_publish.c — a step's results into its requests, and retiring:
 * the step's K/V committed (and a finished prompt's cache forked to its
 * siblings), prompt scores, sampled tokens and their text appended to each
 * sequence's output under the request's lock, readers woken; then finished
 * and cancelled requests leave the running set, their blocks staying
 * cached.
 *
 * n > 1 sequences of one prompt: sequence 0 prefills; when its last chunk
 * has run, the siblings fork its cache (full blocks shared) and every sequence
 * samples its first token from that same logits row with its own RNG, so
 * sequence 0 is exactly what the request with n = 1 would give.
 *
 * Threads: the engine thread, with e->lock held; each request's lock is
 * taken inside it (engine.c, "Locks"). */
#include "config.h"

#include "engine/engine_shared.h"

#include <pthread.h>
#include <string.h>

#include "core/log.h"
#include "core/metrics.h"

/* With the request lock held: what a new prompt score changes. */
static void apply_score(gen_request *r, const sample_job *j)
{
    /* published all at once when the prefill ends (prefill_done) */
    request_fill_token(
        &r->prompt_scores[j->prompt_pos], &j->result,
        ENGINE_MAX_LOGPROBS); /* scores_keep cuts them to n_top */
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
                         const sample_job *j, double now)
{
    seq_state *s = &r->seqs[i];
    observe_timing(r, s, now);
    if (r->grammar != NULL && j->constraint_failed) {
        /* only a grammar past its budget: what was written stands */
        log_warn("engine: a constrained answer outgrew its grammar's "
                 "budget; it ends by length");
        request_finish_seq(r, i, FINISH_LENGTH);
        return;
    }
    const sample_result *res = &j->result;
    /* <|endoftext|> ends the text; it is neither shown nor counted */
    if (res->token == TOKENIZER_EOT) {
        request_finish_seq(r, i, FINISH_STOP);
        return;
    }
    size_t g = s->out.n_tokens;
    request_fill_token(&s->tokens[g], res, r->n_top);
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

    if (r->grammar != NULL)
        s->constraint = j->constraint;
    if (st == TEXTSTREAM_STOPPED)
        request_finish_seq(r, i, FINISH_STOP);
    else if (r->grammar != NULL && grammar_complete(r->grammar, j->constraint))
        request_finish_seq(r, i, FINISH_STOP); /* nothing more may follow */
    else if (st == TEXTSTREAM_FULL || g + 1 >= r->max_tokens ||
             r->n_prompt + g + 1 >= e->m->config.n_ctx)
        request_finish_seq(r, i, FINISH_LENGTH);
    else {
        s->next_token = res->token;
        s->phase = SEQ_DECODE;
        request_touch(r);
    }
}

/* With the request lock held: a decode row's token, or a verified draft's
 * tokens in order while the sequence goes on. */
static void apply_samples(engine *e, gen_request *r, sample_job *j, double now)
{
    size_t applied = 0;
    for (size_t t = 0; t < j->n_emitted; t++) {
        if (t > 0 && r->seqs[j->seq].phase == SEQ_DONE)
            break; /* ended by an earlier token of the step */
        apply_sample(e, r, j->seq, j + t, now);
        applied++;
    }
    if (j->n_draft > 0) {
        /* the emitted tokens before the last are the accepted drafts;
         * usage counts those the answer holds, as Predicted Outputs do */
        const size_t accepted = j->n_emitted - 1;
        r->usage.draft_tokens += j->n_draft;
        r->usage.accepted_tokens += applied < accepted ? applied : accepted;
    }
    j->n_applied = applied;
}

/* Applies the step's prompt scores (`scores`) or its samples.  The engine
 * applies the scores, publishes finished prefills, then the samples: a
 * first token may end a request (max_tokens 1, EOT, a stop string), and a
 * reader woken by that must find the prompt's scores already there. */
static void apply_jobs(engine *e, bool scores, double now)
{
    for (size_t k = 0; k < e->n_jobs; k++) {
        sample_job *j = &e->jobs[k];
        gen_request *r = j->r;
        if ((j->seq == SIZE_MAX) != scores)
            continue;
        if (j->follower)
            continue; /* applied with its head */
        pthread_mutex_lock(&r->lock);
        if (scores)
            apply_score(r, j);
        else
            apply_samples(e, r, j, now);
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
        if (!be->prefill || be->resume || be->start + be->n_rows != r->n_prompt)
            continue;
        pthread_mutex_lock(&r->lock);
        if (r->score_prompt) {
            scores_keep(e, r);
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
                request_finish_seq(r, i, FINISH_LENGTH);
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
        if (be->n_draft > 0)
            continue; /* commit_drafts, once the samples are applied */
        kvcache_seq_commit(e->kv, s->kv, e->batch[b].tokens, be->n_rows);
        if (be->prefill && !be->resume &&
            be->start + be->n_rows == r->n_prompt && r->max_tokens > 0)
            for (size_t i = 1; i < r->n_seq; i++)
                if (r->seqs[i].has_kv) /* a paused one resumes later */
                    kvcache_seq_fork(e->kv, s->kv, r->seqs[i].kv);
    }
}

/* After the samples: a decode row with drafts keeps the K/V of the rows
 * whose tokens the answer took, as plain decoding would have computed
 * them (a stop string or the end token may end it before the last
 * accepted draft); the rest, and their blocks, go back. */
static void commit_drafts(engine *e, size_t n_entries)
{
    for (size_t b = 0; b < n_entries; b++) {
        const batch_entry *be = &e->entries[b];
        if (be->n_draft == 0) {
            if (be->draft_rows > 0) /* the draft model caught up */
                spec_settle(e, be);
            continue;
        }
        const seq_state *s = &be->r->seqs[be->seq];
        kvcache_seq_commit(e->kv, s->kv, e->batch[b].tokens,
                           e->jobs[be->job].n_applied);
        kvcache_seq_trim(e->kv, s->kv);
        spec_settle(e, be);
    }
}

void publish_step(engine *e, size_t n_entries, double now)
{
    commit_step(e, n_entries);
    apply_jobs(e, true, now);
    prefill_done(e, n_entries);
    apply_jobs(e, false, now);
    commit_drafts(e, n_entries);
    lens_progress(e);
}

/* A failed step (a bug, or out of memory for scratch) ends the requests it
 * carried rather than retrying them forever. */
void publish_failure(engine *e, size_t n_entries, const gpt2d_error *err)
{
    log_error("engine: forward step failed: %s", err->message);
    for (size_t b = 0; b < n_entries; b++)
        request_finish_all(e->entries[b].r, FINISH_CANCELLED);
    for (size_t i = 0; i < e->n_lens; i++)
        request_finish_all(e->lens[i].r, FINISH_CANCELLED);
}

/* ---- retiring ---- */

/* Finished requests leave the running set; their blocks stay cached. */
void retire_finished(engine *e, double now)
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
                admit_release_kv(e, s, now);
        }
        if (done) {
            request_unref(r);
        } else {
            e->running[kept++] = r;
        }
    }
    e->n_running = kept;
}

/* Cancelled requests leave the running set, finished with
 * FINISH_CANCELLED.  (The API counts cancelled requests: one HTTP request
 * may be several here.) */
void retire_cancelled(engine *e, double now)
{
    size_t kept = 0;
    for (size_t i = 0; i < e->n_running; i++) {
        gen_request *r = e->running[i];
        if (atomic_load(&r->cancelled)) {
            admit_release_all_kv(e, r, now);
            request_finish_all(r, FINISH_CANCELLED);
            request_unref(r);
        } else {
            e->running[kept++] = r;
        }
    }
    e->n_running = kept;
}