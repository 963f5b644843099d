/* metrics.c — the Prometheus registry (see metrics.h).
 *
 * Every series is a fixed slot in a static table of C11 atomics, so recording
 * is one relaxed fetch_add with no lock and no allocation: HTTP threads and
 * the engine thread record concurrently.  Label values come from small closed
 * sets (endpoints, status codes) and from the names in the keys files the
 * operator wrote, so the series count is bounded whatever clients send.
 *
 * Histogram sums are kept as integers (nanoseconds for latencies, rows for
 * batch sizes): an integer fetch_add is exact and lock-free, where a double
 * sum would need a compare-exchange loop.  Buckets are stored per bucket (not
 * cumulative) so an observation touches one bucket; render accumulates them.
 * A scrape racing with updates may see a sample counted in _count but not yet
 * in _sum; _count is rendered as the +Inf bucket, so the buckets and _count of
 * one scrape always agree with each other. */
#include "core/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- label sets ---- */

/* "preflight": CORS preflights (OPTIONS) of any route, so a browser's
 * preflights do not count as answers of the endpoint they ask about. */
static const char *const endpoint_names[] = {
    "completions", "chat",      "inspect",    "models",    "health",
    "metrics",     "tokenize",  "detokenize", "sessions",  "files",
    "batches",     "responses", "messages",   "preflight", "other",
};
enum { N_ENDPOINTS = sizeof endpoint_names / sizeof endpoint_names[0] };

/* 499 is nginx's "client closed request": what http.c records for a client
 * that hung up, so dropped requests are told apart from other statuses. */
static const int status_codes[] = {
    200, 204, 400, 401, 404, 405, 408, 409, 413, 429, 499, 500, 503,
};
enum { N_CODES = sizeof status_codes / sizeof status_codes[0] };
#define CODE_OTHER N_CODES /* index of the "other" bucket */

/* ---- histograms ---- */

enum { MAX_BUCKETS = 16 };

typedef struct histogram {
    const char *name;
    const char *help;
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    size_t n_bounds;
    double sum_unit; /* seconds (or rows) per unit of `sum` */
    atomic_uint_fast64_t buckets[MAX_BUCKETS + 1]; /* last one is +Inf */
    atomic_uint_fast64_t sum;
} histogram;

/* First token: prefill of a short prompt takes milliseconds, a long one
 * under load can take seconds. */
static const double ttft_bounds[] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
/* Between tokens: one engine step, a few ms alone, tens of ms in a big batch. */
static const double itl_bounds[] = {
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.1, 0.25, 0.5, 1,
};
/* One engine step (forward pass and sampling): ~15 ms for one GPT-2 small
 * row on two cores, tens of ms for a decode batch, a second or more for a
 * long prefill chunk. */
static const double step_bounds[] = {
    0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5,
};
/* Rows per step: powers of two up to well past the default max of 256. */
static const double rows_bounds[] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static histogram ttft_hist = {
    .name = "gpt2d_time_to_first_token_seconds",
    .help = "Time from submission to the first generated token.",
    .bounds = ttft_bounds,
    .n_bounds = ARRAY_LEN(ttft_bounds),
    .sum_unit = 1e-9,
};
static histogram itl_hist = {
    .name = "gpt2d_inter_token_latency_seconds",
    .help = "Time between consecutive generated tokens of one sequence.",
    .bounds = itl_bounds,
    .n_bounds = ARRAY_LEN(itl_bounds),
    .sum_unit = 1e-9,
};
static histogram step_hist = {
    .name = "gpt2d_step_seconds",
    .help = "Duration of one engine step: the forward pass over its rows "
            "and the sampling of its tokens.",
    .bounds = step_bounds,
    .n_bounds = ARRAY_LEN(step_bounds),
    .sum_unit = 1e-9,
};
static histogram rows_hist = {
    .name = "gpt2d_batch_rows",
    .help = "Rows (prefill and decode tokens) in one engine step.",
    .bounds = rows_bounds,
    .n_bounds = ARRAY_LEN(rows_bounds),
    .sum_unit = 1,
};

/* ---- counters ---- */

