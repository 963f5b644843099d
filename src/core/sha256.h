/* sha256.h — SHA-256 (FIPS 180-4), for identities that must not collide
 * even when a client chooses the input: a caller's isolation domain (so a
 * chosen cache_salt can never alias another key's domain) and, in the KV
 * cache, block identities and file checksums that must be the same after a
 * restart.  Not for secrets' storage beyond that: an API key is only ever
 * kept here as its digest.
 *
 * Threads: a sha256_ctx belongs to one caller; the functions have no
 * shared state. */
#ifndef GPT2D_SHA256_H
#define GPT2D_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

typedef struct sha256_ctx {
    uint32_t state[8];
    uint64_t n_bytes; /* message length so far */
    uint8_t block[64];
    size_t n_block; /* bytes waiting in block[] */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_BYTES]);
/* The digest of one buffer. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_BYTES]);

#endif
