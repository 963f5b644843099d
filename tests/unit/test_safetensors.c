/* test_safetensors.c — the safetensors header parser accepts well-formed
 * files and refuses every kind of lie with a message naming it. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "test_util.h"

/* A file: 8-byte length, `header`, then `data_bytes` bytes of 0xAB. */
static uint8_t *make_file(const char *header, size_t data_bytes, size_t *size)
{
    size_t hlen = strlen(header);
    *size = 8 + hlen + data_bytes;
    uint8_t *buf = malloc(*size);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    memset(buf + 8 + hlen, 0xAB, data_bytes);
    return buf;
}

/* Parses and expects failure with `needle` in the message. */
static void expect_refused(const char *header, size_t data_bytes,
                           const char *needle)
{
    size_t size;
    uint8_t *buf = make_file(header, data_bytes, &size);
    st_file f;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(safetensors_parse(buf, size, &f, &err), -1);
    ck_assert_msg(strstr(err.message, needle) != NULL,
                  "message '%s' lacks '%s'", err.message, needle);
    ck_assert_ptr_null(f.tensors);
    free(buf);
}

START_TEST(test_parses_tensor_table_and_skips_metadata)
{
    const char *h =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[32,36]}}";
    size_t size;
    uint8_t *buf = make_file(h, 36, &size);
    st_file f;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(safetensors_parse(buf, size, &f, &err), 0);
    ck_assert_uint_eq(f.n_tensors, 3);
    const st_tensor *a = safetensors_find(&f, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->dtype, ST_F32);
    ck_assert_uint_eq(a->n_dims, 2);
    ck_assert_uint_eq(a->shape[0], 2);
    ck_assert_uint_eq(a->shape[1], 3);
    ck_assert_uint_eq(a->n_elements, 6);
    ck_assert_uint_eq(a->n_bytes, 24);
    ck_assert_ptr_eq(a->data, buf + 8 + strlen(h));
    const st_tensor *b = safetensors_find(&f, "b");
    ck_assert_int_eq(b->dtype, ST_F16);
    ck_assert_ptr_eq(b->data, a->data + 24);
    const st_tensor *s = safetensors_find(&f, "s");
    ck_assert_uint_eq(s->n_dims, 0);
    ck_assert_uint_eq(s->n_elements, 1);
    ck_assert_ptr_null(safetensors_find(&f, "__metadata__"));
    ck_assert_ptr_null(safetensors_find(&f, "missing"));
    safetensors_free(&f);
    free(buf);
}
END_TEST

START_TEST(test_empty_header_has_no_tensors)
{
    size_t size;
    uint8_t *buf = make_file("{}", 0, &size);
    st_file f;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(safetensors_parse(buf, size, &f, &err), 0);
    ck_assert_uint_eq(f.n_tensors, 0);
    safetensors_free(&f);
    free(buf);
}
END_TEST

START_TEST(test_refuses_file_shorter_than_length_prefix)
{
    const uint8_t buf[5] = { 1, 0, 0, 0, 0 };
    st_file f;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(safetensors_parse(buf, sizeof buf, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "too short"));
}
END_TEST

START_TEST(test_refuses_header_longer_than_file)
{
    size_t size;
    uint8_t *buf = make_file("{}", 0, &size);
    buf[0] = 200; /* claims 200 header bytes, file has 2 */
    st_file f;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(safetensors_parse(buf, size, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "truncated"));
    /* and a length near 2^64 must not wrap around */
    memset(buf, 0xff, 8);
    ck_assert_int_eq(safetensors_parse(buf, size, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "truncated"));
    free(buf);
}
END_TEST

START_TEST(test_refuses_non_json_and_non_object_headers)
{
    expect_refused("{\"a\":", 0, "not valid JSON");
    expect_refused("[1,2]", 0, "not a JSON object");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "not valid JSON"); /* duplicate key */
}
END_TEST

START_TEST(test_refuses_bad_descriptions)
{
    expect_refused("{\"a\":3}", 0, "not an object");
    expect_refused("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                   "dtype");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                   "shape");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                   "data_offsets");
    expect_refused(
        "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "unknown dtype 'Q4'");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
        "shape[0]");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
        "shape[0]");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,4]}}",
                   4, "9 dimensions");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}",
        4, "not non-negative integers");
}
END_TEST

START_TEST(test_refuses_offsets_outside_data)
{
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
        "outside the 4 data bytes");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
        "outside");
}
END_TEST

START_TEST(test_refuses_span_that_disagrees_with_shape)
{
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
        "span 8 bytes but F32 of that shape needs 12");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
        "\"data_offsets\":[0,8]}}",
        8, "overflows");
}
END_TEST

START_TEST(test_refuses_overlapping_tensors)
{
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        12, "overlap");
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_parses_tensor_table_and_skips_metadata);
    tcase_add_test(tc, test_empty_header_has_no_tensors);
    tcase_add_test(tc, test_refuses_file_shorter_than_length_prefix);
    tcase_add_test(tc, test_refuses_header_longer_than_file);
    tcase_add_test(tc, test_refuses_non_json_and_non_object_headers);
    tcase_add_test(tc, test_refuses_bad_descriptions);
    tcase_add_test(tc, test_refuses_offsets_outside_data);
    tcase_add_test(tc, test_refuses_span_that_disagrees_with_shape);
    tcase_add_test(tc, test_refuses_overlapping_tensors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(safetensors_suite());
}
