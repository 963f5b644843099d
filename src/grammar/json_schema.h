/* json_schema.h — a JSON Schema compiled to GBNF text.
 *
 * The subset (what OpenAI's strict mode accepts and zod and pydantic
 * emit) and every choice below are documented in README.md, "Structured
 * output and tools"; in brief:
 *   - the answer is compact JSON (no white space), strings in the one
 *     canonical spelling of json_text_gbnf.h, numbers as number_range.h
 *     writes them (at most 15 digits, no exponent);
 *   - an object's properties come in the schema's order; required ones
 *     always, optional ones may be left out; no other property is ever
 *     written, except that an object schema with neither `properties` nor
 *     `required` is any object (values any JSON value, or
 *     `additionalProperties`' schema);
 *   - recursion through $ref is unrolled max_recursion times; beyond that
 *     the recursive alternative is dropped (an optional property left out,
 *     an anyOf branch dropped, an array kept empty): a schema only infinite
 *     instances satisfy is an error;
 *   - every complete answer validates, and every prefix the grammar allows
 *     can be completed (no rule is empty);
 *   - strict: any keyword outside the subset is an error naming it; not
 *     strict: it is ignored (the README lists what is then not enforced),
 *     and oneOf is compiled as anyOf.
 *
 * Errors carry `param`, the dotted path of the offending place under
 * opt->param (e.g. "response_format.json_schema.schema.properties.age.type";
 * array elements as "anyOf[1]", a property whose name is not
 * [A-Za-z0-9_$-]+ as properties["a b"], the JSON-escaped name), and a
 * message.  A schema that no value satisfies is an error at the place that
 * made it so (minimum above maximum, a required property that cannot
 * exist, ...).
 *
 * Threads: pure functions over the caller's values (jansson values are not
 * shared while being read). */
#ifndef GPT2D_JSON_SCHEMA_H
#define GPT2D_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

typedef struct json_schema_options {
    bool strict;
    const char *param;        /* the schema's own param, e.g.
                                 "response_format.json_schema.schema" */
    unsigned max_depth;       /* schema nesting the compiler follows */
    unsigned max_recursion;   /* times a recursive $ref is unrolled */
    unsigned max_value_depth; /* nesting of free JSON values ({}, true) */
    size_t max_bytes;         /* GBNF text this call may append */
} json_schema_options;

/* strict false, param "schema", max_depth 32, max_recursion 6,
 * max_value_depth 8, max_bytes 256 KiB. */
void json_schema_options_default(json_schema_options *opt);

typedef struct json_schema_error {
    char param[256];
    char message[256];
} json_schema_error;

/* Appends to `out` the rule `rule` matching the schema's answers, and its
 * helper rules, each named `rule`-something ([A-Za-z0-9-]), so schemas
 * compiled under different rule names share one grammar.  0; or -1 with
 * err filled and `out` as it was. */
int json_schema_gbnf(const json_t *schema, const json_schema_options *opt,
                     const char *rule, gpt2d_buf *out, json_schema_error *err);

/* A whole grammar: the schema's rules under the name "root". */
int json_schema_grammar(const json_t *schema, const json_schema_options *opt,
                        gpt2d_buf *out, json_schema_error *err);

/* Any JSON value (object_only: any JSON object, for JSON mode), nested at
 * most opt->max_value_depth deep, canonical as above; keys of free objects
 * may repeat. */
int json_value_gbnf(bool object_only, const json_schema_options *opt,
                    const char *rule, gpt2d_buf *out, json_schema_error *err);

#endif
