/* forward.c: the parts of a forward pass the architectures share: the
 * session's input/output buffers, the per-step loop (uploads, decode-step
 * graphs, downloads of logits and greedy picks), the output head and the
 * SwiGLU feed-forward block, all over the backend operations. */
#include "model/model.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tela_status tela_model_io_init(tela_model_io *io, tela_exec *ex, int n_vocab, int n_embd, int n_batch) {
    memset(io, 0, sizeof *io);
    io->ex = ex;
    io->n_vocab = n_vocab;
    io->n_embd = n_embd;
    io->n_batch = n_batch;
    tela_backend *be = tela_exec_backend(ex);
    /* ids then positions, one block: a step's inputs take one copy */
    TELA_TRY(tela_backend_alloc(be, (size_t)2 * (size_t)n_batch * sizeof(int32_t), "token ids and positions",
                                (void **)&io->tok));
    io->pos = io->tok + n_batch;
    TELA_TRY(tela_backend_alloc(be, (size_t)n_vocab * sizeof(float), "logits", (void **)&io->logits1));
    TELA_TRY(tela_backend_alloc(be, sizeof(int32_t), "the greedy pick", (void **)&io->pick));
    return TELA_OK;
}

tela_status tela_model_io_prev_positions(tela_model_io *io) {
    if (io->pos_prev) return TELA_OK;
    io->pos_prev_host = malloc((size_t)io->n_batch * sizeof *io->pos_prev_host);
    if (!io->pos_prev_host) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    return tela_backend_alloc(tela_exec_backend(io->ex), (size_t)io->n_batch * sizeof(int32_t), "positions",
                              (void **)&io->pos_prev);
}

void tela_model_io_free(tela_model_io *io) {
    free(io->probe_buf);
    free(io->pos_prev_host);
    io->pos_prev_host = NULL;
    io->probe_buf = NULL;
    free(io->run_tok);
    free(io->run_seqs);
    free(io->run_rows);
    io->run_tok = NULL;
    io->run_seqs = NULL;
    io->run_rows = NULL;
    if (!io->ex) return;
    tela_backend *be = tela_exec_backend(io->ex);
    tela_backend_free_mem(be, io->tok);
    tela_backend_free_mem(be, io->pos_prev);
    tela_backend_free_mem(be, io->logits1);
    tela_backend_free_mem(be, io->logits);
    tela_backend_free_mem(be, io->logits_small);
    tela_backend_free_mem(be, io->pick);
    tela_backend_free_mem(be, io->picks);
    memset(io, 0, sizeof *io);
}

/* Backend memory for `rows` rows of logits: the fixed one-row buffer, a
 * fixed buffer of TELA_GRAPH_MAX_TOK rows (steps that may be captured hold
 * their addresses), or the all-logits buffer grown to size (steps that are
 * never captured). */
static tela_status io_logits(tela_model_io *io, int rows, float **out) {
    if (rows <= 1) {
        *out = io->logits1;
        return TELA_OK;
    }
    if (rows <= TELA_GRAPH_MAX_TOK) {
        if (!io->logits_small)
            TELA_TRY(tela_backend_alloc(tela_exec_backend(io->ex),
                                        (size_t)TELA_GRAPH_MAX_TOK * (size_t)io->n_vocab * sizeof(float), "logits",
                                        (void **)&io->logits_small));
        *out = io->logits_small;
        return TELA_OK;
    }
    if (rows > io->logit_rows) {
        tela_backend *be = tela_exec_backend(io->ex);
        TELA_TRY(tela_exec_sync(io->ex));
        tela_backend_free_mem(be, io->logits);
        io->logits = NULL;
        io->logit_rows = 0;
        TELA_TRY(tela_backend_alloc(be, (size_t)rows * (size_t)io->n_vocab * sizeof(float), "logits",
                                    (void **)&io->logits));
        io->logit_rows = rows;
    }
    *out = io->logits;
    return TELA_OK;
}

