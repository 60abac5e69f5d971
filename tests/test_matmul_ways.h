/* test_matmul_ways.h: what the packed-kernel tests (test_qdot_packed_f.c,
 * test_qdot_packed_q8.c) share: one product through tela_op_matmul four
 * ways. y[0..2]: packed (into pbuf, by the first), on 1, 2 and 3 threads,
 * which must agree to the bit (a row's result may not depend on the
 * thread that computes it); y[3]: the unpacked kernels on 2 threads, for
 * the caller to check against its model. Include after test.h and
 * backend/cpu/ops.h. */
#ifndef TELA_TEST_MATMUL_WAYS_H
#define TELA_TEST_MATMUL_WAYS_H

#include <stdlib.h>
#include <string.h>

static void matmul_four_ways(tela_mat *m, void *pbuf, const float *x, int64_t n, int64_t n_rows, int n_tok,
                             float *y[4]) {
    const size_t y_bytes = sizeof(float) * (size_t)(n_rows * n_tok);
    for (int k = 0; k < 4; k++) {
        y[k] = malloc(y_bytes);
        if (!y[k]) abort();
        const int nt = k < 3 ? k + 1 : 2;
        tela_threadpool *pool = NULL;
        CHECK_OK(tela_threadpool_create(nt, &pool));
        if (!pool) abort();
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_matmul_scratch(n)));
        if (k == 0) {
            tela_op_pack(pool, m, pbuf);
            CHECK(m->packed == pbuf);
        }
        if (k == 3) m->packed = NULL; /* the unpacked kernels */
        tela_op_matmul(pool, m, x, n, y[k], n_rows, n_tok);
        tela_threadpool_free(pool);
    }
    CHECK(memcmp(y[0], y[1], y_bytes) == 0);
    CHECK(memcmp(y[0], y[2], y_bytes) == 0);
}

#endif
