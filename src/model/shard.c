/* shard.c: the tensor-parallel shard plan (see shard.h). */
#include "model/shard.h"

#include <string.h>

#include "quant/quant.h"
#include "util/error.h"

tela_status tela_shard_plan_check(const tela_shard_dims *d, int world) {
    if (world < 1 || world > 64) return tela_errorf(TELA_ERR_ARG, "tensor parallelism: %d ranks (1 to 64)", world);
    if (world == 1) return TELA_OK;
    if (d->n_kv_head <= 0 || d->n_head % d->n_kv_head)
        return tela_errorf(TELA_ERR_FORMAT, "tensor parallelism: %d query heads are not a multiple of %d KV heads",
                           d->n_head, d->n_kv_head);
    /* attention by KV head; with more ranks than KV heads, each KV head
     * copied to world / n_kv_head ranks, which split its query heads */
    if (d->n_kv_head >= world ? d->n_kv_head % world != 0 : (world % d->n_kv_head != 0 || d->n_head % world != 0))
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "tensor parallelism: %d KV heads do not split over %d ranks (attention is split by KV "
                           "head; with more ranks than KV heads, each KV head is copied to several ranks, which "
                           "needs a multiple of the KV heads that divides the %d query heads)",
                           d->n_kv_head, world, d->n_head);
    if (d->n_ff % world)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "tensor parallelism: the FFN's %lld rows do not split over %d ranks",
                           (long long)d->n_ff, world);
    if (d->gdn_nk > 0) {
        if (d->gdn_nk % world)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "tensor parallelism: %d Gated DeltaNet key heads do not split over %d ranks",
                               d->gdn_nk, world);
        if (d->gdn_nv % d->gdn_nk || d->gdn_nv / d->gdn_nk > TELA_SHARD_MAX_RANGES - 2)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "tensor parallelism: %d Gated DeltaNet value heads for %d key heads", d->gdn_nv,
                               d->gdn_nk);
    }
    if (d->n_vocab < world) return tela_errorf(TELA_ERR_ARG, "tensor parallelism: a vocabulary of %lld for %d ranks",
                                               (long long)d->n_vocab, world);
    return TELA_OK;
}

static void add_range(tela_shard *s, int64_t begin, int64_t count) {
    /* a range that continues the last one extends it */
    if (s->n_ranges > 0 && s->begin[s->n_ranges - 1] + s->count[s->n_ranges - 1] == begin) {
        s->count[s->n_ranges - 1] += count;
        return;
    }
    s->begin[s->n_ranges] = begin;
    s->count[s->n_ranges] = count;
    s->n_ranges++;
}

/* Rank r's even share [r * n / N, (r + 1) * n / N) of n units of `unit`
 * rows each, from row `base`. */
static void add_share(tela_shard *s, int64_t base, int64_t n, int64_t unit, int rank, int world) {
    const int64_t a = n * rank / world, b = n * (rank + 1) / world;
    if (b > a) add_range(s, base + a * unit, (b - a) * unit);
}

/* The value heads of rank r's key heads, `unit` rows each, from `base`:
 * HF order, contiguous; the tiled order of a GGUF, g runs of nk / N heads
 * (value head j uses key head j % nk). */
static void add_value_heads(tela_shard *s, const tela_shard_dims *d, int64_t base, int64_t unit, int rank, int world) {
    if (!d->gdn_tiled) {
        add_share(s, base, d->gdn_nv, unit, rank, world);
        return;
    }
    const int g = d->gdn_nv / d->gdn_nk;
    for (int m = 0; m < g; m++) add_share(s, base + (int64_t)m * d->gdn_nk * unit, d->gdn_nk, unit, rank, world);
}

void tela_shard_of(const tela_shard_dims *d, tela_shard_role role, int rank, int world, tela_shard *out) {
    memset(out, 0, sizeof *out);
    if (world <= 1 || role == TELA_ROLE_REPLICATED || role >= TELA_ROLE_COUNT) return;
    const int64_t hd = d->head_dim, dk = d->gdn_dk, dv = d->gdn_dv, nk = d->gdn_nk;
    switch (role) {
    case TELA_ROLE_TOKEN_EMBD: case TELA_ROLE_OUTPUT:
        out->axis = TELA_SHARD_ROWS;
        add_share(out, 0, d->n_vocab, 1, rank, world);
        return;
    case TELA_ROLE_WQ:
        out->axis = TELA_SHARD_ROWS;
        add_share(out, 0, d->n_head, (d->q_gate ? 2 : 1) * hd, rank, world);
        return;
    case TELA_ROLE_WK: case TELA_ROLE_WV:
        out->axis = TELA_SHARD_ROWS;
        if (d->n_kv_head >= world)
            add_share(out, 0, d->n_kv_head, hd, rank, world);
        else /* a copy of the one KV head its query heads read */
            add_range(out, (int64_t)(rank / (world / d->n_kv_head)) * hd, hd);
        return;
    case TELA_ROLE_WO:
        out->axis = TELA_SHARD_COLS;
        add_share(out, 0, d->n_head, hd, rank, world);
        return;
    case TELA_ROLE_FFN_GATE: case TELA_ROLE_FFN_UP:
        out->axis = TELA_SHARD_ROWS;
        add_share(out, 0, d->n_ff, 1, rank, world);
        return;
    case TELA_ROLE_FFN_DOWN:
        out->axis = TELA_SHARD_COLS;
        add_share(out, 0, d->n_ff, 1, rank, world);
        return;
    case TELA_ROLE_GDN_QKV: case TELA_ROLE_GDN_CONV:
        out->axis = TELA_SHARD_ROWS;
        add_share(out, 0, nk, dk, rank, world);           /* q */
        add_share(out, nk * dk, nk, dk, rank, world);     /* k */
        add_value_heads(out, d, 2 * nk * dk, dv, rank, world);
        return;
    case TELA_ROLE_GDN_Z:
        out->axis = TELA_SHARD_ROWS;
        add_value_heads(out, d, 0, dv, rank, world);
        return;
    case TELA_ROLE_GDN_HEAD:
        out->axis = TELA_SHARD_ROWS;
        add_value_heads(out, d, 0, 1, rank, world);
        return;
    case TELA_ROLE_GDN_OUT:
        out->axis = TELA_SHARD_COLS;
        add_value_heads(out, d, 0, dv, rank, world);
        return;
    default: return;
    }
}