tela_status tela_model_run_steps(const tela_model *m, void *state, tela_model_step_fn fn, tela_model_io *io,
                                 const int32_t *tokens, int32_t n, int32_t n_past, const tela_forward_out *out) {
    tela_exec *ex = io->ex;
    const bool host = tela_exec_host_visible(ex);
    const size_t row_bytes = (size_t)io->n_vocab * sizeof(float);
    /* every position's greedy pick, made where the logits are (a GPU's
     * speculative verification: only the token ids come back) */
    const bool picks_all = out->greedy && out->all_logits && !out->logits;
    if (picks_all && !io->picks)
        TELA_TRY(tela_backend_alloc(tela_exec_backend(ex), (size_t)io->n_batch * sizeof(int32_t), "greedy picks",
                                    (void **)&io->picks));
    for (int32_t done = 0; done < n;) {
        const int nt = n - done < io->n_batch ? n - done : io->n_batch;
        const bool last = done + nt == n;
        tela_model_step step = {nt, 0, NULL, last && out->greedy != NULL && !picks_all, NULL};
        if ((out->logits && out->all_logits) || picks_all) step.rows = nt;
        else if (last && (out->logits || out->greedy)) step.rows = 1;
        float *host_dst = out->logits ? out->logits + (out->all_logits ? (size_t)done * io->n_vocab : 0) : NULL;
        if (step.rows && host && host_dst) step.logits = host_dst; /* the CPU writes straight to the caller */
        else if (step.rows) TELA_TRY(io_logits(io, step.rows, &step.logits));
        TELA_TRY(tela_exec_set_batch(ex, &io->batch, io->tok, NULL, tokens + done, nt, n_past + done));
        if (io->pos_prev) {
            for (int i = 0; i < nt; i++) io->pos_prev_host[i] = n_past + done + i - 1;
            TELA_TRY(tela_exec_upload(ex, io->pos_prev, io->pos_prev_host, (size_t)nt * sizeof(int32_t)));
        }
        io->probe = last ? out->probe : NULL;
        io->probe_user = out->probe_user;
        io->probe_status = TELA_OK;
        if (io->probe && !io->probe_buf && !(io->probe_buf = malloc(sizeof(float) * (size_t)io->n_embd)))
            return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        /* decode steps repeat: the same work at every position of a length
         * bucket; so do small passes of one step (a speculative step's
         * verification), but for a sequence's first (position 0 is
         * special: nothing before it) */
        if (!io->probe && (nt == 1 || (nt == n && nt <= TELA_GRAPH_MAX_TOK && n_past > 0))) {
            uint64_t key = 1u | (uint64_t)step.rows << 8 | (uint64_t)step.pick << 16 |
                           (uint64_t)(out->keep_states != 0) << 17 | (uint64_t)picks_all << 18 | (uint64_t)nt << 20 |
                           (uint64_t)tela_exec_length_bucket(ex, n_past + done + nt) << 32;
            if (tela_exec_graph_begin(ex, key)) {
                fn(m, state, &step);
                if (picks_all) tela_exec_argmax_rows(ex, step.logits, io->n_vocab, nt, io->picks);
            }
            TELA_TRY(tela_exec_graph_end(ex));
        } else {
            fn(m, state, &step);
            if (picks_all) tela_exec_argmax_rows(ex, step.logits, io->n_vocab, nt, io->picks);
        }
        if (picks_all) TELA_TRY(tela_exec_download(ex, out->greedy + done, io->picks, (size_t)nt * sizeof(int32_t)));
        if (step.rows && host_dst && step.logits != host_dst)
            TELA_TRY(tela_exec_download(ex, host_dst, step.logits, (size_t)step.rows * row_bytes));
        if (step.pick) TELA_TRY(tela_exec_download(ex, out->greedy, io->pick, sizeof(int32_t)));
        io->probe = NULL;
        TELA_TRY(io->probe_status);
        done += nt;
    }
    return tela_exec_sync(ex);
}

