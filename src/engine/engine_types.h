/* engine_types.h — the engine's public vocabulary, below everything the
 * engine is made of: the engine itself (opaque), how it is configured, and
 * what engine_submit answers.  engine.h declares what takes them. */
#ifndef GPT2D_ENGINE_TYPES_H
#define GPT2D_ENGINE_TYPES_H

#include <stdbool.h>
#include <stddef.h>

#define ENGINE_SESSIONS_PER_CALLER 64 /* --max-sessions-per-key's default */

typedef struct engine engine;

typedef struct engine_config {
    size_t n_threads;        /* worker pool size (>= 1) */
    size_t n_slots;          /* sequences that run at once (--slots) */
    size_t kv_blocks;        /* KV-cache blocks (--kv-memory); 0: a full
                                 * context for every slot */
    bool kv_half;            /* K/V as halves (--kv-dtype float16) */
    const char *kv_disk_dir; /* --kv-cache-dir: the disk tier; NULL: none */
    size_t kv_disk_bytes;    /* --kv-disk */
    size_t max_queue;      /* waiting requests beyond which submit says full */
    size_t max_batch_rows; /* rows per step; also the prefill chunk budget */
    /* Fairness between callers (engine_fair.c). */
    size_t max_seqs_per_caller;     /* sequences one caller keeps running
                                 * while another waits: beyond them its
                                 * sequences are paused for the other's;
                                 * 0: half the slots (at least 1) */
    size_t max_queued_per_caller;   /* requests one caller may have waiting;
                                 * 0: half of max_queue (at least 1) */
    size_t max_sessions_per_caller; /* session records one caller keeps;
                                 * 0: ENGINE_SESSIONS_PER_CALLER */
    double prefill_share;           /* while sequences decode, the share of the
                                 * engine's time prefill may take; 0: 0.5,
                                 * 1: no limit */
    size_t background_step_rows;    /* a step with background (batch) work
                                 * only carries at most this many rows, so
                                 * an interactive request arriving during
                                 * it waits little (engine_batch.c);
                                 * 0: max_batch_rows */
    double step_cost_limit;         /* a step with prompt rows beside decoding
                                 * streams lasts at most this many decode
                                 * steps of a full batch (step_budget.h);
                                 * 0: no bound */
    /* Speculative decoding by prompt lookup (engine_spec.c). */
    size_t spec_max_draft; /* the most drafts a sequence verifies in one
                                 * step; 0: never (batch-variant products) */
    bool spec_default;     /* for requests that do not say */
    bool spec_ignore_cost; /* tests: every draft found is verified,
                                 * whatever it costs (spec_policy.h) */
    /* NULL, or a draft model (engine_draft.c): borrowed, outlives the
     * engine; its vocabulary is the model's (a shorter context drafts
     * for the positions it has).  Its guesses replace prompt lookup's, but for requests that
     * send a prediction. */
    const struct model *draft;
    /* 0; benchmarks: the draft model's guesses, for a request that sends a
     * prediction, are the prediction's token at this percentage of
     * positions (drawn independently) and another token elsewhere: a draft
     * that agrees that often with a greedy answer sent as the prediction,
     * at the draft's real price. */
    unsigned draft_agree_percent;
    unsigned min_step_usec; /* 0; tests: every step lasts at least this
                                 * long, so that how long a generation runs
                                 * does not depend on the machine's speed */
    /* Several models in one daemon (fleet.h): the worker pool they share
     * (borrowed; n_threads must be its size) and the turns at it.  NULL:
     * the engine makes a pool of its own and steps whenever it likes. */
    struct threadpool *pool;
    struct compute_share *share;
} engine_config;

/* Why engine_submit took a request or not, and the HTTP answer each
 * refusal gets. */
typedef enum engine_status {
    ENGINE_OK = 0,
    /* It could never run, however long it waited: */
    ENGINE_TOO_MANY_PROMPTS, /* more prompts than its caller may have
                                 * queued -> 400 */
    ENGINE_TOO_LARGE,        /* a prompt needs more KV cache than there
                                 * is -> 400 */
    /* It could run: */
    ENGINE_GATE_CLOSED,       /* the submission's gate refused it; the
                                 * gate's owner knows why */
    ENGINE_QUEUE_FULL,        /* -> 429 with Retry-After */
    ENGINE_CALLER_QUEUE_FULL, /* the caller's own queued requests are at
                                 * its limit -> 429 with Retry-After */
    ENGINE_SESSION_BUSY,  /* the session is running another request -> 409 */
    ENGINE_SESSION_QUOTA, /* a new session while the caller's
                                 * max_sessions are all busy -> 429 with
                                 * Retry-After */
    ENGINE_STOPPING,      /* draining for shutdown -> 503 */
    ENGINE_INVALID,       /* parameters the API should have refused -> 500 */
    ENGINE_NO_MEMORY,     /* -> 500 */
} engine_status;

/* What a refusal's answer names; each field is set only for the statuses
 * it lists. */
typedef struct engine_refusal {
    size_t prompt;     /* TOO_LARGE: the first prompt that cannot fit */
    size_t need, have; /* TOO_LARGE: the KV blocks that prompt may
                                 * come to need, and the blocks the cache holds */
    size_t limit;      /* TOO_MANY_PROMPTS, CALLER_QUEUE_FULL: the
                                 * requests the caller may have queued */
} engine_refusal;

#endif
