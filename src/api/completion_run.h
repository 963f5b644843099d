/* completion_run.h — one completion in flight, and the pieces of its answer
 * that the whole response and the event stream share.
 *
 * It sits below the two files that read a run: api_completions.c (submits
 * it, waits, builds the whole answer) and completion_stream.c (turns it into
 * SSE chunks).  Both include this header and neither reaches into the
 * other, so the split closes no circle.  Defined in completion_run.c.
 *
 * Threads: a run belongs to one connection: the handler's thread, then
 * (streaming) whichever libmicrohttpd thread pulls the stream, one at a
 * time.  The engine's output is read under each gen_request's own lock. */
#ifndef GPT2D_COMPLETION_RUN_H
#define GPT2D_COMPLETION_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"
#include "api/completion_request.h"
#include "engine/engine.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

/* How long a waiting handler sleeps before it looks at its socket again:
 * short enough that a vanished client is noticed within about one step. */
#define COMPLETION_WAIT_SLICE_MS 20

typedef struct completion_run completion_run;

/* Where the next token's text starts: its text_offset (characters of the
 * prompt and completion before it, as the client receives them), and the
 * decoding state of the bytes before it, since a character may span
 * tokens.  Zeroed: the start of a prompt. */
typedef struct text_cursor {
    size_t chars;
    utf8_decoder utf8;
} text_cursor;

/* What tells the completion endpoints apart: how a body is read and how the
 * answer looks.  api_completions.c holds /v1/completions' and api_chat.c
 * /v1/chat/completions'; the run, the event stream and the whole answer
 * call through it and never ask which endpoint they serve. */
typedef struct completion_endpoint {
    const char *id_prefix;    /* "cmpl-" */
    const char *object;       /* the whole answer's `object` */
    const char *chunk_object; /* a streamed chunk's */
    const char *log_label;    /* "completion" in the --log-prompts line */
    const char *n_fields;     /* what sets the sequences: "n/best_of" */
    const char *prompt_field; /* what holds the prompt: "prompt" */
    /* The body (parsed: `root`) of `caller`'s request into `req` for
     * `served`; on failure a 400 (or 500) in `e`. */
    int (*parse)(completion_request *req, const api_ctx *ctx,
                 const api_caller *caller, const served_model *served,
                 const completion_limits *lim, json_t *root, api_error *e);
    /* One choice of the whole answer: the prompt's `prompt`, as choice
     * `index`; NULL on OOM. */
    json_t *(*choice)(const completion_run *run, size_t prompt, size_t index,
                      const gen_output *out);
    /* The logprobs of a streamed choice's tokens [from, to); `at` is where
     * token `from`'s text starts, and moves past `to`. */
    json_t *(*chunk_logprobs)(const completion_run *run, const gen_token *gen,
                              size_t from, size_t to, text_cursor *at);
    /* One choice of a chunk: a text delta, logprobs (a reference is stolen;
     * NULL: none), the finish reason (NULL while it runs). */
    json_t *(*chunk_choice)(size_t index, const char *text, size_t len,
                            json_t *logprobs, const char *finish);
    /* NULL, or the same around a delta object made elsewhere (a reference
     * is stolen): chat's tool-call deltas (tool_calls.h), streamed when
     * req.tool_calls says the answer is read for calls. */
    json_t *(*chunk_delta_choice)(size_t index, json_t *delta, json_t *logprobs,
                                  const char *finish);
    /* NULL, or the choice of the chunk that opens each choice's stream
     * before its first token (chat's `delta.role`). */
    json_t *(*chunk_opening)(const completion_run *run, size_t index);
    /* NULL, or an answer of another API's shape: the whole answer built
     * here from the finished run and its usage `u` (NULL on OOM), in place
     * of choices in the envelope, and its event stream opened here, as
     * completion_stream_open, in place of chunks (/v1/responses', and Anthropic's
     * Message: api_messages.c; the choice and chunk callbacks are then
     * unused). */
    json_t *(*whole)(const completion_run *run, gen_usage u);
    int (*stream_open)(completion_run *run, api_source *src);
    /* NULL, or, for a body that names no model, sets the one it means in
     * `root` ("model"): /v1/responses' continuation is the previous
     * response's model's. */
    void (*name_model)(const api_ctx *ctx, const api_caller *caller,
                       json_t *root);
} completion_endpoint;

