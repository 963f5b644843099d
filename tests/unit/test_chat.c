/* test_chat.c — the chat template (chat_template.c) and the chat request
 * (chat_request.c), without sockets or an engine: the transcript a
 * conversation renders to, the prefix it keeps from turn to turn, every
 * template mistake refused with a message that names it, and every field of
 * a POST /v1/chat/completions body mapped, or refused by name. */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/chat_request.h"
#include "text/chat_template.h"
#include "test_api_util.h"

static tokenizer *tok;
static chat_template builtin;

static void setup(void)
{
    tok = test_load_tokenizer();
    gpt2d_error err;
    if (chat_template_load(&builtin, NULL, &err) != 0) {
        fprintf(stderr, "built-in chat template: %s\n", err.message);
        exit(EXIT_FAILURE);
    }
}

static void teardown(void)
{
    tokenizer_free(tok);
    tok = NULL;
    chat_template_free(&builtin);
}

/* The rendered prompt, NUL-terminated (malloc'ed). */
static char *render(const chat_template *t, const chat_turn *turns, size_t n)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(chat_template_render(t, turns, n, &b), 0);
    ck_assert_int_eq(buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

#define TURN(role, text)                                                       \
    {                                                                          \
        (role), (text), sizeof(text) - 1                                       \
    }

/* ---- the template ---- */

START_TEST(test_builtin_template_writes_a_plain_transcript)
{
    const chat_turn turns[] = {
        TURN(CHAT_ROLE_SYSTEM, "Be brief."),
        TURN(CHAT_ROLE_USER, "Hi"),
        TURN(CHAT_ROLE_ASSISTANT, " Hello!"),
        TURN(CHAT_ROLE_USER, "How are you?"),
    };
    char *p = render(&builtin, turns, 4);
    ck_assert_str_eq(p, "System: Be brief.\nUser: Hi\nAssistant: Hello!\n"
                        "User: How are you?\nAssistant:");
    free(p);
    ck_assert_uint_eq(builtin.n_stop, 2);
    ck_assert_str_eq(builtin.stop[0], "\nUser:");
    ck_assert_str_eq(builtin.stop[1], "\nSystem:");
}
END_TEST

/* The KV cache reuses a conversation only if each turn's prompt begins with
 * the tokens of the last turn's prompt and reply: the reply, written after
 * the assistant's prefix, is exactly what the next turn renders there. */
START_TEST(test_next_turn_begins_with_the_last_prompt_and_reply_tokens)
{
    const char *reply = " I am fine, thanks.";
    chat_turn turns[] = {
        TURN(CHAT_ROLE_SYSTEM, "Be brief."),
        TURN(CHAT_ROLE_USER, "How are you?"),
        { CHAT_ROLE_ASSISTANT, reply, strlen(reply) },
        TURN(CHAT_ROLE_USER, "Good."),
    };
    char *first = render(&builtin, turns, 2);
    char *second = render(&builtin, turns, 4);
    size_t n1 = strlen(first), n2 = strlen(second);
    char *said = malloc(n1 + strlen(reply) + 1);
    ck_assert_ptr_nonnull(said);
    strcpy(said, first);
    strcat(said, reply);
    ck_assert_int_eq(strncmp(second, said, strlen(said)), 0);

    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    gpt2d_error err;
    ck_assert_int_eq(tokenizer_encode(tok, said, strlen(said), &a, &na, &err),
                     0);
    ck_assert_int_eq(tokenizer_encode(tok, second, n2, &b, &nb, &err), 0);
    ck_assert_uint_gt(nb, na);
    ck_assert_int_eq(memcmp(a, b, na * sizeof *a), 0);
    free(a);
    free(b);
    free(said);
    free(first);
    free(second);
}
END_TEST

static const char chatml[] =
    "{\"system\": {\"prefix\": \"<|im_start|>system\\n\", \"suffix\": \"<|im_end|>\\n\"},\n"
    " \"user\": {\"prefix\": \"<|im_start|>user\\n\", \"suffix\": \"<|im_end|>\\n\"},\n"
    " \"assistant\": {\"prefix\": \"<|im_start|>assistant\\n\", "
    "\"suffix\": \"<|im_end|>\\n\"},\n"
    " \"stop\": [\"<|im_end|>\"]}";

START_TEST(test_template_from_json_replaces_every_marker)
{
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(
        chat_template_parse(&t, chatml, strlen(chatml), "test", &err), 0);
    const chat_turn turns[] = {
        TURN(CHAT_ROLE_SYSTEM, "S"),
        TURN(CHAT_ROLE_USER, "U"),
        TURN(CHAT_ROLE_ASSISTANT, "A"),
    };
    char *p = render(&t, turns, 3);
    ck_assert_str_eq(
        p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
           "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n");
    /* counted without writing, to the byte */
    ck_assert_uint_eq(chat_template_rendered_bytes(&t, turns, 3), strlen(p));
    ck_assert_uint_eq(chat_template_rendered_bytes(&t, turns, 0),
                      strlen("<|im_start|>assistant\n"));
    free(p);
    ck_assert_uint_eq(t.n_stop, 1);
    ck_assert_str_eq(t.stop[0], "<|im_end|>");
    chat_template_free(&t);
}
END_TEST

/* A template that cannot work is refused at start-up, with what is wrong. */
static const struct {
    const char *json, *message;
} bad_templates[] = {
    { "{\"system\": ", "test:1:" },
    { "[]", "is a JSON object" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"function\": {}}",
      "unknown key \"function\"" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tool\": {}}",
      "tool.prefix must be a string" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tools\": \"Tools:\"}",
      "\"tools\" must be an object with a prefix and a suffix" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tools\": {\"prefix\": \"T\", \"suffix\": 0}}",
      "tools.suffix must be a string" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tool_call\": {\"prefix\": \"\", \"suffix\": \"</c>\"}}",
      "tool_call.prefix must not be empty" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tool_call\": {\"prefix\": \"<c>\", \"suffix\": \"</c>\", "
      "\"name\": \"c\"}}",
      "unknown key \"name\" in tool_call" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"], \"tool_call\": {\"prefix\": \"<c>\"}}",
      "tool_call.suffix must be a string" },
    { "{\"user\": {\"prefix\": \"\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": "
      "\"A:\", \"suffix\": \"\"}, \"stop\": [\"x\"]}",
      "\"system\" must be an object" },
    { "{\"system\": {\"prefix\": \"\"}, \"user\": {\"prefix\": \"\", \"suffix\": \"\"}, "
      "\"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, \"stop\": [\"x\"]}",
      "system.suffix must be a string" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\", \"name\": \"s\"}, \"user\": "
      "{\"prefix\": \"\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
      "\"suffix\": \"\"}, \"stop\": [\"x\"]}",
      "unknown key \"name\" in system" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": 1, "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"]}",
      "user.prefix must be a string" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"\", \"suffix\": \"\"}, "
      "\"stop\": [\"x\"]}",
      "assistant.prefix must not be empty" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}}",
      "\"stop\" must be an array of 1 to 4 strings" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": []}",
      "\"stop\" must be an array of 1 to 4 strings" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
      "\"stop\" must be an array of 1 to 4 strings" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"a\", \"\"]}",
      "stop[1] is empty" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [7]}",
      "stop[0] must be a string" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
      "\"stop\": [\"\\u0000\"]}",
      "test:1:" },
    { "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"system\": {\"prefix\": \"\", "
      "\"suffix\": \"\"}}",
      "duplicate" },
};

