/* vocab.c: the vocabulary itself (token strings, types, scores, the string ->
 * id map, merge ranks, special ids), its builder used by the GGUF and HF
 * loaders, and tela_vocab_tokenize(): added/special tokens are cut out of
 * the text first (as Hugging Face's AddedVocabulary does), the rest is
 * normalized, pre-tokenized and encoded by BPE or SentencePiece. It stands
 * above the pieces it drives (pretok.c, bpe.c, spm.c, detok.c); the lookups
 * they share with it (hash, id lists, tela_vocab_find, word cache) are in
 * tok_lookup.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

#define TELA_MAX_TOKENS (1 << 26)

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

/* ------------------------------------------------------------- builder */

tela_status tela_vocab_create(tela_vocab_kind kind, int32_t n_tokens, tela_vocab **out) {
    *out = NULL;
    if (kind != TELA_VOCAB_BPE && kind != TELA_VOCAB_SPM)
        return tela_errorf(TELA_ERR_ARG, "unknown vocabulary kind %d", (int)kind);
    if (n_tokens <= 0 || n_tokens > TELA_MAX_TOKENS)
        return tela_errorf(TELA_ERR_FORMAT, "vocabulary of %d tokens (expected 1 to %d)", (int)n_tokens,
                           TELA_MAX_TOKENS);
    tela_vocab *v = calloc(1, sizeof *v);
    if (!v) return tela_errorf(TELA_ERR_NOMEM, "out of memory for a vocabulary");
    v->kind = kind;
    v->n_tokens = n_tokens;
    v->tok = calloc((size_t)n_tokens, sizeof *v->tok);
    v->text_cap = (size_t)n_tokens * 8 + 64;
    v->text = malloc(v->text_cap);
    if (!v->tok || !v->text) {
        tela_vocab_free(v);
        return tela_errorf(TELA_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", (int)n_tokens);
    }
    snprintf(v->model_name, sizeof v->model_name, "%s", kind == TELA_VOCAB_BPE ? "gpt2" : "llama");
    snprintf(v->pre_name, sizeof v->pre_name, "%s", "default");
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;
    v->add_space_prefix = kind == TELA_VOCAB_SPM;
    for (int b = 0; b < 256; b++) v->byte_id[b] = -1;
    *out = v;
    return TELA_OK;
}

static uint8_t flags_for_type(int type) {
    switch (type) {
    case TELA_TOKEN_CONTROL:
    case TELA_TOKEN_UNKNOWN:
        return TELA_TOKF_ADDED | TELA_TOKF_SPECIAL;
    case TELA_TOKEN_USER_DEFINED:
        return TELA_TOKF_ADDED;
    default:
        return 0;
    }
}

tela_status tela_vocab_set_token(tela_vocab *v, int32_t id, const char *text, size_t len, int type, float score) {
    if (id < 0 || id >= v->n_tokens)
        return tela_errorf(TELA_ERR_FORMAT, "token id %d out of range [0, %d)", (int)id, (int)v->n_tokens);
    if (len > UINT32_MAX - v->text_len || v->text_len + len >= UINT32_MAX)
        return tela_errorf(TELA_ERR_FORMAT, "vocabulary strings exceed 4 GiB (token %d)", (int)id);
    if (v->text_len + len + 1 > v->text_cap) {
        size_t cap = v->text_cap * 2;
        while (cap < v->text_len + len + 1) cap *= 2;
        char *nt = realloc(v->text, cap);
        if (!nt) return tela_errorf(TELA_ERR_NOMEM, "out of memory for vocabulary strings");
        v->text = nt;
        v->text_cap = cap;
    }
    if (len) memcpy(v->text + v->text_len, text, len);
    tela_tok *t = &v->tok[id];
    t->text_off = (uint32_t)v->text_len;
    t->text_len = (uint32_t)len;
    v->text_len += len;
    v->text[v->text_len] = '\0'; /* keeps every string NUL-terminated until the next one */
    v->text_len++;
    if (type < TELA_TOKEN_NORMAL || type > TELA_TOKEN_BYTE) type = TELA_TOKEN_NORMAL;
    t->type = (uint8_t)type;
    t->score = score;
    t->flags = flags_for_type(type);
    t->hash = tela_tok_hash(text, len);
    return TELA_OK;
}

tela_status tela_vocab_index(tela_vocab *v) {
    free(v->map);
    uint32_t cap = pow2_at_least((uint64_t)v->n_tokens * 2);
    v->map = malloc((size_t)cap * sizeof *v->map);
    if (!v->map) return tela_errorf(TELA_ERR_NOMEM, "out of memory for the vocabulary index");
    memset(v->map, 0xff, (size_t)cap * sizeof *v->map);
    v->map_mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const tela_tok *t = &v->tok[id];
        if (!t->type || !t->text_len) continue;
        uint32_t i = t->hash & v->map_mask;
        bool dup = false;
        while (v->map[i] >= 0) {
            const tela_tok *o = &v->tok[v->map[i]];
            if (o->hash == t->hash && o->text_len == t->text_len &&
                !memcmp(v->text + o->text_off, v->text + t->text_off, t->text_len)) {
                dup = true;
                break;
            }
            i = (i + 1) & v->map_mask;
        }
        if (!dup) v->map[i] = id;
    }
    return TELA_OK;
}

