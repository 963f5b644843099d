/* config_lines.h — a line-oriented configuration file read line by line,
 * for the options file (settings.c) and the API key file (http_keys.c):
 * what can be wrong with the file itself (it cannot be opened, a line holds
 * a NUL byte, a read fails) is refused here, in the same words for both;
 * what a line means is its parser's.  Any thread: the parser is called on
 * the caller's. */
#ifndef GPT2D_CONFIG_LINES_H
#define GPT2D_CONFIG_LINES_H

#include <stddef.h>

#include "core/error.h"

typedef struct config_line {
    const char *path; /* the file, for the parser's messages */
    size_t number;    /* from 1 */
    char *text;       /* without its "\n" or "\r\n", NUL-terminated
                                 * at text[len]; the parser may write in it */
    size_t len;
} config_line;

/* Returns 0, or -1 with `err` set to stop the reading there. */
typedef int (*config_line_fn)(void *ctx, config_line *line, gpt2d_error *err);

/* Hands every line of `path` to `fn` in order, however long it is; stops at
 * the first line `fn` refuses or that holds a NUL byte ("PATH:N: NUL byte in
 * line"), or at a read error ("PATH: read error").  The memory the file
 * was read into (stdio's buffer, the line's) is zeroed before it is freed,
 * a key file's lines being secrets; a line over 4 KB (no key is that long)
 * may leave a copy that is not. */
int config_lines_read(const char *path, config_line_fn fn, void *ctx,
                      gpt2d_error *err);

#endif