START_TEST(test_bad_template_is_refused_with_its_reason)
{
    chat_template t;
    gpt2d_error err = { { 0 } };
    const char *json = bad_templates[_i].json;
    ck_assert_msg(chat_template_parse(&t, json, strlen(json), "test", &err) ==
                      -1,
                  "accepted: %s", json);
    ck_assert_msg(strstr(err.message, bad_templates[_i].message) != NULL,
                  "'%s' lacks '%s'", err.message, bad_templates[_i].message);
    ck_assert_ptr_null(t.prefix[CHAT_ROLE_SYSTEM]);
    ck_assert_ptr_null(t.stop[0]);
}
END_TEST

START_TEST(test_template_longer_than_the_limit_is_refused)
{
    char big[CHAT_TEMPLATE_MAX_TEXT + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char json[1024];
    snprintf(
        json, sizeof json,
        "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": "
        "\"%s\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
        "\"suffix\": \"\"}, \"stop\": [\"x\"]}",
        big);
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(chat_template_parse(&t, json, strlen(json), "test", &err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err.message, "user.prefix is 257 bytes long"));
    big[CHAT_TEMPLATE_MAX_TEXT] = '\0'; /* exactly the limit: fine */
    snprintf(
        json, sizeof json,
        "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": "
        "\"%s\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
        "\"suffix\": \"\"}, \"stop\": [\"x\"]}",
        big);
    ck_assert_int_eq(chat_template_parse(&t, json, strlen(json), "test", &err),
                     0);
    chat_template_free(&t);
}
END_TEST

START_TEST(test_template_file_is_read_and_named_in_errors)
{
    char path[300];
    test_scratch_path(path, sizeof path, "chat-template-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, chatml, strlen(chatml)),
                     (ssize_t)strlen(chatml));
    close(fd);
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(chat_template_load(&t, path, &err), 0);
    ck_assert_str_eq(t.prefix[CHAT_ROLE_USER], "<|im_start|>user\n");
    chat_template_free(&t);
    fd = open(path, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "{\n  \"stop\": ,", 13), 13);
    close(fd);
    ck_assert_int_eq(chat_template_load(&t, path, &err), -1);
    char want[340];
    snprintf(want, sizeof want, "chat-template %s:2:", path);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s", err.message);
    unlink(path);
    ck_assert_int_eq(chat_template_load(&t, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "No such file"));
}
END_TEST

