/* test_forward.c — the C forward pass against the numpy reference.
 *
 * tests/reference/make_fixtures.py writes tiny random GPT-2 models and, for
 * each, a few token sequences with the float64 reference's logits at every
 * position (format at the top of that script).  Every check here drives
 * forward_step the way the engine does — prefill chunks, single-token
 * decodes, several sequences per step — and compares the logits it asked for
 * with the reference rows at the same positions, to TOL absolute.  Each case
 * prints its largest difference so a drift is visible before it fails.
 * The reference cases run once per kernel path (g_paths: every instruction
 * set the CPU has), so the portable kernels are checked on AVX2 machines
 * too. */
#include <check.h>
#include <stdatomic.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/forward.h"
#include "kv/kvcache.h"
#include "model/model.h"
#include "core/threadpool.h"
#include "test_argmax.h"
#include "test_util.h"

#define TOL 1e-3    /* float32 C vs float64 reference, absolute */
#define MAX_ROWS 64 /* >= every fixture model's n_ctx */
#define MAX_MODELS 64

/* cases.json, parsed once in main(); the forked tests only read it. */
static json_t *g_cases;
static size_t g_n_models;
static size_t g_ctx_models[MAX_MODELS]; /* models with a "context" sequence */
static size_t g_n_ctx_models;
/* the int8 variants (those with a "dequantized" model) run */
static size_t g_int8_models[MAX_MODELS];
static size_t g_n_int8_models;
static size_t g_tiny;
/* The models the reference and limits loops run: every one, or under
 * GPT2D_TEST_QUICK those cases.json marks "quick" (each code path once:
 * the plain models and one variant of each half path). */
static size_t g_run_models[MAX_MODELS];
static size_t g_n_run_models;

/* ---- fixtures ---- */

typedef struct fx_seq {
    char name[64];
    int32_t *tokens;
    size_t n;
    float *logits; /* [n][vocab]: row i predicts token i+1 */
    size_t prompt_len;
    bool greedy;
} fx_seq;

static json_t *fx_model_json(size_t idx)
{
    json_t *models = json_object_get(g_cases, "models");
    /* no ck_assert here: main() calls this before any test runs */
    return json_array_get(models, idx);
}

static const char *fx_model_name(size_t idx)
{
    return json_string_value(json_object_get(fx_model_json(idx), "name"));
}

/* The kernel paths every reference test runs, each on every model: the
 * panel products under each instruction set this CPU has (cpu.h), and
 * OpenBLAS's sgemm (--matmul blas) beside the best attention kernels. */
typedef struct kernel_path {
    char name[32];
    model_matmul matmul;
    cpu_isa isa;
} kernel_path;
static kernel_path g_paths[CPU_ISA_COUNT + 1];
static size_t g_n_paths;

static size_t ref_model(int i)
{
    return g_run_models[(size_t)i % g_n_run_models];
}

static const kernel_path *ref_path(int i)
{
    return &g_paths[(size_t)i / g_n_run_models];
}

/* "model/path", for the case names. */
static const char *ref_name_of(size_t model_idx, const kernel_path *path)
{
    static char name[128];
    snprintf(name, sizeof name, "%s/%s", fx_model_name(model_idx), path->name);
    return name;
}

static const char *ref_name(int i)
{
    return ref_name_of(ref_model(i), ref_path(i));
}

static bool model_is_q8(size_t idx)
{
    const char *load = json_string_value(
        json_object_get(fx_model_json(idx), "load_dtype"));
    return load != NULL && strcmp(load, "q8") == 0;
}

/* Whether `path` runs, for model idx, exactly the kernels of the path
 * below it: a VNNI level differs from the level under it in q8's products
 * alone, so the other models are not run there twice. */
static bool path_repeats_another(size_t idx, const kernel_path *path)
{
    const bool vnni = path->isa == CPU_ISA_AVX2_VNNI ||
                      path->isa == CPU_ISA_AVX512_VNNI;
    if (path->matmul != MODEL_MATMUL_PANELS || !vnni || model_is_q8(idx))
        return false;
    printf("%s/%s: the kernels of the level below\n", fx_model_name(idx),
           path->name);
    return true;
}

/* The sequences the per-sequence loops check: all, or under GPT2D_TEST_QUICK
 * the first ("prompt") alone; "greedy" and "context" still run in the tests
 * that name them. */
static size_t fx_n_seqs(size_t idx)
{
    size_t n = json_array_size(
        json_object_get(fx_model_json(idx), "sequences"));
    return test_count(n, n > 0 ? 1 : 0);
}

static void fx_seq_load(size_t model_idx, size_t seq_idx, size_t vocab,
                        fx_seq *s)
{
    json_t *sj = json_array_get(
        json_object_get(fx_model_json(model_idx), "sequences"), seq_idx);
    ck_assert_ptr_nonnull(sj);
    json_t *toks = json_object_get(sj, "tokens");
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s",
             json_string_value(json_object_get(sj, "name")));
    s->n = json_array_size(toks);
    ck_assert_uint_gt(s->n, 0);
    s->prompt_len = (size_t)json_integer_value(
        json_object_get(sj, "prompt_len"));
    s->greedy = json_is_true(json_object_get(sj, "greedy"));
    s->tokens = malloc(s->n * sizeof *s->tokens);
    s->logits = malloc(s->n * vocab * sizeof *s->logits);
    ck_assert(s->tokens != NULL && s->logits != NULL);
    for (size_t i = 0; i < s->n; i++)
        s->tokens[i] = (int32_t)json_integer_value(json_array_get(toks, i));

    char path[4096];
    test_data_path(path, sizeof path,
                   json_string_value(json_object_get(sj, "logits")));
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t got = fread(s->logits, sizeof(float), s->n * vocab, f);
    int extra = fgetc(f);
    fclose(f);
    ck_assert_msg(got == s->n * vocab && extra == EOF,
                  "%s: expected %zu x %zu float32", path, s->n, vocab);
}

/* Index of the sequence named `name`, or SIZE_MAX. */
static size_t fx_seq_find(size_t model_idx, const char *name)
{
    json_t *seqs = json_object_get(fx_model_json(model_idx), "sequences");
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        const char *n = json_string_value(
            json_object_get(json_array_get(seqs, i), "name"));
        if (n != NULL && strcmp(n, name) == 0)
            return i;
    }
    return SIZE_MAX;
}

static void fx_seq_free(fx_seq *s)
{
    free(s->tokens);
    free(s->logits);
}

/* ---- the engine side: model, pool, scratch state ---- */

typedef struct harness {
    model m;
    bool kv_half; /* the case's KV cache holds halves */
    kv_cache *kv; /* made by the first slot_open */
    threadpool *pool;
    forward_state *st;
    size_t vocab;
    gpt2d_error err;
} harness;

/* The rest of opening a harness whose model h->m is loaded: the KV cache
 * dtype of model `model_idx`, a pool and a forward state on `path`'s
 * instruction set (NULL: the default). */
static void harness_start(harness *h, size_t model_idx, const kernel_path *path,
                          size_t threads, size_t max_rows)
{
    const char *kv = json_string_value(
        json_object_get(fx_model_json(model_idx), "load_kv_dtype"));
    ck_assert_msg(kv != NULL && (strcmp(kv, "float32") == 0 ||
                                 strcmp(kv, "float16") == 0),
                  "model %zu: bad load_kv_dtype", model_idx);
    h->kv_half = strcmp(kv, "float16") == 0;
    h->vocab = h->m.config.vocab_size;
    ck_assert_uint_eq(h->vocab, (size_t)json_integer_value(json_object_get(
                                    fx_model_json(model_idx), "vocab_size")));
    ck_assert_msg(threadpool_create(&h->pool, threads, &h->err) == 0,
                  "threadpool_create: %s", h->err.message);
    ck_assert_msg(
        forward_state_create(&h->st, &h->m, max_rows, threads, &h->err) == 0,
        "forward_state_create: %s", h->err.message);
    if (path != NULL)
        ck_assert_msg(forward_state_set_isa(h->st, path->isa, &h->err) == 0,
                      "forward_state_set_isa: %s", h->err.message);
}

/* Opens model `model_idx` for `path` (NULL: panels, the default ISA).
 * False when the path cannot hold the model as the case loads it (half or
 * int8 panels under blas): that refusal, and its message, are then
 * asserted. */
