/* cli.h: the subcommands of the tela command-line tool, the small helpers
 * they share (option parsing, token lists: cli_util.c), and what the
 * generating commands run and chat share (options, loading: cli_gen.c). */
#ifndef TELA_CLI_CLI_H
#define TELA_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "tela/tela.h"

int tela_cmd_inspect(int argc, char **argv);
int tela_cmd_run(int argc, char **argv);
int tela_cmd_logits(int argc, char **argv);
int tela_cmd_tokenize(int argc, char **argv);
int tela_cmd_detokenize(int argc, char **argv);
int tela_cmd_convert(int argc, char **argv);
int tela_cmd_quantize(int argc, char **argv);
int tela_cmd_perplexity(int argc, char **argv);
int tela_cmd_chat(int argc, char **argv);
int tela_cmd_bench(int argc, char **argv);
int tela_cmd_prune_plan(int argc, char **argv);
int tela_cmd_serve(int argc, char **argv);

/* Parses "1,2,3" (spaces allowed) into a malloc'd array. Returns 0 on
 * success, prints an error and returns -1 otherwise. */
int cli_parse_token_list(const char *s, int32_t **out, size_t *n);
/* Parses an integer / float option value; prints an error naming opt on failure. */
int cli_parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out);
int cli_parse_float(const char *opt, const char *s, double *out);
/* --profile or --profile=json: 1 or 2 into *out (and 1 returned), 0 when
 * opt is neither, -1 after printing an error (another --profile=...). */
int cli_parse_profile(const char *cmd, const char *opt, int *out);
/* The profile report of a session on stderr. */
void cli_print_profile(tela_session *s, int mode);
/* --kv-type's value: "f16", "f32" or "q8_0". 0, or -1 after printing an error. */
int cli_parse_kv_type(const char *cmd, const char *s, tela_kv_type *out);


/* The value of the option argv[*i], advancing *i to it; NULL after printing
 * "needs a value". */
const char *cli_option_value(const char *cmd, int argc, char **argv, int *i);
/* Prints the error for an option the command does not know; returns 2. */
int cli_unknown_option(const char *cmd, const char *opt);
/* Seconds on a monotonic clock. */
double cli_now(void);

/* ---- shared by run and chat (cli_gen.c) */
/* The demo model's file name in models/. */
#define CLI_DEFAULT_MODEL_NAME "tela-kjv-q8_0.gguf"
/* A sampling option (--temp, --top-k, --seed, ...): 1 when opt is one (val
 * used), 0 when it is not, -1 after printing an error. */
int cli_parse_sampling(const char *cmd, const char *opt, const char *val, tela_sampler_params *sp, uint64_t *seed,
                       int *have_seed);
void cli_print_sampling_help(FILE *f);
uint64_t cli_random_seed(void);
const char *cli_stop_name(tela_stop_reason r); /* cmd_run.c */
/* The model to use when -m is not given (see tela run --help), or NULL. */
const char *cli_default_model(void);
/* A whole text file (at most 1 MiB, no NUL bytes), malloc'd; NULL after
 * printing an error. */
char *cli_read_text_file(const char *cmd, const char *path);

/* --mem-budget's value, "8G", "512M", "1000000" bytes or "80%" of the
 * model's device memory, into bytes: 0, or -1 after printing an error. */
int cli_mem_budget(const char *cmd, const char *s, const tela_model *model, uint64_t *out);

/* --skip-layers: at most this many layers. */
#define CLI_MAX_SKIP 1024
/* Parses a --skip-layers list into out[CLI_MAX_SKIP]: 0, or -1 after
 * printing an error. */
int cli_parse_skip_layers(const char *cmd, const char *s, int32_t *out, size_t *n);

