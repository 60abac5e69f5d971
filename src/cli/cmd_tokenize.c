/* cmd_tokenize.c: 'tela tokenize': text to token ids with a model's own
 * tokenizer (a GGUF file, vocab-only ones too, or a directory holding
 * tokenizer.json), and a throughput benchmark of the encoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/mapped_file.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela tokenize -m MODEL (-p TEXT | -f FILE) [options]\n\n"
            "Prints the token ids of the text, space-separated on one line.\n"
            "MODEL is a GGUF file (a vocab-only one is enough) or a directory with tokenizer.json.\n\n"
            "options:\n"
            "  -m, --model PATH      GGUF file or Hugging Face tokenizer directory\n"
            "  -p, --prompt TEXT     the text to tokenize\n"
            "  -f, --file FILE       read the text from FILE ('-' = standard input)\n"
            "  --json                print the ids as one JSON array on the last line\n"
            "  --add-special         add BOS/EOS as the model's metadata says (default: no)\n"
            "  --no-parse-special    treat special tokens written in the text as plain text\n"
            "  --show-pieces         also print each token with the text it stands for\n"
            "  --bench               time the encoder on the text and print MB/s\n"
            "  -h, --help            show this help\n");
}

static double clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_seconds(void) { return clock_seconds(CLOCK_MONOTONIC); }
/* CPU time of this thread: on a busy machine it tells more than wall time */
static double cpu_seconds(void) { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }

/* Tokenizes into a malloc'd array, growing it when the first guess is short. */
static tela_status tokenize_all(const tela_vocab *v, const char *text, size_t len, bool add_special,
                                bool parse_special, int32_t **ids, size_t *n) {
    size_t cap = len + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        *ids = malloc(cap * sizeof **ids);
        if (!*ids) return tela_errorf(TELA_ERR_NOMEM, "out of memory for %zu tokens", cap);
        tela_status st = tela_vocab_tokenize(v, text, len, add_special, parse_special, *ids, cap, n);
        if (st == TELA_OK) return TELA_OK;
        free(*ids);
        *ids = NULL;
        if (st != TELA_ERR_ARG || *n <= cap) return st;
        cap = *n;
    }
    return tela_errorf(TELA_ERR_INTERNAL, "token count changed between two runs");
}

/* A piece for people: valid UTF-8 as it is, other bytes and controls escaped. */
static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else if (c < 0x80) putchar(c);
        else {
            size_t k = 1;
            while (k < 4 && i + k < n && ((unsigned char)s[i + k] & 0xC0) == 0x80) k++;
            /* print the sequence raw only when it is a whole character */
            size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            if (want && want == k) fwrite(s + i, 1, k, stdout);
            else
                for (size_t j = 0; j < k; j++) printf("\\x%02x", (unsigned char)s[i + j]);
            i += k;
            continue;
        }
        i++;
    }
}

int tela_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool json = false, add_special = false, parse_special = true, show_pieces = false, bench = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-p") || !strcmp(a, "--prompt") ||
                   !strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tela tokenize: %s needs a value\n", a);
                return 2;
            }
            const char *val = argv[++i];
            if (a[1] == 'm' || !strcmp(a, "--model")) model = val;
            else if (a[1] == 'p' || !strcmp(a, "--prompt")) prompt = val;
            else file = val;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--add-special")) {
            add_special = true;
        } else if (!strcmp(a, "--no-parse-special")) {
            parse_special = false;
        } else if (!strcmp(a, "--show-pieces")) {
            show_pieces = true;
        } else if (!strcmp(a, "--bench")) {
            bench = true;
        } else {
            fprintf(stderr, "tela tokenize: unknown option '%s' (see tela tokenize --help)\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "tela tokenize: -m MODEL is required (see tela tokenize --help)\n");
        return 2;
    }
    if ((prompt != NULL) == (file != NULL)) {
        fprintf(stderr, "tela tokenize: give the text with either -p TEXT or -f FILE\n");
        return 2;
    }

    char *text = NULL;
    size_t len;
    if (file && !strcmp(file, "-")) file = "/dev/stdin";
    if (file) {
        if (tela_read_file(file, &text, &len) != TELA_OK) {
            fprintf(stderr, "tela tokenize: %s\n", tela_last_error());
            return 1;
        }
    } else {
        len = strlen(prompt);
    }
    const char *input = text ? text : prompt;

    tela_vocab *v;
    if (tela_vocab_load(model, &v) != TELA_OK) {
        fprintf(stderr, "tela tokenize: %s\n", tela_last_error());
        free(text);
        return 1;
    }

    int rc = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = now_seconds(), c0 = cpu_seconds();
    tela_status st = tokenize_all(v, input, len, add_special, parse_special, &ids, &n);
    double t1 = now_seconds(), c1 = cpu_seconds();
    if (st != TELA_OK) {
        fprintf(stderr, "tela tokenize: %s\n", tela_last_error());
        rc = 1;
    } else if (bench) {
        /* the first pass fills the word cache; the second runs from it */
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        double t2 = now_seconds(), c2 = cpu_seconds();
        st = tokenize_all(v, input, len, add_special, parse_special, &ids2, &n2);
        double t3 = now_seconds(), c3 = cpu_seconds();
        free(ids2);
        double mb = (double)len / 1e6;
        printf("tokenizer: %s / %s, %d tokens\n", tela_vocab_model_name(v), tela_vocab_pre_name(v),
               (int)tela_vocab_n_tokens(v));
        printf("text: %zu bytes -> %zu tokens (%.3f bytes/token)\n", len, n, n ? (double)len / (double)n : 0.0);
        printf("first pass:  %.3f s  %.2f MB/s   (CPU time %.3f s: %.2f MB/s)\n", t1 - t0, mb / (t1 - t0), c1 - c0,
               mb / (c1 - c0));
        if (st == TELA_OK)
            printf("second pass: %.3f s  %.2f MB/s   (CPU time %.3f s: %.2f MB/s, warm word cache)\n", t3 - t2,
                   mb / (t3 - t2), c3 - c2, mb / (c3 - c2));
    } else {
        if (show_pieces) {
            char piece[4096];
            for (size_t i = 0; i < n; i++) {
                size_t pl = tela_vocab_token_bytes(v, ids[i], false, piece, sizeof piece);
                if (pl > sizeof piece) pl = sizeof piece;
                printf("%8d  '", (int)ids[i]);
                print_escaped(piece, pl);
                printf("'\n");
            }
        }
        if (json) putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", (int)ids[i]);
        printf(json ? "]\n" : "\n");
    }
    free(ids);
    tela_vocab_free(v);
    free(text);
    return rc;
}
