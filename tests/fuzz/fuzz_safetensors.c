/* fuzz_safetensors.c — a model file is untrusted input.
 *
 * Each input is a whole model.safetensors.  safetensors_parse must refuse it
 * with a message or return a table whose every tensor lies inside the buffer,
 * has as many bytes as its dtype and shape need, overlaps no other and can be
 * found by name; all its bytes are read, so ASan sees any table that lies.
 * A refusal for overlapping tensors is checked against the header's offsets
 * read independently here: two tensors that own bytes must share some.
 *
 * A file that parses is then loaded as a model (model_load: mmap, binding of
 * every GPT-2 tensor by name and shape, F16/BF16 widening), as stored, as
 * float16 and as int8 (whose quantized panels are checked against the
 * file's values, or whose refusal against the value it names), against a
 * fixed micro config — 1 layer, n_embd 4, 2 heads, n_ctx 4, vocabulary 8 — written
 * once to a private temporary directory.  The seeds include valid micro
 * models (tests/fuzz/make_seeds.py) so the fuzzer starts inside the binder. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/half.h"
#include "model/model.h"
#include "model/panels.h"
#include "model/safetensors.h"
#include "fuzz.h"

#define MICRO_CONFIG                                                           \
    "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, "               \
    "\"n_embd\": 4, \"n_positions\": 4, \"vocab_size\": 8, "                   \
    "\"layer_norm_epsilon\": 1e-05}\n"

static char dir[4096];
static char model_path[4200];
static char config_path[4200];

static void remove_dir(void)
{
    unlink(model_path);
    unlink(config_path);
    rmdir(dir);
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL, "%s: %s", path, strerror(errno));
    FUZZ_CHECK(fwrite(data, 1, size, f) == size && fclose(f) == 0,
               "%s: write failed", path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* tmpfs when there is one: a model file is written per accepted input. */
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/gpt2d-fuzz-st.XXXXXX", tmp);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "fuzz: mkdtemp %s: %s\n", dir, strerror(errno));
        exit(EXIT_FAILURE);
    }
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    atexit(remove_dir);
    write_file(config_path, MICRO_CONFIG, strlen(MICRO_CONFIG));
    return 0;
}

static size_t dtype_size(const char *name)
{
    if (strcmp(name, "F64") == 0 || strcmp(name, "I64") == 0 ||
        strcmp(name, "U64") == 0)
        return 8;
    if (strcmp(name, "F32") == 0 || strcmp(name, "I32") == 0 ||
        strcmp(name, "U32") == 0)
        return 4;
    if (strcmp(name, "F16") == 0 || strcmp(name, "BF16") == 0 ||
        strcmp(name, "I16") == 0 || strcmp(name, "U16") == 0)
        return 2;
    return 1;
}

/* Every promise of the parsed table, checked against the input. */
static void check_table(const st_file *f, const uint8_t *data, size_t size)
{
    unsigned sum = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        FUZZ_CHECK(t->name != NULL, "tensor %zu has no name", i);
        FUZZ_CHECK(t->n_dims <= ST_MAX_DIMS, "'%s': %zu dims", t->name,
                   t->n_dims);
        size_t elements = 1;
        for (size_t d = 0; d < t->n_dims; d++)
            FUZZ_CHECK(
                !__builtin_mul_overflow(elements, t->shape[d], &elements),
                "'%s': shape overflows", t->name);
        FUZZ_CHECK(elements == t->n_elements,
                   "'%s': %zu elements, shape says %zu", t->name, t->n_elements,
                   elements);
        FUZZ_CHECK(t->n_bytes == elements * dtype_size(t->dtype_name),
                   "'%s': %zu bytes for %zu %s", t->name, t->n_bytes, elements,
                   t->dtype_name);
        FUZZ_CHECK(t->data >= data + 8 && t->data <= data + size &&
                       t->n_bytes <= (size_t)(data + size - t->data),
                   "'%s': data outside the buffer", t->name);
        FUZZ_CHECK(safetensors_find(f, t->name) == t, "'%s' not found by name",
                   t->name);
        for (size_t b = 0; b < t->n_bytes; b++)
            sum += t->data[b];
        for (size_t j = 0; j < i; j++) {
            const st_tensor *u = &f->tensors[j];
            bool apart = t->n_bytes == 0 || u->n_bytes == 0 ||
                         t->data + t->n_bytes <= u->data ||
                         u->data + u->n_bytes <= t->data;
            FUZZ_CHECK(apart, "'%s' and '%s' overlap", t->name, u->name);
        }
    }
    /* Keeps the reads above from being optimised away. */
    volatile unsigned sink = sum;
    (void)sink;
}

