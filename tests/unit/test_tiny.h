/* test_tiny.h — the `tiny` fixture model (make-fixtures.sh: 2 layers, 64
 * wide, n_ctx 64, the real GPT-2 vocabulary) and its tokenizer, for the
 * suites that run the engine on it. */
#ifndef GPT2D_TEST_TINY_H
#define GPT2D_TEST_TINY_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/settings.h"
#include "fleet/fleet.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "test_util.h"

/* Whether the fixture is there; when not, says so for `suite`, whose
 * main then exits 77 (make-fixtures.sh skipped: no numpy or vocabulary,
 * and said so). */
static inline bool test_tiny_present(const char *suite)
{
    char path[4096];
    FILE *probe = fopen(
        test_data_path(path, sizeof path, "models/tiny/model.safetensors"),
        "r");
    if (probe == NULL) {
        fprintf(stderr, "%s: SKIP: %s missing\n", suite, path);
        return false;
    }
    fclose(probe);
    return true;
}

static inline void test_tiny_load(model *m, tokenizer **tok)
{
    char dir[4096], vocab[4096], merges[4096];
    gpt2d_error err = { { 0 } };
    test_data_path(dir, sizeof dir, "models/tiny");
    test_data_path(vocab, sizeof vocab, "models/tiny/vocab.json");
    test_data_path(merges, sizeof merges, "models/tiny/merges.txt");
    ck_assert_msg(model_load(m, dir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
    ck_assert_msg(tokenizer_load(tok, vocab, merges, &err) == 0, "%s",
                  err.message);
}

/* A fleet of the one tiny model, as `gpt2d --model DIR --threads 1
 * --slots 1` serves it; `cfg` must outlive it. */
static inline fleet *test_tiny_fleet(settings *cfg)
{
    char dir[4096];
    test_data_path(dir, sizeof dir, "models/tiny");
    char *argv[] = { "gpt2d", "--model", dir, "--threads",
                     "1",     "--slots", "1", NULL };
    gpt2d_error err = { { 0 } };
    ck_assert_msg(settings_load(cfg, 7, argv, &err) == SETTINGS_RUN, "%s",
                  err.message);
    fleet *f = NULL;
    ck_assert_msg(fleet_create(&f, cfg, NULL, &err) == 0, "%s", err.message);
    return f;
}

/* Token ids of `text` (malloc'ed). */
static inline int32_t *test_encode(const tokenizer *tok, const char *text,
                                   size_t *n)
{
    int32_t *ids = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(tokenizer_encode(tok, text, strlen(text), &ids, n, &err) == 0,
                  "%s", err.message);
    return ids;
}

#endif
