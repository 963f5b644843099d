/* api_common.h — what every endpoint shares, below all of them: OpenAI's
 * error object, the response (a body, or a source that makes the answer as
 * it is sent), and the JSON and UTF-8 helpers every answer's writer uses.
 * Defined in api_common.c.  It knows nothing of sockets, of the engine, of
 * streams or of token bodies: a source brings its own callbacks.
 *
 * Threads: any.  A response belongs to one connection: its handler's
 * thread fills it, then libmicrohttpd's threads read its source one call at
 * a time. */
#ifndef GPT2D_API_COMMON_H
#define GPT2D_API_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "text/tokenizer.h"

/* ---- errors: {"error": {"message", "type", "param", "code"}} ---- */

typedef struct api_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL, or a short machine-readable code */
    char param[256];  /* "" when no single field is at fault (a schema
                       * keyword's place is a long path) */
    char message[512];
} api_error;

/* The code of a 400 for a prompt (with what it asks to generate) longer
 * than the model's context, as OpenAI names it. */
#define API_CONTEXT_EXCEEDED "context_length_exceeded"

/* Fills `e` (type derived from the status) and returns -1, so a parser can
 * `return api_error_set(...)`.  `param` may be NULL. */
int api_error_set(api_error *e, int status, const char *param, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));
/* The one builder of OpenAI's error object, {"error": {...}}, for a body
 * and for an SSE error event alike; NULL on OOM. */
json_t *api_error_json(const api_error *e);
/* The same error in Anthropic's shape, for /v1/messages: {"type": "error",
 * "error": {"type", "message"}, "request_id": null}, its type Anthropic's
 * for the status, the field at fault (Anthropic has no `param`) at the
 * start of the message unless the message starts with it already. */
json_t *api_error_json_anthropic(const api_error *e);

/* ---- the client ---- */

/* How a blocking handler learns that its client hung up. */
typedef struct api_client {
    bool (*gone)(void *arg);
    void *arg;
} api_client;
/* Whether the client hung up; false when `c` or its probe is NULL. */
bool api_client_gone(const api_client *c);

/* ---- responses ---- */

/* What the access log line counts of a request: its tokens, summed over
 * its prompts and choices, and how often the engine paused one of its
 * sequences for another caller's (engine_fair.c). */
typedef struct api_counts {
    size_t prompt_tokens;
    size_t completion_tokens;
    size_t pauses;
} api_counts;

/* An answer made as it is sent, as llama.cpp's server_http_res carries its
 * `next`: whoever makes one fills in its callbacks (completion_stream.c an
 * event stream, api_body.c a /tokenize or /detokenize answer), and the
 * response and the server call them knowing nothing else of it. */
enum { API_SOURCE_END = -1, API_SOURCE_ERROR = -2 };

typedef struct api_source {
    void *self;    /* what the callbacks are called on */
    bool live;     /* an event stream: its length unknown, its
                                 * bytes made as the engine makes tokens */
    size_t length; /* not live: the answer's bytes, known from
                                 * the start */
    /* Copies the next bytes into buf, blocking until there are some:
     * their count (> 0), API_SOURCE_END after the last, or API_SOURCE_ERROR
     * when the answer cannot go on (the client left, as `client` may tell:
     * the work behind it is then cancelled). */
    ssize_t (*read)(void *self, char *buf, size_t max,
                    const api_client *client);
    /* NULL, or: the client left before the end; stops the work behind the
     * answer (the first call; later ones do nothing). */
    void (*cancel)(void *self);
    /* NULL, or the counts so far, for the access log. */
    api_counts (*counts)(const void *self);
    void (*free)(void *self);
} api_source;

typedef struct api_response {
    int status;
    char *body; /* malloc'ed; NULL when made as it is sent */
    size_t body_len;
    const char *content_type;
    const char *allow; /* 405: the Allow header */
    int retry_after;   /* > 0: Retry-After seconds (429) */
    api_source source; /* read non-NULL: the answer instead of body */
    bool cancelled;    /* the client left; nothing is sent */
    char id[48];       /* what the request made ("cmpl-…"), or "":
                                 * its X-Request-Id unless the client sent one */
    api_counts counts; /* for the access log, when no source has them */
    bool anthropic;    /* errors in Anthropic's shape (/v1/messages) */
} api_response;

/* Frees the body or the source. */
void api_response_free(api_response *r);
/* Sets the response to the error object of `e` (Anthropic's when the
 * response says so). */
void api_response_error(api_response *r, const api_error *e);
/* Serialises `obj` (a reference is stolen) as the body. */
void api_response_json(api_response *r, int status, json_t *obj);
/* The body is `body` (malloc'ed, `len` bytes), the response's from now
 * on. */
void api_response_body(api_response *r, int status, const char *content_type,
                       char *body, size_t len);
/* The answer is `src`, the response's from now on (freed with it). */
void api_response_source(api_response *r, int status, const char *content_type,
                         api_source src);
/* The client left: nothing is sent, and the log says 499. */
void api_response_gone(api_response *r);
/* What the request made ("cmpl-…"): the answer's X-Request-Id unless the
 * client sent one. */
void api_response_set_id(api_response *r, const char *id);
/* Retry-After seconds (> 0) beside an error; 0: none. */
void api_response_set_retry_after(api_response *r, int seconds);
/* The counts of an answer with a body, for the access log. */
void api_response_set_counts(api_response *r, api_counts counts);
/* The source's next bytes (api_source.read). */
ssize_t api_response_read(api_response *r, char *buf, size_t max,
                          const api_client *client);
/* The client left: the source's cancel, if it has one. */
void api_response_cancel(api_response *r);
/* Counts for the access log: the source's so far, else the response's
 * own. */
api_counts api_response_counts(const api_response *r);

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
/* Parses a JSON body that must be an object; on failure, a 400 in `e`. */
json_t *api_parse_object(const char *body, size_t len, api_error *e);

#endif
