/* api.h — the OpenAI-compatible API layer: JSON in, JSON or SSE out.
 *
 * Owns request parsing and validation (every field error names its `param`),
 * the OpenAI error object, and the shapes of every response.  It knows
 * nothing of sockets: http.c hands it a body and a way to ask whether the
 * client is still there, and sends whatever api_response it gets back.
 *
 * Threads: every function may be called from any HTTP connection thread at
 * once; the shared api_ctx is read-only after start-up.  A handler may block
 * (waiting for the engine), so the server must give each connection its own
 * thread.  An api_stream belongs to one connection. */
#ifndef GPT2D_API_H
#define GPT2D_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>

#include "text/chat_template.h"
#include "engine/engine.h"
#include "model/model.h"
#include "core/settings.h"
#include "core/sha256.h"
#include "api/token_budget.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "api/workpool.h"

/* Everything a handler needs, shared read-only by all connections. */
typedef struct api_ctx {
    engine *eng;
    const tokenizer *tok;
    const model *mdl;
    workpool *work;             /* parsing and tokenizing run here (api_work) */
    size_t n_slots;             /* bounds the sequences one request may run */
    bool kv_half;               /* --kv-dtype float16, reported by /v1/models */
    size_t max_n;               /* --max-n: a lower bound of our own; 0 = none */
    size_t max_stop_bytes;      /* --max-stop-bytes; 0 = none */
    size_t inspect_max_tokens;  /* --inspect-max-tokens; 0: the context */
    size_t inspect_max_attention; /* --inspect-max-attention; 0: none */
    bool log_prompts;
    time_t started;             /* reported as the model's `created` */
    const chat_template *chat;  /* how /v1/chat/completions writes a prompt */
    token_budget *budget;       /* each caller's tokens per minute (its own
                                 * lock: the one shared object a handler
                                 * writes) */
} api_ctx;

/* ---- who is asking ----
 *
 * The isolation rule: a request's cached prefixes and sessions are its
 * caller's own.  The caller is its API key; without keys, its address; the
 * operator may make every request one caller (--global-prefix-cache) for a
 * single-tenant deployment.  A request's cache_salt isolates further: its
 * prefixes serve only requests of the same caller with the same salt.  Only
 * digests are kept, so nothing cached holds a key. */
/* What the operator allows one caller (http_keys.c fills it: from the
 * key's line in the keys file, or the configuration's defaults). */
typedef struct api_limits {
    size_t max_seqs;            /* sequences while another caller is active;
                                 * 0: --max-seqs-per-key */
    size_t max_queued;          /* requests waiting; 0: --max-queued-per-key */
    uint64_t tokens_per_minute; /* the token budget's size and refill per
                                 * minute (token_budget.h); 0: no budget */
} api_limits;

typedef struct api_caller {
    uint8_t principal[SHA256_BYTES];
    /* Whose share of the engine it uses (limits and fairness): the key or
     * address, even when the cache is global.  The per-key account id:
     * the same key gives the same account after a reload or restart. */
    uint8_t account[SHA256_BYTES];
    api_limits limits;
    size_t metrics_key;         /* its series in /metrics (metrics_key_id):
                                 * the key's name, or 0, "-" */
} api_caller;

void api_caller_of_key(api_caller *who, const char *key, size_t len);
void api_caller_of_address(api_caller *who, const char *address);
/* The account of an address caller becomes its `network`'s (http.c: an
 * IPv6 client's /64, which one host may fill with addresses): its limits
 * and its share of the engine, the KV memory and the work pool are the
 * network's; its cache and sessions stay its address's own. */
void api_caller_account_of_network(api_caller *who, const char *network);
/* One isolation domain for everyone; `who` keeps its account. */
void api_caller_global(api_caller *who);
/* The engine's view of `who` sending a request with `salt` (NULL: none). */
kv_identity api_caller_identity(const api_caller *who, const char *salt,
                                size_t salt_len);

#define API_CACHE_SALT_MAX 256

/* ---- errors: {"error": {"message", "type", "param", "code"}} ---- */

typedef struct api_error {
    int status;                 /* HTTP status */
    const char *type;           /* "invalid_request_error", ... */
    const char *code;           /* NULL, or a short machine-readable code */
    char param[64];             /* "" when no single field is at fault */
    char message[512];
} api_error;

/* Fills `e` (type derived from the status) and returns -1, so a parser can
 * `return api_error_set(...)`.  `param` may be NULL. */
