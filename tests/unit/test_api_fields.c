/* test_api_fields.c — the request fields every endpoint reads the same way
 * (api_fields.c), tested once here; each endpoint's suite checks only that
 * it passes the field through.
 *
 * cache_salt: 1 to API_CACHE_SALT_MAX bytes (bytes, not characters), kept
 * whole, NULs too; absent or null is no salt; anything else a 400 naming
 * cache_salt. */
#include <check.h>
#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "api/api_fields.h"
#include "test_api_util.h"

static const char *const SALT_LENGTH = "cache_salt must be 1 to 256 bytes long";
static const char *const SALT_TYPE = "cache_salt must be a string";

/* The field's value is `json` (JSON text) when given, else the string
 * `unit` (unit_len bytes) `times` times over, else absent.  Accepted when
 * `refusal` is NULL. */
static const struct salt_case {
    const char *what;
    const char *json;
    const char *unit;
    size_t unit_len, times;
    const char *refusal;
} salt_cases[] = {
    { "absent", NULL, NULL, 0, 0, NULL },
    { "null", "null", NULL, 0, 0, NULL },
    { "one byte", NULL, "s", 1, 1, NULL },
    { "256 bytes", NULL, "s", 1, 256, NULL },
    { "257 bytes", NULL, "s", 1, 257, SALT_LENGTH },
    { "empty", NULL, "", 0, 1, SALT_LENGTH },
    /* the bound counts bytes: 128 two-byte characters fill it, 129 pass it */
    { "128 x U+00E9", NULL, "\xc3\xa9", 2, 128, NULL },
    { "129 x U+00E9", NULL, "\xc3\xa9", 2, 129, SALT_LENGTH },
    { "a NUL inside", NULL, "a\0b", 3, 1, NULL },
    { "a number", "7", NULL, 0, 0, SALT_TYPE },
    { "a boolean", "true", NULL, 0, 0, SALT_TYPE },
    { "an array", "[\"s\"]", NULL, 0, 0, SALT_TYPE },
    { "an object", "{\"s\": 1}", NULL, 0, 0, SALT_TYPE },
};

START_TEST(test_cache_salt_boundaries)
{
    const struct salt_case *c = &salt_cases[_i];
    char want[2 * API_CACHE_SALT_MAX];
    const size_t want_len = c->unit_len * c->times;
    ck_assert_uint_le(want_len, sizeof want);
    for (size_t i = 0; i < c->times; i++)
        memcpy(want + i * c->unit_len, c->unit, c->unit_len);
    json_t *root = json_object();
    ck_assert_ptr_nonnull(root);
    if (c->json != NULL) {
        json_error_t je;
        json_t *v = json_loads(c->json, JSON_DECODE_ANY, &je);
        ck_assert_msg(v != NULL, "%s: %s", c->what, je.text);
        json_object_set_new(root, "cache_salt", v);
    } else if (c->times > 0) {
        json_object_set_new(root, "cache_salt", json_stringn(want, want_len));
    }

    char out[API_CACHE_SALT_MAX + 1];
    size_t len = 0;
    bool present = false;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = api_field_cache_salt(root, out, &len, &present, &e);
    if (c->refusal != NULL) {
        test_expect_refusal(rc, &e, c->what, "cache_salt");
        ck_assert_str_eq(e.message, c->refusal);
    } else if (c->times == 0) {
        ck_assert_msg(rc == 0, "%s: %s", c->what, e.message);
        ck_assert_msg(!present, "%s: a salt", c->what);
    } else {
        ck_assert_msg(rc == 0, "%s: %s", c->what, e.message);
        ck_assert_msg(present, "%s: no salt", c->what);
        ck_assert_uint_eq(len, want_len);
        ck_assert_mem_eq(out, want, want_len);
        ck_assert_int_eq(out[len], '\0');
    }
    json_decref(root);
}
END_TEST

static Suite *api_fields_suite(void)
{
    Suite *s = suite_create("api_fields");
    TCase *salt = tcase_create("cache_salt");
    tcase_add_loop_test(salt, test_cache_salt_boundaries, 0,
                        sizeof salt_cases / sizeof salt_cases[0]);
    suite_add_tcase(s, salt);
    return s;
}

int main(void)
{
    return test_run_suite(api_fields_suite());
}