/* "tensors 'A' and 'B' overlap in the data", and not some other refusal
 * that quotes a tensor named like that ("tensor '...overlap in the data'"). */
static bool is_overlap_refusal(const char *msg)
{
    static const char suffix[] = "' overlap in the data";
    size_t len = strlen(msg), sl = sizeof suffix - 1;
    return strncmp(msg, "tensors '", 9) == 0 && len >= sl &&
           strcmp(msg + len - sl, suffix) == 0;
}

/* The parser refused the file for overlapping tensors, which it checks last:
 * the header is then valid, so read its offsets again, independently, and
 * make sure two tensors that own bytes really share some. */
static void check_overlap_is_real(const uint8_t *data, size_t size)
{
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = (header_len << 8) | data[i];
    FUZZ_CHECK(header_len <= size - 8, "overlap refusal of a truncated file");
    json_t *root = json_loadb((const char *)data + 8, (size_t)header_len, 0,
                              NULL);
    FUZZ_CHECK(json_is_object(root), "overlap refusal of a non-object header");
    size_t n = json_object_size(root), k = 0;
    json_int_t(*range)[2] = calloc(n ? n : 1, sizeof *range);
    FUZZ_CHECK(range != NULL, "out of memory");
    const char *key;
    json_t *desc;
    json_object_foreach(root, key, desc)
    {
        json_t *off = json_object_get(desc, "data_offsets");
        json_int_t b = json_integer_value(json_array_get(off, 0));
        json_int_t e = json_integer_value(json_array_get(off, 1));
        if (strcmp(key, "__metadata__") != 0 && e > b) {
            range[k][0] = b;
            range[k][1] = e;
            k++;
        }
    }
    bool found = false;
    for (size_t i = 0; i < k && !found; i++)
        for (size_t j = 0; j < i && !found; j++)
            found = range[i][0] < range[j][1] && range[j][0] < range[i][1];
    free(range);
    json_decref(root);
    FUZZ_CHECK(found, "refused for an overlap no two non-empty tensors have");
}

/* Element i of tensor t, read from the file's bytes here rather than
 * through the loader's widening. */
static float element(const st_tensor *t, size_t i)
{
    uint16_t h;
    float x;
    switch (t->dtype) {
    case ST_F16:
        memcpy(&h, t->data + 2 * i, 2);
        return half_to_float(h);
    case ST_BF16: {
        memcpy(&h, t->data + 2 * i, 2);
        uint32_t bits = (uint32_t)h << 16;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    default:
        memcpy(&x, t->data + 4 * i, 4);
        return x;
    }
}

/* A loaded model's weights are all bound and readable, and the panels hold
 * the file's matrices (`f` parses the same bytes). */
static void check_model(const model *m, const st_file *f)
{
    const model_config *c = &m->config;
    FUZZ_CHECK(c->n_layer == 1 && c->n_embd == 4 && c->vocab_size == 8,
               "config not the micro one");
    FUZZ_CHECK((m->tied || m->wte) && m->wpe && m->ln_f_w && m->ln_f_b &&
                   m->lm_head_wp && m->layers,
               "unbound weight");
    const layer_weights *w = &m->layers[0];
    const float *all[] = { w->ln_1_w, w->ln_1_b, w->attn_b, w->attn_proj_b,
                           w->ln_2_w, w->ln_2_b, w->fc_b,   w->mlp_proj_b };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        FUZZ_CHECK(all[i] != NULL, "layer vector %zu unbound", i);
    float sum = 0;
    for (size_t i = 0; !m->tied && i < c->vocab_size * c->n_embd; i++)
        sum += m->wte[i];
    for (size_t i = 0; i < 4 * c->n_embd; i++)
        sum += w->fc_b[i];
    volatile float sink = sum;
    (void)sink;
    /* the kernels' panel copies hold the file's values, as halves rounded
     * to nearest when the panels are halves (NaNs compare as bits), or
     * quantized as panels.h says when they are int8 */
    const size_t C = c->n_embd;
    const bool plain = safetensors_find(f, "wte.weight") != NULL;
    const char *prefix = plain ? "" : "transformer.";
    const st_tensor *head = safetensors_find(f, "lm_head.weight");
    char wte_name[32];
    snprintf(wte_name, sizeof wte_name, "%swte.weight", prefix);
    if (m->tied)
        head = safetensors_find(f, wte_name);
    /* the last one, lm_head, is stored (vocab, C) and packed transposed */
    const struct {
        const char *name;
        const void *packed;
        size_t K, N;
        int transposed;
    } mats[] = { { "h.0.attn.c_attn.weight", w->attn_wp, C, 3 * C, 0 },
                 { "h.0.attn.c_proj.weight", w->attn_proj_wp, C, C, 0 },
                 { "h.0.mlp.c_fc.weight", w->fc_wp, C, 4 * C, 0 },
                 { "h.0.mlp.c_proj.weight", w->mlp_proj_wp, 4 * C, C, 0 },
                 { NULL, m->lm_head_wp, C, c->vocab_size, 1 } };
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix,
                 mats[i].name ? mats[i].name : "");
        const st_tensor *t = mats[i].name ? safetensors_find(f, name) : head;
        FUZZ_CHECK(t != NULL, "matrix %zu loaded but not in the file", i);
        for (size_t k = 0; k < mats[i].K; k++)
            for (size_t n = 0; n < mats[i].N; n++) {
                const size_t K = mats[i].K, N = mats[i].N;
                const int tr = mats[i].transposed;
                float a = element(t, tr ? n * K + k : k * N + n);
                if (m->panel_dtype == PANEL_F16)
                    a = half_to_float(half_from_float(a));
                if (m->panel_dtype == PANEL_Q8) {
                    /* the scale of the column's rows in k's block */
                    float amax = 0.0f;
                    for (size_t r = k - k % PANEL_Q8_ROWS;
                         r < K && r < k - k % PANEL_Q8_ROWS + PANEL_Q8_ROWS;
                         r++)
                        amax = fmaxf(amax, fabsf(element(t, tr ? n * K + r
                                                               : r * N + n)));
                    const float d = half_to_float(panel_q8_scale(amax));
                    a = (float)panel_q8_quantize(a, d) * d;
                }
                float b = panel_at(mats[i].packed, m->panel_dtype, mats[i].K, k,
                                   n);
                FUZZ_CHECK(memcmp(&a, &b, sizeof a) == 0,
                           "panel copy of matrix %zu differs at (%zu, %zu)", i,
                           k, n);
            }
    }
}

