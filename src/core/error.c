/* error.c — formatting of error values (see error.h). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

int error_set(gpt2d_error *err, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}
