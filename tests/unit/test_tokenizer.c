/* test_tokenizer.c — the GPT-2 tokenizer against the real vocabulary and the
 * JS reference encoder (fixtures from tests/data/fetch-tokenizer.sh). */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/monotonic.h"
#include "text/tokenizer.h"
#include "text/unicode_class.h"
#include "test_util.h"

static tokenizer *tok;
static char vocab_path[4096], merges_path[4096];

static void set_fixture_paths(void)
{
    test_data_path(vocab_path, sizeof vocab_path, "tokenizer/vocab.json");
    test_data_path(merges_path, sizeof merges_path, "tokenizer/merges.txt");
}

static void load_real_tokenizer(void)
{
    gpt2d_error err = { { 0 } };
    set_fixture_paths();
    int rc = tokenizer_load(&tok, vocab_path, merges_path, &err);
    ck_assert_msg(rc == 0,
                  "tokenizer_load: %s (run tests/data/fetch-tokenizer.sh "
                  "first)",
                  err.message);
}

static void free_real_tokenizer(void)
{
    tokenizer_free(tok);
    tok = NULL;
}

/* ---- helpers ---- */

/* xorshift64*: a fixed seed gives the same "random" strings on every run. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static void encode_ok(const char *text, size_t len, int32_t **ids, size_t *n)
{
    gpt2d_error err = { { 0 } };
    int rc = tokenizer_encode(tok, text, len, ids, n, &err);
    ck_assert_msg(rc == 0, "encode failed: %s", err.message);
}

/* Asserts decode(encode(text)) == text byte for byte; `what` names the case. */
static void assert_round_trip(const char *text, size_t len, const char *what)
{
    int32_t *ids;
    size_t n;
    encode_ok(text, len, &ids, &n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] >= 0 && (size_t)ids[i] < tokenizer_vocab_size(tok),
                      "%s: id %ld at %zu outside the vocabulary", what,
                      (long)ids[i], i);
    char *out;
    size_t out_len;
    gpt2d_error err = { { 0 } };
    int rc = tokenizer_decode(tok, ids, n, &out, &out_len, &err);
    ck_assert_msg(rc == 0, "%s: decode failed: %s", what, err.message);
    ck_assert_msg(out_len == len, "%s: decoded %zu bytes, expected %zu", what,
                  out_len, len);
    size_t diff = 0;
    while (diff < len && out[diff] == text[diff])
        diff++;
    ck_assert_msg(diff == len, "%s: decoded text differs at byte %zu", what,
                  diff);
    ck_assert_int_eq(out[out_len], '\0');
    free(out);
    free(ids);
}

static json_t *load_json(const char *path)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    ck_assert_msg(j != NULL, "%s:%d: %s", path, jerr.line, jerr.text);
    return j;
}

static json_t *load_corpus(void)
{
    char path[4096];
    json_t *corpus = load_json(
        test_src_path(path, sizeof path, "tests/tokenizer/corpus.json"));
    ck_assert(json_is_array(corpus));
    ck_assert_int_ge(json_array_size(corpus), 40);
    return corpus;
}

static const char *case_text(json_t *c, size_t *len)
{
    json_t *t = json_object_get(c, "text");
    ck_assert(json_is_string(t));
    *len = json_string_length(t);
    return json_string_value(t);
}

static const char *case_name(json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    ck_assert(name != NULL);
    return name;
}

/* ---- against the reference ---- */