int tela_shard_kv_heads(const tela_shard_dims *d, int world) {
    return world <= 1 ? d->n_kv_head : d->n_kv_head >= world ? d->n_kv_head / world : 1;
}

tela_shard_role tela_shard_role_of(const char *name) {
    static const struct {
        const char *name;
        tela_shard_role role;
    } roles[] = {
        {"token_embd.weight", TELA_ROLE_TOKEN_EMBD}, {"output.weight", TELA_ROLE_OUTPUT},
        {"attn_q.weight", TELA_ROLE_WQ},             {"attn_k.weight", TELA_ROLE_WK},
        {"attn_v.weight", TELA_ROLE_WV},             {"attn_output.weight", TELA_ROLE_WO},
        {"ffn_gate.weight", TELA_ROLE_FFN_GATE},     {"ffn_up.weight", TELA_ROLE_FFN_UP},
        {"ffn_down.weight", TELA_ROLE_FFN_DOWN},     {"attn_qkv.weight", TELA_ROLE_GDN_QKV},
        {"ssm_conv1d.weight", TELA_ROLE_GDN_CONV},   {"attn_gate.weight", TELA_ROLE_GDN_Z},
        {"ssm_beta.weight", TELA_ROLE_GDN_HEAD},     {"ssm_alpha.weight", TELA_ROLE_GDN_HEAD},
        {"ssm_a", TELA_ROLE_GDN_HEAD},               {"ssm_dt.bias", TELA_ROLE_GDN_HEAD},
        {"ssm_out.weight", TELA_ROLE_GDN_OUT},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (!strcmp(name, roles[i].name)) return roles[i].role;
    return TELA_ROLE_REPLICATED;
}

tela_status tela_shard_check_type(const tela_shard *s, tela_type type, const char *tensor) {
    if (s->axis != TELA_SHARD_COLS) return TELA_OK; /* whole rows: any type */
    const tela_type_traits *tr = tela_type_get_traits(type);
    if (!tr) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: unknown type %d", tensor, (int)type);
    for (int i = 0; i < s->n_ranges; i++)
        if (s->begin[i] % tr->block_size || s->count[i] % tr->block_size)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "%s: a tensor-parallel shard's edge at column %lld splits a %s block of %lld "
                               "(choose fewer ranks or another quantization)",
                               tensor, (long long)(s->begin[i] % tr->block_size ? s->begin[i] : s->begin[i] + s->count[i]),
                               tr->name, (long long)tr->block_size);
    return TELA_OK;
}

size_t tela_shard_bytes(const tela_shard *s, tela_type type, int64_t n_rows, int64_t n_cols) {
    const size_t row = tela_type_row_bytes(type, n_cols);
    if (!row) return 0;
    int64_t n = 0;
    for (int i = 0; i < s->n_ranges; i++) n += s->count[i];
    switch (s->axis) {
    case TELA_SHARD_ROWS: return (size_t)n * row;
    case TELA_SHARD_COLS: return (size_t)n_rows * tela_type_row_bytes(type, n);
    default: return (size_t)n_rows * row;
    }
}

tela_status tela_shard_extract(const tela_shard *s, tela_type type, int64_t n_rows, int64_t n_cols, const void *src,
                               void *dst) {
    const size_t row = tela_type_row_bytes(type, n_cols);
    if (!row) return tela_errorf(TELA_ERR_ARG, "shard: rows of %lld elements of type %d", (long long)n_cols, (int)type);
    const unsigned char *in = src;
    unsigned char *out = dst;
    if (s->axis == TELA_SHARD_WHOLE) {
        memcpy(out, in, (size_t)n_rows * row);
        return TELA_OK;
    }
    const int64_t len = s->axis == TELA_SHARD_ROWS ? n_rows : n_cols;
    for (int i = 0; i < s->n_ranges; i++)
        if (s->begin[i] < 0 || s->count[i] < 0 || s->begin[i] + s->count[i] > len)
            return tela_errorf(TELA_ERR_ARG, "shard: range [%lld, +%lld) outside %lld", (long long)s->begin[i],
                               (long long)s->count[i], (long long)len);
    if (s->axis == TELA_SHARD_ROWS) {
        for (int i = 0; i < s->n_ranges; i++) {
            memcpy(out, in + (size_t)s->begin[i] * row, (size_t)s->count[i] * row);
            out += (size_t)s->count[i] * row;
        }
        return TELA_OK;
    }
    TELA_TRY(tela_shard_check_type(s, type, "shard"));
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < s->n_ranges; i++) {
            /* whole blocks: the byte offset of a column is its row prefix's size */
            const size_t off = s->begin[i] ? tela_type_row_bytes(type, s->begin[i]) : 0;
            const size_t n = tela_type_row_bytes(type, s->count[i]);
            memcpy(out, in + (size_t)r * row + off, n);
            out += n;
        }
    return TELA_OK;
}