static uint64_t merge_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1); }

static tela_status merges_grow(tela_vocab *v, size_t want) {
    uint32_t cap = pow2_at_least((uint64_t)want * 2);
    if (v->merges && cap <= v->merge_mask + 1) return TELA_OK;
    tela_merge_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return tela_errorf(TELA_ERR_NOMEM, "out of memory for %zu merges", want);
    if (v->merges) {
        for (uint32_t i = 0; i <= v->merge_mask; i++) {
            if (!v->merges[i].key) continue;
            uint32_t j = (uint32_t)((v->merges[i].key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
            while (ns[j].key) j = (j + 1) & (cap - 1);
            ns[j] = v->merges[i];
        }
        free(v->merges);
    }
    v->merges = ns;
    v->merge_mask = cap - 1;
    v->merge_cap = cap / 2;
    return TELA_OK;
}

tela_status tela_vocab_reserve_merges(tela_vocab *v, size_t n) { return merges_grow(v, n); }

tela_status tela_vocab_add_merge(tela_vocab *v, const char *a, size_t alen, const char *b, size_t blen) {
    int32_t rank = v->next_rank++;
    int32_t ia = tela_vocab_find(v, a, alen);
    int32_t ib = tela_vocab_find(v, b, blen);
    if (ia < 0 || ib < 0) return TELA_OK;
    char small[256];
    char *buf = small;
    if (alen + blen > sizeof small) {
        buf = malloc(alen + blen);
        if (!buf) return tela_errorf(TELA_ERR_NOMEM, "out of memory reading merges");
    }
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    int32_t ir = tela_vocab_find(v, buf, alen + blen);
    if (buf != small) free(buf);
    if (ir < 0) return TELA_OK;
    if (!v->merges || v->n_merges + 1 > v->merge_cap) TELA_TRY(merges_grow(v, (v->n_merges + 1) * 2));
    uint64_t key = merge_key(ia, ib);
    uint32_t j = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & v->merge_mask;
    while (v->merges[j].key) {
        if (v->merges[j].key == key) return TELA_OK; /* a repeat: the first rank stays */
        j = (j + 1) & v->merge_mask;
    }
    v->merges[j].key = key;
    v->merges[j].rank = rank;
    v->merges[j].result = ir;
    v->n_merges++;
    return TELA_OK;
}

tela_status tela_vocab_add_merge_str(tela_vocab *v, const char *s, size_t len) {
    /* the separator is the first space after the first character */
    for (size_t i = 1; i < len; i++)
        if (s[i] == ' ') return tela_vocab_add_merge(v, s, i, s + i + 1, len - i - 1);
    v->next_rank++;
    return TELA_OK;
}

/* ------------------------------------------------------------- finishing */

static int cmp_added(const void *pa, const void *pb, void *ctx) {
    const tela_vocab *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const tela_tok *ta = &v->tok[a], *tb = &v->tok[b];
    unsigned char ca = (unsigned char)v->text[ta->text_off], cb = (unsigned char)v->text[tb->text_off];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (ta->text_len != tb->text_len) return ta->text_len > tb->text_len ? -1 : 1;
    return a < b ? -1 : a > b;
}

static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|eom_id|>", "<end_of_turn>",
    "<|end_of_text|>", "<EOT>", "<|return|>", "<|call|>",
};

static tela_status add_eog(tela_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n_tokens) return TELA_OK;
    for (uint32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return TELA_OK;
    int32_t *ne = realloc(v->eog, (v->n_eog + 1) * sizeof *ne);
    if (!ne) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    v->eog = ne;
    v->eog[v->n_eog++] = id;
    return TELA_OK;
}

static int32_t check_id(const tela_vocab *v, int32_t id) { return id >= 0 && id < v->n_tokens && v->tok[id].type ? id : -1; }

tela_status tela_vocab_finish(tela_vocab *v) {
    if (!v->map) TELA_TRY(tela_vocab_index(v));
    char buf[8];
    for (int b = 0; b < 256; b++) {
        if (v->kind == TELA_VOCAB_BPE) {
            size_t n = tela_utf8_encode(tela_gpt2_byte_to_cp((unsigned)b), buf);
            v->byte_id[b] = tela_vocab_find(v, buf, n);
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            int32_t id = tela_vocab_find(v, buf, 6);
            if (id < 0 && b < 0x80) {
                buf[0] = (char)b;
                id = tela_vocab_find(v, buf, 1);
            }
            v->byte_id[b] = id;
        }
    }

    if (v->kind == TELA_VOCAB_SPM) {
        for (int b = 0; b < 128; b++) v->spm_cut[b] = true;
        for (int32_t id = 0; id < v->n_tokens; id++) {
            const tela_tok *t = &v->tok[id];
            if (t->text_len < 2 || t->type == TELA_TOKEN_CONTROL || t->type == TELA_TOKEN_UNKNOWN ||
                t->type == TELA_TOKEN_BYTE)
                continue;
            const unsigned char *p = (const unsigned char *)v->text + t->text_off;
            for (uint32_t i = 0; i < t->text_len; i++)
                if (p[i] < 128) v->spm_cut[p[i]] = false;
        }
    }

    v->bos = check_id(v, v->bos);
    v->eos = check_id(v, v->eos);
    v->eot = check_id(v, v->eot);
    v->eom = check_id(v, v->eom);
    v->unk = check_id(v, v->unk);
    v->pad = check_id(v, v->pad);
    if (v->bos < 0) v->add_bos = false;
    if (v->eos < 0) v->add_eos = false;

    /* added tokens, grouped by first byte, longest first (leftmost-longest matching) */
    free(v->added);
    v->added = NULL;
    v->n_added = 0;
    v->has_normalized_added = false;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if ((v->tok[id].flags & TELA_TOKF_ADDED) && v->tok[id].text_len) v->n_added++;
    if (v->n_added) {
        v->added = malloc(v->n_added * sizeof *v->added);
        if (!v->added) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        uint32_t k = 0;
        for (int32_t id = 0; id < v->n_tokens; id++)
            if ((v->tok[id].flags & TELA_TOKF_ADDED) && v->tok[id].text_len) {
                v->added[k++] = id;
                if (v->tok[id].flags & TELA_TOKF_NORMALIZED) v->has_normalized_added = true;
            }
        qsort_r(v->added, v->n_added, sizeof *v->added, cmp_added, v);
    }
    uint32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < v->n_added && (unsigned char)v->text[v->tok[v->added[k]].text_off] < b) k++;
        v->added_first[b] = k;
    }

    /* end of generation: the ids given, then tokens known by their text */
    if (v->eot < 0) {
        static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                "<|endoftext|>", "<|end_of_text|>", "<EOT>"};
        for (size_t i = 0; i < sizeof eot_texts / sizeof eot_texts[0] && v->eot < 0; i++)
            v->eot = tela_vocab_find(v, eot_texts[i], strlen(eot_texts[i]));
    }
    if (v->eom < 0) v->eom = tela_vocab_find(v, "<|eom_id|>", 10);
    free(v->eog);
    v->eog = NULL;
    v->n_eog = 0;
    TELA_TRY(add_eog(v, v->eos));
    TELA_TRY(add_eog(v, v->eot));
    TELA_TRY(add_eog(v, v->eom));
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++)
        TELA_TRY(add_eog(v, tela_vocab_find(v, eog_texts[i], strlen(eog_texts[i]))));

    TELA_TRY(tela_vocab_build_pieces(v));

    if (v->kind == TELA_VOCAB_BPE && !v->cache) {
        tela_word_cache *c = calloc(1, sizeof *c);
        if (!c) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        c->mask = (1u << 16) - 1;
        c->keys_cap = 1u << 20;
        c->ids_cap = 1u << 18;
        c->slots = calloc(c->mask + 1, sizeof *c->slots);
        c->keys = malloc(c->keys_cap);
        c->ids = malloc(c->ids_cap * sizeof *c->ids);
        if (!c->slots || !c->keys || !c->ids || pthread_mutex_init(&c->lock, NULL) != 0) {
            free(c->slots);
            free(c->keys);
            free(c->ids);
            free(c);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory for the word cache");
        }
        v->cache = c;
    }
    return TELA_OK;
}

