/* fleet.c — the models one daemon serves (see fleet.h). */
#include "config.h"

#include "fleet/fleet.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/monotonic.h"
#include "core/notify.h"
#include "core/thread.h"
#include "fleet/model_counters.h"
#include "kv/kvdir.h"

/* Turns at the worker pool (compute_share.h): a model that asks for one
 * this long after its last was idle, not busy; and how long a model that
 * has used less keeps the next turn after its own, for the engine to
 * publish its step and build the next (tens to hundreds of microseconds). */
#define FLEET_SHARE_IDLE_SECONDS 0.05
#define FLEET_SHARE_GRACE_SECONDS 0.002
/* How long a model that does not fit waits for the models in use to be
 * let go before it is refused. */
#define FLEET_ROOM_GRACE_MS 1000
/* How often the fleet's own thread looks for idle models. */
#define FLEET_SWEEP_MS 1000

typedef struct fleet_entry {
    char id[SERVED_MODEL_ID_MAX + 1];
    char *dir;
    char *kv_dir;    /* its disk tier; NULL: none */
    bool listed;     /* named by --model: loaded at start if it fits */
    char *draft_dir; /* --draft's model for it; NULL: none */
    char draft_id[SERVED_MODEL_ID_MAX + 1];
    model_config config;
    tokenizer *tok; /* read at start; lent to `sm` whenever it loads */
    size_t bytes;   /* served_model_bytes */
    fleet_model_state state;
    served_model *sm;               /* when LOADED */
    size_t holds;                   /* requests holding it */
    unsigned long attempts, failed; /* loads begun; the last that failed */
    gpt2d_error load_error;         /* why that one failed */
    double last_used;               /* monotonic seconds it was last released */
    size_t loads;
    metrics_gauges retired; /* counters of its earlier loads */
    double retired_compute_seconds;
    /* UNLOADING: its counters when it was hidden, shown until the final
     * ones join `retired` (no scrape sees them go back) */
    metrics_gauges leaving;
    double leaving_compute_seconds;
} fleet_entry;

struct fleet {
    const settings *cfg;
    threadpool *pool;
    compute_share *share;
    size_t (*token_text_most)(const tokenizer *tok);
    fleet_entry *entries;
    size_t n;
    pthread_mutex_t lock;
    pthread_cond_t changed;      /* a model's state or holds changed */
    size_t used_bytes, n_loaded; /* LOADING and LOADED ones */
    bool stopping;
    pthread_t sweeper;
    bool sweeper_started;
    notify_watchdog watchdog; /* kicked while no engine runs */
};

const char *fleet_model_state_name(fleet_model_state s)
{
    switch (s) {
    case FLEET_MODEL_LOADING:
        return "loading";
    case FLEET_MODEL_LOADED:
        return "loaded";
    case FLEET_MODEL_UNLOADING:
        return "unloading";
    case FLEET_MODEL_UNLOADED:
        break;
    }
    return "unloaded";
}

/* ---- the list ---- */

/* Whether the `len` bytes at `id` end with `tail`. */
static bool ends_with(const char *id, size_t len, const char *tail)
{
    const size_t n = strlen(tail);
    return len >= n && memcmp(id + len - n, tail, n) == 0;
}

/* Ids appear in URLs (/v1/models/ID) and metrics labels, and name each
 * model's disk tier inside --kv-cache-dir: no "." or "..", nothing that
 * starts with a dot, and no name the tier's own files use there (the lock,
 * blocks, their partial writes, the sessions files). */
static bool id_valid(const char *id, size_t len)
{
    if (len == 0 || len > SERVED_MODEL_ID_MAX || id[0] == '.' ||
        ends_with(id, len, ".kv") || ends_with(id, len, ".part") ||
        (len == strlen(KVDIR_LOCK_NAME) &&
         memcmp(id, KVDIR_LOCK_NAME, len) == 0) ||
        (len >= 9 && memcmp(id, "sessions-", 9) == 0))
        return false;
    for (size_t i = 0; i < len; i++) {
        const char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
              c == ':'))
            return false;
    }
    return true;
}

