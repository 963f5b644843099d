/* safetensors.c — parser for the safetensors container header.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON mapping
 * each tensor name to {dtype, shape, data_offsets: [begin, end]} (offsets
 * relative to the byte after the header), then the data.  Everything here is
 * untrusted: lengths are checked before use, products before they overflow,
 * and tensors may neither overlap nor leave the buffer. */
#include "model/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A model header is a few hundred KB at most (gpt2-xl: ~60 KB); anything
 * larger is a corrupt or hostile file, refused before jansson sees it. */
#define ST_MAX_HEADER_BYTES (64u << 20)

typedef struct dtype_info {
    const char *name;
    st_dtype dtype;
    size_t size;
} dtype_info;

static const dtype_info DTYPES[] = {
    { "F32", ST_F32, 4 },
    { "F16", ST_F16, 2 },
    { "BF16", ST_BF16, 2 },
    { "F64", ST_UNSUPPORTED, 8 },
    { "I64", ST_UNSUPPORTED, 8 },
    { "U64", ST_UNSUPPORTED, 8 },
    { "I32", ST_UNSUPPORTED, 4 },
    { "U32", ST_UNSUPPORTED, 4 },
    { "I16", ST_UNSUPPORTED, 2 },
    { "U16", ST_UNSUPPORTED, 2 },
    { "I8", ST_UNSUPPORTED, 1 },
    { "U8", ST_UNSUPPORTED, 1 },
    { "BOOL", ST_UNSUPPORTED, 1 },
    { "F8_E4M3", ST_UNSUPPORTED, 1 },
    { "F8_E5M2", ST_UNSUPPORTED, 1 },
};

static const dtype_info *dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, name) == 0)
            return &DTYPES[i];
    return NULL;
}

/* A JSON integer that fits a non-negative size_t. */
static int json_size(const json_t *v, size_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (size_t)json_integer_value(v);
    return 0;
}

static int mul_overflows(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

static int parse_tensor(const char *name, const json_t *desc,
                        const uint8_t *data, size_t data_size, st_tensor *t,
                        gpt2d_error *err)
{
    if (!json_is_object(desc))
        return error_set(err, "tensor '%s': description is not an object",
                         name);
    const json_t *dtype = json_object_get(desc, "dtype");
    const json_t *shape = json_object_get(desc, "shape");
    const json_t *offsets = json_object_get(desc, "data_offsets");
    if (!json_is_string(dtype))
        return error_set(err, "tensor '%s': missing or non-string dtype", name);
    if (!json_is_array(shape))
        return error_set(err, "tensor '%s': missing or non-array shape", name);
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        return error_set(err, "tensor '%s': data_offsets must be [begin, end]",
                         name);

    const dtype_info *info = dtype_lookup(json_string_value(dtype));
    if (info == NULL)
        return error_set(err, "tensor '%s': unknown dtype '%.15s'", name,
                         json_string_value(dtype));
    t->dtype = info->dtype;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", info->name);

    t->n_dims = json_array_size(shape);
    if (t->n_dims > ST_MAX_DIMS)
        return error_set(err, "tensor '%s': %zu dimensions (at most %d)", name,
                         t->n_dims, ST_MAX_DIMS);
    size_t n_elements = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (json_size(json_array_get(shape, d), &t->shape[d]) != 0)
            return error_set(
                err, "tensor '%s': shape[%zu] is not a non-negative integer",
                name, d);
        if (mul_overflows(n_elements, t->shape[d], &n_elements))
            return error_set(err, "tensor '%s': shape overflows", name);
    }
    size_t n_bytes;
    if (mul_overflows(n_elements, info->size, &n_bytes))
        return error_set(err, "tensor '%s': shape overflows", name);

    size_t begin, end;
    if (json_size(json_array_get(offsets, 0), &begin) != 0 ||
        json_size(json_array_get(offsets, 1), &end) != 0)
        return error_set(
            err, "tensor '%s': data_offsets are not non-negative integers",
            name);
    if (begin > end || end > data_size)
        return error_set(
            err,
            "tensor '%s': data_offsets [%zu, %zu] outside the %zu data bytes",
            name, begin, end, data_size);
    if (end - begin != n_bytes)
        return error_set(
            err, "tensor '%s': data_offsets span %zu bytes but %s%s needs %zu",
            name, end - begin, info->name,
            t->n_dims ? " of that shape" : " scalar", n_bytes);
    t->n_elements = n_elements;
    t->n_bytes = n_bytes;
    t->data = data + begin;
    return 0;
}

static int by_data_address(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return (x->data > y->data) - (x->data < y->data);
}

/* No real checkpoint lets two tensors share bytes; a header that does is
 * corrupt or lying about its offsets. */
static int check_no_overlap(st_file *f, gpt2d_error *err)
{
    if (f->n_tensors < 2)
        return 0;
    st_tensor *sorted = malloc(f->n_tensors * sizeof *sorted);
    if (sorted == NULL)
        return error_set(err, "out of memory");
    memcpy(sorted, f->tensors, f->n_tensors * sizeof *sorted);
    qsort(sorted, f->n_tensors, sizeof *sorted, by_data_address);
    /* An empty tensor owns no bytes, so it overlaps nothing, even when it
     * sits where another begins (safetensors writers put it there); only the
     * last non-empty tensor before each one matters, as those so far are
     * disjoint and in order. */
    int rc = 0;
    const st_tensor *prev = NULL;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &sorted[i];
        if (t->n_bytes == 0)
            continue;
        if (prev != NULL && t->data < prev->data + prev->n_bytes) {
            rc = error_set(err, "tensors '%s' and '%s' overlap in the data",
                           prev->name, t->name);
            break;
        }
        prev = t;
    }
    free(sorted);
    return rc;
}

int safetensors_parse(const uint8_t *buf, size_t size, st_file *out,
                      gpt2d_error *err)
{
    memset(out, 0, sizeof *out);
    if (size < 8)
        return error_set(
            err, "file is %zu bytes, too short for a safetensors header", size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = (header_len << 8) | buf[i];
    if (header_len > size - 8)
        return error_set(
            err,
            "header claims %llu bytes but the file has %zu after the length (truncated?)",
            (unsigned long long)header_len, size - 8);
    if (header_len > ST_MAX_HEADER_BYTES)
        return error_set(err, "header of %llu bytes is implausibly large",
                         (unsigned long long)header_len);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)header_len,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return error_set(err, "header is not valid JSON: %s (at byte %d)",
                         jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return error_set(err, "header is not a JSON object");
    }

    const uint8_t *data = buf + 8 + header_len;
    size_t data_size = size - 8 - (size_t)header_len;
    size_t capacity = json_object_size(root);
    out->tensors = calloc(capacity ? capacity : 1, sizeof *out->tensors);
    if (out->tensors == NULL) {
        json_decref(root);
        return error_set(err, "out of memory");
    }

    const char *key;
    json_t *value;
    int rc = 0;
    json_object_foreach(root, key, value)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        st_tensor *t = &out->tensors[out->n_tensors];
        if (parse_tensor(key, value, data, data_size, t, err) != 0) {
            rc = -1;
            break;
        }
        t->name = strdup(key);
        if (t->name == NULL) {
            rc = error_set(err, "out of memory");
            break;
        }
        out->n_tensors++;
    }
    json_decref(root);
    if (rc == 0)
        rc = check_no_overlap(out, err);
    if (rc != 0)
        safetensors_free(out);
    return rc;
}

const st_tensor *safetensors_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

void safetensors_free(st_file *f)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    f->tensors = NULL;
    f->n_tensors = 0;
}
