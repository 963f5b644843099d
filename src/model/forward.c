/* forward.c — the batched GPT-2 forward pass (see forward.h).
 *
 * One step runs every new row of every sequence through the model together:
 * R rows in total, each belonging to one sequence at one position.  Matrices
 * below are row-major; C = n_embd, NH = n_head, hd = C / NH, V = vocab.
 *
 *   x = wte[token] + wpe[pos]                       x is (R, C)
 *   for each layer:
 *     xn  = layernorm(x)                            (R, C)
 *     qkv = xn · attn_w + attn_b                    (R, 3C)  one product
 *     K, V of each row -> its sequence's KV slot    head-major
 *     att = causal softmax(q·Kᵀ/sqrt(hd)) · V       (R, C)   per seq × head
 *     x  += att · attn_proj_w + attn_proj_b         (R, C)   one product
 *     xn  = layernorm(x)
 *     h   = gelu(xn · fc_w + fc_b)                  (R, 4C)  one product
 *     x  += h · mlp_proj_w + mlp_proj_b             (R, C)   one product
 *   logits = layernorm(x[rows wanted]) · lm_headᵀ   (L, V)   one product
 *
 * Owns the model's step: the activations and per-step tables of a
 * forward_state, embedding, LayerNorm, and the order of the stages above.
 * The weight products are matmul.c's, attention attention.c's.  Only the
 * engine thread calls forward_step; the stages hand their parallel work to
 * the worker pool.
 *
 * Threading.  Every weight matrix is multiplied with all R rows at once so it
 * is read from memory once per step (matmul.h splits the product by output
 * columns over the pool).  Attention runs one task per (sequence, head);
 * LayerNorm and embedding by row blocks.
 *
 * Inspection.  A sequence with a forward_capture (an inspect request) also
 * leaves, for the layers it names, each row's attention probabilities
 * (written by attention.c's kernels as they weigh V) and the residual
 * stream after the block (its norm, and the row itself for the logit lens,
 * which forward_unembed turns into logits later).  Nothing of it runs for
 * other sequences.
 *
 * Determinism.  With the panel backend every stage computes each row's
 * outputs with the same instructions in the same order whatever else is in
 * the step (matmul.h, attention.h), so a sequence's logits are the same
 * bits alone or batched, for any pool size and any chunking of its prompt.
 * The blas backend gives up the first two (sgemm's rounding depends on M).
 * Measurements and the commands behind them: doc/performance.md.
 */
#include "config.h"

#include "model/forward.h"
#include "model/attention.h"
#include "model/matmul.h"
#include "model/matmul_q8.h"
#include "model/panels.h"
#include "core/monotonic.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows per LayerNorm / embedding task. */
#define ROW_BLOCK 16

typedef struct seq_rows {
    const uint32_t *blocks; /* its block table */
    size_t row0;            /* first row of this sequence in the step */
    size_t n_rows;
    size_t pos0;                    /* position of its first new row */
    const forward_capture *capture; /* NULL unless inspected */
} seq_rows;

struct forward_state {
    model_config cfg;
    size_t max_rows;
    forward_profile *profile;   /* NULL, or where steps' time goes */
    const atomic_bool *abandon; /* NULL, or: stop this step (set_abandon) */
    /* activations, all (max_rows, ·) */
    float *x;   /* (R, C) residual stream */
    float *xn;  /* (R, C) LayerNorm output */
    float *qkv; /* (R, 3C) */
    float *att; /* (R, C) attention output before projection */
    float *h;   /* (R, 4C) MLP hidden */
    float *lnf; /* (L, C) final LayerNorm of the logit rows */
    /* per step bookkeeping */
    seq_rows *seqs;          /* [max_rows] */
    size_t *row_pos;         /* [max_rows] */
    const int32_t **row_tok; /* [max_rows] pointer to the row's token */
    size_t *logit_rows;      /* [max_rows] which rows get logits */
    /* per-worker kernel scratch, for n_workers pool workers */
    size_t n_workers;
    float *att_scratch; /* attention_scratch_floats each */
    size_t att_scratch_floats;
    float *mm_scratch; /* matmul_scratch_floats each */
    size_t mm_scratch_floats;
    void *q8_rows; /* PANEL_Q8DOT: max_rows rows of 4C inputs quantized */
    cpu_isa isa;   /* the kernels' instruction set (cpu.h) */
    bool blas;     /* the model's matrices are for sgemm */
};

