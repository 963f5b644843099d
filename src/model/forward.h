/* forward.h — the GPT-2 forward pass over one batch of rows.
 *
 * One call runs one engine step: the new tokens of several sequences (a
 * prefill chunk for some, a single decode token for others), each against its
 * own KV cache at its own position.  Every weight matrix is applied to all rows
 * of the step in one product (matmul.h), so weights are read once per step;
 * the thread pool splits each product by columns, attention by sequence ×
 * head (attention.h) and the row-wise operations by rows.
 *
 * A forward_state owns the scratch activations, sized at creation for at most
 * `max_rows` rows per step; nothing is allocated per step.  Only the engine
 * thread calls forward_step; the model is shared read-only. */
#ifndef GPT2D_FORWARD_H
#define GPT2D_FORWARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "core/error.h"
#include "kv/kv_layout.h"
#include "model/matmul.h"
#include "model/model.h"
#include "core/threadpool.h"

/* What an inspect request (inspect.h) reads from its sequence's rows as
 * the step computes them, into buffers it sized for its own positions
 * [0, n_positions).  Layers whose slot is negative are not read; a
 * sequence without a capture costs nothing. */
typedef struct forward_capture {
    const int32_t *slot; /* [n_layer]: layer l's index s in the
                                   arrays below, or -1 */
    size_t n_positions;
    float *attention; /* NULL, or [s][head][p(p+1)/2 + key]: the
                                   softmax row of the query at position p
                                   (attention.h's `probs`) */
    float *norms;     /* [s][p]: L2 norm of the residual stream
                                   after the layer's block */
    float *residual;  /* NULL, or [s][p][n_embd]: that residual
                                   stream itself */
} forward_capture;

typedef struct forward_seq {
    const uint32_t *blocks;         /* its block table (kvcache.h), covering
                                   positions [0, pos0 + n_tokens) */
    size_t pos0;                    /* positions [0, pos0) already cached */
    const int32_t *tokens;          /* new tokens, at positions pos0 + i */
    size_t n_tokens;                /* >= 1 */
    size_t n_logits;                /* logits for the last n_logits new tokens
                                   (0 = none, 1 = next-token, n_tokens = all,
                                   as echo scoring needs) */
    const forward_capture *capture; /* NULL, or what to keep of its rows
                                   (positions < capture->n_positions) */
} forward_seq;

typedef struct forward_state forward_state;

/* Scratch for steps of up to max_rows rows on pools of up to n_workers
 * workers, all allocated here. */
int forward_state_create(forward_state **out, const model *m, size_t max_rows,
                         size_t n_workers, gpt2d_error *err);
void forward_state_free(forward_state *st);

/* The kernels' instruction set is chosen at creation (cpu_isa_choose: the
 * best the CPU runs, or the one --isa forces).  set_isa switches it, so
 * tests can run every path the CPU supports; -1 when the CPU cannot run
 * `isa`.  Logits of the AVX2 and portable weight products differ in the
 * last bits. */
int forward_state_set_isa(forward_state *st, cpu_isa isa, gpt2d_error *err);
cpu_isa forward_state_isa(const forward_state *st);

/* The arithmetic this state's steps run with, by name: the products'
 * (matmul_arithmetic), which alone differ between paths; attention,
 * LayerNorm and the epilogues give the same bits under every instruction
 * set (test_forward: blas on each).  Whoever keeps what the steps computed
 * (the KV cache) keys it by this name. */
void forward_state_arithmetic(const forward_state *st, char *out, size_t size);

/* Runs one step.  Writes each sequence's new keys and values into its
 * blocks (the caller then commits them: kvcache_seq_commit).  `logits` receives
 * sum(n_logits) rows of vocab_size floats, in sequence order, each
 * sequence's rows in token order.  Fails (and changes nothing) when the rows
 * exceed max_rows, a token id is out of range, or a sequence would pass
 * n_ctx.  Returns FORWARD_ABANDONED when the abandon flag
 * (forward_state_set_abandon) was set before a layer or the unembedding:
 * then nothing it computed may be used (neither logits nor the keys and
 * values it wrote past each sequence's length, which the next step
 * writes again). */
