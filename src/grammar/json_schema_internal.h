/* json_schema_internal.h — what the JSON Schema compiler's files share
 * (json_schema.c and json_schema_*.c; nothing else includes this).
 *
 * The compiler turns one schema into a GBNF expression, appending the rules
 * it needs on the way.  Each jsc_compile_* returns 0 (an expression was
 * appended), -1 (an error, in c->err) or NO_INSTANCE: no value satisfies
 * the schema; c->why says where and why, and the caller decides (an
 * optional property is left out, an anyOf branch dropped, a required
 * property makes its object impossible, and so on up to the root, where it
 * becomes the error).
 *
 * Threads: a compiler belongs to one call of json_schema_gbnf. */
#ifndef GPT2D_JSON_SCHEMA_INTERNAL_H
#define GPT2D_JSON_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"
#include "grammar/gbnf_text.h"
#include "grammar/json_schema.h"
#include "grammar/number_range.h"

enum { NO_INSTANCE = 1, REF_BUSY = 2, REF_DONE = 3 };
#define PATH_MAX_LEN 1024
#define MAX_VALUE_DEPTH 64

typedef struct ref_entry {
    const json_t *target;
    unsigned level;
    int state; /* REF_BUSY, REF_DONE or NO_INSTANCE */
    char name[GBNF_NAME_MAX + 1];
    json_schema_error why; /* when NO_INSTANCE */
} ref_entry;

/* A rule made for an expression that other places may need again: a
 * bounded number, a pattern or format (its key says which). */
typedef struct memo_entry {
    char *key;
    size_t key_len;
    char name[GBNF_NAME_MAX + 1];
} memo_entry;

typedef struct recursion_entry {
    const json_t *target;
    bool recursive;
} recursion_entry;

typedef struct compiler {
    const json_schema_options *opt;
    const json_t *root;
    gbnf_out out;
    json_schema_error *err;
    json_schema_error why; /* the last reason a schema has no instance */
    char path[PATH_MAX_LEN];
    size_t path_len;
    unsigned depth;
    char char_rule[GBNF_NAME_MAX + 1], string_rule[GBNF_NAME_MAX + 1];
    char number_rule[GBNF_NAME_MAX + 1], integer_rule[GBNF_NAME_MAX + 1];
    char value_rules[MAX_VALUE_DEPTH + 1][GBNF_NAME_MAX + 1];
    ref_entry *refs;
    size_t n_refs, cap_refs;
    recursion_entry *rec;
    size_t n_rec, cap_rec;
    memo_entry *memo;
    size_t n_memo, cap_memo;
} compiler;

typedef enum keyword_kind {
    KW_ANNOTATION, /* never changes the answer */
    KW_SUPPORTED,
    KW_UNSUPPORTED, /* JSON Schema's, not in the subset */
} keyword_kind;

/* ---- the context (json_schema_context.c) ---- */

/* The path: appends ".name" (or ["name"]) or "[i]"; returns the length
 * before, which jsc_path_pop restores. */
size_t jsc_path_push(compiler *c, const char *name);
size_t jsc_path_push_index(compiler *c, size_t i);
void jsc_path_pop(compiler *c, size_t len);
/* An error at the current place (or its keyword `key`): -1. */
int jsc_fail(compiler *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* No instance, because of the current place (or its keyword): NO_INSTANCE. */
int jsc_none(compiler *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The error for a rule or expression that did not fit (budget or memory). */
int jsc_out_of_room(compiler *c);
/* Emits `body` as a fresh rule PREFIX-TAGN, its name into `name`. */
int jsc_name_rule(compiler *c, const char *tag, const gpt2d_buf *body,
                  char *name);
/* An expression must not grow past the budget either. */
int jsc_check_room(compiler *c, const gpt2d_buf *expr);
/* Rules shared by every place with the same key (bounded numbers,
 * patterns, formats): the name made for `key`, or NULL; and making one. */
const char *jsc_memo_find(const compiler *c, const gpt2d_buf *key);
int jsc_memo_rule(compiler *c, const gpt2d_buf *key, const char *tag,
                  const gpt2d_buf *body, gpt2d_buf *expr);
/* The rules made once per compilation: one string character, a string,
 * an unbounded number or integer, any value `depth` levels down. */
int jsc_char_rule(compiler *c);
int jsc_string_rule(compiler *c);
int jsc_plain_number_rule(compiler *c, bool integer, const char **name);
int jsc_value_rule(compiler *c, unsigned depth, const char **name);

/* ---- the dispatcher and keywords (json_schema.c) ---- */

keyword_kind jsc_kind_of(const char *key);
/* A keyword that must be a non-negative integer (*out -1 when absent). */
int jsc_count_keyword(compiler *c, const json_t *s, const char *key,
                      long long *out);
int jsc_compile(compiler *c, const json_t *s, unsigned level, gpt2d_buf *expr);
/* A subschema at key (and index when >= 0) of the current place. */
int jsc_compile_at(compiler *c, const json_t *s, const char *key, long index,
                   unsigned level, gpt2d_buf *expr);
/* Appends " | " before every alternative but the first. */
int jsc_alt_sep(gpt2d_buf *b, size_t *n);

/* ---- one file each ---- */

int jsc_compile_ref(compiler *c, const json_t *s, unsigned level,
                    gpt2d_buf *expr); /* json_schema_ref.c */
int jsc_number_bounds(compiler *c, const json_t *s, number_bound *lo,
                      number_bound *hi); /* json_schema_scalar.c */
int jsc_compile_number(compiler *c, const json_t *s, bool integer,
                       gpt2d_buf *expr);
int jsc_compile_string(compiler *c, const json_t *s, gpt2d_buf *expr);
int jsc_compile_array(compiler *c, const json_t *s, unsigned level,
                      gpt2d_buf *expr); /* json_schema_container.c */
int jsc_compile_object(compiler *c, const json_t *s, unsigned level,
                       gpt2d_buf *expr);
int jsc_compile_enum(compiler *c, const json_t *s,
                     gpt2d_buf *expr); /* json_schema_enum.c */

#endif
