/* gen_request.h — one engine request as its connection sees it: what it
 * asks for (gen_params), the output of each of its sequences growing token
 * by token, its usage, and its end.
 *
 * A gen_request is shared by its connection and the engine: it is
 * reference-counted and guarded by its own mutex and condition variable,
 * and freed when both sides have let go, so a client may vanish at any
 * moment.  engine_submit (engine.h) makes one and hands the connection a
 * reference.
 *
 * Threads: any thread holding a reference may call these.  Every reader
 * below but gen_request_cancel and gen_request_release wants the request's
 * lock held (gen_request_lock); the engine writes the outputs under that
 * same lock, so what a reader sees between lock and unlock is consistent. */
#ifndef GPT2D_GEN_REQUEST_H
#define GPT2D_GEN_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sha256.h"
#include "grammar/grammar.h"
#include "kv/kvcache.h"
#include "model/inspect.h"
#include "sample/sampler.h"

/* a request's stop strings (api.h's API_MAX_STOP) and its chat
 * template's (chat_template.h) */
#define ENGINE_MAX_STOP 8
#define ENGINE_SESSION_ID_MAX 128
/* chat's top_logprobs, at most (OpenAI's 20): 176 bytes a gen_token
 * rather than 56 at 5, well under 0.3% of a token's KV entries */
#define ENGINE_MAX_LOGPROBS 20

typedef struct gen_request gen_request;

typedef enum finish_reason {
    FINISH_NONE = 0,  /* still running */
    FINISH_STOP,      /* EOT token or a stop sequence */
    FINISH_LENGTH,    /* max_tokens or the context is full */
    FINISH_CANCELLED, /* client went away or shutdown */
} finish_reason;

/* What one request asks for.  Copied by engine_submit; the caller keeps
 * ownership of its own buffers. */
typedef struct gen_params {
    const int32_t *prompt; /* validated ids, 1 <= n_prompt */
    size_t n_prompt;
    size_t max_tokens;       /* n_prompt + max_tokens <= n_ctx (validated) */
    size_t n_sequences;      /* n, or best_of: independent samples */
    sampler_params sampling; /* logit_bias array is copied */
    uint64_t seed;           /* sequence i draws from seed + i */
    const char *stop[ENGINE_MAX_STOP]; /* UTF-8, non-empty */
    size_t n_stop;
    bool logprobs;         /* report logprob (+ n_top alternatives) per token */
    size_t n_top_logprobs; /* 0..ENGINE_MAX_LOGPROBS */
    bool score_prompt;     /* echo + logprobs: score every prompt token */
    /* NULL, or an inspect request (inspect.h): every prompt position is
     * computed, nothing generated (max_tokens 0, one sequence, no
     * session), and the capture is read with gen_request_inspect. */
    const inspect_params *inspect;
    const char *session_id; /* NULL, or pins the conversation to a slot */
    /* NULL, or the constraint every sequence's text obeys (structured
     * output): the request takes its own reference.  The answer may end
     * (the end token, a stop string, or nothing more allowed) only where
     * the text is a whole answer; otherwise it runs to max_tokens. */
    grammar *grammar;
    kv_identity identity; /* the caller's owner and isolation domain:
                                 * sessions and cached prefixes are its own */
    /* Whose share of the engine the request uses: the API key or client
     * address, even when the cache is global.  All zeros: identity.owner. */
    uint8_t account[SHA256_BYTES];
    size_t max_seqs;   /* this caller's engine_config limits; */
    size_t max_queued; /* 0: the engine's default */
    size_t max_sessions;
    /* Speculative decoding by prompt lookup: 0 the engine's default,
     * > 0 on, < 0 off.  It never changes the answer, only its speed. */
    int speculative;
    /* NULL, or what the client expects most of the answer to be (OpenAI's
     * Predicted Outputs): speculation's first source of drafts; copied. */
    const int32_t *prediction;
    size_t n_prediction;
    /* Batch work (the OpenAI Batch API): it runs only on capacity no
     * interactive request wants.  Its sequences count apart from its
     * key's interactive ones for fairness, give their slots to any
     * interactive request first, and compute nothing in a step while an
     * interactive request holds a slot (engine_fair.c, engine_batch.c);
     * its answer is the same bits as interactively. */
    bool background;
} gen_params;

/* One scored token: a prompt token (when scoring) or a generated one. */
typedef struct gen_token {
    int32_t token;
    float logprob; /* NAN for the first prompt token, and for
                                 * generated ones of a single sequence
                                 * without logprobs (nothing shows them) */
    size_t n_top;
    token_logprob top[ENGINE_MAX_LOGPROBS];
} gen_token;

/* The output of one sequence so far.  Read only with the request's lock
 * held; the arrays never move while the request lives (sized at submit). */
typedef struct gen_output {
    const gen_token
        *prompt_scores; /* n_prompt entries once scored, else NULL */
    size_t n_prompt_scored;
    const gen_token *tokens; /* generated tokens */
    size_t n_tokens;
    const char *text; /* generated text that is safe to show: */
    size_t text_len;  /* whole UTF-8 characters, no pending stop prefix */
    const size_t
        *token_text_end; /* per generated token: text_len after it (clamped) */
    double cum_logprob;  /* sum of generated tokens' logprobs; NaN
                                       * (never computed) for a single sequence
                                       * without logprobs */
    finish_reason finish;
    const char *stop; /* FINISH_STOP by a stop string: that string (of
                       * gen_params.stop; of two starting at the same byte,
                       * the earlier in that list), else NULL */
} gen_output;

typedef struct gen_usage {
    size_t prompt_tokens;
    size_t cached_tokens;     /* prompt tokens reused from the KV cache */
    size_t completion_tokens; /* over all sequences */
    size_t draft_tokens;      /* proposed by speculative decoding, */
    size_t accepted_tokens;   /* and those of them the model agreed with */
} gen_usage;

void gen_request_lock(gen_request *r);
void gen_request_unlock(gen_request *r);
/* With the lock held: waits until the request changed since *version (or the
 * timeout passes); updates *version.  Returns false on timeout. */
bool gen_request_wait(gen_request *r, uint64_t *version, int timeout_ms);
/* With the lock held. */
size_t gen_request_n_sequences(const gen_request *r);
const gen_output *gen_request_output(const gen_request *r, size_t sequence);
bool gen_request_finished(const gen_request *r); /* every sequence finished */
gen_usage gen_request_usage(const gen_request *r);
/* How long it waited in the queue before it started; -1 while it has not
 * (or never did: cancelled while queued). */
double gen_request_queued_seconds(const gen_request *r);
/* How often its sequences were paused for other callers' (preempted: the
 * engine's fairness, engine_admit.c), and in *seconds (if not NULL) how long
 * the resumed ones stood paused. */
size_t gen_request_pauses(const gen_request *r, double *seconds);
/* An inspect request's capture, complete once the request finished
 * without being cancelled; NULL for other requests. */
const inspect_capture *gen_request_inspect(const gen_request *r);
/* The client is gone: the engine drops the request within one step. */
void gen_request_cancel(gen_request *r);
void gen_request_release(gen_request *r);

#endif
