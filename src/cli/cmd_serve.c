/* cmd_serve.c: 'tela serve': the options, mapped onto the server's and the
 * engine's parameters; the server itself is src/server/ (server.h). A tela
 * configured with -DTELA_SERVER=OFF (no libmicrohttpd) says so instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tela/tela.h"

#ifndef TELA_HAVE_SERVER
int tela_cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tela serve: this tela was built without the server (configured with -DTELA_SERVER=OFF; it needs "
                    "libmicrohttpd: apt-get install libmicrohttpd-dev, then reconfigure)\n");
    return 2;
}
#else
#include "server/server.h"

static void usage(FILE *f) {
    tela_engine_params d = tela_engine_default_params();
    const tela_spec_params ds = tela_spec_default_params();
    fprintf(f,
            "usage: tela serve [-m MODEL] [options]\n\n"
            "Serves a model over HTTP with an OpenAI-compatible API, many requests at once\n"
            "through the batching engine:\n"
            "  POST /v1/chat/completions, POST /v1/completions (streamed with \"stream\": true),\n"
            "  GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize,\n"
            "  POST /detokenize, and a chat page at GET /.\n"
            "It prints the address it listens on, then one line per request on stderr.\n"
            "SIGINT or SIGTERM stops it: requests under way get 30 s to finish.\n\n"
            "options:\n"
            "  -m, --model PATH         GGUF file or Hugging Face checkpoint directory with a tokenizer\n"
            "                           (default: as for tela run, see tela run --help)\n"
            "      --host ADDR          address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
            "      --port N             port (default 8080; 0 = a free port, printed at start)\n"
            "      --api-key KEY        require 'Authorization: Bearer KEY' (default: $TELA_API_KEY if set;\n"
            "                           /health and the chat page stay open)\n"
            "  -c, --ctx-size N         tokens one request holds, prompt and reply (default: the model's,\n"
            "                           at most 4096)\n"
            "      --parallel N         sequences computed together (default %d)\n"
            "      --kv-size TOKENS     positions in the shared KV cache (default: parallel x ctx-size)\n"
            "      --no-prefix-cache    do not reuse computed prefixes across requests\n"
            "      --checkpoint-interval N  hybrid models: a recurrent-state checkpoint every N prompt\n"
            "                           tokens (default %d)\n"
            "      --max-queue N        requests waiting for the engine before new ones get 429 (default %d)\n"
            "      --max-body BYTES     largest request body (default 8M; K, M, G suffixes)\n"
            "  -t, --threads N          computation threads (default: all cores)\n"
            "      --device DEV         cpu, cuda, cuda:N or a list (default: the GPU when there is one)\n"
            "      --tensor-parallel N  split each layer over N ranks (Llama, Qwen3.5), on\n"
            "                           a GPU each when there are N (NCCL), else the ranks take\n"
            "                           turns on one device; --device cuda:0,cuda:1,.. picks them\n"
            "      --kv-type T          KV cache precision: f16, f32 or q8_0 (the CPU only)\n"
            "                           (default: f16 on a GPU, f32 on the CPU)\n"
            "      --spec ngram|mtp|draft  speculative decoding for every request, its drafts verified in the\n"
            "                           same batched step (greedy output unchanged; sampling keeps the\n"
            "                           distribution); usage reports completion_tokens_details\n"
            "                           ngram = prompt lookup (what followed the last n-gram earlier on)\n"
            "                           mtp   = the model's own multi-token-prediction block (Qwen3.5)\n"
            "                           draft = a smaller model of the same vocabulary (--draft FILE;\n"
            "                           attention-only: a Llama)\n"
            "      --draft FILE         the draft model (implies --spec draft)\n"
            "      --draft-max K        tokens drafted per verification, 1..%d (default %d)\n"
            "      --draft-vocab N      mtp: draft among the first N token ids only (0: all, the default)\n"
            "      --spec-ngram-min N, --spec-ngram-max N\n"
            "                           n-gram sizes prompt lookup matches, longest first (default %d..%d)\n"
            "  -h, --help               this help\n",
            d.n_parallel > 0 ? d.n_parallel : 8, d.checkpoint_interval > 0 ? d.checkpoint_interval : 256,
            d.max_waiting > 0 ? d.max_waiting : 64, TELA_SPEC_MAX_DRAFT, ds.draft_max, ds.ngram_min, ds.ngram_max);
}

/* "8M", "512K", "1000": bytes. 0, or -1 after printing an error. */
static int parse_bytes(const char *opt, const char *s, size_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (end != s && *end && !end[1]) {
        switch (*end) {
        case 'k': case 'K': mul = 1ull << 10; end++; break;
        case 'm': case 'M': mul = 1ull << 20; end++; break;
        case 'g': case 'G': mul = 1ull << 30; end++; break;
        default: break;
        }
    }
    if (end == s || *end || v == 0 || v > (1ull << 40) / mul || s[0] == '-') {
        fprintf(stderr, "tela serve: %s: '%s' is not a size in bytes (such as 8M)\n", opt, s);
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int tela_cmd_serve(int argc, char **argv) {
    tela_serve_params p;
    tela_serve_default_params(&p);
    const char *draft_path = NULL;
    const char *env_key = getenv("TELA_API_KEY");
    if (env_key && env_key[0]) p.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        }
        if (IS("--no-prefix-cache")) {
            p.engine.prefix_cache = 0;
            continue;
        }
        const int spec_opt = cli_parse_spec("serve", a, i + 1 < argc ? argv[i + 1] : NULL, &p.spec, &draft_path,
                                            &p.mtp_draft_vocab);
        if (spec_opt < 0) return 2;
        if (spec_opt > 0) {
            i++;
            continue;
        }
        static const char *const with_value[] = {"-m", "--model", "--host", "--port", "--api-key", "-c", "--ctx-size",
                                                 "--parallel", "--kv-size", "--checkpoint-interval", "--max-queue",
                                                 "--max-body", "-t", "--threads", "--device", "--kv-type",
                                                 "--tensor-parallel", NULL};
        int known = 0;
        for (const char *const *o = with_value; *o; o++) known |= !strcmp(a, *o);
        if (!known) return cli_unknown_option("serve", a);
        const char *v = cli_option_value("serve", argc, argv, &i);
        if (!v) return 2;
        long long n = 0;
        if (IS("-m") || IS("--model")) p.model_path = v;
        else if (IS("--host")) p.host = v;
        else if (IS("--api-key")) p.api_key = v;
        else if (IS("--device")) p.device = v;
        else if (IS("--kv-type")) {
            if (cli_parse_kv_type("serve", v, &p.engine.kv_type)) return 2;
        } else if (IS("--max-body")) {
            if (parse_bytes(a, v, &p.max_body)) return 2;
        } else if (IS("--port")) {
            if (cli_parse_int(a, v, 0, 65535, &n)) return 2;
            p.port = (int)n;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_int(a, v, 0, INT32_MAX, &n)) return 2;
            p.engine.n_ctx = (int32_t)n;
        } else if (IS("--parallel")) {
            if (cli_parse_int(a, v, 1, 4096, &n)) return 2;
            p.engine.n_parallel = (int32_t)n;
        } else if (IS("--kv-size")) {
            if (cli_parse_int(a, v, 1, INT32_MAX, &n)) return 2;
            p.engine.kv_tokens = (int32_t)n;
        } else if (IS("--checkpoint-interval")) {
            if (cli_parse_int(a, v, 1, INT32_MAX, &n)) return 2;
            p.engine.checkpoint_interval = (int32_t)n;
        } else if (IS("--tensor-parallel")) {
            if (cli_parse_int(a, v, 1, 64, &n)) return 2;
            p.tensor_parallel = (int)n;
        } else if (IS("--max-queue")) {
            if (cli_parse_int(a, v, 1, INT32_MAX, &n)) return 2;
            p.engine.max_waiting = (int32_t)n;
        } else { /* -t, --threads */
            if (cli_parse_int(a, v, 1, 1024, &n)) return 2;
            p.n_threads = (int)n;
        }
#undef IS
    }
    if (cli_check_spec("serve", &p.spec, draft_path)) return 2;
    p.draft_path = draft_path;
    if (!p.model_path) {
        p.model_path = cli_default_model();
        if (!p.model_path) {
            fprintf(stderr, "tela serve: -m MODEL is required: no default model was found (set TELA_MODEL, or see "
                            "tela run --help)\n");
            return 2;
        }
        fprintf(stderr, "tela serve: using the default model %s\n", p.model_path);
    }
    return tela_serve(&p);
}
#endif
