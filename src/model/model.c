/* model.c — load a Hugging Face GPT-2 checkpoint (see model.h).
 *
 * config.json gives the shapes; model.safetensors is mmap'ed read-only and
 * every tensor is bound by name after its dtype and shape are checked against
 * the config.  Vectors (and wpe, and an untied wte) that are F32 are used in
 * place; F16/BF16 ones (and any F32 one the file leaves misaligned) are
 * widened into one owned buffer.  The layer matrices and the unembedding
 * matrix are packed into panels (panels.h) in a second buffer, as floats,
 * halves or int8 blocks (--dtype), straight from the file (through a
 * scratch buffer of one matrix when they need widening), and their mapped
 * pages released: no float copy of a matrix outlives the load.  For the
 * blas backend the matrices are instead views of the mapping, or one
 * widened F32 copy.
 *
 * While it does, a helper thread digests the whole file (weights_digest.h):
 * the weights' identity, which the KV cache keys its blocks by. */
#include "model/model.h"
#include "core/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/hugepages.h"
#include "core/half.h"
#include "model/panels.h"
#include "model/safetensors.h"
#include "model/weights_digest.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; big-endian hosts are not supported"
#endif

/* ---- config.json ---- */

static int config_size(const json_t *root, const char *key, size_t lo,
                       size_t hi, size_t *out, const char *path,
                       gpt2d_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (v == NULL)
        return error_set(err, "%s: missing \"%s\"", path, key);
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)lo ||
        json_integer_value(v) > (json_int_t)hi)
        return error_set(err, "%s: \"%s\" must be an integer in [%zu, %zu]",
                         path, key, lo, hi);
    *out = (size_t)json_integer_value(v);
    return 0;
}

