/* kv_pool.c: the engine's KV block bookkeeping and prefix cache (see
 * kv_pool.h). Blocks are indices; per block: how many sequences hold it,
 * and, when cached, its hash-table entry (chain hash, parent hash, its
 * tokens) and its place in the LRU list of cached blocks nobody holds.
 * Checkpoints are a separate table of host-memory images with their own
 * LRU list. Single-threaded: the engine's scheduler thread owns it. */
#include "runtime/kv_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct ckpt {
    uint64_t key;            /* chain hash at the block boundary before pos */
    int32_t pos;
    int32_t n_tail;          /* tokens after that boundary (< block_size) */
    int32_t *tail;
    void *image;
    float *logits;           /* NULL or n_vocab floats */
    size_t bytes;
    struct ckpt *next_in_bucket;
    struct ckpt *lru_prev, *lru_next;
} ckpt;

struct tela_kv_pool {
    int32_t n_blocks, block_size;
    int32_t *refs;           /* [n_blocks] holders */
    /* free blocks: a stack */
    int32_t *free_stack;
    int32_t n_free;
    /* cached blocks */
    bool *cached;
    uint64_t *hash, *parent;
    int32_t *n_tok;          /* tokens the cached block holds */
    int32_t *tokens;         /* [n_blocks][block_size] */
    int32_t *bucket_next;    /* hash chains: next block in the bucket, -1 */
    int32_t *buckets;        /* [n_buckets] first block, -1 */
    int32_t *child_next;     /* chains by parent hash (a prefix's continuations) */
    int32_t *child_buckets;
    uint32_t bucket_mask;
    /* LRU of cached blocks with no holder: prev/next, -1 ends */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail;  /* head: least recently used */
    int32_t n_idle;
    int32_t n_held;
    /* checkpoints */
    size_t image_bytes;
    int32_t n_vocab;
    uint64_t ckpt_budget, ckpt_used, ckpt_count;
    ckpt **ckpt_buckets;
    uint32_t ckpt_mask;
    ckpt *ckpt_lru_head, *ckpt_lru_tail;  /* head: least recently used */
};

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t tela_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull * (uint64_t)(n + 1));
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x632be59bd9b4e019ull));
    return h;
}

