/* gbnf_rename.c — a grammar's rule names prefixed (gbnf_rename.h). */
#include "grammar/gbnf_rename.h"

#include <stdbool.h>
#include <string.h>

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-';
}

/* Where a quoted run (a literal or a class) that opened at `i` ends: past
 * its closing `close`, a backslash escaping the character after it, or at
 * the end of the text when it never closes. */
static size_t skip_quoted(const char *s, size_t len, size_t i, char close)
{
    for (i++; i < len; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == close)
            return i + 1;
    }
    return len;
}

static size_t skip_until(const char *s, size_t len, size_t i, char end)
{
    const char *hit = memchr(s + i, end, len - i);
    return hit != NULL ? (size_t)(hit - s) + 1 : len;
}

int gbnf_rename_rules(const char *gbnf, size_t len, const char *prefix,
                      gpt2d_buf *out)
{
    const size_t prefix_len = strlen(prefix);
    size_t i = 0;
    while (i < len) {
        size_t from = i;
        char c = gbnf[i];
        if (c == '"' || c == '[') {
            i = skip_quoted(gbnf, len, i, c == '"' ? '"' : ']');
        } else if (c == '#') {
            i = skip_until(gbnf, len, i, '\n');
        } else if (c == '{') {
            i = skip_until(gbnf, len, i, '}'); /* a bound: digits, not names */
        } else if (is_name_char(c)) {
            while (i < len && is_name_char(gbnf[i]))
                i++;
            if (buf_append(out, prefix, prefix_len) != 0)
                return -1;
        } else {
            i++;
        }
        if (buf_append(out, gbnf + from, i - from) != 0)
            return -1;
    }
    return 0;
}
