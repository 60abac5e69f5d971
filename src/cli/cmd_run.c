/* cmd_run.c: 'tela run': generates text from a prompt (text or token ids,
 * or with --chat one user message through the model's chat template),
 * streaming it to stdout, then prints a timing line to stderr. The options
 * and steps it shares with 'tela chat' are in cli_gen.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/chat_session.h"
#include "tela/tela.h"

#define RUN_DEFAULT_N 128
#define RUN_MAX_STOPS 16

/* --------------------------------------------------------------- run */

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela run [-m MODEL] (-p TEXT | --tokens 1,2,3) [options]\n\n"
            "Generates a continuation of the prompt and streams it to stdout (the prompt\n"
            "itself is not echoed), then prints timings to stderr.\n\n"
            "options:\n"
            "  -m, --model PATH         GGUF file, .safetensors file or Hugging Face checkpoint directory\n"
            "                           (default: $TELA_MODEL, else the model in models/; see below)\n"
            "  -p, --prompt TEXT        the prompt, tokenized with the model's tokenizer (special\n"
            "                           tokens written in the text are recognized)\n"
            "      --tokens LIST        the prompt as token ids, comma-separated (no BOS is added)\n"
            "      --no-bos             do not add the BOS token to a text prompt\n"
            "      --chat               -p is a user message: render it with the model's chat template\n"
            "                           (as the start of an assistant reply) before generating\n"
            "      --system TEXT        with --chat: a system message before the user message\n"
            "      --template-file F    with --chat: use the Jinja chat template in F instead of the model's\n"
            "  -n, --n-predict N        tokens to generate (default %d; 0 = only evaluate the prompt;\n"
            "                           -1 = until end of generation or a full context)\n",
            RUN_DEFAULT_N);
    cli_print_sampling_help(f);
    fprintf(f,
            "      --stop TEXT          stop when TEXT is generated (not printed; may repeat, up to %d)\n"
            "      --ignore-eos         keep generating after end-of-generation tokens\n"
            "      --print-ids          print the generated token ids as one JSON array line instead of text\n",
            RUN_MAX_STOPS);
    cli_gen_print_help(f);
    fprintf(f,
            "  -h, --help               this help\n\n"
            "Sampling stages, in order: logit bias, penalties, top-k, top-p, min-p, temperature, draw.\n\n"
            "Default model: with no -m, $TELA_MODEL is used when set (set but empty: none);\n"
            "else the models/ directory of the source tree this binary was built in\n"
            "(<binary dir>/../../models), else ./models: %s there, else its\n"
            "first *q8_0.gguf, else its first *.gguf.\n",
            CLI_DEFAULT_MODEL_NAME);
}

const char *cli_stop_name(tela_stop_reason r) {
    switch (r) {
    case TELA_STOP_MAX_TOKENS: return "token limit";
    case TELA_STOP_EOS: return "end-of-generation token";
    case TELA_STOP_STRING: return "stop string";
    case TELA_STOP_CALLBACK: return "callback";
    case TELA_STOP_CONTEXT: return "context full";
    case TELA_STOP_CANCELLED: return "cancelled";
    case TELA_STOP_ERROR: return "error";
    }
    return "?";
}

int tela_cmd_run(int argc, char **argv) {
    const char *prompt = NULL, *tokens_arg = NULL;
    const char *stops[RUN_MAX_STOPS + 1] = {0};
    int n_stops = 0, no_bos = 0, print_ids = 0, ignore_eos = 0, chat = 0;
    cli_gen_opts o;
    cli_gen_opts_init(&o, RUN_DEFAULT_N);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        } else if (IS("--no-bos")) {
            no_bos = 1;
        } else if (IS("--print-ids")) {
            print_ids = 1;
        } else if (IS("--ignore-eos")) {
            ignore_eos = 1;
        } else if (IS("--chat")) {
            chat = 1;
        } else if (IS("-p") || IS("--prompt") || IS("--tokens") || IS("--stop")) {
            const char *val = cli_option_value("run", argc, argv, &i);
            if (!val) return 2;
            if (IS("--stop")) {
                if (n_stops == RUN_MAX_STOPS || !val[0]) {
                    fprintf(stderr, "tela run: --stop: at most %d non-empty stop strings\n", RUN_MAX_STOPS);
                    return 2;
                }
                stops[n_stops++] = val;
            } else if (IS("--tokens")) {
                tokens_arg = val;
            } else {
                prompt = val;
            }
        } else {
            int r = cli_gen_parse_option("run", argc, argv, &i, &o);
            if (r < 0) return 2;
            if (r == 0) return cli_unknown_option("run", a);
        }
