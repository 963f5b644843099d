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
#include "api/chat_tools.h"
#include "api/messages_request.h"
#include "grammar/grammar.h"
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
      "messages[0].tool_call_id" },
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
      "messages[0].tool_calls[0].function" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"function_call\": "
      "{\"name\": \"f\"}}]}",
      "messages[0].function_call" },
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
    ck_assert_str_eq(e.message, "tools[0].type must be \"function\"");
    ck_assert_int_eq(
        parse(&req, "{" MSG ", \"max_completion_tokens\": 60}", &e), -1);
    ck_assert_str_eq(
        e.message, "this model's maximum context length is 64 tokens, however "
                   "you requested 66 tokens (6 in your prompt; 60 for the "
                   "completion); reduce the prompt or max_completion_tokens");
    ck_assert_str_eq(e.code, "context_length_exceeded");
}
END_TEST

/* ---- tools ---- */

/* Room for a tools' description: the request tests above keep GPT-2's
 * context at 64 tokens to reach its limits quickly. */
static const completion_limits wide = {
    .n_ctx = 1024, .vocab_size = 50257, .max_sequences = 4, .max_stop_bytes = 16
};

static int parse_wide(completion_request *req, const char *body, api_error *e)
{
    return chat_request_parse(req, body, strlen(body), tok, &builtin, &wide, e);
}

