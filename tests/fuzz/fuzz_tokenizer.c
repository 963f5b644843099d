/* fuzz_tokenizer.c — byte-level BPE must be lossless on any bytes.
 *
 * Each input is a text (arbitrary bytes: invalid UTF-8, NULs, partial
 * "<|endoftext|>" markers are all fair).  Oracle:
 *   - encoding never fails on content and yields ids inside the vocabulary;
 *   - decoding the ids gives back exactly the input bytes;
 *   - TOKENIZER_EOT appears once per literal "<|endoftext|>", never otherwise;
 *   - encoding again (now through the word cache) gives the same ids;
 *   - the ids are those of a naive reference written here from OpenAI's
 *     encoder.py: the pattern's alternatives tried in order, then BPE over
 *     the byte alphabet's strings, lowest-ranked pair first, every
 *     occurrence in one left-to-right sweep (no heap, no cache, no ids).
 *     It is quadratic, so a pre-token over REF_MAX_WORD bytes is not
 *     checked: its ids come from tokenizer_encode of it alone, which keeps
 *     the rest of the text aligned. */
#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "text/unicode_class.h"
#include "fuzz.h"

#define EOT_TEXT "<|endoftext|>"

#define REF_MAX_WORD 64

/* The reference is the oracle, not code under test: its branches must not
 * steer the fuzzer (nor cost it the comparison tracing). */
#if defined(__clang__)
#define REF_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define REF_NO_COVERAGE
#endif

/* memcmp without libFuzzer's interceptor. */
REF_NO_COVERAGE static bool bytes_equal(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static tokenizer *tok;

/* ---- the reference's tables: strings in GPT-2's byte alphabet ---- */

/* Open addressing from a string to an int; keys are owned. */
typedef struct str_map {
    char **keys;
    size_t *lens;
    int32_t *vals;
    size_t mask;
} str_map;

REF_NO_COVERAGE static uint64_t str_hash(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void map_init(str_map *m, size_t n)
{
    size_t cap = 1024;
    while (cap < 2 * n)
        cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->lens = calloc(cap, sizeof *m->lens);
    m->vals = calloc(cap, sizeof *m->vals);
    FUZZ_CHECK(m->keys && m->lens && m->vals, "out of memory");
    m->mask = cap - 1;
}

REF_NO_COVERAGE static size_t map_slot(const str_map *m, const char *s,
                                       size_t n)
{
    size_t i = (size_t)str_hash(s, n) & m->mask;
    while (m->keys[i] != NULL &&
           !(m->lens[i] == n && bytes_equal(m->keys[i], s, n)))
        i = (i + 1) & m->mask;
    return i;
}

static void map_put(str_map *m, const char *s, size_t n, int32_t v)
{
    size_t i = map_slot(m, s, n);
    if (m->keys[i] == NULL) {
        m->keys[i] = malloc(n ? n : 1);
        FUZZ_CHECK(m->keys[i] != NULL, "out of memory");
        memcpy(m->keys[i], s, n);
        m->lens[i] = n;
    }
    m->vals[i] = v;
}

/* -1 when absent. */
REF_NO_COVERAGE static int32_t map_get(const str_map *m, const char *s,
                                       size_t n)
{
    size_t i = map_slot(m, s, n);
    return m->keys[i] != NULL ? m->vals[i] : -1;
}

static void map_free(str_map *m)
{
    for (size_t i = 0; i <= m->mask; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->lens);
    free(m->vals);
}

static str_map vocab_map; /* spelled token -> id */
static str_map rank_map;  /* "left right" -> merge rank */
static char byte_spelling[256][3];
static size_t byte_spelling_len[256];

/* encoder.py's bytes_to_unicode(), each code point written as UTF-8. */
static void make_byte_spellings(void)
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                         (b >= 0xAE && b <= 0xFF);
        int cp = printable ? b : next++;
        char *o = byte_spelling[b];
        if (cp < 0x80) {
            o[0] = (char)cp;
            byte_spelling_len[b] = 1;
        } else {
            o[0] = (char)(0xC0 | (cp >> 6));
            o[1] = (char)(0x80 | (cp & 0x3F));
            byte_spelling_len[b] = 2;
        }
    }
}

