/* tokenizer.h — GPT-2 byte-level BPE, exactly as OpenAI's encoder.
 *
 * Owns the vocabulary (vocab.json), merge ranks (merges.txt) and a cache of
 * already-merged words.  After tokenizer_load, encode and decode may be called
 * from any number of threads at once (the word cache has its own lock). */
#ifndef GPT2D_TOKENIZER_H
#define GPT2D_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"

#define TOKENIZER_EOT 50256 /* <|endoftext|> */

typedef struct tokenizer tokenizer;

int tokenizer_load(tokenizer **out, const char *vocab_json_path,
                   const char *merges_path, gpt2d_error *err);
void tokenizer_free(tokenizer *tok);

size_t tokenizer_vocab_size(const tokenizer *tok);
/* What the tokenizer was loaded from: the SHA-256 of vocab.json's bytes
 * and of merges.txt's, digested together.  Part of the KV cache's
 * identity: a session's history is kept as token ids, which spell other
 * text under another vocabulary. */
void tokenizer_digest(const tokenizer *tok, uint8_t out[SHA256_BYTES]);
/* Bytes of the longest token: a text of B bytes is at least
 * B / tokenizer_longest_token() tokens, known before encoding it. */
size_t tokenizer_longest_token(const tokenizer *tok);

/* Encodes `len` bytes of text.  The literal text "<|endoftext|>" becomes
 * TOKENIZER_EOT.  Invalid UTF-8 is encoded byte-wise (every byte has a token),
 * so encoding never fails on content.  *ids is malloc'ed; the caller frees. */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len,
                     int32_t **ids, size_t *n_ids, gpt2d_error *err);
/* tokenizer_encode for a text that may have at most `most` tokens (a
 * prompt and its context): it stops as soon as the text is known to have
 * more, never merging a word that cannot fit (each token is at most the
 * vocabulary's longest), and then says so with *n_ids = most + 1 and no
 * ids.  So a long text costs about as much as `most` tokens of it. */
int tokenizer_encode_most(const tokenizer *tok, const char *text, size_t len,
                          size_t most, int32_t **ids, size_t *n_ids,
                          gpt2d_error *err);

/* The raw bytes of one token (may be part of a UTF-8 character); NULL and
 * *len = 0 for an id outside the vocabulary. */
const char *tokenizer_token_bytes(const tokenizer *tok, int32_t id,
                                  size_t *len);

/* Whether token id's bytes are whole, valid UTF-8 by themselves (false for
 * the pieces of a character GPT-2 has as tokens of their own, and for an id
 * outside the vocabulary): text that needs no decoding to be rendered. */
bool tokenizer_token_is_utf8(const tokenizer *tok, int32_t id);

/* The word cache, for tests and diagnostics: words cached, and the most
 * slots one lookup has probed since the cache was last emptied (never more
 * than a small fixed bound, whatever words clients send). */
typedef struct tokenizer_cache_stats {
    size_t entries;
    size_t longest_probe;
} tokenizer_cache_stats;
void tokenizer_cache_stats_get(const tokenizer *tok,
                               tokenizer_cache_stats *out);

/* Concatenated bytes of `n` tokens, NUL-terminated for convenience (the bytes
 * themselves may contain NUL).  Fails on an id outside the vocabulary.  *out is
 * malloc'ed; the caller frees. */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n,
                     char **out, size_t *out_len, gpt2d_error *err);

#endif
