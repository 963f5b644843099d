/* test_multipart.c — multipart/form-data (multipart.h): the body the OpenAI
 * Python SDK (httpx) sends to /v1/files, byte for byte; boundaries from
 * Content-Type headers, quoted or not; data that holds "--" and NULs; empty
 * parts; every refusal naming what is wrong; and every prefix of a valid
 * body parsed from an exactly-sized copy, so that ASan (the
 * --enable-sanitizers build) sees any read past the end. */
#include "config.h"

#include "batch/multipart.h"
#include "test_util.h"

#define B "a0f3c9e14b7d2e6f8a1b3c5d7e9f0a2b"

/* What httpx writes for client.files.create(file=open("in.jsonl", "rb"),
 * purpose="batch"): the plain fields first, then the file. */
static const char SDK_BODY[] =
    "--" B "\r\n"
    "Content-Disposition: form-data; name=\"purpose\"\r\n"
    "\r\n"
    "batch\r\n"
    "--" B "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "{\"custom_id\": \"r1\", \"method\": \"POST\"}\n"
    "{\"custom_id\": \"r2\", \"method\": \"POST\"}\n"
    "\r\n"
    "--" B "--\r\n";
static const char SDK_FILE[] =
    "{\"custom_id\": \"r1\", \"method\": \"POST\"}\n"
    "{\"custom_id\": \"r2\", \"method\": \"POST\"}\n";

enum { MAX_PARTS = 8 };

static multipart_part parts[MAX_PARTS];
static char err[256];

static int parse_n(const char *body, size_t len, const char *boundary)
{
    err[0] = '\0';
    return multipart_parse(body, len, boundary, parts, MAX_PARTS, err,
                           sizeof err);
}

/* A string literal's bytes, NULs inside included. */
#define PARSE(lit, boundary) parse_n(lit, sizeof(lit) - 1, boundary)

static void assert_data(const multipart_part *p, const char *want, size_t len)
{
    ck_assert_uint_eq(p->len, len);
    ck_assert_int_eq(memcmp(p->data, want, len), 0);
}

static void assert_part(const multipart_part *p, const char *name,
                        const char *filename, const char *content_type,
                        const char *data, size_t len)
{
    ck_assert_str_eq(p->name, name);
    ck_assert_str_eq(p->filename, filename);
    ck_assert_str_eq(p->content_type, content_type);
    assert_data(p, data, len);
}

/* A refusal whose message contains `want`. */
static void assert_refused(int rc, const char *want)
{
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err,
                  want);
}

START_TEST(test_openai_sdk_upload_body)
{
    ck_assert_int_eq(PARSE(SDK_BODY, B), 2);
    assert_part(&parts[0], "purpose", "", "", "batch", 5);
    assert_part(&parts[1], "file", "in.jsonl", "application/octet-stream",
                SDK_FILE, sizeof SDK_FILE - 1);
    ck_assert_ptr_eq(multipart_find(parts, 2, "file"), &parts[1]);
    ck_assert_ptr_eq(multipart_find(parts, 2, "purpose"), &parts[0]);
    ck_assert_ptr_null(multipart_find(parts, 2, "model"));
    ck_assert_ptr_null(multipart_find(parts, 0, "file"));
}
END_TEST

START_TEST(test_boundary_from_content_type)
{
    char b[MULTIPART_BOUNDARY_MAX + 1];
    ck_assert_int_eq(multipart_boundary("multipart/form-data; boundary=" B, b,
                                        sizeof b, err, sizeof err),
                     0);
    ck_assert_str_eq(b, B);
    /* Quoted, with characters a token cannot hold; any case; more
     * parameters; white space. */
    ck_assert_int_eq(multipart_boundary("  Multipart/Form-Data ;charset=utf-8;"
                                        " BOUNDARY = \"a b:c=d/e?(f)\" ;",
                                        b, sizeof b, err, sizeof err),
                     0);
    ck_assert_str_eq(b, "a b:c=d/e?(f)");
    /* Escapes inside the quotes. */
    ck_assert_int_eq(
        multipart_boundary("multipart/form-data; boundary=\"x\\-y\"", b,
                           sizeof b, err, sizeof err),
        0);
    ck_assert_str_eq(b, "x-y");
    /* 70 characters is the most. */
    char ct[160], want[71];
    memset(want, 'z', 70);
    want[70] = '\0';
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", want);
    ck_assert_int_eq(multipart_boundary(ct, b, sizeof b, err, sizeof err), 0);
    ck_assert_str_eq(b, want);
}
END_TEST

