/* cmd_convert.c: 'tela convert': a Hugging Face checkpoint to a GGUF file. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "convert/convert.h"
#include "tela/tela.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--name NAME] [--no-vocab]\n"
            "                    [--no-mtp] [-q]\n\n"
            "Converts a Hugging Face checkpoint (config.json + safetensors, sharded or not;\n"
            "F32, F16 or BF16 weights) into a GGUF file laid out as llama.cpp's converter\n"
            "does it. Architectures: LlamaForCausalLM, Qwen3_5ForCausalLM and the text\n"
            "model of Qwen3_5ForConditionalGeneration. Qwen3.5's multi-token-prediction\n"
            "(mtp.*) tensors, when present, become extra blocks after the trunk\n"
            "(blk.N.nextn.*, <arch>.nextn_predict_layers), as llama.cpp writes them.\n\n"
            "options:\n"
            "  -o, --output FILE  the GGUF file to write (written to a temporary name, then renamed)\n"
            "  --type TYPE        type of the weight matrices: f32, f16 (default), bf16 or q8_0;\n"
            "                     norms and other 1-D tensors are always f32\n"
            "  --name NAME        general.name (default: from the directory name)\n"
            "  --no-vocab         leave out the tokenizer metadata\n"
            "  --no-mtp           leave out the multi-token-prediction (MTP) blocks\n"
            "  -q, --quiet        no progress line\n");
}

static int parse_type(const char *s, tela_type *out) {
    static const struct { const char *name; tela_type type; } types[] = {
        {"f32", TELA_TYPE_F32}, {"f16", TELA_TYPE_F16}, {"bf16", TELA_TYPE_BF16}, {"q8_0", TELA_TYPE_Q8_0}};
    for (size_t i = 0; s && i < sizeof types / sizeof types[0]; i++)
        if (!strcasecmp(s, types[i].name)) {
            *out = types[i].type;
            return 0;
        }
    fprintf(stderr, "tela convert: --type must be f32, f16, bf16 or q8_0, not '%s'\n", s ? s : "");
    return -1;
}

int tela_cmd_convert(int argc, char **argv) {
    tela_convert_params p = tela_convert_default_params();
    const char *in = NULL, *out = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) { fprintf(stderr, "tela convert: %s needs a file name\n", a); return 2; }
            out = argv[i];
        } else if (!strcmp(a, "--type") || !strcmp(a, "--outtype")) {
            if (++i >= argc) { fprintf(stderr, "tela convert: %s needs a value\n", a); return 2; }
            if (parse_type(argv[i], &p.type)) return 2;
        } else if (!strcmp(a, "--name")) {
            if (++i >= argc) { fprintf(stderr, "tela convert: --name needs a value\n"); return 2; }
            p.name = argv[i];
        } else if (!strcmp(a, "--no-vocab")) {
            p.no_vocab = 1;
        } else if (!strcmp(a, "--no-mtp")) {
            p.no_mtp = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tela convert: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!in) {
            in = a;
        } else {
            fprintf(stderr, "tela convert: more than one input ('%s' and '%s')\n", in, a);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "tela convert: %s\n\n", !in ? "no HF_DIR given" : "no output file given (-o OUT.gguf)");
        usage(stderr);
        return 2;
    }
    p.progress = !quiet && isatty(2);
    tela_status st = tela_convert_hf(in, out, &p);
    if (st != TELA_OK) {
        fprintf(stderr, "tela convert: %s\n", tela_last_error());
        return 1;
    }
    if (!quiet) fprintf(stderr, "tela convert: wrote %s\n", out);
    return 0;
}