/* DIR's last component. */
static void base_name(const char *dir, const char **name, size_t *len)
{
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    *name = dir + start;
    *len = end - start;
}

/* The entry called `id` (len bytes), or NULL. */
static fleet_entry *find_entry(fleet *f, const char *id, size_t len)
{
    for (size_t i = 0; i < f->n; i++)
        if (strlen(f->entries[i].id) == len &&
            memcmp(f->entries[i].id, id, len) == 0)
            return &f->entries[i];
    return NULL;
}

static int add_entry(fleet *f, const char *id, size_t id_len, const char *dir,
                     bool listed, gpt2d_error *err)
{
    if (!id_valid(id, id_len))
        return error_set(err,
                         "model id '%.*s' (for %s): ids are 1 to %d of "
                         "A-Z a-z 0-9 . _ - :, not starting with a dot, and "
                         "not a name the disk tier's files use (*.kv, "
                         "*.part, sessions-*, " KVDIR_LOCK_NAME ")",
                         (int)(id_len < 200 ? id_len : 200), id, dir,
                         SERVED_MODEL_ID_MAX);
    if (f->n == FLEET_MAX_MODELS)
        return error_set(err, "more than %d models", FLEET_MAX_MODELS);
    const fleet_entry *same = find_entry(f, id, id_len);
    if (same != NULL)
        return error_set(err, "two models are called '%.*s' (%s and %s)",
                         (int)id_len, id, same->dir, dir);
    fleet_entry *grown = realloc(f->entries, (f->n + 1) * sizeof *f->entries);
    if (grown == NULL)
        return error_set(err, "out of memory for the models' list");
    f->entries = grown;
    fleet_entry *e = &f->entries[f->n];
    memset(e, 0, sizeof *e);
    memcpy(e->id, id, id_len);
    e->listed = listed;
    if ((e->dir = strdup(dir)) == NULL)
        return error_set(err, "out of memory for the models' list");
    f->n++;
    return 0;
}

/* --model's: "ID=DIR" when what comes before the first '=' could be an
 * id (no '/'), else DIR. */
static int add_listed(fleet *f, const char *item, gpt2d_error *err)
{
    const char *eq = strchr(item, '=');
    if (eq != NULL && memchr(item, '/', (size_t)(eq - item)) == NULL)
        return add_entry(f, item, (size_t)(eq - item), eq + 1, true, err);
    const char *name;
    size_t len;
    base_name(item, &name, &len);
    return add_entry(f, name, len, item, true, err);
}

/* Whether two paths name one directory. */
static bool same_directory(const char *a, const char *b)
{
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    const bool same = ra != NULL && rb != NULL && strcmp(ra, rb) == 0;
    free(ra);
    free(rb);
    return same;
}

/* --draft's "[MODEL=]DRAFT": MODEL one of the models (default: the
 * first), DRAFT another model's id or a model's directory.  The draft is
 * loaded with its model, as its own copy (a draft served as a model as
 * well is in memory twice). */
static int add_draft(fleet *f, const char *item, gpt2d_error *err)
{
    const char *eq = strchr(item, '=');
    fleet_entry *target = &f->entries[0];
    const char *draft = item;
    if (eq != NULL && memchr(item, '/', (size_t)(eq - item)) == NULL) {
        target = find_entry(f, item, (size_t)(eq - item));
        if (target == NULL)
            return error_set(err, "--draft %s: there is no model '%.*s'", item,
                             (int)(eq - item), item);
        draft = eq + 1;
    }
    if (target->draft_dir != NULL)
        return error_set(err, "--draft %s: model %s has a draft already (%s)",
                         item, target->id, target->draft_id);
    const fleet_entry *named = find_entry(f, draft, strlen(draft));
    const char *name = draft;
    size_t len = strlen(draft);
    if (named == NULL)
        base_name(draft, &name, &len);
    if (len > SERVED_MODEL_ID_MAX)
        len = SERVED_MODEL_ID_MAX;
    if (draft[0] == '\0')
        return error_set(err, "--draft %s: the draft needs a value", item);
    if (named == target || same_directory(target->dir, draft))
        return error_set(err, "--draft %s: a model cannot draft for itself",
                         item);
    memcpy(target->draft_id, name, len);
    target->draft_id[len] = '\0';
    if ((target->draft_dir = strdup(named != NULL ? named->dir : draft)) ==
        NULL)
        return error_set(err, "out of memory for the models' list");
    return 0;
}

