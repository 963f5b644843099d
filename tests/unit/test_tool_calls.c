/* test_tool_calls.c — a chat answer read back as tool calls (tool_calls.c):
 * each sample answer against the calls written by hand for it, the same
 * events whatever the pieces the answer arrives in (every split point, and
 * byte by byte), the streamed deltas joined the way a client joins them
 * equal to the whole answer, and the ids. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/tool_calls.h"
#include "core/buf.h"

static const tool_call_format builtin = { "<tool_call>", "</tool_call>", "\n" };

/* What a reading produced, joined: the content, and each call's name and
 * arguments. */
#define MAX_CALLS 8
typedef struct joined {
    gpt2d_buf content;
    bool any_content;
    char name[MAX_CALLS][80];
    gpt2d_buf args[MAX_CALLS];
    size_t n_calls;
    bool order_broken; /* an event out of order */
} joined;

static int join_event(void *ctx, const tool_call_event *ev)
{
    joined *j = ctx;
    switch (ev->kind) {
    case TOOL_CALL_CONTENT:
        j->any_content = true;
        ck_assert_uint_gt(ev->len, 0);
        return buf_append(&j->content, ev->text, ev->len);
    case TOOL_CALL_NAME:
        if (ev->call != j->n_calls || ev->len >= sizeof j->name[0])
            j->order_broken = true;
        else {
            memcpy(j->name[j->n_calls], ev->text, ev->len);
            j->name[j->n_calls][ev->len] = '\0';
            j->n_calls++;
        }
        return 0;
    default:
        /* arguments only for the call whose name came last, never empty */
        if (j->n_calls == 0 || ev->call != j->n_calls - 1 || ev->len == 0)
            j->order_broken = true;
        else
            return buf_append(&j->args[ev->call], ev->text, ev->len);
        return 0;
    }
}

static void joined_free(joined *j)
{
    buf_free(&j->content);
    for (size_t i = 0; i < MAX_CALLS; i++)
        buf_free(&j->args[i]);
}

/* The answer `text` read in pieces ending at `cuts` (ascending, n_cuts of
 * them), then finished. */
static bool read_in_pieces(const tool_call_format *f, const char *text,
                           const size_t *cuts, size_t n_cuts, joined *j)
{
    tool_call_reader r;
    tool_call_reader_init(&r, f);
    memset(j, 0, sizeof *j);
    for (size_t i = 0; i < n_cuts; i++)
        ck_assert_int_eq(
            tool_call_reader_feed(&r, text, cuts[i], join_event, j), 0);
    ck_assert_int_eq(
        tool_call_reader_finish(&r, text, strlen(text), join_event, j), 0);
    ck_assert(!j->order_broken);
    return tool_call_reader_calls_complete(&r);
}

/* A sample answer and what it says, written by hand. */
typedef struct sample {
    const tool_call_format *fmt;
    const char *text;
    const char *content; /* NULL: none (the answer is calls) */
    size_t n_calls;
    const char *names[3];
    const char *args[3];
    bool complete;
} sample;

static const tool_call_format bare = { "[[", "", "" };
static const tool_call_format newline_led = { "\n<c>", "</c>", "\n" };