START_TEST(test_encode_matches_js_reference)
{
    char path[4096];
    json_t *corpus = load_corpus();
    json_t *expected = load_json(
        test_data_path(path, sizeof path, "tokenizer/expected.json"));
    size_t i, failures = 0;
    json_t *c;
    json_array_foreach(corpus, i, c)
    {
        const char *name = case_name(c);
        size_t len;
        const char *text = case_text(c, &len);
        json_t *want = json_object_get(expected, name);
        ck_assert_msg(json_is_array(want),
                      "expected.json lacks case \"%s\" "
                      "(stale fixture?)",
                      name);
        int32_t *ids;
        size_t n;
        encode_ok(text, len, &ids, &n);
        size_t want_n = json_array_size(want), pos = 0;
        while (pos < n && pos < want_n &&
               ids[pos] == json_integer_value(json_array_get(want, pos)))
            pos++;
        if (pos < n || pos < want_n) {
            failures++;
            fprintf(stderr,
                    "case \"%s\": first difference at token %zu: got "
                    "%ld, reference %ld (%zu vs %zu tokens)\n",
                    name, pos, pos < n ? (long)ids[pos] : -1L,
                    pos < want_n
                        ? (long)json_integer_value(json_array_get(want, pos))
                        : -1L,
                    n, want_n);
        }
        free(ids);
    }
    json_decref(expected);
    json_decref(corpus);
    ck_assert_msg(failures == 0,
                  "%zu corpus case(s) differ from the JS "
                  "reference (see stderr)",
                  failures);
}
END_TEST

/* ---- round trips ---- */

START_TEST(test_decode_inverts_encode_on_corpus)
{
    json_t *corpus = load_corpus();
    size_t i;
    json_t *c;
    json_array_foreach(corpus, i, c)
    {
        size_t len;
        const char *text = case_text(c, &len);
        assert_round_trip(text, len, case_name(c));
    }
    json_decref(corpus);
}
END_TEST

START_TEST(test_decode_inverts_encode_on_random_bytes)
{
    /* Pieces that stress the pre-tokeniser, mixed with arbitrary bytes:
     * NULs, lone continuation bytes, truncated and overlong sequences,
     * encoded surrogates, and pieces of "<|endoftext|>". */
    static const char *const pieces[] = {
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "'s",
        "'ll",
        "'",
        "a",
        "Z",
        "9",
        "é",
        "\xc3",
        "\xa9",
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xf0\x9f\x98\x80",
        "\xc0\xaf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xff",
        "\xfe",
        "\xc2\xa0",
        "\xe3\x80\x80",
        "<|endoftext|>",
        "<|",
        "endoftext",
        "|>",
        "\0",
        "中",
        "Ω",
        "١",
        "!?",
        "word",
    };
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    char buf[600];
    /* quick: 300 strings of ~60 pieces still use every piece many times */
    const int iters = (int)test_count(3000, 300);
    for (int iter = 0; iter < iters; iter++) {
        size_t len = 0, target = rng_next(&seed) % 400;
        while (len < target) {
            uint64_t r = rng_next(&seed);
            if (r % 3 == 0) {
                buf[len++] = (char)(r >> 8);
            } else {
                const char *p = pieces[(r >> 8) % n_pieces];
                size_t pl = p[0] == '\0' ? 1 : strlen(p);
                memcpy(buf + len, p, pl);
                len += pl;
            }
        }
        char what[64];
        snprintf(what, sizeof what, "random string %d", iter);
        assert_round_trip(buf, len, what);
    }
}
END_TEST

START_TEST(test_invalid_utf8_is_encoded_bytewise)
{
    /* Each invalid byte is its own "other" character, so it lands in the
     * punctuation class and is never dropped. */
    static const char text[] = "ab\xff\xfe cd\xc3 \x80x\0y";
    assert_round_trip(text, sizeof text - 1, "invalid UTF-8");
    int32_t *ids;
    size_t n;
    encode_ok("\xff", 1, &ids, &n);
    ck_assert_uint_eq(n, 1);
    size_t len;
    const char *b = tokenizer_token_bytes(tok, ids[0], &len);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq((unsigned char)b[0], 0xFF);
    free(ids);
}
END_TEST

START_TEST(test_empty_text_gives_no_tokens)
{
    int32_t *ids;
    size_t n;
    encode_ok("", 0, &ids, &n);
    ck_assert_uint_eq(n, 0);
    free(ids);
    encode_ok(NULL, 0, &ids, &n);
    ck_assert_uint_eq(n, 0);
    free(ids);
}
END_TEST