/* etc/chat-template.json, the operator's starting point, is the built-in. */
START_TEST(test_shipped_example_template_is_the_builtin)
{
    char path[4096];
    test_src_path(path, sizeof path, "etc/chat-template.json");
    chat_template t;
    gpt2d_error err;
    ck_assert_msg(chat_template_load(&t, path, &err) == 0, "%s", err.message);
    for (size_t r = 0; r < CHAT_N_ROLES; r++) {
        ck_assert_str_eq(t.prefix[r], builtin.prefix[r]);
        ck_assert_str_eq(t.suffix[r], builtin.suffix[r]);
    }
    ck_assert_str_eq(t.call_prefix, builtin.call_prefix);
    ck_assert_str_eq(t.call_suffix, builtin.call_suffix);
    ck_assert_uint_eq(t.n_stop, builtin.n_stop);
    for (size_t i = 0; i < t.n_stop; i++)
        ck_assert_str_eq(t.stop[i], builtin.stop[i]);
    chat_template_free(&t);
}
END_TEST

/* ---- the request ---- */

static const completion_limits limits = {
    .n_ctx = 64, .vocab_size = 50257, .max_sequences = 4, .max_stop_bytes = 16
};

static int parse(completion_request *req, const char *body, api_error *e)
{
    return chat_request_parse(req, body, strlen(body), tok, &builtin, &limits,
                              e);
}

/* The ids of `text`, compared with the request's prompt. */
static void assert_prompt_is(const completion_request *req, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    ck_assert_int_eq(tokenizer_encode(tok, text, strlen(text), &ids, &n, &err),
                     0);
    ck_assert_uint_eq(req->n_prompts, 1);
    ck_assert_uint_eq(req->prompts[0].n, n);
    ck_assert_int_eq(memcmp(req->prompts[0].ids, ids, n * sizeof *ids), 0);
    free(ids);
}

START_TEST(test_messages_become_one_prompt_with_the_template_stops)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"developer\", \"content\": "
              "\"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\", "
              "\"name\": \"ann\"}, {\"role\": \"assistant\", \"content\": "
              "\" Hello!\"}, {\"role\": \"system\", \"content\": \"Go on.\"},"
              " {\"role\": \"user\", \"content\": \"More\"}]}",
              &e),
        0);
    assert_prompt_is(&req, "System: Be brief.\nUser: Hi\nAssistant: Hello!\n"
                           "System: Go on.\nUser: More\nAssistant:");
    /* OpenAI's chat defaults: one choice, the rest of the context */
    ck_assert_uint_eq(req.n, 1);
    ck_assert_uint_eq(req.best_of, 1);
    ck_assert_uint_eq(req.max_tokens, 64 - req.prompts[0].n);
    ck_assert(!req.logprobs && !req.echo && !req.stream && !req.has_seed);
    ck_assert_uint_eq(req.n_stop, 2);
    ck_assert_str_eq(req.stop[0], "\nUser:");
    ck_assert_str_eq(req.stop[1], "\nSystem:");
    completion_request_free(&req);
}
END_TEST

START_TEST(test_text_parts_are_joined_by_newlines)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse(&req,
                           "{\"messages\": [{\"role\": \"user\", \"content\": ["
                           "{\"type\": \"text\", \"text\": \"one\"}, "
                           "{\"type\": \"text\", \"text\": \"two\"}]}]}",
                           &e),
                     0);
    assert_prompt_is(&req, "User: one\ntwo\nAssistant:");
    completion_request_free(&req);
}
END_TEST