static bool harness_open_path(harness *h, size_t model_idx,
                              const kernel_path *path, size_t threads,
                              size_t max_rows)
{
    char dir[4096];
    memset(h, 0, sizeof *h);
    test_data_path(
        dir, sizeof dir,
        json_string_value(json_object_get(fx_model_json(model_idx), "dir")));
    model_dtype dtype;
    const char *load = json_string_value(
        json_object_get(fx_model_json(model_idx), "load_dtype"));
    ck_assert_msg(load != NULL && model_dtype_parse(load, &dtype) == 0,
                  "model %zu: bad load_dtype", model_idx);
    const model_matmul mm = path != NULL ? path->matmul : MODEL_MATMUL_PANELS;
    if (mm == MODEL_MATMUL_BLAS && model_dtype_needs_panels(dtype)) {
        ck_assert_int_eq(model_load_for(&h->m, dir, dtype, mm, &h->err), -1);
        ck_assert_msg(strstr(h->err.message, load) != NULL &&
                          strstr(h->err.message, "panels") != NULL,
                      "%s", h->err.message);
        printf("%s under blas: refused: %s\n", fx_model_name(model_idx),
               h->err.message);
        return false;
    }
    ck_assert_msg(model_load_for(&h->m, dir, dtype, mm, &h->err) == 0,
                  "model_load %s: %s", dir, h->err.message);
    ck_assert_int_eq(h->m.matmul, mm);
    /* auto picks half panels exactly for an F16 checkpoint; blas widens
     * it to float32 */
    const char *stored = json_string_value(
        json_object_get(fx_model_json(model_idx), "dtype"));
    model_dtype want = dtype != MODEL_DTYPE_AUTO ? dtype
                       : strcmp(stored, "F16") == 0 && mm == MODEL_MATMUL_PANELS
                           ? MODEL_DTYPE_FLOAT16
                           : MODEL_DTYPE_FLOAT32;
    ck_assert_int_eq(h->m.dtype, want);
    ck_assert_int_eq(h->m.panel_dtype, want == MODEL_DTYPE_Q8     ? PANEL_Q8DOT
                                       : want == MODEL_DTYPE_INT8 ? PANEL_Q8
                                       : want == MODEL_DTYPE_FLOAT16
                                           ? PANEL_F16
                                           : PANEL_F32);
    harness_start(h, model_idx, path, threads, max_rows);
    return true;
}

/* The default path: panels, the best instruction set (or a forced one:
 * cpu_isa_force). */
static void harness_open(harness *h, size_t model_idx, size_t threads,
                         size_t max_rows)
{
    ck_assert(harness_open_path(h, model_idx, NULL, threads, max_rows));
}

static void harness_close(harness *h)
{
    kvcache_free(h->kv);
    forward_state_free(h->st);
    threadpool_destroy(h->pool);
    model_free(&h->m);
}

/* One sequence of the tests: a KV-cache sequence of the harness's cache,
 * reserved for the full context.  Sequences of one test take their blocks
 * from the same pool as they grow, interleaved, so every step reads its
 * keys and values through a block table that is not contiguous. */
typedef struct test_slot {
    harness *h;
    size_t seq;
} test_slot;

/* What a test hands a step: the sequence, its new tokens, logits wanted. */
typedef struct step_seq {
    test_slot *kv;
    const int32_t *tokens;
    size_t n_tokens, n_logits;
} step_seq;

static void slot_open(harness *h, test_slot *slot)
{
    if (h->kv == NULL) {
        const model_config *mc = &h->m.config;
        const kv_shape shape = { .n_layer = mc->n_layer,
                                 .n_head = mc->n_head,
                                 .n_embd = mc->n_embd,
                                 .n_ctx = mc->n_ctx };
        kv_cache_config kc = { .n_blocks = 8 *
                                           kvcache_blocks_per_context(&shape),
                               .max_seqs = 8,
                               .half = h->kv_half };
        static const uint8_t fingerprint[SHA256_BYTES];
        ck_assert_msg(
            kvcache_create(&h->kv, &shape, &kc, fingerprint, &h->err) == 0,
            "kvcache_create: %s", h->err.message);
    }
    static const int32_t first = 0;
    static const kv_identity nobody;
    kv_begin b = { .who = &nobody,
                   .prompt = &first,
                   .n_prompt = 1,
                   .max_total = h->m.config.n_ctx,
                   .n_seq = 1,
                   .reuse = false };
    size_t reused;
    ck_assert_int_eq(kvcache_seq_begin(h->kv, &b, &slot->seq, &reused),
                     KV_BEGUN);
    slot->h = h;
}

static size_t slot_len(const test_slot *slot)
{
    return kvcache_seq_len(slot->h->kv, slot->seq);
}

static void slot_close(test_slot *slot)
{
    kvcache_seq_end(slot->h->kv, slot->seq, 0);
}

/* The forward_seq of each step_seq; with `grow`, room is made for the new
 * tokens first (a step that must be refused gets none: it may ask for more
 * than the context). */
static forward_seq *to_forward(harness *h, const step_seq *seqs, size_t n,
                               bool grow)
{
    forward_seq *fs = calloc(n > 0 ? n : 1, sizeof *fs);
    ck_assert_ptr_nonnull(fs);
    for (size_t i = 0; i < n; i++) {
        const test_slot *t = seqs[i].kv;
        if (grow)
            kvcache_seq_grow(h->kv, t->seq, seqs[i].n_tokens);
        fs[i] = (forward_seq){ .blocks = kvcache_seq_blocks(h->kv, t->seq),
                               .pos0 = slot_len(t),
                               .tokens = seqs[i].tokens,
                               .n_tokens = seqs[i].n_tokens,
                               .n_logits = seqs[i].n_logits };
    }
    return fs;
}

