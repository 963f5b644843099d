/* config_lines.c — reading a configuration file line by line (see
 * config_lines.h). */
#include "core/config_lines.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Bytes of stdio's buffer and of the first line buffer. */
#define CONFIG_LINE_BUFFER 4096

int config_lines_read(const char *path, config_line_fn fn, void *ctx,
                      gpt2d_error *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return error_set(err, "%s: %s", path, strerror(errno));
    /* stdio reads into our buffer, and lines go to one of the same size,
     * so both can be zeroed: only a line longer than it (no key is) makes
     * getline move it, leaving the old copy to free() */
    char io[CONFIG_LINE_BUFFER];
    setvbuf(f, io, _IOFBF, sizeof io);
    size_t cap = CONFIG_LINE_BUFFER;
    char *buf = malloc(cap);
    if (buf == NULL)
        cap = 0;
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
    explicit_bzero(io, sizeof io);
    return rc;
}
