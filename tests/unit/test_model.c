/* test_model.c — the checkpoint loader binds every GPT-2 tensor from a
 * Hugging Face directory, and refuses each kind of malformed directory with
 * one line that names the problem.  Models are written here, in C, so each
 * test can break exactly one thing. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bulk_digest.h"
#include "model/model.h"
#include "model/panels.h"
#include "model/weights_digest.h"
#include "test_util.h"

enum { L = 2, C = 8, H = 2, V = 10, T = 4, MAX_TENSORS = 64 };

typedef struct tspec {
    char name[96];
    const char *dtype; /* "F32", "F16", "BF16", "I32" */
    size_t n_dims;
    size_t shape[4];
    float scale; /* element i holds scale * (i % 97) / 97 */
} tspec;

typedef struct spec {
    tspec t[MAX_TENSORS];
    size_t n;
} spec;

static tspec *add(spec *s, const char *prefix, const char *name, size_t d0,
                  size_t d1)
{
    ck_assert_uint_lt(s->n, MAX_TENSORS);
    tspec *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s%s", prefix, name);
    t->dtype = "F32";
    t->n_dims = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->scale = 1.0f + (float)s->n; /* distinct per tensor */
    s->n++;
    return t;
}

/* The tensors of a valid GPT-2 of the sizes above. */
static void gpt2_spec(spec *s, const char *prefix)
{
    s->n = 0;
    add(s, prefix, "wte.weight", V, C);
    add(s, prefix, "wpe.weight", T, C);
    for (int i = 0; i < L; i++) {
        char n[64];
#define ADD(suffix, d0, d1)                                                    \
    snprintf(n, sizeof n, "h.%d.%s", i, suffix);                               \
    add(s, prefix, n, d0, d1)
        ADD("ln_1.weight", C, 0);
        ADD("ln_1.bias", C, 0);
        ADD("attn.c_attn.weight", C, 3 * C);
        ADD("attn.c_attn.bias", 3 * C, 0);
        ADD("attn.c_proj.weight", C, C);
        ADD("attn.c_proj.bias", C, 0);
        ADD("ln_2.weight", C, 0);
        ADD("ln_2.bias", C, 0);
        ADD("mlp.c_fc.weight", C, 4 * C);
        ADD("mlp.c_fc.bias", 4 * C, 0);
        ADD("mlp.c_proj.weight", 4 * C, C);
        ADD("mlp.c_proj.bias", C, 0);
#undef ADD
    }
    add(s, prefix, "ln_f.weight", C, 0);
    add(s, prefix, "ln_f.bias", C, 0);
}

static tspec *find(spec *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    ck_abort_msg("no tensor %s in spec", name);
    return NULL;
}

static void drop(spec *s, const char *name)
{
    tspec *t = find(s, name);
    size_t i = (size_t)(t - s->t);
    memmove(&s->t[i], &s->t[i + 1], (s->n - i - 1) * sizeof *t);
    s->n--;
}

static float value_of(const tspec *t, size_t i)
{
    return t->scale * (float)(i % 97) / 97.0f;
}

static size_t elements(const tspec *t)
{
    size_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++)
        n *= t->shape[d];
    return n;
}

static size_t dtype_size(const char *dtype)
{
    return strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0 ? 4 : 2;
}