/* ---- special token and vocabulary edges ---- */

START_TEST(test_endoftext_is_one_token_and_decodes_back)
{
    int32_t *ids;
    size_t n;
    encode_ok("<|endoftext|>", 13, &ids, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], TOKENIZER_EOT);
    free(ids);

    encode_ok("a<|endoftext|><|endoftext|>b", 28, &ids, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(ids[1], TOKENIZER_EOT);
    ck_assert_int_eq(ids[2], TOKENIZER_EOT);
    free(ids);

    int32_t eot = TOKENIZER_EOT;
    char *out;
    size_t out_len;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(tokenizer_decode(tok, &eot, 1, &out, &out_len, &err), 0);
    ck_assert_uint_eq(out_len, 13);
    ck_assert_str_eq(out, "<|endoftext|>");
    free(out);
    ck_assert_uint_eq(tokenizer_vocab_size(tok), 50257);
}
END_TEST

START_TEST(test_token_bytes_outside_vocab_is_null)
{
    static const int32_t bad[] = { -1, 50257, 100000, INT32_MAX, INT32_MIN };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = 99;
        ck_assert_ptr_null(tokenizer_token_bytes(tok, bad[i], &len));
        ck_assert_uint_eq(len, 0);
    }
    size_t len;
    const char *b = tokenizer_token_bytes(tok, 50256, &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(len, 13);
    b = tokenizer_token_bytes(tok, 0, &len);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(b[0], '!');
}
END_TEST

/* The longest token bounds how few tokens a text can be. */
START_TEST(test_longest_token_is_the_longest_spelling)
{
    size_t longest = 0;
    for (int32_t id = 0; id < (int32_t)tokenizer_vocab_size(tok); id++) {
        size_t len;
        tokenizer_token_bytes(tok, id, &len);
        if (len > longest)
            longest = len;
    }
    ck_assert_uint_gt(longest, 13);
    ck_assert_uint_eq(tokenizer_longest_token(tok), longest);
}
END_TEST

/* A token is text by itself when its bytes are whole UTF-8: "Hello" and
 * "<|endoftext|>" are, the byte tokens of a character's pieces are not. */
START_TEST(test_token_is_utf8_only_for_whole_characters)
{
    ck_assert(tokenizer_token_is_utf8(tok, 15496));
    ck_assert(tokenizer_token_is_utf8(tok, TOKENIZER_EOT));
    int32_t *ids;
    size_t n;
    encode_ok("\xc3\xa9", 2, &ids, &n); /* one token, whole */
    ck_assert_uint_eq(n, 1);
    ck_assert(tokenizer_token_is_utf8(tok, ids[0]));
    free(ids);
    encode_ok("\xe2", 1, &ids, &n); /* a lead byte alone */
    ck_assert_uint_eq(n, 1);
    ck_assert(!tokenizer_token_is_utf8(tok, ids[0]));
    free(ids);
    ck_assert(!tokenizer_token_is_utf8(tok, -1));
    ck_assert(!tokenizer_token_is_utf8(tok, 50257));
}
END_TEST

/* encode_most gives encode's ids when the text has at most `most` tokens,
 * and most + 1 and no ids when it has more. */