tela_status tela_model_run_batch(const tela_model *m, void *state, tela_model_step_fn fn, tela_model_io *io,
                                 const tela_seq_run *runs, int n_runs, float *logits, int32_t *picks) {
    tela_exec *ex = io->ex;
    int total = 0, rows = 0;
    for (int i = 0; i < n_runs; i++) {
        if (runs[i].n <= 0 || runs[i].n > io->n_batch - total)
            return tela_errorf(TELA_ERR_INTERNAL, "batched step: %d tokens in run %d exceed the step's %d", runs[i].n, i,
                               io->n_batch);
        total += runs[i].n;
        rows += runs[i].logits ? (runs[i].all_logits ? runs[i].n : 1) : 0;
    }
    if (total == 0) return TELA_OK;
    if (!io->run_tok) { /* host buffers for steps of up to n_batch tokens (and as many runs) */
        io->run_tok = malloc((size_t)io->n_batch * sizeof *io->run_tok);
        io->run_seqs = malloc((size_t)io->n_batch * sizeof *io->run_seqs);
        io->run_rows = malloc((size_t)io->n_batch * sizeof *io->run_rows);
        if (!io->run_tok || !io->run_seqs || !io->run_rows) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        io->run_cap = io->n_batch;
    }
    int t = 0, r = 0;
    for (int i = 0; i < n_runs; i++) {
        memcpy(io->run_tok + t, runs[i].tokens, (size_t)runs[i].n * sizeof(int32_t));
        io->run_seqs[i] = (tela_batch_seq){t, runs[i].n, runs[i].n_past, runs[i].slot, runs[i].blocks};
        if (runs[i].logits)
            for (int j = runs[i].all_logits ? 0 : runs[i].n - 1; j < runs[i].n; j++) io->run_rows[r++] = t + j;
        t += runs[i].n;
    }
    TELA_TRY(tela_exec_set_batch_seqs(ex, &io->batch, io->tok, io->pos, io->run_tok, io->run_seqs, n_runs));
    tela_model_step step = {total, rows, NULL, false, rows ? io->run_rows : NULL};
    const bool host = tela_exec_host_visible(ex);
    if (rows && host && logits) step.logits = logits;
    else if (rows) TELA_TRY(io_logits(io, rows, &step.logits));
    io->probe = NULL;
    fn(m, state, &step);
    if (rows && picks) {
        if (!io->picks)
            TELA_TRY(tela_backend_alloc(tela_exec_backend(ex), (size_t)io->n_batch * sizeof(int32_t), "greedy picks",
                                        (void **)&io->picks));
        tela_exec_argmax_rows(ex, step.logits, io->n_vocab, rows, io->picks);
        TELA_TRY(tela_exec_download(ex, picks, io->picks, (size_t)rows * sizeof(int32_t)));
    }
    if (rows && logits && step.logits != logits) { /* the rows of the runs that want them, a stretch at a time */
        const size_t row_bytes = (size_t)io->n_vocab * sizeof(float);
        int r0 = 0, n_want = 0;
        for (int i = 0; i <= n_runs; i++) {
            const int nr = i < n_runs && runs[i].logits ? (runs[i].all_logits ? runs[i].n : 1) : 0;
            if (i < n_runs && nr > 0 && !runs[i].pick_only) {
                n_want += nr;
                continue;
            }
            if (n_want > 0)
                TELA_TRY(tela_exec_download(ex, logits + (size_t)r0 * io->n_vocab, step.logits + (size_t)r0 * io->n_vocab,
                                            (size_t)n_want * row_bytes));
            r0 += n_want + nr;
            n_want = 0;
        }
    }
    return tela_exec_sync(ex);
}

void tela_model_probe(tela_model_io *io, int layer, const float *x, int n_tok, int n_embd) {
    if (!io->probe || io->probe_status != TELA_OK) return;
    io->probe_status = tela_exec_download(io->ex, io->probe_buf, x + (size_t)(n_tok - 1) * n_embd,
                                          sizeof(float) * (size_t)n_embd);
    if (io->probe_status == TELA_OK) io->probe(io->probe_user, layer, io->probe_buf, n_embd);
}