int model_config_read(model_config *cfg, const char *dir, gpt2d_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        if (access(path, R_OK) != 0)
            return error_set(err, "%s: %s", path, strerror(errno));
        return error_set(err, "%s: not valid JSON: %s (line %d)", path,
                         jerr.text, jerr.line);
    }
    int rc = -1;
    if (!json_is_object(root)) {
        error_set(err, "%s: not a JSON object", path);
        goto out;
    }
    const json_t *type = json_object_get(root, "model_type");
    if (type != NULL && (!json_is_string(type) ||
                         strcmp(json_string_value(type), "gpt2") != 0)) {
        error_set(err, "%s: model_type is not \"gpt2\"", path);
        goto out;
    }
    const json_t *act = json_object_get(root, "activation_function");
    if (act != NULL &&
        (!json_is_string(act) ||
         (strcmp(json_string_value(act), "gelu_new") != 0 &&
          strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0))) {
        error_set(err,
                  "%s: activation_function must be \"gelu_new\" (tanh GELU)",
                  path);
        goto out;
    }
    /* Bounds keep every later size product far from overflow. */
    if (config_size(root, "n_layer", 1, 512, &cfg->n_layer, path, err) != 0 ||
        config_size(root, "n_head", 1, 1024, &cfg->n_head, path, err) != 0 ||
        config_size(root, "n_embd", 1, 65536, &cfg->n_embd, path, err) != 0 ||
        config_size(root, "vocab_size", 1, 1u << 22, &cfg->vocab_size, path,
                    err) != 0)
        goto out;
    const char *ctx_key = json_object_get(root, "n_positions") != NULL
                              ? "n_positions"
                              : "n_ctx";
    if (config_size(root, ctx_key, 1, 1u << 20, &cfg->n_ctx, path, err) != 0)
        goto out;
    if (cfg->n_embd % cfg->n_head != 0) {
        error_set(err, "%s: n_embd %zu is not a multiple of n_head %zu", path,
                  cfg->n_embd, cfg->n_head);
        goto out;
    }
    cfg->layer_norm_epsilon = 1e-5f;
    const json_t *eps = json_object_get(root, "layer_norm_epsilon");
    if (eps != NULL) {
        if (!json_is_number(eps) || json_number_value(eps) <= 0 ||
            json_number_value(eps) >= 1) {
            error_set(err, "%s: layer_norm_epsilon must be a number in (0, 1)",
                      path);
            goto out;
        }
        cfg->layer_norm_epsilon = (float)json_number_value(eps);
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* ---- binding tensors ---- */

/* A checked tensor and where it goes: a float view (`view`), or, for a
 * matrix that lives only in panels, the loader's note of its source
 * (`matrix`).  A tied wte has neither: the unembedding's panels serve it. */
typedef struct binding {
    const st_tensor *tensor;
    const float **view;
    const st_tensor **matrix;
} binding;

/* The four matrices of a layer, in layer_matrices' order. */
enum { MAT_ATTN, MAT_ATTN_PROJ, MAT_FC, MAT_MLP_PROJ, MATS_PER_LAYER };

typedef struct loader {
    const char *path; /* model.safetensors, for messages */
    st_file file;
    const char *prefix;  /* "" or "transformer." */
    gpt2d_buf bindings;  /* of binding, in the order bound */
    unsigned char *used; /* per tensor of `file` */
    /* sources of the panels: every layer's matrices, and the unembedding's
     * (lm_head.weight, or wte when tied) */
    const st_tensor *(*layer_src)[MATS_PER_LAYER];
    const st_tensor *head_src;
} loader;

/* Checks tensor `name` (prefixed) against shape [d0] or [d0, d1] and records
 * where it goes (binding above). */
static int bind(loader *L, const char *name, size_t d0, size_t d1,
                const float **view, const st_tensor **matrix, gpt2d_error *err)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", L->prefix, name);
    const st_tensor *t = safetensors_find(&L->file, full);
    if (t == NULL)
        return error_set(err, "%s: missing tensor '%s'", L->path, full);
    if (t->dtype == ST_UNSUPPORTED)
        return error_set(
            err, "%s: tensor '%s' has dtype %s (F32, F16 or BF16 needed)",
            L->path, full, t->dtype_name);
    size_t want_dims = d1 ? 2 : 1;
    if (t->n_dims != want_dims || t->shape[0] != d0 ||
        (d1 && t->shape[1] != d1)) {
        char got[96] = "";
        size_t len = 0;
        for (size_t i = 0; i < t->n_dims && len < sizeof got - 24; i++)
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%zu",
                                    i ? ", " : "", t->shape[i]);
        if (d1)
            return error_set(
                err, "%s: tensor '%s' has shape [%s], expected [%zu, %zu]",
                L->path, full, got, d0, d1);
        return error_set(err, "%s: tensor '%s' has shape [%s], expected [%zu]",
                         L->path, full, got, d0);
    }
    binding b = { t, view, matrix };
    if (buf_append(&L->bindings, &b, sizeof b) != 0)
        return error_set(err, "out of memory");
    L->used[t - L->file.tensors] = 1;
    return 0;
}

static int bind_layer(loader *L, size_t i, size_t C, layer_weights *w,
                      gpt2d_error *err)
{
    char n[64];
    const st_tensor **src = L->layer_src[i];
#define BIND(view, matrix, suffix, d0, d1)                                     \
    do {                                                                       \
        snprintf(n, sizeof n, "h.%zu.%s", i, suffix);                          \
        if (bind(L, n, d0, d1, view, matrix, err) != 0)                        \
            return -1;                                                         \
    } while (0)
    BIND(&w->ln_1_w, NULL, "ln_1.weight", C, 0);
    BIND(&w->ln_1_b, NULL, "ln_1.bias", C, 0);
    BIND(NULL, &src[MAT_ATTN], "attn.c_attn.weight", C, 3 * C);
    BIND(&w->attn_b, NULL, "attn.c_attn.bias", 3 * C, 0);
    BIND(NULL, &src[MAT_ATTN_PROJ], "attn.c_proj.weight", C, C);
    BIND(&w->attn_proj_b, NULL, "attn.c_proj.bias", C, 0);
    BIND(&w->ln_2_w, NULL, "ln_2.weight", C, 0);
    BIND(&w->ln_2_b, NULL, "ln_2.bias", C, 0);
    BIND(NULL, &src[MAT_FC], "mlp.c_fc.weight", C, 4 * C);
    BIND(&w->fc_b, NULL, "mlp.c_fc.bias", 4 * C, 0);
    BIND(NULL, &src[MAT_MLP_PROJ], "mlp.c_proj.weight", 4 * C, C);
    BIND(&w->mlp_proj_b, NULL, "mlp.c_proj.bias", C, 0);
#undef BIND
    return 0;
}