START_TEST(test_encode_most_is_encode_within_the_bound)
{
    json_t *corpus = load_corpus();
    size_t i;
    json_t *c;
    json_array_foreach(corpus, i, c)
    {
        size_t len;
        const char *text = case_text(c, &len);
        int32_t *want, *got;
        size_t n_want, n_got;
        gpt2d_error err;
        encode_ok(text, len, &want, &n_want);
        ck_assert_int_eq(
            tokenizer_encode_most(tok, text, len, n_want, &got, &n_got, &err),
            0);
        ck_assert_uint_eq(n_got, n_want);
        if (n_want > 0)
            ck_assert_mem_eq(got, want, n_want * sizeof *got);
        free(got);
        if (n_want > 0) {
            ck_assert_int_eq(tokenizer_encode_most(tok, text, len, n_want - 1,
                                                   &got, &n_got, &err),
                             0);
            ck_assert_msg(n_got == n_want && got == NULL,
                          "%s: %zu ids for most %zu", case_name(c), n_got,
                          n_want - 1);
        }
        free(want);
    }
    json_decref(corpus);
}
END_TEST

/* Past the bound nothing more is merged: of 2000 fresh words, only those
 * before the bound reach the word cache. */
START_TEST(test_encode_most_stops_at_the_bound)
{
    enum { WORDS = 2000, MOST = 10 };
    static char text[WORDS * 8];
    size_t pos = 0;
    uint64_t seed = 9;
    for (size_t w = 0; w < WORDS; w++) {
        text[pos++] = ' ';
        for (size_t i = 0; i < 6; i++)
            text[pos++] = (char)('a' + rng_next(&seed) % 26);
    }
    int32_t *ids;
    size_t n;
    gpt2d_error err;
    ck_assert_int_eq(
        tokenizer_encode_most(tok, text, pos, MOST, &ids, &n, &err), 0);
    ck_assert_uint_eq(n, MOST + 1);
    ck_assert_ptr_null(ids);
    tokenizer_cache_stats st;
    tokenizer_cache_stats_get(tok, &st);
    /* each word is a token at least: the eleventh word passes the bound */
    ck_assert_msg(st.entries <= MOST + 1, "%zu words merged and cached",
                  st.entries);
    /* a word too long for the tokens left is refused before it is merged,
     * like a text too long for them */
    ck_assert_int_eq(tokenizer_encode_most(tok, text, 1, 0, &ids, &n, &err), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_ptr_null(ids);
}
END_TEST

START_TEST(test_decode_rejects_id_outside_vocab)
{
    int32_t ids[] = { 40, 50257, 41 };
    char *out = (char *)1;
    size_t out_len = 7;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(tokenizer_decode(tok, ids, 3, &out, &out_len, &err), -1);
    ck_assert_ptr_null(out);
    ck_assert_uint_eq(out_len, 0);
    ck_assert_msg(strstr(err.message, "50257") != NULL &&
                      strstr(err.message, "position 1") != NULL,
                  "message should name the id and position: %s", err.message);
    ids[1] = -3;
    ck_assert_int_eq(tokenizer_decode(tok, ids, 3, &out, &out_len, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "-3"));
}
END_TEST

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t l = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (l == 0 || i + l > n)
            return false;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += l;
    }
    return true;
}

START_TEST(test_token_ending_mid_utf8_decodes_to_raw_bytes)
{
    /* Find a multi-byte token whose last byte starts a UTF-8 character that
     * the token does not finish. */
    int32_t found = -1;
    size_t len = 0;
    const char *b = NULL;
    for (int32_t id = 0; id < (int32_t)tokenizer_vocab_size(tok); id++) {
        b = tokenizer_token_bytes(tok, id, &len);
        unsigned char last = (unsigned char)b[len - 1];
        if (len >= 2 && last >= 0xC2 && last <= 0xF4 &&
            valid_utf8((const unsigned char *)b, len - 1)) {
            found = id;
            break;
        }
    }
    ck_assert_msg(found >= 0, "no token ends inside a UTF-8 character");
    char *out;
    size_t out_len;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(tokenizer_decode(tok, &found, 1, &out, &out_len, &err), 0);
    ck_assert_uint_eq(out_len, len);
    ck_assert(memcmp(out, b, len) == 0);
    ck_assert(!valid_utf8((const unsigned char *)out, out_len));
    free(out);

    /* And a character split over tokens comes back whole only when joined. */
    int32_t *ids;
    size_t n;
    encode_ok("\xf0\x9f\xa4\x97", 4, &ids, &n); /* U+1F917 HUGGING FACE */
    ck_assert_uint_ge(n, 2);
    size_t l0;
    tokenizer_token_bytes(tok, ids[0], &l0);
    ck_assert_uint_lt(l0, 4);
    free(ids);
}
END_TEST

