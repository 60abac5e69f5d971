/* test_tokenizer_unit.c: the tokenizer's parts on small vocabularies built in
 * memory, with expected values worked out by hand from the definitions:
 * UTF-8 replacement (Unicode's maximal-subpart rule, which Python's
 * bytes.decode(errors="replace") and Rust's from_utf8_lossy follow), GPT-2's
 * byte map, BPE merge order (lowest rank, leftmost first), ignore_merges,
 * the named pre-tokenizers' splits, added tokens (leftmost-longest, HF's
 * lstrip/rstrip/single_word, parse_special), SentencePiece merges by score
 * with byte fallback, detokenization and the streaming decoder, the
 * tokenize() buffer contract, and the NFC shortcut checked against utf8proc. */
#include <pthread.h>
#include <utf8proc.h>

#include "test_tokenizer_util.h"
#include "tokenizer/tok_internal.h"

/* ------------------------------------------------------------ helpers */

/* GPT-2's bytes_to_unicode(), written out independently of bpe.c: the
 * printable bytes map to themselves, the rest to 256, 257... in byte order. */
static uint32_t ref_byte_cp(unsigned b) {
    uint32_t n = 0;
    for (unsigned x = 0; x < 256; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        if (x == b) return printable ? x : 256 + n;
        if (!printable) n++;
    }
    return 0;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

typedef struct extra_tok {
    const char *text;
    int type;
    uint8_t flags; /* added to the type's flags */
} extra_tok;

/* Byte-level vocabulary: ids 0..255 are the bytes (id = byte value), then
 * the extra tokens from 256 on; merges are "a b" strings of ASCII tokens. */
static tela_vocab *make_bpe(const extra_tok *extra, int n_extra, const char *const *merges, int n_merges,
                            const char *pre, bool ignore_merges) {
    tela_vocab *v;
    if (tela_vocab_create(TELA_VOCAB_BPE, 256 + n_extra, &v) != TELA_OK) return NULL;
    for (unsigned b = 0; b < 256; b++) {
        char s[4];
        size_t n = put_utf8(ref_byte_cp(b), s);
        tela_vocab_set_token(v, (int32_t)b, s, n, TELA_TOKEN_NORMAL, 0);
    }
    for (int i = 0; i < n_extra; i++) {
        tela_vocab_set_token(v, 256 + i, extra[i].text, strlen(extra[i].text), extra[i].type, 0);
        v->tok[256 + i].flags |= extra[i].flags;
    }
    tela_vocab_index(v);
    for (int i = 0; i < n_merges; i++) tela_vocab_add_merge_str(v, merges[i], strlen(merges[i]));
    if (pre) CHECK_OK(tela_vocab_set_pre(v, pre));
    v->ignore_merges = ignore_merges;
    CHECK_OK(tela_vocab_finish(v));
    return v;
}

static void expect_tokens(const char *what, const tela_vocab *v, const char *text, size_t len, bool add_special,
                          bool parse_special, const int32_t *exp, size_t n_exp) {
    size_t n;
    int32_t *got = tt_tokenize(v, text, len, add_special, parse_special, &n);
    tt_check_ids(what, got, n, exp, n_exp);
    free(got);
}
#define EXPECT_TOKENS(v, text, add, parse, ...) do { \
    const int32_t exp_[] = {__VA_ARGS__}; \
    expect_tokens(#v ": " #text, v, text, sizeof(text) - 1, add, parse, exp_, sizeof exp_ / sizeof exp_[0]); \
} while (0)

static void expect_decode(const char *what, const tela_vocab *v, const int32_t *ids, size_t n, bool skip,
                          const char *exp, bool stream) {
    tt_check_decode(what, v, ids, n, skip, exp, strlen(exp), stream);
}
#define EXPECT_DECODE(v, skip, stream, exp, ...) do { \
    const int32_t ids_[] = {__VA_ARGS__}; \
    expect_decode(#v " -> " #exp, v, ids_, sizeof ids_ / sizeof ids_[0], skip, exp, stream); \
} while (0)

/* ------------------------------------------------------------ UTF-8 */

static void check_repair(const char *in, size_t n, const char *exp) {
    char *out;
    size_t len;
    CHECK_OK(tela_utf8_repair(in, n, &out, &len));
    CHECK_MSG(len == strlen(exp) && !memcmp(out, exp, len), "repair of %zu bytes: got '%.*s' expected '%s'", n,
              (int)len, out, exp);
    free(out);
}
#define REPAIR(in, exp) check_repair(in, sizeof(in) - 1, exp)
#define R "\xEF\xBF\xBD"

static void test_utf8(void) {
    REPAIR("plain ascii", "plain ascii");
    REPAIR("\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xBD\xA0\xE5\xA5\xBD");
    REPAIR("abc\x80" "def", "abc" R "def");           /* stray continuation byte */
    REPAIR("x\xE4\xBD", "x" R);                       /* truncated: one maximal subpart */
    REPAIR("\xED\xA0\x80", R R R);                    /* surrogate: ED must be followed by 80..9F */
    REPAIR("\xC0\x80", R R);                          /* C0 never starts a sequence */
    REPAIR("\xE0\x80\x80", R R R);                    /* E0 needs A0..BF next */
    REPAIR("\xE0\xA0", R);                            /* a valid start, cut short */
    REPAIR("\xF0\x9F\x98", R);
    REPAIR("\xF4\x90\x80\x80", R R R R);              /* above U+10FFFF */
    REPAIR("A\xE4\xBD\xA0\xE4" "B", "A\xE4\xBD\xA0" R "B");
    REPAIR("\xFE\xFF", R R);
    REPAIR("\xC3 \xA9", R " " R);

    size_t adv;
    uint32_t cp;
    CHECK_EQ_INT(tela_utf8_next((const unsigned char *)"\xF0\x9F\x98\x80", 4, &adv, &cp), 1);
    CHECK_EQ_INT(cp, 0x1F600);
    CHECK_EQ_INT(adv, 4);
    CHECK_EQ_INT(tela_utf8_next((const unsigned char *)"\xF0\x9F", 2, &adv, &cp), -1);
    CHECK_EQ_INT(tela_utf8_next((const unsigned char *)"\xF0\x41", 2, &adv, &cp), 0);
    CHECK_EQ_INT(adv, 1);
    CHECK(tela_utf8_valid("h\xC3\xA9llo w\xC3\xB6rld, long enough for the 8-byte path", 47));
    CHECK(!tela_utf8_valid("0123456789abcdef\xFF", 17));
}

/* ------------------------------------------------------------ byte map */

static void test_byte_map(void) {
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(' '), 0x120);  /* 'Ġ' */
    CHECK_EQ_INT(tela_gpt2_byte_to_cp('\n'), 0x10A); /* 'Ċ' */
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(0), 0x100);
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(0x7F), 0x121);
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(0xA0), 0x142);
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(0xAD), 0x143);
    CHECK_EQ_INT(tela_gpt2_byte_to_cp('A'), 'A');
    CHECK_EQ_INT(tela_gpt2_byte_to_cp(0xA1), 0xA1);
    int same = 0, back = 0;
    for (unsigned b = 0; b < 256; b++) {
        same += tela_gpt2_byte_to_cp(b) == ref_byte_cp(b);
        back += tela_gpt2_cp_to_byte(ref_byte_cp(b)) == (int)b;
    }
    CHECK_EQ_INT(same, 256);
    CHECK_EQ_INT(back, 256);
    CHECK_EQ_INT(tela_gpt2_cp_to_byte(' '), -1);  /* space is not one of the stand-ins */
    CHECK_EQ_INT(tela_gpt2_cp_to_byte(0x144), -1);
}