static void *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes > 0 ? bytes : 64);
}

/* ---- element-wise kernels ---- */

/* out is (C,), inp is (C,), w, b are (C,). */
static void layernorm_row(float *out, const float *inp, const float *w,
                          const float *b, size_t C, float eps)
{
    float mean = 0.0f;
    for (size_t i = 0; i < C; i++)
        mean += inp[i];
    mean /= (float)C;
    float var = 0.0f;
    for (size_t i = 0; i < C; i++) {
        float d = inp[i] - mean;
        var += d * d;
    }
    var /= (float)C;
    float rstd = 1.0f / sqrtf(var + eps);
    for (size_t i = 0; i < C; i++)
        out[i] = (inp[i] - mean) * rstd * w[i] + b[i];
}

/* ---- pool runs, timed when profiled (forward_profile) ---- */

typedef struct timed_job {
    threadpool_fn fn;
    void *ctx;
    double *busy; /* [FORWARD_PROFILE_WORKERS]: the stage's */
} timed_job;

static void timed_task(void *ctx, size_t task, size_t worker)
{
    const timed_job *j = ctx;
    const double t0 = monotonic_seconds();
    j->fn(j->ctx, task, worker);
    j->busy[worker] += monotonic_seconds() - t0;
}

/* threadpool_run for one of forward.c's own stages. */
static void run_stage(const forward_state *st, threadpool *pool,
                      forward_stage stage, size_t n_tasks, threadpool_fn fn,
                      void *ctx)
{
    forward_profile *prof = st->profile;
    if (prof == NULL) {
        threadpool_run(pool, n_tasks, fn, ctx);
        return;
    }
    timed_job j = { .fn = fn, .ctx = ctx, .busy = prof->busy[stage] };
    const double t0 = monotonic_seconds();
    threadpool_run(pool, n_tasks, timed_task, &j);
    prof->wall[stage] += monotonic_seconds() - t0;
    prof->runs[stage]++;
}

/* ---- embedding and LayerNorm, by row blocks ---- */

typedef struct rows_job {
    const forward_state *st;
    const model *m;
    size_t n_rows;
    const size_t *row_index; /* NULL: rows 0..n_rows-1 */
    const float *inp;        /* (·, C) */
    float *out;              /* (n_rows, C) */
    const float *w, *b;
} rows_job;

static void embedding_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    const rows_job *j = ctx;
    const size_t C = j->st->cfg.n_embd;
    size_t r1 = (task + 1) * ROW_BLOCK;
    if (r1 > j->n_rows)
        r1 = j->n_rows;
    const model *m = j->m;
    for (size_t r = task * ROW_BLOCK; r < r1; r++) {
        const size_t token = (size_t)*j->st->row_tok[r];
        const float *pe = m->wpe + j->st->row_pos[r] * C;
        float *o = j->out + r * C;
        /* tied panels: wte's rows live on only in the unembedding's */
        if (m->wte == NULL)
            panel_column(o, m->lm_head_wp, m->panel_dtype, C, token);
        else
            memcpy(o, m->wte + token * C, C * sizeof(float));
        for (size_t i = 0; i < C; i++)
            o[i] += pe[i];
    }
}

/* x is (R, C): out[r] = wte[token of r] + wpe[position of r]. */
static void embedding_forward(forward_state *st, const model *m,
                              threadpool *pool, size_t R)
{
    rows_job j = { .st = st, .m = m, .n_rows = R, .out = st->x };
    run_stage(st, pool, FORWARD_EMBEDDING, (R + ROW_BLOCK - 1) / ROW_BLOCK,
              embedding_task, &j);
}

