/* replies.c: the memory of recent chat replies as tokens (see replies.h):
 * a ring of entries under one mutex. */
#include "server/replies.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct reply_entry {
    char *text;                  /* prompt text then reply text */
    size_t prompt_len, len;
    int32_t *tokens;             /* prompt tokens then generated tokens */
    size_t n_tokens;
} reply_entry;

struct reply_memory {
    pthread_mutex_t mu;
    reply_entry *e;
    size_t cap, next, used;
};

reply_memory *reply_memory_create(size_t max_entries) {
    reply_memory *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cap = max_entries ? max_entries : 1;
    m->e = calloc(m->cap, sizeof *m->e);
    if (!m->e || pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m->e);
        free(m);
        return NULL;
    }
    return m;
}

static void entry_clear(reply_entry *e) {
    free(e->text);
    free(e->tokens);
    memset(e, 0, sizeof *e);
}

void reply_memory_free(reply_memory *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) entry_clear(&m->e[i]);
    free(m->e);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void reply_memory_add(reply_memory *m, const char *prompt_text, size_t prompt_len, const int32_t *prompt,
                      size_t n_prompt, const char *reply, size_t reply_len, const int32_t *gen, size_t n_gen) {
    if (!m || !prompt_len || !n_prompt) return;
    reply_entry ne = {0};
    ne.text = malloc(prompt_len + reply_len + 1);
    ne.tokens = malloc((n_prompt + n_gen + 1) * sizeof *ne.tokens);
    if (!ne.text || !ne.tokens) {
        entry_clear(&ne);
        return;
    }
    memcpy(ne.text, prompt_text, prompt_len);
    if (reply_len) memcpy(ne.text + prompt_len, reply, reply_len);
    ne.text[prompt_len + reply_len] = 0;
    ne.prompt_len = prompt_len;
    ne.len = prompt_len + reply_len;
    memcpy(ne.tokens, prompt, n_prompt * sizeof *prompt);
    if (n_gen) memcpy(ne.tokens + n_prompt, gen, n_gen * sizeof *gen);
    ne.n_tokens = n_prompt + n_gen;
    pthread_mutex_lock(&m->mu);
    entry_clear(&m->e[m->next]);
    m->e[m->next] = ne;
    m->next = (m->next + 1) % m->cap;
    if (m->used < m->cap) m->used++;
    pthread_mutex_unlock(&m->mu);
}

size_t reply_memory_match(reply_memory *m, const char *text, size_t len, size_t extra, int32_t **tokens, size_t *n) {
    *tokens = NULL;
    *n = 0;
    if (!m) return 0;
    size_t covered = 0;
    pthread_mutex_lock(&m->mu);
    const reply_entry *best = NULL;
    for (size_t i = 0; i < m->cap; i++) {
        const reply_entry *e = &m->e[i];
        if (!e->text || e->len > len || e->len <= covered || memcmp(e->text, text, e->len) != 0) continue;
        best = e;
        covered = e->len;
    }
    if (best) {
        *tokens = malloc((best->n_tokens + extra) * sizeof **tokens);
        if (*tokens) {
            memcpy(*tokens, best->tokens, best->n_tokens * sizeof **tokens);
            *n = best->n_tokens;
        } else {
            covered = 0;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return covered;
}
