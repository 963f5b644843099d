/* test_chat.c — the chat template (chat_template.c), without sockets or an
 * engine: the transcript a conversation renders to, the prefix it keeps from
 * turn to turn, and every template mistake refused with a message that
 * names it. */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2d/chat_template.h"
#include "gpt2d/tokenizer.h"
#include "test_util.h"

static tokenizer *tok;
static chat_template builtin;

static void setup(void)
{
    char vocab[4096], merges[4096];
    test_data_path(vocab, sizeof vocab, "tokenizer/vocab.json");
    test_data_path(merges, sizeof merges, "tokenizer/merges.txt");
    gpt2d_error err;
    if (tokenizer_load(&tok, vocab, merges, &err) != 0) {
        fprintf(stderr, "tokenizer_load: %s (run tests/data/fetch-tokenizer.sh)\n",
                err.message);
        exit(EXIT_FAILURE);
    }
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

#define TURN(role, text) {(role), (text), sizeof(text) - 1}

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
        {CHAT_ROLE_ASSISTANT, reply, strlen(reply)},
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
    ck_assert_int_eq(tokenizer_encode(tok, said, strlen(said), &a, &na, &err), 0);
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
    ck_assert_int_eq(chat_template_parse(&t, chatml, strlen(chatml), "test", &err), 0);
    const chat_turn turns[] = {
        TURN(CHAT_ROLE_SYSTEM, "S"), TURN(CHAT_ROLE_USER, "U"),
        TURN(CHAT_ROLE_ASSISTANT, "A"),
    };
    char *p = render(&t, turns, 3);
    ck_assert_str_eq(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                        "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n");
    free(p);
    ck_assert_uint_eq(t.n_stop, 1);
    ck_assert_str_eq(t.stop[0], "<|im_end|>");
    chat_template_free(&t);
}
END_TEST

/* A template that cannot work is refused at start-up, with what is wrong. */
static const struct { const char *json, *message; } bad_templates[] = {
    {"{\"system\": ", "test:1:"},
    {"[]", "is a JSON object"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [\"x\"], \"tool\": {}}", "unknown key \"tool\""},
    {"{\"user\": {\"prefix\": \"\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": "
     "\"A:\", \"suffix\": \"\"}, \"stop\": [\"x\"]}", "\"system\" must be an object"},
    {"{\"system\": {\"prefix\": \"\"}, \"user\": {\"prefix\": \"\", \"suffix\": \"\"}, "
     "\"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, \"stop\": [\"x\"]}",
     "system.suffix must be a string"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\", \"name\": \"s\"}, \"user\": "
     "{\"prefix\": \"\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
     "\"suffix\": \"\"}, \"stop\": [\"x\"]}", "unknown key \"name\" in system"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": 1, "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [\"x\"]}", "user.prefix must be a string"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"\", \"suffix\": \"\"}, "
     "\"stop\": [\"x\"]}", "assistant.prefix must not be empty"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}}",
     "\"stop\" must be an array of 1 to 4 strings"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": []}", "\"stop\" must be an array of 1 to 4 strings"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
     "\"stop\" must be an array of 1 to 4 strings"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [\"a\", \"\"]}", "stop[1] is empty"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [7]}", "stop[0] must be a string"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", \"suffix\": \"\"}, "
     "\"stop\": [\"\\u0000\"]}", "test:1:"},
    {"{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"system\": {\"prefix\": \"\", "
     "\"suffix\": \"\"}}", "duplicate"},
};

START_TEST(test_bad_template_is_refused_with_its_reason)
{
    chat_template t;
    gpt2d_error err = {{0}};
    const char *json = bad_templates[_i].json;
    ck_assert_msg(chat_template_parse(&t, json, strlen(json), "test", &err) == -1,
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
    snprintf(json, sizeof json,
             "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": "
             "\"%s\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
             "\"suffix\": \"\"}, \"stop\": [\"x\"]}", big);
    chat_template t;
    gpt2d_error err;
    ck_assert_int_eq(chat_template_parse(&t, json, strlen(json), "test", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "user.prefix is 257 bytes long"));
    big[CHAT_TEMPLATE_MAX_TEXT] = '\0';     /* exactly the limit: fine */
    snprintf(json, sizeof json,
             "{\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": "
             "\"%s\", \"suffix\": \"\"}, \"assistant\": {\"prefix\": \"A:\", "
             "\"suffix\": \"\"}, \"stop\": [\"x\"]}", big);
    ck_assert_int_eq(chat_template_parse(&t, json, strlen(json), "test", &err), 0);
    chat_template_free(&t);
}
END_TEST

START_TEST(test_template_file_is_read_and_named_in_errors)
{
    char path[] = "/tmp/gpt2d-chat-template-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, chatml, strlen(chatml)), (ssize_t)strlen(chatml));
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
    char want[128];
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
    ck_assert_uint_eq(t.n_stop, builtin.n_stop);
    for (size_t i = 0; i < t.n_stop; i++)
        ck_assert_str_eq(t.stop[i], builtin.stop[i]);
    chat_template_free(&t);
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tpl = tcase_create("template");
    tcase_add_unchecked_fixture(tpl, setup, teardown);
    tcase_add_test(tpl, test_builtin_template_writes_a_plain_transcript);
    tcase_add_test(tpl, test_next_turn_begins_with_the_last_prompt_and_reply_tokens);
    tcase_add_test(tpl, test_template_from_json_replaces_every_marker);
    tcase_add_loop_test(tpl, test_bad_template_is_refused_with_its_reason, 0,
                        (int)(sizeof bad_templates / sizeof bad_templates[0]));
    tcase_add_test(tpl, test_template_longer_than_the_limit_is_refused);
    tcase_add_test(tpl, test_template_file_is_read_and_named_in_errors);
    tcase_add_test(tpl, test_shipped_example_template_is_the_builtin);
    tcase_set_timeout(tpl, 300);
    suite_add_tcase(s, tpl);

    return s;
}

int main(void)
{
    return test_run_suite(chat_suite());
}
