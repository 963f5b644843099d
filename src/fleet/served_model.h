/* served_model.h — one model as the daemon serves it: its weights, its
 * constraints' tables and its engine (with its own KV cache, and so its
 * own isolation domain), loaded from one directory and freed together;
 * and its tokenizer, borrowed from whoever loaded it from that directory
 * (the fleet, which needs it while the model is not loaded too).
 *
 * Threads: loaded and freed by whoever the fleet lets (fleet.h); while
 * loaded, read-only to every thread that holds it, the engine and the
 * grammar cache having their own locks. */
#ifndef GPT2D_SERVED_MODEL_H
#define GPT2D_SERVED_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/settings.h"
#include "core/threadpool.h"
#include "engine/compute_share.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "model/model.h"
#include "text/tokenizer.h"

/* A model's id: what requests name it by. */
#define SERVED_MODEL_ID_MAX 128

typedef struct served_model {
    char id[SERVED_MODEL_ID_MAX + 1];
    model mdl;
    const tokenizer *tok; /* spec.tok, borrowed: its owner outlives us */
    grammar_vocab *grammar_vocab; /* the tokens constraints mask */
    grammar_cache *grammars;
    size_t token_text_most; /* spec.token_text_most(tok): what bounds an
                               inspect answer's token texts */
    engine *eng;
    model draft; /* its draft model (--draft), when draft_loaded */
    bool draft_loaded;
    size_t kv_blocks; /* the KV cache's size, from the settings */
    size_t n_slots;   /* --slots: the sequences one request may run */
    bool kv_half;
    bool model_loaded;
} served_model;

/* Where and how one model is served. */
typedef struct served_model_spec {
    const char *id;
    const char *dir;
    const settings *cfg;     /* dtype, matmul, slots, KV and engine limits */
    const tokenizer *tok;    /* dir's (served_model_tokenizer_load), which
                                must outlive the served model */
    const char *kv_disk_dir; /* its disk tier; NULL or "": none */
    const char *draft_id;    /* NULL, or its draft model's name */
    const char *draft_dir;   /* and where the draft is */
    threadpool *pool;        /* shared; NULL: the engine's own */
    compute_share *share;    /* NULL: none */
    /* The API's longest token text (inspect_answer.h), handed down so
     * that this floor need not know the API; NULL: 0. */
    size_t (*token_text_most)(const tokenizer *tok);
} served_model_spec;

/* Loads everything and starts the engine.  -1 and a message naming the
 * directory when a file is bad; -2 when the settings cannot work with this
 * model's shapes (a usage error). */
int served_model_load(served_model **out, const served_model_spec *spec,
                      gpt2d_error *err);
/* The tokenizer of the model directory `dir` (its vocab.json and
 * merges.txt), checked against the model's config `mc`: no more tokens
 * than the model has.  -1 and a message naming the file when not. */
int served_model_tokenizer_load(tokenizer **out, const char *dir,
                                const model_config *mc, gpt2d_error *err);
/* Stops the engine (running work gets `drain_ms`, then is cancelled). */
void served_model_shutdown(served_model *s, int drain_ms);
void served_model_free(served_model *s);

/* Whether the settings work with a model of config `mc` (a KV cache of
 * at least one full context; a step room beside the slots); -1 and a
 * message naming `id` when not. */
int served_model_check(const model_config *mc, const settings *cfg,
                       const char *id, gpt2d_error *err);
/* The KV cache's shape for a model of these dimensions. */
kv_shape served_model_kv_shape(const model_config *mc);
/* Bytes a model of config `mc` takes once loaded with these settings: its
 * weights as `dtype` keeps them (float32 for auto) and its KV cache.  What
 * --models-memory counts, before and after loading. */
size_t served_model_bytes(const model_config *mc, const settings *cfg);
/* What a draft model of config `draft` adds to a model of config `mc`:
 * its weights, and its KV cache of as many (smaller) blocks, at least
 * one full context of its own. */
size_t served_model_draft_bytes(const model_config *mc,
                                const model_config *draft, const settings *cfg);
/* Whether a model of config `draft` can draft for one of config `mc`
 * (the same vocabulary; a shorter context drafts for its first positions
 * only); -1 and a message naming both
 * when not. */
int served_model_check_draft(const model_config *mc, const char *id,
                             const model_config *draft, const char *draft_id,
                             gpt2d_error *err);

#endif
