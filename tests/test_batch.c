/* test_batch.c: batched forward passes on the CPU, every logits row
 * bit-identical to a session's (test_batch.h). */
#include "test_batch.h"

int main(void) {
    test_rng_seed(20261201);
    if (!check_models(2)) test_skip("no model files (TELA_SOURCE_DIR?)");
    return test_finish();
}
