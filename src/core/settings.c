/* settings.c — the one table of options (see settings.h).
 *
 * `options[]` below is the only place an option is described: its flag, its
 * config-file key (the long name), its environment variable (GPT2D_ + the
 * long name upper-cased, '-' -> '_'), its type and limits, its default and
 * its help text.  getopt_long's table, the config-file parser, the
 * environment scan and --help are all generated from it.
 *
 * Sources, later wins:  defaults < config file < environment < flags.
 * The config file is named by --config or GPT2D_CONFIG, so the flags are
 * scanned first (collecting --config, --help and --version and catching
 * unknown options) and applied last.
 *
 * Every value, whatever its source, goes through the same parse_value, and a
 * bad one is reported with where it came from, the option and the value:
 *   "--port: '70000' is not a port number (0-65535)"
 *   "GPT2D_SLOTS: '0' is not a whole number from 1 to 1024"
 *   "/etc/gpt2d.conf:12: unknown option 'prot'"
 *
 * GPT2D_API_KEY is deliberately not an option: keys are never taken from
 * the command line, where `ps` would show them, nor from the config file;
 * only a key *file* is an option.  It is read here all the same (api_key),
 * so that this file is the one place the environment is read.
 *
 * Ownership: every string in a settings struct is malloc'ed and owned by it;
 * settings_free releases them.  settings_load frees everything itself when it
 * does not return SETTINGS_RUN, and settings_free is safe after any result. */
#include "core/settings.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/addr_list.h"
#include "core/config_lines.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/log.h"

#ifndef GPT2D_DEFAULT_WEB_ROOT
#define GPT2D_DEFAULT_WEB_ROOT "/usr/local/share/gpt2d/web"
#endif

typedef enum opt_type {
    OPT_PATH,          /* string, must not be empty */
    OPT_MODEL,         /* one more --model (settings_models) */
    OPT_OPTIONAL_PATH, /* string; empty means "none" */
    OPT_ADDR_LIST,     /* string of addresses and CIDR blocks (addr_list.h);
                         * empty means none */
    OPT_ORIGIN,        /* "*" or one serialized origin; empty means none */
    OPT_PORT,          /* unsigned, 0..65535 */
    OPT_COUNT,         /* size_t, min..max */
    OPT_BYTES,         /* size_t with optional k/M/G suffix, min..max */
    OPT_UINT,          /* unsigned, min..max */
    OPT_INT,           /* int, min..max */
    OPT_BOOL,          /* true/false, yes/no, on/off, 1/0 */
    OPT_LOG_LEVEL,     /* error|warn|info|debug -> LOG_LEVEL_* */
    OPT_DTYPE,         /* auto|float32|float16|int8 -> MODEL_DTYPE_* */
    OPT_MATMUL,        /* auto|panels|blas -> MODEL_MATMUL_* */
    OPT_KV_DTYPE,      /* float32|float16 -> bool (halves) */
    OPT_ISA,           /* auto|portable|avx2[-vnni]|avx512[-vnni] -> cpu_isa */
    OPT_HELP,          /* flag only */
    OPT_VERSION,       /* flag only */
} opt_type;

typedef struct option_spec {
    const char *name; /* long flag, config key, env suffix */
    char short_name;  /* 0: none */
    opt_type type;
    size_t offset;       /* field in struct settings */
    const char *arg;     /* metavariable in --help */
    const char *def;     /* default, parsed like any other value; NULL: none */
    const char *def_doc; /* --help's text for a default computed at run time */
    unsigned long long min, max; /* numeric limits, inclusive */
    bool flag_only; /* not from the config file (--config, --help) */
    const char *help;
} option_spec;

#define FIELD(f) offsetof(settings, f)
#define KIB 1024ULL

