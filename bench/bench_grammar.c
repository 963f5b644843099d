/* bench_grammar.c — what a grammar costs a decoding step, over GPT-2's
 * real vocabulary.
 *
 *     bench_grammar VOCAB_DIR [REPEATS]
 *
 * VOCAB_DIR holds vocab.json and merges.txt.  For each scene the grammar
 * is compiled afresh REPEATS times (default 21), advanced by the scene's
 * prefix, and its first mask timed (cold: the trie walk, the automaton's
 * transitions made as it goes); then the same mask again (warm: a copy
 * from the cache), and grammar_advance by every allowed token (warm, after
 * the mask's walk has made their transitions) and by fresh ones.  Prints
 * medians.  The scenes:
 *   string   inside a JSON string (almost every token allowed)
 *   object   just after '{' in a JSON object (a key's quote or spaces)
 *   integer  the start of an integer value in a schema-shaped object
 * Then a decode: 16 sequences of up to 128 tokens through the JSON grammar
 * on one compiled grammar (as requests sharing it would), each token drawn
 * at random from the mask (half the time among those that begin with
 * JSON's punctuation, digits or letters of true/false/null, so that the
 * text leaves its strings), every grammar_mask and grammar_advance timed:
 * the per-step cost a constrained request adds, cold and cached mixed as
 * they come.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/monotonic.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | "
    "\"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws "
    "value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" "
    "([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? "
    "[0-9]+)? ws\n"
    "ws     ::= [ \\t\\n]{0,20}\n";

static const char schema_gbnf[] =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws string \",\" ws "
    "\"\\\"age\\\"\" ws \":\" ws integer ws \"}\"\n"
    "string ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\"\"\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "ws ::= [ \\t\\n]{0,20}\n";

typedef struct scene {
    const char *name, *gbnf, *prefix;
} scene;

static const scene scenes[] = {
    { "string", json_gbnf, "{\"" },
    { "object", json_gbnf, "{" },
    { "integer", schema_gbnf, "{\"name\": \"Ada\", \"age\": " },
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const gpt2d_error *err)
{
    fprintf(stderr, "bench_grammar: %s: %s\n", what, err->message);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB_DIR [REPEATS]\n", argv[0]);
        return 2;
    }
    size_t repeats = argc > 2 ? strtoul(argv[2], NULL, 10) : 21;
    if (repeats == 0)
        repeats = 1;
    char vocab[4096], merges[4096];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", argv[1]);
    snprintf(merges, sizeof merges, "%s/merges.txt", argv[1]);
    gpt2d_error err;
    tokenizer *tok;
    if (tokenizer_load(&tok, vocab, merges, &err) != 0)
        die("tokenizer", &err);
    size_t n = tokenizer_vocab_size(tok);
    const char **bytes = malloc(n * sizeof *bytes);
    size_t *lens = malloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++)
        bytes[i] = tokenizer_token_bytes(tok, (int32_t)i, &lens[i]);
    double t0 = monotonic_seconds();
    grammar_vocab *v;
    if (grammar_vocab_create(&v, n, bytes, lens, TOKENIZER_EOT, &err) != 0)
        die("vocabulary", &err);
    printf("vocabulary trie: %.2f ms to build\n",
           (monotonic_seconds() - t0) * 1e3);
    size_t words = grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    int32_t *allowed = malloc(n * sizeof *allowed);
    double *cold = malloc(repeats * sizeof *cold);
    double *warm = malloc(repeats * sizeof *warm);
    double *adv_warm = malloc(repeats * sizeof *adv_warm);
    double *adv_cold = malloc(repeats * sizeof *adv_cold);
    printf("%-8s %8s %10s %10s %12s %12s %8s\n", "scene", "allowed", "cold ms",
           "warm us", "adv warm ns", "adv cold ns", "states");
    for (size_t k = 0; k < sizeof scenes / sizeof scenes[0]; k++) {
        const scene *sc = &scenes[k];
        size_t n_allowed = 0, states = 0;
        for (size_t r = 0; r < repeats; r++) {
            grammar *g;
            if (grammar_compile(&g, sc->gbnf, strlen(sc->gbnf), v, NULL,
                                &err) != 0)
                die(sc->name, &err);
            grammar_state s;
            if (grammar_advance_bytes(g, grammar_start(g), sc->prefix,
                                      strlen(sc->prefix), &s, &err) != 0)
                die(sc->name, &err);
            /* grammar_advance by fresh tokens first: their transitions
             * are not yet made (a sample of at most 2000 tokens that a
             * scratch compile allows). */
            grammar *g2;
            if (grammar_compile(&g2, sc->gbnf, strlen(sc->gbnf), v, NULL,
                                &err) != 0)
                die(sc->name, &err);
            grammar_state s2;
            grammar_advance_bytes(g2, grammar_start(g2), sc->prefix,
                                  strlen(sc->prefix), &s2, &err);
            double a = monotonic_seconds();
            if (grammar_mask(g, s, mask, &err) != 0)
                die(sc->name, &err);
            cold[r] = (monotonic_seconds() - a) * 1e3;
            a = monotonic_seconds();
            grammar_mask(g, s, mask, &err);
            warm[r] = (monotonic_seconds() - a) * 1e6;
            n_allowed = 0;
            for (size_t t = 0; t < n; t++)
                if (mask[t / 64] >> (t % 64) & 1)
                    allowed[n_allowed++] = (int32_t)t;
            size_t step = n_allowed > 2000 ? n_allowed / 2000 : 1, m = 0;
            a = monotonic_seconds();
            for (size_t i = 0; i < n_allowed; i += step, m++) {
                grammar_state next;
                if (grammar_advance(g2, s2, allowed[i], &next, &err) != 0)
                    die("advance (cold)", &err);
            }
            adv_cold[r] = (monotonic_seconds() - a) * 1e9 / (double)m;
            a = monotonic_seconds();
            for (size_t i = 0; i < n_allowed; i++) {
                grammar_state next;
                if (grammar_advance(g, s, allowed[i], &next, &err) != 0)
                    die("advance", &err);
            }
            adv_warm[r] = (monotonic_seconds() - a) * 1e9 / (double)n_allowed;
            grammar_stats st;
            grammar_stats_get(g, &st);
            states = st.states;
            grammar_release(g);
            grammar_release(g2);
        }
        printf("%-8s %8zu %10.3f %10.2f %12.1f %12.1f %8zu\n", sc->name,
               n_allowed, median(cold, repeats), median(warm, repeats),
               median(adv_warm, repeats), median(adv_cold, repeats), states);
    }

    /* the decode */
    grammar *g;
    if (grammar_compile(&g, json_gbnf, strlen(json_gbnf), v, NULL, &err) != 0)
        die("decode", &err);
    size_t max_steps = 16 * 128, steps = 0;
    double *mask_us = malloc(max_steps * sizeof *mask_us);
    double *adv_us = malloc(max_steps * sizeof *adv_us);
    int32_t *punct = malloc(n * sizeof *punct);
    uint64_t seed = 27;
    double total_mask = 0, total_adv = 0;
    for (int seq = 0; seq < 16; seq++) {
        grammar_state s = grammar_start(g);
        for (int t = 0; t < 128; t++) {
            double a = monotonic_seconds();
            if (grammar_mask(g, s, mask, &err) != 0)
                die("decode mask", &err);
            mask_us[steps] = (monotonic_seconds() - a) * 1e6;
            size_t n_allowed = 0, n_punct = 0;
            for (size_t k = 0; k < n; k++) {
                if (!(mask[k / 64] >> (k % 64) & 1))
                    continue;
                allowed[n_allowed++] = (int32_t)k;
                if (lens[k] > 0 && lens[k] <= 3 &&
                    strchr("\"{}[],:-0123456789tfn ", bytes[k][0]) != NULL)
                    punct[n_punct++] = (int32_t)k;
            }
            int32_t pick = rng_next(&seed) % 2 && n_punct > 0
                               ? punct[rng_next(&seed) % n_punct]
                               : allowed[rng_next(&seed) % n_allowed];
            if (pick == TOKENIZER_EOT)
                break;
            grammar_state next;
            a = monotonic_seconds();
            if (grammar_advance(g, s, pick, &next, &err) != 0)
                die("decode advance", &err);
            adv_us[steps] = (monotonic_seconds() - a) * 1e6;
            total_mask += mask_us[steps];
            total_adv += adv_us[steps];
            steps++;
            s = next;
        }
    }
    grammar_stats st;
    grammar_stats_get(g, &st);
    printf("decode: %zu steps, grammar_mask mean %.1f us (median %.2f), "
           "grammar_advance mean %.2f us; %zu states, %llu hits / %llu "
           "misses, %.1f MiB held\n",
           steps, total_mask / (double)steps, median(mask_us, steps),
           total_adv / (double)steps, st.states,
           (unsigned long long)st.mask_hits, (unsigned long long)st.mask_misses,
           (double)st.cache_bytes / (1 << 20));
    grammar_release(g);
    free(mask_us);
    free(adv_us);
    free(punct);
    free(cold);
    free(warm);
    free(adv_warm);
    free(adv_cold);
    free(allowed);
    free(mask);
    grammar_vocab_free(v);
    free(bytes);
    free(lens);
    tokenizer_free(tok);
    return 0;
}
