/* text_stream.c: incremental detokenization with stop strings (see
 * text_stream.h). The pending text is what was detokenized but not handed
 * out; each push hands out a prefix of it and keeps the rest. */
#include "runtime/text_stream.h"

#include <stdlib.h>
#include <string.h>

struct tela_text_stream {
    tela_detok_stream *detok;   /* NULL without a tokenizer */
    const char *const *stops;
    bool have_stops;
    bool pushed;                /* any token given to the detokenizer (else nothing to flush) */
    char *buf;                  /* pending text, NUL-terminated */
    size_t len, cap;
    size_t emitted;             /* bytes of buf handed out by the last push, dropped by the next */
    bool cut;                   /* the last push put a NUL at buf[emitted] over `saved` */
    char saved;
};

tela_text_stream *tela_text_stream_create(const tela_vocab *vocab, const char *const *stops) {
    tela_text_stream *ts = calloc(1, sizeof *ts);
    if (!ts) return NULL;
    if (vocab && !(ts->detok = tela_detok_stream_create(vocab, true))) {
        free(ts);
        return NULL;
    }
    ts->stops = stops;
    ts->have_stops = vocab && stops && stops[0];
    return ts;
}

void tela_text_stream_free(tela_text_stream *ts) {
    if (!ts) return;
    if (ts->detok) tela_detok_stream_free(ts->detok);
    free(ts->buf);
    free(ts);
}

static bool append(tela_text_stream *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *nb = realloc(t->buf, cap);
        if (!nb) return false;
        t->buf = nb;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
    return true;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

/* Earliest occurrence of any stop string in the pending text, or NULL. */
static const char *find_stop(const tela_text_stream *t) {
    const char *best = NULL;
    for (const char *const *s = t->stops; s && *s; s++) {
        const char *f = find_bytes(t->buf, t->len, *s, strlen(*s));
        if (f && (!best || f < best)) best = f;
    }
    return best;
}

/* Length of the longest suffix of the pending text that is a proper prefix
 * of a stop string: those bytes must wait for the next token. */
static size_t held_suffix(const tela_text_stream *t) {
    size_t hold = 0;
    for (const char *const *s = t->stops; s && *s; s++) {
        size_t m = strlen(*s);
        for (size_t k = m > 0 ? m - 1 : 0; k > hold; k--)
            if (k <= t->len && !memcmp(t->buf + t->len - k, *s, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

bool tela_text_stream_push(tela_text_stream *ts, int32_t token, bool is_eog, bool final, const char **text,
                           size_t *len, bool *stopped) {
    *text = "";
    *len = 0;
    *stopped = false;
    if (!ts->detok) return true;
    /* drop what the last push handed out */
    if (ts->cut) {
        ts->buf[ts->emitted] = ts->saved;
        memmove(ts->buf, ts->buf + ts->emitted, ts->len - ts->emitted);
        ts->len -= ts->emitted;
        ts->buf[ts->len] = '\0';
        ts->emitted = 0;
        ts->cut = false;
    }
    const char *p;
    size_t n;
    if (!is_eog) {
        tela_detok_stream_push(ts->detok, token, &p, &n);
        if (!append(ts, p, n)) return false;
        ts->pushed = true;
    }
    if (final && ts->pushed) {
        tela_detok_stream_flush(ts->detok, &p, &n);
        if (!append(ts, p, n)) return false;
    }
    if (!ts->buf && !append(ts, "", 0)) return false;
    size_t emit = ts->len;
    const char *stop = ts->have_stops ? find_stop(ts) : NULL;
    if (stop) {
        emit = (size_t)(stop - ts->buf);
        *stopped = true;
    } else if (!final && ts->have_stops) {
        emit = ts->len - held_suffix(ts);
    }
    ts->emitted = emit;
    ts->cut = true;
    ts->saved = ts->buf[emit];
    ts->buf[emit] = '\0';
    *text = ts->buf;
    *len = emit;
    return true;
}
