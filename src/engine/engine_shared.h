/* engine_shared.h — what the engine's files share, and no one else sees:
 * the engine's state, the step's scratch, and the functions one file calls
 * in another.  (A request's insides are gen_request_internal.h's.)
 *
 *   engine.c          the step loop, lifecycle, submit, sessions, gauges
 *   engine_publish.c  results into requests, and retiring  (publish_, retire_)
 *   engine_lens.c     the logit lens of inspect requests           (lens_)
 *   engine_batch.c    a step's rows and its sample jobs            (batch_)
 *   engine_spec.c     speculative decoding: drafts added to decode
 *                     rows, their verification settled             (spec_)
 *   engine_admit.c    the queue, each step's admission (slots to waiting
 *                     work, preemption), quotas, a request's KV
 *                     sequences begun and released                 (admit_)
 *   engine_fair.c     who is owed a slot, and who gives one way     (fair_)
 *   engine_pause.c    sequences paused and resumed                 (pause_)
 *   engine_draft.c    a draft model's guesses and its KV cache     (draft_)
 *   engine_scores.c   a scored prompt's scores from and into the KV
 *                     cache                                        (scores_)
 *   gen_request.c     the request shared with a connection      (request_)
 *
 * Calls run down that list only: engine.c calls any file below it,
 * publish calls lens, spec, admit and scores, batch calls spec and admit,
 * spec calls draft, admit calls fair, pause, draft and scores, pause calls
 * draft, and
 * all of them call gen_request.c, which calls none of them and knows no
 * engine.  The queue is read through engine_queue_at, here.
 *
 * Threads: unless a function says otherwise, the engine thread calls it
 * with e->lock held (engine.c, "Locks").  Fields marked "engine thread
 * only" are read and written there without the lock. */
#ifndef GPT2D_ENGINE_SHARED_H
#define GPT2D_ENGINE_SHARED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/notify.h"
#include "core/threadpool.h"
#include "engine/compute_share.h"
#include "engine/engine_types.h"
#include "engine/gen_request_internal.h"
#include "engine/spec_cost.h"
#include "engine/spec_policy.h"
#include "engine/step_budget.h"
#include "kv/kvcache.h"
#include "model/forward.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

/* A caller's fairness bookkeeping: engine_fair.c's own. */
typedef struct caller_state caller_state;

/* Why a sequence was paused (engine_fair.c): its caller ran at least two
 * more than the waiting one, or more than its own max_seqs; or it was
 * background work and an interactive item waited. */
typedef enum preempt_reason {
    PREEMPT_FAIR_SHARE,
    PREEMPT_KEY_LIMIT,
    PREEMPT_BACKGROUND,
} preempt_reason;

typedef struct preempt_victim {
    gen_request *r;
    size_t seq;
    preempt_reason why;
} preempt_victim;

/* The sequences to pause so that one waiting request or sequence starts. */
typedef struct preempt_plan {
    preempt_victim *victims; /* [cap]: engine.plan's */
    size_t n, cap;
    size_t given; /* free slots it takes besides the victims' */
} preempt_plan;

/* What one forward_seq of the current batch stands for. */
typedef struct batch_entry {
    gen_request *r;
    size_t seq;
    bool prefill; /* prompt rows: the request's, or a resumed history's */
    bool resume;  /* a resumed sequence's history */
    size_t start; /* position of the first row */
    size_t n_rows, n_logits;
    size_t n_draft;    /* a decode row's drafts, in the rows after it */
    size_t draft_rows; /* the draft model's backlog it computes this step
                          (engine_draft.c); 0: the draft model runs none */
    size_t job;        /* then: the index of its first sample job */
} batch_entry;

/* A sequence in this step's draft passes (engine_draft.c). */
typedef struct draft_seq {
    size_t entry;   /* its batch entry */
    size_t k;       /* the guesses it takes: passes it stays in; 0: it
                       only catches up */
    forward_seq fs; /* its first pass: the backlog */
} draft_seq;

