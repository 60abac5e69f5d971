/* cmd_quantize.c: 'tela quantize': a GGUF file to a GGUF file with smaller
 * weight types, with llama-quantize's per-tensor mixture rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "convert/quantize.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "tela/tela.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tela quantize IN.gguf OUT.gguf TYPE [--threads N] [--allow-requantize] [--rmse] [-q]\n"
            "       tela quantize --dry-run IN.gguf TYPE\n\n"
            "Quantizes a GGUF model (F32, F16 or BF16 weights) into a smaller GGUF file,\n"
            "choosing each tensor's type as llama.cpp's llama-quantize does: the _S/_M/_L\n"
            "mixtures give the output layer and some attn_v/ffn_down layers more bits;\n"
            "norms and other 1-D tensors are kept as they are. The output is the same for\n"
            "any thread count, and is written to a temporary name, then renamed.\n\n"
            "types (llama.cpp's file types; Q4_K, Q5_K and Q3_K mean their _M mixture):\n"
            "  Q4_K_M  Q4_K_S  Q5_K_M  Q5_K_S  Q6_K  Q3_K_L  Q3_K_M  Q3_K_S  Q2_K\n"
            "  Q4_0  Q4_1  Q5_0  Q5_1  Q8_0  F16  BF16  F32\n\n"
            "options:\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  --allow-requantize    also convert tensors that are already quantized (lossy)\n"
            "  --dry-run             print each tensor's type and the sizes; write nothing\n"
            "  --rmse                print each converted tensor's RMSE against the source\n"
            "                        (dequantized output vs input), and totals per type\n"
            "  -q, --quiet           no progress line, warnings or summary\n"
            "  -h, --help            show this help\n");
}

static double mib(uint64_t n) { return (double)n / (1024.0 * 1024.0); }

/* --rmse: squared errors summed per output type, printed at the end. */
typedef struct rmse_acc {
    double err[TELA_TYPE_COUNT], src[TELA_TYPE_COUNT], n[TELA_TYPE_COUNT];
    int count[TELA_TYPE_COUNT];
} rmse_acc;

static void on_tensor(void *user, const tela_quantize_item *it, double sq_err, double sq_src) {
    rmse_acc *a = user;
    if (!it->convert) return;
    double n = (double)tela_tensor_nelements(&it->src->t);
    printf("%-36s %-6s -> %-6s rmse %.4e  relative %.4e\n", it->src->t.name, tela_type_name(it->src->t.type),
           tela_type_name(it->type), n > 0 ? sqrt(sq_err / n) : 0.0, sq_src > 0 ? sqrt(sq_err / sq_src) : 0.0);
    fflush(stdout);
    a->err[it->type] += sq_err;
    a->src[it->type] += sq_src;
    a->n[it->type] += n;
    a->count[it->type]++;
}

static void print_rmse_totals(const rmse_acc *a) {
    double err = 0, src = 0, n = 0;
    for (int t = 0; t < TELA_TYPE_COUNT; t++) {
        if (!a->count[t]) continue;
        printf("total %-6s %4d tensors %14.0f weights  rmse %.4e  relative %.4e\n", tela_type_name((tela_type)t),
               a->count[t], a->n[t], sqrt(a->err[t] / a->n[t]), a->src[t] > 0 ? sqrt(a->err[t] / a->src[t]) : 0.0);
        err += a->err[t];
        src += a->src[t];
        n += a->n[t];
    }
    if (n > 0)
        printf("total all    %14.0f weights  rmse %.4e  relative %.4e\n", n, sqrt(err / n), src > 0 ? sqrt(err / src) : 0.0);
}

