/* cmd_detokenize.c: 'tela detokenize': token ids back to text with a model's
 * own tokenizer (GGUF file or tokenizer.json directory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela detokenize -m MODEL --tokens 1,2,3 [options]\n\n"
            "Prints the text the token ids stand for, followed by a newline.\n"
            "MODEL is a GGUF file (a vocab-only one is enough) or a directory with tokenizer.json.\n\n"
            "options:\n"
            "  -m, --model PATH      GGUF file or Hugging Face tokenizer directory\n"
            "  -t, --tokens LIST     token ids separated by commas (a JSON array works too)\n"
            "  --skip-special        leave out special tokens (BOS, EOS, <|im_start|>...)\n"
            "  -h, --help            show this help\n");
}

int tela_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL;
    bool skip_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-t") || !strcmp(a, "--tokens")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tela detokenize: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
            else tokens = argv[++i];
        } else if (!strcmp(a, "--skip-special")) {
            skip_special = true;
        } else {
            fprintf(stderr, "tela detokenize: unknown option '%s' (see tela detokenize --help)\n", a);
            return 2;
        }
    }
    if (!model || !tokens) {
        fprintf(stderr, "tela detokenize: -m MODEL and --tokens LIST are required (see tela detokenize --help)\n");
        return 2;
    }
    int32_t *ids;
    size_t n;
    if (cli_parse_token_list(tokens, &ids, &n) != 0) return 2;
    tela_vocab *v;
    if (tela_vocab_load(model, &v) != TELA_OK) {
        fprintf(stderr, "tela detokenize: %s\n", tela_last_error());
        free(ids);
        return 1;
    }
    char *text;
    size_t len;
    int rc = 0;
    if (tela_vocab_detokenize(v, ids, n, skip_special, &text, &len) != TELA_OK) {
        fprintf(stderr, "tela detokenize: %s\n", tela_last_error());
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
        free(text);
    }
    tela_vocab_free(v);
    free(ids);
    return rc;
}