void tela_vocab_free(tela_vocab *v) {
    if (!v) return;
    tela_pretok_free(v);
    if (v->cache) {
        pthread_mutex_destroy(&v->cache->lock);
        free(v->cache->slots);
        free(v->cache->keys);
        free(v->cache->ids);
        free(v->cache);
    }
    free(v->tok);
    free(v->text);
    free(v->dec);
    free(v->map);
    free(v->merges);
    free(v->added);
    free(v->eog);
    free(v->chat_template);
    free(v);
}

/* ------------------------------------------------------------- accessors */

int32_t tela_vocab_n_tokens(const tela_vocab *v) { return v->n_tokens; }
int32_t tela_vocab_bos(const tela_vocab *v) { return v->bos; }
int32_t tela_vocab_eos(const tela_vocab *v) { return v->eos; }
int32_t tela_vocab_eot(const tela_vocab *v) { return v->eot; }
bool tela_vocab_adds_bos(const tela_vocab *v) { return v->add_bos; }
bool tela_vocab_adds_eos(const tela_vocab *v) { return v->add_eos; }
const char *tela_vocab_chat_template(const tela_vocab *v) { return v->chat_template; }
const char *tela_vocab_model_name(const tela_vocab *v) { return v->model_name; }
const char *tela_vocab_pre_name(const tela_vocab *v) { return v->pre_name; }

