/* test_regex_gbnf.c — the regex subset to GBNF (regex_gbnf.h,
 * regex_parse.h) and choices (choices_gbnf.h): each construct's language on
 * small cases, checked by gbnf_match.h (a recognizer independent of
 * src/grammar/), the documented meaning of the shorthand classes and `.`,
 * JSON-string mode (escaped characters, a search unless anchored), and
 * every refused construct with its offset. */
#include "config.h"

#include "core/buf.h"
#include "gbnf_match.h"
#include "grammar/choices_gbnf.h"
#include "grammar/regex_gbnf.h"
#include "test_util.h"

static gm_grammar *grammar_of(const char *pattern, regex_gbnf_mode mode)
{
    gpt2d_buf out = GPT2D_BUF_INIT;
    regex_error err;
    int rc = regex_gbnf(pattern, strlen(pattern), mode, "root", 1 << 20, &out,
                        &err);
    ck_assert_msg(rc == 0, "/%s/ refused: %s at %zu", pattern, err.message,
                  err.offset);
    gm_grammar *g = gm_parse((const char *)out.data, out.len);
    buf_free(&out);
    return g;
}

static void check_texts(const char *pattern, regex_gbnf_mode mode,
                        const char *const *yes, const char *const *no)
{
    gm_grammar *g = grammar_of(pattern, mode);
    for (size_t i = 0; yes[i] != NULL; i++)
        ck_assert_msg(gm_accepts(g, "root", yes[i]), "/%s/ should accept '%s'",
                      pattern, yes[i]);
    for (size_t i = 0; no[i] != NULL; i++)
        ck_assert_msg(!gm_accepts(g, "root", no[i]), "/%s/ should refuse '%s'",
                      pattern, no[i]);
    gm_free(g);
}

#define TEXTS(...)                                                             \
    (const char *const[])                                                      \
    {                                                                          \
        __VA_ARGS__, NULL                                                      \
    }
#define RAW REGEX_GBNF_RAW
#define JSTR REGEX_GBNF_JSON_STRING

static void check_refusal(const char *pattern, size_t offset,
                          const char *message)
{
    gpt2d_buf out = GPT2D_BUF_INIT;
    ck_assert_int_eq(buf_append(&out, "keep", 4), 0);
    regex_error err;
    ck_assert_msg(regex_gbnf(pattern, strlen(pattern), RAW, "root", 1 << 20,
                             &out, &err) == -1,
                  "/%s/ should be refused", pattern);
    ck_assert_str_eq(err.message, message);
    ck_assert_uint_eq(err.offset, offset);
    ck_assert_uint_eq(out.len, 4);
    buf_free(&out);
}

START_TEST(test_raw_mode_matches_the_whole_text)
{
    check_texts("a|bc", RAW, TEXTS("a", "bc"), TEXTS("ab", "", "abc"));
    check_texts("^ab$", RAW, TEXTS("ab"), TEXTS("xab", "abx"));
    check_texts("", RAW, TEXTS(""), TEXTS("a"));
    check_texts("x(a|)y", RAW, TEXTS("xy", "xay"), TEXTS("xaay"));
    check_texts("a{2,3}", RAW, TEXTS("aa", "aaa"), TEXTS("a", "aaaa"));
    check_texts("a{2}", RAW, TEXTS("aa"), TEXTS("a", "aaa"));
    check_texts("a{2,}", RAW, TEXTS("aa", "aaaaa"), TEXTS("a"));
    check_texts("ab?c*d+", RAW, TEXTS("ad", "abccdd"), TEXTS("abc", "abbd"));
    check_texts("(?:ab)+", RAW, TEXTS("ab", "abab"), TEXTS("aba", ""));
    check_texts("a+?b*?c??", RAW, TEXTS("a", "aabbc"), TEXTS("c"));
    check_texts("é+中", RAW, TEXTS("éé中"), TEXTS("中", "e中"));
    check_texts("a.c", RAW, TEXTS("abc", "a中c", "a\"c"), TEXTS("ac", "a\nc"));
}
END_TEST

/* Repeating something that may be empty: the same strings, and no left
 * recursion (gbnf_match fails the test on one). */
