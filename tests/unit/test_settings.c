/* test_settings.c — options come from one table through four sources with
 * the documented precedence (defaults < config file < environment < flags);
 * every bad value is refused with a message naming where it came from, the
 * option and the value; config-file errors carry the line number; --help
 * lists every option; the example etc/gpt2d.conf stays in step with the
 * table.  Also the log module's level filter and line format (log-level is
 * a setting, and log.c has no suite of its own). */
#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/settings.h"
#include "test_util.h"

/* Every option, as the issue and settings.h specify them (an independent
 * list: the table in settings.c must match it, not define it). */
static const char *const option_names[] = {
    "model",
    "models-dir",
    "models-memory",
    "models-max",
    "model-idle-timeout",
    "host",
    "port",
    "dtype",
    "matmul",
    "isa",
    "kv-dtype",
    "threads",
    "slots",
    "kv-memory",
    "max-queue",
    "max-batch-rows",
    "max-body",
    "max-connections",
    "timeout",
    "request-timeout",
    "max-n",
    "inspect-max-tokens",
    "inspect-max-attention",
    "drain-timeout",
    "web-root",
    "api-key-file",
    "cors-origin",
    "chat-template",
    "config",
    "port-file",
    "log-prompts",
    "test-min-step-us",
    "log-level",
    "tokens-per-minute-per-key",
    "trusted-proxy",
};
enum { N_OPTION_NAMES = sizeof option_names / sizeof option_names[0] };

static void env_name_of(const char *option, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "GPT2D_");
    for (; *option != '\0' && n + 1 < size; option++)
        buf[n++] = *option == '-' ? '_'
                                  : (char)(*option >= 'a' && *option <= 'z'
                                               ? *option - 'a' + 'A'
                                               : *option);
    buf[n] = '\0';
}

/* Each test starts from a clean environment, whatever the shell had. */
static void clear_option_env(void)
{
    for (size_t i = 0; i < N_OPTION_NAMES; i++) {
        char name[64];
        env_name_of(option_names[i], name, sizeof name);
        unsetenv(name);
    }
}

/* Config files a test writes, in its test case's scratch directory (whose
 * unchecked fixture removes them, after a failed test too). */
static char tmp_paths[4][300];
static size_t n_tmp_paths;

static void setup(void)
{
    clear_option_env();
    n_tmp_paths = 0;
}

static void teardown(void)
{
    clear_option_env();
}