tela_kv_pool *tela_kv_pool_create(int32_t n_blocks, int32_t block_size, size_t image_bytes, int32_t n_vocab,
                                  uint64_t ckpt_budget) {
    if (n_blocks <= 0 || block_size <= 0) return NULL;
    tela_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    uint32_t nb = 16;
    while (nb < 2u * (uint32_t)n_blocks) nb *= 2;
    p->bucket_mask = nb - 1;
    const size_t n = (size_t)n_blocks;
    p->refs = calloc(n, sizeof *p->refs);
    p->free_stack = malloc(n * sizeof *p->free_stack);
    p->cached = calloc(n, sizeof *p->cached);
    p->hash = calloc(n, sizeof *p->hash);
    p->parent = calloc(n, sizeof *p->parent);
    p->n_tok = calloc(n, sizeof *p->n_tok);
    p->tokens = malloc(n * (size_t)block_size * sizeof *p->tokens);
    p->bucket_next = malloc(n * sizeof *p->bucket_next);
    p->buckets = malloc((size_t)nb * sizeof *p->buckets);
    p->child_next = malloc(n * sizeof *p->child_next);
    p->child_buckets = malloc((size_t)nb * sizeof *p->child_buckets);
    p->lru_prev = malloc(n * sizeof *p->lru_prev);
    p->lru_next = malloc(n * sizeof *p->lru_next);
    p->image_bytes = image_bytes;
    p->n_vocab = n_vocab;
    p->ckpt_budget = ckpt_budget;
    p->ckpt_mask = 255;
    p->ckpt_buckets = image_bytes ? calloc(256, sizeof *p->ckpt_buckets) : NULL;
    if (!p->refs || !p->free_stack || !p->cached || !p->hash || !p->parent || !p->n_tok || !p->tokens ||
        !p->bucket_next || !p->buckets || !p->child_next || !p->child_buckets || !p->lru_prev || !p->lru_next || (image_bytes && !p->ckpt_buckets)) {
        tela_kv_pool_free(p);
        return NULL;
    }
    for (uint32_t i = 0; i < nb; i++) p->buckets[i] = p->child_buckets[i] = -1;
    /* the stack pops block 0 first */
    for (int32_t i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return p;
}

static void ckpt_destroy(ckpt *c) {
    free(c->tail);
    free(c->image);
    free(c->logits);
    free(c);
}

void tela_kv_pool_free(tela_kv_pool *p) {
    if (!p) return;
    for (ckpt *c = p->ckpt_lru_head; c;) {
        ckpt *next = c->lru_next;
        ckpt_destroy(c);
        c = next;
    }
    free(p->ckpt_buckets);
    free(p->refs);
    free(p->free_stack);
    free(p->cached);
    free(p->hash);
    free(p->parent);
    free(p->n_tok);
    free(p->tokens);
    free(p->bucket_next);
    free(p->buckets);
    free(p->child_next);
    free(p->child_buckets);
    free(p->lru_prev);
    free(p->lru_next);
    free(p);
}

/* ---------------------------------------------------------------- LRU */

static void lru_remove(tela_kv_pool *p, int32_t b) {
    const int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx;
    else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr;
    else p->lru_tail = pr;
    p->n_idle--;
}

static void lru_push(tela_kv_pool *p, int32_t b) { /* most recently used end */
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_idle++;
}

/* --------------------------------------------------------- hash table */

static void table_remove(tela_kv_pool *p, int32_t b) {
    int32_t *link = &p->buckets[p->hash[b] & p->bucket_mask];
    while (*link >= 0 && *link != b) link = &p->bucket_next[*link];
    if (*link == b) *link = p->bucket_next[b];
    link = &p->child_buckets[mix64(p->parent[b]) & p->bucket_mask];
    while (*link >= 0 && *link != b) link = &p->child_next[*link];
    if (*link == b) *link = p->child_next[b];
    p->cached[b] = false;
}

/* The cached block for (parent, tokens[0..n)) with hash h, or -1. */
static int32_t table_find(const tela_kv_pool *p, uint64_t h, uint64_t parent, const int32_t *tokens, int32_t n) {
    for (int32_t b = p->buckets[h & p->bucket_mask]; b >= 0; b = p->bucket_next[b])
        if (p->hash[b] == h && p->parent[b] == parent && p->n_tok[b] == n &&
            !memcmp(p->tokens + (size_t)b * p->block_size, tokens, (size_t)n * sizeof *tokens))
            return b;
    return -1;
}

/* ------------------------------------------------------------- blocks */

int32_t tela_kv_pool_alloc(tela_kv_pool *p) {
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_remove(p, b);
        table_remove(p, b);
    } else {
        return -1;
    }
    p->refs[b] = 1;
    p->n_held++;
    return b;
}

void tela_kv_pool_retain(tela_kv_pool *p, int32_t b) {
    if (p->refs[b]++ == 0) {
        p->n_held++;
        if (p->cached[b]) lru_remove(p, b);
    }
}

void tela_kv_pool_release(tela_kv_pool *p, int32_t b) {
    if (p->refs[b] <= 0) return;
    if (--p->refs[b] > 0) return;
    p->n_held--;
    if (p->cached[b]) lru_push(p, b);
    else p->free_stack[p->n_free++] = b;
}

int32_t tela_kv_pool_available(const tela_kv_pool *p) { return p->n_free + p->n_idle; }
int32_t tela_kv_pool_held(const tela_kv_pool *p) { return p->n_held; }
int32_t tela_kv_pool_cached_idle(const tela_kv_pool *p) { return p->n_idle; }

