/* json_schema_enum.c — enum and const: each value that satisfies the
 * schema's other keywords, in its canonical text (see
 * json_schema_internal.h). */
#include "grammar/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_decimal.h"
#include "grammar/json_format.h"
#include "grammar/json_text_gbnf.h"
#include "grammar/regex_match.h"
#include "grammar/regex_parse.h"

/* -- enum and const -- */

static size_t utf8_chars_of(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* JSON Schema equality: numbers by value, objects regardless of order. */
static bool schema_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        json_decimal x, y;
        return json_decimal_from_json(a, &x) == 0 &&
               json_decimal_from_json(b, &y) == 0 &&
               json_decimal_cmp(&x, &y) == 0;
    }
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!schema_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)a, key, v)
        {
            json_t *w = json_object_get(b, key);
            if (w == NULL || !schema_equal(v, w))
                return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

static bool type_allows(const json_t *type, const json_t *v)
{
    if (type == NULL)
        return true;
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1);
         i++) {
        const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
        const char *name = json_string_value(t);
        if (name == NULL)
            continue;
        json_decimal d;
        if ((strcmp(name, "string") == 0 && json_is_string(v)) ||
            (strcmp(name, "number") == 0 && json_is_number(v)) ||
            (strcmp(name, "integer") == 0 && json_is_number(v) &&
             json_decimal_from_json(v, &d) == 0 &&
             json_decimal_is_integer(&d)) ||
            (strcmp(name, "boolean") == 0 && json_is_boolean(v)) ||
            (strcmp(name, "null") == 0 && json_is_null(v)) ||
            (strcmp(name, "object") == 0 && json_is_object(v)) ||
            (strcmp(name, "array") == 0 && json_is_array(v)))
            return true;
    }
    return false;
}

/* Whether a string value matches the schema's pattern and format. */
static int enum_string_matches(compiler *c, const json_t *s, const json_t *v,
                               bool *ok)
{
    static const char *const keys[] = { "pattern", "format" };
    for (size_t k = 0; k < 2 && *ok; k++) {
        json_t *p = json_object_get(s, keys[k]);
        if (p == NULL)
            continue;
        if (!json_is_string(p))
            return jsc_fail(c, keys[k], "%s must be a string", keys[k]);
        const char *source = json_string_value(p);
        if (k == 1) {
            source = json_format_pattern(json_string_value(p));
            if (source == NULL) {
                if (c->opt->strict)
                    return jsc_fail(c, "format",
                                    "the format '%s' is not supported (date, "
                                    "time, date-time, uuid, email, ipv4 are)",
                                    json_string_value(p));
                continue;
            }
        }
        regex *rx = NULL;
        regex_error rerr;
        if (regex_parse(source, strlen(source), &rx, &rerr) != 0)
            return jsc_fail(c, keys[k], "%s at offset %zu", rerr.message,
                            rerr.offset);
        regex_node *whole = regex_whole(rx, true);
        regex_free(rx);
        int m = whole != NULL ? regex_node_match(whole, json_string_value(v),
                                                 json_string_length(v))
                              : -1;
        regex_node_free(whole);
        if (m < 0)
            return jsc_fail(c, NULL, "out of memory");
        *ok = m == 1;
    }
    return 0;
}

/* Whether v satisfies the keywords beside enum/const that this checks;
 * the others are refused by compile_enum. */
static int enum_value_ok(compiler *c, const json_t *s, const json_t *v,
                         bool *ok)
{
    *ok = type_allows(json_object_get(s, "type"), v);
    if (!*ok)
        return 0;
    if (json_is_string(v)) {
        long long min, max;
        if (jsc_count_keyword(c, s, "minLength", &min) != 0 ||
            jsc_count_keyword(c, s, "maxLength", &max) != 0)
            return -1;
        size_t n = utf8_chars_of(json_string_value(v), json_string_length(v));
        *ok = (min < 0 || n >= (size_t)min) && (max < 0 || n <= (size_t)max);
        if (*ok)
            return enum_string_matches(c, s, v, ok);
    } else if (json_is_array(v)) {
        long long min, max;
        if (jsc_count_keyword(c, s, "minItems", &min) != 0 ||
            jsc_count_keyword(c, s, "maxItems", &max) != 0)
            return -1;
        size_t n = json_array_size(v);
        *ok = (min < 0 || n >= (size_t)min) && (max < 0 || n <= (size_t)max);
    } else if (json_is_number(v)) {
        number_bound lo, hi;
        json_decimal d;
        if (jsc_number_bounds(c, s, &lo, &hi) != 0)
            return -1;
        json_decimal_from_json(v, &d);
        int a = lo.present ? json_decimal_cmp(&d, &lo.value) : 1;
        int b = hi.present ? json_decimal_cmp(&d, &hi.value) : -1;
        *ok = (a > 0 || (a == 0 && !lo.exclusive)) &&
              (b < 0 || (b == 0 && !hi.exclusive));
    }
    return 0;
}

int jsc_compile_enum(compiler *c, const json_t *s, gpt2d_buf *expr)
{
    static const char *const refused[] = {
        "properties", "required", "items", "additionalProperties",
        "anyOf",      "oneOf",    "allOf", "$ref",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (json_object_get(s, refused[i]) != NULL)
            return jsc_fail(c, refused[i],
                            "'%s' beside enum or const is not supported",
                            refused[i]);
    json_t *values = json_object_get(s, "enum");
    json_t *konst = json_object_get(s, "const");
    if (values != NULL && !json_is_array(values))
        return jsc_fail(c, "enum", "enum must be an array");
    const char *key = values != NULL ? "enum" : "const";
    size_t n = values != NULL ? json_array_size(values) : 1;
    gpt2d_buf text = GPT2D_BUF_INIT;
    size_t alts = 0;
    int rc = 0;
    if (gbnf_puts(expr, "(") != 0)
        rc = jsc_out_of_room(c);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *v = values != NULL ? json_array_get(values, i) : konst;
        bool ok;
        if (enum_value_ok(c, s, v, &ok) != 0) {
            rc = -1;
            break;
        }
        if (ok && values != NULL && konst != NULL)
            ok = schema_equal(v, konst);
        if (!ok)
            continue;
        text.len = 0;
        if (json_text_canonical(v, &text) != 0 ||
            jsc_alt_sep(expr, &alts) != 0 ||
            gbnf_literal(expr, (const char *)text.data, text.len) != 0)
            rc = jsc_out_of_room(c);
    }
    buf_free(&text);
    if (rc != 0)
        return rc;
    if (alts == 0)
        return jsc_none(c, key,
                        "no value of %s satisfies the schema's other "
                        "keywords",
                        key);
    return gbnf_puts(expr, ")") != 0 ? jsc_out_of_room(c)
                                     : jsc_check_room(c, expr);
}
