/* spec.c: the drafters of speculative decoding: prompt lookup (the
 * continuation of the latest earlier occurrence of the context's last
 * n-gram), a draft model on its own session, kept in step with the
 * target's context (rolled back with tela_session_truncate where they
 * differ), and the target's own MTP block (tela_session_mtp_draft); the
 * check that a draft model shares the target's vocabulary; the acceptance
 * rule of a verification pass (tela_spec_accept). */
#include "runtime/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define SPEC_DEFAULT_DRAFT 3
#define SPEC_DEFAULT_NGRAM_MIN 2
#define SPEC_DEFAULT_NGRAM_MAX 4
#define SPEC_MAX_NGRAM 64

struct tela_spec {
    tela_spec_params p;
    tela_session *target;
    tela_sampler_params sampler;
    bool sampling;              /* temperature > 0: drafts are drawn, with their distributions kept */
    int32_t n_vocab;
    float *row;                 /* [n_vocab] a copy of the draft's logits, for the sampler */
    tela_token_prob *dist[TELA_SPEC_MAX_DRAFT]; /* DRAFT with sampling: [n_vocab] each */
    size_t n_dist[TELA_SPEC_MAX_DRAFT];
    int32_t n_last;             /* drafts of the last proposal */
};

tela_spec_params tela_spec_default_params(void) {
    tela_spec_params p;
    memset(&p, 0, sizeof p);
    p.method = TELA_SPEC_NONE;
    p.draft_max = SPEC_DEFAULT_DRAFT;
    p.ngram_min = SPEC_DEFAULT_NGRAM_MIN;
    p.ngram_max = SPEC_DEFAULT_NGRAM_MAX;
    return p;
}

tela_status tela_spec_check_draft(const tela_model *target, const tela_model *draft) {
    if (!target || !draft) return tela_errorf(TELA_ERR_ARG, "tela_spec_check_draft: NULL model");
    const char *dn = draft->path ? draft->path : "the draft model";
    if (target->info.n_vocab != draft->info.n_vocab)
        return tela_errorf(TELA_ERR_ARG,
                           "draft model %s: it has %d tokens, the target model %d: speculative decoding needs the "
                           "same vocabulary",
                           dn, draft->info.n_vocab, target->info.n_vocab);
    const tela_vocab *tv = target->vocab, *dv = draft->vocab;
    if (!tv && !dv) return TELA_OK; /* token ids only: the counts are all there is to compare */
    if (!tv || !dv)
        return tela_errorf(TELA_ERR_ARG,
                           "draft model %s: %s has a tokenizer and %s has none, so their vocabularies cannot be "
                           "checked to match",
                           dn, tv ? "the target" : "the draft", tv ? "the draft" : "the target");
    const int32_t n = tela_vocab_n_tokens(tv);
    if (tela_vocab_n_tokens(dv) != n)
        return tela_errorf(TELA_ERR_ARG, "draft model %s: its tokenizer has %d tokens, the target's %d", dn,
                           tela_vocab_n_tokens(dv), n);
    for (int32_t t = 0; t < n; t++) {
        size_t la = 0, lb = 0;
        const char *a = tela_vocab_token_text(tv, t, &la), *b = tela_vocab_token_text(dv, t, &lb);
        if (la != lb || (la && memcmp(a, b, la)) || tela_vocab_token_type(tv, t) != tela_vocab_token_type(dv, t))
            return tela_errorf(TELA_ERR_ARG,
                               "draft model %s: token %d differs from the target's ('%.*s' there, '%.*s' in the "
                               "target): speculative decoding needs the same vocabulary",
                               dn, t, (int)(lb > 64 ? 64 : lb), b ? b : "", (int)(la > 64 ? 64 : la), a ? a : "");
    }
    if (tela_vocab_bos(tv) != tela_vocab_bos(dv) || tela_vocab_eos(tv) != tela_vocab_eos(dv))
        return tela_errorf(TELA_ERR_ARG, "draft model %s: its BOS/EOS tokens (%d/%d) differ from the target's (%d/%d)",
                           dn, tela_vocab_bos(dv), tela_vocab_eos(dv), tela_vocab_bos(tv), tela_vocab_eos(tv));
    return TELA_OK;
}

