/* multipart.h — multipart/form-data bodies (RFC 7578 over RFC 2046's
 * multipart syntax): the boundary from a Content-Type header, and a whole
 * body split into its parts, each with its field name, file name, content
 * type and bytes.
 *
 * For uploads to /v1/files: the OpenAI SDKs send the file as a part named
 * "file" (with a filename) beside a part named "purpose".  The body is held
 * whole, so a part's data is a view into it; nothing is allocated.  Lines end
 * in CRLF, as every client writes them; data is binary and may hold any
 * byte, "--" included.  Errors are values: a message in the caller's buffer
 * that never quotes the body (it may not be UTF-8).
 *
 * Pure: any thread. */
#ifndef GPT2D_MULTIPART_H
#define GPT2D_MULTIPART_H

#include <stddef.h>

enum {
    MULTIPART_BOUNDARY_MAX = 70, /* RFC 2046's limit */
    MULTIPART_LINE_MAX = 1024,   /* a part's header line, CRLF excluded */
};

typedef struct multipart_part {
    char name[64];          /* Content-Disposition's name=, never "" */
    char filename[256];     /* its filename=, "" when there is none */
    char content_type[128]; /* Content-Type as sent, "" when absent */
    const char *data;       /* points into the body */
    size_t len;
} multipart_part;

/* Copies the boundary parameter of a Content-Type header value
 * ("multipart/form-data; boundary=...", quoted or not; type and parameter
 * names in any case) into boundary[cap], checked against RFC 2046's
 * characters and length.  0, or -1 with a message in err[err_cap] (a type
 * other than multipart/form-data, no boundary, a bad one). */
int multipart_boundary(const char *content_type, char *boundary, size_t cap,
                       char *err, size_t err_cap);

/* Splits body[len] at the delimiters of `boundary` into at most max_parts
 * parts, in order.  The preamble and epilogue are ignored.  Returns the
 * count, or -1 with a message in err[err_cap]: no opening boundary, no
 * closing one, a part without `Content-Disposition: form-data` and a name,
 * a header line too long or malformed, a name, filename or content type
 * too long, more parts than max_parts.  Never reads outside body[len]. */
int multipart_parse(const char *body, size_t len, const char *boundary,
                    multipart_part *parts, size_t max_parts, char *err,
                    size_t err_cap);

/* The first of parts[n] named `name`, or NULL. */
const multipart_part *multipart_find(const multipart_part *parts, size_t n,
                                     const char *name);

#endif
