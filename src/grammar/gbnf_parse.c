/* gbnf_parse.c — GBNF text into rules over bytes (gbnf_parse.h).
 *
 * A recursive-descent reader of llama.cpp's grammar language:
 *
 *   grammar     := space* rule*
 *   rule        := name ' '* "::=" space* alternates (newline | end)
 *   alternates  := sequence ('|' space* sequence)*
 *   sequence    := (item repetition*)*
 *   item        := "literal" | [class] | name | ( alternates ) | .
 *   repetition  := * | + | ? | {m} | {m,} | {m,n}
 *
 * Spaces, tabs and # comments separate items; a newline ends a rule except
 * inside parentheses and right after "::=" or '|' (as in llama.cpp).  A
 * repetition applies to everything the last item produced (a whole
 * literal, or the previous repetition's expansion), and expands into
 * helper rules: x* is S ::= x S | (nothing), x{m,n} is m copies of x and a
 * chain of n - m optional ones.  Every count is checked against the budget
 * before anything is built for it.  One compiling thread. */
#include "grammar/gbnf_parse.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_utf8.h"

/* The most characters of a rule name an error message quotes. */
#define NAME_SHOWN 64
/* Counts in {m,n} beyond this are reported as too large, whatever the
 * budget (they could never fit one). */
#define COUNT_CAP 1000000000u

typedef struct seq {
    gr_elem *e;
    uint32_t *src;
    size_t n, cap;
} seq;

typedef struct parser {
    const char *s;
    size_t len, pos;
    gr_rules *r;
    gpt2d_error *err;
    uint32_t *names; /* open addressing over named rules: id + 1 */
    size_t names_cap, n_named;
    int depth;
    bool have_any; /* `.` built once, shared */
    gr_elem any;
} parser;

/* ---- positions and errors ---- */

static void position_of(const char *text, size_t len, size_t off,
                        unsigned long *line, unsigned long *col)
{
    unsigned long l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        unsigned char b = (unsigned char)text[i];
        if (b == '\n') {
            l++;
            c = 1;
        } else if ((b & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int gbnf_error_at(gpt2d_error *err, const char *text, size_t len, size_t off,
                  const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    unsigned long line, col;
    position_of(text, len, off, &line, &col);
    int n = snprintf(err->message, sizeof err->message,
                     "line %lu column %lu: ", line, col);
    if (n < 0 || (size_t)n >= sizeof err->message)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message + n, sizeof err->message - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

#define FAIL_AT(p, off, ...)                                                   \
    gbnf_error_at((p)->err, (p)->s, (p)->len, off, __VA_ARGS__)

static int status_error(parser *p, gr_status st, size_t off)
{
    switch (st) {
    case GR_TOO_MANY_RULES:
        return FAIL_AT(p, off,
                       "the grammar needs more than %zu rules once groups, "
                       "classes and repetitions are expanded",
                       p->r->max_rules);
    case GR_TOO_MANY_ELEMENTS:
        return FAIL_AT(p, off,
                       "the grammar needs more than %zu elements once "
                       "repetitions are expanded",
                       p->r->max_symbols);
    case GR_NO_MEMORY:
        return FAIL_AT(p, off, "out of memory");
    case GR_OK:
        break;
    }
    return 0;
}

/* ---- characters ---- */

static int peek(const parser *p)
{
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-';
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* Spaces, tabs and comments; newlines too when `newlines`. */
static void skip_space(parser *p, bool newlines)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n' &&
                   p->s[p->pos] != '\r')
                p->pos++;
        } else {
            break;
        }
    }
}

/* One UTF-8 character of the source at p->pos; refuses invalid UTF-8. */
static int read_utf8(parser *p, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned char b = s[0];
    int n;
    uint32_t v, min;
    if (b < 0x80) {
        *cp = b;
        p->pos++;
        return 0;
    } else if (b >= 0xC2 && b <= 0xDF) {
        n = 2, v = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3, v = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4, v = b & 0x07, min = 0x10000;
    } else {
        return FAIL_AT(p, p->pos, "invalid UTF-8 (byte 0x%02X)", b);
    }
    if (left < (size_t)n)
        return FAIL_AT(p, p->pos, "invalid UTF-8 (a character cut short)");
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return FAIL_AT(p, p->pos, "invalid UTF-8 (byte 0x%02X)", s[i]);
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > GR_CODE_POINT_MAX || (v >= 0xD800 && v <= 0xDFFF))
        return FAIL_AT(p, p->pos,
                       "invalid UTF-8 (an overlong form or a "
                       "surrogate)");
    *cp = v;
    p->pos += (size_t)n;
    return 0;
}

