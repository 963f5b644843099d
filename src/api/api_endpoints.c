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
#include "api/response_store.h"
#include "core/metrics.h"
#include "fleet/model_counters.h"

/* One model as /v1/models shows it: OpenAI's fields, then ours (its
 * state in this daemon, and what it is when loaded). */
static json_t *model_object(const api_ctx *ctx, const fleet_model_info *m,
                            const served_model *loaded)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:I, s:s, s:b}", "id", m->id, "object", "model",
        "created", (json_int_t)ctx->started, "owned_by", "gpt2d",
        "max_model_len", (json_int_t)m->config.n_ctx, "state",
        fleet_model_state_name(m->state), "default", m->is_default);
    if (o != NULL && m->draft[0] != '\0')
        json_object_set_new(o, "draft", json_string(m->draft));
    if (o != NULL && loaded != NULL) {
        json_object_set_new(o, "dtype",
                            json_string(model_dtype_name(loaded->mdl.dtype)));
        json_object_set_new(o, "kv_dtype",
                            json_string(kv_dtype_name(loaded->kv_half)));
    }
    return o;
}

/* Every model's info, and a look at those loaded (*loaded[i] NULL when
 * the i-th is not); unlist_models gives them back. */
static size_t list_models(const api_ctx *ctx, fleet_model_info **info,
                          served_model ***loaded)
{
    *info = calloc(FLEET_MAX_MODELS, sizeof **info);
    *loaded = calloc(FLEET_MAX_MODELS, sizeof **loaded);
    if (*info == NULL || *loaded == NULL)
        return 0;
    size_t n = fleet_models(ctx->models, *info, FLEET_MAX_MODELS);
    if (n > FLEET_MAX_MODELS)
        n = FLEET_MAX_MODELS;
    for (size_t i = 0; i < n; i++)
        (*loaded)[i] = fleet_look(ctx->models, (*info)[i].id);
    return n;
}

static void unlist_models(const api_ctx *ctx, fleet_model_info *info,
                          served_model **loaded, size_t n)
{
    for (size_t i = 0; loaded != NULL && i < n; i++)
        fleet_unlook(ctx->models, loaded[i]);
    free(loaded);
    free(info);
}

void api_models(const api_ctx *ctx, api_response *r)
{
    fleet_model_info *info;
    served_model **loaded;
    size_t n = list_models(ctx, &info, &loaded);
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(data, model_object(ctx, &info[i], loaded[i]));
    unlist_models(ctx, info, loaded, n);
    api_response_json(r, 200,
                      json_pack("{s:s, s:o}", "object", "list", "data", data));
}

void api_model(const api_ctx *ctx, const char *id, api_response *r)
{
    fleet_model_info *info;
    served_model **loaded;
    size_t n = list_models(ctx, &info, &loaded);
    json_t *found = NULL;
    for (size_t i = 0; i < n && found == NULL; i++)
        if (strcmp(info[i].id, id) == 0)
            found = model_object(ctx, &info[i], loaded[i]);
    unlist_models(ctx, info, loaded, n);
    if (found == NULL) {
        api_error e;
        gpt2d_error err;
        fleet_no_such_model(ctx->models, id, &err);
        api_error_set(&e, 404, "model", "%s", err.message);
        e.code = "model_not_found";
        api_response_error(r, &e);
        return;
    }
    api_response_json(r, 200, found);
}

