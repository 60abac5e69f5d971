/* exact_mode.c: the process-wide exact mode of the backends
 * (tela_ops_exact_matmul in backend.h): off unless
 * tela_ops_set_exact_matmul(true) or TELA_EXACT_MATMUL=1 in the environment,
 * read on first use. */
#include "backend/backend.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 0 = unset, 1 = fast, 2 = exact. */
static atomic_int exact_mode;

void tela_ops_set_exact_matmul(bool exact) { atomic_store(&exact_mode, exact ? 2 : 1); }

bool tela_ops_exact_matmul(void) {
    int m = atomic_load(&exact_mode);
    if (m == 0) {
        const char *e = getenv("TELA_EXACT_MATMUL");
        m = e && e[0] && strcmp(e, "0") != 0 ? 2 : 1;
        int expected = 0;
        if (!atomic_compare_exchange_strong(&exact_mode, &expected, m)) m = expected;
    }
    return m == 2;
}
