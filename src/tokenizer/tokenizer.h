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
/* Appends the token; *piece/*len receive the text now complete (valid until
 * the next call). */
void tela_detok_stream_push(tela_detok_stream *s, int32_t token, const char **piece, size_t *len);
/* Flushes held bytes at the end of generation (as U+FFFD where incomplete). */
void tela_detok_stream_flush(tela_detok_stream *s, const char **piece, size_t *len);

#endif
