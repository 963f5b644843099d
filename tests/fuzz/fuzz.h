/* fuzz.h — what the fuzz targets share: the libFuzzer entry points, a check
 * that aborts (so both libFuzzer and the plain replay driver report it as a
 * crash), and loading the GPT-2 tokenizer once per process.
 *
 * Each fuzz_*.c defines LLVMFuzzerInitialize and LLVMFuzzerTestOneInput.
 * Linked with -fsanitize=fuzzer, libFuzzer's main drives them; linked with
 * replay_main.c (a plain gcc build, see test_fuzz_regressions.sh) they replay
 * the committed seeds and regression inputs under `make check`.
 *
 * Single-threaded: libFuzzer calls a target from one thread. */
#ifndef GPT2D_FUZZ_H
#define GPT2D_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/settings.h"
#include "fleet/fleet.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An oracle violation is a finding: say what broke and abort, which libFuzzer
 * turns into a crash artifact and the replay driver into a failed test. */
#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: fuzz check failed: %s: ", __FILE__,        \
                    __LINE__, #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Where vocab.json and merges.txt live: $GPT2D_FUZZ_TOKENIZER (a directory),
 * else $GPT2D_TEST_DATA/tokenizer (what `make check` exports), else
 * tests/data/tokenizer under the current directory. */
/* The models the API's endpoints answer from: the tiny fixture model
 * ($GPT2D_FUZZ_MODEL, or $GPT2D_TEST_DATA/models/tiny), one thread, one
 * slot; `cfg` must outlive the fleet. */
static inline fleet *fuzz_tiny_fleet(settings *cfg)
{
    char dir[2048];
    const char *env = getenv("GPT2D_FUZZ_MODEL");
    const char *data = getenv("GPT2D_TEST_DATA");
    if (env != NULL && env[0] != '\0')
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/models/tiny",
                 data != NULL && data[0] != '\0' ? data : "tests/data");
    char *argv[] = { "gpt2d",   "--model", dir,           "--threads", "1",
                     "--slots", "1",       "--log-level", "error",     NULL };
    gpt2d_error err;
    fleet *f = NULL;
    int rc = settings_load(cfg, 9, argv, &err) == SETTINGS_RUN ? 0 : -1;
    if (rc == 0) {
        log_set_level(cfg->log_level);
        rc = fleet_create(&f, cfg, NULL, &err);
    }
    if (rc != 0) {
        fprintf(stderr,
                "fuzz: cannot serve the model in %s: %s\n"
                "fuzz: set GPT2D_FUZZ_MODEL to the tiny fixture model "
                "(make check's tests/data/models/tiny)\n",
                dir, err.message);
        exit(EXIT_FAILURE);
    }
    return f;
}

static inline tokenizer *fuzz_load_tokenizer(void)
{
    char dir[2048], vocab[4096], merges[4096];
    const char *env = getenv("GPT2D_FUZZ_TOKENIZER");
    const char *data = getenv("GPT2D_TEST_DATA");
    if (env != NULL && env[0] != '\0')
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/tokenizer",
                 data != NULL && data[0] != '\0' ? data : "tests/data");
    snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
    snprintf(merges, sizeof merges, "%s/merges.txt", dir);
    tokenizer *tok = NULL;
    gpt2d_error err;
    if (tokenizer_load(&tok, vocab, merges, &err) != 0) {
        fprintf(stderr,
                "fuzz: cannot load the tokenizer from %s: %s\n"
                "fuzz: set GPT2D_FUZZ_TOKENIZER to a directory holding "
                "vocab.json and merges.txt (tests/data/fetch-tokenizer.sh "
                "makes one)\n",
                dir, err.message);
        exit(EXIT_FAILURE);
    }
    return tok;
}

#endif