/* An int8 refusal names a tensor of the file ("tensor 'NAME'") that holds
 * a value int8 cannot. */
static void check_int8_refusal(const st_file *f, const char *message)
{
    const char *at = strstr(message, "tensor '");
    FUZZ_CHECK(at != NULL && strstr(message, "int8") != NULL,
               "int8 refused without naming a tensor: %s", message);
    char name[256];
    at += strlen("tensor '");
    size_t len = strcspn(at, "'");
    FUZZ_CHECK(len < sizeof name, "tensor name too long: %s", message);
    memcpy(name, at, len);
    name[len] = '\0';
    const st_tensor *t = safetensors_find(f, name);
    FUZZ_CHECK(t != NULL, "int8 refusal names no tensor of the file: %s",
               message);
    bool beyond = false;
    for (size_t i = 0; i < t->n_elements && !beyond; i++)
        beyond = !panel_q8_holds(element(t, i));
    FUZZ_CHECK(beyond, "int8 refused %s, which it can hold: %s", name, message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file f;
    gpt2d_error err;
    if (safetensors_parse(data, size, &f, &err) != 0) {
        FUZZ_CHECK(err.message[0] != '\0', "refused without a message");
        FUZZ_CHECK(f.tensors == NULL && f.n_tensors == 0,
                   "refusal left a table behind");
        if (is_overlap_refusal(err.message))
            check_overlap_is_real(data, size);
        return 0;
    }
    check_table(&f, data, size);
    /* Without a wte the binder refuses at its first look; skipping the file
     * write for those keeps the fuzzer fast where nothing can be learnt. */
    bool has_wte = safetensors_find(&f, "wte.weight") != NULL ||
                   safetensors_find(&f, "transformer.wte.weight") != NULL;
    if (!has_wte) {
        safetensors_free(&f);
        return 0;
    }

    write_file(model_path, data, size);
    model m;
    if (model_load(&m, dir, MODEL_DTYPE_AUTO, &err) == 0) {
        check_model(&m, &f);
        model_free(&m);
        /* whatever loads as stored also loads as halves */
        FUZZ_CHECK(model_load(&m, dir, MODEL_DTYPE_FLOAT16, &err) == 0,
                   "loads as stored but not as float16: %s", err.message);
        FUZZ_CHECK(m.panel_dtype == PANEL_F16, "float16 gave float panels");
        check_model(&m, &f);
        model_free(&m);
        /* and as int8, unless a matrix holds what its scales cannot */
        if (model_load(&m, dir, MODEL_DTYPE_INT8, &err) == 0) {
            FUZZ_CHECK(m.panel_dtype == PANEL_Q8, "int8 gave other panels");
            check_model(&m, &f);
            model_free(&m);
        } else {
            check_int8_refusal(&f, err.message);
        }
    } else {
        FUZZ_CHECK(err.message[0] != '\0', "model refused without a message");
    }
    safetensors_free(&f);
    return 0;
}
