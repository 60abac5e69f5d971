/* generate.c: the generation loop: prompt evaluation, then sample /
 * stream / decode until a stop condition. Stop strings are matched on the
 * detokenized text; text that could still become a stop string is held back
 * from the callback until it is known not to be one.
 *
 * Rules (also in tela.h):
 *  - step index of a sampled token = its position in the session, so the
 *    same seed gives the same tokens however the generation is split into
 *    calls;
 *  - the last sampled token is not evaluated (it is in out_tokens); to
 *    continue, pass it as the next call's prompt;
 *  - the callback runs once per sampled token; an end-of-generation token's
 *    own text is not emitted, and text held back before it is flushed with
 *    it. */
#include "runtime/session.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

tela_generate_params tela_generate_default_params(void) {
    tela_generate_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 0;
    p.sampler = tela_sampler_default_params();
    return p;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Text produced but not yet passed to the callback. */
typedef struct {
    char *buf;
    size_t len, cap;
} text_buf;

static bool text_append(text_buf *t, const char *s, size_t n) {
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

/* Earliest occurrence of any stop string in t, or NULL. */
static const char *find_stop(const text_buf *t, const char *const *stops) {
    const char *best = NULL;
    for (const char *const *s = stops; s && *s; s++) {
        const char *f = find_bytes(t->buf, t->len, *s, strlen(*s));
        if (f && (!best || f < best)) best = f;
    }
    return best;
}

/* Length of the longest suffix of t that is a proper prefix of a stop
 * string: those bytes must wait for the next token. */
static size_t held_suffix(const text_buf *t, const char *const *stops) {
    size_t hold = 0;
    for (const char *const *s = stops; s && *s; s++) {
        size_t m = strlen(*s);
        for (size_t k = m > 0 ? m - 1 : 0; k > hold; k--)
            if (k <= t->len && !memcmp(t->buf + t->len - k, *s, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

tela_status tela_generate(tela_session *session, const int32_t *prompt, int32_t n_prompt,
                          const tela_generate_params *params, int32_t *out_tokens, size_t cap,
                          tela_generate_result *result) {
    tela_generate_result res;
    memset(&res, 0, sizeof res);
    if (result) *result = res;
    if (!session || !params || n_prompt < 0 || (n_prompt > 0 && !prompt))
        return tela_errorf(TELA_ERR_ARG, "tela_generate: bad arguments");
    tela_session *s = session;
    const tela_model *m = s->model;
    const int32_t n_vocab = m->info.n_vocab;
    bool have_stops = params->stop_strings && params->stop_strings[0];
    if (have_stops && !m->vocab)
        return tela_errorf(TELA_ERR_ARG, "tela_generate: stop strings need a tokenizer, and this model has none");

    /* Plain greedy decoding on a device: the token is picked where the
     * logits are, and only its id comes back (the same pick as the
     * sampler's: the largest logit, the lowest id among equals). */
    const tela_sampler_params *sp = &params->sampler;
    const bool device_greedy = !tela_exec_host_visible(s->ex) && sp->temperature <= 0.0f &&
                               sp->repeat_penalty == 1.0f && sp->frequency_penalty == 0.0f &&
                               sp->presence_penalty == 0.0f && sp->n_logit_bias == 0 && !params->logits_hook;
    bool have_next = false;
    const bool profiling = tela_exec_profiling(s->ex);
    int32_t next = 0;
    double t0 = now_seconds();
    if (n_prompt > 0 && device_greedy) {
        TELA_TRY(tela_session_eval_greedy(s, prompt, n_prompt, &next));
        have_next = true;
    } else if (n_prompt > 0) {
        TELA_TRY(tela_session_eval_internal(s, prompt, n_prompt, NULL, 0, true));
    } else if (!s->has_logits) {
        return tela_errorf(TELA_ERR_ARG,
                           "tela_generate: no prompt tokens, and the session holds no logits to sample from");
    }
    res.n_prompt = n_prompt;
    double t1 = now_seconds();
    res.prompt_seconds = t1 - t0;

    tela_detok_stream *detok = NULL;
    if (m->vocab) {
        detok = tela_detok_stream_create(m->vocab, true);
        if (!detok) return tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
    }
    text_buf pending = {0};
    bool pushed = false; /* any token given to the detokenizer (else nothing to flush) */
    tela_status st = TELA_OK;
    res.stop_reason = TELA_STOP_MAX_TOKENS;
    for (;;) {
        if (params->max_tokens > 0 && res.n_generated >= params->max_tokens) break;
        uint64_t step = (uint64_t)s->n_past;
        int32_t tok = next;
        if (!have_next) {
            if (params->logits_hook) params->logits_hook(params->hook_user, s->logits, n_vocab, step);
            s->has_logits = false;  /* the sampler edits them in place */
            const double ts = profiling ? now_seconds() : 0.0;
            st = tela_sample(&params->sampler, s->logits, n_vocab, s->tokens, (size_t)s->n_past, step, &tok);
            if (profiling) tela_exec_profile_host(s->ex, "sampling (host)", now_seconds() - ts);
            if (st != TELA_OK) break;
        }
        have_next = false;
        if (out_tokens && (size_t)res.n_generated < cap) out_tokens[res.n_generated] = tok;
        res.n_generated++;

        bool is_eog = !params->ignore_eos && (m->vocab ? tela_vocab_is_eog(m->vocab, tok) : tok == m->info.eos_token);
        bool final = true;
        if (is_eog) res.stop_reason = TELA_STOP_EOS;
        else if (params->max_tokens > 0 && res.n_generated >= params->max_tokens) res.stop_reason = TELA_STOP_MAX_TOKENS;
        else if (s->n_past >= s->n_ctx) res.stop_reason = TELA_STOP_CONTEXT;
        else final = false;

        const char *piece = "";
        size_t piece_len = 0;
        if (detok) {
            const char *p;
            size_t n;
            bool ok = true;
            const double td = profiling ? now_seconds() : 0.0;
            if (!is_eog) {
                tela_detok_stream_push(detok, tok, &p, &n);
                ok = text_append(&pending, p, n);
                pushed = true;
            }
            if (ok && final && pushed) {
                tela_detok_stream_flush(detok, &p, &n);
                ok = text_append(&pending, p, n);
            }
            if (profiling) tela_exec_profile_host(s->ex, "detokenization", now_seconds() - td);
            if (!ok) {
                st = tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
                break;
            }
            size_t emit = pending.len;
            const char *stop = have_stops ? find_stop(&pending, params->stop_strings) : NULL;
            if (stop) {
                emit = (size_t)(stop - pending.buf);
                final = true;
                res.stop_reason = TELA_STOP_STRING;
            } else if (!final && have_stops) {
                emit = pending.len - held_suffix(&pending, params->stop_strings);
            }
            /* Hand out `emit` bytes; keep the rest (moved to the front after
             * the callback, so the piece stays valid during it). */
            piece = pending.buf ? pending.buf : "";
            piece_len = emit;
            if (params->on_token) {
                char saved = pending.buf ? pending.buf[emit] : '\0';
                if (pending.buf) pending.buf[emit] = '\0';
                int stop_cb = params->on_token(params->user, tok, piece, piece_len);
                if (pending.buf) pending.buf[emit] = saved;
                if (stop_cb && !final) {
                    final = true;
                    res.stop_reason = TELA_STOP_CALLBACK;
                }
            }
            if (pending.buf) {
                memmove(pending.buf, pending.buf + emit, pending.len - emit);
                pending.len -= emit;
                pending.buf[pending.len] = '\0';
            }
        } else if (params->on_token) {
            if (params->on_token(params->user, tok, piece, piece_len) && !final) {
                final = true;
                res.stop_reason = TELA_STOP_CALLBACK;
            }
        }
        if (final) break;
        if (device_greedy) {
            st = tela_session_eval_greedy(s, &tok, 1, &next);
            have_next = st == TELA_OK;
        } else {
            st = tela_session_eval_internal(s, &tok, 1, NULL, 0, true);
        }
        if (st != TELA_OK) break;
    }
    res.generate_seconds = now_seconds() - t1;
    free(pending.buf);
    if (detok) tela_detok_stream_free(detok);
    if (result) *result = res;
    return st;
}