/* Round-to-nearest-even F32 -> F16 for the normal, finite values used here. */
static uint16_t to_f16(float f)
{
    if (f == 0.0f)
        return 0;
    int e;
    float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
    uint16_t mant = (uint16_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
    int exp = e - 1 + 15;
    if (mant == 1024) {
        mant = 0;
        exp++;
    }
    return (uint16_t)((exp << 10) | mant);
}

static float from_f16(uint16_t h)
{
    if (h == 0)
        return 0.0f;
    return ldexpf(1.0f + (float)(h & 0x3ff) / 1024.0f, ((h >> 10) & 0x1f) - 15);
}

static void encode(const tspec *t, size_t i, uint8_t *out)
{
    float v = value_of(t, i);
    if (strcmp(t->dtype, "F16") == 0) {
        uint16_t h = to_f16(v);
        memcpy(out, &h, 2);
    } else if (strcmp(t->dtype, "BF16") == 0) {
        uint32_t bits;
        memcpy(&bits, &v, 4);
        uint16_t h = (uint16_t)(bits >> 16); /* truncation is fine here */
        memcpy(out, &h, 2);
    } else {
        memcpy(out, &v, 4);
    }
}

/* The value the loader must produce for element i. */
static float expected(const tspec *t, size_t i)
{
    uint8_t raw[4];
    encode(t, i, raw);
    if (strcmp(t->dtype, "F16") == 0) {
        uint16_t h;
        memcpy(&h, raw, 2);
        return from_f16(h);
    }
    if (strcmp(t->dtype, "BF16") == 0) {
        uint16_t h;
        memcpy(&h, raw, 2);
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    return value_of(t, i);
}

static void write_bytes(const char *dir, const char *file, const void *data,
                        size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    write_bytes(dir, file, text, strlen(text));
}

static const char *VALID_CONFIG =
    "{\"model_type\": \"gpt2\", \"activation_function\": \"gelu_new\", "
    "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 4, "
    "\"n_ctx\": 4, \"vocab_size\": 10, \"layer_norm_epsilon\": 1e-05}";

/* Writes model.safetensors from the spec, header padded to 8 bytes as HF
 * does.  `truncate_by` drops bytes from the end. */
static void write_safetensors(const char *dir, const spec *s,
                              size_t truncate_by)
{
    json_t *header = json_object();
    json_object_set_new(header, "__metadata__",
                        json_pack("{s:s}", "format", "pt"));
    size_t offset = 0;
    for (size_t i = 0; i < s->n; i++) {
        const tspec *t = &s->t[i];
        json_t *shape = json_array();
        for (size_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        size_t bytes = elements(t) * dtype_size(t->dtype);
        json_object_set_new(header, t->name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", t->dtype,
                                      "shape", shape, "data_offsets",
                                      (json_int_t)offset,
                                      (json_int_t)(offset + bytes)));
        offset += bytes;
    }
    char *text = json_dumps(header, JSON_COMPACT);
    json_decref(header);
    size_t hlen = strlen(text);
    size_t padded = (hlen + 7) / 8 * 8;

    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    size_t total = 8 + padded + offset;
    uint8_t *buf = malloc(total);
    memcpy(buf, len, 8);
    memcpy(buf + 8, text, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    uint8_t *p = buf + 8 + padded;
    for (size_t i = 0; i < s->n; i++) {
        const tspec *t = &s->t[i];
        for (size_t e = 0; e < elements(t); e++) {
            encode(t, e, p);
            p += dtype_size(t->dtype);
        }
    }
    fwrite(buf, 1, total - truncate_by, f);
    fclose(f);
    free(buf);
    free(text);
}

/* Each test's model directory, inside the test case's scratch directory
 * (removed after a failed test too). */
static char tmpdir[300];

static void make_dir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/model-XXXXXX", test_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_dir(void)
{
    test_remove_tree(tmpdir);
}

/* Loads tmpdir and expects failure whose message contains `needle`. */
static void expect_refused(const char *needle)
{
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err), -1);
    ck_assert_msg(strstr(err.message, needle) != NULL,
                  "message '%s' lacks '%s'", err.message, needle);
    ck_assert_ptr_null(strchr(err.message, '\n'));
    ck_assert_ptr_null(m.map);
    ck_assert_ptr_null(m.layers);
}

static void write_valid(spec *s, const char *prefix)
{
    gpt2_spec(s, prefix);
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, s, 0);
}

static void check_values(const float *got, const tspec *t)
{
    for (size_t i = 0; i < elements(t); i++)
        ck_assert_msg(got[i] == expected(t, i), "%s[%zu]: %g != %g", t->name, i,
                      (double)got[i], (double)expected(t, i));
}

/* Element (k, n) of the (K, N) matrix t, as panels of `dt` hold it: t is
 * (K, N) row-major, or with `transposed` (N, K), as the unembedding's
 * vocabulary matrix is stored.  int8: the scale of the largest |value| of
 * the column's rows in k's block of 32 (panels.h's formulas, which
 * test_forward holds to numpy's bit for bit), so this checks which values
 * share a block, and where they go. */
static float as_stored(const tspec *t, size_t K, size_t N, bool transposed,
                       size_t k, size_t n, panel_dtype dt)
{
#define AT(k, n) expected(t, transposed ? (n)*K + (k) : (k)*N + (n))
    const float x = AT(k, n);
    if (dt == PANEL_F16)
        return half_to_float(half_from_float(x));
    if (dt != PANEL_Q8 && dt != PANEL_Q8DOT)
        return x;
    float amax = 0.0f;
    for (size_t r = k - k % 32; r < K && r < k - k % 32 + 32; r++)
        amax = fmaxf(amax, fabsf(AT(r, n)));
#undef AT
    const float d = half_to_float(panel_q8_scale(amax));
    return (float)panel_q8_quantize(x, d) * d;
}

