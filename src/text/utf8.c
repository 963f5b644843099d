/* utf8.c — UTF-8 decoding by the maximal subpart rule (see utf8.h). */
#include "config.h"

#include "text/utf8.h"

#include <string.h>

static const char REPLACEMENT[3] = { '\xEF', '\xBF', '\xBD' }; /* U+FFFD */

/* Continuation bytes needed after lead byte `b`; -1 if `b` cannot start a
 * character (a continuation byte, C0/C1 overlong leads, F5 and up). */
static int continuations(unsigned char b)
{
    if (b < 0x80)
        return 0;
    if (b >= 0xC2 && b <= 0xDF)
        return 1;
    if (b >= 0xE0 && b <= 0xEF)
        return 2;
    if (b >= 0xF0 && b <= 0xF4)
        return 3;
    return -1;
}

/* Whether `b` may follow the bytes d holds.  The second byte's range is
 * narrowed after E0/ED/F0/F4 to refuse overlong forms, surrogates and code
 * points past U+10FFFF. */
static bool continues(const utf8_decoder *d, unsigned char b)
{
    unsigned char lo = 0x80, hi = 0xBF;
    if (d->n_partial == 1) {
        switch (d->partial[0]) {
        case 0xE0:
            lo = 0xA0;
            break;
        case 0xED:
            hi = 0x9F;
            break;
        case 0xF0:
            lo = 0x90;
            break;
        case 0xF4:
            hi = 0x8F;
            break;
        default:
            break;
        }
    }
    return b >= lo && b <= hi;
}

size_t utf8_feed(utf8_decoder *d, unsigned char b, char *out, bool *replaced)
{
    size_t n = 0;
    if (d->n_partial > 0) {
        if (continues(d, b)) {
            d->partial[d->n_partial++] = b;
            if (d->n_partial < d->need + 1)
                return 0;
            memcpy(out, d->partial, d->n_partial);
            n = d->n_partial;
            d->n_partial = 0;
            return n;
        }
        memcpy(out, REPLACEMENT, sizeof REPLACEMENT);
        n = sizeof REPLACEMENT;
        d->n_partial = 0;
        if (replaced != NULL)
            *replaced = true;
    }
    int need = continuations(b);
    if (need < 0) {
        memcpy(out + n, REPLACEMENT, sizeof REPLACEMENT);
        n += sizeof REPLACEMENT;
        if (replaced != NULL)
            *replaced = true;
    } else if (need == 0) {
        out[n++] = (char)b;
    } else {
        d->partial[0] = b;
        d->n_partial = 1;
        d->need = (unsigned char)need;
    }
    return n;
}

size_t utf8_finish(utf8_decoder *d, char *out)
{
    if (d->n_partial == 0)
        return 0;
    d->n_partial = 0;
    memcpy(out, REPLACEMENT, sizeof REPLACEMENT);
    return sizeof REPLACEMENT;
}

size_t utf8_count_starts(utf8_decoder *d, const char *s, size_t len)
{
    size_t starts = 0;
    char sink[UTF8_FEED_MAX];
    for (size_t i = 0; i < len; i++) {
        const unsigned char b = (unsigned char)s[i];
        if (d->n_partial == 0 || !continues(d, b))
            starts++;
        utf8_feed(d, b, sink, NULL);
    }
    return starts;
}

size_t utf8_chars(const char *s, size_t len)
{
    utf8_decoder d = { 0 };
    return utf8_count_starts(&d, s, len);
}

bool utf8_valid(const char *s, size_t len)
{
    utf8_decoder d = { 0 };
    bool replaced = false;
    char sink[UTF8_FEED_MAX];
    for (size_t i = 0; i < len && !replaced; i++)
        utf8_feed(&d, (unsigned char)s[i], sink, &replaced);
    return !replaced && d.n_partial == 0;
}

size_t utf8_complete_prefix(const char *s, size_t len)
{
    utf8_decoder d = { 0 };
    size_t complete = 0;
    char sink[UTF8_FEED_MAX];
    for (size_t i = 0; i < len; i++) {
        utf8_feed(&d, (unsigned char)s[i], sink, NULL);
        if (d.n_partial == 0)
            complete = i + 1;
    }
    return complete;
}

size_t utf8_render(const char *s, size_t len, char *out)
{
    utf8_decoder d = { 0 };
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += utf8_feed(&d, (unsigned char)s[i], out + n, NULL);
    return n + utf8_finish(&d, out + n);
}