/* Whether --model named the directory `dir` is (a model the directory
 * lists as well is served once, under --model's id). */
static bool listed_already(const fleet *f, const char *dir)
{
    char *real = realpath(dir, NULL);
    bool found = false;
    for (size_t i = 0; real != NULL && !found && i < f->n; i++) {
        if (!f->entries[i].listed)
            continue; /* two links to one directory: two models */
        char *other = realpath(f->entries[i].dir, NULL);
        found = other != NULL && strcmp(real, other) == 0;
        free(other);
    }
    free(real);
    return found;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --models-dir's subdirectories that hold a config.json, by name. */
static int add_directory(fleet *f, const char *root, gpt2d_error *err)
{
    DIR *d = opendir(root);
    if (d == NULL)
        return error_set(err, "--models-dir %s: cannot be read", root);
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/config.json", root, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        char **grown = realloc(names, (n + 1) * sizeof *names);
        if (grown == NULL || (grown[n] = strdup(de->d_name)) == NULL) {
            names = grown != NULL ? grown : names;
            rc = error_set(err, "out of memory for the models' list");
            break;
        }
        names = grown;
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; i < n; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        if (rc == 0 && !listed_already(f, dir))
            rc = add_entry(f, names[i], strlen(names[i]), dir, false, err);
        free(names[i]);
    }
    free(names);
    if (rc == 0 && n == 0 && f->n == 0)
        return error_set(err,
                         "--models-dir %s holds no model (no "
                         "subdirectory with a config.json)",
                         root);
    return rc;
}

/* Each model's config and tokenizer, what it counts, and where its disk
 * tier is. */
static int describe(fleet *f, gpt2d_error *err)
{
    const settings *c = f->cfg;
    const bool tier = c->kv_cache_dir != NULL && c->kv_cache_dir[0] != '\0';
    for (size_t i = 0; i < f->n; i++) {
        fleet_entry *e = &f->entries[i];
        struct stat st;
        if (stat(e->dir, &st) != 0)
            return error_set(err, "%s: %s", e->dir, strerror(errno));
        if (model_config_read(&e->config, e->dir, err) != 0 ||
            served_model_tokenizer_load(&e->tok, e->dir, &e->config, err) != 0)
            return -1;
        if (served_model_check(&e->config, c, e->id, err) != 0)
            return -2;
        e->bytes = served_model_bytes(&e->config, c);
        if (e->draft_dir != NULL) {
            model_config draft;
            if (model_config_read(&draft, e->draft_dir, err) != 0)
                return -1;
            if (served_model_check_draft(&e->config, e->id, &draft, e->draft_id,
                                         err) != 0)
                return -2;
            e->bytes += served_model_draft_bytes(&e->config, &draft, c);
        }
        if (c->models_memory > 0 && e->bytes > c->models_memory) {
            error_set(err,
                      "model %s takes %zu bytes (%.1f MB: weights and KV "
                      "cache), more than --models-memory %zu",
                      e->id, e->bytes, (double)e->bytes / 1e6,
                      c->models_memory);
            return -2;
        }
        if (!tier)
            continue;
        char path[4096];
        if (f->n == 1)
            snprintf(path, sizeof path, "%s", c->kv_cache_dir);
        else
            snprintf(path, sizeof path, "%s/%s", c->kv_cache_dir, e->id);
        if ((e->kv_dir = strdup(path)) == NULL)
            return error_set(err, "out of memory for the models' list");
    }
    return 0;
}

