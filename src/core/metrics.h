/* metrics.h — the Prometheus registry (the one piece of global mutable
 * state besides the settings).  Every update is a relaxed atomic, so any
 * thread may record without locks (only registering a key name locks);
 * metrics_render takes a consistent-enough snapshot for scraping. */
#ifndef GPT2D_METRICS_H
#define GPT2D_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* `endpoint`: completions, chat, inspect, models, health, metrics, tokenize,
 * detokenize or sessions, or a route path whose first segment (after an optional "/v1/")
 * is one of them ("/v1/sessions/{id}"); anything else counts as "other".
 * Status codes outside 200,400,401,404,405,408,409,413,429,499,500,503
 * count as code="other" (499: the client hung up or stopped reading).  Both
 * label sets are closed, so clients can't add series. */
void metrics_request_done(const char *endpoint, int http_status);
void metrics_add_prompt_tokens(size_t n);
void metrics_add_generated_tokens(size_t n);
void metrics_add_cached_tokens(size_t n);
void metrics_cancelled(void);       /* a client vanished mid-request */
void metrics_request_timeout(void); /* cut by --request-timeout */
void metrics_write_timeout(void);   /* stopped reading for --timeout */
void metrics_prefill_bounded(void); /* --step-cost cut a step's prefill */
void metrics_background_step_abandoned(void); /* an interactive request came */
void metrics_add_inspect_bytes(size_t n);     /* a /v1/inspect answer's size */
/* The bytes every inspect capture's buffers hold now (inspect.c takes and
 * gives them back; gpt2d_inspect_memory_bytes reads them through
 * inspect_memory): a gauge kept here, since a capture may outlive the
 * engine's hold on its request and no owner below the process sees them
 * all. */
void metrics_inspect_memory_hold(size_t bytes);
void metrics_inspect_memory_release(size_t bytes);
size_t metrics_inspect_memory(void);
void metrics_observe_ttft(double seconds);          /* submit -> first token */
void metrics_observe_token_latency(double seconds); /* between tokens */
void metrics_observe_step(double seconds);          /* one engine step */
void metrics_observe_batch_rows(size_t rows); /* rows in one engine step */
/* A sequence paused for another caller's (engine_fair.c): that caller was
 * below its fair share, or this one above its key's max-seqs; or it was
 * background (batch) work and an interactive request waited. */
typedef enum metrics_preemption {
    METRICS_PREEMPT_FAIR_SHARE,
    METRICS_PREEMPT_KEY_LIMIT,
    METRICS_PREEMPT_BACKGROUND,
} metrics_preemption;
void metrics_preempted(metrics_preemption why);
/* Speculative decoding: a sequence had `proposed` drafts verified in one
 * step, and the model agreed with the first `accepted` of them.  Counted
 * by position (the first draft, the second, ...: acceptance falls with
 * the position), up to METRICS_SPEC_POSITIONS. */
#define METRICS_SPEC_POSITIONS 16
void metrics_spec_verified(size_t proposed, size_t accepted);
/* A draft model ran `passes` passes (their guesses are the drafts above)
 * in `seconds`. */
void metrics_spec_draft_passes(size_t passes, double seconds);

/* How a KV tier is shared between accounts (API keys or client
 * addresses): how many hold blocks, each one's guaranteed share, and the
 * blocks evicted by whose they were — the requester's own, another
 * account's above its share, another's at or under it. */
typedef struct metrics_kv_share {
    size_t accounts, share_blocks;
    uint64_t evicted_own, evicted_over, evicted_under;
} metrics_kv_share;
/* ---- per-key series ----
 *
 * Labelled key="NAME" with the names the keys file gives (never a key's
 * secret); keys without a name and callers without keys share key="-",
 * id 0.  A name registered once keeps its id until exit, so a counter never
 * goes back on a reload; at most METRICS_MAX_KEYS names are registered
 * (beyond, a name counts under "-"), so the label set is bounded by the
 * keys files the daemon has read, whatever clients send. */
#define METRICS_MAX_KEYS 1024
#define METRICS_KEY_NAME_MAX 64

/* The id of `name` ([A-Za-z0-9._-], at most METRICS_KEY_NAME_MAX bytes:
 * http_keys.c checks), registered if new under a lock; 0 for NULL, "", a
 * longer name or a full table.  Any thread. */