void tela_model_output_head(tela_exec *ex, const tela_mat *parts, int n_parts, const float *norm, float eps,
                            const float *x, float *xb, int n_embd, const tela_model_step *step, tela_model_io *io) {
    if (step->rows == 0) return;
    const float *first = x + (size_t)(step->n_tok - step->rows) * n_embd;
    if (step->row_idx) { /* a batched step: the rows that want logits, gathered */
        tela_exec_copy_rows(ex, xb, n_embd, x, n_embd, step->row_idx, step->rows, n_embd);
        first = xb;
    }
    const tela_norm_in nrm = {norm, eps, xb};
    tela_matmul_target t[TELA_MODEL_MAX_RANKS];
    const int n = n_parts < TELA_MODEL_MAX_RANKS ? n_parts : TELA_MODEL_MAX_RANKS; /* (loading caps the ranks) */
    int64_t col = 0;
    for (int i = 0; i < n; col += parts[i].n_rows, i++)
        t[i] = (tela_matmul_target){&parts[i], step->logits + col, io->n_vocab};
    tela_exec_profile_phase(ex, "output head");
    tela_exec_norm_matmul_many(ex, &nrm, t, n, first, n_embd, step->rows);
    tela_exec_profile_phase(ex, NULL);
    if (step->pick)
        tela_exec_argmax(ex, step->logits + (size_t)(step->rows - 1) * io->n_vocab, io->n_vocab, io->pick);
}

void tela_model_embed(tela_exec *ex, const tela_mat *parts, int n_parts, const int32_t *ids, int n_tok, float *x,
                      int n_embd) {
    if (n_parts <= 1) {
        tela_exec_get_rows(ex, parts, ids, n_tok, x, n_embd);
        return;
    }
    int64_t row0 = 0;
    for (int i = 0; i < n_parts; row0 += parts[i].n_rows, i++)
        tela_exec_get_rows_part(ex, &parts[i], row0, ids, n_tok, x, n_embd, i > 0);
}

void tela_model_ffn_swiglu(tela_exec *ex, const tela_model_ffn *f, const float *x, float *xb, float *gate, float *out,
                           bool accumulate, int n_embd, int n_tok, float eps) {
    const int64_t n_ff = f->w_gate.n_rows;
    const tela_norm_in norm = {f->norm, eps, xb};
    tela_exec_profile_phase(ex, "FFN");
    tela_exec_norm_matmul_swiglu(ex, &norm, &f->w_gate, &f->w_up, x, n_embd, gate, n_ff, n_tok);
    tela_exec_matmul(ex, &f->w_down, gate, n_ff, out, n_embd, n_tok, accumulate);
    tela_exec_profile_phase(ex, NULL);
}


/* ------------------------------------------- a rank per device (ranks) */

/* Rows of the head a rank > 0 computes at a time into its own buffer
 * before rank 0 copies them into its logits. */
#define RANK_HEAD_ROWS 64

tela_status tela_model_ranks_init(const tela_model *m, tela_model_ranks *R, tela_exec *ex0, int n_batch,
                                  int64_t max_floats, const tela_mat *heads) {
    memset(R, 0, sizeof *R);
    R->n = 1;
    R->rk = calloc((size_t)(m->n_dev > 1 ? m->n_dev : 1), sizeof *R->rk);
    if (!R->rk) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    R->rk[0].ex = ex0;
    if (m->n_dev <= 1) return TELA_OK;
    R->n = m->n_dev;
    R->head_rows = n_batch < RANK_HEAD_ROWS ? n_batch : RANK_HEAD_ROWS;
    const int threads = m->n_threads;
    for (int r = 1; r < R->n; r++) {
        tela_model_rank *k = &R->rk[r];
        tela_backend *be = m->devs[r];
        TELA_TRY(tela_exec_create(be, threads, &k->ex));
        TELA_TRY(tela_backend_alloc(be, (size_t)n_batch * sizeof(int32_t), "token ids", (void **)&k->tok));
        TELA_TRY(tela_backend_alloc(be, (size_t)n_batch * sizeof(int32_t), "positions", (void **)&k->pos));
        TELA_TRY(tela_backend_alloc(be, (size_t)R->head_rows * (size_t)heads[r].n_rows * sizeof(float),
                                    "logits of a rank", (void **)&k->logits));
    }
    tela_exec *ex[TELA_MODEL_MAX_RANKS];
    for (int r = 0; r < R->n; r++) ex[r] = R->rk[r].ex;
    TELA_TRY(tela_exec_group_create(ex, R->n, max_floats, &R->group));
    if (m->verbose)
        fprintf(stderr, "tela: %d ranks, a device each, summed through %s\n", R->n,
                tela_exec_group_transport(R->group));
    return TELA_OK;
}

