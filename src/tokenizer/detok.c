/* detok.c: tokens back to text. Each token's bytes are computed once when the
 * vocabulary is loaded (GPT-2 byte chars undone, U+2581 turned into spaces,
 * <0xNN> into its byte); detokenization joins them the way Hugging Face's
 * decoders do, and the streaming decoder emits only complete UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xNN>" token, or -1. */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

tela_status tela_vocab_build_pieces(tela_vocab *v) {
    free(v->dec);
    v->dec = malloc(v->text_len + 1);
    if (!v->dec) return tela_errorf(TELA_ERR_NOMEM, "out of memory for token pieces");
    size_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        tela_tok *t = &v->tok[id];
        const char *s = v->text + t->text_off;
        size_t n = t->text_len;
        t->dec_off = (uint32_t)k;
        int bv = t->type == TELA_TOKEN_BYTE ? byte_token_value(s, n) : -1;
        if (bv >= 0) {
            v->dec[k++] = (char)bv;
        } else if (v->kind == TELA_VOCAB_BPE) {
            /* HF ByteLevel decoder: every char back to its byte, or the
             * token's text as it is when one char is not a byte stand-in */
            size_t k0 = k, i = 0;
            bool ok = true;
            while (i < n) {
                size_t adv;
                uint32_t cp;
                int b;
                if (tela_utf8_next((const unsigned char *)s + i, n - i, &adv, &cp) != 1 ||
                    (b = tela_gpt2_cp_to_byte(cp)) < 0) {
                    ok = false;
                    break;
                }
                v->dec[k++] = (char)b;
                i += adv;
            }
            if (!ok) {
                k = k0;
                memcpy(v->dec + k, s, n);
                k += n;
            }
        } else {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                    v->dec[k++] = ' ';
                    i += 3;
                } else {
                    v->dec[k++] = s[i++];
                }
            }
        }
        t->dec_len = (uint32_t)(k - t->dec_off);
    }
    v->dec_len = k;
    return TELA_OK;
}

size_t tela_vocab_token_bytes(const tela_vocab *v, int32_t token, bool skip_special, char *buf, size_t cap) {
    if (!v || token < 0 || token >= v->n_tokens) return 0;
    const tela_tok *t = &v->tok[token];
    if (skip_special && (t->flags & TELA_TOKF_SPECIAL)) return 0;
    if (buf && cap) memcpy(buf, v->dec + t->dec_off, t->dec_len < cap ? t->dec_len : cap);
    return t->dec_len;
}

typedef struct bytebuf {
    char *p;
    size_t n, cap;
} bytebuf;

static tela_status bb_add(bytebuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return tela_errorf(TELA_ERR_NOMEM, "out of memory decoding tokens");
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return TELA_OK;
}

/* HF ByteFallback: a run of <0xNN> tokens is its bytes when they are valid
 * UTF-8, else one U+FFFD per byte. */
static tela_status flush_byte_run(bytebuf *out, bytebuf *run) {
    tela_status st = TELA_OK;
    if (!run->n) return st;
    if (tela_utf8_valid(run->p, run->n)) {
        st = bb_add(out, run->p, run->n);
    } else {
        for (size_t i = 0; i < run->n && st == TELA_OK; i++) st = bb_add(out, "\xEF\xBF\xBD", 3);
    }
    run->n = 0;
    return st;
}

