/* messages_answer.c — Anthropic's Message object, its stop_reason and its
 * usage (see messages_answer.h).  The fields that the 1.x SDK types
 * require and that gpt2d has nothing for (stop_details, container, a text
 * block's citations) are sent as null.
 *
 * Callers: api_messages.c and messages_stream.c, on the thread that owns
 * the run. */
#include "api/messages_answer.h"

#include <string.h>

#include "api/api_ctx.h"

const char *messages_stop_reason(const completion_run *run,
                                 const gen_output *out, const char **sequence)
{
    *sequence = NULL;
    if (out->finish == FINISH_LENGTH)
        return "max_tokens";
    if (out->finish != FINISH_STOP)
        return NULL;
    /* the request's stop_sequences come first in req.stop, the template's
     * after them (chat_request.c); the engine names the one that cut the
     * text, the request's when one of each starts at the same byte */
    const completion_request *req = &run->req;
    const size_t own = req->n_stop - run->ctx->chat->n_stop;
    for (size_t i = 0; out->stop != NULL && i < own; i++)
        if (strcmp(out->stop, req->stop[i]) == 0) {
            *sequence = req->stop[i];
            return "stop_sequence";
        }
    return "end_turn";
}

json_t *messages_usage_json(gen_usage u)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:n, s:n, s:s}", "input_tokens",
                     (json_int_t)(u.prompt_tokens - u.cached_tokens),
                     "output_tokens", (json_int_t)u.completion_tokens,
                     "cache_read_input_tokens", (json_int_t)u.cached_tokens,
                     "cache_creation_input_tokens", (json_int_t)0,
                     "cache_creation", "server_tool_use", "service_tier",
                     "standard");
}

json_t *messages_message_json(const completion_run *run, const gen_output *out,
                              gen_usage u)
{
    const char *sequence = NULL;
    const char *reason = out != NULL ? messages_stop_reason(run, out, &sequence)
                                     : NULL;
    json_t *content = json_array();
    if (content != NULL && out != NULL)
        json_array_append_new(
            content, json_pack("{s:s, s:o, s:n}", "type", "text", "text",
                               api_json_string_bytes(out->text, out->text_len),
                               "citations"));
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:n, s:n, s:o}", "id", run->id,
        "type", "message", "role", "assistant", "model", run->model->id,
        "content", content != NULL ? content : json_null(), "stop_reason",
        reason != NULL ? json_string(reason) : json_null(), "stop_sequence",
        sequence != NULL ? json_string(sequence) : json_null(), "stop_details",
        "container", "usage", messages_usage_json(u));
}
