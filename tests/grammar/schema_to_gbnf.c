/* schema_to_gbnf.c — the structured-output compilers from the command line,
 * for the property tests (tests/grammar/test_schema_property.sh) and by
 * hand:
 *
 *   schema_to_gbnf --json-schema FILE [--strict] [--param BASE]
 *   schema_to_gbnf --regex FILE          the whole answer matches
 *   schema_to_gbnf --pattern FILE        a JSON string containing a match
 *   schema_to_gbnf --choices FILE        FILE: a JSON array of strings
 *   schema_to_gbnf --json-object | --json-value
 *
 * Prints a whole grammar (start rule `root`) on stdout and exits 0; on a
 * refused input prints {"param": ..., "message": ...} on stdout and exits
 * 2; on misuse or an unreadable file exits 1 with a message on stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "grammar/choices_gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex_gbnf.h"

static int read_file(const char *path, gpt2d_buf *b)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_append(b, chunk, n) != 0) {
            fclose(f);
            return -1;
        }
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}

static int refuse(const char *param, const char *message)
{
    json_t *o = json_pack("{s:s,s:s}", "param", param, "message", message);
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    printf("%s\n", text != NULL ? text : "{}");
    free(text);
    json_decref(o);
    return 2;
}

static int usage(void)
{
    fprintf(stderr, "usage: schema_to_gbnf --json-schema FILE [--strict] "
                    "[--param BASE]\n"
                    "       schema_to_gbnf --regex FILE | --pattern FILE | "
                    "--choices FILE\n"
                    "       schema_to_gbnf --json-object | --json-value\n");
    return 1;
}

static int print(const gpt2d_buf *out)
{
    fwrite(out->data, 1, out->len, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int do_schema(const char *path, bool strict, const char *param)
{
    json_error_t jerr;
    json_t *schema = json_load_file(path, JSON_DECODE_ANY, &jerr);
    if (schema == NULL)
        return refuse(param, jerr.text);
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.strict = strict;
    opt.param = param;
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    int rc = json_schema_grammar(schema, &opt, &out, &err) != 0
                 ? refuse(err.param, err.message)
                 : print(&out);
    buf_free(&out);
    json_decref(schema);
    return rc;
}

static int do_regex(const char *path, regex_gbnf_mode mode)
{
    gpt2d_buf pattern = GPT2D_BUF_INIT, out = GPT2D_BUF_INIT;
    if (read_file(path, &pattern) != 0)
        return 1;
    regex_error err;
    int rc;
    if (mode == REGEX_GBNF_RAW) {
        rc = regex_gbnf((const char *)pattern.data, pattern.len, mode, "root",
                        256 * 1024, &out, &err);
    } else {
        /* a JSON string: quotes around the content rule */
        rc = regex_gbnf((const char *)pattern.data, pattern.len, mode,
                        "content", 256 * 1024, &out, &err);
        static const char root[] = "root ::= \"\\\"\" content \"\\\"\"\n";
        if (rc == 0 && buf_append(&out, root, sizeof root - 1) != 0)
            rc = -1;
    }
    if (rc != 0) {
        char message[300];
        snprintf(message, sizeof message, "%s (offset %zu)", err.message,
                 err.offset);
        rc = refuse("regex", message);
    } else {
        rc = print(&out);
    }
    buf_free(&pattern);
    buf_free(&out);
    return rc;
}

static int do_choices(const char *path)
{
    json_error_t jerr;
    json_t *list = json_load_file(path, JSON_DECODE_ANY, &jerr);
    if (list == NULL)
        return refuse("choice", jerr.text);
    if (!json_is_array(list)) {
        json_decref(list);
        return refuse("choice", "choice must be an array of strings");
    }
    size_t n = json_array_size(list);
    const char **texts = calloc(n + 1, sizeof *texts);
    size_t *lens = calloc(n + 1, sizeof *lens);
    int rc = 0;
    for (size_t i = 0; i < n && texts != NULL && lens != NULL; i++) {
        json_t *s = json_array_get(list, i);
        if (!json_is_string(s)) {
            char param[64];
            snprintf(param, sizeof param, "choice[%zu]", i);
            rc = refuse(param, "a choice must be a string");
            break;
        }
        texts[i] = json_string_value(s);
        lens[i] = json_string_length(s);
    }
    if (rc == 0 && (texts == NULL || lens == NULL))
        rc = 1;
    if (rc == 0) {
        gpt2d_buf out = GPT2D_BUF_INIT;
        gpt2d_error err;
        size_t bad;
        if (choices_gbnf(texts, lens, n, "root", 256 * 1024, &out, &bad,
                         &err) != 0) {
            char param[64];
            if (bad < n)
                snprintf(param, sizeof param, "choice[%zu]", bad);
            else
                snprintf(param, sizeof param, "choice");
            rc = refuse(param, err.message);
        } else {
            rc = print(&out);
        }
        buf_free(&out);
    }
    free(texts);
    free(lens);
    json_decref(list);
    return rc;
}

static int do_value(bool object_only)
{
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.param = "response_format";
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    int rc = json_value_gbnf(object_only, &opt, "root", &out, &err) != 0
                 ? refuse(err.param, err.message)
                 : print(&out);
    buf_free(&out);
    return rc;
}

int main(int argc, char **argv)
{
    const char *schema = NULL, *regex_file = NULL, *pattern = NULL,
               *choices = NULL, *param = "schema";
    bool strict = false, object = false, value = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_arg = i + 1 < argc;
        if (strcmp(a, "--json-schema") == 0 && has_arg)
            schema = argv[++i];
        else if (strcmp(a, "--regex") == 0 && has_arg)
            regex_file = argv[++i];
        else if (strcmp(a, "--pattern") == 0 && has_arg)
            pattern = argv[++i];
        else if (strcmp(a, "--choices") == 0 && has_arg)
            choices = argv[++i];
        else if (strcmp(a, "--param") == 0 && has_arg)
            param = argv[++i];
        else if (strcmp(a, "--strict") == 0)
            strict = true;
        else if (strcmp(a, "--json-object") == 0)
            object = true;
        else if (strcmp(a, "--json-value") == 0)
            value = true;
        else
            return usage();
    }
    int modes = (schema != NULL) + (regex_file != NULL) + (pattern != NULL) +
                (choices != NULL) + object + value;
    if (modes != 1)
        return usage();
    if (schema != NULL)
        return do_schema(schema, strict, param);
    if (regex_file != NULL)
        return do_regex(regex_file, REGEX_GBNF_RAW);
    if (pattern != NULL)
        return do_regex(pattern, REGEX_GBNF_JSON_STRING);
    if (choices != NULL)
        return do_choices(choices);
    return do_value(object);
}
