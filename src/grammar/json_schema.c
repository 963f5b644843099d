/* json_schema.c — JSON Schema to GBNF (see json_schema.h): the entry
 * points, the dispatch of one schema by its keywords and types, the keyword
 * table (strict mode's check) and anyOf.  The compiler's parts are in
 * json_schema_*.c; what they share is json_schema_internal.h.
 *
 * Shared work: the rules for strings, numbers and free values are made once
 * per compilation; a $ref's target is compiled once per unrolling level and
 * referred to by name, so a schema's size, not its number of uses, bounds
 * the grammar. */
#include "grammar/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema_internal.h"

/* ---- keywords ---- */

static const char *const annotations[] = {
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "$anchor",
    "$dynamicAnchor",
    "$vocabulary",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
};
static const char *const supported[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
};

static bool in_list(const char *const *list, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], key) == 0)
            return true;
    return false;
}

keyword_kind jsc_kind_of(const char *key)
{
    if (in_list(annotations, sizeof annotations / sizeof *annotations, key))
        return KW_ANNOTATION;
    if (in_list(supported, sizeof supported / sizeof *supported, key))
        return KW_SUPPORTED;
    return KW_UNSUPPORTED;
}

/* Strict: the first keyword outside the subset is an error. */
static int check_keywords(compiler *c, const json_t *s)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (jsc_kind_of(key) != KW_UNSUPPORTED)
            continue;
        if (c->opt->strict)
            return jsc_fail(c, key, "the keyword '%s' is not supported", key);
    }
    if (c->opt->strict && json_object_get(s, "oneOf") != NULL)
        return jsc_fail(c, "oneOf",
                        "oneOf is not supported in strict mode (use anyOf)");
    return 0;
}

/* A keyword that must be a non-negative integer: into *out (or -1 when
 * absent). */
int jsc_count_keyword(compiler *c, const json_t *s, const char *key,
                      long long *out)
{
    json_t *v = json_object_get(s, key);
    *out = -1;
    if (v == NULL)
        return 0;
    if (json_is_real(v) && json_real_value(v) >= 0 &&
        json_real_value(v) <= 1e15 &&
        (double)(long long)json_real_value(v) == json_real_value(v)) {
        *out = (long long)json_real_value(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return jsc_fail(c, key, "%s must be a non-negative integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* ---- the compiler ---- */

/* Compiles a subschema at key (and index when >= 0) of the current place. */
int jsc_compile_at(compiler *c, const json_t *s, const char *key, long index,
                   unsigned level, gpt2d_buf *expr)
{
    size_t before = jsc_path_push(c, key);
    if (index >= 0)
        jsc_path_push_index(c, (size_t)index);
    int rc = jsc_compile(c, s, level, expr);
    jsc_path_pop(c, before);
    return rc;
}

/* Appends " | " between alternatives. */
int jsc_alt_sep(gpt2d_buf *b, size_t *n)
{
    return (*n)++ > 0 ? gbnf_puts(b, " | ") : 0;
}

/* -- anyOf / oneOf / allOf -- */

static int only_annotations_beside(compiler *c, const json_t *s,
                                   const char *keyword)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (strcmp(key, keyword) != 0 && jsc_kind_of(key) == KW_SUPPORTED)
            return jsc_fail(
                c, key,
                "'%s' beside %s is not supported (move it into each "
                "alternative)",
                key, keyword);
    }
    return 0;
}

static int compile_any_of(compiler *c, const json_t *s, const char *keyword,
                          unsigned level, gpt2d_buf *expr)
{
    json_t *list = json_object_get(s, keyword);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return jsc_fail(c, keyword, "%s must be a non-empty array of schemas",
                        keyword);
    if (only_annotations_beside(c, s, keyword) != 0)
        return -1;
    if (strcmp(keyword, "allOf") == 0) {
        if (json_array_size(list) > 1)
            return jsc_fail(c, keyword,
                            "allOf with more than one schema is not supported");
        return jsc_compile_at(c, json_array_get(list, 0), keyword, 0, level,
                              expr);
    }
    gpt2d_buf alts = GPT2D_BUF_INIT, one = GPT2D_BUF_INIT;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < json_array_size(list) && rc >= 0; i++) {
        one.len = 0;
        int r = jsc_compile_at(c, json_array_get(list, i), keyword, (long)i,
                               level, &one);
        if (r < 0)
            rc = -1;
        else if (r == 0 && (jsc_alt_sep(&alts, &n) != 0 ||
                            buf_append(&alts, one.data, one.len) != 0))
            rc = jsc_out_of_room(c);
    }
    if (rc == 0 && n == 0)
        rc = NO_INSTANCE; /* c->why holds the last branch's reason */
    if (rc == 0 && (gbnf_puts(expr, "(") != 0 ||
                    buf_append(expr, alts.data, alts.len) != 0 ||
                    gbnf_puts(expr, ")") != 0))
        rc = jsc_out_of_room(c);
    buf_free(&alts);
    buf_free(&one);
    return rc;
}

/* -- types -- */

enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_INTEGER = 4,
    T_NUMBER = 8,
    T_STRING = 16,
    T_ARRAY = 32,
    T_OBJECT = 64,
    T_ALL = 127
};

