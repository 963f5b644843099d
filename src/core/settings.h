/* settings.h — the one table of options: defaults, then the config file,
 * then GPT2D_* environment variables, then command-line flags (later wins).
 *
 * Parsed once in main before any thread starts; read-only afterwards, so any
 * thread may read it. */
#ifndef GPT2D_SETTINGS_H
#define GPT2D_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/cpu.h"
#include "core/error.h"
#include "core/dtype.h"

/* The most KV slots a pool may have: --slots' bound, and the cap on what
 * --kv-memory derives. */
#define SETTINGS_MAX_SLOTS 1024
/* The most models --model may name (--models-dir adds its own). */
#define SETTINGS_MAX_MODELS 64

/* --model, repeated: "ID=DIR" or "DIR".  Each source (config file,
 * environment, flags) that names models replaces the list the sources
 * before it gave; within one source, each names one more. */
typedef struct settings_models {
    char *item[SETTINGS_MAX_MODELS];
    size_t n;
    int source; /* which source gave them (settings.c) */
} settings_models;

typedef struct settings {
    settings_models models; /* --model, repeated */
    settings_models drafts; /* --draft, repeated: "[MODEL=]DRAFT" */
    char *models_dir;       /* --models-dir: each subdirectory a model */
    size_t models_memory;   /* --models-memory bytes of loaded models
                                 * (weights and KV caches); 0: no bound */
    size_t models_max;      /* --models-max loaded at once; 0: no bound */
    unsigned model_idle;    /* --model-idle-timeout seconds before an
                                 * unused model unloads; 0: never */
    char *host;             /* --host, default 127.0.0.1 */
    unsigned port;          /* --port, default 8080; 0 = any free port */
    model_dtype dtype;      /* --dtype, default auto */
    model_matmul matmul;    /* --matmul, default auto */
    cpu_isa isa;            /* --isa: the kernels' instruction set;
                                 * auto (default) is the best this CPU runs */
    size_t threads;         /* --threads, default: online CPUs */
    size_t slots;           /* --slots, default 4 */
    size_t kv_memory;       /* --kv-memory bytes: slots from a budget;
                                 * 0 (default) = use --slots */
    bool kv_half;           /* --kv-dtype float16 (default float32) */
    char *kv_cache_dir;     /* --kv-cache-dir: the disk tier; none by default */
    size_t kv_disk;         /* --kv-disk bytes, default 1 GiB */
    char *batch_dir;        /* --batch-dir: the Files and Batch APIs'
                                 * files; none by default (the APIs off) */
    size_t max_file_bytes;  /* --max-file-bytes per upload, default 100 MiB */
    size_t batch_parallel;  /* --batch-parallel lines in flight; 0
                                 * (default): --slots */
    char *responses_dir;    /* --responses-dir: stored responses; none by
                                 * default (kept in memory) */
    size_t max_responses_per_key; /* --max-responses-per-key, default 1000 */
    size_t max_responses;         /* --max-responses, default 10000 */
    size_t max_responses_bytes;   /* --max-responses-bytes, default 256M */
    size_t max_queue;             /* --max-queue, default 64 */
    size_t max_batch_rows;        /* --max-batch-rows, default 256 */
    size_t max_body_bytes;        /* --max-body, default 1 MiB */
    size_t max_connections;       /* --max-connections, default 256 */
    size_t grammar_memory;        /* --grammar-memory bytes for compiled
                                 * constraints, default 256 MiB */
    size_t response_memory;       /* --response-memory bytes for unread
                                 * answers; 0 (default): 64 MiB, or 8 x
                                 * max-body when that is more */
    unsigned connection_timeout;  /* --timeout seconds idle, default 60 */
    unsigned request_timeout;     /* --request-timeout seconds to receive a
                                 * request, default 30; 0 = no limit */
    size_t max_n;              /* --max-n sequences per completion, default 4 */
    size_t max_seqs_per_key;   /* --max-seqs-per-key kept while another key
                                 * waits; 0 (default): half of --slots */
    size_t max_queued_per_key; /* --max-queued-per-key; 0 (default): half
                                 * of --max-queue */
    size_t max_sessions_per_key;      /* --max-sessions-per-key, default 64 */
    size_t tokens_per_minute_per_key; /* --tokens-per-minute-per-key: each
                                 * caller's token budget; 0 (default): none */
    unsigned prefill_share;           /* --prefill-share percent, default 50 */
    unsigned step_cost; /* --step-cost percent of a decode step, 0: off */
    size_t background_step_rows; /* --background-step-rows, default 32;
                                 * 0: no bound */
    unsigned test_batch_window;  /* --test-batch-window seconds instead of a
                                 * batch's 24 hours (tests); 0: 24 h */
    unsigned test_min_step_us;   /* --test-min-step-us: a floor on every engine
                                 * step, for the test suites; 0: none */
    size_t max_stop_bytes; /* --max-stop-bytes per stop string, default 256 */
    size_t inspect_max_tokens;    /* --inspect-max-tokens, default 256 */
    size_t inspect_max_attention; /* --inspect-max-attention probabilities
                                 * in one /v1/inspect answer, default 5000000 */
    int drain_ms;             /* --drain-timeout ms on SIGTERM, default 10000 */
    char *web_root;           /* --web-root, default $(datadir)/gpt2d/web */
    char *api_key_file;       /* --api-key-file; keys also from GPT2D_API_KEY */
    char *api_key;            /* GPT2D_API_KEY, NULL when unset or empty:
                                 * never a flag or a config-file key */
    char *cors_origin;        /* --cors-origin, default none (CORS off) */
    char *chat_template;      /* --chat-template FILE; none: the built-in */
    char *trusted_proxy;      /* --trusted-proxy: addresses and CIDR blocks
                                 * whose X-Forwarded-For names the client
                                 * (addr_list.h); default none */
    bool global_prefix_cache; /* --global-prefix-cache: one isolation
                                 * domain for every client (default false) */
    char *config_file;        /* --config */
    char *port_file;          /* --port-file: write the bound port (tests) */
    bool log_prompts;         /* --log-prompts (debug only) */
    bool speculative;         /* --speculative: requests that do not say
                                 * draft by prompt lookup */
    size_t speculative_tokens;  /* --speculative-tokens: the most drafts a
                                 * sequence verifies in one step */
    bool test_speculate_always; /* --test-speculate-always (tests only) */
    unsigned test_draft_agree;  /* --test-draft-agree (benchmarks only) */
    int log_level;              /* --log-level error|warn|info|debug */
    int source; /* while loading: the source being read (settings.c) */
} settings;

typedef enum settings_result {
    SETTINGS_RUN = 0,     /* start the daemon */
    SETTINGS_EXIT_OK,     /* --help / --version printed */
    SETTINGS_USAGE_ERROR, /* message in err; exit 2 */
} settings_result;

settings_result settings_load(settings *s, int argc, char **argv,
                              gpt2d_error *err);
void settings_usage(FILE *out);
void settings_free(settings *s);

#endif
