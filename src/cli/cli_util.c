/* cli_util.c: option and option-value parsing shared by the subcommands,
 * and the clock they time with. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

int cli_parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    if (!s) {
        fprintf(stderr, "tela: %s needs a value\n", opt);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tela: %s: '%s' is not an integer in [%lld, %lld]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, double *out) {
    if (!s) {
        fprintf(stderr, "tela: %s needs a value\n", opt);
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "tela: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

const char *cli_option_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "tela %s: %s needs a value (see tela %s --help)\n", cmd, argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

int cli_unknown_option(const char *cmd, const char *opt) {
    fprintf(stderr, "tela %s: unknown option '%s' (see tela %s --help)\n", cmd, opt, cmd);
    return 2;
}

int cli_parse_token_list(const char *s, int32_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (!s) {
        fprintf(stderr, "tela: --tokens needs a value such as 1,2,3\n");
        return -1;
    }
    size_t cap = 16, cnt = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '[' || *p == '\n') p++;
        if (*p == '\0' || *p == ']') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "tela: --tokens: cannot read a token id at '%.20s'\n", p);
            free(ids);
            return -1;
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *nb = realloc(ids, cap * sizeof *ids);
            if (!nb) {
                free(ids);
                return -1;
            }
            ids = nb;
        }
        ids[cnt++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (*p == ',') p++;
        else if (*p != '\0' && *p != ']') {
            fprintf(stderr, "tela: --tokens: expected ',' at '%.20s'\n", p);
            free(ids);
            return -1;
        }
    }
    if (cnt == 0) {
        fprintf(stderr, "tela: --tokens: no token ids given\n");
        free(ids);
        return -1;
    }
    *out = ids;
    *n = cnt;
    return 0;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_parse_kv_type(const char *cmd, const char *s, tela_kv_type *out) {
    if (s && !strcmp(s, "f16")) *out = TELA_KV_F16;
    else if (s && !strcmp(s, "f32")) *out = TELA_KV_F32;
    else if (s && (!strcmp(s, "q8_0") || !strcmp(s, "Q8_0"))) *out = TELA_KV_Q8_0;
    else {
        fprintf(stderr, "tela %s: --kv-type takes f16, f32 or q8_0, not '%s'\n", cmd, s ? s : "");
        return -1;
    }
    return 0;
}

int cli_parse_skip_layers(const char *cmd, const char *s, int32_t *out, size_t *n) {
    int32_t *ids = NULL;
    size_t k = 0;
    if (cli_parse_token_list(s, &ids, &k)) return -1;
    if (k > CLI_MAX_SKIP) {
        fprintf(stderr, "tela %s: --skip-layers: %zu layers (at most %d)\n", cmd, k, CLI_MAX_SKIP);
        free(ids);
        return -1;
    }
    memcpy(out, ids, k * sizeof *ids);
    *n = k;
    free(ids);
    return 0;
}

int cli_mem_budget(const char *cmd, const char *s, const tela_model *model, uint64_t *out) {
    char *end = NULL;
    const double v = s ? strtod(s, &end) : -1.0;
    if (!s || end == s || !(v > 0.0) || v > 1e18) goto bad;
    double scale = 1.0;
    if (*end == '%') {
        uint64_t f = 0, total = 0;
        if (tela_model_device_memory(model, &f, &total) != TELA_OK) {
            fprintf(stderr, "tela %s: %s\n", cmd, tela_last_error());
            return -1;
        }
        if (v > 100.0) goto bad;
        *out = (uint64_t)((double)total * v / 100.0);
        end++;
    } else {
        switch (*end) {
        case 'k': case 'K': scale = 1024.0, end++; break;
        case 'm': case 'M': scale = 1024.0 * 1024.0, end++; break;
        case 'g': case 'G': scale = 1024.0 * 1024.0 * 1024.0, end++; break;
        case 't': case 'T': scale = 1024.0 * 1024.0 * 1024.0 * 1024.0, end++; break;
        default: break;
        }
        if (*end == 'i' || *end == 'B') end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
        *out = (uint64_t)(v * scale);
    }
    if (*end != '\0' || *out == 0) goto bad;
    return 0;
bad:
    fprintf(stderr, "tela %s: --mem-budget takes bytes (8G, 512M, 1000000) or a share of the device's memory (80%%), "
                    "not '%s'\n", cmd, s ? s : "");
    return -1;
}

int cli_parse_profile(const char *cmd, const char *opt, int *out) {
    if (!strcmp(opt, "--profile")) {
        *out = 1;
        return 1;
    }
    if (strncmp(opt, "--profile=", 10) != 0) return 0;
    if (!strcmp(opt + 10, "json")) *out = 2;
    else if (!strcmp(opt + 10, "table")) *out = 1;
    else {
        fprintf(stderr, "tela %s: --profile takes =json or =table, not '%s'\n", cmd, opt + 10);
        return -1;
    }
    return 1;
}

void cli_print_profile(tela_session *s, int mode) {
    char *r = mode ? tela_session_profile_report(s, mode == 2) : NULL;
    if (r) fputs(r, stderr);
    free(r);
}
