/* cli.h: the subcommands of the tela command-line tool and small helpers
 * they share (option parsing, token lists). */
#ifndef TELA_CLI_CLI_H
#define TELA_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

int tela_cmd_inspect(int argc, char **argv);
int tela_cmd_run(int argc, char **argv);
int tela_cmd_logits(int argc, char **argv);
int tela_cmd_tokenize(int argc, char **argv);
int tela_cmd_detokenize(int argc, char **argv);
int tela_cmd_convert(int argc, char **argv);
int tela_cmd_perplexity(int argc, char **argv);

/* Parses "1,2,3" (spaces allowed) into a malloc'd array. Returns 0 on
 * success, prints an error and returns -1 otherwise. */
int cli_parse_token_list(const char *s, int32_t **out, size_t *n);
/* Parses an integer / float option value; prints an error naming opt on failure. */
int cli_parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out);
int cli_parse_float(const char *opt, const char *s, double *out);

#endif