/* The causal-mask buffers some HF exports carry are not weights. */
static int is_ignored_buffer(const char *name)
{
    size_t len = strlen(name);
    static const char *const suffixes[] = { ".attn.bias", ".attn.masked_bias" };
    for (size_t i = 0; i < 2; i++) {
        size_t sl = strlen(suffixes[i]);
        if (len > sl && strcmp(name + len - sl, suffixes[i]) == 0)
            return 1;
    }
    return 0;
}

/* Gives the whole pages inside [p, p + bytes) of the mapping back to the
 * kernel: a private read-only file mapping re-reads them from the file if
 * they are ever touched again (only tests do), and until then they are not
 * resident.  Best effort: memory that is not in the mapping is left alone,
 * and a failed madvise costs only memory. */
static void release_mapped(const model *m, const void *p, size_t bytes)
{
    const uintptr_t lo = (uintptr_t)m->map, hi = lo + m->map_size;
    uintptr_t start = (uintptr_t)p, end = start + bytes;
    if (start < lo || end > hi)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    start = (start + page - 1) / page * page;
    end = end / page * page;
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_DONTNEED);
}

static void widen(const st_tensor *t, float *dst)
{
    for (size_t i = 0; i < t->n_elements; i++) {
        uint16_t h;
        switch (t->dtype) {
        case ST_F16:
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = half_to_float(h);
            break;
        case ST_BF16: {
            memcpy(&h, t->data + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, sizeof bits);
            break;
        }
        default: /* F32 the mapping leaves misaligned */
            memcpy(&dst[i], t->data + 4 * i, 4);
            break;
        }
    }
}

static int needs_copy(const st_tensor *t)
{
    return t->dtype != ST_F32 || ((uintptr_t)t->data % _Alignof(float)) != 0;
}

/* Points every view at its data, widening what cannot be used in place
 * (the widened tensors' mapped pages are then released), and notes every
 * matrix's source for pack_weights. */
static int resolve_bindings(loader *L, model *m, gpt2d_error *err)
{
    const binding *bs = BUF_ITEMS(&L->bindings, const binding);
    size_t n = BUF_COUNT(&L->bindings, binding), total = 0;
    for (size_t i = 0; i < n; i++)
        if (bs[i].view != NULL && needs_copy(bs[i].tensor))
            total += bs[i].tensor->n_elements;
    if (total > 0) {
        m->widened = malloc(total * sizeof(float));
        if (m->widened == NULL)
            return error_set(err, "out of memory widening %zu weights to F32",
                             total);
        m->n_widened = total;
    }
    float *next = m->widened;
    for (size_t i = 0; i < n; i++) {
        const binding *b = &bs[i];
        const st_tensor *t = b->tensor;
        if (b->matrix != NULL) {
            *b->matrix = t;
        } else if (b->view != NULL && needs_copy(t)) {
            widen(t, next);
            release_mapped(m, t->data, t->n_bytes);
            *b->view = next;
            next += t->n_elements;
        } else if (b->view != NULL) {
            *b->view = (const float *)(const void *)t->data;
        }
    }
    return 0;
}