static const sample samples[] = {
    /* one call, then the end of the text */
    { &builtin,
      "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\","
      "\"days\":[1,2]}}</tool_call>",
      NULL,
      1,
      { "get_weather" },
      { "{\"city\":\"Paris\",\"days\":[1,2]}" },
      true },
    /* two calls, a string holding the call syntax, the assistant's suffix */
    { &builtin,
      "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>"
      "{\"name\":\"f-2_x\",\"arguments\":{\"s\":\"}</tool_call>\\\"\",\"t\":"
      "[{\"u\":null}]}}</tool_call>\n",
      NULL,
      2,
      { "a", "f-2_x" },
      { "{}", "{\"s\":\"}</tool_call>\\\"\",\"t\":[{\"u\":null}]}" },
      true },
    /* text: its start cannot become the marker */
    { &builtin,
      " Hello <tool_call> there",
      " Hello <tool_call> there",
      0,
      { NULL },
      { NULL },
      false },
    /* text that stopped while it could still have become the marker */
    { &builtin, "<tool", "<tool", 0, { NULL }, { NULL }, false },
    { &builtin, "<tool_x", "<tool_x", 0, { NULL }, { NULL }, false },
    { &builtin, "", "", 0, { NULL }, { NULL }, false },
    /* cut short in the arguments: what was written stands */
    { &builtin,
      "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1",
      NULL,
      1,
      { "f" },
      { "{\"a\":1" },
      false },
    /* cut short in the name: the call is left out */
    { &builtin,
      "<tool_call>{\"name\":\"ge",
      NULL,
      0,
      { NULL },
      { NULL },
      false },
    /* cut short in the end marker: the call is whole, the answer is not */
    { &builtin,
      "<tool_call>{\"name\":\"f\",\"arguments\":[true]}</tool_",
      NULL,
      1,
      { "f" },
      { "[true]" },
      false },
    /* text after a call: the call stands, the rest is content */
    { &builtin,
      "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}</tool_call>oops",
      "oops",
      1,
      { "f" },
      { "{\"a\":1}" },
      false },
    /* and after the assistant's suffix */
    { &builtin,
      "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\nUser:",
      "User:",
      1,
      { "f" },
      { "{}" },
      false },
    /* the call syntax left before the name: all of it is content */
    { &builtin,
      "<tool_call>{\"namx\":1}",
      "<tool_call>{\"namx\":1}",
      0,
      { NULL },
      { NULL },
      false },
    /* ... and after it: from the name's end */
    { &builtin,
      "<tool_call>{\"name\":\"f\",\"argument\":1}",
      ",\"argument\":1}",
      1,
      { "f" },
      { "" },
      false },
    /* a name no function can have */
    { &builtin,
      "<tool_call>{\"name\":\"a b\"}",
      "<tool_call>{\"name\":\"a b\"}",
      0,
      { NULL },
      { NULL },
      false },
    /* bare values: their end is the first byte that cannot continue them */
    { &builtin,
      "<tool_call>{\"name\":\"n\",\"arguments\":-4.5e1}</tool_call>",
      NULL,
      1,
      { "n" },
      { "-4.5e1" },
      true },
    { &builtin,
      "<tool_call>{\"name\":\"s\",\"arguments\":\"a\\\"}\"}</tool_call>",
      NULL,
      1,
      { "s" },
      { "\"a\\\"}\"" },
      true },
    /* white space around the value is not the value's */
    { &builtin,
      "<tool_call>{\"name\":\"w\",\"arguments\": {\"a\": [1, 2]} }</tool_call>",
      NULL,
      1,
      { "w" },
      { "{\"a\": [1, 2]}" },
      true },
    /* a template without an end marker or an assistant suffix */
    { &bare,
      "[[{\"name\":\"a\",\"arguments\":{}}[[{\"name\":\"b\",\"arguments\":"
      "{\"x\":\"[[\"}}",
      NULL,
      2,
      { "a", "b" },
      { "{}", "{\"x\":\"[[\"}" },
      true },
    /* one whose assistant suffix begins its call prefix */
    { &newline_led,
      "\n<c>{\"name\":\"a\",\"arguments\":{}}</c>\n<c>{\"name\":\"b\","
      "\"arguments\":{}}</c>\n",
      NULL,
      2,
      { "a", "b" },
      { "{}", "{}" },
      true },
    { &newline_led, "\nHi", "\nHi", 0, { NULL }, { NULL }, false },
};

static void assert_sample(const sample *s, const joined *j, bool complete,
                          const char *how)
{
    if (s->content == NULL)
        ck_assert_msg(!j->any_content, "%s: content in %s", how, s->text);
    else {
        ck_assert_msg(
            j->content.len == strlen(s->content) &&
                (j->content.len == 0 ||
                 memcmp(j->content.data, s->content, j->content.len) == 0),
            "%s: content of %s is \"%.*s\"", how, s->text, (int)j->content.len,
            (const char *)j->content.data);
    }
    ck_assert_uint_eq(j->n_calls, s->n_calls);
    for (size_t i = 0; i < s->n_calls; i++) {
        ck_assert_str_eq(j->name[i], s->names[i]);
        ck_assert_msg(
            j->args[i].len == strlen(s->args[i]) &&
                (j->args[i].len == 0 ||
                 memcmp(j->args[i].data, s->args[i], j->args[i].len) == 0),
            "%s: arguments %zu of %s are \"%.*s\"", how, i, s->text,
            (int)j->args[i].len, (const char *)j->args[i].data);
    }
    ck_assert_msg(complete == s->complete, "%s: %s complete %d", how, s->text,
                  complete);
}

