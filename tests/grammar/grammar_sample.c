/* grammar_sample.c — draws texts from a grammar over GPT-2's real tokens,
 * for the property tests (tests/grammar/test_grammar_property.sh, and the
 * JSON Schema / regex ones), which check every text against an independent
 * recognizer.
 *
 *   grammar_sample --tokenizer DIR --gbnf FILE [--seed N] [--temperature T]
 *                  [--max-tokens M] [--count K] [--end-bias B]
 *   grammar_sample --tokenizer DIR --gbnf FILE --check
 *
 * DIR holds vocab.json and merges.txt; FILE is GBNF text ("-": standard
 * input).  Each of the K samples (default 1) starts from the grammar's
 * start state and repeats: a normal logit for every token the state's mask
 * allows (seeded: sample k of seed N always draws the same numbers),
 * divided by T (default 1; 0 takes the largest), B added to the end
 * token's (default 0); the drawn token advances the state.  T may be a
 * list, "0,0.7,1,2": K samples at each (one process, one tokenizer load).
 * A sample ends on the end token or when grammar_complete says nothing
 * may follow (finish "stop"), or after M tokens (default 64; finish
 * "length").  One JSON line per sample:
 *
 *   {"text": "...", "finish": "stop", "tokens": 7, "temperature": 0.7,
 *    "by": "end_token"}
 *
 * ("by": "end_token", "complete" or "max_tokens": why it finished)
 * where "text" holds the raw bytes one character per byte (U+0000-U+00FF):
 * in Python, json.loads(line)["text"].encode("latin-1") gives them back.
 *
 * --check reads lines of hex (a text's bytes; an empty line is the empty
 * text) from standard input and answers each with
 *
 *   {"viable": true, "accepts": false, "complete": false, "tokens": true}
 *
 * viable: the text is a prefix of the language; accepts / complete:
 * grammar_accepts / grammar_complete after it; tokens: advancing by the
 * tokenizer's tokens of the text, each checked against the mask, agrees
 * (the same state, or a refusal exactly where the bytes are refused).
 *
 * Every drawn token is checked to be allowed by the mask and accepted by
 * grammar_advance, the end token's bit to equal grammar_accepts, and every
 * "stop" to be accepted; a broken promise prints "grammar_sample: BUG ..."
 * and exits 1.  A grammar that does not compile exits 3 with its message;
 * one that outgrows its cache budget while running (grammar.h: too many
 * states, or a state of too many stacks) exits 4 with the message; a usage
 * error exits 2. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "text/tokenizer.h"

#define MAX_TEMPERATURES 16

typedef struct options {
    const char *tokenizer_dir, *gbnf_path;
    uint64_t seed;
    double temperatures[MAX_TEMPERATURES], end_bias;
    int n_temperatures;
    long max_tokens, count;
    bool check;
} options;

static void usage(void)
{
    fprintf(stderr,
            "usage: grammar_sample --tokenizer DIR --gbnf FILE [--seed N] "
            "[--temperature T] [--max-tokens M] [--count K] [--end-bias B]\n"
            "       grammar_sample --tokenizer DIR --gbnf FILE --check\n");
    exit(2);
}

#define BUG(...)                                                               \
    do {                                                                       \
        fprintf(stderr, "grammar_sample: BUG: " __VA_ARGS__);                  \
        fputc('\n', stderr);                                                   \
        exit(1);                                                               \
    } while (0)

/* A failed grammar call: the budget's refusal exits 4, anything else is
 * a bug. */
static void failed(const char *what, const gpt2d_error *err)
{
    if (strstr(err->message, "cache budget") != NULL) {
        fprintf(stderr, "grammar_sample: %s\n", err->message);
        exit(4);
    }
    BUG("%s: %s", what, err->message);
}

static double number_arg(const char *flag, const char *v)
{
    char *end;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !isfinite(d)) {
        fprintf(stderr, "grammar_sample: %s wants a number, not '%s'\n", flag,
                v);
        exit(2);
    }
    return d;
}

/* "0,0.7,1,2" into o->temperatures. */
static void temperature_list(const char *flag, const char *v, options *o)
{
    char buf[256];
    if (strlen(v) >= sizeof buf)
        usage();
    strcpy(buf, v);
    o->n_temperatures = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (o->n_temperatures == MAX_TEMPERATURES)
            usage();
        double d = number_arg(flag, t);
        if (d < 0)
            usage();
        o->temperatures[o->n_temperatures++] = d;
    }
    if (o->n_temperatures == 0)
        usage();
}

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){ .seed = 1,
                    .temperatures = { 1 },
                    .n_temperatures = 1,
                    .max_tokens = 64,
                    .count = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check") == 0) {
            o->check = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--tokenizer") == 0)
            o->tokenizer_dir = v;
        else if (strcmp(a, "--gbnf") == 0)
            o->gbnf_path = v;
        else if (strcmp(a, "--seed") == 0)
            o->seed = (uint64_t)number_arg(a, v);
        else if (strcmp(a, "--temperature") == 0)
            temperature_list(a, v, o);
        else if (strcmp(a, "--end-bias") == 0)
            o->end_bias = number_arg(a, v);
        else if (strcmp(a, "--max-tokens") == 0)
            o->max_tokens = (long)number_arg(a, v);
        else if (strcmp(a, "--count") == 0)
            o->count = (long)number_arg(a, v);
        else
            usage();
    }
    if (o->tokenizer_dir == NULL || o->gbnf_path == NULL || o->max_tokens < 1 ||
        o->count < 0)
        usage();
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, 2 * cap);
        if (bigger == NULL)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (f != stdin)
        fclose(f);
    *len = n;
    return buf;
}