static float *logits_alloc(const harness *h, size_t rows)
{
    float *p = calloc(rows * h->vocab, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Runs the step, then commits its tokens as the engine does. */
static void step_ok(harness *h, step_seq *seqs, size_t n_seqs, float *logits)
{
    h->err.message[0] = '\0';
    forward_seq *fs = to_forward(h, seqs, n_seqs, true);
    int rc = forward_step(h->st, &h->m, h->pool, kvcache_geometry(h->kv), fs,
                          n_seqs, logits, &h->err);
    ck_assert_msg(rc == 0, "forward_step failed: %s", h->err.message);
    for (size_t i = 0; i < n_seqs; i++)
        kvcache_seq_commit(h->kv, seqs[i].kv->seq, seqs[i].tokens,
                           seqs[i].n_tokens);
    free(fs);
}

static void step_refused(harness *h, step_seq *seqs, size_t n_seqs,
                         float *logits, const char *why)
{
    h->err.message[0] = '\0';
    forward_seq *fs = to_forward(h, seqs, n_seqs, false);
    int rc = forward_step(h->st, &h->m, h->pool, kvcache_geometry(h->kv), fs,
                          n_seqs, logits, &h->err);
    free(fs);
    ck_assert_msg(rc == -1, "forward_step accepted %s", why);
    ck_assert_msg(h->err.message[0] != '\0', "no message when refusing %s",
                  why);
    printf("refused %s: %s\n", why, h->err.message);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* also catches NaN */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* --dtype q8 rounds every product's inputs to integers.  Where one lies
 * within float32's rounding of a half-way point, the reference (float64)
 * and a float32 pass round it apart: a flip that moves the logits of its
 * row by a few hundredths.  The fixtures keep every input a few ulps from
 * those points (make_fixtures.py's Q8_MARGIN), which leaves 2 rows of
 * all the q8 sequences flipped; so under q8 up to one row in eight (at
 * least one) may pass TOL, by at most Q8_FLIP_TOL: a product quantized
 * wrongly, or not at all, moves every row. */
#define Q8_FLIP_TOL 0.1

/* Compares `rows` rows of C logits with reference rows starting at `first`;
 * returns the max difference (under q8, of the rows that no flip explains,
 * above). */
static double cmp_rows(const harness *h, const float *got, const fx_seq *s,
                       size_t first, size_t rows)
{
    ck_assert_uint_le(first + rows, s->n);
    const float *want = s->logits + first * h->vocab;
    if (h->m.dtype != MODEL_DTYPE_Q8)
        return max_abs_diff(got, want, rows * h->vocab);
    double rest = 0.0, flipped = 0.0;
    size_t n_flipped = 0;
    for (size_t r = 0; r < rows; r++) {
        const double d = max_abs_diff(got + r * h->vocab, want + r * h->vocab,
                                      h->vocab);
        if (d <= TOL) {
            rest = d > rest ? d : rest;
            continue;
        }
        n_flipped++;
        flipped = d > flipped ? d : flipped; /* d is never NaN: INFINITY */
    }
    if (n_flipped == 0)
        return rest;
    printf("q8: %zu of %zu rows from %zu past TOL, by up to %.3g\n", n_flipped,
           rows, first, flipped);
    const size_t allowed = rows / 8 > 1 ? rows / 8 : 1;
    return n_flipped <= allowed && flipped <= Q8_FLIP_TOL ? rest : flipped;
}

static void report(const char *model_name, const char *seq, const char *what,
                   double diff)
{
    char name[256];
    snprintf(name, sizeof name, "%s/%s/%s", model_name, seq, what);
    printf("case %s: max |dlogit| = %.3g\n", name, diff);
    fflush(stdout);
    ck_assert_msg(diff <= TOL, "case %s: max |dlogit| = %.3g > %g", name, diff,
                  TOL);
}

/* ---- logits against the reference ---- */

START_TEST(test_prefill_last_token_logits_match_reference)
{
    harness h;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    for (size_t q = 0; q < fx_n_seqs(ref_model(_i)); q++) {
        fx_seq s;
        test_slot slot;
        fx_seq_load(ref_model(_i), q, h.vocab, &s);
        slot_open(&h, &slot);
        float *out = logits_alloc(&h, 1);
        step_seq fs = { &slot, s.tokens, s.n, 1 };
        step_ok(&h, &fs, 1, out);
        ck_assert_uint_eq(slot_len(&slot), s.n);
        report(ref_name(_i), s.name, "prefill",
               cmp_rows(&h, out, &s, s.n - 1, 1));
        free(out);
        slot_close(&slot);
        fx_seq_free(&s);
    }
    harness_close(&h);
}
END_TEST

START_TEST(test_echo_logits_for_every_prompt_position)
{
    harness h;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    for (size_t q = 0; q < fx_n_seqs(ref_model(_i)); q++) {
        fx_seq s;
        test_slot slot;
        fx_seq_load(ref_model(_i), q, h.vocab, &s);
        slot_open(&h, &slot);
        float *out = logits_alloc(&h, s.n);
        step_seq fs = { &slot, s.tokens, s.n, s.n };
        step_ok(&h, &fs, 1, out);
        report(ref_name(_i), s.name, "echo", cmp_rows(&h, out, &s, 0, s.n));
        free(out);
        slot_close(&slot);
        fx_seq_free(&s);
    }
    harness_close(&h);
}
END_TEST

/* The KV-cache path: a short prefill, then one token per step; every step's
 * logits must equal the reference's full recompute at that position. */
START_TEST(test_decode_token_by_token_equals_full_recompute)
{
    harness h;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    for (size_t q = 0; q < fx_n_seqs(ref_model(_i)); q++) {
        fx_seq s;
        test_slot slot;
        fx_seq_load(ref_model(_i), q, h.vocab, &s);
        slot_open(&h, &slot);
        float *out = logits_alloc(&h, 1);
        size_t pre = s.n < 3 ? 1 : 3;
        step_seq fs = { &slot, s.tokens, pre, 1 };
        step_ok(&h, &fs, 1, out);
        double worst = cmp_rows(&h, out, &s, pre - 1, 1);
        for (size_t i = pre; i < s.n; i++) {
            step_seq one = { &slot, s.tokens + i, 1, 1 };
            step_ok(&h, &one, 1, out);
            ck_assert_uint_eq(slot_len(&slot), i + 1);
            double d = cmp_rows(&h, out, &s, i, 1);
            worst = d > worst ? d : worst;
        }
        report(ref_name(_i), s.name, "decode", worst);
        free(out);
        slot_close(&slot);
        fx_seq_free(&s);
    }
    harness_close(&h);
}
END_TEST

/* A prompt prefilled in chunks of uneven sizes, asking all, one or no logits
 * per chunk in turn. */
START_TEST(test_prefill_in_uneven_chunks_matches_reference)
{
    static const size_t sizes[] = { 1, 4, 2, 7, 3, 11, 5 };
    harness h;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    for (size_t q = 0; q < fx_n_seqs(ref_model(_i)); q++) {
        fx_seq s;
        test_slot slot;
        fx_seq_load(ref_model(_i), q, h.vocab, &s);
        slot_open(&h, &slot);
        float *out = logits_alloc(&h, s.n);
        double worst = 0.0;
        size_t at = 0;
        for (size_t c = 0; at < s.n; c++) {
            size_t n = sizes[c % (sizeof sizes / sizeof sizes[0])];
            if (n > s.n - at)
                n = s.n - at;
            size_t want = c % 3 == 0 ? n : c % 3 == 1 ? 1 : 0;
            if (at + n == s.n && want == 0)
                want = 1;
            step_seq fs = { &slot, s.tokens + at, n, want };
            step_ok(&h, &fs, 1, out);
            at += n;
            ck_assert_uint_eq(slot_len(&slot), at);
            if (want > 0) {
                double d = cmp_rows(&h, out, &s, at - want, want);
                worst = d > worst ? d : worst;
            }
        }
        report(ref_name(_i), s.name, "chunks", worst);
        free(out);
        slot_close(&slot);
        fx_seq_free(&s);
    }
    harness_close(&h);
}
END_TEST

/* One step mixing a prefill chunk (from a nonzero position), decode rows of
 * two sequences at different positions and a fresh prefill with no logits;
 * the next step proves the no-logits prefill filled its cache. */
START_TEST(test_batch_mixes_prefill_chunk_and_decodes)
{
    harness h;
    fx_seq p, g;
    test_slot a, b, c, d;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    fx_seq_load(ref_model(_i), fx_seq_find(ref_model(_i), "prompt"), h.vocab,
                &p);
    fx_seq_load(ref_model(_i), fx_seq_find(ref_model(_i), "greedy"), h.vocab,
                &g);
    ck_assert_uint_ge(p.n, 16);
    ck_assert_uint_ge(g.n, 10);
    slot_open(&h, &a);
    slot_open(&h, &b);
    slot_open(&h, &c);
    slot_open(&h, &d);
    float *out = logits_alloc(&h, MAX_ROWS);
    double worst = 0.0, x;

    /* step 1: three prefills of different lengths */
    step_seq s1[] = {
        { &a, p.tokens, 4, 0 },
        { &b, g.tokens, 9, 2 },
        { &c, p.tokens, 13, 1 },
    };
    step_ok(&h, s1, 3, out);
    x = cmp_rows(&h, out, &g, 7, 2);
    worst = x > worst ? x : worst;
    x = cmp_rows(&h, out + 2 * h.vocab, &p, 12, 1);
    worst = x > worst ? x : worst;

    /* step 2: decode b (pos 9), chunk of a (pos 4..14), decode c (pos 13),
     * prefill d without logits */
    step_seq s2[] = {
        { &b, g.tokens + 9, 1, 1 },
        { &a, p.tokens + 4, 11, 11 },
        { &c, p.tokens + 13, 1, 1 },
        { &d, g.tokens, 5, 0 },
    };
    step_ok(&h, s2, 4, out);
    x = cmp_rows(&h, out, &g, 9, 1);
    worst = x > worst ? x : worst;
    x = cmp_rows(&h, out + 1 * h.vocab, &p, 4, 11);
    worst = x > worst ? x : worst;
    x = cmp_rows(&h, out + 12 * h.vocab, &p, 13, 1);
    worst = x > worst ? x : worst;
    ck_assert_uint_eq(slot_len(&a), 15);
    ck_assert_uint_eq(slot_len(&b), 10);
    ck_assert_uint_eq(slot_len(&c), 14);
    ck_assert_uint_eq(slot_len(&d), 5);

    /* step 3: d and a continue */
    step_seq s3[] = {
        { &d, g.tokens + 5, 1, 1 },
        { &a, p.tokens + 15, 1, 1 },
    };
    step_ok(&h, s3, 2, out);
    x = cmp_rows(&h, out, &g, 5, 1);
    worst = x > worst ? x : worst;
    x = cmp_rows(&h, out + h.vocab, &p, 15, 1);
    worst = x > worst ? x : worst;

    report(ref_name(_i), "prompt+greedy", "mixed-batch", worst);
    free(out);
    slot_close(&a);
    slot_close(&b);
    slot_close(&c);
    slot_close(&d);
    fx_seq_free(&p);
    fx_seq_free(&g);
    harness_close(&h);
}
END_TEST

/* Greedy decoding driven by the C logits alone: prefill the prompt, then
 * feed back the argmax each step.  The reference kept every argmax margin at
 * least 10 x TOL, so the tokens must agree exactly. */
START_TEST(test_greedy_generation_matches_reference_tokens)
{
    harness h;
    fx_seq s;
    test_slot slot;
    if (path_repeats_another(ref_model(_i), ref_path(_i)) ||
        !harness_open_path(&h, ref_model(_i), ref_path(_i), 2, MAX_ROWS))
        return;
    fx_seq_load(ref_model(_i), fx_seq_find(ref_model(_i), "greedy"), h.vocab,
                &s);
    ck_assert(s.greedy);
    slot_open(&h, &slot);
    float *out = logits_alloc(&h, 1);
    step_seq fs = { &slot, s.tokens, s.prompt_len, 1 };
    step_ok(&h, &fs, 1, out);
    double worst = 0.0;
    for (size_t pos = s.prompt_len; pos < s.n; pos++) {
        double d = cmp_rows(&h, out, &s, pos - 1, 1);
        worst = d > worst ? d : worst;
        int32_t tok = (int32_t)argmax(out, h.vocab);
        ck_assert_msg(
            tok == s.tokens[pos], "%s: generated token %zu is %d, reference %d",
            ref_name(_i), pos - s.prompt_len, (int)tok, (int)s.tokens[pos]);
        step_seq one = { &slot, &tok, 1, 1 };
        step_ok(&h, &one, 1, out);
    }
    worst = fmax(worst, cmp_rows(&h, out, &s, s.n - 1, 1));
    report(ref_name(_i), s.name, "greedy", worst);
    free(out);
    slot_close(&slot);
    fx_seq_free(&s);
    harness_close(&h);
}
END_TEST

/* ---- the context limit and refused steps ---- */

START_TEST(test_fill_to_n_ctx_then_one_more_token_refused)
{
    size_t mi = g_ctx_models[_i];
    harness h;
    fx_seq s;
    test_slot slot, other;
    harness_open(&h, mi, 2, MAX_ROWS);
    fx_seq_load(mi, fx_seq_find(mi, "context"), h.vocab, &s);
    size_t n_ctx = h.m.config.n_ctx;
    ck_assert_uint_eq(s.n, n_ctx);
    ck_assert_uint_le(n_ctx, MAX_ROWS);
    slot_open(&h, &slot);
    slot_open(&h, &other);
    float *out = logits_alloc(&h, n_ctx);

    /* n_ctx - 2 tokens, then asking 3 more is refused and changes nothing */
    step_seq fs = { &slot, s.tokens, n_ctx - 2, 1 };
    step_ok(&h, &fs, 1, out);
    double worst = cmp_rows(&h, out, &s, n_ctx - 3, 1);
    step_seq over = { &slot, s.tokens + n_ctx - 2, 3, 1 };
    step_refused(&h, &over, 1, out, "a step past n_ctx");
    ck_assert_uint_eq(slot_len(&slot), n_ctx - 2);

    /* a batch where only the second sequence overflows: nothing moves */
    step_seq mixed[] = {
        { &other, s.tokens, 4, 1 },
        { &slot, s.tokens + n_ctx - 2, 3, 1 },
    };
    step_refused(&h, mixed, 2, out, "a batch with one sequence past n_ctx");
    ck_assert_uint_eq(slot_len(&other), 0);
    ck_assert_uint_eq(slot_len(&slot), n_ctx - 2);

    /* exactly n_ctx works, and the cache was not disturbed */
    step_seq last = { &slot, s.tokens + n_ctx - 2, 2, 2 };
    step_ok(&h, &last, 1, out);
    ck_assert_uint_eq(slot_len(&slot), n_ctx);
    worst = fmax(worst, cmp_rows(&h, out, &s, n_ctx - 2, 2));

    /* one more token is refused */
    step_seq extra = { &slot, s.tokens, 1, 1 };
    step_refused(&h, &extra, 1, out, "token n_ctx + 1");
    ck_assert_uint_eq(slot_len(&slot), n_ctx);

    /* a full-context prompt in one step (echo) also works */
    slot_close(&other);
    slot_open(&h, &other);
    step_seq whole = { &other, s.tokens, n_ctx, n_ctx };
    step_ok(&h, &whole, 1, out);
    worst = fmax(worst, cmp_rows(&h, out, &s, 0, n_ctx));

    report(fx_model_name(mi), s.name, "fill-n_ctx", worst);
    free(out);
    slot_close(&slot);
    slot_close(&other);
    fx_seq_free(&s);
    harness_close(&h);
}
END_TEST

START_TEST(test_out_of_range_token_refused)
{
    harness h;
    fx_seq s;
    test_slot a, b;
    harness_open(&h, g_tiny, 2, MAX_ROWS);
    fx_seq_load(g_tiny, fx_seq_find(g_tiny, "prompt"), h.vocab, &s);
    slot_open(&h, &a);
    slot_open(&h, &b);
    float *out = logits_alloc(&h, 4);

    int32_t too_big[] = { 5, (int32_t)h.vocab };
    int32_t negative[] = { -1 };
    step_seq fs = { &a, too_big, 2, 1 };
    step_refused(&h, &fs, 1, out, "token id == vocab_size");
    step_seq neg = { &a, negative, 1, 1 };
    step_refused(&h, &neg, 1, out, "token id -1");
    step_seq batch[] = {
        { &b, s.tokens, 3, 1 },
        { &a, too_big, 2, 1 },
    };
    step_refused(&h, batch, 2, out, "a batch with one bad token id");
    ck_assert_uint_eq(slot_len(&a), 0);
    ck_assert_uint_eq(slot_len(&b), 0);

    /* both slots still work from position 0 */
    step_seq good[] = {
        { &a, s.tokens, 3, 1 },
        { &b, s.tokens, 4, 1 },
    };
    step_ok(&h, good, 2, out);
    double worst = fmax(cmp_rows(&h, out, &s, 2, 1),
                        cmp_rows(&h, out + h.vocab, &s, 3, 1));
    report(fx_model_name(g_tiny), s.name, "after-bad-token", worst);
    free(out);
    slot_close(&a);
    slot_close(&b);
    fx_seq_free(&s);
    harness_close(&h);
}
END_TEST

/* A step stopped by its abandon flag (the engine's background steps, for
 * an interactive request) says so, and leaves nothing behind: the
 * sequence's length is unchanged once it gives back its room, and the
 * same step run again gives the bits a sequence never stopped gives. */
START_TEST(test_abandoned_step_changes_nothing)
{
    harness h;
    fx_seq s;
    test_slot stopped, plain;
    harness_open(&h, g_tiny, 2, MAX_ROWS);
    fx_seq_load(g_tiny, fx_seq_find(g_tiny, "prompt"), h.vocab, &s);
    ck_assert_uint_ge(s.n, 5);
    slot_open(&h, &stopped);
    slot_open(&h, &plain);
    float *a = logits_alloc(&h, 2), *b = logits_alloc(&h, 2);
    step_seq first[] = { { &stopped, s.tokens, 3, 1 },
                         { &plain, s.tokens, 3, 1 } };
    step_ok(&h, first, 2, a);

    atomic_bool abandon;
    atomic_init(&abandon, true);
    forward_state_set_abandon(h.st, &abandon);
    step_seq next = { &stopped, s.tokens + 3, 2, 2 };
    forward_seq *fs = to_forward(&h, &next, 1, true);
    ck_assert_int_eq(forward_step(h.st, &h.m, h.pool, kvcache_geometry(h.kv),
                                  fs, 1, a, &h.err),
                     FORWARD_ABANDONED);
    free(fs);
    kvcache_seq_trim(h.kv, stopped.seq);
    ck_assert_uint_eq(slot_len(&stopped), 3);

    atomic_store(&abandon, false);
    step_ok(&h, &next, 1, a);
    forward_state_set_abandon(h.st, NULL);
    step_seq same = { &plain, s.tokens + 3, 2, 2 };
    step_ok(&h, &same, 1, b);
    ck_assert_uint_eq(slot_len(&stopped), 5);
    ck_assert_msg(memcmp(a, b, 2 * h.vocab * sizeof *a) == 0,
                  "a step run again after it was stopped gave other bits");
    free(a);
    free(b);
    slot_close(&stopped);
    slot_close(&plain);
    fx_seq_free(&s);
    harness_close(&h);
}
END_TEST

START_TEST(test_more_rows_than_max_rows_refused)
{
    harness h;
    fx_seq s;
    test_slot a, b;
    harness_open(&h, g_tiny, 2, 8);
    fx_seq_load(g_tiny, fx_seq_find(g_tiny, "prompt"), h.vocab, &s);
    slot_open(&h, &a);
    slot_open(&h, &b);
    float *out = logits_alloc(&h, 8);

    step_seq nine = { &a, s.tokens, 9, 1 };
    step_refused(&h, &nine, 1, out, "9 rows with max_rows 8");
    step_seq split[] = {
        { &a, s.tokens, 5, 1 },
        { &b, s.tokens, 4, 1 },
    };
    step_refused(&h, split, 2, out, "5 + 4 rows with max_rows 8");
    ck_assert_uint_eq(slot_len(&a), 0);
    ck_assert_uint_eq(slot_len(&b), 0);

    step_seq eight[] = {
        { &a, s.tokens, 5, 5 },
        { &b, s.tokens, 3, 3 },
    };
    step_ok(&h, eight, 2, out);
    double worst = fmax(cmp_rows(&h, out, &s, 0, 5),
                        cmp_rows(&h, out + 5 * h.vocab, &s, 0, 3));
    report(fx_model_name(g_tiny), s.name, "max-rows", worst);
    free(out);
    slot_close(&a);
    slot_close(&b);
    fx_seq_free(&s);
    harness_close(&h);
}
END_TEST

/* cpu_isa_force (the daemon's --isa, or GPT2D_ISA: test_settings checks
 * their names) forces the kernels a new forward_state uses; one this CPU
 * cannot run is refused with a message, never ignored. */
START_TEST(test_forced_isa_picks_the_kernels)
{
    harness h;
    forward_state *st = NULL;
    const cpu_isa best = cpu_isa_supported();
    harness_open(&h, g_tiny, 1, 4);
    ck_assert_int_eq(forward_state_isa(h.st), best);
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        ck_assert_msg(cpu_isa_force((cpu_isa)isa, &h.err) == 0, "%s",
                      h.err.message);
        ck_assert_msg(forward_state_create(&st, &h.m, 4, 1, &h.err) == 0, "%s",
                      h.err.message);
        ck_assert_int_eq(forward_state_isa(st), isa);
        forward_state_free(st);
    }
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (cpu_isa_runs((cpu_isa)isa))
            continue;
        const cpu_isa beyond = (cpu_isa)isa;
        h.err.message[0] = '\0';
        ck_assert_int_eq(cpu_isa_force(beyond, &h.err), -1);
        ck_assert_msg(strstr(h.err.message, cpu_isa_name(beyond)) != NULL, "%s",
                      h.err.message);
        ck_assert_int_eq(cpu_isa_choose(), best); /* unchanged */
    }
    ck_assert_int_eq(cpu_isa_force(best, &h.err), 0);
    harness_close(&h);
}
END_TEST

/* --matmul auto: panels where the AVX2 kernels run (not where --isa
 * forces the portable ones), blas elsewhere, panels whenever half or int8
 * weights are asked for. */
START_TEST(test_matmul_auto_follows_the_kernels)
{
    char dir[4096];
    gpt2d_error err = { { 0 } };
    model m;
    test_data_path(
        dir, sizeof dir,
        json_string_value(json_object_get(fx_model_json(g_tiny), "dir")));
    ck_assert_int_eq(cpu_isa_force(cpu_isa_supported(), &err), 0);
    ck_assert_msg(
        model_load_for(&m, dir, MODEL_DTYPE_AUTO, MODEL_MATMUL_AUTO, &err) == 0,
        "%s", err.message);
    ck_assert_int_eq(m.matmul, cpu_isa_supported() >= CPU_ISA_AVX2
                                   ? MODEL_MATMUL_PANELS
                                   : MODEL_MATMUL_BLAS);
    model_free(&m);
    ck_assert_int_eq(cpu_isa_force(CPU_ISA_PORTABLE, &err), 0);
    ck_assert_msg(
        model_load_for(&m, dir, MODEL_DTYPE_AUTO, MODEL_MATMUL_AUTO, &err) == 0,
        "%s", err.message);
    ck_assert_int_eq(m.matmul, MODEL_MATMUL_BLAS);
    ck_assert_ptr_null(m.packed); /* no panels beside */
    ck_assert_ptr_nonnull(m.lm_head_w);
    model_free(&m);
    ck_assert_msg(model_load_for(&m, dir, MODEL_DTYPE_FLOAT16,
                                 MODEL_MATMUL_AUTO, &err) == 0,
                  "%s", err.message);
    ck_assert_int_eq(m.matmul, MODEL_MATMUL_PANELS);
    ck_assert_int_eq(m.panel_dtype, PANEL_F16);
    model_free(&m);
    ck_assert_msg(
        model_load_for(&m, dir, MODEL_DTYPE_INT8, MODEL_MATMUL_AUTO, &err) == 0,
        "%s", err.message);
    ck_assert_int_eq(m.matmul, MODEL_MATMUL_PANELS);
    ck_assert_int_eq(m.panel_dtype, PANEL_Q8);
    model_free(&m);
    ck_assert_int_eq(cpu_isa_force(cpu_isa_supported(), &err), 0);
}
END_TEST

/* ---- the schedule must not change the numbers ---- */

/* Each of these runs one model three ways and compares: on every model, or
 * under GPT2D_TEST_QUICK on tiny alone (every model still runs every test
 * above, with its own widths, heads and weight formats). */
static int det_n_models(void)
{
    return test_quick() ? 1 : (int)g_n_models;
}

static size_t det_model(int i)
{
    return test_quick() ? g_tiny : (size_t)i;
}

/* Runs a fixed two-step schedule (an echo prefill of "prompt" batched with a
 * prefill of "greedy", then a decode of each) on `path` (NULL: the default)
 * and returns the packed logits (s.n + 1 + 2 rows). */
static float *run_schedule(size_t mi, const kernel_path *path, size_t threads,
                           const fx_seq *p, const fx_seq *g, double *ref_diff)
{
    harness h;
    test_slot a, b;
    ck_assert(harness_open_path(&h, mi, path, threads, MAX_ROWS));
    slot_open(&h, &a);
    slot_open(&h, &b);
    size_t n = p->n - 1;
    float *out = logits_alloc(&h, n + 3);
    step_seq s1[] = {
        { &a, p->tokens, n, n },
        { &b, g->tokens, 6, 1 },
    };
    step_ok(&h, s1, 2, out);
    step_seq s2[] = {
        { &b, g->tokens + 6, 1, 1 },
        { &a, p->tokens + n, 1, 1 },
    };
    step_ok(&h, s2, 2, out + (n + 1) * h.vocab);
    *ref_diff = fmax(
        cmp_rows(&h, out, p, 0, n),
        fmax(cmp_rows(&h, out + n * h.vocab, g, 5, 1),
             fmax(cmp_rows(&h, out + (n + 1) * h.vocab, g, 6, 1),
                  cmp_rows(&h, out + (n + 2) * h.vocab, p, n, 1))));
    slot_close(&a);
    slot_close(&b);
    harness_close(&h);
    return out;
}

START_TEST(test_thread_pools_of_1_and_2_give_same_logits)
{
    fx_seq p, g;
    size_t mi = det_model(_i);
    size_t vocab = (size_t)json_integer_value(
        json_object_get(fx_model_json(mi), "vocab_size"));
    fx_seq_load(mi, fx_seq_find(mi, "prompt"), vocab, &p);
    fx_seq_load(mi, fx_seq_find(mi, "greedy"), vocab, &g);
    size_t count = (p.n + 2) * vocab;
    double d1, d2, d3;
    float *one = run_schedule(mi, NULL, 1, &p, &g, &d1);
    float *two = run_schedule(mi, NULL, 2, &p, &g, &d2);
    float *three = run_schedule(mi, NULL, 3, &p, &g, &d3);
    double between = fmax(max_abs_diff(one, two, count),
                          max_abs_diff(one, three, count));
    bool identical = memcmp(one, two, count * sizeof(float)) == 0 &&
                     memcmp(one, three, count * sizeof(float)) == 0;
    printf("case %s/threads: pools of 1, 2, 3 differ by %.3g (%s)\n",
           fx_model_name(mi), between,
           identical ? "bit-identical" : "not bit-identical");
    report(fx_model_name(mi), "prompt+greedy", "threads",
           fmax(d1, fmax(d2, d3)));
    ck_assert_msg(identical,
                  "pool sizes change logits (max |diff| %.3g): "
                  "the panel kernels promise the same bits",
                  between);
    free(one);
    free(two);
    free(three);
    fx_seq_free(&p);
    fx_seq_free(&g);
}
END_TEST

/* Model mi on `path` (NULL: the default): a sequence's logits, prefilled
 * and then decoded alone, must be the same bits when other sequences' rows
 * share both steps (other tile shapes, other row positions in them). */
static void check_alone_or_in_batch(size_t mi, const kernel_path *path)
{
    harness h;
    fx_seq p, g;
    test_slot a, b, c;
    ck_assert(harness_open_path(&h, mi, path, 2, MAX_ROWS));
    const char *name = path != NULL ? ref_name_of(mi, path) : fx_model_name(mi);
    fx_seq_load(mi, fx_seq_find(mi, "prompt"), h.vocab, &p);
    fx_seq_load(mi, fx_seq_find(mi, "greedy"), h.vocab, &g);
    size_t n = 10;
    float *alone = logits_alloc(&h, n + 1);
    float *batch = logits_alloc(&h, 1 + n + 1 + 3);

    /* alone: prefill 10 with echo, then one decode */
    slot_open(&h, &a);
    step_seq s1 = { &a, p.tokens, n, n };
    step_ok(&h, &s1, 1, alone);
    step_seq s2 = { &a, p.tokens + n, 1, 1 };
    step_ok(&h, &s2, 1, alone + n * h.vocab);
    slot_close(&a);

    /* batched: the same sequence between others, in both steps */
    slot_open(&h, &a);
    slot_open(&h, &b);
    slot_open(&h, &c);
    step_seq pre[] = { { &c, g.tokens, 7, 0 } };
    step_ok(&h, pre, 1, batch);
    step_seq b1[] = {
        { &b, g.tokens, 5, 1 },
        { &a, p.tokens, n, n },
        { &c, g.tokens + 7, 1, 1 },
    };
    step_ok(&h, b1, 3, batch);
    step_seq b2[] = {
        { &c, g.tokens + 8, 1, 1 },
        { &b, g.tokens + 5, 1, 1 },
        { &a, p.tokens + n, 1, 1 },
    };
    step_ok(&h, b2, 3, batch + (n + 2) * h.vocab);

    size_t cnt = n * h.vocab;
    double d = fmax(
        max_abs_diff(alone, batch + h.vocab, cnt),
        max_abs_diff(alone + cnt, batch + (n + 4) * h.vocab, h.vocab));
    bool identical = memcmp(alone, batch + h.vocab, cnt * sizeof(float)) == 0 &&
                     memcmp(alone + cnt, batch + (n + 4) * h.vocab,
                            h.vocab * sizeof(float)) == 0;
    printf("case %s/batching: alone vs batched differ by %.3g (%s)\n", name, d,
           identical ? "bit-identical" : "not bit-identical");
    double ref = fmax(cmp_rows(&h, batch, &g, 4, 1),
                      cmp_rows(&h, batch + h.vocab, &p, 0, n));
    ref = fmax(ref, cmp_rows(&h, batch + (n + 1) * h.vocab, &g, 7, 1));
    ref = fmax(ref, cmp_rows(&h, batch + (n + 2) * h.vocab, &g, 8, 1));
    ref = fmax(ref, cmp_rows(&h, batch + (n + 3) * h.vocab, &g, 5, 1));
    ref = fmax(ref, cmp_rows(&h, alone, &p, 0, n + 1));
    report(name, "prompt+greedy", "batching", ref);
    ck_assert_msg(identical,
                  "%s: batching changes logits (max |diff| "
                  "%.3g): the panel kernels promise the same bits",
                  name, d);

    free(alone);
    free(batch);
    slot_close(&a);
    slot_close(&b);
    slot_close(&c);
    fx_seq_free(&p);
    fx_seq_free(&g);
    harness_close(&h);
}

START_TEST(test_sequence_alone_or_in_batch_gives_same_logits)
{
    check_alone_or_in_batch(det_model(_i), NULL);
}
END_TEST

/* A cached run starts a prompt's computation where the cache ends, a cold
 * run at 0, and the engine cuts prompts into chunks by the step's budget: a
 * position's logits must not depend on the chunk it was computed in.  The
 * longest sequence is prefilled whole, one token per step, and in uneven
 * chunks beside another sequence's decode, with logits for every position:
 * all three must be the same bits (and match the reference). */
static void check_chunking(size_t mi, const kernel_path *path)
{
    static const size_t uneven[] = { 5, 3, 11, 1, 7, 2, 13 };
    harness h;
    fx_seq s, g, tmp;
    ck_assert(harness_open_path(&h, mi, path, 2, MAX_ROWS));
    const char *name = path != NULL ? ref_name_of(mi, path) : fx_model_name(mi);
    fx_seq_load(mi, 0, h.vocab, &s);
    for (size_t q = 1; q < fx_n_seqs(mi); q++) {
        fx_seq_load(mi, q, h.vocab, &tmp);
        if (tmp.n > s.n) {
            fx_seq_free(&s);
            s = tmp;
        } else {
            fx_seq_free(&tmp);
        }
    }
    ck_assert_uint_ge(s.n, 14);
    fx_seq_load(mi, fx_seq_find(mi, "greedy"), h.vocab, &g);
    float *got[3], *out = logits_alloc(&h, MAX_ROWS);
    for (int k = 0; k < 3; k++) {
        test_slot slot, side;
        got[k] = logits_alloc(&h, s.n);
        slot_open(&h, &slot);
        slot_open(&h, &side);
        step_seq pre = { &side, g.tokens, 3, 0 };
        step_ok(&h, &pre, 1, out);
        size_t at = 0;
        for (size_t c = 0; at < s.n; c++) {
            size_t n = k == 0 ? s.n
                       : k == 1
                           ? 1
                           : uneven[c % (sizeof uneven / sizeof uneven[0])];
            n = n < s.n - at ? n : s.n - at;
            /* schedule 2 shares each step with the side sequence's decode */
            bool shared = k == 2 && slot_len(&side) < g.n;
            step_seq fs[] = { { &side, g.tokens + slot_len(&side), 1, 1 },
                              { &slot, s.tokens + at, n, n } };
            step_ok(&h, shared ? fs : fs + 1, shared ? 2 : 1, out);
            memcpy(got[k] + at * h.vocab, out + (shared ? h.vocab : 0),
                   n * h.vocab * sizeof(float));
            at += n;
        }
        ck_assert_uint_eq(slot_len(&slot), s.n);
        slot_close(&slot);
        slot_close(&side);
    }
    size_t cnt = s.n * h.vocab;
    double d = fmax(max_abs_diff(got[0], got[1], cnt),
                    max_abs_diff(got[0], got[2], cnt));
    printf("case %s/%s/chunking: whole, ones, uneven differ by %.3g\n", name,
           s.name, d);
    for (size_t pos = 0; pos < s.n; pos++)
        for (int k = 1; k < 3; k++)
            ck_assert_msg(memcmp(got[0] + pos * h.vocab, got[k] + pos * h.vocab,
                                 h.vocab * sizeof(float)) == 0,
                          "%s/%s: position %zu differs between the whole "
                          "prompt and schedule %d (max |diff| %.3g)",
                          name, s.name, pos, k, d);
    report(name, s.name, "chunking",
           fmax(cmp_rows(&h, got[0], &s, 0, s.n),
                cmp_rows(&h, got[2], &s, 0, s.n)));
    for (int k = 0; k < 3; k++)
        free(got[k]);
    free(out);
    fx_seq_free(&s);
    fx_seq_free(&g);
    harness_close(&h);
}

START_TEST(test_logits_independent_of_prompt_chunking)
{
    check_chunking(det_model(_i), NULL);
}
END_TEST

/* ---- int8 ---- */

/* Prefills all but the last 4 tokens of s with logits for every position,
 * then decodes those 4 one at a time: out gets s->n rows. */
static void echo_then_decode(harness *h, const fx_seq *s, float *out)
{
    test_slot slot;
    ck_assert_uint_gt(s->n, 4);
    slot_open(h, &slot);
    const size_t pre = s->n - 4;
    step_seq fs = { &slot, s->tokens, pre, pre };
    step_ok(h, &fs, 1, out);
    for (size_t i = pre; i < s->n; i++) {
        step_seq one = { &slot, s->tokens + i, 1, 1 };
        step_ok(h, &one, 1, out + i * h->vocab);
    }
    slot_close(&slot);
}

/* An int8 panel element is q · d, exact in float, and the kernels widen it
 * to that float: a model loaded as int8 must give, bit for bit, what the
 * same kernels give with float32 panels of its dequantized weights (a
 * checkpoint numpy quantized on its own, so this also holds the two
 * quantizers to the same bits), under every instruction set. */
START_TEST(test_int8_gives_the_bits_of_its_dequantized_floats)
{
    const size_t mi = g_int8_models[(size_t)_i % g_n_int8_models];
    const kernel_path *path = &g_paths[(size_t)_i / g_n_int8_models];
    harness q, f;
    fx_seq s;
    char dir[4096];
    ck_assert(path->matmul == MODEL_MATMUL_PANELS);
    if (path_repeats_another(mi, path))
        return;
    ck_assert(harness_open_path(&q, mi, path, 2, MAX_ROWS));
    memset(&f, 0, sizeof f);
    test_data_path(
        dir, sizeof dir,
        json_string_value(json_object_get(fx_model_json(mi), "dequantized")));
    ck_assert_msg(model_load_for(&f.m, dir, MODEL_DTYPE_FLOAT32,
                                 MODEL_MATMUL_PANELS, &f.err) == 0,
                  "model_load %s: %s", dir, f.err.message);
    ck_assert_int_eq(f.m.panel_dtype, PANEL_F32);
    harness_start(&f, mi, path, 2, MAX_ROWS);
    fx_seq_load(mi, fx_seq_find(mi, "prompt"), q.vocab, &s);
    float *got = logits_alloc(&q, s.n), *want = logits_alloc(&f, s.n);
    echo_then_decode(&q, &s, got);
    echo_then_decode(&f, &s, want);
    const size_t cnt = s.n * q.vocab;
    const double d = max_abs_diff(got, want, cnt);
    printf("case %s/%s: int8 vs float32 of the dequantized weights differ "
           "by %.3g\n",
           fx_model_name(mi), path->name, d);
    ck_assert_msg(memcmp(got, want, cnt * sizeof(float)) == 0,
                  "%s/%s: int8 logits are not the bits of the dequantized "
                  "float32 model (max |diff| %.3g)",
                  fx_model_name(mi), path->name, d);
    report(ref_name_of(mi, path), s.name, "dequantized",
           cmp_rows(&q, got, &s, 0, s.n));
    free(got);
    free(want);
    fx_seq_free(&s);
    harness_close(&q);
    harness_close(&f);
}
END_TEST

/* The determinism tests above run the default instruction set; the tiles
 * differ on each (AVX-512: up to 12 rows against two panels, AVX2: 6
 * against one, portable: none), so every model repeats them on every panel
 * path: a sequence gives the same bits alone or batched, and whatever the
 * chunks its prompt was cut into. */
/* The "paths" cases: every model under every panel path; under
 * GPT2D_TEST_QUICK (memcheck) tiny and its first int8 variant under each. */
static int paths_n_cases(void)
{
    return (int)((test_quick() ? 2 : g_n_run_models) * (g_n_paths - 1));
}

static size_t paths_model(int i)
{
    if (!test_quick())
        return ref_model(i);
    return i % 2 == 0 ? g_tiny : g_int8_models[0];
}

static const kernel_path *paths_path(int i)
{
    return test_quick() ? &g_paths[i / 2] : ref_path(i);
}

START_TEST(test_alone_batched_or_chunked_gives_same_bits_on_every_path)
{
    const size_t mi = paths_model(_i);
    const kernel_path *path = paths_path(_i);
    ck_assert(path->matmul == MODEL_MATMUL_PANELS);
    if (path_repeats_another(mi, path))
        return;
    check_alone_or_in_batch(mi, path);
    check_chunking(mi, path);
}
END_TEST

/* The AVX2 and AVX-512 tiles run the same FMA chains lane for lane, so a
 * model gives the same bits on both: a batched echo prefill and decodes
 * (tiles of 24, 15, 2 and 1 rows, partial sums carried between chunks of
 * k), and the "context" sequence's longer prefill where there is one. */
static float *vector_path_logits(size_t mi, const kernel_path *path,
                                 const fx_seq *p, const fx_seq *g,
                                 const fx_seq *ctx, size_t *count)
{
    double ref;
    float *sched = run_schedule(mi, path, 2, p, g, &ref);
    report(fx_model_name(mi), path->name, "prompt+greedy", ref);
    const size_t vocab = (size_t)json_integer_value(
        json_object_get(fx_model_json(mi), "vocab_size"));
    const size_t n_sched = (p->n + 2) * vocab;
    *count = n_sched + (p->n + (ctx != NULL ? ctx->n : 0)) * vocab;
    float *all = realloc(sched, *count * sizeof *all);
    ck_assert_ptr_nonnull(all);
    harness h;
    ck_assert(harness_open_path(&h, mi, path, 2, MAX_ROWS));
    echo_then_decode(&h, p, all + n_sched);
    if (ctx != NULL)
        echo_then_decode(&h, ctx, all + n_sched + p->n * vocab);
    harness_close(&h);
    return all;
}

START_TEST(test_avx2_and_avx512_give_the_same_bits)
{
    const size_t mi = ref_model(_i);
    const size_t vocab = (size_t)json_integer_value(
        json_object_get(fx_model_json(mi), "vocab_size"));
    const size_t ci = fx_seq_find(mi, "context");
    fx_seq p, g, ctx;
    fx_seq_load(mi, fx_seq_find(mi, "prompt"), vocab, &p);
    fx_seq_load(mi, fx_seq_find(mi, "greedy"), vocab, &g);
    if (ci != SIZE_MAX)
        fx_seq_load(mi, ci, vocab, &ctx);
    float *got[CPU_ISA_COUNT] = { NULL };
    size_t count = 0;
    for (size_t i = 0; i < g_n_paths; i++) {
        const kernel_path *path = &g_paths[i];
        if (path->matmul == MODEL_MATMUL_PANELS && path->isa >= CPU_ISA_AVX2 &&
            !path_repeats_another(mi, path))
            got[path->isa] = vector_path_logits(
                mi, path, &p, &g, ci != SIZE_MAX ? &ctx : NULL, &count);
    }
    ck_assert(got[CPU_ISA_AVX2] != NULL && got[CPU_ISA_AVX512] != NULL);
    for (int isa = CPU_ISA_AVX2 + 1; isa < CPU_ISA_COUNT; isa++) {
        if (got[isa] == NULL)
            continue;
        const double d = max_abs_diff(got[CPU_ISA_AVX2], got[isa], count);
        printf("case %s: avx2 vs %s differ by %.3g\n", fx_model_name(mi),
               cpu_isa_name((cpu_isa)isa), d);
        ck_assert_msg(
            memcmp(got[CPU_ISA_AVX2], got[isa], count * sizeof(float)) == 0,
            "%s: avx2 and %s logits differ (max |diff| %.3g): "
            "their tiles promise the same bits",
            fx_model_name(mi), cpu_isa_name((cpu_isa)isa), d);
    }
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++)
        free(got[isa]);
    fx_seq_free(&p);
    fx_seq_free(&g);
    if (ci != SIZE_MAX)
        fx_seq_free(&ctx);
}
END_TEST

/* The KV cache keys what the steps computed by forward_state_arithmetic,
 * which names only the products' arithmetic: so everything else must give
 * the same bits under every instruction set.  Under blas the products are
 * OpenBLAS's whatever GPT2D_ISA says, and attention, LayerNorm and the
 * epilogues follow the instruction set: the logits must not move. */
START_TEST(test_blas_gives_the_same_bits_under_every_instruction_set)
{
    const size_t mi = det_model(_i);
    model_dtype dtype;
    ck_assert_int_eq(model_dtype_parse(json_string_value(json_object_get(
                                           fx_model_json(mi), "load_dtype")),
                                       &dtype),
                     0);
    if (model_dtype_needs_panels(dtype)) {
        printf("case %s: blas cannot hold it\n", fx_model_name(mi));
        return;
    }
    const size_t vocab = (size_t)json_integer_value(
        json_object_get(fx_model_json(mi), "vocab_size"));
    const size_t ci = fx_seq_find(mi, "context");
    fx_seq p, g, ctx;
    fx_seq_load(mi, fx_seq_find(mi, "prompt"), vocab, &p);
    fx_seq_load(mi, fx_seq_find(mi, "greedy"), vocab, &g);
    if (ci != SIZE_MAX)
        fx_seq_load(mi, ci, vocab, &ctx);
    float *got[CPU_ISA_COUNT] = { NULL };
    size_t count = 0;
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        kernel_path path = { .matmul = MODEL_MATMUL_BLAS, .isa = (cpu_isa)isa };
        snprintf(path.name, sizeof path.name, "blas-%s",
                 cpu_isa_name(path.isa));
        got[isa] = vector_path_logits(mi, &path, &p, &g,
                                      ci != SIZE_MAX ? &ctx : NULL, &count);
    }
    for (int isa = 1; isa < CPU_ISA_COUNT; isa++) {
        if (got[isa] == NULL)
            continue;
        const double d = max_abs_diff(got[0], got[isa], count);
        ck_assert_msg(memcmp(got[0], got[isa], count * sizeof(float)) == 0,
                      "%s: blas logits under %s and portable differ (max "
                      "|diff| %.3g): attention, LayerNorm and the epilogues "
                      "promise the same bits",
                      fx_model_name(mi), cpu_isa_name((cpu_isa)isa), d);
    }
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++)
        free(got[isa]);
    fx_seq_free(&p);
    fx_seq_free(&g);
    if (ci != SIZE_MAX)
        fx_seq_free(&ctx);
}
END_TEST