START_TEST(test_boundary_refusals_say_why)
{
    char b[MULTIPART_BOUNDARY_MAX + 1], ct[160];
    static const struct {
        const char *ct, *want;
    } cases[] = {
        { "application/json", "not multipart/form-data" },
        { "multipart/mixed; boundary=x", "not multipart/form-data" },
        { "multipart/form-data", "has no boundary" },
        { "multipart/form-data; charset=utf-8", "has no boundary" },
        { "multipart/form-data; boundary=", "without a value" },
        { "multipart/form-data; boundary=\"\"", "empty" },
        { "multipart/form-data; boundary=\"ab \"", "ends in a space" },
        { "multipart/form-data; boundary=\"a\"; boundary=b",
          "two boundary parameters" },
        { "multipart/form-data; boundary=\"abc", "closing quote" },
        { "multipart/form-data; boundary=a\"b", "does not allow" },
        { "multipart/form-data; boundary=x y", "expected ';'" },
        { "multipart/form-data; =x", "without a name" },
        { "multipart/form-data; boundary", "without '='" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(
            multipart_boundary(cases[i].ct, b, sizeof b, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].want) != NULL,
                      "'%s': message '%s' lacks '%s'", cases[i].ct, err,
                      cases[i].want);
    }
    ck_assert_int_eq(multipart_boundary(NULL, b, sizeof b, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "no Content-Type"));
    char long_b[72];
    memset(long_b, 'z', 71);
    long_b[71] = '\0';
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", long_b);
    ck_assert_int_eq(multipart_boundary(ct, b, sizeof b, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "longer than 70"));
    /* The caller's buffer is too small for a valid boundary. */
    ck_assert_int_eq(multipart_boundary("multipart/form-data; boundary=abcd", b,
                                        4, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "longer than 3 bytes"));
}
END_TEST

START_TEST(test_data_with_dashes_and_nuls_is_data)
{
    /* "--bound" and "--boundaryX" at a line's start are not delimiters; nor
     * is the boundary without its CRLF before it. */
    static const char body[] = "--boundary\r\n"
                               "Content-Disposition: form-data; name=\"f\"\r\n"
                               "\r\n"
                               "a\0b\r\n--bound\r\n--boundaryX\r\n"
                               "x--boundary\r\n-\r\n--\r\n"
                               "\r\n--boundary--";
    static const char want[] = "a\0b\r\n--bound\r\n--boundaryX\r\n"
                               "x--boundary\r\n-\r\n--\r\n";
    ck_assert_int_eq(PARSE(body, "boundary"), 1);
    assert_data(&parts[0], want, sizeof want - 1);
}
END_TEST

START_TEST(test_preamble_padding_and_epilogue)
{
    static const char body[] =
        "This is a preamble; --b is not a boundary here.\r\n"
        "--b \t\r\n"
        "content-disposition: FORM-DATA ; NAME=one;filename=a.txt\r\n"
        "X-Other: ignored\r\n"
        "CONTENT-TYPE:  text/plain; charset=utf-8 \r\n"
        "\r\n"
        "1\r\n"
        "--b\t\r\n"
        "Content-Disposition: form-data; name=\"q\\\"uote\"; "
        "filename=\"C:\\\\dir\\\\x.jsonl\"; filename*=UTF-8''y\r\n"
        "\r\n"
        "2\r\n"
        "--b--\r\nan epilogue\r\n--b\r\n";
    ck_assert_int_eq(PARSE(body, "b"), 2);
    assert_part(&parts[0], "one", "a.txt", "text/plain; charset=utf-8", "1", 1);
    assert_part(&parts[1], "q\"uote", "C:\\dir\\x.jsonl", "", "2", 1);
}
END_TEST

START_TEST(test_empty_data_and_empty_bodies)
{
    /* Empty data: the delimiter right after the blank line; and with the
     * blank line's CRLF doubling as the delimiter's. */
    static const char body[] = "--b\r\n"
                               "Content-Disposition: form-data; name=\"a\"\r\n"
                               "\r\n"
                               "\r\n--b\r\n"
                               "Content-Disposition: form-data; name=\"c\"\r\n"
                               "\r\n"
                               "--b--";
    ck_assert_int_eq(PARSE(body, "b"), 2);
    ck_assert_str_eq(parts[0].name, "a");
    ck_assert_uint_eq(parts[0].len, 0);
    ck_assert_str_eq(parts[1].name, "c");
    ck_assert_uint_eq(parts[1].len, 0);
    /* A body that closes at once has no parts. */
    ck_assert_int_eq(PARSE("--b--\r\n", "b"), 0);
    ck_assert_int_eq(PARSE("preamble\r\n--b--", "b"), 0);
}
END_TEST

