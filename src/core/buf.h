/* buf.h — a growable byte buffer: append, grow by doubling, free.
 *
 * For the arrays that are filled one item at a time to a size not known in
 * advance (a file read whole, a tokenizer's output, the API keys).  Errors
 * are values: a call that cannot grow the buffer returns -1 and leaves it as
 * it was, still valid and still owned by the caller, who words the message
 * (error.h).  An array of T lives in one as len / sizeof(T) items:
 * BUF_ITEMS and BUF_COUNT below.  The bytes come from malloc, so they are
 * aligned for any type.
 *
 * Threads: a buffer belongs to one caller. */
#ifndef GPT2D_BUF_H
#define GPT2D_BUF_H

#include <stddef.h>
#include <string.h>

typedef struct gpt2d_buf {
    unsigned char *data; /* NULL until the first growth */
    size_t len;          /* bytes in use */
    size_t cap;          /* bytes allocated */
} gpt2d_buf;

/* An empty buffer; `gpt2d_buf b = { 0 };` is the same. */
#define GPT2D_BUF_INIT                                                         \
    {                                                                          \
        NULL, 0, 0                                                             \
    }

/* The slow path of buf_reserve: grows the capacity by doubling (from at
 * least 64 bytes) until `more` bytes past len fit.  0 or -1. */
int buf_grow(gpt2d_buf *b, size_t more);

/* Makes room for `more` bytes past len, doubling the capacity (from at least
 * 64 bytes) until they fit.  0, or -1 when the memory cannot be had or the
 * size would overflow.  Inline, like buf_append: a tokenizer appends one
 * 4-byte id at a time. */
static inline int buf_reserve(gpt2d_buf *b, size_t more)
{
    return b->cap - b->len >= more ? 0 : buf_grow(b, more);
}

/* Appends n bytes from p (p may be NULL when n is 0).  0, or -1 as above. */
static inline int buf_append(gpt2d_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* Frees the bytes and leaves an empty buffer (b may hold none). */
void buf_free(gpt2d_buf *b);

/* The buffer's bytes as an array of T, and how many whole T it holds. */
#define BUF_ITEMS(b, T) ((T *)(void *)(b)->data)
#define BUF_COUNT(b, T) ((b)->len / sizeof(T))

#endif
