/* test_tokenizer_hf.c: tela against Hugging Face tokenizers on the Llama 3
 * and Qwen3 tokenizers, both as GGUF metadata (../shared/reference/fixtures
 * llama-d1.gguf, qwen35-d1.gguf) and as tokenizer.json (build-data/, from
 * npm). Two sources of expected values:
 *  - refs-d1.json "tokenizers": text -> ids -> decoded text;
 *  - tests/fixtures/tokenizer/hf_cases_NAME.json, written by
 *    tools/reference/tokenizer_cases.py with the `tokenizers` library:
 *    whitespace, digits, contractions, scripts, emoji, normalization,
 *    invalid UTF-8, long words, special tokens in text; ids with and without
 *    special-token parsing, decode with and without skip_special, and
 *    decoding of single-byte tokens that are not valid UTF-8.
 * Parts whose files are absent are skipped. */
#include <cjson/cJSON.h>

#include "test_tokenizer_util.h"

static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) ids[k++] = (int32_t)e->valuedouble;
    return ids;
}

static int run_refs(const tela_vocab *v, const char *model, const cJSON *cases) {
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *dec = cJSON_GetObjectItem(c, "decoded")->valuestring;
        size_t n_exp, n_got;
        int32_t *exp = json_ids(cJSON_GetObjectItem(c, "ids"), &n_exp);
        char what[200];
        snprintf(what, sizeof what, "%s: refs-d1 '%.40s'", model, text);
        int32_t *got = tt_tokenize(v, text, strlen(text), false, true, &n_got);
        tt_check_ids(what, got, n_got, exp, n_exp);
        tt_check_decode(what, v, exp, n_exp, false, dec, strlen(dec), true);
        free(got);
        free(exp);
        n++;
    }
    return n;
}

static int run_hf_cases(const tela_vocab *v, const char *model, const cJSON *doc) {
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        size_t len;
        char *input = tt_unhex(cJSON_GetObjectItem(c, "input_hex")->valuestring, &len);
        char what[200];
        size_t n_exp, n_got;

        snprintf(what, sizeof what, "%s: %s", model, name);
        int32_t *exp = json_ids(cJSON_GetObjectItem(c, "ids"), &n_exp);
        int32_t *got = tt_tokenize(v, input, len, false, true, &n_got);
        tt_check_ids(what, got, n_got, exp, n_exp);
        free(got);

        snprintf(what, sizeof what, "%s: %s (special tokens as text)", model, name);
        size_t n_plain;
        int32_t *plain = json_ids(cJSON_GetObjectItem(c, "ids_no_special"), &n_plain);
        got = tt_tokenize(v, input, len, false, false, &n_got);
        tt_check_ids(what, got, n_got, plain, n_plain);
        free(got);
        free(plain);

        const char *dec = cJSON_GetObjectItem(c, "decoded")->valuestring;
        const char *dec_skip = cJSON_GetObjectItem(c, "decoded_skip_special")->valuestring;
        snprintf(what, sizeof what, "%s: %s (decode)", model, name);
        tt_check_decode(what, v, exp, n_exp, false, dec, strlen(dec), true);
        snprintf(what, sizeof what, "%s: %s (decode, skip special)", model, name);
        tt_check_decode(what, v, exp, n_exp, true, dec_skip, strlen(dec_skip), true);
        free(exp);
        free(input);
        n++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "decode_cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *dec = cJSON_GetObjectItem(c, "decoded")->valuestring;
        size_t n_ids;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n_ids);
        char what[200];
        snprintf(what, sizeof what, "%s: %s", model, name);
        tt_check_decode(what, v, ids, n_ids, false, dec, strlen(dec), true);
        free(ids);
        n++;
    }
    return n;
}

int main(void) {
    char path[4096], buf[4096];
    cJSON *refs = NULL;
    if (test_path(path, sizeof path, "TELA_SHARED_DIR", "reference/fixtures/refs-d1.json")) {
        char *t = tt_read(path, NULL);
        if (t) refs = cJSON_Parse(t);
        free(t);
    }
    /* name in refs-d1.json / fixture name, GGUF in ../shared, npm directory */
    static const char *const models[][3] = {
        {"llama3", "reference/fixtures/llama-d1.gguf", "llama3"},
        {"qwen3", "reference/fixtures/qwen35-d1.gguf", "qwen3"},
    };
    int ran = 0;
    for (size_t m = 0; m < 2; m++) {
        cJSON *cases = NULL;
        char fix[4096];
        if (test_path(fix, sizeof fix, "TELA_SOURCE_DIR", "tests/fixtures/tokenizer/hf_cases_")) {
            strncat(fix, models[m][0], sizeof fix - strlen(fix) - 6);
            strcat(fix, ".json");
            char *t = tt_read(fix, NULL);
            if (t) cases = cJSON_Parse(t);
            else printf("note: %s absent: HF cases not checked\n", fix);
            free(t);
        }
        const char *sources[2] = {NULL, NULL};
        if (test_path(path, sizeof path, "TELA_SHARED_DIR", models[m][1]) && tt_exists(path)) sources[0] = path;
        char tj[4200];
        if (tt_data_path(buf, sizeof buf, models[m][2])) {
            if (snprintf(tj, sizeof tj, "%s/tokenizer.json", buf) < (int)sizeof tj && tt_exists(tj)) sources[1] = buf;
            else printf("note: %s absent (run scripts/fetch-test-data.sh)\n", tj);
        }
        for (int s = 0; s < 2; s++) {
            if (!sources[s]) continue;
            tela_vocab *v = NULL;
            tela_status st = tela_vocab_load(sources[s], &v);
            CHECK_MSG(st == TELA_OK, "loading %s: %s", sources[s], tela_last_error());
            if (st != TELA_OK) continue;
            const cJSON *rc = refs ? cJSON_GetObjectItem(cJSON_GetObjectItem(refs, "tokenizers"), models[m][0]) : NULL;
            if (rc) ran += run_refs(v, sources[s], rc);
            if (cases) ran += run_hf_cases(v, sources[s], cases);
            tela_vocab_free(v);
        }
        cJSON_Delete(cases);
    }
    cJSON_Delete(refs);
    if (!ran) test_skip("no reference data found (../shared, build-data/ and the HF fixtures are all absent)");
    printf("%d cases\n", ran);
    return test_finish();
}
