/* engine.h — the scheduler: one thread that runs every live sequence.
 *
 * The engine owns the wait queue, the KV-cache pool and the set of running
 * sequences.  Each step it builds one batch — one decode row for every
 * generating sequence plus chunks of waiting prompts (chunked prefill, so a
 * long prompt never stalls running streams) — runs forward_step on the worker
 * pool, samples, and appends the results to each request's output.
 *
 * Threads: engine_submit, the gen_request_* functions and the session calls
 * are called from HTTP threads.  A gen_request is shared by its connection
 * and the engine: it is reference-counted and guarded by its own mutex and
 * condition variable; it is freed when both sides have let go, so a client
 * may vanish at any moment. */
#ifndef GPT2D_ENGINE_H
#define GPT2D_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/inspect.h"
#include "kv/kvcache.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

/* a request's stop strings (api.h's API_MAX_STOP) and its chat
 * template's (chat_template.h) */
#define ENGINE_MAX_STOP 8
/* chat's top_logprobs, at most (OpenAI's 20): 176 bytes a gen_token
 * rather than 56 at 5, well under 0.3% of a token's KV entries */
#define ENGINE_MAX_LOGPROBS 20
#define ENGINE_SESSION_ID_MAX 128
#define ENGINE_SESSIONS_PER_CALLER 64   /* --max-sessions-per-key's default */
#define ENGINE_CALLER_MEMORY_MS 30000   /* engine_config.caller_memory_ms's */

typedef struct engine engine;
typedef struct gen_request gen_request;

typedef struct engine_config {
    size_t n_threads;           /* worker pool size (>= 1) */
    size_t n_slots;             /* sequences that run at once (--slots) */
    size_t kv_blocks;           /* KV-cache blocks (--kv-memory); 0: a full
                                 * context for every slot */
    bool kv_half;               /* K/V as halves (--kv-dtype float16) */
    const char *kv_disk_dir;    /* --kv-cache-dir: the disk tier; NULL: none */
    size_t kv_disk_bytes;       /* --kv-disk */
    size_t max_queue;           /* waiting requests beyond which submit says full */
    size_t max_batch_rows;      /* rows per step; also the prefill chunk budget */
    /* Fairness between callers (engine.c, "admission"). */
    size_t max_seqs_per_caller; /* sequences one caller may run while another
                                 * is active; 0: half the slots (at least 1) */
    size_t max_queued_per_caller; /* requests one caller may have waiting;
                                 * 0: half of max_queue (at least 1) */
    size_t max_sessions_per_caller; /* session records one caller keeps;
                                 * 0: ENGINE_SESSIONS_PER_CALLER */
    unsigned admit_age_ms;      /* a request that fits its caller's share but
                                 * not the free slots holds back narrower ones
                                 * once it has waited this long; 0: 2000 */
    unsigned caller_memory_ms;  /* a caller counts as present this long after
                                 * its last request ended (a client thinking
                                 * between two requests), and what it was
                                 * served halves in this time; 0:
                                 * ENGINE_CALLER_MEMORY_MS */
    double prefill_share;       /* while sequences decode, the share of the
                                 * engine's time prefill may take; 0: 0.5,
                                 * 1: no limit */
    double step_cost_limit;     /* a step with prompt rows beside decoding
                                 * streams lasts at most this many decode
                                 * steps of a full batch (step_budget.h);
                                 * 0: no bound */
    unsigned min_step_usec;     /* 0; tests: every step lasts at least this
                                 * long, so that how long a generation runs
                                 * does not depend on the machine's speed */
} engine_config;

typedef enum finish_reason {
    FINISH_NONE = 0,            /* still running */
    FINISH_STOP,                /* EOT token or a stop sequence */
    FINISH_LENGTH,              /* max_tokens or the context is full */
    FINISH_CANCELLED,           /* client went away or shutdown */
} finish_reason;

/* What one request asks for.  Copied by engine_submit; the caller keeps
 * ownership of its own buffers. */
typedef struct gen_params {
    const int32_t *prompt;      /* validated ids, 1 <= n_prompt */
    size_t n_prompt;
    size_t max_tokens;          /* n_prompt + max_tokens <= n_ctx (validated) */
    size_t n_sequences;         /* n, or best_of: independent samples */
    sampler_params sampling;    /* logit_bias array is copied */
    uint64_t seed;              /* sequence i draws from seed + i */
    const char *stop[ENGINE_MAX_STOP]; /* UTF-8, non-empty */
    size_t n_stop;
    bool logprobs;              /* report logprob (+ n_top alternatives) per token */
    size_t n_top_logprobs;      /* 0..ENGINE_MAX_LOGPROBS */
    bool score_prompt;          /* echo + logprobs: score every prompt token */
    /* NULL, or an inspect request (inspect.h): every prompt position is
     * computed, nothing generated (max_tokens 0, one sequence, no
     * session), and the capture is read with gen_request_inspect. */
    const inspect_params *inspect;
    const char *session_id;     /* NULL, or pins the conversation to a slot */
    kv_identity identity;       /* the caller's owner and isolation domain:
                                 * sessions and cached prefixes are its own */
    /* Whose share of the engine the request uses: the API key or client
     * address, even when the cache is global.  All zeros: identity.owner. */
    uint8_t account[SHA256_BYTES];
    size_t max_seqs;            /* this caller's engine_config limits; */
    size_t max_queued;          /* 0: the engine's default */
    size_t max_sessions;
} gen_params;

