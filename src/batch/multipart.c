/* multipart.c — multipart/form-data bodies (see multipart.h).
 *
 * A body is: a preamble, then "--" boundary, then parts each ending at the
 * delimiter CRLF "--" boundary, the last one followed by "--", then an
 * epilogue.  A boundary line may carry spaces or tabs before its CRLF
 * (RFC 2046's transport padding).  Like Go's mime/multipart, a CRLF "--"
 * boundary followed by anything but "--" or padding and CRLF is data, not a
 * delimiter, so "--boundaryX" inside a file is harmless.
 *
 * Pure: any thread. */
#include "batch/multipart.h"

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NOT_FOUND SIZE_MAX

/* Formats the message into err[cap] (err may be NULL); always -1. */
static int fail(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether p[n] is `lit` in any case (ASCII only, as header names are). */
static bool ieq(const char *p, size_t n, const char *lit)
{
    if (n != strlen(lit))
        return false;
    for (size_t i = 0; i < n; i++)
        if (ascii_lower(p[i]) != lit[i])
            return false;
    return true;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 7230's tchar: what a type, a header or a parameter name is made of. */
static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 2046's bchars (space only inside, checked by the caller). */
static bool is_bchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c != '\0' && strchr("'()+_,-./:=? ", c));
}

static size_t skip_ows(const char *v, size_t n, size_t i)
{
    while (i < n && is_ows(v[i]))
        i++;
    return i;
}

/* ---- header parameters: `; name=value`, value a token or quoted ---- */

typedef struct param {
    const char *name;
    size_t name_len;
    const char *value; /* inside the quotes, still escaped */
    size_t value_len;
    bool quoted;
} param;

/* The next parameter of header value v[n] from *i: 1 and the parameter, 0
 * at the end, or -1 with what is wrong in *why. */
static int next_param(const char *v, size_t n, size_t *i, param *p,
                      const char **why)
{
    size_t k = skip_ows(v, n, *i);
    if (k == n)
        return 0;
    if (v[k] != ';') {
        *why = "expected ';' before a parameter";
        return -1;
    }
    k = skip_ows(v, n, k + 1);
    if (k == n) { /* a trailing ';' is harmless */
        *i = k;
        return 0;
    }
    p->name = v + k;
    while (k < n && is_tchar(v[k]))
        k++;
    p->name_len = (size_t)(v + k - p->name);
    if (p->name_len == 0) {
        *why = "a parameter without a name";
        return -1;
    }
    k = skip_ows(v, n, k);
    if (k == n || v[k] != '=') {
        *why = "a parameter without '='";
        return -1;
    }
    k = skip_ows(v, n, k + 1);
    p->quoted = k < n && v[k] == '"';
    if (p->quoted) {
        p->value = v + ++k;
        while (k < n && v[k] != '"')
            k += v[k] == '\\' && k + 1 < n ? 2 : 1;
        if (k >= n) {
            *why = "a quoted parameter without its closing quote";
            return -1;
        }
        p->value_len = (size_t)(v + k - p->value);
        k++;
    } else {
        /* Lenient: a bare value runs to the next ';' or white space. */
        p->value = v + k;
        while (k < n && v[k] != ';' && !is_ows(v[k]))
            k++;
        p->value_len = (size_t)(v + k - p->value);
        if (p->value_len == 0) {
            *why = "a parameter without a value";
            return -1;
        }
    }
    *i = k;
    return 1;
}

/* The parameter's value, unescaped, as a string in out[cap]; false when it
 * does not fit. */
static bool param_copy(const param *p, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t k = 0; k < p->value_len; k++) {
        if (p->quoted && p->value[k] == '\\' && k + 1 < p->value_len)
            k++;
        if (o + 1 >= cap)
            return false;
        out[o++] = p->value[k];
    }
    out[o] = '\0';
    return true;
}

/* ---- the Content-Type header ---- */

