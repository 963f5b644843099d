/* test_api.c — the API layer without sockets or an engine: request parsing
 * and validation (every error names its param), the logprobs object, echo
 * text offsets, best_of ranking, UTF-8 hold-back of streamed deltas, error
 * objects, token strings and the API-key comparison. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_completions.h"
#include "api/completion_request.h"
#include "api/completion_run.h"
#include "api/completion_stream.h"
#include "http/http_keys.h"
#include "test_api_util.h"

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

static const completion_limits limits = { .n_ctx = 64,
                                          .vocab_size = 50257,
                                          .max_sequences = 4 };

static int parse(completion_request *req, const char *body, api_error *e)
{
    return completion_request_parse(req, body, strlen(body), tok, &limits, e);
}

/* ---- parsing ---- */

START_TEST(test_defaults_follow_openai)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse(&req, "{\"prompt\": \"Hello world\"}", &e), 0);
    ck_assert_uint_eq(req.n_prompts, 1);
    ck_assert_uint_eq(req.prompts[0].n, 2);
    ck_assert_int_eq(req.prompts[0].ids[0], 15496);
    ck_assert_int_eq(req.prompts[0].ids[1], 995);
    ck_assert_uint_eq(req.max_tokens, 16);
    ck_assert_uint_eq(req.n, 1);
    ck_assert_uint_eq(req.best_of, 1);
    ck_assert_float_eq(req.sampling.temperature, 1.0f);
    ck_assert_float_eq(req.sampling.top_p, 1.0f);
    ck_assert(!req.logprobs && !req.echo && !req.stream && !req.has_seed);
    ck_assert_uint_eq(req.n_stop, 0);
    ck_assert_str_eq(req.session_id, "");
    completion_request_free(&req);
}
END_TEST

START_TEST(test_every_prompt_form_is_accepted)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": [\"Hello\", \"Hello world\"]}", &e), 0);
    ck_assert_uint_eq(req.n_prompts, 2);
    ck_assert_uint_eq(req.prompts[1].n, 2);
    completion_request_free(&req);

    ck_assert_int_eq(parse(&req, "{\"prompt\": [15496, 995, 0]}", &e), 0);
    ck_assert_uint_eq(req.n_prompts, 1);
    ck_assert_uint_eq(req.prompts[0].n, 3);
    ck_assert_int_eq(req.prompts[0].ids[2], 0);
    completion_request_free(&req);

    ck_assert_int_eq(parse(&req, "{\"prompt\": [[1, 2], [50256]]}", &e), 0);
    ck_assert_uint_eq(req.n_prompts, 2);
    ck_assert_int_eq(req.prompts[1].ids[0], 50256);
    completion_request_free(&req);
}
END_TEST

START_TEST(test_fields_are_parsed_into_the_request)
{
    completion_request req;
    api_error e;
    const char *body =
        "{\"prompt\": \"x\", \"model\": \"whatever\", \"max_tokens\": 5, \"temperature\": 0,"
        " \"top_p\": 0.5, \"top_k\": 7, \"min_p\": 0.1, \"presence_penalty\": -2,"
        " \"frequency_penalty\": 2, \"repetition_penalty\": 1.3, \"n\": 2, \"best_of\": 3,"
        " \"stop\": [\"a\", \"bc\"], \"logit_bias\": {\"50256\": -100, \"11\": 2.5},"
        " \"seed\": -1, \"user\": \"u\", \"echo\": true, \"logprobs\": 3,"
        " \"session_id\": \"chat-1.a:b_c\", \"return_token_ids\": true,"
        " \"unknown_extra\": {\"x\": 1}}";
    ck_assert_int_eq(parse(&req, body, &e), 0);
    ck_assert_uint_eq(req.max_tokens, 5);
    ck_assert_float_eq(req.sampling.temperature, 0.0f);
    ck_assert_float_eq(req.sampling.top_p, 0.5f);
    ck_assert_uint_eq(req.sampling.top_k, 7);
    ck_assert_float_eq_tol(req.sampling.min_p, 0.1f, 1e-7f);
    ck_assert_float_eq(req.sampling.presence_penalty, -2.0f);
    ck_assert_float_eq(req.sampling.frequency_penalty, 2.0f);
    ck_assert_float_eq_tol(req.sampling.repetition_penalty, 1.3f, 1e-6f);
    ck_assert_uint_eq(req.n, 2);
    ck_assert_uint_eq(req.best_of, 3);
    ck_assert_uint_eq(req.n_stop, 2);
    ck_assert_str_eq(req.stop[1], "bc");
    ck_assert_uint_eq(req.sampling.n_logit_bias, 2);
    ck_assert_ptr_eq(req.sampling.logit_bias, req.logit_bias);
    bool saw_eot = false;
    for (size_t i = 0; i < 2; i++)
        if (req.logit_bias[i].token == 50256) {
            saw_eot = true;
            ck_assert_float_eq(req.logit_bias[i].bias, -100.0f);
        }
    ck_assert(saw_eot);
    ck_assert(req.has_seed);
    ck_assert(req.seed == UINT64_MAX);
    ck_assert(req.echo && req.logprobs);
    ck_assert_uint_eq(req.n_logprobs, 3);
    ck_assert_str_eq(req.session_id, "chat-1.a:b_c");
    ck_assert(req.return_token_ids);
    completion_request_free(&req);

    ck_assert_int_eq(parse(&req,
                           "{\"prompt\": \"x\", \"stream\": true,"
                           " \"stream_options\": {\"include_usage\": true},"
                           " \"stop\": \"\\n\", \"logprobs\": null}",
                           &e),
                     0);
    ck_assert(req.stream && req.include_usage && !req.logprobs);
    ck_assert(!req.return_token_ids);
    ck_assert_uint_eq(req.n_stop, 1);
    ck_assert_str_eq(req.stop[0], "\n");
    completion_request_free(&req);
}
END_TEST

