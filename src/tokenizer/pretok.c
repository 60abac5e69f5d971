/* pretok.c: pre-tokenizers of byte-level BPE vocabularies, named as GGUF's
 * tokenizer.ggml.pre names them. Each is a list of regexes applied in turn:
 * the first splits the text into its matches and the gaps between them
 * (Hugging Face's Split with behavior "Isolated"), each next one splits every
 * piece of the one before. The regexes are those of the models' own
 * tokenizer.json files, run with PCRE2 (UTF, Unicode properties, JIT); they
 * need PCRE2 rather than a DFA engine for the lookahead in \s+(?!\S). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

#define RE_CONTRACTIONS_I "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

/* GPT-2's pattern (also HF ByteLevel's use_regex=true). */
static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3: numbers in groups of up to three digits. */
static const char re_llama3[] =
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
/* Qwen2 / 2.5 / 3: single digits. */
static const char re_qwen2[] =
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
/* Qwen3.5: combining marks stay with their letters. */
static const char re_qwen35[] =
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* DeepSeek Coder: five splits in this order (its tokenizer.json's Sequence). */
static const char re_dsc_newline[] = "[\\r\\n]";
static const char re_dsc_letters[] = "\\s?\\p{L}+";
static const char re_dsc_punct[] = "\\s?\\p{P}+";
static const char re_dsc_cjk[] = "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
static const char re_dsc_digit[] = "\\p{N}";
/* What llama.cpp uses for "default" (no or unknown-to-it pre-tokenizer). */
static const char re_def_punct[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char re_def_words[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char re_def_numbers[] = "\\p{N}+";
static const char re_def_digits3[] = "[0-9][0-9][0-9]";

typedef struct pretok_def {
    const char *names[6];     /* the first is the canonical one */
    const char *re[TELA_MAX_PRETOK_RE];
    int norm;                 /* the tokenizer.json's normalizer */
    bool ignore_merges;       /* the tokenizer.json's model.ignore_merges */
    bool add_bos;             /* llama.cpp's default when add_bos_token is absent */
} pretok_def;

static const pretok_def pretoks[] = {
    {{"default"}, {re_def_punct, re_def_words, re_def_numbers, re_def_digits3}, TELA_NORM_NONE, false, false},
    {{"llama-bpe", "llama3", "llama-v3"}, {re_llama3}, TELA_NORM_NONE, true, true},
    /* Smaug is Llama 3's tokenizer (llama.cpp's converter also names Llama-3
     * tokenizer.json files so); llama.cpp adds no BOS for it by default. */
    {{"smaug-bpe"}, {re_llama3}, TELA_NORM_NONE, true, false},
    {{"qwen2", "deepseek-r1-qwen", "megrez"}, {re_qwen2}, TELA_NORM_NFC, false, false},
    {{"qwen35"}, {re_qwen35}, TELA_NORM_NFC, false, false},
    {{"gpt-2", "phi-2", "gpt2"}, {re_gpt2}, TELA_NORM_NONE, false, false},
    {{"deepseek-coder"}, {re_dsc_newline, re_dsc_letters, re_dsc_punct, re_dsc_cjk, re_dsc_digit}, TELA_NORM_NONE,
     false, false},
};

void tela_pretok_free(tela_vocab *v) {
    for (int i = 0; i < v->n_re; i++) pcre2_code_free(v->re[i]);
    v->n_re = 0;
    pcre2_match_context_free(v->re_ctx);
    v->re_ctx = NULL;
}

tela_status tela_vocab_set_regexes(tela_vocab *v, const char *name, const char *const *patterns, int n) {
    tela_pretok_free(v);
    if (n > TELA_MAX_PRETOK_RE)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "pre-tokenizer '%s' has %d regexes (at most %d)", name, n,
                           TELA_MAX_PRETOK_RE);
    snprintf(v->pre_name, sizeof v->pre_name, "%s", name);
    v->re_jit = true;
    /* PCRE2's default match limit (10 million steps) stops \s*[\r\n]+ on a
     * run of millions of spaces; these patterns are linear, so lift it */
    v->re_ctx = pcre2_match_context_create(NULL);
    if (!v->re_ctx) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    pcre2_set_match_limit(v->re_ctx, UINT32_MAX);
    for (int i = 0; i < n; i++) {
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                       &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            tela_pretok_free(v);
            return tela_errorf(TELA_ERR_UNSUPPORTED, "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s",
                               name, i, (size_t)off, (const char *)msg);
        }
        if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) v->re_jit = false;
        v->re[v->n_re++] = re;
    }
    return TELA_OK;
}