/* ------------------------------------------------------------ BPE */

static void test_bpe_merges(void) {
    const extra_tok ex[] = {{"ab", 1, 0}, {"bc", 1, 0}, {"abc", 1, 0}, {"aa", 1, 0}, {"aaaa", 1, 0}, {"xyz", 1, 0}};
    enum { AB = 256, BC, ABC, AA, AAAA, XYZ };

    /* the lowest rank goes first: "b c" (rank 0) beats "a b" (rank 1) */
    const char *m1[] = {"b c", "a b", "ab c"};
    tela_vocab *v1 = make_bpe(ex, 6, m1, 3, NULL, false);
    EXPECT_TOKENS(v1, "abc", false, true, 'a', BC);
    tela_vocab_free(v1);

    const char *m2[] = {"a b", "ab c", "b c"};
    tela_vocab *v2 = make_bpe(ex, 6, m2, 3, NULL, false);
    EXPECT_TOKENS(v2, "abc", false, true, ABC);
    EXPECT_TOKENS(v2, "abcbc", false, true, ABC, BC);
    tela_vocab_free(v2);

    /* equal ranks: the leftmost pair first */
    const char *m3[] = {"a a", "aa aa"};
    tela_vocab *v3 = make_bpe(ex, 6, m3, 2, NULL, false);
    EXPECT_TOKENS(v3, "aaa", false, true, AA, 'a');
    EXPECT_TOKENS(v3, "aaaa", false, true, AAAA);
    EXPECT_TOKENS(v3, "aaaaa", false, true, AAAA, 'a');
    /* a word of 40 bytes (array path) and of 100 / 101 bytes (heap path) */
    char many[128];
    memset(many, 'a', sizeof many);
    size_t n;
    int32_t *got = tt_tokenize(v3, many, 40, false, true, &n);
    int ok = got && n == 10;
    for (size_t i = 0; ok && i < n; i++) ok = got[i] == AAAA;
    CHECK_MSG(ok, "40 x 'a' should be 10 x 'aaaa'");
    free(got);
    got = tt_tokenize(v3, many, 100, false, true, &n);
    ok = got && n == 25;
    for (size_t i = 0; ok && i < n; i++) ok = got[i] == AAAA;
    CHECK_MSG(ok, "100 x 'a' should be 25 x 'aaaa'");
    free(got);
    got = tt_tokenize(v3, many, 101, false, true, &n);
    ok = got && n == 26 && got[25] == 'a';
    for (size_t i = 0; ok && i < 25; i++) ok = got[i] == AAAA;
    CHECK_MSG(ok, "101 x 'a' should be 25 x 'aaaa' then 'a'");
    free(got);
    tela_vocab_free(v3);

    /* "ab" x 30 (heap path): "a b" merges first everywhere; "ab c" never applies */
    tela_vocab *v4 = make_bpe(ex, 6, m2, 3, NULL, false);
    char abab[61];
    for (int i = 0; i < 30; i++) memcpy(abab + 2 * i, "ab", 2);
    got = tt_tokenize(v4, abab, 60, false, true, &n);
    ok = got && n == 30;
    for (size_t i = 0; ok && i < n; i++) ok = got[i] == AB;
    CHECK_MSG(ok, "'ab' x 30 should be 30 x 'ab'");
    free(got);
    tela_vocab_free(v4);

    /* ignore_merges: a word that is a token is taken whole */
    tela_vocab *v5 = make_bpe(ex, 6, m2, 3, NULL, false);
    EXPECT_TOKENS(v5, "xyz", false, true, 'x', 'y', 'z');
    tela_vocab_free(v5);
    tela_vocab *v6 = make_bpe(ex, 6, m2, 3, NULL, true);
    EXPECT_TOKENS(v6, "xyz", false, true, XYZ);
    EXPECT_TOKENS(v6, "xyzx", false, true, 'x', 'y', 'z', 'x');
    tela_vocab_free(v6);

    /* bytes outside ASCII go through their stand-in characters */
    tela_vocab *v7 = make_bpe(ex, 6, NULL, 0, NULL, false);
    EXPECT_TOKENS(v7, "\xC3\xA9 \n", false, true, 0xC3, 0xA9, ' ', '\n');
    tela_vocab_free(v7);
}