/* The prompt's text, decoded from its tokens (malloc'ed, NUL-terminated). */
static char *prompt_text(const completion_request *req)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    for (size_t i = 0; i < req->prompts[0].n; i++) {
        size_t len = 0;
        const char *t = tokenizer_token_bytes(tok, req->prompts[0].ids[i],
                                              &len);
        ck_assert_int_eq(buf_append(&b, t, len), 0);
    }
    ck_assert_int_eq(buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

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

#define WEATHER_TOOL                                                           \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "      \
    "\"description\": \"Weather now\", \"parameters\": {\"type\": "            \
    "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "         \
    "\"required\": [\"city\"]}}}"
#define TIME_TOOL "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}"
#define WEATHER_LINE                                                           \
    "{\"name\":\"get_weather\",\"description\":\"Weather now\","               \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"  \
    "\"string\"}},\"required\":[\"city\"]}}\n"
#define HOWTO                                                                  \
    "To call a tool, write <tool_call>{\"name\":\"NAME\",\"arguments\":"       \
    "ARGUMENTS}</tool_call>, ARGUMENTS being a JSON object that its "          \
    "parameters describe."

/* The tools come first, once, so every turn of a conversation with the
 * same tools shares them as its prefix. */
START_TEST(test_tools_are_described_at_the_start)
{
    completion_request req;
    api_error e;
    ck_assert_msg(
        parse_wide(
            &req,
            "{\"messages\": [{\"role\": \"system\", \"content\": \"Be "
            "brief.\"}, {\"role\": \"user\", \"content\": \"Weather?\"}],"
            " \"tools\": [" WEATHER_TOOL ", " TIME_TOOL "]}",
            &e) == 0,
        "%s", e.message);
    char *p = prompt_text(&req);
    ck_assert_str_eq(p, "Tools:\n" WEATHER_LINE "{\"name\":\"now\"}\n" HOWTO
                        "\nSystem: Be brief.\nUser: Weather?\nAssistant:");
    free(p);
    completion_request_free(&req);
}
END_TEST

/* Which choice makes a grammar, and how the answer is read. */
START_TEST(test_tool_choice_sets_the_grammar_and_the_reading)
{
    static const struct {
        const char *extra;
        bool calls; /* a grammar of calls, read back for calls */
    } cases[] = {
        { "", true },
        { ", \"tool_choice\": \"auto\"", true },
        { ", \"tool_choice\": \"required\"", true },
        { ", \"tool_choice\": {\"type\": \"function\", \"function\": "
          "{\"name\": \"now\"}}",
          true },
        { ", \"tool_choice\": \"none\"", false },
        { ", \"tool_choice\": null, \"parallel_tool_calls\": false", true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{" MSG ", \"tools\": [" WEATHER_TOOL ", " TIME_TOOL "]%s}",
                 cases[i].extra);
        completion_request req;
        api_error e;
        ck_assert_msg(parse_wide(&req, body, &e) == 0, "%s: %s", body,
                      e.message);
        if (cases[i].calls) {
            ck_assert_ptr_nonnull(req.constraint.gbnf);
            ck_assert_uint_eq(strlen(req.constraint.gbnf), req.constraint.len);
            ck_assert_str_eq(req.constraint.param, "tools");
            ck_assert_str_eq(req.tool_calls.call_prefix, "<tool_call>");
            ck_assert_str_eq(req.tool_calls.call_suffix, "</tool_call>");
            ck_assert_str_eq(req.tool_calls.end, "\n");
        } else {
            ck_assert_ptr_null(req.constraint.gbnf);
            ck_assert_ptr_null(req.tool_calls.call_prefix);
        }
        completion_request_free(&req);
    }
    /* none leaves response_format's constraint as it is */
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse_wide(&req,
                                "{" MSG ", \"tools\": [" TIME_TOOL
                                "], \"tool_choice\": "
                                "\"none\", \"response_format\": {\"type\": "
                                "\"json_object\"}}",
                                &e),
                     0);
    ck_assert_ptr_nonnull(req.constraint.gbnf);
    ck_assert_str_eq(req.constraint.param, "response_format");
    ck_assert_ptr_null(req.tool_calls.call_prefix);
    completion_request_free(&req);
    /* without tools, nothing changes */
    ck_assert_int_eq(parse_wide(&req, "{" MSG "}", &e), 0);
    ck_assert_ptr_null(req.constraint.gbnf);
    ck_assert_ptr_null(req.tool_calls.call_prefix);
    completion_request_free(&req);
}
END_TEST

/* An assistant's calls are written in the template's call format after
 * its content, their arguments compact; a tool's result as its role. */
START_TEST(test_calls_and_results_are_written_in_the_call_format)
{
    completion_request req;
    api_error e;
    ck_assert_msg(
        parse_wide(
            &req,
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"},"
            " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": ["
            "{\"id\": \"call_1\", \"type\": \"function\", \"function\": "
            "{\"name\": \"get_weather\", \"arguments\": \"{ \\\"city\\\" :"
            " \\\"New York\\\",\\n \\\"t\\\": [1, 2.50] }\"}}, "
            "{\"id\": \"call_2\", \"type\": \"function\", \"function\": "
            "{\"name\": \"now\", \"arguments\": \"{}\"}}]},"
            " {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": "
            "\"noon\"},"
            " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": "
            "[{\"type\": \"text\", \"text\": \"sunny\"}]},"
            " {\"role\": \"assistant\", \"content\": \" Sunny.\", "
            "\"tool_calls\": [{\"id\": \"c3\", \"type\": \"function\", "
            "\"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}]},"
            " {\"role\": \"assistant\", \"content\": \" Done.\", "
            "\"tool_calls\": []},"
            " {\"role\": \"user\", \"content\": \"Thanks\"}]}",
            &e) == 0,
        "%s", e.message);
    char *p = prompt_text(&req);
    ck_assert_str_eq(
        p, "User: Weather?\n"
           "Assistant:<tool_call>{\"name\":\"get_weather\",\"arguments\":"
           "{\"city\":\"New York\",\"t\":[1,2.50]}}</tool_call><tool_call>"
           "{\"name\":\"now\",\"arguments\":{}}</tool_call>\n"
           "Tool: noon\nTool: sunny\n"
           "Assistant: Sunny.<tool_call>{\"name\":\"now\",\"arguments\":{}}"
           "</tool_call>\n"
           "Assistant: Done.\nUser: Thanks\nAssistant:");
    free(p);
    /* no tools sent this turn: no description, no grammar */
    ck_assert_ptr_null(req.constraint.gbnf);
    completion_request_free(&req);
}
END_TEST

/* The KV cache reuses a conversation with calls as it does one without:
 * the reply the grammar made (calls, then the assistant's suffix) is
 * exactly what the next turn's prompt holds after the last prompt. */
START_TEST(test_next_turn_with_calls_begins_with_the_last_prompt_and_reply)
{
    static const char *const replies[] = {
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":"
        "\"Paris\"}}</tool_call>",
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":"
        "\"Paris\"}}</tool_call><tool_call>{\"name\":\"now\",\"arguments\":"
        "{}}</tool_call>\n",
    };
    static const char *const calls_sent_back[] = {
        "{\"id\": \"call_a\", \"type\": \"function\", \"function\": "
        "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":"
        "\\\"Paris\\\"}\"}}",
        "{\"id\": \"call_a\", \"type\": \"function\", \"function\": "
        "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":"
        "\\\"Paris\\\"}\"}}, {\"id\": \"call_b\", \"type\": \"function\", "
        "\"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}",
    };
    for (size_t k = 0; k < 2; k++) {
        char body[2048];
        completion_request first, second;
        api_error e;
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": "
                 "\"Weather?\"}], \"tools\": [" WEATHER_TOOL ", " TIME_TOOL
                 "]}");
        ck_assert_int_eq(parse_wide(&first, body, &e), 0);
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": "
                 "\"Weather?\"}, {\"role\": \"assistant\", \"tool_calls\": "
                 "[%s]}, {\"role\": \"tool\", \"tool_call_id\": \"call_a\", "
                 "\"content\": \"sunny\"}], \"tools\": [" WEATHER_TOOL
                 ", " TIME_TOOL "]}",
                 calls_sent_back[k]);
        ck_assert_msg(parse_wide(&second, body, &e) == 0, "%s", e.message);
        char *p1 = prompt_text(&first);
        char *p2 = prompt_text(&second);
        char *said = NULL;
        ck_assert_int_ge(asprintf(&said, "%s%s", p1, replies[k]), 0);
        ck_assert_msg(strncmp(p2, said, strlen(said)) == 0, "%s\n%s", p2, said);
        /* and in tokens */
        int32_t *ids = NULL;
        size_t n = 0;
        gpt2d_error err;
        ck_assert_int_eq(
            tokenizer_encode(tok, said, strlen(said), &ids, &n, &err), 0);
        ck_assert_uint_gt(second.prompts[0].n, n);
        ck_assert_int_eq(memcmp(ids, second.prompts[0].ids, n * sizeof *ids),
                         0);
        free(ids);
        free(said);
        free(p1);
        free(p2);
        completion_request_free(&first);
        completion_request_free(&second);
    }
}
END_TEST