tela_status tela_vocab_set_pre(tela_vocab *v, const char *name) {
    for (size_t i = 0; i < sizeof pretoks / sizeof pretoks[0]; i++) {
        const pretok_def *d = &pretoks[i];
        for (int k = 0; k < 6 && d->names[k]; k++) {
            if (strcmp(name, d->names[k]) != 0) continue;
            int n = 0;
            while (n < TELA_MAX_PRETOK_RE && d->re[n]) n++;
            TELA_TRY(tela_vocab_set_regexes(v, d->names[0], d->re, n));
            v->norm = d->norm;
            v->ignore_merges = d->ignore_merges;
            v->add_bos = d->add_bos;
            return TELA_OK;
        }
    }
    char known[512] = "";
    for (size_t i = 0; i < sizeof pretoks / sizeof pretoks[0]; i++)
        for (int k = 0; k < 6 && pretoks[i].names[k]; k++) {
            size_t l = strlen(known);
            snprintf(known + l, sizeof known - l, "%s%s", l ? ", " : "", pretoks[i].names[k]);
        }
    return tela_errorf(TELA_ERR_UNSUPPORTED, "unknown pre-tokenizer '%s' (tela knows: %s)", name, known);
}

const char *tela_pretok_name_for_regexes(const char *const *patterns, int n) {
    for (size_t i = 0; i < sizeof pretoks / sizeof pretoks[0]; i++) {
        const pretok_def *d = &pretoks[i];
        int m = 0;
        while (m < TELA_MAX_PRETOK_RE && d->re[m]) m++;
        if (m != n) continue;
        int k = 0;
        while (k < n && !strcmp(patterns[k], d->re[k])) k++;
        if (k == n) return d->names[0];
    }
    return NULL;
}

/* One match of re in s[0..n) from start; returns 1 with [*ms, *me), 0 when
 * there is none, or an error status (negative) turned into a message. */
static int find_match(const tela_vocab *v, pcre2_code *re, const char *s, size_t n, size_t start,
                      pcre2_match_data *md, size_t *ms, size_t *me, tela_status *err) {
    int rc;
    if (v->re_jit) rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, start, 0, md, v->re_ctx);
    else rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, v->re_ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        /* deep backtracking on an odd input: retry with a large JIT stack */
        pcre2_jit_stack *js = pcre2_jit_stack_create(1 << 16, 64 << 20, NULL);
        pcre2_match_context *mc = pcre2_match_context_copy(v->re_ctx);
        if (js && mc) {
            pcre2_jit_stack_assign(mc, NULL, js);
            rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, start, 0, md, mc);
        }
        pcre2_match_context_free(mc);
        pcre2_jit_stack_free(js);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        *err = tela_errorf(TELA_ERR_INTERNAL, "pre-tokenizer '%s': regex match failed at byte %zu: %s", v->pre_name,
                           start, (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static tela_status split_level(const tela_vocab *v, int level, const char *s, size_t n, pcre2_match_data *md,
                               tela_piece_fn emit, void *ctx) {
    if (level == v->n_re) return emit(ctx, s, n);
    pcre2_code *re = v->re[level];
    size_t pos = 0, gap = 0;
    while (pos < n) {
        size_t ms, me;
        tela_status err = TELA_OK;
        int r = find_match(v, re, s, n, pos, md, &ms, &me, &err);
        if (r < 0) return err;
        if (r == 0) break;
        if (me == ms) {
            /* an empty match splits nothing: step over one character */
            pos = ms + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (ms > gap) TELA_TRY(split_level(v, level + 1, s + gap, ms - gap, md, emit, ctx));
        TELA_TRY(split_level(v, level + 1, s + ms, me - ms, md, emit, ctx));
        gap = pos = me;
    }
    if (gap < n) TELA_TRY(split_level(v, level + 1, s + gap, n - gap, md, emit, ctx));
    return TELA_OK;
}

tela_status tela_pretok_split(const tela_vocab *v, const char *s, size_t n, pcre2_match_data *md, tela_piece_fn emit,
                              void *ctx) {
    if (!n) return TELA_OK;
    if (v->n_re == 0 || !md) return emit(ctx, s, n);
    return split_level(v, 0, s, n, md, emit, ctx);
}