/* One completion in flight: the parsed request and its engine requests.
 * Its fields are this module's but two: `req` is filled by the endpoint's
 * parser, and reqs, n_reqs and short_cut by run_submit in
 * api_completions.c, which submits the engine requests, and `grammar`,
 * which its parse job compiles there. */
struct completion_run {
    const completion_endpoint *ep;
    const api_ctx *ctx;
    served_model *model; /* the model it runs on, held (api_model_acquire)
                          * until the run is freed; NULL before parsing */
    api_caller caller;   /* whose cache and sessions it may use */
    completion_request req;
    gen_request **reqs; /* one per prompt; NULL entries when short-cut */
    size_t n_reqs;
    char id[48];
    time_t created;
    bool cancelled;
    bool short_cut;   /* nothing for the engine: reqs all NULL */
    grammar *grammar; /* NULL, or req.constraint compiled (a reference) */
    uint64_t charged; /* tokens taken from the caller's budget;
                                 * what was not used goes back when freed */
};

/* A run of `ep` for `who`, its request still empty for the parser to fill
 * (run->req); NULL on OOM.  completion_run_free frees it, parsed or not. */
completion_run *completion_run_new(const completion_endpoint *ep,
                                   const api_ctx *ctx, const api_caller *who);
/* The request is parsed: the run draws its seed if it was sent none,
 * takes a fresh id with its endpoint's prefix, and is dated now. */
void completion_run_start(completion_run *run);
/* Takes `tokens` from the caller's token budget for the run, as
 * api_charge_tokens (the same arguments and errors); what the run does not
 * use goes back when it is freed. */
int completion_run_charge(completion_run *run, uint64_t tokens,
                          const char *what, const char *param, const char *fix,
                          api_error *e, int *retry_after);
/* The run never started: its whole charge goes back now. */
void completion_run_uncharge(completion_run *run);
/* Cancels every engine request of the run (once). */
void completion_run_cancel(completion_run *run);
/* The client went away: cancels what is left and, if anything was, counts
 * one cancelled request, however many prompts and choices it had. */
void completion_run_cancel_for_client(completion_run *run);
/* Gives the caller's budget back what the run did not use, records its
 * tokens and queue waits under the caller's key in /metrics, releases the
 * engine requests and the parsed request, and frees `run`. */
void completion_run_free(completion_run *run);
/* Token counts of all prompts so far (a short-cut prompt counts its length). */
gen_usage completion_run_usage(const completion_run *run);
/* How often the engine has paused the run's sequences so far (to give
 * their slots to other callers), over all its prompts. */
size_t completion_run_pauses(const completion_run *run);

/* The object around choices: id, object, created, model, choices (a
 * reference to `choices` is stolen); a streamed chunk's names its own
 * object. */
json_t *completion_envelope(const completion_run *run, json_t *choices);
json_t *completion_chunk_envelope(const completion_run *run, json_t *choices);
json_t *completion_usage_json(gen_usage u);
/* "stop", "length", or NULL (not finished, or cancelled). */
const char *completion_finish_string(finish_reason f);
/* A JSON array of token ids. */
json_t *completion_ids_json(const int32_t *ids, size_t n);
/* return_token_ids (vLLM's extension): adds to `choice` the prompt's ids as
 * `prompt_token_ids` (unless `prompt` is NULL: a stream sends them once)
 * and the generated tokens [from, to) as `token_ids`.  0, or -1 on OOM. */
int completion_add_token_ids(json_t *choice, const completion_prompt *prompt,
                             const gen_token *gen, size_t from, size_t to);
/* The prompt's bytes (for echo and text offsets), malloc'ed into *out. */
int completion_prompt_bytes(const tokenizer *tok, const completion_prompt *p,
                            char **out, size_t *len);
/* The logprobs object of one choice: prompt tokens first when `prompt` is
 * non-NULL (first entry null), then generated tokens [from, to).
 * text_offset counts characters (code points) the way OpenAI reports them:
 * from the start of the prompt, echoed or not, so the completion's first
 * token sits at the prompt's length.  Each token takes its offset from
 * `at`, which advances past it; the prompt's last unfinished character (if
 * any) ends as U+FFFD, and the completion is decoded afresh.  Generated
 * tokens' offsets are clamped to `max_offset` (the text may stop inside
 * the tokens). */
json_t *completion_logprobs_json(const tokenizer *tok, const gen_token *prompt,
                                 size_t n_prompt, const gen_token *gen,
                                 size_t from, size_t to, text_cursor *at,
                                 size_t max_offset);

#endif