void tela_model_ranks_free(tela_model_ranks *R) {
    if (!R->rk) return;
    tela_exec_group_free(R->group);
    for (int r = 1; r < R->n; r++) {
        tela_model_rank *k = &R->rk[r];
        if (!k->ex) continue;
        tela_exec_sync(k->ex);
        tela_backend *be = tela_exec_backend(k->ex);
        tela_backend_free_mem(be, k->tok);
        tela_backend_free_mem(be, k->pos);
        tela_backend_free_mem(be, k->logits);
        tela_backend_free_mem(be, k->pos_prev);
        tela_exec_free(k->ex);
    }
    free(R->rk);
    memset(R, 0, sizeof *R);
}

tela_status tela_model_ranks_prev_positions(const tela_model *m, tela_model_ranks *R, int n_batch) {
    for (int r = 1; r < R->n; r++)
        if (!R->rk[r].pos_prev)
            TELA_TRY(tela_backend_alloc(m->devs[r], (size_t)n_batch * sizeof(int32_t), "positions",
                                        (void **)&R->rk[r].pos_prev));
    return TELA_OK;
}

void tela_model_ranks_fork(tela_model_ranks *R) {
    for (int r = 1; r < R->n; r++) tela_exec_wait_for(R->rk[r].ex, R->rk[0].ex);
}

void tela_model_ranks_begin(tela_model_ranks *R, const tela_batch *b, const int32_t *pos_prev) {
    R->rk[0].batch = *b;
    tela_exec *ex0 = R->rk[0].ex;
    const size_t bytes = (size_t)b->n_tok * sizeof(int32_t);
    tela_model_ranks_fork(R);
    for (int r = 1; r < R->n; r++) {
        tela_model_rank *k = &R->rk[r];
        tela_exec_copy_from(k->ex, k->tok, bytes, ex0, b->tokens, bytes, bytes, 1);
        tela_exec_copy_from(k->ex, k->pos, bytes, ex0, b->pos, bytes, bytes, 1);
        if (pos_prev && k->pos_prev) tela_exec_copy_from(k->ex, k->pos_prev, bytes, ex0, pos_prev, bytes, bytes, 1);
        k->batch = *b;
        k->batch.tokens = k->tok;
        k->batch.pos = k->pos;
    }
}

tela_status tela_model_ranks_sync(tela_model_ranks *R) {
    for (int r = 1; r < R->n; r++) TELA_TRY(tela_exec_sync(R->rk[r].ex));
    return TELA_OK;
}

void tela_model_ranks_end(tela_model_ranks *R) {
    for (int r = 1; r < R->n; r++) tela_exec_wait_for(R->rk[0].ex, R->rk[r].ex);
}

void tela_model_ranks_sum(tela_model_ranks *R, float *const *bufs, int64_t n) {
    if (R->n > 1) tela_exec_allreduce_sum(R->group, bufs, n);
}

void tela_model_embed_ranks(tela_model_ranks *R, const tela_mat *parts, const int32_t *const *ids, int n_tok,
                            float *const *x, int n_embd) {
    int64_t row0 = 0;
    for (int r = 0; r < R->n; row0 += parts[r].n_rows, r++)
        tela_exec_get_rows_part(R->rk[r].ex, &parts[r], row0, ids[r], n_tok, x[r], n_embd, false);
    tela_model_ranks_sum(R, x, (int64_t)n_tok * n_embd);
}

