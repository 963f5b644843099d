/* hex.c — bytes as hex digits and back (hex.h). */
#include "config.h"

#include "core/hex.h"

#include <string.h>

void hex_encode(const uint8_t *bytes, size_t n, char *out)
{
    static const char digit[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digit[bytes[i] >> 4];
        out[2 * i + 1] = digit[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

static int value_of(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool hex_decode(const char *text, uint8_t *bytes, size_t n)
{
    if (text == NULL || strlen(text) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = value_of(text[2 * i]), lo = value_of(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

bool hex_id_valid(const char *id, const char *prefix, size_t digits)
{
    const size_t n = strlen(prefix);
    if (strncmp(id, prefix, n) != 0 || strlen(id) != n + digits)
        return false;
    for (const char *p = id + n; *p != '\0'; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}
