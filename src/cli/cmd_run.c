/* cmd_run.c: 'tela run' (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int tela_cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela run: not implemented yet\n");
    return 1;
}
