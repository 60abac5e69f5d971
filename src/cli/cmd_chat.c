/* cmd_chat.c: 'tela chat': an interactive multi-turn conversation. Reads
 * user lines (with line editing and history when stdin is a terminal and
 * libedit is available; plain lines otherwise, so it can be scripted
 * through a pipe), streams each reply to stdout and prints a timing line to
 * stderr. The conversation logic (template, reuse of the evaluated state
 * across turns through snapshots) is runtime/chat_session.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TELA_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli/cli.h"
#include "runtime/chat_session.h"
#include "tela/tela.h"

#define CHAT_DEFAULT_N 1024

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela chat [-m MODEL] [options]\n\n"
            "Chats with a model: each line you type is a user message; the whole\n"
            "conversation is rendered with the model's chat template and the reply is\n"
            "streamed to stdout, followed by a timing line on stderr. Only the part of\n"
            "the conversation the model has not seen yet is evaluated each turn.\n"
            "Lines come from a terminal (with line editing) or from a pipe, one message\n"
            "per line.\n\n"
            "commands (typed as a line):\n"
            "  /help    this list\n"
            "  /reset   forget the conversation (the system prompt stays)\n"
            "  /exit    quit (so does end of input, Ctrl-D)\n\n"
            "options:\n"
            "  -m, --model PATH         GGUF file or Hugging Face checkpoint directory with a tokenizer\n"
            "                           (default: as for tela run, see tela run --help)\n"
            "      --system TEXT        system prompt\n"
            "      --template-file F    use the Jinja chat template in F instead of the model's\n"
            "  -n, --n-predict N        most tokens per reply (default %d; -1 = until end of\n"
            "                           generation or a full context)\n",
            CHAT_DEFAULT_N);
    cli_print_sampling_help(f);
    cli_gen_print_help(f);
    fprintf(f,
            "      --show-prompt        print each turn's rendered conversation to stderr\n"
            "      --no-reuse           evaluate the whole conversation every turn (slow; for checking\n"
            "                           that reusing the state changes nothing)\n"
            "  -h, --help               this help\n\n"
            "Ctrl-C stops a reply early.\n");
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void show_rendered(void *user, const char *text, int32_t n_tokens, int32_t n_reused) {
    (void)user;
    fprintf(stderr, "[rendered conversation: %d tokens, %d of them reused]\n%s[end of rendered conversation]\n",
            n_tokens, n_reused, text);
}

/* One input line without its line ending, malloc'd; NULL at end of input. */
static char *read_line(int interactive) {
#ifdef TELA_HAVE_LIBEDIT
    if (interactive) {
        char *line = readline("> ");
        if (line && line[0]) add_history(line);
        return line;
    }
#else
    if (interactive) {
        fputs("> ", stdout);
        fflush(stdout);
    }
#endif
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    return line;
}

static void print_commands(void) {
    fprintf(stderr, "commands: /help (this), /reset (forget the conversation, keep the system prompt), "
                    "/exit (quit; also Ctrl-D)\n");
}

