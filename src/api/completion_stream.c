/* completion_stream.c — a streamed completion as OpenAI's server-sent
 * events: one `data: {chunk}` per new piece of each choice, a final chunk
 * with its finish_reason, the usage chunk when asked for, `data: [DONE]`.
 * Each chunk takes its endpoint's shape (completion_run.h's
 * completion_endpoint), after that endpoint's opening chunk if it has one.
 * With return_token_ids each chunk with tokens also names their ids.
 * A chat answer read for tool calls streams tool_calls.h's deltas instead
 * of its text: a chunk per delta (the token's logprobs and ids on the
 * first), none for a token whose text is held back unless it has logprobs
 * or ids to carry.
 *
 * Owns the stream: the per-choice progress and the SSE bytes not yet
 * taken.  The engine already holds back incomplete UTF-8 and pending
 * stop-sequence prefixes from gen_output.text; the stream clamps to whole
 * characters once more so that a client can never see half a character,
 * whatever the engine reports.
 *
 * Callers: api_completions() opens the stream on the handler's thread, as
 * its response's live source (api_common.h's api_source: the read, cancel,
 * counts and free below); http.c then pulls it through the response from
 * libmicrohttpd's threads, one call at a time, and frees it when the
 * connection ends. */
#include "api/completion_stream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/sse_out.h"
#include "api/tool_calls.h"

/* Where one choice's stream stands. */
typedef struct choice_state {
    size_t tokens_sent; /* generated tokens already chunked */
    size_t text_sent;   /* bytes of gen_output.text already sent */
    text_cursor next;   /* where the next generated token starts */
    bool opened;        /* the endpoint's opening chunk is sent */
    bool echo_sent;
    bool final_sent;
    bool prompt_ids_sent; /* return_token_ids: on the first chunk only */
    bool reads_calls;     /* the text is read as tool calls: */
    tool_call_stream calls;
} choice_state;

typedef struct completion_stream {
    completion_run *run;
    choice_state *choices; /* [n_prompts * n] */
    uint64_t *versions;    /* [n_prompts]: engine versions seen */
    sse_out out;           /* SSE bytes not yet handed to the server */
    bool done;             /* `data: [DONE]` queued */
    bool gone;             /* the client left */
    api_counts counts;     /* for the access log, taken at the end */
} completion_stream;

/* Appends `data: <obj>\n\n` (a reference to obj is stolen). */
static int stream_event(completion_stream *s, json_t *obj)
{
    return sse_out_event(&s->out, NULL, obj);
}

/* The generated tokens a chunk covers, for return_token_ids. */
typedef struct chunk_tokens {
    size_t prompt; /* whose prompt */
    const gen_token *gen;
    size_t from, to; /* [from, to) of gen */
} chunk_tokens;

/* With return_token_ids, a chunk carries the ids of the tokens it covers
 * (vLLM's shape): `token_ids` when it covers any (vLLM sends the last
 * tokens with the finish reason; our finish chunk and the echo have none,
 * and an empty list would end up as the whole reply's ids in a client
 * that keeps the last value, like the OpenAI SDK's stream helper),
 * `prompt_token_ids` on its choice's first chunk. */
static int chunk_add_ids(completion_stream *s, json_t *choice, choice_state *cs,
                         const chunk_tokens *t)
{
    const completion_request *req = &s->run->req;
    if (!req->return_token_ids)
        return 0;
    const completion_prompt *prompt = cs->prompt_ids_sent
                                          ? NULL
                                          : &req->prompts[t->prompt];
    cs->prompt_ids_sent = true;
    if (t->from < t->to)
        return completion_add_token_ids(choice, prompt, t->gen, t->from, t->to);
    return prompt == NULL ? 0
                          : json_object_set_new(
                                choice, "prompt_token_ids",
                                completion_ids_json(prompt->ids, prompt->n));
}

/* Appends one chunk of one choice (a reference to `choice` is stolen). */
static int stream_choice_event(completion_stream *s, json_t *choice)
{
    if (choice == NULL)
        return -1;
    return stream_event(
        s, completion_chunk_envelope(s->run, json_pack("[o]", choice)));
}

