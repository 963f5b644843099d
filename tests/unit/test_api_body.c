/* test_api_body.c — /tokenize and /detokenize without sockets: their
 * answers, made piece by piece from the ids (api_body), are byte for byte
 * the JSON the endpoints rendered whole before (jansson's serialiser over
 * api_json_string_bytes), whatever the ids — pieces of characters, control
 * characters, quotes — and however the reader's blocks fall; the
 * endpoints run on the work pool, charge their answers to it until they
 * are freed, and are refused with the reason when a caller's share is
 * held. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_body.h"
#include "api/api_caller.h"
#include "api/api_ctx.h"
#include "api/api_endpoints.h"
#include "core/metrics.h"
#include "test_api_util.h"
#include "test_tiny.h"

static tokenizer *tok;

static void load_tokenizer(void)
{
    tok = test_load_tokenizer();
}

static void free_tokenizer(void)
{
    tokenizer_free(tok);
    tok = NULL;
}

/* The endpoints answer from a model's tokenizer: the tiny model's. */
static settings models_cfg;
static fleet *models;

static void load_models(void)
{
    models = test_tiny_fleet(&models_cfg);
}

static void free_models(void)
{
    fleet_free(models);
    settings_free(&models_cfg);
    models = NULL;
}

/* The whole answer, read `block` bytes at a time. */
static char *read_all(api_body *b, size_t block, size_t *len)
{
    size_t want = api_body_length(b);
    char *out = malloc(want + block + 1);
    ck_assert_ptr_nonnull(out);
    size_t got = 0, n;
    while ((n = api_body_read(b, out + got, block)) > 0) {
        ck_assert_uint_le(n, block);
        got += n;
        ck_assert_uint_le(got, want);
    }
    ck_assert_uint_eq(got, want);
    out[got] = '\0';
    *len = got;
    return out;
}

/* What the endpoints sent before: the JSON of the whole, serialised. */
static char *whole_json(json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    ck_assert_ptr_nonnull(text);
    return text;
}

static char *whole_token_list(const int32_t *ids, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    return whole_json(json_pack("{s:o}", "tokens", arr));
}

static char *whole_content(const int32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    gpt2d_error err;
    ck_assert_int_eq(tokenizer_decode(tok, ids, n, &text, &len, &err), 0);
    json_t *s = api_json_string_bytes(text, len);
    free(text);
    return whole_json(json_pack("{s:o}", "content", s));
}

static int32_t *copy_ids(const int32_t *ids, size_t n)
{
    int32_t *c = malloc((n > 0 ? n : 1) * sizeof *c);
    ck_assert_ptr_nonnull(c);
    if (n > 0)
        memcpy(c, ids, n * sizeof *c);
    return c;
}

/* Checks both bodies of ids[0, n) against the whole JSON, read in blocks
 * of several sizes (1 byte: every piece is cut). */
static void check_bodies(const int32_t *ids, size_t n)
{
    static const size_t blocks[] = { 1, 7, 100, 16384 };
    char *want_list = whole_token_list(ids, n),
         *want_text = whole_content(ids, n);
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        size_t len;
        api_body *b = api_body_token_list(copy_ids(ids, n), n);
        ck_assert_ptr_nonnull(b);
        char *got = read_all(b, blocks[k], &len);
        ck_assert_uint_eq(len, strlen(want_list));
        ck_assert_str_eq(got, want_list);
        free(got);
        api_body_free(b);

        b = api_body_content(tok, copy_ids(ids, n), n);
        ck_assert_ptr_nonnull(b);
        got = read_all(b, blocks[k], &len);
        ck_assert_uint_eq(len, strlen(want_text));
        ck_assert_msg(memcmp(got, want_text, len) == 0,
                      "%zu ids, block %zu:\n got %.300s\nwant %.300s", n,
                      blocks[k], got, want_text);
        free(got);
        api_body_free(b);
    }
    free(want_list);
    free(want_text);
}

START_TEST(test_bodies_are_the_json_of_the_whole)
{
    /* nothing; one token; text with every escape JSON has */
    check_bodies(NULL, 0);
    check_bodies((const int32_t[]){ 15496 }, 1);
    int32_t *ids;
    size_t n;
    gpt2d_error err;
    static const char special[] =
        "say \"hi\" \\ to\ttabs\nand\r\b\f \x01\x1f\x7f done";
    ck_assert_int_eq(
        tokenizer_encode(tok, special, sizeof special - 1, &ids, &n, &err), 0);
    check_bodies(ids, n);
    free(ids);
}
END_TEST