static const struct {
    const char *name;
    int bit;
} type_names[] = {
    { "null", T_NULL },     { "boolean", T_BOOLEAN }, { "integer", T_INTEGER },
    { "number", T_NUMBER }, { "string", T_STRING },   { "array", T_ARRAY },
    { "object", T_OBJECT },
};

static int type_bit(const char *name)
{
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++)
        if (strcmp(type_names[i].name, name) == 0)
            return type_names[i].bit;
    return 0;
}

static int read_types(compiler *c, const json_t *s, int *types)
{
    json_t *type = json_object_get(s, "type");
    *types = 0;
    if (type == NULL) {
        /* no type: the types its keywords are about, else every type */
        static const struct {
            const char *key;
            int bit;
        } implied[] = {
            { "properties", T_OBJECT },
            { "required", T_OBJECT },
            { "additionalProperties", T_OBJECT },
            { "items", T_ARRAY },
            { "minItems", T_ARRAY },
            { "maxItems", T_ARRAY },
            { "minLength", T_STRING },
            { "maxLength", T_STRING },
            { "pattern", T_STRING },
            { "format", T_STRING },
            { "minimum", T_NUMBER },
            { "maximum", T_NUMBER },
            { "exclusiveMinimum", T_NUMBER },
            { "exclusiveMaximum", T_NUMBER },
        };
        for (size_t i = 0; i < sizeof implied / sizeof *implied; i++)
            if (json_object_get(s, implied[i].key) != NULL)
                *types |= implied[i].bit;
        if (*types == 0)
            *types = T_ALL;
        return 0;
    }
    if (json_is_string(type)) {
        *types = type_bit(json_string_value(type));
        if (*types == 0)
            return jsc_fail(c, "type", "unknown type '%s'",
                            json_string_value(type));
        return 0;
    }
    if (!json_is_array(type) || json_array_size(type) == 0)
        return jsc_fail(c, "type",
                        "type must be a type name or a non-empty "
                        "array of them");
    for (size_t i = 0; i < json_array_size(type); i++) {
        json_t *t = json_array_get(type, i);
        int bit = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
        if (bit == 0) {
            size_t before = jsc_path_push(c, "type");
            jsc_path_push_index(c, i);
            int rc = jsc_fail(c, NULL, "unknown type");
            jsc_path_pop(c, before);
            return rc;
        }
        *types |= bit;
    }
    return 0;
}

static int compile_types(compiler *c, const json_t *s, unsigned level,
                         gpt2d_buf *expr)
{
    int types;
    if (read_types(c, s, &types) != 0)
        return -1;
    if (types & T_NUMBER)
        types &= ~T_INTEGER; /* every integer is a number */
    gpt2d_buf alts = GPT2D_BUF_INIT, one = GPT2D_BUF_INIT;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++) {
        int bit = type_names[i].bit;
        if (!(types & bit))
            continue;
        one.len = 0;
        int r;
        switch (bit) {
        case T_NULL:
            r = gbnf_puts(&one, "\"null\"") != 0 ? jsc_out_of_room(c) : 0;
            break;
        case T_BOOLEAN:
            r = gbnf_puts(&one, "\"true\" | \"false\"") != 0
                    ? jsc_out_of_room(c)
                    : 0;
            break;
        case T_INTEGER:
        case T_NUMBER:
            r = jsc_compile_number(c, s, bit == T_INTEGER, &one);
            break;
        case T_STRING:
            r = jsc_compile_string(c, s, &one);
            break;
        case T_ARRAY:
            r = jsc_compile_array(c, s, level, &one);
            break;
        default:
            r = jsc_compile_object(c, s, level, &one);
            break;
        }
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0 && (jsc_alt_sep(&alts, &n) != 0 ||
                       buf_append(&alts, one.data, one.len) != 0)) {
            rc = jsc_out_of_room(c);
            break;
        }
    }
    if (rc == 0 && n == 0)
        rc = NO_INSTANCE;
    if (rc == 0 && (gbnf_puts(expr, "(") != 0 ||
                    buf_append(expr, alts.data, alts.len) != 0 ||
                    gbnf_puts(expr, ")") != 0))
        rc = jsc_out_of_room(c);
    buf_free(&alts);
    buf_free(&one);
    return rc == 0 ? jsc_check_room(c, expr) : rc;
}

