/* fuzz_multipart.c — any bytes as a multipart/form-data upload: parsed or
 * refused with a message, never a read outside the body.
 *
 * The input is a Content-Type header value, a NUL, then the body (no NUL:
 * the whole input is the body, under the boundary "b").  Oracle:
 *   - multipart_boundary: a success is 1 to 70 of RFC 2046's characters, not
 *     ending in a space; a refusal has a message;
 *   - multipart_parse (into at most 8 parts): a refusal has a message and
 *     never quotes the body (the message is printable ASCII); a success has
 *     parts in order, each one's data inside the body, after the previous
 *     one's, and followed by CRLF "--" boundary (or, when empty, at a point
 *     where one begins); each has a non-empty name, strings terminated
 *     within their arrays; multipart_find gives the first of a name;
 *   - parsing a prefix of an accepted body (half, all but 1 or 3 bytes)
 *     never reads past the prefix (ASan) and is refused or gives as many
 *     parts as the whole.
 * Single-threaded (libFuzzer). */
#include <stdbool.h>
#include <string.h>

#include "batch/multipart.h"
#include "fuzz.h"

enum { MAX_PARTS = 8 };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static void check_message(const char *err)
{
    size_t n = strlen(err);
    FUZZ_CHECK(n > 0, "a refusal without a message");
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(err[i] >= 0x20 && err[i] < 0x7f,
                   "a message with byte 0x%02x: '%s'",
                   (unsigned)(unsigned char)err[i], err);
}

static void check_boundary(const char *b)
{
    size_t n = strlen(b);
    FUZZ_CHECK(n >= 1 && n <= MULTIPART_BOUNDARY_MAX && b[n - 1] != ' ',
               "boundary of %zu bytes: '%s'", n, b);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK((b[i] >= 'a' && b[i] <= 'z') ||
                       (b[i] >= 'A' && b[i] <= 'Z') ||
                       (b[i] >= '0' && b[i] <= '9') ||
                       strchr("'()+_,-./:=? ", b[i]) != NULL,
                   "boundary byte 0x%02x", (unsigned)(unsigned char)b[i]);
}

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

/* Parses body[len] from an exactly-sized copy; the count or -1. */
static int parse_copy(const uint8_t *body, size_t len, const char *boundary,
                      multipart_part *parts, char **copy_out)
{
    char *copy = malloc(len > 0 ? len : 1);
    FUZZ_CHECK(copy != NULL, "out of memory");
    memcpy(copy, body, len);
    char err[256] = "";
    int n = multipart_parse(copy, len, boundary, parts, MAX_PARTS, err,
                            sizeof err);
    FUZZ_CHECK(n >= -1 && n <= MAX_PARTS, "count %d", n);
    if (n < 0)
        check_message(err);
    *copy_out = copy;
    return n;
}

static bool delimiter_at(const char *body, size_t len, size_t at,
                         const char *boundary, size_t blen)
{
    return len - at >= blen + 4 && memcmp(body + at, "\r\n--", 4) == 0 &&
           memcmp(body + at + 4, boundary, blen) == 0;
}

static void check_parts(const char *body, size_t len, const char *boundary,
                        const multipart_part *parts, int n)
{
    size_t blen = strlen(boundary);
    const char *prev_end = body;
    for (int i = 0; i < n; i++) {
        const multipart_part *p = &parts[i];
        FUZZ_CHECK(terminated(p->name, sizeof p->name) &&
                       terminated(p->filename, sizeof p->filename) &&
                       terminated(p->content_type, sizeof p->content_type),
                   "part %d: an unterminated string", i);
        FUZZ_CHECK(p->name[0] != '\0', "part %d has no name", i);
        FUZZ_CHECK(p->data >= prev_end && p->len <= len &&
                       p->data + p->len <= body + len,
                   "part %d's data lies outside the body", i);
        /* The delimiter follows the data; empty data may also sit just
         * past the CRLF the delimiter begins with. */
        size_t end = (size_t)(p->data + p->len - body);
        FUZZ_CHECK(delimiter_at(body, len, end, boundary, blen) ||
                       (p->len == 0 && end >= 2 &&
                        delimiter_at(body, len, end - 2, boundary, blen)),
                   "part %d is not followed by its delimiter", i);
        const multipart_part *first = multipart_find(parts, (size_t)n, p->name);
        FUZZ_CHECK(first != NULL && first <= p,
                   "multipart_find passes over part %d", i);
        prev_end = p->data + p->len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char boundary[MULTIPART_BOUNDARY_MAX + 1] = "b";
    const uint8_t *nul = memchr(data, '\0', size);
    const uint8_t *body = data;
    size_t len = size;
    if (nul != NULL) {
        size_t ct_len = (size_t)(nul - data);
        char *ct = malloc(ct_len + 1);
        FUZZ_CHECK(ct != NULL, "out of memory");
        memcpy(ct, data, ct_len);
        ct[ct_len] = '\0';
        char err[256] = "";
        int rc = multipart_boundary(ct, boundary, sizeof boundary, err,
                                    sizeof err);
        free(ct);
        if (rc != 0) {
            FUZZ_CHECK(rc == -1, "multipart_boundary returned %d", rc);
            check_message(err);
            return 0;
        }
        check_boundary(boundary);
        body = nul + 1;
        len = size - ct_len - 1;
    }

    multipart_part parts[MAX_PARTS];
    char *copy;
    int n = parse_copy(body, len, boundary, parts, &copy);
    if (n > 0)
        check_parts(copy, len, boundary, parts, n);
    free(copy);
    if (n < 0)
        return 0;
    /* Prefixes: a few cut points.  Parsing is prefix-consistent, so a
     * prefix that parses found the same closing delimiter as the whole. */
    size_t cuts[] = { len / 2, len > 0 ? len - 1 : 0, len > 2 ? len - 3 : 0 };
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        multipart_part some[MAX_PARTS];
        int m = parse_copy(body, cuts[c], boundary, some, &copy);
        FUZZ_CHECK(m == -1 || m == n,
                   "a prefix of %zu bytes has %d parts, the whole %d", cuts[c],
                   m, n);
        if (m > 0)
            check_parts(copy, cuts[c], boundary, some, m);
        free(copy);
    }
    return 0;
}