static int bind_all(loader *L, model *m, gpt2d_error *err)
{
    const model_config *c = &m->config;
    if (safetensors_find(&L->file, "wte.weight") != NULL)
        L->prefix = "";
    else if (safetensors_find(&L->file, "transformer.wte.weight") != NULL)
        L->prefix = "transformer.";
    else
        return error_set(err, "%s: missing tensor 'wte.weight'", L->path);

    if (bind(L, "wte.weight", c->vocab_size, c->n_embd, &m->wte, NULL, err) !=
            0 ||
        bind(L, "wpe.weight", c->n_ctx, c->n_embd, &m->wpe, NULL, err) != 0)
        return -1;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    L->layer_src = calloc(c->n_layer, sizeof *L->layer_src);
    if (m->layers == NULL || L->layer_src == NULL)
        return error_set(err, "out of memory");
    for (size_t i = 0; i < c->n_layer; i++)
        if (bind_layer(L, i, c->n_embd, &m->layers[i], err) != 0)
            return -1;
    if (bind(L, "ln_f.weight", c->n_embd, 0, &m->ln_f_w, NULL, err) != 0 ||
        bind(L, "ln_f.bias", c->n_embd, 0, &m->ln_f_b, NULL, err) != 0)
        return -1;

    /* lm_head sits outside the transformer. prefix in HF exports. */
    const st_tensor *head = safetensors_find(&L->file, "lm_head.weight");
    const st_tensor *wte =
        BUF_ITEMS(&L->bindings, binding)[0].tensor; /* bound first */
    m->tied = true;
    if (head != NULL) {
        const char *saved = L->prefix;
        L->prefix = "";
        int rc = bind(L, "lm_head.weight", c->vocab_size, c->n_embd, NULL,
                      &L->head_src, err);
        L->prefix = saved;
        if (rc != 0)
            return -1;
        m->tied = head->dtype == wte->dtype &&
                  memcmp(head->data, wte->data, wte->n_bytes) == 0;
        if (m->tied)
            /* identical bytes: share wte instead */
            L->bindings.len -= sizeof(binding);
    }
    if (m->tied) {
        /* the unembedding's panels hold wte, and the embedding reads them */
        binding *b = BUF_ITEMS(&L->bindings, binding); /* wte's */
        b->view = NULL;
        b->matrix = &L->head_src;
    }

    for (size_t i = 0; i < L->file.n_tensors; i++) {
        const char *name = L->file.tensors[i].name;
        if (!L->used[i] && !is_ignored_buffer(name))
            return error_set(
                err,
                "%s: unexpected tensor '%s' (not part of GPT-2 with %zu layers)",
                L->path, name, c->n_layer);
    }
    return resolve_bindings(L, m, err);
}

/* ---- panel copies of the layer matrices ---- */

typedef struct layer_matrix {
    const st_tensor *src;
    const void **dst;   /* panels */
    const float **rows; /* blas */
    size_t K, N;
} layer_matrix;

static void layer_matrices(const loader *L, size_t l, layer_weights *w,
                           size_t C, layer_matrix out[MATS_PER_LAYER])
{
    const st_tensor *const *src = L->layer_src[l];
    out[MAT_ATTN] = (layer_matrix){ src[MAT_ATTN], &w->attn_wp, &w->attn_w, C,
                                    3 * C };
    out[MAT_ATTN_PROJ] = (layer_matrix){ src[MAT_ATTN_PROJ], &w->attn_proj_wp,
                                         &w->attn_proj_w, C, C };
    out[MAT_FC] = (layer_matrix){ src[MAT_FC], &w->fc_wp, &w->fc_w, C, 4 * C };
    out[MAT_MLP_PROJ] = (layer_matrix){ src[MAT_MLP_PROJ], &w->mlp_proj_wp,
                                        &w->mlp_proj_w, 4 * C, C };
}

/* t's values as floats: in place when the file holds them as aligned F32,
 * else widened into `scratch`. */
static const float *matrix_floats(const st_tensor *t, float *scratch)
{
    if (!needs_copy(t))
        return (const float *)(const void *)t->data;
    widen(t, scratch);
    return scratch;
}

/* 0 when PANEL_Q8 (and PANEL_Q8DOT) holds every value of t (as floats,
 * `w`), else an error naming the first it cannot hold and the --dtype
 * (`dtype`) that asked. */