static void layernorm_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    const rows_job *j = ctx;
    const size_t C = j->st->cfg.n_embd;
    size_t r1 = (task + 1) * ROW_BLOCK;
    if (r1 > j->n_rows)
        r1 = j->n_rows;
    for (size_t r = task * ROW_BLOCK; r < r1; r++) {
        size_t src = j->row_index != NULL ? j->row_index[r] : r;
        layernorm_row(j->out + r * C, j->inp + src * C, j->w, j->b, C,
                      j->st->cfg.layer_norm_epsilon);
    }
}

/* inp is (·, C), out is (n_rows, C); row r of out normalises row
 * row_index[r] (or r) of inp. */
static void layernorm_forward(forward_state *st, threadpool *pool, float *out,
                              const float *inp, const size_t *row_index,
                              size_t n_rows, const float *w, const float *b)
{
    rows_job j = { .st = st,
                   .n_rows = n_rows,
                   .row_index = row_index,
                   .inp = inp,
                   .out = out,
                   .w = w,
                   .b = b };
    run_stage(st, pool, FORWARD_LAYERNORM, (n_rows + ROW_BLOCK - 1) / ROW_BLOCK,
              layernorm_task, &j);
}

/* ---- weight products (matmul.h) ---- */

static void matmul(const forward_state *st, threadpool *pool,
                   const matmul_args *p)
{
    const matmul_ctx ctx = { .pool = pool,
                             .blas = st->blas,
                             .isa = st->isa,
                             .scratch = st->mm_scratch,
                             .scratch_floats = st->mm_scratch_floats,
                             .q8_rows = st->q8_rows };
    matmul_forward(&ctx, p);
}

/* ---- what an inspect request keeps (forward_capture) ---- */

/* Floats of one head's triangle of attention rows over n positions. */
static size_t triangle(size_t n)
{
    return n * (n + 1) / 2;
}

/* Where the attention probabilities of `head` in `layer` go, or NULL. */
static float *captured_probs(const seq_rows *s, size_t layer, size_t head,
                             size_t n_head)
{
    const forward_capture *c = s->capture;
    if (c == NULL || c->attention == NULL || c->slot[layer] < 0)
        return NULL;
    return c->attention +
           ((size_t)c->slot[layer] * n_head + head) * triangle(c->n_positions);
}

/* After layer `layer`'s block: the residual stream of every captured row,
 * its L2 norm, and (for the logit lens) the row itself.  A few floats per
 * row, on the engine thread. */
static void capture_block(const forward_state *st, size_t n_seqs, size_t layer)
{
    const size_t C = st->cfg.n_embd;
    for (size_t i = 0; i < n_seqs; i++) {
        const seq_rows *s = &st->seqs[i];
        const forward_capture *c = s->capture;
        if (c == NULL || c->slot[layer] < 0)
            continue;
        const size_t at = (size_t)c->slot[layer] * c->n_positions + s->pos0;
        for (size_t r = 0; r < s->n_rows; r++) {
            const float *x = st->x + (s->row0 + r) * C;
            double sum = 0.0;
            for (size_t k = 0; k < C; k++)
                sum += (double)x[k] * x[k];
            c->norms[at + r] = (float)sqrt(sum);
            if (c->residual != NULL)
                memcpy(c->residual + (at + r) * C, x, C * sizeof(float));
        }
    }
}

/* ---- attention, one task per (sequence, head) ---- */

typedef struct attention_job {
    forward_state *st;
    const kv_geometry *kv;
    size_t layer;
} attention_job;

/* Stores the head's new keys and values in the sequence's blocks, then each
 * new row attends to its positions [0, its own position].  Q, K, V
 * rows are read from qkv (row stride 3C), outputs go to att (row stride C)
 * at column head·hd. */