int multipart_boundary(const char *content_type, char *boundary, size_t cap,
                       char *err, size_t err_cap)
{
    if (content_type == NULL)
        return fail(err, err_cap,
                    "no Content-Type: expected multipart/form-data");
    const char *v = content_type;
    size_t n = strlen(v);
    size_t i = skip_ows(v, n, 0), type = i;
    while (i < n && (is_tchar(v[i]) || v[i] == '/'))
        i++;
    if (!ieq(v + type, i - type, "multipart/form-data"))
        return fail(err, err_cap,
                    "the Content-Type is not multipart/form-data");
    char found[MULTIPART_BOUNDARY_MAX + 1];
    bool have = false;
    param p;
    const char *why = NULL;
    int rc;
    while ((rc = next_param(v, n, &i, &p, &why)) == 1) {
        if (!ieq(p.name, p.name_len, "boundary"))
            continue;
        if (have)
            return fail(err, err_cap,
                        "the Content-Type has two boundary parameters");
        if (!param_copy(&p, found, sizeof found))
            return fail(err, err_cap,
                        "the multipart boundary is longer than %d characters",
                        MULTIPART_BOUNDARY_MAX);
        have = true;
    }
    if (rc < 0)
        return fail(err, err_cap, "the Content-Type is malformed: %s", why);
    if (!have)
        return fail(err, err_cap,
                    "the Content-Type multipart/form-data has no boundary");
    size_t len = strlen(found);
    if (len == 0 || found[len - 1] == ' ')
        return fail(err, err_cap,
                    "the multipart boundary is empty or ends "
                    "in a space");
    for (size_t k = 0; k < len; k++)
        if (!is_bchar(found[k]))
            return fail(err, err_cap,
                        "the multipart boundary has a character RFC 2046 "
                        "does not allow (byte 0x%02x)",
                        (unsigned)(unsigned char)found[k]);
    if (len >= cap)
        return fail(err, err_cap,
                    "the multipart boundary is longer than %zu bytes",
                    cap > 0 ? cap - 1 : 0);
    memcpy(boundary, found, len + 1);
    return 0;
}

/* ---- delimiters ---- */

/* What follows "--" boundary at body[at]: "--" (a close delimiter, *close
 * set) or padding and CRLF.  True and *after just past it, or false when it
 * is neither (then the boundary was data). */
static bool boundary_line_end(const char *body, size_t len, size_t at,
                              size_t *after, bool *close)
{
    if (len - at >= 2 && body[at] == '-' && body[at + 1] == '-') {
        *close = true;
        *after = at + 2;
        return true;
    }
    at = skip_ows(body, len, at);
    if (len - at >= 2 && body[at] == '\r' && body[at + 1] == '\n') {
        *close = false;
        *after = at + 2;
        return true;
    }
    return false;
}

/* The first delimiter, CRLF "--" boundary, at or after body[from]: its
 * offset (and *after, *close as above), or NOT_FOUND. */
static size_t find_delimiter(const char *body, size_t len, size_t from,
                             const char *b, size_t blen, size_t *after,
                             bool *close)
{
    size_t dlen = blen + 4;
    size_t i = from;
    while (i <= len && len - i >= dlen) {
        const char *cr = memchr(body + i, '\r', len - i - dlen + 1);
        if (cr == NULL)
            break;
        i = (size_t)(cr - body);
        if (body[i + 1] == '\n' && body[i + 2] == '-' && body[i + 3] == '-' &&
            memcmp(body + i + 4, b, blen) == 0 &&
            boundary_line_end(body, len, i + dlen, after, close))
            return i;
        i++;
    }
    return NOT_FOUND;
}

/* ---- a part's headers ---- */

/* Copies Content-Disposition's parameter `what` into out[cap], once. */
static int take_param(const param *p, const char *what, char *out, size_t cap,
                      bool *seen, size_t index, char *err, size_t err_cap)
{
    if (*seen)
        return fail(err, err_cap,
                    "part %zu: its Content-Disposition has two %ss", index,
                    what);
    if (!param_copy(p, out, cap))
        return fail(err, err_cap, "part %zu: its %s is longer than %zu bytes",
                    index, what, cap - 1);
    *seen = true;
    return 0;
}

static int read_disposition(const char *v, size_t n, size_t index,
                            multipart_part *part, char *err, size_t err_cap)
{
    size_t i = 0;
    while (i < n && is_tchar(v[i]))
        i++;
    if (!ieq(v, i, "form-data"))
        return fail(err, err_cap,
                    "part %zu: its Content-Disposition is not form-data",
                    index);
    bool named = false, filenamed = false;
    param p;
    const char *why = NULL;
    int rc;
    while ((rc = next_param(v, n, &i, &p, &why)) == 1) {
        /* filename*= (RFC 5987) is ignored: RFC 7578 4.2 forbids it. */
        if (ieq(p.name, p.name_len, "name")) {
            if (take_param(&p, "name", part->name, sizeof part->name, &named,
                           index, err, err_cap) != 0)
                return -1;
        } else if (ieq(p.name, p.name_len, "filename")) {
            if (take_param(&p, "filename", part->filename,
                           sizeof part->filename, &filenamed, index, err,
                           err_cap) != 0)
                return -1;
        }
    }
    if (rc < 0)
        return fail(err, err_cap,
                    "part %zu: its Content-Disposition is malformed: %s", index,
                    why);
    if (!named || part->name[0] == '\0')
        return fail(err, err_cap,
                    "part %zu: its Content-Disposition has no name", index);
    return 0;
}

/* Reads part `index`'s header lines from body[at] to the blank line that
 * ends them; *data_start is just past it. */