#undef IS
    }
    if (!prompt == !tokens_arg) {
        fprintf(stderr, "tela run: give the prompt as either -p TEXT or --tokens LIST\n");
        return 2;
    }
    if (chat && (tokens_arg || no_bos)) {
        fprintf(stderr, "tela run: --chat takes the user message as -p TEXT (not --tokens or --no-bos)\n");
        return 2;
    }
    if (!chat && (o.system || o.template_file)) {
        fprintf(stderr, "tela run: --system and --template-file go with --chat\n");
        return 2;
    }
    if (cli_check_spec("run", &o.spec, o.draft_path)) return 2;
    if (cli_gen_resolve_model("run", &o)) return 2;
    int32_t *prompt_ids = NULL;
    size_t n_prompt = 0;
    if (tokens_arg && cli_parse_token_list(tokens_arg, &prompt_ids, &n_prompt)) return 2;

    int rc = 1;
    int32_t *out_ids = NULL;
    cli_gen gen = {0};
    if (cli_gen_load("run", &o, &gen)) goto done;
    if (prompt && !gen.info->has_tokenizer) {
        fprintf(stderr, "tela run: this model has no tokenizer, so -p cannot be used; give token ids with --tokens\n");
        goto done;
    }
    if (chat) {
        if (!gen.template_src && !gen.info->has_chat_template) {
            fprintf(stderr, "tela run: the model has no chat template: drop --chat to continue plain text, or give "
                            "a Jinja template with --template-file\n");
            goto done;
        }
        if (tela_chat_prompt_tokens(gen.model, gen.template_src, o.system, prompt, &prompt_ids, &n_prompt) != TELA_OK) {
            fprintf(stderr, "tela run: applying the chat template: %s\n", tela_last_error());
            goto done;
        }
    } else if (prompt) {
        size_t len = strlen(prompt), cap = len + 16;
        prompt_ids = malloc(cap * sizeof *prompt_ids);
        if (!prompt_ids) {
            fprintf(stderr, "tela run: out of memory\n");
            goto done;
        }
        if (tela_tokenize(gen.model, prompt, len, !no_bos, 1, prompt_ids, cap, &n_prompt) != TELA_OK) {
            fprintf(stderr, "tela run: tokenizing the prompt: %s\n", tela_last_error());
            goto done;
        }
    }
    if (n_prompt == 0) {
        fprintf(stderr, "tela run: the prompt is empty\n");
        goto done;
    }
    if (n_prompt > (size_t)INT32_MAX) {
        fprintf(stderr, "tela run: the prompt is too long\n");
        goto done;
    }
    if (cli_gen_start_session("run", &o, &gen)) goto done;
    int32_t ctx = tela_session_n_ctx(gen.session);
    if ((long long)n_prompt > ctx) {
        fprintf(stderr, "tela run: the prompt has %zu tokens but the context holds %d (use -c to enlarge it)\n",
                n_prompt, ctx);
        goto done;
    }
    tela_generate_params gp = cli_gen_params("run", &o);
    cli_gen_set_spec(&gen, &gp);
    gp.stop_strings = n_stops ? stops : NULL;
    gp.ignore_eos = ignore_eos;
    if (!print_ids) gp.on_token = cli_print_piece;
    size_t cap = (size_t)ctx + 1;
    out_ids = malloc(cap * sizeof *out_ids);
    if (!out_ids) {
        fprintf(stderr, "tela run: out of memory\n");
        goto done;
    }
    tela_generate_result res;
    if (gp.max_tokens == 0 && o.n_predict != -1) {
        /* -n 0: evaluate the prompt only */
        double t0 = cli_now();
        if (tela_session_eval(gen.session, prompt_ids, (int32_t)n_prompt, NULL, 0) != TELA_OK) {
            fprintf(stderr, "tela run: %s\n", tela_last_error());
            goto done;
        }
        memset(&res, 0, sizeof res);
        res.n_prompt = (int32_t)n_prompt;
        res.prompt_seconds = cli_now() - t0;
    } else if (tela_generate(gen.session, prompt_ids, (int32_t)n_prompt, &gp, out_ids, cap, &res) != TELA_OK) {
        fflush(stdout);
        fprintf(stderr, "\ntela run: %s\n", tela_last_error());
        goto done;
    }
    if (print_ids) {
        printf("[");
        for (int32_t i = 0; i < res.n_generated && (size_t)i < cap; i++) printf("%s%d", i ? ", " : "", out_ids[i]);
        printf("]\n");
    } else {
        printf("\n");
    }
    fflush(stdout);
    char spec_line[160];
    cli_spec_summary(spec_line, sizeof spec_line, res.n_spec_steps, res.n_drafted, res.n_accepted, res.n_spec_tokens);
    fprintf(stderr,
            "prompt: %d tokens in %.2f s (%.1f tok/s) | generation: %d tokens in %.2f s (%.1f tok/s) | stop: %s%s\n",
            res.n_prompt, res.prompt_seconds, res.prompt_seconds > 0 ? res.n_prompt / res.prompt_seconds : 0.0,
            res.n_generated, res.generate_seconds,
            res.generate_seconds > 0 ? res.n_generated / res.generate_seconds : 0.0, cli_stop_name(res.stop_reason),
            spec_line);
    rc = 0;
done:
    free(prompt_ids);
    free(out_ids);
    cli_gen_free(&gen);
    return rc;
}