START_TEST(test_body_refusals_say_why)
{
#define CD "Content-Disposition: form-data; name=\"a\"\r\n"
    assert_refused(PARSE("", "b"), "no opening boundary");
    assert_refused(PARSE("--bx\r\n" CD "\r\nv\r\n--bx--", "b"),
                   "no opening boundary");
    /* LF alone ends no line. */
    assert_refused(PARSE("--b\n" CD "\nv\n--b--\n", "b"),
                   "no opening boundary line \"--b\" ending in CRLF");
    assert_refused(PARSE("--b\r\n" CD "\r\nv", "b"),
                   "the closing \"--b--\" is missing");
    assert_refused(PARSE("--b\r\n" CD "\r\nv\r\n--b\r\n", "b"),
                   "ends without its closing boundary");
    assert_refused(PARSE("--b\r\n" CD, "b"), "ends inside its headers");
    assert_refused(PARSE("--b\r\n\r\nv\r\n--b--", "b"),
                   "part 1: no Content-Disposition");
    assert_refused(PARSE("--b\r\n" CD "\r\nv\r\n--b\r\n"
                         "Content-Type: text/plain\r\n\r\nw\r\n--b--",
                         "b"),
                   "part 2: no Content-Disposition");
    assert_refused(PARSE("--b\r\nContent-Disposition: attachment; "
                         "name=\"a\"\r\n\r\nv\r\n--b--",
                         "b"),
                   "part 1: its Content-Disposition is not form-data");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data\r\n\r\n"
                         "v\r\n--b--",
                         "b"),
                   "has no name");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; "
                         "filename=\"x\"\r\n\r\nv\r\n--b--",
                         "b"),
                   "has no name");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; "
                         "name=\"\"\r\n\r\nv\r\n--b--",
                         "b"),
                   "has no name");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; name=a; "
                         "name=c\r\n\r\nv\r\n--b--",
                         "b"),
                   "two names");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; name=a; "
                         "filename=x; filename=y\r\n\r\nv\r\n--b--",
                         "b"),
                   "two filenames");
    assert_refused(PARSE("--b\r\n" CD CD "\r\nv\r\n--b--", "b"),
                   "two Content-Disposition headers");
    assert_refused(PARSE("--b\r\n" CD "Content-Type: a/b\r\n"
                         "content-type: a/b\r\n\r\nv\r\n--b--",
                         "b"),
                   "two Content-Type headers");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; "
                         "name=\"a\r\n\r\nv\r\n--b--",
                         "b"),
                   "closing quote");
    assert_refused(PARSE("--b\r\n" CD "no colon here\r\n\r\nv\r\n--b--", "b"),
                   "has no ':'");
    assert_refused(PARSE("--b\r\n" CD " folded\r\n\r\nv\r\n--b--", "b"),
                   "folded headers");
    assert_refused(PARSE("--b\r\nContent-Disposition: form-data; "
                         "name=\"a\0b\"\r\n\r\nv\r\n--b--",
                         "b"),
                   "control character (byte 0x00)");
    assert_refused(PARSE("--b\r\n" CD "\r\nv\r\n--b--", ""), "1 to 70");
    assert_refused(parse_n("--b--", 5, NULL), "1 to 70");
#undef CD
}
END_TEST

/* A header line of `line_len` bytes (CRLF excluded) whose name or filename
 * is `value_len` bytes long, in a complete body. */
static size_t long_body(char *out, size_t cap, const char *param,
                        size_t value_len, size_t line_len)
{
    char value[2048];
    memset(value, 'v', value_len);
    value[value_len] = '\0';
    int n = snprintf(out, cap, "--b\r\nX-Pad: ");
    size_t pad = line_len > 7 ? line_len - 7 : 0; /* "X-Pad: " */
    memset(out + n, 'p', pad);
    n += (int)pad;
    n += snprintf(out + n, cap - (size_t)n,
                  "\r\nContent-Disposition: form-data; name=n; %s=\"%s\""
                  "\r\n\r\nv\r\n--b--",
                  param, value);
    return (size_t)n;
}