/* The table llama-quantize --dry-run prints: what each tensor becomes. */
static int dry_run(const char *in, tela_ftype ftype, int allow_requantize) {
    tela_gguf *g;
    if (tela_gguf_open(in, &g) != TELA_OK) {
        fprintf(stderr, "tela quantize: %s\n", tela_last_error());
        return 1;
    }
    tela_quantize_plan plan;
    if (tela_quantize_make_plan(g, ftype, allow_requantize, &plan) != TELA_OK) {
        fprintf(stderr, "tela quantize: %s\n", tela_last_error());
        tela_gguf_close(g);
        return 1;
    }
    for (size_t i = 0; i < plan.n_items; i++) {
        const tela_quantize_item *it = &plan.items[i];
        printf("[%4zu/%4zu] %-36s %-6s -> %-6s %10.3f MiB%s\n", i + 1, plan.n_items, it->src->t.name,
               tela_type_name(it->src->t.type), tela_type_name(it->type), mib(it->nbytes),
               it->fallback ? "  (fallback)" : "");
    }
    printf("%s: %.2f MiB (%.2f BPW) -> %.2f MiB (%.2f BPW), %d fallbacks\n", tela_ftype_name(ftype),
           mib(plan.bytes_in), plan.n_elements ? (double)plan.bytes_in * 8.0 / (double)plan.n_elements : 0.0,
           mib(plan.bytes_out), plan.n_elements ? (double)plan.bytes_out * 8.0 / (double)plan.n_elements : 0.0,
           plan.n_fallback);
    tela_quantize_plan_free(&plan);
    tela_gguf_close(g);
    return 0;
}

int tela_cmd_quantize(int argc, char **argv) {
    tela_quantize_params p = tela_quantize_default_params();
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, quiet = 0, dry = 0, rmse = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long long v;
            if (cli_parse_int(a, i + 1 < argc ? argv[i + 1] : NULL, 1, 1024, &v)) return 2;
            p.n_threads = (int)v;
            i++;
        } else if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = 1;
        } else if (!strcmp(a, "--dry-run")) {
            dry = 1;
        } else if (!strcmp(a, "--rmse")) {
            rmse = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tela quantize: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "tela quantize: too many arguments ('%s')\n", a);
            return 2;
        }
    }
    /* --dry-run takes IN TYPE (an OUT in between is ignored) */
    const char *in = pos[0], *out = dry && n_pos == 2 ? NULL : pos[1];
    const char *type = dry && n_pos == 2 ? pos[1] : pos[2];
    if (!in || !type || (!dry && !out)) {
        fprintf(stderr, "tela quantize: expected IN.gguf OUT.gguf TYPE\n\n");
        usage(stderr);
        return 2;
    }
    if (tela_ftype_parse(type, &p.ftype) != TELA_OK) {
        fprintf(stderr, "tela quantize: %s\n", tela_last_error());
        return 2;
    }
    if (dry) return dry_run(in, p.ftype, p.allow_requantize);
    p.progress = !quiet && isatty(2);
    p.verbose = !quiet;
    rmse_acc *acc = NULL;
    if (rmse) {
        acc = calloc(1, sizeof *acc);
        if (!acc) {
            fprintf(stderr, "tela quantize: out of memory\n");
            return 1;
        }
        p.measure_error = 1;
        p.on_tensor = on_tensor;
        p.user = acc;
        p.progress = 0;  /* the table goes to stdout, line by line */
    }
    tela_quantize_stats s;
    tela_status st = tela_quantize_gguf(in, out, &p, &s);
    if (st == TELA_OK && acc) print_rmse_totals(acc);
    free(acc);
    if (st != TELA_OK) {
        fprintf(stderr, "tela quantize: %s\n", tela_last_error());
        return 1;
    }
    if (!quiet) {
        double bpw_in = s.n_elements ? (double)s.bytes_in * 8.0 / (double)s.n_elements : 0.0;
        double bpw_out = s.n_elements ? (double)s.bytes_out * 8.0 / (double)s.n_elements : 0.0;
        fprintf(stderr,
                "tela quantize: wrote %s (%s): %zu tensors, %zu converted, %d fallbacks\n"
                "  tensor data %.2f MiB (%.2f BPW) -> %.2f MiB (%.2f BPW); file %.2f MiB; %.1f s on %d threads\n",
                out, tela_ftype_name(p.ftype), s.n_tensors, s.n_converted, s.n_fallback, mib(s.bytes_in), bpw_in,
                mib(s.bytes_out), bpw_out, mib(s.file_bytes), s.seconds, s.n_threads);
    }
    return 0;
}
