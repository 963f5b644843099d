/* gen_request_internal.h — a request's insides, for gen_request.c and the
 * engine files that run it (engine_shared.h): what it asked for, each
 * sequence's state, its outputs as they grow; and the functions that make,
 * free and publish it.
 *
 * Threads: fields marked "engine thread only" are the engine thread's
 * own; "readers" fields are written under the request's lock, which is
 * taken after the engine's, never before (engine.c, "Locks"). */
#ifndef GPT2D_GEN_REQUEST_INTERNAL_H
#define GPT2D_GEN_REQUEST_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gen_request.h"
#include "kv/kvcache.h"
#include "model/inspect.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "text/textstream.h"

typedef enum seq_phase {
    SEQ_PREFILL,      /* sequence 0: prompt chunks still to run */
    SEQ_WAIT_PREFILL, /* a sibling: waits for sequence 0's prefill */
    SEQ_DECODE,       /* one row per step */
    SEQ_PAUSED,       /* no slot, no KV sequence: preempted, or a sibling
                         that has not had a slot yet (engine_pause.c) */
    SEQ_RESUME,       /* a slot again: its history's uncached positions
                         run as a prompt, the last one's logits sampled */
    SEQ_LENS,         /* an inspect request: logit-lens rows to run */
    SEQ_DONE,
} seq_phase;

typedef struct seq_state {
    /* engine thread only */
    seq_phase phase;
    bool has_kv; /* holds KV-cache sequence `kv` */
    size_t kv;
    bool kv_loading; /* SEQ_RESUME: its blocks are read from disk */
    sampler_rng rng;
    int32_t *history;         /* [n_prompt + max_tokens]: the prompt, then */
    int32_t *generated;       /* [max_tokens] ids (the penalties', and
                                 what a resumed sequence recomputes) */
    int32_t next_token;       /* decode input: the last sampled token */
    grammar_state constraint; /* with a grammar: the state after the
                                 text so far */
    /* speculative decoding: its drafts' acceptance, recent trials
     * weighing more (engine_spec.c) */
    double spec_hits, spec_trials;
    /* with a draft model: its sequence in the draft's cache, the
     * positions computed there, and (when one could not begin) the text
     * length before which it is not tried again (engine_draft.c) */
    bool draft_has_kv;
    size_t draft_kv, draft_len, draft_retry_at;
    double t_last_token;
    double t_paused; /* SEQ_PAUSED: since when; < 0: never ran yet */
    /* readers: under the request lock */
    gen_output out;
    gen_token *tokens; /* [max_tokens] */
    size_t *text_end;  /* [max_tokens] */
    textstream ts;
} seq_state;

struct gen_request {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int refs;
    atomic_bool cancelled; /* by its client, or by the drain deadline */
    uint64_t version;

    /* immutable after submit */
    int32_t *prompt;
    size_t n_prompt;
    size_t max_tokens;
    size_t n_seq;
    sampler_params sampling; /* logit_bias points at `bias` */
    logit_bias_entry *bias;
    uint64_t seed;
    bool score_prompt;
    inspect_capture *inspect;      /* NULL, or what an inspect request keeps;
                                   written by the engine until it finishes */
    size_t n_top;                  /* alternatives kept per token */
    char *session;                 /* NULL or a copy */
    grammar *grammar;              /* NULL, or a reference: the constraint */
    kv_identity id;                /* whose cache it may use */
    uint8_t account[SHA256_BYTES]; /* whose share of the engine it uses */
    size_t max_seqs;               /* that caller's limits (resolved) */
    size_t max_queued;
    size_t max_sessions;
    double cost;         /* prompt + n x max_tokens: what admission charges */
    double t_submit;     /* when it was queued (engine_admit.c) */
    int32_t *prediction; /* NULL or a copy of gen_params' */
    size_t n_prediction;
    size_t spec_max_draft; /* drafts a sequence may have verified in a
                                   step; 0: no speculative decoding */
    bool background;       /* batch work (gen_params.background) */

    /* engine thread only */
    bool first_token_seen;
    bool kv_loading;      /* sequence 0 waits for blocks from disk */
    bool prefill_started; /* a chunk of its prompt has run */
    bool share_waited;    /* it waited for an earlier prompt's prefix
                           * (engine_batch.c's shared_prefill) */
    size_t lens_done;     /* logit-lens rows stored */

    /* Scoring from the cache (engine_scores.c), engine thread only:
     * each full block's last residual row as the prefill passes it,
     * [n_prompt / KV_BLOCK_TOKENS][n_embd]; the reused scored prefix's
     * last one, [n_embd]; and how many prompt tokens that prefix holds. */
    float *block_residuals;
    float *boundary_residual;
    size_t scored_reuse;

    /* readers: under the lock */
    gen_token *prompt_scores; /* [n_prompt] when score_prompt; shown to
                                   readers once complete (written without
                                   the lock before that) */
    gen_usage usage;
    double queued_seconds; /* from submit to admission; -1 before */
    size_t pauses;         /* its sequences' preemptions */
    double paused_seconds; /* how long they stood paused, resumed ones */
    size_t n_finished;
    seq_state *seqs; /* [n_seq] */
};

/* What a new request takes from the engine that makes it. */
typedef struct request_setup {
    const model_config *model; /* an inspect's capture is shaped by it */
    size_t max_token_bytes;    /* the longest token: sizes the text buffers */
    size_t max_seqs;           /* a caller's limits where gen_params set */
    size_t max_queued;         /* none (engine_config's, resolved) */
    size_t max_sessions;
    size_t spec_max_draft; /* speculative decoding (engine_config's) */
    bool spec_default;
} request_setup;

/* Any thread, without locks: a new request for `p` (its buffers copied,
 * each sequence's sized), not yet shared; NULL when out of memory. */
gen_request *request_create(const gen_params *p, const request_setup *setup);
void request_free(gen_request *r);
/* Drops one reference (the engine's; a connection's goes through
 * gen_request_release); the last one frees the request. */
void request_unref(gen_request *r);
/* With the request lock held: wakes the readers; something changed. */
void request_touch(gen_request *r);
/* A sampled or scored token as the request keeps it, with at most n_top
 * of its alternatives. */
void request_fill_token(gen_token *t, const sample_result *res, size_t n_top);
/* With the request lock held: publishes the end of sequence i. */
void request_finish_seq(gen_request *r, size_t i, finish_reason why);
/* Takes the request lock: ends every sequence still running. */
void request_finish_all(gen_request *r, finish_reason why);

#endif
