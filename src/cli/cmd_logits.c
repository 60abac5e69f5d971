/* cmd_logits.c: 'tela logits': runs the model over given token ids and
 * writes the logits as raw float32 little-endian: the last position's
 * (n_vocab floats) or, with --all, every position's (n x n_vocab). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tela/tela.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela logits -m MODEL --tokens 1,2,3 [--all] -o FILE [-t THREADS] [--device DEV]\n\n"
            "Runs MODEL over the token ids and writes float32 little-endian logits to FILE:\n"
            "the last position's (vocab floats), or with --all every position's\n"
            "(positions x vocab, position-major).\n\n"
            "options:\n"
            "  -m, --model PATH     GGUF file, .safetensors file or Hugging Face checkpoint directory\n"
            "      --tokens LIST    token ids, comma-separated\n"
            "      --all            write the logits of every position\n"
            "  -o, --output FILE    where to write ('-' for stdout)\n"
            "  -t, --threads N      computation threads (default: all cores)\n"
            "      --device DEV     cpu, cuda, cuda:N or a list (default: the GPU when there is one)\n"
            "  -h, --help           this help\n");
}

/* Writes n floats as little-endian regardless of the host's order. */
static int write_f32_le(FILE *f, const float *v, size_t n) {
    unsigned char buf[4096];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        buf[used++] = (unsigned char)u;
        buf[used++] = (unsigned char)(u >> 8);
        buf[used++] = (unsigned char)(u >> 16);
        buf[used++] = (unsigned char)(u >> 24);
        if (used == sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, used, f) != used) return -1;
            used = 0;
        }
    }
    return 0;
}

int tela_cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *out_path = NULL, *tokens_arg = NULL;
    const char *device = NULL;
    int all = 0;
    long long n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!val) goto missing;
            model_path = val;
            i++;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!val) goto missing;
            out_path = val;
            i++;
        } else if (!strcmp(a, "--tokens")) {
            if (!val) goto missing;
            tokens_arg = val;
            i++;
        } else if (!strcmp(a, "--all")) {
            all = 1;
        } else if (!strcmp(a, "--device")) {
            if (!val) goto missing;
            device = val;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(a, val, 1, 1024, &n_threads)) return 2;
            i++;
        } else {
            fprintf(stderr, "tela logits: unknown option '%s' (see tela logits --help)\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "tela logits: %s needs a value\n", a);
        return 2;
    }
    if (!model_path || !out_path || !tokens_arg) {
        fprintf(stderr, "tela logits: -m MODEL, --tokens LIST and -o FILE are required (see tela logits --help)\n");
        return 2;
    }
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    if (cli_parse_token_list(tokens_arg, &tokens, &n_tokens)) return 2;
    if (n_tokens > (size_t)INT32_MAX) {
        free(tokens);
        fprintf(stderr, "tela logits: too many tokens\n");
        return 2;
    }

    int rc = 1;
    tela_model *model = NULL;
    tela_session *session = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = (int)n_threads;
    mp.device = device;
    mp.verbose = 1;
    if (tela_model_load(model_path, &mp, &model) != TELA_OK) {
        fprintf(stderr, "tela logits: %s\n", tela_last_error());
        goto done;
    }
    const tela_model_info *info = tela_model_get_info(model);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = (int32_t)n_tokens;
    if (tela_session_create(model, &sp, &session) != TELA_OK) {
        fprintf(stderr, "tela logits: %s\n", tela_last_error());
        goto done;
    }
    size_t n_rows = all ? n_tokens : 1;
    logits = malloc(n_rows * (size_t)info->n_vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "tela logits: out of memory for %zu x %d logits\n", n_rows, info->n_vocab);
        goto done;
    }
    if (tela_session_eval(session, tokens, (int32_t)n_tokens, logits, all) != TELA_OK) {
        fprintf(stderr, "tela logits: %s\n", tela_last_error());
        goto done;
    }
    f = strcmp(out_path, "-") ? fopen(out_path, "wb") : stdout;
    if (!f) {
        perror(out_path);
        fprintf(stderr, "tela logits: cannot open %s for writing\n", out_path);
        goto done;
    }
    if (write_f32_le(f, logits, n_rows * (size_t)info->n_vocab) || fflush(f)) {
        fprintf(stderr, "tela logits: write error on %s\n", out_path);
        goto done;
    }
    fprintf(stderr, "tela logits: wrote %zu x %d float32 logits to %s\n", n_rows, info->n_vocab, out_path);
    rc = 0;
done:
    if (f && f != stdout && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "tela logits: write error on %s\n", out_path);
        rc = 1;
    }
    free(logits);
    free(tokens);
    tela_session_free(session);
    tela_model_free(model);
    return rc;
}