START_TEST(test_limits_on_lines_names_and_parts)
{
    static char body[8192];
    size_t len = long_body(body, sizeof body, "x", 1, MULTIPART_LINE_MAX);
    ck_assert_int_eq(parse_n(body, len, "b"), 1);
    len = long_body(body, sizeof body, "x", 1, MULTIPART_LINE_MAX + 1);
    assert_refused(parse_n(body, len, "b"),
                   "a header line is longer than 1024 bytes");
    len = long_body(body, sizeof body, "filename", 255, 8);
    ck_assert_int_eq(parse_n(body, len, "b"), 1);
    ck_assert_uint_eq(strlen(parts[0].filename), 255);
    len = long_body(body, sizeof body, "filename", 256, 8);
    assert_refused(parse_n(body, len, "b"),
                   "its filename is longer than 255 bytes");
    static const char name63[] =
        "--b\r\nContent-Disposition: form-data; name=\""
        "123456789012345678901234567890123456789012345678901234567890123"
        "\"\r\n\r\nv\r\n--b--";
    ck_assert_int_eq(PARSE(name63, "b"), 1);
    ck_assert_uint_eq(strlen(parts[0].name), 63);
    static const char name64[] =
        "--b\r\nContent-Disposition: form-data; name=\""
        "1234567890123456789012345678901234567890123456789012345678901234"
        "\"\r\n\r\nv\r\n--b--";
    assert_refused(PARSE(name64, "b"), "its name is longer than 63 bytes");
    char type[200];
    memset(type, 't', 128);
    type[128] = '\0';
    len = (size_t)snprintf(body, sizeof body,
                           "--b\r\nContent-Disposition: form-data; name=a\r\n"
                           "Content-Type: %s\r\n\r\nv\r\n--b--",
                           type);
    assert_refused(parse_n(body, len, "b"),
                   "its Content-Type is longer than 127 bytes");
    /* max_parts parts fit; one more is refused. */
    len = 0;
    for (int i = 0; i <= MAX_PARTS; i++)
        len += (size_t)snprintf(body + len, sizeof body - len,
                                "--b\r\nContent-Disposition: form-data; "
                                "name=p%d\r\n\r\n%d\r\n",
                                i, i);
    len += (size_t)snprintf(body + len, sizeof body - len, "--b--");
    assert_refused(parse_n(body, len, "b"), "more than 8 parts");
    multipart_part nine[MAX_PARTS + 1];
    ck_assert_int_eq(
        multipart_parse(body, len, "b", nine, MAX_PARTS + 1, err, sizeof err),
        MAX_PARTS + 1);
    assert_data(&nine[MAX_PARTS], "8", 1);
}
END_TEST

/* Every prefix of a valid body, each in a buffer of exactly its size: a
 * refusal, or fewer parts, or (past the closing delimiter) all of them;
 * ASan reports any read past the end. */
static void parse_every_prefix(const char *body, size_t len,
                               const char *boundary, int whole)
{
    for (size_t n = 0; n <= len; n++) {
        char *copy = malloc(n > 0 ? n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, body, n);
        int rc = multipart_parse(copy, n, boundary, parts, MAX_PARTS, err,
                                 sizeof err);
        ck_assert_msg(rc == -1 || (rc >= 0 && rc <= whole),
                      "prefix %zu: %d parts", n, rc);
        if (rc == -1)
            ck_assert_msg(err[0] != '\0', "prefix %zu: no message", n);
        if (n < len - 2) /* the closing "--b--" is cut */
            ck_assert_int_eq(rc, -1);
        for (int i = 0; i < rc; i++)
            ck_assert(parts[i].data >= copy &&
                      parts[i].data + parts[i].len <= copy + n);
        free(copy);
    }
}

START_TEST(test_every_truncation_stays_inside_the_body)
{
    parse_every_prefix(SDK_BODY, sizeof SDK_BODY - 1, B, 2);
    static const char padded[] =
        "pre\r\n--b \r\n"
        "Content-Disposition: form-data; name=a\r\n"
        "\r\n"
        "--b\r\n"
        "Content-Disposition: form-data; name=\"b\\\"\""
        "\r\n\r\nx\r\n--bx\r\n--b--\r\n";
    parse_every_prefix(padded, sizeof padded - 1, "b", 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("multipart");
    TCase *tc = tcase_create("multipart");
    tcase_add_test(tc, test_openai_sdk_upload_body);
    tcase_add_test(tc, test_boundary_from_content_type);
    tcase_add_test(tc, test_boundary_refusals_say_why);
    tcase_add_test(tc, test_data_with_dashes_and_nuls_is_data);
    tcase_add_test(tc, test_preamble_padding_and_epilogue);
    tcase_add_test(tc, test_empty_data_and_empty_bodies);
    tcase_add_test(tc, test_body_refusals_say_why);
    tcase_add_test(tc, test_limits_on_lines_names_and_parts);
    tcase_add_test(tc, test_every_truncation_stays_inside_the_body);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