START_TEST(test_nullable_repetitions)
{
    check_texts("(a*)*b", RAW, TEXTS("b", "aab"), TEXTS("", "ba"));
    check_texts("(a?b?)+c", RAW, TEXTS("c", "abbac", "bc"), TEXTS("ab"));
    check_texts("(|x)*", RAW, TEXTS("", "xxx"), TEXTS("y"));
    check_texts("((a|)(b|)){2,}", RAW, TEXTS("", "ab", "abab", "ba"),
                TEXTS("c"));
    check_texts("(a*){3}", RAW, TEXTS("", "aaaa"), TEXTS("b"));
}
END_TEST

START_TEST(test_classes)
{
    check_texts("[a-c]", RAW, TEXTS("a", "c"), TEXTS("d", ""));
    check_texts("[^ab]", RAW, TEXTS("c", "é", "\n"), TEXTS("a", "b"));
    check_texts("[a\\-z]", RAW, TEXTS("-", "a", "z"), TEXTS("b"));
    check_texts("[-a]", RAW, TEXTS("-", "a"), TEXTS("b"));
    check_texts("[\\]\\\\\\[]", RAW, TEXTS("]", "\\", "["), TEXTS("a"));
    check_texts("[\\d_]", RAW, TEXTS("5", "_"), TEXTS("a"));
    check_texts("[\\x41-\\x43\\u00e9]", RAW, TEXTS("A", "C", "é"), TEXTS("D"));
    check_texts("[\\n\\t\\b]", RAW, TEXTS("\n", "\t", "\b"), TEXTS("n"));
}
END_TEST

/* \d \w \s mean what ECMA-262 and Python's re both match; their negations
 * leave out what either would count (regex_parse.h). */
START_TEST(test_shorthand_classes_satisfy_both_engines)
{
    check_texts("\\d", RAW, TEXTS("0", "9"), TEXTS("a", "٣", "²"));
    check_texts("\\D", RAW, TEXTS("a", "-", "é"), TEXTS("5", "٣", "²"));
    check_texts("\\w", RAW, TEXTS("a", "Z", "0", "_"), TEXTS("é", "-", "中"));
    /* beyond ASCII, a negated \w keeps to punctuation and symbol blocks */
    check_texts("\\W", RAW, TEXTS("-", " ", "€", "→", "😀"),
                TEXTS("a", "_", "é", "中", "٣", "℃", "ª"));
    check_texts("[^\\w]", RAW, TEXTS("-", "€"), TEXTS("a", "é", "℃"));
    check_texts("\\s", RAW, TEXTS(" ", "\t", "\n", "\r", "\xc2\xa0", "　"),
                TEXTS("a", "\x1c", "\xef\xbb\xbf", "\xc2\x85"));
    check_texts(
        "\\S", RAW, TEXTS("a", "é"),
        TEXTS(" ", "\x1c", "\x1f", "\xef\xbb\xbf", "\xc2\x85", "\xc2\xa0"));
    check_texts("[^\\d]", RAW, TEXTS("a"), TEXTS("5", "٣"));
    check_texts("[^\\D]", RAW, TEXTS("5"), TEXTS("٣", "a"));
    check_texts(".", RAW, TEXTS("a", "\t", "😀"),
                TEXTS("\n", "\r", "\xe2\x80\xa8", "\xe2\x80\xa9"));
}
END_TEST

START_TEST(test_json_string_mode)
{
    /* a search: unanchored ends take any characters */
    check_texts("ab", JSTR, TEXTS("ab", "xaby", "\\nab"), TEXTS("a", "ba"));
    check_texts("^ab", JSTR, TEXTS("ab", "abx"), TEXTS("xab"));
    check_texts("ab$", JSTR, TEXTS("xab"), TEXTS("abx", "ab\\n"));
    check_texts("^a$|b", JSTR, TEXTS("a", "xbx"), TEXTS("ax", "x"));
    /* characters in their JSON spelling */
    check_texts("^q\"\\\\$", JSTR, TEXTS("q\\\"\\\\"), TEXTS("q\"\\", "q\\\""));
    check_texts("^\\n\\t\\x01$", JSTR, TEXTS("\\n\\t\\u0001"),
                TEXTS("\n\t\x01", "\\u000a\\t\\u0001"));
    check_texts("^.$", JSTR, TEXTS("a", "\\\"", "\\\\", "\\t", "é"),
                TEXTS("\\n", "\\r", "\"", "\\u00e9"));
    check_texts("^[^a]$", JSTR, TEXTS("\\n", "\\u001f", "b"), TEXTS("a", "\n"));
}
END_TEST