static const option_spec options[] = {
    { "model", 'm', OPT_MODEL, FIELD(models), "[ID=]DIR", NULL,
      "none; this or --models-dir is required", 0, 0, false,
      "A model to serve: a directory with config.json, model.safetensors, "
      "vocab.json, merges.txt, known as ID (default: the directory's name). "
      "Repeat it for several models; the first is the default." },
    { "draft", 0, OPT_MODEL, FIELD(drafts), "[MODEL=]DRAFT", NULL, "none", 0, 0,
      false,
      "Speculative decoding with a draft model: DRAFT (a model this daemon "
      "serves, or a model's directory) guesses the tokens MODEL (default: the "
      "first model) then checks several at a time, as prompt lookup's are "
      "checked: the answer is the same. DRAFT must share MODEL's vocabulary; "
      "a much smaller one (distilgpt2 for gpt2-xl) pays. Repeat it for other "
      "models; each draft counts in --models-memory with its model." },
    { "models-dir", 0, OPT_OPTIONAL_PATH, FIELD(models_dir), "DIR", NULL, NULL,
      0, 0, false,
      "Serve every subdirectory of DIR that holds a config.json as a model "
      "named by the subdirectory (after the --model ones)." },
    { "models-memory", 0, OPT_BYTES, FIELD(models_memory), "SIZE", "0", NULL, 0,
      1024ULL * 1024 * KIB *KIB *KIB, false,
      "Most memory the loaded models may take together (weights as --dtype "
      "keeps them, and each one's KV cache); a model that does not fit unloads "
      "the least recently used idle ones. 0: no bound. Suffixes k, M, G "
      "(x1024)." },
    { "models-max", 0, OPT_COUNT, FIELD(models_max), "N", "0", NULL, 0, 1024,
      false, "Most models loaded at once; 0: no bound." },
    { "model-idle-timeout", 0, OPT_UINT, FIELD(model_idle), "SECONDS", "0",
      NULL, 0, 86400 * 365, false,
      "Unload a model no request has used for this long (it loads again on "
      "the next request); 0: never." },
    { "host", 0, OPT_PATH, FIELD(host), "ADDR", "127.0.0.1", NULL, 0, 0, false,
      "Address to listen on (IPv4 or IPv6 literal, or a host name)." },
    { "port", 'p', OPT_PORT, FIELD(port), "N", "8080", NULL, 0, 65535, false,
      "TCP port to listen on; 0 picks a free one (see --port-file)." },
    { "dtype", 0, OPT_DTYPE, FIELD(dtype), "TYPE", "auto", NULL, 0, 0, false,
      "How the weight matrices are kept: float32 (exact), float16 (rounded to "
      "half: half the memory, faster decoding), int8 (8-bit with a half scale "
      "per 32 inputs, as Q8_0: a quarter of the memory, faster still), q8 (the "
      "same weights multiplied in 8-bit integers, each product's inputs "
      "quantized per 32 too: the fastest at every batch size, its outputs a "
      "little further from float32's) or auto (float16 for an F16 "
      "checkpoint, else float32)." },
    { "matmul", 0, OPT_MATMUL, FIELD(matmul), "BACKEND", "auto", NULL, 0, 0,
      false,
      "What multiplies by the weights: panels (our kernels: a seed gives the same "
      "tokens alone or beside other requests), blas (OpenBLAS sgemm on --threads "
      "threads: a seed reproduces only when its request runs alone) or auto "
      "(panels on CPUs with AVX2 and FMA, blas elsewhere)." },
    { "isa", 0, OPT_ISA, FIELD(isa), "ISA", "auto", NULL, 0, 0, false,
      "Instruction set of the forward pass's kernels: portable, avx2, "
      "avx2-vnni (AVX-VNNI, for --dtype q8's products), avx512 (AVX-512F, "
      "for the weight products; the other kernels run their AVX2 build "
      "there), avx512-vnni (AVX512_VNNI, for q8's) or auto (the best this "
      "CPU runs); under portable, "
      "--matmul auto picks blas. For tests and benchmarks: logits of the "
      "portable and the vector kernels differ in the last bits, those of "
      "avx2 and avx512 do not. One this CPU cannot run is refused." },
    { "threads", 't', OPT_COUNT, FIELD(threads), "N", NULL,
      "the number of online CPUs", 1, 1024, false,
      "Worker threads for the forward pass; as many again, at "
      "nice 19, parse and tokenize requests." },
    { "kv-dtype", 0, OPT_KV_DTYPE, FIELD(kv_half), "TYPE", "float32", NULL, 0,
      0, false,
      "How the KV cache keeps keys and values: float32 (exact) or float16 (rounded "
      "to half: half the memory per slot, less to read per step)." },
    { "slots", 0, OPT_COUNT, FIELD(slots), "N", "4", NULL, 1,
      SETTINGS_MAX_SLOTS, false, "The most sequences that run at once." },
    { "kv-memory", 0, OPT_BYTES, FIELD(kv_memory), "SIZE", "0", NULL, 0,
      1024 * KIB *KIB *KIB, false,
      "KV-cache memory: blocks of keys and values shared by every sequence, "
      "running or cached; 0: a full context for each slot. At least one full "
      "context. Suffixes k, M, G (x1024)." },
    { "kv-cache-dir", 0, OPT_OPTIONAL_PATH, FIELD(kv_cache_dir), "DIR", NULL,
      NULL, 0, 0, false,
      "Directory of the KV cache's disk tier: blocks evicted from RAM, and "
      "the whole RAM cache at shutdown, so conversations outlive RAM and restarts; "
      "none: no disk tier." },
    { "kv-disk", 0, OPT_BYTES, FIELD(kv_disk), "SIZE", "1G", NULL, 4 * KIB,
      1024ULL * 1024 * KIB *KIB *KIB, false,
      "Most bytes the disk tier keeps in --kv-cache-dir. Suffixes k, M, G (x1024)." },
    { "batch-dir", 0, OPT_OPTIONAL_PATH, FIELD(batch_dir), "DIR", NULL, NULL, 0,
      0, false,
      "Directory of the Files and Batch APIs (/v1/files, /v1/batches): uploaded "
      "batch input, the batches and their answers, kept across restarts (a "
      "batch resumes where it stopped); none: the two APIs answer 404." },
    { "max-file-bytes", 0, OPT_BYTES, FIELD(max_file_bytes), "SIZE", "100M",
      NULL, 1, 1024ULL * KIB *KIB *KIB, false,
      "Largest file a client may upload to /v1/files (a batch's input); larger "
      "ones get 413. The upload is held in memory while it arrives. Suffixes k, "
      "M, G (x1024)." },
    { "batch-parallel", 0, OPT_COUNT, FIELD(batch_parallel), "N", NULL,
      "--slots", 1, SETTINGS_MAX_SLOTS, false,
      "Batch lines answered at once, across all batches. They run below every "
      "interactive request: on capacity no interactive request wants." },
    { "responses-dir", 0, OPT_OPTIONAL_PATH, FIELD(responses_dir), "DIR", NULL,
      NULL, 0, 0, false,
      "Directory of the stored responses (POST /v1/responses with store, "
      "GET /v1/responses/{id}, previous_response_id), kept across restarts; "
      "none: kept in memory until the daemon exits." },
    { "max-responses-per-key", 0, OPT_COUNT, FIELD(max_responses_per_key), "N",
      "1000", NULL, 1, 1000000, false,
      "Stored responses one key keeps: a new one beyond this forgets the "
      "key's least recently used (stored, read or continued)." },
    { "max-responses", 0, OPT_COUNT, FIELD(max_responses), "N", "10000", NULL,
      1, 10000000, false,
      "Stored responses kept in all: when full, the key with the most gives "
      "up its least recently used, so no key is pushed below another's "
      "share." },
    { "max-responses-bytes", 0, OPT_BYTES, FIELD(max_responses_bytes), "SIZE",
      "256M", NULL, 4 * KIB, 1024ULL * KIB *KIB *KIB, false,
      "Bytes the stored responses may take in all, as JSON text (in memory, "
      "without --responses-dir, a few times that): the key with the most "
      "gives up its least recently used first. Suffixes k, M, G (x1024)." },
    { "max-queue", 0, OPT_COUNT, FIELD(max_queue), "N", "64", NULL, 1, 1000000,
      false, "Requests that may wait for a slot; beyond this, 429 at once." },
    { "max-n", 0, OPT_COUNT, FIELD(max_n), "N", "4", NULL, 1, 1024, false,
      "Most sequences one completion may run: caps n, best_of and best_of x prompts "
      "(never more than --slots)." },
    { "max-seqs-per-key", 0, OPT_COUNT, FIELD(max_seqs_per_key), "N", NULL,
      "half of --slots (at least 1)", 1, SETTINGS_MAX_SLOTS, false,
      "Sequences one API key (or client address, without keys) keeps running "
      "while another key has work waiting; beyond them its sequences are "
      "paused for the other's. Alone, a key uses every slot." },
    { "max-queued-per-key", 0, OPT_COUNT, FIELD(max_queued_per_key), "N", NULL,
      "half of --max-queue (at least 1)", 1, 1000000, false,
      "Requests one key may have waiting for a slot; beyond this, 429 "
      "(code max_queued_per_key) at once." },
    { "max-sessions-per-key", 0, OPT_COUNT, FIELD(max_sessions_per_key), "N",
      "64", NULL, 1, 1000000, false,
      "Sessions one key keeps: a new one beyond this makes the key's own least "
      "recently used idle session forgotten (its cached history stays until "
      "evicted); with all of them busy, 429 (code max_sessions_per_key)." },
    { "tokens-per-minute-per-key", 0, OPT_COUNT,
      FIELD(tokens_per_minute_per_key), "N", "0", NULL, 0, 1000000000000ULL,
      false,
      "Each API key's (or client address's) token budget: prompt tokens plus "
      "n x max_tokens are charged when a completion starts, the unused part "
      "given back when it ends, and the budget refills at N a minute, up to "
      "N; beyond it, 429 (code token_budget). 0: no budget." },
    { "prefill-share", 0, OPT_UINT, FIELD(prefill_share), "PERCENT", "50", NULL,
      1, 100, false,
      "While another caller's sequences are generating, the most of the "
      "engine's time that a caller's prompt processing (prefill) may take, so "
      "that one key's long prompts cannot stall everyone's streams; 100: no "
      "limit." },
    { "step-cost", 0, OPT_UINT, FIELD(step_cost), "PERCENT", "175", NULL, 0,
      100000, false,
      "A step that processes prompt tokens beside generating "
      "streams lasts at most this percentage of a decode step of a full batch "
      "(the engine measures both as it runs), so a long prompt pauses every "
      "stream briefly instead of once for long; 0: no bound." },
    { "background-step-rows", 0, OPT_COUNT, FIELD(background_step_rows), "N",
      "32", NULL, 0, 65536, false,
      "A step that runs only background (batch) work carries at most this many "
      "token rows, so that an interactive request arriving during it waits "
      "little; batch work never runs beside interactive requests. 0: no "
      "bound." },
    { "speculative", 0, OPT_BOOL, FIELD(speculative), "BOOL", "true", NULL, 0,
      0, false,
      "Speculative decoding for requests that do not say (their "
      "\"speculative\" field): the model's draft (--draft) guesses the next "
      "tokens, or without one, tokens that continue an earlier match of the "
      "text's last few tokens (in the prompt or the answer so far) are "
      "proposed (prompt lookup); the model checks them all in one step, so "
      "text comes several tokens a step. The answer is "
      "bit-identical with or without (greedy or seeded); how many are "
      "proposed follows their measured acceptance and the batch's size. "
      "Never under --matmul blas." },
    { "speculative-tokens", 0, OPT_COUNT, FIELD(speculative_tokens), "N", "8",
      NULL, 1, 16, false,
      "The most proposed tokens one sequence has checked in one step." },
    { "test-batch-window", 0, OPT_UINT, FIELD(test_batch_window), "SECONDS",
      "0", NULL, 0, 86400, false,
      "For the test suites: a batch's completion window is this many seconds "
      "instead of 24 hours, so that expiry can be seen; 0: 24 hours. Nothing "
      "else should want it." },
    { "test-min-step-us", 0, OPT_UINT, FIELD(test_min_step_us), "US", "0", NULL,
      0, 1000000, false,
      "For the test suites: every engine step lasts at least this many "
      "microseconds (at most 1 s), so a long generation outlasts a deadline "
      "on any machine; 0: no floor. Nothing else should want it." },
    { "test-speculate-always", 0, OPT_BOOL, FIELD(test_speculate_always),
      "BOOL", "false", NULL, 0, 0, false,
      "For the test suites: speculative decoding verifies every draft "
      "prompt lookup finds, whatever it costs, so what is drafted depends on "
      "the text alone, not on how fast the machine is. Nothing else should "
      "want it." },
    { "test-draft-agree", 0, OPT_UINT, FIELD(test_draft_agree), "PERCENT", "0",
      NULL, 0, 100, false,
      "For benchmarks: the draft model's guess for a request that sends a "
      "prediction is the prediction's token at this percentage of "
      "positions (drawn independently) and another token elsewhere, so a "
      "greedy answer sent as its own prediction measures what a draft that "
      "agrees this often gives, at the draft's real price; 0: the draft's "
      "own guesses. Nothing else should want it." },
    { "max-stop-bytes", 0, OPT_COUNT, FIELD(max_stop_bytes), "N", "256", NULL,
      1, 65536, false, "Longest stop string, in bytes; longer ones get 400." },
    { "inspect-max-tokens", 0, OPT_COUNT, FIELD(inspect_max_tokens), "N", "256",
      NULL, 1, 1048576, false,
      "Longest prompt POST /v1/inspect takes, in tokens (never more than the "
      "model's context); longer ones get 400." },
    { "inspect-max-attention", 0, OPT_COUNT, FIELD(inspect_max_attention), "N",
      "5000000", NULL, 1, 1000000000, false,
      "Most attention probabilities one /v1/inspect answer may hold (layers x "
      "heads x n(n+1)/2 for n tokens; about 11 bytes of JSON each); a request "
      "for more gets 400 naming the numbers." },
    { "max-batch-rows", 0, OPT_COUNT, FIELD(max_batch_rows), "N", "256", NULL,
      1, 65536, false,
      "Token rows per engine step (decode rows plus prefill chunks)." },
    { "max-body", 0, OPT_BYTES, FIELD(max_body_bytes), "SIZE", "1M", NULL, 1,
      1024 * KIB *KIB, false,
      "Largest request body; larger ones get 413. Suffixes k, M, G (x1024)." },
    { "max-connections", 0, OPT_COUNT, FIELD(max_connections), "N", "256", NULL,
      1, 65536, false, "Simultaneous HTTP connections." },
    { "grammar-memory", 0, OPT_BYTES, FIELD(grammar_memory), "SIZE", "256M",
      NULL, 1024 * KIB, 1024 * KIB *KIB *KIB, false,
      "Memory for compiled structured-output constraints (response_format, "
      "structured_outputs, tools) kept for the requests that send them again, "
      "with their token masks; the least recently used leave first. Suffixes k, "
      "M, G (x1024)." },
    { "response-memory", 0, OPT_BYTES, FIELD(response_memory), "SIZE", NULL,
      "64M, 8 x max-body, or twice the largest /v1/inspect answer, whichever is more",
      1024 * KIB, 1024 * KIB *KIB *KIB, false,
      "Memory for the answers of /tokenize, /detokenize and /v1/inspect until their "
      "clients have read them; one API key (or client address) may hold half of it. A "
      "request that cannot have its share within 10 s gets 503 (429 when its own key "
      "holds its half; 400 for an inspect whose answer could never fit that half). At "
      "least 8 x max-body. Suffixes k, M, G (x1024)." },
    { "timeout", 0, OPT_UINT, FIELD(connection_timeout), "SECONDS", "60", NULL,
      0, 86400, false,
      "Close a connection idle this long, or whose client takes none of "
      "its answer this long; 0 never does." },
    { "request-timeout", 0, OPT_UINT, FIELD(request_timeout), "SECONDS", "30",
      NULL, 0, 86400, false,
      "Close a connection whose request (headers and body) is not all in this long "
      "after its first byte; responses are not limited. 0: no limit." },
    { "drain-timeout", 0, OPT_INT, FIELD(drain_ms), "MS", "10000", NULL, 0,
      3600000, false,
      "On SIGTERM, let running requests finish this long, then cancel them." },
    { "web-root", 0, OPT_PATH, FIELD(web_root), "DIR", GPT2D_DEFAULT_WEB_ROOT,
      NULL, 0, 0, false,
      "Directory of the playground's static files, served at /." },
    { "api-key-file", 0, OPT_OPTIONAL_PATH, FIELD(api_key_file), "FILE", NULL,
      NULL, 0, 0, false,
      "File of accepted API keys, one a line (also GPT2D_API_KEY); none: no auth." },
    { "global-prefix-cache", 0, OPT_BOOL, FIELD(global_prefix_cache), "BOOL",
      "false", NULL, 0, 0, false,
      "Share cached prompt prefixes and session ids among all clients (one "
      "tenant); by default each API key (or client address, without keys) has "
      "its own." },
    { "chat-template", 0, OPT_OPTIONAL_PATH, FIELD(chat_template), "FILE", NULL,
      "the built-in plain transcript", 0, 0, false,
      "JSON file of the chat template: how /v1/chat/completions writes messages "
      "into one prompt (each role's prefix and suffix) and the stop strings "
      "that end a reply; checked at start-up." },
    { "trusted-proxy", 0, OPT_ADDR_LIST, FIELD(trusted_proxy), "LIST", NULL,
      NULL, 0, 0, false,
      "Addresses and CIDR blocks of proxies (comma-separated) whose "
      "X-Forwarded-For names the client: without API keys, a request from one "
      "of them belongs to the right-most address of that header that is not "
      "a trusted proxy. None: the header is never read." },
    { "cors-origin", 0, OPT_ORIGIN, FIELD(cors_origin), "ORIGIN", NULL, NULL, 0,
      0, false,
      "The origin whose web pages may call the API (CORS), as a browser "
      "sends it: scheme://host[:port], lowercase, no path (e.g. "
      "https://app.example); \"*\" for any; none: CORS off." },
    { "config", 'c', OPT_OPTIONAL_PATH, FIELD(config_file), "FILE", NULL, NULL,
      0, 0, true, "Read options from FILE: `name = value` lines, # comments." },
    { "port-file", 0, OPT_OPTIONAL_PATH, FIELD(port_file), "FILE", NULL, NULL,
      0, 0, false, "Write the bound port number to FILE once listening." },
    { "log-prompts", 0, OPT_BOOL, FIELD(log_prompts), "BOOL", "false", NULL, 0,
      0, false, "Log prompt text (debugging only: prompts may be private)." },
    { "log-level", 0, OPT_LOG_LEVEL, FIELD(log_level), "LEVEL", "info", NULL, 0,
      0, false,
      "Least severe level logged: error, warn, info or debug (adds a line "
      "per engine step: its rows and time)." },
    { "help", 'h', OPT_HELP, 0, NULL, NULL, NULL, 0, 0, true,
      "Show this help and exit." },
    { "version", 'V', OPT_VERSION, 0, NULL, NULL, NULL, 0, 0, true,
      "Show the version and exit." },
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

/* ---- names ---- */

static const option_spec *find_option(const char *name)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strcmp(options[i].name, name) == 0)
            return &options[i];
    return NULL;
}

