/* responses_stream.c — a streamed /v1/responses run as server-sent events,
 * each `event: TYPE` + `data: {"type": TYPE, "sequence_number": n, …}`,
 * n counting from 0 (issue 33's brief, §2):
 *
 *   response.created, response.in_progress    the Response, in_progress,
 *                                             before any token
 *   the items' events                         responses_answer.h
 *   response.completed | response.incomplete  the Response, whole, with
 *                                             usage (kept first, when
 *                                             stored: responses_keep.h)
 *
 * If the engine cancels the run (shutdown), an `error` event and
 * response.failed end it.  No `data: [DONE]`: OpenAI sends none here.
 *
 * The text streamed is the engine's safe text, token by token, as chat
 * streams it (completion_stream_delta_end): a held-back stop prefix or
 * call-marker prefix sends nothing until it is decided.
 *
 * Callers: api_completions.c's serve() opens it on the handler's thread as
 * the response's live source; http.c pulls it from libmicrohttpd's
 * threads, one call at a time, and frees it when the connection ends. */
#include "api/responses_stream.h"

#include <stdlib.h>
#include <string.h>

#include "api/completion_stream.h"
#include "api/responses_answer.h"
#include "api/responses_keep.h"
#include "api/sse_out.h"

typedef struct responses_stream {
    completion_run *run;
    responses_output out;
    size_t tokens_sent; /* generated tokens read */
    size_t text_sent;   /* bytes of the text fed to `out` */
    uint64_t version;   /* the engine version seen */
    json_int_t seq;     /* the next event's sequence_number */
    sse_out out_bytes;  /* SSE bytes not yet handed to the server */
    bool started, done, gone;
    api_counts counts;
} responses_stream;

/* responses_emit: numbers the event and queues it (a reference is
 * stolen). */
static int queue_event(void *arg, json_t *event)
{
    responses_stream *s = arg;
    const char *type = json_string_value(json_object_get(event, "type"));
    int rc = -1;
    if (type != NULL && json_object_set_new(event, "sequence_number",
                                            json_integer(s->seq)) == 0)
        rc = sse_out_event(&s->out_bytes, type, json_incref(event));
    json_decref(event);
    s->seq++;
    return rc;
}

/* The Response as an event; a finished one is kept first (store). */
static int queue_response(responses_stream *s, const char *type,
                          const char *status, const gen_usage *u,
                          const char *error_message)
{
    json_t *response = responses_object(s->run, status, s->out.items, u,
                                        error_message);
    if (response == NULL)
        return -1;
    if (u != NULL)
        responses_keep(s->run, response);
    return queue_event(
        s, json_pack("{s:s, s:o}", "type", type, "response", response));
}

static void count(responses_stream *s, gen_usage u)
{
    s->counts = (api_counts){ .prompt_tokens = u.prompt_tokens,
                              .completion_tokens = u.completion_tokens,
                              .pauses = completion_run_pauses(s->run) };
}

/* The end: the Response as it finished, or failed (`cancelled`). */
static int stream_end(responses_stream *s, bool cut, bool cancelled)
{
    const gen_usage u = completion_run_usage(s->run);
    count(s, u);
    s->done = true;
    if (cancelled) {
        const char *why =
            "the server is shutting down; the response was cancelled";
        if (queue_event(s, json_pack("{s:s, s:s, s:s, s:n}", "type", "error",
                                     "code", "server_error", "message", why,
                                     "param")) != 0)
            return -1;
        return queue_response(s, "response.failed", "failed", &u, why);
    }
    return cut ? queue_response(s, "response.incomplete", "incomplete", &u,
                                NULL)
               : queue_response(s, "response.completed", "completed", &u, NULL);
}

/* Events for what is new; 1 when the answer ended, 0 when more is to
 * come, -1 on error.  *any when an event was queued. */
static int collect(responses_stream *s, bool *any)
{
    gen_request *r = s->run->n_reqs > 0 ? s->run->reqs[0] : NULL;
    gen_output empty = { 0 };
    empty.text = "";
    empty.finish = FINISH_LENGTH;
    if (r != NULL)
        gen_request_lock(r);
    const gen_output *out = r != NULL ? gen_request_output(r, 0) : &empty;
    const size_t before = s->out_bytes.len;
    int rc = 0;
    for (; rc == 0 && s->tokens_sent < out->n_tokens; s->tokens_sent++) {
        s->text_sent = completion_stream_delta_end(out, s->tokens_sent,
                                                   s->text_sent);
        rc = responses_output_feed(&s->out, out->text, s->text_sent);
    }
    const finish_reason fin = out->finish;
    if (rc == 0 && fin != FINISH_NONE && fin != FINISH_CANCELLED)
        rc = responses_output_finish(&s->out, out->text, out->text_len,
                                     fin == FINISH_LENGTH);
    if (r != NULL)
        gen_request_unlock(r);
    if (rc == 0 && fin != FINISH_NONE)
        rc = stream_end(s, fin == FINISH_LENGTH, fin == FINISH_CANCELLED);
    *any = s->out_bytes.len > before;
    return rc != 0 ? -1 : fin != FINISH_NONE;
}

static void wait_change(void *self)
{
    responses_stream *s = self;
    gen_request *r = s->run->n_reqs > 0 ? s->run->reqs[0] : NULL;
    if (r == NULL)
        return;
    gen_request_lock(r);
    if (!gen_request_finished(r))
        gen_request_wait(r, &s->version, COMPLETION_WAIT_SLICE_MS);
    gen_request_unlock(r);
}

static void stream_cancel(void *self)
{
    responses_stream *s = self;
    if (s->done || s->gone)
        return;
    s->gone = true;
    completion_run_cancel_for_client(s->run);
    count(s, completion_run_usage(s->run));
}

/* sse_steps: the opening events first, then those of what is new. */
static int stream_step(void *self, bool *any)
{
    responses_stream *s = self;
    if (!s->started) {
        s->started = true;
        *any = true;
        return queue_response(s, "response.created", "in_progress", NULL,
                              NULL) != 0 ||
                       queue_response(s, "response.in_progress", "in_progress",
                                      NULL, NULL) != 0
                   ? -1
                   : 0;
    }
    return collect(s, any);
}

static const sse_steps steps = {
    .step = stream_step,
    .wait = wait_change,
    .cancel = stream_cancel,
};

static ssize_t stream_read(void *self, char *buf, size_t max,
                           const api_client *client)
{
    responses_stream *s = self;
    return sse_out_drive(&s->out_bytes, &s->done, &s->gone, &steps, s, buf, max,
                         client);
}

static api_counts stream_counts(const void *self)
{
    const responses_stream *s = self;
    return s->counts;
}

static void stream_free(void *self)
{
    responses_stream *s = self;
    if (s == NULL)
        return;
    stream_cancel(s);
    responses_output_free(&s->out);
    completion_run_free(s->run);
    sse_out_free(&s->out_bytes);
    free(s);
}

int responses_stream_open(completion_run *run, api_source *src)
{
    responses_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->run = run;
    if (responses_output_init(&s->out, run, queue_event, s) != 0) {
        free(s);
        return -1;
    }
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