/* An assistant turn's refusal part is what it said: written as its text. */
START_TEST(test_an_assistant_refusal_part_is_its_text)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
              " {\"role\": \"assistant\", \"content\": ["
              "{\"type\": \"text\", \"text\": \" Well\"}, "
              "{\"type\": \"refusal\", \"refusal\": \"I won't.\"}]},"
              " {\"role\": \"user\", \"content\": \"Ok\"}]}",
              &e),
        0);
    assert_prompt_is(
        &req, "User: Hi\nAssistant: Well\nI won't.\nUser: Ok\nAssistant:");
    completion_request_free(&req);
}
END_TEST

/* top_logprobs goes to 20, as OpenAI's. */
START_TEST(test_top_logprobs_go_to_twenty)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": "
              "\"Hi\"}], \"logprobs\": true, \"top_logprobs\": 20}",
              &e),
        0);
    ck_assert_uint_eq(req.n_logprobs, 20);
    completion_request_free(&req);
}
END_TEST

/* An empty message is still a turn: its markers are written. */
START_TEST(test_empty_contents_are_turns_too)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"system\", \"content\": \"\"},"
              " {\"role\": \"user\", \"content\": []}]}",
              &e),
        0);
    assert_prompt_is(&req, "System: \nUser: \nAssistant:");
    completion_request_free(&req);
}
END_TEST

/* The fields completions reads are read the same way here, and the
 * request's own stop strings come first. */
START_TEST(test_shared_fields_parse_as_on_completions)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
              " \"max_tokens\": 5, \"n\": 2, \"temperature\": 0.5, "
              "\"top_p\": 0.9, \"top_k\": 7, \"min_p\": 0.1, "
              "\"presence_penalty\": 1, \"frequency_penalty\": -1, "
              "\"repetition_penalty\": 1.3, \"seed\": 42, "
              "\"stop\": [\"a\", \"b\"], \"logit_bias\": {\"50256\": -100},"
              " \"logprobs\": true, \"top_logprobs\": 3, "
              "\"session_id\": \"c-1\", \"cache_salt\": \"s\", "
              "\"stream\": true, \"stream_options\": "
              "{\"include_usage\": true}, \"user\": \"u\", "
              "\"model\": \"gpt2\", \"store\": false}",
              &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 5);
    ck_assert_uint_eq(req.n, 2);
    ck_assert_uint_eq(req.best_of, 2);
    ck_assert_float_eq(req.sampling.temperature, 0.5f);
    ck_assert_float_eq(req.sampling.top_p, 0.9f);
    ck_assert_uint_eq(req.sampling.top_k, 7);
    ck_assert_float_eq(req.sampling.min_p, 0.1f);
    ck_assert_float_eq(req.sampling.presence_penalty, 1.0f);
    ck_assert_float_eq(req.sampling.frequency_penalty, -1.0f);
    ck_assert_float_eq(req.sampling.repetition_penalty, 1.3f);
    ck_assert(req.has_seed);
    ck_assert_uint_eq(req.seed, 42);
    ck_assert_uint_eq(req.n_stop, 4);
    ck_assert_str_eq(req.stop[0], "a");
    ck_assert_str_eq(req.stop[1], "b");
    ck_assert_str_eq(req.stop[2], "\nUser:");
    ck_assert_str_eq(req.stop[3], "\nSystem:");
    ck_assert_uint_eq(req.sampling.n_logit_bias, 1);
    ck_assert_int_eq(req.sampling.logit_bias[0].token, 50256);
    ck_assert(req.logprobs);
    ck_assert_uint_eq(req.n_logprobs, 3);
    ck_assert_str_eq(req.session_id, "c-1");
    ck_assert(req.has_cache_salt);
    ck_assert(req.stream && req.include_usage && !req.echo);
    completion_request_free(&req);
}
END_TEST

START_TEST(test_max_completion_tokens_wins_over_max_tokens)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
              " \"max_tokens\": 9, \"max_completion_tokens\": 3}",
              &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 3);
    completion_request_free(&req);
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
              " \"max_tokens\": 0, \"logprobs\": true}",
              &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 0);
    ck_assert(req.logprobs);
    ck_assert_uint_eq(req.n_logprobs, 0);
    completion_request_free(&req);
}
END_TEST