static int read_hex(parser *p, int digits, uint32_t *cp)
{
    size_t at = p->pos - 2; /* the backslash */
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p);
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return FAIL_AT(p, at, "expecting %d hex digits after \\%c", digits,
                           p->s[at + 1]);
        v = (v << 4) | (uint32_t)d;
        p->pos++;
    }
    *cp = v;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 character.
 * Escapes give code points; a surrogate or one past U+10FFFF is refused
 * (UTF-8 has no bytes for it). */
static int read_char(parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    if (peek(p) != '\\')
        return read_utf8(p, cp);
    p->pos++;
    int c = peek(p);
    if (c < 0)
        return FAIL_AT(p, at, "the grammar ends inside an escape");
    p->pos++;
    switch (c) {
    case 'x':
        if (read_hex(p, 2, cp) != 0)
            return -1;
        break;
    case 'u':
        if (read_hex(p, 4, cp) != 0)
            return -1;
        break;
    case 'U':
        if (read_hex(p, 8, cp) != 0)
            return -1;
        break;
    case 'n':
        *cp = '\n';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
        *cp = (uint32_t)c;
        return 0;
    default:
        if (c >= 0x21 && c < 0x7F)
            return FAIL_AT(p, at, "unknown escape \\%c", c);
        return FAIL_AT(p, at, "unknown escape (a backslash before byte 0x%02X)",
                       c);
    }
    if (*cp > GR_CODE_POINT_MAX)
        return FAIL_AT(p, at, "U+%X is beyond U+10FFFF, the last character",
                       (unsigned)*cp);
    if (*cp >= 0xD800 && *cp <= 0xDFFF)
        return FAIL_AT(p, at, "U+%04X is a surrogate, not a character",
                       (unsigned)*cp);
    return 0;
}

/* ---- sequences under construction ---- */

static int seq_push(parser *p, seq *q, gr_elem e, size_t src)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 16;
        gr_elem *e2 = realloc(q->e, cap * sizeof *e2);
        if (e2 == NULL)
            return FAIL_AT(p, src, "out of memory");
        q->e = e2;
        uint32_t *s2 = realloc(q->src, cap * sizeof *s2);
        if (s2 == NULL)
            return FAIL_AT(p, src, "out of memory");
        q->src = s2;
        q->cap = cap;
    }
    q->e[q->n] = e;
    q->src[q->n] = (uint32_t)src;
    q->n++;
    return 0;
}

static void seq_free(seq *q)
{
    free(q->e);
    free(q->src);
}

static int new_rule(parser *p, uint32_t owner, size_t src, uint32_t *id)
{
    gr_status st = gr_rule_new(p->r, owner, (uint32_t)src, id);
    if (st != GR_OK)
        return status_error(p, st, src);
    return 0;
}

static int add_alt(parser *p, uint32_t rule, const gr_elem *e,
                   const uint32_t *src, size_t n, size_t at)
{
    gr_status st = gr_alt_add(p->r, rule, e, src, n);
    return st == GR_OK ? 0 : status_error(p, st, at);
}

/* ---- named rules ---- */

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static bool name_equal(const parser *p, uint32_t id, const char *s, size_t n)
{
    const gr_rule *r = &p->r->rules[id];
    return r->name_len == n && memcmp(p->s + r->name_off, s, n) == 0;
}