/* A panel copy of the (K, N) matrix holds t's values, zero padded (t as in
 * as_stored). */
static void check_panels(const void *packed, panel_dtype dt, const tspec *t,
                         size_t K, size_t N, bool transposed)
{
    for (size_t k = 0; k < K; k++)
        for (size_t n = 0; n < panel_count(N) * PANEL_WIDTH; n++) {
            float want = n < N ? as_stored(t, K, N, transposed, k, n, dt)
                               : 0.0f;
            ck_assert_msg(panel_at(packed, dt, K, k, n) == want,
                          "%s panel (%zu, %zu): %g != %g", t->name, k, n,
                          (double)panel_at(packed, dt, K, k, n), (double)want);
        }
}

/* The unembedding's panels hold t (vocab, C) transposed, and panel_column
 * gives back each token's row. */
static void check_vocab_panels(const void *packed, panel_dtype dt,
                               const tspec *t)
{
    check_panels(packed, dt, t, C, V, true);
    float row[C];
    for (size_t n = 0; n < V; n++) {
        panel_column(row, packed, dt, C, n);
        for (size_t k = 0; k < C; k++)
            ck_assert_msg(row[k] == as_stored(t, C, V, true, k, n, dt),
                          "%s row %zu column %zu", t->name, n, k);
    }
}

static void check_bound(const model *m, spec *s, const char *prefix)
{
    char n[96];
    snprintf(n, sizeof n, "%swte.weight", prefix);
    if (m->tied)
        check_vocab_panels(m->lm_head_wp, m->panel_dtype, find(s, n));
    else
        check_values(m->wte, find(s, n));
    snprintf(n, sizeof n, "%swpe.weight", prefix);
    check_values(m->wpe, find(s, n));
    snprintf(n, sizeof n, "%sh.1.attn.c_attn.weight", prefix);
    check_panels(m->layers[1].attn_wp, m->panel_dtype, find(s, n), C, 3 * C,
                 false);
    snprintf(n, sizeof n, "%sh.0.mlp.c_proj.weight", prefix);
    check_panels(m->layers[0].mlp_proj_wp, m->panel_dtype, find(s, n), 4 * C, C,
                 false);
    snprintf(n, sizeof n, "%sh.1.mlp.c_fc.weight", prefix);
    check_panels(m->layers[1].fc_wp, m->panel_dtype, find(s, n), C, 4 * C,
                 false);
    snprintf(n, sizeof n, "%sh.0.attn.c_proj.weight", prefix);
    check_panels(m->layers[0].attn_proj_wp, m->panel_dtype, find(s, n), C, C,
                 false);
    snprintf(n, sizeof n, "%sh.0.mlp.c_proj.bias", prefix);
    check_values(m->layers[0].mlp_proj_b, find(s, n));
    snprintf(n, sizeof n, "%sh.1.ln_2.weight", prefix);
    check_values(m->layers[1].ln_2_w, find(s, n));
    snprintf(n, sizeof n, "%sln_f.bias", prefix);
    check_values(m->ln_f_b, find(s, n));
}

START_TEST(test_loads_plain_hf_names)
{
    spec s;
    write_valid(&s, "");
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(m.config.n_layer, L);
    ck_assert_uint_eq(m.config.n_head, H);
    ck_assert_uint_eq(m.config.n_embd, C);
    ck_assert_uint_eq(m.config.n_ctx, T);
    ck_assert_uint_eq(m.config.vocab_size, V);
    ck_assert_float_eq_tol(m.config.layer_norm_epsilon, 1e-5f, 1e-12f);
    check_bound(&m, &s, "");
    ck_assert(m.tied);
    ck_assert_ptr_null(m.wte);     /* the panels serve it */
    ck_assert_ptr_null(m.widened); /* F32 used in place */
    ck_assert_str_eq(m.name, strrchr(tmpdir, '/') + 1);
    size_t per_layer = 4 * C + C * 3 * C + 3 * C + C * C + C + C * 4 * C +
                       4 * C + 4 * C * C + C;
    ck_assert_uint_eq(m.weight_bytes, 4 * (L * per_layer + 2 * C + V * C));
    model_free(&m);
}
END_TEST