bool tela_vocab_is_eog(const tela_vocab *v, int32_t token) {
    for (uint32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == token) return true;
    return false;
}

int tela_vocab_token_type(const tela_vocab *v, int32_t token) {
    if (token < 0 || token >= v->n_tokens) return 0;
    return v->tok[token].type;
}

const char *tela_vocab_token_text(const tela_vocab *v, int32_t token, size_t *len) {
    if (token < 0 || token >= v->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = v->tok[token].text_len;
    return v->text + v->tok[token].text_off;
}

/* ------------------------------------------------------------- tokenize */

typedef struct tok_ctx {
    const tela_vocab *v;
    tela_idvec *out;
    pcre2_match_data *md;
    bool parse_special;
    bool prev_special;   /* SPM: the previous fragment was a token (or none yet) */
    char *buf;           /* scratch for escaped / prefixed text */
    size_t buf_cap;
} tok_ctx;

typedef tela_status (*text_fn)(tok_ctx *c, const char *s, size_t n);

static tela_status scratch(tok_ctx *c, size_t n) {
    if (n <= c->buf_cap) return TELA_OK;
    size_t cap = c->buf_cap ? c->buf_cap : 256;
    while (cap < n) cap *= 2;
    char *nb = realloc(c->buf, cap);
    if (!nb) return tela_errorf(TELA_ERR_NOMEM, "out of memory tokenizing %zu bytes", n);
    c->buf = nb;
    c->buf_cap = cap;
    return TELA_OK;
}

static tela_status emit_word(void *ctx, const char *s, size_t n) {
    tok_ctx *c = ctx;
    return tela_bpe_word(c->v, s, n, c->out);
}

static tela_status push_token(tok_ctx *c, int32_t id) {
    c->prev_special = true;
    return tela_idvec_push(c->out, id);
}

/* Text with no added tokens left in it, normalized: pre-tokenize and encode. */
static tela_status encode_plain(tok_ctx *c, const char *s, size_t n) {
    const tela_vocab *v = c->v;
    if (!n) return TELA_OK;
    if (v->kind == TELA_VOCAB_BPE) {
        if (v->byte_prefix_space && s[0] != ' ') {
            TELA_TRY(scratch(c, n + 1));
            c->buf[0] = ' ';
            memcpy(c->buf + 1, s, n);
            /* c->buf is not touched again until this piece is done */
            return tela_pretok_split(v, c->buf, n + 1, c->md, emit_word, c);
        }
        return tela_pretok_split(v, s, n, c->md, emit_word, c);
    }
    /* SentencePiece: spaces become U+2581, with one in front when the text
     * starts the input or follows a special token (llama.cpp's rule). */
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    bool prefix = v->add_space_prefix && c->prev_special;
    TELA_TRY(scratch(c, n + 2 * spaces + 3 + 1));
    size_t k = 0;
    if (prefix) {
        memcpy(c->buf, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(c->buf + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            c->buf[k++] = s[i];
        }
    }
    c->prev_special = false;
    return tela_spm_encode(v, c->buf, k, c->out);
}

/* Finds the added tokens of one set in s[0..n): leftmost-longest, with
 * Hugging Face's rules for single_word, lstrip and rstrip. The text between
 * them goes to on_text. */
static tela_status split_added(tok_ctx *c, const char *s, size_t n, bool normalized_set, text_fn on_text) {
    const tela_vocab *v = c->v;
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        unsigned char b = (unsigned char)s[pos];
        uint32_t lo = v->added_first[b], hi = v->added_first[b + 1];
        int32_t hit = -1;
        for (uint32_t k = lo; k < hi; k++) {
            int32_t id = v->added[k];
            const tela_tok *t = &v->tok[id];
            if (((t->flags & TELA_TOKF_NORMALIZED) != 0) != normalized_set) continue;
            if (!c->parse_special && (t->flags & TELA_TOKF_SPECIAL)) continue;
            if (t->text_len <= n - pos && !memcmp(s + pos, v->text + t->text_off, t->text_len)) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            pos++;
            continue;
        }
        const tela_tok *t = &v->tok[hit];
        size_t start = pos, stop = pos + t->text_len;
        if (t->flags & TELA_TOKF_SINGLE_WORD) {
            uint32_t cp;
            bool word_before = start > 0 && (tela_utf8_prev(s, start, &cp), tela_unicode_is_word(cp));
            bool word_after = false;
            if (stop < n) {
                size_t adv;
                word_after = tela_utf8_next((const unsigned char *)s + stop, n - stop, &adv, &cp) == 1 &&
                             tela_unicode_is_word(cp);
            }
            if (word_before || word_after) {
                pos = stop; /* the match is dropped; scanning goes on after it */
                continue;
            }
        }
        if (t->flags & TELA_TOKF_LSTRIP) {
            while (start > start_offset) {
                uint32_t cp;
                size_t p = tela_utf8_prev(s, start, &cp);
                if (!tela_unicode_is_space(cp) || p < start_offset) break;
                start = p;
            }
        }
        if (t->flags & TELA_TOKF_RSTRIP) {
            while (stop < n) {
                size_t adv;
                uint32_t cp;
                if (tela_utf8_next((const unsigned char *)s + stop, n - stop, &adv, &cp) != 1 ||
                    !tela_unicode_is_space(cp))
                    break;
                stop += adv;
            }
        }
        if (start > start_offset) TELA_TRY(on_text(c, s + start_offset, start - start_offset));
        TELA_TRY(push_token(c, hit));
        start_offset = pos = stop;
    }
    if (start_offset < n) TELA_TRY(on_text(c, s + start_offset, n - start_offset));
    return TELA_OK;
}

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

static tela_status utf8proc_norm(int norm, const char *s, size_t n, utf8proc_uint8_t **out, size_t *out_len) {
    int opts = UTF8PROC_STABLE;
    switch (norm) {
    case TELA_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case TELA_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case TELA_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, out, (utf8proc_option_t)opts);
    if (r < 0) return tela_errorf(TELA_ERR_INTERNAL, "normalizing text: %s", utf8proc_errmsg(r));
    *out_len = (size_t)r;
    return TELA_OK;
}

/* NFC that hands utf8proc only the runs that may change: a run of characters
 * that are not NFC-stable, with the character before it (which they may
 * combine with). *out stays NULL when the text is already NFC. */
static tela_status nfc_runs(const char *s, size_t n, char **out, size_t *out_len) {
    *out = NULL;
    size_t i = 0, emitted = 0, prev = SIZE_MAX;
    tela_status st = TELA_OK;
    char *o = NULL;
    size_t k = 0, cap = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp;
        tela_utf8_next((const unsigned char *)s + i, n - i, &adv, &cp);
        if (tela_nfc_stable(cp)) {
            prev = i;
            i += adv;
            continue;
        }
        size_t run = prev != SIZE_MAX && prev >= emitted ? prev : i;
        size_t j = i + adv;
        while (j < n) {
            tela_utf8_next((const unsigned char *)s + j, n - j, &adv, &cp);
            if (tela_nfc_stable(cp)) break;
            j += adv;
        }
        utf8proc_uint8_t *norm = NULL;
        size_t nl = 0;
        if ((st = utf8proc_norm(TELA_NORM_NFC, s + run, j - run, &norm, &nl)) != TELA_OK) break;
        if (!o) {
            cap = n + nl + 64;
            o = malloc(cap);
        } else if (k + (run - emitted) + nl > cap) {
            while (k + (run - emitted) + nl > cap) cap *= 2;
            char *no = realloc(o, cap);
            if (!no) free(o);
            o = no;
        }
        if (!o) {
            free(norm);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory normalizing %zu bytes", n);
        }
        memcpy(o + k, s + emitted, run - emitted);
        k += run - emitted;
        memcpy(o + k, norm, nl);
        k += nl;
        free(norm);
        emitted = i = j;
        prev = SIZE_MAX;
    }
    if (st != TELA_OK || !o) {
        free(o);
        return st;
    }
    if (k + (n - emitted) > cap) {
        char *no = realloc(o, k + (n - emitted) + 1);
        if (!no) {
            free(o);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory normalizing %zu bytes", n);
        }
        o = no;
    }
    memcpy(o + k, s + emitted, n - emitted);
    *out = o;
    *out_len = k + (n - emitted);
    return TELA_OK;
}

