/* utf8.h — UTF-8 decoding by the "maximal subpart" rule (WHATWG Encoding,
 * Unicode §3.9, Python's and ICU's "replace"): an ill-formed sequence
 * becomes one U+FFFD and the byte that broke it starts afresh.
 *
 * Token bytes need not be valid UTF-8 (a character may span tokens, and a
 * model may emit bytes that never form one), while every text gpt2d returns
 * must be.  This one decoder renders all of it: generated text
 * (textstream), echoed prompts and JSON strings (api_common), and the
 * character counts behind text_offset, so offsets always index the text
 * the client received. */
#ifndef GPT2D_UTF8_H
#define GPT2D_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The bytes of an unfinished character (a zeroed decoder is fresh). */
typedef struct utf8_decoder {
    unsigned char partial[4];
    unsigned char n_partial; /* bytes held */
    unsigned char need;      /* continuation bytes the character needs */
} utf8_decoder;

/* Most bytes one utf8_feed writes: U+FFFD for the sequence the byte broke,
 * then the byte's own U+FFFD. */
#define UTF8_FEED_MAX 6

/* Feeds byte b: writes to out what became final and returns its length
 * (0 while a character is unfinished).  *replaced (if not NULL) is set when
 * the output holds a U+FFFD standing for ill-formed input. */
size_t utf8_feed(utf8_decoder *d, unsigned char b, char *out, bool *replaced);
/* End of input: an unfinished character becomes U+FFFD (writes 3 or 0
 * bytes, returned). */
size_t utf8_finish(utf8_decoder *d, char *out);

/* Characters whose first byte is in s[0, len), fed after what d has seen
 * (an unfinished character counts where it began: it ends as itself or as
 * U+FFFD).  d is advanced. */
size_t utf8_count_starts(utf8_decoder *d, const char *s, size_t len);
/* Characters in the rendering of s[0, len) alone. */
size_t utf8_chars(const char *s, size_t len);
/* Whether s[0, len) is valid UTF-8, complete. */
bool utf8_valid(const char *s, size_t len);
/* Length of the longest prefix of s that does not end inside an unfinished
 * character (ill-formed bytes end at once: they become U+FFFD). */
size_t utf8_complete_prefix(const char *s, size_t len);
/* The rendering of s[0, len) into out (room for 3 · len bytes); returns
 * its length. */
size_t utf8_render(const char *s, size_t len, char *out);

#endif
