/* test_metrics.c — the registry renders valid Prometheus text (0.0.4),
 * counts exactly what was recorded, puts observations in the right
 * cumulative buckets, buckets labels into their closed sets, and loses no
 * increment when four threads record at once.
 *
 * The registry is process-global and has no reset (the daemon never wants
 * one), so every test compares a scrape after its observations with one
 * before: that holds with or without CK_FORK. */
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "test_util.h"

/* ---- a small parser for the text format ---- */

enum { MAX_SAMPLES = 512, MAX_FAMILIES = 96 };

typedef struct sample {
    char name[96];
    char labels[160]; /* as written, without braces: a="x",b="y" */
    double value;
} sample;

typedef struct family {
    char name[96];
    char type[256]; /* as large as the parsed word: no truncation */
    bool has_help;
} family;

typedef struct scrape {
    sample samples[MAX_SAMPLES];
    size_t n_samples;
    family families[MAX_FAMILIES];
    size_t n_families;
    char error[640];
} scrape;

static bool is_name_char(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && isdigit((unsigned char)c));
}

/* Reads a metric or label name at *p; false if there is none. */
static bool read_name(const char **p, char *out, size_t size)
{
    size_t n = 0;
    while (is_name_char((*p)[n], n == 0)) {
        if (n + 1 >= size)
            return false;
        out[n] = (*p)[n];
        n++;
    }
    out[n] = '\0';
    *p += n;
    return n > 0;
}

/* name="value" pairs separated by commas, up to the closing brace. */
static bool read_labels(const char **p, char *out, size_t size)
{
    const char *start = *p;
    const char *q = *p;
    char name[64];
    while (*q != '}') {
        if (!read_name(&q, name, sizeof name) || *q++ != '=' || *q++ != '"')
            return false;
        while (*q != '"') {
            if (*q == '\0' || *q == '\n')
                return false;
            if (*q == '\\' && (q[1] == '\\' || q[1] == '"' || q[1] == 'n'))
                q++;
            q++;
        }
        q++;
        if (*q == ',')
            q++;
        else if (*q != '}')
            return false;
    }
    size_t n = (size_t)(q - start);
    if (n >= size)
        return false;
    memcpy(out, start, n);
    out[n] = '\0';
    *p = q + 1;
    return true;
}

static bool read_value(const char *s, double *out)
{
    if (strcmp(s, "+Inf") == 0) {
        *out = INFINITY;
        return true;
    }
    if (strcmp(s, "-Inf") == 0) {
        *out = -INFINITY;
        return true;
    }
    if (strcmp(s, "NaN") == 0) {
        *out = NAN;
        return true;
    }
    char *end = NULL;
    *out = strtod(s, &end);
    return end != s && *end == '\0';
}

static family *find_family(scrape *sc, const char *name)
{
    for (size_t i = 0; i < sc->n_families; i++)
        if (strcmp(sc->families[i].name, name) == 0)
            return &sc->families[i];
    return NULL;
}

/* The family a sample belongs to: itself, or a histogram's base name. */
static family *family_of(scrape *sc, const char *sample_name)
{
    family *f = find_family(sc, sample_name);
    if (f != NULL)
        return f;
    static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(sample_name), k = strlen(suffixes[i]);
        if (n > k && strcmp(sample_name + n - k, suffixes[i]) == 0) {
            char base[96];
            snprintf(base, sizeof base, "%.*s", (int)(n - k), sample_name);
            f = find_family(sc, base);
            if (f != NULL && (strcmp(f->type, "histogram") == 0 ||
                              (i > 0 && strcmp(f->type, "summary") == 0)))
                return f;
        }
    }
    return NULL;
}

/* Records why the text is malformed; always returns false. */
static bool parse_fail(scrape *sc, size_t lineno, const char *why,
                       const char *what)
{
    snprintf(sc->error, sizeof sc->error, "line %zu: %s: %s", lineno, why,
             what);
    return false;
}

static bool parse_comment(scrape *sc, const char *line, size_t lineno)
{
    char kind[8], name[96], rest[256];
    int n = sscanf(line, "# %7s %95s %255[^\n]", kind, name, rest);
    if (n < 2 || (strcmp(kind, "HELP") != 0 && strcmp(kind, "TYPE") != 0))
        return true; /* other comments are allowed and ignored */
    bool is_type = strcmp(kind, "TYPE") == 0;
    family *f = find_family(sc, name);
    if (is_type) {
        if (n != 3)
            return parse_fail(sc, lineno, "TYPE without a type", name);
        if (f != NULL && f->type[0] != '\0')
            return parse_fail(sc, lineno, "second TYPE", name);
        if (strcmp(rest, "counter") != 0 && strcmp(rest, "gauge") != 0 &&
            strcmp(rest, "histogram") != 0 && strcmp(rest, "summary") != 0 &&
            strcmp(rest, "untyped") != 0)
            return parse_fail(sc, lineno, "bad type", rest);
    }
    if (f == NULL) {
        if (sc->n_families == MAX_FAMILIES)
            return parse_fail(sc, lineno, "too many families", name);
        f = &sc->families[sc->n_families++];
        snprintf(f->name, sizeof f->name, "%s", name);
    }
    if (is_type)
        snprintf(f->type, sizeof f->type, "%s", rest);
    else
        f->has_help = true;
    return true;
}