int api_error_set(api_error *e, int status, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- responses ---- */

typedef struct api_stream api_stream;
typedef struct api_body api_body;

/* How a blocking handler learns that its client hung up. */
typedef struct api_client {
    bool (*gone)(void *arg);
    void *arg;
} api_client;
/* Whether the client hung up; false when `c` or its probe is NULL. */
bool api_client_gone(const api_client *c);

typedef struct api_response {
    int status;
    char *body;                 /* malloc'ed; NULL when streaming */
    size_t body_len;
    const char *content_type;
    const char *allow;          /* 405: the Allow header */
    int retry_after;            /* > 0: Retry-After seconds (429) */
    api_stream *stream;         /* non-NULL: an SSE stream instead of a body */
    api_body *source;           /* non-NULL: a body made as it is sent */
    bool cancelled;             /* the client left; nothing is sent */
    char id[48];                /* what the request made ("cmpl-…"), or "":
                                 * its X-Request-Id unless the client sent one */
    size_t prompt_tokens, completion_tokens;   /* for the access log */
} api_response;

void api_response_free(api_response *r);
/* The one builder of OpenAI's error object, {"error": {...}}, for a body
 * and for an SSE error event alike; NULL on OOM. */
json_t *api_error_json(const api_error *e);
/* Sets the response to the error object of `e`. */
void api_response_error(api_response *r, const api_error *e);
/* Serialises `obj` (a reference is stolen) as the body. */
void api_response_json(api_response *r, int status, json_t *obj);

/* ---- endpoints ---- */

void api_completions(const api_ctx *ctx, const api_caller *who,
                     const char *body, size_t len, const api_client *client,
                     api_response *r);
void api_chat_completions(const api_ctx *ctx, const api_caller *who,
                          const char *body, size_t len,
                          const api_client *client, api_response *r);
/* POST /v1/inspect (api_inspect.c): blocks like a completion. */
void api_inspect(const api_ctx *ctx, const api_caller *who, const char *body,
                 size_t len, const api_client *client, api_response *r);
void api_models(const api_ctx *ctx, api_response *r);
/* GET /v1/models/{id}: the model object, or 404 for another id. */
void api_model(const api_ctx *ctx, const char *id, api_response *r);
void api_health(const api_ctx *ctx, bool stopping, api_response *r);
void api_metrics(const api_ctx *ctx, api_response *r);
/* The tokenizer's two endpoints: their work runs on ctx->work (api_work)
 * and their answers are api_bodies. */
void api_tokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r);
void api_detokenize(const api_ctx *ctx, const api_caller *who,
                    const char *body, size_t len, const api_client *client,
                    api_response *r);
/* The caller's own sessions; another caller's are absent (404). */
void api_sessions_list(const api_ctx *ctx, const api_caller *who,
                       api_response *r);
void api_session_delete(const api_ctx *ctx, const api_caller *who,
                        const char *id, api_response *r);

/* ---- work outside the engine (workpool.h) ----
 *
 * Runs fn(arg) on ctx->work for `who`, waiting for a worker and for
 * `memory` bytes of the answers' budget.  0 when it ran, *charge holding
 * them (NULL: memory must be 0).  -1 when it did not, and r says why: the
 * client left (r->cancelled), or an error with Retry-After: 503
 * `tokenizer_busy` or `response_memory_full`, 429
 * `response_memory_per_key` (the caller's own unread answers hold its
 * share), 503 when the server is stopping. */
int api_work(const api_ctx *ctx, const api_caller *who,
             const api_client *client, void (*fn)(void *), void *arg,
             size_t memory, work_charge *charge, api_response *r);

/* ---- answers made as they are sent ----
 *
 * /tokenize's {"tokens":[...]} and /detokenize's {"content":"..."}, byte for
 * byte as the JSON of the whole would be, held as their token ids alone
 * (4 bytes each) and written piece by piece as the client takes them, so a
 * client that does not read pins its ids, never the rendered answer. */

/* Take ownership of ids[0, n) (malloc'ed; valid ids of tok); NULL on OOM,
 * and then the ids are still the caller's. */
api_body *api_body_token_list(int32_t *ids, size_t n);
api_body *api_body_content(const tokenizer *tok, int32_t *ids, size_t n);
/* What a body of n ids holds: the most its answer's charge needs. */
size_t api_body_bytes(size_t n_ids);
/* The body holds the charge from now on, lowered to what it holds, and
 * releases it when freed; *charge is zeroed. */
void api_body_take_charge(api_body *b, work_charge *charge);
/* The answer's length in bytes, known from the start. */
size_t api_body_length(const api_body *b);
/* Copies the next bytes of the answer into buf; 0 at its end. */
size_t api_body_read(api_body *b, char *buf, size_t max);
void api_body_free(api_body *b);

