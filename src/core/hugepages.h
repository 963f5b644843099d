/* hugepages.h — large buffers backed by transparent huge pages.
 *
 * The forward pass streams ~500 MB of weight panels per step (GPT-2 small)
 * and reads every running sequence's KV cache.  With 4 KB pages that is a
 * TLB miss, and a restart of the hardware prefetcher's stream, every 64
 * cache lines; 2 MB pages remove both.  Best effort: where the kernel has
 * THP off (or no huge page is free) the memory is ordinary. */
#ifndef GPT2D_HUGEPAGES_H
#define GPT2D_HUGEPAGES_H

#include <stddef.h>

/* Buffers smaller than this stay on ordinary pages: rounding a small one
 * up to a whole huge page would only waste memory. */
#define HUGE_ALLOC_MIN ((size_t)8 << 20)

/* `bytes` of 64-byte aligned memory (2 MB aligned and advised
 * MADV_HUGEPAGE when at least HUGE_ALLOC_MIN), or NULL.  Free with free(). */
void *huge_alloc(size_t bytes);

#endif
