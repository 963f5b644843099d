/* json_format.h — JSON Schema `format`s as anchored regular expressions.
 *
 * For each supported format, the strings the grammar writes: a subset of
 * what the format allows, chosen so that every strict checker accepts it
 * (Python jsonschema's FormatChecker, RFC 3339's grammar):
 *   date       YYYY-MM-DD, years 0001-9999, days that exist (leap years
 *              by the Gregorian rule)
 *   time       HH:MM:SS, an optional fraction of 1-6 digits, then Z or
 *              +HH:MM / -HH:MM (RFC 3339 full-time; no leap second 60)
 *   date-time  date "T" time
 *   uuid       8-4-4-4-12 hexadecimal digits, either case
 *   email      dot-atom local part "@" a host name of dot-separated labels
 *              (letters, digits, inner hyphens, 1-63 each) ending in a
 *              label of 2-63 letters
 *   ipv4       four dotted decimals 0-255 without leading zeros
 * The patterns use only regex_parse.h's subset and ASCII.
 *
 * Threads: constant data. */
#ifndef GPT2D_JSON_FORMAT_H
#define GPT2D_JSON_FORMAT_H

/* The pattern (^...$) for a format name, or NULL when not supported. */
const char *json_format_pattern(const char *format);

#endif
