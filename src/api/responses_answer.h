/* responses_answer.h — a run's answer in the Responses API's shapes
 * (responses_answer.c): the output items read from the answer's text, and
 * the Response object around them.
 *
 *   message        {"type": "message", "id": "msg_…", "status", "role":
 *                  "assistant", "content": [{"type": "output_text",
 *                  "text", "annotations": [], "logprobs": []}]}
 *   function_call  {"type": "function_call", "id": "fc_…", "call_id":
 *                  "call_…" (chat's id for the call), "name",
 *                  "arguments", "status"}
 *
 * An answer that is text is one message item (even when the text is
 * empty); an answer that is calls is one item per call, in order.  The
 * last item's status is "incomplete" when the answer was cut
 * (max_output_tokens or the context), "completed" otherwise.
 *
 * The same reader serves the whole answer and the stream: fed the answer
 * as it grows, it calls `emit` (when set) with the stream's events for
 * every change, so the streamed deltas join to exactly the whole answer's
 * items.
 *
 * Threads: a reader belongs to one run, on the thread that owns it. */
#ifndef GPT2D_RESPONSES_ANSWER_H
#define GPT2D_RESPONSES_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/completion_run.h"
#include "api/tool_calls.h"
#include "core/buf.h"

/* Receives one event {"type": "response.…", …} (a reference is stolen);
 * 0, or -1 to stop (OOM). */
typedef int (*responses_emit)(void *arg, json_t *event);

typedef struct responses_output {
    const completion_run *run;
    json_t *items;    /* the output items so far */
    json_t *open;     /* the last of them while it grows, or NULL */
    bool open_call;   /* it is a function_call */
    gpt2d_buf text;   /* the open item's text, or its call's arguments */
    size_t fed;       /* bytes of a text answer read */
    bool reads_calls; /* the answer is read for tool calls: */
    tool_call_reader reader;
    responses_emit emit; /* NULL: the whole answer, no events */
    void *emit_arg;
} responses_output;

/* 0, or -1 on OOM (then nothing to free). */
int responses_output_init(responses_output *o, const completion_run *run,
                          responses_emit emit, void *emit_arg);
/* The answer grew: `text` is all of it so far, `len` bytes safe to show. */
int responses_output_feed(responses_output *o, const char *text, size_t len);
/* The answer ended at `len`; `cut` when by length.  Closes the items. */
int responses_output_finish(responses_output *o, const char *text, size_t len,
                            bool cut);
void responses_output_free(responses_output *o);

/* The Response object of `run`: `status` "in_progress" (no usage, no
 * completed_at), "completed", "incomplete" (incomplete_details
 * max_output_tokens) or "failed" (`error_message`); `output` is borrowed
 * (NULL: []).  NULL on OOM. */
json_t *responses_object(const completion_run *run, const char *status,
                         json_t *output, const gen_usage *usage,
                         const char *error_message);
/* {"input_tokens", "input_tokens_details": {"cached_tokens"},
 * "output_tokens", "output_tokens_details": {"reasoning_tokens": 0},
 * "total_tokens"} */
json_t *responses_usage_json(gen_usage u);

/* The whole answer of a finished run (completion_endpoint's `whole`). */
json_t *responses_whole(const completion_run *run, gen_usage u);

#endif
