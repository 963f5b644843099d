/* api_endpoints.c — the small endpoints: /v1/models, /health, /metrics,
 * /tokenize, /detokenize and the session list / delete.
 *
 * None of them touches the model; each answers from the tokenizer, the
 * engine's counters or the session table.  The tokenizer's two run on the
 * work pool (api_work), and their answers are api_bodies (api_body.c). */
#include "api/api_endpoints.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_body.h"
#include "core/metrics.h"

static json_t *model_object(const api_ctx *ctx)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:I, s:s, s:s}", "id",
                     ctx->mdl->name, "object", "model", "created",
                     (json_int_t)ctx->started, "owned_by", "gpt2d",
                     "max_model_len", (json_int_t)ctx->mdl->config.n_ctx,
                     "dtype", model_dtype_name(ctx->mdl->dtype), "kv_dtype",
                     kv_dtype_name(ctx->kv_half));
}

void api_models(const api_ctx *ctx, api_response *r)
{
    api_response_json(
        r, 200,
        json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(ctx)));
}

void api_model(const api_ctx *ctx, const char *id, api_response *r)
{
    if (strcmp(id, ctx->mdl->name) != 0) {
        api_error e;
        api_error_set(&e, 404, "model",
                      "no model '%.200s' (this server has '%s')", id,
                      ctx->mdl->name);
        e.code = "model_not_found";
        api_response_error(r, &e);
        return;
    }
    api_response_json(r, 200, model_object(ctx));
}

void api_health(const api_ctx *ctx, bool stopping, api_response *r)
{
    (void)ctx;
    /* The server listens only once the model is loaded, so it is either
     * ready or draining for shutdown. */
    if (stopping)
        api_response_json(r, 503, json_pack("{s:s}", "status", "stopping"));
    else
        api_response_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static metrics_kv_share kv_share_of(size_t accounts, size_t share,
                                    const uint64_t evicted[KV_EVICTED_KINDS])
{
    return (
        metrics_kv_share){ .accounts = accounts,
                           .share_blocks = share,
                           .evicted_own = evicted[KV_EVICTED_OWN],
                           .evicted_over = evicted[KV_EVICTED_OVER_SHARE],
                           .evicted_under = evicted[KV_EVICTED_UNDER_SHARE] };
}

void api_metrics(const api_ctx *ctx, api_response *r)
{
    engine_stats st = engine_get_stats(ctx->eng);
    workpool_stats ws = { 0 };
    if (ctx->work != NULL)
        workpool_get_stats(ctx->work, &ws);
    metrics_gauges g = {
        .queue_depth = st.queue_depth,
        .running = st.running,
        .paused = st.paused,
        .slots_total = st.slots_total,
        .slots_busy = st.slots_busy,
        .work_waiting = ws.waiting,
        .work_running = ws.running,
        .response_memory = ws.memory_used,
        .response_memory_max = ws.memory,
        .inspect_memory = inspect_memory(),
        .kv_blocks_free = st.kv.blocks_free,
        .kv_blocks_cached = st.kv.blocks_cached,
        .kv_blocks_in_use = st.kv.blocks_in_use,
        .kv_blocks_reserved = st.kv.blocks_reserved,
        .kv_bytes = st.kv.bytes_total,
        .kv_sessions = st.kv.sessions,
        .kv_evictions = st.kv.evictions,
        .kv_hit_tokens_ram = st.kv.hit_tokens_ram,
        .kv_hit_tokens_disk = st.kv.hit_tokens_disk,
        .kv_disk_slower = st.kv.disk_slower,
        .kv_share = kv_share_of(st.kv.accounts, st.kv.share_blocks,
                                st.kv.evicted),
        .kv_sessions_forgotten = st.kv.sessions_forgotten,
        .kv_disk = st.kv.disk,
        .disk = { .blocks = st.kv.disk_stats.blocks,
                  .bytes = st.kv.disk_stats.bytes,
                  .max_bytes = st.kv.disk_stats.max_bytes,
                  .writes = st.kv.disk_stats.writes,
                  .reads = st.kv.disk_stats.reads,
                  .evictions = st.kv.disk_stats.evictions,
                  .write_skipped = st.kv.disk_stats.write_skipped,
                  .write_errors = st.kv.disk_stats.write_errors,
                  .read_errors = st.kv.disk_stats.read_errors,
                  .foreign = st.kv.disk_stats.foreign,
                  .share = kv_share_of(st.kv.disk_stats.accounts,
                                       st.kv.disk_stats.share_blocks,
                                       st.kv.disk_stats.evicted) },
    };
    if (ctx->grammars != NULL) {
        grammar_cache_stats gs;
        grammar_cache_stats_get(ctx->grammars, &gs);
        g.grammars = (metrics_grammars){ .entries = gs.entries,
                                         .bytes = gs.bytes,
                                         .hits = gs.hits,
                                         .misses = gs.misses,
                                         .compiles = gs.compiles,
                                         .compile_seconds = gs.compile_seconds,
                                         .mask_hits = gs.mask_hits,
                                         .mask_misses = gs.mask_misses,
                                         .mask_seconds = gs.mask_seconds };
    }
    char *text = metrics_render(&g);
    if (text == NULL) {
        api_error e;
        api_error_set(&e, 500, NULL, "out of memory rendering metrics");
        api_response_error(r, &e);
        return;
    }
    api_response_body(r, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                      strlen(text));
}

/* One /tokenize or /detokenize on the work pool: the body in, the answer
 * (or the 400 it earns) out.  The request's body is the connection's and
 * outlives the job. */
typedef struct token_job {
    const api_ctx *ctx;
    const char *body;
    size_t len;
    api_body *answer; /* NULL: `e` says why */
    api_error e;
} token_job;

static void tokenize_job(void *arg)
{
    token_job *j = arg;
    json_t *root = api_parse_object(j->body, j->len, &j->e);
    if (root == NULL)
        return;
    json_t *content = json_object_get(root, "content");
    if (!json_is_string(content)) {
        json_decref(root);
        api_error_set(&j->e, 400, "content", "content must be a string");
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    int rc = tokenizer_encode(j->ctx->tok, json_string_value(content),
                              json_string_length(content), &ids, &n, &err);
    json_decref(root);
    if (rc != 0) {
        api_error_set(&j->e, 500, NULL, "tokenizer: %s", err.message);
        return;
    }
    /* the answer holds the ids: no more room than they take */
    int32_t *fit = realloc(ids, (n > 0 ? n : 1) * sizeof *ids);
    if (fit != NULL)
        ids = fit;
    j->answer = api_body_token_list(ids, n);
    if (j->answer == NULL) {
        free(ids);
        api_error_set(&j->e, 500, NULL, "out of memory");
    }
}

/* Reads "tokens": [id, ...] into a malloc'ed array, validated. */
static int read_token_array(json_t *root, const tokenizer *tok, int32_t **ids,
                            size_t *n, api_error *e)
{
    json_t *arr = json_object_get(root, "tokens");
    if (!json_is_array(arr))
        return api_error_set(e, 400, "tokens",
                             "tokens must be an array of token ids");
    size_t count = json_array_size(arr);
    size_t vocab = tokenizer_vocab_size(tok);
    *ids = malloc((count > 0 ? count : 1) * sizeof **ids);
    if (*ids == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        json_t *t = json_array_get(arr, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || (uint64_t)id >= vocab) {
            free(*ids);
            *ids = NULL;
            return api_error_set(e, 400, "tokens",
                                 "tokens[%zu] is not a token id in [0, %zu)", i,
                                 vocab);
        }
        (*ids)[i] = (int32_t)id;
    }
    *n = count;
    return 0;
}

static void detokenize_job(void *arg)
{
    token_job *j = arg;
    json_t *root = api_parse_object(j->body, j->len, &j->e);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = root != NULL ? read_token_array(root, j->ctx->tok, &ids, &n, &j->e)
                          : -1;
    json_decref(root);
    if (rc != 0)
        return;
    /* counting the answer's length walks its text: work for the pool */
    j->answer = api_body_content(j->ctx->tok, ids, n);
    if (j->answer == NULL) {
        free(ids);
        api_error_set(&j->e, 500, NULL, "out of memory");
    }
}

/* Runs a token job for `who` and answers with what it made.  `most_ids`
 * bounds the ids the body can hold, so the job's charge covers its
 * answer before it starts. */
static void run_token_job(const api_ctx *ctx, const api_caller *who,
                          const char *body, size_t len, size_t most_ids,
                          void (*fn)(void *), const api_client *client,
                          api_response *r)
{
    token_job j = { .ctx = ctx, .body = body, .len = len };
    work_charge charge;
    if (api_work(ctx, who, client, fn, &j, api_body_bytes(most_ids), &charge,
                 r) != 0)
        return;
    if (j.answer == NULL) {
        work_charge_release(&charge);
        api_response_error(r, &j.e);
        return;
    }
    api_body_take_charge(j.answer, &charge);
    api_response_source(r, 200, "application/json", api_body_source(j.answer));
}

void api_tokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r)
{
    /* every token stands for one byte of the content at least, and the
     * content is no longer than the body */
    run_token_job(ctx, who, body, len, len, tokenize_job, client, r);
}

void api_detokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                    size_t len, const api_client *client, api_response *r)
{
    /* every id in the body takes a digit and a comma or bracket */
    run_token_job(ctx, who, body, len, len / 2, detokenize_job, client, r);
}