static int stream_chunk(completion_stream *s, size_t index, choice_state *cs,
                        const chunk_tokens *t, const char *text, size_t len,
                        json_t *logprobs, const char *finish)
{
    json_t *choice = s->run->ep->chunk_choice(index, text, len, logprobs,
                                              finish);
    if (choice != NULL && chunk_add_ids(s, choice, cs, t) != 0) {
        json_decref(choice);
        return -1;
    }
    return stream_choice_event(s, choice);
}

/* text_offset counts from the prompt's start, echoed or not: each
 * choice's first generated token sits at its prompt's length. */
static int stream_start_offsets(completion_stream *s)
{
    const completion_request *req = &s->run->req;
    for (size_t p = 0; req->logprobs && p < req->n_prompts; p++) {
        char *ptext = NULL;
        size_t plen = 0;
        if (completion_prompt_bytes(s->run->model->tok, &req->prompts[p],
                                    &ptext, &plen) != 0)
            return -1;
        for (size_t i = 0; i < req->n; i++)
            s->choices[p * req->n + i].next.chars = utf8_chars(ptext, plen);
        free(ptext);
    }
    return 0;
}

/* The echoed prompt, once: with echo+logprobs it waits for the scores. */
static int stream_echo(completion_stream *s, size_t p, size_t index,
                       const gen_output *out, choice_state *cs)
{
    const completion_request *req = &s->run->req;
    bool scoring = req->logprobs;
    if (scoring && out->n_prompt_scored < req->prompts[p].n &&
        out->finish == FINISH_NONE)
        return 0; /* not scored yet */
    char *ptext = NULL;
    size_t plen = 0;
    if (completion_prompt_bytes(s->run->model->tok, &req->prompts[p], &ptext,
                                &plen) != 0)
        return -1;
    json_t *lp = NULL;
    text_cursor at = { 0 };
    if (scoring && out->prompt_scores != NULL)
        lp = completion_logprobs_json(s->run->model->tok, out->prompt_scores,
                                      out->n_prompt_scored, NULL, 0, 0, &at,
                                      SIZE_MAX);
    const chunk_tokens none = { p, out->tokens, 0, 0 };
    int rc = stream_chunk(s, index, cs, &none, ptext, plen, lp, NULL);
    cs->echo_sent = true;
    free(ptext);
    return rc;
}

/* A choice read for tool calls: the deltas of the answer grown to `end`
 * (the whole answer when `finish` is non-NULL, which the last chunk then
 * carries), one chunk each, the first with the token's `logprobs` (a
 * reference is stolen) and ids. */
static int stream_call_deltas(completion_stream *s, size_t index,
                              choice_state *cs, const chunk_tokens *t,
                              const gen_output *out, size_t end,
                              json_t *logprobs, const char *finish)
{
    const completion_endpoint *ep = s->run->ep;
    json_t *deltas = json_array();
    int rc = deltas == NULL ? -1
             : finish != NULL
                 ? tool_call_stream_finish(&cs->calls, out->text, end, deltas)
                 : tool_call_stream_feed(&cs->calls, out->text, end, deltas);
    const size_t n = json_array_size(deltas);
    /* a held-back token still brings its logprobs and ids */
    const bool carry = logprobs != NULL ||
                       (s->run->req.return_token_ids && t->from < t->to);
    const chunk_tokens none = { t->prompt, t->gen, 0, 0 };
    for (size_t k = 0; rc == 0 && (k < n || (k == 0 && carry)); k++) {
        json_t *delta = k < n ? json_incref(json_array_get(deltas, k))
                              : json_object();
        json_t *choice = ep->chunk_delta_choice(index, delta,
                                                k == 0 ? logprobs : NULL, NULL);
        if (k == 0)
            logprobs = NULL; /* the choice took it */
        if (choice != NULL &&
            chunk_add_ids(s, choice, cs, k == 0 ? t : &none) != 0) {
            json_decref(choice);
            rc = -1;
        } else if (stream_choice_event(s, choice) != 0) {
            rc = -1;
        }
    }
    json_decref(logprobs);
    json_decref(deltas);
    if (rc == 0 && finish != NULL) {
        const char *why = tool_call_finish_reason(
            finish, tool_call_reader_calls_complete(&cs->calls.reader));
        rc = stream_choice_event(
            s, ep->chunk_delta_choice(index, json_object(), NULL, why));
    }
    return rc;
}