/* Each invalid body and the param its 400 must name. */
static const struct {
    const char *body, *param;
} bad_fields[] = {
    { "{}", "prompt" },
    { "{\"prompt\": null}", "prompt" },
    { "{\"prompt\": \"\"}", "prompt" },
    { "{\"prompt\": []}", "prompt" },
    { "{\"prompt\": [[]]}", "prompt" },
    { "{\"prompt\": 5}", "prompt" },
    { "{\"prompt\": [1, \"a\"]}", "prompt" },
    { "{\"prompt\": [\"a\", [1]]}", "prompt" },
    { "{\"prompt\": [-1]}", "prompt" },
    { "{\"prompt\": [50257]}", "prompt" },
    { "{\"prompt\": [[1], [99999]]}", "prompt" },
    { "{\"prompt\": [1.5]}", "prompt" },
    { "{\"prompt\": \"x\", \"model\": 3}", "model" },
    { "{\"prompt\": \"x\", \"max_tokens\": -1}", "max_tokens" },
    { "{\"prompt\": \"x\", \"max_tokens\": \"16\"}", "max_tokens" },
    { "{\"prompt\": \"x\", \"max_tokens\": 64}", "max_tokens" },
    { "{\"prompt\": \"x\", \"temperature\": -0.1}", "temperature" },
    { "{\"prompt\": \"x\", \"temperature\": 2.01}", "temperature" },
    { "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature" },
    { "{\"prompt\": \"x\", \"top_p\": 0}", "top_p" },
    { "{\"prompt\": \"x\", \"top_p\": 1.5}", "top_p" },
    { "{\"prompt\": \"x\", \"top_k\": -1}", "top_k" },
    { "{\"prompt\": \"x\", \"top_k\": 2.5}", "top_k" },
    { "{\"prompt\": \"x\", \"min_p\": 1.1}", "min_p" },
    { "{\"prompt\": \"x\", \"presence_penalty\": 2.5}", "presence_penalty" },
    { "{\"prompt\": \"x\", \"frequency_penalty\": -3}", "frequency_penalty" },
    { "{\"prompt\": \"x\", \"repetition_penalty\": 0}", "repetition_penalty" },
    /* 1e-50 would become the float 0, which the sampler skips */
    { "{\"prompt\": \"x\", \"repetition_penalty\": 1e-50}",
      "repetition_penalty" },
    { "{\"prompt\": \"x\", \"repetition_penalty\": 100.5}",
      "repetition_penalty" },
    { "{\"prompt\": \"x\", \"repetition_penalty\": true}",
      "repetition_penalty" },
    { "{\"prompt\": \"x\", \"n\": 0}", "n" },
    { "{\"prompt\": \"x\", \"n\": 5}", "n" },
    { "{\"prompt\": [\"a\", \"b\", \"c\"], \"n\": 2}", "n" },
    { "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 1}", "best_of" },
    { "{\"prompt\": \"x\", \"best_of\": 5}", "best_of" },
    { "{\"prompt\": \"x\", \"best_of\": 2, \"stream\": true}", "best_of" },
    { "{\"prompt\": \"x\", \"logprobs\": 6}", "logprobs" },
    { "{\"prompt\": \"x\", \"logprobs\": -1}", "logprobs" },
    { "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs" },
    { "{\"prompt\": \"x\", \"stop\": \"\"}", "stop" },
    { "{\"prompt\": \"x\", \"stop\": [\"a\", \"\"]}", "stop" },
    { "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
      "stop" },
    { "{\"prompt\": \"x\", \"stop\": [1]}", "stop" },
    { "{\"prompt\": \"x\", \"stop\": 7}", "stop" },
    { "{\"prompt\": \"x\", \"logit_bias\": []}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"12x\": 1}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"50257\": 1}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 1}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 100.5}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"high\"}}", "logit_bias" },
    { "{\"prompt\": \"x\", \"seed\": 1.5}", "seed" },
    { "{\"prompt\": \"x\", \"seed\": \"1\"}", "seed" },
    { "{\"prompt\": \"x\", \"user\": 1}", "user" },
    { "{\"prompt\": \"x\", \"echo\": 1}", "echo" },
    { "{\"prompt\": \"x\", \"return_token_ids\": \"yes\"}",
      "return_token_ids" },
    { "{\"prompt\": \"x\", \"return_token_ids\": 1}", "return_token_ids" },
    { "{\"prompt\": \"x\", \"stream\": \"yes\"}", "stream" },
    { "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}",
      "stream_options" },
    { "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}",
      "stream_options" },
    { "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
      "stream_options.include_usage" },
    { "{\"prompt\": \"x\", \"session_id\": \"\"}", "session_id" },
    { "{\"prompt\": \"x\", \"session_id\": \"has space\"}", "session_id" },
    { "{\"prompt\": \"x\", \"session_id\": 12}", "session_id" },
    { "{\"prompt\": [\"a\", \"b\"], \"session_id\": \"s\"}", "session_id" },
    { "{\"prompt\": \"x\", \"suffix\": \"tail\"}", "suffix" },
    { "{\"prompt\": \"x\", \"cache_salt\": \"\"}", "cache_salt" },
    { "{\"prompt\": \"x\", \"cache_salt\": 7}", "cache_salt" },
};

START_TEST(test_each_bad_field_is_a_400_naming_its_param)
{
    completion_request req;
    api_error e;
    const char *body = bad_fields[_i].body;
    memset(&e, 0, sizeof e);
    test_expect_refusal(parse(&req, body, &e), &e, body, bad_fields[_i].param);
}
END_TEST

/* A field of the wrong type: one message shape per type, naming the field
 * (a nested one by its dotted path), whichever field it is. */
static const struct {
    const char *body, *message;
} wrong_types[] = {
    { "{\"prompt\": \"x\", \"temperature\": \"hot\"}",
      "temperature must be a number" },
    { "{\"prompt\": \"x\", \"repetition_penalty\": true}",
      "repetition_penalty must be a number" },
    { "{\"prompt\": \"x\", \"max_tokens\": \"16\"}",
      "max_tokens must be an integer" },
    { "{\"prompt\": \"x\", \"top_k\": 2.5}", "top_k must be an integer" },
    { "{\"prompt\": \"x\", \"logprobs\": true}",
      "logprobs must be an integer" },
    { "{\"prompt\": \"x\", \"seed\": \"1\"}", "seed must be an integer" },
    { "{\"prompt\": \"x\", \"echo\": 1}", "echo must be true or false" },
    { "{\"prompt\": \"x\", \"return_token_ids\": 1}",
      "return_token_ids must be true or false" },
    { "{\"prompt\": \"x\", \"stream\": \"yes\"}",
      "stream must be true or false" },
    { "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
      "stream_options.include_usage must be true or false" },
    { "{\"prompt\": \"x\", \"model\": 3}", "model must be a string" },
    { "{\"prompt\": \"x\", \"user\": 1}", "user must be a string" },
    { "{\"prompt\": \"x\", \"session_id\": 12}",
      "session_id must be a string" },
    { "{\"prompt\": \"x\", \"cache_salt\": 7}", "cache_salt must be a string" },
    { "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}",
      "stream_options must be an object" },
    { "{\"prompt\": \"x\", \"logit_bias\": []}",
      "logit_bias must be an object mapping token ids to biases" },
};

START_TEST(test_wrong_type_message_names_field_and_type)
{
    completion_request req;
    api_error e;
    const char *body = wrong_types[_i].body;
    memset(&e, 0, sizeof e);
    ck_assert_msg(parse(&req, body, &e) == -1, "accepted: %s", body);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.message, wrong_types[_i].message);
}
END_TEST

