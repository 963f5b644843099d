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
 * No stored responses yet: previous_response_id is refused, and `store`
 * is accepted and echoed, nothing being kept.
 *
 * Threads: any; pure (it reads only its arguments). */
#ifndef GPT2D_RESPONSES_REQUEST_H
#define GPT2D_RESPONSES_REQUEST_H

#include <jansson.h>

#include "api/api_common.h"

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
} responses_translation;

/* `root` (borrowed) into `t`; on failure a 400 in `e` naming the
 * Responses field, and `t` empty. */
int responses_request_translate(json_t *root, responses_translation *t,
                                api_error *e);
void responses_translation_free(responses_translation *t);

/* An error that chat_request.c named in chat's terms, renamed to the
 * Responses field it came from (param and message alike). */
void responses_request_rename_error(const responses_translation *t,
                                    api_error *e);

#endif