#define TOOLS1 "\"tools\": [" TIME_TOOL "]"
#define CALLED                                                                 \
    "{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "    \
    "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": " \
    "{\"name\": \"now\", \"arguments\": \"{}\"}}]}"
#define ONE_CALL(call)                                                         \
    "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [" call "]}]}"
#define FN(body) "{\"type\": \"function\", \"function\": " body "}"

static const struct {
    const char *body, *param;
} bad_tool_bodies[] = {
    { "{" MSG ", \"tools\": \"now\"}", "tools" },
    { "{" MSG ", \"tools\": {}}", "tools" },
    { "{" MSG ", \"tools\": [1]}", "tools[0]" },
    { "{" MSG ", \"tools\": [{}]}", "tools[0].type" },
    { "{" MSG ", \"tools\": [" TIME_TOOL ", {\"type\": \"custom\"}]}",
      "tools[1].type" },
    { "{" MSG ", \"tools\": [{\"type\": \"function\"}]}", "tools[0].function" },
    { "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": \"f\"}]}",
      "tools[0].function" },
    { "{" MSG ", \"tools\": [" FN("{}") "]}", "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": 1}") "]}",
      "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"\"}") "]}",
      "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"a b\"}") "]}",
      "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"a.b\"}") "]}",
      "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" FN(
          "{\"name\": \"a123456789012345678901234567890123456789012345678901"
          "2345678901234\"}") "]}", /* 65 bytes */
      "tools[0].function.name" },
    { "{" MSG ", \"tools\": [" TIME_TOOL ", " TIME_TOOL "]}",
      "tools[1].function.name" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"f\", \"description\": 1}") "]}",
      "tools[0].function.description" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"f\", \"parameters\": 1}") "]}",
      "tools[0].function.parameters" },
    { "{" MSG ", \"tools\": [" FN("{\"name\": \"f\", \"parameters\": []}") "]}",
      "tools[0].function.parameters" },
    { "{" MSG ", \"tools\": [" TIME_TOOL
      ", " FN("{\"name\": \"f\", \"parameters\": {\"type\": 5}}") "]}",
      "tools[1].function.parameters.type" },
    { "{" MSG
      ", \"tools\": [" FN("{\"name\": \"f\", \"strict\": \"yes\"}") "]}",
      "tools[0].function.strict" },
    { "{" MSG ", \"tool_choice\": \"auto\"}", "tool_choice" },
    { "{" MSG ", \"tool_choice\": \"required\"}", "tool_choice" },
    { "{" MSG ", \"tool_choice\": {\"type\": \"function\", \"function\": "
      "{\"name\": \"now\"}}}",
      "tool_choice" },
    { "{" MSG ", " TOOLS1 ", \"tool_choice\": \"sometimes\"}", "tool_choice" },
    { "{" MSG ", " TOOLS1 ", \"tool_choice\": 1}", "tool_choice" },
    { "{" MSG ", " TOOLS1 ", \"tool_choice\": {\"type\": \"allowed_tools\"}}",
      "tool_choice.type" },
    { "{" MSG ", " TOOLS1 ", \"tool_choice\": {\"type\": \"function\"}}",
      "tool_choice.function" },
    { "{" MSG ", " TOOLS1
      ", \"tool_choice\": {\"type\": \"function\", \"function\": {}}}",
      "tool_choice.function.name" },
    { "{" MSG ", " TOOLS1 ", \"tool_choice\": {\"type\": \"function\", "
      "\"function\": {\"name\": \"later\"}}}",
      "tool_choice.function.name" },
    { "{" MSG ", " TOOLS1 ", \"parallel_tool_calls\": \"no\"}",
      "parallel_tool_calls" },
    { "{" MSG ", \"functions\": [{\"name\": \"f\"}]}", "functions" },
    { "{" MSG ", \"function_call\": {\"name\": \"f\"}}", "function_call" },
    { "{\"messages\": [{\"role\": \"function\", \"name\": \"f\", \"content\": "
      "\"1\"}]}",
      "messages[0].role" },
    { "{\"messages\": [" CALLED ", {\"role\": \"tool\", \"content\": \"x\"}]}",
      "messages[2].tool_call_id" },
    { "{\"messages\": [" CALLED ", {\"role\": \"tool\", \"tool_call_id\": 1, "
      "\"content\": \"x\"}]}",
      "messages[2].tool_call_id" },
    { "{\"messages\": [" CALLED ", {\"role\": \"tool\", \"tool_call_id\": "
      "\"c2\", \"content\": \"x\"}]}",
      "messages[2].tool_call_id" },
    { "{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": \"c1\", "
      "\"content\": \"x\"}, " CALLED "]}",
      "messages[0].tool_call_id" },
    { "{\"messages\": [" CALLED ", {\"role\": \"tool\", \"tool_call_id\": "
      "\"c1\", \"content\": null}]}",
      "messages[2].content" },
    { "{\"messages\": [" CALLED ", {\"role\": \"tool\", \"tool_call_id\": "
      "\"c1\"}]}",
      "messages[2].content" },
    { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
      "\"tool_calls\": []}]}",
      "messages[0].tool_calls" },
    { "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\", "
      "\"tool_calls\": [], \"tool_call_id\": \"c\"}]}",
      "messages[0].tool_calls" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", "
      "\"function_call\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}",
      "messages[0].function_call" },
    { "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}",
      "messages[0].tool_calls" },
    { "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": []}]}",
      "messages[0].content" },
    { "{\"messages\": [{\"role\": \"assistant\", \"content\": null}]}",
      "messages[0].content" },
    { ONE_CALL("1"), "messages[0].tool_calls[0]" },
    { ONE_CALL("{\"type\": \"function\", \"function\": {\"name\": \"f\", "
               "\"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].id" },
    { ONE_CALL("{\"id\": \"\", \"type\": \"function\", \"function\": "
               "{\"name\": \"f\", \"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].id" },
    { ONE_CALL("{\"id\": \"c\", \"function\": {\"name\": \"f\", "
               "\"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].type" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"custom\", \"function\": "
               "{\"name\": \"f\", \"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].type" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"function\"}"),
      "messages[0].tool_calls[0].function" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"function\", \"function\": "
               "{\"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].function.name" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"function\", \"function\": "
               "{\"name\": \"f\\\"\", \"arguments\": \"{}\"}}"),
      "messages[0].tool_calls[0].function.name" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"function\", \"function\": "
               "{\"name\": \"f\"}}"),
      "messages[0].tool_calls[0].function.arguments" },
    { ONE_CALL("{\"id\": \"c\", \"type\": \"function\", \"function\": "
               "{\"name\": \"f\", \"arguments\": {}}}"),
      "messages[0].tool_calls[0].function.arguments" },
    { "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": "
      "\"c\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
      "\"arguments\": \"{}\"}}, {\"id\": \"d\", \"type\": \"function\", "
      "\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\":\"}}]}]}",
      "messages[0].tool_calls[1].function.arguments" },
};

