/* api_responses.c — POST /v1/responses' side of a completion (OpenAI's
 * Responses API): its body is translated into a chat completion's
 * (responses_request.c) and read by chat_request.c with the daemon's chat
 * template, so the prompt, tools, structured output and cache reuse are
 * chat's exactly; its errors are renamed to the Responses fields.  The
 * answer is the Response object (responses_answer.c), whole or as events
 * (responses_stream.c).
 *
 * No stored responses yet: nothing is kept after the answer.
 *
 * Callers: api_completions.c's one path, on the thread that owns the run. */
#include "api/api_responses.h"

#include "api/chat_request.h"
#include "api/responses_answer.h"
#include "api/responses_request.h"
#include "api/responses_stream.h"

static int responses_parse(completion_request *req, const api_ctx *ctx,
                           const served_model *served,
                           const completion_limits *lim, json_t *root,
                           api_error *e)
{
    responses_translation t;
    if (responses_request_translate(root, &t, e) != 0)
        return -1;
    int rc = chat_request_parse_root(req, t.chat, served->tok, ctx->chat, lim,
                                     e);
    if (rc != 0) {
        responses_request_rename_error(&t, e);
    } else {
        req->answer_fields = t.echo;
        t.echo = NULL;
        if (req->max_param != NULL)
            req->max_param = "max_output_tokens";
    }
    responses_translation_free(&t);
    return rc;
}

const completion_endpoint responses_endpoint = {
    .id_prefix = "resp_",
    .object = "response",
    .chunk_object = "response",
    .log_label = "responses",
    .n_fields = "n",
    .prompt_field = "input",
    .parse = responses_parse,
    .whole = responses_whole,
    .stream_open = responses_stream_open,
};