START_TEST(test_session_id_longer_than_128_is_refused)
{
    char body[512], id[130];
    memset(id, 'a', 129);
    id[129] = '\0';
    snprintf(body, sizeof body, "{\"prompt\": \"x\", \"session_id\": \"%s\"}",
             id);
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse(&req, body, &e), -1);
    ck_assert_str_eq(e.param, "session_id");
    id[128] = '\0';
    snprintf(body, sizeof body, "{\"prompt\": \"x\", \"session_id\": \"%s\"}",
             id);
    ck_assert_int_eq(parse(&req, body, &e), 0);
    ck_assert_uint_eq(strlen(req.session_id), 128);
    completion_request_free(&req);
}
END_TEST

/* The request carries cache_salt as api_field_cache_salt reads it (its
 * bounds: test_api_fields.c). */
START_TEST(test_cache_salt_is_passed_through)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": \"x\", \"cache_salt\": \"a\\u00e9b\"}", &e),
        0);
    ck_assert(req.has_cache_salt);
    ck_assert_uint_eq(req.cache_salt_len, 4);
    ck_assert_int_eq(memcmp(req.cache_salt,
                            "a\xc3\xa9"
                            "b",
                            4),
                     0);
    completion_request_free(&req);
}
END_TEST

/* Every input that should make another cache domain does, and the same
 * inputs always make the same one (a restarted daemon must find it). */
START_TEST(test_caller_identity_separates_keys_addresses_and_salts)
{
    api_caller k1, k1_again, k2, addr, everyone;
    api_caller_of_key(&k1, "alpha", 5);
    api_caller_of_key(&k1_again, "alpha", 5);
    api_caller_of_key(&k2, "beta", 4);
    api_caller_of_address(&addr, "alpha");
    api_caller_global(&everyone);
    ck_assert_int_eq(memcmp(k1.principal, k1_again.principal, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(k1.principal, k2.principal, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(k1.principal, addr.principal, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(k1.principal, everyone.principal, SHA256_BYTES), 0);

    kv_identity plain = api_caller_identity(&k1, NULL, 0),
                plain_again = api_caller_identity(&k1_again, NULL, 0),
                empty = api_caller_identity(&k1, "", 0),
                salted = api_caller_identity(&k1, "s1", 2),
                other_key = api_caller_identity(&k2, "s1", 2);
    ck_assert_int_eq(memcmp(&plain, &plain_again, sizeof plain), 0);
    ck_assert_int_eq(memcmp(plain.owner, k1.principal, SHA256_BYTES), 0);
    ck_assert_int_eq(memcmp(salted.owner, k1.principal, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(plain.domain, empty.domain, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(plain.domain, salted.domain, SHA256_BYTES), 0);
    ck_assert_int_ne(memcmp(salted.domain, other_key.domain, SHA256_BYTES), 0);
}
END_TEST

START_TEST(test_context_overflow_message_gives_the_numbers)
{
    completion_request req;
    api_error e;
    /* 3 prompt tokens + 62 > n_ctx 64 */
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": [1, 2, 3], \"max_tokens\": 62}", &e), -1);
    ck_assert_str_eq(e.param, "max_tokens");
    ck_assert_ptr_nonnull(strstr(e.message, "64"));
    ck_assert_ptr_nonnull(strstr(e.message, "65"));
    ck_assert_ptr_nonnull(strstr(e.message, "62"));
    /* exactly the context is fine, and max_tokens 0 with a full prompt too */
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": [1, 2, 3], \"max_tokens\": 61}", &e), 0);
    completion_request_free(&req);
}
END_TEST

START_TEST(test_invalid_json_is_an_invalid_request_error)
{
    completion_request req;
    api_error e;
    const char *bodies[] = {
        "{",       "not json", "[1, 2]",
        "\"str\"", "",         "{\"prompt\": \"a\", \"prompt\": \"b\"}"
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        ck_assert_int_eq(parse(&req, bodies[i], &e), -1);
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.type, "invalid_request_error");
        ck_assert_str_eq(e.param, "");
    }
}
END_TEST

START_TEST(test_null_fields_mean_the_default)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"prompt\": \"x\", \"max_tokens\": null, \"n\": null,"
              " \"temperature\": null, \"stop\": null, \"suffix\": null,"
              " \"logit_bias\": null, \"seed\": null, \"stream\": null}",
              &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 16);
    ck_assert_uint_eq(req.n, 1);
    ck_assert(!req.has_seed);
    completion_request_free(&req);
}
END_TEST

/* ---- --max-n ---- */

/* Parses `body` against 4 KV slots and the given --max-n. */
static int parse_max_n(completion_request *req, const char *body, size_t max_n,
                       api_error *e)
{
    completion_limits lim = limits;
    lim.max_n = max_n;
    memset(e, 0, sizeof *e);
    return completion_request_parse(req, body, strlen(body), tok, &lim, e);
}

/* Expects a 400 naming `param` whose message holds each of the strings. */
static void expect_max_n_refusal(const char *body, size_t max_n,
                                 const char *param, const char *const *words)
{
    completion_request req;
    api_error e;
    ck_assert_msg(parse_max_n(&req, body, max_n, &e) == -1, "accepted: %s",
                  body);
    ck_assert_int_eq(e.status, 400);
    ck_assert_msg(strcmp(e.param, param) == 0, "%s: param '%s', wanted '%s'",
                  body, e.param, param);
    for (size_t i = 0; words[i] != NULL; i++)
        ck_assert_msg(strstr(e.message, words[i]) != NULL, "'%s' lacks '%s'",
                      e.message, words[i]);
}

START_TEST(test_max_n_caps_n_best_of_and_prompts)
{
    completion_request req;
    api_error e;
    /* at the cap: accepted */
    ck_assert_int_eq(parse_max_n(&req, "{\"prompt\": \"x\", \"n\": 2}", 2, &e),
                     0);
    completion_request_free(&req);
    ck_assert_int_eq(parse_max_n(&req, "{\"prompt\": [\"a\", \"b\"]}", 2, &e),
                     0);
    completion_request_free(&req);
    ck_assert_int_eq(
        parse_max_n(&req, "{\"prompt\": \"x\", \"best_of\": 2}", 2, &e), 0);
    completion_request_free(&req);
    /* over it: the message has the request's numbers, the cap and its name */
    expect_max_n_refusal("{\"prompt\": \"x\", \"n\": 3}", 2, "n",
                         (const char *[]){ "3 sequences", "n 3", "at most 2",
                                           "max-n 2", "4 KV slots", NULL });
    expect_max_n_refusal("{\"prompt\": \"x\", \"best_of\": 3}", 2, "best_of",
                         (const char *[]){ "best_of 3", "max-n 2", NULL });
    expect_max_n_refusal(
        "{\"prompt\": [\"a\", \"b\", \"c\"]}", 2, "prompt",
        (const char *[]){ "3 sequences", "3 prompts", "max-n 2", NULL });
    expect_max_n_refusal(
        "{\"prompt\": [[1], [2]], \"n\": 2}", 3, "n",
        (const char *[]){ "4 sequences", "n 2 x 2 prompts", "max-n 3", NULL });
    expect_max_n_refusal("{\"prompt\": [[1], [2]], \"best_of\": 2}", 3,
                         "best_of",
                         (const char *[]){ "best_of 2 x 2 prompts", NULL });
}
END_TEST

