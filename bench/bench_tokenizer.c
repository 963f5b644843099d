/* bench_tokenizer.c — encoding speed of the GPT-2 tokenizer.
 *
 *     bench_tokenizer VOCAB_DIR [FILE]
 *
 * VOCAB_DIR holds vocab.json and merges.txt.  Encodes FILE (or ~100 KB built
 * by repeating the texts of tests/tokenizer/corpus.json, found through
 * GPT2D_SRCDIR or the current directory) twice: cold (empty word cache) and
 * warm, and prints size, time and throughput of each.  Also times one 10 KB
 * word without spaces, the worst case for BPE. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"

#define TARGET_BYTES (100 * 1024)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (bigger == NULL)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ~100 KB of corpus texts, repeated in order, separated by newlines. */
static char *document_from_corpus(size_t *len)
{
    const char *src = getenv("GPT2D_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/tokenizer/corpus.json",
             src != NULL && src[0] != '\0' ? src : ".");
    json_error_t jerr;
    json_t *corpus = json_load_file(path, 0, &jerr);
    if (corpus == NULL || !json_is_array(corpus) ||
        json_array_size(corpus) == 0) {
        fprintf(stderr,
                "bench_tokenizer: %s: %s (set GPT2D_SRCDIR or pass "
                "FILE)\n",
                path, corpus ? "not a non-empty array" : jerr.text);
        json_decref(corpus);
        return NULL;
    }
    char *doc = malloc(TARGET_BYTES + 4096);
    size_t n = 0;
    while (doc != NULL && n < TARGET_BYTES) {
        size_t i;
        json_t *c;
        json_array_foreach(corpus, i, c)
        {
            json_t *t = json_object_get(c, "text");
            size_t tl = json_string_length(t);
            if (n + tl + 1 > TARGET_BYTES + 4096 || n >= TARGET_BYTES)
                break;
            memcpy(doc + n, json_string_value(t), tl);
            n += tl;
            doc[n++] = '\n';
        }
    }
    json_decref(corpus);
    *len = n;
    return doc;
}

static int run(const tokenizer *tok, const char *label, const char *text,
               size_t len)
{
    int32_t *ids;
    size_t n;
    gpt2d_error err;
    double t0 = now_ms();
    if (tokenizer_encode(tok, text, len, &ids, &n, &err) != 0) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.message);
        return -1;
    }
    double ms = now_ms() - t0;
    printf("%-14s %8.1f KB %8zu tokens %9.2f ms %8.2f MB/s\n", label,
           (double)len / 1024.0, n, ms,
           ms > 0 ? (double)len / 1e6 / (ms / 1e3) : 0.0);
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bench_tokenizer VOCAB_DIR [FILE]\n");
        return 2;
    }
    char vocab[4096], merges[4096];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", argv[1]);
    snprintf(merges, sizeof merges, "%s/merges.txt", argv[1]);

    size_t len;
    char *doc = argc == 3 ? read_all(argv[2], &len)
                          : document_from_corpus(&len);
    if (doc == NULL) {
        if (argc == 3)
            perror(argv[2]);
        return 1;
    }
    tokenizer *tok;
    gpt2d_error err;
    double t0 = now_ms();
    if (tokenizer_load(&tok, vocab, merges, &err) != 0) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.message);
        free(doc);
        return 1;
    }
    printf("load %.1f ms, %zu tokens in the vocabulary\n", now_ms() - t0,
           tokenizer_vocab_size(tok));

    int rc = run(tok, "cold", doc, len);
    if (rc == 0)
        rc = run(tok, "warm", doc, len);

    char *word = malloc(10 * 1024);
    if (rc == 0 && word != NULL) {
        uint64_t s = 88172645463325252ULL;
        for (size_t i = 0; i < 10 * 1024; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            word[i] = (char)('a' + s % 26);
        }
        rc = run(tok, "10KB-word", word, 10 * 1024);
    }
    free(word);
    tokenizer_free(tok);
    free(doc);
    return rc == 0 ? 0 : 1;
}