START_TEST(test_each_bad_tool_field_is_a_400_naming_its_param)
{
    completion_request req;
    api_error e;
    const char *body = bad_tool_bodies[_i].body;
    memset(&e, 0, sizeof e);
    test_expect_refusal(parse_wide(&req, body, &e), &e, body,
                        bad_tool_bodies[_i].param);
}
END_TEST

START_TEST(test_more_tools_than_openai_allows_are_refused)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    const char *head = "{" MSG ", \"tools\": [";
    ck_assert_int_eq(buf_append(&b, head, strlen(head)), 0);
    for (int i = 0; i <= CHAT_TOOLS_MAX; i++) {
        char one[96];
        int n = snprintf(one, sizeof one, "%s" FN("{\"name\": \"f%d\"}"),
                         i > 0 ? ", " : "", i);
        ck_assert_int_eq(buf_append(&b, one, (size_t)n), 0);
    }
    ck_assert_int_eq(buf_append(&b, "]}", 3), 0);
    completion_request req;
    api_error e;
    test_expect_refusal(parse_wide(&req, (const char *)b.data, &e), &e,
                        "129 tools", "tools");
    ck_assert_ptr_nonnull(strstr(e.message, "at most 128"));
    buf_free(&b);
}
END_TEST

START_TEST(test_tool_refusals_say_why)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse_wide(&req,
                                "{" MSG ", " TOOLS1
                                ", \"tool_choice\": {\"type\": \"function\", "
                                "\"function\": {\"name\": \"later\"}}}",
                                &e),
                     -1);
    ck_assert_str_eq(e.message, "tool_choice.function.name \"later\" is none "
                                "of the tools' names");
    ck_assert_int_eq(
        parse_wide(&req,
                   "{\"messages\": [" CALLED ", {\"role\": \"tool\", "
                   "\"tool_call_id\": \"c2\", \"content\": \"x\"}]}",
                   &e),
        -1);
    ck_assert_str_eq(e.message, "messages[2].tool_call_id \"c2\" is the id of "
                                "no tool call of an earlier assistant message");
    ck_assert_int_eq(parse_wide(&req, "{" MSG ", \"functions\": [{}]}", &e),
                     -1);
    ck_assert_str_eq(e.message, "functions (the legacy form of tools) is not "
                                "supported: send tools");
    ck_assert_int_eq(
        parse_wide(&req, "{" MSG ", \"tool_choice\": \"required\"}", &e), -1);
    ck_assert_str_eq(e.message, "tool_choice is \"required\", and the request "
                                "sends no tools");
}
END_TEST