START_TEST(test_loads_transformer_prefix_and_ignores_mask_buffers)
{
    spec s;
    gpt2_spec(&s, "transformer.");
    add(&s, "transformer.", "h.0.attn.bias", 1, 16)->n_dims = 2;
    add(&s, "transformer.", "h.1.attn.masked_bias", 1, 0);
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    check_bound(&m, &s, "transformer.");
    model_free(&m);
}
END_TEST

START_TEST(test_lm_head_equal_to_wte_is_shared_different_is_used)
{
    spec s;
    gpt2_spec(&s, "");
    tspec *head = add(&s, "", "lm_head.weight", V, C);
    head->scale = find(&s, "wte.weight")->scale; /* same bytes: tied */
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert(m.tied);
    check_vocab_panels(m.lm_head_wp, m.panel_dtype, find(&s, "wte.weight"));
    model_free(&m);

    head = find(&s, "lm_head.weight");
    head->scale = 42.0f; /* untied */
    write_safetensors(tmpdir, &s, 0);
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert(!m.tied);
    check_values(m.wte, find(&s, "wte.weight")); /* the embedding's rows */
    check_vocab_panels(m.lm_head_wp, m.panel_dtype, head);
    model_free(&m);
}
END_TEST

START_TEST(test_widens_f16_and_bf16_tensors)
{
    spec s;
    gpt2_spec(&s, "");
    find(&s, "wte.weight")->dtype = "F16";
    find(&s, "h.1.attn.c_attn.weight")->dtype = "BF16";
    find(&s, "ln_f.bias")->dtype = "F16";
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    check_bound(&m, &s, "");
    ck_assert(m.tied);
    /* only the vector is kept widened: the matrices went straight from the
     * file's halves into float panels */
    ck_assert_ptr_nonnull(m.widened);
    ck_assert_uint_eq(m.n_widened, C);
    model_free(&m);
}
END_TEST

/* --dtype float16: the matrices' panels hold each value rounded to the
 * nearest half, the vectors stay floats, and a step reads half the bytes
 * of the matrices. */
START_TEST(test_float16_rounds_the_matrices_to_half_panels)
{
    spec s;
    write_valid(&s, "");
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_FLOAT16, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(m.dtype, MODEL_DTYPE_FLOAT16);
    ck_assert_int_eq(m.panel_dtype, PANEL_F16);
    check_bound(&m, &s, "");
    /* the values really change: not every one is a half */
    ck_assert(panel_at(m.layers[1].attn_wp, PANEL_F16, C, 0, 1) !=
              expected(find(&s, "h.1.attn.c_attn.weight"), 1));
    size_t vectors = L * (4 * C + 3 * C + C + 4 * C + C) + 2 * C;
    ck_assert_uint_eq(m.weight_bytes,
                      2 * (L * 12 * C * C + V * C) + 4 * vectors);
    model_free(&m);
}
END_TEST

/* --dtype int8 and q8: the matrices' panels hold each value quantized in blocks
 * of 32 inputs with a half scale (panels.h), from any checkpoint dtype;
 * the vectors stay floats, and a step reads 17 bytes per 16 weights. */
START_TEST(test_int8_and_q8_quantize_the_matrices_from_any_dtype)
{
    static const char *const dtypes[] = { "F32", "F16", "BF16" };
    const model_dtype want = _i ? MODEL_DTYPE_Q8 : MODEL_DTYPE_INT8;
    const panel_dtype dt = _i ? PANEL_Q8DOT : PANEL_Q8;
    for (size_t i = 0; i < 3; i++) {
        spec s;
        gpt2_spec(&s, "");
        for (size_t j = 0; j < s.n; j++)
            s.t[j].dtype = dtypes[i];
        write_text(tmpdir, "config.json", VALID_CONFIG);
        write_safetensors(tmpdir, &s, 0);
        model m;
        gpt2d_error err = { { 0 } };
        ck_assert_msg(model_load(&m, tmpdir, want, &err) == 0, "%s: %s",
                      dtypes[i], err.message);
        ck_assert_int_eq(m.dtype, want);
        ck_assert_int_eq(m.panel_dtype, dt);
        check_bound(&m, &s, "");
        /* the values really change: not every one survives */
        const tspec *fc = find(&s, "h.1.mlp.c_fc.weight");
        bool changed = false;
        for (size_t k = 0; k < C; k++)
            for (size_t n = 0; n < 4 * C; n++)
                changed |= panel_at(m.layers[1].fc_wp, dt, C, k, n) !=
                           expected(fc, k * 4 * C + n);
        ck_assert_msg(changed, "%s: %s kept every value", dtypes[i],
                      model_dtype_name(want));
        size_t vectors = L * (4 * C + 3 * C + C + 4 * C + C) + 2 * C;
        ck_assert_uint_eq(m.weight_bytes,
                          17 * (L * 12 * C * C + V * C) / 16 + 4 * vectors);
        model_free(&m);
    }
}
END_TEST

