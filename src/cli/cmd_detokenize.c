/* cmd_detokenize.c: 'tela detokenize' (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int tela_cmd_detokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela detokenize: not implemented yet\n");
    return 1;
}
