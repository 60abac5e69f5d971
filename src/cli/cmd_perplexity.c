/* cmd_perplexity.c: 'tela perplexity': the perplexity of a model on a text,
 * computed as llama.cpp's llama-perplexity computes it, so the two tools'
 * figures can be compared directly:
 *  - the whole text is tokenized once, adding BOS as the vocabulary says and
 *    not parsing special tokens;
 *  - it is cut into non-overlapping windows ("chunks") of CTX tokens (a
 *    partial last window is dropped) and each window is evaluated from an
 *    empty context; when the vocabulary adds BOS, the window's first token is
 *    replaced by BOS;
 *  - only the second half of each window is scored: the logits at positions
 *    CTX/2 .. CTX-2 predict tokens CTX/2+1 .. CTX-1, so every scored token has
 *    at least CTX/2 tokens of context;
 *  - PPL = exp(mean negative log-likelihood), and its error estimate is
 *    PPL * sqrt(var(nll) / (count - 1)).
 * stdout gets the running PPL after each chunk ("[1]12.3456,[2]...") and the
 * final line "Final estimate: PPL = X +/- E"; stderr gets a summary, an ETA
 * and (on a terminal) a progress bar. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tela/tela.h"

#define PPL_DEFAULT_CTX 512

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela perplexity -m MODEL (-f TEXT | --tokens-file FILE) [-c CTX] [--chunks N] [-t THREADS]\n"
            "                       [--device cpu|cuda|cuda:N]\n\n"
            "Measures the model's perplexity on a text with llama-perplexity's rules: the\n"
            "tokenized text is cut into windows of CTX tokens, each evaluated from an empty\n"
            "context (its first token replaced by BOS when the vocabulary adds BOS), and the\n"
            "second half of each window is scored. Prints the running perplexity after each\n"
            "window and 'Final estimate: PPL = X +/- E' to stdout. Needs at least 2 x CTX tokens.\n\n"
            "options:\n"
            "  -m, --model PATH       GGUF file, .safetensors file or Hugging Face checkpoint directory\n"
            "  -f, --file FILE        the text ('-' = standard input), tokenized with the model's tokenizer\n"
            "      --tokens-file FILE token ids instead of text (separated by spaces, commas or newlines),\n"
            "                         used as they are: no BOS is put in front (windows still start\n"
            "                         with BOS when the vocabulary adds BOS)\n"
            "  -c, --ctx-size N       window length in tokens (default %d)\n"
            "      --chunks N         score at most the first N windows (default: all)\n"
            "  -t, --threads N        computation threads (default: all cores)\n"
            "      --device DEV       cpu, cuda, cuda:N or a list (default: the GPU when there is one)\n"
            "      --skip-layers LIST bypass these decoder layers (comma-separated; see tela prune-plan)\n"
            "      --mem-budget B     memory the session may take: 8G, 512M, 80%% (default: what is available)\n"
            "      --kv-type T        KV cache precision: f16, f32 or q8_0 (the CPU only)\n"
            "                         (default: f16 on a GPU, f32 on the CPU)\n"
            "      --profile[=json]   time every phase and print a table (or JSON) on stderr at the end\n"
            "  -h, --help             this help\n",
            PPL_DEFAULT_CTX);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads a whole file (or stdin for "-") into a malloc'd NUL-terminated buffer. */
static int read_all(const char *path, char **out, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "tela perplexity: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) {
        fprintf(stderr, "tela perplexity: out of memory reading %s\n", path);
        return -1;
    }
    if (bad) {
        fprintf(stderr, "tela perplexity: read error on %s\n", path);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* Token ids separated by any mix of whitespace and commas (a JSON array's
 * brackets are skipped too), as 'tela tokenize' prints them. */
static int parse_token_file(const char *path, const char *s, int32_t **out, size_t *n_out) {
    size_t cap = 1024, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) goto nomem;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',' || *p == '[' || *p == ']') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
        if (v < 0 || errno || v > INT32_MAX) {
            fprintf(stderr, "tela perplexity: %s: cannot read a token id at byte %zu ('%.12s')\n", path,
                    (size_t)(p - s), p);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *nb = realloc(ids, 2 * cap * sizeof *ids);
            if (!nb) goto nomem;
            ids = nb;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    *n_out = n;
    return 0;
nomem:
    free(ids);
    fprintf(stderr, "tela perplexity: out of memory reading %s\n", path);
    return -1;
}

/* Whether tokenizing with add_special puts BOS first / EOS last, found by
 * tokenizing a short text both ways (the public API has no flag for it). */
static int vocab_adds(const tela_model *model, int32_t bos, int32_t eos, int *add_bos, int *add_eos) {
    int32_t with[16], without[16];
    size_t n_with = 0, n_without = 0;
    *add_bos = *add_eos = 0;
    if (tela_tokenize(model, "a", 1, 1, 0, with, 16, &n_with) != TELA_OK ||
        tela_tokenize(model, "a", 1, 0, 0, without, 16, &n_without) != TELA_OK)
        return -1;
    *add_bos = bos >= 0 && n_with > n_without && with[0] == bos;
    *add_eos = eos >= 0 && n_with > n_without && with[n_with - 1] == eos && !(n_with == 1 && *add_bos);
    return 0;
}

