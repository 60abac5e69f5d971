/* cli.h: the subcommands of the tela command-line tool and small helpers
 * they share (option parsing, token lists). */
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

/* Parses "1,2,3" (spaces allowed) into a malloc'd array. Returns 0 on
 * success, prints an error and returns -1 otherwise. */
int cli_parse_token_list(const char *s, int32_t **out, size_t *n);
/* Parses an integer / float option value; prints an error naming opt on failure. */
int cli_parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out);
int cli_parse_float(const char *opt, const char *s, double *out);
/* Seconds on a monotonic clock. */
double cli_now(void);

/* Shared by run and chat (cli_gen.c). The demo model's file name in models/. */
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

#endif
