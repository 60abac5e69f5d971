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
#include "runtime/text_stream.h"
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

    tela_text_stream *text = tela_text_stream_create(m->vocab, have_stops ? params->stop_strings : NULL);
    if (!text) return tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
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

        const char *piece;
        size_t piece_len;
        bool stopped;
        const double td = profiling ? now_seconds() : 0.0;
        const bool ok = tela_text_stream_push(text, tok, is_eog, final, &piece, &piece_len, &stopped);
        if (profiling && m->vocab) tela_exec_profile_host(s->ex, "detokenization", now_seconds() - td);
        if (!ok) {
            st = tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
            break;
        }
        if (stopped) {
            final = true;
            res.stop_reason = TELA_STOP_STRING;
        }
        if (params->on_token && params->on_token(params->user, tok, piece, piece_len) && !final) {
            final = true;
            res.stop_reason = TELA_STOP_CALLBACK;
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
    tela_text_stream_free(text);
    if (result) *result = res;
    return st;
}