static bool parse_sample(scrape *sc, const char *line, size_t lineno)
{
    if (sc->n_samples == MAX_SAMPLES)
        return parse_fail(sc, lineno, "too many samples", line);
    sample *s = &sc->samples[sc->n_samples];
    const char *p = line;
    if (!read_name(&p, s->name, sizeof s->name))
        return parse_fail(sc, lineno, "no metric name", line);
    s->labels[0] = '\0';
    if (*p == '{') {
        p++;
        if (!read_labels(&p, s->labels, sizeof s->labels))
            return parse_fail(sc, lineno, "bad labels", line);
    }
    if (*p != ' ')
        return parse_fail(sc, lineno, "no space before the value", line);
    if (!read_value(p + 1, &s->value))
        return parse_fail(sc, lineno, "bad value", line);
    family *f = family_of(sc, s->name);
    if (f == NULL || f->type[0] == '\0')
        return parse_fail(sc, lineno, "sample before its TYPE", line);
    sc->n_samples++;
    return true;
}

/* Parses a whole exposition; false (with sc->error) on anything malformed. */
static bool parse(scrape *sc, const char *text)
{
    memset(sc, 0, sizeof *sc);
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return parse_fail(sc, 0, "text must end with a newline", "");
    size_t lineno = 0;
    for (const char *line = text; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        char buf[512];
        size_t n = (size_t)(nl - line);
        lineno++;
        if (n >= sizeof buf)
            return parse_fail(sc, lineno, "line too long", "");
        memcpy(buf, line, n);
        buf[n] = '\0';
        if (buf[0] == '#' ? !parse_comment(sc, buf, lineno)
                          : buf[0] != '\0' && !parse_sample(sc, buf, lineno))
            return false;
        line = nl + 1;
    }
    for (size_t i = 0; i < sc->n_families; i++)
        if (!sc->families[i].has_help || sc->families[i].type[0] == '\0')
            return parse_fail(sc, lineno, "family lacks HELP or TYPE",
                              sc->families[i].name);
    return true;
}

static void scrape_now(scrape *sc, const metrics_gauges *stats)
{
    char *text = metrics_render(stats);
    ck_assert_ptr_nonnull(text);
    bool ok = parse(sc, text);
    free(text);
    ck_assert_msg(ok, "%s", sc->error);
}

/* The value of one series; 0 when absent (an unseen labelled series). */
static double value_of(const scrape *sc, const char *name, const char *labels)
{
    for (size_t i = 0; i < sc->n_samples; i++)
        if (strcmp(sc->samples[i].name, name) == 0 &&
            strcmp(sc->samples[i].labels, labels) == 0)
            return sc->samples[i].value;
    return 0;
}

static bool has_series(const scrape *sc, const char *name)
{
    for (size_t i = 0; i < sc->n_samples; i++)
        if (strcmp(sc->samples[i].name, name) == 0)
            return true;
    return false;
}

/* Each of the n (name, type) families is in the scrape, with that type. */
static void assert_families(scrape *sc, const char *const families[][2],
                            size_t n)
{
    for (size_t i = 0; i < n; i++) {
        family *f = find_family(sc, families[i][0]);
        ck_assert_msg(f != NULL, "no family %s", families[i][0]);
        ck_assert_str_eq(f->type, families[i][1]);
    }
}

static bool has_labelled(const scrape *sc, const char *name, const char *labels)
{
    for (size_t i = 0; i < sc->n_samples; i++)
        if (strcmp(sc->samples[i].name, name) == 0 &&
            strcmp(sc->samples[i].labels, labels) == 0)
            return true;
    return false;
}

static double delta(const scrape *before, const scrape *after, const char *name,
                    const char *labels)
{
    return value_of(after, name, labels) - value_of(before, name, labels);
}

static scrape *scrape_new(void)
{
    scrape *sc = malloc(sizeof *sc);
    ck_assert_ptr_nonnull(sc);
    return sc;
}

/* Every histogram: le ascending, counts cumulative, +Inf last and equal to
 * _count. */
