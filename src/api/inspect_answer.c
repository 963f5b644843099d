/* inspect_answer.c — the JSON answer of POST /v1/inspect (see
 * inspect_answer.h).
 *
 * Owns the answer's layout and its number format; reads a finished
 * inspect_capture and the tokenizer, writes bytes.  Every append goes
 * through buf.h, so running out of memory is a value, never a crash. */
#include "api/inspect_answer.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"

/* ---- numbers ---- */

/* Powers of ten a double holds exactly. */
static const double exact_pow10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
#define MAX_EXACT_POW10 22

/* v · 10^k, one rounding while |k| <= 22 (a multiply or a divide by an
 * exact power); beyond, two. */
static double scale10(double v, int k)
{
    for (; k > MAX_EXACT_POW10; k -= MAX_EXACT_POW10)
        v *= exact_pow10[MAX_EXACT_POW10];
    for (; k < -MAX_EXACT_POW10; k += MAX_EXACT_POW10)
        v /= exact_pow10[MAX_EXACT_POW10];
    return k >= 0 ? v * exact_pow10[k] : v / exact_pow10[-k];
}

int inspect_put_number(gpt2d_buf *b, double v)
{
    if (!isfinite(v))
        return buf_append(b, "null", 4);
    if (v == 0.0)
        return buf_append(b, "0", 1);
    char s[32];
    size_t n = 0;
    if (v < 0.0) {
        s[n++] = '-';
        v = -v;
    }
    /* m: the six significant digits, rounded to nearest; v ~ m · 10^(e-5).
     * From v's binary exponent, e is the decimal one or one less (log10
     * itself cost a third of the time). */
    int e2;
    frexp(v, &e2); /* v in [2^(e2-1), 2^e2) */
    int e = (int)floor((e2 - 1) * 0.30102999566398120);
    double scaled = scale10(v, 5 - e);
    if (scaled >= 999999.5) {
        e++;
        scaled = scale10(v, 5 - e);
    }
    unsigned long m = (unsigned long)lrint(scaled);
    if (m >= 1000000) { /* 999999.5 and up carry */
        m /= 10;
        e++;
    }
    char d[6];
    for (int i = 5; i >= 0; i--, m /= 10)
        d[i] = (char)('0' + m % 10);
    int last = 5; /* the last digit shown: no trailing zeros */
    while (last > 0 && d[last] == '0')
        last--;
    if (e < -4 || e >= 6) { /* %g's exponent form */
        s[n++] = d[0];
        if (last > 0) {
            s[n++] = '.';
            memcpy(s + n, d + 1, (size_t)last);
            n += (size_t)last;
        }
        unsigned x = (unsigned)(e < 0 ? -e : e); /* at least two digits */
        s[n++] = 'e';
        s[n++] = e < 0 ? '-' : '+';
        if (x >= 100)
            s[n++] = (char)('0' + x / 100);
        s[n++] = (char)('0' + x / 10 % 10);
        s[n++] = (char)('0' + x % 10);
    } else if (e >= 0) {
        memcpy(s + n, d, (size_t)e + 1);
        n += (size_t)e + 1;
        if (last > e) {
            s[n++] = '.';
            memcpy(s + n, d + e + 1, (size_t)(last - e));
            n += (size_t)(last - e);
        }
    } else {
        s[n++] = '0';
        s[n++] = '.';
        for (int z = -1; z > e; z--)
            s[n++] = '0';
        memcpy(s + n, d, (size_t)last + 1);
        n += (size_t)last + 1;
    }
    return buf_append(b, s, n);
}

/* ---- strings and tokens ---- */

