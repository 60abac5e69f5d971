/* text_stream.h: the text of a generation as it streams out, token by
 * token: detokenized incrementally (complete UTF-8 only), with stop strings
 * found in the text and the bytes that might still begin one held back
 * until the next token shows they do not. tela_generate and the batching
 * engine both use it, so both give the same text for the same tokens. */
#ifndef TELA_RUNTIME_TEXT_STREAM_H
#define TELA_RUNTIME_TEXT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

typedef struct tela_text_stream tela_text_stream;

/* vocab may be NULL (a model without a tokenizer: no text, no stop
 * strings); stops: NULL-terminated, or NULL (not copied: they must outlive
 * the stream). NULL when out of memory. */
tela_text_stream *tela_text_stream_create(const tela_vocab *vocab, const char *const *stops);
void tela_text_stream_free(tela_text_stream *ts);

/* Adds a sampled token. is_eog: an end-of-generation token, whose own text
 * is not shown; final: generation ends with it (everything held back is
 * flushed). *text / *len receive the bytes that are now final (valid until
 * the next call; NUL-terminated); *stopped is set when a stop string was
 * found: the text ends before it and generation must end. Returns false
 * when out of memory. */
bool tela_text_stream_push(tela_text_stream *ts, int32_t token, bool is_eog, bool final, const char **text,
                           size_t *len, bool *stopped);

#endif
