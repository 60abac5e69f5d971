/* cli_gen.c: what the generating commands, tela run and tela chat, share:
 * their common options (model, reply length, threads, context, chat
 * template, sampling) and help text, the default model rule, the seed,
 * reading a template file, and loading the model and the session with the
 * messages both print. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tela/tela.h"

#define TEMPLATE_MAX_BYTES (1 << 20)

static const char *const cli_sampling_help =
    "      --temp T             temperature (default %.2f; 0 = greedy)\n"
    "      --top-k K            keep the K most likely tokens (default %d; 0 = off)\n"
    "      --top-p P            nucleus sampling threshold (default %.2f; 1 = off)\n"
    "      --min-p P            drop tokens below P x the top probability (default %.2f; 0 = off)\n"
    "      --repeat-penalty X   penalize repeated tokens, llama.cpp style (default %.2f = off)\n"
    "      --repeat-last-n N    tokens the penalties look back over (default %d; -1 = all)\n"
    "      --frequency-penalty X, --presence-penalty X\n"
    "                           OpenAI-style penalties (default 0 = off)\n"
    "      --seed S             random seed (default: random, printed to stderr)\n";

void cli_print_sampling_help(FILE *f) {
    tela_sampler_params d = tela_sampler_default_params();
    fprintf(f, cli_sampling_help, (double)d.temperature, d.top_k, (double)d.top_p, (double)d.min_p,
            (double)d.repeat_penalty, d.repeat_last_n);
}

/* Whether opt is one of names (NULL-terminated): 0 if not, -1 (after a
 * message) if it is but has no value, 1 if it is. */
static int option_in(const char *cmd, const char *opt, const char *val, const char *const *names) {
    int known = 0;
    for (const char *const *o = names; *o; o++) known |= !strcmp(opt, *o);
    if (!known) return 0;
    if (!val) {
        fprintf(stderr, "tela %s: %s needs a value (see tela %s --help)\n", cmd, opt, cmd);
        return -1;
    }
    return 1;
}

int cli_parse_sampling(const char *cmd, const char *opt, const char *val, tela_sampler_params *sp, uint64_t *seed,
                       int *have_seed) {
    static const char *const names[] = {"--top-k", "--repeat-last-n", "--seed", "--temp", "--top-p", "--min-p",
                                        "--repeat-penalty", "--frequency-penalty", "--presence-penalty", NULL};
    const int known = option_in(cmd, opt, val, names);
    if (known <= 0) return known;
    long long iv;
    double fv;
    if (!strcmp(opt, "--top-k")) {
        if (cli_parse_int(opt, val, 0, INT32_MAX, &iv)) return -1;
        sp->top_k = (int32_t)iv;
    } else if (!strcmp(opt, "--repeat-last-n")) {
        if (cli_parse_int(opt, val, -1, INT32_MAX, &iv)) return -1;
        sp->repeat_last_n = (int32_t)iv;
    } else if (!strcmp(opt, "--seed")) {
        if (cli_parse_int(opt, val, 0, INT64_MAX, &iv)) return -1;
        *seed = (uint64_t)iv;
        *have_seed = 1;
    } else {
        if (cli_parse_float(opt, val, &fv)) return -1;
        if (!strcmp(opt, "--temp")) sp->temperature = (float)fv;
        else if (!strcmp(opt, "--top-p")) sp->top_p = (float)fv;
        else if (!strcmp(opt, "--min-p")) sp->min_p = (float)fv;
        else if (!strcmp(opt, "--frequency-penalty")) sp->frequency_penalty = (float)fv;
        else if (!strcmp(opt, "--presence-penalty")) sp->presence_penalty = (float)fv;
        else {
            if (!(fv > 0.0)) {
                fprintf(stderr, "tela %s: --repeat-penalty must be positive\n", cmd);
                return -1;
            }
            sp->repeat_penalty = (float)fv;
        }
    }
    return 1;
}

