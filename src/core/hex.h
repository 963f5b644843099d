/* hex.h — bytes as lower-case hex digits and back (hex.c), for the
 * digests and random ids the daemon writes into file names and files.
 *
 * Threads: any; pure. */
#ifndef GPT2D_HEX_H
#define GPT2D_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes 2 x n digits and a NUL into out[2 * n + 1]. */
void hex_encode(const uint8_t *bytes, size_t n, char *out);
/* Reads exactly 2 x n hex digits (either case) into bytes[n]; false when
 * `text` is not that. */
bool hex_decode(const char *text, uint8_t *bytes, size_t n);
/* Whether `id` is `prefix` and exactly `digits` lower-case hex digits: an
 * id the daemon made, so one sent by a client never names a path outside
 * the directory it is looked up in. */
bool hex_id_valid(const char *id, const char *prefix, size_t digits);

#endif
