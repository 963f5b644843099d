/* api_chat.c — POST /v1/chat/completions' side of a completion: its body is
 * read by chat_request.c with the daemon's chat template, and its answer
 * takes OpenAI's chat shapes:
 *
 *   whole   {"object": "chat.completion", "choices": [{"index", "message":
 *           {"role": "assistant", "content", "refusal": null}, "logprobs",
 *           "finish_reason"}]}
 *   stream  "chat.completion.chunk"s: each choice opens with
 *           {"delta": {"role": "assistant", "content": "", "refusal": null}}
 *           (content null when the answer may be tool calls),
 *           then a {"delta": {"content"}} per token, then its finish_reason
 *   tools   when calls may be made, the answer is read by tool_calls.h: a
 *           message of calls has "content": null and "tool_calls": [{"id",
 *           "type": "function", "function": {"name", "arguments"}}], and
 *           finish_reason "tool_calls" when they are whole; streamed, the
 *           deltas are tool_calls.h's (completion_stream.c feeds them)
 *   logprobs {"content": [{"token", "logprob", "bytes", "top_logprobs":
 *           [{"token", "logprob", "bytes"}, ...]}, ...], "refusal": null}
 *           (the SDK's types require both refusals), every generated
 *           token (a stop string's too, as /v1/completions lists them); the
 *           top_logprobs are the most likely tokens, the token's own entry
 *           holding its logprob
 *   return_token_ids adds `prompt_token_ids` and `token_ids` to a choice
 *           (and to a stream's chunks) as on /v1/completions
 *
 * Everything else (submission, waiting, the event stream, usage) is the
 * one path of api_completions.c; see completion_run.h.
 *
 * Callers: that path, on the thread that owns the run. */
#include "api/api_chat.h"

#include "api/chat_request.h"
#include "api/tool_calls.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int chat_parse(completion_request *req, const api_ctx *ctx,
                      const api_caller *caller, const served_model *served,
                      const completion_limits *lim, json_t *root, api_error *e)
{
    (void)caller;
    return chat_request_parse_root(req, root, served->tok, ctx->chat, lim, e);
}

/* {"token", "logprob", "bytes"}: the token as /v1/completions shows it,
 * and its exact bytes, which may be part of a character. */
static json_t *token_json(const tokenizer *tok, int32_t id, float logprob)
{
    size_t len = 0;
    const char *b = tokenizer_token_bytes(tok, id, &len);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes != NULL && i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    char *s = api_token_string(tok, id);
    /* OpenAI's stand-in for a probability too small for a float */
    double lp = isfinite(logprob) ? logprob : -9999.0;
    json_t *o = json_pack(
        "{s:o, s:f, s:o}", "token",
        s != NULL ? api_json_string_bytes(s, strlen(s)) : json_null(),
        "logprob", lp, "bytes", bytes != NULL ? bytes : json_null());
    free(s);
    return o;
}

