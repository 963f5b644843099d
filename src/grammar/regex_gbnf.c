/* regex_gbnf.c — a parsed regex as a GBNF expression (see regex_gbnf.h).
 *
 * The tree maps onto GBNF one to one, except where a repetition without
 * an upper bound would repeat something that can be empty: x* with x
 * nullable is written (x less the empty string)*, which matches the same
 * strings and keeps the grammar free of left recursion. */
#include "grammar/regex_gbnf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_text_gbnf.h"

static bool nullable(const regex_node *n)
{
    switch (n->kind) {
    case REGEX_SET:
        return false;
    case REGEX_CAT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (!nullable(n->kids[i]))
                return false;
        return true;
    case REGEX_ALT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (nullable(n->kids[i]))
                return true;
        return false;
    case REGEX_REPEAT:
        return n->min == 0 || n->max == 0 || nullable(n->kids[0]) ||
               regex_node_matches_nothing(n->kids[0]);
    }
    return false;
}

static bool is_empty_string(const regex_node *n)
{
    return (n->kind == REGEX_CAT && n->n_kids == 0) ||
           (n->kind == REGEX_REPEAT &&
            (n->max == 0 || regex_node_matches_nothing(n->kids[0])));
}

static int expr(gbnf_out *o, const regex_node *n, regex_gbnf_mode mode,
                bool non_empty, gpt2d_buf *b);

/* One part of a sequence or repetition, in parentheses unless it is a
 * single symbol. */
static int grouped(gbnf_out *o, const regex_node *n, regex_gbnf_mode mode,
                   bool non_empty, gpt2d_buf *b)
{
    gpt2d_buf inner = GPT2D_BUF_INIT;
    int rc = expr(o, n, mode, non_empty, &inner);
    if (rc == 0) {
        bool simple = true;
        int depth = 0;
        bool in_literal = false;
        for (size_t i = 0; i < inner.len && simple; i++) {
            char c = (char)inner.data[i];
            if (in_literal) {
                if (c == '\\')
                    i++;
                else if (c == '"')
                    in_literal = false;
            } else if (c == '"') {
                in_literal = true;
            } else if (c == '[' || c == '(') {
                depth++;
            } else if (c == ']' || c == ')') {
                depth--;
            } else if (c == '\\') {
                i++;
            } else if (depth == 0 && (c == ' ' || c == '|' || c == '?' ||
                                      c == '*' || c == '+' || c == '{')) {
                simple = false;
            }
        }
        rc = (!simple && gbnf_puts(b, "(") != 0) ||
                     buf_append(b, inner.data, inner.len) != 0 ||
                     (!simple && gbnf_puts(b, ")") != 0)
                 ? -1
                 : 0;
    }
    buf_free(&inner);
    return rc;
}

static int set_expr(gbnf_out *o, const cp_set *s, regex_gbnf_mode mode,
                    gpt2d_buf *b)
{
    return mode == REGEX_GBNF_RAW ? gbnf_class(b, s) : json_chars_expr(o, s, b);
}

/* Alternatives of a sequence kids[from..] with at least one character
 * (non_empty), when all of them are nullable:
 *   ne(k0 k1 ...) = ne(k0) k1 ... | ne(k1 ...) */
static int cat_non_empty(gbnf_out *o, const regex_node *n, size_t from,
                         regex_gbnf_mode mode, gpt2d_buf *b)
{
    size_t alts = 0;
    if (gbnf_puts(b, "(") != 0)
        return -1;
    for (size_t i = from; i < n->n_kids; i++) {
        if (is_empty_string(n->kids[i]))
            continue;
        if (alts++ > 0 && gbnf_puts(b, " | ") != 0)
            return -1;
        if (grouped(o, n->kids[i], mode, true, b) != 0)
            return -1;
        for (size_t j = i + 1; j < n->n_kids; j++) {
            if (is_empty_string(n->kids[j]))
                continue;
            if (gbnf_puts(b, " ") != 0 ||
                grouped(o, n->kids[j], mode, false, b) != 0)
                return -1;
        }
    }
    return gbnf_puts(b, ")");
}

/* The repetition suffix for {min,max}; "" for {1,1}. */
static int suffix(gpt2d_buf *b, uint32_t min, uint32_t max)
{
    return gbnf_repeat(b, min, max == REGEX_INF ? -1 : (long long)max);
}

static bool single_char(const regex_node *n)
{
    return n->kind == REGEX_SET && n->set.n == 1 &&
           n->set.r[0].lo == n->set.r[0].hi;
}

/* How many kids from i on are single characters. */
static size_t single_chars(const regex_node *n, size_t i)
{
    size_t k = i;
    while (k < n->n_kids && single_char(n->kids[k]))
        k++;
    return k - i;
}

/* The characters of kids[i, i + run) as one literal (in JSON mode, their
 * one canonical spelling). */
static int run_literal(const regex_node *n, size_t i, size_t run,
                       regex_gbnf_mode mode, gpt2d_buf *b)
{
    gpt2d_buf utf8 = GPT2D_BUF_INIT, text = GPT2D_BUF_INIT;
    int rc = 0;
    for (size_t k = i; k < i + run && rc == 0; k++) {
        uint32_t c = n->kids[k]->set.r[0].lo;
        unsigned char u[4];
        size_t len = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (len == 1) {
            u[0] = (unsigned char)c;
        } else {
            for (size_t j = len - 1; j > 0; j--, c >>= 6)
                u[j] = (unsigned char)(0x80 | (c & 0x3F));
            u[0] = (unsigned char)((0xF00u >> len) | c);
        }
        rc = buf_append(&utf8, u, len);
    }
    if (rc == 0 && mode == REGEX_GBNF_JSON_STRING)
        rc = json_text_string_chars((const char *)utf8.data, utf8.len, &text);
    if (rc == 0)
        rc = mode == REGEX_GBNF_JSON_STRING
                 ? gbnf_literal(b, (const char *)text.data, text.len)
                 : gbnf_literal(b, (const char *)utf8.data, utf8.len);
    buf_free(&utf8);
    buf_free(&text);
    return rc;
}