static int put(gpt2d_buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

/* s (valid UTF-8: api_token_string's) as a JSON string. */
static int put_string(gpt2d_buf *b, const char *s)
{
    if (buf_append(b, "\"", 1) != 0)
        return -1;
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[8];
        int rc;
        if (c == '"' || c == '\\')
            rc = buf_append(b, (const char[]){ '\\', (char)c }, 2);
        else if (c < 0x20)
            rc = buf_append(b, esc,
                            (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
        else
            rc = buf_append(b, p, 1);
        if (rc != 0)
            return -1;
    }
    return buf_append(b, "\"", 1);
}

/* {"id": 464, "text": "The"} and, when prob >= 0, "prob". */
static int put_token(gpt2d_buf *b, const tokenizer *tok, int32_t id,
                     double prob)
{
    char head[48];
    char *text = api_token_string(tok, id);
    if (text == NULL)
        return -1;
    snprintf(head, sizeof head, "{\"id\":%ld,\"text\":", (long)id);
    int rc = put(b, head) != 0 || put_string(b, text) != 0 ? -1 : 0;
    free(text);
    if (rc == 0 && prob >= 0.0 &&
        (put(b, ",\"prob\":") != 0 || inspect_put_number(b, prob) != 0))
        rc = -1;
    return rc != 0 || put(b, "}") != 0 ? -1 : 0;
}

/* "," before every item but the first. */
static int sep(gpt2d_buf *b, size_t i)
{
    return i > 0 ? buf_append(b, ",", 1) : 0;
}

/* "[" of item i of a list: "[" or ",[". */
static int open_item(gpt2d_buf *b, size_t i)
{
    return sep(b, i) != 0 || put(b, "[") != 0 ? -1 : 0;
}

/* ---- the sections ---- */

static int put_tokens(gpt2d_buf *b, const int32_t *prompt, size_t n,
                      const tokenizer *tok)
{
    if (put(b, "\"tokens\":[") != 0)
        return -1;
    for (size_t p = 0; p < n; p++)
        if (sep(b, p) != 0 || put_token(b, tok, prompt[p], -1.0) != 0)
            return -1;
    return put(b, "]");
}

static int put_layers(gpt2d_buf *b, const inspect_params *ip)
{
    if (put(b, ",\"layers\":[") != 0)
        return -1;
    for (size_t i = 0; i < ip->n_layers; i++) {
        char num[24];
        snprintf(num, sizeof num, "%zu", ip->layers[i]);
        if (sep(b, i) != 0 || put(b, num) != 0)
            return -1;
    }
    return put(b, "]");
}

/* The query rows of slot i, head h. */
static int put_head(gpt2d_buf *b, const inspect_capture *c, size_t i, size_t h)
{
    const size_t n = inspect_capture_tokens(c);
    for (size_t q = 0; q < n; q++) {
        const float *row = inspect_attention_row(c, i, h, q);
        if (open_item(b, q) != 0)
            return -1;
        for (size_t k = 0; k <= q; k++)
            if (sep(b, k) != 0 || inspect_put_number(b, row[k]) != 0)
                return -1;
        if (put(b, "]") != 0)
            return -1;
    }
    return 0;
}

static int put_attention(gpt2d_buf *b, const inspect_capture *c)
{
    const inspect_params *ip = inspect_capture_params(c);
    if (put(b, ",\"attention\":[") != 0)
        return -1;
    for (size_t i = 0; i < ip->n_layers; i++) {
        if (open_item(b, i) != 0)
            return -1;
        for (size_t h = 0; h < inspect_capture_heads(c); h++)
            if (open_item(b, h) != 0 || put_head(b, c, i, h) != 0 ||
                put(b, "]") != 0)
                return -1;
        if (put(b, "]") != 0)
            return -1;
    }
    return put(b, "]");
}

static int put_lens(gpt2d_buf *b, const inspect_capture *c,
                    const tokenizer *tok)
{
    const inspect_params *ip = inspect_capture_params(c);
    const size_t n = inspect_capture_tokens(c);
    if (put(b, ",\"logit_lens\":[") != 0)
        return -1;
    for (size_t i = 0; i < ip->n_layers; i++) {
        if (open_item(b, i) != 0)
            return -1;
        for (size_t p = 0; p < n; p++) {
            const inspect_guess *g = inspect_lens(c, i, p);
            if (open_item(b, p) != 0)
                return -1;
            for (size_t k = 0; k < ip->logit_lens; k++)
                if (sep(b, k) != 0 ||
                    put_token(b, tok, g[k].token, g[k].prob) != 0)
                    return -1;
            if (put(b, "]") != 0)
                return -1;
        }
        if (put(b, "]") != 0)
            return -1;
    }
    return put(b, "]");
}

static int put_norms(gpt2d_buf *b, const inspect_capture *c)
{
    const inspect_params *ip = inspect_capture_params(c);
    const size_t n = inspect_capture_tokens(c);
    if (put(b, ",\"residual_norms\":[") != 0)
        return -1;
    for (size_t i = 0; i < ip->n_layers; i++) {
        const float *norms = inspect_norms(c, i);
        if (open_item(b, i) != 0)
            return -1;
        for (size_t p = 0; p < n; p++)
            if (sep(b, p) != 0 || inspect_put_number(b, norms[p]) != 0)
                return -1;
        if (put(b, "]") != 0)
            return -1;
    }
    return put(b, "]");
}

/* The longest number inspect_put_number writes: "-1.23457e-100", or in
 * fixed form "-0.0000123457". */
#define NUMBER_MAX 13

/* Bytes put_string writes for s, quotes included. */
static size_t string_bytes(const char *s)
{
    size_t n = 2;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        n += *p == '"' || *p == '\\' ? 2 : *p < 0x20 ? 6 : 1;
    return n;
}

size_t inspect_token_text_most(const tokenizer *tok)
{
    size_t most = 2;
    for (size_t id = 0; id < tokenizer_vocab_size(tok); id++) {
        char *text = api_token_string(tok, (int32_t)id);
        size_t n = text != NULL ? string_bytes(text)
                                : 2 + 6 + 5 * tokenizer_longest_token(tok);
        free(text);
        if (n > most)
            most = n;
    }
    return most;
}

/* The longest put_token: {"id":-2147483648,"text":TEXT,"prob":NUMBER}. */
static size_t token_max(size_t token_text)
{
    return sizeof "{\"id\":-2147483648,\"text\":" + token_text +
           sizeof ",\"prob\":}" + NUMBER_MAX;
}

size_t inspect_answer_bound(const inspect_params *p, size_t n_tokens,
                            size_t n_head, size_t token_text, size_t id_len,
                            size_t name_len)
{
    const size_t n = n_tokens, L = p->n_layers;
    const size_t token = token_max(token_text) + 1; /* and its "," */
    const size_t number = NUMBER_MAX + 1;
    /* the fixed keys and brackets, the usage, the id and name escaped */
    size_t bytes = 512 + 6 * (id_len + name_len);
    bytes += n * token; /* "tokens" */
    bytes += L * 21;    /* "layers": up to 20 digits each */
    if (p->attention)   /* rows of numbers in brackets */
        bytes += inspect_attention_count(L, n_head, n) * number +
                 (L * n_head * n + L * n_head + L) * 3;
    if (p->logit_lens > 0)
        bytes += L * n * p->logit_lens * token + (L * n + L) * 3;
    bytes += L * n * number + L * 3; /* "residual_norms" */
    return bytes;
}

size_t inspect_answer_most(size_t n_layer, size_t n_head, size_t n_tokens,
                           size_t max_attention, size_t token_text,
                           size_t id_len, size_t name_len)
{
    const inspect_params all = { .attention = false,
                                 .logit_lens = INSPECT_MAX_LENS,
                                 .n_layers = n_layer };
    size_t count = inspect_attention_count(n_layer, n_head, n_tokens);
    if (max_attention > 0 && count > max_attention)
        count = max_attention;
    return inspect_answer_bound(&all, n_tokens, n_head, token_text, id_len,
                                name_len) +
           count * (NUMBER_MAX + 1) +
           (n_layer * n_head * n_tokens + n_layer * n_head + n_layer) * 3;
}

int inspect_answer_write(gpt2d_buf *out, const char *id,
                         const inspect_capture *c, const int32_t *prompt,
                         const tokenizer *tok, const char *model_name)
{
    const inspect_params *ip = inspect_capture_params(c);
    const size_t n = inspect_capture_tokens(c);
    /* One allocation of about the answer's size rather than a score of
     * doublings: a few bytes past the numbers' usual 10 and a guess's
     * usual 40 to 50 (longer tokens grow it as needed). */
    const size_t cells = ip->n_layers * n;
    const size_t guess = (ip->attention
                              ? inspect_attention_count(
                                    ip->n_layers, inspect_capture_heads(c), n)
                              : 0) *
                             12 +
                         cells * (ip->logit_lens * 56 + 14) + n * 48 + 256;
    if (buf_reserve(out, guess) != 0)
        return -1;
    char usage[96];
    snprintf(usage, sizeof usage,
             ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}", n, n);
    if (put(out, "{\"id\":") != 0 || put_string(out, id) != 0 ||
        put(out, ",\"object\":\"inspect\",\"model\":") != 0 ||
        put_string(out, model_name) != 0 || put(out, ",") != 0 ||
        put_tokens(out, prompt, n, tok) != 0 || put_layers(out, ip) != 0 ||
        (ip->attention && put_attention(out, c) != 0) ||
        (ip->logit_lens > 0 && put_lens(out, c, tok) != 0) ||
        put_norms(out, c) != 0 || put(out, usage) != 0)
        return -1;
    return 0;
}
