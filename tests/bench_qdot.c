/* bench_qdot.c: throughput of the qdot kernels (not a ctest test: CMake only
 * picks up tests/test_*.c). Build and run against a built library:
 *
 *   cc -O2 -march=native -std=c11 -D_GNU_SOURCE -Iinclude -Isrc tests/bench_qdot.c \
 *      build/lib/libtela.a -lpcre2-8 -lutf8proc -lcjson -lpthread -lm -o bench_qdot
 *   ./bench_qdot [threads] [isa]        (isa: scalar, avx2, avx512; default best)
 *
 * Reports, per weight type:
 *  - matvec: GB/s of weight bytes streamed by gemm with one activation
 *    column over a 64 MB matrix (decode's memory-bound case), beside a plain
 *    streaming read of the same buffer (the machine's bandwidth floor);
 *  - gemm: GFLOP/s (2 * rows * cols * n) of a 256 x 256 (n = 4096) matrix
 *    product, weights in cache (prefill's compute-bound case), and of a
 *    gemm of one 4 x 4 tile per call on L1-resident data (n = 1024; no
 *    reuse across tiles, so per-call preparation is not amortized).
 * Rows are split among the threads as a caller would (multiples of the
 * tile height). Times are each thread's CPU time (the slowest thread's),
 * best of several repetitions, so that other processes on a shared machine
 * disturb the figures less (they still compete for memory bandwidth). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/qdot.h"
#include "quant/quant.h"
#include "util/cpu_features.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 1;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / 16777216.0 - 0.5);
}

/* ------------------------------------------------------ thread fan-out */

typedef struct job job;
struct job {
    void (*fn)(job *, int ith, int nth);
    const tela_qdot_traits *q;
    const uint8_t *w;
    size_t ws;
    int64_t rows;
    const uint8_t *x;
    size_t xs;
    int64_t cols;
    int64_t n;
    float *out;
    volatile uint64_t sink[64];
};

static int g_nth = 1;
static job *g_job;
static double g_cpu[64];
static pthread_barrier_t g_start, g_done;

static void *worker(void *arg) {
    const int ith = (int)(intptr_t)arg;
    for (;;) {
        pthread_barrier_wait(&g_start);
        if (!g_job) return NULL;
        const double t0 = cpu_now();
        g_job->fn(g_job, ith, g_nth);
        g_cpu[ith] = cpu_now() - t0;
        pthread_barrier_wait(&g_done);
    }
}

static double run(job *j) {
    g_job = j;
    pthread_barrier_wait(&g_start);
    const double t0 = cpu_now();
    j->fn(j, 0, g_nth);
    g_cpu[0] = cpu_now() - t0;
    pthread_barrier_wait(&g_done);
    double t = 0;
    for (int i = 0; i < g_nth; i++) t = g_cpu[i] > t ? g_cpu[i] : t;
    return t;
}

static void gemm_part(job *j, int ith, int nth) {
    const int tr = j->q->tile_rows;
    const int64_t tiles = (j->rows + tr - 1) / tr;
    const int64_t r0 = tiles * ith / nth * tr, r1r = tiles * (ith + 1) / nth * tr;
    const int64_t r1 = r1r < j->rows ? r1r : j->rows;
    if (r1 > r0) j->q->gemm(j->w + (size_t)r0 * j->ws, j->ws, r1 - r0, j->x, j->xs, j->cols, j->n, j->out + r0, j->rows);
}

/* The bandwidth floor: sum the buffer as 64-byte vectors, four at a time
 * (GCC/clang vector extension; full-width loads at -march=native). */
typedef uint64_t v8u64 __attribute__((vector_size(64), aligned(64)));
static void read_part(job *j, int ith, int nth) {
    const size_t vecs = j->ws * (size_t)j->rows / 64;
    const size_t a = vecs * (size_t)ith / (size_t)nth, b = vecs * (size_t)(ith + 1) / (size_t)nth;
    const v8u64 *p = (const v8u64 *)j->w;
    v8u64 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t i = a;
    for (; i + 4 <= b; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    s0 += s1 + s2 + s3;
    uint64_t t = 0;
    for (int k = 0; k < 8; k++) t += s0[k];
    j->sink[ith * 8] = t;
}

static double best_of(job *j, int reps) {
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t = run(j);
        if (t < best) best = t;
    }
    return best;
}