enum { FORWARD_ABANDONED = 1 };
int forward_step(forward_state *st, const model *m, threadpool *pool,
                 const kv_geometry *kv, const forward_seq *seqs, size_t n_seqs,
                 float *logits, gpt2d_error *err);
/* The flag forward_step looks at between layers (NULL: none): set by
 * another thread, it stops the step that runs (the engine's background
 * steps, for an interactive request that arrives). */
void forward_state_set_abandon(forward_state *st, const atomic_bool *flag);

/* The last forward_step's residual stream after its last block, before
 * the final LayerNorm: a row of n_embd per input row, in the order of the
 * step's sequences and their tokens; valid until the next forward_step. */
const float *forward_last_residuals(const forward_state *st);

/* The final LayerNorm and the unembedding of n_rows residual-stream rows x
 * (n_rows, n_embd) into logits (n_rows, vocab_size): the last stage of
 * forward_step, with the same kernels, so a row gives the bits forward_step
 * gives it.  The logit lens applies it to a capture's `residual` rows.
 * Fails when n_rows exceeds max_rows. */
int forward_unembed(forward_state *st, const model *m, threadpool *pool,
                    const float *x, size_t n_rows, float *logits,
                    gpt2d_error *err);

/* ---- measurement (bench_forward) ---- */

/* The stages a profile times. */
typedef enum forward_stage {
    FORWARD_EMBEDDING, /* token and position embeddings */
    FORWARD_LAYERNORM, /* every LayerNorm, ln_f (which gathers the logit
                          rows) included */
    FORWARD_ATTENTION, /* KV stores and attention */
    FORWARD_PRODUCTS,  /* the layers' weight products, with their bias,
                          GELU and residual add: matmul.c applies those to
                          each column block inside the product's tasks */
    FORWARD_LOGITS,    /* the unembedding product */
    FORWARD_STAGES
} forward_stage;

#define FORWARD_PROFILE_WORKERS 64

/* Where forward_step's time goes: seconds, summed over the steps run
 * while the profile is set.  wall[s] is stage s's time on the engine
 * thread (its pool runs, start to end); busy[s][w] is worker w's time
 * inside the stage's tasks, for forward.c's own stages (not the products,
 * whose tasks are matmul.c's: zero there).  So wall - sum(busy) / workers
 * is what handing a stage to the pool cost beyond its work: waking the
 * workers, waiting for the last task, workers idle when there are fewer
 * tasks than workers.  The rest of a step (checking it, captures) is
 * `step` less every wall.
 *
 * Optional and off by default, so the daemon's steps read no clock: two
 * readings per pool run and per task are cheap, but every step would pay
 * them for a figure only a benchmark prints. */
typedef struct forward_profile {
    size_t steps;
    double step; /* forward_step, whole */
    double wall[FORWARD_STAGES];
    size_t runs[FORWARD_STAGES]; /* pool runs (a product is one) */
    double busy[FORWARD_STAGES][FORWARD_PROFILE_WORKERS];
} forward_profile;

/* Makes forward_step (and forward_unembed) add to *p from now on; NULL,
 * the default, stops.  The caller owns *p and zeroes it to start, and
 * calls this on the thread that runs the steps.  Fails when the state has
 * scratch for more than FORWARD_PROFILE_WORKERS workers. */
int forward_state_set_profile(forward_state *st, forward_profile *p,
                              gpt2d_error *err);

/* One weight product on the pool with this state's kernels and scratch,
 * as forward_step runs each of its own (p->dt must be the model's).
 * Only forward.c knows all the scratch a product needs, so bench_forward
 * measures the kernels' peak on a matrix in cache through this.  Fails
 * when p->M exceeds max_rows or p->K exceeds 4 n_embd (the largest a
 * step multiplies). */
int forward_product(const forward_state *st, threadpool *pool,
                    const matmul_args *p, gpt2d_error *err);

#endif