uint64_t cli_random_seed(void) {
    uint64_t seed = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&seed, sizeof seed, 1, f) != 1) seed = 0;
        fclose(f);
    }
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    }
    return seed & 0xFFFFFFFFULL; /* short enough to retype */
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The model in dir: the demo model by name, else the alphabetically first
 * *q8_0.gguf, else the first *.gguf. 1 when found (path in buf). */
static int model_in_dir(const char *dir, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", dir, CLI_DEFAULT_MODEL_NAME);
    if (is_file(buf)) return 1;
    DIR *d = opendir(dir);
    if (!d) return 0;
    char best_q8[256] = "", best_any[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || !ends_with(nm, ".gguf") || strlen(nm) >= sizeof best_q8) continue;
        if (ends_with(nm, "q8_0.gguf") && (!best_q8[0] || strcmp(nm, best_q8) < 0)) strcpy(best_q8, nm);
        if (!best_any[0] || strcmp(nm, best_any) < 0) strcpy(best_any, nm);
    }
    closedir(d);
    const char *pick = best_q8[0] ? best_q8 : best_any;
    if (!pick[0]) return 0;
    snprintf(buf, cap, "%s/%s", dir, pick);
    return is_file(buf);
}

/* model_in_dir, with the path made canonical for the message that names it. */
static int find_model_in_dir(const char *dir, char *buf, size_t cap) {
    char found[PATH_MAX + 300], real[PATH_MAX];
    if (!model_in_dir(dir, found, sizeof found)) return 0;
    snprintf(buf, cap, "%s", realpath(found, real) ? real : found);
    return 1;
}

/* The default model rule (for -m left out): $TELA_MODEL when set (set but
 * empty: no default); else models/ of the source tree the binary was built
 * in (build/bin/tela -> ../../models); else ./models. */
const char *cli_default_model(void) {
    static char path[PATH_MAX + 300];
    const char *env = getenv("TELA_MODEL");
    if (env) return env[0] ? env : NULL;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            char dir[PATH_MAX + 32];
            snprintf(dir, sizeof dir, "%s/../../models", exe);
            if (find_model_in_dir(dir, path, sizeof path)) return path;
        }
    }
    if (find_model_in_dir("models", path, sizeof path)) return path;
    return NULL;
}