/* ---- pre-tokenisation classes ---- */

START_TEST(test_unicode_classes_follow_js)
{
    ck_assert(unicode_classify('a') == UNICODE_LETTER);
    ck_assert(unicode_classify(0x00E9) == UNICODE_LETTER);  /* é */
    ck_assert(unicode_classify(0x4E2D) == UNICODE_LETTER);  /* 中 */
    ck_assert(unicode_classify(0x20000) == UNICODE_LETTER); /* CJK ext. B */
    ck_assert(unicode_classify('7') == UNICODE_NUMBER);
    ck_assert(unicode_classify(0x0661) == UNICODE_NUMBER); /* Arabic-Indic 1 */
    ck_assert(unicode_classify(0x00BD) == UNICODE_NUMBER); /* ½ */
    ck_assert(unicode_classify(0x216B) == UNICODE_NUMBER); /* Ⅻ */
    ck_assert(unicode_classify(0x00A0) == UNICODE_SPACE);
    ck_assert(unicode_classify(0x3000) == UNICODE_SPACE);
    ck_assert(unicode_classify(0x2028) == UNICODE_SPACE);
    ck_assert(unicode_classify(0xFEFF) == UNICODE_SPACE); /* JS \s only */
    ck_assert(unicode_classify(0x0085) == UNICODE_OTHER); /* not JS \s */
    ck_assert(unicode_classify(0x001C) == UNICODE_OTHER);
    ck_assert(unicode_classify(0x0301) == UNICODE_OTHER);  /* combining */
    ck_assert(unicode_classify(0x1F600) == UNICODE_OTHER); /* emoji */
    ck_assert(unicode_classify(0x110000) == UNICODE_OTHER);
}
END_TEST

/* ---- speed bounds ---- */

/* The word cache's slot for `bytes`, as src/tokenizer.c computes it (FNV-1a,
 * a final mix, 65536 slots): what a client who wants collisions computes. */
static size_t cache_index_of(const char *bytes, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)bytes[i];
        h *= 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 29)) & 0xffff;
}

/* 100 words that all hash to one cache slot: a lookup would otherwise scan
 * the whole cluster, under the lock every encode shares.  It probes a
 * bounded number of slots instead, and the words still encode exactly as
 * each does alone, cached or not. */
START_TEST(test_colliding_words_do_not_grow_cache_probes)
{
    enum { WORDS = 100, LEN = 8 };
    static char text[WORDS * (LEN + 1) + 1];
    size_t found = 0, target = SIZE_MAX, pos = 0;
    uint64_t seed = 7;
    while (found < WORDS) {
        char w[LEN + 1] = " ";
        for (size_t i = 1; i <= LEN; i++)
            w[i] = (char)('a' + rng_next(&seed) % 26);
        size_t slot = cache_index_of(w, sizeof w);
        if (target == SIZE_MAX)
            target = slot;
        if (slot != target)
            continue;
        memcpy(text + pos, w, sizeof w);
        pos += sizeof w;
        found++;
    }
    int32_t *first, *second;
    size_t n_first, n_second;
    encode_ok(text, pos, &first, &n_first);
    encode_ok(text, pos, &second, &n_second);
    tokenizer_cache_stats st;
    tokenizer_cache_stats_get(tok, &st);
    ck_assert_msg(st.longest_probe <= 32, "a lookup probed %zu slots",
                  st.longest_probe);
    ck_assert_msg(st.entries < WORDS, "all %zu colliding words cached",
                  st.entries);
    ck_assert_uint_eq(n_first, n_second);
    ck_assert_mem_eq(first, second, n_first * sizeof *first);
    size_t at = 0;
    for (size_t k = 0; k < WORDS; k++) {
        int32_t *ids;
        size_t n;
        encode_ok(text + k * (LEN + 1), LEN + 1, &ids, &n);
        ck_assert_uint_le(at + n, n_first);
        ck_assert_mem_eq(ids, first + at, n * sizeof *ids);
        at += n;
        free(ids);
    }
    ck_assert_uint_eq(at, n_first);
    free(first);
    free(second);
}
END_TEST

