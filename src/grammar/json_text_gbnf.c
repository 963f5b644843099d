/* json_text_gbnf.c — canonical JSON text and string-character GBNF (see
 * json_text_gbnf.h). */
#include "grammar/json_text_gbnf.h"

#include <string.h>

#include "grammar/json_decimal.h"
#include "grammar/number_range.h"

/* The short escapes JSON has for control characters. */
static char short_escape(uint32_t c)
{
    switch (c) {
    case '\b':
        return 'b';
    case '\t':
        return 't';
    case '\n':
        return 'n';
    case '\f':
        return 'f';
    case '\r':
        return 'r';
    default:
        return 0;
    }
}

int json_text_string_chars(const char *s, size_t len, gpt2d_buf *out)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if (c == '"' || c == '\\')
            rc = gbnf_printf(out, "\\%c", c);
        else if (c < 0x20 && short_escape(c))
            rc = gbnf_printf(out, "\\%c", short_escape(c));
        else if (c < 0x20)
            rc = gbnf_printf(out, "\\u%04x", c);
        else
            rc = buf_append(out, &c, 1);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int json_text_canonical(const json_t *v, gpt2d_buf *out)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *value;
        bool first = true;
        if (buf_append(out, "{", 1) != 0)
            return -1;
        json_object_foreach((json_t *)v, key, value)
        {
            if ((!first && buf_append(out, ",", 1) != 0) ||
                buf_append(out, "\"", 1) != 0 ||
                json_text_string_chars(key, strlen(key), out) != 0 ||
                buf_append(out, "\":", 2) != 0 ||
                json_text_canonical(value, out) != 0)
                return -1;
            first = false;
        }
        return buf_append(out, "}", 1);
    }
    case JSON_ARRAY: {
        if (buf_append(out, "[", 1) != 0)
            return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i > 0 && buf_append(out, ",", 1) != 0) ||
                json_text_canonical(json_array_get(v, i), out) != 0)
                return -1;
        return buf_append(out, "]", 1);
    }
    case JSON_STRING:
        return buf_append(out, "\"", 1) != 0 ||
                       json_text_string_chars(json_string_value(v),
                                              json_string_length(v),
                                              out) != 0 ||
                       buf_append(out, "\"", 1) != 0
                   ? -1
                   : 0;
    case JSON_INTEGER:
    case JSON_REAL: {
        json_decimal d;
        if (json_decimal_from_json(v, &d) != 0)
            return -1;
        return json_decimal_text(&d, NUMBER_MAX_DIGITS, out);
    }
    case JSON_TRUE:
        return gbnf_puts(out, "true");
    case JSON_FALSE:
        return gbnf_puts(out, "false");
    case JSON_NULL:
        return gbnf_puts(out, "null");
    }
    return -1;
}

enum { SET_KIND_JSON_CHARS = 1 };

/* The rule's alternatives: the plain members as a class, then one escape
 * per member that needs one. */
static int chars_rule_body(const cp_set *set, const cp_set *plain,
                           gpt2d_buf *body)
{
    size_t n_alts = 0;
    if (!cp_set_empty(plain)) {
        if (gbnf_class(body, plain) != 0)
            return -1;
        n_alts++;
    }
    static const char specials[] = { '"', '\\' };
    for (size_t k = 0; k < sizeof specials; k++) {
        if (!cp_set_contains(set, (uint32_t)specials[k]))
            continue;
        char esc[2] = { '\\', specials[k] };
        if ((n_alts++ > 0 && gbnf_puts(body, " | ") != 0) ||
            gbnf_literal(body, esc, 2) != 0)
            return -1;
    }
    /* Short escapes, then \u00XX grouped by the fifth hex digit. */
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!cp_set_contains(set, c) || !short_escape(c))
            continue;
        char esc[2] = { '\\', short_escape(c) };
        if ((n_alts++ > 0 && gbnf_puts(body, " | ") != 0) ||
            gbnf_literal(body, esc, 2) != 0)
            return -1;
    }
    for (uint32_t high = 0; high < 2; high++) {
        cp_set hex = CP_SET_INIT;
        for (uint32_t low = 0; low < 16; low++) {
            uint32_t c = high * 16 + low;
            if (cp_set_contains(set, c) && !short_escape(c) &&
                cp_set_add(&hex, low < 10 ? '0' + low : 'a' + low - 10,
                           low < 10 ? '0' + low : 'a' + low - 10) != 0) {
                cp_set_free(&hex);
                return -1;
            }
        }
        int rc = 0;
        if (!cp_set_empty(&hex)) {
            char esc[5] = { '\\', 'u', '0', '0', (char)('0' + high) };
            rc = (n_alts++ > 0 && gbnf_puts(body, " | ") != 0) ||
                         gbnf_literal(body, esc, 5) != 0 ||
                         gbnf_puts(body, " ") != 0 ||
                         gbnf_class(body, &hex) != 0
                     ? -1
                     : 0;
        }
        cp_set_free(&hex);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int json_chars_expr(gbnf_out *o, const cp_set *set, gpt2d_buf *expr)
{
    cp_set plain_all = CP_SET_INIT, plain = CP_SET_INIT;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = -1;
    if (cp_set_add(&plain_all, 0x20, 0x21) != 0 ||
        cp_set_add(&plain_all, 0x23, 0x5B) != 0 ||
        cp_set_add(&plain_all, 0x5D, CP_MAX) != 0 ||
        cp_set_intersect(set, &plain_all, &plain) != 0)
        goto done;
    if (cp_set_equal(&plain, set)) {
        rc = gbnf_class(expr, set);
        goto done;
    }
    const char *known = gbnf_out_find_set(o, SET_KIND_JSON_CHARS, set);
    if (known != NULL) {
        rc = gbnf_puts(expr, known);
        goto done;
    }
    char name[GBNF_NAME_MAX + 1];
    gbnf_out_name(o, "c", name);
    if (chars_rule_body(set, &plain, &body) != 0 ||
        gbnf_out_rule(o, name, (const char *)body.data, body.len) != 0 ||
        gbnf_out_remember_set(o, SET_KIND_JSON_CHARS, set, name) != 0 ||
        gbnf_puts(expr, name) != 0)
        goto done;
    rc = 0;
done:
    cp_set_free(&plain_all);
    cp_set_free(&plain);
    buf_free(&body);
    return rc;
}
