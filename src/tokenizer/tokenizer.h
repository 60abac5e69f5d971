/* tokenizer.h: vocabularies and tokenizers as the model's own tokenizer
 * defines them: byte-level BPE (GGUF "gpt2") with named pre-tokenizers,
 * SentencePiece BPE (GGUF "llama"), loaded from GGUF metadata or from a
 * Hugging Face tokenizer.json; detokenization and a streaming UTF-8 decoder. */
#ifndef TELA_TOKENIZER_TOKENIZER_H
#define TELA_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "format/gguf.h"

typedef struct tela_vocab tela_vocab;

/* From GGUF tokenizer.ggml.* keys. TELA_ERR_NOT_FOUND if the file has no
 * tokenizer; a clear error for an unknown model or pre-tokenizer name. */
tela_status tela_vocab_load_gguf(const tela_gguf *gguf, tela_vocab **out);
/* From a directory holding tokenizer.json (+ tokenizer_config.json). */
tela_status tela_vocab_load_hf(const char *dir, tela_vocab **out);
void tela_vocab_free(tela_vocab *vocab);

int32_t tela_vocab_n_tokens(const tela_vocab *vocab);
int32_t tela_vocab_bos(const tela_vocab *vocab);   /* -1 if none */
int32_t tela_vocab_eos(const tela_vocab *vocab);   /* -1 if none */
bool tela_vocab_is_eog(const tela_vocab *vocab, int32_t token);
/* The chat template string from the metadata, or NULL. */
const char *tela_vocab_chat_template(const tela_vocab *vocab);

/* See tela_tokenize() in tela.h for the meaning of the arguments. */
tela_status tela_vocab_tokenize(const tela_vocab *vocab, const char *text, size_t len,
                                bool add_special, bool parse_special,
                                int32_t *out, size_t cap, size_t *n_out);

/* The bytes a token stands for (after undoing the byte-level/SPM encoding);
 * returns the number of bytes, written to buf up to cap. Special tokens give
 * their text unless skip_special. */
size_t tela_vocab_token_bytes(const tela_vocab *vocab, int32_t token, bool skip_special,
                              char *buf, size_t cap);

/* Streaming decoder: feeds tokens, emits only complete UTF-8; invalid
 * sequences become U+FFFD as Hugging Face does. */
typedef struct tela_detok_stream tela_detok_stream;
tela_detok_stream *tela_detok_stream_create(const tela_vocab *vocab, bool skip_special);
void tela_detok_stream_free(tela_detok_stream *s);
/* Appends the token; *piece and *len receive the text now complete (valid until
 * the next call). */
void tela_detok_stream_push(tela_detok_stream *s, int32_t token, const char **piece, size_t *len);
/* Flushes held bytes at the end of generation (as U+FFFD where incomplete). */
void tela_detok_stream_flush(tela_detok_stream *s, const char **piece, size_t *len);

/* ---- additions (tokenizer engineer) ---- */

/* A GGUF file (vocab-only files too) or a directory with tokenizer.json. */
tela_status tela_vocab_load(const char *path, tela_vocab **out);

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
typedef enum tela_token_type {
    TELA_TOKEN_NORMAL = 1,
    TELA_TOKEN_UNKNOWN = 2,
    TELA_TOKEN_CONTROL = 3,
    TELA_TOKEN_USER_DEFINED = 4,
    TELA_TOKEN_UNUSED = 5,
    TELA_TOKEN_BYTE = 6
} tela_token_type;

/* The type of a token (0 when the id is out of range or undefined). */
int tela_vocab_token_type(const tela_vocab *vocab, int32_t token);
/* The token's string as the vocabulary stores it (GPT-2 byte chars / U+2581),
 * not NUL-terminated; NULL when the id is out of range. */
const char *tela_vocab_token_text(const tela_vocab *vocab, int32_t token, size_t *len);
/* Whether tokenizing with add_special adds BOS / EOS. */
bool tela_vocab_adds_bos(const tela_vocab *vocab);
bool tela_vocab_adds_eos(const tela_vocab *vocab);
int32_t tela_vocab_eot(const tela_vocab *vocab);   /* -1 if none */
/* "gpt2" or "llama", and the pre-tokenizer's name ("llama-bpe", "qwen2"...). */
const char *tela_vocab_model_name(const tela_vocab *vocab);
const char *tela_vocab_pre_name(const tela_vocab *vocab);

/* Tokens to text as Hugging Face tokenizers' decode() does (without
 * transformers' clean_up_tokenization_spaces): byte-level pieces joined, then
 * invalid UTF-8 replaced by U+FFFD; SentencePiece: U+2581 -> space, <0xNN>
 * runs joined (one U+FFFD per byte of an invalid run), the prefix space
 * removed. *out is malloc'd and NUL-terminated, *len (may be NULL) its length.
 * TELA_ERR_ARG for an id out of range. */
tela_status tela_vocab_detokenize(const tela_vocab *vocab, const int32_t *tokens, size_t n,
                                  bool skip_special, char **out, size_t *len);

#endif