/* Text between non-normalized added tokens: normalize, then cut out the
 * normalized added tokens (if the vocabulary has any), then encode. */
static tela_status encode_fragment(tok_ctx *c, const char *s, size_t n) {
    const tela_vocab *v = c->v;
    char *norm = NULL;
    if (v->norm != TELA_NORM_NONE && !all_ascii(s, n)) {
        size_t nl = 0;
        if (v->norm == TELA_NORM_NFC) {
            TELA_TRY(nfc_runs(s, n, &norm, &nl));
        } else {
            utf8proc_uint8_t *u;
            TELA_TRY(utf8proc_norm(v->norm, s, n, &u, &nl));
            norm = (char *)u;
        }
        if (norm) {
            s = norm;
            n = nl;
        }
    }
    tela_status st;
    if (v->has_normalized_added) st = split_added(c, s, n, true, encode_plain);
    else st = encode_plain(c, s, n);
    free(norm);
    return st;
}

tela_status tela_vocab_tokenize(const tela_vocab *v, const char *text, size_t len, bool add_special,
                                bool parse_special, int32_t *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!v || !n_out || (!text && len) || (!out && cap))
        return tela_errorf(TELA_ERR_ARG, "tela_vocab_tokenize: NULL argument");
    char *fixed = NULL;
    if (len && !tela_utf8_valid(text, len)) {
        size_t n2;
        TELA_TRY(tela_utf8_repair(text, len, &fixed, &n2));
        text = fixed;
        len = n2;
    }
    tela_idvec ids = {0};
    tok_ctx c = {.v = v, .out = &ids, .parse_special = parse_special, .prev_special = true};
    tela_status st = TELA_OK;
    if (v->kind == TELA_VOCAB_BPE && v->n_re > 0) {
        c.md = pcre2_match_data_create(4, NULL);
        if (!c.md) st = tela_errorf(TELA_ERR_NOMEM, "out of memory for regex match data");
    }
    if (st == TELA_OK && add_special && v->add_bos) st = tela_idvec_push(&ids, v->bos);
    if (st == TELA_OK && len) st = split_added(&c, text, len, false, encode_fragment);
    if (st == TELA_OK && add_special && v->add_eos) st = tela_idvec_push(&ids, v->eos);
    pcre2_match_data_free(c.md);
    free(c.buf);
    free(fixed);
    if (st == TELA_OK) {
        *n_out = ids.n;
        if (ids.n > cap) {
            if (cap) memcpy(out, ids.v, cap * sizeof *out);
            st = tela_errorf(TELA_ERR_ARG, "the text is %zu tokens; the buffer holds %zu", ids.n, cap);
        } else if (ids.n) {
            memcpy(out, ids.v, ids.n * sizeof *out);
        }
    }
    free(ids.v);
    return st;
}
