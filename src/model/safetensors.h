/* safetensors.h — parser for the safetensors container header.
 *
 * Owns nothing but the parsed table.  The input is untrusted (a model file, or
 * fuzzer bytes): every offset, shape and length is checked against the buffer
 * before it is reported.  Pure function of its input; thread-safe. */
#ifndef GPT2D_SAFETENSORS_H
#define GPT2D_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define ST_MAX_DIMS 8

typedef enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_UNSUPPORTED } st_dtype;

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    char dtype_name[16]; /* as written in the file, e.g. "F32" */
    size_t n_dims;
    size_t shape[ST_MAX_DIMS];
    size_t n_elements;
    const uint8_t *data; /* points into the caller's buffer */
    size_t n_bytes;
} st_tensor;

typedef struct st_file {
    st_tensor *tensors;
    size_t n_tensors;
} st_file;

/* Parses `buf[0, size)` as a whole safetensors file.  On success the tensor
 * table points into `buf`, which must outlive it. */
int safetensors_parse(const uint8_t *buf, size_t size, st_file *out,
                      gpt2d_error *err);
const st_tensor *safetensors_find(const st_file *f, const char *name);
void safetensors_free(st_file *f);

#endif