/* ---- loading and unloading (never under the lock) ---- */

static bool fits(const fleet *f, size_t bytes)
{
    const settings *c = f->cfg;
    return (c->models_memory == 0 ||
            f->used_bytes + bytes <= c->models_memory) &&
           (c->models_max == 0 || f->n_loaded < c->models_max);
}

/* Lock held; `e` UNLOADED and fitting.  Loads it with the lock released. */
static int load_locked(fleet *f, fleet_entry *e, bool at_start,
                       gpt2d_error *err)
{
    e->state = FLEET_MODEL_LOADING;
    e->attempts++;
    f->used_bytes += e->bytes;
    f->n_loaded++;
    pthread_mutex_unlock(&f->lock);
    const served_model_spec spec = { .id = e->id,
                                     .dir = e->dir,
                                     .cfg = f->cfg,
                                     .tok = e->tok,
                                     .kv_disk_dir = e->kv_dir,
                                     .draft_id = e->draft_id,
                                     .draft_dir = e->draft_dir,
                                     .pool = f->pool,
                                     .share = f->share,
                                     .token_text_most = f->token_text_most };
    const double t0 = monotonic_seconds();
    served_model *sm = NULL;
    int rc = served_model_load(&sm, &spec, err);
    /* at start, the summary names each model loaded */
    if (rc == 0 && !at_start)
        log_info("model %s loaded from %s in %.2f s (%.1f MB counted)", e->id,
                 e->dir, monotonic_seconds() - t0, (double)e->bytes / 1e6);
    pthread_mutex_lock(&f->lock);
    if (rc != 0) {
        /* those that waited for this load get its answer, not a load of
         * their own each */
        e->failed = e->attempts;
        e->load_error = *err;
        if (!at_start)
            log_warn("model %s could not be loaded from %s: %s", e->id, e->dir,
                     err->message);
        e->state = FLEET_MODEL_UNLOADED;
        f->used_bytes -= e->bytes;
        f->n_loaded--;
    } else {
        e->sm = sm;
        e->state = FLEET_MODEL_LOADED;
        e->last_used = monotonic_seconds();
        e->loads++;
    }
    pthread_cond_broadcast(&f->changed);
    return rc;
}

/* A served model's counters (model_counters.h) into *counters. */
static void counters_of(served_model *sm, metrics_gauges *counters,
                        double *compute_seconds)
{
    const engine_stats st = engine_get_stats(sm->eng);
    grammar_cache_stats gs;
    grammar_cache_stats_get(sm->grammars, &gs);
    *counters = (metrics_gauges){ 0 };
    model_counters_add(counters, &st, &gs);
    *compute_seconds = st.compute_seconds;
}

/* Lock held; `e` LOADED and held by none.  Unloads it with the lock
 * released. */
static void unload_locked(fleet *f, fleet_entry *e, const char *why)
{
    served_model *sm = e->sm;
    /* its counters stay in the sums /metrics shows: as they are now while
     * it stops, then as it left them */
    counters_of(sm, &e->leaving, &e->leaving_compute_seconds);
    e->state = FLEET_MODEL_UNLOADING;
    e->sm = NULL;
    pthread_mutex_unlock(&f->lock);
    served_model_shutdown(sm, 0);
    metrics_gauges last;
    double last_compute;
    counters_of(sm, &last, &last_compute);
    served_model_free(sm);
    log_info("model %s unloaded (%s)", e->id, why);
    pthread_mutex_lock(&f->lock);
    model_counters_merge(&e->retired, &last);
    e->retired_compute_seconds += last_compute;
    e->leaving = (metrics_gauges){ 0 };
    e->leaving_compute_seconds = 0.0;
    e->state = FLEET_MODEL_UNLOADED;
    f->used_bytes -= e->bytes;
    f->n_loaded--;
    pthread_cond_broadcast(&f->changed);
}

