/* test_bulk_digest.c — the weights' digest against an independent
 * implementation of its definition (bulk_digest.h: xxHash64's round on four
 * lanes, the length last; the vectors below come from a few lines of
 * Python big integers), and the promises the KV cache's identity rests on:
 * any one byte changed, anywhere, changes the digest, and so does the
 * length where the padding would hide it. */
#include "config.h"

#include "core/bulk_digest.h"
#include "test_util.h"

static void hex(const uint8_t d[BULK_DIGEST_BYTES],
                char out[2 * BULK_DIGEST_BYTES + 1])
{
    for (int i = 0; i < BULK_DIGEST_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* byte i is i·7 + 3: every length around a stripe's 32 bytes */
static const struct {
    size_t len;
    const char *digest;
} vectors[] = {
    { 0, "416d3b96e26193114febd4273daeb2c200000000000000007935147a4e86c861" },
    { 1, "b176abaec766be15d29c64e35b340e7f0000000000000000912f294d79d27a6d" },
    { 31, "031459e22dc516206fd0bbb2728eec9410c1c54202c5c7cd221335715610025f" },
    { 32, "5c7ba9cbf78d667a6fd0bbb2728eec9410c1c54202c5c7cd2213350f432bafa9" },
    { 33, "b2a0407ebb6e820f0f89e5162af8d7bf073c51042d7550bce7f18bd989a8e64e" },
    { 100, "aee1bb26f3e9e90ffb2fda25ca9b3a46227f45e51d0cdd7f13fd642dac9b71be" },
    { 1000,
      "9e67668d13cc3b80e1011d3808ab025298437652cb6dc121c95b22c8e30fe4e3" },
};

START_TEST(test_digest_matches_an_independent_implementation)
{
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
        uint8_t d[BULK_DIGEST_BYTES];
        char h[2 * BULK_DIGEST_BYTES + 1];
        bulk_digest(buf, vectors[v].len, d);
        hex(d, h);
        ck_assert_msg(strcmp(h, vectors[v].digest) == 0, "%zu bytes: %s",
                      vectors[v].len, h);
    }
}
END_TEST

/* A fine-tune may move one weight: every byte of a buffer of several
 * stripes, changed in its lowest and its highest bit, and the digest
 * differs from the original's (always, by the round's bijections, not by
 * luck). */
START_TEST(test_every_single_byte_changed_changes_the_digest)
{
    enum { N = 4096 + 13 };
    static unsigned char buf[N];
    for (size_t i = 0; i < N; i++)
        buf[i] = (unsigned char)(i * 31 + (i >> 8));
    uint8_t want[BULK_DIGEST_BYTES], got[BULK_DIGEST_BYTES];
    bulk_digest(buf, N, want);
    static const unsigned char flips[] = { 0x01, 0x80 };
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < N; i++) {
            buf[i] ^= flips[f];
            bulk_digest(buf, N, got);
            buf[i] ^= flips[f];
            ck_assert_msg(memcmp(got, want, sizeof got) != 0,
                          "byte %zu ^ 0x%02x: same digest", i, flips[f]);
        }
}
END_TEST

/* The last stripe is padded with zeros: trailing zero bytes are told
 * apart by the length alone. */
START_TEST(test_trailing_zeros_change_the_digest)
{
    unsigned char buf[64] = { 'a', 'b' };
    uint8_t d[40][BULK_DIGEST_BYTES];
    for (size_t n = 2; n < 40; n++)
        bulk_digest(buf, n, d[n]);
    for (size_t a = 2; a < 40; a++)
        for (size_t b = a + 1; b < 40; b++)
            ck_assert_msg(memcmp(d[a], d[b], BULK_DIGEST_BYTES) != 0,
                          "%zu and %zu bytes: same digest", a, b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bulk_digest");
    TCase *tc = tcase_create("digest");
    tcase_add_test(tc, test_digest_matches_an_independent_implementation);
    tcase_add_test(tc, test_every_single_byte_changed_changes_the_digest);
    tcase_add_test(tc, test_trailing_zeros_change_the_digest);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