static bool has_value(const option_spec *o)
{
    return o->type != OPT_HELP && o->type != OPT_VERSION;
}

/* GPT2D_MAX_BODY for "max-body".  Only value options have one. */
static void env_name(const option_spec *o, char *buf, size_t size)
{
    int n = snprintf(buf, size, "GPT2D_");
    for (const char *p = o->name; *p != '\0' && (size_t)n + 1 < size; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

/* ---- value parsing ---- */

/* A whole decimal number, nothing else: no sign, no spaces, no "0x". */
static bool parse_ull(const char *s, unsigned long long *out, const char **end)
{
    if (!isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *e = NULL;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno == ERANGE)
        return false;
    *out = v;
    *end = e;
    return true;
}

static bool parse_number(const char *s, unsigned long long min,
                         unsigned long long max, unsigned long long *out)
{
    const char *end = NULL;
    return parse_ull(s, out, &end) && *end == '\0' && *out >= min &&
           *out <= max;
}

/* "1048576", "512k", "1M", "2G": binary multiples, one letter. */
static bool parse_bytes(const char *s, unsigned long long min,
                        unsigned long long max, unsigned long long *out)
{
    const char *end = NULL;
    unsigned long long v = 0, mult = 1;
    if (!parse_ull(s, &v, &end))
        return false;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        mult = KIB;
        end++;
        break;
    case 'm':
    case 'M':
        mult = KIB * KIB;
        end++;
        break;
    case 'g':
    case 'G':
        mult = KIB * KIB * KIB;
        end++;
        break;
    default:
        return false;
    }
    if (*end != '\0' || (v != 0 && mult > ULLONG_MAX / v))
        return false;
    *out = v * mult;
    return *out >= min && *out <= max;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on", "1" };
    static const char *const no[] = { "false", "no", "off", "0" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_log_level(const char *s, int *out)
{
    static const struct {
        const char *name;
        int level;
    } levels[] = {
        { "error", LOG_LEVEL_ERROR },  { "warn", LOG_LEVEL_WARN },
        { "warning", LOG_LEVEL_WARN }, { "info", LOG_LEVEL_INFO },
        { "debug", LOG_LEVEL_DEBUG },
    };
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (strcasecmp(s, levels[i].name) == 0) {
            *out = levels[i].level;
            return true;
        }
    }
    return false;
}

static int set_string(char **field, const char *value, bool empty_is_none,
                      const char *where, const option_spec *o, gpt2d_error *err)
{
    if (value[0] == '\0' && !empty_is_none)
        return error_set(err, "%s: %s needs a value", where, o->name);
    char *copy = NULL;
    if (value[0] != '\0' && (copy = strdup(value)) == NULL)
        return error_set(err, "%s: out of memory", where);
    free(*field);
    *field = copy;
    return 0;
}

/* Why `v` is not a serialized origin as a browser sends it in Origin
 * (RFC 6454 §6.2: scheme "://" host [":" port], lowercase, no default
 * port, nothing after), which gpt2d compares byte for byte; NULL when it
 * is one.  A list, a path or a stray character would start a server that
 * no browser can ever call. */
static const char *origin_problem(const char *v)
{
    for (const char *c = v; *c != '\0'; c++)
        if (*c >= 'A' && *c <= 'Z')
            return "browsers send it in lowercase";
    const char *p = v;
    if (!(*p >= 'a' && *p <= 'z'))
        return "it has no scheme (http:// or https://)";
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '+' ||
           *p == '-' || *p == '.')
        p++;
    const size_t scheme_len = (size_t)(p - v);
    if (strncmp(p, "://", 3) != 0)
        return "it has no scheme (http:// or https://)";
    p += 3;
    const char *host = p;
    if (*p == '[') {
        p += 1 + strspn(p + 1, "0123456789abcdef:.");
        if (*p++ != ']' || p - host < 4)
            return "its IPv6 address is not [lowercase hex and colons]";
    } else {
        p += strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789-.");
    }
    if (p == host)
        return "it has no host";
    if (*p == ':') {
        const char *port = ++p;
        p += strspn(p, "0123456789");
        unsigned long n = p - port <= 5 ? strtoul(port, NULL, 10) : 0;
        if (n == 0 || n > 65535 || port[0] == '0')
            return "its port is not a number from 1 to 65535";
        if ((scheme_len == 4 && strncmp(v, "http", 4) == 0 && n == 80) ||
            (scheme_len == 5 && strncmp(v, "https", 5) == 0 && n == 443))
            return "browsers leave the scheme's default port out";
    }
    if (*p == '\0')
        return NULL;
    if (*p == '/')
        return "an origin has no path, not even a trailing /";
    if (*p == ',' || *p == ' ')
        return "it is one origin, not a list";
    return "it holds a character no origin has";
}

/* What a valid value looks like, for the error message. */
static int bad_value(const option_spec *o, const char *where, const char *value,
                     gpt2d_error *err)
{
    switch (o->type) {
    case OPT_PORT:
        return error_set(err, "%s: '%s' is not a port number (0-65535)", where,
                         value);
    case OPT_COUNT:
    case OPT_UINT:
    case OPT_INT:
        return error_set(err,
                         "%s: '%s' is not a whole number from %llu to %llu",
                         where, value, o->min, o->max);
    case OPT_BYTES:
        return error_set(err,
                         "%s: '%s' is not a size from %llu to %llu bytes "
                         "(a number, optionally followed by k, M or G)",
                         where, value, o->min, o->max);
    case OPT_BOOL:
        return error_set(err, "%s: '%s' is not true or false", where, value);
    case OPT_LOG_LEVEL:
        return error_set(
            err, "%s: '%s' is not a log level (error, warn, info, debug)",
            where, value);
    case OPT_DTYPE:
        return error_set(err,
                         "%s: '%s' is not a dtype (auto, float32, float16, "
                         "int8, q8)",
                         where, value);
    case OPT_KV_DTYPE:
        return error_set(err, "%s: '%s' is not a KV dtype (float32, float16)",
                         where, value);
    case OPT_MATMUL:
        return error_set(err,
                         "%s: '%s' is not a matmul backend (auto, panels, "
                         "blas)",
                         where, value);
    case OPT_ISA:
        return error_set(err,
                         "%s: '%s' is not portable, avx2, avx2-vnni, avx512, "
                         "avx512-vnni or auto",
                         where, value);

    default:
        return error_set(err, "%s: bad value '%s'", where, value);
    }
}

/* Parses `value` for option `o` into its field of `s`.  `where` names the
 * source for messages ("--port", "GPT2D_PORT", "FILE:LINE: port"). */
static int apply_value(settings *s, const option_spec *o, const char *value,
                       const char *where, gpt2d_error *err)
{
    char *field = (char *)s + o->offset;
    unsigned long long n = 0;
    switch (o->type) {
    case OPT_MODEL: {
        settings_models *m = (settings_models *)(void *)field;
        if (m->source != s->source) { /* a later source: its list wins */
            for (size_t i = 0; i < m->n; i++)
                free(m->item[i]);
            m->n = 0;
            m->source = s->source;
        }
        if (value[0] == '\0')
            return error_set(err, "%s: %s needs a value", where, o->name);
        if (m->n == SETTINGS_MAX_MODELS)
            return error_set(err, "%s: more than %d %ss", where,
                             SETTINGS_MAX_MODELS, o->name);
        if ((m->item[m->n] = strdup(value)) == NULL)
            return error_set(err, "%s: out of memory", where);
        m->n++;
        return 0;
    }
    case OPT_PATH:
    case OPT_OPTIONAL_PATH:
        return set_string((char **)(void *)field, value,
                          o->type == OPT_OPTIONAL_PATH, where, o, err);
    case OPT_ORIGIN: {
        const char *why = value[0] != '\0' && strcmp(value, "*") != 0
                              ? origin_problem(value)
                              : NULL;
        if (why != NULL)
            return error_set(err,
                             "%s: '%s' is not an origin: %s (scheme://host"
                             "[:port] as a browser sends it, e.g. "
                             "https://app.example, or *)",
                             where, value, why);
        return set_string((char **)(void *)field, value, true, where, o, err);
    }
    case OPT_ADDR_LIST: {
        addr_list l;
        gpt2d_error why;
        if (addr_list_parse(&l, value, &why) != 0)
            return error_set(err, "%s: %s", where, why.message);
        return set_string((char **)(void *)field, value, true, where, o, err);
    }
    case OPT_PORT:
        if (!parse_number(value, o->min, o->max, &n))
            return bad_value(o, where, value, err);
        *(unsigned *)(void *)field = (unsigned)n;
        return 0;
    case OPT_UINT:
        if (!parse_number(value, o->min, o->max, &n))
            return bad_value(o, where, value, err);
        *(unsigned *)(void *)field = (unsigned)n;
        return 0;
    case OPT_INT:
        if (!parse_number(value, o->min, o->max, &n))
            return bad_value(o, where, value, err);
        *(int *)(void *)field = (int)n;
        return 0;
    case OPT_COUNT:
        if (!parse_number(value, o->min, o->max, &n))
            return bad_value(o, where, value, err);
        *(size_t *)(void *)field = (size_t)n;
        return 0;
    case OPT_BYTES:
        if (!parse_bytes(value, o->min, o->max, &n))
            return bad_value(o, where, value, err);
        *(size_t *)(void *)field = (size_t)n;
        return 0;
    case OPT_BOOL:
        if (!parse_bool(value, (bool *)(void *)field))
            return bad_value(o, where, value, err);
        return 0;
    case OPT_LOG_LEVEL:
        if (!parse_log_level(value, (int *)(void *)field))
            return bad_value(o, where, value, err);
        return 0;
    case OPT_DTYPE:
        if (model_dtype_parse(value, (model_dtype *)(void *)field) != 0)
            return bad_value(o, where, value, err);
        return 0;
    case OPT_MATMUL:
        if (model_matmul_parse(value, (model_matmul *)(void *)field) != 0)
            return bad_value(o, where, value, err);
        return 0;
    case OPT_KV_DTYPE:
        if (kv_dtype_parse(value, (bool *)(void *)field) != 0)
            return bad_value(o, where, value, err);
        return 0;
    case OPT_ISA: {
        /* checked against the CPU here, where the message can name the
         * source, so a daemon that cannot run it stops before it loads */
        const cpu_isa best = cpu_isa_supported();
        cpu_isa isa = best;
        if (strcmp(value, "auto") != 0 && cpu_isa_parse(value, &isa) != 0)
            return bad_value(o, where, value, err);
        if (!cpu_isa_runs(isa))
            return error_set(err,
                             "%s: this CPU cannot run the %s kernels (it "
                             "runs %s)",
                             where, value, cpu_isa_name(best));
        *(cpu_isa *)(void *)field = isa;
        return 0;
    }
    case OPT_HELP:
    case OPT_VERSION:
        break;
    }
    return error_set(err, "%s: not a setting", where);
}

/* ---- sources ---- */

static size_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (size_t)n : 1;
}