/* A slice of one inspect request's logit-lens rows in the current step. */
typedef struct lens_entry {
    gen_request *r;
    size_t row0, n_rows; /* its lens rows [row0, row0 + n_rows) */
    size_t first;        /* index of row0 among the step's lens rows */
} lens_entry;

/* One sample or prompt score of a step, run on the pool. */
typedef struct sample_job {
    gen_request *r;
    size_t seq;        /* SIZE_MAX for a prompt score */
    size_t prompt_pos; /* the scored prompt position */
    const float *logits;
    sample_result result;
    /* a constrained sequence: its state after the sampled token, or the
     * constraint failed (its budget; the sequence ends by length) */
    grammar_state constraint;
    bool constraint_failed;
    /* A decode row with drafts verifies them: this job samples its first
     * row and, while the tokens drawn are the drafts, the next rows, into
     * the n_draft jobs after it (each a `follower`, run by this one).
     * n_emitted: the rows whose samples stand (1 + drafts accepted);
     * n_applied: those of them the answer took (it may end sooner). */
    size_t n_draft;
    bool follower;
    size_t n_emitted;
    size_t n_applied;
} sample_job;

struct engine {
    const model *m;
    const tokenizer *tok;
    engine_config cfg;
    size_t vocab;
    size_t chunk;           /* prefill chunk: max_batch_rows - n_slots */
    step_budget budget;     /* engine thread: prefill rows beside decoding */
    size_t max_token_bytes; /* longest token, sizes the text buffers */

    threadpool *pool;
    bool own_pool;        /* made here, not cfg.pool */
    compute_member turns; /* at cfg.share, when there is one */
    forward_state *fwd;
    sampler_scratch **scratch; /* one per worker */
    uint64_t *masks;           /* [n_scratch][mask_words]: constraint masks */
    size_t mask_words;
    size_t n_scratch;
    float *logits; /* [max_batch_rows][vocab] */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    kv_cache *kv;
    size_t kv_blocks;    /* its size, fixed at creation */
    gen_request **queue; /* ring of max_queue */
    size_t q_head, q_len;
    gen_request **running; /* admission order: their sequences hold
                                   a slot (a KV sequence) or are paused */
    size_t n_running, running_cap;
    preempt_victim *plan;        /* [n_slots]: engine thread only */
    spec_offer *spec_offers;     /* [max_batch_rows]: a step's drafts, */
    const int32_t **spec_drafts; /* engine thread only (engine_spec.c) */
    double *spec_seconds;        /* [max_batch_rows + 1] */
    spec_cost spec_cost;         /* each row count's step time */
    bool *spec_by_model;         /* [max_batch_rows]: the same */
    size_t *spec_order;          /* [max_batch_rows]: the same */
    size_t *spec_entry;          /* [max_batch_rows]: the same */

    /* Speculative decoding with a draft model (engine_draft.c); draft is
     * NULL without one.  Engine thread only, but for draft_kv (e->lock). */
    const model *draft;
    forward_state *draft_fwd;
    kv_cache *draft_kv;
    size_t draft_cap;          /* sequences a step's passes may carry */
    draft_seq *draft_seqs;     /* [draft_cap]: this step's */
    size_t n_draft_seqs;       /* and how many */
    size_t draft_passes;       /* this step's passes after the first */
    forward_seq *draft_batch;  /* [draft_cap]: a pass */
    float *draft_logits;       /* [draft_cap][vocab] */
    double draft_pass_seconds; /* a pass of one row a sequence, measured */
    double draft_share;        /* a pass's reads over a target step's,
                                  until one is measured */
    /* cfg.draft_agree_percent's draws (engine_draft.c) */
    uint64_t draft_agree_state;
    caller_state *callers; /* [n_callers_cap]: fairness bookkeeping */
    size_t n_callers_cap;
    double
        prefill_hold_until; /* prefill waits until then while others decode */
    size_t decode_turn;     /* engine thread only: a background step cut
                               short of its decode rows starts the next one
                               here (engine_batch.c) */
    /* The step running is background work alone, none of it speculative,
     * scored or a lens (e->lock): an interactive request queued meanwhile
     * sets step_abandon, and forward_step stops at its next layer. */
    bool step_abandonable;
    atomic_bool step_abandon;
    bool stopping;
    double deadline;
    bool thread_started, joined;
    bool joined_share; /* e->turns is cfg.share's member */
    pthread_t thread;
    notify_watchdog watchdog; /* engine thread only, after create */