/* ------------------------------------------------------------ pre-tokenizers */

typedef struct pieces {
    char buf[512];
    size_t n;
} pieces;

static tela_status collect(void *ctx, const char *s, size_t n) {
    pieces *p = ctx;
    if (p->n + n + 1 < sizeof p->buf) {
        memcpy(p->buf + p->n, s, n);
        p->n += n;
        p->buf[p->n++] = '|';
        p->buf[p->n] = '\0';
    }
    return TELA_OK;
}

static void expect_split(const char *pre, const char *text, const char *exp) {
    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, pre, false);
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    pieces p = {.n = 0};
    p.buf[0] = '\0';
    CHECK_OK(tela_pretok_split(v, text, strlen(text), md, collect, &p));
    CHECK_MSG(!strcmp(p.buf, exp), "%s split of '%s':\n  got      %s\n  expected %s", pre, text, p.buf, exp);
    pcre2_match_data_free(md);
    tela_vocab_free(v);
}

static void test_pretok(void) {
    expect_split("gpt-2", "Hello  world's 123!!\n", "Hello| | world|'s| 123|!!|\n|");
    expect_split("llama-bpe", "I'M 12345\n\n  x", "I|'M| |123|45|\n\n| | x|");
    expect_split("qwen2", "I'M 12345\n\n  x", "I|'M| |1|2|3|4|5|\n\n| | x|");
    expect_split("qwen35", "n\xCC\x83o", "n\xCC\x83o|");   /* a combining mark stays in the word */
    expect_split("qwen2", "n\xCC\x83o", "n|\xCC\x83o|");  /* Qwen2: the mark is the optional non-letter before "o" */
    expect_split("deepseek-coder", "a1 b\nc", "a|1| b|\n|c|");
    expect_split("default", "a+b 123456", "a|+|b| |123|456|");

    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, NULL, false);
    tela_status st = tela_vocab_set_pre(v, "no-such-pre");
    CHECK_EQ_INT(st, TELA_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(tela_last_error(), "no-such-pre") != NULL, "the error names the pre-tokenizer: %s",
              tela_last_error());
    tela_vocab_free(v);
}