char *cli_read_text_file(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tela %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(TEMPLATE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, TEMPLATE_MAX_BYTES + 1, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (!buf || err || n > TEMPLATE_MAX_BYTES || memchr(buf, '\0', n)) {
        fprintf(stderr, "tela %s: %s: %s\n", cmd, path,
                !buf ? "out of memory" : err ? "read error" : n > TEMPLATE_MAX_BYTES ? "larger than 1 MiB" : "contains NUL bytes");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* ------------------------------------------------- the common options */

void cli_gen_opts_init(cli_gen_opts *o, long long n_predict) {
    memset(o, 0, sizeof *o);
    o->n_predict = n_predict;
    o->sampler = tela_sampler_default_params();
    o->spec = tela_spec_default_params();
}

void cli_print_spec_help(FILE *f) {
    const tela_spec_params d = tela_spec_default_params();
    fprintf(f,
            "      --spec ngram|draft|mtp\n"
            "                           speculative decoding: drafts verified in one forward pass; the output\n"
            "                           is the model's own (greedy: identical; sampling: the same distribution)\n"
            "                           ngram = prompt lookup (what followed the last n-gram earlier on)\n"
            "                           draft = a draft model (--draft) with the same vocabulary\n"
            "                           mtp   = the model's own multi-token-prediction block (Qwen3.5)\n"
            "      --draft MODEL        the draft model (implies --spec draft)\n"
            "      --draft-max K        tokens drafted per verification step, 1..%d (default %d)\n"
            "      --draft-vocab N      mtp: draft only among the first N token ids (byte-level BPE ids\n"
            "                           run roughly from frequent to rare), a head of N rows: cheaper\n"
            "                           drafts, the same output (default 0: the whole vocabulary)\n"
            "      --spec-ngram-min N, --spec-ngram-max N\n"
            "                           n-gram sizes prompt lookup matches, longest first (default %d..%d)\n",
            TELA_SPEC_MAX_DRAFT, d.draft_max, d.ngram_min, d.ngram_max);
}

int cli_parse_spec(const char *cmd, const char *opt, const char *val, tela_spec_params *sp, const char **draft_path,
                   int32_t *draft_vocab) {
    static const char *const names[] = {"--spec", "--draft", "--draft-max", "--draft-vocab", "--spec-ngram-min",
                                        "--spec-ngram-max", NULL};
    const int known = option_in(cmd, opt, val, names);
    if (known <= 0) return known;
    long long v;
    if (!strcmp(opt, "--spec")) {
        if (!strcmp(val, "ngram")) sp->method = TELA_SPEC_NGRAM;
        else if (!strcmp(val, "draft")) sp->method = TELA_SPEC_DRAFT;
        else if (!strcmp(val, "mtp")) sp->method = TELA_SPEC_MTP;
        else if (!strcmp(val, "none")) sp->method = TELA_SPEC_NONE;
        else {
            fprintf(stderr, "tela %s: --spec: '%s' is not ngram, draft, mtp or none\n", cmd, val);
            return -1;
        }
    } else if (!strcmp(opt, "--draft")) {
        *draft_path = val;
    } else if (!strcmp(opt, "--draft-max")) {
        if (cli_parse_int(opt, val, 1, TELA_SPEC_MAX_DRAFT, &v)) return -1;
        sp->draft_max = (int32_t)v;
    } else if (!strcmp(opt, "--draft-vocab")) {
        if (cli_parse_int(opt, val, 0, INT32_MAX, &v)) return -1;
        *draft_vocab = (int32_t)v;
    } else {
        if (cli_parse_int(opt, val, 1, 64, &v)) return -1;
        if (!strcmp(opt, "--spec-ngram-min")) sp->ngram_min = (int32_t)v;
        else sp->ngram_max = (int32_t)v;
    }
    return 1;
}

const char *cli_spec_method_name(tela_spec_method m) {
    switch (m) {
    case TELA_SPEC_NGRAM: return "ngram";
    case TELA_SPEC_DRAFT: return "draft";
    case TELA_SPEC_MTP: return "mtp";
    default: return "none";
    }
}

int cli_check_spec(const char *cmd, tela_spec_params *sp, const char *draft_path) {
    if (draft_path && sp->method == TELA_SPEC_NONE) sp->method = TELA_SPEC_DRAFT;
    if (draft_path && sp->method != TELA_SPEC_DRAFT) {
        fprintf(stderr, "tela %s: --draft goes with --spec draft, not --spec %s\n", cmd,
                cli_spec_method_name(sp->method));
        return -1;
    }
    if (sp->method == TELA_SPEC_DRAFT && !draft_path) {
        fprintf(stderr, "tela %s: --spec draft needs the draft model: --draft MODEL\n", cmd);
        return -1;
    }
    if (sp->ngram_min > sp->ngram_max) {
        fprintf(stderr, "tela %s: --spec-ngram-min %d is above --spec-ngram-max %d\n", cmd, sp->ngram_min,
                sp->ngram_max);
        return -1;
    }
    return 0;
}

void cli_spec_summary(char *buf, size_t cap, int32_t steps, int32_t drafted, int32_t accepted, int32_t tokens) {
    if (steps <= 0) {
        if (cap) buf[0] = '\0';
        return;
    }
    snprintf(buf, cap, " | speculative: %d of %d drafts accepted (%.1f%%), %.2f tokens per verification step (%d steps)",
             accepted, drafted, drafted ? 100.0 * accepted / drafted : 0.0, (double)tokens / steps, steps);
}

void cli_gen_print_help(FILE *f) {
    fprintf(f,
            "  -t, --threads N          computation threads (default: all cores)\n"
            "  -c, --ctx-size N         context length (default: the model's, at most 4096)\n"
            "      --device DEV         cpu, cuda, cuda:N or a list (default: the GPU if any, else the CPU)\n"
            "      --kv-type T          KV cache precision: f16, f32 or q8_0 (the CPU only)\n"
            "                           (default: f16 on a GPU, f32 on the CPU)\n"
            "      --skip-layers LIST   bypass these decoder layers (comma-separated; see tela prune-plan)\n"
            "      --tensor-parallel N  split each layer over N ranks (Llama, Qwen3.5), on\n"
            "                           a GPU each when there are N (NCCL), else the ranks take\n"
            "                           turns on one device; --device cuda:0,cuda:1,.. picks them\n"
            "      --mem-budget B       memory the session may take: 8G, 512M, or 80%% of the device's\n"
            "                           (default: what is available; more fails with the numbers)\n"
            "      --profile[=json]     time every phase (operations per kind and weight type, sampling,\n"
            "                           detokenization) and print a table (or JSON) on stderr at the end\n");
    cli_print_spec_help(f);
}

int cli_gen_parse_option(const char *cmd, int argc, char **argv, int *i, cli_gen_opts *o) {
    const char *a = argv[*i];
    const int pr = cli_parse_profile(cmd, a, &o->profile);
    if (pr) return pr;
    int r = cli_parse_sampling(cmd, a, *i + 1 < argc ? argv[*i + 1] : NULL, &o->sampler, &o->seed, &o->have_seed);
    if (!r) r = cli_parse_spec(cmd, a, *i + 1 < argc ? argv[*i + 1] : NULL, &o->spec, &o->draft_path, &o->draft_vocab);
    if (r) {
        if (r > 0) ++*i;
        return r;
    }
    static const char *const with_value[] = {"-m", "--model", "--system", "--template-file", "-n", "--n-predict",
                                             "-t", "--threads", "-c", "--ctx-size", "--device", "--kv-type",
                                             "--skip-layers", "--mem-budget", "--tensor-parallel", NULL};
    int known = 0;
    for (const char *const *p = with_value; *p; p++) known |= !strcmp(a, *p);
    if (!known) return 0;
    const char *val = cli_option_value(cmd, argc, argv, i);
    if (!val) return -1;
#define IS(s) (!strcmp(a, s))
    if (IS("-m") || IS("--model")) o->model_path = val;
    else if (IS("--system")) o->system = val;
    else if (IS("--template-file")) o->template_file = val;
    else if (IS("-n") || IS("--n-predict")) {
        if (cli_parse_int(a, val, -1, INT32_MAX, &o->n_predict)) return -1;
    } else if (IS("-t") || IS("--threads")) {
        if (cli_parse_int(a, val, 1, 1024, &o->n_threads)) return -1;
    } else if (IS("--device")) {
        o->device = val;
    } else if (IS("--mem-budget")) {
        o->mem_budget = val;
    } else if (IS("--skip-layers")) {
        if (cli_parse_skip_layers(cmd, val, o->skip_layers, &o->n_skip_layers)) return -1;
    } else if (IS("--tensor-parallel")) {
        if (cli_parse_int(a, val, 1, 64, &o->tensor_parallel)) return -1;
    } else if (IS("--kv-type")) {
        if (cli_parse_kv_type(cmd, val, &o->kv_type)) return -1;
    } else if (cli_parse_int(a, val, 0, INT32_MAX, &o->n_ctx)) { /* -c, --ctx-size */
        return -1;
    }
#undef IS
    return 1;
}

int cli_gen_resolve_model(const char *cmd, cli_gen_opts *o) {
    if (o->model_path) return 0;
    o->model_path = cli_default_model();
    if (!o->model_path) {
        fprintf(stderr, "tela %s: -m MODEL is required: no default model was found (set TELA_MODEL, or see "
                        "tela run --help)\n", cmd);
        return -1;
    }
    fprintf(stderr, "tela %s: using the default model %s\n", cmd, o->model_path);
    return 0;
}

int cli_print_piece(void *user, int32_t token, const char *piece, size_t len) {
    (void)token;
    if (len) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
    return user && *(volatile sig_atomic_t *)user != 0;
}

/* ------------------------------------------------- loading and freeing */

int cli_gen_load(const char *cmd, const cli_gen_opts *o, cli_gen *g) {
    if (o->template_file && !(g->template_src = cli_read_text_file(cmd, o->template_file))) return -1;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = (int)o->n_threads;
    mp.device = o->device;
    mp.skip_layers = o->skip_layers;
    mp.n_skip_layers = o->n_skip_layers;
    mp.verbose = 1;
    mp.load_mtp = o->spec.method == TELA_SPEC_MTP;
    mp.mtp_draft_vocab = o->draft_vocab;
    mp.tensor_parallel = (int)o->tensor_parallel;
    if (tela_model_load(o->model_path, &mp, &g->model) != TELA_OK) {
        fprintf(stderr, "tela %s: %s\n", cmd, tela_last_error());
        return -1;
    }
    g->info = tela_model_get_info(g->model);
    g->spec = o->spec;
    if (cli_check_spec(cmd, &g->spec, o->draft_path)) return -1;
    if (o->draft_path) {
        mp.skip_layers = NULL;
        mp.n_skip_layers = 0;
        mp.tensor_parallel = 0; /* the draft model stays whole */
        if (tela_model_load(o->draft_path, &mp, &g->draft_model) != TELA_OK) {
            fprintf(stderr, "tela %s: the draft model: %s\n", cmd, tela_last_error());
            return -1;
        }
        if (tela_spec_check_draft(g->model, g->draft_model) != TELA_OK) {
            fprintf(stderr, "tela %s: %s\n", cmd, tela_last_error());
            return -1;
        }
    }
    return 0;
}

int cli_gen_start_session(const char *cmd, const cli_gen_opts *o, cli_gen *g) {
    tela_session_params ssp = tela_session_default_params();
    ssp.n_ctx = (int32_t)o->n_ctx;
    ssp.kv_type = o->kv_type;
    if (o->mem_budget && cli_mem_budget(cmd, o->mem_budget, g->model, &ssp.mem_budget)) return -1;
    if (tela_session_create(g->model, &ssp, &g->session) != TELA_OK) {
        fprintf(stderr, "tela %s: %s\n", cmd, tela_last_error());
        return -1;
    }
    if (o->profile) tela_session_profile_start(g->session);
    g->profile = o->profile;
    if (g->draft_model) {
        ssp.n_ctx = tela_session_n_ctx(g->session);
        ssp.mem_budget = 0;
        if (tela_session_create(g->draft_model, &ssp, &g->draft_session) != TELA_OK) {
            fprintf(stderr, "tela %s: the draft model's session: %s\n", cmd, tela_last_error());
            return -1;
        }
        g->spec.draft = g->draft_session;
    }
    return 0;
}

void cli_gen_free(cli_gen *g) {
    if (g->session && g->profile) cli_print_profile(g->session, g->profile);
    tela_session_free(g->session);
    tela_session_free(g->draft_session);
    tela_model_free(g->draft_model);
    tela_model_free(g->model);
    free(g->template_src);
    memset(g, 0, sizeof *g);
}

tela_generate_params cli_gen_params(const char *cmd, cli_gen_opts *o) {
    if (!o->have_seed) o->seed = cli_random_seed();
    o->sampler.seed = o->seed;
    if (o->sampler.temperature > 0.0f) fprintf(stderr, "tela %s: seed %llu\n", cmd, (unsigned long long)o->seed);
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = o->n_predict < 0 ? 0 : (int32_t)o->n_predict;
    gp.sampler = o->sampler;
    return gp;
}

void cli_gen_set_spec(cli_gen *g, tela_generate_params *gp) {
    gp->spec = g->spec.method != TELA_SPEC_NONE ? &g->spec : NULL;
}