/* The names split exactly where the bits do: portable panels from the
 * FMA tiles, AVX2 with AVX-512 (the same bits, above), blas from panels
 * and the same under every instruction set. */
START_TEST(test_arithmetic_names_split_where_the_bits_do)
{
    char name[2][CPU_ISA_COUNT][256];
    for (int b = 0; b < 2; b++) {
        harness h;
        kernel_path path = { .name = "names",
                             .matmul = b ? MODEL_MATMUL_BLAS
                                         : MODEL_MATMUL_PANELS,
                             .isa = CPU_ISA_PORTABLE };
        ck_assert(harness_open_path(&h, g_tiny, &path, 1, MAX_ROWS));
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!cpu_isa_runs((cpu_isa)isa))
                continue;
            ck_assert_int_eq(forward_state_set_isa(h.st, (cpu_isa)isa, &h.err),
                             0);
            forward_state_arithmetic(h.st, name[b][isa], sizeof name[b][isa]);
            printf("%s under %s: %s\n", b ? "blas" : "panels",
                   cpu_isa_name((cpu_isa)isa), name[b][isa]);
            ck_assert_str_ne(name[b][isa], "");
        }
        harness_close(&h);
    }
    ck_assert_str_eq(name[0][CPU_ISA_PORTABLE], "panels portable");
    for (int isa = 1; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        ck_assert_str_eq(name[0][isa], "panels fma");
        ck_assert_str_eq(name[1][isa], name[1][CPU_ISA_PORTABLE]);
    }
    ck_assert(strncmp(name[1][0], "blas ", 5) == 0);
}
END_TEST

