/* gbnf_text.c — writing GBNF source text (see gbnf_text.h). */
#include "grammar/gbnf_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gbnf_named_set {
    int kind;
    cp_set set;
    char name[GBNF_NAME_MAX + 1];
};

bool gbnf_rule_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > GBNF_NAME_MAX - 16)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return true;
}

int gbnf_puts(gpt2d_buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int gbnf_printf(gpt2d_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return buf_append(b, small, (size_t)n);
    if (buf_reserve(b, (size_t)n + 1) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int gbnf_literal(gpt2d_buf *b, const char *bytes, size_t len)
{
    if (buf_append(b, "\"", 1) != 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)bytes[i];
        int rc;
        if (c == '"' || c == '\\')
            rc = gbnf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            rc = gbnf_printf(b, "\\x%02X", c);
        else
            rc = buf_append(b, &c, 1);
        if (rc != 0)
            return -1;
    }
    return buf_append(b, "\"", 1);
}

/* One bound of a class range. */
static int class_char(gpt2d_buf *b, uint32_t cp)
{
    if (cp < 0x80) {
        if (cp < 0x20 || cp == 0x7f || cp == ']' || cp == '[' || cp == '\\' ||
            cp == '^' || cp == '-')
            return gbnf_printf(b, "\\x%02X", (unsigned)cp);
        char c = (char)cp;
        return buf_append(b, &c, 1);
    }
    if (cp <= 0xFFFF)
        return gbnf_printf(b, "\\u%04X", (unsigned)cp);
    return gbnf_printf(b, "\\U%08X", (unsigned)cp);
}

/* A code point as a literal's UTF-8. */
static int literal_cp(gpt2d_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return gbnf_literal(b, u, n);
}

int gbnf_class(gpt2d_buf *b, const cp_set *s)
{
    if (s->n == 1 && s->r[0].lo == s->r[0].hi)
        return literal_cp(b, s->r[0].lo);
    if (buf_append(b, "[", 1) != 0)
        return -1;
    for (size_t i = 0; i < s->n; i++) {
        if (class_char(b, s->r[i].lo) != 0)
            return -1;
        if (s->r[i].hi != s->r[i].lo &&
            (buf_append(b, "-", 1) != 0 || class_char(b, s->r[i].hi) != 0))
            return -1;
    }
    return buf_append(b, "]", 1);
}

int gbnf_repeat(gpt2d_buf *b, long long min, long long max)
{
    if (max < 0)
        return min == 0   ? gbnf_puts(b, "*")
               : min == 1 ? gbnf_puts(b, "+")
                          : gbnf_printf(b, "{%lld,}", min);
    if (min == max)
        return min == 1 ? 0 : gbnf_printf(b, "{%lld}", min);
    if (min == 0 && max == 1)
        return gbnf_puts(b, "?");
    return gbnf_printf(b, "{%lld,%lld}", min, max);
}

void gbnf_out_init(gbnf_out *o, gpt2d_buf *rules, const char *prefix,
                   size_t max_bytes)
{
    memset(o, 0, sizeof *o);
    o->rules = rules;
    o->prefix = prefix;
    o->max_bytes = max_bytes;
}

void gbnf_out_free(gbnf_out *o)
{
    for (size_t i = 0; i < o->n_sets; i++)
        cp_set_free(&o->sets[i].set);
    free(o->sets);
    o->sets = NULL;
    o->n_sets = o->cap_sets = 0;
}

void gbnf_out_name(gbnf_out *o, const char *tag, char *name)
{
    snprintf(name, GBNF_NAME_MAX + 1, "%s-%s%zu", o->prefix, tag, ++o->next_id);
}

bool gbnf_out_over_budget(const gbnf_out *o, size_t more)
{
    return o->rules->len > o->max_bytes || more > o->max_bytes - o->rules->len;
}

int gbnf_out_rule(gbnf_out *o, const char *name, const char *body,
                  size_t body_len)
{
    size_t n = strlen(name);
    if (gbnf_out_over_budget(o, n + 5 + body_len + 1)) {
        o->over_budget = true;
        return -1;
    }
    if (buf_append(o->rules, name, n) != 0 ||
        buf_append(o->rules, " ::= ", 5) != 0 ||
        buf_append(o->rules, body, body_len) != 0 ||
        buf_append(o->rules, "\n", 1) != 0)
        return -1;
    return 0;
}

const char *gbnf_out_find_set(const gbnf_out *o, int kind, const cp_set *set)
{
    for (size_t i = 0; i < o->n_sets; i++)
        if (o->sets[i].kind == kind && cp_set_equal(&o->sets[i].set, set))
            return o->sets[i].name;
    return NULL;
}

int gbnf_out_remember_set(gbnf_out *o, int kind, const cp_set *set,
                          const char *name)
{
    if (o->n_sets == o->cap_sets) {
        size_t cap = o->cap_sets ? 2 * o->cap_sets : 8;
        gbnf_named_set *s = realloc(o->sets, cap * sizeof *s);
        if (s == NULL)
            return -1;
        o->sets = s;
        o->cap_sets = cap;
    }
    gbnf_named_set *e = &o->sets[o->n_sets];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    snprintf(e->name, sizeof e->name, "%s", name);
    if (cp_set_copy(set, &e->set) != 0) {
        cp_set_free(&e->set);
        return -1;
    }
    o->n_sets++;
    return 0;
}