/* ---- streaming ---- */

enum { API_STREAM_END = -1, API_STREAM_ERROR = -2 };
/* Copies the next bytes of the event stream into buf, blocking until there
 * are some.  Returns the byte count (> 0), API_STREAM_END after `data: [DONE]`,
 * or API_STREAM_ERROR when the client left (the request is then cancelled). */
ssize_t api_stream_read(api_stream *s, char *buf, size_t max,
                        const api_client *client);
/* The client left: cancels the request if it is still running (once). */
void api_stream_cancel(api_stream *s);
/* Cancels the request if it is still running, and frees. */
void api_stream_free(api_stream *s);
/* Token counts so far, for the access log. */
void api_stream_usage(const api_stream *s, size_t *prompt_tokens,
                      size_t *completion_tokens);

/* ---- reading one field of a body (api_fields.c) ----
 *
 * Absent or null leaves the default standing (*out untouched, or NULL); a
 * value of another type or out of range is a 400 whose param is the key
 * (or `param`, a nested field's dotted path). */

typedef enum api_field_type {
    API_FIELD_NUMBER,
    API_FIELD_INTEGER,
    API_FIELD_BOOL,
    API_FIELD_STRING,
    API_FIELD_OBJECT,
    API_FIELD_ARRAY,
    API_FIELD_TOKEN_MAP,        /* an object, named for logit_bias */
} api_field_type;

/* *out is the value, or NULL when absent or null. */
int api_field_optional(json_t *obj, const char *key, const char *param,
                       api_field_type type, json_t **out, api_error *e);
/* A number in [lo, hi] (lo itself excluded when lo_open). */
int api_field_number(json_t *root, const char *key, double lo, double hi,
                     bool lo_open, float *out, api_error *e);
int api_field_integer(json_t *root, const char *key, json_int_t lo,
                      json_int_t hi, json_int_t *out, api_error *e);
int api_field_bool(json_t *obj, const char *key, const char *param, bool *out,
                   api_error *e);
/* cache_salt (vLLM's name), the same on every endpoint that runs a prompt:
 * 1 to API_CACHE_SALT_MAX bytes, kept whole (NULs too) in `out` with its
 * length; *present stays false when absent or null. */
int api_field_cache_salt(json_t *root, char out[API_CACHE_SALT_MAX + 1],
                         size_t *len, bool *present, api_error *e);

/* ---- the completion request, parsed (exposed for the unit tests) ---- */

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
    const char *max_param;      /* the field that set max_tokens, for errors;
                                 * NULL: chat's default, the rest of the
                                 * context (or of the KV cache) */
    size_t n, best_of;
    sampler_params sampling;
    logit_bias_entry *logit_bias;   /* owned; sampling.logit_bias points here */
    bool has_seed;
    uint64_t seed;
    char *stop[ENGINE_MAX_STOP];
    size_t n_stop;
    bool logprobs;              /* logprobs was a number, not null/absent */
    size_t n_logprobs;
    bool echo, stream, include_usage;
    bool return_token_ids;      /* vLLM's extension: prompt_token_ids and
                                 * each choice's token_ids in the answer */
    char session_id[ENGINE_SESSION_ID_MAX + 1];  /* "" when absent */
    char cache_salt[API_CACHE_SALT_MAX + 1];     /* UTF-8, as sent */
    size_t cache_salt_len;                       /* 0 when absent */
    bool has_cache_salt;
} completion_request;

/* Limits a request is validated against. */
typedef struct completion_limits {
    size_t n_ctx;
    size_t vocab_size;          /* token ids must be below it */
    size_t max_sequences;       /* best_of x prompts, at most (the KV slots) */
    size_t max_n;               /* --max-n, the same bound set lower by the
                                 * operator; 0 = only max_sequences */
    size_t max_stop_bytes;      /* --max-stop-bytes; 0 = no bound */
    size_t kv_blocks;           /* the KV cache's blocks; 0 = no bound */
    uint64_t token_budget;      /* the caller's tokens per minute (its whole
                                 * budget); 0 = no bound */
} completion_limits;

/* Parses and validates a POST /v1/completions body; on failure `e` says
 * which field is wrong (status 400). */
int completion_request_parse(completion_request *req, const char *body,
                             size_t len, const tokenizer *tok,
                             const completion_limits *lim, api_error *e);
void completion_request_free(completion_request *req);
/* One prompt, `v`: a string (tokenized no further than n_ctx tokens) or
 * an array of token ids below vocab_size, at most n_ctx of either; errors
 * name "prompt".  p->ids is the caller's to free, whatever the result. */
