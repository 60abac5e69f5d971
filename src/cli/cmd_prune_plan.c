/* cmd_prune_plan.c: 'tela prune-plan': which decoder layers change the
 * hidden state least on a calibration text (tela_layer_cosines), sorted,
 * and a pruning plan for K removals that keeps a hybrid model's balance
 * (tela_prune_plan), printed as the --skip-layers list to run it with. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tela/tela.h"

#define PLAN_DEFAULT_PROMPTS 32
#define PLAN_DEFAULT_CTX 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela prune-plan -m MODEL -f CALIBRATION.txt [--prompts N] [--prune K] [-c CTX] [--json]\n"
            "                       [-t THREADS] [--device DEV] [--skip-layers LIST]\n\n"
            "Runs the calibration prompts (the text's non-empty lines) and, for every decoder\n"
            "layer, averages the cosine similarity between the hidden state entering the layer\n"
            "and the one leaving it (last position of each prompt, in float64). The layer that\n"
            "changes the state least (highest cosine) is the safest to remove. Prints every\n"
            "layer with its kind, mean cosine and importance (1 - cosine), least important\n"
            "first, and a plan for K removals: the --skip-layers list to run the model with.\n"
            "A hybrid model keeps its balance: about one attention layer per three Gated\n"
            "DeltaNet layers removed.\n\n"
            "options:\n"
            "  -m, --model PATH       GGUF file, .safetensors file or Hugging Face checkpoint directory\n"
            "  -f, --file FILE        the calibration text, one prompt per non-empty line\n"
            "      --prompts N        at most N prompts (default %d)\n"
            "      --prune K          layers to remove in the plan (default: 1 in 8, at least 1)\n"
            "  -c, --ctx-size N       at most N tokens of each prompt (default %d)\n"
            "      --json             one JSON object instead of the table\n"
            "  -t, --threads N        computation threads (default: all cores)\n"
            "      --device DEV       cpu, cuda, cuda:N or a list (default: the GPU when there is one)\n"
            "      --skip-layers LIST layers already removed (comma-separated)\n"
            "  -h, --help             this help\n",
            PLAN_DEFAULT_PROMPTS, PLAN_DEFAULT_CTX);
}

typedef struct ranked {
    int32_t layer;
    double cosine;
} ranked;

static int by_cosine_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->cosine != y->cosine) return x->cosine < y->cosine ? 1 : -1;
    return (x->layer > y->layer) - (x->layer < y->layer);
}

static const char *kind_name(int kind) { return kind == TELA_LAYER_DELTANET ? "deltanet" : "attention"; }

int tela_cmd_prune_plan(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *device = NULL, *skip_arg = NULL;
    long long n_prompts = PLAN_DEFAULT_PROMPTS, prune = -1, n_ctx = PLAN_DEFAULT_CTX, n_threads = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        }
        if (IS("--json")) {
            json = 1;
            continue;
        }
        if (!(IS("-m") || IS("--model") || IS("-f") || IS("--file") || IS("--prompts") || IS("--prune") ||
              IS("-c") || IS("--ctx-size") || IS("-t") || IS("--threads") || IS("--device") || IS("--skip-layers"))) {
            fprintf(stderr, "tela prune-plan: unknown option '%s' (see tela prune-plan --help)\n", a);
            return 2;
        }
        const char *val = cli_option_value("prune-plan", argc, argv, &i);
        if (!val) return 2;
        if (IS("-m") || IS("--model")) model_path = val;
        else if (IS("-f") || IS("--file")) text_path = val;
        else if (IS("--device")) device = val;
        else if (IS("--skip-layers")) skip_arg = val;
        else if (IS("--prompts")) {
            if (cli_parse_int(a, val, 1, 1 << 20, &n_prompts)) return 2;
        } else if (IS("--prune")) {
            if (cli_parse_int(a, val, 0, 1 << 20, &prune)) return 2;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_int(a, val, 1, 1 << 20, &n_ctx)) return 2;
        } else if (cli_parse_int(a, val, 1, 1024, &n_threads)) {
            return 2;
        }
#undef IS
    }
    if (!model_path || !text_path) {
        fprintf(stderr, "tela prune-plan: -m MODEL and -f CALIBRATION.txt are required (see tela prune-plan --help)\n");
        return 2;
    }
    static int32_t skip[CLI_MAX_SKIP];
    size_t n_skip = 0;
    if (skip_arg && cli_parse_skip_layers("prune-plan", skip_arg, skip, &n_skip)) return 2;

    int rc = 1;
    char *text = cli_read_text_file("prune-plan", text_path);
    tela_model *m = NULL;
    tela_session *s = NULL;
    int32_t **prompts = NULL, *lens = NULL, *plan = NULL;
    double *cos = NULL;
    ranked *order = NULL;
    int np = 0;
    if (!text) goto done;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = (int)n_threads;
    mp.device = device;
    mp.skip_layers = skip;
    mp.n_skip_layers = n_skip;
    if (tela_model_load(model_path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "tela prune-plan: %s\n", tela_last_error());
        goto done;
    }
    const tela_model_info *info = tela_model_get_info(m);
    if (!info->has_tokenizer) {
        fprintf(stderr, "tela prune-plan: %s has no tokenizer to read the calibration text with\n", model_path);
        goto done;
    }
    /* the prompts: the non-empty lines, at most n_ctx tokens each */
    prompts = calloc((size_t)n_prompts, sizeof *prompts);
    lens = calloc((size_t)n_prompts, sizeof *lens);
    if (!prompts || !lens) goto oom;
    for (char *line = text; *line && np < n_prompts;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        size_t n = 0;
        if (len > 0) {
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)(len + 8));
            if (!ids) goto oom;
            if (tela_tokenize(m, line, len, 1, 0, ids, len + 8, &n) != TELA_OK || n == 0) {
                free(ids);
            } else {
                prompts[np] = ids;
                lens[np++] = (int32_t)(n > (size_t)n_ctx ? (size_t)n_ctx : n);
            }
        }
        line = end ? end + 1 : line + len;
    }
    if (np == 0) {
        fprintf(stderr, "tela prune-plan: %s has no non-empty line to calibrate with\n", text_path);
        goto done;
    }
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = (int32_t)n_ctx;
    if (tela_session_create(m, &sp, &s) != TELA_OK) {
        fprintf(stderr, "tela prune-plan: %s\n", tela_last_error());
        goto done;
    }
    const int L = info->n_layer;
    cos = calloc((size_t)L, sizeof *cos);
    order = calloc((size_t)L, sizeof *order);
    plan = calloc((size_t)L + 1, sizeof *plan);
    if (!cos || !order || !plan) goto oom;
    if (tela_layer_cosines(s, (const int32_t *const *)prompts, lens, np, cos) != TELA_OK) {
        fprintf(stderr, "tela prune-plan: %s\n", tela_last_error());
        goto done;
    }
    int n_order = 0;
    for (int l = 0; l < L; l++)
        if (!tela_model_layer_skipped(m, l)) order[n_order++] = (ranked){l, cos[l]};
    qsort(order, (size_t)n_order, sizeof *order, by_cosine_desc);
    int k = prune >= 0 ? (int)prune : (n_order + 7) / 8;
    if (k > n_order) {
        fprintf(stderr, "tela prune-plan: --prune %d: only %d layers are left to remove\n", k, n_order);
        goto done;
    }
    int32_t n_attn = 0;
    if (tela_prune_plan(m, cos, k, plan, &n_attn) != TELA_OK) {
        fprintf(stderr, "tela prune-plan: %s\n", tela_last_error());
        goto done;
    }
    const bool too_many = k * 5 > n_order;
    if (json) {
        printf("{\"model\": \"%s\", \"n_layer\": %d, \"prompts\": %d, \"layers\": [", model_path, L, np);
        for (int i = 0; i < n_order; i++)
            printf("%s{\"layer\": %d, \"kind\": \"%s\", \"mean_cosine\": %.9f, \"importance\": %.9f}", i ? ", " : "",
                   order[i].layer, kind_name(tela_model_layer_kind(m, order[i].layer)), order[i].cosine,
                   1.0 - order[i].cosine);
        printf("], \"prune\": %d, \"prune_attention\": %d, \"skip_layers\": [", k, n_attn);
        for (int i = 0; i < k; i++) printf("%s%d", i ? ", " : "", plan[i]);
        printf("], \"warning\": %s}\n", too_many ? "\"more than 20% of the layers\"" : "null");
    } else {
        printf("%s: %d layers, %d prompt%s (last position of each)\n", model_path, L, np, np == 1 ? "" : "s");
        printf("%5s %6s  %-9s  %12s  %12s\n", "rank", "layer", "kind", "mean cosine", "importance");
        for (int i = 0; i < n_order; i++)
            printf("%5d %6d  %-9s  %12.6f  %12.6f\n", i + 1, order[i].layer,
                   kind_name(tela_model_layer_kind(m, order[i].layer)), order[i].cosine, 1.0 - order[i].cosine);
        printf("plan for %d removal%s (%d attention, %d Gated DeltaNet): --skip-layers ", k, k == 1 ? "" : "s",
               n_attn, k - n_attn);
        for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", plan[i]);
        printf("\n");
    }
    if (too_many)
        fprintf(stderr, "tela prune-plan: warning: removing %d of %d layers (more than 20%%): quality usually "
                        "collapses past that; measure it (tela perplexity --skip-layers ...)\n", k, n_order);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "tela prune-plan: out of memory\n");
done:
    for (int i = 0; prompts && i < np; i++) free(prompts[i]);
    free(prompts);
    free(lens);
    free(cos);
    free(order);
    free(plan);
    free(text);
    tela_session_free(s);
    tela_model_free(m);
    return rc;
}