/* ---- a seeded generator: splitmix64, normals by Box-Muller ---- */

typedef struct rng {
    uint64_t s;
    double spare;
    bool has_spare;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* In (0, 1]. */
static double rng_uniform(rng *r)
{
    return ((double)(rng_next(r) >> 11) + 1.0) / 9007199254740992.0;
}

static double rng_normal(rng *r)
{
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    double u = rng_uniform(r), v = rng_uniform(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = m * sin(2 * M_PI * v);
    r->has_spare = true;
    return m * cos(2 * M_PI * v);
}

/* ---- output ---- */

/* The bytes as a JSON string of U+0000-U+00FF, one per byte. */
static void print_latin1(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\')
            putchar(b);
        else
            printf("\\u%04x", b);
    }
    putchar('"');
}

static bool bit(const uint64_t *mask, int32_t t)
{
    return (mask[(uint32_t)t / 64] >> ((uint32_t)t % 64)) & 1;
}

/* ---- one sample ---- */

typedef struct context {
    const options *o;
    tokenizer *tok;
    grammar_vocab *vocab;
    grammar *g;
    uint64_t *mask;
    int32_t *allowed;
    double *logits;
} context;

static void sample_one(context *c, int j, long k)
{
    const options *o = c->o;
    double temperature = o->temperatures[j];
    uint64_t index = (uint64_t)j * (uint64_t)o->count + (uint64_t)k;
    rng r = { .s = o->seed * 0x100000001B3ULL + index * 0x9E37ULL };
    rng_next(&r);
    size_t n_tokens = grammar_vocab_size(c->vocab);
    int32_t end = grammar_vocab_end_token(c->vocab);
    grammar_state s = grammar_start(c->g);
    char *text = NULL;
    size_t len = 0;
    long steps = 0;
    const char *finish = "length", *by = "max_tokens";
    gpt2d_error err;
    while (steps < o->max_tokens) {
        if (grammar_mask(c->g, s, c->mask, &err) != 0)
            failed("grammar_mask", &err);
        if (bit(c->mask, end) != grammar_accepts(c->g, s))
            BUG("the end token's bit is %d, grammar_accepts %d",
                bit(c->mask, end), grammar_accepts(c->g, s));
        size_t n = 0;
        for (size_t t = 0; t < n_tokens; t++)
            if (bit(c->mask, (int32_t)t))
                c->allowed[n++] = (int32_t)t;
        if (n == 0)
            BUG("a reachable state (after %zu bytes) allows no token", len);
        /* The draw: softmax of logits / T, or the largest at T = 0. */
        size_t pick = 0;
        double best = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            double z = rng_normal(&r);
            if (c->allowed[i] == end)
                z += o->end_bias;
            c->logits[i] = z;
            if (z > best) {
                best = z;
                pick = i;
            }
        }
        if (temperature > 0) {
            double total = 0;
            for (size_t i = 0; i < n; i++) {
                c->logits[i] = exp((c->logits[i] - best) / temperature);
                total += c->logits[i];
            }
            double u = rng_uniform(&r) * total, acc = 0;
            pick = n - 1;
            for (size_t i = 0; i < n; i++) {
                acc += c->logits[i];
                if (u <= acc) {
                    pick = i;
                    break;
                }
            }
        }
        int32_t t = c->allowed[pick];
        steps++;
        grammar_state next;
        if (grammar_advance(c->g, s, t, &next, &err) != 0)
            failed("an allowed token refused by grammar_advance", &err);
        if (t == end) {
            if (!grammar_accepts(c->g, s))
                BUG("stopped on the end token where the grammar does not "
                    "accept");
            finish = "stop";
            by = "end_token";
            break;
        }
        size_t tl;
        const char *tb = tokenizer_token_bytes(c->tok, t, &tl);
        grammar_state by_bytes;
        if (grammar_advance_bytes(c->g, s, tb, tl, &by_bytes, &err) != 0)
            failed("advancing by an allowed token's bytes", &err);
        if (by_bytes != next)
            BUG("token %d: advancing by its bytes disagrees", (int)t);
        char *grown = realloc(text, len + tl + 1);
        if (grown == NULL)
            BUG("out of memory");
        text = grown;
        memcpy(text + len, tb, tl);
        len += tl;
        s = next;
        if (grammar_complete(c->g, s)) {
            if (!grammar_accepts(c->g, s))
                BUG("complete but not accepting");
            finish = "stop";
            by = "complete";
            break;
        }
    }
    printf("{\"text\": ");
    print_latin1(text, len);
    printf(", \"finish\": \"%s\", \"tokens\": %ld, \"temperature\": %g, "
           "\"by\": \"%s\"}\n",
           finish, steps, temperature, by);
    free(text);
}

