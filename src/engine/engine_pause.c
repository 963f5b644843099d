/* engine_pause.c — a sequence paused at a step boundary and resumed later,
 * its tokens exactly those it would have made uninterrupted.
 *
 * Pausing ends the sequence's KV sequence: its blocks stay in the cache as
 * a prefix of its history (prompt and generated tokens), their partly
 * filled last block too, and like any cached prefix they stay in RAM while
 * memory lasts, go to the disk tier when RAM is needed, or are dropped
 * without one.  Its sampler state (RNG, penalties' history, constraint,
 * stop strings' text) stays in its seq_state.  Resuming begins a KV
 * sequence for the whole history, which finds what is still cached (all
 * but the last token, when nothing was evicted: the partly filled block is
 * taken over, not copied) and runs the rest as a prompt, whose last
 * row's logits give the next token: the row the decode step would have run.
 * With the panel kernels a row's bits depend neither on the batch nor on
 * how a prompt is cut (test_forward), so the resumed sequence's tokens and
 * logprobs are the same bits (test_engine's preemption tests); with
 * --matmul blas rows round by what shares their product, as they do
 * whatever the scheduler does.
 *
 * A sibling (n > 1) that has not had a slot yet waits the same way: it
 * resumes from the prompt alone, once sequence 0 has computed it.
 *
 * A prompt being computed may be paused the same way (background work
 * gives way to interactive: engine_fair.c), when nothing but its first
 * token follows its last chunk: one sequence (the siblings' fork and first
 * samples come with the prompt's last chunk, not with a resumed history),
 * no scores (kept from prompt chunks only), no session (its record follows
 * the prompt's end), something to generate (a prompt that generates
 * nothing ends with its last chunk), its blocks not on their way from
 * disk.  Resumed, the rest of the prompt runs as a history, cut where
 * prefill would cut it, and its last row's logits give the first token:
 * the row the prompt's last chunk would have sampled.
 *
 * Threads: the engine thread, with e->lock held. */
#include "config.h"

#include "engine/engine_shared.h"

#include "core/metrics.h"

void pause_seq(engine *e, gen_request *r, size_t i, double now)
{
    seq_state *s = &r->seqs[i];
    if (s->has_kv) {
        kvcache_seq_end(e->kv, s->kv, now);
        s->has_kv = false;
    }
    draft_release(e, s, now);
    s->kv_loading = false;
    s->phase = SEQ_PAUSED;
    s->t_paused = now;
}

void pause_count(gen_request *r, preempt_reason why)
{
    pthread_mutex_lock(&r->lock);
    r->pauses++;
    pthread_mutex_unlock(&r->lock);
    metrics_preempted(why == PREEMPT_KEY_LIMIT    ? METRICS_PREEMPT_KEY_LIMIT
                      : why == PREEMPT_BACKGROUND ? METRICS_PREEMPT_BACKGROUND
                                                  : METRICS_PREEMPT_FAIR_SHARE);
}

void pause_unstarted(gen_request *r, size_t first)
{
    for (size_t i = first; i < r->n_seq; i++) {
        seq_state *s = &r->seqs[i];
        if (s->phase == SEQ_DONE || s->phase == SEQ_PAUSED || s->has_kv)
            continue;
        s->phase = SEQ_PAUSED;
        s->t_paused = -1.0; /* waiting for its first slot: not a pause */
    }
}

bool pause_prefill_ok(const gen_request *r)
{
    return r->n_seq == 1 && !r->score_prompt && r->inspect == NULL &&
           r->session == NULL && r->max_tokens > 0 && !r->kv_loading;
}

bool pause_resumable(const gen_request *r, size_t i)
{
    return r->seqs[i].phase == SEQ_PAUSED &&
           (i == 0 || r->seqs[0].phase != SEQ_PREFILL);
}

kv_begin_status pause_resume(engine *e, gen_request *r, size_t i, double now)
{
    seq_state *s = &r->seqs[i];
    size_t seq, reused;
    kv_begin b = { .who = &r->id,
                   .account = r->account,
                   .session = r->session,
                   /* a sibling: the session's blocks, not its record */
                   .session_sibling = i > 0,
                   .max_sessions = r->max_sessions,
                   .prompt = s->history,
                   .n_prompt = r->n_prompt + s->out.n_tokens,
                   .max_total = r->n_prompt + r->max_tokens,
                   .n_seq = 1,
                   .reuse = true,
                   .now = now };
    kv_begin_status st = kvcache_seq_begin(e->kv, &b, &seq, &reused);
    if (st != KV_BEGUN)
        return st;
    s->kv = seq;
    s->has_kv = true;
    s->kv_loading = kvcache_seq_loading(e->kv, seq);
    s->phase = SEQ_RESUME;
    if (s->t_paused >= 0.0) {
        pthread_mutex_lock(&r->lock);
        r->paused_seconds += now - s->t_paused;
        pthread_mutex_unlock(&r->lock);
    }
    return KV_BEGUN;
}