/* The counts are checked before any prompt is tokenized: with no tokenizer
 * at all, an array of text prompts over max-n, or with a stop string over
 * its limit, is refused (tokenizing would crash). */
START_TEST(test_prompt_array_over_max_n_is_refused_before_tokenizing)
{
    static const char body[] =
        "{\"prompt\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}";
    completion_request req;
    api_error e;
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(
        completion_request_parse(&req, body, strlen(body), NULL, &limits, &e),
        -1);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_msg(strstr(e.message, "5 sequences") != NULL, "%s", e.message);
    static const char stop[] = "{\"prompt\": \"a\", \"stop\": \"xxxxx\"}";
    completion_limits lim = limits;
    lim.max_stop_bytes = 4;
    ck_assert_int_eq(
        completion_request_parse(&req, stop, strlen(stop), NULL, &lim, &e), -1);
    ck_assert_str_eq(e.param, "stop");
}
END_TEST

/* Every field but the prompt is checked before the prompt is tokenized:
 * with no tokenizer at all, each of these is refused for its own field. */
START_TEST(test_every_other_field_is_checked_before_tokenizing)
{
    static const struct {
        const char *body, *param;
    } cases[] = {
        { "{\"prompt\": \"a\", \"temperature\": 5}", "temperature" },
        { "{\"prompt\": \"a\", \"logprobs\": 99}", "logprobs" },
        { "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", "logit_bias" },
        { "{\"prompt\": \"a\", \"seed\": \"1\"}", "seed" },
        { "{\"prompt\": \"a\", \"session_id\": \"..\"}", "session_id" },
        { "{\"prompt\": \"a\", \"cache_salt\": \"\"}", "cache_salt" },
        { "{\"prompt\": \"a\", \"stream_options\": {}}", "stream_options" },
        { "{\"prompt\": [\"a\", \"b\"], \"session_id\": \"s\"}", "session_id" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        completion_request req;
        api_error e;
        memset(&e, 0, sizeof e);
        ck_assert_int_eq(completion_request_parse(&req, cases[i].body,
                                                  strlen(cases[i].body), NULL,
                                                  &limits, &e),
                         -1);
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.param, cases[i].param);
    }
}
END_TEST

/* A prompt over the context is refused for the prompt, its ids uncopied
 * and its text tokenized no further than the context. */
START_TEST(test_prompt_over_the_context_is_refused_for_the_prompt)
{
    completion_request req;
    api_error e;
    char body[4096];
    size_t at = (size_t)snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < 65; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s1",
                               i ? "," : "");
    snprintf(body + at, sizeof body - at, "], \"max_tokens\": 0}");
    ck_assert_int_eq(parse(&req, body, &e), -1);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_msg(strstr(e.message, "has 65 tokens") != NULL, "%s", e.message);
    /* 500 fresh words: the ones past the context never reach the word
     * cache, because they are never merged */
    at = (size_t)snprintf(body, sizeof body, "{\"prompt\": \"");
    uint64_t seed = 11;
    for (int i = 0; i < 500; i++) {
        body[at++] = ' ';
        for (int k = 0; k < 6; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            body[at++] = (char)('a' + (seed >> 33) % 26);
        }
    }
    snprintf(body + at, sizeof body - at, "\", \"max_tokens\": 0}");
    tokenizer_cache_stats before, after;
    tokenizer_cache_stats_get(tok, &before);
    ck_assert_int_eq(parse(&req, body, &e), -1);
    tokenizer_cache_stats_get(tok, &after);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_str_eq(e.code, API_CONTEXT_EXCEEDED);
    ck_assert_msg(strstr(e.message, "maximum context length is 64 tokens") !=
                      NULL,
                  "%s", e.message);
    ck_assert_msg(after.entries <= before.entries + 65, "%zu words merged",
                  after.entries - before.entries);
}
END_TEST

/* A stop string is at most max-stop-bytes long: every one is held, per
 * sequence, while the request waits and runs. */
START_TEST(test_stop_string_over_the_limit_is_refused)
{
    completion_limits lim = limits;
    lim.max_stop_bytes = 256;
    char body[1024];
    char s256[257], s257[258];
    memset(s256, 'x', 256);
    s256[256] = '\0';
    memset(s257, 'x', 257);
    s257[257] = '\0';
    completion_request req;
    api_error e;
    snprintf(body, sizeof body, "{\"prompt\": \"a\", \"stop\": [\"%s\"]}",
             s256);
    ck_assert_int_eq(
        completion_request_parse(&req, body, strlen(body), tok, &lim, &e), 0);
    ck_assert_uint_eq(strlen(req.stop[0]), 256);
    completion_request_free(&req);
    snprintf(body, sizeof body,
             "{\"prompt\": \"a\", \"stop\": [\"y\", \"%s\"]}", s257);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(
        completion_request_parse(&req, body, strlen(body), tok, &lim, &e), -1);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "stop");
    ck_assert_msg(strstr(e.message, "256 bytes") != NULL &&
                      strstr(e.message, "257") != NULL,
                  "%s", e.message);
}
END_TEST

START_TEST(test_max_n_above_the_slots_leaves_the_slots_in_charge)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse_max_n(&req, "{\"prompt\": \"x\", \"n\": 4}", 64, &e),
                     0);
    completion_request_free(&req);
    expect_max_n_refusal(
        "{\"prompt\": \"x\", \"n\": 5}", 64, "n",
        (const char *[]){ "5 sequences", "at most 4", "its 4 KV slots", NULL });
    /* 0 (as the fuzzer's limits leave it): the slots alone */
    expect_max_n_refusal("{\"prompt\": \"x\", \"n\": 5}", 0, "n",
                         (const char *[]){ "its 4 KV slots", NULL });
}
END_TEST

/* ---- logit_bias keys: decimal token ids, one spelling each ---- */

static const char *const good_bias_keys[] = { "0", "5", "50256" };

