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
 *    it.
 *
 * With speculative decoding (params->spec) a step evaluates the pending
 * token together with up to k drafted ones (spec.c) in one forward pass
 * with every position's logits, accepts drafts by the rules in tela.h
 * (greedy: the sampler's pick equals the draft; sampling: rejection
 * sampling against the sampler's final distribution), emits the accepted
 * tokens and one more (the correction, or a bonus draw after the last
 * draft), and truncates the session to the tokens it keeps. */
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec.h"
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

/* What one call of tela_generate carries from token to token. */
typedef struct gen_ctx {
    tela_session *s;
    const tela_generate_params *params;
    tela_generate_result *res;
    tela_text_stream *text;
    int32_t *out_tokens;
    size_t cap;
    bool profiling;
} gen_ctx;

/* Hands on the token sampled for position pos: counts and stores it,
 * streams its text, and says whether generation ends with it (*final). */
static tela_status emit(gen_ctx *g, int32_t tok, int32_t pos, bool *final) {
    const tela_model *m = g->s->model;
    const tela_generate_params *params = g->params;
    tela_generate_result *res = g->res;
    if (g->out_tokens && (size_t)res->n_generated < g->cap) g->out_tokens[res->n_generated] = tok;
    res->n_generated++;
    bool is_eog = !params->ignore_eos && (m->vocab ? tela_vocab_is_eog(m->vocab, tok) : tok == m->info.eos_token);
    *final = true;
    if (is_eog) res->stop_reason = TELA_STOP_EOS;
    else if (params->max_tokens > 0 && res->n_generated >= params->max_tokens) res->stop_reason = TELA_STOP_MAX_TOKENS;
    else if (pos >= g->s->n_ctx) res->stop_reason = TELA_STOP_CONTEXT;
    else *final = false;

    const char *piece;
    size_t piece_len;
    bool stopped;
    const double td = g->profiling ? now_seconds() : 0.0;
    const bool ok = tela_text_stream_push(g->text, tok, is_eog, *final, &piece, &piece_len, &stopped);
    if (g->profiling && m->vocab) tela_exec_profile_host(g->s->ex, "detokenization", now_seconds() - td);
    if (!ok) return tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
    if (stopped) {
        *final = true;
        res->stop_reason = TELA_STOP_STRING;
    }
    if (params->on_token && params->on_token(params->user, tok, piece, piece_len) && !*final) {
        *final = true;
        res->stop_reason = TELA_STOP_CALLBACK;
    }
    return TELA_OK;
}

/* Speculative decoding's buffers for one call. */
typedef struct spec_bufs {
    tela_spec *sp;
    float *rows;            /* [(k + 1) * n_vocab]: the verification's logits */
    tela_spec_verifier ver; /* the acceptance rule's scratch */
    int32_t drafts[TELA_SPEC_MAX_DRAFT + 1];
} spec_bufs;

static void spec_bufs_free(spec_bufs *b) {
    tela_spec_end(b->sp);
    free(b->rows);
    tela_spec_verifier_free(&b->ver);
}

/* One verification step: *tok (sampled, not evaluated) and n_draft drafts
 * through the model at once, then the accepted drafts and one more token
 * emitted; the session keeps the tokens before the last emitted one, which
 * becomes *tok. */
static tela_status spec_step(gen_ctx *g, spec_bufs *b, int32_t *tok, int32_t n_draft, bool *final) {
    tela_session *s = g->s;
    const tela_sampler_params *sp = &g->params->sampler;
    const int32_t V = s->model->info.n_vocab, P = s->n_past;
    int32_t verify[TELA_SPEC_MAX_DRAFT + 1]; /* the pending token, then the drafts */
    verify[0] = *tok;
    memcpy(verify + 1, b->drafts, (size_t)n_draft * sizeof *verify);
    /* the rollback: the state after each token kept by the pass (Qwen3.5 on
     * the CPU), else a mark of the recurrent state (reloaded, the kept
     * tokens evaluated again), else nothing (KV truncation).
     * TELA_SPEC_REPLAY=1 takes the mark where states could be kept (to
     * compare the two, and to test the mark's route on the CPU). */
    const char *replay = getenv("TELA_SPEC_REPLAY");
    /* plain greedy on a device: every position's pick is made there and
     * only the token ids come back (the same picks as the host's argmax of
     * the rows: ties to the lower index) */
    const bool device_picks = tela_sampler_plain_greedy(sp) && !tela_exec_host_visible(s->ex);
    int32_t picks[TELA_SPEC_MAX_DRAFT + 1];
    float *rows = device_picks ? NULL : b->rows;
    if (tela_session_keeps_states(s) && !(replay && replay[0] == '1')) {
        TELA_TRY(tela_session_eval_keep(s, verify, n_draft + 1, rows, picks));
    } else {
        if (tela_session_has_recurrent(s)) TELA_TRY(tela_session_mark(s));
        if (device_picks) TELA_TRY(tela_session_eval_picks(s, verify, n_draft + 1, picks));
        else TELA_TRY(tela_session_eval_internal(s, verify, n_draft + 1, rows, 1, false));
    }
    g->res->n_spec_steps++;
    g->res->n_drafted += n_draft;
    int32_t m = 0; /* tokens emitted (and so positions P + 1 .. P + m filled) */
    tela_status st = TELA_OK;
    *final = false;
    for (int32_t i = 0; i <= n_draft && !*final; i++) {
        float *row = b->rows + (size_t)i * V;
        const uint64_t step = (uint64_t)P + 1 + (uint64_t)i;
        int32_t next;
        bool accepted = false;
        if (device_picks) {
            next = picks[i];
            accepted = i < n_draft && next == b->drafts[i];
        } else if (i < n_draft) {
            size_t nq = 0;
            const tela_token_prob *qd = tela_spec_draft_dist(b->sp, i, &nq);
            st = tela_spec_accept(&b->ver, sp, row, s->tokens, (size_t)(P + 1 + i), step, b->drafts[i], qd, nq,
                                  &accepted, &next);
        } else { /* every draft accepted: a token of the model's own after them */
            st = tela_sample(sp, row, V, s->tokens, (size_t)(P + 1 + i), step, &next);
        }
        if (st != TELA_OK) break;
        if (accepted) g->res->n_accepted++;
        m++;
        *tok = next;
        st = emit(g, next, P + 1 + i, final);
        if (st != TELA_OK || !accepted) break;
    }
    g->res->n_spec_tokens += m;
    s->has_logits = false;
    if (st != TELA_OK) return st;
    /* keep the pending token and the accepted drafts before the last emitted token */
    return tela_session_truncate(s, P + m);
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
    const bool speculate = params->spec && params->spec->method != TELA_SPEC_NONE;
    if (speculate && params->logits_hook)
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "tela_generate: speculative decoding does not take a logits hook (it would see the "
                           "logits of drafts that are then rejected): turn one of them off");
    spec_bufs sb;
    memset(&sb, 0, sizeof sb);
    if (speculate) {
        TELA_TRY(tela_spec_begin(params->spec, s, &params->sampler, &sb.sp));
        const int32_t k = tela_spec_draft_max(sb.sp);
        sb.rows = malloc((size_t)(k + 1) * (size_t)n_vocab * sizeof *sb.rows);
        if (!sb.rows || tela_spec_verifier_init(&sb.ver, n_vocab) != TELA_OK) {
            spec_bufs_free(&sb);
            return tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory for speculative decoding");
        }
    }

    /* Plain greedy decoding on a device: the token is picked where the
     * logits are, and only its id comes back (the same pick as the
     * sampler's: the largest logit, the lowest id among equals). */
    const tela_sampler_params *sp = &params->sampler;
    const bool device_greedy =
        !speculate && !tela_exec_host_visible(s->ex) && tela_sampler_plain_greedy(sp) && !params->logits_hook;
    bool have_next = false;
    const bool profiling = tela_exec_profiling(s->ex);
    int32_t next = 0;
    tela_status st = TELA_OK;
    double t0 = now_seconds();
    if (n_prompt > 0 && device_greedy) {
        st = tela_session_eval_greedy(s, prompt, n_prompt, &next);
        have_next = true;
    } else if (n_prompt > 0) {
        st = tela_session_eval_internal(s, prompt, n_prompt, NULL, 0, true);
    } else if (!s->has_logits) {
        st = tela_errorf(TELA_ERR_ARG, "tela_generate: no prompt tokens, and the session holds no logits to sample from");
    }
    tela_text_stream *text = NULL;
    if (st == TELA_OK && !(text = tela_text_stream_create(m->vocab, have_stops ? params->stop_strings : NULL)))
        st = tela_errorf(TELA_ERR_NOMEM, "tela_generate: out of memory");
    if (st != TELA_OK) {
        spec_bufs_free(&sb);
        return st;
    }
    res.n_prompt = n_prompt;
    double t1 = now_seconds();
    res.prompt_seconds = t1 - t0;

    gen_ctx g = {s, params, &res, text, out_tokens, cap, profiling};
    res.stop_reason = TELA_STOP_MAX_TOKENS;
    int32_t tok = next;
    bool final = false;
    if (!have_next) {
        /* the first token, from the logits after the prompt */
        if (params->logits_hook) params->logits_hook(params->hook_user, s->logits, n_vocab, (uint64_t)s->n_past);
        s->has_logits = false; /* the sampler edits them in place */
        const double ts = profiling ? now_seconds() : 0.0;
        st = tela_sample(sp, s->logits, n_vocab, s->tokens, (size_t)s->n_past, (uint64_t)s->n_past, &tok);
        if (profiling) tela_exec_profile_host(s->ex, "sampling (host)", now_seconds() - ts);
    }
    if (st == TELA_OK) st = emit(&g, tok, s->n_past, &final);
    while (st == TELA_OK && !final) {
        /* tok is sampled for position n_past, not evaluated */
        int32_t n_draft = 0;
        if (speculate) {
            int32_t k = tela_spec_draft_max(sb.sp);
            if (k > s->n_ctx - s->n_past - 1) k = s->n_ctx - s->n_past - 1;
            if (params->max_tokens > 0 && k > params->max_tokens - res.n_generated - 1)
                k = params->max_tokens - res.n_generated - 1;
            if (k > 0) {
                s->tokens[s->n_past] = tok; /* the context the drafter continues (evaluation writes it there too) */
                st = tela_spec_propose(sb.sp, s->tokens, s->n_past + 1, k, sb.drafts, &n_draft);
                if (st != TELA_OK) break;
            }
        }
        if (n_draft > 0) {
            st = spec_step(&g, &sb, &tok, n_draft, &final);
            continue;
        }
        if (device_greedy) {
            st = tela_session_eval_greedy(s, &tok, 1, &next);
            if (st != TELA_OK) break;
            tok = next;
        } else {
            st = tela_session_eval_internal(s, &tok, 1, NULL, 0, true);
            if (st != TELA_OK) break;
            const uint64_t step = (uint64_t)s->n_past;
            if (params->logits_hook) params->logits_hook(params->hook_user, s->logits, n_vocab, step);
            s->has_logits = false; /* the sampler edits them in place */
            const double ts = profiling ? now_seconds() : 0.0;
            st = tela_sample(sp, s->logits, n_vocab, s->tokens, (size_t)s->n_past, step, &tok);
            if (profiling) tela_exec_profile_host(s->ex, "sampling (host)", now_seconds() - ts);
            if (st != TELA_OK) break;
        }
        st = emit(&g, tok, s->n_past, &final);
    }
    res.generate_seconds = now_seconds() - t1;
    tela_text_stream_free(text);
    spec_bufs_free(&sb);
    if (result) *result = res;
    return st;
}