/* ---- suite ---- */

static int load_cases(void)
{
    char path[4096];
    json_error_t jerr;
    test_data_path(path, sizeof path, "fixtures/cases.json");
    g_cases = json_load_file(path, 0, &jerr);
    if (g_cases == NULL) {
        fprintf(stderr,
                "test_forward: %s: %s (tests/reference/make-fixtures.sh "
                "writes it)\n",
                path, jerr.text);
        return -1;
    }
    json_t *models = json_object_get(g_cases, "models");
    if (json_integer_value(json_object_get(g_cases, "format")) != 1 ||
        !json_is_array(models) || json_array_size(models) == 0 ||
        json_array_size(models) > MAX_MODELS) {
        fprintf(stderr, "test_forward: %s: unexpected format\n", path);
        return -1;
    }
    g_n_models = json_array_size(models);
    g_tiny = SIZE_MAX;
    for (size_t i = 0; i < g_n_models; i++) {
        const char *name = fx_model_name(i);
        if (name != NULL && strcmp(name, "tiny") == 0)
            g_tiny = i;
        if (fx_seq_find(i, "prompt") == SIZE_MAX ||
            fx_seq_find(i, "greedy") == SIZE_MAX) {
            fprintf(stderr, "test_forward: model %zu lacks a sequence\n", i);
            return -1;
        }
        if (test_quick() &&
            !json_is_true(json_object_get(fx_model_json(i), "quick")))
            continue;
        g_run_models[g_n_run_models++] = i;
        if (fx_seq_find(i, "context") != SIZE_MAX)
            g_ctx_models[g_n_ctx_models++] = i;
        if (json_object_get(fx_model_json(i), "dequantized") != NULL)
            g_int8_models[g_n_int8_models++] = i;
    }
    if (g_tiny == SIZE_MAX) {
        fprintf(stderr, "test_forward: %s: no model named tiny\n", path);
        return -1;
    }
    if (g_n_int8_models == 0) {
        fprintf(stderr,
                "test_forward: %s: no int8 variant to run (do the "
                "fixtures predate int8?)\n",
                path);
        return -1;
    }
    /* the quick set must hold tiny, or the fixtures predate "quick" */
    if (g_n_run_models == 0 ||
        (test_quick() &&
         !json_is_true(json_object_get(fx_model_json(g_tiny), "quick")))) {
        fprintf(stderr,
                "test_forward: %s: no model to run (is tiny "
                "\"quick\"?)\n",
                path);
        return -1;
    }
    return 0;
}