void tela_model_head_ranks(tela_model_ranks *R, const tela_mat *parts, const tela_norm_in *norm, const float *const *x,
                           int n_rows, int n_embd, float *out, int64_t out_stride) {
    int64_t col = 0;
    tela_exec *ex0 = R->rk[0].ex;
    for (int r = 0; r < R->n; col += parts[r].n_rows, r++) {
        tela_exec *ex = R->rk[r].ex;
        const int64_t w = parts[r].n_rows;
        if (w <= 0) continue;
        if (r == 0) { /* rank 0 writes its columns of out */
            const tela_matmul_target t = {&parts[0], out, out_stride};
            if (norm) tela_exec_norm_matmul_many(ex, &norm[0], &t, 1, x[0], n_embd, n_rows);
            else tela_exec_matmul_many(ex, &t, 1, x[0], n_embd, n_rows);
            continue;
        }
        /* the others a stretch of rows at a time, copied into rank 0's */
        const tela_matmul_target t = {&parts[r], R->rk[r].logits, w};
        for (int i = 0; i < n_rows; i += R->head_rows) {
            const int nr = n_rows - i < R->head_rows ? n_rows - i : R->head_rows;
            if (i > 0) tela_exec_wait_for(ex, ex0); /* rank 0 has copied the stretch before */
            const float *xi = x[r] + (size_t)i * n_embd;
            if (norm) tela_exec_norm_matmul_many(ex, &norm[r], &t, 1, xi, n_embd, nr);
            else tela_exec_matmul_many(ex, &t, 1, xi, n_embd, nr);
            tela_exec_wait_for(ex0, ex);
            tela_exec_copy_from(ex0, out + (size_t)i * out_stride + col, (size_t)out_stride * sizeof(float), ex,
                                R->rk[r].logits, (size_t)w * sizeof(float), (size_t)w * sizeof(float), (size_t)nr);
        }
    }
}

void tela_model_output_head_ranks(tela_model_ranks *R, const tela_mat *parts, const float *const *norm, float eps,
                                  float *const *x, float *const *xb, int n_embd, const tela_model_step *step,
                                  tela_model_io *io) {
    if (step->rows == 0) return;
    const float *first[TELA_MODEL_MAX_RANKS];
    tela_norm_in nrm[TELA_MODEL_MAX_RANKS];
    for (int r = 0; r < R->n; r++) {
        tela_exec *ex = R->rk[r].ex;
        first[r] = x[r] + (size_t)(step->n_tok - step->rows) * n_embd;
        if (step->row_idx) { /* a batched step: the rows that want logits, gathered */
            tela_exec_copy_rows(ex, xb[r], n_embd, x[r], n_embd, step->row_idx, step->rows, n_embd);
            first[r] = xb[r];
        }
        nrm[r] = (tela_norm_in){norm[r], eps, xb[r]};
        tela_exec_profile_phase(ex, "output head");
    }
    tela_model_head_ranks(R, parts, nrm, first, step->rows, n_embd, step->logits, io->n_vocab);
    for (int r = 0; r < R->n; r++) tela_exec_profile_phase(R->rk[r].ex, NULL);
    if (step->pick)
        tela_exec_argmax(R->rk[0].ex, step->logits + (size_t)(step->rows - 1) * io->n_vocab, io->n_vocab, io->pick);
}

void tela_model_ranks_step_begin(tela_model_ranks *R, const tela_batch *b, const int32_t *pos_prev,
                                 const tela_mat *parts, int n_parts, const double *const *inv_freq, int n_rot,
                                 float *const *cs, float *const *x, int n_embd) {
    tela_model_ranks_begin(R, b, pos_prev);
    for (int e = 0; e < R->n; e++) tela_exec_rope_table(R->rk[e].ex, cs[e], &R->rk[e].batch, inv_freq[e], n_rot);
    if (R->n == 1) {
        tela_model_embed(R->rk[0].ex, parts, n_parts, b->tokens, b->n_tok, x[0], n_embd);
        return;
    }
    const int32_t *ids[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < R->n; e++) ids[e] = R->rk[e].batch.tokens;
    tela_model_embed_ranks(R, parts, ids, b->n_tok, x, n_embd);
}

void tela_model_ranks_output_head(tela_model_ranks *R, const tela_mat *parts, int n_parts, const float *const *norm,
                                  float eps, float *const *x, float *const *xb, int n_embd, const tela_model_step *step,
                                  tela_model_io *io) {
    if (R->n == 1)
        tela_model_output_head(R->rk[0].ex, parts, n_parts, norm[0], eps, x[0], xb[0], n_embd, step, io);
    else
        tela_model_output_head_ranks(R, parts, norm, eps, x, xb, n_embd, step, io);
}