/* ---- the answer's grammar, run by the grammar engine ---- */

/* One token per byte and an end token: grammar_advance_bytes needs no
 * more. */
static grammar_vocab *byte_vocab(void)
{
    static char bytes[256];
    static const char *texts[257];
    static size_t lens[257];
    for (int b = 0; b < 256; b++) {
        bytes[b] = (char)b;
        texts[b] = &bytes[b];
        lens[b] = 1;
    }
    texts[256] = "<|endoftext|>";
    lens[256] = 13;
    grammar_vocab *v = NULL;
    gpt2d_error err;
    ck_assert_msg(grammar_vocab_create(&v, 257, texts, lens, 256, &err) == 0,
                  "%s", err.message);
    return v;
}

typedef enum verdict {
    DEAD,  /* the text leaves the language */
    ALIVE, /* a prefix of an answer, not a whole one */
    WHOLE, /* a whole answer */
} verdict;

static verdict judge(grammar *g, const char *text)
{
    grammar_state st;
    if (grammar_advance_bytes(g, grammar_start(g), text, strlen(text), &st,
                              NULL) != 0)
        return DEAD;
    return grammar_accepts(g, st) ? WHOLE : ALIVE;
}

#define CALL_NOW "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>"
#define CALL_PARIS                                                             \
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":"            \
    "\"Paris\"}}</tool_call>"

typedef struct judged {
    const char *text;
    verdict want;
} judged;

