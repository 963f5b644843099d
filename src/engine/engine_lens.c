/* engine_lens.c — the logit lens of inspect requests: once a request's
 * prompt has run, its captured residual rows are unembedded in the steps
 * that follow (engine_batch.c plans how many, out of the prompt rows'
 * budget) and the top guesses of each kept; the request ends when the last
 * row is stored.
 *
 * Threads: the engine thread; lens_run without e->lock, on the worker
 * pool, after the step's samples; lens_progress with it. */
#include "config.h"

#include "engine/engine_shared.h"

#include <pthread.h>

/* Unembeds the step's lens rows (forward_unembed: the model's own final
 * LayerNorm and lm_head) into the logits rows after the n_logits rows the
 * forward pass wrote; the step's budget holds both. */
static int lens_unembed(engine *e, size_t n_logits, gpt2d_error *err)
{
    float *out = e->logits + n_logits * e->vocab;
    e->lens_logits = out;
    for (size_t i = 0; i < e->n_lens; i++) {
        const lens_entry *le = &e->lens[i];
        if (forward_unembed(e->fwd, e->m, e->pool,
                            inspect_lens_input(le->r->inspect, le->row0),
                            le->n_rows, out + le->first * e->vocab, err) != 0)
            return -1;
    }
    return 0;
}

/* One lens row on the pool: its k best guesses, as the sampler reports the
 * model's top alternatives. */
static void lens_task(void *ctx, size_t task, size_t worker)
{
    engine *e = ctx;
    size_t i = 0;
    while (task >= e->lens[i].first + e->lens[i].n_rows)
        i++;
    const lens_entry *le = &e->lens[i];
    inspect_capture *c = le->r->inspect;
    sample_result res;
    sampler_score(e->scratch[worker], e->lens_logits + task * e->vocab,
                  e->vocab, 0, inspect_capture_params(c)->logit_lens, &res);
    inspect_lens_store(c, le->row0 + (task - le->first), res.top, res.n_top);
}

int lens_run(engine *e, size_t n_logits, gpt2d_error *err)
{
    if (lens_unembed(e, n_logits, err) != 0)
        return -1;
    threadpool_run(e->pool, e->n_lens_rows, lens_task, e);
    return 0;
}

/* With the engine lock held, after the step: lens rows count as done, and a
 * request whose last row is stored ends. */
void lens_progress(engine *e)
{
    for (size_t i = 0; i < e->n_lens; i++) {
        gen_request *r = e->lens[i].r;
        r->lens_done += e->lens[i].n_rows;
        if (r->lens_done < inspect_lens_rows(r->inspect))
            continue;
        inspect_lens_done(r->inspect);
        pthread_mutex_lock(&r->lock);
        request_finish_seq(r, 0, FINISH_LENGTH);
        pthread_mutex_unlock(&r->lock);
    }
}
