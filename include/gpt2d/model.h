/* model.h — a GPT-2 checkpoint in Hugging Face layout, loaded once.
 *
 * Owns the read-only mmap of model.safetensors and the views into it (llama2.c
 * style: vectors are pointers into the mapping; one is copied only when it
 * is F16/BF16 and must be widened to F32).  The four matrices of every
 * layer, and the unembedding's, live only as column panels (panels.h), the
 * layout the forward kernels stream, as floats or halves (--dtype): they
 * are packed once, straight from the file's F32, F16 or BF16, and the
 * mapped pages they came from are given back to the kernel (they stay
 * readable through the file, but no longer count in the daemon's resident
 * memory).  So every weight is held once, whatever the checkpoint's dtype.
 * After model_load returns the struct is immutable and may be read from
 * any thread. */
#ifndef GPT2D_MODEL_H
#define GPT2D_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt2d/dtype.h"
#include "gpt2d/error.h"
#include "gpt2d/panels.h"

typedef struct model_config {
    size_t n_layer;
    size_t n_head;
    size_t n_embd;
    size_t n_ctx;               /* n_positions */
    size_t vocab_size;
    float layer_norm_epsilon;
} model_config;

/* HF GPT-2 linear weights are Conv1D: stored [in, out], row-major, so
 * y[rows, out] = x[rows, in] · W[in, out] + b[out]. */
typedef struct layer_weights {
    const float *ln_1_w, *ln_1_b;           /* [C] */
    const float *attn_b;                    /* [3C]: q | k | v */
    const float *attn_proj_b;               /* [C] */
    const float *ln_2_w, *ln_2_b;           /* [C] */
    const float *fc_b;                      /* [4C] */
    const float *mlp_proj_b;                /* [C] */
    /* the four matrices in panel layout (panels.h), elements of the
     * model's panel_dtype: c_attn [C, 3C], attn c_proj [C, C], c_fc
     * [C, 4C], mlp c_proj [4C, C] */
    const void *attn_wp, *attn_proj_wp, *fc_wp, *mlp_proj_wp;
} layer_weights;

typedef struct model {
    model_config config;
    /* [vocab, C] token embedding of an untied model; NULL when tied, where
     * the embedding reads its rows from lm_head_wp */
    const float *wte;
    const float *wpe;           /* [n_ctx, C] */
    layer_weights *layers;      /* [n_layer] */
    const float *ln_f_w, *ln_f_b;
    /* the unembedding (lm_head.weight, [vocab, C], or wte when tied)
     * transposed to (C, vocab), in panels (panels.h): what the unembedding
     * multiplies by */
    const void *lm_head_wp;
    bool tied;                  /* lm_head is wte */
    panel_dtype panel_dtype;    /* of every *_wp */
    model_dtype dtype;          /* what --dtype resolved to (never AUTO) */
    char name[256];             /* directory basename, reported as model id */
    size_t weight_bytes;        /* bytes of weights a forward pass reads */
    /* private */
    void *map;
    size_t map_size;
    float *widened;             /* F16/BF16 vectors converted to F32 */
    size_t n_widened;           /* floats in widened */
    void *packed;               /* every *_wp, 64-byte aligned */
} model;

/* Reads DIR/config.json and mmaps DIR/model.safetensors.  Every tensor's
 * name, dtype and shape is checked; a bad directory yields one line naming the
 * problem.  The panels are stored as `dtype` says (float16 from an F32 or
 * BF16 checkpoint rounds the matrices to nearest half). */
int model_load(model *m, const char *dir, model_dtype dtype,
               gpt2d_error *err);
void model_free(model *m);

#endif
