/* tok_internal.h: the inside of a tela_vocab, shared by the tokenizer's own
 * source files (loaders, pre-tokenizers, BPE, SentencePiece, detokenizer) and
 * by its unit tests, which build small vocabularies in memory with the
 * builder functions below. Other layers code against tokenizer.h only. */
#ifndef TELA_TOKENIZER_TOK_INTERNAL_H
#define TELA_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* How text becomes tokens. */
typedef enum tela_vocab_kind {
    TELA_VOCAB_BPE = 1,   /* byte-level BPE (GGUF "gpt2"): GPT-2 byte->char map, merge ranks */
    TELA_VOCAB_SPM = 2    /* SentencePiece BPE (GGUF "llama"): U+2581 for space, scores, <0xNN> */
} tela_vocab_kind;

/* Per-token flags. */
enum {
    TELA_TOKF_ADDED = 1,        /* recognised as a whole in the text before pre-tokenizing */
    TELA_TOKF_SPECIAL = 2,      /* only recognised when parse_special; dropped by skip_special */
    TELA_TOKF_LSTRIP = 4,       /* swallows the whitespace on its left (HF AddedToken.lstrip) */
    TELA_TOKF_RSTRIP = 8,       /* ... and on its right */
    TELA_TOKF_SINGLE_WORD = 16, /* only matches when not inside a word */
    TELA_TOKF_NORMALIZED = 32   /* matched in the normalized text (HF AddedToken.normalized) */
};

/* Normalizers (applied to text between added tokens). */
enum { TELA_NORM_NONE = 0, TELA_NORM_NFC, TELA_NORM_NFD, TELA_NORM_NFKC, TELA_NORM_NFKD };

#define TELA_MAX_PRETOK_RE 8

typedef struct tela_tok {
    uint32_t text_off, text_len;  /* the vocabulary string, in vocab->text */
    uint32_t dec_off, dec_len;    /* the bytes it decodes to, in vocab->dec */
    uint32_t hash;
    float score;
    uint8_t type;                 /* tela_token_type; 0 for an id no entry defines */
    uint8_t flags;                /* TELA_TOKF_* */
} tela_tok;

typedef struct tela_merge_slot {
    uint64_t key;    /* (left + 1) << 32 | (right + 1); 0 = empty slot */
    int32_t rank;
    int32_t result;
} tela_merge_slot;

typedef struct tela_cache_slot {
    uint64_t hash;   /* 0 = empty slot */
    uint32_t key_off, ids_off;
    uint16_t key_len, n_ids;
} tela_cache_slot;

/* Bounded cache of encoded words (BPE). Cleared when full. */
typedef struct tela_word_cache {
    pthread_mutex_t lock;
    tela_cache_slot *slots;
    uint32_t mask, used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
    uint64_t hits, misses;
} tela_word_cache;

struct tela_vocab {
    tela_vocab_kind kind;
    char model_name[16];        /* "gpt2" / "llama" */
    char pre_name[48];          /* pre-tokenizer name ("llama-bpe", "qwen2", ...) */

    int32_t n_tokens;
    tela_tok *tok;
    char *text;                 /* all vocabulary strings */
    size_t text_len, text_cap;
    char *dec;                  /* all decoded pieces */
    size_t dec_len;

    int32_t *map;               /* open addressing: string -> id (-1 empty) */
    uint32_t map_mask;

    tela_merge_slot *merges;    /* open addressing: (left, right) -> rank, result */
    uint32_t merge_mask;
    size_t n_merges, merge_cap;
    int32_t next_rank;

    int32_t byte_id[256];       /* BPE: id of each byte's GPT-2 char; SPM: id of <0xNN> */
    bool spm_cut[128];          /* SPM: ASCII bytes no piece longer than one char holds:
                                   no merge crosses them, so the text is cut there */

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos;
    bool add_space_prefix;      /* SPM: prefix a space to text (after a special token too) */
    bool ignore_merges;         /* BPE: a word that is a token is taken whole */
    bool byte_prefix_space;     /* BPE: HF ByteLevel add_prefix_space */
    int norm;                   /* TELA_NORM_* */

    int n_re;                   /* pre-tokenizer: regexes applied in turn, each */
    pcre2_code *re[TELA_MAX_PRETOK_RE]; /* splitting the pieces of the one before */
    bool re_jit;
    pcre2_match_context *re_ctx; /* raised match limit: a long run of spaces is fine */

    int32_t *added;             /* added tokens, by first byte, longest first */
    uint32_t n_added;
    uint32_t added_first[257];  /* added[added_first[b] .. added_first[b+1]) start with byte b */
    bool has_normalized_added;

    int32_t *eog;
    uint32_t n_eog;

    char *chat_template;
    tela_word_cache *cache;     /* mutable behind a const vocab; has its own lock */
};

/* ---- builder (loaders and tests). Order: create, set tokens, index, merges,
 * pre-tokenizer and flags, finish. */
