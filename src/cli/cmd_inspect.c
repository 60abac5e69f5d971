/* cmd_inspect.c: 'tela inspect' (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int tela_cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela inspect: not implemented yet\n");
    return 1;
}