void tela_kv_pool_register(tela_kv_pool *p, int32_t b, uint64_t parent, const int32_t *tokens, int32_t n) {
    if (b < 0 || b >= p->n_blocks || p->cached[b] || p->refs[b] <= 0 || n <= 0 || n > p->block_size) return;
    const uint64_t h = tela_kv_chain_hash(parent, tokens, n);
    if (table_find(p, h, parent, tokens, n) >= 0) return;
    p->cached[b] = true;
    p->hash[b] = h;
    p->parent[b] = parent;
    p->n_tok[b] = n;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, (size_t)n * sizeof *tokens);
    p->bucket_next[b] = p->buckets[h & p->bucket_mask];
    p->buckets[h & p->bucket_mask] = b;
    const uint32_t cb = (uint32_t)(mix64(parent) & p->bucket_mask);
    p->child_next[b] = p->child_buckets[cb];
    p->child_buckets[cb] = b;
}

/* Marks a cached block nobody holds as just used. */
static void touch(tela_kv_pool *p, int32_t b) {
    if (p->refs[b] == 0) {
        lru_remove(p, b);
        lru_push(p, b);
    }
}

int32_t tela_kv_pool_match(tela_kv_pool *p, const int32_t *tokens, int32_t n, const uint64_t *hashes,
                           int32_t *blocks, int32_t *tail_block, int32_t *tail_len) {
    const int32_t bs = p->block_size;
    int32_t k = 0;
    *tail_block = -1;
    *tail_len = 0;
    while ((k + 1) * bs <= n) {
        const int32_t b = table_find(p, hashes[k + 1], hashes[k], tokens + (size_t)k * bs, bs);
        if (b < 0) break;
        touch(p, b);
        blocks[k++] = b;
    }
    /* the following positions: the cached continuation of the prefix (a
     * full block or a finished sequence's partial one) that shares the
     * most tokens with the rest */
    const int32_t rest = n - k * bs < bs ? n - k * bs : bs;
    const int32_t *t = tokens + (size_t)k * bs;
    for (int32_t b = p->child_buckets[mix64(hashes[k]) & p->bucket_mask]; b >= 0 && rest > 0; b = p->child_next[b]) {
        if (p->parent[b] != hashes[k]) continue;
        const int32_t *bt = p->tokens + (size_t)b * bs;
        const int32_t lim = p->n_tok[b] < rest ? p->n_tok[b] : rest;
        int32_t len = 0;
        while (len < lim && bt[len] == t[len]) len++;
        if (len > *tail_len) {
            *tail_block = b;
            *tail_len = len;
        }
    }
    if (*tail_block >= 0) touch(p, *tail_block);
    return k * bs + *tail_len;
}

/* -------------------------------------------------------- checkpoints */

static void ckpt_unlink(tela_kv_pool *p, ckpt *c) {
    ckpt **link = &p->ckpt_buckets[c->key & p->ckpt_mask];
    while (*link && *link != c) link = &(*link)->next_in_bucket;
    if (*link) *link = c->next_in_bucket;
    if (c->lru_prev) c->lru_prev->lru_next = c->lru_next;
    else p->ckpt_lru_head = c->lru_next;
    if (c->lru_next) c->lru_next->lru_prev = c->lru_prev;
    else p->ckpt_lru_tail = c->lru_prev;
    p->ckpt_used -= c->bytes;
    p->ckpt_count--;
}

static void ckpt_link(tela_kv_pool *p, ckpt *c) {
    ckpt **bucket = &p->ckpt_buckets[c->key & p->ckpt_mask];
    c->next_in_bucket = *bucket;
    *bucket = c;
    c->lru_prev = p->ckpt_lru_tail;
    c->lru_next = NULL;
    if (p->ckpt_lru_tail) p->ckpt_lru_tail->lru_next = c;
    else p->ckpt_lru_head = c;
    p->ckpt_lru_tail = c;
    p->ckpt_used += c->bytes;
    p->ckpt_count++;
}

static ckpt *ckpt_lookup(tela_kv_pool *p, uint64_t key, int32_t pos, const int32_t *tail, int32_t n_tail) {
    for (ckpt *c = p->ckpt_buckets[key & p->ckpt_mask]; c; c = c->next_in_bucket)
        if (c->key == key && c->pos == pos && c->n_tail == n_tail &&
            !memcmp(c->tail, tail, (size_t)n_tail * sizeof *tail))
            return c;
    return NULL;
}