/* Without a max, no more than the caller's whole token budget pays for:
 * prompt + n x max within it, at least one token; a max sent is kept. */
START_TEST(test_default_max_is_what_the_token_budget_pays_for_n)
{
    completion_limits small = limits;
    small.token_budget = 40;
    completion_request req;
    api_error e;
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    size_t n_prompt = req.prompts[0].n;
    ck_assert_uint_lt(n_prompt, 40);
    ck_assert_uint_eq(req.max_tokens, 40 - n_prompt);
    ck_assert_ptr_null(req.max_param);
    completion_request_free(&req);
    body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 3}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, (40 - n_prompt) / 3);
    completion_request_free(&req);
    /* a budget the prompt fills: one token, left to the charge to refuse */
    small.token_budget = n_prompt;
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 1);
    completion_request_free(&req);
    /* a budget larger than the context: the rest of the context */
    small.token_budget = 1000;
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 64 - n_prompt);
    completion_request_free(&req);
    small.token_budget = 40;
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
           "\"max_completion_tokens\": 50}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 50);
    completion_request_free(&req);
}
END_TEST

/* Without a max, the rest of the context as far as the KV cache holds it
 * for every sequence; a max sent is kept and named as sent. */
START_TEST(test_default_max_is_what_the_kv_cache_holds_for_n)
{
    completion_limits small = limits;
    small.kv_blocks = 4; /* one context of 4 blocks of 16 */
    completion_request req;
    api_error e;
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
        "\"n\": 2}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 32 - req.prompts[0].n);
    ck_assert_ptr_null(req.max_param);
    completion_request_free(&req);
    /* one sequence: the whole context */
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 64 - req.prompts[0].n);
    completion_request_free(&req);
    /* a prompt 4 sequences cannot hold: one token, left to the submission
     * to refuse */
    body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a a a a a a a a a a "
        "a a a a a a a a a a a a a a a a a a a a a a a a a a a a\"}], \"n\": 4}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 1);
    completion_request_free(&req);
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
           "\"n\": 2, \"max_tokens\": 40}";
    ck_assert_int_eq(
        chat_request_parse(&req, body, strlen(body), tok, &builtin, &small, &e),
        0);
    ck_assert_uint_eq(req.max_tokens, 40);
    ck_assert_str_eq(req.max_param, "max_tokens");
    completion_request_free(&req);
}
END_TEST

/* Many empty messages under long markers: refused by their byte count
 * (a text of B bytes is at least B / longest-token tokens) before the
 * conversation is written out or tokenized; a conversation just within
 * that bound is left to the token count. */
START_TEST(test_a_conversation_too_long_by_its_bytes_is_not_tokenized)
{
    char marker[CHAT_TEMPLATE_MAX_TEXT + 1];
    memset(marker, '~', CHAT_TEMPLATE_MAX_TEXT);
    marker[CHAT_TEMPLATE_MAX_TEXT] = '\0';
    char json[4096];
    snprintf(
        json, sizeof json,
        "{\"system\": {\"prefix\": \"%s\", \"suffix\": \"\"}, "
        "\"user\": {\"prefix\": \"%s\", \"suffix\": \"%s\"}, "
        "\"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, \"stop\": [\"x\"]}",
        marker, marker, marker);
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(chat_template_parse(&t, json, strlen(json), "test", &err),
                     0);
    const size_t longest = tokenizer_longest_token(tok);
    ck_assert_uint_ge(longest, 13); /* "<|endoftext|>" is one token */
    /* the most empty user messages (512 bytes each, and "A:") whose text
     * is below 65 x longest bytes, so not surely over 64 tokens */
    const size_t fit = (65 * longest - 3) / (2 * CHAT_TEMPLATE_MAX_TEXT);
    for (size_t n = fit; n <= fit + 1; n++) {
        gpt2d_buf body = GPT2D_BUF_INIT;
        ck_assert_int_eq(buf_append(&body, "{\"messages\": [", 14), 0);
        static const char msg[] = ", {\"role\": \"user\", \"content\": \"\"}";
        for (size_t i = 0; i < n; i++) {
            const size_t skip = i == 0 ? 2 : 0; /* no comma before the first */
            ck_assert_int_eq(buf_append(&body, msg + skip, strlen(msg) - skip),
                             0);
        }
        ck_assert_int_eq(buf_append(&body, "]}", 2), 0);
        completion_request req;
        api_error e;
        ck_assert_int_eq(chat_request_parse(&req, (const char *)body.data,
                                            body.len, tok, &t, &limits, &e),
                         -1);
        ck_assert_str_eq(e.param, "messages");
        const bool by_bytes = strncmp(e.message, "the messages are written as ",
                                      28) == 0;
        ck_assert_msg(by_bytes == (n > fit), "%zu messages: %s", n, e.message);
        buf_free(&body);
    }
    chat_template_free(&t);
}
END_TEST