    /* step scratch, engine thread only */
    forward_seq *batch; /* [max_batch_rows] */
    batch_entry *entries;
    sample_job *jobs; /* [max_batch_rows + n_slots] */
    size_t n_jobs;
    lens_entry *lens; /* [n_slots] */
    size_t n_lens, n_lens_rows;
    const float *lens_logits;    /* the lens rows' logits in `logits` */
    bool scores_cached;          /* scoring from the cache (not blas) */
    float *score_logits;         /* [vocab]: a reused prefix's boundary */
    kv_block_scores *score_blob; /* a block's scores, being kept */
};

/* The queue's i-th request, in arrival order. */
static inline gen_request *engine_queue_at(const engine *e, size_t i)
{
    return e->queue[(e->q_head + i) % e->cfg.max_queue];
}

/* ---- engine_admit.c: the queue, admission, quotas ---- */

/* Whether a request of `owner`'s `session` is queued or running;
 * live_only skips cancelled ones. */
bool admit_session_in_use(const engine *e, const uint8_t *owner,
                          const char *session, bool live_only);
/* An HTTP thread, in engine_submit, without e->lock: whether a request of
 * these n prompts could ever be queued and run (it reads only what is
 * fixed at creation).  Sets *why's fields of a refusal. */
engine_status admit_could_run(const engine *e, const gen_params *p, size_t n,
                              engine_refusal *why);
/* An HTTP thread, in engine_submit: queues r[0..n) in order, or none of
 * them when the session, the caller's quotas or the queue refuse one; a
 * request with nothing to compute is finished at once instead.  On
 * ENGINE_OK the engine holds its reference to each it queued. */
engine_status admit_enqueue(engine *e, gen_request **r, size_t n,
                            engine_refusal *why);
/* Whether an interactive (not background) request holds a slot. */
bool admit_interactive_running(const engine *e);
/* Drops the cancelled requests from the queue. */
void admit_drop_cancelled(engine *e);
/* Free slots to waiting work (paused sequences, queued requests), fairly
 * across callers, pausing others' sequences for a caller below its share
 * (engine_fair.c's rules), while the cache can hold them. */
void admit_schedule(engine *e, double now);
/* Begins the KV sequences of the request's first n_run sequences
 * (kvcache_seq_begin's status); the others wait paused.  With
 * `keep_others`, its sequences past the first leave other accounts their
 * kept share. */
kv_begin_status admit_begin_kv(engine *e, gen_request *r, size_t n_run,
                               bool keep_others, double now);
/* What the request reuses from the cache, once known: counted, and a
 * scoring request's scores of it taken (engine_scores.c). */
void admit_reused(engine *e, gen_request *r, size_t reused);
/* Gives back a sequence's KV sequence, or all of the request's. */
void admit_release_kv(engine *e, seq_state *s, double now);
void admit_release_all_kv(engine *e, gen_request *r, double now);

/* ---- engine_fair.c: who is owed a slot ---- */

/* Any thread, before the engine starts: the fairness table of n callers,
 * zeroed; NULL when out of memory (freed with free). */
caller_state *fair_callers_create(size_t n);
/* An HTTP thread, in engine_submit: r's caller (its account and class)
 * has queued work. */
