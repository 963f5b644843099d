/* test_sha256.c — the digest against FIPS 180-4's published examples
 * (csrc.nist.gov "SHA256.pdf" and the one-million-'a' vector), fed whole and
 * in every split, since callers feed fields one at a time. */
#include "config.h"

#include "core/sha256.h"
#include "test_util.h"

static void hex(const uint8_t d[SHA256_BYTES], char out[2 * SHA256_BYTES + 1])
{
    for (int i = 0; i < SHA256_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static const struct {
    const char *msg;
    const char *digest;
} vectors[] = {
    { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc",
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
};

START_TEST(test_digest_matches_fips_examples)
{
    for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
        uint8_t d[SHA256_BYTES];
        char h[2 * SHA256_BYTES + 1];
        sha256(vectors[v].msg, strlen(vectors[v].msg), d);
        hex(d, h);
        ck_assert_str_eq(h, vectors[v].digest);
    }
}
END_TEST

START_TEST(test_digest_is_the_same_fed_in_any_split)
{
    for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
        const char *m = vectors[v].msg;
        size_t n = strlen(m);
        for (size_t cut = 0; cut <= n; cut++) {
            sha256_ctx c;
            uint8_t d[SHA256_BYTES];
            char h[2 * SHA256_BYTES + 1];
            sha256_init(&c);
            sha256_update(&c, m, cut);
            sha256_update(&c, m + cut, n - cut);
            sha256_final(&c, d);
            hex(d, h);
            ck_assert_str_eq(h, vectors[v].digest);
        }
    }
}
END_TEST

START_TEST(test_digest_of_a_million_a)
{
    char chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    sha256_ctx c;
    sha256_init(&c);
    for (int i = 0; i < 1000; i++)
        sha256_update(&c, chunk, sizeof chunk);
    uint8_t d[SHA256_BYTES];
    char h[2 * SHA256_BYTES + 1];
    sha256_final(&c, d);
    hex(d, h);
    ck_assert_str_eq(
        h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sha256");
    TCase *tc = tcase_create("digest");
    tcase_add_test(tc, test_digest_matches_fips_examples);
    tcase_add_test(tc, test_digest_is_the_same_fed_in_any_split);
    tcase_add_test(tc, test_digest_of_a_million_a);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