/* ------------------------------------------------------------ added tokens */

static void test_added(void) {
    const extra_tok ex[] = {
        {"<s>", TELA_TOKEN_CONTROL, 0},
        {"<|x|>", TELA_TOKEN_CONTROL, 0},
        {"<|x|>y", TELA_TOKEN_USER_DEFINED, 0},
        {"<m>", TELA_TOKEN_USER_DEFINED, TELA_TOKF_LSTRIP | TELA_TOKF_RSTRIP},
        {"<w>", TELA_TOKEN_USER_DEFINED, TELA_TOKF_SINGLE_WORD},
        {"<|im_end|>", TELA_TOKEN_CONTROL, 0},
    };
    enum { S = 256, X, XY, M, W, IMEND };
    tela_vocab *v = make_bpe(ex, 6, NULL, 0, NULL, false);
    EXPECT_TOKENS(v, "q<s>r", false, true, 'q', S, 'r');
    EXPECT_TOKENS(v, "q<s>r", false, false, 'q', '<', 's', '>', 'r');
    EXPECT_TOKENS(v, "<|x|>yz", false, true, XY, 'z');       /* leftmost-longest */
    EXPECT_TOKENS(v, "<|x|>z", false, true, X, 'z');
    EXPECT_TOKENS(v, "<|x|>yz", false, false, XY, 'z');      /* user-defined: matched all the same */
    EXPECT_TOKENS(v, "<|x|>z", false, false, '<', '|', 'x', '|', '>', 'z');
    EXPECT_TOKENS(v, "a  <m>  b", false, true, 'a', M, 'b'); /* lstrip + rstrip swallow the spaces */
    EXPECT_TOKENS(v, "a<w>b", false, true, 'a', '<', 'w', '>', 'b');
    EXPECT_TOKENS(v, "a <w> b", false, true, 'a', ' ', W, ' ', 'b');
    EXPECT_TOKENS(v, "<w>", false, true, W);
    EXPECT_TOKENS(v, "<s><s>", false, true, S, S);
    EXPECT_TOKENS(v, "<s", false, true, '<', 's');
    CHECK(tela_vocab_is_eog(v, IMEND));
    CHECK(!tela_vocab_is_eog(v, S));
    CHECK_EQ_INT(tela_vocab_eot(v), IMEND);

    /* decoding: special tokens give their text unless skipped */
    EXPECT_DECODE(v, false, true, "q<s>r", 'q', S, 'r');
    EXPECT_DECODE(v, true, true, "qr", 'q', S, 'r');
    EXPECT_DECODE(v, true, true, "<m>", M); /* user-defined tokens are not "special" */
    tela_vocab_free(v);
}

