/* session.c: sessions (one sequence's state on a shared model: the
 * architecture's KV/recurrent state, the tokens so far, a thread pool),
 * evaluation with the context check, snapshots, and rolling back (a mark
 * of the recurrent state, states kept per token, truncation). */
#include "runtime/session.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define TELA_DEFAULT_CTX 4096
#define TELA_MAX_CTX (1 << 24)

tela_session_params tela_session_default_params(void) {
    tela_session_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* The KV precision: f16 on a GPU unless the exact mode or the caller asks
 * for f32; f32 on the CPU unless the caller asks for f16 or q8_0 (attention
 * computes in f32 either way; f16 halves the bytes a long context reads,
 * q8_0 nearly quarters them). */
tela_status tela_runtime_kv_dtype(const tela_model *model, tela_kv_type type, tela_kv_dtype *out) {
    bool cpu = tela_backend_get_kind(model->be) == TELA_BACKEND_CPU;
    switch (type) {
    case TELA_KV_DEFAULT: *out = cpu || tela_ops_exact_matmul() ? TELA_KV_DTYPE_F32 : TELA_KV_DTYPE_F16; return TELA_OK;
    case TELA_KV_F32: *out = TELA_KV_DTYPE_F32; return TELA_OK;
    case TELA_KV_F16:
        *out = TELA_KV_DTYPE_F16;
        return TELA_OK;
    case TELA_KV_Q8_0:
        if (!cpu)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "session: a q8_0 KV cache runs on the CPU only for now; use --kv-type f16 on the GPU");
        *out = TELA_KV_DTYPE_Q8_0;
        return TELA_OK;
    }
    return tela_errorf(TELA_ERR_ARG, "session: unknown KV cache type %d", (int)type);
}

int32_t tela_runtime_ctx(const tela_model *model, int32_t n_ctx) {
    if (n_ctx == 0) {
        n_ctx = model->info.n_ctx_train;
        if (n_ctx <= 0 || n_ctx > TELA_DEFAULT_CTX) n_ctx = TELA_DEFAULT_CTX;
    }
    return n_ctx;
}

static tela_status state_memory(const tela_model *model, const tela_session_params *p, tela_state_params *sp,
                                uint64_t *bytes) {
    if (p->n_ctx < 0 || p->n_ctx > TELA_MAX_CTX)
        return tela_errorf(TELA_ERR_ARG, "session: context length %d is out of range (1..%d, or 0 for the default)",
                           p->n_ctx, TELA_MAX_CTX);
    sp->n_ctx = tela_runtime_ctx(model, p->n_ctx);
    TELA_TRY(tela_runtime_kv_dtype(model, p->kv_type, &sp->kv_dtype));
    *bytes = model->arch->state_bytes(model, sp, tela_backend_preferred_batch(model->be));
    return TELA_OK;
}

tela_status tela_session_memory(tela_model *model, const tela_session_params *params, uint64_t *bytes) {
    if (!model || !bytes) return tela_errorf(TELA_ERR_ARG, "tela_session_memory: NULL argument");
    tela_session_params p = params ? *params : tela_session_default_params();
    tela_state_params sp = {0};
    return state_memory(model, &p, &sp, bytes);
}

tela_status tela_runtime_check_memory(const tela_model *model, uint64_t mem_budget, uint64_t need, const char *who,
                                      int32_t n_ctx, tela_kv_dtype kv) {
    uint64_t free_b = 0, total_b = 0;
    TELA_TRY(tela_model_device_memory(model, &free_b, &total_b)); /* (the least free of the ranks' devices) */
    const bool cpu = tela_backend_get_kind(model->be) == TELA_BACKEND_CPU;
    const uint64_t budget = mem_budget ? mem_budget : (uint64_t)free_b;
    if (need <= budget) return TELA_OK;
    const double mib = 1024.0 * 1024.0;
    return tela_errorf(TELA_ERR_NOMEM,
                       "%s: a context of %d tokens needs %.1f MiB for its KV cache, state and work buffers, but "
                       "%s %.1f MiB%s: lower the context (-c)%s%s",
                       who, n_ctx, (double)need / mib, mem_budget ? "the memory budget is" : "only",
                       (double)budget / mib,
                       mem_budget ? "" : (cpu ? " are available (MemAvailable)" : " are free on the GPU"),
                       !cpu && kv == TELA_KV_DTYPE_F32 ? ", use an f16 KV cache (--kv-type f16)" : "",
                       mem_budget ? " or raise --mem-budget" : "");
}

