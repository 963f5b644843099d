/* json_schema_scalar.c — numbers (bounds read exactly, number_range.h) and
 * strings (lengths, pattern, format; regex_gbnf.h, regex_length.h) for the
 * JSON Schema compiler (see json_schema_internal.h). */
#include "grammar/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_decimal.h"
#include "grammar/json_format.h"
#include "grammar/regex_gbnf.h"
#include "grammar/regex_length.h"
#include "grammar/regex_parse.h"

/* -- numbers -- */

static int read_bound(compiler *c, const json_t *s, const char *key,
                      bool exclusive, number_bound *b)
{
    json_t *v = json_object_get(s, key);
    if (v == NULL)
        return 0;
    if (!json_is_number(v))
        return jsc_fail(c, key, "%s must be a number", key);
    json_decimal d;
    if (json_decimal_from_json(v, &d) != 0)
        return jsc_fail(c, key, "%s must be a finite number", key);
    /* the tighter of minimum and exclusiveMinimum (likewise maximum) */
    bool lower = strstr(key, "inimum") != NULL;
    if (b->present) {
        int cmp = json_decimal_cmp(&d, &b->value);
        bool tighter = lower ? cmp > 0 || (cmp == 0 && exclusive)
                             : cmp < 0 || (cmp == 0 && exclusive);
        if (!tighter)
            return 0;
    }
    b->present = true;
    b->exclusive = exclusive;
    b->value = d;
    return 0;
}

int jsc_number_bounds(compiler *c, const json_t *s, number_bound *lo,
                      number_bound *hi)
{
    memset(lo, 0, sizeof *lo);
    memset(hi, 0, sizeof *hi);
    return read_bound(c, s, "minimum", false, lo) != 0 ||
                   read_bound(c, s, "exclusiveMinimum", true, lo) != 0 ||
                   read_bound(c, s, "maximum", false, hi) != 0 ||
                   read_bound(c, s, "exclusiveMaximum", true, hi) != 0
               ? -1
               : 0;
}

int jsc_compile_number(compiler *c, const json_t *s, bool integer,
                       gpt2d_buf *expr)
{
    number_bound lo, hi;
    if (jsc_number_bounds(c, s, &lo, &hi) != 0)
        return -1;
    if (!lo.present && !hi.present) {
        const char *name;
        if (jsc_plain_number_rule(c, integer, &name) != 0)
            return -1;
        return gbnf_puts(expr, name) != 0 ? jsc_out_of_room(c) : 0;
    }
    /* the same bounds elsewhere share the rule */
    gpt2d_buf key = GPT2D_BUF_INIT, body = GPT2D_BUF_INIT;
    int r = gbnf_printf(&key, "n%d%d%d%d%d|", integer, lo.present, lo.exclusive,
                        hi.present, hi.exclusive) != 0 ||
                    (lo.present && json_decimal_text(&lo.value, 64, &key)) ||
                    buf_append(&key, "|", 1) != 0 ||
                    (hi.present && json_decimal_text(&hi.value, 64, &key))
                ? -1
                : 0;
    const char *known = r == 0 ? jsc_memo_find(c, &key) : NULL;
    if (r != 0) {
        r = jsc_out_of_room(c);
    } else if (known != NULL) {
        r = gbnf_puts(expr, known) != 0 ? jsc_out_of_room(c) : 0;
    } else {
        r = number_range_expr(&lo, &hi, integer, &body);
        if (r < 0) {
            r = jsc_out_of_room(c);
        } else if (r == NO_INSTANCE) {
            const char *k = lo.present ? (lo.exclusive ? "exclusiveMinimum"
                                                       : "minimum")
                                       : (hi.exclusive ? "exclusiveMaximum"
                                                       : "maximum");
            r = jsc_none(c, k,
                         "no %s of at most %d digits lies within the bounds",
                         integer ? "integer" : "number", NUMBER_MAX_DIGITS);
        } else {
            r = jsc_memo_rule(c, &key, integer ? "int" : "num", &body, expr);
        }
    }
    buf_free(&key);
    buf_free(&body);
    return r;
}

/* -- strings -- */

/* A string keyword's regex ("pattern" or a format's) into *whole. */
static int string_regex(compiler *c, const char *key, const char *pattern,
                        regex_node **whole)
{
    regex *rx = NULL;
    regex_error rerr;
    if (regex_parse(pattern, strlen(pattern), &rx, &rerr) != 0)
        return jsc_fail(c, key, "%s at offset %zu", rerr.message, rerr.offset);
    *whole = regex_whole(rx, true);
    regex_free(rx);
    if (*whole == NULL)
        return jsc_fail(c, NULL, "out of memory");
    if (regex_node_matches_nothing(*whole)) {
        regex_node_free(*whole);
        *whole = NULL;
        return jsc_none(c, key, "the pattern matches no string");
    }
    return 0;
}

