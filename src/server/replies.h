/* replies.h: the server's memory of its recent chat replies as tokens.
 *
 * A client continuing a conversation sends the earlier replies back as
 * text, and text tokenized again need not give the tokens the model
 * generated (byte-level BPE has many spellings of one string): the prefix
 * cache, which is keyed by tokens, would then stop at the end of the
 * earlier prompt and the reply be computed again. So each finished
 * single-choice chat generation is remembered as its rendered prompt text,
 * its reply text and the tokens of both; a later conversation whose
 * rendering starts with that prompt and that reply takes those tokens for
 * that much of its text, and only the rest is tokenized. Thread-safe; the
 * oldest entry goes when it is full. Pure: no HTTP, engine or model. */
#ifndef TELA_SERVER_REPLIES_H
#define TELA_SERVER_REPLIES_H

#include <stddef.h>
#include <stdint.h>

typedef struct reply_memory reply_memory;

/* NULL when out of memory. */
reply_memory *reply_memory_create(size_t max_entries);
void reply_memory_free(reply_memory *m);

/* Remembers prompt_text (the rendered conversation the generation started
 * from) with its tokens, followed by the reply text with the tokens
 * generated for it. Nothing happens when out of memory. */
void reply_memory_add(reply_memory *m, const char *prompt_text, size_t prompt_len, const int32_t *prompt,
                      size_t n_prompt, const char *reply, size_t reply_len, const int32_t *gen, size_t n_gen);

/* The remembered prompt + reply that covers the most of text's start:
 * its bytes of text (0: none matches), with *tokens a malloc'd copy of its
 * tokens (room for `extra` more) and *n their count. */
size_t reply_memory_match(reply_memory *m, const char *text, size_t len, size_t extra, int32_t **tokens, size_t *n);

#endif
