/* error.h — errors as values.
 *
 * A fallible function returns 0 on success or -1 on failure, and on failure
 * fills a caller-owned gpt2d_error with one human-readable line.  Nothing deep
 * inside the daemon prints; the caller decides what the user sees.
 * Thread-safe: an error struct belongs to one caller. */
#ifndef GPT2D_ERROR_H
#define GPT2D_ERROR_H

#include <stddef.h>

typedef struct gpt2d_error {
    char message[512];
} gpt2d_error;

/* Formats the message (truncated to fit); `err` may be NULL.  Always returns -1
 * so a failure path can be `return error_set(err, "...");`. */
int error_set(gpt2d_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
