/* main.c — start-up, signals and shut-down of the gpt2d daemon.
 *
 * Order: settings → log level → chat template → the KV cache directory's
 * lock → the models (fleet.h: each one's weights, tokenizer and engine,
 * its KV slots allocated there, so memory is known before we listen) →
 * HTTP server → one summary line → wait for a signal → drain → tear down
 * in reverse.
 *
 * Signals are blocked in every thread we start (the mask is inherited) and
 * taken synchronously with sigwait in the main thread.  Threads a library
 * started before main (OpenBLAS's pool, from its constructor) do not block
 * them, and the kernel hands a process signal to such a thread whenever
 * the main thread is not inside sigwait (handling a SIGHUP, draining): with
 * the default action that killed the daemon (HUP, HUP, TERM in a row: 10
 * of 10 runs).  So each of the three also gets a handler that only
 * re-sends it to the main thread, where it waits, blocked, for sigwait:
 *   SIGTERM, SIGINT  stop accepting connections, let the engine finish or
 *                    cancel in-flight work within --drain-timeout, exit 0.
 *   SIGHUP           re-read the API keys (--api-key-file, GPT2D_API_KEY);
 *                    on error the old keys stay in force.  Nothing else is
 *                    reloaded: models and slots are fixed for the process.
 *   SIGPIPE          ignored (a vanished client is an ordinary event).
 *   SIGXFSZ          ignored: a KV disk file over a file-size limit fails
 *                    its write (EFBIG), which the disk tier counts, rather
 *                    than killing the daemon.
 *
 * The service manager hears of each stage (notify.h): STATUS= while
 * loading, READY=1 once the socket listens (and the port file is written),
 * RELOADING=1 then READY=1 around a SIGHUP, STOPPING=1 when the drain
 * starts.  The engine loop pings the watchdog. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "api/api_body.h"
#include "api/inspect_answer.h"
#include "fleet/fleet.h"
#include "core/cpu.h"
#include "core/error.h"
#include "http/http.h"
#include "kv/kvcache.h"
#include "kv/kvdir.h"
#include "core/log.h"
#include "core/notify.h"
#include "core/settings.h"
#include "api/workpool.h"
#include "batch/batch_run.h"

/* Everything the daemon owns, torn down in reverse order of creation. */
typedef struct daemon_state {
    settings cfg;
    kv_dir_lock kv_dir; /* --kv-cache-dir, ours until we exit */
    fleet *models;
    chat_template chat; /* all NULL until loaded */
    token_budget *budget;
    workpool *work;
    api_ctx api;
    kv_dir_lock responses_dir; /* --responses-dir, ours until we exit */
    response_store *responses;
    kv_dir_lock batch_dir;  /* --batch-dir, ours until we exit */
    batch_service *batches; /* NULL: no --batch-dir */
    http_server *http;
} daemon_state;

