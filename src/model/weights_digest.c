/* weights_digest.c — a checkpoint's digest, piece by piece on a helper
 * thread and the loader's (see weights_digest.h).  Pieces are handed out
 * by one atomic counter; each piece's digest has a slot of its own, so
 * the threads share nothing else until the join. */
#include "config.h"

#include "model/weights_digest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/bulk_digest.h"
#include "core/thread.h"

struct weights_digest {
    const unsigned char *data;
    size_t size;
    size_t n_pieces;
    atomic_size_t next; /* the next piece to hand out */
    uint8_t (*pieces)[BULK_DIGEST_BYTES];
    pthread_t helper;
    bool helper_started;
};

/* Digests pieces until none are left (or cancel took them all). */
static void digest_pieces(weights_digest *w)
{
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n_pieces)
            return;
        size_t at = i * WEIGHTS_DIGEST_PIECE;
        size_t len = w->size - at < WEIGHTS_DIGEST_PIECE ? w->size - at
                                                         : WEIGHTS_DIGEST_PIECE;
        bulk_digest(w->data + at, len, w->pieces[i]);
    }
}

static void *helper_main(void *arg)
{
    digest_pieces(arg);
    return NULL;
}

int weights_digest_start(weights_digest **out, const void *data, size_t size,
                         gpt2d_error *err)
{
    *out = NULL;
    weights_digest *w = calloc(1, sizeof *w);
    size_t n = (size + WEIGHTS_DIGEST_PIECE - 1) / WEIGHTS_DIGEST_PIECE;
    if (w == NULL ||
        (w->pieces = calloc(n > 0 ? n : 1, sizeof *w->pieces)) == NULL) {
        free(w);
        return error_set(err, "out of memory for the weights' digest");
    }
    w->data = data;
    w->size = size;
    w->n_pieces = n;
    atomic_init(&w->next, 0);
    w->helper_started = thread_start(&w->helper, helper_main, w,
                                     "gpt2d-digest") == 0;
    *out = w;
    return 0;
}

static void join_and_free(weights_digest *w)
{
    if (w->helper_started)
        pthread_join(w->helper, NULL);
    free(w->pieces);
    free(w);
}

void weights_digest_finish(weights_digest *w, uint8_t out[SHA256_BYTES])
{
    digest_pieces(w);
    if (w->helper_started)
        pthread_join(w->helper, NULL);
    w->helper_started = false;
    static const char label[] = "gpt2d weights v1";
    uint8_t size[8];
    for (size_t b = 0; b < sizeof size; b++)
        size[b] = (uint8_t)((uint64_t)w->size >> (8 * b));
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, size, sizeof size);
    sha256_update(&h, w->pieces, w->n_pieces * sizeof *w->pieces);
    sha256_final(&h, out);
    join_and_free(w);
}

void weights_digest_cancel(weights_digest *w)
{
    if (w == NULL)
        return;
    atomic_store(&w->next, w->n_pieces);
    join_and_free(w);
}