static void attention_task(void *ctx, size_t task, size_t worker)
{
    const attention_job *j = ctx;
    const forward_state *st = j->st;
    const size_t NH = st->cfg.n_head, C = st->cfg.n_embd, hd = C / NH;
    const seq_rows *s = &st->seqs[task / NH];
    const size_t head = task % NH;
    const float *qkv = st->qkv + s->row0 * 3 * C + head * hd;

    attention_store_kv(j->kv, s->blocks, j->layer, head, s->pos0, s->n_rows,
                       qkv + C, qkv + 2 * C, 3 * C);
    attention_head(st->att + s->row0 * C + head * hd, C, qkv, 3 * C, j->kv,
                   s->blocks, j->layer, head, s->pos0, s->n_rows, st->isa,
                   st->att_scratch + worker * st->att_scratch_floats,
                   captured_probs(s, j->layer, head, NH));
}

/* qkv is (R, 3C), att is (R, C). */
static void attention_forward(forward_state *st, threadpool *pool,
                              const kv_geometry *kv, size_t layer,
                              size_t n_seqs)
{
    attention_job j = { .st = st, .kv = kv, .layer = layer };
    run_stage(st, pool, FORWARD_ATTENTION, n_seqs * st->cfg.n_head,
              attention_task, &j);
}

/* ---- state ---- */

int forward_state_create(forward_state **out, const model *m, size_t max_rows,
                         size_t n_workers, gpt2d_error *err)
{
    *out = NULL;
    const model_config *cfg = &m->config;
    if (max_rows == 0 || n_workers == 0)
        return error_set(err, "forward: max_rows and the workers must be at "
                              "least 1");
    if (cfg->n_head == 0 || cfg->n_embd % cfg->n_head != 0)
        return error_set(err,
                         "forward: n_embd %zu is not a multiple of "
                         "n_head %zu",
                         cfg->n_embd, cfg->n_head);
    if (max_rows > INT32_MAX / 4 / cfg->n_embd ||
        cfg->vocab_size > INT32_MAX / cfg->n_embd)
        return error_set(err,
                         "forward: max_rows %zu is too large for "
                         "n_embd %zu",
                         max_rows, cfg->n_embd);
    forward_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return error_set(err, "forward: out of memory");
    st->cfg = *cfg;
    st->max_rows = max_rows;
    const size_t C = cfg->n_embd;
    st->x = alloc_floats(max_rows * C);
    st->xn = alloc_floats(max_rows * C);
    st->qkv = alloc_floats(max_rows * 3 * C);
    st->att = alloc_floats(max_rows * C);
    st->h = alloc_floats(max_rows * 4 * C);
    st->lnf = alloc_floats(max_rows * C);
    st->seqs = calloc(max_rows, sizeof *st->seqs);
    st->row_pos = calloc(max_rows, sizeof *st->row_pos);
    st->row_tok = calloc(max_rows, sizeof *st->row_tok);
    st->logit_rows = calloc(max_rows, sizeof *st->logit_rows);
    if (!st->x || !st->xn || !st->qkv || !st->att || !st->h || !st->lnf ||
        !st->seqs || !st->row_pos || !st->row_tok || !st->logit_rows) {
        forward_state_free(st);
        return error_set(err,
                         "forward: cannot allocate scratch for %zu rows "
                         "(%zu bytes)",
                         max_rows, max_rows * 11 * C * 4);
    }
    st->n_workers = n_workers;
    st->mm_scratch_floats = matmul_scratch_floats(max_rows);
    st->att_scratch_floats = attention_scratch_floats(cfg->n_ctx,
                                                      C / cfg->n_head);
    st->att_scratch = alloc_floats(n_workers * st->att_scratch_floats);
    st->mm_scratch = alloc_floats(n_workers * st->mm_scratch_floats);
    /* the largest product's inputs: 4C of them (mlp c_proj) */
    if (m->panel_dtype == PANEL_Q8DOT)
        st->q8_rows = alloc_floats(q8_rows_bytes(max_rows, 4 * C) /
                                   sizeof(float));
    if (st->att_scratch == NULL || st->mm_scratch == NULL ||
        (m->panel_dtype == PANEL_Q8DOT && st->q8_rows == NULL)) {
        forward_state_free(st);
        return error_set(err,
                         "forward: cannot allocate kernel scratch for "
                         "%zu workers",
                         n_workers);
    }
    st->isa = cpu_isa_choose();
    st->blas = m->matmul == MODEL_MATMUL_BLAS;
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    /* blas: one sgemm per product on OpenBLAS's threads, as many as the
     * pool's workers, which wait meanwhile.  Panels never call OpenBLAS.
     * Process-wide. */
    openblas_set_num_threads(st->blas ? (int)n_workers : 1);
#endif
    *out = st;
    return 0;
}