void api_health(const api_ctx *ctx, bool stopping, api_response *r)
{
    (void)ctx;
    /* The server listens only once the default model is loaded (the others
     * load when asked for), so it is either ready or draining for
     * shutdown. */
    if (stopping)
        api_response_json(r, 503, json_pack("{s:s}", "status", "stopping"));
    else
        api_response_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* One loaded model's engine and grammar figures, added to g. */
static void add_model(metrics_gauges *g, const engine_stats *st,
                      const served_model *m)
{
    grammar_cache_stats gs;
    grammar_cache_stats_get(m->grammars, &gs);
    model_gauges_add(g, st, &gs);
    model_counters_add(g, st, &gs);
}

void api_metrics(const api_ctx *ctx, api_response *r)
{
    workpool_stats ws = { 0 };
    if (ctx->work != NULL)
        workpool_get_stats(ctx->work, &ws);
    metrics_gauges g = {
        .work_waiting = ws.waiting,
        .work_running = ws.running,
        .response_memory = ws.memory_used,
        .response_memory_max = ws.memory,
        .inspect_memory = inspect_memory(),
        .start_time = (int64_t)ctx->started,
        .responses_stored = ctx->responses != NULL
                                ? response_store_count(ctx->responses)
                                : 0,
    };
    fleet_model_info *info;
    served_model **loaded;
    const size_t n = list_models(ctx, &info, &loaded);
    metrics_model *models = calloc(n > 0 ? n : 1, sizeof *models);
    for (size_t i = 0; models != NULL && i < n; i++) {
        models[i] = (metrics_model){
            .id = info[i].id,
            .loaded = loaded[i] != NULL,
            .loads = info[i].loads,
            .bytes = info[i].state == FLEET_MODEL_UNLOADED ? 0 : info[i].bytes,
            .compute_seconds = info[i].retired_compute_seconds
        };
        /* what its earlier loads did stays counted */
        model_counters_merge(&g, &info[i].retired);
        if (loaded[i] == NULL)
            continue;
        engine_stats st = engine_get_stats(loaded[i]->eng);
        models[i].queue_depth = st.queue_depth;
        models[i].running = st.running;
        models[i].kv_blocks_in_use = st.kv.blocks_in_use;
        models[i].compute_seconds += st.compute_seconds;
        add_model(&g, &st, loaded[i]);
    }
    g.models = models;
    g.n_models = models != NULL ? n : 0;
    fleet_memory(ctx->models, &g.models_memory, &g.models_memory_max);
    char *text = metrics_render(&g);
    free(models);
    unlist_models(ctx, info, loaded, n);
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
 * outlives the job.  The named model's tokenizer is the fleet's, loaded
 * or not (fleet_tokenizer): tokenizing never loads a model. */
typedef struct token_job {
    const tokenizer *tok;
    api_body *answer; /* NULL: `e` says why */
} token_job;

static int tokenize_parse(void *arg, json_t *root, api_error *e)
{
    token_job *j = arg;
    json_t *content = json_object_get(root, "content");
    if (!json_is_string(content))
        return api_error_set(e, 400, "content", "content must be a string");
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    if (tokenizer_encode(j->tok, json_string_value(content),
                         json_string_length(content), &ids, &n, &err) != 0)
        return api_error_set(e, 500, NULL, "tokenizer: %s", err.message);
    /* the answer holds the ids: no more room than they take */
    int32_t *fit = realloc(ids, (n > 0 ? n : 1) * sizeof *ids);
    if (fit != NULL)
        ids = fit;
    j->answer = api_body_token_list(ids, n);
    if (j->answer == NULL) {
        free(ids);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    return 0;
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

static int detokenize_parse(void *arg, json_t *root, api_error *e)
{
    token_job *j = arg;
    int32_t *ids = NULL;
    size_t n = 0;
    if (read_token_array(root, j->tok, &ids, &n, e) != 0)
        return -1;
    /* counting the answer's length walks its text: work for the pool */
    j->answer = api_body_content(j->tok, ids, n);
    if (j->answer == NULL) {
        free(ids);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    return 0;
}

/* Runs a token job for `who` and answers with what it made.  `most_ids`
 * bounds the ids the body can hold, so the job's charge covers its
 * answer before it starts. */
static void run_token_job(const api_ctx *ctx, const api_caller *who,
                          const char *body, size_t len, size_t most_ids,
                          int (*parse)(void *, json_t *, api_error *),
                          const api_client *client, api_response *r)
{
    token_job j = { NULL, NULL };
    work_charge charge;
    if (api_parse_for_tokenizer(ctx, who, client, body, len, parse, &j,
                                api_body_bytes(most_ids), &charge, &j.tok,
                                r) != 0)
        return;
    /* a content body renders its text from the tokenizer as it is sent:
     * the fleet's, which outlives every connection, whatever the model
     * does meanwhile */
    api_body_take_charge(j.answer, &charge);
    api_response_source(r, 200, "application/json", api_body_source(j.answer));
}

void api_tokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r)
{
    /* every token stands for one byte of the content at least, and the
     * content is no longer than the body */
    run_token_job(ctx, who, body, len, len, tokenize_parse, client, r);
}

void api_detokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                    size_t len, const api_client *client, api_response *r)
{
    /* every id in the body takes a digit and a comma or bracket */
    run_token_job(ctx, who, body, len, len / 2, detokenize_parse, client, r);
}

/* One model's sessions of `who` appended to `data`; -1 on OOM. */
/* who's sessions in model m (malloc'ed, *n of them; NULL on OOM).
 * Counted first; sessions begun in between are left for the next look. */
static engine_session_info *sessions_of(const served_model *m,
                                        const api_caller *who, size_t *n)
{
    size_t cap = engine_sessions(m->eng, who->principal, NULL, 0);
    engine_session_info *info = calloc(cap > 0 ? cap : 1, sizeof *info);
    *n = 0;
    if (info == NULL)
        return NULL;
    *n = engine_sessions(m->eng, who->principal, info, cap);
    if (*n > cap)
        *n = cap;
    return info;
}

static int list_sessions(const served_model *m, const api_caller *who,
                         json_t *data)
{
    size_t n;
    engine_session_info *info = sessions_of(m, who, &n);
    if (info == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            data,
            json_pack("{s:s, s:s, s:s, s:I, s:{s:I, s:I}, s:f, s:b}", "id",
                      info[i].kv.id, "object", "session", "model", m->id,
                      "n_tokens", (json_int_t)info[i].kv.n_tokens, "cached",
                      "ram", (json_int_t)info[i].kv.n_ram, "disk",
                      (json_int_t)info[i].kv.n_disk, "idle_seconds",
                      info[i].idle_seconds, "busy", info[i].kv.busy));
    free(info);
    return 0;
}

/* The sessions of the models loaded now: an unloaded model's sessions
 * are on its disk tier (if it has one), listed when it loads again. */
void api_sessions_list(const api_ctx *ctx, const api_caller *who,
                       api_response *r)
{
    served_model *loaded[FLEET_MAX_MODELS];
    size_t n = fleet_look_loaded(ctx->models, loaded, FLEET_MAX_MODELS);
    json_t *data = json_array();
    int rc = data != NULL ? 0 : -1;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = list_sessions(loaded[i], who, data);
        fleet_unlook(ctx->models, loaded[i]);
    }
    if (rc != 0) {
        json_decref(data);
        api_error e;
        api_error_set(&e, 500, NULL, "out of memory");
        api_response_error(r, &e);
        return;
    }
    api_response_json(r, 200,
                      json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* Whether `who`'s session `id` runs a request in model m. */
static bool session_busy_in(const served_model *m, const api_caller *who,
                            const char *id)
{
    size_t n;
    engine_session_info *info = sessions_of(m, who, &n);
    bool busy = false; /* on OOM, the delete itself says busy, if it is */
    for (size_t i = 0; i < n; i++)
        busy = busy || (strcmp(info[i].kv.id, id) == 0 && info[i].kv.busy);
    free(info);
    return busy;
}

/* Deletes the session `id` of `who` in every model that may hold it: the
 * loaded ones, and those with a disk tier (its history may be there),
 * which load for it.  Busy in any of them: 409, and nothing deleted (only
 * a loaded model's session can be busy). */
void api_session_delete(const api_ctx *ctx, const api_caller *who,
                        const char *id, api_response *r)
{
    served_model *loaded[FLEET_MAX_MODELS];
    size_t n = fleet_look_loaded(ctx->models, loaded, FLEET_MAX_MODELS);
    size_t deleted = 0, busy = 0;
    for (size_t i = 0; i < n; i++) {
        busy += session_busy_in(loaded[i], who, id);
        fleet_unlook(ctx->models, loaded[i]);
    }
    fleet_model_info *info = NULL;
    size_t n_models = 0;
    if (busy == 0 && (info = calloc(FLEET_MAX_MODELS, sizeof *info)) != NULL)
        n_models = fleet_models(ctx->models, info, FLEET_MAX_MODELS);
    api_error e;
    for (size_t i = 0; i < n_models && i < FLEET_MAX_MODELS; i++) {
        served_model *m = fleet_look(ctx->models, info[i].id);
        bool looked = m != NULL;
        int retry_after = 0;
        if (m == NULL && info[i].disk_tier &&
            api_model_acquire(ctx, info[i].id, true, &m, &e, &retry_after) !=
                0) {
            free(info);
            api_response_set_retry_after(r, retry_after);
            api_response_error(r, &e);
            return;
        }
        if (m == NULL)
            continue; /* unloaded, no disk tier: it holds no session */
        switch (engine_session_delete(m->eng, who->principal, id)) {
        case 0:
            deleted++;
            break;
        case -2:
            busy++; /* became busy since it was looked at */
            break;
        default:
            break;
        }
        if (looked)
            fleet_unlook(ctx->models, m);
        else
            api_model_release(ctx, m);
    }
    free(info);
    if (busy > 0) {
        api_error_set(&e, 409, NULL, "session '%.128s' is busy with a request",
                      id);
        e.code = "session_busy";
    } else if (deleted == 0) {
        api_error_set(&e, 404, NULL, "no session '%.128s'", id);
        e.code = "session_not_found";
    } else {
        api_response_json(r, 200,
                          json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                    "session", "deleted", 1));
        return;
    }
    api_response_error(r, &e);
}