static void check_histogram_shape(const scrape *sc, const char *base)
{
    char bucket[128], count[128];
    snprintf(bucket, sizeof bucket, "%s_bucket", base);
    snprintf(count, sizeof count, "%s_count", base);
    double last_le = -INFINITY, last_n = 0;
    size_t n_buckets = 0;
    for (size_t i = 0; i < sc->n_samples; i++) {
        const sample *s = &sc->samples[i];
        if (strcmp(s->name, bucket) != 0)
            continue;
        double le = 0;
        ck_assert_msg(strncmp(s->labels, "le=\"", 4) == 0, "%s: %s", bucket,
                      s->labels);
        char v[32];
        snprintf(v, sizeof v, "%.*s", (int)strlen(s->labels) - 5,
                 s->labels + 4);
        ck_assert_msg(read_value(v, &le), "%s: bad le %s", bucket, v);
        ck_assert_msg(le > last_le, "%s: le %g after %g", bucket, le, last_le);
        ck_assert_msg(s->value >= last_n, "%s: counts not cumulative", bucket);
        last_le = le;
        last_n = s->value;
        n_buckets++;
    }
    ck_assert_msg(n_buckets >= 2, "%s: %zu buckets", base, n_buckets);
    ck_assert_msg(isinf(last_le), "%s: the last bucket is not +Inf", base);
    ck_assert_double_eq(last_n, value_of(sc, count, ""));
    char sum[128];
    snprintf(sum, sizeof sum, "%s_sum", base);
    ck_assert(has_series(sc, sum));
}

/* ---- tests ---- */

START_TEST(test_render_is_valid_exposition_text)
{
    metrics_request_done("completions", 200);
    metrics_observe_ttft(0.02);
    metrics_observe_token_latency(0.004);
    metrics_observe_batch_rows(17);
    metrics_observe_step(0.03);
    metrics_gauges st = {
        .queue_depth = 1, .running = 2, .slots_total = 4, .slots_busy = 2
    };
    scrape *sc = scrape_new();
    scrape_now(sc, &st);
    static const char *const families[][2] = {
        { "gpt2d_requests_total", "counter" },
        { "gpt2d_prompt_tokens_total", "counter" },
        { "gpt2d_generated_tokens_total", "counter" },
        { "gpt2d_cached_tokens_total", "counter" },
        { "gpt2d_requests_cancelled_total", "counter" },
        { "gpt2d_time_to_first_token_seconds", "histogram" },
        { "gpt2d_inter_token_latency_seconds", "histogram" },
        { "gpt2d_batch_rows", "histogram" },
        { "gpt2d_step_seconds", "histogram" },
        { "gpt2d_queue_depth", "gauge" },
        { "gpt2d_sequences_running", "gauge" },
        { "gpt2d_slots_total", "gauge" },
        { "gpt2d_slots_busy", "gauge" },
        { "gpt2d_kv_blocks", "gauge" },
        { "gpt2d_kv_blocks_reserved", "gauge" },
        { "gpt2d_kv_blocks_scored", "gauge" },
        { "gpt2d_kv_bytes", "gauge" },
        { "gpt2d_kv_sessions", "gauge" },
        { "gpt2d_kv_evictions_total", "counter" },
    };
    assert_families(sc, families, sizeof families / sizeof families[0]);
    check_histogram_shape(sc, "gpt2d_time_to_first_token_seconds");
    check_histogram_shape(sc, "gpt2d_inter_token_latency_seconds");
    check_histogram_shape(sc, "gpt2d_batch_rows");
    check_histogram_shape(sc, "gpt2d_step_seconds");
    free(sc);
}
END_TEST

START_TEST(test_gauges_report_engine_stats)
{
    metrics_gauges st = { .queue_depth = 7,
                          .running = 3,
                          .slots_total = 8,
                          .slots_busy = 3,
                          .kv_blocks_free = 60,
                          .kv_blocks_cached = 25,
                          .kv_blocks_in_use = 15,
                          .kv_blocks_reserved = 9,
                          .kv_blocks_scored = 4,
                          .kv_bytes = 12345,
                          .kv_sessions = 4,
                          .kv_evictions = 77,
                          .inspect_memory = 4096 };
    scrape *sc = scrape_new();
    scrape_now(sc, &st);
    ck_assert_double_eq(value_of(sc, "gpt2d_queue_depth", ""), 7);
    ck_assert_double_eq(value_of(sc, "gpt2d_inspect_memory_bytes", ""), 4096);
    ck_assert_double_eq(value_of(sc, "gpt2d_sequences_running", ""), 3);
    ck_assert_double_eq(value_of(sc, "gpt2d_slots_total", ""), 8);
    ck_assert_double_eq(value_of(sc, "gpt2d_slots_busy", ""), 3);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_blocks", "state=\"free\""), 60);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_blocks", "state=\"cached\""),
                        25);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_blocks", "state=\"in_use\""),
                        15);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_blocks_reserved", ""), 9);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_blocks_scored", ""), 4);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_bytes", "tier=\"ram\""), 12345);
    ck_assert(!has_series(sc, "gpt2d_kv_disk_blocks")); /* no disk tier */
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_sessions", ""), 4);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_evictions_total", ""), 77);
    free(sc);
}
END_TEST