static int apply_defaults(settings *s, gpt2d_error *err)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_spec *o = &options[i];
        if (o->def == NULL)
            continue;
        char where[64];
        snprintf(where, sizeof where, "default of %s", o->name);
        if (apply_value(s, o, o->def, where, err) != 0)
            return -1;
    }
    s->threads = online_cpus();
    return 0;
}

/* Trims ASCII whitespace in place; returns the first non-space character. */
static char *trim(char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    char *end = p + strlen(p);
    while (end > p && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return p;
}

/* One `key = value` line (already known not to be blank or a comment). */
static int apply_config_line(settings *s, char *line, const char *path,
                             size_t lineno, gpt2d_error *err)
{
    char *eq = strchr(line, '=');
    if (eq == NULL)
        return error_set(err, "%s:%zu: expected 'name = value', got '%s'", path,
                         lineno, line);
    *eq = '\0';
    char *key = trim(line);
    char *value = trim(eq + 1);
    /* "value" and 'value' keep surrounding spaces; the quotes go. */
    size_t vlen = strlen(value);
    if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') &&
        value[vlen - 1] == value[0]) {
        value[vlen - 1] = '\0';
        value++;
    }
    if (key[0] == '\0')
        return error_set(err, "%s:%zu: missing option name before '='", path,
                         lineno);
    const option_spec *o = find_option(key);
    if (o == NULL)
        return error_set(err, "%s:%zu: unknown option '%s'", path, lineno, key);
    if (o->flag_only)
        return error_set(err, "%s:%zu: '%s' cannot be set in a config file",
                         path, lineno, key);
    char where[512];
    snprintf(where, sizeof where, "%s:%zu: %s", path, lineno, key);
    return apply_value(s, o, value, where, err);
}