static int check_q8(const loader *L, const st_tensor *t, const float *w,
                    const char *dtype, gpt2d_error *err)
{
    for (size_t i = 0; i < t->n_elements; i++)
        if (!panel_q8_holds(w[i]))
            return error_set(err,
                             "%s: tensor '%s' holds %g at [%zu, %zu], "
                             "which --dtype %s cannot (its scales are "
                             "halves: at most %g)",
                             L->path, t->name, (double)w[i], i / t->shape[1],
                             i % t->shape[1], dtype, (double)PANEL_Q8_MAX);
    return 0;
}

/* Packs one matrix, t as floats (`w`), into dst; PANEL_Q8 refuses a value
 * it cannot hold. */
static int pack_matrix(void *dst, panel_dtype dt, const loader *L,
                       const st_tensor *t, const float *w, size_t K, size_t N,
                       bool transposed, gpt2d_error *err)
{
    if ((dt == PANEL_Q8 || dt == PANEL_Q8DOT) &&
        check_q8(L, t, w, dt == PANEL_Q8 ? "int8" : "q8", err) != 0)
        return -1;
    if (transposed)
        panel_pack_transposed(dst, dt, w, K, N);
    else
        panel_pack(dst, dt, w, K, N);
    return 0;
}

/* Packs every layer's four matrices and the unembedding matrix into one
 * buffer of panels and releases the mapped originals: the forward pass
 * reads only the panels (and, for an untied model, wte's rows).  A matrix
 * the file does not hold as aligned F32 passes through one scratch buffer,
 * the size of the largest such matrix, freed before returning. */
static int pack_weights(model *m, const loader *L, gpt2d_error *err)
{
    const size_t C = m->config.n_embd, V = m->config.vocab_size;
    const panel_dtype dt = m->panel_dtype;
    layer_matrix mats[MATS_PER_LAYER];
    size_t per_layer = 0, scratch_floats = 0;
    for (size_t l = 0; l < m->config.n_layer; l++) {
        layer_matrices(L, l, &m->layers[l], C, mats);
        for (size_t i = 0; i < MATS_PER_LAYER; i++) {
            if (l == 0)
                per_layer += panel_bytes(mats[i].K, mats[i].N, dt);
            if (needs_copy(mats[i].src) &&
                mats[i].src->n_elements > scratch_floats)
                scratch_floats = mats[i].src->n_elements;
        }
    }
    if (needs_copy(L->head_src) && L->head_src->n_elements > scratch_floats)
        scratch_floats = L->head_src->n_elements;
    size_t bytes = m->config.n_layer * per_layer + panel_bytes(C, V, dt);
    m->packed = huge_alloc(bytes);
    if (m->packed == NULL)
        return error_set(err, "out of memory: %zu MB for the weight panels",
                         bytes >> 20);
    float *scratch = NULL;
    if (scratch_floats > 0 &&
        (scratch = malloc(scratch_floats * sizeof(float))) == NULL)
        return error_set(err, "out of memory widening %zu weights to F32",
                         scratch_floats);
    char *next = m->packed;
    int rc = -1;
    for (size_t l = 0; l < m->config.n_layer; l++) {
        layer_matrices(L, l, &m->layers[l], C, mats);
        for (size_t i = 0; i < MATS_PER_LAYER; i++) {
            const st_tensor *t = mats[i].src;
            if (pack_matrix(next, dt, L, t, matrix_floats(t, scratch),
                            mats[i].K, mats[i].N, false, err) != 0)
                goto out;
            *mats[i].dst = next;
            next += panel_bytes(mats[i].K, mats[i].N, dt);
            release_mapped(m, t->data, t->n_bytes);
        }
    }
    if (pack_matrix(next, dt, L, L->head_src,
                    matrix_floats(L->head_src, scratch), C, V, true, err) != 0)
        goto out;
    m->lm_head_wp = next;
    release_mapped(m, L->head_src->data, L->head_src->n_bytes);
    rc = 0;
out:
    free(scratch);
    return rc;
}

