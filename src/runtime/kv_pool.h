/* kv_pool.h: the batching engine's bookkeeping of its paged KV cache and its
 * prefix cache (the rows themselves live in the backend; this is only
 * which block holds what).
 *
 * Blocks. The cache's rows come in n_blocks blocks of block_size
 * positions. A running sequence holds a block table; each block it holds
 * is counted (refcount). A block with no holder is either free or cached.
 *
 * Prefix cache. A full block can be registered under the chain hash of its
 * tokens and of every token before it (hash(parent hash, its tokens)), so
 * a later sequence starting with the same tokens finds it and shares it
 * (blocks are never written once full). A finished sequence's last, partial
 * block can be registered too (its rows are copied, not shared, by the
 * sequence that reuses them, since that one writes on into its block).
 * Cached blocks nobody holds are evicted, least recently used first, when a
 * block is needed and none is free.
 *
 * Checkpoints (hybrid models). The recurrent state of a sequence cannot be
 * rebuilt from KV blocks, so the engine keeps images of it at some
 * positions (every checkpoint interval, at the end of a prompt, at the end
 * of a request), keyed by the chain hash at the block boundary before the
 * position and the tokens after it; the one at the end of a prompt also
 * keeps the logits, so the same prompt again needs no computation at all.
 * They live in host memory under a byte budget, least recently used
 * evicted first. A checkpoint at position C is usable when the KV rows of
 * [0, C) are found too. */
#ifndef TELA_RUNTIME_KV_POOL_H
#define TELA_RUNTIME_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TELA_KV_CHAIN_ROOT 0x6a09e667f3bcc908ull

typedef struct tela_kv_pool tela_kv_pool;

/* A pool of n_blocks blocks of block_size positions; checkpoints of
 * image_bytes (0: the model keeps no recurrent state) with logits of
 * n_vocab floats, within ckpt_budget bytes. NULL when out of memory. */
tela_kv_pool *tela_kv_pool_create(int32_t n_blocks, int32_t block_size, size_t image_bytes, int32_t n_vocab,
                                  uint64_t ckpt_budget);
void tela_kv_pool_free(tela_kv_pool *p);

/* A block of its own for a sequence (held once), evicting the least
 * recently used cached block when none is free; -1 when every block is
 * held. */
int32_t tela_kv_pool_alloc(tela_kv_pool *p);
void tela_kv_pool_retain(tela_kv_pool *p, int32_t block);
void tela_kv_pool_release(tela_kv_pool *p, int32_t block);
/* Blocks alloc can still give: free plus cached ones nobody holds. */
int32_t tela_kv_pool_available(const tela_kv_pool *p);
/* Blocks held by sequences; cached blocks nobody holds. */
int32_t tela_kv_pool_held(const tela_kv_pool *p);
int32_t tela_kv_pool_cached_idle(const tela_kv_pool *p);

/* The chain hash of n tokens after a prefix of hash parent. */
uint64_t tela_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n);

/* Registers `block` (held by the caller) as holding n tokens (block_size:
 * a full block; fewer: a finished sequence's partial last block) after the
 * prefix whose chain hash is parent. Nothing happens when an equal entry is
 * already cached (the block then stays uncached) or the block is already
 * registered. */
void tela_kv_pool_register(tela_kv_pool *p, int32_t block, uint64_t parent, const int32_t *tokens, int32_t n);

/* The longest cached prefix of tokens[0..n): blocks[i] for each full block
 * found (hashes[0..n / block_size] must hold the chain hashes of the
 * tokens' whole blocks: hashes[0] = TELA_KV_CHAIN_ROOT, hashes[i + 1] =
 * hash(hashes[i], block i)), then the cached block after them whose first
 * tokens match the most of the following ones (*tail_block, -1 if none;
 * *tail_len of its rows are usable).
 * Returns the number of tokens found (full blocks * block_size + tail).
 * Marks what it found as recently used; holds nothing. */
int32_t tela_kv_pool_match(tela_kv_pool *p, const int32_t *tokens, int32_t n, const uint64_t *hashes,
                           int32_t *blocks, int32_t *tail_block, int32_t *tail_len);

/* Keeps a copy of a recurrent-state image (and logits, or NULL) at
 * position pos of tokens[0..pos) (hashes as for match, up to pos /
 * block_size). Replaces an equal one; false when it does not fit the
 * budget even after evicting everything else. */
bool tela_kv_pool_ckpt_put(tela_kv_pool *p, const int32_t *tokens, int32_t pos, const uint64_t *hashes,
                           const void *image, const float *logits);

/* The checkpoint of tokens[0..n) with the largest position C <= max_pos
 * (and C < n unless it holds logits): its position, image and logits (NULL
 * if none; valid until the next put). -1 when there is none. */
int32_t tela_kv_pool_ckpt_find(tela_kv_pool *p, const int32_t *tokens, int32_t n, int32_t max_pos,
                               const uint64_t *hashes, const void **image, const float **logits);

/* Checkpoints held and their bytes. */
uint64_t tela_kv_pool_ckpt_count(const tela_kv_pool *p);
uint64_t tela_kv_pool_ckpt_bytes(const tela_kv_pool *p);

/* Drops every cached block nobody holds and every checkpoint. */
void tela_kv_pool_clear_cache(tela_kv_pool *p);

#endif