/* `non_empty`: spell only the node's non-empty matches (the node is
 * nullable and sits under an unbounded repetition). */
static int expr(gbnf_out *o, const regex_node *n, regex_gbnf_mode mode,
                bool non_empty, gpt2d_buf *b)
{
    if (non_empty && !nullable(n))
        non_empty = false;
    switch (n->kind) {
    case REGEX_SET:
        return set_expr(o, &n->set, mode, b);
    case REGEX_CAT: {
        if (non_empty)
            return cat_non_empty(o, n, 0, mode, b);
        size_t parts = 0;
        for (size_t i = 0; i < n->n_kids;) {
            if (is_empty_string(n->kids[i])) {
                i++;
                continue;
            }
            if (parts++ > 0 && gbnf_puts(b, " ") != 0)
                return -1;
            size_t run = single_chars(n, i);
            if (run > 1) { /* "abc", not "a" "b" "c" */
                if (run_literal(n, i, run, mode, b) != 0)
                    return -1;
                i += run;
                continue;
            }
            if (grouped(o, n->kids[i], mode, false, b) != 0)
                return -1;
            i++;
        }
        return parts == 0 ? gbnf_puts(b, "\"\"") : 0;
    }
    case REGEX_ALT: {
        size_t alts = 0;
        bool optional = false;
        gpt2d_buf inner = GPT2D_BUF_INIT;
        int rc = 0;
        for (size_t i = 0; i < n->n_kids && rc == 0; i++) {
            const regex_node *k = n->kids[i];
            if (regex_node_matches_nothing(k))
                continue;
            if (is_empty_string(k)) {
                optional = true;
                continue;
            }
            if (nullable(k))
                optional = true;
            if (alts++ > 0 && gbnf_puts(&inner, " | ") != 0)
                rc = -1;
            else
                rc = expr(o, k, mode, true, &inner);
        }
        if (rc == 0) {
            if (alts == 0)
                rc = gbnf_puts(b, "\"\""); /* only the empty string */
            else if (optional && !non_empty)
                rc = gbnf_puts(b, "(") != 0 ||
                             buf_append(b, inner.data, inner.len) != 0 ||
                             gbnf_puts(b, ")?") != 0
                         ? -1
                         : 0;
            else
                rc = gbnf_puts(b, "(") != 0 ||
                             buf_append(b, inner.data, inner.len) != 0 ||
                             gbnf_puts(b, ")") != 0
                         ? -1
                         : 0;
        }
        buf_free(&inner);
        return rc;
    }
    case REGEX_REPEAT: {
        const regex_node *k = n->kids[0];
        if (is_empty_string(n) || is_empty_string(k))
            return gbnf_puts(b, "\"\"");
        uint32_t min = n->min, max = n->max;
        bool k_nullable = nullable(k);
        if (non_empty) {
            /* at least one non-empty round: ne(k) k{0,max-1}, or ne(k)+ */
            if (max == REGEX_INF)
                return grouped(o, k, mode, true, b) != 0 || suffix(b, 1, max)
                           ? -1
                           : 0;
            if (grouped(o, k, mode, true, b) != 0)
                return -1;
            if (max > 1 &&
                (gbnf_puts(b, " ") != 0 || grouped(o, k, mode, false, b) != 0 ||
                 suffix(b, 0, max - 1) != 0))
                return -1;
            return 0;
        }
        if (k_nullable && max == REGEX_INF) /* empty rounds fill any min */
            return grouped(o, k, mode, true, b) != 0 || suffix(b, 0, max) != 0
                       ? -1
                       : 0;
        if (k_nullable)
            min = 0;
        return grouped(o, k, mode, false, b) != 0 || suffix(b, min, max) != 0
                   ? -1
                   : 0;
    }
    }
    return -1;
}

int regex_gbnf_expr(gbnf_out *o, const regex_node *n, regex_gbnf_mode mode,
                    gpt2d_buf *b)
{
    return expr(o, n, mode, false, b);
}

int regex_gbnf(const char *pattern, size_t len, regex_gbnf_mode mode,
               const char *rule, size_t max_bytes, gpt2d_buf *out,
               regex_error *err)
{
    regex *rx = NULL;
    if (regex_parse(pattern, len, &rx, err) != 0)
        return -1;
    regex_node *whole = regex_whole(rx, mode == REGEX_GBNF_JSON_STRING);
    regex_free(rx);
    err->offset = 0;
    if (whole == NULL) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    if (regex_node_matches_nothing(whole)) {
        regex_node_free(whole);
        snprintf(err->message, sizeof err->message,
                 "the pattern matches no text at all");
        return -1;
    }
    gbnf_out o;
    gbnf_out_init(&o, out, rule, max_bytes);
    gpt2d_buf body = GPT2D_BUF_INIT;
    size_t start = out->len;
    int rc = regex_gbnf_expr(&o, whole, mode, &body);
    if (rc == 0)
        rc = gbnf_out_rule(&o, rule, (const char *)body.data, body.len);
    if (rc != 0) {
        snprintf(err->message, sizeof err->message,
                 o.over_budget || gbnf_out_over_budget(&o, body.len)
                     ? "the pattern's grammar is larger than %zu bytes"
                     : "out of memory",
                 max_bytes);
        out->len = start;
    }
    buf_free(&body);
    gbnf_out_free(&o);
    regex_node_free(whole);
    return rc;
}