/* blas: every matrix row-major as the file stores it ([in, out], and the
 * unembedding [vocab, C]), a view of the mapping where it is aligned F32,
 * else widened once into m->matrices.  Nothing is released: the views are
 * the weights. */
static int view_weights(model *m, const loader *L, gpt2d_error *err)
{
    const size_t C = m->config.n_embd;
    layer_matrix mats[MATS_PER_LAYER];
    size_t total = 0;
    for (size_t l = 0; l < m->config.n_layer; l++) {
        layer_matrices(L, l, &m->layers[l], C, mats);
        for (size_t i = 0; i < MATS_PER_LAYER; i++)
            if (needs_copy(mats[i].src))
                total += mats[i].src->n_elements;
    }
    if (needs_copy(L->head_src))
        total += L->head_src->n_elements;
    if (total > 0 && (m->matrices = malloc(total * sizeof(float))) == NULL)
        return error_set(err,
                         "out of memory: %zu MB to widen the weight "
                         "matrices to F32",
                         total * sizeof(float) >> 20);
    float *next = m->matrices;
    for (size_t l = 0; l < m->config.n_layer; l++) {
        layer_matrices(L, l, &m->layers[l], C, mats);
        for (size_t i = 0; i < MATS_PER_LAYER; i++) {
            *mats[i].rows = matrix_floats(mats[i].src, next);
            if (needs_copy(mats[i].src)) {
                release_mapped(m, mats[i].src->data, mats[i].src->n_bytes);
                next += mats[i].src->n_elements;
            }
        }
    }
    m->lm_head_w = matrix_floats(L->head_src, next);
    if (needs_copy(L->head_src))
        release_mapped(m, L->head_src->data, L->head_src->n_bytes);
    if (m->tied)
        m->wte = m->lm_head_w;
    return 0;
}

/* ---- public ---- */

/* The panels (c_attn, attn c_proj, c_fc, mlp c_proj and the unembedding)
 * in their dtype (int8: 17 bytes per 16 weights, the scales included), and
 * the LayerNorm and bias vectors as floats. */
static size_t weight_bytes_per_token(const model_config *c, panel_dtype dt)
{
    size_t C = c->n_embd;
    size_t matrices = c->n_layer * 12 * C * C + c->vocab_size * C;
    size_t vectors = c->n_layer * (4 * C + 3 * C + C + 4 * C + C) + 2 * C;
    return matrices * panel_k_bytes(dt) / PANEL_WIDTH + sizeof(float) * vectors;
}

static panel_dtype panel_dtype_of(model_dtype dtype)
{
    return dtype == MODEL_DTYPE_Q8        ? PANEL_Q8DOT
           : dtype == MODEL_DTYPE_INT8    ? PANEL_Q8
           : dtype == MODEL_DTYPE_FLOAT16 ? PANEL_F16
                                          : PANEL_F32;
}

size_t model_bytes_estimate(const model_config *c, model_dtype dtype)
{
    /* the position table and a generous word embedding besides the panels
     * (an untied checkpoint keeps both) */
    return weight_bytes_per_token(c, panel_dtype_of(dtype)) +
           sizeof(float) * (c->n_ctx + c->vocab_size) * c->n_embd;
}

/* AUTO: panels where the AVX2 kernels run or half or 8-bit weights are
 * asked for, blas elsewhere. */
static int resolve_matmul(model_matmul asked, model_dtype dtype,
                          model_matmul *out, gpt2d_error *err)
{
    *out = asked;
    if (asked == MODEL_MATMUL_BLAS && model_dtype_needs_panels(dtype))
        return error_set(err,
                         "--dtype %s keeps the matrices as %s, which "
                         "only --matmul panels multiplies (blas needs "
                         "float32)",
                         model_dtype_name(dtype),
                         dtype == MODEL_DTYPE_FLOAT16 ? "halves"
                                                      : "8-bit integers");
    if (asked != MODEL_MATMUL_AUTO)
        return 0;
    const cpu_isa isa = cpu_isa_choose();
    *out = isa >= CPU_ISA_AVX2 || model_dtype_needs_panels(dtype)
               ? MODEL_MATMUL_PANELS
               : MODEL_MATMUL_BLAS;
    return 0;
}

