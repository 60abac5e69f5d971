/* test_tokenizer_bad.c: vocabularies from broken or unusual files fail with
 * a clear status and message, never a crash: GGUF tokenizer metadata written
 * with tela's GGUF writer (missing keys, wrong types, short arrays, unknown
 * model or pre-tokenizer) and tokenizer.json directories (bad JSON, unknown
 * model, bad ids and merges). Also small valid files of both kinds, and
 * random input through a real vocabulary (byte-level BPE must give the text
 * back exactly). */
#include <unistd.h>

#include "format/gguf.h"
#include "test_tokenizer_util.h"

static char tmpdir[256];

/* ------------------------------------------------------------ GGUF */

typedef struct gguf_spec {
    const char *model;          /* NULL: no tokenizer.ggml.model */
    const char *pre;
    bool tokens_as_u32;
    int n_tokens;               /* of the 5 below */
    int n_types;                /* entries of token_type (-1: none) */
    bool scores_as_strings;
    bool merges;
    uint32_t bos;
} gguf_spec;

static const char *const tok5[] = {"a", "b", "ab", "<s>", "\xC4\xA0"}; /* "Ġ" = byte 0x20 */

static tela_status load_spec(const gguf_spec *s, tela_vocab **v) {
    char path[300];
    snprintf(path, sizeof path, "%s/t.gguf", tmpdir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    if (s->model) tela_gguf_writer_add_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre) tela_gguf_writer_add_str(w, "tokenizer.ggml.pre", s->pre);
    if (s->tokens_as_u32) tela_gguf_writer_add_u32(w, "tokenizer.ggml.tokens", 5);
    else tela_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", tok5, (uint64_t)s->n_tokens);
    if (s->n_types >= 0) {
        const int32_t types[] = {1, 1, 1, 3, 1};
        tela_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", TELA_GGUF_INT32, types, (uint64_t)s->n_types);
    }
    if (s->scores_as_strings) tela_gguf_writer_add_str_arr(w, "tokenizer.ggml.scores", tok5, 5);
    if (s->merges) {
        const char *merges[] = {"a b"};
        tela_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, 1);
    }
    tela_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", s->bos);
    tela_status st = tela_gguf_writer_write(w, path);
    tela_gguf_writer_free(w);
    CHECK_MSG(st == TELA_OK, "writing %s: %s", path, tela_last_error());
    *v = NULL;
    st = tela_vocab_load(path, v);
    unlink(path);
    return st;
}

static void expect_gguf(const char *what, gguf_spec s, tela_status want, const char *in_message) {
    tela_vocab *v;
    tela_status st = load_spec(&s, &v);
    CHECK_MSG(st == want, "%s: status %s, expected %s (%s)", what, tela_status_name(st), tela_status_name(want),
              st ? tela_last_error() : "");
    if (st != TELA_OK && in_message)
        CHECK_MSG(strstr(tela_last_error(), in_message) != NULL, "%s: message '%s' should mention '%s'", what,
                  tela_last_error(), in_message);
    CHECK(st == TELA_OK ? v != NULL : v == NULL);
    tela_vocab_free(v);
}

