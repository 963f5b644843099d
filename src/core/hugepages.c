/* hugepages.c — large buffers backed by transparent huge pages (see
 * hugepages.h). */
#include "config.h"

#include "core/hugepages.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *huge_alloc(size_t bytes)
{
    if (bytes < HUGE_ALLOC_MIN)
        return aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (bytes > SIZE_MAX - HUGE_PAGE)
        return NULL;
    const size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, size);
    if (p != NULL)
        (void)madvise(p, size, MADV_HUGEPAGE); /* a hint; never fatal */
    return p;
}