/* Answers every choice judges alike. */
static const judged calls_always[] = {
    { CALL_PARIS, WHOLE },
    { CALL_PARIS "\n", WHOLE },
    { "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P",
      ALIVE },
    /* no such function, an argument missing, a space, an unknown key */
    { "<tool_call>{\"name\":\"later\"", DEAD },
    { "<tool_call>{\"name\":\"get_weather\",\"arguments\":{}}", DEAD },
    { "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\": ", DEAD },
    { "<tool_call>{\"name\":\"now\",\"arguments\":{\"x\"", DEAD },
    { "<tool_call> {", DEAD },
    /* after the assistant's suffix nothing more */
    { CALL_PARIS "\n" CALL_NOW, DEAD },
    { CALL_PARIS " ", DEAD },
};

#define NINE_CALLS                                                             \
    CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW    \
        CALL_NOW
#define EIGHT_CALLS                                                            \
    CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW CALL_NOW

static const struct {
    const char *extra; /* the request's fields after messages and tools */
    judged cases[12];
} choices[] = {
    { "",
      { { "", WHOLE },
        { " Hello", WHOLE },
        { "<", WHOLE },
        { "<tool_call", WHOLE },
        { "<tool_cal!", WHOLE },
        { "<tool_call>", ALIVE },
        { "Hi <tool_call>{", WHOLE },
        { "\nUser: <tool_call>", WHOLE },
        { CALL_NOW CALL_PARIS, WHOLE },
        { EIGHT_CALLS, WHOLE },
        { NINE_CALLS, DEAD },
        { CALL_NOW "Hi", DEAD } } },
    { ", \"tool_choice\": \"required\"",
      { { "", ALIVE },
        { " Hello", DEAD },
        { "<tool_call", ALIVE },
        { CALL_NOW CALL_PARIS, WHOLE },
        { EIGHT_CALLS, WHOLE },
        { NINE_CALLS, DEAD } } },
    { ", \"tool_choice\": \"required\", \"parallel_tool_calls\": false",
      { { "", ALIVE },
        { " Hello", DEAD },
        { CALL_NOW CALL_PARIS, DEAD },
        { CALL_NOW "<", DEAD } } },
    { ", \"parallel_tool_calls\": false",
      { { " Hello", WHOLE }, { CALL_NOW CALL_PARIS, DEAD } } },
    { ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
      "\"get_weather\"}}",
      { { "", ALIVE },
        { " Hello", DEAD },
        { CALL_PARIS CALL_PARIS, DEAD },
        { CALL_NOW, DEAD },
        { "<tool_call>{\"name\":\"now\"", DEAD } } },
    { ", \"response_format\": {\"type\": \"json_object\"}",
      { { "{\"a\":1}", WHOLE },
        { "{", ALIVE },
        { " Hello", DEAD },
        { "", ALIVE },
        { CALL_NOW CALL_PARIS, WHOLE } } },
    { ", \"structured_outputs\": {\"grammar\": \"root ::= yes | no\\nyes ::= "
      "\\\"yes\\\"\\nno ::= \\\"no\\\"\"}",
      { { "yes", WHOLE },
        { "no", WHOLE },
        { "maybe", DEAD },
        { " Hello", DEAD },
        { CALL_NOW, WHOLE } } },
};

/* Each tool_choice's grammar, compiled by the engine, against answers whose
 * fate is written by hand. */
START_TEST(test_each_tool_choice_grammar_allows_what_it_promises)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{" MSG ", \"tools\": [" WEATHER_TOOL ", " TIME_TOOL "]%s}",
             choices[_i].extra);
    completion_request req;
    api_error e;
    ck_assert_msg(parse_wide(&req, body, &e) == 0, "%s: %s", body, e.message);
    grammar_vocab *v = byte_vocab();
    grammar_limits lim;
    grammar_limits_default(&lim);
    grammar *g = NULL;
    gpt2d_error err;
    ck_assert_msg(grammar_compile(&g, req.constraint.gbnf, req.constraint.len,
                                  v, &lim, &err) == 0,
                  "%s\n%s", err.message, req.constraint.gbnf);
    for (size_t k = 0; k < sizeof calls_always / sizeof calls_always[0]; k++)
        ck_assert_msg(judge(g, calls_always[k].text) == calls_always[k].want,
                      "%s: \"%s\" is %d", choices[_i].extra,
                      calls_always[k].text, judge(g, calls_always[k].text));
    for (size_t k = 0; k < 12 && choices[_i].cases[k].text != NULL; k++)
        ck_assert_msg(judge(g, choices[_i].cases[k].text) ==
                          choices[_i].cases[k].want,
                      "%s: \"%s\" is %d\n%s", choices[_i].extra,
                      choices[_i].cases[k].text,
                      judge(g, choices[_i].cases[k].text), req.constraint.gbnf);
    grammar_release(g);
    grammar_vocab_free(v);
    completion_request_free(&req);
}
END_TEST