START_TEST(test_long_word_encodes_in_bounded_time)
{
    /* 10 KB without a space is one pre-token; a quadratic merge loop would
     * take seconds here (and far longer for the 200 KB one). */
    static const size_t sizes[] = { 10 * 1024, 200 * 1024 };
    uint64_t seed = 42;
    for (size_t k = 0; k < 2; k++) {
        size_t len = sizes[k];
        char *w = malloc(len);
        ck_assert_ptr_nonnull(w);
        for (size_t i = 0; i < len; i++)
            w[i] = (char)('a' + rng_next(&seed) % 26);
        double t0 = monotonic_seconds();
        int32_t *ids;
        size_t n;
        encode_ok(w, len, &ids, &n);
        double dt = monotonic_seconds() - t0;
        ck_assert_msg(dt < test_deadline(5.0), "%zu-byte word took %.2f s", len,
                      dt);
        ck_assert_uint_gt(n, len / 8);
        free(ids);
        assert_round_trip(w, len, "long word");
        free(w);
    }
    /* A run of one repeated byte merges into long tokens pair by pair. */
    char *same = malloc(100000);
    ck_assert_ptr_nonnull(same);
    memset(same, 'a', 100000);
    assert_round_trip(same, 100000, "100000 x 'a'");
    free(same);
}
END_TEST

/* ---- threads ---- */

typedef struct thread_job {
    json_t *corpus;
    int32_t **want; /* single-threaded ids per corpus case */
    size_t *want_n;
    unsigned seed;
    size_t mismatches;
    int failed; /* encode returned an error */
} thread_job;

static void *encode_corpus_thread(void *arg)
{
    thread_job *job = arg;
    uint64_t seed = job->seed;
    char word[16];
    for (int round = 0; round < 20; round++) {
        size_t i;
        json_t *c;
        json_array_foreach(job->corpus, i, c)
        {
            size_t len;
            const char *text = json_string_value(json_object_get(c, "text"));
            len = json_string_length(json_object_get(c, "text"));
            int32_t *ids;
            size_t n;
            gpt2d_error err;
            if (tokenizer_encode(tok, text, len, &ids, &n, &err) != 0) {
                job->failed = 1;
                return NULL;
            }
            if (n != job->want_n[i] ||
                memcmp(ids, job->want[i], n * sizeof *ids) != 0)
                job->mismatches++;
            free(ids);
        }
        /* Fresh words fill the shared cache so that it is reset while other
         * threads read it. */
        for (int k = 0; k < 2000; k++) {
            size_t wl = 3 + rng_next(&seed) % 10;
            for (size_t j = 0; j < wl; j++)
                word[j] = (char)('a' + rng_next(&seed) % 26);
            int32_t *ids;
            size_t n;
            gpt2d_error err;
            if (tokenizer_encode(tok, word, wl, &ids, &n, &err) != 0) {
                job->failed = 1;
                return NULL;
            }
            free(ids);
        }
    }
    return NULL;
}