/* What a text model without tools can still honour is accepted. */
START_TEST(test_harmless_forms_of_unsupported_fields_are_accepted)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
              " {\"role\": \"assistant\", \"content\": \"x\", "
              "\"tool_calls\": []}], \"tools\": [], "
              "\"tool_choice\": \"none\", \"functions\": null, "
              "\"response_format\": {\"type\": \"text\"}, "
              "\"modalities\": [\"text\"], \"audio\": null, "
              "\"parallel_tool_calls\": false}",
              &e),
        0);
    completion_request_free(&req);
}
END_TEST

#define MSG "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]"

static const struct {
    const char *body, *param;
} bad_bodies[] = {
    { "{}", "messages" },
    { "{\"messages\": null}", "messages" },
    { "{\"messages\": \"Hi\"}", "messages" },
    { "{\"messages\": []}", "messages" },
    { "{\"messages\": [\"Hi\"]}", "messages[0]" },
    { "{\"messages\": [{\"content\": \"Hi\"}]}", "messages[0].role" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bot\", "
      "\"content\": \"b\"}]}",
      "messages[1].role" },
    { "{\"messages\": [{\"role\": \"tool\", \"content\": \"a\", \"tool_call_id\": \"1\"}]}",
      "messages[0].role" },
    { "{\"messages\": [{\"role\": \"function\", \"content\": \"a\", \"name\": \"f\"}]}",
      "messages[0].role" },
    { "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": null}]}",
      "messages[0].content" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": 7}]}",
      "messages[0].content" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}]}",
      "messages[0].content[0]" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]}",
      "messages[0].content[0].type" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
      "\"a\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"http://x/y.png\"}}]}]}",
      "messages[0].content[1].type" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_audio\", "
      "\"input_audio\": {\"data\": \"\", \"format\": \"wav\"}}]}]}",
      "messages[0].content[0].type" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"file\"}]}]}",
      "messages[0].content[0].type" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"refusal\", "
      "\"refusal\": \"no\"}]}]}",
      "messages[0].content[0].type" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"refusal\", "
      "\"text\": \"no\"}]}]}",
      "messages[0].content[0].refusal" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
      "messages[0].content[0].text" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
      "[{\"id\": \"1\", \"type\": \"function\"}]}]}",
      "messages[0].tool_calls" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"function_call\": "
      "{\"name\": \"f\"}}]}",
      "messages[0].function_call" },
    { "{" MSG
      ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}",
      "tools" },
    { "{" MSG ", \"tool_choice\": \"auto\"}", "tool_choice" },
    { "{" MSG ", \"tool_choice\": {\"type\": \"function\"}}", "tool_choice" },
    { "{" MSG ", \"functions\": [{\"name\": \"f\"}]}", "functions" },
    { "{" MSG ", \"function_call\": \"auto\"}", "function_call" },
    { "{" MSG
      ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {}}}",
      "response_format.json_schema.schema" },
    { "{" MSG ", \"response_format\": \"text\"}", "response_format" },
    { "{" MSG ", \"audio\": {\"voice\": \"alloy\", \"format\": \"wav\"}}",
      "audio" },
    { "{" MSG ", \"modalities\": [\"text\", \"audio\"]}", "modalities" },
    { "{" MSG ", \"logprobs\": 2}", "logprobs" },
    { "{" MSG ", \"top_logprobs\": 2}", "top_logprobs" },
    { "{" MSG ", \"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs" },
    { "{" MSG ", \"n\": 0}", "n" },
    { "{" MSG ", \"n\": 5}", "n" },
    { "{" MSG ", \"max_tokens\": -1}", "max_tokens" },
    { "{" MSG ", \"max_tokens\": 60}", "max_tokens" },
    { "{" MSG ", \"max_completion_tokens\": 60}", "max_completion_tokens" },
    { "{" MSG ", \"max_tokens\": 3, \"max_completion_tokens\": 60}",
      "max_completion_tokens" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": \"" /* 70 tokens */
      "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a "
      "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a\"}]}",
      "messages" },
    { "{" MSG ", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", "stop" },
    { "{" MSG ", \"stop\": \"longer than sixteen bytes\"}", "stop" },
    { "{" MSG ", \"temperature\": 3}", "temperature" },
    { "{" MSG ", \"top_p\": 0}", "top_p" },
    { "{" MSG ", \"logit_bias\": {\"-1\": 1}}", "logit_bias" },
    { "{" MSG ", \"seed\": \"1\"}", "seed" },
    { "{" MSG ", \"session_id\": \"no spaces\"}", "session_id" },
    { "{" MSG ", \"cache_salt\": \"\"}", "cache_salt" },
    { "{" MSG ", \"stream_options\": {\"include_usage\": true}}",
      "stream_options" },
    { "{" MSG ", \"model\": 1}", "model" },
};