static int string_body(compiler *c, const char *key, const char *source,
                       long long min, long long max, gpt2d_buf *expr);

int jsc_compile_string(compiler *c, const json_t *s, gpt2d_buf *expr)
{
    long long min, max;
    if (jsc_count_keyword(c, s, "minLength", &min) != 0 ||
        jsc_count_keyword(c, s, "maxLength", &max) != 0)
        return -1;
    if (min < 0)
        min = 0;
    if (max >= 0 && min > max)
        return jsc_none(c, "minLength",
                        "minLength %lld is above maxLength %lld", min, max);
    json_t *pattern = json_object_get(s, "pattern");
    json_t *format = json_object_get(s, "format");
    if (pattern != NULL && !json_is_string(pattern))
        return jsc_fail(c, "pattern", "pattern must be a string");
    if (format != NULL && !json_is_string(format))
        return jsc_fail(c, "format", "format must be a string");
    const char *format_pattern = NULL;
    if (format != NULL) {
        format_pattern = json_format_pattern(json_string_value(format));
        if (format_pattern == NULL && c->opt->strict)
            return jsc_fail(c, "format",
                            "the format '%s' is not supported (date, time, "
                            "date-time, uuid, email, ipv4 are)",
                            json_string_value(format));
    }
    if (pattern != NULL && format_pattern != NULL)
        return jsc_fail(c, "pattern",
                        "pattern together with format is not supported");
    if (pattern == NULL && format_pattern == NULL) {
        if (jsc_char_rule(c) != 0)
            return -1;
        if (min == 0 && max < 0) {
            if (jsc_string_rule(c) != 0)
                return -1;
            return gbnf_puts(expr, c->string_rule) != 0 ? jsc_out_of_room(c)
                                                        : 0;
        }
        if (max == 0)
            return gbnf_puts(expr, "\"\\\"\\\"\"") != 0 ? jsc_out_of_room(c)
                                                        : 0;
        return gbnf_printf(expr, "\"\\\"\" %s", c->char_rule) != 0 ||
                       gbnf_repeat(expr, min, max) != 0 ||
                       gbnf_puts(expr, " \"\\\"\"") != 0
                   ? jsc_out_of_room(c)
                   : 0;
    }
    const char *key = pattern != NULL ? "pattern" : "format";
    const char *source = pattern != NULL ? json_string_value(pattern)
                                         : format_pattern;
    gpt2d_buf memo_key = GPT2D_BUF_INIT, body = GPT2D_BUF_INIT;
    if (gbnf_printf(&memo_key, "s%lld,%lld|", min, max) != 0 ||
        gbnf_puts(&memo_key, source) != 0) {
        buf_free(&memo_key);
        return jsc_out_of_room(c);
    }
    const char *known = jsc_memo_find(c, &memo_key);
    if (known != NULL) {
        buf_free(&memo_key);
        return gbnf_puts(expr, known) != 0 ? jsc_out_of_room(c) : 0;
    }
    int rc = string_body(c, key, source, min, max, &body);
    if (rc == 0)
        rc = jsc_memo_rule(c, &memo_key, "pat", &body, expr);
    buf_free(&memo_key);
    buf_free(&body);
    return rc;
}

/* The JSON string of a pattern's (or format's) strings, kept to min..max
 * characters (max < 0: no most). */
static int string_body(compiler *c, const char *key, const char *source,
                       long long min, long long max, gpt2d_buf *expr)
{
    regex_node *whole = NULL;
    int rc = string_regex(c, key, source, &whole);
    if (rc != 0)
        return rc;
    uint64_t rmin, rmax;
    regex_node_lengths(whole, &rmin, &rmax);
    bool max_ok = max < 0 || (rmax != REGEX_INF && rmax <= (uint64_t)max);
    if (rmin < (uint64_t)min || !max_ok) {
        /* the lengths are not implied: keep the pattern's strings to them */
        regex_node *kept = regex_restrict_length(
            whole, (uint64_t)min, max < 0 ? REGEX_INF : (uint64_t)max);
        regex_node_free(whole);
        whole = kept;
        if (whole == NULL)
            return jsc_fail(c, NULL, "out of memory");
    }
    if (regex_node_matches_nothing(whole)) {
        rc = jsc_none(c, key,
                      "no string the %s allows has a length within "
                      "minLength and maxLength",
                      key);
    } else if (gbnf_puts(expr, "\"\\\"\" ") != 0 ||
               regex_gbnf_expr(&c->out, whole, REGEX_GBNF_JSON_STRING, expr) !=
                   0 ||
               gbnf_puts(expr, " \"\\\"\"") != 0) {
        rc = jsc_out_of_room(c);
    }
    regex_node_free(whole);
    return rc;
}
