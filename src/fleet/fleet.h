/* fleet.h — the models one daemon serves, each loaded when wanted and
 * unloaded when another needs the memory or it has been idle.
 *
 * The models come from --model (repeated; "ID=DIR", or DIR named by its
 * last component) and --models-dir (each subdirectory with a config.json
 * a model, named by the subdirectory), in that order; the first is the
 * default, used by a request that names none.  A daemon with one model
 * answers whatever a request names, as it always did.
 *
 * Memory: a model counts served_model_bytes (its weights and its KV
 * cache); models load at start in order while they fit --models-memory
 * and --models-max, the rest on first use.  A model that does not fit
 * unloads the least recently used models that no request holds; when those
 * cannot make room the request is refused (FLEET_NO_ROOM: 503 with
 * Retry-After).  A model no request has held for --model-idle-timeout
 * seconds is unloaded.  A model is never unloaded under a request: each
 * request holds its model (fleet_acquire .. fleet_release).  A model that
 * does not fit waits up to a second for requests to let go of theirs
 * before the answer is FLEET_NO_ROOM.
 *
 * Tokenizers: each model's is read from its directory at start, owned by
 * the fleet until fleet_free and lent to the model whenever it loads, so
 * what needs only the tokenizer (/tokenize, /detokenize) never loads a
 * model (fleet_tokenizer).
 *
 * Every model's engine shares one worker pool, in turns fair by step time
 * (compute_share.h).  With several models each one's disk tier is a
 * subdirectory of --kv-cache-dir named by its id (one model: the directory
 * itself, as before).
 *
 * Threads: fleet_create and fleet_free from the main thread; every other
 * function from any thread (one lock).  Loading and unloading run on the
 * thread that needs them (a request's, or the fleet's own for idle
 * unloading), never under the lock. */
#ifndef GPT2D_FLEET_H
#define GPT2D_FLEET_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/metrics.h"
#include "core/settings.h"
#include "fleet/served_model.h"

typedef struct fleet fleet;

/* The most models one daemon lists. */
#define FLEET_MAX_MODELS 256

/* Reads the models' list, configs and tokenizers, then loads those that
 * fit.  -1 and a message when a model (its config or tokenizer, for every
 * model; its weights, for those loaded) cannot be read at start; -2 for a
 * usage error (bad ids, duplicate ids, no models, a model that could
 * never fit the budget, settings the default model's shapes refuse).
 * `token_text_most`: served_model_spec's, for every model. */
int fleet_create(fleet **out, const settings *cfg,
                 size_t (*token_text_most)(const tokenizer *tok),
                 gpt2d_error *err);
/* Stops every engine: running work gets `drain_ms`, then is cancelled;
 * no model loads afterwards (FLEET_STOPPING). */
void fleet_shutdown(fleet *f, int drain_ms);
void fleet_free(fleet *f);

typedef enum fleet_status {
    FLEET_OK = 0,
    FLEET_UNKNOWN,     /* no model by that name -> 404 model_not_found */
    FLEET_NOT_LOADED,  /* (without waiting) it must load first */
    FLEET_NO_ROOM,     /* the memory is held by models in use -> 503 */
    FLEET_LOAD_FAILED, /* its files cannot be loaded -> 500, err says why */
    FLEET_STOPPING,    /* the daemon is shutting down -> 503 */
} fleet_status;

/* The model `name` names (NULL or "": the default), held until
 * fleet_release.  With `wait`, loads it (unloading others) or waits for
 * another thread's load; without, answers FLEET_NOT_LOADED instead.  On
 * FLEET_UNKNOWN and FLEET_LOAD_FAILED `err` says why. */
fleet_status fleet_acquire(fleet *f, const char *name, bool wait,
                           served_model **out, gpt2d_error *err);
void fleet_release(fleet *f, served_model *m);
/* FLEET_UNKNOWN's message: "no model 'NAME' (this server has 'a', 'b')";
 * returns -1. */
int fleet_no_such_model(fleet *f, const char *name, gpt2d_error *err);

/* The tokenizer of the model `name` names (NULL or "": the default; with
 * one model, whatever is named, as fleet_acquire), whether the model is
 * loaded or not: it is neither loaded for this nor counted as used.  The
 * fleet owns it until fleet_free (so it outlives every request), and it
 * may be used from any thread (tokenizer.h); no lock.  NULL when no model
 * has that name, and then `err` says so (fleet_no_such_model). */
const tokenizer *fleet_tokenizer(fleet *f, const char *name, gpt2d_error *err);

/* Looking is not using: a model held by a look (the models' list, the
 * metrics, the sessions' list) is not unloaded meanwhile, but its idle
 * time goes on.  The model `id` names if it is loaded (NULL if not, or
 * unknown); give it back with fleet_unlook. */
served_model *fleet_look(fleet *f, const char *id);
/* Looks at every loaded model (up to cap); fleet_unlook each. */
size_t fleet_look_loaded(fleet *f, served_model **out, size_t cap);
void fleet_unlook(fleet *f, served_model *m);

typedef enum fleet_model_state {
    FLEET_MODEL_UNLOADED,
    FLEET_MODEL_LOADING,
    FLEET_MODEL_LOADED,
    FLEET_MODEL_UNLOADING,
} fleet_model_state;
const char *fleet_model_state_name(fleet_model_state s);

typedef struct fleet_model_info {
    char id[SERVED_MODEL_ID_MAX + 1];
    fleet_model_state state;
    model_config config;
    size_t bytes;   /* what the budget counts for it */
    size_t loads;   /* times it was loaded */
    bool disk_tier; /* its KV cache has one (--kv-cache-dir) */
    bool is_default;
    char draft[SERVED_MODEL_ID_MAX + 1]; /* its draft model; "": none */
    /* the counters of its loads before this one (model_counters.h) */
    metrics_gauges retired;
    double retired_compute_seconds;
} fleet_model_info;

/* How many models there are; copies the first `cap` into out. */
size_t fleet_models(fleet *f, fleet_model_info *out, size_t cap);
/* The bytes the loaded (and loading) models count, and the budget (0:
 * none). */
void fleet_memory(fleet *f, size_t *used, size_t *limit);

#endif