tela_status tela_vocab_create(tela_vocab_kind kind, int32_t n_tokens, tela_vocab **out);
tela_status tela_vocab_set_token(tela_vocab *v, int32_t id, const char *text, size_t len,
                                 int type, float score);
/* Builds the string -> id map (duplicates: the lowest id wins). */
tela_status tela_vocab_index(tela_vocab *v);
/* Merges, in rank order; pairs or results that are not tokens are skipped,
 * as are repeats (the first, lowest rank, wins). */
tela_status tela_vocab_reserve_merges(tela_vocab *v, size_t n);
tela_status tela_vocab_add_merge(tela_vocab *v, const char *a, size_t alen, const char *b, size_t blen);
/* A merge written "a b" (GGUF, and HF's string form). */
tela_status tela_vocab_add_merge_str(tela_vocab *v, const char *s, size_t len);
/* A pre-tokenizer by its GGUF name; also sets the defaults that go with it
 * (NFC, ignore_merges, add_bos). Unknown names fail with a clear message. */
tela_status tela_vocab_set_pre(tela_vocab *v, const char *name);
/* The name matching an HF regex list, or NULL. */
const char *tela_pretok_name_for_regexes(const char *const *patterns, int n);
/* Custom regexes (HF pre-tokenizers that match no named one). */
tela_status tela_vocab_set_regexes(tela_vocab *v, const char *name, const char *const *patterns, int n);
/* Computes the byte tables, decoded pieces, added-token index, EOG set and
 * the cache. */
tela_status tela_vocab_finish(tela_vocab *v);

/* Lookup of a vocabulary string; -1 if absent (tok_lookup.c). */
int32_t tela_vocab_find(const tela_vocab *v, const char *s, size_t len);
uint32_t tela_tok_hash(const char *s, size_t len);
static inline const char *tela_tok_text(const tela_vocab *v, int32_t id) { return v->text + v->tok[id].text_off; }

/* ---- growable id list (tok_lookup.c) */
typedef struct tela_idvec {
    int32_t *v;
    size_t n, cap;
} tela_idvec;
tela_status tela_idvec_push(tela_idvec *a, int32_t id);
tela_status tela_idvec_append(tela_idvec *a, const int32_t *ids, size_t n);

/* ---- UTF-8 (tok_utf8.c) */
/* Examines the sequence at s[0..n): returns 1 for a valid character (*adv =
 * its length, *cp = code point), 0 for an invalid sequence (*adv = the length
 * of its maximal subpart, replaced by one U+FFFD as Python and Rust do), -1
 * when s ends inside a sequence that is valid so far (*adv = n). */
int tela_utf8_next(const unsigned char *s, size_t n, size_t *adv, uint32_t *cp);
bool tela_utf8_valid(const char *s, size_t n);
/* Copies s to a malloc'd buffer replacing invalid sequences by U+FFFD
 * (each maximal subpart; an incomplete tail too). */
tela_status tela_utf8_repair(const char *s, size_t n, char **out, size_t *out_len);
size_t tela_utf8_encode(uint32_t cp, char *out);
/* Unicode White_Space (Rust's char::is_whitespace, regex \s). */
bool tela_unicode_is_space(uint32_t cp);
/* Rust regex \w: letters, marks, decimal digits, connector punctuation. */
bool tela_unicode_is_word(uint32_t cp);
/* A character before which NFC may cut the text (see tok_utf8.c). */
bool tela_nfc_stable(uint32_t cp);
/* Decodes the code point that ends at s[end] (exclusive); returns its start. */
size_t tela_utf8_prev(const char *s, size_t end, uint32_t *cp);

/* ---- pieces of the tokenizer */
/* Splits text (valid UTF-8) with the pre-tokenizer and calls emit for each
 * piece. md: match data for the largest pattern. */
typedef tela_status (*tela_piece_fn)(void *ctx, const char *s, size_t n);
tela_status tela_pretok_split(const tela_vocab *v, const char *s, size_t n, pcre2_match_data *md,
                              tela_piece_fn emit, void *ctx);
void tela_pretok_free(tela_vocab *v);

/* Byte-level BPE of one pre-tokenized word. */
tela_status tela_bpe_word(const tela_vocab *v, const char *s, size_t n, tela_idvec *out);
uint32_t tela_gpt2_byte_to_cp(unsigned b);
int tela_gpt2_cp_to_byte(uint32_t cp);   /* -1 if cp is not one of the 256 */

/* SentencePiece BPE of a fragment already escaped (U+2581 for spaces). */
tela_status tela_spm_encode(const tela_vocab *v, const char *s, size_t n, tela_idvec *out);

/* Decoded pieces of every token (detok.c). */
tela_status tela_vocab_build_pieces(tela_vocab *v);

/* Word cache (tok_lookup.c). */
bool tela_cache_get(const tela_vocab *v, const char *s, size_t n, uint64_t h, tela_idvec *out);
void tela_cache_put(const tela_vocab *v, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t n_ids);
uint64_t tela_hash64(const char *s, size_t n);

#endif
