/* tokenizer.c — GPT-2 byte-level BPE (see tokenizer.h).
 *
 * Encoding a text has three stages, exactly as OpenAI's encoder.py and the JS
 * port gpt-3-encoder:
 *   1. the text is cut at every literal "<|endoftext|>" (which becomes
 *      TOKENIZER_EOT) and each piece is split into pre-tokens by the pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      (hand-written below as a scanner over UTF-8; an invalid byte counts as
 *      one character that is neither letter, number nor space).  \s is
 *      JavaScript's, as in the reference we test against; Python's `regex`
 *      module also counts U+001C..U+001F and U+0085, a difference no GPT-2
 *      text is likely to meet;
 *   2. each pre-token starts as one symbol per byte, and adjacent symbols are
 *      merged by merge rank, lowest first, all occurrences of a pair in one
 *      left-to-right sweep;
 *   3. the symbols left are the token ids.
 *
 * The vocabulary is kept as raw bytes (vocab.json spells bytes with GPT-2's
 * printable byte↔unicode alphabet; that spelling is undone at load), and BPE
 * works on ids: a merge is a hash lookup (left id, right id) → (rank, id).
 * Merging uses a heap of candidate pairs, so a word of n bytes costs
 * O(n log n) however long it is.  Merged words are cached, keyed by their
 * bytes; the cache is the only mutable state and has its own mutex. */
#include "text/tokenizer.h"
#include "core/buf.h"
#include "core/sha256.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/unicode_class.h"
#include "text/utf8.h"

#define EOT_TEXT "<|endoftext|>"
#define EOT_LEN (sizeof EOT_TEXT - 1)

/* Longer texts are refused rather than risking 32-bit offsets inside a word. */
#define MAX_TEXT_LEN ((size_t)1 << 30)
/* A vocabulary beyond this is not a GPT-2 vocabulary (and ids must fit int32). */
#define MAX_VOCAB ((size_t)1 << 20)
/* Longest token spelling accepted (GPT-2's longest is 256). */
#define MAX_TOKEN_SPELLING 1024

/* The word cache is bounded: when either limit is hit it is emptied. */
#define CACHE_SLOTS ((size_t)1 << 16)
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_ARENA ((size_t)8 << 20)
#define CACHE_MAX_WORD 256 /* longer words are rare; not worth caching */
/* Slots a lookup probes before it gives up.  The hash is not keyed, so a
 * client can send words that all land in one place; without this bound
 * each such word would scan the whole cluster, under the lock every
 * encode shares.  A word past the bound is simply not cached. */
#define CACHE_MAX_PROBE 32

typedef struct merge_entry {
    uint64_t key; /* (left << 32) | right; MERGE_EMPTY when free */
    int32_t rank;
    int32_t merged;
} merge_entry;
#define MERGE_EMPTY UINT64_MAX

typedef struct cache_entry {
    uint64_t hash;
    uint32_t key_off, key_len; /* word bytes in the arena */
    uint32_t ids_off, n_ids;   /* int32 ids in the arena (memcpy'd) */
} cache_entry;

/* Merged words by their bytes.  Everything here is guarded by `lock`. */
typedef struct word_cache {
    pthread_mutex_t lock;
    cache_entry *slots; /* CACHE_SLOTS entries; key_len 0 = free */
    size_t entries;
    size_t longest_probe; /* since the last emptying */
    gpt2d_buf arena;      /* words' bytes and their ids, back to back */
} word_cache;

static int cache_new(word_cache **out, gpt2d_error *err);
static void cache_free(word_cache *c);

struct tokenizer {
    /* id → raw bytes: token i is bytes[off[i] .. off[i+1]) */
    size_t n_vocab;
    char *bytes;
    uint32_t *off;
    bool *is_utf8; /* token i's bytes are whole, valid UTF-8 */

    /* raw bytes → id, open addressing; slot holds id+1, 0 = free */
    uint32_t *vocab_slots;
    size_t vocab_mask;

    int32_t byte_id[256]; /* the one-byte token for each byte */
    size_t longest;       /* bytes of the longest token's spelling */

    merge_entry *merges;
    size_t merge_mask;

    /* The one mutable part, behind a pointer so that encode can use it
     * through a const tokenizer. */
    struct word_cache *cache;

    uint8_t digest[SHA256_BYTES]; /* tokenizer_digest */
};