tela_status tela_session_create(tela_model *model, const tela_session_params *params, tela_session **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_session_create: out is NULL");
    *out = NULL;
    if (!model) return tela_errorf(TELA_ERR_ARG, "tela_session_create: model is NULL");
    tela_session_params p = params ? *params : tela_session_default_params();
    tela_state_params sp = {0};
    uint64_t need = 0;
    TELA_TRY(state_memory(model, &p, &sp, &need));
    TELA_TRY(tela_runtime_check_memory(model, p.mem_budget, need, "session", sp.n_ctx, sp.kv_dtype));
    const int32_t n_ctx = sp.n_ctx;
    int n_threads = p.n_threads > 0 ? p.n_threads : model->n_threads;
    tela_session *s = calloc(1, sizeof *s);
    if (!s) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    s->model = model;
    s->n_ctx = n_ctx;
    s->mark_pos = -1;
    s->keep_pos = -1;
    s->tokens = calloc((size_t)n_ctx, sizeof *s->tokens);
    /* where a GPU's downloads land directly (tela_backend_host_alloc) */
    s->logits = tela_backend_host_alloc(model->be, (size_t)model->info.n_vocab * sizeof *s->logits);
    if (!s->tokens || !s->logits) {
        const size_t lb = (size_t)model->info.n_vocab * sizeof *s->logits;
        tela_session_free(s);
        return tela_errorf(TELA_ERR_NOMEM, "session: out of host memory (%zu bytes for the logits, %zu for the tokens)",
                           lb, (size_t)n_ctx * sizeof(int32_t));
    }
    tela_status st = tela_exec_create(model->be, n_threads, &s->ex);
    if (st == TELA_OK) st = model->arch->state_create(model, s->ex, &sp, &s->state);
    if (st != TELA_OK) {
        tela_session_free(s);
        return st;
    }
    *out = s;
    return TELA_OK;
}

void tela_session_free(tela_session *session) {
    if (!session) return;
    if (session->state) session->model->arch->state_free(session->state);
    tela_exec_free(session->ex);
    free(session->tokens);
    tela_backend_host_free(session->model->be, session->logits);
    free(session->mark_state);
    free(session);
}

int32_t tela_session_n_ctx(const tela_session *session) { return session ? session->n_ctx : 0; }

int32_t tela_session_n_past(const tela_session *session) { return session ? session->n_past : 0; }

void tela_session_reset(tela_session *session) {
    if (!session) return;
    session->model->arch->state_reset(session->model, session->state);
    session->n_past = 0;
    session->has_logits = false;
    session->mark_pos = -1;
    session->keep_pos = -1;
}

/* The checks of an evaluation: ids in the vocabulary, room in the context. */
static tela_status check_eval(const tela_session *s, const int32_t *tokens, int32_t n) {
    if (!s) return tela_errorf(TELA_ERR_ARG, "tela_session_eval: session is NULL");
    if (n < 0 || (n > 0 && !tokens)) return tela_errorf(TELA_ERR_ARG, "tela_session_eval: bad token array (n = %d)", n);
    if (n == 0) return TELA_OK;
    const int32_t n_vocab = s->model->info.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return tela_errorf(TELA_ERR_ARG, "token %d (at index %d) is not in the vocabulary of %d tokens", tokens[i],
                               i, n_vocab);
    if (n > s->n_ctx - s->n_past)
        return tela_errorf(TELA_ERR_CONTEXT,
                           "%d tokens do not fit in the context: %d of %d positions are used, %d are left", n,
                           s->n_past, s->n_ctx, s->n_ctx - s->n_past);
    return TELA_OK;
}

