/* test_api_util.h — what the API layer's suites (test_api.c, test_chat.c)
 * share: the GPT-2 tokenizer fixture, and the check that a parser refused
 * a body as the client's mistake, naming the field. */
#ifndef GPT2D_TEST_API_UTIL_H
#define GPT2D_TEST_API_UTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "text/tokenizer.h"
#include "test_util.h"

/* The real GPT-2 vocabulary (tests/data/fetch-tokenizer.sh fetches it);
 * without it the suite cannot run, and says why. */
static inline tokenizer *test_load_tokenizer(void)
{
    char vocab[4096], merges[4096];
    test_data_path(vocab, sizeof vocab, "tokenizer/vocab.json");
    test_data_path(merges, sizeof merges, "tokenizer/merges.txt");
    tokenizer *tok = NULL;
    gpt2d_error err;
    if (tokenizer_load(&tok, vocab, merges, &err) != 0) {
        fprintf(stderr,
                "tokenizer_load: %s (run tests/data/fetch-tokenizer.sh)\n",
                err.message);
        exit(EXIT_FAILURE);
    }
    return tok;
}

/* A parser returned `rc` and `e` for `body`: refused, as a 400
 * invalid_request_error with a message, whose param is `param`. */
static inline void test_expect_refusal(int rc, const api_error *e,
                                       const char *body, const char *param)
{
    ck_assert_msg(rc == -1, "accepted: %s", body);
    ck_assert_int_eq(e->status, 400);
    ck_assert_str_eq(e->type, "invalid_request_error");
    ck_assert_msg(strcmp(e->param, param) == 0,
                  "%s: param '%s', wanted '%s' (%s)", body, e->param, param,
                  e->message);
    ck_assert(e->message[0] != '\0');
}

#endif
