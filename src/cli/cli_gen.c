/* cli_gen.c: what the generating commands, tela run and tela chat, share:
 * the sampling options and their help text, the seed, the default model
 * rule and reading a template file. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
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

int cli_parse_sampling(const char *cmd, const char *opt, const char *val, tela_sampler_params *sp, uint64_t *seed,
                       int *have_seed) {
    static const char *const names[] = {"--top-k", "--repeat-last-n", "--seed", "--temp", "--top-p", "--min-p",
                                        "--repeat-penalty", "--frequency-penalty", "--presence-penalty", NULL};
    int known = 0;
    for (const char *const *o = names; *o; o++) known |= !strcmp(opt, *o);
    if (!known) return 0;
    if (!val) {
        fprintf(stderr, "tela %s: %s needs a value (see tela %s --help)\n", cmd, opt, cmd);
        return -1;
    }
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