static int write_port_file(const char *path, unsigned port, gpt2d_error *err)
{
    /* Written to a temporary name and renamed, so a test polling for the
     * file never reads half a number. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return error_set(err, "--port-file %s: %s", path, strerror(errno));
    int ok = fprintf(f, "%u\n", port) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return error_set(err, "--port-file %s: %s", path, strerror(errno));
    }
    return 0;
}

/* "s" after a count other than one: "1 KV slot", "4 KV slots". */
static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* Callers with a token budget below full that are remembered
 * (token_budget.h): with keys, as many keys as a large keys file holds;
 * without, that many client addresses at once. */
#define BUDGET_CALLERS 4096

/* How long a request waits for a worker of the work pool, and for memory
 * for its answer, before it is refused (503 or 429, Retry-After). */
#define WORK_WAIT_MS 10000
#define RESPONSE_MEMORY_DEFAULT ((size_t)64 << 20)

/* --response-memory: one key's half must hold the answer to the largest
 * body, /tokenize's (4 bytes an id, an id for each byte at most). */
static int plan_response_memory(settings *c, gpt2d_error *err)
{
    size_t least = 2 * api_body_bytes(c->max_body_bytes);
    if (c->response_memory == 0)
        c->response_memory = least > RESPONSE_MEMORY_DEFAULT
                                 ? least
                                 : RESPONSE_MEMORY_DEFAULT;
    if (c->response_memory < least)
        return error_set(err,
                         "--response-memory of %zu bytes is too small for "
                         "--max-body %zu: one key's half must hold the answer "
                         "to the largest /tokenize body, so at least %zu bytes",
                         c->response_memory, c->max_body_bytes, least);
    return 0;
}

/* /v1/inspect's answers are charged to --response-memory too: by default
 * it grows until one key's half holds the largest answer the inspect
 * limits let through; set smaller, those answers are refused (400
 * response_memory_per_key: no wait would help), and the log says so at
 * start. */
static void plan_inspect_memory(daemon_state *d, bool defaulted)
{
    /* GPT-2 checkpoints share one tokenizer: the default model's longest
     * token stands for every model's */
    gpt2d_error err;
    const tokenizer *tok = fleet_tokenizer(d->models, NULL, &err);
    if (tok == NULL)
        return;
    const size_t token_text_most = inspect_token_text_most(tok);
    fleet_model_info *info = calloc(FLEET_MAX_MODELS, sizeof *info);
    if (info == NULL)
        return;
    size_t n_models = fleet_models(d->models, info, FLEET_MAX_MODELS);
    size_t most = 0;
    for (size_t i = 0; i < n_models && i < FLEET_MAX_MODELS; i++) {
        const model_config *m = &info[i].config;
        size_t n = d->cfg.inspect_max_tokens > 0 &&
                           d->cfg.inspect_max_tokens < m->n_ctx
                       ? d->cfg.inspect_max_tokens
                       : m->n_ctx;
        size_t one = inspect_answer_most(
            m->n_layer, m->n_head, n, d->cfg.inspect_max_attention,
            token_text_most, sizeof((api_response *)NULL)->id,
            strlen(info[i].id));
        if (one > most)
            most = one;
    }
    free(info);
    if (d->cfg.response_memory / 2 >= most)
        return;
    if (defaulted) {
        d->cfg.response_memory = 2 * most;
        log_info("response-memory %zu bytes: twice the largest /v1/inspect "
                 "answer the inspect limits allow",
                 d->cfg.response_memory);
    } else
        log_warn("--response-memory %zu: one key's half cannot hold the "
                 "largest /v1/inspect answers (up to %zu bytes); they are "
                 "refused with 400 response_memory_per_key",
                 d->cfg.response_memory, most);
}

/* The playground is optional, but a web root that is not there is most
 * likely a daemon run from its build tree without --web-root. */
static void check_web_root(const char *dir)
{
    struct stat st;
    if (dir != NULL && dir[0] != '\0' &&
        (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        log_warn("web-root %s is not a directory: the playground is not "
                 "served (see --web-root)",
                 dir);
}

/* -1: something failed (exit 1); -2: the settings cannot work together
 * for this model, or --kv-cache-dir is not this daemon's to use (a usage
 * error, exit 2). */
/* The stored responses: under --responses-dir (the daemon's alone, as
 * --kv-cache-dir is), or in memory. */
static int open_responses(daemon_state *d, gpt2d_error *err)
{
    const char *dir = d->cfg.responses_dir;
    if (dir != NULL && dir[0] == '\0')
        dir = NULL;
    if (dir != NULL && kvdir_claim(&d->responses_dir, dir, err) != 0)
        return -1;
    if (response_store_open(&d->responses, dir, d->cfg.max_responses_per_key,
                            d->cfg.max_responses, d->cfg.max_responses_bytes,
                            err) != 0)
        return -1;
    if (dir != NULL)
        log_info("gpt2d: %zu stored responses in %s",
                 response_store_count(d->responses), dir);
    return 0;
}

static int start(daemon_state *d, gpt2d_error *err)
{
    const bool memory_defaulted = d->cfg.response_memory == 0;
    /* a bad template is a bad setting: refused before the model loads */
    if (plan_response_memory(&d->cfg, err) != 0 ||
        chat_template_load(&d->chat, d->cfg.chat_template, err) != 0)
        return -2;
    /* Before anything in the directory is read or deleted (the disk tier's
     * scan), and before the model loads: a second daemon on it, or a
     * directory others can write to, is refused at once. */
    if (d->cfg.kv_cache_dir != NULL && d->cfg.kv_cache_dir[0] != '\0' &&
        kvdir_claim(&d->kv_dir, d->cfg.kv_cache_dir, err) != 0)
        return -2;
    const int loaded = fleet_create(&d->models, &d->cfg,
                                    inspect_token_text_most, err);
    if (loaded != 0)
        return loaded;
    plan_inspect_memory(d, memory_defaulted);
    if (token_budget_create(&d->budget, BUDGET_CALLERS, err) != 0)
        return -1;
    if (open_responses(d, err) != 0)
        return -2;
    if (workpool_start(&d->work, d->cfg.threads, d->cfg.response_memory,
                       WORK_WAIT_MS, err) != 0)
        return -1;
    d->api = (api_ctx){
        .models = d->models,
        .work = d->work,
        .max_n = d->cfg.max_n,
        .max_stop_bytes = d->cfg.max_stop_bytes,
        .inspect_max_tokens = d->cfg.inspect_max_tokens,
        .inspect_max_attention = d->cfg.inspect_max_attention,
        .log_prompts = d->cfg.log_prompts,
        .started = time(NULL),
        .chat = &d->chat,
        .budget = d->budget,
        .responses = d->responses,
    };
    if (d->cfg.batch_dir != NULL && d->cfg.batch_dir[0] != '\0') {
        /* the directory is the daemon's alone, as --kv-cache-dir is */
        if (kvdir_claim(&d->batch_dir, d->cfg.batch_dir, err) != 0)
            return -2;
        const size_t parallel = d->cfg.batch_parallel > 0
                                    ? d->cfg.batch_parallel
                                    : d->cfg.slots;
        if (batch_service_start(&d->batches, d->cfg.batch_dir, parallel,
                                d->cfg.test_batch_window, &d->api, err) != 0)
            return -1;
    }
    if (http_start(&d->http, &d->cfg, &d->api, d->batches, err) != 0)
        return -1;
    check_web_root(d->cfg.web_root);
    if (d->cfg.port_file != NULL && d->cfg.port_file[0] != '\0' &&
        write_port_file(d->cfg.port_file, http_port(d->http), err) != 0)
        return -1;
    return 0;
}

/* One line for each model loaded at start. */
static void log_model(const served_model *m, const settings *cfg)
{
    const model_config *c = &m->mdl.config;
    const kv_shape shape = served_model_kv_shape(c);
    double kv_mb = (double)kvcache_block_bytes(&shape, cfg->kv_half) *
                   (double)m->kv_blocks / 1e6;
    log_info("gpt2d: loaded %s: %zu layers, %zu heads, %zu wide, context %zu, "
             "vocabulary %zu, %.1f MB of %s weights (matmul %s); %zu KV "
             "slot%s, KV cache of %zu blocks of %d tokens = %.1f full contexts "
             "(%.1f MB, %s%s)",
             m->id, c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size,
             (double)m->mdl.weight_bytes / 1e6, model_dtype_name(m->mdl.dtype),
             model_matmul_name(m->mdl.matmul), cfg->slots, plural(cfg->slots),
             m->kv_blocks, KV_BLOCK_TOKENS,
             (double)m->kv_blocks / (double)kvcache_blocks_per_context(&shape),
             kv_mb, kv_dtype_name(cfg->kv_half),
             cfg->kv_memory > 0 ? ", sized by --kv-memory" : "");
}

static void log_summary(const daemon_state *d)
{
    served_model *loaded[FLEET_MAX_MODELS];
    size_t n = fleet_look_loaded(d->models, loaded, FLEET_MAX_MODELS);
    for (size_t i = 0; i < n; i++) {
        log_model(loaded[i], &d->cfg);
        fleet_unlook(d->models, loaded[i]);
    }
    fleet_model_info info[1];
    size_t n_models = fleet_models(d->models, info, 1);
    log_info("gpt2d: %zu model%s (%zu loaded, default %s), %zu thread%s; "
             "listening on %s:%u",
             n_models, plural(n_models), n, info[0].id, d->cfg.threads,
             plural(d->cfg.threads), d->cfg.host != NULL ? d->cfg.host : "*",
             http_port(d->http));
}

/* READY=1 with the line `systemctl status` shows while we serve. */
static void notify_serving(const daemon_state *d, const char *note)
{
    fleet_model_info info[1];
    size_t n_models = fleet_models(d->models, info, 1);
    char models[SERVED_MODEL_ID_MAX + 32];
    if (n_models == 1)
        snprintf(models, sizeof models, "%s", info[0].id);
    else
        snprintf(models, sizeof models, "%zu models", n_models);
    notify_ready("Serving %s on %s:%u, %zu KV slot%s, %zu thread%s%s", models,
                 d->cfg.host != NULL ? d->cfg.host : "*", http_port(d->http),
                 d->cfg.slots, plural(d->cfg.slots), d->cfg.threads,
                 plural(d->cfg.threads), note);
}

/* The main thread's id, for forward_to_main; written once before any
 * handler is installed. */
static pid_t main_tid;

/* Runs only in a thread that does not block the signal (one a library
 * started): one async-signal-safe system call, and errno kept. */
static void forward_to_main(int sig)
{
    int saved = errno;
    (void)syscall(SYS_tgkill, (pid_t)getpid(), main_tid, sig);
    errno = saved;
}

/* Fills `set` with SIGTERM, SIGINT and SIGHUP, blocks them in this thread
 * and every thread it starts, and routes those a foreign thread receives
 * back to this one. */
static void take_signals(sigset_t *set)
{
    static const int sigs[] = { SIGTERM, SIGINT, SIGHUP };
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_to_main;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    sigemptyset(set);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(set, sigs[i]);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* Blocks until SIGTERM or SIGINT, handling SIGHUP along the way. */
static int wait_for_stop(daemon_state *d, const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            gpt2d_error err = { { 0 } };
            notify_reloading();
            if (http_reload_keys(d->http, &err) != 0) {
                log_warn("SIGHUP: keeping the old API keys: %s", err.message);
                notify_serving(d, "; API key reload failed, old keys kept");
            } else {
                log_info("SIGHUP: API keys reloaded");
                notify_serving(d, "");
            }
            continue;
        }
        return sig;
    }
}

/* After the drain deadline, how long streams get to flush their last event. */
#define SHUTDOWN_FLUSH_MS 2000

static void teardown(daemon_state *d)
{
    /* The server first: its threads hold request references into the
     * engine, and answers still being sent read the fleet's tokenizers. */
    http_stop(d->http);
    batch_service_free(d->batches);
    kvdir_release(&d->batch_dir);
    workpool_stop(d->work);
    fleet_free(d->models);
    token_budget_free(d->budget);
    /* after the work pool and the server: parsing reads it */
    response_store_close(d->responses);
    kvdir_release(&d->responses_dir);
    chat_template_free(&d->chat);
    /* after the engines: its KV cache wrote the sessions file on the way */
    kvdir_release(&d->kv_dir);
    settings_free(&d->cfg);
}

int main(int argc, char **argv)
{
    daemon_state d;
    memset(&d, 0, sizeof d);
    d.kv_dir = KV_DIR_LOCK_NONE;
    d.batch_dir = KV_DIR_LOCK_NONE;
    d.responses_dir = KV_DIR_LOCK_NONE;
    gpt2d_error err = { { 0 } };
    switch (settings_load(&d.cfg, argc, argv, &err)) {
    case SETTINGS_EXIT_OK:
        return EXIT_SUCCESS;
    case SETTINGS_USAGE_ERROR:
        log_error("gpt2d: %s", err.message);
        return 2;
    case SETTINGS_RUN:
        break;
    }
    log_set_level(d.cfg.log_level);
    /* --isa: the kernels every forward_state uses, and what --matmul auto
     * follows; settings_load checked this CPU runs them */
    if (cpu_isa_force(d.cfg.isa, &err) != 0) {
        log_error("gpt2d: --isa: %s", err.message);
        settings_free(&d.cfg);
        return 2;
    }

    /* Before we start any thread, so every one inherits the mask. */
    sigset_t set;
    take_signals(&set);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);

    notify_status("Loading model %s",
                  d.cfg.models.n > 0 ? d.cfg.models.item[0] : d.cfg.models_dir);
    int started = start(&d, &err);
    if (started != 0) {
        /* One line naming the problem, as the CLI tests expect, at error
         * priority: journald reads the <3> prefix, so `journalctl -p err`
         * shows why the service did not start. */
        log_error("gpt2d: %s", err.message);
        notify_status("Failed to start: %s", err.message);
        teardown(&d);
        return started == -2 ? 2 : EXIT_FAILURE;
    }
    log_summary(&d);
    notify_serving(&d, "");

    int sig = wait_for_stop(&d, &set);
    log_info("%s: draining (up to %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             d.cfg.drain_ms);
    notify_stopping("Draining: running requests have up to %d ms",
                    d.cfg.drain_ms);
    /* Batch lines first: each one in flight is cancelled and left
     * unanswered, to run again after a restart, before the engines stop
     * (which would end them with whatever they had). */
    batch_service_stop(d.batches);
    http_quiesce(d.http);
    fleet_shutdown(d.models, d.cfg.drain_ms);
    /* Every request has now finished or been cancelled; give the connections
     * a moment to write their final events before they are closed. */
    if (!http_drain(d.http, SHUTDOWN_FLUSH_MS))
        log_warn("closing connections that did not finish within %d ms",
                 SHUTDOWN_FLUSH_MS);
    teardown(&d);
    log_info("stopped");
    return EXIT_SUCCESS;
}
