/* kvcache.h — key/value cache storage for sequences.
 *
 * A kv_slot holds the attention keys and values of one sequence for every
 * layer, sized for the model's full context at allocation, so nothing grows
 * while serving.  Layout is head-major, [n_layer][n_head][n_ctx][head_dim],
 * so one head's keys are contiguous and attention can use plain sgemm.
 * A slot is used by one sequence at a time; the engine thread writes it. */
#ifndef GPT2D_KVCACHE_H
#define GPT2D_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt2d/error.h"
#include "gpt2d/model.h"

typedef struct kv_slot {
    float *k;                   /* [n_layer][n_head][n_ctx][head_dim] */
    float *v;                   /* same layout */
    int32_t *tokens;            /* [n_ctx]: the tokens whose K/V are cached */
    size_t n_tokens;            /* positions [0, n_tokens) are valid */
    size_t n_ctx;
    size_t n_layer, n_head, head_dim;
} kv_slot;

int kvcache_slot_alloc(kv_slot *slot, const model_config *cfg,
                       gpt2d_error *err);
void kvcache_slot_free(kv_slot *slot);
/* Bytes one slot needs for this configuration. */
size_t kvcache_slot_bytes(const model_config *cfg);

/* Address of the keys (or values) of `layer`, `head`, position 0. */
static inline float *kvcache_k(const kv_slot *s, size_t layer, size_t head)
{
    return s->k + ((layer * s->n_head + head) * s->n_ctx) * s->head_dim;
}
static inline float *kvcache_v(const kv_slot *s, size_t layer, size_t head)
{
    return s->v + ((layer * s->n_head + head) * s->n_ctx) * s->head_dim;
}

#endif