static int read_headers(const char *body, size_t len, size_t at, size_t index,
                        multipart_part *part, size_t *data_start, char *err,
                        size_t err_cap)
{
    bool disposition = false, type = false;
    for (;;) {
        size_t avail = len - at;
        size_t scan = avail < MULTIPART_LINE_MAX + 2 ? avail
                                                     : MULTIPART_LINE_MAX + 2;
        size_t n = 0;
        while (n + 1 < scan &&
               !(body[at + n] == '\r' && body[at + n + 1] == '\n'))
            n++;
        if (n + 1 >= scan)
            return scan == avail
                       ? fail(err, err_cap,
                              "part %zu: the body ends inside its headers",
                              index)
                       : fail(err, err_cap,
                              "part %zu: a header line is longer than %d "
                              "bytes",
                              index, MULTIPART_LINE_MAX);
        const char *line = body + at;
        at += n + 2;
        if (n == 0)
            break;
        for (size_t k = 0; k < n; k++)
            if (((unsigned char)line[k] < 0x20 && line[k] != '\t') ||
                line[k] == 0x7f)
                return fail(err, err_cap,
                            "part %zu: a header line holds a control "
                            "character (byte 0x%02x)",
                            index, (unsigned)(unsigned char)line[k]);
        if (is_ows(line[0]))
            return fail(err, err_cap,
                        "part %zu: a header line starts with white space "
                        "(folded headers are not accepted)",
                        index);
        const char *colon = memchr(line, ':', n);
        if (colon == NULL)
            return fail(err, err_cap,
                        "part %zu: a header line has no ':' (do its headers "
                        "end in a blank line?)",
                        index);
        size_t name_len = (size_t)(colon - line);
        size_t v = skip_ows(line, n, name_len + 1), end = n;
        while (end > v && is_ows(line[end - 1]))
            end--;
        if (ieq(line, name_len, "content-disposition")) {
            if (disposition)
                return fail(err, err_cap,
                            "part %zu: two Content-Disposition headers", index);
            disposition = true;
            if (read_disposition(line + v, end - v, index, part, err,
                                 err_cap) != 0)
                return -1;
        } else if (ieq(line, name_len, "content-type")) {
            if (type)
                return fail(err, err_cap, "part %zu: two Content-Type headers",
                            index);
            type = true;
            if (end - v >= sizeof part->content_type)
                return fail(err, err_cap,
                            "part %zu: its Content-Type is longer than %zu "
                            "bytes",
                            index, sizeof part->content_type - 1);
            memcpy(part->content_type, line + v, end - v);
            part->content_type[end - v] = '\0';
        }
    }
    if (!disposition)
        return fail(err, err_cap,
                    "part %zu: no Content-Disposition: form-data header",
                    index);
    *data_start = at;
    return 0;
}

/* ---- the body ---- */

int multipart_parse(const char *body, size_t len, const char *boundary,
                    multipart_part *parts, size_t max_parts, char *err,
                    size_t err_cap)
{
    size_t blen = boundary != NULL ? strlen(boundary) : 0;
    if (blen == 0 || blen > MULTIPART_BOUNDARY_MAX)
        return fail(err, err_cap,
                    "the multipart boundary must be 1 to %d characters",
                    MULTIPART_BOUNDARY_MAX);
    if (body == NULL)
        len = 0;
    if (max_parts > INT_MAX)
        max_parts = INT_MAX;
    size_t at = 0; /* just past the boundary line in hand */
    bool close = false;
    /* The first boundary needs no CRLF before it when it opens the body. */
    if (!(len >= blen + 2 && body[0] == '-' && body[1] == '-' &&
          memcmp(body + 2, boundary, blen) == 0 &&
          boundary_line_end(body, len, blen + 2, &at, &close)) &&
        find_delimiter(body, len, 0, boundary, blen, &at, &close) == NOT_FOUND)
        return fail(err, err_cap,
                    "the body has no opening boundary line \"--%s\" ending in "
                    "CRLF",
                    boundary);
    size_t n = 0;
    while (!close) {
        if (at == len)
            return fail(err, err_cap,
                        "the body ends without its closing boundary "
                        "\"--%s--\"",
                        boundary);
        if (n == max_parts)
            return fail(err, err_cap, "the body has more than %zu parts",
                        max_parts);
        multipart_part *part = &parts[n];
        memset(part, 0, sizeof *part);
        size_t data = 0;
        if (read_headers(body, len, at, n + 1, part, &data, err, err_cap) != 0)
            return -1;
        /* From the blank line's CRLF: a part may have no data at all, its
         * headers' end then doubling as the delimiter's CRLF. */
        size_t end = find_delimiter(body, len, data - 2, boundary, blen, &at,
                                    &close);
        if (end == NOT_FOUND)
            return fail(err, err_cap,
                        "part %zu: no boundary ends it (the closing "
                        "\"--%s--\" is missing)",
                        n + 1, boundary);
        part->data = body + data;
        part->len = end > data ? end - data : 0;
        n++;
    }
    return (int)n;
}

const multipart_part *multipart_find(const multipart_part *parts, size_t n,
                                     const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(parts[i].name, name) == 0)
            return &parts[i];
    return NULL;
}