bool tela_kv_pool_ckpt_put(tela_kv_pool *p, const int32_t *tokens, int32_t pos, const uint64_t *hashes,
                           const void *image, const float *logits) {
    if (!p->image_bytes || pos <= 0) return false;
    const int32_t k = pos / p->block_size, n_tail = pos - k * p->block_size;
    const int32_t *tail = tokens + (size_t)k * p->block_size;
    ckpt *old = ckpt_lookup(p, hashes[k], pos, tail, n_tail);
    if (old) {
        if (old->logits || !logits) { /* as good as the new one: keep it, as just used */
            ckpt_unlink(p, old);
            ckpt_link(p, old);
            return true;
        }
        ckpt_unlink(p, old);
        ckpt_destroy(old);
    }
    const size_t bytes = p->image_bytes + (logits ? (size_t)p->n_vocab * sizeof(float) : 0) +
                         (size_t)n_tail * sizeof(int32_t) + sizeof(ckpt);
    if (bytes > p->ckpt_budget) return false;
    while (p->ckpt_used + bytes > p->ckpt_budget && p->ckpt_lru_head) {
        ckpt *c = p->ckpt_lru_head;
        ckpt_unlink(p, c);
        ckpt_destroy(c);
    }
    ckpt *c = calloc(1, sizeof *c);
    if (!c) return false;
    c->key = hashes[k];
    c->pos = pos;
    c->n_tail = n_tail;
    c->bytes = bytes;
    c->tail = malloc((size_t)(n_tail ? n_tail : 1) * sizeof *c->tail);
    c->image = malloc(p->image_bytes);
    c->logits = logits ? malloc((size_t)p->n_vocab * sizeof(float)) : NULL;
    if (!c->tail || !c->image || (logits && !c->logits)) {
        ckpt_destroy(c);
        return false;
    }
    memcpy(c->tail, tail, (size_t)n_tail * sizeof *tail);
    memcpy(c->image, image, p->image_bytes);
    if (logits) memcpy(c->logits, logits, (size_t)p->n_vocab * sizeof(float));
    ckpt_link(p, c);
    return true;
}

int32_t tela_kv_pool_ckpt_find(tela_kv_pool *p, const int32_t *tokens, int32_t n, int32_t max_pos,
                               const uint64_t *hashes, const void **image, const float **logits) {
    *image = NULL;
    *logits = NULL;
    if (!p->image_bytes) return -1;
    if (max_pos > n) max_pos = n;
    const int32_t bs = p->block_size;
    for (int32_t k = max_pos / bs; k >= 0; k--) {
        ckpt *best = NULL;
        for (ckpt *c = p->ckpt_buckets[hashes[k] & p->ckpt_mask]; c; c = c->next_in_bucket) {
            if (c->key != hashes[k] || c->pos / bs != k || c->pos > max_pos || (c->pos == n && !c->logits)) continue;
            if (memcmp(c->tail, tokens + (size_t)k * bs, (size_t)c->n_tail * sizeof *tokens) != 0) continue;
            if (!best || c->pos > best->pos) best = c;
        }
        if (best) {
            ckpt_unlink(p, best); /* as just used */
            ckpt_link(p, best);
            *image = best->image;
            *logits = best->pos == n ? best->logits : NULL;
            return best->pos;
        }
    }
    return -1;
}

uint64_t tela_kv_pool_ckpt_count(const tela_kv_pool *p) { return p->ckpt_count; }
uint64_t tela_kv_pool_ckpt_bytes(const tela_kv_pool *p) { return p->ckpt_used; }

void tela_kv_pool_clear_cache(tela_kv_pool *p) {
    while (p->lru_head >= 0) {
        const int32_t b = p->lru_head;
        lru_remove(p, b);
        table_remove(p, b);
        p->free_stack[p->n_free++] = b;
    }
    /* blocks still held stay registered */
    while (p->ckpt_lru_head) {
        ckpt *c = p->ckpt_lru_head;
        ckpt_unlink(p, c);
        ckpt_destroy(c);
    }
}