/* ---- small helpers ---- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    /* FNV-1a, unkeyed: vocabulary lookups only read a table built from the
     * trusted vocabulary, and the word cache bounds its probes
     * (CACHE_MAX_PROBE), so words chosen to collide cost no more than that. */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key *= 0x9E3779B97F4A7C15ULL;
    return key ^ (key >> 31);
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* GPT-2's byte↔unicode table: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes are given code points 256, 257, ... in byte order. */
static void byte_alphabet(uint32_t byte_to_cp[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                         (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

/* Decodes one UTF-8 character at s[0..n).  Returns its length (1..4), or 0
 * if the bytes there are not a valid, shortest-form, non-surrogate encoding. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = 0;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1Fu, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0Fu, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* ---- vocabulary ---- */

static int32_t vocab_find(const tokenizer *tok, const char *s, size_t n)
{
    size_t i = (size_t)hash_bytes(s, n) & tok->vocab_mask;
    for (;;) {
        uint32_t slot = tok->vocab_slots[i];
        if (slot == 0)
            return -1;
        uint32_t id = slot - 1;
        size_t len = tok->off[id + 1] - tok->off[id];
        if (len == n && memcmp(tok->bytes + tok->off[id], s, n) == 0)
            return (int32_t)id;
        i = (i + 1) & tok->vocab_mask;
    }
}

/* Converts a token spelled in the byte alphabet (UTF-8 text) to raw bytes.
 * `out` must hold at least n bytes (each character gives one byte).  Returns
 * the number of bytes, or -1 if a character is outside the alphabet. */
static long alphabet_to_bytes(const int16_t cp_to_byte[324], const char *s,
                              size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (l == 0 || cp >= 324 || cp_to_byte[cp] < 0)
            return -1;
        out[o++] = (char)cp_to_byte[cp];
        i += l;
    }
    return (long)o;
}

static int read_file(const char *path, char **data, size_t *len,
                     gpt2d_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return error_set(err, "%s: %s", path, strerror(errno));
    gpt2d_buf b = GPT2D_BUF_INIT;
    for (;;) {
        if (b.len > ((size_t)1 << 30)) {
            buf_free(&b);
            fclose(f);
            return error_set(err, "%s: larger than 1 GiB", path);
        }
        if (buf_reserve(&b, b.len > 0 ? b.len : (size_t)1 << 16) != 0) {
            buf_free(&b);
            fclose(f);
            return error_set(err, "%s: out of memory", path);
        }
        size_t room = b.cap - b.len, got = fread(b.data + b.len, 1, room, f);
        b.len += got;
        if (got < room)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        buf_free(&b);
        fclose(f);
        return error_set(err, "%s: %s", path, strerror(e));
    }
    fclose(f);
    *data = (char *)b.data;
    *len = b.len;
    return 0;
}

static int load_vocab(tokenizer *tok, const char *path,
                      const int16_t cp_to_byte[324],
                      uint8_t digest[SHA256_BYTES], gpt2d_error *err)
{
    char *data = NULL;
    size_t len = 0;
    if (read_file(path, &data, &len, err) != 0)
        return -1;
    sha256(data, len, digest);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    free(data);
    if (root == NULL)
        return error_set(err, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                         jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        error_set(err, "%s: expected a JSON object of token -> id", path);
        goto out;
    }
    size_t n = json_object_size(root);
    if (n < 256 || n > MAX_VOCAB) {
        error_set(err,
                  "%s: %zu tokens; a byte-level vocabulary has between "
                  "256 and %zu",
                  path, n, MAX_VOCAB);
        goto out;
    }
    /* First pass: ids are exactly 0..n-1, and the total size of the bytes. */
    size_t total = 0;
    tok->off = calloc(n + 1, sizeof *tok->off);
    uint32_t *len_of = calloc(n, sizeof *len_of);
    char *seen = calloc(n, 1);
    if (tok->off == NULL || len_of == NULL || seen == NULL) {
        free(len_of);
        free(seen);
        error_set(err, "%s: out of memory", path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (!json_is_integer(val)) {
            error_set(err, "%s: token \"%s\": id is not an integer", path, key);
            goto bad_pass;
        }
        json_int_t id = json_integer_value(val);
        if (id < 0 || (size_t)id >= n) {
            error_set(err, "%s: token \"%s\": id %lld is outside 0..%zu", path,
                      key, (long long)id, n - 1);
            goto bad_pass;
        }
        if (seen[id]) {
            error_set(err, "%s: id %lld is given to two tokens (one is \"%s\")",
                      path, (long long)id, key);
            goto bad_pass;
        }
        seen[id] = 1;
        size_t klen = strlen(key);
        if (klen == 0 || klen > MAX_TOKEN_SPELLING) {
            error_set(err, "%s: token with id %lld has length %zu", path,
                      (long long)id, klen);
            goto bad_pass;
        }
        len_of[id] = (uint32_t)klen; /* upper bound; exact below */
        total += klen;
    }
    free(seen);
    seen = NULL;

    tok->bytes = malloc(total + 1);
    if (tok->bytes == NULL) {
        error_set(err, "%s: out of memory", path);
        goto bad_pass;
    }
    /* Offsets from the upper bounds, then each token is written at its slot
     * and the offsets compacted afterwards. */
    for (size_t i = 0; i < n; i++)
        tok->off[i + 1] = tok->off[i] + len_of[i];
    json_object_foreach(root, key, val)
    {
        size_t id = (size_t)json_integer_value(val);
        long got = alphabet_to_bytes(cp_to_byte, key, strlen(key),
                                     tok->bytes + tok->off[id]);
        if (got < 0) {
            error_set(err,
                      "%s: token \"%s\" has a character outside GPT-2's "
                      "byte alphabet",
                      path, key);
            goto bad_pass;
        }
        len_of[id] = (uint32_t)got;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        memmove(tok->bytes + w, tok->bytes + tok->off[i], len_of[i]);
        tok->off[i] = (uint32_t)w;
        w += len_of[i];
    }
    tok->off[n] = (uint32_t)w;
    free(len_of);
    len_of = NULL;
    tok->n_vocab = n;

    size_t cap = pow2_at_least(n * 2);
    tok->vocab_slots = calloc(cap, sizeof *tok->vocab_slots);
    if (tok->vocab_slots == NULL) {
        error_set(err, "%s: out of memory", path);
        goto out;
    }
    tok->vocab_mask = cap - 1;
    for (size_t id = 0; id < n; id++) {
        const char *s = tok->bytes + tok->off[id];
        size_t slen = tok->off[id + 1] - tok->off[id];
        size_t i = (size_t)hash_bytes(s, slen) & tok->vocab_mask;
        while (tok->vocab_slots[i] != 0)
            i = (i + 1) & tok->vocab_mask;
        tok->vocab_slots[i] = (uint32_t)id + 1;
        if (slen > tok->longest)
            tok->longest = slen;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        tok->byte_id[b] = vocab_find(tok, &c, 1);
        if (tok->byte_id[b] < 0) {
            error_set(err,
                      "%s: no token for the byte 0x%02X; every byte needs "
                      "one",
                      path, (unsigned)b);
            goto out;
        }
    }
    if ((size_t)TOKENIZER_EOT >= n ||
        vocab_find(tok, EOT_TEXT, EOT_LEN) != TOKENIZER_EOT) {
        error_set(err, "%s: \"%s\" must be token %d", path, EOT_TEXT,
                  TOKENIZER_EOT);
        goto out;
    }
    rc = 0;
    goto out;

bad_pass:
    free(len_of);
    free(seen);
out:
    json_decref(root);
    return rc;
}

/* ---- merges ---- */

static void merge_insert(tokenizer *tok, int32_t left, int32_t right,
                         int32_t rank, int32_t merged)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = (size_t)hash_pair(key) & tok->merge_mask;
    while (tok->merges[i].key != MERGE_EMPTY && tok->merges[i].key != key)
        i = (i + 1) & tok->merge_mask;
    /* A repeated pair takes its later rank, as Python's dict(zip(...)). */
    tok->merges[i].key = key;
    tok->merges[i].rank = rank;
    tok->merges[i].merged = merged;
}

static const merge_entry *merge_find(const tokenizer *tok, int32_t left,
                                     int32_t right)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = (size_t)hash_pair(key) & tok->merge_mask;
    for (;;) {
        const merge_entry *e = &tok->merges[i];
        if (e->key == key)
            return e;
        if (e->key == MERGE_EMPTY)
            return NULL;
        i = (i + 1) & tok->merge_mask;
    }
}

/* Looks up one side of a merge line, spelled in the byte alphabet. */
static int32_t merge_side(const tokenizer *tok, const int16_t cp_to_byte[324],
                          const char *s, size_t n, char *scratch)
{
    long got = alphabet_to_bytes(cp_to_byte, s, n, scratch);
    if (got <= 0)
        return -1;
    return vocab_find(tok, scratch, (size_t)got);
}

static int load_merges(tokenizer *tok, const char *path,
                       const int16_t cp_to_byte[324],
                       uint8_t digest[SHA256_BYTES], gpt2d_error *err)
{
    char *data = NULL;
    size_t len = 0;
    if (read_file(path, &data, &len, err) != 0)
        return -1;
    sha256(data, len, digest);
    int rc = -1;
    char *scratch = NULL;

    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    size_t cap = pow2_at_least(lines * 2);
    tok->merges = malloc(cap * sizeof *tok->merges);
    scratch = malloc(len * 2 + 2);
    if (tok->merges == NULL || scratch == NULL) {
        error_set(err, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < cap; i++)
        tok->merges[i].key = MERGE_EMPTY;
    tok->merge_mask = cap - 1;

    int32_t rank = 0;
    size_t lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = data + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL);
        lineno++;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (lineno == 1 && n >= 8 && memcmp(line, "#version", 8) == 0)
            continue;
        if (n == 0)
            continue;
        /* Two fields separated by blanks (the reference splits on \s+). */
        const char *f[3];
        size_t fl[3], nf = 0;
        for (size_t i = 0; i < n;) {
            while (i < n && (line[i] == ' ' || line[i] == '\t'))
                i++;
            if (i == n)
                break;
            size_t s = i;
            while (i < n && line[i] != ' ' && line[i] != '\t')
                i++;
            if (nf < 3) {
                f[nf] = line + s;
                fl[nf] = i - s;
            }
            nf++;
        }
        if (nf != 2) {
            error_set(err,
                      "%s:%zu: expected two tokens separated by a space, "
                      "got %zu field%s",
                      path, lineno, nf, nf == 1 ? "" : "s");
            goto out;
        }
        int32_t left = merge_side(tok, cp_to_byte, f[0], fl[0], scratch);
        int32_t right = merge_side(tok, cp_to_byte, f[1], fl[1], scratch);
        if (left < 0 || right < 0) {
            int k = left < 0 ? 0 : 1;
            error_set(err, "%s:%zu: \"%.*s\" is not a token of the vocabulary",
                      path, lineno, (int)fl[k], f[k]);
            goto out;
        }
        size_t ll = tok->off[left + 1] - tok->off[left];
        size_t rl = tok->off[right + 1] - tok->off[right];
        memcpy(scratch, tok->bytes + tok->off[left], ll);
        memcpy(scratch + ll, tok->bytes + tok->off[right], rl);
        int32_t merged = vocab_find(tok, scratch, ll + rl);
        if (merged < 0) {
            error_set(err,
                      "%s:%zu: the merge of \"%.*s\" and \"%.*s\" is not a "
                      "token of the vocabulary",
                      path, lineno, (int)fl[0], f[0], (int)fl[1], f[1]);
            goto out;
        }
        merge_insert(tok, left, right, rank++, merged);
    }
    rc = 0;
out:
    free(scratch);
    free(data);
    return rc;
}

