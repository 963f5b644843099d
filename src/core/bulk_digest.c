/* bulk_digest.c — four xxHash64 lanes over the input (see bulk_digest.h).
 * The lanes' rounds are independent, so a core runs them side by side:
 * bound by the two multiplies of each word, several GB/s on one core. */
#include "config.h"

#include "core/bulk_digest.h"

#include <string.h>

#define LANES 4
#define STRIPE (LANES * sizeof(uint64_t))

static const uint64_t P1 = 0x9E3779B185EBCA87ULL;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;

static inline uint64_t round64(uint64_t lane, uint64_t w)
{
    lane += w * P2;
    lane = (lane << 31) | (lane >> 33);
    return lane * P1;
}

/* A little-endian word (the weights are little-endian on every host
 * model.c accepts; read this way the digest is the same everywhere). */
static inline uint64_t word_at(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static void stripe(uint64_t lane[LANES], const unsigned char *p)
{
    for (size_t k = 0; k < LANES; k++)
        lane[k] = round64(lane[k], word_at(p + 8 * k));
}

void bulk_digest(const void *data, size_t len, uint8_t out[BULK_DIGEST_BYTES])
{
    /* xxHash64's four lane seeds, for seed 0 */
    uint64_t lane[LANES] = { P1 + P2, P2, 0, 0 - P1 };
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + STRIPE <= len; i += STRIPE)
        stripe(lane, p + i);
    if (i < len) { /* the tail, zero-padded: the length tells */
        unsigned char last[STRIPE] = { 0 };
        memcpy(last, p + i, len - i);
        stripe(lane, last);
    }
    lane[0] = round64(lane[0], (uint64_t)len);
    for (size_t k = 0; k < LANES; k++)
        for (size_t b = 0; b < 8; b++)
            out[8 * k + b] = (uint8_t)(lane[k] >> (8 * b));
}
