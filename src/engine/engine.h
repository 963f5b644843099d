/* engine.h — the scheduler: one thread that runs every live sequence.
 *
 * The engine owns the wait queue, the KV-cache pool and the set of running
 * sequences.  Each step it builds one batch — one decode row for every
 * generating sequence plus chunks of waiting prompts (chunked prefill, so a
 * long prompt never stalls running streams) — runs forward_step on the worker
 * pool, samples, and appends the results to each request's output.
 *
 * Its types are engine_types.h's; a request, what it asks for and what it
 * gives back, gen_request.h's.  Both come with this header.
 *
 * Threads: engine_submit and the session calls are called from HTTP
 * threads; what engine_submit returns, a gen_request, is read through
 * gen_request.h. */
#ifndef GPT2D_ENGINE_H
#define GPT2D_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "engine/engine_types.h"
#include "engine/gen_request.h"
#include "kv/kvcache.h"
#include "model/model.h"
#include "text/tokenizer.h"

int engine_create(engine **out, const model *m, const tokenizer *tok,
                  const engine_config *cfg, gpt2d_error *err);
/* Stops taking work, cancels what remains after `drain_ms`, joins the thread. */
void engine_shutdown(engine *e, int drain_ms);
void engine_destroy(engine *e);

/* One client request: its prompts, each run as an engine request of its
 * own, submitted together. */
typedef struct engine_submission {
    const gen_params *params; /* [n_prompts]: one per prompt, all of one
                                 * caller with the same limits */
    size_t n_prompts;
    /* NULL, or the caller's own check (the API's token budget), called
     * once the request could run (no ENGINE_TOO_MANY_PROMPTS or
     * ENGINE_TOO_LARGE) and before anything is queued: on the submitting
     * thread, with no lock held.  Non-zero refuses the request:
     * ENGINE_GATE_CLOSED. */
    int (*gate)(void *arg);
    void *gate_arg;
    /* A session busy with another request is asked again for this long
     * (ms) before the answer is ENGINE_SESSION_BUSY: that request's client
     * may be gone, and its connection cancels it only when it notices. */
    int session_busy_wait_ms;
} engine_submission;

/* Queues every prompt of `s`, or none.  The engine checks once, in this
 * order, that the request could run at all (ENGINE_TOO_MANY_PROMPTS,
 * ENGINE_TOO_LARGE), its gate, then the queue and the caller's quotas
 * (ENGINE_SESSION_BUSY, ENGINE_SESSION_QUOTA, ENGINE_QUEUE_FULL,
 * ENGINE_CALLER_QUEUE_FULL, prompt by prompt).  A prompt with nothing to
 * compute is finished at once rather than queued.  On ENGINE_OK,
 * out[0..n_prompts) each hold a reference the caller must give back with
 * gen_request_release; otherwise they are NULL, and *why (when not NULL)
 * holds what the refusal's answer names. */
engine_status engine_submit(engine *e, const engine_submission *s,
                            gen_request **out, engine_refusal *why);
/* KV-cache blocks the engine's cache holds (kvcache_blocks_needed's
 * bound for a request). */
size_t engine_kv_blocks(const engine *e);

/* Sessions (conversations whose history the KV cache keeps by id), each
 * `owner`'s own: another owner's sessions are invisible, as if absent. */
typedef struct engine_session_info {
    kv_session_info kv; /* id, its history cached and where, busy */
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
    size_t running;                 /* sequences holding a slot */
    size_t paused;                  /* sequences of running requests
                                       waiting for a slot (engine_pause.c) */
    size_t slots_total, slots_busy; /* sequences that may / do run */
    double compute_seconds;         /* its steps' turns at a shared worker pool
                             * (engine_config.share; 0 without one) */
    kv_stats kv;
} engine_stats;
engine_stats engine_get_stats(engine *e);

#endif