/* ------------------------------------------------------------ SentencePiece */

#define SP "\xE2\x96\x81"

static tela_vocab *make_spm(void) {
    static const struct { const char *t; float score; } spm_pieces[] = {
        {SP, -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {SP "a", -3}, {SP "ab", -2}, {"bc", -4}, {"aa", -2},
    };
    int n_pieces = (int)(sizeof spm_pieces / sizeof spm_pieces[0]);
    tela_vocab *v;
    tela_vocab_create(TELA_VOCAB_SPM, 3 + 256 + n_pieces, &v);
    tela_vocab_set_token(v, 0, "<unk>", 5, TELA_TOKEN_UNKNOWN, 0);
    tela_vocab_set_token(v, 1, "<s>", 3, TELA_TOKEN_CONTROL, 0);
    tela_vocab_set_token(v, 2, "</s>", 4, TELA_TOKEN_CONTROL, 0);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        tela_vocab_set_token(v, 3 + b, s, 6, TELA_TOKEN_BYTE, 0);
    }
    for (int i = 0; i < n_pieces; i++)
        tela_vocab_set_token(v, 259 + i, spm_pieces[i].t, strlen(spm_pieces[i].t), TELA_TOKEN_NORMAL,
                             spm_pieces[i].score);
    tela_vocab_index(v);
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
    CHECK_OK(tela_vocab_finish(v));
    return v;
}

static void test_spm(void) {
    enum { UNK, BOS, EOS, BYTE0 };
    enum { P_SP = 259, P_A, P_B, P_C, P_AB, P_SPA, P_SPAB, P_BC, P_AA };
    tela_vocab *v = make_spm();
    EXPECT_TOKENS(v, "ab", false, true, P_SPAB);               /* ▁a (-3) first, then ▁ab (-2) */
    EXPECT_TOKENS(v, "abc", false, true, P_SPAB, P_C);
    EXPECT_TOKENS(v, "bc a", false, true, P_SP, P_BC, P_SPA);
    EXPECT_TOKENS(v, "aaa", false, true, P_SP, P_AA, P_A);     /* equal scores: leftmost */
    EXPECT_TOKENS(v, "\xC3\xA9", false, true, P_SP, BYTE0 + 0xC3, BYTE0 + 0xA9); /* byte fallback */
    EXPECT_TOKENS(v, "ab", true, true, BOS, P_SPAB);
    EXPECT_TOKENS(v, "<s>ab", false, true, BOS, P_SPAB);       /* a space again after a special token */
    EXPECT_TOKENS(v, "", true, true, BOS);

    EXPECT_DECODE(v, false, true, "ab", P_SPAB);               /* the prefix space is removed */
    EXPECT_DECODE(v, false, true, "<s> ab", BOS, P_SPAB);
    EXPECT_DECODE(v, true, true, "ab", BOS, P_SPAB);
    EXPECT_DECODE(v, false, true, "a\xE4\xBD\xA0", P_A, BYTE0 + 0xE4, BYTE0 + 0xBD, BYTE0 + 0xA0);
    /* HF ByteFallback: an invalid run is one U+FFFD per byte */
    EXPECT_DECODE(v, false, false, "a" R R "b", P_A, BYTE0 + 0xE4, BYTE0 + 0xBD, P_B);
    tela_vocab_free(v);
}

