/* cmd_logits.c: 'tela logits' (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int tela_cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela logits: not implemented yet\n");
    return 1;
}
