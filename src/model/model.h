/* model.h — a GPT-2 checkpoint in Hugging Face layout, loaded once.
 *
 * Owns the read-only mmap of model.safetensors and the views into it (llama2.c
 * style: vectors are pointers into the mapping; one is copied only when it
 * is F16/BF16 and must be widened to F32).  The weight matrices are held in
 * the layout of the backend that multiplies by them (--matmul), once:
 *   panels  the four matrices of every layer, and the unembedding's, live
 *           only as column panels (panels.h), the layout our kernels stream,
 *           as floats, halves or int8 blocks (--dtype): packed (and
 *           quantized) once, straight from the file's F32, F16 or BF16, and
 *           the mapped pages they came from are given back to the kernel
 *           (they stay readable through the file, but no longer count in
 *           the daemon's resident memory);
 *   blas    row-major float32 as the file stores them, for cblas_sgemm:
 *           views of the mapping where the file holds aligned F32 (as
 *           llama2.c does), else widened once into one owned float32 copy
 *           (F16/BF16 checkpoints: twice the file's bytes).
 * So every weight is held once, whatever the checkpoint's dtype.  After
 * model_load returns the struct is immutable and may be read from any
 * thread. */
#ifndef GPT2D_MODEL_H
#define GPT2D_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/sha256.h"
#include "model/panels.h"

typedef struct model_config {
    size_t n_layer;
    size_t n_head;
    size_t n_embd;
    size_t n_ctx; /* n_positions */
    size_t vocab_size;
    float layer_norm_epsilon;
} model_config;

/* HF GPT-2 linear weights are Conv1D: stored [in, out], row-major, so
 * y[rows, out] = x[rows, in] · W[in, out] + b[out]. */
typedef struct layer_weights {
    const float *ln_1_w, *ln_1_b; /* [C] */
    const float *attn_b;          /* [3C]: q | k | v */
    const float *attn_proj_b;     /* [C] */
    const float *ln_2_w, *ln_2_b; /* [C] */
    const float *fc_b;            /* [4C] */
    const float *mlp_proj_b;      /* [C] */
    /* the four matrices, c_attn [C, 3C], attn c_proj [C, C], c_fc [C, 4C],
     * mlp c_proj [4C, C], in the backend's layout; the other's are NULL.
     * panels: panel layout (panels.h), elements of the model's panel_dtype;
     * blas: row-major float32. */
    const void *attn_wp, *attn_proj_wp, *fc_wp, *mlp_proj_wp;
    const float *attn_w, *attn_proj_w, *fc_w, *mlp_proj_w;
} layer_weights;

typedef struct model {
    model_config config;
    /* [vocab, C] token embedding; NULL when the model is tied and its
     * matrices are in panels: the embedding then reads its rows from
     * lm_head_wp */
    const float *wte;
    const float *wpe;      /* [n_ctx, C] */
    layer_weights *layers; /* [n_layer] */
    const float *ln_f_w, *ln_f_b;
    /* the unembedding (lm_head.weight, [vocab, C], or wte when tied)
     * transposed to (C, vocab), in panels (panels.h): what the unembedding
     * multiplies by */
    const void *lm_head_wp;
    /* blas: the unembedding, [vocab, C] row-major (wte when tied),
     * multiplied as x · lm_head_wᵀ */
    const float *lm_head_w;
    bool tied;               /* lm_head is wte */
    panel_dtype panel_dtype; /* of every *_wp */
    model_dtype dtype;       /* what --dtype resolved to (never AUTO) */
    model_matmul matmul;     /* what --matmul resolved to (never AUTO) */
    char name[256];          /* directory basename, reported as model id */
    /* every byte of model.safetensors, digested (weights_digest.h): what
     * the KV cache's identity knows the weights by */
    uint8_t weights_digest[SHA256_BYTES];
    size_t weight_bytes; /* bytes of weights a forward pass reads */
    /* private */
    void *map;
    size_t map_size;
    float *widened;   /* F16/BF16 vectors converted to F32 */
    size_t n_widened; /* floats in widened */
    void *packed;     /* every *_wp, 64-byte aligned */
    float *matrices;  /* blas: matrices widened to F32 */
} model;

/* Reads DIR/config.json and mmaps DIR/model.safetensors.  Every tensor's
 * name, dtype and shape is checked; a bad directory yields one line naming the
 * problem.  The panels are stored as `dtype` says (float16 from an F32 or
 * BF16 checkpoint rounds the matrices to nearest half; int8 quantizes
 * them as panels.h's PANEL_Q8 and refuses a weight it cannot hold). */
int model_load(model *m, const char *dir, model_dtype dtype, gpt2d_error *err);
/* The same for the `matmul` backend (model_load: panels).  float16 or
 * int8 with blas is refused: sgemm multiplies float32. */
int model_load_for(model *m, const char *dir, model_dtype dtype,
                   model_matmul matmul, gpt2d_error *err);
void model_free(model *m);

/* DIR/config.json alone, checked as model_load checks it. */
int model_config_read(model_config *cfg, const char *dir, gpt2d_error *err);
/* The bytes a model of config `c` keeps once loaded as `dtype` (AUTO
 * counted as float32), an upper estimate: what a memory budget for
 * several models counts before a model is loaded. */
size_t model_bytes_estimate(const model_config *c, model_dtype dtype);

#endif