START_TEST(test_text_of_character_pieces_renders_as_the_decoder_does)
{
    /* Byte tokens: "é" split across ids, a lead byte cut short by ASCII,
     * a stray continuation byte, a surrogate's bytes, and a text that ends
     * inside a character. */
    static const char *texts[] = {
        "caf\xc3\xa9",
        "\xe2\x82"
        "a",
        "\x80"
        "b",
        "\xed\xa0\x80",
        "end \xe2\x82",
        "\xf0\x9f\x98\x80\xf0\x9f",
        "\xc3\"\xc3\\\xc3\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids;
        size_t n;
        gpt2d_error err;
        ck_assert_int_eq(
            tokenizer_encode(tok, texts[i], strlen(texts[i]), &ids, &n, &err),
            0);
        check_bodies(ids, n);
        free(ids);
    }
}
END_TEST

START_TEST(test_random_ids_render_as_the_whole)
{
    /* ids anywhere in the vocabulary: the pieces of characters GPT-2 has
     * as tokens land next to whole ones, and control characters among
     * them */
    uint64_t state = 42;
    size_t rounds = test_count(200, 20);
    for (size_t r = 0; r < rounds; r++) {
        size_t n = 1 + r % 97;
        int32_t ids[97];
        for (size_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            /* every third id among the 256 byte tokens: pieces and controls */
            ids[i] = (int32_t)((state >> 33) % (i % 3 == 0 ? 256 : 50257));
        }
        check_bodies(ids, n);
    }
}
END_TEST

/* ---- the endpoints on a work pool ---- */

static workpool *work;

static void start_pool(size_t memory, unsigned wait_ms)
{
    gpt2d_error err;
    ck_assert_msg(workpool_start(&work, 1, memory, wait_ms, &err) == 0, "%s",
                  err.message);
}

static size_t memory_used(void)
{
    workpool_stats st;
    workpool_get_stats(work, &st);
    return st.memory_used;
}

static void stop_pool(void)
{
    ck_assert_uint_eq(memory_used(), 0);
    workpool_stop(work);
    work = NULL;
}

static api_caller caller(const char *address)
{
    api_caller who;
    api_caller_of_address(&who, address);
    return who;
}

/* The body of a 200 (an api_body, the response's source) or of an error,
 * as text. */
static char *answer_text(api_response *r)
{
    if (r->source.read == NULL) {
        ck_assert_ptr_nonnull(r->body);
        return strdup(r->body);
    }
    ck_assert(!r->source.live);
    const size_t want = r->source.length, block = 4096;
    char *out = malloc(want + block + 1);
    ck_assert_ptr_nonnull(out);
    size_t got = 0;
    ssize_t n;
    while ((n = api_response_read(r, out + got, block, NULL)) > 0) {
        ck_assert_uint_le((size_t)n, block);
        got += (size_t)n;
        ck_assert_uint_le(got, want);
    }
    ck_assert_int_eq(n, API_SOURCE_END);
    ck_assert_uint_eq(got, want);
    out[got] = '\0';
    return out;
}

START_TEST(test_tokenize_answers_from_the_pool_and_holds_its_charge)
{
    start_pool((size_t)64 << 20, 60000);
    api_ctx ctx = { .models = models, .work = work };
    api_caller who = caller("10.0.0.1");
    static const char body[] = "{\"content\": \"Hello world\"}";
    api_response r = { 0 };
    api_tokenize(&ctx, &who, body, strlen(body), NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "application/json");
    ck_assert(r.source.read != NULL);
    /* until the answer is freed, its two ids are charged */
    ck_assert_uint_eq(memory_used(), api_body_bytes(2));
    char *text = answer_text(&r);
    ck_assert_str_eq(text, "{\"tokens\":[15496,995]}");
    free(text);
    api_response_free(&r);
    ck_assert_uint_eq(memory_used(), 0);

    static const char ids[] = "{\"tokens\": [15496, 995, 0]}";
    api_response d = { 0 };
    api_detokenize(&ctx, &who, ids, strlen(ids), NULL, &d);
    ck_assert_int_eq(d.status, 200);
    ck_assert_uint_eq(memory_used(), api_body_bytes(3));
    text = answer_text(&d);
    ck_assert_str_eq(text, "{\"content\":\"Hello world!\"}");
    free(text);
    api_response_free(&d);
    stop_pool();
}
END_TEST