START_TEST(test_models_series_are_labelled_by_model)
{
    const metrics_model models[] = {
        { .id = "gpt2-xl",
          .loaded = true,
          .loads = 2,
          .bytes = 7000,
          .queue_depth = 3,
          .running = 4,
          .kv_blocks_in_use = 50,
          .compute_seconds = 12.5 },
        { .id = "distilgpt2", .loaded = false, .loads = 1 },
    };
    metrics_gauges st = { .models = models,
                          .n_models = 2,
                          .models_memory = 7000,
                          .models_memory_max = 9000 };
    scrape *sc = scrape_new();
    scrape_now(sc, &st);
    const char *xl = "model=\"gpt2-xl\"", *distil = "model=\"distilgpt2\"";
    ck_assert_double_eq(value_of(sc, "gpt2d_models_memory_bytes", ""), 7000);
    ck_assert_double_eq(value_of(sc, "gpt2d_models_memory_max_bytes", ""),
                        9000);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_loaded", xl), 1);
    ck_assert(has_labelled(sc, "gpt2d_model_loaded", distil));
    ck_assert_double_eq(value_of(sc, "gpt2d_model_loaded", distil), 0);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_loads_total", xl), 2);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_loads_total", distil), 1);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_memory_bytes", xl), 7000);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_queue_depth", xl), 3);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_sequences_running", xl), 4);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_kv_blocks_in_use", xl), 50);
    ck_assert_double_eq(value_of(sc, "gpt2d_model_compute_seconds_total", xl),
                        12.5);
    const char *const families[][2] = {
        { "gpt2d_model_loaded", "gauge" },
        { "gpt2d_model_loads_total", "counter" },
        { "gpt2d_model_memory_bytes", "gauge" },
    };
    assert_families(sc, families, 3);
    free(sc);
}
END_TEST

START_TEST(test_disk_tier_series_report_its_stats)
{
    metrics_gauges st = { .slots_total = 1,
                          .kv_bytes = 100,
                          .kv_hit_tokens_ram = 5,
                          .kv_hit_tokens_disk = 6,
                          .kv_disk_slower = 2,
                          .kv_disk = true,
                          .disk = { .blocks = 3,
                                    .bytes = 300,
                                    .max_bytes = 1000,
                                    .writes = 7,
                                    .reads = 8,
                                    .evictions = 9,
                                    .write_skipped = 10,
                                    .write_errors = 11,
                                    .read_errors = 12,
                                    .foreign = 13 } };
    scrape *sc = scrape_new();
    scrape_now(sc, &st);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_bytes", "tier=\"disk\""), 300);
    ck_assert_double_eq(
        value_of(sc, "gpt2d_kv_hit_tokens_total", "tier=\"ram\""), 5);
    ck_assert_double_eq(
        value_of(sc, "gpt2d_kv_hit_tokens_total", "tier=\"disk\""), 6);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_blocks", ""), 3);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_max_bytes", ""), 1000);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_writes_total", ""), 7);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_reads_total", ""), 8);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_evictions_total", ""), 9);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_write_skipped_total", ""),
                        10);
    ck_assert_double_eq(
        value_of(sc, "gpt2d_kv_disk_errors_total", "op=\"write\""), 11);
    ck_assert_double_eq(
        value_of(sc, "gpt2d_kv_disk_errors_total", "op=\"read\""), 12);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_foreign_files", ""), 13);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_disk_slower_total", ""), 2);
    free(sc);
}
END_TEST

/* How the KV tiers are shared between accounts: per tier, and the disk's
 * series only with a disk tier. */
START_TEST(test_kv_sharing_series_report_each_tier)
{
    metrics_gauges st = { .slots_total = 1,
                          .kv_share = { .accounts = 3,
                                        .share_blocks = 85,
                                        .evicted_own = 1,
                                        .evicted_over = 2,
                                        .evicted_under = 3 },
                          .kv_sessions_forgotten = 4 };
    scrape *sc = scrape_new();
    scrape_now(sc, &st);
    static const char *const families[][2] = {
        { "gpt2d_kv_accounts", "gauge" },
        { "gpt2d_kv_share_blocks", "gauge" },
        { "gpt2d_kv_evictions_by_account_total", "counter" },
        { "gpt2d_kv_sessions_forgotten_total", "counter" },
    };
    assert_families(sc, families, sizeof families / sizeof families[0]);
    const char *name = "gpt2d_kv_evictions_by_account_total";
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_accounts", "tier=\"ram\""), 3);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_share_blocks", "tier=\"ram\""),
                        85);
    ck_assert_double_eq(value_of(sc, name, "tier=\"ram\",from=\"own\""), 1);
    ck_assert_double_eq(value_of(sc, name, "tier=\"ram\",from=\"over_share\""),
                        2);
    ck_assert_double_eq(value_of(sc, name, "tier=\"ram\",from=\"under_share\""),
                        3);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_sessions_forgotten_total", ""),
                        4);
    ck_assert(!has_labelled(sc, "gpt2d_kv_accounts", "tier=\"disk\""));
    ck_assert(!has_labelled(sc, name, "tier=\"disk\",from=\"own\""));
    free(sc);
    st.kv_disk = true;
    st.disk.share = (metrics_kv_share){ .accounts = 2,
                                        .share_blocks = 500,
                                        .evicted_own = 5,
                                        .evicted_over = 6,
                                        .evicted_under = 7 };
    sc = scrape_new();
    scrape_now(sc, &st);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_accounts", "tier=\"disk\""), 2);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_share_blocks", "tier=\"disk\""),
                        500);
    ck_assert_double_eq(value_of(sc, name, "tier=\"disk\",from=\"own\""), 5);
    ck_assert_double_eq(value_of(sc, name, "tier=\"disk\",from=\"over_share\""),
                        6);
    ck_assert_double_eq(
        value_of(sc, name, "tier=\"disk\",from=\"under_share\""), 7);
    ck_assert_double_eq(value_of(sc, "gpt2d_kv_accounts", "tier=\"ram\""), 3);
    free(sc);
}
END_TEST