/* -log p(tok) from one position's logits, as llama-perplexity computes it
 * (max in float, sum of expf in double). */
static double token_nll(const float *logits, int32_t n_vocab, int32_t tok) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - max);
    return -((double)(logits[tok] - max) - log(sum));
}

static void progress_bar(int done, int total, double elapsed) {
    const int width = 30;
    int fill = total ? (int)((long long)done * width / total) : width;
    double eta = done ? elapsed / done * (total - done) : 0.0;
    fprintf(stderr, "\rperplexity: [");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d chunks, %.2f s/chunk, ETA %dm%02ds ", done, total, done ? elapsed / done : 0.0,
            (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

int tela_cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *tokens_path = NULL;
    const char *device = NULL, *mem_budget = NULL;
    tela_kv_type kv_type = TELA_KV_DEFAULT;
    int profile = 0;
    static int32_t skip[CLI_MAX_SKIP];
    size_t n_skip = 0;
    long long n_ctx = PPL_DEFAULT_CTX, max_chunks = -1, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        }
        const int pr = cli_parse_profile("perplexity", a, &profile);
        if (pr < 0) return 2;
        if (pr) continue;
        if (!(IS("-m") || IS("--model") || IS("-f") || IS("--file") || IS("--tokens-file") || IS("-c") ||
              IS("--ctx-size") || IS("--chunks") || IS("-t") || IS("--threads") || IS("--device") || IS("--skip-layers") || IS("--mem-budget") ||
              IS("--kv-type"))) {
            fprintf(stderr, "tela perplexity: unknown option '%s' (see tela perplexity --help)\n", a);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "tela perplexity: %s needs a value (see tela perplexity --help)\n", a);
            return 2;
        }
        i++;
        if (IS("-m") || IS("--model")) model_path = val;
        else if (IS("-f") || IS("--file")) text_path = val;
        else if (IS("--tokens-file")) tokens_path = val;
        else if (IS("--device")) device = val;
        else if (IS("--mem-budget")) mem_budget = val;
        else if (IS("--kv-type")) {
            if (cli_parse_kv_type("perplexity", val, &kv_type)) return 2;
        } else if (IS("--skip-layers")) {
            if (cli_parse_skip_layers("perplexity", val, skip, &n_skip)) return 2;
        }
        else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_int(a, val, 4, 1 << 20, &n_ctx)) return 2;
        } else if (IS("--chunks")) {
            if (cli_parse_int(a, val, 1, INT32_MAX, &max_chunks)) return 2;
        } else if (cli_parse_int(a, val, 1, 1024, &n_threads)) {
            return 2;
        }