static int names_grow(parser *p)
{
    size_t cap = p->names_cap ? 2 * p->names_cap : 64;
    uint32_t *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < p->names_cap; i++) {
        uint32_t v = p->names[i];
        if (v == 0)
            continue;
        const gr_rule *r = &p->r->rules[v - 1];
        size_t j = name_hash(p->s + r->name_off, r->name_len) & (cap - 1);
        while (t[j] != 0)
            j = (j + 1) & (cap - 1);
        t[j] = v;
    }
    free(p->names);
    p->names = t;
    p->names_cap = cap;
    return 0;
}

/* The rule named by the `n` bytes at `off`, made (undefined) when new. */
static int named_rule(parser *p, size_t off, size_t n, uint32_t *id)
{
    if (2 * (p->n_named + 1) > p->names_cap && names_grow(p) != 0)
        return FAIL_AT(p, off, "out of memory");
    const char *s = p->s + off;
    size_t j = name_hash(s, n) & (p->names_cap - 1);
    while (p->names[j] != 0) {
        if (name_equal(p, p->names[j] - 1, s, n)) {
            *id = p->names[j] - 1;
            return 0;
        }
        j = (j + 1) & (p->names_cap - 1);
    }
    if (new_rule(p, (uint32_t)p->r->n_rules, off, id) != 0)
        return -1;
    gr_rule *r = &p->r->rules[*id];
    r->named = true;
    r->name_off = (uint32_t)off;
    r->name_len = (uint32_t)n;
    p->names[j] = *id + 1;
    p->n_named++;
    return 0;
}

static size_t read_name(parser *p)
{
    size_t start = p->pos;
    while (is_name_char(peek(p)))
        p->pos++;
    return p->pos - start;
}

/* ---- items ---- */

static int parse_alternates(parser *p, uint32_t rule, uint32_t owner,
                            bool nested);

static int parse_literal(parser *p, seq *q)
{
    size_t open = p->pos++;
    while (peek(p) != '"') {
        if (peek(p) < 0)
            return FAIL_AT(p, open,
                           "this literal is never closed ('\"' "
                           "missing)");
        size_t at = p->pos;
        uint32_t cp;
        if (read_char(p, &cp) != 0)
            return -1;
        uint8_t bytes[4];
        int n = gr_utf8_encode(cp, bytes);
        for (int i = 0; i < n; i++) {
            gr_byteset set = { { 0 } };
            gr_byteset_add_range(&set, bytes[i], bytes[i]);
            uint32_t id;
            gr_status st = gr_set_intern(p->r, &set, &id);
            if (st != GR_OK)
                return status_error(p, st, at);
            if (seq_push(p, q, gr_make(GR_BYTES, id), at) != 0)
                return -1;
        }
    }
    p->pos++;
    return 0;
}

static int parse_class(parser *p, uint32_t owner, seq *q)
{
    size_t open = p->pos++;
    bool negate = false;
    if (peek(p) == '^') {
        negate = true;
        p->pos++;
    }
    gr_cp_range *ranges = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    while (peek(p) != ']') {
        if (peek(p) < 0) {
            FAIL_AT(p, open,
                    "this character class is never closed (']' missing)");
            goto out;
        }
        size_t at = p->pos;
        uint32_t lo, hi;
        if (read_char(p, &lo) != 0)
            goto out;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (read_char(p, &hi) != 0)
                goto out;
            if (hi < lo) {
                FAIL_AT(p, at, "the range U+%04X-U+%04X ends before it starts",
                        (unsigned)lo, (unsigned)hi);
                goto out;
            }
        }
        if (n + 2 >= cap) {
            size_t c2 = cap ? 2 * cap : 16;
            gr_cp_range *r2 = realloc(ranges, c2 * sizeof *r2);
            if (r2 == NULL) {
                FAIL_AT(p, at, "out of memory");
                goto out;
            }
            ranges = r2;
            cap = c2;
        }
        ranges[n].lo = lo;
        ranges[n].hi = hi;
        n++;
    }
    p->pos++;
    gr_cp_range *norm = malloc((n + 2) * sizeof *norm);
    if (norm == NULL) {
        FAIL_AT(p, open, "out of memory");
        goto out;
    }
    size_t m = gr_cp_normalize(ranges, n, negate, norm);
    gr_elem e;
    gr_status st = gr_class_element(p->r, norm, m, owner, (uint32_t)open, &e);
    free(norm);
    if (st != GR_OK) {
        status_error(p, st, open);
        goto out;
    }
    rc = seq_push(p, q, e, open);