int tokenizer_load(tokenizer **out, const char *vocab_json_path,
                   const char *merges_path, gpt2d_error *err)
{
    *out = NULL;
    tokenizer *tok = calloc(1, sizeof *tok);
    if (tok == NULL)
        return error_set(err, "tokenizer: out of memory");
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp);
    for (size_t i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;

    /* the files' own digests, then one of both (tokenizer_digest) */
    uint8_t files[2][SHA256_BYTES];
    if (load_vocab(tok, vocab_json_path, cp_to_byte, files[0], err) != 0 ||
        load_merges(tok, merges_path, cp_to_byte, files[1], err) != 0)
        goto fail;
    static const char label[] = "gpt2d tokenizer v1";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, files, sizeof files);
    sha256_final(&h, tok->digest);
    if (cache_new(&tok->cache, err) != 0)
        goto fail;
    tok->is_utf8 = malloc(tok->n_vocab * sizeof *tok->is_utf8);
    if (tok->is_utf8 == NULL) {
        error_set(err, "tokenizer: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < tok->n_vocab; i++)
        tok->is_utf8[i] = utf8_valid(tok->bytes + tok->off[i],
                                     tok->off[i + 1] - tok->off[i]);
    *out = tok;
    return 0;
fail:
    tokenizer_free(tok);
    return -1;
}

void tokenizer_free(tokenizer *tok)
{
    if (tok == NULL)
        return;
    cache_free(tok->cache);
    free(tok->bytes);
    free(tok->off);
    free(tok->is_utf8);
    free(tok->vocab_slots);
    free(tok->merges);
    free(tok);
}

void tokenizer_digest(const tokenizer *tok, uint8_t out[SHA256_BYTES])
{
    memcpy(out, tok->digest, SHA256_BYTES);
}

size_t tokenizer_vocab_size(const tokenizer *tok)
{
    return tok->n_vocab;
}

size_t tokenizer_longest_token(const tokenizer *tok)
{
    return tok->longest;
}

/* The output: token ids (int32_t) appended to a gpt2d_buf. */
static bool put_id(gpt2d_buf *out, int32_t id)
{
    return buf_append(out, &id, sizeof id) == 0;
}

/* ---- word cache (the tokenizer's only mutable state) ---- */

static void cache_free(word_cache *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    buf_free(&c->arena);
    free(c);
}

static int cache_new(word_cache **out, gpt2d_error *err)
{
    word_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return error_set(err, "tokenizer: out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return error_set(err, "tokenizer: cannot create the cache lock");
    }
    c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
    if (c->slots == NULL) {
        cache_free(c);
        return error_set(err, "tokenizer: out of memory");
    }
    *out = c;
    return 0;
}

/* Slot of word w (hash h), or of the free slot where it would go; NULL when
 * neither is within CACHE_MAX_PROBE slots.  Lock held. */
static cache_entry *cache_slot(word_cache *c, const char *w, size_t n,
                               uint64_t h)
{
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (size_t probe = 1; probe <= CACHE_MAX_PROBE; probe++) {
        cache_entry *e = &c->slots[i];
        if (e->key_len == 0 ||
            (e->hash == h && e->key_len == n &&
             memcmp(c->arena.data + e->key_off, w, n) == 0)) {
            if (probe > c->longest_probe)
                c->longest_probe = probe;
            return e;
        }
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
    return NULL;
}

/* Appends the cached ids of word w to out; false if w is not cached. */
static bool cache_get(word_cache *c, const char *w, size_t n, uint64_t h,
                      gpt2d_buf *out)
{
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    const cache_entry *e = cache_slot(c, w, n, h);
    if (e != NULL && e->key_len != 0)
        hit = buf_append(out, c->arena.data + e->ids_off,
                         e->n_ids * sizeof(int32_t)) == 0;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

static void cache_put(word_cache *c, const char *w, size_t n, uint64_t h,
                      const int32_t *ids, size_t n_ids)
{
    size_t need = n + n_ids * sizeof(int32_t);
    pthread_mutex_lock(&c->lock);
    if (c->entries >= CACHE_MAX_ENTRIES ||
        c->arena.len + need > CACHE_MAX_ARENA) {
        /* Full: start again rather than track recency.  Bounded memory
         * matters more in a daemon than a perfect hit rate. */
        memset(c->slots, 0, CACHE_SLOTS * sizeof *c->slots);
        c->entries = 0;
        c->longest_probe = 0;
        c->arena.len = 0;
    }
    if (buf_reserve(&c->arena, need) != 0)
        goto out; /* caching is an optimisation; skip it */
    cache_entry *e = cache_slot(c, w, n, h);
    if (e == NULL || e->key_len != 0)
        goto out; /* a crowded neighbourhood, or another thread was first */
    /* Room was made above: these appends cannot fail. */
    e->hash = h;
    e->key_off = (uint32_t)c->arena.len;
    e->key_len = (uint32_t)n;
    (void)buf_append(&c->arena, w, n);
    e->ids_off = (uint32_t)c->arena.len;
    e->n_ids = (uint32_t)n_ids;
    (void)buf_append(&c->arena, ids, n_ids * sizeof(int32_t));
    c->entries++;
out:
    pthread_mutex_unlock(&c->lock);
}

void tokenizer_cache_stats_get(const tokenizer *tok, tokenizer_cache_stats *out)
{
    word_cache *c = tok->cache;
    pthread_mutex_lock(&c->lock);
    out->entries = c->entries;
    out->longest_probe = c->longest_probe;
    pthread_mutex_unlock(&c->lock);
}

/* ---- BPE of one pre-token ---- */

/* A candidate merge of the symbol at `left` with its right neighbour, valid
 * only while both symbols still have the ids it was made from. */
typedef struct pair_cand {
    int32_t rank;
    uint32_t left;
    int32_t left_id, right_id;
} pair_cand;

/* Per-call scratch, so encode never shares anything but the cache. */
typedef struct bpe_scratch {
    int32_t *id;    /* symbol id at each byte position; -1 once absorbed */
    uint32_t *next; /* position of the next live symbol; n = none */
    uint32_t
        *prev; /* position of the previous live symbol; UINT32_MAX = none */
    size_t sym_cap;
    pair_cand *heap, *pending;
    size_t heap_n, heap_cap, pending_n, pending_cap;
} bpe_scratch;

static void scratch_free(bpe_scratch *s)
{
    free(s->id);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s->pending);
}

static bool scratch_reserve(bpe_scratch *s, size_t n)
{
    if (n > s->sym_cap) {
        int32_t *id = realloc(s->id, n * sizeof *id);
        if (id != NULL)
            s->id = id;
        uint32_t *nx = realloc(s->next, n * sizeof *nx);
        if (nx != NULL)
            s->next = nx;
        uint32_t *pv = realloc(s->prev, n * sizeof *pv);
        if (pv != NULL)
            s->prev = pv;
        if (id == NULL || nx == NULL || pv == NULL)
            return false;
        s->sym_cap = n;
    }
    /* At most n-1 initial pairs plus two per merge (n-1 merges). */
    size_t hcap = 3 * n;
    if (hcap > s->heap_cap) {
        pair_cand *h = realloc(s->heap, hcap * sizeof *h);
        if (h == NULL)
            return false;
        s->heap = h;
        s->heap_cap = hcap;
    }
    if (hcap > s->pending_cap) {
        pair_cand *p = realloc(s->pending, hcap * sizeof *p);
        if (p == NULL)
            return false;
        s->pending = p;
        s->pending_cap = hcap;
    }
    return true;
}

static bool cand_less(const pair_cand *a, const pair_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_scratch *s, pair_cand c)
{
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[parent]))
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static pair_cand heap_pop(bpe_scratch *s)
{
    pair_cand top = s->heap[0];
    pair_cand last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!cand_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

/* Queues the pair starting at `left` (if it has a rank) for after the
 * current round. */
static void pend_pair(const tokenizer *tok, bpe_scratch *s, uint32_t left,
                      uint32_t n)
{
    uint32_t right = s->next[left];
    if (right >= n)
        return;
    const merge_entry *m = merge_find(tok, s->id[left], s->id[right]);
    if (m == NULL)
        return;
    s->pending[s->pending_n++] = (pair_cand){ m->rank, left, s->id[left],
                                              s->id[right] };
}

/* Merges word w[0..n), n >= 2, appending its ids to out. */
static bool bpe_word(const tokenizer *tok, bpe_scratch *s, const char *w,
                     uint32_t n, gpt2d_buf *out)
{
    if (!scratch_reserve(s, n))
        return false;
    for (uint32_t i = 0; i < n; i++) {
        s->id[i] = tok->byte_id[(unsigned char)w[i]];
        s->next[i] = i + 1;
        s->prev[i] = i == 0 ? UINT32_MAX : i - 1;
    }
    s->heap_n = 0;
    s->pending_n = 0;
    for (uint32_t i = 0; i + 1 < n; i++)
        pend_pair(tok, s, i, n);
    for (size_t i = 0; i < s->pending_n; i++)
        heap_push(s, s->pending[i]);

    /* Each round takes the lowest rank present and merges every occurrence of
     * that pair left to right, like the reference's sweep; pairs the round
     * creates join the heap only after it, so a newly formed pair can never
     * jump ahead of the occurrences still waiting in the same round. */
    while (s->heap_n > 0) {
        int32_t rank = s->heap[0].rank;
        s->pending_n = 0;
        while (s->heap_n > 0 && s->heap[0].rank == rank) {
            pair_cand c = heap_pop(s);
            uint32_t l = c.left;
            if (s->id[l] != c.left_id)
                continue; /* left symbol absorbed or grown since */
            uint32_t r = s->next[l];
            if (r >= n || s->id[r] != c.right_id)
                continue; /* right symbol changed since */
            const merge_entry *m = merge_find(tok, c.left_id, c.right_id);
            s->id[l] = m->merged;
            s->id[r] = -1;
            s->next[l] = s->next[r];
            if (s->next[r] < n)
                s->prev[s->next[r]] = l;
            if (s->prev[l] != UINT32_MAX)
                pend_pair(tok, s, s->prev[l], n);
            pend_pair(tok, s, l, n);
        }
        for (size_t i = 0; i < s->pending_n; i++)
            heap_push(s, s->pending[i]);
    }

    for (uint32_t i = 0; i < n; i = s->next[i])
        if (!put_id(out, s->id[i]))
            return false;
    return true;
}

static bool encode_word(const tokenizer *tok, bpe_scratch *s, const char *w,
                        size_t n, gpt2d_buf *out)
{
    if (n == 1)
        return put_id(out, tok->byte_id[(unsigned char)w[0]]);
    bool cacheable = n <= CACHE_MAX_WORD;
    uint64_t h = cacheable ? hash_bytes(w, n) : 0;
    if (cacheable && cache_get(tok->cache, w, n, h, out))
        return true;
    size_t start = BUF_COUNT(out, int32_t);
    if (!bpe_word(tok, s, w, (uint32_t)n, out))
        return false;
    if (cacheable)
        cache_put(tok->cache, w, n, h, BUF_ITEMS(out, int32_t) + start,
                  BUF_COUNT(out, int32_t) - start);
    return true;
}

/* ---- pre-tokenisation ---- */

/* Class of the character at t[i] (i < n) and its length in bytes.  An invalid
 * UTF-8 byte is a one-byte character of class other. */
static unicode_class char_class(const char *t, size_t n, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)t[i];
    if (c < 0x80) {
        *len = 1;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return UNICODE_LETTER;
        if (c >= '0' && c <= '9')
            return UNICODE_NUMBER;
        if (c == ' ' || (c >= '\t' && c <= '\r'))
            return UNICODE_SPACE;
        return UNICODE_OTHER;
    }
    uint32_t cp;
    size_t l = utf8_decode((const unsigned char *)t + i, n - i, &cp);
    if (l == 0) {
        *len = 1;
        return UNICODE_OTHER;
    }
    *len = l;
    return unicode_classify(cp);
}

/* End of the run of characters of class `cls` starting at i. */
static size_t run_end(const char *t, size_t n, size_t i, unicode_class cls)
{
    while (i < n) {
        size_t l;
        if (char_class(t, n, i, &l) != cls)
            break;
        i += l;
    }
    return i;
}

/* Length of the contraction ('s 't 're 've 'm 'll 'd) at t[i], or 0. */
static size_t contraction(const char *t, size_t n, size_t i)
{
    if (t[i] != '\'' || i + 1 >= n)
        return 0;
    char a = t[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (i + 2 < n) {
        char b = t[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
            (a == 'l' && b == 'l'))
            return 3;
    }
    return 0;
}

/* Length of the pre-token starting at t[i] (i < n): the first alternative of
 * the pattern that matches there, as a backtracking regex engine finds it. */
static size_t pretoken(const char *t, size_t n, size_t i)
{
    size_t c = contraction(t, n, i);
    if (c > 0)
        return c;
    size_t l;
    unicode_class cls = char_class(t, n, i, &l);
    if (cls != UNICODE_SPACE) /* \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+ */
        return run_end(t, n, i + l, cls) - i;
    if (t[i] == ' ' && i + 1 < n) { /* " ?" before one of those runs */
        size_t l2;
        unicode_class next = char_class(t, n, i + 1, &l2);
        if (next != UNICODE_SPACE)
            return run_end(t, n, i + 1 + l2, next) - i;
    }
    /* \s+(?!\S) | \s+ : a run of spaces keeps its last one for the next
     * pre-token when a non-space follows, unless it is the only one. */
    size_t last = i, j = i + l;
    while (j < n) {
        size_t l3;
        if (char_class(t, n, j, &l3) != UNICODE_SPACE)
            break;
        last = j;
        j += l3;
    }
    if (j == n || last == i)
        return j == n ? n - i : l;
    return last - i;
}

/* Where an encoding stands against its bound: `most` tokens at most
 * (SIZE_MAX: none), `over` once the text is known to hold more. */
typedef struct encode_bound {
    size_t most;
    bool over;
} encode_bound;

/* Whether `more` bytes of text, cut into tokens of at most the longest
 * token's length, cannot fit beside the `have` tokens already made. */
static bool cannot_fit(const tokenizer *tok, size_t have, size_t more,
                       const encode_bound *b)
{
    size_t least = (more + tok->longest - 1) / tok->longest;
    return have > b->most || least > b->most - have;
}

/* Encodes a piece of text that contains no "<|endoftext|>", until it is
 * over its bound: a word that cannot fit is not merged at all. */
static bool encode_piece(const tokenizer *tok, bpe_scratch *s, const char *t,
                         size_t n, gpt2d_buf *out, encode_bound *b)
{
    for (size_t i = 0; i < n && !b->over;) {
        size_t len = pretoken(t, n, i);
        if (cannot_fit(tok, BUF_COUNT(out, int32_t), len, b)) {
            b->over = true;
            break;
        }
        if (!encode_word(tok, s, t + i, len, out))
            return false;
        i += len;
    }
    return true;
}

static const char *find_eot(const char *t, size_t n)
{
    const char *end = t + n;
    while ((size_t)(end - t) >= EOT_LEN) {
        const char *p = memchr(t, '<', (size_t)(end - t) - EOT_LEN + 1);
        if (p == NULL)
            return NULL;
        if (memcmp(p, EOT_TEXT, EOT_LEN) == 0)
            return p;
        t = p + 1;
    }
    return NULL;
}

int tokenizer_encode_most(const tokenizer *tok, const char *text, size_t len,
                          size_t most, int32_t **ids, size_t *n_ids,
                          gpt2d_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    if (text == NULL && len > 0)
        return error_set(err, "tokenizer_encode: NULL text of length %zu", len);
    if (len > MAX_TEXT_LEN)
        return error_set(err,
                         "text of %zu bytes is longer than the %zu bytes "
                         "the tokenizer accepts",
                         len, MAX_TEXT_LEN);
    encode_bound bound = { most, false };
    if (cannot_fit(tok, 0, len, &bound)) {
        *n_ids = most + 1; /* not a token is made */
        return 0;
    }
    gpt2d_buf out = GPT2D_BUF_INIT;
    bpe_scratch s = { 0 };
    size_t expect = len / 3 + 16;
    if (most < expect)
        expect = most + 1;
    bool ok = buf_reserve(&out, expect * sizeof(int32_t)) == 0;
    const char *p = text, *end = text + len;
    while (ok && p < end && !bound.over) {
        const char *eot = find_eot(p, (size_t)(end - p));
        const char *stop = eot ? eot : end;
        ok = encode_piece(tok, &s, p, (size_t)(stop - p), &out, &bound);
        if (ok && eot != NULL && !bound.over) {
            ok = put_id(&out, TOKENIZER_EOT);
            stop += EOT_LEN;
        }
        p = stop;
    }
    scratch_free(&s);
    if (!ok) {
        buf_free(&out);
        return error_set(err, "tokenizer_encode: out of memory for %zu bytes",
                         len);
    }
    if (bound.over || BUF_COUNT(&out, int32_t) > most) {
        buf_free(&out);
        *n_ids = most + 1;
        return 0;
    }
    *ids = BUF_ITEMS(&out, int32_t);
    *n_ids = BUF_COUNT(&out, int32_t);
    return 0;
}

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len,
                     int32_t **ids, size_t *n_ids, gpt2d_error *err)
{
    /* a text never has more tokens than bytes */
    return tokenizer_encode_most(tok, text, len, len, ids, n_ids, err);
}

const char *tokenizer_token_bytes(const tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= tok->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tok->off[id + 1] - tok->off[id];
    return tok->bytes + tok->off[id];
}

bool tokenizer_token_is_utf8(const tokenizer *tok, int32_t id)
{
    return id >= 0 && (size_t)id < tok->n_vocab && tok->is_utf8[id];
}

int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n,
                     char **out, size_t *out_len, gpt2d_error *err)
{
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= tok->n_vocab)
            return error_set(err,
                             "token id %ld at position %zu is outside the "
                             "vocabulary (0..%zu)",
                             (long)ids[i], i, tok->n_vocab - 1);
        total += tok->off[ids[i] + 1] - tok->off[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (buf == NULL)
        return error_set(err, "tokenizer_decode: out of memory for %zu bytes",
                         total);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok->off[ids[i] + 1] - tok->off[ids[i]];
        memcpy(buf + w, tok->bytes + tok->off[ids[i]], l);
        w += l;
    }
    buf[w] = '\0';
    *out = buf;
    *out_len = w;
    return 0;
}