START_TEST(test_gauges_absent_without_engine_stats)
{
    scrape *sc = scrape_new();
    scrape_now(sc, NULL);
    ck_assert(!has_series(sc, "gpt2d_queue_depth"));
    ck_assert(!has_series(sc, "gpt2d_slots_total"));
    ck_assert(has_series(sc, "gpt2d_generated_tokens_total"));
    free(sc);
}
END_TEST

START_TEST(test_token_counters_add_exactly)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_add_prompt_tokens(100);
    metrics_add_prompt_tokens(23);
    metrics_add_generated_tokens(16);
    metrics_add_cached_tokens(64);
    metrics_add_cached_tokens(0);
    metrics_cancelled();
    metrics_cancelled();
    metrics_add_inspect_bytes(1000);
    metrics_add_inspect_bytes(234);
    scrape_now(b, NULL);
    ck_assert_double_eq(delta(a, b, "gpt2d_inspect_bytes_total", ""), 1234);
    ck_assert_double_eq(delta(a, b, "gpt2d_prompt_tokens_total", ""), 123);
    ck_assert_double_eq(delta(a, b, "gpt2d_generated_tokens_total", ""), 16);
    ck_assert_double_eq(delta(a, b, "gpt2d_cached_tokens_total", ""), 64);
    ck_assert_double_eq(delta(a, b, "gpt2d_requests_cancelled_total", ""), 2);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_requests_are_labelled_by_endpoint_and_code)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    for (int i = 0; i < 3; i++)
        metrics_request_done("completions", 200);
    metrics_request_done("tokenize", 400);
    metrics_request_done("sessions", 409);
    metrics_request_done("completions", 429);
    metrics_request_done("completions", 499);
    metrics_request_done("preflight", 204);
    scrape_now(b, NULL);
    const char *m = "gpt2d_requests_total";
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"completions\",code=\"200\""),
                        3);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"tokenize\",code=\"400\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"sessions\",code=\"409\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"completions\",code=\"429\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"completions\",code=\"499\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"preflight\",code=\"204\""),
                        1);
    ck_assert_double_eq(
        delta(a, b, m, "endpoint=\"completions\",code=\"other\""), 0);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"other\",code=\"other\""), 0);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"tokenize\",code=\"200\""),
                        0);
    free(a);
    free(b);
}
END_TEST

/* Per-key series are labelled by the keys file's names; keys without one
 * and callers without keys share key="-" (id 0), and an id that was never
 * handed out counts there too. */