out:
    free(ranges);
    return rc;
}

static int parse_any(parser *p, uint32_t owner, seq *q)
{
    size_t at = p->pos++;
    if (!p->have_any) {
        gr_cp_range all = { 0, GR_CODE_POINT_MAX }, norm[3];
        size_t m = gr_cp_normalize(&all, 1, false, norm);
        gr_status st = gr_class_element(p->r, norm, m, owner, (uint32_t)at,
                                        &p->any);
        if (st != GR_OK)
            return status_error(p, st, at);
        p->have_any = true;
    }
    return seq_push(p, q, p->any, at);
}

static int parse_group(parser *p, uint32_t owner, seq *q)
{
    size_t open = p->pos++;
    if (p->depth >= GBNF_MAX_NESTING)
        return FAIL_AT(p, open, "groups nested more than %d deep",
                       GBNF_MAX_NESTING);
    uint32_t rule;
    if (new_rule(p, owner, open, &rule) != 0)
        return -1;
    p->r->rules[rule].defined = true;
    skip_space(p, true);
    p->depth++;
    int rc = parse_alternates(p, rule, owner, true);
    p->depth--;
    if (rc != 0)
        return -1;
    if (peek(p) < 0)
        return FAIL_AT(p, open, "this '(' is never closed");
    if (peek(p) != ')') {
        unsigned long line, col;
        position_of(p->s, p->len, open, &line, &col);
        return FAIL_AT(p, p->pos,
                       "expecting ')' to close the group opened at line %lu "
                       "column %lu",
                       line, col);
    }
    p->pos++;
    return seq_push(p, q, gr_make(GR_RULE, rule), open);
}

/* A count in {m,n}: digits, capped so that it cannot overflow. */
static int read_count(parser *p, size_t *out)
{
    size_t at = p->pos;
    if (!is_digit(peek(p)))
        return FAIL_AT(p, at, "expecting a number in the repetition");
    size_t v = 0;
    while (is_digit(peek(p))) {
        if (v < COUNT_CAP)
            v = v * 10 + (size_t)(peek(p) - '0');
        p->pos++;
    }
    *out = v;
    return 0;
}

#define UNBOUNDED ((size_t)-1)

/* Replaces q's elements from `unit` on with `unit{min,max}`. */
static int expand_repetition(parser *p, uint32_t owner, seq *q, size_t unit,
                             size_t min, size_t max, size_t at)
{
    size_t unit_n = q->n - unit;
    gr_elem e;
    if (unit_n == 1) {
        e = q->e[unit];
    } else {
        uint32_t h;
        if (new_rule(p, owner, at, &h) != 0)
            return -1;
        p->r->rules[h].defined = true;
        if (add_alt(p, h, q->e + unit, q->src + unit, unit_n, at) != 0)
            return -1;
        e = gr_make(GR_RULE, h);
    }
    q->n = unit;
    /* Everything this expansion adds: min copies here, and two elements
     * per optional copy (or for the star's rule). */
    size_t extra = max == UNBOUNDED ? 2 : 2 * (max - min);
    if (min >= COUNT_CAP || extra >= 2 * (size_t)COUNT_CAP ||
        gr_reserve_symbols(p->r, q->n + min + extra) != GR_OK)
        return status_error(p, GR_TOO_MANY_ELEMENTS, at);
    for (size_t i = 0; i < min; i++)
        if (seq_push(p, q, e, at) != 0)
            return -1;
    if (max == UNBOUNDED) {
        /* S ::= e S | (nothing) */
        uint32_t s;
        if (new_rule(p, owner, at, &s) != 0)
            return -1;
        p->r->rules[s].defined = true;
        gr_elem body[2] = { e, gr_make(GR_RULE, s) };
        uint32_t srcs[2] = { (uint32_t)at, (uint32_t)at };
        if (add_alt(p, s, body, srcs, 2, at) != 0 ||
            add_alt(p, s, NULL, NULL, 0, at) != 0)
            return -1;
        return seq_push(p, q, gr_make(GR_RULE, s), at);
    }
    /* O1 ::= e | (nothing);  Ok ::= e O(k-1) | (nothing) */
    uint32_t prev = 0;
    for (size_t k = 1; k <= max - min; k++) {
        uint32_t o;
        if (new_rule(p, owner, at, &o) != 0)
            return -1;
        p->r->rules[o].defined = true;
        gr_elem body[2] = { e, gr_make(GR_RULE, prev) };
        uint32_t srcs[2] = { (uint32_t)at, (uint32_t)at };
        if (add_alt(p, o, body, srcs, k > 1 ? 2 : 1, at) != 0 ||
            add_alt(p, o, NULL, NULL, 0, at) != 0)
            return -1;
        prev = o;
    }
    if (max > min)
        return seq_push(p, q, gr_make(GR_RULE, prev), at);
    return 0;
}