static void bench_type(tela_type type, tela_isa isa) {
    const tela_qdot_traits *q = tela_qdot_get_isa(type, isa);
    if (!q) return;
    const int64_t n = 4096;
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(q->vec_dot_type, n);

    /* matvec over 64 MB */
    const int64_t rows = (int64_t)((64u << 20) / wrb) / 16 * 16;
    uint8_t *w = aligned_alloc(64, (wrb * (size_t)rows + 63) / 64 * 64);
    float *row = malloc(sizeof(float) * n);
    for (int64_t r = 0; r < 64; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = frand();
        if (tela_quantize_row(type, row, w + r * wrb, n) != TELA_OK) { fprintf(stderr, "%s\n", tela_last_error()); exit(1); }
    }
    for (int64_t r = 64; r < rows; r++) memcpy(w + r * wrb, w + (r % 64) * wrb, wrb);
    enum { MAXC = 256 };
    uint8_t *x = aligned_alloc(64, (xrb * MAXC + 63) / 64 * 64);
    for (int c = 0; c < MAXC; c++) {
        for (int64_t i = 0; i < n; i++) row[i] = frand();
        q->from_float(row, x + c * xrb, n);
    }
    float *out = malloc(sizeof(float) * (size_t)rows * MAXC);

    job j = {.fn = read_part, .q = q, .w = w, .ws = wrb, .rows = rows, .x = x, .xs = xrb, .cols = 1, .n = n, .out = out};
    const double bytes = (double)wrb * (double)rows;
    const double t_read = best_of(&j, 10);
    j.fn = gemm_part;
    const double t_mv = best_of(&j, 10);

    /* matvec with weights in L2 (~256 KB): the kernel's compute ceiling */
    j.rows = (int64_t)((256u << 10) / wrb) / 4 * 4;
    const double t_mv2 = best_of(&j, 50);
    const double bytes2 = (double)wrb * (double)j.rows;

    /* gemm with cached weights: 256 rows (a few hundred KB) x 256 columns */
    j.rows = 256;
    j.cols = MAXC;
    const double t_mm = best_of(&j, 5);
    const double flop_mm = 2.0 * 256 * MAXC * (double)n;

    /* one 4x4 tile over L1-resident data: n = 1024 */
    const int reps = 200;
    double t_tile = 1e30;
    for (int k = 0; k < 20; k++) {
        const double t0 = cpu_now();
        for (int i = 0; i < reps; i++) q->gemm(w, wrb, 4, x, xrb, 4, 1024, out, 4);
        const double t = cpu_now() - t0;
        t_tile = t < t_tile ? t : t_tile;
    }
    const double flop_tile = 2.0 * 16 * 1024 * reps;

    printf("%-6s %-7s matvec %5.1f GB/s (%3.0f%% of read %5.1f GB/s; in L2 %5.1f GB/s)  gemm %6.1f GFLOP/s  4x4/call %6.1f GFLOP/s/thread\n",
           tela_type_name(type), tela_isa_name(q->isa), bytes / t_mv * 1e-9, 100.0 * t_read / t_mv,
           bytes / t_read * 1e-9, bytes2 / t_mv2 * 1e-9, flop_mm / t_mm * 1e-9, flop_tile / t_tile * 1e-9);
    fflush(stdout);
    free(w);
    free(x);
    free(out);
    free(row);
}

int main(int argc, char **argv) {
    g_nth = argc > 1 ? atoi(argv[1]) : 1;
    if (g_nth < 1) g_nth = 1;
    tela_isa isa = tela_qdot_best_isa();
    if (argc > 2) {
        for (int i = 0; i < TELA_ISA_COUNT; i++)
            if (!strcmp(argv[2], tela_isa_name((tela_isa)i))) isa = (tela_isa)i;
    }
    char feat[256];
    printf("cpu: %s\nthreads %d, isa %s\n", tela_cpu_features_string(feat, sizeof feat), g_nth, tela_isa_name(isa));
    pthread_barrier_init(&g_start, NULL, (unsigned)g_nth);
    pthread_barrier_init(&g_done, NULL, (unsigned)g_nth);
    pthread_t th[64];
    for (int i = 1; i < g_nth && i < 64; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    const tela_type types[] = {TELA_TYPE_Q4_K, TELA_TYPE_Q6_K, TELA_TYPE_Q5_K, TELA_TYPE_Q8_0, TELA_TYPE_Q4_0,
                               TELA_TYPE_F16, TELA_TYPE_BF16, TELA_TYPE_F32};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) bench_type(types[i], isa);
    g_job = NULL;
    pthread_barrier_wait(&g_start);
    for (int i = 1; i < g_nth && i < 64; i++) pthread_join(th[i], NULL);
    return 0;
}