tela_status tela_spec_params_check(tela_spec_params *q) {
    if (q->draft_max == 0) q->draft_max = SPEC_DEFAULT_DRAFT;
    if (q->draft_max < 1 || q->draft_max > TELA_SPEC_MAX_DRAFT)
        return tela_errorf(TELA_ERR_ARG, "speculative decoding: draft_max %d is out of range (1..%d)", q->draft_max,
                           TELA_SPEC_MAX_DRAFT);
    if (q->method != TELA_SPEC_NGRAM) return TELA_OK;
    if (q->ngram_min == 0) q->ngram_min = SPEC_DEFAULT_NGRAM_MIN;
    if (q->ngram_max == 0) q->ngram_max = q->ngram_min > SPEC_DEFAULT_NGRAM_MAX ? q->ngram_min : SPEC_DEFAULT_NGRAM_MAX;
    if (q->ngram_min < 1 || q->ngram_max < q->ngram_min || q->ngram_max > SPEC_MAX_NGRAM)
        return tela_errorf(TELA_ERR_ARG,
                           "speculative decoding: n-gram sizes %d..%d are out of range (1 <= min <= max <= %d)",
                           q->ngram_min, q->ngram_max, SPEC_MAX_NGRAM);
    return TELA_OK;
}

void tela_spec_end(tela_spec *sp) {
    if (!sp) return;
    free(sp->row);
    for (int i = 0; i < TELA_SPEC_MAX_DRAFT; i++) free(sp->dist[i]);
    free(sp);
}

tela_status tela_spec_begin(const tela_spec_params *p, tela_session *target, const tela_sampler_params *sampler,
                            tela_spec **out) {
    *out = NULL;
    tela_spec_params q = *p;
    if (q.method != TELA_SPEC_NGRAM && q.method != TELA_SPEC_DRAFT && q.method != TELA_SPEC_MTP)
        return tela_errorf(TELA_ERR_ARG, "speculative decoding: unknown method %d", (int)q.method);
    if (q.method == TELA_SPEC_MTP && tela_session_mtp_layers(target) == 0)
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "speculative decoding: MTP drafting needs a model with a multi-token-prediction block, "
                           "loaded (load_mtp): %s has %s",
                           target->model->path ? target->model->path : "the model",
                           target->model->arch->mtp_layers ? "none loaded" : "no MTP support in its architecture");
    TELA_TRY(tela_spec_params_check(&q));
    if (q.method == TELA_SPEC_DRAFT) {
        if (!q.draft) return tela_errorf(TELA_ERR_ARG, "speculative decoding: the draft method needs a draft session");
        if (q.draft == target)
            return tela_errorf(TELA_ERR_ARG, "speculative decoding: the draft session is the target session itself");
        TELA_TRY(tela_spec_check_draft(target->model, q.draft->model));
        if (q.draft->n_ctx < target->n_ctx)
            return tela_errorf(TELA_ERR_ARG,
                               "speculative decoding: the draft session's context (%d) is shorter than the target's "
                               "(%d)",
                               q.draft->n_ctx, target->n_ctx);
    }
    tela_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return tela_errorf(TELA_ERR_NOMEM, "speculative decoding: out of memory");
    sp->p = q;
    sp->target = target;
    sp->sampler = *sampler;
    sp->sampling = sampler->temperature > 0.0f;
    sp->n_vocab = target->model->info.n_vocab;
    if (q.method == TELA_SPEC_DRAFT || q.method == TELA_SPEC_MTP) {
        sp->row = malloc((size_t)sp->n_vocab * sizeof *sp->row);
        bool ok = sp->row != NULL;
        for (int i = 0; ok && sp->sampling && i < q.draft_max; i++)
            ok = (sp->dist[i] = malloc((size_t)sp->n_vocab * sizeof *sp->dist[i])) != NULL;
        if (!ok) {
            tela_spec_end(sp);
            return tela_errorf(TELA_ERR_NOMEM, "speculative decoding: out of memory for the draft's distributions");
        }
    }
    *out = sp;
    return TELA_OK;
}

int32_t tela_spec_draft_max(const tela_spec *sp) { return sp->p.draft_max; }

const tela_token_prob *tela_spec_draft_dist(const tela_spec *sp, int32_t i, size_t *n) {
    if (!sp->sampling || sp->p.method == TELA_SPEC_NGRAM || i < 0 || i >= sp->n_last) {
        *n = 0;
        return NULL;
    }
    *n = sp->n_dist[i];
    return sp->dist[i];
}

int32_t tela_spec_ngram(const int32_t *ctx, int32_t n, int32_t k, int32_t ngram_min, int32_t ngram_max,
                        int32_t *drafts) {
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g >= n) continue;
        const int32_t *pat = ctx + (n - g);
        for (int32_t p = n - g - 1; p >= 0; p--) {
            if (ctx[p] != pat[0] || memcmp(ctx + p, pat, (size_t)g * sizeof *ctx) != 0) continue;
            int32_t avail = n - (p + g), m = avail < k ? avail : k;
            memcpy(drafts, ctx + p + g, (size_t)m * sizeof *drafts);
            return m;
        }
    }
    return 0;
}

