/* api_fields.c — reading one optional field of a request body: its type and
 * its range checked, every error a 400 whose `param` names the field.
 *
 * The request parsers of both completion endpoints (completion_request.c,
 * chat_request.c), of /v1/inspect (inspect_request.c) and the small
 * endpoints read their fields through these,
 * so the same mistake gets the same message wherever it is made.  Pure:
 * any thread. */
#include "api/api_fields.h"

#include <string.h>

static const char *const field_must_be[] = {
    [API_FIELD_NUMBER] = "a number",
    [API_FIELD_INTEGER] = "an integer",
    [API_FIELD_BOOL] = "true or false",
    [API_FIELD_STRING] = "a string",
    [API_FIELD_OBJECT] = "an object",
    [API_FIELD_ARRAY] = "an array",
    [API_FIELD_TOKEN_MAP] = "an object mapping token ids to biases",
};

static bool field_has_type(const json_t *v, api_field_type type)
{
    switch (type) {
    case API_FIELD_NUMBER:
        return json_is_number(v);
    case API_FIELD_INTEGER:
        return json_is_integer(v);
    case API_FIELD_BOOL:
        return json_is_boolean(v);
    case API_FIELD_STRING:
        return json_is_string(v);
    case API_FIELD_ARRAY:
        return json_is_array(v);
    case API_FIELD_OBJECT:
    case API_FIELD_TOKEN_MAP:
        return json_is_object(v);
    }
    return false;
}

int api_field_optional(json_t *obj, const char *key, const char *param,
                       api_field_type type, json_t **out, api_error *e)
{
    *out = NULL;
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!field_has_type(v, type))
        return api_error_set(e, 400, param, "%s must be %s", param,
                             field_must_be[type]);
    *out = v;
    return 0;
}

int api_field_number(json_t *root, const char *key, double lo, double hi,
                     bool lo_open, float *out, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, key, key, API_FIELD_NUMBER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    double d = json_number_value(v);
    if (d < lo || d > hi || (lo_open && d == lo))
        return api_error_set(e, 400, key, "%s must be %s %g and <= %g, got %g",
                             key, lo_open ? ">" : ">=", lo, hi, d);
    *out = (float)d;
    return 0;
}

int api_field_integer(json_t *root, const char *key, json_int_t lo,
                      json_int_t hi, json_int_t *out, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, key, key, API_FIELD_INTEGER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return api_error_set(e, 400, key,
                             "%s must be between %lld and %lld, got %lld", key,
                             (long long)lo, (long long)hi, (long long)i);
    *out = i;
    return 0;
}

int api_field_bool(json_t *obj, const char *key, const char *param, bool *out,
                   api_error *e)
{
    json_t *v;
    if (api_field_optional(obj, key, param, API_FIELD_BOOL, &v, e) != 0)
        return -1;
    if (v != NULL)
        *out = json_is_true(v);
    return 0;
}

int api_field_cache_salt(json_t *root, char out[API_CACHE_SALT_MAX + 1],
                         size_t *len, bool *present, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "cache_salt", "cache_salt", API_FIELD_STRING,
                           &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    size_t n = json_string_length(v);
    if (n == 0 || n > API_CACHE_SALT_MAX)
        return api_error_set(e, 400, "cache_salt",
                             "cache_salt must be 1 to %d bytes long",
                             API_CACHE_SALT_MAX);
    memcpy(out, json_string_value(v), n);
    out[n] = '\0';
    *len = n;
    *present = true;
    return 0;
}

bool api_field_is_name(const char *s, size_t len, size_t max)
{
    if (len == 0 || len > max)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}