void fair_enqueued(engine *e, const gen_request *r);
/* Recounts each caller's running sequences and waiting work, and brings a
 * caller with work again up to the others' least virtual time; every
 * caller may start work again (fair_block). */
void fair_refresh(engine *e, double now);
/* Whether r is c's: its account and its class (background or not). */
bool fair_owns(const caller_state *c, const gen_request *r);
/* Whether c is a background (batch) caller. */
bool fair_background(const caller_state *c);
/* The caller with waiting work owed the next slot, or NULL. */
caller_state *fair_next(engine *e);
/* Nothing of `c` starts in this pass. */
void fair_block(caller_state *c);
/* `c` started one waiting item (a request, or a paused sequence) with n_seq
 * sequences. */
void fair_started(caller_state *c, size_t n_seq);
/* A sequence of r was paused; it waits to resume unless !later_resumed. */
void fair_paused(engine *e, const gen_request *r, bool later_resumed);
/* Started request r left n sequences waiting. */
void fair_new_waiting(engine *e, const gen_request *r, size_t n);
/* Whether a caller of another account than `c` runs or waits: then a
 * request's further sequences leave the KV memory others keep within
 * their shares (nothing is kept from them for callers that send
 * nothing). */
bool fair_others_have_work(const engine *e, const caller_state *c);
/* The step at `now` computed `rows` rows for r's caller. */
void fair_charge(engine *e, const gen_request *r, size_t rows, double now);
/* Adds to p the next sequence to pause so that `x` runs one more, by the
 * rules; false when none may be paused. */
bool fair_plan_victim(const engine *e, const caller_state *x, preempt_plan *p);

/* ---- engine_pause.c: paused and resumed sequences ---- */

/* Pauses sequence i (it holds a slot): its KV sequence ends, its blocks
 * stay cached; it waits as SEQ_PAUSED.  Counted by pause_count once the
 * pause stands (one taken back at once is not a pause). */
void pause_seq(engine *e, gen_request *r, size_t i, double now);
void pause_count(gen_request *r, preempt_reason why);
/* Sequences first.. of a request that starts without them wait paused
 * (not counted as pauses). */
void pause_unstarted(gen_request *r, size_t first);
/* Whether sequence 0 of r, its prompt being computed, may be paused: its
 * resume then computes the rest of the prompt as a resumed history. */
bool pause_prefill_ok(const gen_request *r);
/* Whether paused sequence i may resume now (a sibling waits for sequence
 * 0's prompt). */
bool pause_resumable(const gen_request *r, size_t i);
/* Begins paused sequence i's KV sequence for its history: KV_BEGUN and it
 * is SEQ_RESUME, or why not (and nothing changed).  Beside its caller's
 * running sequences it must fit as a second request's would (kvcache.h). */
kv_begin_status pause_resume(engine *e, gen_request *r, size_t i, double now);

/* ---- engine_scores.c: a scored prompt's scores and the KV cache ---- */

/* After a scoring request's sequence `seq` began reusing `reused` prompt
 * tokens (whole scored blocks): their scores, and the residual that
 * scores the token after them. */
void scores_from_cache(engine *e, gen_request *r, size_t seq, size_t reused);
/* Engine thread, without e->lock, after the step's forward pass: the
 * first token after a reused scored prefix scored, and each full block's
 * last residual kept as its row passes.  -1 when an unembedding failed. */
int scores_step(engine *e, size_t n_entries, gpt2d_error *err);
/* A scoring request's prompt is done: its new full blocks keep their
 * scores, and its scores show the alternatives it asked for. */
void scores_keep(engine *e, gen_request *r);

/* ---- engine_draft.c: a draft model's guesses ---- */

/* Whether sequence s has a sequence in the draft model's cache, begun now
 * if it had none (false: the cache cannot take it now). */
bool draft_begin(engine *e, gen_request *r, seq_state *s, double now);
/* The most guesses the draft model's context leaves sequence s. */
size_t draft_bound(const engine *e, const gen_request *r, const seq_state *s);
/* The first draft pass's room: every backlog comes off rows; a backlog
 * longer than one step leaves (a sequence catching up: its whole text
 * the first time) off catch_up too. */