int completion_prompt_parse(completion_prompt *p, json_t *v,
                            const tokenizer *tok, size_t vocab_size,
                            size_t n_ctx, api_error *e);

/* The parts both endpoints share (completion_request.c), for
 * chat_request.c.  The start: `req` emptied, with the sampling defaults,
 * and the body's JSON object (NULL and a 400 in `e` when it is none). */
json_t *completion_request_start(completion_request *req, const char *body,
                                 size_t len, api_error *e);
/* The fields read alike: the sampling fields, logit_bias, seed, session_id,
 * cache_salt, stream, stream_options and return_token_ids, and the types of
 * model and user. */
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

/* Parses and validates a POST /v1/chat/completions body (chat_request.c):
 * the messages rendered with `tpl` into one prompt, the template's stop
 * strings after the request's own, the other fields as on completions.  On
 * failure `e` says which field is wrong. */
int chat_request_parse(completion_request *req, const char *body, size_t len,
                       const tokenizer *tok, const chat_template *tpl,
                       const completion_limits *lim, api_error *e);

/* Orders the `n_seq` outputs by cumulative logprob, best first, into
 * order[0..n_seq) (ties keep sequence order). */
void completion_rank(const gen_output *const *outs, size_t n_seq,
                     size_t *order);

/* Where the next token's text starts: its text_offset (characters of the
 * prompt and completion before it, as the client receives them), and the
 * decoding state of the bytes before it, since a character may span
 * tokens.  Zeroed: the start of a prompt. */
typedef struct text_cursor {
    size_t chars;
    utf8_decoder utf8;
} text_cursor;

/* The logprobs object of one choice: prompt tokens first when `prompt` is
 * non-NULL (first entry null), then generated tokens [from, to).
 * text_offset counts characters (code points) the way OpenAI reports them:
 * from the start of the prompt, echoed or not, so the completion's first
 * token sits at the prompt's length.  Each token takes its offset from
 * `at`, which advances past it; the prompt's last unfinished character (if
 * any) ends as U+FFFD, and the completion is decoded afresh.  Generated
 * tokens' offsets are clamped to `max_offset` (the text may stop inside
 * the tokens). */
json_t *completion_logprobs_json(const tokenizer *tok,
                                 const gen_token *prompt, size_t n_prompt,
                                 const gen_token *gen, size_t from, size_t to,
                                 text_cursor *at, size_t max_offset);

/* One choice of a non-streamed response. */
json_t *completion_choice_json(const tokenizer *tok,
                               const completion_request *req,
                               size_t prompt_index, size_t index,
                               const gen_output *out);

/* Where the text delta of generated token `token` ends, given `text_sent`
 * bytes already streamed: the engine's token_text_end, never past a partial
 * UTF-8 character (the rest waits for a later chunk). */
size_t completion_stream_delta_end(const gen_output *out, size_t token,
                                   size_t text_sent);

/* ---- helpers shared by the endpoints ---- */

/* A token as OpenAI shows it: its bytes when they are valid UTF-8, else
 * "bytes:\xNN..." (malloc'ed). */
char *api_token_string(const tokenizer *tok, int32_t id);
/* A JSON string of arbitrary bytes, rendered by utf8.h (ill-formed
 * sequences become U+FFFD). */
json_t *api_json_string_bytes(const char *s, size_t len);
/* "cmpl-" + 24 random hex digits into buf (>= 30 bytes). */
void api_random_id(char *buf, size_t size, const char *prefix);
uint64_t api_random_u64(void);
/* Takes `tokens` (what a request may come to use; `what` says how that is
 * counted, "prompt 12 + 2 x max_tokens 16") from the caller's token budget
 * (token_budget.h): 0, with *charged what to give back of it; or -1 with a
 * 400 naming `param` (and `fix` saying what to change) when the whole
 * budget is smaller, or a 429 with Retry-After seconds in *retry_after
 * while the budget is spent, counted in the key's metrics. */
int api_charge_tokens(const api_ctx *ctx, const api_caller *caller,
                      uint64_t tokens, const char *what, const char *param,
                      const char *fix, uint64_t *charged, api_error *e,
                      int *retry_after);
/* The error `caller`'s refused engine_submit gets (429 with Retry-After
 * seconds in *retry_after, counted in the key's metrics; 409, 503, 500);
 * returns -1. */
int api_engine_error(const api_caller *caller, engine_status st,
                     const engine_refusal *why, api_error *e,
                     int *retry_after);
/* Parses a JSON body that must be an object; on failure, a 400 in `e`. */
json_t *api_parse_object(const char *body, size_t len, api_error *e);

#endif