/* A weight int8's half scales cannot reach is refused, naming the tensor;
 * float32 loads the same file. */
START_TEST(test_int8_refuses_a_weight_beyond_its_scales)
{
    spec s;
    gpt2_spec(&s, "");
    find(&s, "h.1.attn.c_proj.weight")->scale = 2e7f; /* up to 1.3e7 */
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    model m;
    gpt2d_error err = { { 0 } };
    for (int q8 = 0; q8 <= 1; q8++) {
        const model_dtype d = q8 ? MODEL_DTYPE_Q8 : MODEL_DTYPE_INT8;
        char want[64];
        snprintf(want, sizeof want, "which --dtype %s cannot",
                 model_dtype_name(d));
        ck_assert_int_eq(model_load(&m, tmpdir, d, &err), -1);
        ck_assert_msg(strstr(err.message, "'h.1.attn.c_proj.weight'") != NULL &&
                          strstr(err.message, want) != NULL,
                      "%s", err.message);
    }
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_FLOAT32, &err) == 0, "%s",
                  err.message);
    model_free(&m);
}
END_TEST

/* auto keeps an all-F16 checkpoint's matrices as halves (exact), and
 * float32 widens them; a checkpoint with any other dtype loads as floats. */
START_TEST(test_auto_dtype_follows_the_checkpoint)
{
    spec s;
    gpt2_spec(&s, "");
    for (size_t i = 0; i < s.n; i++)
        s.t[i].dtype = "F16";
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(m.dtype, MODEL_DTYPE_FLOAT16);
    ck_assert_int_eq(m.panel_dtype, PANEL_F16);
    check_bound(&m, &s, "");
    /* every weight is held once: only wpe and the vectors are widened, the
     * matrices (and the tied wte) live only in the panels */
    const size_t wpe_and_vectors = T * C + L * 13 * C + 2 * C;
    ck_assert_uint_eq(m.n_widened, wpe_and_vectors);
    model_free(&m);
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_FLOAT32, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(m.panel_dtype, PANEL_F32);
    check_bound(&m, &s, "");
    ck_assert_uint_eq(m.n_widened, wpe_and_vectors);
    model_free(&m);

    /* an untied model keeps wte's rows for the embedding, but lm_head only
     * as panels */
    tspec *head = add(&s, "", "lm_head.weight", V, C);
    head->dtype = "F16";
    write_safetensors(tmpdir, &s, 0);
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_FLOAT32, &err) == 0, "%s",
                  err.message);
    ck_assert(!m.tied);
    check_bound(&m, &s, "");
    check_vocab_panels(m.lm_head_wp, m.panel_dtype, head);
    ck_assert_uint_eq(m.n_widened, wpe_and_vectors + V * C);
    model_free(&m);
    s.n--;

    find(&s, "ln_f.bias")->dtype = "F32";
    write_safetensors(tmpdir, &s, 0);
    ck_assert_msg(model_load(&m, tmpdir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(m.dtype, MODEL_DTYPE_FLOAT32);
    model_free(&m);
}
END_TEST

START_TEST(test_dtype_names_parse_and_print)
{
    model_dtype d = MODEL_DTYPE_AUTO;
    ck_assert_int_eq(model_dtype_parse("float16", &d), 0);
    ck_assert_int_eq(d, MODEL_DTYPE_FLOAT16);
    ck_assert_int_eq(model_dtype_parse("float32", &d), 0);
    ck_assert_int_eq(d, MODEL_DTYPE_FLOAT32);
    ck_assert_int_eq(model_dtype_parse("auto", &d), 0);
    ck_assert_int_eq(d, MODEL_DTYPE_AUTO);
    ck_assert_int_eq(model_dtype_parse("fp16", &d), -1);
    ck_assert_int_eq(model_dtype_parse("", &d), -1);
    ck_assert_int_eq(d, MODEL_DTYPE_AUTO);
    ck_assert_int_eq(model_dtype_parse("int8", &d), 0);
    ck_assert_int_eq(d, MODEL_DTYPE_INT8);
    ck_assert_int_eq(model_dtype_parse("q8_0", &d), -1);
    ck_assert_int_eq(model_dtype_parse("q8", &d), 0);
    ck_assert_int_eq(d, MODEL_DTYPE_Q8);
    ck_assert_str_eq(model_dtype_name(MODEL_DTYPE_Q8), "q8");
    ck_assert_str_eq(model_dtype_name(MODEL_DTYPE_FLOAT16), "float16");
    ck_assert_str_eq(model_dtype_name(MODEL_DTYPE_FLOAT32), "float32");
    ck_assert_str_eq(model_dtype_name(MODEL_DTYPE_INT8), "int8");
}
END_TEST

START_TEST(test_refuses_missing_or_non_directory)
{
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(
        model_load(&m, "/nonexistent/gpt2d-model", MODEL_DTYPE_AUTO, &err), -1);
    ck_assert_str_eq(err.message,
                     "/nonexistent/gpt2d-model: No such file or directory");
    write_text(tmpdir, "config.json", VALID_CONFIG);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    ck_assert_int_eq(model_load(&m, path, MODEL_DTYPE_AUTO, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "not a directory"));
}
END_TEST

START_TEST(test_refuses_bad_config)
{
    expect_refused("config.json: No such file or directory");
    write_text(tmpdir, "config.json", "{\"n_layer\": 2,");
    expect_refused("config.json: not valid JSON");
    write_text(tmpdir, "config.json", "[]");
    expect_refused("config.json: not a JSON object");
    write_text(
        tmpdir, "config.json",
        "{\"n_layer\": 2, \"n_head\": 2, \"n_positions\": 4, \"vocab_size\": 10}");
    expect_refused("config.json: missing \"n_embd\"");
    write_text(
        tmpdir, "config.json",
        "{\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 8, \"n_positions\": 4, \"vocab_size\": 10}");
    expect_refused("n_embd 8 is not a multiple of n_head 3");
    write_text(
        tmpdir, "config.json",
        "{\"n_layer\": -2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 4, \"vocab_size\": 10}");
    expect_refused("\"n_layer\" must be an integer");
    write_text(
        tmpdir, "config.json",
        "{\"model_type\": \"llama\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 4, \"vocab_size\": 10}");
    expect_refused("model_type is not \"gpt2\"");
    write_text(
        tmpdir, "config.json",
        "{\"activation_function\": \"relu\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 4, \"vocab_size\": 10}");
    expect_refused("activation_function");
}
END_TEST

START_TEST(test_refuses_missing_empty_or_truncated_weights)
{
    write_text(tmpdir, "config.json", VALID_CONFIG);
    expect_refused("model.safetensors: No such file or directory");
    write_text(tmpdir, "model.safetensors", "");
    expect_refused("model.safetensors: file is empty");
    spec s;
    gpt2_spec(&s, "");
    write_safetensors(tmpdir, &s, 16);
    expect_refused("outside the");
    static const char not_json[] = "\x10\0\0\0\0\0\0\0{not json}      ";
    write_bytes(tmpdir, "model.safetensors", not_json, sizeof not_json - 1);
    expect_refused("header is not valid JSON");
}
END_TEST

START_TEST(test_refuses_missing_tensor_naming_it)
{
    spec s;
    gpt2_spec(&s, "");
    drop(&s, "h.1.mlp.c_fc.bias");
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    expect_refused("missing tensor 'h.1.mlp.c_fc.bias'");
    gpt2_spec(&s, "");
    drop(&s, "wte.weight");
    write_safetensors(tmpdir, &s, 0);
    expect_refused("missing tensor 'wte.weight'");
}
END_TEST

START_TEST(test_refuses_wrong_shape_naming_both_shapes)
{
    spec s;
    gpt2_spec(&s, "");
    tspec *t = find(&s, "h.0.attn.c_attn.weight");
    t->shape[0] = 3 * C; /* stored [out, in]: a transposed export */
    t->shape[1] = C;
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    expect_refused(
        "tensor 'h.0.attn.c_attn.weight' has shape [24, 8], expected [8, 24]");
    gpt2_spec(&s, "");
    find(&s, "ln_f.weight")->shape[0] = C + 1;
    write_safetensors(tmpdir, &s, 0);
    expect_refused("tensor 'ln_f.weight' has shape [9], expected [8]");
}
END_TEST

START_TEST(test_refuses_unsupported_dtype_and_unexpected_tensor)
{
    spec s;
    gpt2_spec(&s, "");
    find(&s, "wpe.weight")->dtype = "I32";
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    expect_refused(
        "tensor 'wpe.weight' has dtype I32 (F32, F16 or BF16 needed)");
    gpt2_spec(&s, "");
    add(&s, "", "h.2.ln_1.weight", C, 0); /* a third layer the config lacks */
    write_safetensors(tmpdir, &s, 0);
    expect_refused("unexpected tensor 'h.2.ln_1.weight'");
}
END_TEST

START_TEST(test_refuses_header_that_lies_about_offsets)
{
    /* Two tensors claim the same bytes. */
    const char *header =
        "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[10,8],\"data_offsets\":[0,320]},"
        "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,128]}}";
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t hlen = strlen(header);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(hlen >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, hlen, f);
    static const uint8_t zeros[320];
    fwrite(zeros, 1, sizeof zeros, f);
    fclose(f);
    write_text(tmpdir, "config.json", VALID_CONFIG);
    expect_refused("overlap");
}
END_TEST

/* ---- the weights' digest ---- */

/* weights_digest.h's definition, computed here on one thread from the
 * file's bytes as read(): the loader's helper thread and the pieces it
 * shares with the loading thread must give the same. */
static void file_digest(const char *dir, uint8_t out[SHA256_BYTES])
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    const size_t size = (size_t)ftell(f);
    rewind(f);
    unsigned char *bytes = malloc(size);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_eq(fread(bytes, 1, size, f), size);
    fclose(f);
    static const char label[] = "gpt2d weights v1";
    uint8_t le[8];
    for (size_t b = 0; b < 8; b++)
        le[b] = (uint8_t)((uint64_t)size >> (8 * b));
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, le, sizeof le);
    for (size_t at = 0; at < size; at += WEIGHTS_DIGEST_PIECE) {
        uint8_t d[BULK_DIGEST_BYTES];
        size_t len = size - at < WEIGHTS_DIGEST_PIECE ? size - at
                                                      : WEIGHTS_DIGEST_PIECE;
        bulk_digest(bytes + at, len, d);
        sha256_update(&h, d, sizeof d);
    }
    sha256_final(&h, out);
    free(bytes);
}

