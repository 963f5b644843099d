/* bench_keys.c — how long the API keys file takes to load, and one
 * request's key lookup, as the file grows.
 *
 *     bench_keys [N...]        (default: 10000 40000 100000)
 *
 * For each N, writes a keys file of N keys of 51 bytes (sk- and 48 hex
 * digits; every third key with a name and limits) into TMPDIR, loads it
 * with http_keys_load as the daemon does at start and on SIGHUP, then
 * authorizes every key once and a key not in the file as many times, and
 * prints the load time and the mean time of one lookup of each kind.
 * The file is removed afterwards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/http_keys.h"
#include "core/monotonic.h"

/* Key i: a fixed-width, well-mixed 48-hex-digit secret. */
static void key_of(size_t i, char out[64])
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1), a, b, c;
    x ^= x >> 31;
    a = x * 0xbf58476d1ce4e5b9ull;
    b = (a ^ (a >> 27)) * 0x94d049bb133111ebull;
    c = b ^ (b >> 31) ^ (uint64_t)i;
    snprintf(out, 64, "sk-%016llx%016llx%016llx", (unsigned long long)a,
             (unsigned long long)b, (unsigned long long)c);
}

static int write_file(const char *path, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    char key[64];
    for (size_t i = 0; i < n; i++) {
        key_of(i, key);
        if (i % 3 == 0)
            fprintf(f, "%s tokens-per-minute=%zu max-queued=%zu\n", key,
                    1000 + i, 1 + i % 100);
        else
            fprintf(f, "%s\n", key);
    }
    return fclose(f);
}

static int run(size_t n)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/bench-keys-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return -1;
    }
    close(fd);
    if (write_file(path, n) != 0) {
        perror(path);
        unlink(path);
        return -1;
    }
    settings cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.api_key_file = path;
    http_keys *k = NULL;
    gpt2d_error err = { { 0 } };
    double t0 = monotonic_seconds();
    int rc = http_keys_load(&k, &cfg, &err);
    double load = monotonic_seconds() - t0;
    unlink(path);
    if (rc != 0) {
        fprintf(stderr, "bench_keys: %s\n", err.message);
        return -1;
    }
    char header[80], key[64];
    api_caller who;
    size_t found = 0;
    t0 = monotonic_seconds();
    for (size_t i = 0; i < n; i++) {
        key_of(i, key);
        snprintf(header, sizeof header, "Bearer %s", key);
        found += http_keys_authorize(k, header, &who) == HTTP_KEYS_MATCH;
    }
    double hit = (monotonic_seconds() - t0) / (double)n;
    key_of(n, key); /* the next key: not in the file */
    snprintf(header, sizeof header, "Bearer %s", key);
    size_t refused = 0;
    t0 = monotonic_seconds();
    for (size_t i = 0; i < n; i++)
        refused += http_keys_authorize(k, header, &who) == HTTP_KEYS_REFUSED;
    double miss = (monotonic_seconds() - t0) / (double)n;
    http_keys_free(k);
    if (found != n || refused != n) {
        fprintf(stderr,
                "bench_keys: %zu of %zu keys found, %zu of %zu "
                "misses refused\n",
                found, n, refused, n);
        return -1;
    }
    printf("%8zu keys  load %8.3f s   lookup: hit %9.2f us  miss %9.2f us\n", n,
           load, hit * 1e6, miss * 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    static const size_t defaults[] = { 10000, 40000, 100000 };
    int status = 0;
    if (argc < 2) {
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            status |= run(defaults[i]) != 0;
        return status;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        unsigned long long n = strtoull(argv[i], &end, 10);
        if (*end != '\0' || n == 0) {
            fprintf(stderr, "usage: bench_keys [N...]\n");
            return 2;
        }
        status |= run((size_t)n) != 0;
    }
    return status;
}
