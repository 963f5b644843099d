/* gbnf_match.h — a small GBNF recognizer for the unit tests of the GBNF
 * writers (test_json_schema.c, test_regex_gbnf.c), written from the GBNF
 * language's definition and sharing no code with src/grammar/: it parses
 * rules, "literals", [classes] (ranges, ^, \x \u \U \n \t \r \\ \" \[ \]
 * \- escapes), `.`, groups, | * + ? {m} {m,} {m,n}, and decides whether a
 * short text (at most 63 bytes of UTF-8) is in the language: each
 * expression maps a set of start offsets (a 64-bit mask) to the set of
 * offsets where it can end, rules memoised per start offset.
 *
 * Single-threaded test code; aborts the test (ck_assert) on a grammar it
 * cannot parse. */
#ifndef GPT2D_GBNF_MATCH_H
#define GPT2D_GBNF_MATCH_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { GM_LIT, GM_CLS, GM_ANY, GM_REF, GM_SEQ, GM_ALT, GM_REP };

typedef struct gm_node {
    int kind;
    char *lit; /* GM_LIT: bytes */
    size_t lit_len;
    int negated; /* GM_CLS */
    uint32_t (*ranges)[2];
    size_t n_ranges;
    char name[128]; /* GM_REF */
    int rule;
    struct gm_node **kids; /* GM_SEQ, GM_ALT; GM_REP: kids[0] */
    size_t n_kids;
    unsigned min, max; /* GM_REP; max UINT32_MAX: unbounded */
} gm_node;

typedef struct gm_grammar {
    char names[4096][128];
    gm_node *bodies[4096];
    size_t n;
    /* matching */
    const unsigned char *text;
    size_t len;
    uint64_t memo[4096][64];
    unsigned char busy[4096][64];
} gm_grammar;

static const char *gm_s;
static size_t gm_i, gm_n;

static void gm_skip(int newlines)
{
    while (gm_i < gm_n) {
        char c = gm_s[gm_i];
        if (c == '#') {
            while (gm_i < gm_n && gm_s[gm_i] != '\n')
                gm_i++;
        } else if (c == ' ' || c == '\t' || c == '\r' ||
                   (newlines && c == '\n')) {
            gm_i++;
        } else {
            break;
        }
    }
}