int32_t tela_spec_ngram_in(const int32_t *ctx, int32_t n, const int32_t *corpus, int32_t n_corpus, int32_t from,
                           int32_t k, int32_t ngram_min, int32_t ngram_max, int32_t *drafts, int32_t *end) {
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g > n || g >= n_corpus) continue;
        const int32_t *pat = ctx + (n - g);
        int32_t hit = -1;
        for (int32_t p = from > 0 ? from : 0; p + g < n_corpus && hit < 0; p++)
            if (corpus[p] == pat[0] && !memcmp(corpus + p, pat, (size_t)g * sizeof *pat)) hit = p;
        for (int32_t p = (from < n_corpus - g ? from : n_corpus - g) - 1; p >= 0 && hit < 0; p--)
            if (corpus[p] == pat[0] && !memcmp(corpus + p, pat, (size_t)g * sizeof *pat)) hit = p;
        if (hit < 0) continue;
        const int32_t avail = n_corpus - (hit + g), m = avail < k ? avail : k;
        memcpy(drafts, corpus + hit + g, (size_t)m * sizeof *drafts);
        *end = hit + g + m;
        return m;
    }
    return 0;
}

/* Brings the draft session to hold ctx[0..n) with the logits after it:
 * keeps the longest common prefix it already holds (rolled back past it),
 * evaluates the rest. */
static tela_status draft_sync(tela_session *d, const int32_t *ctx, int32_t n) {
    int32_t common = 0;
    while (common < d->n_past && common < n && d->tokens[common] == ctx[common]) common++;
    if (common == n && d->n_past == n && d->has_logits) return TELA_OK;
    const int32_t keep = common < n ? common : n - 1; /* the last token again, for its logits */
    TELA_TRY(tela_session_truncate(d, keep));
    return tela_session_eval_internal(d, ctx + keep, n - keep, NULL, 0, true);
}

/* The draft model's proposal: k tokens, each picked from its logits as the
 * target's sampler would (greedy), or drawn from its final distribution
 * with the draft stream (sampling), then evaluated for the next. */
static tela_status propose_draft(tela_spec *sp, const int32_t *ctx, int32_t n, int32_t k, int32_t *drafts,
                                 int32_t *n_draft) {
    tela_session *d = sp->p.draft;
    TELA_TRY(draft_sync(d, ctx, n));
    TELA_TRY(tela_session_mark(d)); /* the rollback point of the next sync */
    const int32_t V = sp->n_vocab;
    for (int32_t i = 0; i < k; i++) {
        memcpy(sp->row, d->logits, (size_t)V * sizeof *sp->row);
        const uint64_t step = (uint64_t)n + (uint64_t)i;
        int32_t tok;
        if (sp->sampling) {
            TELA_TRY(tela_sampler_dist(&sp->sampler, sp->row, V, d->tokens, (size_t)d->n_past, sp->dist[i],
                                       &sp->n_dist[i]));
            tok = tela_sampler_draw(sp->dist[i], sp->n_dist[i],
                                    tela_sampler_uniform(sp->sampler.seed, step, TELA_SPEC_STREAM_DRAFT));
            if (tok < 0) return tela_errorf(TELA_ERR_INTERNAL, "speculative decoding: an empty draft distribution");
        } else {
            TELA_TRY(tela_sample(&sp->sampler, sp->row, V, d->tokens, (size_t)d->n_past, step, &tok));
        }
        drafts[i] = tok;
        *n_draft = i + 1;
        sp->n_last = i + 1;
        if (i + 1 < k) TELA_TRY(tela_session_eval_internal(d, &tok, 1, NULL, 0, true));
    }
    return TELA_OK;
}

/* The MTP block's proposal: k tokens, the first from the last position's
 * hidden state and the pending token ctx[n-1], each after from the block's
 * own output and the token before; picked or drawn as propose_draft does
 * (penalties see ctx, not the drafts before). */