static atomic_uint_fast64_t requests[N_ENDPOINTS][N_CODES + 1];
static atomic_uint_fast64_t prompt_tokens;
static atomic_uint_fast64_t generated_tokens;
static atomic_uint_fast64_t cached_tokens;
static atomic_uint_fast64_t cancelled;
static atomic_uint_fast64_t request_timeouts;
static atomic_uint_fast64_t write_timeouts;
static atomic_uint_fast64_t prefill_bounded;
static atomic_uint_fast64_t background_abandoned;
static atomic_uint_fast64_t inspect_bytes;
static atomic_uint_fast64_t preemptions[3]; /* by metrics_preemption */
static atomic_uint_fast64_t spec_steps;
static atomic_uint_fast64_t spec_proposed[METRICS_SPEC_POSITIONS];
static atomic_uint_fast64_t spec_accepted[METRICS_SPEC_POSITIONS];
static atomic_uint_fast64_t spec_draft_passes, spec_draft_nanoseconds;

static void counter_add(atomic_uint_fast64_t *c, uint_fast64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint_fast64_t counter_get(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* `endpoint` is a name from endpoint_names or a route path: "/v1/completions",
 * "/v1/sessions/{id}" and "/tokenize" count under their first segment after
 * an optional "/v1/", so the HTTP layer can pass its route table's paths. */
static size_t endpoint_index(const char *endpoint)
{
    if (endpoint == NULL)
        return N_ENDPOINTS - 1;
    if (strncmp(endpoint, "/v1/", 4) == 0)
        endpoint += 4;
    else if (endpoint[0] == '/')
        endpoint += 1;
    size_t len = strcspn(endpoint, "/");
    for (size_t i = 0; i + 1 < N_ENDPOINTS; i++)
        if (strlen(endpoint_names[i]) == len &&
            strncmp(endpoint, endpoint_names[i], len) == 0)
            return i;
    return N_ENDPOINTS - 1; /* "other" */
}

static size_t code_index(int status)
{
    for (size_t i = 0; i < N_CODES; i++)
        if (status_codes[i] == status)
            return i;
    return CODE_OTHER;
}

void metrics_request_done(const char *endpoint, int http_status)
{
    counter_add(&requests[endpoint_index(endpoint)][code_index(http_status)],
                1);
}

void metrics_add_prompt_tokens(size_t n)
{
    counter_add(&prompt_tokens, n);
}
void metrics_add_generated_tokens(size_t n)
{
    counter_add(&generated_tokens, n);
}
void metrics_add_cached_tokens(size_t n)
{
    counter_add(&cached_tokens, n);
}
void metrics_cancelled(void)
{
    counter_add(&cancelled, 1);
}
void metrics_request_timeout(void)
{
    counter_add(&request_timeouts, 1);
}
void metrics_write_timeout(void)
{
    counter_add(&write_timeouts, 1);
}
void metrics_prefill_bounded(void)
{
    counter_add(&prefill_bounded, 1);
}
void metrics_background_step_abandoned(void)
{
    counter_add(&background_abandoned, 1);
}
void metrics_add_inspect_bytes(size_t n)
{
    counter_add(&inspect_bytes, n);
}
void metrics_preempted(metrics_preemption why)
{
    counter_add(&preemptions[why], 1);
}
void metrics_spec_verified(size_t proposed, size_t accepted)
{
    counter_add(&spec_steps, 1);
    for (size_t i = 0; i < proposed && i < METRICS_SPEC_POSITIONS; i++) {
        counter_add(&spec_proposed[i], 1);
        if (i < accepted)
            counter_add(&spec_accepted[i], 1);
    }
}

void metrics_spec_draft_passes(size_t passes, double seconds)
{
    counter_add(&spec_draft_passes, passes);
    counter_add(&spec_draft_nanoseconds, (uint64_t)(seconds * 1e9));
}

/* ---- gauges kept here ---- */

static atomic_size_t inspect_held;

void metrics_inspect_memory_hold(size_t bytes)
{
    atomic_fetch_add_explicit(&inspect_held, bytes, memory_order_relaxed);
}

void metrics_inspect_memory_release(size_t bytes)
{
    atomic_fetch_sub_explicit(&inspect_held, bytes, memory_order_relaxed);
}

size_t metrics_inspect_memory(void)
{
    return atomic_load_explicit(&inspect_held, memory_order_relaxed);
}

/* `value` in the histogram's own unit; `sum_units` the same value in the
 * integer unit of `sum`. */
static void histogram_observe(histogram *h, double value,
                              uint_fast64_t sum_units)
{
    size_t b = 0;
    while (b < h->n_bounds && !(value <= h->bounds[b]))
        b++; /* NaN falls through to +Inf */
    counter_add(&h->buckets[b], 1);
    counter_add(&h->sum, sum_units);
}

/* Seconds to whole nanoseconds; a clock that went backwards or a NaN counts
 * as zero time rather than wrapping the unsigned sum. */
static uint_fast64_t seconds_to_ns(double seconds)
{
    if (!(seconds > 0))
        return 0;
    if (seconds > 1e9) /* ~31 years: beyond any real latency */
        seconds = 1e9;
    return (uint_fast64_t)(seconds * 1e9 + 0.5);
}

void metrics_observe_ttft(double seconds)
{
    histogram_observe(&ttft_hist, seconds, seconds_to_ns(seconds));
}

void metrics_observe_token_latency(double seconds)
{
    histogram_observe(&itl_hist, seconds, seconds_to_ns(seconds));
}

void metrics_observe_step(double seconds)
{
    histogram_observe(&step_hist, seconds, seconds_to_ns(seconds));
}

void metrics_observe_batch_rows(size_t rows)
{
    histogram_observe(&rows_hist, (double)rows, rows);
}

/* ---- per-key series ----
 *
 * A fixed table indexed by key id.  Registering takes a lock (it happens
 * when a keys file is read); recording does not: an id is handed out only
 * after its name is written, and n_keys is published with release order. */

static const char *const refusal_names[METRICS_N_REFUSALS] = {
    "queue_full",           "max_queued_per_key",      "token_budget",
    "max_sessions_per_key", "response_memory_per_key",
};

typedef struct key_series {
    char name[METRICS_KEY_NAME_MAX + 1];
    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t prompt_tokens, completion_tokens;
    atomic_uint_fast64_t refused[METRICS_N_REFUSALS];
    atomic_uint_fast64_t wait_ns, waits;
    atomic_uint_fast64_t pauses, paused_ns;
} key_series;

static key_series key_table[METRICS_MAX_KEYS] = { [0] = { .name = "-" } };
static atomic_size_t n_keys = 1;
static pthread_mutex_t key_register_lock = PTHREAD_MUTEX_INITIALIZER;

size_t metrics_key_id(const char *name)
{
    if (name == NULL || name[0] == '\0' ||
        strlen(name) >= sizeof key_table[0].name)
        return 0;
    pthread_mutex_lock(&key_register_lock);
    size_t n = atomic_load_explicit(&n_keys, memory_order_relaxed), id = 0;
    for (size_t i = 1; i < n && id == 0; i++)
        if (strcmp(key_table[i].name, name) == 0)
            id = i;
    if (id == 0 && n < METRICS_MAX_KEYS) {
        strcpy(key_table[n].name, name);
        id = n;
        atomic_store_explicit(&n_keys, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&key_register_lock);
    return id;
}

const char *metrics_key_name(size_t key)
{
    if (key == 0 || key >= atomic_load_explicit(&n_keys, memory_order_acquire))
        return "";
    return key_table[key].name;
}

/* An id from metrics_key_id; anything else counts under "-". */
static key_series *key_of(size_t key)
{
    return &key_table[key < atomic_load_explicit(&n_keys, memory_order_acquire)
                          ? key
                          : 0];
}

void metrics_key_request(size_t key)
{
    counter_add(&key_of(key)->requests, 1);
}

void metrics_key_tokens(size_t key, size_t prompt, size_t completion)
{
    key_series *k = key_of(key);
    counter_add(&k->prompt_tokens, prompt);
    counter_add(&k->completion_tokens, completion);
}

void metrics_key_refused(size_t key, metrics_refusal why)
{
    if ((unsigned)why < METRICS_N_REFUSALS)
        counter_add(&key_of(key)->refused[why], 1);
}

void metrics_key_queue_wait(size_t key, double seconds)
{
    key_series *k = key_of(key);
    counter_add(&k->wait_ns, seconds_to_ns(seconds));
    counter_add(&k->waits, 1);
}

void metrics_key_paused(size_t key, size_t pauses, double seconds)
{
    if (pauses == 0)
        return;
    key_series *k = key_of(key);
    counter_add(&k->pauses, pauses);
    counter_add(&k->paused_ns, seconds_to_ns(seconds));
}

/* ---- rendering ---- */

static void render_header(FILE *f, const char *name, const char *type,
                          const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_counter(FILE *f, const char *name, const char *help,
                           atomic_uint_fast64_t *c)
{
    render_header(f, name, "counter", help);
    fprintf(f, "%s %ju\n", name, (uintmax_t)counter_get(c));
}

static void render_gauge(FILE *f, const char *name, const char *help,
                         size_t value)
{
    render_header(f, name, "gauge", help);
    fprintf(f, "%s %zu\n", name, value);
}

/* Only series that have been hit are listed: 11 endpoints x 13 codes of zeros
 * would drown the scrape, and Prometheus treats an absent series as none. */
static void render_requests(FILE *f)
{
    const char *name = "gpt2d_requests_total";
    render_header(f, name, "counter",
                  "HTTP requests answered, by endpoint and status code.");
    for (size_t e = 0; e < N_ENDPOINTS; e++) {
        for (size_t c = 0; c <= N_CODES; c++) {
            uint_fast64_t n = counter_get(&requests[e][c]);
            if (n == 0)
                continue;
            if (c == CODE_OTHER)
                fprintf(f, "%s{endpoint=\"%s\",code=\"other\"} %ju\n", name,
                        endpoint_names[e], (uintmax_t)n);
            else
                fprintf(f, "%s{endpoint=\"%s\",code=\"%d\"} %ju\n", name,
                        endpoint_names[e], status_codes[c], (uintmax_t)n);
        }
    }
}

static void render_histogram(FILE *f, histogram *h)
{
    render_header(f, h->name, "histogram", h->help);
    uint_fast64_t cumulative = 0;
    for (size_t b = 0; b <= h->n_bounds; b++) {
        cumulative += counter_get(&h->buckets[b]);
        if (b < h->n_bounds)
            fprintf(f, "%s_bucket{le=\"%g\"} %ju\n", h->name, h->bounds[b],
                    (uintmax_t)cumulative);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %ju\n", h->name,
                    (uintmax_t)cumulative);
    }
    fprintf(f, "%s_sum %.12g\n", h->name,
            (double)counter_get(&h->sum) * h->sum_unit);
    fprintf(f, "%s_count %ju\n", h->name, (uintmax_t)cumulative);
}

/* A counter of two series told apart by one label. */
static void render_counter_pair(FILE *f, const char *name, const char *help,
                                const char *label, const char *a, uint64_t va,
                                const char *b, uint64_t vb)
{
    render_header(f, name, "counter", help);
    fprintf(f, "%s{%s=\"%s\"} %ju\n", name, label, a, (uintmax_t)va);
    fprintf(f, "%s{%s=\"%s\"} %ju\n", name, label, b, (uintmax_t)vb);
}

/* How the KV tiers are shared between accounts: a series per tier (disk
 * only with a disk tier), no account named. */
static void render_kv_sharing(FILE *f, const metrics_gauges *st)
{
    const metrics_kv_share *tiers[2] = { &st->kv_share,
                                         st->kv_disk ? &st->disk.share : NULL };
    const char *names[2] = { "ram", "disk" };
    const struct {
        const char *name, *help;
        size_t v[2];
    } gauges[] = {
        { "gpt2d_kv_accounts",
          "Accounts (API keys, or client addresses) "
          "charged KV-cache blocks, by tier.",
          { tiers[0]->accounts, tiers[1] ? tiers[1]->accounts : 0 } },
        { "gpt2d_kv_share_blocks",
          "Each account's guaranteed share of a "
          "tier, in blocks: the tier's budget over the accounts holding "
          "blocks.",
          { tiers[0]->share_blocks, tiers[1] ? tiers[1]->share_blocks : 0 } },
    };
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        render_header(f, gauges[g].name, "gauge", gauges[g].help);
        for (int t = 0; t < 2; t++)
            if (tiers[t] != NULL)
                fprintf(f, "%s{tier=\"%s\"} %zu\n", gauges[g].name, names[t],
                        gauges[g].v[t]);
    }
    const char *name = "gpt2d_kv_evictions_by_account_total";
    render_header(f, name, "counter",
                  "KV-cache blocks evicted, by whose they were: the "
                  "requester's own, another account's above its share, or "
                  "another's at or under its share (only when the rest is "
                  "held by running sequences).");
    for (int t = 0; t < 2; t++) {
        if (tiers[t] == NULL)
            continue;
        const char *from[3] = { "own", "over_share", "under_share" };
        const uint64_t n[3] = { tiers[t]->evicted_own, tiers[t]->evicted_over,
                                tiers[t]->evicted_under };
        for (int k = 0; k < 3; k++)
            fprintf(f, "%s{tier=\"%s\",from=\"%s\"} %ju\n", name, names[t],
                    from[k], (uintmax_t)n[k]);
    }
    render_header(f, "gpt2d_kv_sessions_forgotten_total", "counter",
                  "Session records forgotten to make room for a new session: "
                  "the key's own beyond --max-sessions-per-key, or the key "
                  "with the most when the table is full.");
    fprintf(f, "gpt2d_kv_sessions_forgotten_total %ju\n",
            (uintmax_t)st->kv_sessions_forgotten);
}

/* Keys that have had a request; a series that was never hit is left out,
 * as in render_requests. */
static void render_keys(FILE *f)
{
    const size_t n = atomic_load_explicit(&n_keys, memory_order_acquire);
    render_header(f, "gpt2d_key_requests_total", "counter",
                  "HTTP requests answered, by API key name (key=\"-\": keys "
                  "without a name, and clients without keys).");
    for (size_t i = 0; i < n; i++) {
        uint_fast64_t v = counter_get(&key_table[i].requests);
        if (v > 0)
            fprintf(f, "gpt2d_key_requests_total{key=\"%s\"} %ju\n",
                    key_table[i].name, (uintmax_t)v);
    }
    render_header(f, "gpt2d_key_tokens_total", "counter",
                  "Tokens of finished completions, by API key name and kind "
                  "(prompt, including cached ones; completion).");
    for (size_t i = 0; i < n; i++) {
        key_series *k = &key_table[i];
        if (counter_get(&k->requests) == 0)
            continue;
        fprintf(f, "gpt2d_key_tokens_total{key=\"%s\",kind=\"prompt\"} %ju\n",
                k->name, (uintmax_t)counter_get(&k->prompt_tokens));
        fprintf(f,
                "gpt2d_key_tokens_total{key=\"%s\",kind=\"completion\"} %ju\n",
                k->name, (uintmax_t)counter_get(&k->completion_tokens));
    }
    render_header(f, "gpt2d_key_refused_total", "counter",
                  "Requests refused with 429, by API key name and reason (the "
                  "error's code).");
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < METRICS_N_REFUSALS; r++) {
            uint_fast64_t v = counter_get(&key_table[i].refused[r]);
            if (v > 0)
                fprintf(
                    f,
                    "gpt2d_key_refused_total{key=\"%s\",reason=\"%s\"} %ju\n",
                    key_table[i].name, refusal_names[r], (uintmax_t)v);
        }
    render_header(f, "gpt2d_key_queue_wait_seconds", "summary",
                  "Time a prompt waited in the queue before it started, by API "
                  "key name.");
    for (size_t i = 0; i < n; i++) {
        key_series *k = &key_table[i];
        uint_fast64_t waits = counter_get(&k->waits);
        if (waits == 0)
            continue;
        fprintf(f, "gpt2d_key_queue_wait_seconds_sum{key=\"%s\"} %.12g\n",
                k->name, (double)counter_get(&k->wait_ns) * 1e-9);
        fprintf(f, "gpt2d_key_queue_wait_seconds_count{key=\"%s\"} %ju\n",
                k->name, (uintmax_t)waits);
    }
    render_header(f, "gpt2d_key_pauses_total", "counter",
                  "Times a sequence of the key's was paused for another "
                  "key's (preempted), by API key name.");
    /* from a key's first request on, zero included: a rate() then counts
     * the first pause too */
    for (size_t i = 0; i < n; i++)
        if (counter_get(&key_table[i].requests) > 0)
            fprintf(f, "gpt2d_key_pauses_total{key=\"%s\"} %ju\n",
                    key_table[i].name,
                    (uintmax_t)counter_get(&key_table[i].pauses));
    render_header(f, "gpt2d_key_paused_seconds_total", "counter",
                  "Time the key's sequences stood paused before they resumed, "
                  "by API key name.");
    for (size_t i = 0; i < n; i++)
        if (counter_get(&key_table[i].requests) > 0)
            fprintf(f, "gpt2d_key_paused_seconds_total{key=\"%s\"} %.6f\n",
                    key_table[i].name,
                    (double)counter_get(&key_table[i].paused_ns) * 1e-9);
}

/* Without stats (the engine is not up yet) the gauges are left out rather
 * than reported as zeros that would look like a real, idle engine. */
static void render_grammars(FILE *f, const metrics_grammars *g)
{
    render_gauge(f, "gpt2d_grammar_cache_entries",
                 "Compiled constraints (schemas, grammars, tool sets) kept "
                 "for the next request that sends them.",
                 g->entries);
    render_gauge(f, "gpt2d_grammar_cache_bytes",
                 "Bytes those hold: rules, automaton states and cached token "
                 "masks (--grammar-memory bounds them).",
                 g->bytes);
    render_counter_pair(f, "gpt2d_grammar_cache_lookups_total",
                        "Constraints looked up in the cache, by outcome.",
                        "result", "hit", g->hits, "miss", g->misses);
    render_header(f, "gpt2d_grammar_compiles_total", "counter",
                  "Constraints compiled.");
    fprintf(f, "gpt2d_grammar_compiles_total %ju\n", (uintmax_t)g->compiles);
    render_header(f, "gpt2d_grammar_compile_seconds_total", "counter",
                  "Time spent compiling constraints.");
    fprintf(f, "gpt2d_grammar_compile_seconds_total %.6f\n",
            g->compile_seconds);
    render_counter_pair(f, "gpt2d_grammar_masks_total",
                        "Token masks a constrained step asked for: served "
                        "from the cache, or computed.",
                        "result", "cached", g->mask_hits, "computed",
                        g->mask_misses);
    render_header(f, "gpt2d_grammar_mask_seconds_total", "counter",
                  "Time spent computing token masks (the cached ones cost a "
                  "copy).");
    fprintf(f, "gpt2d_grammar_mask_seconds_total %.6f\n", g->mask_seconds);
}

/* The models' own series (in render_models' order) of one model. */
static uintmax_t model_series_value(const metrics_model *m, size_t series)
{
    switch (series) {
    case 0:
        return m->loaded;
    case 1:
        return m->loads;
    case 2:
        return m->bytes;
    case 3:
        return m->queue_depth;
    case 4:
        return m->running;
    default:
        return m->kv_blocks_in_use;
    }
}

/* The models' own series, one line per model. */
static void render_models(FILE *f, const metrics_gauges *st)
{
    render_gauge(f, "gpt2d_models_memory_bytes",
                 "Bytes the loaded models count against --models-memory "
                 "(weights and KV caches).",
                 st->models_memory);
    render_gauge(f, "gpt2d_models_memory_max_bytes",
                 "--models-memory (0: no bound).", st->models_memory_max);
    static const struct {
        const char *name, *type, *help;
    } series[] = {
        { "gpt2d_model_loaded", "gauge", "1 while the model is loaded." },
        { "gpt2d_model_loads_total", "counter",
          "Times the model was loaded (at start, or for a request)." },
        { "gpt2d_model_memory_bytes", "gauge",
          "What the model counts against --models-memory while loaded." },
        { "gpt2d_model_queue_depth", "gauge",
          "Requests waiting for the model's engine." },
        { "gpt2d_model_sequences_running", "gauge",
          "The model's sequences holding a slot." },
        { "gpt2d_model_kv_blocks_in_use", "gauge",
          "The model's KV-cache blocks held by running sequences." },
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        render_header(f, series[k].name, series[k].type, series[k].help);
        for (size_t i = 0; i < st->n_models; i++)
            fprintf(f, "%s{model=\"%s\"} %ju\n", series[k].name,
                    st->models[i].id, model_series_value(&st->models[i], k));
    }
    const char *name = "gpt2d_model_compute_seconds_total";
    render_header(f, name, "counter",
                  "Seconds of the worker pool's time the model's steps took "
                  "(the models take turns, fairly by this time); it starts "
                  "again at 0 when the model loads again.");
    for (size_t i = 0; i < st->n_models; i++)
        fprintf(f, "%s{model=\"%s\"} %.6f\n", name, st->models[i].id,
                st->models[i].compute_seconds);
}

static void render_gauges(FILE *f, const metrics_gauges *st)
{
    if (st == NULL)
        return;
    if (st->start_time > 0) {
        /* a restart (systemd's watchdog, a crash) shows as a change */
        render_header(f, "gpt2d_start_time_seconds", "gauge",
                      "When the daemon started, in Unix seconds.");
        fprintf(f, "gpt2d_start_time_seconds %jd\n", (intmax_t)st->start_time);
    }
    render_gauge(f, "gpt2d_responses_stored",
                 "Stored responses of the Responses API (store), every "
                 "key's.",
                 st->responses_stored);
    render_gauge(f, "gpt2d_queue_depth", "Requests waiting for the engine.",
                 st->queue_depth);
    render_gauge(f, "gpt2d_sequences_running",
                 "Sequences prefilling or generating (holding a slot).",
                 st->running);
    render_gauge(f, "gpt2d_sequences_paused",
                 "Sequences of started requests waiting for a slot: paused "
                 "for another key's, or not started yet.",
                 st->paused);
    render_gauge(f, "gpt2d_slots_total",
                 "Sequences that may run at once (--slots).", st->slots_total);
    render_gauge(f, "gpt2d_slots_busy", "Sequences running.", st->slots_busy);
    render_gauge(f, "gpt2d_work_waiting",
                 "Requests waiting for the work pool "
                 "(parsing, tokenizing, detokenizing).",
                 st->work_waiting);
    render_gauge(f, "gpt2d_work_running", "Jobs the work pool runs.",
                 st->work_running);
    render_gauge(f, "gpt2d_response_memory_bytes",
                 "Bytes held for answers not "
                 "yet read, and for jobs running (--response-memory).",
                 st->response_memory);
    render_gauge(f, "gpt2d_response_memory_max_bytes", "--response-memory.",
                 st->response_memory_max);
    render_gauge(f, "gpt2d_inspect_memory_bytes",
                 "Bytes of the attention, "
                 "logit-lens and residual buffers of /v1/inspect requests "
                 "started and not yet answered (queued ones hold none).",
                 st->inspect_memory);
    const char *name = "gpt2d_kv_blocks";
    render_header(f, name, "gauge",
                  "KV-cache blocks in RAM: free, cached (a reusable prefix no "
                  "sequence holds), in_use (held by running sequences).");
    fprintf(f, "%s{state=\"free\"} %zu\n", name, st->kv_blocks_free);
    fprintf(f, "%s{state=\"cached\"} %zu\n", name, st->kv_blocks_cached);
    fprintf(f, "%s{state=\"in_use\"} %zu\n", name, st->kv_blocks_in_use);
    render_gauge(
        f, "gpt2d_kv_blocks_reserved",
        "KV-cache blocks promised to running sequences, not yet taken.",
        st->kv_blocks_reserved);
    render_gauge(f, "gpt2d_kv_blocks_scored",
                 "KV-cache blocks in RAM that keep their tokens' scores "
                 "(log-probabilities and top alternatives, computed for an "
                 "echo with logprobs): a prompt that continues them is "
                 "scored from the cache.  Every block has room for them "
                 "(gpt2d_kv_bytes).",
                 st->kv_blocks_scored);
    render_header(f, "gpt2d_kv_bytes", "gauge",
                  "KV-cache bytes by tier: RAM (--kv-memory, allocated at "
                  "start) and disk (files in --kv-cache-dir).");
    fprintf(f, "gpt2d_kv_bytes{tier=\"ram\"} %zu\n", st->kv_bytes);
    if (st->kv_disk)
        fprintf(f, "gpt2d_kv_bytes{tier=\"disk\"} %zu\n", st->disk.bytes);
    render_gauge(f, "gpt2d_kv_sessions", "Sessions whose history is kept.",
                 st->kv_sessions);
    render_header(f, "gpt2d_kv_evictions_total", "counter",
                  "KV-cache blocks dropped from RAM to make room.");
    fprintf(f, "gpt2d_kv_evictions_total %ju\n", (uintmax_t)st->kv_evictions);
    render_counter_pair(f, "gpt2d_kv_hit_tokens_total",
                        "Prompt tokens reused from the KV cache, by the tier "
                        "they came from.",
                        "tier", "ram", st->kv_hit_tokens_ram, "disk",
                        st->kv_hit_tokens_disk);
    render_kv_sharing(f, st);
    render_grammars(f, &st->grammars);
    render_models(f, st);
    if (!st->kv_disk)
        return;
    const metrics_disk *d = &st->disk;
    render_gauge(f, "gpt2d_kv_disk_blocks", "KV-cache blocks on disk.",
                 d->blocks);
    render_gauge(f, "gpt2d_kv_disk_max_bytes",
                 "The disk tier's budget (--kv-disk).", d->max_bytes);
    const struct {
        const char *name, *help;
        uint64_t v;
    } counters[] = {
        { "gpt2d_kv_disk_writes_total", "Blocks written to disk.", d->writes },
        { "gpt2d_kv_disk_reads_total", "Blocks read back from disk.",
          d->reads },
        { "gpt2d_kv_disk_evictions_total",
          "Blocks deleted from disk to stay within --kv-disk.", d->evictions },
        { "gpt2d_kv_disk_write_skipped_total",
          "Blocks not written: the write queue was full or nothing could make room.",
          d->write_skipped },
        { "gpt2d_kv_disk_slower_total",
          "Disk hits not taken: reading a block has been slower than computing it.",
          st->kv_disk_slower },
        { "gpt2d_kv_disk_foreign_files",
          "Files in the cache directory of another model or settings (ignored).",
          d->foreign },
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        render_header(f, counters[i].name,
                      strstr(counters[i].name, "_total") ? "counter" : "gauge",
                      counters[i].help);
        fprintf(f, "%s %ju\n", counters[i].name, (uintmax_t)counters[i].v);
    }
    render_counter_pair(f, "gpt2d_kv_disk_errors_total",
                        "Disk tier failures: a write that failed (disk full, "
                        "not writable), a file that did not check out when "
                        "read.",
                        "op", "write", d->write_errors, "read", d->read_errors);
}

/* Drafts proposed and accepted, by position, as two labelled counters. */
static void render_spec(FILE *f)
{
    render_counter(f, "gpt2d_spec_verifications_total",
                   "Steps in which a sequence had speculative drafts "
                   "verified.",
                   &spec_steps);
    static const struct {
        const char *name, *help;
        atomic_uint_fast64_t *c;
    } kinds[] = {
        { "gpt2d_spec_draft_tokens_total",
          "Draft tokens proposed by speculative decoding (prompt lookup or "
          "a draft model), "
          "by their position in the draft.",
          spec_proposed },
        { "gpt2d_spec_accepted_tokens_total",
          "Draft tokens the model agreed with, by position: accepted / "
          "proposed at a position is the acceptance up to it.",
          spec_accepted },
    };
    for (size_t k = 0; k < 2; k++) {
        render_header(f, kinds[k].name, "counter", kinds[k].help);
        for (size_t i = 0; i < METRICS_SPEC_POSITIONS; i++)
            fprintf(f, "%s{position=\"%zu\"} %ju\n", kinds[k].name, i + 1,
                    (uintmax_t)counter_get(&kinds[k].c[i]));
    }
    render_counter(f, "gpt2d_spec_draft_model_passes_total",
                   "Passes of draft models (--draft), each guessing one "
                   "token for every sequence it drafts for.",
                   &spec_draft_passes);
    render_header(f, "gpt2d_spec_draft_model_seconds_total", "counter",
                  "Time the draft models' passes took: what their guesses "
                  "cost the steps.");
    fprintf(f, "gpt2d_spec_draft_model_seconds_total %.6f\n",
            (double)counter_get(&spec_draft_nanoseconds) * 1e-9);
}

char *metrics_render(const metrics_gauges *gauges)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    render_requests(f);
    render_counter(f, "gpt2d_prompt_tokens_total",
                   "Prompt tokens received (including cached ones).",
                   &prompt_tokens);
    render_counter(f, "gpt2d_generated_tokens_total",
                   "Tokens generated, over all sequences.", &generated_tokens);
    render_counter(
        f, "gpt2d_cached_tokens_total",
        "Prompt tokens reused from the KV cache instead of computed.",
        &cached_tokens);
    render_counter(f, "gpt2d_requests_cancelled_total",
                   "Requests dropped because the client went away.",
                   &cancelled);
    render_counter(f, "gpt2d_request_timeouts_total",
                   "Connections closed because their request was not received "
                   "within --request-timeout.",
                   &request_timeouts);
    render_counter(f, "gpt2d_write_timeouts_total",
                   "Connections closed because the client took none of its "
                   "response for --timeout seconds.",
                   &write_timeouts);
    render_counter(f, "gpt2d_prefill_bounded_steps_total",
                   "Steps whose prompt rows were cut short by --step-cost so "
                   "that generating streams were not held up longer.",
                   &prefill_bounded);
    render_counter_pair(f, "gpt2d_preemptions_total",
                        "Sequences paused at a step boundary for another "
                        "key's: it was below its fair share of the slots, "
                        "or this key above its max-seqs.",
                        "reason", "fair_share", counter_get(&preemptions[0]),
                        "key_limit", counter_get(&preemptions[1]));
    render_counter(f, "gpt2d_background_preemptions_total",
                   "Background (batch) sequences paused at a step boundary "
                   "for an interactive request.",
                   &preemptions[METRICS_PREEMPT_BACKGROUND]);
    render_counter(f, "gpt2d_background_steps_abandoned_total",
                   "Steps of background (batch) work stopped between two "
                   "layers for an interactive request that arrived, and run "
                   "again later.",
                   &background_abandoned);
    render_counter(f, "gpt2d_inspect_bytes_total",
                   "Bytes of POST /v1/inspect answers (attention, logit lens "
                   "and residual norms as JSON).",
                   &inspect_bytes);
    render_spec(f);
    render_histogram(f, &ttft_hist);
    render_histogram(f, &itl_hist);
    render_histogram(f, &step_hist);
    render_histogram(f, &rows_hist);
    render_keys(f);
    render_gauges(f, gauges);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(text);
        return NULL;
    }
    return text;
}
