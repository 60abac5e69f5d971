/* tok_lookup.c: the small lookups the tokenizer's files share: the string
 * hash, growable id lists, a token's id by its string (tela_vocab_find, over
 * the map tela_vocab_index builds) and the cache of encoded BPE words. It
 * uses no other tokenizer file, so BPE, SentencePiece and the vocabulary
 * builder can all stand on it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* ------------------------------------------------------------- hashing */

uint64_t tela_hash64(const char *s, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

uint32_t tela_tok_hash(const char *s, size_t len) { return (uint32_t)tela_hash64(s, len); }

/* ------------------------------------------------------------- id lists */

tela_status tela_idvec_push(tela_idvec *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, cap * sizeof *nv);
        if (!nv) return tela_errorf(TELA_ERR_NOMEM, "out of memory for %zu tokens", cap);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return TELA_OK;
}

tela_status tela_idvec_append(tela_idvec *a, const int32_t *ids, size_t n) {
    if (!n) return TELA_OK;
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n) cap *= 2;
        int32_t *nv = realloc(a->v, cap * sizeof *nv);
        if (!nv) return tela_errorf(TELA_ERR_NOMEM, "out of memory for %zu tokens", cap);
        a->v = nv;
        a->cap = cap;
    }
    memcpy(a->v + a->n, ids, n * sizeof *ids);
    a->n += n;
    return TELA_OK;
}

/* ------------------------------------------------------------- lookup */

int32_t tela_vocab_find(const tela_vocab *v, const char *s, size_t len) {
    if (!v->map) return -1;
    uint32_t h = tela_tok_hash(s, len);
    uint32_t i = h & v->map_mask;
    for (;;) {
        int32_t id = v->map[i];
        if (id < 0) return -1;
        const tela_tok *t = &v->tok[id];
        if (t->hash == h && t->text_len == len && !memcmp(v->text + t->text_off, s, len)) return id;
        i = (i + 1) & v->map_mask;
    }
}

/* ------------------------------------------------------------- word cache */

bool tela_cache_get(const tela_vocab *v, const char *s, size_t n, uint64_t h, tela_idvec *out) {
    tela_word_cache *c = v->cache;
    if (!c) return false;
    if (!h) h = 1;
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = (uint32_t)h & c->mask;; i = (i + 1) & c->mask) {
        const tela_cache_slot *sl = &c->slots[i];
        if (!sl->hash) break;
        if (sl->hash == h && sl->key_len == n && !memcmp(c->keys + sl->key_off, s, n)) {
            hit = tela_idvec_append(out, c->ids + sl->ids_off, sl->n_ids) == TELA_OK;
            break;
        }
    }
    if (hit) c->hits++;
    else c->misses++;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

void tela_cache_put(const tela_vocab *v, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t n_ids) {
    tela_word_cache *c = v->cache;
    if (!c || !n_ids || n > UINT16_MAX || n_ids > UINT16_MAX) return;
    if (!h) h = 1;
    pthread_mutex_lock(&c->lock);
    if (c->used + 1 > (c->mask + 1) / 4 * 3 || c->keys_len + n > c->keys_cap || c->ids_len + n_ids > c->ids_cap) {
        memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
        c->used = 0;
        c->keys_len = 0;
        c->ids_len = 0;
    }
    if (n <= c->keys_cap && n_ids <= c->ids_cap) {
        uint32_t i = (uint32_t)h & c->mask;
        for (; c->slots[i].hash; i = (i + 1) & c->mask)
            if (c->slots[i].hash == h && c->slots[i].key_len == n && !memcmp(c->keys + c->slots[i].key_off, s, n))
                goto done; /* another thread put it there first */
        tela_cache_slot *sl = &c->slots[i];
        sl->hash = h;
        sl->key_off = (uint32_t)c->keys_len;
        sl->key_len = (uint16_t)n;
        sl->ids_off = (uint32_t)c->ids_len;
        sl->n_ids = (uint16_t)n_ids;
        memcpy(c->keys + c->keys_len, s, n);
        memcpy(c->ids + c->ids_len, ids, n_ids * sizeof *ids);
        c->keys_len += n;
        c->ids_len += n_ids;
        c->used++;
    }
done:
    pthread_mutex_unlock(&c->lock);
}
