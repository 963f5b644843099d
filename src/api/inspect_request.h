/* inspect_request.h — the body of POST /v1/inspect, JSON in,
 * inspect_request out: every field checked against its type, its range and
 * the server's limits, every error a 400 that names its `param`.
 *
 *   {"prompt": "The cat sat" | [464, 3797, 3332],
 *    "attention": false, "logit_lens": 0, "layers": [0, 5, 11],
 *    "cache_salt": "tenant-1"}
 *
 * Owns: the request's prompt ids and layer list (freed by
 * inspect_request_free).  Callers: api_inspect() on an HTTP connection
 * thread, the unit tests and the fuzzer (tests/fuzz/fuzz_inspect_request.c);
 * it reads only its arguments and the read-only tokenizer, so any number of
 * threads may parse at once. */
#ifndef GPT2D_INSPECT_REQUEST_H
#define GPT2D_INSPECT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "api/api_common.h"
#include "api/api_fields.h"
#include "api/completion_request.h"
#include "model/inspect.h"
#include "text/tokenizer.h"

typedef struct inspect_request {
    completion_prompt prompt;
    size_t *layers;        /* as asked, or every layer in order */
    inspect_params params; /* params.layers points at `layers` */
    /* as on /v1/completions (api_field_cache_salt): the cache domain its
     * K/V blocks join */
    char cache_salt[API_CACHE_SALT_MAX + 1];
    size_t cache_salt_len;
    bool has_cache_salt;
} inspect_request;

/* What a request is validated against. */
typedef struct inspect_limits {
    size_t n_ctx;         /* the model's context */
    size_t max_tokens;    /* --inspect-max-tokens; 0: none */
    size_t max_attention; /* --inspect-max-attention; 0: none */
    size_t n_layer, n_head, vocab_size;
} inspect_limits;

/* Parses and validates; on failure `e` says which field is wrong. */
int inspect_request_parse(inspect_request *req, const char *body, size_t len,
                          const tokenizer *tok, const inspect_limits *lim,
                          api_error *e);
/* The same for a body parsed already (`root`, borrowed). */
int inspect_request_parse_root(inspect_request *req, json_t *root,
                               const tokenizer *tok, const inspect_limits *lim,
                               api_error *e);
void inspect_request_free(inspect_request *req);

#endif
