/* bulk_digest.h — a fast digest of gigabytes: the model's weights, which
 * the KV cache's identity must cover (engine.c) and which SHA-256 would
 * take tens of seconds to read (sha256.c runs at about 0.3 GB/s; this at
 * memory speed).
 *
 * Four independent 64-bit lanes, each taking every fourth 8-byte word of
 * the input through xxHash64's round, lane = rotl(lane + w·P2, 31)·P1:
 * for a fixed lane the round is a bijection of w, and for a fixed w a
 * bijection of the lane, so a change confined to one word always changes
 * the digest, and any other change leaves a lane unchanged with odds of
 * about 2^-64 (more where it spans lanes).  The length goes through lane 0
 * last.  The output is the four lanes, unmixed: callers feed it to SHA-256
 * with everything else that names the data, and SHA-256 does the mixing.
 *
 * Not cryptographic: it guards against accidents (another checkpoint, a
 * fine-tune that moved a few weights), not against someone who crafts a
 * file to collide with another; such a person already chooses the weights
 * the daemon runs.  Same bits on every CPU (integer arithmetic, little-
 * endian output).  Pure function; any thread. */
#ifndef GPT2D_BULK_DIGEST_H
#define GPT2D_BULK_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define BULK_DIGEST_BYTES 32

void bulk_digest(const void *data, size_t len, uint8_t out[BULK_DIGEST_BYTES]);

#endif