static int parse_repetition(parser *p, uint32_t owner, seq *q, size_t unit,
                            bool nested)
{
    size_t at = p->pos;
    int c = peek(p);
    if (unit == UNBOUNDED || unit == q->n)
        return FAIL_AT(p, at, "expecting an item before '%c'", c);
    size_t min, max;
    p->pos++;
    if (c == '*') {
        min = 0, max = UNBOUNDED;
    } else if (c == '+') {
        min = 1, max = UNBOUNDED;
    } else if (c == '?') {
        min = 0, max = 1;
    } else {
        skip_space(p, nested);
        if (read_count(p, &min) != 0)
            return -1;
        skip_space(p, nested);
        if (peek(p) == '}') {
            max = min;
        } else if (peek(p) == ',') {
            p->pos++;
            skip_space(p, nested);
            max = UNBOUNDED;
            if (is_digit(peek(p)) && read_count(p, &max) != 0)
                return -1;
            skip_space(p, nested);
            if (peek(p) != '}')
                return FAIL_AT(p, p->pos,
                               "expecting '}' to close the "
                               "repetition");
        } else {
            return FAIL_AT(p, p->pos,
                           "expecting ',' or '}' in the "
                           "repetition");
        }
        p->pos++;
        if (max != UNBOUNDED && max < min)
            return FAIL_AT(p, at,
                           "the repetition's most (%zu) is less than its "
                           "least (%zu)",
                           max, min);
    }
    return expand_repetition(p, owner, q, unit, min, max, at);
}

/* Items until something that cannot continue the sequence. */
static int parse_sequence(parser *p, uint32_t owner, seq *q, bool nested)
{
    size_t unit = UNBOUNDED; /* where the last item's elements begin */
    for (;;) {
        int c = peek(p);
        size_t before = q->n;
        int rc;
        if (c == '"') {
            rc = parse_literal(p, q);
        } else if (c == '[') {
            rc = parse_class(p, owner, q);
        } else if (is_name_char(c)) {
            size_t at = p->pos;
            size_t n = read_name(p);
            uint32_t id;
            rc = named_rule(p, at, n, &id);
            if (rc == 0)
                rc = seq_push(p, q, gr_make(GR_RULE, id), at);
        } else if (c == '(') {
            rc = parse_group(p, owner, q);
        } else if (c == '.') {
            rc = parse_any(p, owner, q);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (parse_repetition(p, owner, q, unit, nested) != 0)
                return -1;
            skip_space(p, nested);
            continue;
        } else if (c == '<' || (c == '!' && p->pos + 1 < p->len &&
                                p->s[p->pos + 1] == '<')) {
            return FAIL_AT(p, p->pos,
                           "token references (<...>) are not supported: "
                           "write the token's text as a literal");
        } else {
            return 0;
        }
        if (rc != 0)
            return -1;
        unit = before;
        skip_space(p, nested);
    }
}

