/* fuzz_json_schema.c — the structured-output compilers on any input.
 *
 * Each input is tried three ways: as a JSON Schema (when it is JSON; strict
 * and not), as a regular expression in both modes (raw and JSON-string),
 * and, when it is a JSON array, as a list of choices.  Oracle (besides ASan
 * and UBSan):
 *   - a success appends whole lines "NAME ::= BODY" of valid UTF-8, within
 *     the byte budget, whose rule names are [A-Za-z0-9-]+ under the caller's
 *     prefix, each defined once, every name a body uses defined, brackets
 *     and quotes balanced, and the start rule among them;
 *   - compiling again gives the same text (no hidden state);
 *   - a refusal leaves the buffer as it was and says why: a message, and
 *     for a schema a param under the base ("schema..."), for a regex an
 *     offset inside the pattern.
 *
 * Single-threaded: libFuzzer calls a target from one thread. */
#include <jansson.h>
#include <string.h>

#include "core/buf.h"
#include "fuzz.h"
#include "grammar/choices_gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex_gbnf.h"
#include "text/utf8.h"

#define MAX_BYTES (64 * 1024)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-';
}

/* Names defined (one per line's start), and every name used defined. */
static void check_rules(const char *text, size_t len, const char *start)
{
    FUZZ_CHECK(utf8_valid(text, len), "the grammar is not UTF-8");
    FUZZ_CHECK(len > 0 && text[len - 1] == '\n', "the last line is open");
    /* pass 1: the defined names */
    enum { MAX_RULES = 8192 };
    static char names[MAX_RULES][100];
    size_t n = 0;
    bool have_start = false;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && name_char(text[j]))
            j++;
        FUZZ_CHECK(j > i && j - i < 100 && j + 5 <= len &&
                       memcmp(text + j, " ::= ", 5) == 0,
                   "a line does not start with 'NAME ::= '");
        FUZZ_CHECK(n < MAX_RULES, "too many rules");
        memcpy(names[n], text + i, j - i);
        names[n][j - i] = '\0';
        for (size_t k = 0; k < n; k++)
            FUZZ_CHECK(strcmp(names[k], names[n]) != 0, "%s defined twice",
                       names[n]);
        FUZZ_CHECK(strncmp(names[n], start, strlen(start)) == 0,
                   "%s is not under the prefix %s", names[n], start);
        have_start |= strcmp(names[n], start) == 0;
        n++;
        const char *nl = memchr(text + j, '\n', len - j);
        i = (size_t)(nl - text) + 1;
    }
    FUZZ_CHECK(have_start, "no rule %s", start);
    /* pass 2: the bodies: literals, classes, groups and names used */
    for (size_t i = 0; i < len; i++) {
        while (i < len && name_char(text[i]))
            i++;
        i += 5; /* " ::= " */
        int depth = 0;
        for (; i < len && text[i] != '\n'; i++) {
            char c = text[i];
            if (c == '"' || c == '[') {
                char close = c == '"' ? '"' : ']';
                for (i++; i < len && text[i] != close; i++)
                    if (text[i] == '\\')
                        i++;
                FUZZ_CHECK(i < len && text[i] == close, "an open %c", c);
            } else if (c == '(') {
                depth++;
            } else if (c == ')') {
                FUZZ_CHECK(--depth >= 0, "a ')' closing nothing");
            } else if (c == '{') {
                while (i < len && text[i] != '}')
                    i++;
            } else if (name_char(c)) {
                size_t j = i;
                while (j < len && name_char(text[j]))
                    j++;
                bool known = false;
                for (size_t k = 0; k < n && !known; k++)
                    known = strlen(names[k]) == j - i &&
                            memcmp(names[k], text + i, j - i) == 0;
                FUZZ_CHECK(known, "an undefined rule %.*s", (int)(j - i),
                           text + i);
                i = j - 1;
            } else {
                FUZZ_CHECK(strchr(" |?*+.", c) != NULL,
                           "a stray character 0x%02x", (unsigned char)c);
            }
        }
        FUZZ_CHECK(depth == 0, "an unclosed '('");
    }
}

static void try_schema(const json_t *schema, bool strict)
{
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.strict = strict;
    opt.max_bytes = MAX_BYTES;
    gpt2d_buf out = GPT2D_BUF_INIT, again = GPT2D_BUF_INIT;
    FUZZ_CHECK(buf_append(&out, "x ::= \"x\"\n", 10) == 0, "out of memory");
    json_schema_error err;
    int rc = json_schema_gbnf(schema, &opt, "s-1", &out, &err);
    if (rc == 0) {
        FUZZ_CHECK(out.len - 10 <= MAX_BYTES, "%zu bytes past the budget",
                   out.len - 10);
        check_rules((const char *)out.data + 10, out.len - 10, "s-1");
        json_schema_error err2;
        FUZZ_CHECK(json_schema_gbnf(schema, &opt, "s-1", &again, &err2) == 0,
                   "a second compile failed: %s", err2.message);
        FUZZ_CHECK(again.len == out.len - 10 &&
                       memcmp(again.data, out.data + 10, again.len) == 0,
                   "a second compile differs");
    } else {
        FUZZ_CHECK(rc == -1, "rc %d", rc);
        FUZZ_CHECK(out.len == 10, "a refusal changed the buffer");
        FUZZ_CHECK(err.message[0] != '\0', "a refusal without a message");
        FUZZ_CHECK(strncmp(err.param, "schema", 6) == 0,
                   "a refusal's param '%s' is not under 'schema'", err.param);
    }
    buf_free(&out);
    buf_free(&again);
}

static void try_regex(const char *p, size_t len, regex_gbnf_mode mode)
{
    gpt2d_buf out = GPT2D_BUF_INIT;
    regex_error err;
    int rc = regex_gbnf(p, len, mode, "r", MAX_BYTES, &out, &err);
    if (rc == 0) {
        FUZZ_CHECK(out.len <= MAX_BYTES, "past the budget");
        check_rules((const char *)out.data, out.len, "r");
    } else {
        FUZZ_CHECK(out.len == 0, "a refusal changed the buffer");
        FUZZ_CHECK(err.message[0] != '\0', "a refusal without a message");
        FUZZ_CHECK(err.offset <= len, "offset %zu past the pattern (%zu)",
                   err.offset, len);
    }
    buf_free(&out);
}

static void try_choices(const json_t *list)
{
    size_t n = json_array_size(list);
    const char **texts = calloc(n + 1, sizeof *texts);
    size_t *lens = calloc(n + 1, sizeof *lens);
    FUZZ_CHECK(texts != NULL && lens != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(list, i);
        texts[i] = json_is_string(s) ? json_string_value(s) : "";
        lens[i] = json_is_string(s) ? json_string_length(s) : 0;
    }
    gpt2d_buf out = GPT2D_BUF_INIT;
    gpt2d_error err;
    size_t bad;
    if (choices_gbnf(texts, lens, n, "c", MAX_BYTES, &out, &bad, &err) == 0)
        check_rules((const char *)out.data, out.len, "c");
    else
        FUZZ_CHECK(out.len == 0 && bad <= n, "a refusal changed the buffer");
    buf_free(&out);
    free(texts);
    free(lens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_error_t jerr;
    json_t *v = json_loadb(text, size, JSON_DECODE_ANY, &jerr);
    if (v != NULL) {
        try_schema(v, false);
        try_schema(v, true);
        if (json_is_array(v))
            try_choices(v);
        json_decref(v);
    }
    try_regex(text, size, REGEX_GBNF_RAW);
    try_regex(text, size, REGEX_GBNF_JSON_STRING);
    return 0;
}