START_TEST(test_refusals_name_construct_and_offset)
{
    check_refusal("(a)\\1", 3, "backreferences (\\1) are not supported");
    check_refusal("(?P<n>a)", 0, "named groups ((?P...) are not supported");
    check_refusal("a(?<n>b)", 1, "named groups ((?<...) are not supported");
    check_refusal("(?=a)", 0, "lookahead ((?=...) are not supported");
    check_refusal("(?!a)", 0, "lookahead ((?!...) are not supported");
    check_refusal("x(?<=a)", 1, "lookbehind ((?<...) are not supported");
    check_refusal("(?i)a", 0, "inline flags ((?i...) are not supported");
    check_refusal("(?#c)", 0, "comments ((?#...) are not supported");
    check_refusal("(?>a)", 0, "atomic groups ((?>...) are not supported");
    check_refusal("(?(1)a)", 0, "conditionals ((?(...) are not supported");
    check_refusal("a\\b", 1, "word boundaries (\\b) are not supported");
    check_refusal("\\B", 0, "word boundaries (\\B) are not supported");
    check_refusal("\\Aa", 0,
                  "the anchor \\A is not supported (^ and $ are, at the ends)");
    check_refusal("a\\Z", 1,
                  "the anchor \\Z is not supported (^ and $ are, at the ends)");
    check_refusal("\\p{L}", 0,
                  "Unicode property classes (\\p{...}) are not supported");
    check_refusal("\\k<n>", 0, "backreferences (\\k<name>) are not supported");
    check_refusal("a*+", 2,
                  "a quantifier after a quantifier (possessive or repeated: "
                  "use a group)");
    check_refusal("a**", 2,
                  "a quantifier after a quantifier (possessive or repeated: "
                  "use a group)");
    check_refusal("*a", 0, "'*' has nothing to repeat");
    check_refusal("a|+", 2, "'+' has nothing to repeat");
    check_refusal("(?)", 0, "inline flags ((?)...) are not supported");
    check_refusal("a{", 1, "a '{' that is never closed (write \\{)");
    check_refusal("a{x}", 1,
                  "a '{' that does not begin {m}, {m,} or {m,n} (write \\{)");
    check_refusal("a{,3}", 1, "a repetition {,n} without its minimum");
    check_refusal("a{3,2}", 1, "a repetition {m,n} with n below m");
    check_refusal("a{1001}", 1, "a repetition count above 1000");
    check_refusal("{", 0, "a '{' that does not repeat anything (write \\{)");
    check_refusal("(ab", 0, "a '(' that is never closed");
    check_refusal("[ab", 0, "a '[' class that is never closed");
    check_refusal("ab)", 2, "a ')' that closes no group");
    check_refusal("a^b", 1,
                  "'^' is supported only at the start of the pattern or of a "
                  "top-level alternative");
    check_refusal("a$b", 1,
                  "'$' is supported only at the end of the pattern or of a "
                  "top-level alternative");
    check_refusal("(^a)", 1,
                  "'^' is supported only at the start of the pattern or of a "
                  "top-level alternative");
    check_refusal("[]a]", 1,
                  "a ']' first in a class means different things in "
                  "different engines: write \\]");
    check_refusal("[z-a]", 1, "a range whose end comes before its start");
    check_refusal("[\\d-z]", 1, "a class like \\d cannot start a range");
    check_refusal("[a-\\d]", 3, "a class like \\d cannot end a range");
    check_refusal("[[:alpha:]]", 1,
                  "POSIX classes ([:name:]) are not supported");
    check_refusal("\\01", 0, "octal escapes are not supported (write \\xHH)");
    check_refusal("\\uD800", 0,
                  "\\uD800 is a surrogate, not a character (write the "
                  "character itself)");
    check_refusal("\\x4", 0, "\\x needs 2 hexadecimal digits");
    check_refusal("\\u12", 0, "\\u needs 4 hexadecimal digits");
    check_refusal("a\\", 1, "the pattern ends with a lone backslash");
    check_refusal("\\q", 0, "the escape \\q is not supported");
    check_refusal("\\é", 0, "only ASCII punctuation may follow a backslash");
    check_refusal("\xff", 0, "the pattern is not valid UTF-8");
    check_refusal("é(a", 1, "a '(' that is never closed");
    check_refusal("[^\\s\\S]", 0, "the pattern matches no text at all");
    char deep[200] = "";
    for (int i = 0; i < 65; i++)
        strcat(deep, "(");
    check_refusal(deep, 64, "groups nested deeper than 64");
}
END_TEST