size_t completion_stream_delta_end(const gen_output *out, size_t token,
                                   size_t text_sent)
{
    size_t end = out->token_text_end[token];
    if (end > out->text_len)
        end = out->text_len;
    if (end < text_sent)
        end = text_sent;
    return text_sent +
           utf8_complete_prefix(out->text + text_sent, end - text_sent);
}

/* Chunks for everything new in one choice; *any set when something was added. */
static int stream_choice(completion_stream *s, size_t p, size_t index,
                         const gen_output *out, choice_state *cs, bool *any)
{
    const completion_request *req = &s->run->req;
    if (cs->final_sent)
        return 0;
    if (!cs->opened && s->run->ep->chunk_opening != NULL) {
        if (stream_choice_event(s, s->run->ep->chunk_opening(s->run, index)) !=
            0)
            return -1;
        *any = true;
    }
    cs->opened = true;
    if (req->echo && !cs->echo_sent) {
        if (stream_echo(s, p, index, out, cs) != 0)
            return -1;
        if (!cs->echo_sent)
            return 0;
        *any = true;
    }
    for (; cs->tokens_sent < out->n_tokens; cs->tokens_sent++) {
        size_t i = cs->tokens_sent;
        size_t end = completion_stream_delta_end(out, i, cs->text_sent);
        json_t *lp = NULL;
        if (req->logprobs)
            lp = s->run->ep->chunk_logprobs(s->run, out->tokens, i, i + 1,
                                            &cs->next);
        const chunk_tokens one = { p, out->tokens, i, i + 1 };
        int rc = cs->reads_calls ? stream_call_deltas(s, index, cs, &one, out,
                                                      end, lp, NULL)
                                 : stream_chunk(s, index, cs, &one,
                                                out->text + cs->text_sent,
                                                end - cs->text_sent, lp, NULL);
        if (rc != 0)
            return -1;
        cs->text_sent = end;
        *any = true;
    }
    if (out->finish != FINISH_NONE && out->finish != FINISH_CANCELLED) {
        /* Whatever was held back is final now. */
        const chunk_tokens none = { p, out->tokens, 0, 0 };
        const char *finish = completion_finish_string(out->finish);
        int rc = cs->reads_calls
                     ? stream_call_deltas(s, index, cs, &none, out,
                                          out->text_len, NULL, finish)
                     : stream_chunk(
                           s, index, cs, &none, out->text + cs->text_sent,
                           out->text_len - cs->text_sent, NULL, finish);
        if (rc != 0)
            return -1;
        cs->text_sent = out->text_len;
        cs->final_sent = true;
        *any = true;
    }
    return 0;
}

/* Collects new chunks from every prompt's request.  Returns 1 when all
 * choices are final, 0 when more is to come, -1 on error; *cancelled when the
 * engine cancelled a sequence (shutdown). */
static int stream_collect(completion_stream *s, bool *any, bool *cancelled)
{
    completion_run *run = s->run;
    size_t n = run->req.n;
    bool all_final = true;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL) {
            /* Trivial request: one empty final chunk per choice. */
            for (size_t i = 0; i < n; i++) {
                choice_state *cs = &s->choices[p * n + i];
                gen_output empty = { 0 };
                empty.text = "";
                empty.finish = FINISH_LENGTH;
                if (stream_choice(s, p, p * n + i, &empty, cs, any) != 0)
                    return -1;
            }
            continue;
        }
        gen_request_lock(r);
        size_t n_seq = gen_request_n_sequences(r);
        for (size_t i = 0; i < n && i < n_seq; i++) {
            choice_state *cs = &s->choices[p * n + i];
            const gen_output *out = gen_request_output(r, i);
            if (stream_choice(s, p, p * n + i, out, cs, any) != 0) {
                gen_request_unlock(r);
                return -1;
            }
            if (out->finish == FINISH_CANCELLED)
                *cancelled = true;
            if (!cs->final_sent)
                all_final = false;
        }
        gen_request_unlock(r);
    }
    return all_final ? 1 : 0;
}