/* ------------------------------------------------------------ streaming */

static void expect_push(tela_detok_stream *s, int32_t id, const char *exp) {
    const char *piece;
    size_t len;
    tela_detok_stream_push(s, id, &piece, &len);
    CHECK_MSG(len == strlen(exp) && !memcmp(piece, exp, len), "push %d: got '%.*s' expected '%s'", (int)id, (int)len,
              piece, exp);
}

static void test_stream(void) {
    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, NULL, false);
    tela_detok_stream *s = tela_detok_stream_create(v, false);
    expect_push(s, 0xE4, "");
    expect_push(s, 0xBD, "");
    expect_push(s, 0xA0, "\xE4\xBD\xA0");
    expect_push(s, 0xFF, R);
    expect_push(s, 0xE4, "");
    expect_push(s, 'a', R "a");
    expect_push(s, 'b', "b");
    expect_push(s, -5, "");          /* out of range: nothing */
    expect_push(s, 0xF0, "");
    const char *piece;
    size_t len;
    tela_detok_stream_flush(s, &piece, &len);
    CHECK_MSG(len == 3 && !memcmp(piece, R, 3), "flush of a held lead byte gives U+FFFD");
    tela_detok_stream_flush(s, &piece, &len);
    CHECK_EQ_INT(len, 0);
    tela_detok_stream_free(s);

    EXPECT_DECODE(v, false, true, "x" R "y", 'x', 0xE4, 0xBD, 'y');   /* one U+FFFD for the maximal subpart */
    EXPECT_DECODE(v, false, true, R R, 0xED, 0xA0);
    char *text;
    const int32_t bad[] = {1, 999};
    CHECK_EQ_INT(tela_vocab_detokenize(v, bad, 2, false, &text, NULL), TELA_ERR_ARG);
    tela_vocab_free(v);

    /* SentencePiece: the first text of a stream loses its prefix space */
    tela_vocab *sp = make_spm();
    s = tela_detok_stream_create(sp, true);
    expect_push(s, 1, "");        /* <s> skipped */
    expect_push(s, 259 + 6, "ab"); /* ▁ab */
    expect_push(s, 259 + 5, " a"); /* ▁a */
    tela_detok_stream_free(s);
    tela_vocab_free(sp);
}

/* ------------------------------------------------------------ contract */