static void loaded_digest(model_dtype dtype, model_matmul matmul,
                          uint8_t out[SHA256_BYTES])
{
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load_for(&m, tmpdir, dtype, matmul, &err) == 0, "%s",
                  err.message);
    memcpy(out, m.weights_digest, SHA256_BYTES);
    model_free(&m);
}

/* Flips one bit of model.safetensors at `at` bytes from its end. */
static void flip_from_end(size_t at)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -(long)at, SEEK_END), 0);
    int c = fgetc(f);
    ck_assert_int_ne(c, EOF);
    ck_assert_int_eq(fseek(f, -(long)at, SEEK_END), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* A file of several pieces (an ignored mask buffer makes it large): the
 * loader's digest is the definition's, and a byte changed in the first
 * piece (a weight), in the header (a name's spelling) or in the last
 * piece changes it. */
START_TEST(test_weights_digest_covers_every_piece_of_the_file)
{
    spec s;
    gpt2_spec(&s, "");
    const size_t rows = test_count(4096, 1700); /* 40 or 17 MiB */
    add(&s, "", "h.0.attn.bias", rows, 2560);
    write_text(tmpdir, "config.json", VALID_CONFIG);
    write_safetensors(tmpdir, &s, 0);
    uint8_t want[SHA256_BYTES], got[SHA256_BYTES], before[SHA256_BYTES];
    file_digest(tmpdir, want);
    loaded_digest(MODEL_DTYPE_FLOAT32, MODEL_MATMUL_PANELS, got);
    ck_assert(memcmp(got, want, SHA256_BYTES) == 0);

    memcpy(before, got, SHA256_BYTES);
    flip_from_end(1); /* the buffer's last byte */
    file_digest(tmpdir, want);
    loaded_digest(MODEL_DTYPE_FLOAT32, MODEL_MATMUL_PANELS, got);
    ck_assert(memcmp(got, want, SHA256_BYTES) == 0);
    ck_assert(memcmp(got, before, SHA256_BYTES) != 0);

    memcpy(before, got, SHA256_BYTES);
    find(&s, "wte.weight")->scale *= 1.0f + 1.0f / 1024; /* other weights */
    write_safetensors(tmpdir, &s, 0);
    file_digest(tmpdir, want);
    loaded_digest(MODEL_DTYPE_FLOAT32, MODEL_MATMUL_PANELS, got);
    ck_assert(memcmp(got, want, SHA256_BYTES) == 0);
    ck_assert(memcmp(got, before, SHA256_BYTES) != 0);

    memcpy(before, got, SHA256_BYTES);
    gpt2_spec(&s, "transformer."); /* the same weights, other names */
    add(&s, "transformer.", "h.0.attn.bias", rows, 2560);
    write_safetensors(tmpdir, &s, 0);
    loaded_digest(MODEL_DTYPE_FLOAT32, MODEL_MATMUL_PANELS, got);
    ck_assert(memcmp(got, before, SHA256_BYTES) != 0);
}
END_TEST

/* The digest names the file, not how it is held: --dtype and --matmul
 * are the KV cache identity's own parts (engine.c). */
START_TEST(test_weights_digest_is_the_files_whatever_the_dtype_or_backend)
{
    spec s;
    write_valid(&s, "");
    uint8_t want[SHA256_BYTES], got[SHA256_BYTES];
    file_digest(tmpdir, want);
    static const model_dtype dtypes[] = { MODEL_DTYPE_FLOAT32,
                                          MODEL_DTYPE_FLOAT16, MODEL_DTYPE_INT8,
                                          MODEL_DTYPE_Q8 };
    for (size_t i = 0; i < 4; i++) {
        loaded_digest(dtypes[i], MODEL_MATMUL_PANELS, got);
        ck_assert_msg(memcmp(got, want, SHA256_BYTES) == 0, "%s",
                      model_dtype_name(dtypes[i]));
    }
    loaded_digest(MODEL_DTYPE_FLOAT32, MODEL_MATMUL_BLAS, got);
    ck_assert(memcmp(got, want, SHA256_BYTES) == 0);
}
END_TEST

/* The generated fixture model (Python, exact HF layout, real vocabulary). */
START_TEST(test_loads_generated_tiny_model)
{
    char dir[512];
    test_data_path(dir, sizeof dir, "models/tiny");
    model m;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(model_load(&m, dir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(m.config.vocab_size, 50257);
    ck_assert_uint_eq(m.config.n_embd % m.config.n_head, 0);
    ck_assert_str_eq(m.name, "tiny");
    ck_assert(m.tied);
    model_free(&m);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("load");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, test_loads_plain_hf_names);
    tcase_add_test(tc, test_loads_transformer_prefix_and_ignores_mask_buffers);
    tcase_add_test(tc, test_lm_head_equal_to_wte_is_shared_different_is_used);
    tcase_add_test(tc, test_widens_f16_and_bf16_tensors);
    tcase_add_test(tc, test_float16_rounds_the_matrices_to_half_panels);
    tcase_add_loop_test(tc,
                        test_int8_and_q8_quantize_the_matrices_from_any_dtype,
                        0, 2); /* int8, q8 */
    tcase_add_test(tc, test_int8_refuses_a_weight_beyond_its_scales);
    tcase_add_test(tc, test_auto_dtype_follows_the_checkpoint);
    tcase_add_test(tc, test_dtype_names_parse_and_print);
    tcase_add_test(tc, test_refuses_missing_or_non_directory);
    tcase_add_test(tc, test_refuses_bad_config);
    tcase_add_test(tc, test_refuses_missing_empty_or_truncated_weights);
    tcase_add_test(tc, test_refuses_missing_tensor_naming_it);
    tcase_add_test(tc, test_refuses_wrong_shape_naming_both_shapes);
    tcase_add_test(tc, test_refuses_unsupported_dtype_and_unexpected_tensor);
    tcase_add_test(tc, test_refuses_header_that_lies_about_offsets);
    tcase_add_test(tc, test_weights_digest_covers_every_piece_of_the_file);
    tcase_add_test(
        tc, test_weights_digest_is_the_files_whatever_the_dtype_or_backend);
    suite_add_tcase(s, tc);
    TCase *fixture = tcase_create("fixture");
    tcase_add_test(fixture, test_loads_generated_tiny_model);
    suite_add_tcase(s, fixture);
    return s;
}

int main(void)
{
    return test_run_suite(model_suite());
}
