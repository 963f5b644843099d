/* gbnf_text.h — writing GBNF source text: literals, character classes,
 * rule names and whole rules, within a byte budget.
 *
 * Every compiler to GBNF (json_schema.h, regex_gbnf.h, json_value_gbnf.h,
 * choices_gbnf.h) writes through these, so the text they make is escaped one
 * way: in "literals" a `"` or `\` and the control characters are escapes
 * (\xHH below U+0080), other characters are their UTF-8; in [classes] every
 * bound that is not printable ASCII (or is one of ] [ \ ^ -) is an escape,
 * \xHH below U+0080, \uHHHH in the BMP, \UHHHHHHHH above.
 *
 * A gbnf_out collects finished rules into the caller's buffer; helper rules
 * are named PREFIX-TAGN (N counting up), so several compilations with
 * different prefixes share one grammar.  Rule names are [A-Za-z0-9-]+.
 *
 * Threads: a gbnf_out and its buffers belong to one caller. */
#ifndef GPT2D_GBNF_TEXT_H
#define GPT2D_GBNF_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "grammar/cp_set.h"

/* The longest rule name the compilers make or accept (without the NUL). */
#define GBNF_NAME_MAX 96

/* A caller's rule name is 1..GBNF_NAME_MAX - 16 characters of [A-Za-z0-9-]
 * (room for the helpers' suffixes). */
bool gbnf_rule_name_valid(const char *name);

/* Appends text; 0 or -1 (out of memory). */
int gbnf_puts(gpt2d_buf *b, const char *s);
int gbnf_printf(gpt2d_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends a "literal" spelling these bytes (valid UTF-8, may be empty:
 * ""). */
int gbnf_literal(gpt2d_buf *b, const char *bytes, size_t len);
/* Appends a [class] of the set, or a "literal" when it holds one code
 * point.  The set must not be empty. */
int gbnf_class(gpt2d_buf *b, const cp_set *s);

/* Appends the repetition suffix for min..max rounds (max < 0: no most):
 * "" for exactly one, ? * + {m} {m,} {m,n} otherwise. */
int gbnf_repeat(gpt2d_buf *b, long long min, long long max);

typedef struct gbnf_named_set gbnf_named_set;

typedef struct gbnf_out {
    gpt2d_buf *rules;   /* finished rules, one line each */
    const char *prefix; /* helper rules are PREFIX-TAGN */
    size_t max_bytes;   /* rules->len may not pass this */
    size_t next_id;
    bool over_budget;     /* a rule was refused for max_bytes */
    gbnf_named_set *sets; /* rules already made for sets (gbnf_out_set) */
    size_t n_sets, cap_sets;
} gbnf_out;

void gbnf_out_init(gbnf_out *o, gpt2d_buf *rules, const char *prefix,
                   size_t max_bytes);
void gbnf_out_free(gbnf_out *o);

/* A fresh helper name PREFIX-TAGN into name (GBNF_NAME_MAX + 1 bytes). */
void gbnf_out_name(gbnf_out *o, const char *tag, char *name);
/* Appends "NAME ::= BODY\n".  -1 when out of memory or past max_bytes (the
 * caller words the error: over_budget says which). */
int gbnf_out_rule(gbnf_out *o, const char *name, const char *body,
                  size_t body_len);
bool gbnf_out_over_budget(const gbnf_out *o, size_t more);

/* The name of a rule already made for `set` under `kind` (a caller's tag for
 * how the set is spelled), or NULL.  gbnf_out_remember records one. */
const char *gbnf_out_find_set(const gbnf_out *o, int kind, const cp_set *set);
int gbnf_out_remember_set(gbnf_out *o, int kind, const cp_set *set,
                          const char *name);

#endif