/* A template's markers may hold any character: a class written for each
 * of them still keeps the text from beginning with the marker, and
 * nothing else. */
START_TEST(test_free_text_is_anything_but_the_marker_for_any_marker)
{
    static const char json[] =
        "{\"system\": {\"prefix\": \"S:\", \"suffix\": \"\\n\"},"
        " \"user\": {\"prefix\": \"U:\", \"suffix\": \"\\n\"},"
        " \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"},"
        " \"tool_call\": {\"prefix\": \"]^\\\\-\\u00ab\\\"\\n\", \"suffix\": "
        "\"\"}, \"stop\": [\"\\nU:\"]}";
    chat_template t;
    gpt2d_error err;
    ck_assert_msg(chat_template_parse(&t, json, strlen(json), "test", &err) ==
                      0,
                  "%s", err.message);
    const char *body = "{" MSG ", \"tools\": [" TIME_TOOL "]}";
    completion_request req;
    api_error e;
    ck_assert_msg(
        chat_request_parse(&req, body, strlen(body), tok, &t, &wide, &e) == 0,
        "%s", e.message);
    grammar_vocab *v = byte_vocab();
    grammar_limits lim;
    grammar_limits_default(&lim);
    grammar *g = NULL;
    ck_assert_msg(grammar_compile(&g, req.constraint.gbnf, req.constraint.len,
                                  v, &lim, &err) == 0,
                  "%s\n%s", err.message, req.constraint.gbnf);
    const char *marker = "]^\\-\xc2\xab\"\n";
    char text[64];
    for (size_t k = 0; k <= strlen(marker); k++) {
        if ((marker[k] & 0xC0) == 0x80)
            continue; /* inside a character: not yet a text */
        /* each proper prefix is text, and so is each with another byte */
        const bool whole_marker = k == strlen(marker);
        snprintf(text, sizeof text, "%.*s", (int)k, marker);
        const verdict alone = whole_marker ? ALIVE : WHOLE;
        const verdict then_x = whole_marker ? DEAD : WHOLE;
        ck_assert_int_eq(judge(g, text), alone);
        snprintf(text, sizeof text, "%.*sx", (int)k, marker);
        ck_assert_int_eq(judge(g, text), then_x);
    }
    snprintf(text, sizeof text, "%s{\"name\":\"now\",\"arguments\":{}}",
             marker);
    ck_assert_int_eq(judge(g, text), WHOLE);
    grammar_release(g);
    grammar_vocab_free(v);
    completion_request_free(&req);
    chat_template_free(&t);
}
END_TEST

/* A GBNF grammar sent as the text alternative is named when the joined
 * grammar does not compile: its own mistakes are the likely ones. */
START_TEST(test_a_bad_text_grammar_is_named_by_its_field)
{
    const char *body = "{" MSG ", \"tools\": [" TIME_TOOL "], "
                       "\"structured_outputs\": {\"grammar\": \"root ::= (\"}}";
    completion_request req;
    api_error e;
    ck_assert_int_eq(parse_wide(&req, body, &e), 0);
    ck_assert_str_eq(req.constraint.param, "structured_outputs.grammar");
    grammar_vocab *v = byte_vocab();
    grammar_limits lim;
    grammar_limits_default(&lim);
    grammar *g = NULL;
    gpt2d_error err;
    ck_assert_int_eq(grammar_compile(&g, req.constraint.gbnf,
                                     req.constraint.len, v, &lim, &err),
                     -1);
    /* its lines are its own (its columns move by the rules' prefix) */
    ck_assert_msg(strstr(err.message, "opened at line 1 ") != NULL, "%s",
                  err.message);
    grammar_vocab_free(v);
    completion_request_free(&req);
}
END_TEST

/* ---- Anthropic's Messages body, read as a chat ---- */

static int parse_messages_body(completion_request *req, const char *body,
                               bool count, api_error *e)
{
    json_t *root = json_loads(body, 0, NULL);
    ck_assert_ptr_nonnull(root);
    int rc = messages_request_parse(req, root, tok, &builtin, &limits, count,
                                    e);
    json_decref(root);
    return rc;
}

/* system blocks, two user messages joined into one turn, and a last
 * assistant message left open: the prompt ends with its text, no suffix. */
