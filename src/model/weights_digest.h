/* weights_digest.h — the identity of a checkpoint: a digest of every byte
 * of model.safetensors (its header, so every tensor's name, dtype, shape
 * and offset, and all of its data), part of the KV cache's identity
 * (engine.c), so that keys and values computed by other weights are never
 * taken for this model's.
 *
 * The file is cut into WEIGHTS_DIGEST_PIECE-byte pieces from its first
 * byte; the pieces' bulk digests (bulk_digest.h), in order, and the file's
 * length go into one SHA-256.  The pieces are fixed, so the digest is the
 * same whichever thread digests which piece.  SHA-256 over the whole file
 * would be sound too, but reads about 0.2 GB/s here: half a minute for
 * gpt2-xl's 6.4 GB, against a load of one or two seconds; bulk_digest
 * keeps up with memory, and SHA-256 sees a few kilobytes.
 *
 * A helper thread starts on the pieces as soon as the loader has mapped
 * the file, and digests them while the loader packs the weights; when the
 * loader is done it takes the pieces still left, and waits for the
 * helper's last.  With a core to spare the digest then adds little to the
 * load (doc/performance.md); on one core it costs what reading the file
 * once more costs.
 *
 * Threads: the loader's thread calls these functions; the helper thread
 * is the struct's own. */
#ifndef GPT2D_WEIGHTS_DIGEST_H
#define GPT2D_WEIGHTS_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"

#define WEIGHTS_DIGEST_PIECE ((size_t)16 << 20)

typedef struct weights_digest weights_digest;

/* Starts digesting data[0, size), which must stay readable until
 * weights_digest_finish or _cancel.  When no helper thread can start, the
 * work is all finish's.  Fails only for want of memory. */
int weights_digest_start(weights_digest **out, const void *data, size_t size,
                         gpt2d_error *err);
/* Digests the pieces left, on the caller's thread too, waits for the
 * helper, writes the digest and frees. */
void weights_digest_finish(weights_digest *w, uint8_t out[SHA256_BYTES]);
/* A load that failed: hands out no more pieces, waits for the helper's
 * current one, frees.  NULL is a no-op. */
void weights_digest_cancel(weights_digest *w);

#endif