START_TEST(test_whole_answer_reads_as_written)
{
    const sample *s = &samples[_i];
    joined j;
    bool complete = read_in_pieces(s->fmt, s->text, NULL, 0, &j);
    assert_sample(s, &j, complete, "whole");
    joined_free(&j);
}
END_TEST

/* However the answer is cut into two pieces, the events join to the same
 * calls and content. */
START_TEST(test_every_split_point_reads_the_same)
{
    const sample *s = &samples[_i];
    const size_t len = strlen(s->text);
    for (size_t k = 0; k <= len; k++) {
        joined j;
        char how[32];
        snprintf(how, sizeof how, "split at %zu", k);
        bool complete = read_in_pieces(s->fmt, s->text, &k, 1, &j);
        assert_sample(s, &j, complete, how);
        joined_free(&j);
    }
}
END_TEST

START_TEST(test_byte_by_byte_reads_the_same)
{
    const sample *s = &samples[_i];
    const size_t len = strlen(s->text);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    ck_assert_ptr_nonnull(cuts);
    for (size_t k = 0; k <= len; k++)
        cuts[k] = k;
    joined j;
    bool complete = read_in_pieces(s->fmt, s->text, cuts, len + 1, &j);
    assert_sample(s, &j, complete, "byte by byte");
    joined_free(&j);
    free(cuts);
}
END_TEST

/* While the start of an answer may still be the marker, nothing is shown;
 * once it cannot, all of it is, at once. */
START_TEST(test_a_possible_marker_is_held_back_until_decided)
{
    const char *text = "<tool_c!";
    tool_call_reader r;
    tool_call_reader_init(&r, &builtin);
    joined j;
    memset(&j, 0, sizeof j);
    for (size_t k = 0; k < strlen(text); k++) {
        ck_assert_int_eq(tool_call_reader_feed(&r, text, k, join_event, &j), 0);
        ck_assert(!j.any_content);
        ck_assert_int_eq(r.mode, TOOL_READ_UNDECIDED);
    }
    ck_assert_int_eq(
        tool_call_reader_feed(&r, text, strlen(text), join_event, &j), 0);
    ck_assert_int_eq(r.mode, TOOL_READ_TEXT);
    ck_assert_uint_eq(j.content.len, strlen(text));
    joined_free(&j);
}
END_TEST

/* A call is announced the moment its name's closing quote arrives, and its
 * arguments grow with the text, never with a byte of what follows them. */
START_TEST(test_arguments_grow_with_the_text_and_stop_at_their_end)
{
    const char *text = "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":12}}"
                       "</tool_call>";
    const char *name_end = strstr(text, "\",\"arguments");
    const size_t at_name = (size_t)(name_end - text) + 1;
    tool_call_reader r;
    tool_call_reader_init(&r, &builtin);
    joined j;
    memset(&j, 0, sizeof j);
    ck_assert_int_eq(
        tool_call_reader_feed(&r, text, at_name - 1, join_event, &j), 0);
    ck_assert_uint_eq(j.n_calls, 0);
    ck_assert_int_eq(tool_call_reader_feed(&r, text, at_name, join_event, &j),
                     0);
    ck_assert_uint_eq(j.n_calls, 1);
    ck_assert_str_eq(j.name[0], "f");
    const char *args = strstr(text, "{\"a\"");
    size_t args_at = (size_t)(args - text);
    ck_assert_int_eq(
        tool_call_reader_feed(&r, text, args_at + 5, join_event, &j), 0);
    ck_assert_uint_eq(j.args[0].len, 5); /* {"a": */
    ck_assert_int_eq(
        tool_call_reader_feed(&r, text, strlen(text), join_event, &j), 0);
    ck_assert_uint_eq(j.args[0].len, strlen("{\"a\":12}"));
    ck_assert(tool_call_reader_calls_complete(&r));
    joined_free(&j);
}
END_TEST

/* ---- ids and finish reasons ---- */

