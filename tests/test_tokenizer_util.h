/* test_tokenizer_util.h: helpers shared by the tokenizer tests: locating
 * reference data (TELA_SHARED_DIR, TELA_TEST_DATA), reading files, hex,
 * and comparing token ids and decoded text with messages naming the case. */
#ifndef TELA_TESTS_TEST_TOKENIZER_UTIL_H
#define TELA_TESTS_TEST_TOKENIZER_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tela/tela.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static inline bool tt_exists(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0;
}

/* Whole file, NUL-terminated; NULL when it cannot be read. */
static inline char *tt_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (!got) break;
        n += got;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Where the npm tokenizer directories are: $TELA_TEST_DATA, else
 * $TELA_SOURCE_DIR/build-data (scripts/fetch-test-data.sh fills it). */
static inline const char *tt_data_path(char *buf, size_t cap, const char *rel) {
    const char *d = getenv("TELA_TEST_DATA");
    if (d && *d) snprintf(buf, cap, "%s/%s", d, rel);
    else if (getenv("TELA_SOURCE_DIR")) snprintf(buf, cap, "%s/build-data/%s", getenv("TELA_SOURCE_DIR"), rel);
    else return NULL;
    return buf;
}

static inline char *tt_unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

/* Tokenizes into a malloc'd array (NULL on failure, reported). */
static inline int32_t *tt_tokenize(const tela_vocab *v, const char *s, size_t n, bool add_special, bool parse_special,
                                   size_t *count) {
    size_t cap = 2 * n + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    tela_status st = tela_vocab_tokenize(v, s, n, add_special, parse_special, ids, cap, count);
    if (st != TELA_OK) {
        fprintf(stderr, "tokenize failed: %s\n", tela_last_error());
        free(ids);
        return NULL;
    }
    return ids;
}

/* Checks ids against the expected list; prints both on a mismatch. */
static inline void tt_check_ids(const char *what, const int32_t *got, size_t n_got, const int32_t *exp, size_t n_exp) {
    bool same = got && n_got == n_exp && (n_exp == 0 || !memcmp(got, exp, n_exp * sizeof *exp));
    CHECK_MSG(same, "%s: token ids differ", what);
    if (!same) {
        fprintf(stderr, "  expected (%zu):", n_exp);
        for (size_t i = 0; i < n_exp && i < 40; i++) fprintf(stderr, " %d", (int)exp[i]);
        fprintf(stderr, "\n  got      (%zu):", got ? n_got : 0);
        for (size_t i = 0; got && i < n_got && i < 40; i++) fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, "\n");
    }
}

/* Checks detokenize(ids) and the streaming decoder against the expected text. */
static inline void tt_check_decode(const char *what, const tela_vocab *v, const int32_t *ids, size_t n,
                                   bool skip_special, const char *exp, size_t exp_len, bool check_stream) {
    char *text = NULL;
    size_t len = 0;
    tela_status st = tela_vocab_detokenize(v, ids, n, skip_special, &text, &len);
    CHECK_MSG(st == TELA_OK, "%s: detokenize failed: %s", what, tela_last_error());
    if (st == TELA_OK) {
        bool same = len == exp_len && !memcmp(text, exp, len);
        CHECK_MSG(same, "%s: decoded text differs:\n  expected '%.*s'\n  got      '%.*s'", what, (int)exp_len, exp,
                  (int)len, text);
    }
    free(text);
    if (!check_stream) return;
    tela_detok_stream *s = tela_detok_stream_create(v, skip_special);
    size_t cap = exp_len * 2 + 64, k = 0;
    char *acc = malloc(cap);
    bool fits = true;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t pl;
        if (i < n) tela_detok_stream_push(s, ids[i], &piece, &pl);
        else tela_detok_stream_flush(s, &piece, &pl);
        if (k + pl > cap) {
            fits = false;
            break;
        }
        memcpy(acc + k, piece, pl);
        k += pl;
    }
    bool same = fits && k == exp_len && !memcmp(acc, exp, k);
    CHECK_MSG(same, "%s: streamed text differs:\n  expected '%.*s'\n  got      '%.*s'", what, (int)exp_len, exp,
              (int)k, acc);
    free(acc);
    tela_detok_stream_free(s);
}

#endif
