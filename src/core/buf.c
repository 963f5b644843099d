/* buf.c — the growable byte buffer (see buf.h). */
#include "core/buf.h"

#include <stdint.h>
#include <stdlib.h>

enum { BUF_MIN_CAP = 64 };

int buf_grow(gpt2d_buf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    if (more > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + more;
    size_t cap = b->cap > BUF_MIN_CAP ? b->cap : BUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
    unsigned char *p = realloc(b->data, cap);
    if (p == NULL)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

void buf_free(gpt2d_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}