START_TEST(test_budget)
{
    gpt2d_buf out = GPT2D_BUF_INIT;
    regex_error err;
    const char *p = "[a-z]+@[a-z]+\\.(com|org|net)";
    ck_assert_int_eq(regex_gbnf(p, strlen(p), RAW, "root", 20, &out, &err), -1);
    ck_assert_str_eq(err.message,
                     "the pattern's grammar is larger than 20 bytes");
    ck_assert_uint_eq(out.len, 0);
    buf_free(&out);
}
END_TEST

START_TEST(test_choices)
{
    const char *choices[] = { "yes", "no way", "", "q\"\\\n" };
    size_t lens[] = { 3, 6, 0, 4 };
    gpt2d_buf out = GPT2D_BUF_INIT;
    gpt2d_error err;
    size_t bad;
    ck_assert_int_eq(
        choices_gbnf(choices, lens, 4, "root", 1 << 20, &out, &bad, &err), 0);
    gm_grammar *g = gm_parse((const char *)out.data, out.len);
    ck_assert(gm_accepts(g, "root", "yes"));
    ck_assert(gm_accepts(g, "root", "no way"));
    ck_assert(gm_accepts(g, "root", ""));
    ck_assert(gm_accepts(g, "root", "q\"\\\n"));
    ck_assert(!gm_accepts(g, "root", "ye"));
    ck_assert(!gm_accepts(g, "root", "yesno"));
    gm_free(g);
    size_t before = out.len;
    ck_assert_int_eq(
        choices_gbnf(choices, lens, 0, "root", 1 << 20, &out, &bad, &err), -1);
    ck_assert_str_eq(err.message, "the list of choices is empty");
    ck_assert_uint_eq(bad, 0);
    const char *broken[] = { "ok", "\xc3" };
    size_t broken_lens[] = { 2, 1 };
    ck_assert_int_eq(
        choices_gbnf(broken, broken_lens, 2, "root", 1 << 20, &out, &bad, &err),
        -1);
    ck_assert_str_eq(err.message, "choice 1 is not valid UTF-8");
    ck_assert_uint_eq(bad, 1);
    ck_assert_int_eq(
        choices_gbnf(choices, lens, 4, "root", 10, &out, &bad, &err), -1);
    ck_assert_str_eq(err.message, "the choices' grammar is larger than 10 "
                                  "bytes (or memory ran out)");
    ck_assert_uint_eq(bad, 4);
    ck_assert_int_eq(
        choices_gbnf(choices, lens, 4, "no good", 1 << 20, &out, &bad, &err),
        -1);
    ck_assert_str_eq(err.message, "the rule name is not [A-Za-z0-9-]+");
    ck_assert_uint_eq(out.len, before);
    buf_free(&out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regex_gbnf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_raw_mode_matches_the_whole_text);
    tcase_add_test(tc, test_nullable_repetitions);
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_shorthand_classes_satisfy_both_engines);
    tcase_add_test(tc, test_json_string_mode);
    tcase_add_test(tc, test_refusals_name_construct_and_offset);
    tcase_add_test(tc, test_budget);
    tcase_add_test(tc, test_choices);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