START_TEST(test_key_series_are_labelled_by_name)
{
    size_t alice = metrics_key_id("alice"), bob = metrics_key_id("bob.b-2_x");
    ck_assert_uint_gt(alice, 0);
    ck_assert_uint_gt(bob, 0);
    ck_assert_uint_ne(alice, bob);
    ck_assert_uint_eq(metrics_key_id("alice"),
                      alice); /* the same after a reload */
    ck_assert_uint_eq(metrics_key_id(NULL), 0);
    ck_assert_uint_eq(metrics_key_id(""), 0);
    char too_long[METRICS_KEY_NAME_MAX + 2];
    memset(too_long, 'x', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    ck_assert_uint_eq(metrics_key_id(too_long), 0);
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_key_request(alice);
    metrics_key_request(alice);
    metrics_key_request(bob);
    metrics_key_request(0);
    metrics_key_request(METRICS_MAX_KEYS + 5);
    metrics_key_tokens(alice, 12, 30);
    metrics_key_tokens(bob, 5, 0);
    metrics_key_refused(alice, METRICS_REFUSED_TOKEN_BUDGET);
    metrics_key_refused(alice, METRICS_REFUSED_TOKEN_BUDGET);
    metrics_key_refused(bob, METRICS_REFUSED_MAX_QUEUED);
    metrics_key_refused(0, METRICS_REFUSED_QUEUE_FULL);
    metrics_key_queue_wait(alice, 0.25);
    metrics_key_queue_wait(alice, 0.5);
    scrape_now(b, NULL);
    const char *req = "gpt2d_key_requests_total",
               *tok = "gpt2d_key_tokens_total",
               *ref = "gpt2d_key_refused_total";
    ck_assert_double_eq(delta(a, b, req, "key=\"alice\""), 2);
    ck_assert_double_eq(delta(a, b, req, "key=\"bob.b-2_x\""), 1);
    ck_assert_double_eq(delta(a, b, req, "key=\"-\""), 2);
    ck_assert_double_eq(delta(a, b, tok, "key=\"alice\",kind=\"prompt\""), 12);
    ck_assert_double_eq(delta(a, b, tok, "key=\"alice\",kind=\"completion\""),
                        30);
    ck_assert_double_eq(delta(a, b, tok, "key=\"bob.b-2_x\",kind=\"prompt\""),
                        5);
    ck_assert_double_eq(
        delta(a, b, ref, "key=\"alice\",reason=\"token_budget\""), 2);
    ck_assert_double_eq(
        delta(a, b, ref, "key=\"bob.b-2_x\",reason=\"max_queued_per_key\""), 1);
    ck_assert_double_eq(delta(a, b, ref, "key=\"-\",reason=\"queue_full\""), 1);
    ck_assert_double_eq(
        delta(a, b, "gpt2d_key_queue_wait_seconds_sum", "key=\"alice\""), 0.75);
    ck_assert_double_eq(
        delta(a, b, "gpt2d_key_queue_wait_seconds_count", "key=\"alice\""), 2);
    static const char *const families[][2] = {
        { "gpt2d_key_requests_total", "counter" },
        { "gpt2d_key_tokens_total", "counter" },
        { "gpt2d_key_refused_total", "counter" },
        { "gpt2d_key_queue_wait_seconds", "summary" },
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        family *f = find_family(b, families[i][0]);
        ck_assert_msg(f != NULL, "no family %s", families[i][0]);
        ck_assert_str_eq(f->type, families[i][1]);
    }
    free(a);
    free(b);
}
END_TEST

/* The label set is bounded: past METRICS_MAX_KEYS names, a new name counts
 * under "-", and the names registered before keep their ids.  (Runs last:
 * it fills the process-wide table.) */
START_TEST(test_key_names_are_bounded)
{
    size_t alice = metrics_key_id("alice");
    size_t got = 0;
    char name[32];
    for (size_t i = 0; i < METRICS_MAX_KEYS + 10; i++) {
        snprintf(name, sizeof name, "bound-%zu", i);
        got += metrics_key_id(name) != 0;
    }
    ck_assert_uint_lt(got, METRICS_MAX_KEYS);
    ck_assert_uint_eq(metrics_key_id("a-name-never-seen"), 0);
    ck_assert_uint_eq(metrics_key_id("alice"), alice);
    ck_assert_uint_eq(metrics_key_id("bound-0"), metrics_key_id("bound-0"));
    ck_assert_uint_gt(metrics_key_id("bound-0"), 0);
}
END_TEST

/* The HTTP layer may pass its route paths rather than bare names. */
START_TEST(test_route_paths_count_under_their_endpoint)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_request_done("/v1/completions", 200);
    metrics_request_done("/v1/chat/completions", 200);
    metrics_request_done("/v1/inspect", 400);
    metrics_request_done("/v1/models/{id}", 404);
    metrics_request_done("/v1/sessions/{id}", 409);
    metrics_request_done("/tokenize", 200);
    metrics_request_done("/metrics", 200);
    metrics_request_done("/v1/completionsX", 200);
    metrics_request_done("static", 200);
    scrape_now(b, NULL);
    const char *m = "gpt2d_requests_total";
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"completions\",code=\"200\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"chat\",code=\"200\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"inspect\",code=\"400\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"models\",code=\"404\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"sessions\",code=\"409\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"tokenize\",code=\"200\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"metrics\",code=\"200\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"other\",code=\"200\""), 2);
    free(a);
    free(b);
}
END_TEST