static const char *const bad_bias_keys[] = {
    "",
    " 5",
    "5 ",
    "\\t5",
    "\\n5",
    "+5",
    "-5",
    "-0",
    "05",
    "007",
    "00",
    "5.0",
    "1e3",
    "0x10",
    "5a",
    "\\uff15" /* fullwidth 5 */,
    "50257",
    "99999999999999999999999",
    "18446744073709551621" /* 2^64 + 5: wraps to 5 in 64 bits */,
};

START_TEST(test_logit_bias_key_in_decimal_is_accepted)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"prompt\": \"x\", \"logit_bias\": {\"%s\": 1}}",
             good_bias_keys[_i]);
    completion_request req;
    api_error e;
    ck_assert_msg(parse(&req, body, &e) == 0, "%s: %s", body, e.message);
    ck_assert_uint_eq(req.sampling.n_logit_bias, 1);
    ck_assert_int_eq(req.logit_bias[0].token, atoi(good_bias_keys[_i]));
    completion_request_free(&req);
}
END_TEST

START_TEST(test_logit_bias_key_in_any_other_spelling_is_refused)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"prompt\": \"x\", \"logit_bias\": {\"%s\": 1}}",
             bad_bias_keys[_i]);
    completion_request req;
    api_error e;
    memset(&e, 0, sizeof e);
    ck_assert_msg(parse(&req, body, &e) == -1, "accepted: %s", body);
    ck_assert_int_eq(e.status, 400);
    ck_assert_msg(strcmp(e.param, "logit_bias") == 0, "%s: param '%s' (%s)",
                  body, e.param, e.message);
}
END_TEST

START_TEST(test_logit_bias_key_with_nul_is_refused)
{
    completion_request req;
    api_error e;
    /* jansson refuses it before we see a key cut short at the NUL ("5") */
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": \"x\", \"logit_bias\": {\"5\\u00001\": 1}}",
              &e),
        -1);
    ck_assert_int_eq(e.status, 400);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_error_object_has_openai_shape)
{
    api_error e;
    api_error_set(&e, 400, "top_p", "top_p must be > 0");
    api_response r = { 0 };
    api_response_error(&r, &e);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(r.content_type, "application/json");
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *err = json_object_get(j, "error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")),
                     "top_p must be > 0");
    ck_assert_str_eq(json_string_value(json_object_get(err, "type")),
                     "invalid_request_error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "param")), "top_p");
    ck_assert(json_is_null(json_object_get(err, "code")));
    json_decref(j);
    api_response_free(&r);

    api_error_set(&e, 429, NULL, "busy");
    api_response_error(&r, &e);
    j = json_loadb(r.body, r.body_len, 0, NULL);
    err = json_object_get(j, "error");
    ck_assert(json_is_null(json_object_get(err, "param")));
    ck_assert_str_eq(json_string_value(json_object_get(err, "type")),
                     "rate_limit_error");
    json_decref(j);
    api_response_free(&r);
}
END_TEST

/* ---- response building ---- */

static gen_token tk(int32_t id, float lp)
{
    gen_token t;
    memset(&t, 0, sizeof t);
    t.token = id;
    t.logprob = lp;
    return t;
}

/* A finished sequence's output: n tokens, the text, where each token's
 * text ends. */
static gen_output output_of(const gen_token *gen, const size_t *ends, size_t n,
                            const char *text, finish_reason finish)
{
    gen_output out = { 0 };
    out.tokens = gen;
    out.n_tokens = n;
    out.text = text;
    out.text_len = strlen(text);
    out.token_text_end = ends;
    out.finish = finish;
    return out;
}

START_TEST(test_logprobs_object_with_echo_scores_the_prompt_first)
{
    /* prompt "Hello world" = [15496, 995]; generated " café" split so that
     * text offsets count characters, not bytes. */
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    ck_assert_int_eq(tokenizer_encode(tok, " caf\xc3\xa9!", 7, &ids, &n, &err),
                     0);
    gen_token prompt[2] = { tk(15496, NAN), tk(995, -1.5f) };
    prompt[1].n_top = 2;
    prompt[1].top[0] = (token_logprob){ 11, -0.5f };
    prompt[1].top[1] = (token_logprob){ 995, -1.5f };
    gen_token gen[8];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++)
        gen[i] = tk(ids[i], -0.25f * (float)(i + 1));

    text_cursor at = { 0 };
    json_t *lp = completion_logprobs_json(tok, prompt, 2, gen, 0, n, &at,
                                          SIZE_MAX);
    json_t *tokens = json_object_get(lp, "tokens");
    json_t *lps = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs");
    json_t *offs = json_object_get(lp, "text_offset");
    ck_assert_uint_eq(json_array_size(tokens), 2 + n);
    ck_assert_uint_eq(json_array_size(lps), 2 + n);
    ck_assert_uint_eq(json_array_size(tops), 2 + n);
    ck_assert_uint_eq(json_array_size(offs), 2 + n);
    ck_assert_str_eq(json_string_value(json_array_get(tokens, 0)), "Hello");
    ck_assert_str_eq(json_string_value(json_array_get(tokens, 1)), " world");
    ck_assert(json_is_null(json_array_get(lps, 0)));
    ck_assert(json_is_null(json_array_get(tops, 0)));
    ck_assert_double_eq_tol(json_real_value(json_array_get(lps, 1)), -1.5,
                            1e-6);
    json_t *top1 = json_array_get(tops, 1);
    ck_assert_uint_eq(json_object_size(top1), 2);
    ck_assert_double_eq_tol(json_real_value(json_object_get(top1, ",")), -0.5,
                            1e-6);
    ck_assert_double_eq_tol(json_real_value(json_object_get(top1, " world")),
                            -1.5, 1e-6);
    /* offsets: Hello=0, " world"=5, generated from 11 on, in characters */
    ck_assert_int_eq(json_integer_value(json_array_get(offs, 0)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(offs, 1)), 5);
    ck_assert_int_eq(json_integer_value(json_array_get(offs, 2)), 11);
    /* The last generated token is "!" and starts after " café" (5 chars). */
    ck_assert_int_eq(json_integer_value(json_array_get(offs, 1 + n)), 16);
    json_decref(lp);
    free(ids);
}
END_TEST