/* The loaded model no request holds that was used longest ago; NULL if
 * none. */
static fleet_entry *least_recent_idle(fleet *f, const fleet_entry *except)
{
    fleet_entry *best = NULL;
    for (size_t i = 0; i < f->n; i++) {
        fleet_entry *e = &f->entries[i];
        if (e != except && e->state == FLEET_MODEL_LOADED && e->holds == 0 &&
            (best == NULL || e->last_used < best->last_used))
            best = e;
    }
    return best;
}

/* Whether some model is in state a or b. */
static bool any_in(const fleet *f, fleet_model_state a, fleet_model_state b)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->entries[i].state == a || f->entries[i].state == b)
            return true;
    return false;
}

/* Whether memory is on its way in or out: another thread loads or
 * unloads a model. */
static bool any_changing(const fleet *f)
{
    return any_in(f, FLEET_MODEL_LOADING, FLEET_MODEL_UNLOADING);
}

/* Whether some model's engine runs (and kicks the watchdog from its
 * loop); a model being loaded has none yet. */
static bool any_engine(const fleet *f)
{
    return any_in(f, FLEET_MODEL_LOADED, FLEET_MODEL_UNLOADING);
}

/* ---- the sweeper: idle models, and the watchdog while none runs ---- */

static void *sweep(void *arg)
{
    fleet *f = arg;
    const double idle = (double)f->cfg->model_idle;
    pthread_mutex_lock(&f->lock);
    while (!f->stopping) {
        for (size_t i = 0; idle > 0 && i < f->n && !f->stopping; i++) {
            fleet_entry *e = &f->entries[i];
            if (e->state == FLEET_MODEL_LOADED && e->holds == 0 &&
                monotonic_seconds() - e->last_used >= idle)
                unload_locked(f, e, "idle");
        }
        if (f->stopping)
            break;
        /* an engine kicks the watchdog from its loop; with none (while
         * the first loads, or all were idle), this thread does */
        if (!any_engine(f)) {
            pthread_mutex_unlock(&f->lock);
            (void)notify_watchdog_kick(&f->watchdog,
                                       (uint64_t)(monotonic_seconds() * 1e6));
            pthread_mutex_lock(&f->lock);
        }
        const struct timespec now = monotonic_now();
        const struct timespec until = monotonic_after_ms(&now, FLEET_SWEEP_MS);
        if (!f->stopping)
            pthread_cond_timedwait(&f->changed, &f->lock, &until);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* ---- public ---- */

static int load_at_start(fleet *f, gpt2d_error *err)
{
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < f->n; i++) {
        fleet_entry *e = &f->entries[i];
        if ((i == 0 || e->listed) && fits(f, e->bytes))
            rc = load_locked(f, e, true, err);
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int fleet_create(fleet **out, const settings *cfg,
                 size_t (*token_text_most)(const tokenizer *tok),
                 gpt2d_error *err)
{
    *out = NULL;
    fleet *f = calloc(1, sizeof *f);
    if (f == NULL)
        return error_set(err, "out of memory for the models");
    f->cfg = cfg;
    f->token_text_most = token_text_most;
    pthread_mutex_init(&f->lock, NULL);
    monotonic_cond_init(&f->changed);
    notify_watchdog_init(&f->watchdog);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cfg->models.n; i++)
        rc = add_listed(f, cfg->models.item[i], err);
    if (rc == 0 && cfg->models_dir != NULL && cfg->models_dir[0] != '\0')
        rc = add_directory(f, cfg->models_dir, err);
    for (size_t i = 0; rc == 0 && i < cfg->drafts.n; i++)
        rc = add_draft(f, cfg->drafts.item[i], err);
    if (rc != 0) {
        fleet_free(f);
        return -2;
    }
    if ((rc = describe(f, err)) != 0) {
        fleet_free(f);
        return rc;
    }
    if (threadpool_create(&f->pool, cfg->threads, err) != 0 ||
        compute_share_create(&f->share, FLEET_SHARE_IDLE_SECONDS,
                             FLEET_SHARE_GRACE_SECONDS, err) != 0) {
        fleet_free(f);
        return -1;
    }
    rc = load_at_start(f, err);
    if (rc == 0 && thread_start(&f->sweeper, sweep, f, "gpt2d-models") != 0)
        rc = error_set(err, "cannot start the models' thread");
    f->sweeper_started = rc == 0;
    if (rc != 0) {
        fleet_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void fleet_shutdown(fleet *f, int drain_ms)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->lock);
    if (f->sweeper_started) {
        pthread_join(f->sweeper, NULL);
        f->sweeper_started = false;
    }
    /* every engine gets the same deadline */
    const double deadline = monotonic_seconds() + drain_ms / 1000.0;
    pthread_mutex_lock(&f->lock);
    while (any_changing(f))
        pthread_cond_wait(&f->changed, &f->lock);
    pthread_mutex_unlock(&f->lock);
    for (size_t i = 0; i < f->n; i++) {
        const double left = deadline - monotonic_seconds();
        served_model_shutdown(f->entries[i].sm,
                              left > 0 ? (int)(left * 1000.0) : 0);
    }
}

void fleet_free(fleet *f)
{
    if (f == NULL)
        return;
    fleet_shutdown(f, 0);
    for (size_t i = 0; i < f->n; i++) {
        served_model_free(f->entries[i].sm);
        tokenizer_free(f->entries[i].tok); /* after its borrower */
        free(f->entries[i].dir);
        free(f->entries[i].kv_dir);
        free(f->entries[i].draft_dir);
    }
    free(f->entries);
    compute_share_free(f->share);
    threadpool_destroy(f->pool);
    pthread_cond_destroy(&f->changed);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

int fleet_no_such_model(fleet *f, const char *name, gpt2d_error *err)
{
    char ids[320] = "";
    size_t len = 0;
    for (size_t i = 0; i < f->n && len + 8 < sizeof ids; i++) {
        int n = snprintf(ids + len, sizeof ids - len, "%s'%s'",
                         i > 0 ? ", " : "", f->entries[i].id);
        if (n < 0 || (size_t)n >= sizeof ids - len) {
            snprintf(ids + len, sizeof ids - len, ", ...");
            break;
        }
        len += (size_t)n;
    }
    return error_set(err, "no model '%.200s' (this server has %s)", name, ids);
}

static fleet_entry *find(fleet *f, const char *name)
{
    if (name == NULL || name[0] == '\0' || f->n == 1)
        return &f->entries[0];
    return find_entry(f, name, strlen(name));
}

const tokenizer *fleet_tokenizer(fleet *f, const char *name, gpt2d_error *err)
{
    /* the list and each entry's tokenizer are fixed once fleet_create
     * returns: no lock, and the model's state is none of our business */
    const fleet_entry *e = find(f, name);
    if (e == NULL) {
        fleet_no_such_model(f, name, err);
        return NULL;
    }
    return e->tok;
}

fleet_status fleet_acquire(fleet *f, const char *name, bool wait,
                           served_model **out, gpt2d_error *err)
{
    *out = NULL;
    fleet_entry *e = find(f, name);
    if (e == NULL) {
        fleet_no_such_model(f, name, err);
        return FLEET_UNKNOWN;
    }
    pthread_mutex_lock(&f->lock);
    fleet_status st = FLEET_OK;
    bool waited = false;
    struct timespec room_deadline = { 0, 0 };
    for (;;) {
        if (f->stopping) {
            st = FLEET_STOPPING;
            break;
        }
        if (e->state == FLEET_MODEL_LOADED) {
            e->holds++;
            *out = e->sm;
            break;
        }
        if (!wait) {
            st = FLEET_NOT_LOADED;
            break;
        }
        if (e->state == FLEET_MODEL_LOADING) {
            const unsigned long attempt = e->attempts;
            while (e->state == FLEET_MODEL_LOADING && e->attempts == attempt)
                pthread_cond_wait(&f->changed, &f->lock);
            if (e->failed == attempt) {
                *err = e->load_error;
                st = FLEET_LOAD_FAILED;
                break;
            }
            continue;
        }
        if (e->state != FLEET_MODEL_UNLOADED) {
            pthread_cond_wait(&f->changed, &f->lock);
            continue;
        }
        if (fits(f, e->bytes)) {
            if (load_locked(f, e, false, err) != 0) {
                st = FLEET_LOAD_FAILED;
                break;
            }
            continue;
        }
        fleet_entry *victim = least_recent_idle(f, e);
        if (victim != NULL) {
            unload_locked(f, victim, "its memory was needed");
            continue;
        }
        /* memory another thread is giving back or taking: look again */
        if (any_changing(f)) {
            pthread_cond_wait(&f->changed, &f->lock);
            continue;
        }
        /* a request that just ended may not have let go of its model yet
         * (a stream's last bytes are still on their way): a moment's
         * grace before the answer is 503 */
        if (!waited) {
            const struct timespec now = monotonic_now();
            room_deadline = monotonic_after_ms(&now, FLEET_ROOM_GRACE_MS);
            waited = true;
        }
        if (pthread_cond_timedwait(&f->changed, &f->lock, &room_deadline) !=
            ETIMEDOUT)
            continue;
        st = FLEET_NO_ROOM;
        break;
    }
    pthread_mutex_unlock(&f->lock);
    return st;
}

static void let_go(fleet *f, served_model *m, bool used)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++)
        if (f->entries[i].sm == m) {
            f->entries[i].holds--;
            if (used)
                f->entries[i].last_used = monotonic_seconds();
            break;
        }
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->lock);
}