/* Label values come from closed sets, so a client can't mint new series. */
START_TEST(test_unknown_endpoint_and_code_fall_into_other)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_request_done("/etc/passwd\"}", 200);
    metrics_request_done(NULL, 404);
    metrics_request_done("models", 418);
    metrics_request_done("health", 302);
    scrape_now(b, NULL);
    const char *m = "gpt2d_requests_total";
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"other\",code=\"200\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"other\",code=\"404\""), 1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"models\",code=\"other\""),
                        1);
    ck_assert_double_eq(delta(a, b, m, "endpoint=\"health\",code=\"other\""),
                        1);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_ttft_observations_land_in_cumulative_buckets)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_observe_ttft(0.003); /* <= 0.005 */
    metrics_observe_ttft(0.01);  /* exactly a bound: le is inclusive */
    metrics_observe_ttft(0.3);   /* <= 0.5 */
    metrics_observe_ttft(20.0);  /* past the last bound: +Inf only */
    scrape_now(b, NULL);
    const char *m = "gpt2d_time_to_first_token_seconds_bucket";
    ck_assert_double_eq(delta(a, b, m, "le=\"0.005\""), 1);
    ck_assert_double_eq(delta(a, b, m, "le=\"0.01\""), 2);
    ck_assert_double_eq(delta(a, b, m, "le=\"0.25\""), 2);
    ck_assert_double_eq(delta(a, b, m, "le=\"0.5\""), 3);
    ck_assert_double_eq(delta(a, b, m, "le=\"10\""), 3);
    ck_assert_double_eq(delta(a, b, m, "le=\"+Inf\""), 4);
    ck_assert_double_eq(
        delta(a, b, "gpt2d_time_to_first_token_seconds_count", ""), 4);
    ck_assert_double_eq_tol(
        delta(a, b, "gpt2d_time_to_first_token_seconds_sum", ""), 20.313, 1e-6);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_token_latency_and_batch_rows_histograms)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_observe_token_latency(0.0005);
    metrics_observe_token_latency(0.015);
    metrics_observe_batch_rows(1);
    metrics_observe_batch_rows(3);
    metrics_observe_batch_rows(256);
    metrics_observe_batch_rows(5000);
    scrape_now(b, NULL);
    const char *l = "gpt2d_inter_token_latency_seconds_bucket";
    ck_assert_double_eq(delta(a, b, l, "le=\"0.001\""), 1);
    ck_assert_double_eq(delta(a, b, l, "le=\"0.01\""), 1);
    ck_assert_double_eq(delta(a, b, l, "le=\"0.02\""), 2);
    ck_assert_double_eq(delta(a, b, l, "le=\"+Inf\""), 2);
    ck_assert_double_eq_tol(
        delta(a, b, "gpt2d_inter_token_latency_seconds_sum", ""), 0.0155, 1e-9);
    const char *r = "gpt2d_batch_rows_bucket";
    ck_assert_double_eq(delta(a, b, r, "le=\"1\""), 1);
    ck_assert_double_eq(delta(a, b, r, "le=\"2\""), 1);
    ck_assert_double_eq(delta(a, b, r, "le=\"4\""), 2);
    ck_assert_double_eq(delta(a, b, r, "le=\"256\""), 3);
    ck_assert_double_eq(delta(a, b, r, "le=\"1024\""), 3);
    ck_assert_double_eq(delta(a, b, r, "le=\"+Inf\""), 4);
    ck_assert_double_eq(delta(a, b, "gpt2d_batch_rows_sum", ""), 5260);
    ck_assert_double_eq(delta(a, b, "gpt2d_batch_rows_count", ""), 4);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_step_seconds_histogram)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_observe_step(0.004);
    metrics_observe_step(0.016);
    metrics_observe_step(0.03);
    metrics_observe_step(7.0);
    scrape_now(b, NULL);
    const char *h = "gpt2d_step_seconds_bucket";
    ck_assert_double_eq(delta(a, b, h, "le=\"0.005\""), 1);
    ck_assert_double_eq(delta(a, b, h, "le=\"0.015\""), 1);
    ck_assert_double_eq(delta(a, b, h, "le=\"0.02\""), 2);
    ck_assert_double_eq(delta(a, b, h, "le=\"0.035\""), 3);
    ck_assert_double_eq(delta(a, b, h, "le=\"2.5\""), 3);
    ck_assert_double_eq(delta(a, b, h, "le=\"+Inf\""), 4);
    ck_assert_double_eq_tol(delta(a, b, "gpt2d_step_seconds_sum", ""), 7.05,
                            1e-9);
    ck_assert_double_eq(delta(a, b, "gpt2d_step_seconds_count", ""), 4);
    free(a);
    free(b);
}
END_TEST

/* A clock step backwards or a NaN must not wrap the sum or vanish. */
START_TEST(test_negative_or_nan_latency_counts_without_corrupting_sum)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    metrics_observe_token_latency(-0.5);
    metrics_observe_token_latency(NAN);
    scrape_now(b, NULL);
    const char *base = "gpt2d_inter_token_latency_seconds";
    ck_assert_double_eq(
        delta(a, b, "gpt2d_inter_token_latency_seconds_count", ""), 2);
    ck_assert_double_eq(
        delta(a, b, "gpt2d_inter_token_latency_seconds_bucket", "le=\"0.001\""),
        1); /* -0.5 is in the lowest */
    ck_assert_double_eq(
        delta(a, b, "gpt2d_inter_token_latency_seconds_sum", ""), 0);
    check_histogram_shape(b, base);
    free(a);
    free(b);
}
END_TEST

