/* cmd_tokenize.c: 'tela tokenize' (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int tela_cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela tokenize: not implemented yet\n");
    return 1;
}