START_TEST(test_each_bad_field_is_a_400_naming_its_param)
{
    completion_request req;
    api_error e;
    const char *body = bad_bodies[_i].body;
    memset(&e, 0, sizeof e);
    test_expect_refusal(parse(&req, body, &e), &e, body, bad_bodies[_i].param);
}
END_TEST

START_TEST(test_refusals_say_why)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse(&req,
              "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\":"
              " \"image_url\"}]}]}",
              &e),
        -1);
    ck_assert_str_eq(e.message,
                     "messages[0].content[0].type is \"image_url\": only text "
                     "parts are supported, this model reads text only");
    ck_assert_int_eq(parse(&req, "{" MSG ", \"tools\": [{}]}", &e), -1);
    ck_assert_str_eq(e.message,
                     "tools are not supported: this model writes text only");
    ck_assert_int_eq(
        parse(&req, "{" MSG ", \"max_completion_tokens\": 60}", &e), -1);
    ck_assert_str_eq(
        e.message, "this model's maximum context length is 64 tokens, however "
                   "you requested 66 tokens (6 in your prompt; 60 for the "
                   "completion); reduce the prompt or max_completion_tokens");
}
END_TEST

/* ---- tools in the template ---- */

START_TEST(test_builtin_template_writes_tools_results_and_calls)
{
    ck_assert_str_eq(builtin.prefix[CHAT_ROLE_TOOL], "Tool: ");
    ck_assert_str_eq(builtin.suffix[CHAT_ROLE_TOOL], "\n");
    ck_assert_str_eq(builtin.prefix[CHAT_ROLE_TOOLS], "Tools:\n");
    ck_assert_str_eq(builtin.suffix[CHAT_ROLE_TOOLS], "\n");
    ck_assert_str_eq(builtin.call_prefix, "<tool_call>");
    ck_assert_str_eq(builtin.call_suffix, "</tool_call>");
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(
        chat_template_write_call(&builtin, "f", 1, "{\"a\":1}", 7, &b), 0);
    ck_assert_int_eq(chat_template_write_call_howto(&builtin, &b), 0);
    ck_assert_int_eq(buf_append(&b, "", 1), 0);
    ck_assert_str_eq((const char *)b.data,
                     "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}"
                     "</tool_call>To call a tool, write <tool_call>{\"name\":"
                     "\"NAME\",\"arguments\":ARGUMENTS}</tool_call>, ARGUMENTS "
                     "being a JSON object that its parameters describe.");
    buf_free(&b);
    const chat_turn turns[] = {
        TURN(CHAT_ROLE_TOOLS, "T"),
        TURN(CHAT_ROLE_USER, "U"),
        TURN(CHAT_ROLE_TOOL, "R"),
    };
    char *p = render(&builtin, turns, 3);
    ck_assert_str_eq(p, "Tools:\nT\nUser: U\nTool: R\nAssistant:");
    ck_assert_uint_eq(chat_template_rendered_bytes(&builtin, turns, 3),
                      strlen(p));
    free(p);
}
END_TEST

/* A template written before tools keeps working, with the built-in's. */
START_TEST(test_template_without_tool_entries_takes_the_builtin_ones)
{
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(
        chat_template_parse(&t, chatml, strlen(chatml), "test", &err), 0);
    for (size_t r = CHAT_ROLE_TOOL; r <= CHAT_ROLE_TOOLS; r++) {
        ck_assert_str_eq(t.prefix[r], builtin.prefix[r]);
        ck_assert_str_eq(t.suffix[r], builtin.suffix[r]);
    }
    ck_assert_str_eq(t.call_prefix, "<tool_call>");
    ck_assert_str_eq(t.call_suffix, "</tool_call>");
    chat_template_free(&t);
}
END_TEST

