/* attention.h — causal self-attention for one sequence and one head over
 * the keys and values its KV blocks hold.
 *
 * forward.c runs one task per (sequence, head) of a step on the worker
 * pool; each calls attention_store_kv for the step's new rows of that head,
 * then attention_head.  Calls for different (sequence, head) pairs may run
 * at once on different threads; each needs its own scratch.  K and V are
 * read and written through the sequence's block table (kvcache.h): the
 * blocks of positions a step computes belong to that sequence alone.
 *
 * Every query row gets the same bits whatever else is computed beside it:
 * alone in a decode step or inside a prefill chunk of any size, so a
 * sequence's logits do not depend on how its prompt was chunked. */
#ifndef GPT2D_ATTENTION_H
#define GPT2D_ATTENTION_H

#include <stddef.h>

#include "core/cpu.h"
#include "kv/kv_layout.h"

/* Copies rows [0, n_rows) of one head's new keys k and values v (each row
 * head_dim floats, row stride ld) into the blocks of `table` at positions
 * [pos0, pos0 + n_rows) of `layer`, `head`, rounded to halves when the
 * cache holds halves. */
void attention_store_kv(const kv_geometry *g, const uint32_t *table,
                        size_t layer, size_t head, size_t pos0, size_t n_rows,
                        const float *k, const float *v, size_t ld);

/* Floats of scratch one attention_head call needs (per worker). */
size_t attention_scratch_floats(size_t n_ctx, size_t head_dim);

/* q is (n_rows, head_dim) with row stride ldq, out the same with stride
 * ldo.  Row r is the query at position pos0 + r; it attends to the keys and
 * values of `layer`, `head` at positions [0, pos0 + r] (its own included,
 * so they must be stored first):
 *     out[r] = softmax(q[r] · Kᵀ / sqrt(head_dim)) · V.
 * `scratch` holds attention_scratch_floats(g->n_ctx, g->head_dim).  The
 * kernels of `isa` (which the CPU must run) give the same bits as the
 * portable ones.
 *
 * `probs` is NULL, or the head's triangle of attention probabilities (an
 * inspect request, inspect.h): the row at position p gets its p + 1
 * probabilities, the very ones that weighed V, at probs + p(p+1)/2. */
void attention_head(float *out, size_t ldo, const float *q, size_t ldq,
                    const kv_geometry *g, const uint32_t *table, size_t layer,
                    size_t head, size_t pos0, size_t n_rows, cpu_isa isa,
                    float *scratch, float *probs);

#endif