static int apply_config_file_line(void *s, config_line *line, gpt2d_error *err)
{
    char *p = trim(line->text);
    if (*p == '\0' || *p == '#')
        return 0; /* # only at the start: values may contain it */
    return apply_config_line(s, p, line->path, line->number, err);
}

static int apply_config_file(settings *s, const char *path, gpt2d_error *err)
{
    return config_lines_read(path, apply_config_file_line, s, err);
}

/* An empty variable counts as unset, as shells and systemd often leave them. */
static int apply_environment(settings *s, gpt2d_error *err)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_spec *o = &options[i];
        if (!has_value(o) || o->flag_only)
            continue;
        char name[64];
        env_name(o, name, sizeof name);
        const char *v = getenv(name);
        if (v != NULL && v[0] != '\0' && apply_value(s, o, v, name, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- flags ---- */

enum { MAX_FLAGS = 256 };

/* The flags found by the scan, applied after the file and the environment. */
typedef struct flag_list {
    const option_spec *opt[MAX_FLAGS];
    const char *value[MAX_FLAGS];
    size_t n;
    bool help, version;
    const char *config; /* the last --config */
} flag_list;

/* getopt_long's view of the table; a long option's `val` is 256 + its index
 * so every option, with or without a short letter, maps back to its entry. */
static void build_getopt_tables(struct option *longopts, char *shortopts)
{
    size_t k = 0;
    shortopts[k++] = '+'; /* stop at the first non-option: no permuting */
    shortopts[k++] = ':'; /* report a missing value as ':' */
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_spec *o = &options[i];
        bool boolean = o->type == OPT_BOOL;
        longopts[i] = (struct option){
            o->name,
            !has_value(o) ? no_argument
            : boolean     ? optional_argument
                          : required_argument,
            NULL,
            256 + (int)i,
        };
        if (o->short_name != 0) {
            shortopts[k++] = o->short_name;
            if (has_value(o) && !boolean)
                shortopts[k++] = ':';
        }
    }
    longopts[N_OPTIONS] = (struct option){ NULL, 0, NULL, 0 };
    shortopts[k] = '\0';
}

static const option_spec *option_by_short(int c)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (options[i].short_name != 0 && options[i].short_name == c)
            return &options[i];
    return NULL;
}

