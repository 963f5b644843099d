/* main.c — start-up of the gpt2d daemon.
 *
 * For now: parse the command line, load the model and tokenizer once, print a
 * one-line summary.  The HTTP server arrives with the daemon issue. */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2d/error.h"
#include "gpt2d/model.h"
#include "gpt2d/tokenizer.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: gpt2d --model DIR [options]\n"
            "Serve a GPT-2 checkpoint (Hugging Face layout) over HTTP.\n"
            "\n"
            "  -m, --model DIR   directory with config.json, model.safetensors,\n"
            "                    vocab.json and merges.txt\n"
            "  -h, --help        show this help and exit\n"
            "  -V, --version     show the version and exit\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *model_dir = NULL;
    int c;
    opterr = 0;                 /* one line of our own per usage error */
    while ((c = getopt_long(argc, argv, ":m:hV", options, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'h': usage(stdout); return EXIT_SUCCESS;
        case 'V': printf("%s\n", PACKAGE_STRING); return EXIT_SUCCESS;
        case ':':
            fprintf(stderr, "gpt2d: option '%s' needs a value (see gpt2d --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "gpt2d: unrecognized option '%s' (see gpt2d --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpt2d: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (model_dir == NULL) {
        fprintf(stderr, "gpt2d: --model DIR is required\n");
        return 2;
    }

    gpt2d_error err = {{0}};
    model m;
    if (model_load(&m, model_dir, &err) != 0) {
        fprintf(stderr, "gpt2d: %s\n", err.message);
        return EXIT_FAILURE;
    }
    char vocab_path[4096], merges_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.json", model_dir);
    snprintf(merges_path, sizeof merges_path, "%s/merges.txt", model_dir);
    tokenizer *tok = NULL;
    if (tokenizer_load(&tok, vocab_path, merges_path, &err) != 0) {
        fprintf(stderr, "gpt2d: %s\n", err.message);
        model_free(&m);
        return EXIT_FAILURE;
    }
    if (tokenizer_vocab_size(tok) > m.config.vocab_size) {
        fprintf(stderr, "gpt2d: %s: tokenizer has %zu tokens but the model only %zu\n",
                model_dir, tokenizer_vocab_size(tok), m.config.vocab_size);
        tokenizer_free(tok);
        model_free(&m);
        return EXIT_FAILURE;
    }
    const model_config *cfg = &m.config;
    printf("gpt2d: loaded %s: %zu layers, %zu heads, %zu wide, context %zu, "
           "vocabulary %zu, %.1f MB of weights\n",
           m.name, cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->n_ctx,
           cfg->vocab_size, (double)m.weight_bytes / 1e6);
    tokenizer_free(tok);
    model_free(&m);
    return EXIT_SUCCESS;
}