START_TEST(test_concurrent_encode_gives_identical_results)
{
    json_t *corpus = load_corpus();
    size_t n_cases = json_array_size(corpus);
    int32_t **want = calloc(n_cases, sizeof *want);
    size_t *want_n = calloc(n_cases, sizeof *want_n);
    ck_assert(want != NULL && want_n != NULL);
    size_t i;
    json_t *c;
    json_array_foreach(corpus, i, c)
    {
        size_t len;
        const char *text = case_text(c, &len);
        encode_ok(text, len, &want[i], &want_n[i]);
    }
    enum { N_THREADS = 4 };
    pthread_t th[N_THREADS];
    thread_job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (thread_job){
            corpus, want, want_n, 1000u + (unsigned)t, 0, 0
        };
        ck_assert_int_eq(
            pthread_create(&th[t], NULL, encode_corpus_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_msg(!jobs[t].failed, "thread %d: encode failed", t);
        ck_assert_msg(jobs[t].mismatches == 0, "thread %d: %zu results differ",
                      t, jobs[t].mismatches);
    }
    for (i = 0; i < n_cases; i++)
        free(want[i]);
    free(want);
    free(want_n);
    json_decref(corpus);
}
END_TEST

/* ---- load errors ---- */

/* Writes `content` to <scratch>/<name> (the test case's scratch directory)
 * and returns the path, which stays valid for the next seven calls. */
static const char *write_tmp(const char *name, const char *content)
{
    static char paths[8][512];
    static size_t n_paths;
    char *path = paths[n_paths++ % 8];
    test_scratch_path(path, sizeof paths[0], name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static void assert_load_fails(const char *vocab, const char *merges,
                              const char *must_name, const char *also)
{
    tokenizer *t = (tokenizer *)1;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(tokenizer_load(&t, vocab, merges, &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.message, must_name) != NULL,
                  "message should name %s: %s", must_name, err.message);
    if (also != NULL)
        ck_assert_msg(strstr(err.message, also) != NULL,
                      "message should mention \"%s\": %s", also, err.message);
}

START_TEST(test_load_reports_missing_file)
{
    char missing[512];
    test_scratch_path(missing, sizeof missing, "no-such-vocab.json");
    assert_load_fails(missing, merges_path, missing, NULL);
    test_scratch_path(missing, sizeof missing, "no-such-merges.txt");
    assert_load_fails(vocab_path, missing, missing, NULL);
}
END_TEST

START_TEST(test_load_reports_malformed_vocab)
{
    const char *p = write_tmp("bad.json", "{\"a\": 0, \"b\": ");
    assert_load_fails(p, merges_path, p, NULL);
    p = write_tmp("array.json", "[1, 2, 3]");
    assert_load_fails(p, merges_path, p, "object");
    p = write_tmp("small.json", "{\"a\": 0, \"b\": \"one\"}");
    assert_load_fails(p, merges_path, p, NULL);
}
END_TEST

START_TEST(test_load_reports_malformed_merges_line)
{
    const char *p = write_tmp("three.txt",
                              "#version: 0.2\n\xc4\xa0 t\nh e l\n");
    assert_load_fails(vocab_path, p, p, ":3:");
    p = write_tmp("one.txt", "#version: 0.2\nonlyone\n");
    assert_load_fails(vocab_path, p, p, ":2:");
    p = write_tmp("unknown.txt", "#version: 0.2\n\xe4\xb8\xad x\n");
    assert_load_fails(vocab_path, p, p, ":2:");
}
END_TEST

START_TEST(test_load_accepts_merges_without_version_line)
{
    /* A tiny valid merges file: ranks follow the order of lines. */
    const char *p = write_tmp("tiny.txt", "h e\n\xc4\xa0 t\n");
    tokenizer *t;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(tokenizer_load(&t, vocab_path, p, &err) == 0, "%s",
                  err.message);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(t, "hex t", 5, &ids, &n, &err), 0);
    /* "he" "x" " t" */
    ck_assert_uint_eq(n, 3);
    size_t len;
    const char *b = tokenizer_token_bytes(t, ids[0], &len);
    ck_assert(len == 2 && memcmp(b, "he", 2) == 0);
    free(ids);
    tokenizer_free(t);
}
END_TEST

/* The digest names the two files' bytes (what tokenizer.h promises,
 * recomputed here): merges in another order rank otherwise, and must
 * give another digest. */
static void file_sha256(const char *path, uint8_t out[SHA256_BYTES])
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    sha256_ctx h;
    sha256_init(&h);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        sha256_update(&h, chunk, n);
    fclose(f);
    sha256_final(&h, out);
}

static void loaded_digest(const char *vocab, const char *merges,
                          uint8_t out[SHA256_BYTES])
{
    tokenizer *t;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(tokenizer_load(&t, vocab, merges, &err) == 0, "%s",
                  err.message);
    tokenizer_digest(t, out);
    tokenizer_free(t);
}

START_TEST(test_digest_is_of_both_files_bytes)
{
    static const char label[] = "gpt2d tokenizer v1";
    uint8_t files[2][SHA256_BYTES], want[SHA256_BYTES], got[SHA256_BYTES];
    file_sha256(vocab_path, files[0]);
    file_sha256(merges_path, files[1]);
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, files, sizeof files);
    sha256_final(&h, want);
    loaded_digest(vocab_path, merges_path, got);
    ck_assert(memcmp(got, want, SHA256_BYTES) == 0);

    uint8_t one[SHA256_BYTES], other[SHA256_BYTES];
    loaded_digest(vocab_path, write_tmp("he-t.txt", "h e\n\xc4\xa0 t\n"), one);
    loaded_digest(vocab_path, write_tmp("t-he.txt", "\xc4\xa0 t\nh e\n"),
                  other);
    ck_assert(memcmp(one, want, SHA256_BYTES) != 0);
    ck_assert(memcmp(one, other, SHA256_BYTES) != 0);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");

    TCase *ref = tcase_create("reference");
    tcase_add_checked_fixture(ref, load_real_tokenizer, free_real_tokenizer);
    tcase_add_test(ref, test_encode_matches_js_reference);
    tcase_add_test(ref, test_decode_inverts_encode_on_corpus);
    tcase_add_test(ref, test_decode_inverts_encode_on_random_bytes);
    tcase_add_test(ref, test_invalid_utf8_is_encoded_bytewise);
    tcase_add_test(ref, test_empty_text_gives_no_tokens);
    tcase_add_test(ref, test_endoftext_is_one_token_and_decodes_back);
    tcase_add_test(ref, test_token_bytes_outside_vocab_is_null);
    tcase_add_test(ref, test_longest_token_is_the_longest_spelling);
    tcase_add_test(ref, test_token_is_utf8_only_for_whole_characters);
    tcase_add_test(ref, test_encode_most_is_encode_within_the_bound);
    tcase_add_test(ref, test_encode_most_stops_at_the_bound);
    tcase_add_test(ref, test_decode_rejects_id_outside_vocab);
    tcase_add_test(ref, test_token_ending_mid_utf8_decodes_to_raw_bytes);
    tcase_add_test(ref, test_unicode_classes_follow_js);
    tcase_add_test(ref, test_long_word_encodes_in_bounded_time);
    tcase_add_test(ref, test_colliding_words_do_not_grow_cache_probes);
    tcase_add_test(ref, test_concurrent_encode_gives_identical_results);
    suite_add_tcase(s, ref);

    TCase *load = tcase_create("load_errors");
    tcase_add_checked_fixture(load, set_fixture_paths, NULL);
    tcase_add_unchecked_fixture(load, test_scratch_make, test_scratch_remove);
    tcase_add_test(load, test_load_reports_missing_file);
    tcase_add_test(load, test_load_reports_malformed_vocab);
    tcase_add_test(load, test_load_reports_malformed_merges_line);
    tcase_add_test(load, test_load_accepts_merges_without_version_line);
    tcase_add_test(load, test_digest_is_of_both_files_bytes);
    suite_add_tcase(s, load);
    return s;
}

int main(void)
{
    return test_run_suite(tokenizer_suite());
}
