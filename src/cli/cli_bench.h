/* cli_bench.h: what 'tela bench' (cmd_bench.c), its batched-decoding
 * test (bench_parallel.c) and its speculative tests (bench_spec.c) share: the options, the token ids, and the
 * output row (a table line or a JSON object, bench_output.c). */
#ifndef TELA_CLI_CLI_BENCH_H
#define TELA_CLI_CLI_BENCH_H

#include "cli/cli.h"

typedef struct cli_bench_opts {
    long long n_gen[8];
    int n_gen_n;
    long long parallel[8];       /* --parallel: sequences decoding at once */
    int n_parallel;              /* 0: no batched tests */
    double temp;                 /* --temp: the batched tests' sampling temperature (0: greedy) */
    long long reps;
    int n_threads;
    tela_kv_type kv_type;
    uint64_t mem_budget;
    const char *device;
    tela_spec_params spec;       /* --spec: method NONE for no speculative tests */
    const char *draft_path;      /* --draft */
    int32_t draft_vocab;         /* --draft-vocab: tela_model_params.mtp_draft_vocab */
    long long draft_max[8];      /* --draft-max k,... */
    int n_draft_max;
    const char *prompt;          /* --prompt: the text the speculative tests continue */
} cli_bench_opts;

/* What every row of the output carries. */
typedef struct cli_bench_table {
    int json;
    int threads;
    const char *cpu, *isa, *model_type;
    const tela_model_info *info;
} cli_bench_table;

/* A fixed pseudo-random sequence of token ids in the vocabulary. */
void cli_bench_fill_tokens(int32_t *ids, int n, int32_t n_vocab);
/* Prints one test's row from the sums of its speeds over reps runs. */
void cli_bench_row(const cli_bench_table *t, const char *name, int n_prompt, int n_gen, int depth, int parallel,
                   double sum, double sum2, long long reps);
/* The --parallel tests: 0, or 1 after printing an error. */
int cli_bench_parallel(tela_model *m, const cli_bench_opts *o, const cli_bench_table *t);
/* The prompt of the speculative tests (--prompt, tokenized; or repeated
 * pseudo-random ids for a model without a tokenizer): malloc'd, *np ids;
 * NULL after printing an error. */
int32_t *cli_bench_spec_prompt(tela_model *m, const cli_bench_opts *o, size_t *np);
/* o->draft_path loaded as o asks and checked against m (the same
 * vocabulary); NULL after printing why. (bench_spec.c) */
tela_model *cli_bench_load_draft(const tela_model *m, const cli_bench_opts *o);
/* The --spec tests (bench_spec.c): 0, or 1 after printing an error. */
int cli_bench_spec(tela_model *m, const cli_bench_opts *o, const cli_bench_table *t);

#endif