tela_status tela_vocab_detokenize(const tela_vocab *v, const int32_t *tokens, size_t n, bool skip_special, char **out,
                                  size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (!v || (!tokens && n)) return tela_errorf(TELA_ERR_ARG, "tela_vocab_detokenize: NULL argument");
    bytebuf b = {0}, run = {0};
    tela_status st = bb_add(&b, "", 0);
    for (size_t i = 0; i < n && st == TELA_OK; i++) {
        int32_t id = tokens[i];
        if (id < 0 || id >= v->n_tokens) {
            st = tela_errorf(TELA_ERR_ARG, "token id %d (at %zu) is out of range [0, %d)", (int)id, i,
                             (int)v->n_tokens);
            break;
        }
        const tela_tok *t = &v->tok[id];
        if (skip_special && (t->flags & TELA_TOKF_SPECIAL)) continue;
        if (v->kind == TELA_VOCAB_SPM && t->type == TELA_TOKEN_BYTE && t->dec_len == 1) {
            st = bb_add(&run, v->dec + t->dec_off, 1);
            continue;
        }
        st = flush_byte_run(&b, &run);
        if (st == TELA_OK) st = bb_add(&b, v->dec + t->dec_off, t->dec_len);
    }
    if (st == TELA_OK) st = flush_byte_run(&b, &run);
    free(run.p);
    if (st != TELA_OK) {
        free(b.p);
        return st;
    }
    size_t skip = 0;
    if (v->kind == TELA_VOCAB_SPM && v->add_space_prefix && b.n && b.p[0] == ' ') skip = 1; /* HF Strip(" ", 1, 0) */
    char *fixed;
    size_t fixed_len;
    st = tela_utf8_repair(b.p + skip, b.n - skip, &fixed, &fixed_len);
    free(b.p);
    if (st != TELA_OK) return st;
    *out = fixed;
    if (len) *len = fixed_len;
    return TELA_OK;
}

/* ------------------------------------------------------------- streaming
 * The stream gives exactly what tela_vocab_detokenize() gives for the same
 * tokens, with one exception: a SentencePiece run of <0xNN> tokens that is
 * not valid UTF-8 becomes one U+FFFD per maximal subpart here (a stream
 * cannot wait for the end of the run), one per byte there (HF ByteFallback). */

struct tela_detok_stream {
    const tela_vocab *v;
    bool skip_special;
    bool started;        /* some text was emitted (or its prefix space dropped) */
    bytebuf pend;        /* bytes of an incomplete UTF-8 sequence */
    bytebuf out;
};

tela_detok_stream *tela_detok_stream_create(const tela_vocab *vocab, bool skip_special) {
    if (!vocab) return NULL;
    tela_detok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->v = vocab;
    s->skip_special = skip_special;
    return s;
}

void tela_detok_stream_free(tela_detok_stream *s) {
    if (!s) return;
    free(s->pend.p);
    free(s->out.p);
    free(s);
}

/* Moves what is complete in pend to out: valid characters as they are, each
 * invalid sequence as one U+FFFD; an incomplete tail stays unless final. */
static void drain(tela_detok_stream *s, bool final) {
    size_t i = 0;
    const unsigned char *p = (const unsigned char *)s->pend.p;
    while (i < s->pend.n) {
        size_t adv;
        uint32_t cp;
        int r = tela_utf8_next(p + i, s->pend.n - i, &adv, &cp);
        if (r < 0 && !final) break;
        tela_status st = r == 1 ? bb_add(&s->out, p + i, adv) : bb_add(&s->out, "\xEF\xBF\xBD", 3);
        if (st != TELA_OK) break;
        i += adv;
    }
    if (i) {
        memmove(s->pend.p, s->pend.p + i, s->pend.n - i);
        s->pend.n -= i;
    }
    if (!s->started && s->out.n) {
        s->started = true;
        const tela_vocab *v = s->v;
        if (v->kind == TELA_VOCAB_SPM && v->add_space_prefix && s->out.p[0] == ' ') {
            memmove(s->out.p, s->out.p + 1, s->out.n - 1);
            s->out.n--;
        }
    }
}

void tela_detok_stream_push(tela_detok_stream *s, int32_t token, const char **piece, size_t *len) {
    s->out.n = 0;
    const tela_vocab *v = s->v;
    if (token >= 0 && token < v->n_tokens) {
        const tela_tok *t = &v->tok[token];
        if (!(s->skip_special && (t->flags & TELA_TOKF_SPECIAL))) {
            if (bb_add(&s->pend, v->dec + t->dec_off, t->dec_len) == TELA_OK) drain(s, false);
        }
    }
    if (bb_add(&s->out, "", 0) == TELA_OK) s->out.p[s->out.n] = '\0';
    *piece = s->out.p ? s->out.p : "";
    *len = s->out.n;
}

void tela_detok_stream_flush(tela_detok_stream *s, const char **piece, size_t *len) {
    s->out.n = 0;
    drain(s, true);
    if (bb_add(&s->out, "", 0) == TELA_OK) s->out.p[s->out.n] = '\0';
    *piece = s->out.p ? s->out.p : "";
    *len = s->out.n;
}