tela_status tela_session_eval_internal(tela_session *s, const int32_t *tokens, int32_t n, float *logits,
                                       int all_logits, bool store_last) {
    TELA_TRY(check_eval(s, tokens, n));
    if (n == 0) return TELA_OK;
    const int32_t n_vocab = s->model->info.n_vocab;
    /* the last position's logits land in the session's buffer (on a GPU
     * straight from the device), and from there in the caller's */
    float *dst = logits && all_logits ? logits : NULL;
    if (!dst && (logits || store_last)) {
        dst = s->logits;
        all_logits = 0;
    }
    s->has_logits = false;
    s->keep_pos = -1;
    const tela_forward_out out = {dst, all_logits, NULL, NULL, NULL, 0};
    TELA_TRY(s->model->arch->forward(s->model, s->state, tokens, n, s->n_past, &out));
    memmove(s->tokens + s->n_past, tokens, (size_t)n * sizeof *tokens);
    s->n_past += n;
    if (dst) {
        const float *last = all_logits ? dst + (size_t)(n - 1) * n_vocab : dst;
        if (last != s->logits) memcpy(s->logits, last, (size_t)n_vocab * sizeof(float));
        if (logits && !all_logits) memcpy(logits, s->logits, (size_t)n_vocab * sizeof(float));
        s->has_logits = true;
    }
    return TELA_OK;
}

/* An evaluation (tokens checked) that leaves no host logits: the forward
 * pass with out, then the tokens recorded. */
static tela_status eval_out(tela_session *s, const int32_t *tokens, int32_t n, const tela_forward_out *out) {
    s->has_logits = false;
    s->keep_pos = -1;
    TELA_TRY(s->model->arch->forward(s->model, s->state, tokens, n, s->n_past, out));
    memmove(s->tokens + s->n_past, tokens, (size_t)n * sizeof *tokens);
    s->n_past += n;
    return TELA_OK;
}

tela_status tela_session_eval_greedy(tela_session *s, const int32_t *tokens, int32_t n, int32_t *pick) {
    TELA_TRY(check_eval(s, tokens, n));
    if (n == 0) return tela_errorf(TELA_ERR_ARG, "tela_session_eval_greedy: no tokens");
    const tela_forward_out out = {NULL, 0, pick, NULL, NULL, 0};
    return eval_out(s, tokens, n, &out);
}

tela_status tela_session_eval_probe(tela_session *s, const int32_t *tokens, int32_t n, tela_layer_probe probe,
                                    void *user) {
    TELA_TRY(check_eval(s, tokens, n));
    if (n == 0) return TELA_OK;
    if (!probe) return tela_errorf(TELA_ERR_ARG, "tela_session_eval_probe: probe is NULL");
    const tela_forward_out out = {NULL, 0, NULL, probe, user, 0};
    return eval_out(s, tokens, n, &out);
}

tela_status tela_session_eval(tela_session *session, const int32_t *tokens, int32_t n, float *logits,
                              int all_logits) {
    return tela_session_eval_internal(session, tokens, n, logits, all_logits, false);
}

tela_status tela_session_eval_view(tela_session *session, const int32_t *tokens, int32_t n, const float **logits) {
    if (!logits) return tela_errorf(TELA_ERR_ARG, "tela_session_eval_view: logits is NULL");
    *logits = NULL;
    TELA_TRY(tela_session_eval_internal(session, tokens, n, NULL, 0, true));
    if (session->has_logits) *logits = session->logits;
    return TELA_OK;
}

bool tela_session_has_recurrent(const tela_session *s) { return s->model->arch->slot_bytes(s->model) > 0; }

int tela_session_mtp_layers(const tela_session *s) {
    const tela_arch *a = s->model->arch;
    return a->mtp_layers && a->mtp_draft ? a->mtp_layers(s->model) : 0;
}