START_TEST(test_ids_are_call_and_24_hex_digits_unique_per_call)
{
    char seen[3 * 4][TOOL_CALL_ID_SIZE];
    size_t n = 0;
    const char *answers[] = { "chatcmpl-a", "chatcmpl-b", "chatcmpl-c" };
    for (size_t a = 0; a < 3; a++)
        for (size_t choice = 0; choice < 2; choice++)
            for (size_t call = 0; call < 2; call++) {
                char id[TOOL_CALL_ID_SIZE];
                tool_call_id(id, answers[a], choice, call);
                ck_assert_uint_eq(strlen(id), 29);
                ck_assert_int_eq(strncmp(id, "call_", 5), 0);
                ck_assert_uint_eq(strspn(id + 5, "0123456789abcdef"), 24);
                for (size_t k = 0; k < n; k++)
                    ck_assert_str_ne(seen[k], id);
                if (a < 3 && n < sizeof seen / sizeof seen[0])
                    strcpy(seen[n++], id);
                char again[TOOL_CALL_ID_SIZE];
                tool_call_id(again, answers[a], choice, call);
                ck_assert_str_eq(again, id);
            }
}
END_TEST

START_TEST(test_finish_reason_is_tool_calls_only_for_whole_calls_that_stopped)
{
    ck_assert_str_eq(tool_call_finish_reason("stop", true), "tool_calls");
    ck_assert_str_eq(tool_call_finish_reason("stop", false), "stop");
    ck_assert_str_eq(tool_call_finish_reason("length", true), "length");
    ck_assert_str_eq(tool_call_finish_reason("length", false), "length");
    ck_assert_ptr_null(tool_call_finish_reason(NULL, true));
}
END_TEST

/* ---- the JSON: streamed deltas joined as a client joins them ---- */

/* A client's accumulator (as the OpenAI SDKs do it): content appended,
 * each tool_calls entry merged into the call of its index (id, type and
 * name set, arguments appended). */
static void accumulate(json_t *message, json_t *delta)
{
    json_t *content = json_object_get(delta, "content");
    if (content != NULL) {
        json_t *have = json_object_get(message, "content");
        gpt2d_buf b = GPT2D_BUF_INIT;
        if (json_is_string(have))
            ck_assert_int_eq(buf_append(&b, json_string_value(have),
                                        json_string_length(have)),
                             0);
        ck_assert_int_eq(buf_append(&b, json_string_value(content),
                                    json_string_length(content)),
                         0);
        json_object_set_new(
            message, "content",
            json_stringn(b.len > 0 ? (const char *)b.data : "", b.len));
        buf_free(&b);
    }
    json_t *calls = json_object_get(delta, "tool_calls");
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *entry = json_array_get(calls, k);
        json_t *index = json_object_get(entry, "index");
        ck_assert(json_is_integer(index));
        json_t *all = json_object_get(message, "tool_calls");
        if (all == NULL) {
            all = json_array();
            json_object_set_new(message, "tool_calls", all);
        }
        size_t i = (size_t)json_integer_value(index);
        ck_assert_uint_le(i, json_array_size(all));
        if (i == json_array_size(all)) {
            /* a new call: its first entry has the id, type and name */
            ck_assert(json_is_string(json_object_get(entry, "id")));
            ck_assert_str_eq(json_string_value(json_object_get(entry, "type")),
                             "function");
            json_array_append_new(
                all, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id",
                               json_object_get(entry, "id"), "type", "function",
                               "function", "name",
                               json_object_get(
                                   json_object_get(entry, "function"), "name"),
                               "arguments", ""));
        }
        json_t *piece = json_object_get(json_object_get(entry, "function"),
                                        "arguments");
        json_t *fn = json_object_get(json_array_get(all, i), "function");
        json_t *have = json_object_get(fn, "arguments");
        char *joined_args = NULL;
        ck_assert_int_ge(asprintf(&joined_args, "%s%s", json_string_value(have),
                                  json_string_value(piece)),
                         0);
        json_object_set_new(fn, "arguments", json_string(joined_args));
        free(joined_args);
    }
}

