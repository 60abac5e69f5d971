/* cmd_bench.c: 'tela bench': prompt-processing and decoding speed with
 * llama-bench's meaning. pp<P> is one prefill of P tokens from an empty
 * context; tg<N> is N tokens decoded one at a time after an empty context.
 * Each test runs once as a warm-up, then REPS times; the speed is tokens
 * per second, mean and sample standard deviation over the repetitions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/qdot.h"
#include "util/threadpool.h"
#include "cli/cli_bench.h"
#include "tela/tela.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela bench -m MODEL [-p 512[,4096...]] [-n 128[,...]] [-d 0[,32768...]] [-t THREADS] [-r REPS]\n"
            "                  [-np 1,8] [--device cpu|cuda|cuda:N] [--kv-type f16|f32|q8_0] [--json]\n\n"
            "Measures speed like llama-bench: ppP = one prefill of P tokens, tgN = N tokens\n"
            "decoded one at a time (each step computes the logits and returns them to the\n"
            "host), both after D tokens already in the context (-d; 0 = an empty context;\n"
            "the D tokens are not timed). Lists run every combination. Each test runs once\n"
            "to warm up, then REPS times; prints tokens/s as mean +- stddev.\n\n"
            "options:\n"
            "  -m, --model PATH     GGUF file, .safetensors file or Hugging Face checkpoint directory\n"
            "  -p, --n-prompt P,..  prompt tokens for the pp tests (default 512; 0 skips them)\n"
            "  -n, --n-gen N,..     tokens for the tg tests (default 128; 0 skips them)\n"
            "  -d, --n-depth D,..   tokens in the context before each test (default 0)\n"
            "  -t, --threads N      computation threads (default: all cores)\n"
            "  -r, --repetitions R  measured repetitions per test (default 5)\n"
            "      --device DEV     cpu, cuda, cuda:N or a list (default: the GPU when there is one)\n"
            "      --kv-type T      KV cache precision: f16, f32 or q8_0 (the CPU only)\n"
            "                       (default: f16 on a GPU, f32 on the CPU)\n"
            "      --skip-layers L  bypass these decoder layers (comma-separated)\n"
            "      --tensor-parallel N  split each layer over N ranks (Llama, Qwen3.5), on\n"
            "                       a GPU each when there are N (NCCL), else the ranks take\n"
            "                       turns on one device; --device cuda:0,cuda:1,.. picks them\n"
            "      --mem-budget B   memory the session may take: 8G, 512M, 80%% (default: what is available)\n"
            "      --profile[=json] time every phase over all the tests; a table (or JSON) on stderr\n"
            "  -np, --parallel P,.. also decode with P sequences at once through the batching engine:\n"
            "                       tgN x P = aggregate tokens/s of P sequences decoding N tokens each\n"
            "      --temp T         the -np tests sample at temperature T (default 0: greedy, picked\n"
            "                       on the device); T > 0 draws each token on the host, as a server's\n"
            "                       sampled requests do (the other sampler settings: their defaults)\n"
            "      --spec ngram|draft|mtp  also measure speculative decoding: greedy tgN (the first -n) after a\n"
            "                       text prompt, plain and for each --draft-max k: tokens/s, the share of\n"
            "                       drafts accepted, tokens per verification step, the speedup, whether\n"
            "                       the tokens are the plain ones; then the cost of a forward pass of\n"
            "                       k+1 tokens (the verification) against one token, and of the rollback\n"
            "      --draft MODEL    the draft model (implies --spec draft; same vocabulary)\n"
            "      --draft-max K,.. tokens drafted per step, 1..%d (default 1,2,3,4)\n"
            "      --draft-vocab N  mtp: draft among the first N token ids only (0: all, the default)\n"
            "      --spec-ngram-min N, --spec-ngram-max N  n-gram sizes of prompt lookup (default 2..4)\n"
            "      --prompt TEXT    the prompt of the speculative tests (default: Genesis 1:1-5)\n"
            "                       (with --spec, the tgN tests are the plain rows of its table)\n"
            "      --json           one JSON object per test per line instead of the table\n"
            "  -h, --help           this help\n",
            TELA_SPEC_MAX_DRAFT);
}

/* "512,4096" into up to cap values in [lo, hi]; 0 on success, -1 after
 * printing an error. */