static json_t *chat_logprobs(const completion_run *run, const gen_token *gen,
                             size_t from, size_t to)
{
    const tokenizer *tok = run->model->tok;
    json_t *content = json_array();
    for (size_t i = from; content != NULL && i < to; i++) {
        json_t *t = token_json(tok, gen[i].token, gen[i].logprob);
        json_t *top = json_array();
        size_t n_top = gen[i].n_top < run->req.n_logprobs ? gen[i].n_top
                                                          : run->req.n_logprobs;
        for (size_t k = 0; top != NULL && k < n_top; k++)
            json_array_append_new(top, token_json(tok, gen[i].top[k].token,
                                                  gen[i].top[k].logprob));
        if (t == NULL || top == NULL ||
            json_object_set_new(t, "top_logprobs", top) != 0 ||
            json_array_append_new(content, t) != 0) {
            json_decref(t);
            json_decref(content);
            return NULL;
        }
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* The message of a whole answer: its text, or (with tools) what the text
 * reads as, and the finish_reason that goes with it. */
static json_t *chat_message(const completion_run *run, size_t index,
                            const gen_output *out, const char **fin)
{
    *fin = completion_finish_string(out->finish);
    if (run->req.tool_calls.call_prefix == NULL)
        return json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                         api_json_string_bytes(out->text, out->text_len),
                         "refusal");
    json_t *message = json_pack("{s:s}", "role", "assistant");
    bool complete = false;
    if (message == NULL ||
        tool_calls_message(&run->req.tool_calls, run->id, index, out->text,
                           out->text_len, message, &complete) != 0 ||
        json_object_set_new(message, "refusal", json_null()) != 0) {
        json_decref(message);
        return NULL;
    }
    *fin = tool_call_finish_reason(*fin, complete);
    return message;
}

static json_t *chat_choice(const completion_run *run, size_t prompt,
                           size_t index, const gen_output *out)
{
    const char *fin;
    json_t *message = chat_message(run, index, out, &fin);
    if (message == NULL)
        return NULL;
    json_t *logprobs = run->req.logprobs
                           ? chat_logprobs(run, out->tokens, 0, out->n_tokens)
                           : json_null();
    json_t *choice = json_pack(
        "{s:I, s:o, s:o, s:o}", "index", (json_int_t)index, "message", message,
        "logprobs", logprobs != NULL ? logprobs : json_null(), "finish_reason",
        fin != NULL ? json_string(fin) : json_null());
    if (choice != NULL && run->req.return_token_ids &&
        completion_add_token_ids(choice, &run->req.prompts[prompt], out->tokens,
                                 0, out->n_tokens) != 0) {
        json_decref(choice);
        return NULL;
    }
    return choice;
}

static json_t *chat_chunk_logprobs(const completion_run *run,
                                   const gen_token *gen, size_t from, size_t to,
                                   text_cursor *at)
{
    (void)at; /* chat reports no text offsets */
    return chat_logprobs(run, gen, from, to);
}

/* A choice of a chunk around a delta object (a reference is stolen). */
static json_t *chat_chunk_delta_choice(size_t index, json_t *delta,
                                       json_t *logprobs, const char *finish)
{
    return json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)index,
                     "delta", delta != NULL ? delta : json_null(), "logprobs",
                     logprobs != NULL ? logprobs : json_null(), "finish_reason",
                     finish != NULL ? json_string(finish) : json_null());
}

/* A choice of a chunk; the finish chunk's delta is empty unless text was
 * still held back. */
static json_t *chat_chunk_choice(size_t index, const char *text, size_t len,
                                 json_t *logprobs, const char *finish)
{
    json_t *delta = finish != NULL && len == 0
                        ? json_object()
                        : json_pack("{s:o}", "content",
                                    api_json_string_bytes(text, len));
    return chat_chunk_delta_choice(index, delta, logprobs, finish);
}

/* The role, and an empty content; null content when the answer may be
 * calls (as OpenAI opens a stream of calls): a client that joins the
 * pieces then keeps null for calls, and a text answer's pieces replace it. */
static json_t *chat_chunk_opening(const completion_run *run, size_t index)
{
    const bool may_call = run->req.tool_calls.call_prefix != NULL;
    return json_pack("{s:I, s:{s:s, s:o, s:n}, s:n, s:n}", "index",
                     (json_int_t)index, "delta", "role", "assistant", "content",
                     may_call ? json_null() : json_string(""), "refusal",
                     "logprobs", "finish_reason");
}

const completion_endpoint chat_endpoint = {
    .id_prefix = "chatcmpl-",
    .object = "chat.completion",
    .chunk_object = "chat.completion.chunk",
    .log_label = "chat",
    .n_fields = "n",
    .prompt_field = "messages",
    .parse = chat_parse,
    .choice = chat_choice,
    .chunk_logprobs = chat_chunk_logprobs,
    .chunk_choice = chat_chunk_choice,
    .chunk_delta_choice = chat_chunk_delta_choice,
    .chunk_opening = chat_chunk_opening,
};