size_t metrics_key_id(const char *name);
/* The name of id `key` (metrics_key_id's), "" for 0 or an unknown id. */
const char *metrics_key_name(size_t key);

/* Why a key's request got 429: the error's `code`. */
typedef enum metrics_refusal {
    METRICS_REFUSED_QUEUE_FULL,      /* queue_full */
    METRICS_REFUSED_MAX_QUEUED,      /* max_queued_per_key */
    METRICS_REFUSED_TOKEN_BUDGET,    /* token_budget */
    METRICS_REFUSED_MAX_SESSIONS,    /* max_sessions_per_key */
    METRICS_REFUSED_RESPONSE_MEMORY, /* response_memory_per_key */
    METRICS_N_REFUSALS,
} metrics_refusal;

void metrics_key_request(size_t key); /* an HTTP request answered */
void metrics_key_tokens(size_t key, size_t prompt, size_t completion);
void metrics_key_refused(size_t key, metrics_refusal why);
void metrics_key_queue_wait(size_t key, double seconds); /* submit -> start */
/* A request's sequences were paused `pauses` times, standing paused
 * `seconds` in all. */
void metrics_key_paused(size_t key, size_t pauses, double seconds);

/* The KV cache's disk tier, for the gauges below. */
typedef struct metrics_disk {
    size_t blocks, bytes, max_bytes;
    uint64_t writes, reads, evictions, write_skipped;
    uint64_t write_errors, read_errors, foreign;
    metrics_kv_share share;
} metrics_disk;

/* The gauges of one scrape.  The caller fills them from the engine's and
 * the KV cache's stats: metrics sits below both and knows neither. */
/* Structured output: the cache of compiled constraints and their masks
 * (grammar/grammar_cache.h). */
typedef struct metrics_grammars {
    size_t entries, bytes;
    uint64_t hits, misses, compiles;
    double compile_seconds;
    uint64_t mask_hits, mask_misses;
    double mask_seconds;
} metrics_grammars;

/* One model of several (fleet.h), labelled model="ID". */
typedef struct metrics_model {
    const char *id;
    bool loaded;
    uint64_t loads;
    size_t bytes; /* what --models-memory counts while it is loaded */
    size_t queue_depth, running, kv_blocks_in_use;
    double compute_seconds; /* its engine's turns at the worker pool while
                               loaded this time */
} metrics_model;

/* Every engine series below is the sum over the loaded models: a KV
 * counter of a model goes with it when it unloads. */
typedef struct metrics_gauges {
    int64_t start_time; /* Unix seconds the daemon started (0: not shown) */
    size_t responses_stored; /* the Responses API's stored responses */
    size_t queue_depth;
    size_t running; /* sequences holding a slot */
    size_t paused;  /* sequences waiting for a slot again */
    size_t slots_total, slots_busy;
    size_t work_waiting, work_running; /* jobs of the work pool (workpool.h) */
    size_t response_memory, response_memory_max; /* its charged bytes */
    size_t inspect_memory; /* capture buffers of started inspects */
    size_t kv_blocks_free, kv_blocks_cached, kv_blocks_in_use;
    size_t kv_blocks_reserved;
    size_t kv_blocks_scored;
    size_t kv_bytes;
    size_t kv_sessions;
    uint64_t kv_evictions;
    uint64_t kv_hit_tokens_ram, kv_hit_tokens_disk;
    uint64_t kv_disk_slower;   /* disk hits not taken: computing was faster */
    metrics_kv_share kv_share; /* RAM */
    uint64_t kv_sessions_forgotten;
    bool kv_disk; /* a disk tier exists: `disk` holds it */
    metrics_disk disk;
    metrics_grammars grammars;
    const metrics_model *models; /* [n_models] */
    size_t n_models;
    size_t models_memory, models_memory_max; /* 0 max: no bound */
} metrics_gauges;

/* Prometheus text exposition (version 0.0.4), gauges from `gauges` (NULL:
 * left out).  Returns a malloc'ed NUL-terminated string, or NULL on OOM. */
char *metrics_render(const metrics_gauges *gauges);

#endif