static int gm_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static uint32_t gm_hex(size_t digits)
{
    uint32_t v = 0;
    for (size_t k = 0; k < digits; k++) {
        char c = gm_s[gm_i++];
        v = v * 16 + (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static uint32_t gm_utf8(const unsigned char *s, size_t *adv)
{
    if (s[0] < 0x80) {
        *adv = 1;
        return s[0];
    }
    if (s[0] < 0xE0) {
        *adv = 2;
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (s[0] < 0xF0) {
        *adv = 3;
        return ((uint32_t)(s[0] & 0x0F) << 12) |
               ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *adv = 4;
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* One character of a literal or class, as a code point. */
static uint32_t gm_char(void)
{
    if (gm_s[gm_i] != '\\') {
        size_t adv;
        uint32_t c = gm_utf8((const unsigned char *)gm_s + gm_i, &adv);
        gm_i += adv;
        return c;
    }
    char e = gm_s[gm_i + 1];
    gm_i += 2;
    switch (e) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'x':
        return gm_hex(2);
    case 'u':
        return gm_hex(4);
    case 'U':
        return gm_hex(8);
    default:
        ck_assert_msg(strchr("\\\"[]-", e) != NULL, "unknown escape \\%c", e);
        return (uint32_t)e;
    }
}

static void gm_put_utf8(char *out, size_t *n, uint32_t c)
{
    if (c < 0x80) {
        out[(*n)++] = (char)c;
    } else if (c < 0x800) {
        out[(*n)++] = (char)(0xC0 | (c >> 6));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (c >> 12));
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (c >> 18));
        out[(*n)++] = (char)(0x80 | ((c >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    }
}

static gm_node *gm_new(int kind)
{
    gm_node *n = calloc(1, sizeof *n);
    ck_assert_ptr_nonnull(n);
    n->kind = kind;
    return n;
}

static void gm_add(gm_node *n, gm_node *k)
{
    n->kids = realloc(n->kids, (n->n_kids + 1) * sizeof *n->kids);
    n->kids[n->n_kids++] = k;
}

static gm_node *gm_alts(int inside);

static gm_node *gm_primary(void)
{
    gm_skip(1);
    char c = gm_s[gm_i];
    if (c == '"') {
        gm_node *n = gm_new(GM_LIT);
        n->lit = malloc(gm_n + 1);
        gm_i++;
        while (gm_s[gm_i] != '"')
            gm_put_utf8(n->lit, &n->lit_len, gm_char());
        gm_i++;
        return n;
    }
    if (c == '[') {
        gm_node *n = gm_new(GM_CLS);
        gm_i++;
        if (gm_s[gm_i] == '^') {
            n->negated = 1;
            gm_i++;
        }
        while (gm_s[gm_i] != ']') {
            uint32_t lo = gm_char(), hi = lo;
            if (gm_s[gm_i] == '-' && gm_s[gm_i + 1] != ']') {
                gm_i++;
                hi = gm_char();
            }
            n->ranges = realloc(n->ranges,
                                (n->n_ranges + 1) * sizeof *n->ranges);
            n->ranges[n->n_ranges][0] = lo;
            n->ranges[n->n_ranges][1] = hi;
            n->n_ranges++;
        }
        gm_i++;
        return n;
    }
    if (c == '.') {
        gm_i++;
        return gm_new(GM_ANY);
    }
    if (c == '(') {
        gm_i++;
        gm_node *n = gm_alts(1);
        gm_skip(1);
        ck_assert_msg(gm_s[gm_i] == ')', "')' expected at %zu", gm_i);
        gm_i++;
        return n;
    }
    gm_node *n = gm_new(GM_REF);
    size_t k = 0;
    while (gm_i < gm_n && gm_word(gm_s[gm_i]) && k + 1 < sizeof n->name)
        n->name[k++] = gm_s[gm_i++];
    ck_assert_msg(k > 0, "a symbol expected at %zu: %.20s", gm_i, gm_s + gm_i);
    return n;
}

static gm_node *gm_postfix(gm_node *e)
{
    for (;;) {
        char c = gm_i < gm_n ? gm_s[gm_i] : 0;
        unsigned min, max;
        if (c == '*') {
            min = 0;
            max = UINT32_MAX;
        } else if (c == '+') {
            min = 1;
            max = UINT32_MAX;
        } else if (c == '?') {
            min = 0;
            max = 1;
        } else if (c == '{') {
            char *end;
            min = (unsigned)strtoul(gm_s + gm_i + 1, &end, 10);
            max = min;
            if (*end == ',') {
                end++;
                max = *end == '}' ? UINT32_MAX
                                  : (unsigned)strtoul(end, &end, 10);
            }
            gm_i = (size_t)(end - gm_s);
        } else {
            return e;
        }
        gm_i++;
        gm_node *r = gm_new(GM_REP);
        gm_add(r, e);
        r->min = min;
        r->max = max;
        e = r;
    }
}

static int gm_rule_start(void)
{
    size_t j = gm_i;
    while (j < gm_n && gm_word(gm_s[j]))
        j++;
    while (j < gm_n && (gm_s[j] == ' ' || gm_s[j] == '\t'))
        j++;
    return j > gm_i && strncmp(gm_s + j, "::=", 3) == 0;
}

static gm_node *gm_seq(int inside)
{
    gm_node *n = gm_new(GM_SEQ);
    for (;;) {
        gm_skip(inside);
        if (gm_i >= gm_n)
            break;
        char c = gm_s[gm_i];
        if (c == '|' || c == ')' || c == '\n' || (!inside && gm_rule_start()))
            break;
        gm_add(n, gm_postfix(gm_primary()));
    }
    return n;
}

static gm_node *gm_alts(int inside)
{
    gm_node *n = gm_new(GM_ALT);
    gm_add(n, gm_seq(inside));
    for (;;) {
        gm_skip(inside);
        if (gm_i < gm_n && gm_s[gm_i] == '|') {
            gm_i++;
            gm_add(n, gm_seq(inside));
        } else {
            return n;
        }
    }
}

static void gm_resolve(gm_grammar *g, gm_node *n)
{
    if (n->kind == GM_REF) {
        n->rule = -1;
        for (size_t r = 0; r < g->n; r++)
            if (strcmp(g->names[r], n->name) == 0)
                n->rule = (int)r;
        ck_assert_msg(n->rule >= 0, "rule %s is not defined", n->name);
    }
    for (size_t k = 0; k < n->n_kids; k++)
        gm_resolve(g, n->kids[k]);
}

static gm_grammar *gm_parse(const char *text, size_t len)
{
    gm_grammar *g = calloc(1, sizeof *g);
    ck_assert_ptr_nonnull(g);
    gm_s = text;
    gm_n = len;
    gm_i = 0;
    for (;;) {
        gm_skip(1);
        if (gm_i >= gm_n)
            break;
        size_t k = 0;
        while (gm_i < gm_n && gm_word(gm_s[gm_i]))
            g->names[g->n][k++] = gm_s[gm_i++];
        gm_skip(0);
        ck_assert_msg(strncmp(gm_s + gm_i, "::=", 3) == 0,
                      "'::=' expected at %zu", gm_i);
        gm_i += 3;
        g->bodies[g->n++] = gm_alts(0);
    }
    for (size_t r = 0; r < g->n; r++)
        gm_resolve(g, g->bodies[r]);
    return g;
}

static void gm_free_node(gm_node *n)
{
    for (size_t k = 0; k < n->n_kids; k++)
        gm_free_node(n->kids[k]);
    free(n->kids);
    free(n->lit);
    free(n->ranges);
    free(n);
}

static void gm_free(gm_grammar *g)
{
    for (size_t r = 0; r < g->n; r++)
        gm_free_node(g->bodies[r]);
    free(g);
}

static uint64_t gm_ends(gm_grammar *g, const gm_node *n, uint64_t starts);

static uint64_t gm_rule(gm_grammar *g, int r, size_t pos)
{
    if (g->busy[r][pos] == 2)
        return g->memo[r][pos];
    ck_assert_msg(g->busy[r][pos] == 0, "left recursion through %s",
                  g->names[r]);
    g->busy[r][pos] = 1;
    uint64_t e = gm_ends(g, g->bodies[r], (uint64_t)1 << pos);
    g->memo[r][pos] = e;
    g->busy[r][pos] = 2;
    return e;
}

static uint64_t gm_ends(gm_grammar *g, const gm_node *n, uint64_t starts)
{
    uint64_t out = 0;
    switch (n->kind) {
    case GM_SEQ:
        for (size_t k = 0; k < n->n_kids && starts; k++)
            starts = gm_ends(g, n->kids[k], starts);
        return starts;
    case GM_ALT:
        for (size_t k = 0; k < n->n_kids; k++)
            out |= gm_ends(g, n->kids[k], starts);
        return out;
    case GM_REP: {
        uint64_t cur = starts;
        for (unsigned k = 0; k < n->min && cur; k++)
            cur = gm_ends(g, n->kids[0], cur);
        out = cur;
        for (unsigned k = n->min; k < n->max && cur; k++) {
            uint64_t next = gm_ends(g, n->kids[0], cur) & ~out;
            out |= next;
            cur = next;
        }
        return out;
    }
    default:
        break;
    }
    for (size_t pos = 0; pos <= g->len; pos++) {
        if (!(starts >> pos & 1))
            continue;
        if (n->kind == GM_REF) {
            out |= gm_rule(g, n->rule, pos);
        } else if (n->kind == GM_LIT) {
            if (pos + n->lit_len <= g->len &&
                memcmp(g->text + pos, n->lit, n->lit_len) == 0)
                out |= (uint64_t)1 << (pos + n->lit_len);
        } else if (pos < g->len) {
            size_t adv;
            uint32_t c = gm_utf8(g->text + pos, &adv);
            int in = n->kind == GM_ANY;
            for (size_t k = 0; k < n->n_ranges && !in; k++)
                in = c >= n->ranges[k][0] && c <= n->ranges[k][1];
            if (n->kind == GM_CLS && n->negated)
                in = !in;
            if (in && pos + adv <= g->len)
                out |= (uint64_t)1 << (pos + adv);
        }
    }
    return out;
}

/* Whether `text` (at most 63 bytes) is in the language of rule `start`. */
static int gm_accepts(gm_grammar *g, const char *start, const char *text)
{
    size_t len = strlen(text);
    ck_assert_uint_lt(len, 64);
    g->text = (const unsigned char *)text;
    g->len = len;
    memset(g->busy, 0, sizeof g->busy);
    for (size_t r = 0; r < g->n; r++)
        if (strcmp(g->names[r], start) == 0)
            return (int)(gm_rule(g, (int)r, 0) >> len & 1);
    ck_abort_msg("no rule %s", start);
    return 0;
}

#endif