int tela_cmd_chat(int argc, char **argv) {
    int show_prompt = 0, no_reuse = 0;
    cli_gen_opts o;
    cli_gen_opts_init(&o, CHAT_DEFAULT_N);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--show-prompt")) {
            show_prompt = 1;
        } else if (!strcmp(a, "--no-reuse")) {
            no_reuse = 1;
        } else {
            int r = cli_gen_parse_option("chat", argc, argv, &i, &o);
            if (r < 0) return 2;
            if (r == 0) return cli_unknown_option("chat", a);
        }
    }
    if (o.n_predict == 0) {
        fprintf(stderr, "tela chat: -n must be positive, or -1 for no limit\n");
        return 2;
    }
    if (cli_check_spec("chat", &o.spec, o.draft_path)) return 2;
    if (cli_gen_resolve_model("chat", &o)) return 2;

    int rc = 1;
    tela_chat_session *chat = NULL;
    cli_gen gen = {0};
    if (cli_gen_load("chat", &o, &gen)) goto done;
    if (!gen.info->has_tokenizer) {
        fprintf(stderr, "tela chat: this model has no tokenizer, so it cannot chat (tela run --tokens works without "
                        "one)\n");
        goto done;
    }
    if (!gen.template_src && !gen.info->has_chat_template) {
        fprintf(stderr, "tela chat: the model has no chat template: use 'tela run -p TEXT' to continue plain text, "
                        "or give a Jinja chat template with --template-file\n");
        goto done;
    }
    if (cli_gen_start_session("chat", &o, &gen)) goto done;
    tela_chat_session_params cp;
    memset(&cp, 0, sizeof cp);
    cp.system = o.system;
    cp.template_src = gen.template_src;
    cp.no_reuse = no_reuse != 0;
    if (show_prompt) cp.on_rendered = show_rendered;
    if (tela_chat_session_create(gen.session, &cp, &chat) != TELA_OK) {
        fprintf(stderr, "tela chat: %s\n", tela_last_error());
        goto done;
    }
    tela_generate_params gp = cli_gen_params("chat", &o);
    cli_gen_set_spec(&gen, &gp);
    gp.on_token = cli_print_piece;
    gp.user = (void *)&interrupted; /* Ctrl-C stops the reply */

    int interactive = isatty(STDIN_FILENO);
    if (interactive)
        fprintf(stderr, "tela chat: %s (%s, context %d tokens). /help for commands, /exit or Ctrl-D to quit.\n",
                gen.info->name && gen.info->name[0] ? gen.info->name : o.model_path, gen.info->arch,
                tela_session_n_ctx(gen.session));
    rc = 0;
    for (;;) {
        char *line = read_line(interactive);
        if (!line) {
            if (interactive) fputc('\n', stderr); /* after Ctrl-D, end the prompt's line */
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) {
            free(line);
            continue;
        }
        if (*p == '/') {
            int quit = !strcmp(p, "/exit") || !strcmp(p, "/quit");
            if (!strcmp(p, "/reset")) {
                tela_chat_session_reset(chat);
                fprintf(stderr, "[conversation forgotten%s]\n", o.system && o.system[0] ? "; the system prompt stays" : "");
            } else if (!strcmp(p, "/help")) {
                print_commands();
            } else if (!quit) {
                fprintf(stderr, "tela chat: unknown command '%s'\n", p);
                print_commands();
            }
            free(line);
            if (quit) break;
            continue;
        }
        /* Ctrl-C during a reply stops the reply, not the program. */
        struct sigaction sa, old_sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        interrupted = 0;
        sigaction(SIGINT, &sa, &old_sa);
        tela_chat_turn_result tr;
        tela_status st = tela_chat_session_turn(chat, line, &gp, &tr);
        sigaction(SIGINT, &old_sa, NULL);
        free(line);
        if (st == TELA_ERR_CONTEXT && tr.gen.n_generated == 0) {
            fprintf(stderr, "tela chat: the conversation no longer fits in the context: %s. Type /reset to start over "
                            "(or restart with a larger -c).\n", tela_last_error());
            continue;
        }
        if (st != TELA_OK) {
            fflush(stdout);
            fprintf(stderr, "\ntela chat: %s\n", tela_last_error());
            rc = 1;
            break;
        }
        printf("\n");
        fflush(stdout);
        const tela_generate_result *g = &tr.gen;
        char spec_line[160];
        cli_spec_summary(spec_line, sizeof spec_line, g->n_spec_steps, g->n_drafted, g->n_accepted, g->n_spec_tokens);
        fprintf(stderr, "[prompt: %d new tokens (%d reused) in %.2f s | reply: %d tokens in %.2f s, %.1f tok/s%s]\n",
                tr.n_new, tr.n_reused, tr.prompt_seconds, g->n_generated, g->generate_seconds,
                g->generate_seconds > 0 ? g->n_generated / g->generate_seconds : 0.0, spec_line);
        if (g->stop_reason == TELA_STOP_CONTEXT)
            fprintf(stderr, "[the context is full (%d tokens): the reply was cut; type /reset to start over]\n",
                    tela_session_n_ctx(gen.session));
        else if (g->stop_reason == TELA_STOP_CALLBACK)
            fprintf(stderr, "[reply interrupted]\n");
    }
done:
    tela_chat_session_free(chat);
    cli_gen_free(&gen);
    return rc;
}