START_TEST(test_choice_with_echo_prepends_the_prompt_text)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"prompt\": \"Hello\", \"echo\": true, \"logprobs\": 0,"
              " \"n\": 2}",
              &e),
        0);
    gen_token prompt[1] = { tk(15496, NAN) };
    gen_token gen[1] = { tk(995, -2.0f) };
    size_t ends[1] = { 6 };
    gen_output out = output_of(gen, ends, 1, " world", FINISH_STOP);
    out.prompt_scores = prompt;
    out.n_prompt_scored = 1;
    json_t *c = completion_choice_json(tok, &req, 0, 3, &out);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")),
                     "Hello world");
    ck_assert_int_eq(json_integer_value(json_object_get(c, "index")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")),
                     "stop");
    json_t *lp = json_object_get(c, "logprobs");
    ck_assert_uint_eq(json_array_size(json_object_get(lp, "tokens")), 2);
    ck_assert_int_eq(json_integer_value(
                         json_array_get(json_object_get(lp, "text_offset"), 1)),
                     5);
    /* logprobs 0: no alternatives, but the token itself, as OpenAI has it */
    json_t *top = json_array_get(json_object_get(lp, "top_logprobs"), 1);
    ck_assert_uint_eq(json_object_size(top), 1);
    ck_assert_double_eq_tol(json_real_value(json_object_get(top, " world")),
                            -2.0, 1e-6);
    json_decref(c);
    completion_request_free(&req);
}
END_TEST

/* The top_logprobs entry of generated token i in `lp` has exactly `keys`,
 * in that order, and `key` has `value`. */
static void expect_entry(json_t *lp, size_t i, const char *const *keys,
                         size_t n, const char *key, double value)
{
    json_t *top = json_array_get(json_object_get(lp, "top_logprobs"), i);
    ck_assert_uint_eq(json_object_size(top), n);
    size_t k = 0;
    for (void *it = json_object_iter(top); it != NULL;
         it = json_object_iter_next(top, it))
        ck_assert_str_eq(json_object_iter_key(it), keys[k++]);
    ck_assert_double_eq_tol(json_real_value(json_object_get(top, key)), value,
                            1e-6);
}

static json_t *logprobs_of(const gen_token *gen, size_t n)
{
    text_cursor at = { 0 };
    return completion_logprobs_json(tok, NULL, 0, gen, 0, n, &at, SIZE_MAX);
}

/* OpenAI's contract: an entry holds the alternatives and the token itself,
 * so k alternatives give k entries when the token is one of them, else
 * k + 1 with the token last; no alternatives give the token alone. */
START_TEST(test_top_logprobs_always_hold_the_token_itself)
{
    gen_token gen[3] = { tk(995, -1.5f), tk(0, -7.0f), tk(0, -7.0f) };
    for (size_t i = 0; i < 2; i++) {
        gen[i].n_top = 2;
        gen[i].top[0] = (token_logprob){ 11, -0.5f };
        gen[i].top[1] = (token_logprob){ 995, -1.5f };
    }
    json_t *lp = logprobs_of(gen, 3);
    const char *in_top[] = { ",", " world" }, *added[] = { ",", " world", "!" },
               *alone[] = { "!" };
    expect_entry(lp, 0, in_top, 2, " world", -1.5);
    expect_entry(lp, 1, added, 3, "!", -7.0);
    expect_entry(lp, 2, alone, 1, "!", -7.0);
    json_decref(lp);
}
END_TEST

/* Ids past the tokenizer's 50257 render as "": two of them share a key.
 * The token's own key holds its own logprob; among alternatives the
 * likelier keeps the key. */
START_TEST(test_top_logprobs_keys_that_collide_keep_the_tokens_own_value)
{
    size_t len = 0;
    ck_assert_ptr_null(tokenizer_token_bytes(tok, 50258, &len));
    gen_token gen[3] = { tk(50258, -3.0f), tk(50258, -3.0f), tk(11, -1.0f) };
    gen[0].n_top = 3;
    gen[0].top[0] = (token_logprob){ 50257, -0.2f };
    gen[0].top[1] = (token_logprob){ 11, -1.0f };
    gen[0].top[2] = (token_logprob){ 50258, -3.0f };
    gen[1].n_top = 2;
    gen[1].top[0] = (token_logprob){ 50257, -0.2f };
    gen[1].top[1] = (token_logprob){ 11, -1.0f };
    gen[2].n_top = 2;
    gen[2].top[0] = (token_logprob){ 50257, -0.2f };
    gen[2].top[1] = (token_logprob){ 50258, -0.3f };
    json_t *lp = logprobs_of(gen, 3);
    const char *own_last[] = { ",", "" }, *own_first[] = { "", "," };
    expect_entry(lp, 0, own_last, 2, "", -3.0);
    expect_entry(lp, 1, own_last, 2, "", -3.0);
    expect_entry(lp, 2, own_first, 2, "", -0.2);
    expect_entry(lp, 2, own_first, 2, ",", -1.0);
    json_decref(lp);
}
END_TEST