START_TEST(test_template_tool_entries_replace_the_builtin_ones)
{
    static const char json[] =
        "{\"system\": {\"prefix\": \"S:\", \"suffix\": \"\\n\"},"
        " \"user\": {\"prefix\": \"U:\", \"suffix\": \"\\n\"},"
        " \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\\n\"},"
        " \"tool\": {\"prefix\": \"<result>\", \"suffix\": \"</result>\\n\"},"
        " \"tools\": {\"prefix\": \"<tools>\", \"suffix\": \"</tools>\"},"
        " \"tool_call\": {\"prefix\": \"\\u00abcall\\u00bb\", \"suffix\": \"\"},"
        " \"stop\": [\"\\nU:\"]}";
    chat_template t;
    gpt2d_error err;
    ck_assert_msg(chat_template_parse(&t, json, strlen(json), "test", &err) ==
                      0,
                  "%s", err.message);
    const chat_turn turns[] = {
        TURN(CHAT_ROLE_TOOLS, "T"),
        TURN(CHAT_ROLE_TOOL, "R"),
    };
    char *p = render(&t, turns, 2);
    ck_assert_str_eq(p, "<tools>T</tools><result>R</result>\nA:");
    free(p);
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(chat_template_write_call(&t, "g", 1, "[]", 2, &b), 0);
    ck_assert_int_eq(buf_append(&b, "", 1), 0);
    ck_assert_str_eq((const char *)b.data,
                     "\xc2\xab"
                     "call\xc2\xbb{\"name\":\"g\",\"arguments\":[]}");
    buf_free(&b);
    chat_template_free(&t);
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tpl = tcase_create("template");
    tcase_add_unchecked_fixture(tpl, setup, teardown);
    tcase_add_unchecked_fixture(tpl, test_scratch_make, test_scratch_remove);
    tcase_add_test(tpl, test_builtin_template_writes_a_plain_transcript);
    tcase_add_test(tpl,
                   test_next_turn_begins_with_the_last_prompt_and_reply_tokens);
    tcase_add_test(tpl, test_template_from_json_replaces_every_marker);
    tcase_add_loop_test(tpl, test_bad_template_is_refused_with_its_reason, 0,
                        (int)(sizeof bad_templates / sizeof bad_templates[0]));
    tcase_add_test(tpl, test_template_longer_than_the_limit_is_refused);
    tcase_add_test(tpl, test_template_file_is_read_and_named_in_errors);
    tcase_add_test(tpl, test_shipped_example_template_is_the_builtin);
    tcase_add_test(tpl, test_builtin_template_writes_tools_results_and_calls);
    tcase_add_test(tpl,
                   test_template_without_tool_entries_takes_the_builtin_ones);
    tcase_add_test(tpl, test_template_tool_entries_replace_the_builtin_ones);
    tcase_set_timeout(tpl, 300);
    suite_add_tcase(s, tpl);

    TCase *req = tcase_create("request");
    tcase_add_unchecked_fixture(req, setup, teardown);
    tcase_add_test(req,
                   test_messages_become_one_prompt_with_the_template_stops);
    tcase_add_test(req, test_text_parts_are_joined_by_newlines);
    tcase_add_test(req, test_an_assistant_refusal_part_is_its_text);
    tcase_add_test(req, test_top_logprobs_go_to_twenty);
    tcase_add_test(req, test_empty_contents_are_turns_too);
    tcase_add_test(req, test_shared_fields_parse_as_on_completions);
    tcase_add_test(req, test_max_completion_tokens_wins_over_max_tokens);
    tcase_add_test(req, test_default_max_is_what_the_kv_cache_holds_for_n);
    tcase_add_test(req, test_default_max_is_what_the_token_budget_pays_for_n);
    tcase_add_test(req,
                   test_a_conversation_too_long_by_its_bytes_is_not_tokenized);
    tcase_add_test(req, test_harmless_forms_of_unsupported_fields_are_accepted);
    tcase_add_loop_test(req, test_each_bad_field_is_a_400_naming_its_param, 0,
                        (int)(sizeof bad_bodies / sizeof bad_bodies[0]));
    tcase_add_test(req, test_refusals_say_why);
    tcase_set_timeout(req, 300);
    suite_add_tcase(s, req);
    return s;
}

int main(void)
{
    return test_run_suite(chat_suite());
}