/* The options run and chat both take. */
typedef struct cli_gen_opts {
    const char *model_path;     /* -m; NULL until cli_gen_resolve_model */
    const char *system;         /* --system */
    const char *template_file;  /* --template-file */
    long long n_predict;        /* -n (-1: no limit) */
    long long n_threads;        /* -t (0: all cores) */
    long long n_ctx;            /* -c (0: the model's) */
    const char *device;         /* --device (NULL: the default) */
    int32_t skip_layers[CLI_MAX_SKIP];  /* --skip-layers */
    size_t n_skip_layers;
    tela_kv_type kv_type;       /* --kv-type */
    const char *mem_budget;     /* --mem-budget, resolved when the session is made */
    int profile;                /* --profile: 1 a table, 2 JSON (--profile=json); on stderr at the end */
    tela_sampler_params sampler;
    uint64_t seed;              /* --seed, when have_seed */
    int have_seed;
    tela_spec_params spec;      /* --spec, --draft-max, --spec-ngram-min/max */
    const char *draft_path;     /* --draft MODEL */
    int32_t draft_vocab;        /* --draft-vocab: tela_model_params.mtp_draft_vocab */
    long long tensor_parallel;  /* --tensor-parallel (0: none) */
} cli_gen_opts;

/* The defaults, with the command's default reply length. */
void cli_gen_opts_init(cli_gen_opts *o, long long n_predict);
/* The help lines of the options cli_gen_parse_option takes beyond the
 * model, the reply length and sampling (threads, context, device, ...). */
void cli_gen_print_help(FILE *f);
/* Parses argv[*i] when it is one of those options (advancing *i past its
 * value): 1 when it was, 0 when not, -1 after printing an error. */
int cli_gen_parse_option(const char *cmd, int argc, char **argv, int *i, cli_gen_opts *o);
/* Without -m, the default model (and a line naming it): 0, or -1 after
 * printing an error. */
int cli_gen_resolve_model(const char *cmd, cli_gen_opts *o);
/* What run and chat load, in the order they need it; cli_gen_free frees it. */
typedef struct cli_gen {
    char *template_src;            /* --template-file's text, or NULL */
    tela_model *model;
    const tela_model_info *info;
    tela_session *session;         /* after cli_gen_start_session */
    int profile;                   /* the session is profiled: the report is printed by cli_gen_free */
    tela_model *draft_model;       /* --draft, and its session (of the target's context) */
    tela_session *draft_session;
    tela_spec_params spec;         /* what cli_gen_params points the generation at */
} cli_gen;
/* Reads --template-file and loads the model (and --draft's) with o's
 * threads: 0, or -1 after printing an error. */
int cli_gen_load(const char *cmd, const cli_gen_opts *o, cli_gen *g);
/* The session (and the draft model's), with o's context length: 0, or -1
 * after printing an error. */
int cli_gen_start_session(const char *cmd, const cli_gen_opts *o, cli_gen *g);
void cli_gen_free(cli_gen *g);
/* The on_token callback of both: streams each piece to stdout; user, when
 * not NULL, is a volatile sig_atomic_t flag that stops generating once set. */
int cli_print_piece(void *user, int32_t token, const char *piece, size_t len);
/* Generation parameters: o's length and sampler, with a random seed drawn
 * when none was given (printed when sampling), and g's speculative
 * decoding when asked for. */
tela_generate_params cli_gen_params(const char *cmd, cli_gen_opts *o);
void cli_gen_set_spec(cli_gen *g, tela_generate_params *gp);
/* The help lines of the speculative-decoding options (run, chat, bench). */
void cli_print_spec_help(FILE *f);
/* A speculative-decoding option (--spec, --draft, --draft-max,
 * --spec-ngram-min, --spec-ngram-max): 1 when opt is one (val used), 0 when
 * it is not, -1 after printing an error. */
int cli_parse_spec(const char *cmd, const char *opt, const char *val, tela_spec_params *sp, const char **draft_path,
                   int32_t *draft_vocab);
/* Checks the combination (--draft with --spec ngram, ...): 0, or -1 after
 * printing an error. */
int cli_check_spec(const char *cmd, tela_spec_params *sp, const char *draft_path);
/* The --spec name of a method. */
const char *cli_spec_method_name(tela_spec_method m);
/* " | speculative: ..." for a timing line (acceptance, tokens per
 * verification step) into buf; "" without verification steps. */
void cli_spec_summary(char *buf, size_t cap, int32_t steps, int32_t drafted, int32_t accepted, int32_t tokens);

#endif
