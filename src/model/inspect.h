/* inspect.h — what POST /v1/inspect asks of one prompt, and the buffers
 * that receive what the model computed for it.
 *
 * An inspect request runs its prompt through the engine like a completion
 * that scores its prompt (every position computed, nothing generated).
 * For the layers it names, forward_step leaves in its inspect_capture the
 * attention probabilities of every head (straight from attention.c's
 * kernels) and the residual stream after the block: its L2 norm, and, for
 * the logit lens, the row itself.  The engine then unembeds those rows
 * (forward_unembed: the final LayerNorm and lm_head, as for the model's own
 * logits) in later steps and keeps the top k guesses of each; the residual
 * rows are dropped once that is done.
 *
 * Layout: "slot" i is the i-th layer the request named (the answer's
 * order).  Attention is [slot][head][triangle]: the query at position p
 * has p + 1 probabilities at p(p+1)/2 (forward_capture).
 *
 * Owns: the capture's buffers, sized at creation for the request's layers
 * and tokens and taken only when the engine starts the request
 * (inspect_capture_alloc), so a queued inspect holds none of them; nothing
 * grows later.  inspect_memory() counts what every capture holds (the
 * metrics registry keeps the sum: metrics.h).
 * Threads: the engine writes a capture (the engine thread and, in a step,
 * the worker pool) until the request finishes; readers read it after that,
 * under the request's lock. */
#ifndef GPT2D_INSPECT_H
#define GPT2D_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/forward.h"
#include "model/model.h"
#include "sample/sampler.h"

/* The largest k of the logit lens (logit_lens: 0..5). */
#define INSPECT_MAX_LENS 5

typedef struct inspect_params {
    bool attention;       /* keep the attention probabilities */
    size_t logit_lens;    /* guesses per position and layer, 0: none */
    const size_t *layers; /* the layers to keep, in the answer's order */
    size_t n_layers;      /* 1..n_layer, no layer twice */
} inspect_params;

/* One guess of the logit lens: a token and its probability. */
typedef struct inspect_guess {
    int32_t token;
    float prob;
} inspect_guess;

typedef struct inspect_capture inspect_capture;

/* Attention probabilities of n_layers layers of n_head heads over n_tokens
 * positions: n_layers · n_head · n(n+1)/2, what an answer holds. */
size_t inspect_attention_count(size_t n_layers, size_t n_head, size_t n_tokens);

/* Whether `p` fits the model: layers in range and distinct, k in range. */
bool inspect_params_valid(const inspect_params *p, const model_config *cfg);

/* A capture of `p` (copied) over n_tokens positions, without its buffers
 * (a few words per layer); -1 when memory is short.  p must be valid. */
int inspect_capture_create(inspect_capture **out, const inspect_params *p,
                           const model_config *cfg, size_t n_tokens);
void inspect_capture_free(inspect_capture *c);
/* Bytes the buffers of every capture in the process hold now: the
 * attention, norms, lens guesses and (until the lens is done) residual
 * rows of started inspects.  Any thread. */
size_t inspect_memory(void);

/* ---- the engine's side ---- */

/* Takes the buffers, zeroed, when the request starts; -1 when memory is
 * short (the capture then holds none). */
int inspect_capture_alloc(inspect_capture *c);

/* What forward_step is to keep of the request's rows (after alloc). */
const forward_capture *inspect_forward_capture(const inspect_capture *c);
/* Rows the logit lens unembeds: one per (slot, position), slot-major; 0
 * without a lens. */
size_t inspect_lens_rows(const inspect_capture *c);
/* The residual stream of lens row `row` (n_embd floats; the rows are
 * contiguous). */
const float *inspect_lens_input(const inspect_capture *c, size_t row);
/* Keeps the k best of `top` (most likely first, log-probabilities) as the
 * guesses of lens row `row`.  Rows are disjoint: workers may store at
 * once. */
void inspect_lens_store(inspect_capture *c, size_t row,
                        const token_logprob *top, size_t n_top);
/* Every lens row is stored: the residual rows are freed. */
void inspect_lens_done(inspect_capture *c);

/* ---- the reader's side, once the request finished ---- */

const inspect_params *inspect_capture_params(const inspect_capture *c);
size_t inspect_capture_tokens(const inspect_capture *c);
size_t inspect_capture_heads(const inspect_capture *c);
/* The p + 1 probabilities of the query at position p, for slot i's layer
 * and `head`; NULL without attention. */
const float *inspect_attention_row(const inspect_capture *c, size_t i,
                                   size_t head, size_t p);
/* Slot i's residual norms, one per position. */
const float *inspect_norms(const inspect_capture *c, size_t i);
/* The logit_lens guesses at slot i, position p; NULL without a lens. */
const inspect_guess *inspect_lens(const inspect_capture *c, size_t i, size_t p);

#endif