static Suite *forward_suite(void)
{
    Suite *s = suite_create("forward");
    /* every model under every kernel path; under GPT2D_TEST_QUICK
     * (memcheck, where each path costs minutes) the prefill and echo cases
     * still run every path — every kernel each path has — and the rest the
     * default path only */
    int nm = (int)(g_n_run_models * g_n_paths);
    int nm_rest = test_quick() ? (int)g_n_run_models : nm;

    TCase *ref = tcase_create("reference");
    tcase_add_loop_test(ref, test_prefill_last_token_logits_match_reference, 0,
                        nm);
    tcase_add_loop_test(ref, test_echo_logits_for_every_prompt_position, 0, nm);
    tcase_add_loop_test(ref, test_decode_token_by_token_equals_full_recompute,
                        0, nm_rest);
    tcase_add_loop_test(ref, test_prefill_in_uneven_chunks_matches_reference, 0,
                        nm_rest);
    tcase_add_loop_test(ref, test_batch_mixes_prefill_chunk_and_decodes, 0,
                        nm_rest);
    tcase_add_loop_test(ref, test_greedy_generation_matches_reference_tokens, 0,
                        nm_rest);
    suite_add_tcase(s, ref);

    TCase *lim = tcase_create("limits");
    tcase_add_loop_test(lim, test_fill_to_n_ctx_then_one_more_token_refused, 0,
                        (int)g_n_ctx_models);
    tcase_add_test(lim, test_out_of_range_token_refused);
    tcase_add_test(lim, test_more_rows_than_max_rows_refused);
    tcase_add_test(lim, test_abandoned_step_changes_nothing);
    tcase_add_test(lim, test_forced_isa_picks_the_kernels);
    tcase_add_test(lim, test_matmul_auto_follows_the_kernels);
    suite_add_tcase(s, lim);

    TCase *det = tcase_create("determinism");
    int nd = det_n_models();
    tcase_add_loop_test(det, test_thread_pools_of_1_and_2_give_same_logits, 0,
                        nd);
    tcase_add_loop_test(det, test_sequence_alone_or_in_batch_gives_same_logits,
                        0, nd);
    tcase_add_loop_test(det, test_logits_independent_of_prompt_chunking, 0, nd);
    suite_add_tcase(s, det);

    /* every model under every panel path (blas is the last path), and
     * AVX-512 against AVX2 where the CPU has both */
    TCase *paths = tcase_create("paths");
    tcase_add_loop_test(
        paths, test_alone_batched_or_chunked_gives_same_bits_on_every_path, 0,
        paths_n_cases());
    if (cpu_isa_runs(CPU_ISA_AVX512))
        tcase_add_loop_test(paths, test_avx2_and_avx512_give_the_same_bits, 0,
                            (int)g_n_run_models);
    else /* say so: a runner without AVX-512 (or valgrind) skips it */
        fprintf(stderr, "test_forward: AVX2 against AVX-512: not run (the "
                        "CPU has no AVX-512F)\n");
    /* what the KV cache's identity assumes of the other kernels (under
     * GPT2D_TEST_QUICK on tiny alone: OpenBLAS under memcheck was ~40 %
     * of the suite, and its code paths are the same for every model) */
    tcase_add_loop_test(
        paths, test_blas_gives_the_same_bits_under_every_instruction_set, 0,
        det_n_models());
    tcase_add_test(paths, test_arithmetic_names_split_where_the_bits_do);
    suite_add_tcase(s, paths);

    /* every int8 variant under every panel path (blas is the last path) */
    TCase *q8 = tcase_create("int8");
    tcase_add_loop_test(q8, test_int8_gives_the_bits_of_its_dequantized_floats,
                        0, (int)(g_n_int8_models * (g_n_paths - 1)));
    suite_add_tcase(s, q8);
    return s;
}

int main(void)
{
    char path[4096];
    FILE *probe = fopen(
        test_data_path(path, sizeof path, "fixtures/cases.json"), "r");
    if (probe == NULL) {
        /* make-fixtures.sh failed and said why; this suite cannot run */
        fprintf(stderr, "test_forward: FAIL: %s missing\n", path);
        return 1;
    }
    fclose(probe);
    for (int isa = CPU_ISA_COUNT - 1; isa >= 0; isa--) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        kernel_path *k = &g_paths[g_n_paths++];
        k->matmul = MODEL_MATMUL_PANELS;
        k->isa = (cpu_isa)isa;
        snprintf(k->name, sizeof k->name, "panels-%s", cpu_isa_name(k->isa));
    }
    g_paths[g_n_paths++] = (kernel_path){ .name = "blas",
                                          .matmul = MODEL_MATMUL_BLAS,
                                          .isa = cpu_isa_supported() };
    for (size_t i = 0; i < g_n_paths; i++)
        printf("kernel path: %s\n", g_paths[i].name);
    if (load_cases() != 0) {
        json_decref(g_cases);
        return EXIT_FAILURE;
    }
    int status = test_run_suite(forward_suite());
    json_decref(g_cases);
    return status;
}
