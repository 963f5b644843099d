/* completion_request.h — the body of POST /v1/completions, parsed and
 * validated (completion_request.c), and the parts of it that
 * /v1/chat/completions reads alike (chat_request.c uses them), so the two
 * endpoints cannot drift apart.
 *
 * Owns the completion_request, with chat_request.c (the same request read
 * from chat's body): the two parsers are the only writers of its fields.
 * Its prompts, stop strings and logit_bias are its own allocations, freed
 * by completion_request_free.
 *
 * Threads: any; a parser reads only its arguments and the read-only
 * tokenizer, so any number of threads may parse at once. */
#ifndef GPT2D_COMPLETION_REQUEST_H
#define GPT2D_COMPLETION_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api_common.h"
#include "api/api_fields.h"
#include "api/constraint_request.h"
#include "api/tool_calls.h"
#include "engine/engine.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

/* Stop strings a request may send; the chat template's own come on top. */
#define API_MAX_STOP 4
/* /v1/completions' logprobs, at most: OpenAI's legacy limit (chat's
 * top_logprobs goes to ENGINE_MAX_LOGPROBS) */
#define API_MAX_LOGPROBS 5

typedef struct completion_prompt {
    int32_t *ids;
    size_t n;
} completion_prompt;

typedef struct completion_request {
    completion_prompt *prompts; /* one choice set per prompt */
    size_t n_prompts;
    size_t max_tokens;
    const char *max_param; /* the field that set max_tokens, for errors;
                                 * NULL: chat's default, the rest of the
                                 * context (or of the KV cache) */
    size_t n, best_of;
    sampler_params sampling;
    logit_bias_entry *logit_bias; /* owned; sampling.logit_bias points here */
    bool has_seed;
    uint64_t seed;
    int speculative;     /* gen_params': 0 the server's default, 1 on, -1 off */
    int32_t *prediction; /* owned: `prediction`'s tokens, or NULL */
    size_t n_prediction;
    char *stop[ENGINE_MAX_STOP];
    size_t n_stop;
    bool logprobs; /* logprobs was a number, not null/absent */
    size_t n_logprobs;
    bool echo, stream, include_usage;
    bool return_token_ids; /* vLLM's extension: prompt_token_ids and
                                 * each choice's token_ids in the answer */
    char session_id[ENGINE_SESSION_ID_MAX + 1]; /* "" when absent */
    char cache_salt[API_CACHE_SALT_MAX + 1];    /* UTF-8, as sent */
    size_t cache_salt_len;                      /* 0 when absent */
    bool has_cache_salt;
    api_constraint constraint; /* response_format / structured_outputs */
    /* chat with tools: how the answer's calls are read (its call_prefix
     * NULL otherwise); the chat template's strings, not owned */
    tool_call_format tool_calls;
    /* NULL, or what an endpoint reading another API's body into this
     * request keeps for its answer (/v1/responses' fields that the
     * Response repeats): a reference, released with the request */
    json_t *answer_fields;
    /* NULL, or what such an endpoint keeps beside its answer (a stored
     * response's conversation: responses_keep.h): the same */
    json_t *kept;
} completion_request;

/* Limits a request is validated against. */
typedef struct completion_limits {
    size_t n_ctx;
    size_t vocab_size;     /* token ids must be below it */
    size_t max_sequences;  /* best_of x prompts, at most (the KV slots) */
    size_t max_n;          /* --max-n, the same bound set lower by the
                                 * operator; 0 = only max_sequences */
    size_t max_stop_bytes; /* --max-stop-bytes; 0 = no bound */
    size_t kv_blocks;      /* the KV cache's blocks; 0 = no bound */
    uint64_t token_budget; /* the caller's tokens per minute (its whole
                                 * budget); 0 = no bound */
} completion_limits;

/* Parses and validates a POST /v1/completions body; on failure `e` says
 * which field is wrong (status 400). */
int completion_request_parse(completion_request *req, const char *body,
                             size_t len, const tokenizer *tok,
                             const completion_limits *lim, api_error *e);
/* The same for a body parsed already (`root`, borrowed). */
int completion_request_parse_root(completion_request *req, json_t *root,
                                  const tokenizer *tok,
                                  const completion_limits *lim, api_error *e);
void completion_request_free(completion_request *req);
/* A request sent without a seed runs with one from draw() (the caller's:
 * parsing stays a pure function of the body, for the tests and the
 * fuzzer); one sent with a seed keeps it. */
void completion_request_default_seed(completion_request *req,
                                     uint64_t (*draw)(void));
/* One prompt, `v`: a string (tokenized no further than n_ctx tokens) or
 * an array of token ids below vocab_size, at most n_ctx of either; errors
 * name "prompt".  p->ids is the caller's to free, whatever the result. */
int completion_prompt_parse(completion_prompt *p, json_t *v,
                            const tokenizer *tok, size_t vocab_size,
                            size_t n_ctx, api_error *e);

/* The parts both endpoints share, for chat_request.c.  The start: `req`
 * emptied, with the sampling defaults (completion_request_init), and the
 * body's JSON object (NULL and a 400 in `e` when it is none). */
void completion_request_init(completion_request *req);
json_t *completion_request_start(completion_request *req, const char *body,
                                 size_t len, api_error *e);
/* The fields read alike: the sampling fields, logit_bias, seed, session_id,
 * cache_salt, stream, stream_options and return_token_ids, and the types of
 * model and user, and the constraint (response_format,
 * structured_outputs). */
int completion_request_parse_shared(completion_request *req, json_t *root,
                                    const completion_limits *lim, api_error *e);
/* `stop`: a string or up to API_MAX_STOP, appended to req->stop. */
int completion_request_parse_stop(completion_request *req, json_t *root,
                                  const completion_limits *lim, api_error *e);
/* req->best_of x req->n_prompts sequences within the limits. */
int completion_request_check_sequences(const completion_request *req,
                                       const completion_limits *lim,
                                       api_error *e);
/* After tokenizing: every prompt and its max_tokens fit the context; the
 * errors name `prompt_param` and `max_param`. */
int completion_request_check_context(const completion_request *req,
                                     const completion_limits *lim,
                                     const char *prompt_param,
                                     const char *max_param, api_error *e);

#endif
