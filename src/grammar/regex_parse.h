/* regex_parse.h — the regular-expression subset structured output accepts,
 * parsed into a tree over code-point sets.
 *
 * The subset (README, "Structured output and tools"): literal characters;
 * escapes \. \\ \/ and every other escaped ASCII punctuation, \n \r \t \f
 * \v \0, \xHH, \uHHHH; the classes \d \D \w \W \s \S; [classes] with
 * ranges and ^ negation (a ] inside one is written \]); `.`; groups (...)
 * and (?:...); `|`; the quantifiers * + ? {m} {m,} {m,n} (m, n <= 1000),
 * whose lazy forms (*? +? ?? {m,n}?) are taken as greedy (the language is
 * the same); `^` only at the start and `$` only at the end of the pattern or
 * of one of its top-level alternatives.  Everything else is refused with
 * the construct and its offset (in characters, from 0): backreferences,
 * lookaround, named and other (?...) groups, flags, \b \B \A \Z, \p{...},
 * possessive quantifiers.
 *
 * Meaning: characters are code points.  A class or `.` means what it means
 * in both ECMA-262 (the JSON Schema standard's regexes, with the u flag) and
 * Python's re (what Python validators run), so an answer satisfies both:
 * \d is [0-9], \w [A-Za-z0-9_], \s the white space both agree on (tab, LF,
 * VT, FF, CR, space, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
 * U+205F, U+3000); a negation (\D \W \S, [^...]) leaves out everything
 * either engine would count in the class (all Unicode numbers for \d,
 * letters and numbers for \w, also U+001C-U+001F, U+0085 and U+FEFF for
 * \s); beyond ASCII, a negation of \w keeps to blocks of punctuation,
 * symbols and spaces (U+00A0-U+00BF, U+00D7, U+00F7, U+2000-U+206F,
 * U+20A0-U+20CF, U+2190-U+23FF, U+2500-U+27BF, U+3000-U+3003,
 * U+1F300-U+1FAFF) and a negation of \d to those and U+0080-U+065F,
 * U+3040-U+30FF, U+4E00-U+9FFF, U+AC00-U+D7A3 (a class of a few ranges,
 * not the ~1,400 of every Unicode letter's complement, which the engine
 * pays for in stacks); `.` is any character but LF, CR, U+2028 and
 * U+2029.
 * `$` is the end of the text (never "before a final newline" as in
 * Python).
 *
 * Threads: any; the Unicode letter and number sets the negations need are
 * made once per process (pthread_once) and only read after. */
#ifndef GPT2D_REGEX_PARSE_H
#define GPT2D_REGEX_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/cp_set.h"

#define REGEX_INF UINT32_MAX   /* an unbounded repetition's max */
#define REGEX_MAX_REPEAT 1000u /* the largest m or n of {m,n} */
#define REGEX_MAX_NESTING 64u  /* groups inside groups */

typedef enum regex_kind {
    REGEX_SET,    /* one character of `set` (empty set: no string) */
    REGEX_CAT,    /* kids in sequence (no kids: the empty string) */
    REGEX_ALT,    /* any one of the kids (no kids: no string) */
    REGEX_REPEAT, /* kids[0] repeated min..max times */
} regex_kind;

typedef struct regex_node {
    regex_kind kind;
    cp_set set;
    struct regex_node **kids;
    size_t n_kids;
    uint32_t min, max;
} regex_node;

typedef struct regex_branch {
    regex_node *body;
    bool anchored_start, anchored_end; /* written ^ ... $ */
} regex_branch;

/* A parsed pattern: its top-level alternatives. */
typedef struct regex {
    regex_branch *branches;
    size_t n_branches;
} regex;

typedef struct regex_error {
    size_t offset; /* characters from the pattern's start */
    char message[200];
} regex_error;

/* Parses `len` bytes of UTF-8.  0, or -1 with err filled (invalid UTF-8 and
 * out of memory too). */
int regex_parse(const char *pattern, size_t len, regex **out, regex_error *err);
void regex_free(regex *rx);

/* The language of whole texts the pattern describes, as one tree (the
 * caller frees it with regex_node_free): `search` false, the pattern
 * matches the whole text and anchors change nothing; `search` true, the
 * pattern is found somewhere in the text (JSON Schema's `pattern`): an end
 * not anchored may be preceded or followed by any characters.  NULL when out
 * of memory. */
regex_node *regex_whole(const regex *rx, bool search);
void regex_node_free(regex_node *n);

/* Whether the node matches no string at all. */
bool regex_node_matches_nothing(const regex_node *n);
/* The least and the most characters a match has (max REGEX_INF when
 * unbounded); only for nodes that match something. */
void regex_node_lengths(const regex_node *n, uint64_t *min, uint64_t *max);

#endif
