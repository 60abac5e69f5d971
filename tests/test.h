/* test.h: a minimal test harness. Each test file is one program; CHECK
 * macros count failures; test_finish() prints "N passed, N failed" and sets
 * the exit code. test_skip() exits 77, which ctest reports as skipped. */
#ifndef TELA_TESTS_TEST_H
#define TELA_TESTS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TEST_QUICK: 1 in an AddressSanitizer build (unoptimized and
 * instrumented), where the costly tests check less to stay within CI's
 * time; 0 otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_QUICK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_QUICK 1
#endif
#endif
#ifndef TEST_QUICK
#define TEST_QUICK 0
#endif

static int test_passed_, test_failed_;

/* Test data: a splitmix64 stream, reseeded per test program with
 * test_rng_seed() so each file's data stay fixed. */
static inline uint64_t *test_rng_state_(void) {
    static uint64_t state = 0x9e3779b97f4a7c15ull;
    return &state;
}
static inline void test_rng_seed(uint64_t seed) { *test_rng_state_() = seed; }
static inline uint64_t test_rnd(void) {
    uint64_t z = (*test_rng_state_() += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [0, 1) */
static inline double test_unif(void) { return (double)(test_rnd() >> 11) * (1.0 / 9007199254740992.0); }
/* standard normal (Box-Muller) */
static inline float test_gauss(void) {
    double u = test_unif(), v = test_unif();
    if (u < 1e-300) u = 1e-300;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#define CHECK(cond) do { \
    if (cond) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

#define CHECK_MSG(cond, ...) do { \
    if (cond) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ == b_) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, a_, b_); } \
} while (0)

#define CHECK_NEAR(a, b, tol) do { double a_ = (double)(a), b_ = (double)(b); \
    if (fabs(a_ - b_) <= (tol)) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, (double)(tol), a_, b_); } \
} while (0)

#define CHECK_OK(expr) do { tela_status s_ = (expr); \
    if (s_ == TELA_OK) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, tela_last_error()); } \
} while (0)

/* The largest |a - b| over a row relative to the range of b (+inf where a
 * is not finite): how logits rows are compared across devices and paths. */
static inline double test_row_err(const float *a, const float *b, int n) {
    double mx = -INFINITY, mn = INFINITY, d = 0;
    for (int i = 0; i < n; i++) {
        if (b[i] > mx) mx = b[i];
        if (b[i] < mn) mn = b[i];
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = isfinite(e) ? e : INFINITY;
    }
    return d / (mx - mn > 0 ? mx - mn : 1);
}

/* The worst test_row_err over `rows` rows of n (one after the other). */
static inline double test_rows_err(const float *a, const float *b, int rows, int n) {
    double worst = 0;
    for (int i = 0; i < rows; i++) {
        const double e = test_row_err(a + (size_t)i * n, b + (size_t)i * n, n);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ ? 1 : 0;
}

static inline void test_skip(const char *why) {
    printf("SKIP: %s\n", why);
    exit(77);
}

/* Path of a file under the source tree / ../shared (NULL if unset). */
static inline const char *test_path(char *buf, size_t cap, const char *env, const char *rel) {
    const char *root = getenv(env);
    if (!root) return NULL;
    snprintf(buf, cap, "%s/%s", root, rel);
    return buf;
}

/* dir = $TELA_SOURCE_DIR/sub; skips the test (77) when TELA_SOURCE_DIR is
 * unset or dir/probe cannot be read (a tree without those fixtures). */
static inline void test_fixture_dir(char *dir, size_t cap, const char *sub, const char *probe) {
    char why[128], path[1400];
    if (!test_path(dir, cap, "TELA_SOURCE_DIR", sub)) test_skip("TELA_SOURCE_DIR is not set");
    snprintf(path, sizeof path, "%s/%s", dir, probe);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, sizeof why, "no %s", sub);
        test_skip(why);
    }
    fclose(f);
}

/* The path of a tool built beside the tela binary ($TELA_BIN), e.g.
 * "tela-mkmodel", into buf; NULL without TELA_BIN. */
static inline const char *test_tool_path(char *buf, size_t cap, const char *tool) {
    const char *bin = getenv("TELA_BIN");
    const char *slash = bin ? strrchr(bin, '/') : NULL;
    if (!slash) return NULL;
    snprintf(buf, cap, "%.*s/%s", (int)(slash - bin), bin, tool);
    return buf;
}

/* Reads a whole file into a NUL-terminated malloc'd buffer (NULL if it cannot
 * be read); *len gets its size when len is not NULL. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

#endif
