/* constraint_request.c — response_format and structured_outputs into one
 * GBNF text (constraint_request.h).  The compilers are grammar/'s: JSON
 * Schema, regular expressions and choices each become GBNF, and a grammar
 * sent as GBNF is taken as it is (its syntax is checked when it is
 * compiled, api_completions.c, and named by c->param). */
#include "config.h"

#include "api/constraint_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_fields.h"
#include "core/buf.h"
#include "grammar/choices_gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex_gbnf.h"

/* The most GBNF text a regex or a list of choices may become (a schema's
 * own budget is json_schema_options'); the grammar's limits come after. */
#define CONSTRAINT_MAX_GBNF ((size_t)256 << 10)

void api_constraint_free(api_constraint *c)
{
    free(c->gbnf);
    memset(c, 0, sizeof *c);
}

static int take(api_constraint *c, gpt2d_buf *b, const char *param, bool json,
                api_error *e)
{
    if (buf_append(b, "", 1) != 0) { /* NUL-terminated, for messages */
        buf_free(b);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    c->gbnf = (char *)b->data;
    c->len = b->len - 1;
    c->param = param;
    c->json = json;
    return 0;
}

static int from_schema(api_constraint *c, json_t *schema, bool strict,
                       const char *param, api_error *e)
{
    if (!json_is_object(schema) && !json_is_true(schema))
        return api_error_set(e, 400, param, "%s must be a JSON Schema object",
                             param);
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.strict = strict;
    opt.param = param;
    gpt2d_buf b = GPT2D_BUF_INIT;
    json_schema_error err;
    if (json_schema_grammar(schema, &opt, &b, &err) != 0) {
        buf_free(&b);
        return api_error_set(e, 400, err.param, "%s", err.message);
    }
    return take(c, &b, param, true, e);
}

static int response_format(api_constraint *c, json_t *v, api_error *e)
{
    json_t *type = json_object_get(v, "type");
    if (!json_is_string(type))
        return api_error_set(e, 400, "response_format.type",
                             "response_format.type must be \"text\", "
                             "\"json_object\" or \"json_schema\"");
    const char *t = json_string_value(type);
    if (strcmp(t, "text") == 0)
        return 0;
    if (strcmp(t, "json_object") == 0) {
        gpt2d_buf b = GPT2D_BUF_INIT;
        json_schema_options opt;
        json_schema_options_default(&opt);
        opt.param = "response_format";
        json_schema_error err;
        if (json_value_gbnf(true, &opt, "root", &b, &err) != 0) {
            buf_free(&b);
            return api_error_set(e, 500, NULL, "%s", err.message);
        }
        return take(c, &b, "response_format", true, e);
    }
    if (strcmp(t, "json_schema") != 0)
        return api_error_set(e, 400, "response_format.type",
                             "response_format.type is \"%.32s\": it must be "
                             "\"text\", \"json_object\" or \"json_schema\"",
                             t);
    json_t *js;
    if (api_field_optional(v, "json_schema", "response_format.json_schema",
                           API_FIELD_OBJECT, &js, e) != 0)
        return -1;
    if (js == NULL)
        return api_error_set(e, 400, "response_format.json_schema",
                             "response_format.json_schema is required when "
                             "the type is \"json_schema\"");
    json_t *name = json_object_get(js, "name");
    if (name != NULL && !json_is_string(name))
        return api_error_set(e, 400, "response_format.json_schema.name",
                             "response_format.json_schema.name must be a "
                             "string");
    bool strict = false;
    if (api_field_bool(js, "strict", "response_format.json_schema.strict",
                       &strict, e) != 0)
        return -1;
    json_t *schema = json_object_get(js, "schema");
    if (schema == NULL)
        return api_error_set(e, 400, "response_format.json_schema.schema",
                             "response_format.json_schema.schema is "
                             "required");
    return from_schema(c, schema, strict, "response_format.json_schema.schema",
                       e);
}

static int choices(api_constraint *c, json_t *list, api_error *e)
{
    const char *param = "structured_outputs.choice";
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0)
        return api_error_set(e, 400, param,
                             "%s must be a non-empty array of strings", param);
    const char **texts = calloc(n, sizeof *texts);
    size_t *lens = calloc(n, sizeof *lens);
    int rc = texts == NULL || lens == NULL
                 ? api_error_set(e, 500, NULL, "out of memory")
                 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *s = json_array_get(list, i);
        if (!json_is_string(s))
            rc = api_error_set(e, 400, param, "%s[%zu] must be a string", param,
                               i);
        else {
            texts[i] = json_string_value(s);
            lens[i] = json_string_length(s);
        }
    }
    gpt2d_buf b = GPT2D_BUF_INIT;
    gpt2d_error err;
    size_t bad = 0;
    if (rc == 0 && choices_gbnf(texts, lens, n, "root", CONSTRAINT_MAX_GBNF, &b,
                                &bad, &err) != 0) {
        char at[64];
        snprintf(at, sizeof at, "%s[%zu]", param, bad);
        rc = api_error_set(e, 400, bad < n ? at : param, "%s", err.message);
    }
    free(texts);
    free(lens);
    if (rc != 0) {
        buf_free(&b);
        return -1;
    }
    return take(c, &b, param, false, e);
}