static int parse_alternates(parser *p, uint32_t rule, uint32_t owner,
                            bool nested)
{
    seq q = { 0 };
    int rc = -1;
    for (;;) {
        size_t at = p->pos;
        q.n = 0;
        if (parse_sequence(p, owner, &q, nested) != 0)
            goto out;
        if (add_alt(p, rule, q.e, q.src, q.n, at) != 0)
            goto out;
        if (peek(p) != '|')
            break;
        p->pos++;
        skip_space(p, true);
    }
    rc = 0;
out:
    seq_free(&q);
    return rc;
}

static int parse_rule(parser *p)
{
    size_t at = p->pos;
    size_t n = read_name(p);
    if (n == 0) {
        int c = peek(p);
        if (c == ')')
            return FAIL_AT(p, at, "unbalanced ')'");
        if (c == '|')
            return FAIL_AT(p, at,
                           "expecting a rule name ('|' continues a rule only "
                           "at the end of a line or inside parentheses)");
        return FAIL_AT(p, at, "expecting a rule name");
    }
    uint32_t id;
    if (named_rule(p, at, n, &id) != 0)
        return -1;
    gr_rule *r = &p->r->rules[id];
    if (r->defined) {
        unsigned long line, col;
        position_of(p->s, p->len, r->src, &line, &col);
        return FAIL_AT(p, at,
                       "rule '%.*s' is defined twice (first at line %lu "
                       "column %lu)",
                       (int)(n < NAME_SHOWN ? n : NAME_SHOWN), p->s + at, line,
                       col);
    }
    r->defined = true;
    r->src = (uint32_t)at;
    skip_space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3) != 0)
        return FAIL_AT(p, p->pos, "expecting '::=' after the rule name '%.*s'",
                       (int)(n < NAME_SHOWN ? n : NAME_SHOWN), p->s + at);
    p->pos += 3;
    skip_space(p, true);
    if (parse_alternates(p, id, id, false) != 0)
        return -1;
    int c = peek(p);
    if (c == ')')
        return FAIL_AT(p, p->pos, "unbalanced ')'");
    if (c >= 0 && c != '\n' && c != '\r')
        return FAIL_AT(p, p->pos, "expecting the end of the rule (a newline)");
    skip_space(p, true);
    return 0;
}

int gbnf_parse(gr_rules *out, const char *text, size_t len, gpt2d_error *err)
{
    parser p = { .s = text, .len = len, .r = out, .err = err };
    int rc = -1;
    if (len >= GR_VALUE_MAX) {
        gbnf_error_at(err, text, 0, 0, "the grammar is too long");
        goto out;
    }
    const char *nul = memchr(text, 0, len);
    if (nul != NULL) {
        gbnf_error_at(err, text, len, (size_t)(nul - text),
                      "a NUL byte in the grammar");
        goto out;
    }
    skip_space(&p, true);
    if (p.pos == len) {
        gbnf_error_at(err, text, len, len, "the grammar is empty (no rules)");
        goto out;
    }
    while (p.pos < len)
        if (parse_rule(&p) != 0)
            goto out;
    /* Every rule named must be defined; the first reference is blamed. */
    for (size_t i = 0; i < out->n_rules; i++) {
        const gr_rule *r = &out->rules[i];
        if (!r->defined) {
            int n = (int)(r->name_len < NAME_SHOWN ? r->name_len : NAME_SHOWN);
            gbnf_error_at(err, text, len, r->src, "undefined rule '%.*s'", n,
                          text + r->name_off);
            goto out;
        }
    }
    uint32_t root;
    size_t j = name_hash("root", 4) & (p.names_cap - 1);
    bool found = false;
    while (p.names[j] != 0) {
        if (name_equal(&p, p.names[j] - 1, "root", 4)) {
            root = p.names[j] - 1;
            found = true;
            break;
        }
        j = (j + 1) & (p.names_cap - 1);
    }
    if (!found) {
        gbnf_error_at(err, text, len, 0,
                      "no rule named 'root' (the rule a grammar starts from)");
        goto out;
    }
    out->root = root;
    rc = 0;
out:
    free(p.names);
    return rc;
}