/* The run's counts for the access log, its usage `u` among them. */
static void stream_count(completion_stream *s, gen_usage u)
{
    s->counts = (api_counts){ .prompt_tokens = u.prompt_tokens,
                              .completion_tokens = u.completion_tokens,
                              .pauses = completion_run_pauses(s->run) };
}

static int stream_finish(completion_stream *s, bool cancelled)
{
    completion_run *run = s->run;
    if (cancelled) {
        api_error e;
        api_error_set(&e, 503, NULL,
                      "the server is shutting down; the request was cancelled");
        if (stream_event(s, api_error_json(&e)) != 0)
            return -1;
    }
    const gen_usage u = completion_run_usage(run);
    stream_count(s, u);
    if (run->req.include_usage && !cancelled) {
        json_t *body = completion_chunk_envelope(run, json_array());
        json_object_set_new(body, "usage", completion_usage_json(u));
        if (stream_event(s, body) != 0)
            return -1;
    }
    s->done = true;
    return sse_out_append(&s->out, "data: [DONE]\n\n", 14);
}

/* Sleeps until the first unfinished request changes (or a slice passes). */
static void stream_wait(void *self)
{
    completion_stream *s = self;
    completion_run *run = s->run;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        bool finished = gen_request_finished(r);
        if (!finished)
            gen_request_wait(r, &s->versions[p], COMPLETION_WAIT_SLICE_MS);
        gen_request_unlock(r);
        if (!finished)
            return;
    }
}

/* The client left: cancels the run if it is still running (once). */
static void stream_cancel(void *self)
{
    completion_stream *s = self;
    if (s->done || s->gone)
        return;
    s->gone = true;
    completion_run_cancel_for_client(s->run);
    stream_count(s, completion_run_usage(s->run));
}

/* sse_steps: the chunks of what is new, and the end once every choice
 * has finished (or the run was cancelled). */
static int stream_step(void *self, bool *any)
{
    completion_stream *s = self;
    bool cancelled = false;
    int rc = stream_collect(s, any, &cancelled);
    if (rc < 0)
        return -1;
    if (rc == 1 || cancelled)
        return stream_finish(s, cancelled) != 0 ? -1 : 1;
    return 0;
}

static const sse_steps steps = {
    .step = stream_step,
    .wait = stream_wait,
    .cancel = stream_cancel,
};

static ssize_t stream_read(void *self, char *buf, size_t max,
                           const api_client *client)
{
    completion_stream *s = self;
    return sse_out_drive(&s->out, &s->done, &s->gone, &steps, s, buf, max,
                         client);
}

static api_counts stream_counts(const void *self)
{
    const completion_stream *s = self;
    return s->counts;
}

static void stream_free(void *self)
{
    completion_stream *s = self;
    if (s == NULL)
        return;
    stream_cancel(s);
    completion_run_free(s->run);
    free(s->choices);
    free(s->versions);
    sse_out_free(&s->out);
    free(s);
}

int completion_stream_open(completion_run *run, api_source *src)
{
    completion_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->run = run;
    s->choices = calloc(run->req.n_prompts * run->req.n, sizeof *s->choices);
    s->versions = calloc(run->req.n_prompts, sizeof *s->versions);
    const completion_request *req = &run->req;
    for (size_t c = 0;
         s->choices != NULL && req->tool_calls.call_prefix != NULL &&
         run->ep->chunk_delta_choice != NULL && c < req->n_prompts * req->n;
         c++) {
        s->choices[c].reads_calls = true;
        tool_call_stream_init(&s->choices[c].calls, &req->tool_calls, run->id,
                              c);
    }
    if (s->choices == NULL || s->versions == NULL ||
        stream_start_offsets(s) != 0) {
        free(s->choices);
        free(s->versions);
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
