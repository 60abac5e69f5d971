/* test_cuda_mem.h: what the CUDA operation tests (test_cuda_ops.c,
 * test_cuda_gdn.c) share: the GPU backend and exec under test, device
 * buffers, copies both ways, NaN poisoning (an output element left
 * unwritten then fails), random inputs, and the relative error against a
 * double-precision reference. Static: included by one test each. */
#ifndef TELA_TEST_CUDA_MEM_H
#define TELA_TEST_CUDA_MEM_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "test.h"

static tela_backend *gpu;
static tela_exec *gx;
static void *dmalloc(size_t bytes) {
    void *p = NULL;
    if (tela_backend_alloc(gpu, bytes, "test", &p) != TELA_OK) {
        fprintf(stderr, "%s\n", tela_last_error());
        exit(1);
    }
    return p;
}

/* Copies in the order of exec x's stream: a test that runs an operation
 * on an exec other than gx moves its inputs and outputs through that exec
 * (gx's copies are not ordered with its kernels). */
static void up_on(tela_exec *x, void *d, const void *h, size_t bytes) { CHECK_OK(tela_exec_upload(x, d, h, bytes)); }
static void down_on(tela_exec *x, void *h, const void *d, size_t bytes) {
    CHECK_OK(tela_exec_download(x, h, d, bytes));
}
static void up(void *d, const void *h, size_t bytes) { up_on(gx, d, h, bytes); }
static void down(void *h, const void *d, size_t bytes) { down_on(gx, h, d, bytes); }

static void poison_on(tela_exec *x, void *d, size_t n_floats) {
    float *p = malloc(n_floats * sizeof(float));
    for (size_t i = 0; i < n_floats; i++) p[i] = NAN;
    up_on(x, d, p, n_floats * sizeof(float)); /* (staged before it returns) */
    free(p);
}
static void poison(void *d, size_t n_floats) { poison_on(gx, d, n_floats); }

static float *rand_floats(size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = test_gauss() * scale;
    return v;
}

/* ||a - b|| / ||b|| over n values; NaN anywhere gives +inf. */
static double rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

#endif