static void expect_ids(json_t *arr, const json_int_t *want, size_t n)
{
    ck_assert_msg(json_is_array(arr), "not an array");
    ck_assert_uint_eq(json_array_size(arr), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(json_integer_value(json_array_get(arr, i)), want[i]);
}

/* return_token_ids: the prompt's ids and the generated ones (not the
 * echoed prompt again), as vLLM names them; absent unless asked for. */
START_TEST(test_choice_with_return_token_ids_names_prompt_and_generated_ids)
{
    gen_token gen[2] = { tk(11, -1.0f), tk(995, -2.0f) };
    size_t ends[2] = { 1, 7 };
    gen_output out = output_of(gen, ends, 2, ", world", FINISH_LENGTH);
    const json_int_t want_prompt[2] = { 15496, 995 }, want_gen[2] = { 11, 995 };
    for (int asked = 0; asked < 2; asked++) {
        completion_request req;
        api_error e;
        ck_assert_int_eq(
            parse(&req,
                  asked ? "{\"prompt\": \"Hello world\", \"echo\": true,"
                          " \"return_token_ids\": true}"
                        : "{\"prompt\": \"Hello world\"}",
                  &e),
            0);
        json_t *c = completion_choice_json(tok, &req, 0, 0, &out);
        if (asked) {
            ck_assert_str_eq(json_string_value(json_object_get(c, "text")),
                             "Hello world, world");
            expect_ids(json_object_get(c, "prompt_token_ids"), want_prompt, 2);
            expect_ids(json_object_get(c, "token_ids"), want_gen, 2);
        } else {
            ck_assert_ptr_null(json_object_get(c, "prompt_token_ids"));
            ck_assert_ptr_null(json_object_get(c, "token_ids"));
        }
        json_decref(c);
        completion_request_free(&req);
    }
}
END_TEST

/* GPT-2's byte tokens: 223 is the lone byte 0x81, 158 / 224 / 105 are
 * 0xE2 / 0x82 / 0xAC, the three bytes of "€". */
enum {
    TOK_HELLO = 15496,
    TOK_X81 = 223,
    TOK_XE2 = 158,
    TOK_X82 = 224,
    TOK_XAC = 105
};

static void expect_offsets(json_t *lp, const json_int_t *want, size_t n)
{
    json_t *offs = json_object_get(lp, "text_offset");
    ck_assert_uint_eq(json_array_size(offs), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(json_integer_value(json_array_get(offs, i)) == want[i],
                      "text_offset[%zu] = %lld, want %lld", i,
                      (long long)json_integer_value(json_array_get(offs, i)),
                      (long long)want[i]);
}

/* Offsets index the text as the client gets it: an ill-formed byte is a
 * U+FFFD there, so it takes one character; a character split over tokens
 * counts where it starts.  One token at a time through the same cursor
 * (streaming) gives the same offsets as all at once. */
START_TEST(test_text_offsets_follow_the_rendered_text)
{
    gen_token lone[4] = { tk(TOK_HELLO, -1), tk(TOK_X81, -1), tk(TOK_HELLO, -1),
                          tk(TOK_HELLO, -1) }; /* "Hello\uFFFDHelloHello" */
    gen_token euro[4] = { tk(TOK_XE2, -1), tk(TOK_X82, -1), tk(TOK_XAC, -1),
                          tk(TOK_HELLO, -1) }; /* "\u20ACHello" */
    const json_int_t want_lone[4] = { 0, 5, 6, 11 },
                     want_euro[4] = { 0, 1, 1, 1 };
    const gen_token *cases[2] = { lone, euro };
    const json_int_t *wants[2] = { want_lone, want_euro };
    for (size_t c = 0; c < 2; c++) {
        text_cursor at = { 0 };
        json_t *lp = completion_logprobs_json(tok, NULL, 0, cases[c], 0, 4, &at,
                                              SIZE_MAX);
        expect_offsets(lp, wants[c], 4);
        json_decref(lp);
        text_cursor next = { 0 };
        for (size_t i = 0; i < 4; i++) {
            lp = completion_logprobs_json(tok, NULL, 0, cases[c], i, i + 1,
                                          &next, SIZE_MAX);
            expect_offsets(lp, &wants[c][i], 1);
            json_decref(lp);
        }
        ck_assert_uint_eq(next.chars, at.chars);
    }
}
END_TEST

/* Without echo, offsets still count from the prompt's start (OpenAI's
 * convention): "Hello" is 5 characters, so " world" sits at 5. */
START_TEST(test_text_offsets_count_the_prompt_without_echo)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req, "{\"prompt\": \"Hello\", \"logprobs\": 0}", &e), 0);
    gen_token gen[2] = { tk(995, -2.0f), tk(995, -2.0f) };
    size_t ends[2] = { 6, 12 };
    gen_output out = output_of(gen, ends, 2, " world world", FINISH_LENGTH);
    json_t *c = completion_choice_json(tok, &req, 0, 0, &out);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")),
                     " world world");
    const json_int_t want[2] = { 5, 11 };
    expect_offsets(json_object_get(c, "logprobs"), want, 2);
    json_decref(c);
    completion_request_free(&req);
}
END_TEST

START_TEST(test_choice_without_logprobs_has_null_logprobs_and_length_finish)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse(&req, "{\"prompt\": \"Hello\"}", &e), 0);
    gen_output out = { 0 };
    out.text = "ab\xff"; /* invalid UTF-8 must still give valid JSON */
    out.text_len = 3;
    out.finish = FINISH_LENGTH;
    json_t *c = completion_choice_json(tok, &req, 0, 0, &out);
    ck_assert(json_is_null(json_object_get(c, "logprobs")));
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")),
                     "ab\xef\xbf\xbd");
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")),
                     "length");
    json_decref(c);
    completion_request_free(&req);
}
END_TEST

START_TEST(test_best_of_ranks_by_cumulative_logprob)
{
    gen_output o[4];
    memset(o, 0, sizeof o);
    o[0].cum_logprob = -5.0;
    o[1].cum_logprob = -1.0;
    o[2].cum_logprob = -3.0;
    o[3].cum_logprob = -1.0; /* ties keep sequence order */
    const gen_output *outs[4] = { &o[0], &o[1], &o[2], &o[3] };
    size_t order[4];
    completion_rank(outs, 4, order);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 3);
    ck_assert_uint_eq(order[2], 2);
    ck_assert_uint_eq(order[3], 0);
}
END_TEST

/* ---- streaming ---- */

START_TEST(test_stream_holds_back_split_utf8)
{
    /* "a" "é" where the engine (wrongly) reports the end of token 1 in the
     * middle of é: the stream must send "" for it and é with token 2. */
    const char text[] = "a\xc3\xa9z";
    size_t ends[3] = { 1, 2, 4 };
    gen_output out = { 0 };
    out.text = text;
    out.text_len = 4;
    out.token_text_end = ends;
    out.n_tokens = 3;
    size_t sent = 0;
    size_t e0 = completion_stream_delta_end(&out, 0, sent);
    ck_assert_uint_eq(e0, 1);
    sent = e0;
    size_t e1 = completion_stream_delta_end(&out, 1, sent);
    ck_assert_uint_eq(e1, 1); /* nothing: half a character */
    sent = e1;
    size_t e2 = completion_stream_delta_end(&out, 2, sent);
    ck_assert_uint_eq(e2, 4); /* "\xc3\xa9z" */
}
END_TEST

START_TEST(test_stream_delta_never_passes_the_shown_text)
{
    /* A pending stop prefix: token_text_end beyond text_len is clamped, and
     * a delta never goes backwards. */
    size_t ends[2] = { 9, 1 };
    gen_output out = { 0 };
    out.text = "abc";
    out.text_len = 3;
    out.token_text_end = ends;
    out.n_tokens = 2;
    ck_assert_uint_eq(completion_stream_delta_end(&out, 0, 0), 3);
    ck_assert_uint_eq(completion_stream_delta_end(&out, 1, 3), 3);
}
END_TEST

/* ---- helpers ---- */

START_TEST(test_token_string_uses_bytes_form_for_partial_utf8)
{
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    /* A lone lead byte is encoded as its own byte token. */
    ck_assert_int_eq(tokenizer_encode(tok, "\xe2", 1, &ids, &n, &err), 0);
    ck_assert_uint_eq(n, 1);
    char *s = api_token_string(tok, ids[0]);
    ck_assert_str_eq(s, "bytes:\\xe2");
    free(s);
    free(ids);
    s = api_token_string(tok, 995);
    ck_assert_str_eq(s, " world");
    free(s);
    s = api_token_string(tok, 50256);
    ck_assert_str_eq(s, "<|endoftext|>");
    free(s);
}
END_TEST

