/* messages_stream.c — a /v1/messages answer as Anthropic's event stream.
 * Every event has its `event:` line (the SDK skips data without one):
 *
 *   message_start        the Message with empty content, stop_reason null
 *   content_block_start  one text block, always (the SDK's finalText()
 *                        needs one, even for an empty answer)
 *   ping
 *   content_block_delta  {"type": "text_delta", "text"} per piece of text
 *                        the engine has released (whole characters, no
 *                        possible start of a stop string held back)
 *   content_block_stop
 *   message_delta        stop_reason, stop_sequence and the final usage
 *                        (the SDK copies its usage over message_start's)
 *   message_stop
 *
 * An engine cancellation (shutdown) after the start is an `error` event
 * in Anthropic's shape, and the stream ends.  There is no [DONE].
 *
 * Callers: api_messages.c opens it on the handler's thread; libmicrohttpd's
 * threads then read it through the response, one call at a time. */
#include "api/messages_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/completion_stream.h"
#include "api/messages_answer.h"
#include "api/sse_out.h"

typedef struct messages_stream {
    completion_run *run;
    sse_out out; /* SSE bytes not yet handed over */
    size_t tokens_sent, text_sent;
    uint64_t version;
    bool started, done, gone;
    api_counts counts;
} messages_stream;

/* Appends `event: name` and its data (a reference to obj is stolen). */
static int emit(messages_stream *s, const char *name, json_t *obj)
{
    return sse_out_event(&s->out, name, obj);
}

static int emit_text(messages_stream *s, const char *text, size_t len)
{
    if (len == 0)
        return 0;
    return emit(s, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:o}}", "type",
                          "content_block_delta", "index", 0, "delta", "type",
                          "text_delta", "text",
                          api_json_string_bytes(text, len)));
}

static int emit_start(messages_stream *s)
{
    s->started = true;
    return emit(s, "message_start",
                json_pack("{s:s, s:o}", "type", "message_start", "message",
                          messages_message_json(
                              s->run, NULL, completion_run_usage(s->run)))) |
           emit(s, "content_block_start",
                json_pack("{s:s, s:i, s:{s:s, s:s, s:n}}", "type",
                          "content_block_start", "index", 0, "content_block",
                          "type", "text", "text", "", "citations")) |
           emit(s, "ping", json_pack("{s:s}", "type", "ping"));
}

static void count(messages_stream *s)
{
    const gen_usage u = completion_run_usage(s->run);
    s->counts = (api_counts){ .prompt_tokens = u.prompt_tokens,
                              .completion_tokens = u.completion_tokens,
                              .pauses = completion_run_pauses(s->run) };
}

static int emit_end(messages_stream *s, const gen_output *out)
{
    const char *sequence = NULL;
    const char *reason = messages_stop_reason(s->run, out, &sequence);
    count(s);
    s->done = true;
    return emit_text(s, out->text + s->text_sent,
                     out->text_len - s->text_sent) |
           emit(s, "content_block_stop",
                json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                          0)) |
           emit(
               s, "message_delta",
               json_pack("{s:s, s:{s:s, s:o, s:n, s:n}, s:o}", "type",
                         "message_delta", "delta", "stop_reason", reason,
                         "stop_sequence",
                         sequence != NULL ? json_string(sequence) : json_null(),
                         "stop_details", "container", "usage",
                         messages_usage_json(completion_run_usage(s->run)))) |
           emit(s, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static int emit_cancelled(messages_stream *s)
{
    api_error e;
    api_error_set(&e, 503, NULL,
                  "the server is shutting down; the request was cancelled");
    count(s);
    s->done = true;
    return emit(s, "error", api_error_json_anthropic(&e));
}

/* Events for what the engine added since the last call; *any when some.
 * The end's events are made after the request's lock is let go (they
 * read the usage, which takes it): a finished output no longer changes. */
static int collect(messages_stream *s, bool *any)
{
    gen_request *r = s->run->reqs[0];
    if (r == NULL) { /* nothing to run: an empty answer by length */
        gen_output empty = { 0 };
        empty.text = "";
        empty.finish = FINISH_LENGTH;
        *any = true;
        return emit_end(s, &empty);
    }
    int rc = 0;
    gen_request_lock(r);
    const gen_output *out = gen_request_output(r, 0);
    const finish_reason finish = out->finish;
    for (; rc == 0 && s->tokens_sent < out->n_tokens; s->tokens_sent++) {
        size_t end = completion_stream_delta_end(out, s->tokens_sent,
                                                 s->text_sent);
        rc = emit_text(s, out->text + s->text_sent, end - s->text_sent);
        *any |= end > s->text_sent;
        s->text_sent = end;
    }
    if (rc == 0 && finish == FINISH_NONE && !*any)
        gen_request_wait(r, &s->version, COMPLETION_WAIT_SLICE_MS);
    gen_request_unlock(r);
    if (rc != 0 || finish == FINISH_NONE)
        return rc;
    *any = true;
    return finish == FINISH_CANCELLED ? emit_cancelled(s) : emit_end(s, out);
}

static void stream_cancel(void *self)
{
    messages_stream *s = self;
    if (s->done || s->gone)
        return;
    s->gone = true;
    completion_run_cancel_for_client(s->run);
    count(s);
}

/* sse_steps: the opening events first, then those of what is new (collect
 * waits for the run itself). */
static int stream_step(void *self, bool *any)
{
    messages_stream *s = self;
    if ((!s->started && emit_start(s) != 0) || collect(s, any) != 0)
        return -1;
    return s->done;
}

static const sse_steps steps = {
    .step = stream_step,
    .cancel = stream_cancel,
};

static ssize_t stream_read(void *self, char *buf, size_t max,
                           const api_client *client)
{
    messages_stream *s = self;
    return sse_out_drive(&s->out, &s->done, &s->gone, &steps, s, buf, max,
                         client);
}

static api_counts stream_counts(const void *self)
{
    const messages_stream *s = self;
    return s->counts;
}

static void stream_free(void *self)
{
    messages_stream *s = self;
    if (s == NULL)
        return;
    stream_cancel(s);
    completion_run_free(s->run);
    sse_out_free(&s->out);
    free(s);
}

int messages_stream_open(completion_run *run, api_source *src)
{
    messages_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->run = run;
    *src = (api_source){
        .self = s,
        .live = true,
        .read = stream_read,
        .cancel = stream_cancel,
        .counts = stream_counts,
        .free = stream_free,
    };
    return 0;
}