/* Writes `text` to a fresh file in the scratch directory; returns its path. */
static const char *write_temp(const char *text)
{
    ck_assert_uint_lt(n_tmp_paths, 4);
    char *path = tmp_paths[n_tmp_paths++];
    test_scratch_path(path, sizeof tmp_paths[0], "settings-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

enum { MAX_ARGS = 32 };

/* Runs settings_load on a NULL-terminated argument list (after "gpt2d"). */
static settings_result load_args(settings *s, gpt2d_error *err,
                                 const char *first, ...)
{
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)"gpt2d";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        ck_assert_int_lt(argc, MAX_ARGS);
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
    memset(err, 0, sizeof *err);
    return settings_load(s, argc, argv, err);
}

/* Loads and expects success. */
#define LOAD_OK(s, ...)                                                        \
    do {                                                                       \
        gpt2d_error err_;                                                      \
        settings_result r_ = load_args((s), &err_, __VA_ARGS__, (char *)NULL); \
        ck_assert_msg(r_ == SETTINGS_RUN, "load failed: %s", err_.message);    \
    } while (0)

/* Loads, expects a usage error whose message contains each of the strings. */
static void expect_error(const char *const *args, size_t n_args,
                         const char *want1, const char *want2)
{
    char *argv[MAX_ARGS + 2];
    argv[0] = (char *)"gpt2d";
    ck_assert_uint_lt(n_args, MAX_ARGS);
    for (size_t i = 0; i < n_args; i++)
        argv[i + 1] = (char *)args[i];
    argv[n_args + 1] = NULL;
    settings s;
    gpt2d_error err = { { 0 } };
    settings_result r = settings_load(&s, (int)n_args + 1, argv, &err);
    settings_free(&s);
    ck_assert_msg(r == SETTINGS_USAGE_ERROR, "accepted %s %s", args[0],
                  n_args > 1 ? args[1] : "");
    ck_assert_msg(strstr(err.message, want1) != NULL, "'%s' lacks '%s'",
                  err.message, want1);
    if (want2 != NULL)
        ck_assert_msg(strstr(err.message, want2) != NULL, "'%s' lacks '%s'",
                      err.message, want2);
}

#define EXPECT_ERROR(want1, want2, ...)                                        \
    do {                                                                       \
        const char *const args_[] = { __VA_ARGS__ };                           \
        expect_error(args_, sizeof args_ / sizeof args_[0], (want1), (want2)); \
    } while (0)

/* s names exactly one model, `dir`. */
static void assert_one_model(const settings *s, const char *dir)
{
    ck_assert_uint_eq(s->models.n, 1);
    ck_assert_str_eq(s->models.item[0], dir);
}

/* ---- defaults and precedence ---- */

START_TEST(test_defaults_are_the_documented_ones)
{
    settings s;
    LOAD_OK(&s, "--model", "/models/gpt2");
    assert_one_model(&s, "/models/gpt2");
    ck_assert_str_eq(s.host, "127.0.0.1");
    ck_assert_uint_eq(s.port, 8080);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_uint_eq(s.threads, (size_t)(cpus >= 1 ? cpus : 1));
    ck_assert_uint_eq(s.slots, 4);
    ck_assert_uint_eq(s.kv_memory, 0);
    ck_assert_uint_eq(s.max_queue, 64);
    ck_assert_uint_eq(s.max_batch_rows, 256);
    ck_assert_uint_eq(s.max_body_bytes, 1024 * 1024);
    ck_assert_uint_eq(s.max_connections, 256);
    ck_assert_uint_eq(s.connection_timeout, 60);
    ck_assert_uint_eq(s.request_timeout, 30);
    ck_assert_uint_eq(s.max_n, 4);
    ck_assert_uint_eq(s.inspect_max_tokens, 256);
    ck_assert_uint_eq(s.inspect_max_attention, 5000000);
    ck_assert_int_eq(s.drain_ms, 10000);
    ck_assert_str_eq(s.web_root, GPT2D_DEFAULT_WEB_ROOT);
    ck_assert_ptr_null(s.api_key_file);
    ck_assert_ptr_null(s.cors_origin);
    ck_assert_ptr_null(s.trusted_proxy);
    ck_assert_uint_eq(s.tokens_per_minute_per_key, 0);
    ck_assert_ptr_null(s.config_file);
    ck_assert_ptr_null(s.port_file);
    ck_assert(!s.log_prompts);
    ck_assert_int_eq(s.log_level, LOG_LEVEL_INFO);
    ck_assert_int_eq(s.dtype, MODEL_DTYPE_AUTO);
    ck_assert_int_eq(s.matmul, MODEL_MATMUL_AUTO);
    ck_assert_int_eq(s.isa, cpu_isa_supported());
    ck_assert(!s.kv_half);
    settings_free(&s);
}
END_TEST

START_TEST(test_config_file_sets_every_kind_of_value)
{
    const char *path = write_temp("# a comment\n"
                                  "\n"
                                  "   # an indented comment\n"
                                  "model = /srv/model\n"
                                  "host=0.0.0.0\n"
                                  "  port   =   9000  \n"
                                  "threads = 3\n"
                                  "slots = 8\n"
                                  "kv-memory = 2G\n"
                                  "max-queue = 5\n"
                                  "max-batch-rows = 128\n"
                                  "max-body = 64k\n"
                                  "max-connections = 10\n"
                                  "timeout = 0\n"
                                  "request-timeout = 5\n"
                                  "max-n = 2\n"
                                  "inspect-max-tokens = 64\n"
                                  "inspect-max-attention = 1000\n"
                                  "drain-timeout = 250\n"
                                  "web-root = /srv/web\n"
                                  "api-key-file = /etc/keys\n"
                                  "cors-origin = http://a.example:8080\n"
                                  "port-file = \"/tmp/port#x\"\n"
                                  "log-prompts = yes\n"
                                  "log-level = debug\n"
                                  "dtype = float16\n"
                                  "matmul = panels\n"
                                  "kv-dtype = float16\n");
    settings s;
    LOAD_OK(&s, "--config", path);
    assert_one_model(&s, "/srv/model");
    ck_assert_str_eq(s.host, "0.0.0.0");
    ck_assert_uint_eq(s.port, 9000);
    ck_assert_uint_eq(s.threads, 3);
    ck_assert_uint_eq(s.slots, 8);
    ck_assert_uint_eq(s.kv_memory, 2ULL << 30);
    ck_assert_uint_eq(s.max_queue, 5);
    ck_assert_uint_eq(s.max_batch_rows, 128);
    ck_assert_uint_eq(s.max_body_bytes, 64 * 1024);
    ck_assert_uint_eq(s.max_connections, 10);
    ck_assert_uint_eq(s.connection_timeout, 0);
    ck_assert_uint_eq(s.request_timeout, 5);
    ck_assert_uint_eq(s.max_n, 2);
    ck_assert_uint_eq(s.inspect_max_tokens, 64);
    ck_assert_uint_eq(s.inspect_max_attention, 1000);
    ck_assert_int_eq(s.drain_ms, 250);
    ck_assert_str_eq(s.web_root, "/srv/web");
    ck_assert_str_eq(s.api_key_file, "/etc/keys");
    ck_assert_str_eq(s.cors_origin, "http://a.example:8080");
    ck_assert_str_eq(s.port_file, "/tmp/port#x");
    ck_assert_str_eq(s.config_file, path);
    ck_assert(s.log_prompts);
    ck_assert_int_eq(s.log_level, LOG_LEVEL_DEBUG);
    ck_assert_int_eq(s.dtype, MODEL_DTYPE_FLOAT16);
    ck_assert_int_eq(s.matmul, MODEL_MATMUL_PANELS);
    ck_assert(s.kv_half);
    settings_free(&s);
}
END_TEST

START_TEST(test_environment_overrides_config_file)
{
    const char *path = write_temp("model = /file\nport = 1111\nslots = 2\n");
    setenv("GPT2D_PORT", "2222", 1);
    setenv("GPT2D_MAX_BODY", "2M", 1);
    setenv("GPT2D_LOG_PROMPTS", "on", 1);
    settings s;
    LOAD_OK(&s, "--config", path);
    ck_assert_uint_eq(s.port, 2222); /* env beats the file */
    ck_assert_uint_eq(s.slots, 2);   /* the file beats the default */
    ck_assert_uint_eq(s.max_body_bytes, 2 * 1024 * 1024);
    ck_assert(s.log_prompts);
    assert_one_model(&s, "/file");
    settings_free(&s);
}
END_TEST

START_TEST(test_flags_override_environment_and_file)
{
    const char *path = write_temp("model = /file\nport = 1111\nhost = ::1\n");
    setenv("GPT2D_PORT", "2222", 1);
    setenv("GPT2D_MODEL", "/env", 1);
    settings s;
    LOAD_OK(&s, "--config", path, "--port", "3333", "-m", "/flag");
    ck_assert_uint_eq(s.port, 3333);
    assert_one_model(&s, "/flag");
    ck_assert_str_eq(s.host, "::1"); /* untouched by env and flags */
    settings_free(&s);
}
END_TEST

START_TEST(test_later_flag_wins_and_equals_form_works)
{
    settings s;
    LOAD_OK(&s, "--model=/a", "--port=1", "-p", "2", "--port", "0");
    ck_assert_uint_eq(s.port, 0);
    assert_one_model(&s, "/a");
    settings_free(&s);
}
END_TEST

/* --model names one more model each time within a source; a later
 * source's list replaces an earlier one's. */
START_TEST(test_models_accumulate_within_a_source_and_later_sources_replace)
{
    settings s;
    LOAD_OK(&s, "--model", "/a", "-m", "big=/b", "--model=/c");
    ck_assert_uint_eq(s.models.n, 3);
    ck_assert_str_eq(s.models.item[0], "/a");
    ck_assert_str_eq(s.models.item[1], "big=/b");
    ck_assert_str_eq(s.models.item[2], "/c");
    settings_free(&s);

    const char *path = write_temp("model = /f1\nmodel = small=/f2\n");
    LOAD_OK(&s, "--config", path);
    ck_assert_uint_eq(s.models.n, 2);
    ck_assert_str_eq(s.models.item[0], "/f1");
    ck_assert_str_eq(s.models.item[1], "small=/f2");
    settings_free(&s);

    setenv("GPT2D_MODEL", "/env", 1);
    LOAD_OK(&s, "--config", path);
    assert_one_model(&s, "/env");
    settings_free(&s);
    LOAD_OK(&s, "--config", path, "--model", "/x", "--model", "/y");
    ck_assert_uint_eq(s.models.n, 2);
    ck_assert_str_eq(s.models.item[0], "/x");
    ck_assert_str_eq(s.models.item[1], "/y");
    settings_free(&s);
}
END_TEST

START_TEST(test_models_dir_alone_is_enough_and_models_options_parse)
{
    settings s;
    LOAD_OK(&s, "--models-dir", "/srv/models", "--models-memory", "2G",
            "--models-max", "3", "--model-idle-timeout", "600");
    ck_assert_uint_eq(s.models.n, 0);
    ck_assert_str_eq(s.models_dir, "/srv/models");
    ck_assert_uint_eq(s.models_memory, 2ULL << 30);
    ck_assert_uint_eq(s.models_max, 3);
    ck_assert_uint_eq(s.model_idle, 600);
    settings_free(&s);
    LOAD_OK(&s, "--model", "/m");
    ck_assert_uint_eq(s.models_memory, 0);
    ck_assert_uint_eq(s.models_max, 0);
    ck_assert_uint_eq(s.model_idle, 0);
    ck_assert_ptr_null(s.models_dir);
    settings_free(&s);
}
END_TEST

START_TEST(test_config_file_named_by_environment)
{
    const char *env_file = write_temp("model = /from-env-file\nslots = 7\n");
    const char *flag_file = write_temp("model = /from-flag-file\n");
    setenv("GPT2D_CONFIG", env_file, 1);
    settings s;
    LOAD_OK(&s, "--threads", "1");
    assert_one_model(&s, "/from-env-file");
    ck_assert_uint_eq(s.slots, 7);
    ck_assert_str_eq(s.config_file, env_file);
    settings_free(&s);
    LOAD_OK(&s, "--config", flag_file); /* the flag beats GPT2D_CONFIG */
    assert_one_model(&s, "/from-flag-file");
    ck_assert_uint_eq(s.slots, 4);
    settings_free(&s);
}
END_TEST

START_TEST(test_boolean_flag_forms)
{
    settings s;
    LOAD_OK(&s, "-m", "x", "--log-prompts");
    ck_assert(s.log_prompts);
    settings_free(&s);
    setenv("GPT2D_LOG_PROMPTS", "true", 1);
    LOAD_OK(&s, "-m", "x", "--log-prompts=no");
    ck_assert(!s.log_prompts);
    settings_free(&s);
}
END_TEST

/* int8 is a --dtype from every source; any backend but blas takes it. */
START_TEST(test_dtype_int8_from_flag_and_environment)
{
    settings s;
    LOAD_OK(&s, "-m", "x", "--dtype", "int8");
    ck_assert_int_eq(s.dtype, MODEL_DTYPE_INT8);
    settings_free(&s);
    setenv("GPT2D_DTYPE", "int8", 1);
    LOAD_OK(&s, "-m", "x", "--matmul", "panels");
    ck_assert_int_eq(s.dtype, MODEL_DTYPE_INT8);
    ck_assert_int_eq(s.matmul, MODEL_MATMUL_PANELS);
    settings_free(&s);
}
END_TEST

/* GPT2D_ISA forces the kernels as it always did, now as --isa's variable:
 * the environment is read here and nowhere else. */
START_TEST(test_isa_from_flag_and_environment)
{
    settings s;
    LOAD_OK(&s, "-m", "x", "--isa", "portable");
    ck_assert_int_eq(s.isa, CPU_ISA_PORTABLE);
    settings_free(&s);
    setenv("GPT2D_ISA", "portable", 1);
    LOAD_OK(&s, "-m", "x");
    ck_assert_int_eq(s.isa, CPU_ISA_PORTABLE);
    settings_free(&s);
    LOAD_OK(&s, "-m", "x", "--isa", "auto");
    ck_assert_int_eq(s.isa, cpu_isa_supported());
    settings_free(&s);
    LOAD_OK(&s, "-m", "x", "--isa", cpu_isa_name(cpu_isa_supported()));
    ck_assert_int_eq(s.isa, cpu_isa_supported());
    settings_free(&s);
}
END_TEST

/* A name that is no instruction set, or one this CPU cannot run, stops
 * the daemon at start-up with a message naming where it came from. */
START_TEST(test_isa_names_an_instruction_set_this_cpu_runs)
{
    EXPECT_ERROR("--isa: 'avx9000' is not portable, avx2, avx2-vnni, avx512, "
                 "avx512-vnni or auto",
                 NULL, "-m", "x", "--isa", "avx9000");
    setenv("GPT2D_ISA", "avx9000", 1);
    EXPECT_ERROR("GPT2D_ISA: 'avx9000' is not", NULL, "-m", "x");
    unsetenv("GPT2D_ISA");
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        const char *name = cpu_isa_name((cpu_isa)isa);
        char want[128];
        snprintf(want, sizeof want, "--isa: this CPU cannot run the %s kernels",
                 name);
        if (!cpu_isa_runs((cpu_isa)isa))
            EXPECT_ERROR(want, NULL, "-m", "x", "--isa", name);
    }
}
END_TEST