/* getopt_long accepts any unambiguous prefix ("--api-key" for
 * "--api-key-file"); we don't, so each option has exactly one spelling in
 * every source and a mistyped secret is never taken for a file name. */
static bool spelled_in_full(const char *word, const char *name)
{
    size_t n = strlen(name);
    return strncmp(word, "--", 2) == 0 && strncmp(word + 2, name, n) == 0 &&
           (word[2 + n] == '\0' || word[2 + n] == '=');
}

static void word_of_option(char *buf, size_t size, const char *word)
{
    size_t n = strcspn(word, "=");
    snprintf(buf, size, "%.*s", (int)(n < 200 ? n : 200), word);
}

static int scan_flags(flag_list *fl, int argc, char **argv, gpt2d_error *err)
{
    struct option longopts[N_OPTIONS + 1];
    char shortopts[3 + 2 * N_OPTIONS];
    build_getopt_tables(longopts, shortopts);

    optind = 0; /* glibc: full re-initialisation per call */
    opterr = 0; /* one message of our own per error */
    for (;;) {
        int before = optind == 0 ? 1 : optind;
        int c = getopt_long(argc, argv, shortopts, longopts, NULL);
        if (c == -1)
            break;
        char word[256];
        if (c == '?' || c == ':') {
            if (optopt >= 256 || (optopt == 0 && optind > 0))
                word_of_option(word, sizeof word, argv[optind - 1]);
            else
                snprintf(word, sizeof word, "-%c", optopt);
            if (c == ':')
                return error_set(
                    err, "option '%s' needs a value (see gpt2d --help)", word);
            return error_set(err, "unrecognized option '%s' (see gpt2d --help)",
                             word);
        }
        const option_spec *o = c >= 256 ? &options[c - 256]
                                        : option_by_short(c);
        if (o == NULL)
            return error_set(err, "unrecognized option (see gpt2d --help)");
        if (c >= 256 && !spelled_in_full(argv[before], o->name)) {
            word_of_option(word, sizeof word, argv[before]);
            return error_set(err, "unrecognized option '%s' (see gpt2d --help)",
                             word);
        }
        if (o->type == OPT_HELP) {
            fl->help = true;
            continue;
        }
        if (o->type == OPT_VERSION) {
            fl->version = true;
            continue;
        }
        if (fl->n == MAX_FLAGS)
            return error_set(err, "more than %d options on the command line",
                             MAX_FLAGS);
        /* A bare boolean flag (--log-prompts) means true. */
        const char *v = optarg != NULL ? optarg : "true";
        fl->opt[fl->n] = o;
        fl->value[fl->n++] = v;
        if (o->offset == FIELD(config_file))
            fl->config = v;
    }
    if (optind < argc)
        return error_set(err, "unexpected argument '%s' (see gpt2d --help)",
                         argv[optind]);
    return 0;
}

