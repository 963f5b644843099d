/* api_messages.c — Anthropic's Messages API on the completion path.
 *
 * A /v1/messages body is a chat completion in other words
 * (messages_request.c), so it runs exactly as one: api_completions.c's
 * completion_serve with this endpoint, whose answers are Anthropic's
 * Message (messages_answer.c) and event stream (messages_stream.c) instead
 * of choices and chunks.  One prompt and one sequence: the body has no n.
 * count_tokens parses the same body and answers the prompt's length.
 *
 * Callers: http.c, on the connection's own thread. */
#include "api/api_messages.h"

#include "api/api_completions.h"
#include "api/messages_answer.h"
#include "api/messages_request.h"
#include "api/messages_stream.h"

static int parse_run(completion_request *req, const api_ctx *ctx,
                     const api_caller *caller, const served_model *served,
                     const completion_limits *lim, json_t *root, api_error *e)
{
    (void)caller;
    return messages_request_parse(req, root, served->tok, ctx->chat, lim, false,
                                  e);
}

static json_t *whole(const completion_run *run, gen_usage u)
{
    gen_request *r = run->reqs[0];
    if (r == NULL) {
        gen_output empty = { 0 };
        empty.text = "";
        empty.finish = FINISH_LENGTH;
        return messages_message_json(run, &empty, u);
    }
    gen_request_lock(r);
    json_t *m = messages_message_json(run, gen_request_output(r, 0), u);
    gen_request_unlock(r);
    return m;
}

static const completion_endpoint messages_endpoint = {
    .id_prefix = "msg_",
    .object = "message",
    .chunk_object = "message",
    .log_label = "messages",
    .n_fields = "max_tokens",
    .prompt_field = "messages",
    .parse = parse_run,
    .whole = whole,
    .stream_open = messages_stream_open,
};

void api_messages(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r)
{
    completion_serve(ctx, who, body, len, client, r, &messages_endpoint);
}

typedef struct count_job {
    const api_ctx *ctx;
    served_model *model;
    size_t tokens;
} count_job;

static int parse_count(void *arg, json_t *root, api_error *e)
{
    count_job *job = arg;
    const served_model *m = job->model;
    const completion_limits lim = {
        .n_ctx = m->mdl.config.n_ctx,
        .vocab_size = tokenizer_vocab_size(m->tok),
        .max_sequences = m->n_slots,
        .max_n = job->ctx->max_n,
        .max_stop_bytes = job->ctx->max_stop_bytes,
    };
    completion_request req;
    if (messages_request_parse(&req, root, m->tok, job->ctx->chat, &lim, true,
                               e) != 0)
        return -1;
    job->tokens = req.prompts[0].n;
    completion_request_free(&req);
    return 0;
}

void api_messages_count_tokens(const api_ctx *ctx, const api_caller *who,
                               const char *body, size_t len,
                               const api_client *client, api_response *r)
{
    count_job job = { .ctx = ctx };
    if (api_parse_for_model(ctx, who, client, body, len, parse_count, NULL,
                            &job, 0, NULL, &job.model, r) != 0)
        return;
    api_response_json(
        r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)job.tokens));
    api_model_release(ctx, job.model);
}