void forward_state_free(forward_state *st)
{
    if (st == NULL)
        return;
    free(st->x);
    free(st->xn);
    free(st->qkv);
    free(st->att);
    free(st->h);
    free(st->lnf);
    free(st->seqs);
    free(st->row_pos);
    free(st->row_tok);
    free(st->logit_rows);
    free(st->att_scratch);
    free(st->mm_scratch);
    free(st->q8_rows);
    free(st);
}

int forward_state_set_isa(forward_state *st, cpu_isa isa, gpt2d_error *err)
{
    if (isa > cpu_isa_supported())
        return error_set(err, "forward: this CPU cannot run the %s kernels",
                         cpu_isa_name(isa));
    st->isa = isa;
    return 0;
}

cpu_isa forward_state_isa(const forward_state *st)
{
    return st->isa;
}

void forward_state_arithmetic(const forward_state *st, char *out, size_t size)
{
    matmul_arithmetic(st->blas, st->isa, out, size);
}

/* Checks the whole step before anything is written; fills the row tables. */
static int plan_step(forward_state *st, const kv_geometry *kv,
                     const forward_seq *seqs, size_t n_seqs, size_t *n_rows,
                     size_t *n_logit_rows, gpt2d_error *err)
{
    const model_config *cfg = &st->cfg;
    size_t R = 0, L = 0;
    if (kv->n_ctx != cfg->n_ctx || kv->n_layer != cfg->n_layer ||
        kv->n_head != cfg->n_head || kv->head_dim * cfg->n_head != cfg->n_embd)
        return error_set(err, "forward: the KV cache does not match the model");
    for (size_t s = 0; s < n_seqs; s++) {
        const forward_seq *q = &seqs[s];
        if (q->blocks == NULL || q->tokens == NULL)
            return error_set(err,
                             "forward: sequence %zu has no block table "
                             "or no tokens",
                             s);
        if (q->n_tokens == 0)
            return error_set(err, "forward: sequence %zu has no new tokens", s);
        if (q->n_logits > q->n_tokens)
            return error_set(err,
                             "forward: sequence %zu asks logits for %zu "
                             "rows but brings %zu tokens",
                             s, q->n_logits, q->n_tokens);
        if (q->pos0 > cfg->n_ctx || q->n_tokens > cfg->n_ctx - q->pos0)
            return error_set(err,
                             "forward: sequence %zu would reach %zu "
                             "positions, past n_ctx %zu",
                             s, q->pos0 + q->n_tokens, cfg->n_ctx);
        if (q->n_tokens > st->max_rows - R)
            return error_set(err,
                             "forward: step has more than max_rows %zu "
                             "rows",
                             st->max_rows);
        for (size_t t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] < 0 || (size_t)q->tokens[t] >= cfg->vocab_size)
                return error_set(err,
                                 "forward: sequence %zu token %zu has id "
                                 "%ld, outside [0, %zu)",
                                 s, t, (long)q->tokens[t], cfg->vocab_size);
        for (size_t p = 0; p < s; p++)
            if (seqs[p].blocks == q->blocks)
                return error_set(err,
                                 "forward: sequences %zu and %zu share "
                                 "a block table",
                                 p, s);
        const forward_capture *c = q->capture;
        if (c != NULL && (c->slot == NULL || c->norms == NULL ||
                          q->pos0 + q->n_tokens > c->n_positions))
            return error_set(err,
                             "forward: sequence %zu's capture does not "
                             "hold positions [%zu, %zu)",
                             s, q->pos0, q->pos0 + q->n_tokens);
        st->seqs[s] = (seq_rows){ .blocks = q->blocks,
                                  .row0 = R,
                                  .n_rows = q->n_tokens,
                                  .pos0 = q->pos0,
                                  .capture = c };
        for (size_t t = 0; t < q->n_tokens; t++) {
            st->row_pos[R + t] = q->pos0 + t;
            st->row_tok[R + t] = &q->tokens[t];
        }
        for (size_t t = q->n_tokens - q->n_logits; t < q->n_tokens; t++)
            st->logit_rows[L++] = R + t;
        R += q->n_tokens;
    }
    *n_rows = R;
    *n_logit_rows = L;
    return 0;
}

