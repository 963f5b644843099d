/* kvcache.c — storage of one sequence's attention keys and values
 * (see kvcache.h).  A slot is allocated once for the model's full context so
 * serving never grows memory; the engine owns the policy of which sequence
 * uses which slot. */
#include "config.h"

#include "gpt2d/kvcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Floats in the K (or V) array of one slot, or 0 on overflow. */
static size_t kv_floats(const model_config *cfg)
{
    size_t n = cfg->n_layer;
    const size_t factors[] = { cfg->n_ctx, cfg->n_embd };
    for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
        if (factors[i] != 0 && n > SIZE_MAX / factors[i])
            return 0;
        n *= factors[i];
    }
    return n;
}

size_t kvcache_slot_bytes(const model_config *cfg)
{
    size_t floats = kv_floats(cfg);
    if (floats == 0 || floats > (SIZE_MAX - cfg->n_ctx * sizeof(int32_t))
                                    / (2 * sizeof(float)))
        return 0;
    return 2 * floats * sizeof(float) + cfg->n_ctx * sizeof(int32_t);
}

int kvcache_slot_alloc(kv_slot *slot, const model_config *cfg,
                       gpt2d_error *err)
{
    memset(slot, 0, sizeof *slot);
    if (cfg->n_head == 0 || cfg->n_embd % cfg->n_head != 0)
        return error_set(err, "KV cache: n_embd %zu is not a multiple of "
                         "n_head %zu", cfg->n_embd, cfg->n_head);
    size_t floats = kv_floats(cfg);
    size_t bytes = kvcache_slot_bytes(cfg);
    if (floats == 0 || bytes == 0)
        return error_set(err, "KV cache: slot size overflows for n_layer %zu "
                         "n_ctx %zu n_embd %zu", cfg->n_layer, cfg->n_ctx,
                         cfg->n_embd);
    /* 64-byte alignment keeps each head's rows on cache-line boundaries
     * (head_dim is a multiple of 16 in every GPT-2). */
    size_t kv_bytes = (floats * sizeof(float) + 63) / 64 * 64;
    slot->k = aligned_alloc(64, kv_bytes);
    slot->v = aligned_alloc(64, kv_bytes);
    slot->tokens = malloc(cfg->n_ctx * sizeof *slot->tokens);
    if (slot->k == NULL || slot->v == NULL || slot->tokens == NULL) {
        kvcache_slot_free(slot);
        return error_set(err, "KV cache: cannot allocate a slot of %zu bytes",
                         bytes);
    }
    slot->n_tokens = 0;
    slot->n_ctx = cfg->n_ctx;
    slot->n_layer = cfg->n_layer;
    slot->n_head = cfg->n_head;
    slot->head_dim = cfg->n_embd / cfg->n_head;
    return 0;
}

void kvcache_slot_free(kv_slot *slot)
{
    if (slot == NULL)
        return;
    free(slot->k);
    free(slot->v);
    free(slot->tokens);
    memset(slot, 0, sizeof *slot);
}