static void load_reference(void)
{
    const char *env = getenv("GPT2D_FUZZ_TOKENIZER");
    const char *data = getenv("GPT2D_TEST_DATA");
    char dir[2048], path[4096];
    if (env != NULL && env[0] != '\0')
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/tokenizer",
                 data != NULL && data[0] != '\0' ? data : "tests/data");

    snprintf(path, sizeof path, "%s/vocab.json", dir);
    json_t *vocab = json_load_file(path, 0, NULL);
    FUZZ_CHECK(json_is_object(vocab), "%s unreadable", path);
    map_init(&vocab_map, json_object_size(vocab));
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
        map_put(&vocab_map, key, strlen(key), (int32_t)json_integer_value(val));
    json_decref(vocab);

    snprintf(path, sizeof path, "%s/merges.txt", dir);
    FILE *f = fopen(path, "r");
    FUZZ_CHECK(f != NULL, "%s unreadable", path);
    map_init(&rank_map, 65536);
    char line[1024];
    int32_t rank = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        size_t n = strcspn(line, "\r\n");
        if (strncmp(line, "#version", 8) == 0 || n == 0)
            continue;
        map_put(&rank_map, line, n, rank++);
    }
    fclose(f);
    make_byte_spellings();
}

static void free_tokenizer(void)
{
    tokenizer_free(tok);
    tok = NULL;
    map_free(&vocab_map);
    map_free(&rank_map);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = fuzz_load_tokenizer();
    load_reference();
    atexit(free_tokenizer);
    return 0;
}

/* ---- the reference's pre-tokeniser ----
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with one alternative after another, as a backtracking engine tries them.
 * A byte that does not start valid UTF-8 is one character of class other. */