/* matmul(), timed whole when profiled: its tasks are matmul.c's. */
static void product(const forward_state *st, threadpool *pool,
                    forward_stage stage, const matmul_args *p)
{
    forward_profile *prof = st->profile;
    const double t0 = prof != NULL ? monotonic_seconds() : 0.0;
    matmul(st, pool, p);
    if (prof != NULL) {
        prof->wall[stage] += monotonic_seconds() - t0;
        prof->runs[stage]++;
    }
}

/* x is (·, C), logits (n_rows, V): row r unembeds row row_index[r] (or
 * r) of x. */
static void unembed(forward_state *st, const model *m, threadpool *pool,
                    const float *x, const size_t *row_index, size_t n_rows,
                    float *logits)
{
    layernorm_forward(st, pool, st->lnf, x, row_index, n_rows, m->ln_f_w,
                      m->ln_f_b);
    product(st, pool, FORWARD_LOGITS,
            &(matmul_args){ .M = n_rows,
                            .N = st->cfg.vocab_size,
                            .K = st->cfg.n_embd,
                            .a = st->lnf,
                            .w = m->lm_head_wp,
                            .w_rows = m->lm_head_w,
                            .w_transposed = true,
                            .dt = m->panel_dtype,
                            .out = logits,
                            .epi = MATMUL_NONE });
}

static int check_pool(const forward_state *st, threadpool *pool,
                      gpt2d_error *err)
{
    if (threadpool_size(pool) > st->n_workers)
        return error_set(err,
                         "forward: a pool of %zu workers, scratch for "
                         "%zu",
                         threadpool_size(pool), st->n_workers);
    return 0;
}

const float *forward_last_residuals(const forward_state *st)
{
    return st->x;
}

int forward_unembed(forward_state *st, const model *m, threadpool *pool,
                    const float *x, size_t n_rows, float *logits,
                    gpt2d_error *err)
{
    if (check_pool(st, pool, err) != 0)
        return -1;
    if (n_rows > st->max_rows)
        return error_set(err,
                         "forward: %zu rows to unembed, more than "
                         "max_rows %zu",
                         n_rows, st->max_rows);
    if (n_rows > 0)
        unembed(st, m, pool, x, NULL, n_rows, logits);
    return 0;
}

void forward_state_set_abandon(forward_state *st, const atomic_bool *flag)
{
    st->abandon = flag;
}

static bool abandoned(const forward_state *st)
{
    return st->abandon != NULL && atomic_load(st->abandon);
}