START_TEST(test_streamed_deltas_join_to_the_whole_message)
{
    const sample *s = &samples[_i];
    const size_t len = strlen(s->text);
    json_t *whole = json_pack("{s:s}", "role", "assistant");
    bool complete = false;
    ck_assert_int_eq(tool_calls_message(s->fmt, "chatcmpl-x", 3, s->text, len,
                                        whole, &complete),
                     0);
    ck_assert(complete == s->complete);
    for (size_t step = 1; step <= 3; step++) {
        json_t *streamed = json_pack("{s:s, s:n}", "role", "assistant",
                                     "content");
        tool_call_stream ts;
        tool_call_stream_init(&ts, s->fmt, "chatcmpl-x", 3);
        json_t *deltas = json_array();
        for (size_t k = 0; k < len; k += step)
            ck_assert_int_eq(tool_call_stream_feed(&ts, s->text, k, deltas), 0);
        ck_assert_int_eq(tool_call_stream_finish(&ts, s->text, len, deltas), 0);
        for (size_t k = 0; k < json_array_size(deltas); k++) {
            json_t *d = json_array_get(deltas, k);
            /* each delta says one thing */
            ck_assert_uint_eq(json_object_size(d), 1);
            accumulate(streamed, d);
        }
        /* a text answer's empty content comes as the opening chunk's "" */
        if (s->content != NULL && s->content[0] == '\0')
            json_object_set_new(streamed, "content", json_string(""));
        char *a = json_dumps(whole, JSON_SORT_KEYS | JSON_COMPACT);
        char *b = json_dumps(streamed, JSON_SORT_KEYS | JSON_COMPACT);
        ck_assert_msg(json_equal(whole, streamed),
                      "%s\nwhole    %s\nstreamed %s", s->text, a, b);
        free(a);
        free(b);
        json_decref(deltas);
        json_decref(streamed);
    }
    json_decref(whole);
}
END_TEST

/* The message's calls, as OpenAI shapes them. */
START_TEST(test_whole_message_has_openai_shapes)
{
    const sample *s = &samples[1];
    json_t *m = json_pack("{s:s}", "role", "assistant");
    bool complete = false;
    ck_assert_int_eq(tool_calls_message(s->fmt, "chatcmpl-y", 0, s->text,
                                        strlen(s->text), m, &complete),
                     0);
    ck_assert(complete);
    ck_assert(json_is_null(json_object_get(m, "content")));
    json_t *calls = json_object_get(m, "tool_calls");
    ck_assert_uint_eq(json_array_size(calls), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(calls, i);
        char id[TOOL_CALL_ID_SIZE];
        tool_call_id(id, "chatcmpl-y", 0, i);
        ck_assert_str_eq(json_string_value(json_object_get(c, "id")), id);
        ck_assert_str_eq(json_string_value(json_object_get(c, "type")),
                         "function");
        json_t *fn = json_object_get(c, "function");
        ck_assert_uint_eq(json_object_size(fn), 2);
        ck_assert_str_eq(json_string_value(json_object_get(fn, "name")),
                         s->names[i]);
        ck_assert_str_eq(json_string_value(json_object_get(fn, "arguments")),
                         s->args[i]);
    }
    ck_assert_uint_eq(json_object_size(m), 3); /* role, content, tool_calls */
    json_decref(m);
    /* plain text: content only */
    m = json_pack("{s:s}", "role", "assistant");
    ck_assert_int_eq(
        tool_calls_message(&builtin, "chatcmpl-y", 0, "Hi", 2, m, &complete),
        0);
    ck_assert(!complete);
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "Hi");
    ck_assert_ptr_null(json_object_get(m, "tool_calls"));
    json_decref(m);
}
END_TEST

#define N_SAMPLES (sizeof samples / sizeof samples[0])

static Suite *tool_calls_suite(void)
{
    Suite *s = suite_create("tool_calls");
    TCase *rd = tcase_create("reader");
    tcase_add_loop_test(rd, test_whole_answer_reads_as_written, 0,
                        (int)N_SAMPLES);
    tcase_add_loop_test(rd, test_every_split_point_reads_the_same, 0,
                        (int)N_SAMPLES);
    tcase_add_loop_test(rd, test_byte_by_byte_reads_the_same, 0,
                        (int)N_SAMPLES);
    tcase_add_test(rd, test_a_possible_marker_is_held_back_until_decided);
    tcase_add_test(rd, test_arguments_grow_with_the_text_and_stop_at_their_end);
    suite_add_tcase(s, rd);
    TCase *js = tcase_create("json");
    tcase_add_test(js, test_ids_are_call_and_24_hex_digits_unique_per_call);
    tcase_add_test(
        js, test_finish_reason_is_tool_calls_only_for_whole_calls_that_stopped);
    tcase_add_loop_test(js, test_streamed_deltas_join_to_the_whole_message, 0,
                        (int)N_SAMPLES);
    tcase_add_test(js, test_whole_message_has_openai_shapes);
    suite_add_tcase(s, js);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tool_calls_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
