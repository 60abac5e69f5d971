/* bpe.c: byte-level BPE (GPT-2, Llama 3, Qwen). A pre-tokenized word is
 * first seen as its bytes, each written as GPT-2's printable stand-in
 * character; then the adjacent pair with the lowest merge rank is merged
 * (the leftmost of equal ones), again and again, as Hugging Face's BPE model
 * does. Words are cached. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves,
 * the other 68 (controls, space, DEL, NBSP, soft hyphen...) take the code
 * points from 256 up, in byte order. */
uint32_t tela_gpt2_byte_to_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    return 256 + 67; /* 173 */
}

int tela_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256) {
        if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
        return -1;
    }
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(127 + (k - 33));
    return 173;
}

static inline const tela_merge_slot *merge_find(const tela_vocab *v, int32_t a, int32_t b) {
    if (!v->merges || a < 0 || b < 0) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
    uint32_t j = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & v->merge_mask;
    for (;;) {
        const tela_merge_slot *sl = &v->merges[j];
        if (sl->key == key) return sl;
        if (!sl->key) return NULL;
        j = (j + 1) & v->merge_mask;
    }
}

static tela_status emit_ids(const tela_vocab *v, const int32_t *ids, int m, tela_idvec *out) {
    for (int i = 0; i < m; i++) {
        if (ids[i] >= 0) TELA_TRY(tela_idvec_push(out, ids[i]));
        else if (v->unk >= 0) TELA_TRY(tela_idvec_push(out, v->unk));
    }
    return TELA_OK;
}

#define BPE_SMALL 48

/* Short words: the symbols in an array, the best pair found by a scan. */
static tela_status merge_small(const tela_vocab *v, const unsigned char *s, int m, tela_idvec *out) {
    int32_t ids[BPE_SMALL], rank[BPE_SMALL], res[BPE_SMALL];
    for (int i = 0; i < m; i++) ids[i] = v->byte_id[s[i]];
    for (int i = 0; i + 1 < m; i++) {
        const tela_merge_slot *ms = merge_find(v, ids[i], ids[i + 1]);
        rank[i] = ms ? ms->rank : INT32_MAX;
        res[i] = ms ? ms->result : -1;
    }
    for (;;) {
        int best = -1;
        int32_t best_rank = INT32_MAX;
        for (int i = 0; i + 1 < m; i++)
            if (rank[i] < best_rank) {
                best_rank = rank[i];
                best = i;
            }
        if (best < 0) break;
        ids[best] = res[best];
        int tail = m - (best + 2);
        memmove(ids + best + 1, ids + best + 2, (size_t)tail * sizeof *ids);
        if (tail > 1) { /* pair i joins symbols i and i + 1: one pair fewer than symbols */
            memmove(rank + best + 1, rank + best + 2, (size_t)(tail - 1) * sizeof *rank);
            memmove(res + best + 1, res + best + 2, (size_t)(tail - 1) * sizeof *res);
        }
        m--;
        for (int i = best - 1; i <= best; i++) {
            if (i < 0 || i + 1 >= m) continue;
            const tela_merge_slot *ms = merge_find(v, ids[i], ids[i + 1]);
            rank[i] = ms ? ms->rank : INT32_MAX;
            res[i] = ms ? ms->result : -1;
        }
    }
    return emit_ids(v, ids, m, out);
}

typedef struct bpe_cand {
    int32_t rank, left, right, lid, rid, result;
} bpe_cand;

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct cand_heap {
    bpe_cand *h;
    size_t n, cap;
} cand_heap;

static tela_status heap_push(cand_heap *q, bpe_cand c) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        bpe_cand *nh = realloc(q->h, cap * sizeof *nh);
        if (!nh) return tela_errorf(TELA_ERR_NOMEM, "out of memory in BPE");
        q->h = nh;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &q->h[p])) break;
        q->h[i] = q->h[p];
        i = p;
    }
    q->h[i] = c;
    return TELA_OK;
}

static bpe_cand heap_pop(cand_heap *q) {
    bpe_cand top = q->h[0];
    bpe_cand last = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bpe_cand *best = &last;
        if (l < q->n && cand_less(&q->h[l], best)) {
            m = l;
            best = &q->h[l];
        }
        if (r < q->n && cand_less(&q->h[r], best)) m = r;
        if (m == i) break;
        q->h[i] = q->h[m];
        i = m;
    }
    if (q->n) q->h[i] = last;
    return top;
}