tela_status tela_session_mtp_draft(tela_session *s, int32_t tok, int32_t pos, bool chain, float *logits,
                                   int32_t *pick) {
    if (!tela_session_mtp_layers(s))
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: no MTP block loaded",
                           s->model->path ? s->model->path : "the model");
    if (s->n_past < 1 || pos < s->n_past - 1 || pos >= s->n_ctx || (!chain && pos != s->n_past - 1))
        return tela_errorf(TELA_ERR_ARG, "MTP draft%s at position %d: the session holds %d tokens (context %d)",
                           chain ? " (chained)" : "", pos, s->n_past, s->n_ctx);
    return s->model->arch->mtp_draft(s->model, s->state, tok, pos, chain, logits, pick);
}

bool tela_session_keeps_states(const tela_session *s) {
    const tela_arch *a = s->model->arch;
    return a->keeps_states && a->slot_rewind && a->keeps_states(s->model, s->state);
}

tela_status tela_session_eval_picks(tela_session *s, const int32_t *tokens, int32_t n, int32_t *picks) {
    TELA_TRY(check_eval(s, tokens, n));
    if (n == 0) return TELA_OK;
    const tela_forward_out out = {NULL, 1, picks, NULL, NULL, 0};
    return eval_out(s, tokens, n, &out);
}

tela_status tela_session_eval_keep(tela_session *s, const int32_t *tokens, int32_t n, float *logits,
                                   int32_t *picks) {
    TELA_TRY(check_eval(s, tokens, n));
    if (n == 0) return TELA_OK;
    const tela_forward_out out = {logits, 1, logits ? NULL : picks, NULL, NULL, 1};
    TELA_TRY(eval_out(s, tokens, n, &out));
    if (tela_session_keeps_states(s)) {
        s->keep_pos = s->n_past - n;
        s->keep_n = n;
    }
    return TELA_OK;
}

tela_status tela_session_mark(tela_session *s) {
    const tela_arch *arch = s->model->arch;
    const size_t bytes = arch->slot_bytes(s->model);
    if (bytes > 0) {
        if (!s->mark_state) {
            s->mark_state = malloc(bytes);
            if (!s->mark_state) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory for a %zu-byte state mark", bytes);
            s->mark_bytes = bytes;
        }
        s->mark_pos = -1;
        TELA_TRY(arch->slot_save(s->model, s->state, 0, s->mark_state));
    }
    s->mark_pos = s->n_past;
    return TELA_OK;
}

tela_status tela_session_truncate(tela_session *s, int32_t n) {
    if (!s || n < 0 || n > s->n_past)
        return tela_errorf(TELA_ERR_ARG, "session: cannot truncate %d positions to %d", s ? s->n_past : 0, n);
    if (n == s->n_past) return TELA_OK;
    s->has_logits = false;
    if (s->mark_pos > n) s->mark_pos = -1;
    if (s->keep_pos >= 0 && n > s->keep_pos && n - s->keep_pos <= s->keep_n) { /* within the kept pass */
        const tela_status st = s->model->arch->slot_rewind(s->model, s->state, 0, n - s->keep_pos);
        s->keep_pos = -1;
        if (st != TELA_OK) {
            tela_session_reset(s);
            return st;
        }
        s->n_past = n;
        return TELA_OK;
    }
    s->keep_pos = -1;
    if (!tela_session_has_recurrent(s)) { /* KV rows past n are never read before they are written again */
        s->n_past = n;
        return TELA_OK;
    }
    int32_t from = 0;
    if (s->mark_pos >= 0) {
        from = s->mark_pos;
        tela_status st = s->model->arch->slot_load(s->model, s->state, 0, s->mark_state);
        if (st != TELA_OK) {
            tela_session_reset(s);
            return st;
        }
    } else {
        s->model->arch->state_reset(s->model, s->state);
    }
    /* the tokens [from, n) are still in s->tokens: evaluate them again */
    s->n_past = from;
    if (n > from) {
        tela_status st = tela_session_eval_internal(s, s->tokens + from, n - from, NULL, 0, false);
        if (st != TELA_OK) {
            tela_session_reset(s);
            return st;
        }
    }
    return TELA_OK;
}