static int apply_flags(settings *s, const flag_list *fl, gpt2d_error *err)
{
    for (size_t i = 0; i < fl->n; i++) {
        char where[64];
        snprintf(where, sizeof where, "--%s", fl->opt[i]->name);
        if (apply_value(s, fl->opt[i], fl->value[i], where, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- public ---- */

static settings_result load(settings *s, int argc, char **argv,
                            gpt2d_error *err)
{
    flag_list fl = { .n = 0 };
    if (scan_flags(&fl, argc, argv, err) != 0)
        return SETTINGS_USAGE_ERROR;
    if (fl.help) {
        settings_usage(stdout);
        return SETTINGS_EXIT_OK;
    }
    if (fl.version) {
        printf("%s\n", PACKAGE_STRING);
        return SETTINGS_EXIT_OK;
    }
    if (apply_defaults(s, err) != 0)
        return SETTINGS_USAGE_ERROR;
    /* Recorded whichever source named it, so start-up can log it. */
    s->source = 1;
    const char *config = fl.config != NULL ? fl.config : getenv("GPT2D_CONFIG");
    if (config != NULL && config[0] != '\0' &&
        (apply_value(s, find_option("config"), config, "GPT2D_CONFIG", err) !=
             0 ||
         apply_config_file(s, config, err) != 0))
        return SETTINGS_USAGE_ERROR;
    s->source = 2;
    if (apply_environment(s, err) != 0)
        return SETTINGS_USAGE_ERROR;
    s->source = 3;
    if (apply_flags(s, &fl, err) != 0)
        return SETTINGS_USAGE_ERROR;
    const char *key = getenv("GPT2D_API_KEY");
    if (key != NULL && key[0] != '\0' && (s->api_key = strdup(key)) == NULL) {
        error_set(err, "GPT2D_API_KEY: out of memory");
        return SETTINGS_USAGE_ERROR;
    }
    if (s->models.n == 0 && s->models_dir == NULL) {
        error_set(err, "--model DIR (or --models-dir DIR) is required (see "
                       "gpt2d --help)");
        return SETTINGS_USAGE_ERROR;
    }
    if (s->matmul == MODEL_MATMUL_BLAS && model_dtype_needs_panels(s->dtype)) {
        error_set(err,
                  "--matmul blas multiplies float32 weights: --dtype "
                  "%s needs --matmul panels (or auto)",
                  model_dtype_name(s->dtype));
        return SETTINGS_USAGE_ERROR;
    }
    return SETTINGS_RUN;
}

settings_result settings_load(settings *s, int argc, char **argv,
                              gpt2d_error *err)
{
    memset(s, 0, sizeof *s);
    settings_result r = load(s, argc, argv, err);
    if (r != SETTINGS_RUN)
        settings_free(s);
    return r;
}

void settings_free(settings *s)
{
    if (s == NULL)
        return;
    if (s->api_key != NULL) {
        /* a secret: leave nothing behind in freed memory */
        explicit_bzero(s->api_key, strlen(s->api_key));
        free(s->api_key);
        s->api_key = NULL;
    }
    settings_models *lists[] = { &s->models, &s->drafts };
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        for (size_t i = 0; i < lists[l]->n; i++)
            free(lists[l]->item[i]);
        lists[l]->n = 0;
    }
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (options[i].type == OPT_PATH ||
            options[i].type == OPT_OPTIONAL_PATH ||
            options[i].type == OPT_ADDR_LIST || options[i].type == OPT_ORIGIN) {
            char **field = (char **)(void *)((char *)s + options[i].offset);
            free(*field);
            *field = NULL;
        }
    }
}

/* One entry: the flag line, then the help text, then default and variable. */
static void usage_option(FILE *out, const option_spec *o)
{
    if (o->short_name != 0)
        fprintf(out, "  -%c, --%s", o->short_name, o->name);
    else
        fprintf(out, "      --%s", o->name);
    if (o->type == OPT_BOOL)
        fprintf(out, "[=%s]", o->arg);
    else if (o->arg != NULL)
        fprintf(out, " %s", o->arg);
    fprintf(out, "\n        %s\n", o->help);
    if (!has_value(o))
        return;
    fprintf(out, "        ");
    if (o->def != NULL)
        fprintf(out, "Default: %s.  ", o->def);
    else if (o->def_doc != NULL)
        fprintf(out, "Default: %s.  ", o->def_doc);
    char env[64];
    env_name(o, env, sizeof env);
    fprintf(out, "Environment: %s.%s\n", env,
            o->flag_only ? "  Not in the config file." : "");
}

void settings_usage(FILE *out)
{
    fprintf(
        out,
        "Usage: gpt2d --model [ID=]DIR... [options]\n"
        "Serve GPT-2 checkpoints (Hugging Face layout) over HTTP.\n"
        "\n"
        "Every option can also be given in the --config file as `name = value`\n"
        "or as its environment variable.  Flags override the environment, which\n"
        "overrides the config file, which overrides the defaults.  API keys are\n"
        "read from GPT2D_API_KEY or --api-key-file, never from the command line.\n"
        "\n"
        "Options:\n");
    for (size_t i = 0; i < N_OPTIONS; i++)
        usage_option(out, &options[i]);
    fprintf(
        out,
        "\n"
        "Signals: SIGTERM (or SIGINT) stops accepting connections, lets running\n"
        "requests finish for up to --drain-timeout, cancels the rest and exits 0.\n"
        "SIGHUP re-reads the API keys (--api-key-file and GPT2D_API_KEY); on\n"
        "error the old keys stay in force.  Other settings need a restart.\n");
}