/* GPT2D_API_KEY is read here, like every variable, though it is no
 * option: no flag or config-file key can carry a key. */
START_TEST(test_api_key_only_from_its_variable)
{
    settings s;
    unsetenv("GPT2D_API_KEY");
    LOAD_OK(&s, "-m", "x");
    ck_assert_ptr_null(s.api_key);
    settings_free(&s);
    setenv("GPT2D_API_KEY", "", 1);
    LOAD_OK(&s, "-m", "x");
    ck_assert_ptr_null(s.api_key); /* empty counts as unset */
    settings_free(&s);
    setenv("GPT2D_API_KEY", "sk-env", 1);
    LOAD_OK(&s, "-m", "x");
    ck_assert_str_eq(s.api_key, "sk-env");
    settings_free(&s);
    ck_assert_ptr_null(s.api_key);
    unsetenv("GPT2D_API_KEY");
    const char *path = write_temp("model = x\napi-key = sk-file\n");
    EXPECT_ERROR("unknown option 'api-key'", NULL, "--config", path);
}
END_TEST

START_TEST(test_size_suffixes)
{
    static const struct {
        const char *text;
        size_t bytes;
    } cases[] = {
        { "1", 1 },
        { "4096", 4096 },
        { "512k", 512 * 1024 },
        { "3K", 3 * 1024 },
        { "1M", 1024 * 1024 },
        { "7m", 7 * 1024 * 1024 },
        { "1G", 1024UL * 1024 * 1024 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        settings s;
        LOAD_OK(&s, "-m", "x", "--max-body", cases[i].text);
        ck_assert_msg(s.max_body_bytes == cases[i].bytes, "%s -> %zu",
                      cases[i].text, s.max_body_bytes);
        settings_free(&s);
    }
}
END_TEST

START_TEST(test_empty_environment_variable_counts_as_unset)
{
    setenv("GPT2D_PORT", "", 1);
    setenv("GPT2D_MODEL", "/env", 1);
    settings s;
    LOAD_OK(&s, "--slots", "1");
    ck_assert_uint_eq(s.port, 8080);
    assert_one_model(&s, "/env");
    settings_free(&s);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_missing_model_is_an_error)
{
    EXPECT_ERROR("--model DIR (or --models-dir DIR) is required", NULL,
                 "--port", "1");
    settings s;
    gpt2d_error err;
    ck_assert_int_eq(load_args(&s, &err, (char *)NULL), SETTINGS_USAGE_ERROR);
    ck_assert_ptr_nonnull(strstr(err.message, "--model DIR (or --models-dir"));
    settings_free(&s);
}
END_TEST

START_TEST(test_each_bad_value_names_option_and_value)
{
    EXPECT_ERROR("--port", "'65536'", "-m", "x", "--port", "65536");
    EXPECT_ERROR("--port", "'-1'", "-m", "x", "--port", "-1");
    EXPECT_ERROR("--port", "'80a'", "-m", "x", "--port", "80a");
    EXPECT_ERROR("--port", "' 80'", "-m", "x", "--port", " 80");
    EXPECT_ERROR("--dtype", "'fp16'", "-m", "x", "--dtype", "fp16");
    EXPECT_ERROR("--kv-dtype", "'auto'", "-m", "x", "--kv-dtype", "auto");
    EXPECT_ERROR("--dtype", "'Float16'", "-m", "x", "--dtype", "Float16");
    EXPECT_ERROR("--matmul", "'openblas'", "-m", "x", "--matmul", "openblas");
    EXPECT_ERROR("--matmul blas", "--dtype float16", "-m", "x", "--matmul",
                 "blas", "--dtype", "float16");
    EXPECT_ERROR("--matmul blas", "--dtype int8", "-m", "x", "--matmul", "blas",
                 "--dtype", "int8");
    EXPECT_ERROR("--dtype", "'q8_0'", "-m", "x", "--dtype", "q8_0");
    EXPECT_ERROR("--threads", "'0'", "-m", "x", "--threads", "0");
    EXPECT_ERROR("--threads", "'two'", "-m", "x", "--threads", "two");
    EXPECT_ERROR("--slots", "'0'", "-m", "x", "--slots", "0");
    EXPECT_ERROR("--slots", "'99999999999999999999999'", "-m", "x", "--slots",
                 "99999999999999999999999");
    EXPECT_ERROR("--max-queue", "'0'", "-m", "x", "--max-queue", "0");
    EXPECT_ERROR("--max-batch-rows", "'0'", "-m", "x", "--max-batch-rows", "0");
    EXPECT_ERROR("--max-connections", "'0'", "-m", "x", "--max-connections",
                 "0");
    EXPECT_ERROR("--max-body", "'0'", "-m", "x", "--max-body", "0");
    EXPECT_ERROR("--max-body", "'12X'", "-m", "x", "--max-body", "12X");
    EXPECT_ERROR("--max-body", "'1MB'", "-m", "x", "--max-body", "1MB");
    EXPECT_ERROR("--max-body", "'k'", "-m", "x", "--max-body", "k");
    EXPECT_ERROR("--max-body", "'2G'", "-m", "x", "--max-body", "2G");
    EXPECT_ERROR("--max-body", "'18014398509481984G'", "-m", "x", "--max-body",
                 "18014398509481984G"); /* overflows 64 bits */
    EXPECT_ERROR("--timeout", "'-5'", "-m", "x", "--timeout", "-5");
    EXPECT_ERROR("--request-timeout", "'-1'", "-m", "x", "--request-timeout",
                 "-1");
    EXPECT_ERROR("--request-timeout", "'86401'", "-m", "x", "--request-timeout",
                 "86401");
    EXPECT_ERROR("--request-timeout", "'2.5'", "-m", "x", "--request-timeout",
                 "2.5");
    EXPECT_ERROR("--max-n", "'0'", "-m", "x", "--max-n", "0");
    EXPECT_ERROR("--max-n", "'1025'", "-m", "x", "--max-n", "1025");
    EXPECT_ERROR("--drain-timeout", "'1e3'", "-m", "x", "--drain-timeout",
                 "1e3");
    EXPECT_ERROR("--log-level", "'loud'", "-m", "x", "--log-level", "loud");
    EXPECT_ERROR("--log-prompts", "'maybe'", "-m", "x", "--log-prompts=maybe");
    EXPECT_ERROR("--tokens-per-minute-per-key", "'-1'", "-m", "x",
                 "--tokens-per-minute-per-key", "-1");
    EXPECT_ERROR("--trusted-proxy", "'10.0.0.0/33'", "-m", "x",
                 "--trusted-proxy", "127.0.0.1,10.0.0.0/33");
    EXPECT_ERROR("--trusted-proxy", "'proxy.local' is not an IPv4 or IPv6",
                 "-m", "x", "--trusted-proxy", "proxy.local");
    /* an origin a browser could never send would start a server no page can call */
    EXPECT_ERROR("--cors-origin", "not a list", "-m", "x", "--cors-origin",
                 "https://a.example, https://b.example");
    EXPECT_ERROR("--cors-origin", "not a list", "-m", "x", "--cors-origin",
                 "https://a.example,https://b.example");
    EXPECT_ERROR("--cors-origin", "no path", "-m", "x", "--cors-origin",
                 "https://a.example/");
    EXPECT_ERROR("--cors-origin", "no scheme", "-m", "x", "--cors-origin",
                 "a.example");
    EXPECT_ERROR("--cors-origin", "no scheme", "-m", "x", "--cors-origin",
                 "\r\nx-evil: 1");
    EXPECT_ERROR("--cors-origin", "character", "-m", "x", "--cors-origin",
                 "https://a.example\r\nx-evil: 1");
    EXPECT_ERROR("--cors-origin", "lowercase", "-m", "x", "--cors-origin",
                 "https://App.example");
    EXPECT_ERROR("--cors-origin", "no host", "-m", "x", "--cors-origin",
                 "https://");
    EXPECT_ERROR("--cors-origin", "port", "-m", "x", "--cors-origin",
                 "http://a.example:65536");
    EXPECT_ERROR("--cors-origin", "port", "-m", "x", "--cors-origin",
                 "http://a.example:");
    EXPECT_ERROR("--cors-origin", "default port", "-m", "x", "--cors-origin",
                 "https://a.example:443");
    EXPECT_ERROR("--cors-origin", "IPv6", "-m", "x", "--cors-origin",
                 "http://[::1");
    EXPECT_ERROR("--host", "needs a value", "-m", "x", "--host", "");
    EXPECT_ERROR("--model", "needs a value", "--model", "");
}
END_TEST

/* What a browser sends as Origin is accepted, as is "*". */
START_TEST(test_cors_origin_takes_an_origin_as_browsers_send_it)
{
    static const char *const good[] = {
        "*",
        "https://app.example",
        "http://localhost:3000",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
        "https://a-b.example.co.uk",
        "chrome-extension://abcdef",
        "https://a.example:8443",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        settings s;
        LOAD_OK(&s, "-m", "x", "--cors-origin", good[i]);
        ck_assert_str_eq(s.cors_origin, good[i]);
        settings_free(&s);
    }
}
END_TEST

START_TEST(test_bad_environment_value_names_the_variable)
{
    setenv("GPT2D_SLOTS", "none", 1);
    EXPECT_ERROR("GPT2D_SLOTS", "'none'", "-m", "x");
    unsetenv("GPT2D_SLOTS");
    setenv("GPT2D_LOG_LEVEL", "verbose", 1);
    EXPECT_ERROR("GPT2D_LOG_LEVEL", "'verbose'", "-m", "x");
}
END_TEST

START_TEST(test_flag_syntax_errors)
{
    EXPECT_ERROR("unrecognized option '--bogus'", NULL, "-m", "x", "--bogus");
    EXPECT_ERROR("unrecognized option '--bogus'", NULL, "-m", "x", "--bogus=1");
    EXPECT_ERROR("unrecognized option '-q'", NULL, "-m", "x", "-q");
    EXPECT_ERROR("option '--model' needs a value", NULL, "--model");
    EXPECT_ERROR("option '-m' needs a value", NULL, "-m");
    EXPECT_ERROR("unexpected argument 'extra'", NULL, "-m", "x", "extra");
    /* No abbreviations: an API key typed as --api-key must not become a
     * file name, and the same for any other prefix. */
    EXPECT_ERROR("unrecognized option '--api-key'", NULL, "-m", "x",
                 "--api-key", "sk-1");
    EXPECT_ERROR("unrecognized option '--mod'", NULL, "--mod", "x");
    EXPECT_ERROR("unrecognized option '--help-me'", NULL, "--help-me");
}
END_TEST

START_TEST(test_config_syntax_errors_carry_line_numbers)
{
    const char *p1 = write_temp(
        "# ok\nmodel = x\nthis line has no equals sign\n");
    EXPECT_ERROR(":3: expected 'name = value'", p1, "--config", p1);

    const char *p2 = write_temp("model = x\n\n\n\nprot = 80\n");
    EXPECT_ERROR(":5: unknown option 'prot'", p2, "--config", p2);

    const char *p3 = write_temp("= 80\n");
    EXPECT_ERROR(":1: missing option name", p3, "--config", p3);

    const char *p4 = write_temp("model = x\nport = 99999\n");
    EXPECT_ERROR(":2: port: '99999' is not a port", p4, "--config", p4);
}
END_TEST

START_TEST(test_config_file_cannot_name_flag_only_options)
{
    const char *p1 = write_temp("config = /etc/other.conf\n");
    EXPECT_ERROR(":1: 'config' cannot be set in a config file", NULL,
                 "--config", p1);
    const char *p2 = write_temp("model = x\nhelp = yes\n");
    EXPECT_ERROR(":2: 'help' cannot be set", NULL, "--config", p2);
}
END_TEST

START_TEST(test_missing_config_file_is_named)
{
    EXPECT_ERROR("/nonexistent/gpt2d.conf: No such file or directory", NULL,
                 "-m", "x", "--config", "/nonexistent/gpt2d.conf");
}
END_TEST

/* ---- help, version, example config ---- */

/* Runs settings_load with stdout redirected to a file; returns what it printed. */
static char *load_capturing_stdout(const char *arg, settings_result *r)
{
    const char *path = write_temp("");
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int fd = open(path, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    settings s;
    gpt2d_error err = { { 0 } };
    char *argv[] = { (char *)"gpt2d", (char *)arg, NULL };
    *r = settings_load(&s, 2, argv, &err);
    settings_free(&s);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);

    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_help_lists_every_option_with_its_variable)
{
    settings_result r;
    const char *text = load_capturing_stdout("--help", &r);
    ck_assert_int_eq(r, SETTINGS_EXIT_OK);
    ck_assert_ptr_nonnull(strstr(text, "Usage: gpt2d"));
    for (size_t i = 0; i < N_OPTION_NAMES; i++) {
        char flag[64], env[64];
        snprintf(flag, sizeof flag, "--%s", option_names[i]);
        env_name_of(option_names[i], env, sizeof env);
        ck_assert_msg(strstr(text, flag) != NULL, "--help lacks %s", flag);
        ck_assert_msg(strstr(text, env) != NULL, "--help lacks %s", env);
    }
    ck_assert_ptr_nonnull(strstr(text, "--version"));
    ck_assert_ptr_nonnull(strstr(text, "Default: 8080"));
    ck_assert_ptr_nonnull(strstr(text, "GPT2D_API_KEY "));
}
END_TEST

START_TEST(test_help_wins_over_missing_model)
{
    settings_result r;
    const char *text = load_capturing_stdout("-h", &r);
    ck_assert_int_eq(r, SETTINGS_EXIT_OK);
    ck_assert_ptr_nonnull(strstr(text, "--max-body"));
}
END_TEST

START_TEST(test_version_prints_package_string)
{
    settings_result r;
    const char *text = load_capturing_stdout("--version", &r);
    ck_assert_int_eq(r, SETTINGS_EXIT_OK);
    char want[128];
    snprintf(want, sizeof want, "%s\n", PACKAGE_STRING);
    ck_assert_str_eq(text, want);
}
END_TEST

/* Reads etc/gpt2d.conf from the source tree. */
static char *read_example_config(void)
{
    char path[4096];
    test_src_path(path, sizeof path, "etc/gpt2d.conf");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[32768];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* "# name = ...": a commented-out setting, not prose. */
static bool is_commented_setting(const char *line)
{
    if (strncmp(line, "# ", 2) != 0)
        return false;
    size_t name = strspn(line + 2, "abcdefghijklmnopqrstuvwxyz-");
    return name > 0 && strncmp(line + 2 + name, " = ", 3) == 0;
}

/* Every option is in the example, commented out as "# name = value"; with
 * the comment marks removed it parses, and (the two run-time defaults
 * aside) gives exactly the defaults. */
START_TEST(test_example_config_lists_every_option_with_its_default)
{
    const char *text = read_example_config();
    for (size_t i = 0; i < N_OPTION_NAMES; i++) {
        if (strcmp(option_names[i], "config") == 0)
            continue;
        char want[64];
        snprintf(want, sizeof want, "\n# %s = ", option_names[i]);
        ck_assert_msg(strstr(text, want) != NULL, "etc/gpt2d.conf lacks '%s'",
                      want + 1);
    }
    /* Uncomment the "# name = value" lines. */
    static char active[32768];
    size_t k = 0;
    for (const char *line = text; *line != '\0';) {
        size_t n = strcspn(line, "\n");
        n += line[n] == '\n';
        size_t skip = is_commented_setting(line) ? 2 : 0;
        memcpy(active + k, line + skip, n - skip);
        k += n - skip;
        line += n;
    }
    active[k] = '\0';
    const char *path = write_temp(active);
    settings s;
    LOAD_OK(&s, "--config", path);
    settings defaults;
    LOAD_OK(&defaults, "-m", "x");
    ck_assert_str_eq(s.host, defaults.host);
    ck_assert_uint_eq(s.port, defaults.port);
    ck_assert_uint_eq(s.slots, defaults.slots);
    ck_assert_uint_eq(s.max_queue, defaults.max_queue);
    ck_assert_uint_eq(s.max_batch_rows, defaults.max_batch_rows);
    ck_assert_uint_eq(s.max_body_bytes, defaults.max_body_bytes);
    ck_assert_uint_eq(s.max_connections, defaults.max_connections);
    ck_assert_uint_eq(s.connection_timeout, defaults.connection_timeout);
    ck_assert_uint_eq(s.request_timeout, defaults.request_timeout);
    ck_assert_uint_eq(s.max_n, defaults.max_n);
    ck_assert_uint_eq(s.prefill_share, defaults.prefill_share);
    ck_assert_uint_eq(s.step_cost, defaults.step_cost);
    ck_assert_uint_eq(s.inspect_max_tokens, defaults.inspect_max_tokens);
    ck_assert_uint_eq(s.inspect_max_attention, defaults.inspect_max_attention);
    ck_assert_int_eq(s.drain_ms, defaults.drain_ms);
    ck_assert_int_eq(s.log_prompts, defaults.log_prompts);
    ck_assert_int_eq(s.log_level, defaults.log_level);
    settings_free(&s);
    settings_free(&defaults);
}
END_TEST

START_TEST(test_example_config_as_shipped_loads)
{
    char path[4096];
    test_src_path(path, sizeof path, "etc/gpt2d.conf");
    settings s;
    LOAD_OK(&s, "-m", "x", "--config", path);
    ck_assert_uint_eq(s.port, 8080);
    settings_free(&s);
}
END_TEST

/* ---- log ---- */

/* Runs `fn` with stderr redirected to a file; returns what was written. */
static char *capture_stderr(void (*fn)(void))
{
    const char *path = write_temp("");
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void log_at_warn_level(void)
{
    log_set_level(LOG_LEVEL_WARN);
    log_info("hidden %d", 1);
    log_debug("hidden %d", 2);
    log_warn("slot %d evicted", 3);
    log_error("boom: %s", "multi\nline");
    log_set_level(LOG_LEVEL_INFO);
}

START_TEST(test_log_filters_by_level_and_writes_one_line_per_record)
{
    const char *out = capture_stderr(log_at_warn_level);
    ck_assert_ptr_null(strstr(out, "hidden"));
    const char *warn = strstr(out, "<4>");
    const char *error = strstr(out, "<3>");
    ck_assert_ptr_nonnull(warn);
    ck_assert_ptr_nonnull(error);
    ck_assert_ptr_eq(warn, out); /* the first record, at column 0 */
    ck_assert_ptr_nonnull(strstr(warn, "warn: slot 3 evicted\n<3>"));
    ck_assert_ptr_nonnull(strstr(error, "error: boom: multi line\n"));
    /* Exactly two lines: the newline inside the message was flattened. */
    size_t lines = 0;
    for (const char *p = out; *p != '\0'; p++)
        lines += *p == '\n';
    ck_assert_uint_eq(lines, 2);
    /* <4>YYYY-MM-DDTHH:MM:SS.mmmZ  (not running under journald) */
    ck_assert_uint_ge(strlen(out), 28);
    ck_assert_msg(out[7] == '-' && out[10] == '-' && out[13] == 'T' &&
                      out[16] == ':' && out[22] == '.' && out[26] == 'Z' &&
                      out[27] == ' ',
                  "no ISO-8601 UTC timestamp in '%.40s'", out);
}
END_TEST

static void log_huge_record(void)
{
    static char big[10000];
    memset(big, 'a', sizeof big - 1);
    log_info("%s", big);
}

START_TEST(test_log_cuts_an_oversized_record_to_one_marked_line)
{
    const char *out = capture_stderr(log_huge_record);
    size_t len = strlen(out);
    ck_assert_uint_le(len, 4096);
    ck_assert_ptr_eq(strchr(out, '\n'), out + len - 1);
    ck_assert_ptr_nonnull(strstr(out, "aaa...\n"));
}
END_TEST

/* A test case whose tests start from a clean environment and write their
 * files to its scratch directory. */
static TCase *settings_tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_checked_fixture(tc, setup, teardown);
    return tc;
}

static Suite *settings_suite(void)
{
    Suite *s = suite_create("settings");
    TCase *sources = settings_tcase("sources");
    tcase_add_test(sources, test_defaults_are_the_documented_ones);
    tcase_add_test(sources, test_config_file_sets_every_kind_of_value);
    tcase_add_test(sources, test_environment_overrides_config_file);
    tcase_add_test(sources, test_flags_override_environment_and_file);
    tcase_add_test(sources, test_later_flag_wins_and_equals_form_works);
    tcase_add_test(
        sources,
        test_models_accumulate_within_a_source_and_later_sources_replace);
    tcase_add_test(sources,
                   test_models_dir_alone_is_enough_and_models_options_parse);
    tcase_add_test(sources, test_config_file_named_by_environment);
    tcase_add_test(sources, test_boolean_flag_forms);
    tcase_add_test(sources, test_dtype_int8_from_flag_and_environment);
    tcase_add_test(sources, test_isa_from_flag_and_environment);
    tcase_add_test(sources, test_api_key_only_from_its_variable);
    tcase_add_test(sources, test_size_suffixes);
    tcase_add_test(sources, test_empty_environment_variable_counts_as_unset);
    suite_add_tcase(s, sources);

    TCase *errors = settings_tcase("errors");
    tcase_add_test(errors, test_missing_model_is_an_error);
    tcase_add_test(errors, test_each_bad_value_names_option_and_value);
    tcase_add_test(errors,
                   test_cors_origin_takes_an_origin_as_browsers_send_it);
    tcase_add_test(errors, test_bad_environment_value_names_the_variable);
    tcase_add_test(errors, test_isa_names_an_instruction_set_this_cpu_runs);
    tcase_add_test(errors, test_flag_syntax_errors);
    tcase_add_test(errors, test_config_syntax_errors_carry_line_numbers);
    tcase_add_test(errors, test_config_file_cannot_name_flag_only_options);
    tcase_add_test(errors, test_missing_config_file_is_named);
    suite_add_tcase(s, errors);

    TCase *docs = settings_tcase("docs");
    tcase_add_test(docs, test_help_lists_every_option_with_its_variable);
    tcase_add_test(docs, test_help_wins_over_missing_model);
    tcase_add_test(docs, test_version_prints_package_string);
    tcase_add_test(docs,
                   test_example_config_lists_every_option_with_its_default);
    tcase_add_test(docs, test_example_config_as_shipped_loads);
    suite_add_tcase(s, docs);

    TCase *log = settings_tcase("log");
    tcase_add_test(log,
                   test_log_filters_by_level_and_writes_one_line_per_record);
    tcase_add_test(log, test_log_cuts_an_oversized_record_to_one_marked_line);
    suite_add_tcase(s, log);
    return s;
}

int main(void)
{
    return test_run_suite(settings_suite());
}