REF_NO_COVERAGE static size_t ref_char(const unsigned char *t, size_t n,
                                       size_t i, unicode_class *cls)
{
    unsigned char c = t[i];
    size_t len = c < 0x80    ? 1
                 : c >= 0xF0 ? 4
                 : c >= 0xE0 ? 3
                 : c >= 0xC0 ? 2
                             : 0;
    uint32_t cp = len == 1   ? c
                  : len == 2 ? c & 0x1Fu
                  : len == 3 ? c & 0x0Fu
                             : c & 0x07u;
    bool ok = len > 0 && i + len <= n && c != 0xC0 && c != 0xC1 && c <= 0xF4;
    for (size_t k = 1; ok && k < len; k++) {
        ok = (t[i + k] & 0xC0) == 0x80;
        cp = (cp << 6) | (t[i + k] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (ok &&
        (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)))
        ok = false;
    if (!ok) {
        *cls = UNICODE_OTHER;
        return 1;
    }
    if (len == 1) /* ASCII: spell the pattern's classes out */
        *cls = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? UNICODE_LETTER
               : c >= '0' && c <= '9'                           ? UNICODE_NUMBER
               : c == ' ' || (c >= 0x09 && c <= 0x0D)           ? UNICODE_SPACE
                                                                : UNICODE_OTHER;
    else
        *cls = unicode_classify(cp);
    return len;
}

/* " ?X+" where X is one class: length, or 0 when it does not match. */
REF_NO_COVERAGE static size_t ref_optional_space_run(const unsigned char *t,
                                                     size_t n, size_t i,
                                                     unicode_class want)
{
    unicode_class c;
    for (size_t start = i; start <= i + 1 && start < n; start++) {
        if (start == i + 1 && t[i] != ' ')
            break;
        size_t j = start;
        while (j < n) {
            size_t l = ref_char(t, n, j, &c);
            if (c != want)
                break;
            j += l;
        }
        if (j > start)
            return j - i;
    }
    return 0;
}

REF_NO_COVERAGE static size_t ref_pretoken(const unsigned char *t, size_t n,
                                           size_t i)
{
    static const char *const contractions[] = { "'s", "'t",  "'re", "'ve",
                                                "'m", "'ll", "'d" };
    for (size_t k = 0; k < 7; k++) {
        size_t l = strlen(contractions[k]);
        if (i + l <= n && bytes_equal((const char *)t + i, contractions[k], l))
            return l;
    }
    size_t m;
    if ((m = ref_optional_space_run(t, n, i, UNICODE_LETTER)) ||
        (m = ref_optional_space_run(t, n, i, UNICODE_NUMBER)) ||
        (m = ref_optional_space_run(t, n, i, UNICODE_OTHER)))
        return m;
    /* \s+(?!\S): the longest run of spaces not followed by a non-space.
     * Backtracking from the whole run, the first end that qualifies is the
     * whole run at the end of the text, else the run less its last space
     * (followed by that space); else \s+ takes the single space. */
    size_t first_end = 0, before_last = 0, end = i;
    unicode_class c;
    while (end < n) {
        size_t l = ref_char(t, n, end, &c);
        if (c != UNICODE_SPACE)
            break;
        before_last = end;
        end += l;
        if (first_end == 0)
            first_end = end;
    }
    FUZZ_CHECK(end > i, "no alternative matched at %zu", i);
    if (end == n)
        return end - i;
    if (before_last > i)
        return before_last - i;
    return first_end - i; /* \s+ */
}

/* ---- the reference's BPE (encoder.py's bpe()) ---- */

typedef struct ref_sym {
    char s[REF_MAX_WORD * 2];
    size_t len;
} ref_sym;

REF_NO_COVERAGE static int32_t ref_rank(const ref_sym *a, const ref_sym *b)
{
    char key[REF_MAX_WORD * 4 + 1];
    memcpy(key, a->s, a->len);
    key[a->len] = ' ';
    memcpy(key + a->len + 1, b->s, b->len);
    return map_get(&rank_map, key, a->len + 1 + b->len);
}

/* Appends the ids of one pre-token to out. */
REF_NO_COVERAGE static void ref_bpe(const unsigned char *w, size_t n,
                                    int32_t *out, size_t *n_out)
{
    static ref_sym word[REF_MAX_WORD], next[REF_MAX_WORD];
    size_t len = n;
    for (size_t i = 0; i < n; i++) {
        memcpy(word[i].s, byte_spelling[w[i]], byte_spelling_len[w[i]]);
        word[i].len = byte_spelling_len[w[i]];
    }
    while (len > 1) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < len; i++) {
            int32_t r = ref_rank(&word[i], &word[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                at = i;
            }
        }
        if (best < 0)
            break;
        ref_sym first = word[at], second = word[at + 1];
        size_t m = 0;
        for (size_t i = 0; i < len;) {
            if (i + 1 < len && word[i].len == first.len &&
                bytes_equal(word[i].s, first.s, first.len) &&
                word[i + 1].len == second.len &&
                bytes_equal(word[i + 1].s, second.s, second.len)) {
                next[m] = first;
                memcpy(next[m].s + first.len, second.s, second.len);
                next[m].len = first.len + second.len;
                m++;
                i += 2;
            } else {
                next[m++] = word[i++];
            }
        }
        memcpy(word, next, m * sizeof *word);
        len = m;
    }
    for (size_t i = 0; i < len; i++) {
        int32_t id = map_get(&vocab_map, word[i].s, word[i].len);
        FUZZ_CHECK(id >= 0, "reference symbol not in the vocabulary");
        out[(*n_out)++] = id;
    }
}

/* A pre-token too long for the reference, encoded alone by the tokenizer. */
static void unchecked_word(const unsigned char *w, size_t n, int32_t *out,
                           size_t *n_out)
{
    int32_t *ids = NULL;
    size_t n_ids = 0;
    gpt2d_error err;
    FUZZ_CHECK(tokenizer_encode(tok, (const char *)w, n, &ids, &n_ids, &err) ==
                   0,
               "encode failed: %s", err.message);
    FUZZ_CHECK(n_ids <= n, "%zu ids for a %zu-byte word", n_ids, n);
    memcpy(out + *n_out, ids, n_ids * sizeof *ids);
    *n_out += n_ids;
    free(ids);
}