void fleet_release(fleet *f, served_model *m)
{
    let_go(f, m, true);
}

void fleet_unlook(fleet *f, served_model *m)
{
    let_go(f, m, false);
}

served_model *fleet_look(fleet *f, const char *id)
{
    served_model *m = NULL;
    pthread_mutex_lock(&f->lock);
    fleet_entry *e = find(f, id);
    if (e != NULL && e->state == FLEET_MODEL_LOADED) {
        e->holds++;
        m = e->sm;
    }
    pthread_mutex_unlock(&f->lock);
    return m;
}

size_t fleet_look_loaded(fleet *f, served_model **out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && n < cap; i++)
        if (f->entries[i].state == FLEET_MODEL_LOADED) {
            f->entries[i].holds++;
            out[n++] = f->entries[i].sm;
        }
    pthread_mutex_unlock(&f->lock);
    return n;
}

size_t fleet_models(fleet *f, fleet_model_info *out, size_t cap)
{
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && i < cap; i++) {
        const fleet_entry *e = &f->entries[i];
        fleet_model_info *m = &out[i];
        snprintf(m->id, sizeof m->id, "%s", e->id);
        m->state = e->state;
        m->config = e->config;
        m->bytes = e->bytes;
        m->loads = e->loads;
        m->disk_tier = e->kv_dir != NULL;
        m->is_default = i == 0;
        snprintf(m->draft, sizeof m->draft, "%s",
                 e->draft_dir != NULL ? e->draft_id : "");
        m->retired = e->retired;
        model_counters_merge(&m->retired, &e->leaving);
        m->retired_compute_seconds = e->retired_compute_seconds +
                                     e->leaving_compute_seconds;
    }
    const size_t n = f->n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void fleet_memory(fleet *f, size_t *used, size_t *limit)
{
    pthread_mutex_lock(&f->lock);
    *used = f->used_bytes;
    *limit = f->cfg->models_memory;
    pthread_mutex_unlock(&f->lock);
}