/* One scored token: a prompt token (when scoring) or a generated one. */
typedef struct gen_token {
    int32_t token;
    float logprob;              /* NAN for the first prompt token, and for
                                 * generated ones of a single sequence
                                 * without logprobs (nothing shows them) */
    size_t n_top;
    token_logprob top[ENGINE_MAX_LOGPROBS];
} gen_token;

/* The output of one sequence so far.  Read only with the request's lock
 * held; the arrays never move while the request lives (sized at submit). */
typedef struct gen_output {
    const gen_token *prompt_scores;   /* n_prompt entries once scored, else NULL */
    size_t n_prompt_scored;
    const gen_token *tokens;          /* generated tokens */
    size_t n_tokens;
    const char *text;                 /* generated text that is safe to show: */
    size_t text_len;                  /* whole UTF-8 characters, no pending stop prefix */
    const size_t *token_text_end;     /* per generated token: text_len after it (clamped) */
    double cum_logprob;               /* sum of generated tokens' logprobs; NaN
                                       * (never computed) for a single sequence
                                       * without logprobs */
    finish_reason finish;
} gen_output;

typedef struct gen_usage {
    size_t prompt_tokens;
    size_t cached_tokens;       /* prompt tokens reused from the KV cache */
    size_t completion_tokens;   /* over all sequences */
} gen_usage;

typedef enum engine_status {
    ENGINE_OK = 0,
    ENGINE_QUEUE_FULL,          /* -> 429 with Retry-After */
    ENGINE_CALLER_QUEUE_FULL,   /* the caller's own queued requests are at
                                 * its limit -> 429 with Retry-After */
    ENGINE_SESSION_BUSY,        /* the session is running another request -> 409 */
    ENGINE_SESSION_QUOTA,       /* a new session while the caller's
                                 * max_sessions are all busy -> 429 with
                                 * Retry-After */
    ENGINE_STOPPING,            /* draining for shutdown -> 503 */
    ENGINE_TOO_LARGE,           /* needs more KV cache than there is -> 400 */
    ENGINE_INVALID,             /* parameters the API should have refused -> 500 */
    ENGINE_NO_MEMORY,           /* -> 500 */
} engine_status;

int engine_create(engine **out, const model *m, const tokenizer *tok,
                  const engine_config *cfg, gpt2d_error *err);
/* Stops taking work, cancels what remains after `drain_ms`, joins the thread. */
void engine_shutdown(engine *e, int drain_ms);
void engine_destroy(engine *e);

/* Queues a request.  On ENGINE_OK, *out holds a reference the caller must
 * give back with gen_request_release. */
engine_status engine_submit(engine *e, const gen_params *p, gen_request **out);
/* KV-cache blocks the engine's cache holds (kvcache_blocks_needed's
 * bound for a request). */
size_t engine_kv_blocks(const engine *e);
/* The limits of a caller whose gen_params set none (engine_config's, the
 * defaults resolved). */
void engine_caller_defaults(const engine *e, size_t *max_seqs,
                            size_t *max_queued);

void gen_request_lock(gen_request *r);
void gen_request_unlock(gen_request *r);
/* With the lock held: waits until the request changed since *version (or the
 * timeout passes); updates *version.  Returns false on timeout. */
bool gen_request_wait(gen_request *r, uint64_t *version, int timeout_ms);
/* With the lock held. */
size_t gen_request_n_sequences(const gen_request *r);
const gen_output *gen_request_output(const gen_request *r, size_t sequence);
bool gen_request_finished(const gen_request *r);  /* every sequence finished */
gen_usage gen_request_usage(const gen_request *r);
/* How long it waited in the queue before it started; -1 while it has not
 * (or never did: cancelled while queued). */
double gen_request_queued_seconds(const gen_request *r);
/* An inspect request's capture, complete once the request finished
 * without being cancelled; NULL for other requests. */
const inspect_capture *gen_request_inspect(const gen_request *r);
/* The client is gone: the engine drops the request within one step. */
void gen_request_cancel(gen_request *r);
void gen_request_release(gen_request *r);

/* Sessions (conversations whose history the KV cache keeps by id), each
 * `owner`'s own: another owner's sessions are invisible, as if absent. */
typedef struct engine_session_info {
    kv_session_info kv;         /* id, its history cached and where, busy */
    double idle_seconds;
} engine_session_info;

/* Copies at most `cap` of owner's sessions into `out`; returns how many
 * exist. */
size_t engine_sessions(engine *e, const uint8_t owner[SHA256_BYTES],
                       engine_session_info *out, size_t cap);
/* 0 deleted, -1 unknown id, -2 busy. */
int engine_session_delete(engine *e, const uint8_t owner[SHA256_BYTES],
                          const char *id);

typedef struct engine_stats {
    size_t queue_depth;
    size_t running;             /* sequences generating or prefilling */
    size_t slots_total, slots_busy;   /* sequences that may / do run */
    kv_stats kv;
} engine_stats;
engine_stats engine_get_stats(engine *e);

#endif