enum { N_THREADS = 4, N_ROUNDS = 20000 };

static void *record_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < N_ROUNDS; i++) {
        metrics_request_done("detokenize", 200);
        metrics_add_generated_tokens(3);
        metrics_observe_batch_rows(8);
        metrics_observe_ttft(0.001);
    }
    return NULL;
}

START_TEST(test_concurrent_increments_from_four_threads_sum_exactly)
{
    scrape *a = scrape_new(), *b = scrape_new();
    scrape_now(a, NULL);
    pthread_t threads[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_create(&threads[i], NULL, record_many, NULL),
                         0);
    for (int i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    scrape_now(b, NULL);
    const double total = (double)N_THREADS * N_ROUNDS;
    ck_assert_double_eq(delta(a, b, "gpt2d_requests_total",
                              "endpoint=\"detokenize\",code=\"200\""),
                        total);
    ck_assert_double_eq(delta(a, b, "gpt2d_generated_tokens_total", ""),
                        3 * total);
    ck_assert_double_eq(delta(a, b, "gpt2d_batch_rows_bucket", "le=\"8\""),
                        total);
    ck_assert_double_eq(delta(a, b, "gpt2d_batch_rows_sum", ""), 8 * total);
    ck_assert_double_eq(
        delta(a, b, "gpt2d_time_to_first_token_seconds_count", ""), total);
    ck_assert_double_eq_tol(
        delta(a, b, "gpt2d_time_to_first_token_seconds_sum", ""), 0.001 * total,
        1e-6);
    free(a);
    free(b);
}
END_TEST

/* The parser itself must refuse what Prometheus would, or the tests above
 * prove nothing. */
START_TEST(test_parser_rejects_malformed_text)
{
    static const char *const bad[] = {
        "# HELP x a help\nx 1\n",                   /* no TYPE */
        "# HELP x h\n# TYPE x counter\nx 1x\n",     /* bad value */
        "# HELP x h\n# TYPE x counter\nx{a=b} 1\n", /* unquoted label */
        "# HELP x h\n# TYPE x counter\nx 1",        /* no final newline */
        "# HELP x h\n# TYPE x counter\n# TYPE x gauge\nx 1\n",
        "# HELP h h\n# TYPE h counter\nh_bucket{le=\"1\"} 1\n", /* not a histogram */
    };
    scrape *sc = scrape_new();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!parse(sc, bad[i]), "accepted case %zu", i);
    free(sc);
}
END_TEST

START_TEST(test_parser_accepts_labels_and_special_values)
{
    scrape *sc = scrape_new();
    ck_assert(parse(sc,
                    "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\n"
                    "h_sum 1.5e-3\nh_count 2\n# HELP g g\n# TYPE g gauge\n"
                    "g{a=\"x\\\"y\",b=\"z\"} NaN\n"));
    ck_assert_uint_eq(sc->n_samples, 4);
    ck_assert_str_eq(sc->samples[3].labels, "a=\"x\\\"y\",b=\"z\"");
    ck_assert_double_eq_tol(value_of(sc, "h_sum", ""), 1.5e-3, 1e-12);
    free(sc);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *render = tcase_create("render");
    tcase_add_test(render, test_render_is_valid_exposition_text);
    tcase_add_test(render, test_gauges_report_engine_stats);
    tcase_add_test(render, test_models_series_are_labelled_by_model);
    tcase_add_test(render, test_gauges_absent_without_engine_stats);
    tcase_add_test(render, test_disk_tier_series_report_its_stats);
    tcase_add_test(render, test_kv_sharing_series_report_each_tier);
    suite_add_tcase(s, render);

    TCase *counts = tcase_create("counts");
    tcase_add_test(counts, test_token_counters_add_exactly);
    tcase_add_test(counts, test_requests_are_labelled_by_endpoint_and_code);
    tcase_add_test(counts, test_unknown_endpoint_and_code_fall_into_other);
    tcase_add_test(counts, test_route_paths_count_under_their_endpoint);
    tcase_add_test(counts, test_ttft_observations_land_in_cumulative_buckets);
    tcase_add_test(counts, test_token_latency_and_batch_rows_histograms);
    tcase_add_test(counts, test_step_seconds_histogram);
    tcase_add_test(counts,
                   test_negative_or_nan_latency_counts_without_corrupting_sum);
    tcase_add_test(counts,
                   test_concurrent_increments_from_four_threads_sum_exactly);
    tcase_add_test(counts, test_key_series_are_labelled_by_name);
    tcase_add_test(counts, test_key_names_are_bounded);
    suite_add_tcase(s, counts);

    TCase *parser = tcase_create("parser");
    tcase_add_test(parser, test_parser_accepts_labels_and_special_values);
    tcase_add_test(parser, test_parser_rejects_malformed_text);
    suite_add_tcase(s, parser);
    return s;
}

int main(void)
{
    return test_run_suite(metrics_suite());
}
