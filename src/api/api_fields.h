/* api_fields.h — reading one optional field of a request body
 * (api_fields.c), for every parser: its type and its range checked.
 *
 * Absent or null leaves the default standing (*out untouched, or NULL); a
 * value of another type or out of range is a 400 whose param is the key
 * (or `param`, a nested field's dotted path).
 *
 * Threads: any; pure. */
#ifndef GPT2D_API_FIELDS_H
#define GPT2D_API_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/api_common.h"

#define API_CACHE_SALT_MAX 256

typedef enum api_field_type {
    API_FIELD_NUMBER,
    API_FIELD_INTEGER,
    API_FIELD_BOOL,
    API_FIELD_STRING,
    API_FIELD_OBJECT,
    API_FIELD_ARRAY,
    API_FIELD_TOKEN_MAP, /* an object, named for logit_bias */
} api_field_type;

/* *out is the value, or NULL when absent or null. */
int api_field_optional(json_t *obj, const char *key, const char *param,
                       api_field_type type, json_t **out, api_error *e);
/* A number in [lo, hi] (lo itself excluded when lo_open). */
int api_field_number(json_t *root, const char *key, double lo, double hi,
                     bool lo_open, float *out, api_error *e);
int api_field_integer(json_t *root, const char *key, json_int_t lo,
                      json_int_t hi, json_int_t *out, api_error *e);
int api_field_bool(json_t *obj, const char *key, const char *param, bool *out,
                   api_error *e);
/* cache_salt (vLLM's name), the same on every endpoint that runs a prompt:
 * 1 to API_CACHE_SALT_MAX bytes, kept whole (NULs too) in `out` with its
 * length; *present stays false when absent or null. */
int api_field_cache_salt(json_t *root, char out[API_CACHE_SALT_MAX + 1],
                         size_t *len, bool *present, api_error *e);

/* Whether s[0..len) is 1 to `max` characters of A-Z a-z 0-9 _ -: what
 * OpenAI's function names and item ids are made of. */
bool api_field_is_name(const char *s, size_t len, size_t max);

#endif