START_TEST(test_anthropic_body_renders_as_the_chat_transcript_with_prefill)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse_messages_body(
            &req,
            "{\"max_tokens\": 5, \"system\": [{\"type\": \"text\", \"text\": "
            "\"S\"}], \"messages\": [{\"role\": \"user\", \"content\": "
            "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", "
            "\"text\": \"b\"}]}, {\"role\": \"user\", \"content\": \"c\"}, "
            "{\"role\": \"assistant\", \"content\": \" Pre\"}], "
            "\"stop_sequences\": [\"zz\"]}",
            false, &e),
        0);
    assert_prompt_is(&req, "System: S\nUser: a\nb\nc\nAssistant: Pre");
    ck_assert_uint_eq(req.max_tokens, 5);
    ck_assert_str_eq(req.max_param, "max_tokens");
    /* the request's stop first, then the template's */
    ck_assert_uint_eq(req.n_stop, 1 + builtin.n_stop);
    ck_assert_str_eq(req.stop[0], "zz");
    ck_assert_str_eq(req.stop[1], builtin.stop[0]);
    completion_request_free(&req);

    /* count_tokens: no max_tokens needed */
    ck_assert_int_eq(
        parse_messages_body(
            &req, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
            true, &e),
        0);
    assert_prompt_is(&req, "User: Hi\nAssistant:");
    completion_request_free(&req);
}
END_TEST

/* What chat_request.c refuses is told in the Messages body's names. */
START_TEST(test_anthropic_errors_name_its_own_fields)
{
    completion_request req;
    api_error e;
    ck_assert_int_eq(
        parse_messages_body(&req,
                            "{\"max_tokens\": 60, \"messages\": [{\"role\": "
                            "\"user\", \"content\": \"Hello there\"}]}",
                            false, &e),
        -1);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "max_tokens");
    ck_assert_ptr_null(strstr(e.message, "max_completion_tokens"));
    ck_assert_ptr_nonnull(strstr(e.message, "max_tokens"));
    ck_assert_int_eq(
        parse_messages_body(&req,
                            "{\"max_tokens\": 2, \"messages\": [{\"role\": "
                            "\"user\", \"content\": \"x\"}], "
                            "\"stop_sequences\": [1]}",
                            false, &e),
        -1);
    ck_assert_str_eq(e.param, "stop_sequences");
    ck_assert_int_eq(
        parse_messages_body(&req,
                            "{\"max_tokens\": 2, \"messages\": [{\"role\": "
                            "\"user\", \"content\": \"x\"}, {\"role\": "
                            "\"user\", \"content\": [{\"type\": \"text\"}]}]}",
                            false, &e),
        -1);
    ck_assert_str_eq(e.param, "messages.1.content.0.text");
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
    tcase_add_test(
        req, test_anthropic_body_renders_as_the_chat_transcript_with_prefill);
    tcase_add_test(req, test_anthropic_errors_name_its_own_fields);
    tcase_set_timeout(req, 300);
    suite_add_tcase(s, req);

    TCase *tools = tcase_create("tools");
    tcase_add_unchecked_fixture(tools, setup, teardown);
    tcase_add_test(tools, test_tools_are_described_at_the_start);
    tcase_add_test(tools, test_tool_choice_sets_the_grammar_and_the_reading);
    tcase_add_test(tools,
                   test_calls_and_results_are_written_in_the_call_format);
    tcase_add_test(
        tools, test_next_turn_with_calls_begins_with_the_last_prompt_and_reply);
    tcase_add_loop_test(
        tools, test_each_bad_tool_field_is_a_400_naming_its_param, 0,
        (int)(sizeof bad_tool_bodies / sizeof bad_tool_bodies[0]));
    tcase_add_test(tools, test_more_tools_than_openai_allows_are_refused);
    tcase_add_test(tools, test_tool_refusals_say_why);
    tcase_add_loop_test(tools,
                        test_each_tool_choice_grammar_allows_what_it_promises,
                        0, (int)(sizeof choices / sizeof choices[0]));
    tcase_add_test(tools,
                   test_free_text_is_anything_but_the_marker_for_any_marker);
    tcase_add_test(tools, test_a_bad_text_grammar_is_named_by_its_field);
    tcase_set_timeout(tools, 300);
    suite_add_tcase(s, tools);
    return s;
}

int main(void)
{
    return test_run_suite(chat_suite());
}