void api_sessions_list(const api_ctx *ctx, const api_caller *who,
                       api_response *r)
{
    /* Counted first; sessions begun in between are left for the next
     * listing. */
    size_t cap = engine_sessions(ctx->eng, who->principal, NULL, 0);
    engine_session_info *info = calloc(cap > 0 ? cap : 1, sizeof *info);
    if (info == NULL) {
        api_error e;
        api_error_set(&e, 500, NULL, "out of memory");
        api_response_error(r, &e);
        return;
    }
    size_t n = engine_sessions(ctx->eng, who->principal, info, cap);
    if (n > cap)
        n = cap;
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            data, json_pack("{s:s, s:s, s:I, s:{s:I, s:I}, s:f, s:b}", "id",
                            info[i].kv.id, "object", "session", "n_tokens",
                            (json_int_t)info[i].kv.n_tokens, "cached", "ram",
                            (json_int_t)info[i].kv.n_ram, "disk",
                            (json_int_t)info[i].kv.n_disk, "idle_seconds",
                            info[i].idle_seconds, "busy", info[i].kv.busy));
    free(info);
    api_response_json(r, 200,
                      json_pack("{s:s, s:o}", "object", "list", "data", data));
}

void api_session_delete(const api_ctx *ctx, const api_caller *who,
                        const char *id, api_response *r)
{
    api_error e;
    switch (engine_session_delete(ctx->eng, who->principal, id)) {
    case 0:
        api_response_json(r, 200,
                          json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                    "session", "deleted", 1));
        return;
    case -2:
        api_error_set(&e, 409, NULL, "session '%.128s' is busy with a request",
                      id);
        e.code = "session_busy";
        break;
    default:
        api_error_set(&e, 404, NULL, "no session '%.128s'", id);
        e.code = "session_not_found";
        break;
    }
    api_response_error(r, &e);
}