static int structured_outputs(api_constraint *c, json_t *v, api_error *e)
{
    static const char *const kinds[] = { "json", "regex", "choice", "grammar" };
    const char *kind = NULL;
    json_t *arg = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        json_t *a = json_object_get(v, kinds[i]);
        if (a == NULL || json_is_null(a))
            continue;
        if (kind != NULL)
            return api_error_set(e, 400, "structured_outputs",
                                 "structured_outputs has both \"%s\" and "
                                 "\"%s\": send one",
                                 kind, kinds[i]);
        kind = kinds[i];
        arg = a;
    }
    if (kind == NULL)
        return api_error_set(e, 400, "structured_outputs",
                             "structured_outputs must hold one of \"json\", "
                             "\"regex\", \"choice\" or \"grammar\"");
    if (strcmp(kind, "json") == 0) {
        /* vLLM also takes the schema as JSON text */
        if (json_is_string(arg)) {
            json_error_t jerr;
            json_t *schema = json_loads(json_string_value(arg), 0, &jerr);
            if (schema == NULL)
                return api_error_set(e, 400, "structured_outputs.json",
                                     "structured_outputs.json is not JSON: "
                                     "%s",
                                     jerr.text);
            int rc = from_schema(c, schema, false, "structured_outputs.json",
                                 e);
            json_decref(schema);
            return rc;
        }
        return from_schema(c, arg, false, "structured_outputs.json", e);
    }
    if (strcmp(kind, "choice") == 0)
        return choices(c, arg, e);
    char param[64];
    snprintf(param, sizeof param, "structured_outputs.%s", kind);
    if (!json_is_string(arg) || json_string_length(arg) == 0)
        return api_error_set(e, 400, param, "%s must be a non-empty string",
                             param);
    gpt2d_buf b = GPT2D_BUF_INIT;
    if (strcmp(kind, "regex") == 0) {
        regex_error err;
        if (regex_gbnf(json_string_value(arg), json_string_length(arg),
                       REGEX_GBNF_RAW, "root", CONSTRAINT_MAX_GBNF, &b,
                       &err) != 0) {
            buf_free(&b);
            return api_error_set(e, 400, param, "%s at character %zu: %s",
                                 param, err.offset, err.message);
        }
        return take(c, &b, "structured_outputs.regex", false, e);
    }
    if (buf_append(&b, json_string_value(arg), json_string_length(arg)) != 0) {
        buf_free(&b);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    return take(c, &b, "structured_outputs.grammar", false, e);
}

int api_constraint_parse(api_constraint *c, json_t *root, api_error *e)
{
    memset(c, 0, sizeof *c);
    json_t *rf, *so;
    if (api_field_optional(root, "response_format", "response_format",
                           API_FIELD_OBJECT, &rf, e) != 0 ||
        api_field_optional(root, "structured_outputs", "structured_outputs",
                           API_FIELD_OBJECT, &so, e) != 0)
        return -1;
    if (rf != NULL && so != NULL) {
        json_t *type = json_object_get(rf, "type");
        if (!(json_is_string(type) &&
              strcmp(json_string_value(type), "text") == 0))
            return api_error_set(e, 400, "structured_outputs",
                                 "send response_format or "
                                 "structured_outputs, not both");
    }
    int rc = 0;
    if (so != NULL)
        rc = structured_outputs(c, so, e);
    else if (rf != NULL)
        rc = response_format(c, rf, e);
    if (rc != 0)
        api_constraint_free(c);
    return rc;
}