START_TEST(test_bad_bodies_are_400s_that_hold_nothing)
{
    start_pool((size_t)64 << 20, 60000);
    api_ctx ctx = { .models = models, .work = work };
    api_caller who = caller("10.0.0.1");
    static const struct {
        bool tokenize;
        const char *body, *param;
    } cases[] = {
        { true, "{\"content\": 5}", "content" },
        { true, "not json", "" },
        { false, "{\"tokens\": [1, 50257]}", "tokens" },
        { false, "{\"tokens\": \"1\"}", "tokens" },
        { false, "[1]", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_response r = { 0 };
        if (cases[i].tokenize)
            api_tokenize(&ctx, &who, cases[i].body, strlen(cases[i].body), NULL,
                         &r);
        else
            api_detokenize(&ctx, &who, cases[i].body, strlen(cases[i].body),
                           NULL, &r);
        ck_assert_int_eq(r.status, 400);
        ck_assert(r.source.read == NULL);
        ck_assert_uint_eq(memory_used(), 0);
        json_t *root = json_loads(r.body, 0, NULL);
        json_t *e = json_object_get(root, "error");
        ck_assert_ptr_nonnull(e);
        json_t *param = json_object_get(e, "param");
        ck_assert_str_eq(json_is_string(param) ? json_string_value(param) : "",
                         cases[i].param);
        json_decref(root);
        api_response_free(&r);
    }
    stop_pool();
}
END_TEST

START_TEST(test_a_caller_whose_answers_hold_its_half_is_refused_with_the_reason)
{
    /* A /tokenize of this body may hold api_body_bytes(its length): room
     * for one such answer in each caller's half. */
    static const char body[] = "{\"content\": \"Hello world, and more words\"}";
    size_t one = api_body_bytes(strlen(body));
    start_pool(2 * one + one / 2, 100);
    api_ctx ctx = { .models = models, .work = work };
    api_caller a = caller("10.0.0.1"), b = caller("10.0.0.2");
    api_response held = { 0 }, refused = { 0 }, other = { 0 };
    api_tokenize(&ctx, &a, body, strlen(body), NULL, &held);
    ck_assert_int_eq(held.status, 200);
    /* A's answer is not read: while it is held, A's half cannot take
     * another job's reservation */
    api_tokenize(&ctx, &a, body, strlen(body), NULL, &refused);
    ck_assert_int_eq(refused.status, 429);
    ck_assert_int_eq(refused.retry_after, 1);
    json_t *root = json_loads(refused.body, 0, NULL);
    json_t *e = json_object_get(root, "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "code")),
                     "response_memory_per_key");
    ck_assert_str_eq(json_string_value(json_object_get(e, "type")),
                     "rate_limit_error");
    json_decref(root);
    /* counted under the caller's key (a client address: the unnamed one) */
    char *metrics = metrics_render(NULL);
    ck_assert_ptr_nonnull(metrics);
    ck_assert_msg(strstr(metrics,
                         "gpt2d_key_refused_total{key=\"-\","
                         "reason=\"response_memory_per_key\"} 1\n") != NULL,
                  "%s", metrics);
    free(metrics);
    /* another caller still has its half */
    api_tokenize(&ctx, &b, body, strlen(body), NULL, &other);
    ck_assert_int_eq(other.status, 200);
    api_response_free(&held);
    api_response_free(&refused);
    api_response_free(&other);
    stop_pool();
}
END_TEST

static Suite *api_body_suite(void)
{
    Suite *s = suite_create("api_body");
    TCase *bodies = tcase_create("bodies");
    tcase_add_unchecked_fixture(bodies, load_tokenizer, free_tokenizer);
    tcase_add_test(bodies, test_bodies_are_the_json_of_the_whole);
    tcase_add_test(bodies,
                   test_text_of_character_pieces_renders_as_the_decoder_does);
    tcase_add_test(bodies, test_random_ids_render_as_the_whole);
    tcase_set_timeout(bodies, 300);
    suite_add_tcase(s, bodies);

    TCase *endpoints = tcase_create("endpoints");
    tcase_add_unchecked_fixture(endpoints, load_models, free_models);
    tcase_add_test(endpoints,
                   test_tokenize_answers_from_the_pool_and_holds_its_charge);
    tcase_add_test(endpoints, test_bad_bodies_are_400s_that_hold_nothing);
    tcase_add_test(
        endpoints,
        test_a_caller_whose_answers_hold_its_half_is_refused_with_the_reason);
    tcase_set_timeout(endpoints, 300);
    suite_add_tcase(s, endpoints);
    return s;
}

int main(void)
{
    if (!test_tiny_present("test_api_body"))
        return 77;
    return test_run_suite(api_body_suite());
}