static void test_contract(void) {
    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, "gpt-2", false);
    int32_t out[2] = {-1, -1};
    size_t n = 0;
    tela_status st = tela_vocab_tokenize(v, "hello", 5, false, true, out, 2, &n);
    CHECK_EQ_INT(st, TELA_ERR_ARG);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(out[0], 'h');
    CHECK_EQ_INT(out[1], 'e');
    CHECK_EQ_INT(tela_vocab_tokenize(v, "hello", 5, false, true, NULL, 0, &n), TELA_ERR_ARG);
    CHECK_EQ_INT(n, 5);
    CHECK_OK(tela_vocab_tokenize(v, "", 0, false, true, NULL, 0, &n));
    CHECK_EQ_INT(n, 0);
    /* invalid UTF-8 is tokenized as its U+FFFD-repaired text */
    EXPECT_TOKENS(v, "a\xFF", false, true, 'a', 0xEF, 0xBF, 0xBD);
    /* the word cache gives the same answer the second time */
    EXPECT_TOKENS(v, " hello world", false, true, ' ', 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd');
    EXPECT_TOKENS(v, " hello world", false, true, ' ', 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd');
    /* text with NUL bytes */
    EXPECT_TOKENS(v, "a\0b", false, true, 'a', 0, 'b');
    char buf[8];
    CHECK_EQ_INT(tela_vocab_token_bytes(v, ' ', false, buf, sizeof buf), 1);
    CHECK_EQ_INT(buf[0], ' ');
    CHECK_EQ_INT(tela_vocab_token_bytes(v, 300, false, buf, sizeof buf), 0);
    tela_vocab_free(v);
}

/* ------------------------------------------------------------ NFC */

static bool nfc_is_identity(uint32_t cp) {
    char s[5];
    size_t n = tela_utf8_encode(cp, s);
    s[n] = '\0';
    utf8proc_uint8_t *out = utf8proc_NFC((const utf8proc_uint8_t *)s);
    bool same = out && !strcmp((const char *)out, s);
    free(out);
    return same;
}

/* The shortcut's table against utf8proc's data: each "stable" character has
 * combining class 0, is left as it is by NFC, and is never the second or later
 * character of a canonical decomposition (so it never composes with what is
 * before it). */
static void test_nfc_table(void) {
    static bool second[0x110000];
    memset(second, 0, sizeof second);
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        utf8proc_int32_t d[8];
        int opt = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 8, UTF8PROC_DECOMPOSE, &opt);
        for (utf8proc_ssize_t i = 1; i < n && i < 8; i++) second[d[i]] = true;
    }
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || !tela_nfc_stable(cp)) continue;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        if (p->combining_class != 0 || second[cp] || !nfc_is_identity(cp)) {
            if (bad++ < 10) fprintf(stderr, "U+%04X is not NFC-stable\n", (unsigned)cp);
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* NFC through the vocabulary: decomposed e + acute becomes U+00E9 */
    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, "qwen2", false);
    EXPECT_TOKENS(v, "e\xCC\x81", false, true, 0xC3, 0xA9);
    EXPECT_TOKENS(v, "\xE2\x84\xAB", false, true, 0xC3, 0x85);   /* Angstrom sign -> U+00C5 */
    tela_vocab_free(v);
}

/* ------------------------------------------------------------ cache, threads */

typedef struct thread_job {
    const tela_vocab *v;
    const char *text;
    size_t len;
    int bad;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *j = arg;
    for (int it = 0; it < 20; it++) {
        size_t n;
        int32_t *ids = tt_tokenize(j->v, j->text, j->len, false, true, &n);
        /* no merges: every byte is its own token */
        if (!ids || n != j->len) j->bad++;
        for (size_t i = 0; ids && i < n && i < j->len; i++) j->bad += ids[i] != (unsigned char)j->text[i];
        free(ids);
    }
    return NULL;
}

/* More distinct words than the word cache holds (it is cleared when full),
 * tokenized by four threads at once. */
static void test_cache_threads(void) {
    tela_vocab *v = make_bpe(NULL, 0, NULL, 0, "gpt-2", false);
    size_t cap = 70000 * 8, len = 0;
    char *text = malloc(cap);
    for (int i = 0; i < 70000; i++) len += (size_t)snprintf(text + len, cap - len, " w%05d", i);
    thread_job one = {v, text, len, 0};
    thread_main(&one);
    CHECK_EQ_INT(one.bad, 0);
    thread_job jobs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (thread_job){v, text + t * 7000, 7 * 3000, 0};
        pthread_create(&th[t], NULL, thread_main, &jobs[t]);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ_INT(jobs[t].bad, 0);
    }
    free(text);
    tela_vocab_free(v);
}

int main(void) {
    test_utf8();
    test_byte_map();
    test_bpe_merges();
    test_pretok();
    test_added();
    test_spm();
    test_stream();
    test_contract();
    test_nfc_table();
    test_cache_threads();
    return test_finish();
}
