/* gbnf_rename.h — one GBNF grammar's rules given a prefix, so that it can
 * live inside another grammar's text.
 *
 * A chat answer with tools in `auto` mode is calls or text, and when the
 * request sends a response_format the text is that format's grammar: a
 * whole grammar of its own (start rule `root`, helpers named as its
 * compiler, or the client, liked).  Prefixed ("fmt-root", "fmt-value",
 * ...) its names cannot meet the joining grammar's, which refers to it by
 * its prefixed root.
 *
 * The text is read as GBNF's lexer reads it (grammar.h): "literals",
 * [classes] and # comments are copied as they are, the bounds of {m,n}
 * too, and every other word of [A-Za-z0-9-] characters is a rule name (as
 * gbnf_parse.c reads one).
 * Line breaks are kept, so a compile error's line in the joined text is
 * the part's own line plus the lines before it.  A malformed text (an
 * unclosed literal, say) is copied as far as it goes: the compiler, not
 * this, reports it.
 *
 * Threads: any; pure. */
#ifndef GPT2D_GBNF_RENAME_H
#define GPT2D_GBNF_RENAME_H

#include <stddef.h>

#include "core/buf.h"

/* Appends `gbnf` (len bytes) to `out` with `prefix` before every rule
 * name.  0, or -1 when the buffer cannot grow. */
int gbnf_rename_rules(const char *gbnf, size_t len, const char *prefix,
                      gpt2d_buf *out);

#endif
