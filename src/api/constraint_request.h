/* constraint_request.h — a request's structured-output fields read into one
 * GBNF grammar that every answer obeys (grammar/grammar.h compiles it):
 *
 *   response_format     {"type": "text"}                (no constraint)
 *                       {"type": "json_object"}         (a JSON object)
 *                       {"type": "json_schema", "json_schema":
 *                           {"name", "schema", "strict", "description"}}
 *   structured_outputs  {"json": schema} | {"regex": "..."} |
 *                       {"choice": ["...", ...]} | {"grammar": "GBNF"}
 *                       (vLLM's names; exactly one of them)
 *
 * Both at once is a 400 (which would win is no client's guess to make).
 * Every error names the place at fault, down to a schema keyword
 * ("response_format.json_schema.schema.properties.age.type").
 *
 * Pure: reads only its arguments, so any thread may parse (and the fuzzer
 * does). */
#ifndef GPT2D_CONSTRAINT_REQUEST_H
#define GPT2D_CONSTRAINT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/api_common.h"

typedef struct api_constraint {
    char *gbnf; /* NULL: the answer is free text; else owned */
    size_t len;
    /* the field it came from, for an error found when it is compiled (a
     * grammar's syntax, or a budget): a static string */
    const char *param;
    bool json; /* the answer is a JSON value (json_object, json_schema,
                * structured_outputs.json) */
} api_constraint;

/* Reads response_format and structured_outputs from `root`; with neither
 * (or response_format text), c->gbnf is NULL.  -1 with a 400 in `e`. */
int api_constraint_parse(api_constraint *c, json_t *root, api_error *e);
void api_constraint_free(api_constraint *c);

#endif