START_TEST(test_json_string_bytes_replaces_invalid_utf8)
{
    json_t *j = api_json_string_bytes("ok\xc3(\xe2\x82\xac", 7);
    ck_assert_str_eq(json_string_value(j), "ok\xef\xbf\xbd(\xe2\x82\xac");
    json_decref(j);
    j = api_json_string_bytes("\xed\xa0\x80", 3); /* a surrogate is invalid */
    ck_assert_str_eq(json_string_value(j),
                     "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(j);
}
END_TEST

START_TEST(test_random_ids_are_prefixed_hex_and_distinct)
{
    char a[48], b[48];
    api_random_id(a, sizeof a, "cmpl-");
    api_random_id(b, sizeof b, "cmpl-");
    ck_assert_uint_eq(strlen(a), 5 + 24);
    ck_assert_int_eq(strncmp(a, "cmpl-", 5), 0);
    ck_assert_uint_eq(strspn(a + 5, "0123456789abcdef"), 24);
    ck_assert_str_ne(a, b);
}
END_TEST

START_TEST(test_api_key_is_read_from_a_bearer_header)
{
    ck_assert_str_eq(http_key_bearer("Bearer alpha"), "alpha");
    /* the scheme is case-insensitive; any spaces may follow it */
    ck_assert_str_eq(http_key_bearer("bearer alpha"), "alpha");
    ck_assert_str_eq(http_key_bearer("BEARER   beta-key"), "beta-key");
    /* the rest of the header is the key, trailing spaces included */
    ck_assert_str_eq(http_key_bearer("Bearer alpha "), "alpha ");
    ck_assert_ptr_null(http_key_bearer("Bearer "));
    ck_assert_ptr_null(http_key_bearer("Bearer    "));
    ck_assert_ptr_null(http_key_bearer("alpha"));
    ck_assert_ptr_null(http_key_bearer("Basic alpha"));
    ck_assert_ptr_null(http_key_bearer("Beareralpha"));
    ck_assert_ptr_null(http_key_bearer("Bearerx alpha"));
    ck_assert_ptr_null(http_key_bearer(NULL));
}
END_TEST

/* Anthropic's x-api-key names the key as well as a bearer token; both
 * sent must agree, or the request carries a key that matches none. */
START_TEST(test_api_key_is_read_from_x_api_key_too)
{
    ck_assert_str_eq(http_key_given("Bearer alpha", NULL), "alpha");
    ck_assert_str_eq(http_key_given(NULL, "alpha"), "alpha");
    ck_assert_str_eq(http_key_given("Bearer alpha", "alpha"), "alpha");
    ck_assert_str_eq(http_key_given("Bearer alpha", "beta"), "");
    ck_assert_str_eq(http_key_given("Basic alpha", "beta"), "beta");
    ck_assert_ptr_null(http_key_given(NULL, ""));
    ck_assert_ptr_null(http_key_given(NULL, NULL));
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *parsing = tcase_create("parsing");
    tcase_add_unchecked_fixture(parsing, load_tokenizer, free_tokenizer);
    tcase_add_test(parsing, test_defaults_follow_openai);
    tcase_add_test(parsing, test_every_prompt_form_is_accepted);
    tcase_add_test(parsing, test_fields_are_parsed_into_the_request);
    tcase_add_loop_test(parsing, test_each_bad_field_is_a_400_naming_its_param,
                        0, (int)(sizeof bad_fields / sizeof bad_fields[0]));
    tcase_add_loop_test(parsing, test_wrong_type_message_names_field_and_type,
                        0, sizeof wrong_types / sizeof wrong_types[0]);
    tcase_add_test(parsing, test_session_id_longer_than_128_is_refused);
    tcase_add_test(parsing, test_cache_salt_is_passed_through);
    tcase_add_test(parsing,
                   test_caller_identity_separates_keys_addresses_and_salts);
    tcase_add_test(parsing, test_context_overflow_message_gives_the_numbers);
    tcase_add_test(parsing, test_invalid_json_is_an_invalid_request_error);
    tcase_add_test(parsing, test_null_fields_mean_the_default);
    tcase_add_test(parsing, test_max_n_caps_n_best_of_and_prompts);
    tcase_add_test(parsing,
                   test_prompt_array_over_max_n_is_refused_before_tokenizing);
    tcase_add_test(parsing, test_stop_string_over_the_limit_is_refused);
    tcase_add_test(parsing,
                   test_every_other_field_is_checked_before_tokenizing);
    tcase_add_test(parsing,
                   test_prompt_over_the_context_is_refused_for_the_prompt);
    tcase_add_test(parsing,
                   test_max_n_above_the_slots_leaves_the_slots_in_charge);
    tcase_add_loop_test(
        parsing, test_logit_bias_key_in_decimal_is_accepted, 0,
        (int)(sizeof good_bias_keys / sizeof good_bias_keys[0]));
    tcase_add_loop_test(parsing,
                        test_logit_bias_key_in_any_other_spelling_is_refused, 0,
                        (int)(sizeof bad_bias_keys / sizeof bad_bias_keys[0]));
    tcase_add_test(parsing, test_logit_bias_key_with_nul_is_refused);
    tcase_set_timeout(parsing, 300);
    suite_add_tcase(s, parsing);

    TCase *resp = tcase_create("responses");
    tcase_add_unchecked_fixture(resp, load_tokenizer, free_tokenizer);
    tcase_add_test(resp, test_error_object_has_openai_shape);
    tcase_add_test(resp,
                   test_logprobs_object_with_echo_scores_the_prompt_first);
    tcase_add_test(resp, test_choice_with_echo_prepends_the_prompt_text);
    tcase_add_test(resp, test_top_logprobs_always_hold_the_token_itself);
    tcase_add_test(
        resp, test_top_logprobs_keys_that_collide_keep_the_tokens_own_value);
    tcase_add_test(
        resp, test_choice_with_return_token_ids_names_prompt_and_generated_ids);
    tcase_add_test(
        resp, test_choice_without_logprobs_has_null_logprobs_and_length_finish);
    tcase_add_test(resp, test_best_of_ranks_by_cumulative_logprob);
    tcase_add_test(resp, test_token_string_uses_bytes_form_for_partial_utf8);
    tcase_add_test(resp, test_text_offsets_follow_the_rendered_text);
    tcase_add_test(resp, test_text_offsets_count_the_prompt_without_echo);
    tcase_set_timeout(resp, 300);
    suite_add_tcase(s, resp);

    TCase *stream = tcase_create("streaming and helpers");
    tcase_add_test(stream, test_stream_holds_back_split_utf8);
    tcase_add_test(stream, test_stream_delta_never_passes_the_shown_text);
    tcase_add_test(stream, test_json_string_bytes_replaces_invalid_utf8);
    tcase_add_test(stream, test_random_ids_are_prefixed_hex_and_distinct);
    tcase_add_test(stream, test_api_key_is_read_from_a_bearer_header);
    tcase_add_test(stream, test_api_key_is_read_from_x_api_key_too);
    suite_add_tcase(s, stream);
    return s;
}

int main(void)
{
    return test_run_suite(api_suite());
}