#undef IS
    }
    if (!model_path) {
        fprintf(stderr, "tela perplexity: -m MODEL is required (see tela perplexity --help)\n");
        return 2;
    }
    if (!text_path == !tokens_path) {
        fprintf(stderr, "tela perplexity: give the text as either -f FILE or --tokens-file FILE\n");
        return 2;
    }

    int rc = 1;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *tokens = NULL, *chunk = NULL;
    size_t n_tokens = 0;
    float *logits = NULL;
    tela_model *model = NULL;
    tela_session *session = NULL;

    if (read_all(text_path ? text_path : tokens_path, &text, &text_len)) goto done;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = (int)n_threads;
    mp.device = device;
    mp.skip_layers = skip;
    mp.n_skip_layers = n_skip;
    if (tela_model_load(model_path, &mp, &model) != TELA_OK) {
        fprintf(stderr, "tela perplexity: %s\n", tela_last_error());
        goto done;
    }
    const tela_model_info *info = tela_model_get_info(model);
    const int32_t n_vocab = info->n_vocab;
    int add_bos = 0, add_eos = 0;
    if (info->has_tokenizer && vocab_adds(model, info->bos_token, info->eos_token, &add_bos, &add_eos)) {
        fprintf(stderr, "tela perplexity: %s\n", tela_last_error());
        goto done;
    }
    if (add_eos) {
        fprintf(stderr, "tela perplexity: %s: the tokenizer adds EOS to every text; perplexity windows assume it "
                        "does not (llama-perplexity refuses such models too)\n", model_path);
        goto done;
    }

    double t_tok = now_seconds();
    if (tokens_path) {
        if (parse_token_file(tokens_path, text, &tokens, &n_tokens)) goto done;
    } else {
        if (!info->has_tokenizer) {
            fprintf(stderr, "tela perplexity: %s has no tokenizer; give token ids with --tokens-file\n", model_path);
            goto done;
        }
        /* byte-level and SentencePiece vocabularies give at most one token
         * per byte (plus BOS); grow and retry if a tokenizer ever does not */
        size_t cap = text_len + 16;
        for (int attempt = 0; attempt < 2; attempt++) {
            free(tokens);
            tokens = malloc(cap * sizeof *tokens);
            if (!tokens) {
                fprintf(stderr, "tela perplexity: out of memory for %zu tokens\n", cap);
                goto done;
            }
            tela_status st = tela_tokenize(model, text, text_len, 1, 0, tokens, cap, &n_tokens);
            if (st == TELA_OK) break;
            if (st != TELA_ERR_ARG || n_tokens <= cap || attempt == 1) {
                fprintf(stderr, "tela perplexity: %s\n", tela_last_error());
                goto done;
            }
            cap = n_tokens;
        }
    }
    t_tok = now_seconds() - t_tok;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            fprintf(stderr, "tela perplexity: token id %d at position %zu is not below the vocabulary size %d\n",
                    tokens[i], i, n_vocab);
            goto done;
        }

    const int32_t ctx = (int32_t)n_ctx;
    if (n_tokens < 2 * (size_t)ctx) {
        fprintf(stderr, "tela perplexity: you need at least %d tokens to evaluate perplexity with a context of %d; "
                        "%s gives only %zu\n", 2 * ctx, ctx, text_path ? text_path : tokens_path, n_tokens);
        goto done;
    }
    size_t n_chunk_max = n_tokens / (size_t)ctx;
    if (n_chunk_max > INT32_MAX) n_chunk_max = INT32_MAX;
    int n_chunk = (int)(max_chunks > 0 && (size_t)max_chunks < n_chunk_max ? (size_t)max_chunks : n_chunk_max);
    const int32_t first = ctx / 2;

    fprintf(stderr, "tela perplexity: %s (%s, %s, %lld parameters), %zu tokens (tokenized in %.2f s), "
                    "%d chunks of %d tokens, scoring tokens %d..%d of each%s\n",
            model_path, info->name[0] ? info->name : info->arch, info->file_type, (long long)info->n_params,
            n_tokens, t_tok, n_chunk, ctx, first + 1, ctx - 1, add_bos ? ", BOS first" : "");
    if (info->n_ctx_train > 0 && ctx > info->n_ctx_train)
        fprintf(stderr, "tela perplexity: warning: the model was trained on only %d context tokens (-c %d)\n",
                info->n_ctx_train, ctx);

    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = ctx;
    sp.n_threads = (int)n_threads;
    sp.kv_type = kv_type;
    if (mem_budget && cli_mem_budget("perplexity", mem_budget, model, &sp.mem_budget)) goto done;
    if (tela_session_create(model, &sp, &session) != TELA_OK) {
        fprintf(stderr, "tela perplexity: %s\n", tela_last_error());
        goto done;
    }
    if (profile) tela_session_profile_start(session);
    chunk = malloc((size_t)ctx * sizeof *chunk);
    logits = malloc((size_t)ctx * (size_t)n_vocab * sizeof *logits);
    if (!chunk || !logits) {
        fprintf(stderr, "tela perplexity: out of memory for %d x %d logits\n", ctx, n_vocab);
        goto done;
    }

    const int tty = isatty(2);
    double nll = 0.0, nll2 = 0.0, t0 = now_seconds();
    long long count = 0;
    for (int c = 0; c < n_chunk; c++) {
        memcpy(chunk, tokens + (size_t)c * (size_t)ctx, (size_t)ctx * sizeof *chunk);
        if (add_bos) chunk[0] = info->bos_token;
        tela_session_reset(session);
        if (tela_session_eval(session, chunk, ctx, logits, 1) != TELA_OK) {
            if (tty) fputc('\n', stderr);
            fprintf(stderr, "tela perplexity: chunk %d: %s\n", c + 1, tela_last_error());
            goto done;
        }
        const double ts = profile ? now_seconds() : 0.0;
        for (int32_t j = first; j < ctx - 1; j++) {
            double v = token_nll(logits + (size_t)j * (size_t)n_vocab, n_vocab, chunk[j + 1]);
            nll += v;
            nll2 += v * v;
        }
        if (profile) tela_session_profile_add(session, "scoring (host)", now_seconds() - ts);
        count += ctx - first - 1;
        double elapsed = now_seconds() - t0;
        if (c == 0) {
            if (tty) fputc('\r', stderr);
            fprintf(stderr, "tela perplexity: %.2f seconds per pass - ETA %.2f minutes\n", elapsed,
                    elapsed * n_chunk / 60.0);
        }
        if (tty) progress_bar(c + 1, n_chunk, elapsed);
        printf("[%d]%.4f,", c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    if (tty) fputc('\n', stderr);
    printf("\n");

    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean);
    if (var > 0 && count > 1) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(var / (double)(count - 1)) * ppl);
    } else {
        printf("Final estimate: PPL = %.4f\n", ppl);
        fprintf(stderr, "tela perplexity: warning: no error estimate (the log-likelihoods have no spread)\n");
    }
    double secs = now_seconds() - t0;
    fprintf(stderr, "tela perplexity: %d chunks, %lld scored tokens in %.2f s (%.1f tokens/s evaluated)\n", n_chunk,
            count, secs, secs > 0 ? (double)n_chunk * ctx / secs : 0.0);
    rc = 0;
done:
    if (session && profile && rc == 0) cli_print_profile(session, profile);
    free(text);
    free(tokens);
    free(chunk);
    free(logits);
    tela_session_free(session);
    tela_model_free(model);
    return rc;
}