int forward_step(forward_state *st, const model *m, threadpool *pool,
                 const kv_geometry *kv, const forward_seq *seqs, size_t n_seqs,
                 float *logits, gpt2d_error *err)
{
    forward_profile *prof = st->profile;
    const double t0 = prof != NULL ? monotonic_seconds() : 0.0;
    size_t R = 0, L = 0;
    if (check_pool(st, pool, err) != 0 ||
        plan_step(st, kv, seqs, n_seqs, &R, &L, err) != 0)
        return -1;
    if (R == 0)
        return 0;
    const size_t C = st->cfg.n_embd;

    embedding_forward(st, m, pool, R);
    /* The layer as the paper reads it, a product a statement (clang-format
     * would put every argument on its own line). */
    /* clang-format off */
    const panel_dtype dt = m->panel_dtype;
    for (size_t l = 0; l < st->cfg.n_layer; l++) {
        if (abandoned(st))
            return FORWARD_ABANDONED;
        const layer_weights *w = &m->layers[l];
        layernorm_forward(st, pool, st->xn, st->x, NULL, R, w->ln_1_w,
                          w->ln_1_b);
        product(st, pool, FORWARD_PRODUCTS, &(matmul_args){
            .M = R, .N = 3 * C, .K = C, .a = st->xn, .w = w->attn_wp,
            .w_rows = w->attn_w, .dt = dt, .out = st->qkv, .bias = w->attn_b,
            .epi = MATMUL_BIAS });
        attention_forward(st, pool, kv, l, n_seqs);
        product(st, pool, FORWARD_PRODUCTS, &(matmul_args){
            .M = R, .N = C, .K = C, .a = st->att, .w = w->attn_proj_wp,
            .w_rows = w->attn_proj_w, .dt = dt, .out = st->x,
            .accumulate = true, .bias = w->attn_proj_b, .epi = MATMUL_BIAS });
        layernorm_forward(st, pool, st->xn, st->x, NULL, R, w->ln_2_w,
                          w->ln_2_b);
        product(st, pool, FORWARD_PRODUCTS, &(matmul_args){
            .M = R, .N = 4 * C, .K = C, .a = st->xn, .w = w->fc_wp,
            .w_rows = w->fc_w, .dt = dt, .out = st->h, .bias = w->fc_b,
            .epi = MATMUL_BIAS_GELU });
        product(st, pool, FORWARD_PRODUCTS, &(matmul_args){
            .M = R, .N = C, .K = 4 * C, .a = st->h, .w = w->mlp_proj_wp,
            .w_rows = w->mlp_proj_w, .dt = dt, .out = st->x,
            .accumulate = true, .bias = w->mlp_proj_b, .epi = MATMUL_BIAS });
        capture_block(st, n_seqs, l);
    }
    /* clang-format on */
    if (abandoned(st))
        return FORWARD_ABANDONED;
    if (L > 0)
        unembed(st, m, pool, st->x, st->logit_rows, L, logits);
    if (prof != NULL) {
        prof->step += monotonic_seconds() - t0;
        prof->steps++;
    }
    return 0;
}

/* ---- measurement (forward_profile, forward_product) ---- */

int forward_state_set_profile(forward_state *st, forward_profile *p,
                              gpt2d_error *err)
{
    if (p != NULL && st->n_workers > FORWARD_PROFILE_WORKERS)
        return error_set(err,
                         "forward: a profile counts up to %d workers, "
                         "this state has scratch for %zu",
                         FORWARD_PROFILE_WORKERS, st->n_workers);
    st->profile = p;
    return 0;
}

int forward_product(const forward_state *st, threadpool *pool,
                    const matmul_args *p, gpt2d_error *err)
{
    if (check_pool(st, pool, err) != 0)
        return -1;
    if (p->M > st->max_rows || p->K > 4 * st->cfg.n_embd)
        return error_set(err,
                         "forward: a product of %zu rows and %zu inputs, "
                         "scratch for %zu and %zu",
                         p->M, p->K, st->max_rows, 4 * st->cfg.n_embd);
    matmul(st, pool, p);
    return 0;
}
