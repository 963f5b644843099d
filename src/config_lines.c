/* config_lines.c — reading a configuration file line by line (see
 * config_lines.h). */
#include "gpt2d/config_lines.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

int config_lines_read(const char *path, config_line_fn fn, void *ctx,
                      gpt2d_error *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return error_set(err, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    config_line line = { .path = path };
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&buf, &cap, f)) >= 0) {
        line.number++;
        /* a NUL would end the line early for every string function after */
        if (strlen(buf) != (size_t)n) {
            rc = error_set(err, "%s:%zu: NUL byte in line", path, line.number);
            break;
        }
        size_t len = (size_t)n;
        if (len > 0 && buf[len - 1] == '\n') {
            buf[--len] = '\0';
            if (len > 0 && buf[len - 1] == '\r')
                buf[--len] = '\0';
        }
        line.text = buf;
        line.len = len;
        rc = fn(ctx, &line, err);
    }
    if (rc == 0 && ferror(f))
        rc = error_set(err, "%s: read error", path);
    if (buf != NULL)
        explicit_bzero(buf, cap);
    free(buf);
    fclose(f);
    return rc;
}
