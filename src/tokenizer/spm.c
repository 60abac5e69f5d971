/* spm.c: SentencePiece BPE (Llama 2, Mistral, Phi-3 GGUF "llama" vocabularies).
 * The escaped text (U+2581 for spaces) starts as one symbol per character;
 * the adjacent pair whose concatenation is the vocabulary piece with the
 * highest score is merged (the leftmost of equal ones), until no pair is a
 * piece. A character that is no piece falls back to its <0xNN> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

typedef struct spm_sym {
    int32_t off, n, prev, next;
} spm_sym;

typedef struct spm_cand {
    uint32_t key;     /* the score mapped to an unsigned int, larger = better */
    int32_t left, right, size;
} spm_cand;

static bool cand_before(const spm_cand *a, const spm_cand *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

typedef struct spm_heap {
    spm_cand *h;
    size_t n, cap;
} spm_heap;

static tela_status heap_push(spm_heap *q, spm_cand c) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        spm_cand *nh = realloc(q->h, cap * sizeof *nh);
        if (!nh) return tela_errorf(TELA_ERR_NOMEM, "out of memory in SentencePiece");
        q->h = nh;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&c, &q->h[p])) break;
        q->h[i] = q->h[p];
        i = p;
    }
    q->h[i] = c;
    return TELA_OK;
}

static spm_cand heap_pop(spm_heap *q) {
    spm_cand top = q->h[0];
    spm_cand last = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const spm_cand *best = &last;
        if (l < q->n && cand_before(&q->h[l], best)) {
            m = l;
            best = &q->h[l];
        }
        if (r < q->n && cand_before(&q->h[r], best)) m = r;
        if (m == i) break;
        q->h[i] = q->h[m];
        i = m;
    }
    if (q->n) q->h[i] = last;
    return top;
}

/* Orders floats as unsigned ints (larger float -> larger key). */
static uint32_t score_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Pieces the text may be cut into: not control, unknown or byte tokens
 * (SentencePiece never produces those from text). */
static int32_t piece_id(const tela_vocab *v, const char *s, size_t n) {
    int32_t id = tela_vocab_find(v, s, n);
    if (id < 0) return -1;
    int t = v->tok[id].type;
    return t == TELA_TOKEN_CONTROL || t == TELA_TOKEN_UNKNOWN || t == TELA_TOKEN_BYTE ? -1 : id;
}

static tela_status try_pair(const tela_vocab *v, const char *s, const spm_sym *sym, int32_t l, int32_t r,
                            spm_heap *q) {
    if (l < 0 || r < 0) return TELA_OK;
    int32_t size = sym[l].n + sym[r].n;
    int32_t id = piece_id(v, s + sym[l].off, (size_t)size);
    if (id < 0) return TELA_OK;
    return heap_push(q, (spm_cand){score_key(v->tok[id].score), l, r, size});
}

static tela_status encode_segment(const tela_vocab *v, const char *s, size_t n, tela_idvec *out) {
    if (!n) return TELA_OK;
    if (n > INT32_MAX / 2) return tela_errorf(TELA_ERR_ARG, "text of %zu bytes is too long", n);
    spm_sym *sym = malloc(n * sizeof *sym);
    if (!sym) return tela_errorf(TELA_ERR_NOMEM, "out of memory in SentencePiece for %zu bytes", n);
    int32_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp;
        if (tela_utf8_next((const unsigned char *)s + i, n - i, &adv, &cp) != 1) adv = 1;
        sym[m] = (spm_sym){(int32_t)i, (int32_t)adv, m - 1, -1};
        if (m > 0) sym[m - 1].next = m;
        m++;
        i += adv;
    }
    spm_heap q = {0};
    tela_status st = TELA_OK;
    for (int32_t i = 0; i + 1 < m && st == TELA_OK; i++) st = try_pair(v, s, sym, i, i + 1, &q);
    while (st == TELA_OK && q.n) {
        spm_cand c = heap_pop(&q);
        spm_sym *l = &sym[c.left], *r = &sym[c.right];
        /* stale: one side was merged away or grew since this pair was seen */
        if (l->n == 0 || r->n == 0 || l->next != c.right || l->n + r->n != c.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        st = try_pair(v, s, sym, l->prev, c.left, &q);
        if (st == TELA_OK) st = try_pair(v, s, sym, c.left, l->next, &q);
    }
    for (int32_t i = 0; st == TELA_OK && i >= 0 && m > 0; i = sym[i].next) {
        int32_t id = piece_id(v, s + sym[i].off, (size_t)sym[i].n);
        if (id >= 0) {
            st = tela_idvec_push(out, id);
            continue;
        }
        for (int32_t k = 0; k < sym[i].n && st == TELA_OK; k++) {
            int32_t b = v->byte_id[(unsigned char)s[sym[i].off + k]];
            if (b >= 0) st = tela_idvec_push(out, b);
            else if (v->unk >= 0 && (k == 0)) st = tela_idvec_push(out, v->unk);
        }
    }
    free(q.h);
    free(sym);
    return st;
}

/* Cuts the text at bytes no multi-character piece contains (newlines, in
 * practice): merges never cross them, so the pieces are encoded apart, which
 * keeps the heap small. */
tela_status tela_spm_encode(const tela_vocab *v, const char *s, size_t n, tela_idvec *out) {
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 128 || !v->spm_cut[c]) continue;
        TELA_TRY(encode_segment(v, s + start, i - start, out));
        TELA_TRY(encode_segment(v, s + i, 1, out));
        start = i + 1;
    }
    return encode_segment(v, s + start, n - start, out);
}