static int parse_list(const char *opt, const char *val, long long lo, long long hi, long long *out, int cap,
                      int *n) {
    if (!val) {
        fprintf(stderr, "tela bench: %s needs a value\n", opt);
        return -1;
    }
    *n = 0;
    const char *p = val;
    while (*p) {
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf || *n == cap) {
            fprintf(stderr, "tela bench: %s: '%s' is not a list of up to %d numbers\n", opt, val, cap);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (cli_parse_int(opt, buf, lo, hi, &out[*n])) return -1;
        (*n)++;
        p += len;
        if (*p == ',') p++;
    }
    if (*n == 0) {
        fprintf(stderr, "tela bench: %s needs at least one number\n", opt);
        return -1;
    }
    return 0;
}

/* The CPU's model name from /proc/cpuinfo ("unknown" elsewhere). */
static void cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        snprintf(buf, cap, "%s", c);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

static const char *compiler(void) {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

/* One run of a test: seconds for a prefill of n_prompt tokens, or for
 * n_gen single-token steps, after `depth` untimed tokens; -1 after printing
 * an error. Each test's last position's logits come to host memory, as
 * llama-bench's do: where the session keeps them (tela_session_eval_view:
 * on a GPU the copy over the bus, no copy on the host after it). */
static double run_once(tela_session *s, const int32_t *ids, int depth, int n_prompt, int n_gen) {
    tela_session_reset(s);
    if (depth > 0 && tela_session_eval(s, ids, depth, NULL, 0) != TELA_OK) goto fail;
    const float *logits = NULL;
    double t0 = cli_now();
    if (n_prompt > 0) {
        if (tela_session_eval_view(s, ids + depth, n_prompt, &logits) != TELA_OK) goto fail;
    } else {
        for (int i = 0; i < n_gen; i++)
            if (tela_session_eval_view(s, ids + depth + i, 1, &logits) != TELA_OK) goto fail;
    }
    return cli_now() - t0;
fail:
    fprintf(stderr, "tela bench: %s\n", tela_last_error());
    return -1;
}

int tela_cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *device = NULL, *mem_budget = NULL;
    long long n_prompt[8] = {512}, n_gen[8] = {128}, depth[8] = {0}, n_threads = 0, reps = 5, tp = 0;
    int np_n = 1, ng_n = 1, nd_n = 1, json = 0, profile = 0;
    cli_bench_opts bo;
    memset(&bo, 0, sizeof bo);
    bo.spec = tela_spec_default_params();
    tela_kv_type kv = TELA_KV_DEFAULT;
    static int32_t skip[CLI_MAX_SKIP];
    size_t n_skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        const int pr = cli_parse_profile("bench", a, &profile);
        if (pr < 0) return 2;
        if (pr) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--skip-layers")) {
            if (!val) {
                fprintf(stderr, "tela bench: %s needs a value\n", a);
                return 2;
            }
            if (cli_parse_skip_layers("bench", val, skip, &n_skip)) return 2;
            i++;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--device") || !strcmp(a, "--kv-type") ||
                   !strcmp(a, "--mem-budget")) {
            if (!val) {
                fprintf(stderr, "tela bench: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--device")) {
                device = val;
            } else if (!strcmp(a, "--mem-budget")) {
                mem_budget = val;
            } else if (!strcmp(a, "--kv-type")) {
                if (cli_parse_kv_type("bench", val, &kv)) return 2;
            } else {
                model_path = val;
            }
            i++;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (parse_list(a, val, 0, 1 << 20, n_prompt, 8, &np_n)) return 2;
            i++;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (parse_list(a, val, 0, 1 << 20, n_gen, 8, &ng_n)) return 2;
            i++;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            if (parse_list(a, val, 0, 1 << 22, depth, 8, &nd_n)) return 2;
            i++;
        } else if (!strcmp(a, "--tensor-parallel")) {
            if (cli_parse_int(a, val, 1, 64, &tp)) return 2;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(a, val, 1, 1024, &n_threads)) return 2;
            i++;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (cli_parse_int(a, val, 1, 1000, &reps)) return 2;
            i++;
        } else if (!strcmp(a, "--draft-max")) {
            if (parse_list(a, val, 1, TELA_SPEC_MAX_DRAFT, bo.draft_max, 8, &bo.n_draft_max)) return 2;
            i++;
        } else if (!strcmp(a, "--prompt")) {
            if (!val || !val[0]) {
                fprintf(stderr, "tela bench: %s needs a non-empty text\n", a);
                return 2;
            }
            bo.prompt = val;
            i++;
        } else if (!strcmp(a, "--spec") || !strcmp(a, "--draft") || !strcmp(a, "--spec-ngram-min") ||
                   !strcmp(a, "--spec-ngram-max") || !strcmp(a, "--draft-vocab")) {
            if (cli_parse_spec("bench", a, val, &bo.spec, &bo.draft_path, &bo.draft_vocab) < 0) return 2;
            i++;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (parse_list(a, val, 1, 1024, bo.parallel, 8, &bo.n_parallel)) return 2;
            i++;
        } else if (!strcmp(a, "--temp")) {
            if (cli_parse_float(a, val, &bo.temp)) return 2;
            if (bo.temp < 0 || bo.temp > 100) {
                fprintf(stderr, "tela bench: --temp %s is out of range (0 to 100)\n", val);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "tela bench: unknown option '%s' (see tela bench --help)\n", a);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "tela bench: no model given (-m MODEL; see tela bench --help)\n");
        return 2;
    }
    if (cli_check_spec("bench", &bo.spec, bo.draft_path)) return 2;
    if (bo.n_draft_max && bo.spec.method == TELA_SPEC_NONE) {
        fprintf(stderr, "tela bench: --draft-max goes with --spec ngram|draft (or --draft MODEL)\n");
        return 2;
    }
    if (bo.spec.method != TELA_SPEC_NONE && !bo.n_draft_max) {
        for (int k = 1; k <= 4; k++) bo.draft_max[k - 1] = k;
        bo.n_draft_max = 4;
    }
    long long most = 0, max_depth = 0;
    for (int i = 0; i < np_n; i++) most = n_prompt[i] > most ? n_prompt[i] : most;
    for (int i = 0; i < ng_n; i++) most = n_gen[i] > most ? n_gen[i] : most;
    for (int i = 0; i < nd_n; i++) max_depth = depth[i] > max_depth ? depth[i] : max_depth;
    if (most == 0 && bo.spec.method == TELA_SPEC_NONE) {
        fprintf(stderr, "tela bench: nothing to measure (-p 0 and -n 0)\n");
        return 2;
    }

    tela_model_params mp = tela_model_default_params();
    mp.n_threads = (int)n_threads;
    mp.device = device;
    mp.skip_layers = skip;
    mp.n_skip_layers = n_skip;
    mp.load_mtp = bo.spec.method == TELA_SPEC_MTP;
    mp.mtp_draft_vocab = bo.draft_vocab;
    mp.tensor_parallel = (int)tp;
    tela_model *m = NULL;
    if (tela_model_load(model_path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        return 1;
    }
    const tela_model_info *info = tela_model_get_info(m);
    tela_session_params sp = tela_session_default_params();
    long long ctx = max_depth + most;
    sp.n_ctx = (int32_t)(ctx < 16 ? 16 : ctx);
    sp.n_threads = (int)n_threads;
    sp.kv_type = kv;
    if (mem_budget && cli_mem_budget("bench", mem_budget, m, &sp.mem_budget)) {
        tela_model_free(m);
        return 2;
    }
    tela_session *s = NULL;
    if (tela_session_create(m, &sp, &s) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        tela_model_free(m);
        return 1;
    }
    int threads = n_threads > 0 ? (int)n_threads : tela_cpu_count();
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)ctx);
    if (!ids) {
        fprintf(stderr, "tela bench: out of memory\n");
        tela_session_free(s);
        tela_model_free(m);
        return 1;
    }
    cli_bench_fill_tokens(ids, (int)ctx, info->n_vocab);
    if (profile) tela_session_profile_start(s);

    char cpu[256], model_type[128];
    cpu_model(cpu, sizeof cpu);
    snprintf(model_type, sizeof model_type, "%s %s", info->arch, info->file_type ? info->file_type : "?");
    const char *isa = tela_qdot_kernels_label();
    const cli_bench_table table = {json, threads, cpu, isa, model_type, info};
    memcpy(bo.n_gen, n_gen, sizeof bo.n_gen);
    bo.n_gen_n = ng_n;
    bo.reps = reps;
    bo.n_threads = (int)n_threads;
    bo.kv_type = kv;
    bo.mem_budget = sp.mem_budget;
    bo.device = device;
    int regular = 0; /* the pp/tg table has rows */
    for (int i = 0; i < np_n; i++) regular |= n_prompt[i] > 0;
    for (int i = 0; i < ng_n; i++) regular |= n_gen[i] > 0 && bo.spec.method == TELA_SPEC_NONE;
    if (!json) {
        printf("cpu: %s, isa: %s, threads: %d\n", cpu, isa, threads);
        printf("device: %s\n", info->device);
        if (tp > 1)
            printf("tensor parallelism: %lld ranks, taking turns on that one device (a check of the split, not a "
                   "speedup)\n", tp);
        printf("build: tela %s, %s%s\n", tela_version(), compiler(), tela_backend_cuda_built() ? ", with CUDA" : "");
    }
    if (!json && regular) {
        printf("| %-16s | %10s | %8s | %14s | %20s |\n", "model", "size", "params", "test", "t/s");
        printf("| ---------------- | ---------: | -------: | -------------: | -------------------: |\n");
    }
    int rc = 0;
    for (int di = 0; di < nd_n && rc == 0; di++)
        for (int ti = 0; ti < np_n + ng_n && rc == 0; ti++) {
            const int d = (int)depth[di];
            const int np = ti < np_n ? (int)n_prompt[ti] : 0, ng = ti >= np_n ? (int)n_gen[ti - np_n] : 0;
            if (np == 0 && (ng == 0 || bo.spec.method != TELA_SPEC_NONE)) continue; /* --spec: tg in its table */
            const int n_tok = np ? np : ng;
            double sum = 0, sum2 = 0;
            for (long long r = -1; r < reps; r++) { /* r = -1: warm-up */
                double sec = run_once(s, ids, d, np, ng);
                if (sec < 0) {
                    rc = 1;
                    break;
                }
                if (r < 0) continue;
                double ts = n_tok / (sec > 0 ? sec : 1e-9);
                sum += ts;
                sum2 += ts * ts;
            }
            if (rc) break;
            char name[48];
            if (d) snprintf(name, sizeof name, "%s%d @ d%d", np ? "pp" : "tg", n_tok, d);
            else snprintf(name, sizeof name, "%s%d", np ? "pp" : "tg", n_tok);
            cli_bench_row(&table, name, np, ng, d, 1, sum, sum2, reps);
        }
    if (rc == 0 && bo.spec.method != TELA_SPEC_NONE) rc = cli_bench_spec(m, &bo, &table);
    if (rc == 0 && bo.n_parallel) {
        /* the batched tests run on engines of their own */
        tela_session_free(s);
        s = NULL;
        rc = cli_bench_parallel(m, &bo, &table);
    }
    if (profile && s) cli_print_profile(s, profile);
    free(ids);
    if (s) tela_session_free(s);
    tela_model_free(m);
    return rc;
}