static tela_status propose_mtp(tela_spec *sp, const int32_t *ctx, int32_t n, int32_t k, int32_t *drafts,
                               int32_t *n_draft) {
    tela_session *s = sp->target;
    if (s->n_past != n - 1)
        return tela_errorf(TELA_ERR_INTERNAL, "MTP drafting: the context (%d tokens) is not the session's (%d) and one",
                           n, s->n_past);
    if (s->n_past < 1) return TELA_OK; /* no hidden state yet */
    const int32_t V = sp->n_vocab;
    const bool device_pick = tela_sampler_plain_greedy(&sp->sampler);
    for (int32_t i = 0; i < k; i++) {
        const int32_t prev = i == 0 ? ctx[n - 1] : drafts[i - 1];
        const uint64_t step = (uint64_t)n + (uint64_t)i;
        int32_t tok;
        if (device_pick) {
            TELA_TRY(tela_session_mtp_draft(s, prev, s->n_past - 1 + i, i > 0, NULL, &tok));
        } else {
            TELA_TRY(tela_session_mtp_draft(s, prev, s->n_past - 1 + i, i > 0, sp->row, NULL));
            if (sp->sampling) {
                TELA_TRY(tela_sampler_dist(&sp->sampler, sp->row, V, ctx, (size_t)n, sp->dist[i], &sp->n_dist[i]));
                tok = tela_sampler_draw(sp->dist[i], sp->n_dist[i],
                                        tela_sampler_uniform(sp->sampler.seed, step, TELA_SPEC_STREAM_DRAFT));
                if (tok < 0) return tela_errorf(TELA_ERR_INTERNAL, "speculative decoding: an empty draft distribution");
            } else {
                TELA_TRY(tela_sample(&sp->sampler, sp->row, V, ctx, (size_t)n, step, &tok));
            }
        }
        drafts[i] = tok;
        *n_draft = i + 1;
        sp->n_last = i + 1;
    }
    return TELA_OK;
}

tela_status tela_spec_propose(tela_spec *sp, const int32_t *ctx, int32_t n, int32_t k, int32_t *drafts,
                              int32_t *n_draft) {
    *n_draft = 0;
    sp->n_last = 0;
    if (k > sp->p.draft_max) k = sp->p.draft_max;
    if (k <= 0 || n <= 0) return TELA_OK;
    if (sp->p.method == TELA_SPEC_NGRAM) {
        *n_draft = tela_spec_ngram(ctx, n, k, sp->p.ngram_min, sp->p.ngram_max, drafts);
        sp->n_last = *n_draft;
        return TELA_OK;
    }
    if (sp->p.method == TELA_SPEC_MTP) return propose_mtp(sp, ctx, n, k, drafts, n_draft);
    return propose_draft(sp, ctx, n, k, drafts, n_draft);
}

tela_status tela_spec_verifier_init(tela_spec_verifier *v, int32_t n_vocab) {
    v->n_vocab = n_vocab;
    v->dist = malloc((size_t)n_vocab * sizeof *v->dist);
    v->q = calloc((size_t)n_vocab, sizeof *v->q);
    if (v->dist && v->q) return TELA_OK;
    tela_spec_verifier_free(v);
    return tela_errorf(TELA_ERR_NOMEM, "speculative decoding: out of memory for the acceptance rule");
}

void tela_spec_verifier_free(tela_spec_verifier *v) {
    free(v->dist);
    free(v->q);
    v->dist = NULL;
    v->q = NULL;
}

tela_status tela_spec_accept(tela_spec_verifier *v, const tela_sampler_params *sp, float *row, const int32_t *history,
                             size_t n_history, uint64_t step, int32_t x, const tela_token_prob *qd, size_t nq,
                             bool *accepted, int32_t *out) {
    const int32_t V = v->n_vocab;
    if (sp->temperature <= 0.0f) {
        int32_t pick;
        TELA_TRY(tela_sample(sp, row, V, history, n_history, step, &pick));
        *accepted = pick == x;
        *out = pick;
        return TELA_OK;
    }
    size_t np = 0;
    TELA_TRY(tela_sampler_dist(sp, row, V, history, n_history, v->dist, &np));
    double px = 0.0;
    for (size_t i = 0; i < np; i++)
        if (v->dist[i].id == x) px = v->dist[i].p;
    double qx = 1.0;
    if (qd) {
        for (size_t i = 0; i < nq; i++) v->q[qd[i].id] = qd[i].p;
        qx = v->q[x];
    }
    const double r = tela_sampler_uniform(sp->seed, step, TELA_SPEC_STREAM_ACCEPT);
    *accepted = qx > 0.0 && r * qx < px;
    *out = x;
    if (!*accepted) {
        /* the residual: p - q where positive (q is zero off its support) */
        for (size_t i = 0; i < np; i++) {
            const double qi = qd ? v->q[v->dist[i].id] : (v->dist[i].id == x ? 1.0 : 0.0);
            v->dist[i].p = v->dist[i].p > qi ? v->dist[i].p - qi : 0.0;
        }
        const double u = tela_sampler_uniform(sp->seed, step, TELA_SPEC_STREAM_RESIDUAL);
        *out = tela_sampler_draw(v->dist, np, u);
        if (*out < 0) { /* nothing left: p <= q everywhere, so p == q up to rounding and x stands */
            *accepted = true;
            *out = x;
        }
    }
    if (qd)
        for (size_t i = 0; i < nq; i++) v->q[qd[i].id] = 0.0;
    if (*out < 0) return tela_errorf(TELA_ERR_INTERNAL, "speculative decoding: an empty distribution");
    return TELA_OK;
}
