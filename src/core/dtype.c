/* dtype.c — the names of the storage types (see dtype.h). */
#include "core/dtype.h"

#include <stddef.h>
#include <string.h>

int model_dtype_parse(const char *name, model_dtype *out)
{
    static const model_dtype all[] = { MODEL_DTYPE_AUTO, MODEL_DTYPE_FLOAT32,
                                       MODEL_DTYPE_FLOAT16, MODEL_DTYPE_INT8,
                                       MODEL_DTYPE_Q8 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, model_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

const char *model_dtype_name(model_dtype dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_FLOAT32:
        return "float32";
    case MODEL_DTYPE_FLOAT16:
        return "float16";
    case MODEL_DTYPE_INT8:
        return "int8";
    case MODEL_DTYPE_Q8:
        return "q8";
    default:
        return "auto";
    }
}

bool model_dtype_needs_panels(model_dtype dtype)
{
    return dtype == MODEL_DTYPE_FLOAT16 || dtype == MODEL_DTYPE_INT8 ||
           dtype == MODEL_DTYPE_Q8;
}

int model_matmul_parse(const char *name, model_matmul *out)
{
    static const model_matmul all[] = { MODEL_MATMUL_AUTO, MODEL_MATMUL_PANELS,
                                        MODEL_MATMUL_BLAS };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, model_matmul_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

const char *model_matmul_name(model_matmul matmul)
{
    switch (matmul) {
    case MODEL_MATMUL_PANELS:
        return "panels";
    case MODEL_MATMUL_BLAS:
        return "blas";
    default:
        return "auto";
    }
}

int kv_dtype_parse(const char *name, bool *half)
{
    for (int h = 0; h <= 1; h++)
        if (strcmp(name, kv_dtype_name(h)) == 0) {
            *half = h;
            return 0;
        }
    return -1;
}

const char *kv_dtype_name(bool half)
{
    return half ? "float16" : "float32";
}