int jsc_compile(compiler *c, const json_t *s, unsigned level, gpt2d_buf *expr)
{
    if (json_is_true(s)) {
        json_t *any = json_object();
        int rc = any == NULL ? jsc_fail(c, NULL, "out of memory")
                             : compile_types(c, any, level, expr);
        json_decref(any);
        return rc;
    }
    if (json_is_false(s))
        return jsc_none(c, NULL, "the schema is false");
    if (!json_is_object(s))
        return jsc_fail(c, NULL, "a schema must be an object or a boolean");
    if (c->depth >= c->opt->max_depth)
        return jsc_fail(c, NULL, "the schema is nested deeper than %u levels",
                        c->opt->max_depth);
    c->depth++;
    int rc = check_keywords(c, s);
    if (rc == 0) {
        if (json_object_get(s, "$ref") != NULL)
            rc = jsc_compile_ref(c, s, level, expr);
        else if (json_object_get(s, "anyOf") != NULL)
            rc = compile_any_of(c, s, "anyOf", level, expr);
        else if (json_object_get(s, "oneOf") != NULL)
            rc = compile_any_of(c, s, "oneOf", level, expr);
        else if (json_object_get(s, "allOf") != NULL)
            rc = compile_any_of(c, s, "allOf", level, expr);
        else if (json_object_get(s, "enum") != NULL ||
                 json_object_get(s, "const") != NULL)
            rc = jsc_compile_enum(c, s, expr);
        else
            rc = compile_types(c, s, level, expr);
    }
    c->depth--;
    return rc;
}

/* ---- entry points ---- */

void json_schema_options_default(json_schema_options *opt)
{
    opt->strict = false;
    opt->param = "schema";
    opt->max_depth = 32;
    opt->max_recursion = 6;
    opt->max_value_depth = 8;
    opt->max_bytes = 256 * 1024;
}

static void compiler_free(compiler *c)
{
    for (size_t i = 0; i < c->n_memo; i++)
        free(c->memo[i].key);
    free(c->memo);
    gbnf_out_free(&c->out);
    free(c->refs);
    free(c->rec);
}

int json_schema_gbnf(const json_t *schema, const json_schema_options *opt,
                     const char *rule, gpt2d_buf *out, json_schema_error *err)
{
    compiler *c = calloc(1, sizeof *c);
    memset(err, 0, sizeof *err);
    if (c == NULL) {
        snprintf(err->param, sizeof err->param, "%s", opt->param);
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    c->opt = opt;
    c->root = schema;
    c->err = err;
    snprintf(c->path, sizeof c->path, "%s", opt->param);
    c->path_len = strlen(c->path);
    size_t start = out->len;
    gbnf_out_init(&c->out, out, rule, start + opt->max_bytes);
    int rc;
    if (!gbnf_rule_name_valid(rule)) {
        rc = jsc_fail(c, NULL, "the rule name '%s' is not [A-Za-z0-9-]+", rule);
    } else {
        gpt2d_buf body = GPT2D_BUF_INIT;
        rc = jsc_compile(c, schema, 0, &body);
        if (rc == NO_INSTANCE) {
            *err = c->why;
            rc = -1;
        } else if (rc == 0 &&
                   gbnf_out_rule(&c->out, rule, (const char *)body.data,
                                 body.len) != 0) {
            rc = jsc_out_of_room(c);
        }
        buf_free(&body);
    }
    compiler_free(c);
    free(c);
    if (rc != 0)
        out->len = start;
    return rc;
}

int json_schema_grammar(const json_t *schema, const json_schema_options *opt,
                        gpt2d_buf *out, json_schema_error *err)
{
    return json_schema_gbnf(schema, opt, "root", out, err);
}

int json_value_gbnf(bool object_only, const json_schema_options *opt,
                    const char *rule, gpt2d_buf *out, json_schema_error *err)
{
    json_t *schema = object_only ? json_pack("{s:s}", "type", "object")
                                 : json_true();
    if (schema == NULL) {
        memset(err, 0, sizeof *err);
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    int rc = json_schema_gbnf(schema, opt, rule, out, err);
    json_decref(schema);
    return rc;
}