/* The reference's ids for the whole text into out (room for size + 1). */
REF_NO_COVERAGE static void ref_encode(const unsigned char *t, size_t n,
                                       int32_t *out, size_t *n_out)
{
    static const char eot[] = "<|endoftext|>";
    const size_t eot_len = sizeof eot - 1;
    *n_out = 0;
    size_t piece = 0;
    for (size_t i = 0; i <= n;) {
        bool at_eot = i + eot_len <= n &&
                      bytes_equal((const char *)t + i, eot, eot_len);
        if (!at_eot && i < n) {
            i++;
            continue;
        }
        for (size_t p = piece; p < i;) {
            size_t l = ref_pretoken(t, i, p);
            if (l > REF_MAX_WORD)
                unchecked_word(t + p, l, out, n_out);
            else
                ref_bpe(t + p, l, out, n_out);
            p += l;
        }
        if (!at_eot)
            break;
        out[(*n_out)++] = TOKENIZER_EOT;
        i += eot_len;
        piece = i;
    }
}

/* Non-overlapping occurrences of "<|endoftext|>" (it cannot overlap itself). */
REF_NO_COVERAGE static size_t count_eot(const char *s, size_t n)
{
    const size_t m = sizeof EOT_TEXT - 1;
    size_t count = 0;
    for (size_t i = 0; i + m <= n;) {
        if (bytes_equal(s + i, EOT_TEXT, m)) {
            count++;
            i += m;
        } else {
            i++;
        }
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    gpt2d_error err;
    int32_t *ids = NULL;
    size_t n = 0;
    FUZZ_CHECK(tokenizer_encode(tok, text, size, &ids, &n, &err) == 0,
               "encode failed: %s", err.message);
    FUZZ_CHECK(size == 0 || n > 0, "%zu bytes gave no tokens", size);
    FUZZ_CHECK(n <= size, "%zu tokens for %zu bytes", n, size);

    size_t vocab = tokenizer_vocab_size(tok), eots = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < vocab, "id %d at %zu",
                   (int)ids[i], i);
        eots += ids[i] == TOKENIZER_EOT;
    }
    FUZZ_CHECK(eots == count_eot(text, size), "%zu EOT ids for %zu markers",
               eots, count_eot(text, size));

    char *back = NULL;
    size_t back_len = 0;
    FUZZ_CHECK(tokenizer_decode(tok, ids, n, &back, &back_len, &err) == 0,
               "decode failed: %s", err.message);
    FUZZ_CHECK(back_len == size && memcmp(back, text, size) == 0,
               "round trip changed the text (%zu bytes in, %zu out)", size,
               back_len);
    FUZZ_CHECK(back[back_len] == '\0', "decoded text not NUL-terminated");
    free(back);

    int32_t *again = NULL;
    size_t n_again = 0;
    FUZZ_CHECK(tokenizer_encode(tok, text, size, &again, &n_again, &err) == 0,
               "second encode failed: %s", err.message);
    FUZZ_CHECK(
        n_again == n && (n == 0 || memcmp(again, ids, n * sizeof *ids) == 0),
        "second encode (word cache) differs: %zu vs %zu tokens", n_again, n);
    free(again);

    int32_t *ref = malloc((size + 1) * sizeof *ref);
    size_t n_ref = 0;
    FUZZ_CHECK(ref != NULL, "out of memory");
    ref_encode(data, size, ref, &n_ref);
    size_t k = 0;
    while (k < n && k < n_ref && ids[k] == ref[k])
        k++;
    FUZZ_CHECK(n_ref == n && k == n,
               "ids differ from the reference BPE at token %zu "
               "(%zu tokens, reference %zu; got %d, reference %d)",
               k, n, n_ref, k < n ? (int)ids[k] : -1,
               k < n_ref ? (int)ref[k] : -1);
    free(ref);
    free(ids);
    return 0;
}