/* AUTO keeps an F16 checkpoint's matrices as they are stored. */
static model_dtype resolve_dtype(const loader *L, model_dtype asked)
{
    if (asked != MODEL_DTYPE_AUTO)
        return asked;
    const binding *bs = BUF_ITEMS(&L->bindings, const binding);
    for (size_t i = 0; i < BUF_COUNT(&L->bindings, binding); i++)
        if (bs[i].tensor->dtype != ST_F16)
            return MODEL_DTYPE_FLOAT32;
    return MODEL_DTYPE_FLOAT16;
}

static void set_name(model *m, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(m->name, sizeof m->name, "%.*s", (int)(len - start), dir + start);
}

int model_load(model *m, const char *dir, model_dtype dtype, gpt2d_error *err)
{
    return model_load_for(m, dir, dtype, MODEL_MATMUL_PANELS, err);
}

int model_load_for(model *m, const char *dir, model_dtype dtype,
                   model_matmul matmul, gpt2d_error *err)
{
    memset(m, 0, sizeof *m);
    if (resolve_matmul(matmul, dtype, &m->matmul, err) != 0)
        return -1;
    struct stat st;
    if (stat(dir, &st) != 0)
        return error_set(err, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return error_set(err, "%s: not a directory", dir);
    if (model_config_read(&m->config, dir, err) != 0)
        return -1;
    set_name(m, dir);

    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return error_set(err, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        int e = errno;
        close(fd);
        return st.st_size == 0 ? error_set(err, "%s: file is empty", path)
                               : error_set(err, "%s: %s", path, strerror(e));
    }
    m->map_size = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return error_set(err, "%s: mmap: %s", path, strerror(errno));
    }

    loader L = { .path = path };
    gpt2d_error parse_err;
    int rc = -1;
    weights_digest *digest = NULL;
    if (weights_digest_start(&digest, m->map, m->map_size, err) != 0)
        goto out;
    if (safetensors_parse(m->map, m->map_size, &L.file, &parse_err) != 0) {
        error_set(err, "%s: %s", path, parse_err.message);
        goto out;
    }
    L.used = calloc(L.file.n_tensors ? L.file.n_tensors : 1, 1);
    if (L.used == NULL) {
        error_set(err, "out of memory");
        goto out;
    }
    if (bind_all(&L, m, err) != 0)
        goto out;
    m->dtype = m->matmul == MODEL_MATMUL_BLAS ? MODEL_DTYPE_FLOAT32
                                              : resolve_dtype(&L, dtype);
    m->panel_dtype = panel_dtype_of(m->dtype);
    if ((m->matmul == MODEL_MATMUL_BLAS ? view_weights(m, &L, err)
                                        : pack_weights(m, &L, err)) != 0)
        goto out;
    m->weight_bytes = weight_bytes_per_token(&m->config, m->panel_dtype);
    weights_digest_finish(digest, m->weights_digest);
    digest = NULL;
    /* The digest read every page, some after the packing had given them
     * back: all go back now.  Nothing here reads a view (they are
     * pointers), so the views' pages fault in on first use, as they
     * would have without the digest. */
    release_mapped(m, m->map, m->map_size);
    rc = 0;
out:
    weights_digest_cancel(digest);
    free(L.used);
    buf_free(&L.bindings);
    free(L.layer_src);
    safetensors_free(&L.file);
    if (rc != 0)
        model_free(m);
    return rc;
}

void model_free(model *m)
{
    if (m->map != NULL)
        munmap(m->map, m->map_size);
    free(m->layers);
    free(m->widened);
    free(m->packed);
    free(m->matrices);
    memset(m, 0, sizeof *m);
}