typedef struct draft_first_pass {
    size_t rows;
    size_t catch_up;
} draft_first_pass;
/* Entry b (a decode row whose sequence has begun in the draft cache)
 * joins this step's draft passes: its backlog, then k guesses, the
 * backlog's rows taken from *room.  With more backlog than the room
 * holds, it only catches up (what the room holds) and takes no guesses.
 * Returns the guesses it takes. */
size_t draft_take(engine *e, size_t b, size_t k, draft_first_pass *room);
/* Without e->lock, before the step's forward pass: the draft passes; each
 * guess written where its decode row reads its drafts.  -1 when a pass
 * failed. */
int draft_run(engine *e, gpt2d_error *err);
/* After the samples: the draft keeps the K/V of entry be's backlog and of
 * its first `accepted` guesses (the text now). */
void draft_settle(engine *e, const batch_entry *be, size_t accepted);
/* The sequence's draft sequence ends (it ended or is paused). */
void draft_release(engine *e, seq_state *s, double now);
/* A pass's expected time, beside a target step of target_step seconds. */
double draft_pass_estimate(const engine *e, double target_step);
/* Any thread: what a draft pass reads against a target step, from the
 * models' shapes. */
double draft_share_of(const model *target, const model *draft);

/* ---- engine_spec.c: speculative decoding ---- */

/* After the step's decode rows (its first n entries): drafts by prompt
 * lookup added to the rows of sequences that may speculate, as many as
 * their measured acceptance pays for at this batch size, within `room`
 * rows.  Returns the rows added. */
size_t spec_plan(engine *e, size_t n_entries, size_t room, double now);
/* The engine thread, after a step of `rows` rows (`prompt_rows` of them a
 * prompt's) that took `seconds`: what a step of that size costs. */
void spec_observe(engine *e, size_t rows, size_t prompt_rows, double seconds);
/* Entry b's drafts were verified: what stands of them is known
 * (e->jobs[be->job].n_emitted); its acceptance, the metrics and the draft
 * model's cache learn it.  Also for an entry whose draft only caught up. */
void spec_settle(engine *e, const batch_entry *be);

/* ---- engine_batch.c: composing a step ---- */

/* Fills e->batch and e->entries with the step's rows (and e->lens with
 * its lens rows); returns the number of entries.  *rows_out counts the
 * rows, *prefill_out the prompt rows among them, *mixed_out whether
 * another caller's streams waited for prompt or lens rows. */
size_t batch_build(engine *e, size_t *rows_out, size_t *prefill_out,
                   bool *mixed_out, double now);
/* Logits rows the forward pass wrote for the step's first n entries. */
size_t batch_logit_rows(const engine *e, size_t n_entries);
/* Without e->lock, after the forward pass: every sample and prompt score
 * of the step, on the pool, into e->jobs. */
void batch_sample(engine *e, size_t n_entries);

/* ---- engine_lens.c: the logit lens ---- */

/* Without e->lock, after the samples: the step's lens rows, unembedded
 * after the first n_logits rows of e->logits and ranked on the pool. */
int lens_run(engine *e, size_t n_logits, gpt2d_error *err);
/* After the step: lens rows count as done; a request whose last row is
 * stored ends. */
void lens_progress(engine *e);

/* ---- engine_publish.c: results into requests, and retiring ---- */

/* The step's results: its K/V committed, scores, samples and lens rows
 * into their requests, whose readers wake. */
void publish_step(engine *e, size_t n_entries, double now);
/* A failed step ends the requests it carried. */
void publish_failure(engine *e, size_t n_entries, const gpt2d_error *err);
/* Finished requests leave the running set. */
void retire_finished(engine *e, double now);
/* Cancelled requests leave the running set. */
void retire_cancelled(engine *e, double now);

#endif
