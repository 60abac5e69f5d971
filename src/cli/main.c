/* main.c: the tela command-line tool's entry point and subcommand table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tela/tela.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", tela_cmd_run, "generate text from a prompt"},
    {"chat", tela_cmd_chat, "chat with a model, turn by turn, through its chat template"},
    {"logits", tela_cmd_logits, "write the logits of a token sequence to a file"},
    {"tokenize", tela_cmd_tokenize, "turn text into token ids with the model's tokenizer"},
    {"detokenize", tela_cmd_detokenize, "turn token ids into text"},
    {"perplexity", tela_cmd_perplexity, "measure a model's perplexity on a text (llama-perplexity's rules)"},
    {"convert", tela_cmd_convert, "convert a Hugging Face checkpoint to GGUF"},
    {"quantize", tela_cmd_quantize, "quantize a GGUF model to smaller weight types (llama-quantize's rules)"},
    {"bench", tela_cmd_bench, "measure prompt and generation speed (llama-bench's tests)"},
    {"inspect", tela_cmd_inspect, "print the metadata and tensors of a GGUF file or HF checkpoint"},
    {"prune-plan", tela_cmd_prune_plan, "rank the layers by how little they change the hidden state; plan removals"},
    {"serve", tela_cmd_serve, "serve a model over HTTP: an OpenAI-compatible API and a chat page"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tela COMMAND [OPTIONS]\n\n"
               "tela runs decoder-only language models (GGUF files, Hugging Face checkpoints).\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'tela COMMAND --help' describes a command's options.\n"
               "'tela --version' prints the version.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        printf("tela %s\n", tela_version());
        char *dev = tela_devices();
        if (dev) printf("devices:\n%s", dev);
        free(dev);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tela: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
