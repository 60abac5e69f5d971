/* bench_output.c: what 'tela bench' (cmd_bench.c) and its batched-decoding
 * tests (bench_parallel.c) both use: the token ids of the runs and one row
 * of the output (a table line or a JSON object). */
#include <math.h>
#include <stdio.h>

#include "cli/cli_bench.h"
#include "tela/tela.h"

/* Token ids for the runs: a fixed pseudo-random sequence within the vocab
 * (the speed does not depend on which tokens they are). */
void cli_bench_fill_tokens(int32_t *ids, int n, int32_t n_vocab) {
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        ids[i] = (int32_t)((s >> 8) % (uint32_t)n_vocab);
    }
}

void cli_bench_row(const cli_bench_table *t, const char *name, int n_prompt, int n_gen, int depth, int parallel,
                   double sum, double sum2, long long reps) {
    const tela_model_info *info = t->info;
    const double avg = sum / (double)reps;
    const double var = reps > 1 ? (sum2 - sum * avg) / (double)(reps - 1) : 0.0;
    const double sd = var > 0 ? sqrt(var) : 0.0;
    if (t->json) {
        printf("{\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_parallel\": %d, "
               "\"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"threads\": %d, \"model_type\": \"%s\", \"model_size\": %llu, "
               "\"model_n_params\": %lld, \"cpu_info\": \"%s\", \"isa\": \"%s\", \"device\": \"%s\", "
               "\"build\": \"tela %s\", \"repetitions\": %lld}\n",
               name, n_prompt, n_gen, depth, parallel, avg, sd, t->threads, t->model_type,
               (unsigned long long)info->n_bytes, (long long)info->n_params, t->cpu, t->isa, info->device,
               tela_version(), reps);
    } else {
        char size[32], params[32], ts[48];
        double mib = (double)info->n_bytes / (1024.0 * 1024.0);
        if (mib >= 1024) snprintf(size, sizeof size, "%.2f GiB", mib / 1024);
        else snprintf(size, sizeof size, "%.2f MiB", mib);
        double pn = (double)info->n_params;
        if (pn >= 1e9) snprintf(params, sizeof params, "%.2f B", pn / 1e9);
        else if (pn >= 1e6) snprintf(params, sizeof params, "%.2f M", pn / 1e6);
        else snprintf(params, sizeof params, "%.2f K", pn / 1e3);
        snprintf(ts, sizeof ts, "%.2f ± %.2f", avg, sd);
        /* width 21: "±" is two bytes but one column */
        printf("| %-16s | %10s | %8s | %14s | %21s |\n", t->model_type, size, params, name, ts);
    }
    fflush(stdout);
}