void tela_session_profile_start(tela_session *session) {
    if (session) tela_exec_profile_start(session->ex);
}

char *tela_session_profile_report(tela_session *session, int json) {
    return session ? tela_exec_profile_report(session->ex, json != 0) : NULL;
}

void tela_session_profile_add(tela_session *session, const char *phase, double seconds) {
    if (session && phase) tela_exec_profile_host(session->ex, phase, seconds);
}

void tela_session_profile_stop(tela_session *session) {
    if (session) tela_exec_profile_stop(session->ex);
}

tela_status tela_session_snapshot(const tela_session *session, tela_snapshot **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_session_snapshot: out is NULL");
    *out = NULL;
    if (!session) return tela_errorf(TELA_ERR_ARG, "tela_session_snapshot: session is NULL");
    const tela_arch *arch = session->model->arch;
    tela_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return tela_errorf(TELA_ERR_NOMEM, "snapshot: out of memory");
    snap->model = session->model;
    snap->n_ctx = session->n_ctx;
    snap->n_past = session->n_past;
    snap->state_bytes = arch->state_size(session->model, session->state, session->n_past);
    snap->tokens = malloc((size_t)(session->n_past ? session->n_past : 1) * sizeof *snap->tokens);
    snap->state = malloc(snap->state_bytes ? snap->state_bytes : 1);
    if (!snap->tokens || !snap->state) {
        tela_snapshot_free(snap);
        return tela_errorf(TELA_ERR_NOMEM, "snapshot: out of memory for %zu bytes of state", snap->state_bytes);
    }
    if (session->has_logits) {
        size_t lb = (size_t)session->model->info.n_vocab * sizeof(float);
        snap->logits = malloc(lb);
        if (!snap->logits) {
            tela_snapshot_free(snap);
            return tela_errorf(TELA_ERR_NOMEM, "snapshot: out of memory");
        }
        memcpy(snap->logits, session->logits, lb);
    }
    memcpy(snap->tokens, session->tokens, (size_t)session->n_past * sizeof *snap->tokens);
    tela_status st = arch->state_save(session->model, session->state, session->n_past, snap->state);
    if (st != TELA_OK) {
        tela_snapshot_free(snap);
        return st;
    }
    *out = snap;
    return TELA_OK;
}

tela_status tela_session_restore(tela_session *session, const tela_snapshot *snap) {
    if (!session || !snap) return tela_errorf(TELA_ERR_ARG, "tela_session_restore: NULL argument");
    if (snap->model != session->model)
        return tela_errorf(TELA_ERR_ARG, "tela_session_restore: the snapshot was taken on another model");
    if (snap->n_ctx != session->n_ctx)
        return tela_errorf(TELA_ERR_ARG, "tela_session_restore: the snapshot's context (%d) differs from the session's (%d)",
                           snap->n_ctx, session->n_ctx);
    session->mark_pos = -1;
    session->keep_pos = -1;
    tela_status st = session->model->arch->state_load(session->model, session->state, snap->n_past, snap->state);
    if (st != TELA_OK) {
        /* a partly loaded state is no state: start over */
        tela_session_reset(session);
        return st;
    }
    memcpy(session->tokens, snap->tokens, (size_t)snap->n_past * sizeof *snap->tokens);
    session->n_past = snap->n_past;
    session->has_logits = snap->logits != NULL;
    if (snap->logits)
        memcpy(session->logits, snap->logits, (size_t)session->model->info.n_vocab * sizeof(float));
    return TELA_OK;
}

void tela_snapshot_free(tela_snapshot *snapshot) {
    if (!snapshot) return;
    free(snapshot->tokens);
    free(snapshot->state);
    free(snapshot->logits);
    free(snapshot);
}