#define DEAD INT32_MIN

/* Long words: a linked list of symbols and a heap of candidate pairs, stale
 * entries skipped when popped. Same order of merges as merge_small. */
static tela_status merge_long(const tela_vocab *v, const unsigned char *s, size_t n, tela_idvec *out) {
    int32_t *id = malloc(n * 3 * sizeof *id);
    if (!id) return tela_errorf(TELA_ERR_NOMEM, "out of memory in BPE for a word of %zu bytes", n);
    int32_t *prev = id + n, *next = id + 2 * n;
    for (size_t i = 0; i < n; i++) {
        id[i] = v->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    cand_heap q = {0};
    tela_status st = TELA_OK;
    for (size_t i = 0; i + 1 < n && st == TELA_OK; i++) {
        const tela_merge_slot *ms = merge_find(v, id[i], id[i + 1]);
        if (ms)
            st = heap_push(&q, (bpe_cand){ms->rank, (int32_t)i, (int32_t)i + 1, id[i], id[i + 1], ms->result});
    }
    while (st == TELA_OK && q.n) {
        bpe_cand c = heap_pop(&q);
        if (id[c.left] != c.lid || next[c.left] != c.right || id[c.right] != c.rid) continue;
        id[c.left] = c.result;
        id[c.right] = DEAD;
        next[c.left] = next[c.right];
        if (next[c.right] >= 0) prev[next[c.right]] = c.left;
        int32_t p = prev[c.left], nx = next[c.left];
        if (p >= 0) {
            const tela_merge_slot *ms = merge_find(v, id[p], id[c.left]);
            if (ms) st = heap_push(&q, (bpe_cand){ms->rank, p, c.left, id[p], id[c.left], ms->result});
        }
        if (st == TELA_OK && nx >= 0) {
            const tela_merge_slot *ms = merge_find(v, id[c.left], id[nx]);
            if (ms) st = heap_push(&q, (bpe_cand){ms->rank, c.left, nx, id[c.left], id[nx], ms->result});
        }
    }
    for (int32_t i = 0; st == TELA_OK && i >= 0; i = next[i]) {
        if (id[i] >= 0) st = tela_idvec_push(out, id[i]);
        else if (v->unk >= 0) st = tela_idvec_push(out, v->unk);
    }
    free(q.h);
    free(id);
    return st;
}

tela_status tela_bpe_word(const tela_vocab *v, const char *s, size_t n, tela_idvec *out) {
    if (!n) return TELA_OK;
    if (n > INT32_MAX / 4) return tela_errorf(TELA_ERR_ARG, "a word of %zu bytes is too long", n);
    bool cacheable = v->cache && n <= 64;
    uint64_t h = 0;
    if (cacheable) {
        h = tela_hash64(s, n);
        if (tela_cache_get(v, s, n, h, out)) return TELA_OK;
    }
    size_t start = out->n;
    tela_status st = TELA_OK;
    bool done = false;
    if (v->ignore_merges) {
        /* a word that is itself a token is not merged up (HF ignore_merges) */
        char small[256];
        char *enc = n * 2 <= sizeof small ? small : malloc(n * 2);
        if (!enc) return tela_errorf(TELA_ERR_NOMEM, "out of memory in BPE");
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += tela_utf8_encode(tela_gpt2_byte_to_cp((unsigned char)s[i]), enc + k);
        int32_t id = tela_vocab_find(v, enc, k);
        if (enc != small) free(enc);
        if (id >= 0 && !(v->tok[id].flags & TELA_TOKF_ADDED)) {
            st = tela_idvec_push(out, id);
            done = true;
        }
    }
    if (!done) {
        if (n <= BPE_SMALL) st = merge_small(v, (const unsigned char *)s, (int)n, out);
        else st = merge_long(v, (const unsigned char *)s, n, out);
    }
    if (st == TELA_OK && cacheable && out->n > start) tela_cache_put(v, s, n, h, out->v + start, out->n - start);
    return st;
}