static void test_gguf(void) {
    const gguf_spec good = {"gpt2", "gpt-2", false, 5, 5, false, true, 3};
    gguf_spec s;

    tela_vocab *v;
    CHECK_OK(load_spec(&good, &v));
    if (v) {
        const int32_t exp[] = {2, 4, 0};
        size_t n;
        int32_t *got = tt_tokenize(v, "ab a", 4, false, true, &n);
        tt_check_ids("minimal gguf: 'ab a'", got, n, exp, 3);
        free(got);
        const int32_t exp2[] = {3, 2};
        got = tt_tokenize(v, "<s>ab", 5, false, true, &n);
        tt_check_ids("minimal gguf: '<s>ab'", got, n, exp2, 2);
        free(got);
        CHECK_EQ_INT(tela_vocab_bos(v), 3);
        CHECK_EQ_INT(tela_vocab_token_type(v, 3), TELA_TOKEN_CONTROL);
        CHECK(!strcmp(tela_vocab_pre_name(v), "gpt-2"));
        tela_vocab_free(v);
    }

    s = good;
    s.model = NULL;
    expect_gguf("no tokenizer", s, TELA_ERR_NOT_FOUND, "tokenizer.ggml.model");
    s = good;
    s.model = "t5";
    expect_gguf("t5 model", s, TELA_ERR_UNSUPPORTED, "'t5'");
    s = good;
    s.pre = "foo-bar";
    expect_gguf("unknown pre", s, TELA_ERR_UNSUPPORTED, "foo-bar");
    s = good;
    s.pre = NULL;
    expect_gguf("no pre: default", s, TELA_OK, NULL);
    s = good;
    s.merges = false;
    expect_gguf("no merges", s, TELA_ERR_FORMAT, "merges");
    s = good;
    s.n_types = 3;
    expect_gguf("short token_type", s, TELA_ERR_FORMAT, "token_type");
    s = good;
    s.scores_as_strings = true;
    expect_gguf("string scores", s, TELA_ERR_FORMAT, "scores");
    s = good;
    s.n_tokens = 0;
    s.n_types = -1;
    expect_gguf("no tokens", s, TELA_ERR_FORMAT, "tokens");
    s = good;
    s.tokens_as_u32 = true;
    s.n_types = -1;
    {
        tela_vocab *bad;
        tela_status st = load_spec(&s, &bad);
        CHECK_MSG(st != TELA_OK && bad == NULL, "tokens stored as a number must fail");
    }
    s = good;
    s.bos = 1000; /* out of range: treated as absent */
    {
        tela_vocab *ok;
        CHECK_OK(load_spec(&s, &ok));
        if (ok) CHECK_EQ_INT(tela_vocab_bos(ok), -1);
        tela_vocab_free(ok);
    }
    s = good;
    s.model = "llama"; /* SentencePiece: no merges needed, scores optional */
    s.merges = false;
    expect_gguf("llama model", s, TELA_OK, NULL);

    /* a truncated file */
    char path[300];
    snprintf(path, sizeof path, "%s/trunc.gguf", tmpdir);
    FILE *f = fopen(path, "wb");
    fwrite("GGUF\x03\x00\x00\x00\x01", 1, 9, f);
    fclose(f);
    v = NULL;
    CHECK(tela_vocab_load(path, &v) != TELA_OK && v == NULL);
    unlink(path);
    CHECK(tela_vocab_load("/nonexistent/file.gguf", &v) == TELA_ERR_IO);
}

/* ------------------------------------------------------------ tokenizer.json */

static tela_status load_json(const char *tokenizer_json, const char *config_json, tela_vocab **v) {
    char path[300];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs(tokenizer_json, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmpdir);
    if (config_json) {
        f = fopen(path, "wb");
        fputs(config_json, f);
        fclose(f);
    } else {
        unlink(path);
    }
    *v = NULL;
    return tela_vocab_load(tmpdir, v);
}

#define HF_PRE "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
#define HF_HEAD "{\"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": true}], "
#define HF_BYTELEVEL "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "

static void expect_json(const char *what, const char *json, tela_status want, const char *in_message) {
    tela_vocab *v;
    tela_status st = load_json(json, NULL, &v);
    CHECK_MSG(st == want, "%s: status %s, expected %s (%s)", what, tela_status_name(st), tela_status_name(want),
              st ? tela_last_error() : "");
    if (st != TELA_OK && in_message)
        CHECK_MSG(strstr(tela_last_error(), in_message) != NULL, "%s: message '%s' should mention '%s'", what,
                  tela_last_error(), in_message);
    tela_vocab_free(v);
}

