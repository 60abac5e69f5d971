/* test_memory.c: the memory budget of sessions. tela_session_memory grows
 * by exactly the KV cache of the extra positions when the context grows
 * (the cache's size computed here from the fixture's shapes: layers x
 * positions x KV heads x (key + value dims) x 4 bytes; the activations stay
 * those of one 256-token step); a session larger than its budget fails
 * with TELA_ERR_NOMEM, the numbers and the fix, leaving nothing behind, and
 * one within it is made; the demo model at the largest context (over the
 * machine's memory) fails the same way. Skipped (77) without the fixtures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tela/tela.h"
#include "test.h"

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/fixtures/llama/llama-gqa-f32.gguf", src);
    if (access(path, R_OK) != 0) test_skip("no tests/fixtures/llama");
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) return test_finish();
    /* llama-gqa: 3 layers, 2 KV heads of 24 (keys and values) */
    const uint64_t kv_per_pos = 3ull * 2 * (24 + 24) * 4;
    tela_session_params sp = tela_session_default_params();
    uint64_t a = 0, b = 0;
    sp.n_ctx = 1024;
    CHECK_OK(tela_session_memory(m, &sp, &a));
    sp.n_ctx = 3072;
    CHECK_OK(tela_session_memory(m, &sp, &b));
    CHECK_EQ_INT(b - a, 2048 * kv_per_pos);
    CHECK(a > 1024 * kv_per_pos);

    /* a budget below the need: the error, with the numbers; nothing made */
    sp.n_ctx = 3072;
    sp.mem_budget = b - 1;
    tela_session *s = (tela_session *)&sp; /* must become NULL */
    CHECK_EQ_INT(tela_session_create(m, &sp, &s), TELA_ERR_NOMEM);
    CHECK(s == NULL);
    const char *msg = tela_last_error();
    CHECK_MSG(strstr(msg, "3072 tokens") && strstr(msg, "MiB") && strstr(msg, "-c") && strstr(msg, "--mem-budget"),
              "message: %s", msg);
    /* the same budget plus one byte: made */
    sp.mem_budget = b;
    CHECK_OK(tela_session_create(m, &sp, &s));
    tela_session_free(s);

    /* the largest context of the demo model (about 62 GB of KV cache) on
     * this machine's memory, when it does not fit */
    tela_model_free(m);
    m = NULL;
    snprintf(path, sizeof path, "%s/models/tela-kjv-q8_0.gguf", src);
    if (access(path, R_OK) != 0) return test_finish();
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) return test_finish();
    uint64_t fr = 0, tot = 0, big = 0;
    CHECK_OK(tela_model_device_memory(m, &fr, &tot));
    sp.mem_budget = 0;
    sp.n_ctx = 1 << 24;
    CHECK_OK(tela_session_memory(m, &sp, &big));
    if (big > fr) {
        s = NULL;
        CHECK_EQ_INT(tela_session_create(m, &sp, &s), TELA_ERR_NOMEM);
        CHECK(s == NULL);
        CHECK_MSG(strstr(tela_last_error(), "available"), "message: %s", tela_last_error());
    } else {
        printf("note: a %llu-byte session fits in %llu available bytes; the machine check did not run\n",
               (unsigned long long)big, (unsigned long long)fr);
    }
    tela_model_free(m);
    return test_finish();
}
