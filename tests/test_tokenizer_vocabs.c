/* test_tokenizer_vocabs.c: llama.cpp's tokenizer test vectors
 * (../shared/reference/llamacpp-vocab): every string of NAME.gguf.inp
 * (separated by "\n__ggml_vocab_test__\n" lines) must tokenize, without BOS
 * and with special tokens as plain text (as llama.cpp's test-tokenizer-0
 * does), to the ids on the matching line of NAME.gguf.out. Those ids come
 * from Hugging Face tokenizers. The GGUF vocabularies are in ../shared;
 * llama-bpe (Llama 3) and qwen2 (Qwen3) use the npm tokenizer.json files
 * that scripts/fetch-test-data.sh puts under build-data/. Decoding the ids
 * must give the string back. */
#include "test_tokenizer_util.h"

static int32_t *parse_ids(const char *line, size_t *n) {
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    const char *p = line;
    for (;;) {
        while (*p == ' ') p++;
        if (*p < '0' || *p > '9') break;
        char *end;
        long v = strtol(p, &end, 10);
        if (*n == cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    return ids;
}

/* Returns the number of strings checked. */
static int run_vectors(const char *name, const tela_vocab *v, const char *dir) {
    char inp_path[4200], out_path[4200];
    if (snprintf(inp_path, sizeof inp_path, "%s/ggml-vocab-%s.gguf.inp", dir, name) >= (int)sizeof inp_path ||
        snprintf(out_path, sizeof out_path, "%s/ggml-vocab-%s.gguf.out", dir, name) >= (int)sizeof out_path)
        return 0;
    size_t inp_len = 0;
    char *inp = tt_read(inp_path, &inp_len);
    char *out = tt_read(out_path, NULL);
    CHECK_MSG(inp && out, "%s: cannot read the .inp/.out files", name);
    if (!inp || !out) {
        free(inp);
        free(out);
        return 0;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t pos = 0;
    char *line = out;
    int n_cases = 0;
    while (pos < inp_len) {
        char *next = strstr(inp + pos, sep);
        size_t end = next ? (size_t)(next - inp) : inp_len;
        char *eol = strchr(line, '\n');
        CHECK_MSG(eol != NULL, "%s: .out has fewer lines than .inp has strings", name);
        if (!eol) break;
        *eol = '\0';
        size_t n_exp;
        int32_t *exp = parse_ids(line, &n_exp);
        line = eol + 1;

        const char *text = inp + pos;
        size_t len = end - pos;
        char what[160];
        snprintf(what, sizeof what, "%s: string %d '%.40s'", name, n_cases, text);
        size_t n_got;
        int32_t *got = tt_tokenize(v, text, len, false, false, &n_got);
        tt_check_ids(what, got, n_got, exp, n_exp);
        tt_check_decode(what, v, exp, n_exp, false, text, len, true);
        free(got);
        free(exp);
        n_cases++;
        pos = next ? end + sizeof sep - 1 : inp_len;
    }
    CHECK_MSG(n_cases >= 40, "%s: only %d test strings found", name, n_cases);
    free(inp);
    free(out);
    return n_cases;
}

int main(void) {
    int ran = 0;
    char dir[4096], path[4200];
    if (test_path(dir, sizeof dir, "TELA_SHARED_DIR", "reference/llamacpp-vocab") && tt_exists(dir)) {
        static const char *const ggufs[] = {"gpt-2", "llama-spm", "phi-3", "deepseek-coder"};
        for (size_t i = 0; i < sizeof ggufs / sizeof ggufs[0]; i++) {
            if (snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, ggufs[i]) >= (int)sizeof path) continue;
            tela_vocab *v = NULL;
            tela_status st = tela_vocab_load(path, &v);
            CHECK_MSG(st == TELA_OK, "loading %s: %s", path, tela_last_error());
            if (st != TELA_OK) continue;
            ran += run_vectors(ggufs[i], v, dir);
            tela_vocab_free(v);
        }
        /* the same vectors through the Hugging Face tokenizer.json files */
        static const char *const hf[][2] = {{"llama-bpe", "llama3"}, {"qwen2", "qwen3"}};
        for (size_t i = 0; i < 2; i++) {
            char tdir[4096];
            if (!tt_data_path(tdir, sizeof tdir, hf[i][1])) continue;
            if (snprintf(path, sizeof path, "%s/tokenizer.json", tdir) >= (int)sizeof path) continue;
            if (!tt_exists(path)) {
                printf("note: %s absent (run scripts/fetch-test-data.sh): %s not checked\n", path, hf[i][0]);
                continue;
            }
            tela_vocab *v = NULL;
            tela_status st = tela_vocab_load(tdir, &v);
            CHECK_MSG(st == TELA_OK, "loading %s: %s", tdir, tela_last_error());
            if (st != TELA_OK) continue;
            CHECK_MSG(!strcmp(tela_vocab_pre_name(v), hf[i][0]), "%s: pre-tokenizer recognised as '%s', not '%s'",
                      tdir, tela_vocab_pre_name(v), hf[i][0]);
            ran += run_vectors(hf[i][0], v, dir);
            tela_vocab_free(v);
        }
    }
    if (!ran) test_skip("no tokenizer test vectors (TELA_SHARED_DIR unset or ../shared absent)");
    printf("%d test strings\n", ran);
    return test_finish();
}
