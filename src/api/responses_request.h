/* responses_request.h — the body of POST /v1/responses (OpenAI's Responses
 * API) read into the body of a chat completion (responses_request.c), so
 * that chat_request.c parses it: the template, tools, structured output,
 * budgets and cache reuse are chat's.
 *
 * The translation also keeps what the answer needs and chat does not: the
 * fields the Response object repeats, and where each chat message came
 * from, so that an error chat_request.c names ("messages[2].content[0]")
 * is told in the caller's own field names ("input[1].content[0]").
 *
 * A continued conversation (previous_response_id) is read from the
 * previous response's record (responses_keep.h): its conversation and
 * output come before this request's input, its cache_salt is kept unless
 * the request sends one.  The items of the request's own input are kept
 * (normalised, with ids) for the record of this response.
 *
 * Threads: any; pure (it reads only its arguments). */
#ifndef GPT2D_RESPONSES_REQUEST_H
#define GPT2D_RESPONSES_REQUEST_H

#include <stdbool.h>

#include <jansson.h>

#include "api/api_common.h"
#include "api/completion_request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef struct responses_translation {
    json_t *chat; /* the chat completion body */
    /* chat messages[k] → {"path": "input[j]" | "instructions", "calls":
     * ["input[j]", ...] (the function_call item of each of its
     * tool_calls), "output": true for a function_call_output} */
    json_t *origins;
    /* the Response object's fields that repeat the request: instructions,
     * max_output_tokens, metadata, parallel_tool_calls, text, tool_choice,
     * tools (in the Responses shape, strict as it applies), truncation,
     * store, and user / safety_identifier when sent */
    json_t *echo;
    /* what a stored response keeps beside the Response object:
     * {"conversation": the items the next turn inherits (the previous
     * ones, then this request's), "input_items": this request's,
     * "cache_salt": the salt, when there is one} */
    json_t *kept;
} responses_translation;

/* previous_response_id: *id the string, or NULL when not sent; -1 with a
 * 400 when it is not a string, or sent with a session_id. */
int responses_request_previous(json_t *root, const char **id, api_error *e);
/* Whether truncation is "auto". */
bool responses_request_truncates(json_t *root);

/* `root` (borrowed) into `t`, continuing `previous` (the previous
 * response's record, borrowed; NULL: none); on failure a 400 in `e`
 * naming the Responses field, and `t` empty. */
int responses_request_translate(json_t *root, json_t *previous,
                                responses_translation *t, api_error *e);

void responses_translation_free(responses_translation *t);

/* An error that chat_request.c named in chat's terms, renamed to the
 * Responses field it came from (param and message alike). */
void responses_request_rename_error(const responses_translation *t,
                                    api_error *e);

/* The whole reading of a body into `req` (continuing `previous`, as
 * responses_request_translate): translated, read by chat_request.c with
 * `tpl`; when truncation is "auto" and the prompt (with what it asks to
 * generate) is longer than the context, the fewest oldest turns dropped
 * that make it fit (a turn: a user message and what follows it up to the
 * next; never the instructions, nor the last user message and what
 * follows it), from the kept conversation too; an error renamed to the
 * Responses field.  On success req->answer_fields
 * holds the Response's echoed fields and req->kept what a stored response
 * keeps (responses_translation's echo and kept). */
int responses_request_parse(completion_request *req, json_t *root,
                            json_t *previous, const tokenizer *tok,
                            const chat_template *tpl,
                            const completion_limits *lim, api_error *e);

#endif