static void test_json(void) {
    const char *good = HF_HEAD HF_PRE
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 4}, "
        "\"merges\": [[\"a\", \"b\"]]}}";
    tela_vocab *v;
    CHECK_OK(load_json(good, "{\"bos_token\": {\"content\": \"<s>\"}, \"add_bos_token\": true, "
                             "\"chat_template\": \"{{ x }}\"}", &v));
    if (v) {
        const int32_t exp[] = {3, 2, 4, 0};
        size_t n;
        int32_t *got = tt_tokenize(v, "ab a", 4, true, true, &n);
        tt_check_ids("minimal tokenizer.json: 'ab a'", got, n, exp, 4);
        free(got);
        CHECK(tela_vocab_chat_template(v) && !strcmp(tela_vocab_chat_template(v), "{{ x }}"));
        CHECK(!strcmp(tela_vocab_pre_name(v), "gpt-2"));
        tela_vocab_free(v);
    }
    /* merges as "a b" strings work the same */
    CHECK_OK(load_json(HF_HEAD HF_PRE "\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                                            "\"merges\": [\"a b\"]}}", NULL, &v));
    if (v) {
        const int32_t exp[] = {2};
        size_t n;
        int32_t *got = tt_tokenize(v, "ab", 2, true, true, &n);
        tt_check_ids("string merges: 'ab'", got, n, exp, 1);
        free(got);
        tela_vocab_free(v);
    }

    /* added-token flags from tokenizer.json: lstrip/rstrip swallow the spaces */
    CHECK_OK(load_json("{\"added_tokens\": [{\"id\": 3, \"content\": \"<m>\", \"special\": false, "
                       "\"lstrip\": true, \"rstrip\": true}], " HF_PRE
                       "\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}",
                       NULL, &v));
    if (v) {
        const int32_t exp[] = {0, 3, 1};
        size_t n;
        int32_t *got = tt_tokenize(v, "a <m> b", 7, false, false, &n);
        tt_check_ids("lstrip/rstrip from tokenizer.json: 'a <m> b'", got, n, exp, 3);
        free(got);
        tela_vocab_free(v);
    }

    /* a chat template in a file of its own */
    char tpl[300];
    snprintf(tpl, sizeof tpl, "%s/chat_template.jinja", tmpdir);
    FILE *tf = fopen(tpl, "wb");
    fputs("{{ y }}", tf);
    fclose(tf);
    CHECK_OK(load_json(good, NULL, &v));
    CHECK(v && tela_vocab_chat_template(v) && !strcmp(tela_vocab_chat_template(v), "{{ y }}"));
    tela_vocab_free(v);
    unlink(tpl);

    expect_json("not JSON", "{\"model\": ", TELA_ERR_FORMAT, "JSON");
    expect_json("no vocab", "{\"model\": {\"type\": \"BPE\"}}", TELA_ERR_FORMAT, "vocab");
    expect_json("unigram", "{\"model\": {\"type\": \"Unigram\", \"vocab\": {}}}", TELA_ERR_UNSUPPORTED, "Unigram");
    expect_json("negative id",
                HF_BYTELEVEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
                TELA_ERR_FORMAT, "vocab");
    expect_json("huge id",
                HF_BYTELEVEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e15}, \"merges\": []}}",
                TELA_ERR_FORMAT, "vocab");
    expect_json("bad merge", HF_BYTELEVEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
                TELA_ERR_FORMAT, "merges");
    expect_json("removed split",
                "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}, "
                "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                TELA_ERR_UNSUPPORTED, "Removed");
    expect_json("bad regex",
                "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                "{\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": "
                "false}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                TELA_ERR_UNSUPPORTED, "regex");
    expect_json("not byte-level", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                TELA_ERR_UNSUPPORTED, "byte-level");
    expect_json("bad added token", "{\"added_tokens\": [{\"id\": \"x\"}], " HF_PRE
                "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                TELA_ERR_FORMAT, "added_tokens");
    CHECK(tela_vocab_load("/nonexistent-dir-for-tela/", &v) != TELA_OK);
}

/* ------------------------------------------------------------ random input */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

static void test_random(void) {
    char path[4096];
    if (!test_path(path, sizeof path, "TELA_SHARED_DIR", "reference/llamacpp-vocab/ggml-vocab-gpt-2.gguf") ||
        !tt_exists(path)) {
        printf("note: gpt-2 vocabulary absent: random round trips not run\n");
        return;
    }
    tela_vocab *v;
    CHECK_OK(tela_vocab_load(path, &v));
    if (!v) return;
    static const char *const frags[] = {"<|endoftext|>", " ", "  ", "\n", "'s", "a", "Z", "9", "\xC3\xA9",
                                        "\xE4\xBD\xA0", "\xF0\x9F\x99\x82", "\xCC\x81", "!", "\t", "\xFF", "\x80"};
    int mismatches = 0;
    for (int iter = 0; iter < 300; iter++) {
        char text[600];
        size_t len = 0;
        int parts = (int)(next_rand() % 40);
        for (int p = 0; p < parts; p++) {
            const char *fr = frags[next_rand() % (sizeof frags / sizeof frags[0])];
            size_t fl = strlen(fr);
            if (len + fl >= sizeof text) break;
            memcpy(text + len, fr, fl);
            len += fl;
        }
        bool valid = true;
        for (size_t i = 0; i < len; i++) valid &= (unsigned char)text[i] != 0xFF && (unsigned char)text[i] != 0x80;
        for (int parse = 0; parse < 2; parse++) {
            size_t n;
            int32_t *ids = tt_tokenize(v, text, len, false, parse, &n);
            CHECK(ids != NULL);
            char *back = NULL;
            size_t blen = 0;
            CHECK_OK(tela_vocab_detokenize(v, ids, n, false, &back, &blen));
            /* byte-level BPE loses nothing: valid text comes back as it was */
            if (valid && back && (blen != len || memcmp(back, text, len))) mismatches++;
            free(back);
            free(ids);
        }
    }
    CHECK_EQ_INT(mismatches, 0);
    tela_vocab_free(v);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tela_tok_bad_XXXXXX");
    if (!mkdtemp(tmpdir)) test_skip("cannot make a temporary directory");
    test_gguf();
    test_json();
    test_random();
    char path[300];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return test_finish();
}