/* ---- --check ---- */

static int hex_digit(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Advancing by the tokenizer's tokens agrees with advancing by bytes. */
static bool tokens_agree(context *c, const char *text, size_t len, bool viable,
                         grammar_state by_bytes)
{
    int32_t *ids;
    size_t n;
    gpt2d_error err;
    if (tokenizer_encode(c->tok, text, len, &ids, &n, &err) != 0)
        BUG("tokenizer_encode: %s", err.message);
    grammar_state s = grammar_start(c->g);
    bool ok = true;
    size_t i;
    for (i = 0; i < n; i++) {
        if (ids[i] == TOKENIZER_EOT) { /* the literal <|endoftext|> */
            free(ids);
            return true;
        }
        if (grammar_mask(c->g, s, c->mask, &err) != 0)
            failed("grammar_mask", &err);
        grammar_state next;
        int rc = grammar_advance(c->g, s, ids[i], &next, &err);
        if (rc != 0 && strstr(err.message, "cache budget") != NULL)
            failed("grammar_advance", &err);
        if ((rc == 0) != bit(c->mask, ids[i]))
            BUG("token %d: the mask and grammar_advance disagree", (int)ids[i]);
        if (rc != 0)
            break;
        s = next;
    }
    if (viable)
        ok = i == n && s == by_bytes;
    else
        ok = i < n;
    free(ids);
    return ok;
}

static void check_lines(context *c)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        size_t n = (size_t)got;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n % 2 != 0)
            BUG("a --check line of odd length");
        size_t len = n / 2;
        char *text = malloc(len + 1);
        for (size_t i = 0; i < len; i++) {
            int hi = hex_digit(line[2 * i]), lo = hex_digit(line[2 * i + 1]);
            if (hi < 0 || lo < 0)
                BUG("a --check line that is not hex");
            text[i] = (char)(hi << 4 | lo);
        }
        gpt2d_error err;
        grammar_state s;
        bool viable = grammar_advance_bytes(c->g, grammar_start(c->g), text,
                                            len, &s, &err) == 0;
        if (!viable && strstr(err.message, "cache budget") != NULL)
            failed("grammar_advance_bytes", &err);
        bool accepts = viable && grammar_accepts(c->g, s);
        bool complete = viable && grammar_complete(c->g, s);
        bool agree = tokens_agree(c, text, len, viable, s);
        printf("{\"viable\": %s, \"accepts\": %s, \"complete\": %s, "
               "\"tokens\": %s}\n",
               viable ? "true" : "false", accepts ? "true" : "false",
               complete ? "true" : "false", agree ? "true" : "false");
        fflush(stdout);
        free(text);
    }
    free(line);
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    char vocab_path[4096], merges_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.json", o.tokenizer_dir);
    snprintf(merges_path, sizeof merges_path, "%s/merges.txt", o.tokenizer_dir);
    gpt2d_error err;
    context c = { .o = &o };
    if (tokenizer_load(&c.tok, vocab_path, merges_path, &err) != 0) {
        fprintf(stderr, "grammar_sample: %s\n", err.message);
        return 2;
    }
    size_t n = tokenizer_vocab_size(c.tok);
    const char **bytes = malloc(n * sizeof *bytes);
    size_t *lens = malloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++)
        bytes[i] = tokenizer_token_bytes(c.tok, (int32_t)i, &lens[i]);
    if (grammar_vocab_create(&c.vocab, n, bytes, lens, TOKENIZER_EOT, &err) !=
        0)
        BUG("grammar_vocab_create: %s", err.message);
    size_t src_len;
    char *src = read_file(o.gbnf_path, &src_len);
    if (src == NULL) {
        fprintf(stderr, "grammar_sample: cannot read %s\n", o.gbnf_path);
        return 2;
    }
    if (grammar_compile(&c.g, src, src_len, c.vocab, NULL, &err) != 0) {
        fprintf(stderr, "grammar_sample: %s\n", err.message);
        return 3;
    }
    c.mask = malloc(grammar_vocab_mask_words(c.vocab) * sizeof *c.mask);
    c.allowed = malloc(n * sizeof *c.allowed);
    c.logits = malloc(n * sizeof *c.logits);
    if (o.check)
        check_lines(&c);
    else
        for (int j = 0; j < o.n_temperatures; j++)
            for (long k = 0; k < o.count; k++)
                sample_one(&c, j, k);
    free(c.mask);
    free(c.allowed);
    free(c.logits);
    free(src);
    grammar_release(c.g);
    grammar_vocab_free(c.vocab);
    free(bytes);
    free(lens);
    tokenizer_free(c.tok);
    return 0;
}
