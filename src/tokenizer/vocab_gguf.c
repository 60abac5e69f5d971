/* vocab_gguf.c: a vocabulary from a GGUF file's tokenizer.ggml.* metadata
 * (as llama.cpp's converter writes it): model, pre, tokens, token_type,
 * scores, merges, special token ids, add_bos/add_eos/add_space_prefix and the
 * chat template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

static const char *file_name(const tela_gguf *g) { return g->path ? g->path : "GGUF"; }

/* An optional array of at least n elements; NULL when absent. */
static tela_status optional_array(const tela_gguf *g, const char *key, uint64_t n, bool strings,
                                  const tela_gguf_value **out) {
    *out = NULL;
    if (!tela_gguf_find(g, key)) return TELA_OK;
    const tela_gguf_value *a;
    TELA_TRY(tela_gguf_get_arr(g, key, &a));
    tela_gguf_vtype et = a->v.arr.elem_type;
    if (strings ? et != TELA_GGUF_STRING : (et == TELA_GGUF_STRING || et == TELA_GGUF_ARRAY))
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s is an array of %s, expected %s", file_name(g), key,
                           tela_gguf_vtype_name(et), strings ? "strings" : "numbers");
    if (a->v.arr.n < n)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s has %llu entries for %llu tokens", file_name(g), key,
                           (unsigned long long)a->v.arr.n, (unsigned long long)n);
    *out = a;
    return TELA_OK;
}

static tela_status optional_id(const tela_gguf *g, const char *key, int32_t *id) {
    if (!tela_gguf_find(g, key)) return TELA_OK;
    uint32_t u;
    TELA_TRY(tela_gguf_get_u32(g, key, &u));
    *id = u > INT32_MAX ? -1 : (int32_t)u;
    return TELA_OK;
}

static tela_status optional_bool(const tela_gguf *g, const char *key, bool *b) {
    if (!tela_gguf_find(g, key)) return TELA_OK;
    return tela_gguf_get_bool(g, key, b);
}

static tela_status load(const tela_gguf *g, tela_vocab **out) {
    const char *fn = file_name(g);
    if (!tela_gguf_find(g, "tokenizer.ggml.model"))
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: no tokenizer in this file (tokenizer.ggml.model is missing)", fn);
    tela_gguf_str model;
    TELA_TRY(tela_gguf_get_str(g, "tokenizer.ggml.model", &model));
    tela_vocab_kind kind;
    if ((model.len == 8 && !memcmp(model.ptr, "no_vocab", 8)) || (model.len == 4 && !memcmp(model.ptr, "none", 4)))
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: no tokenizer in this file (tokenizer.ggml.model is '%.*s')", fn,
                           (int)model.len, model.ptr);
    if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) kind = TELA_VOCAB_BPE;
    else if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) kind = TELA_VOCAB_SPM;
    else
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "%s: tokenizer.ggml.model '%.*s' is not supported (tela reads 'gpt2' = byte-level BPE "
                           "and 'llama' = SentencePiece BPE)",
                           fn, (int)(model.len > 64 ? 64 : model.len), model.ptr);

    const tela_gguf_value *tokens;
    if (!tela_gguf_find(g, "tokenizer.ggml.tokens"))
        return tela_errorf(TELA_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing", fn);
    TELA_TRY(optional_array(g, "tokenizer.ggml.tokens", 0, true, &tokens));
    uint64_t n = tokens->v.arr.n;
    if (n == 0 || n > (1u << 26))
        return tela_errorf(TELA_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", fn, (unsigned long long)n);
    const tela_gguf_value *types, *scores;
    TELA_TRY(optional_array(g, "tokenizer.ggml.token_type", n, false, &types));
    TELA_TRY(optional_array(g, "tokenizer.ggml.scores", n, false, &scores));

    tela_vocab *v;
    TELA_TRY(tela_vocab_create(kind, (int32_t)n, &v));
    *out = v;
    for (uint64_t i = 0; i < n; i++) {
        const tela_gguf_str *s = &tokens->v.arr.strs[i];
        int type = types ? (int)tela_gguf_arr_i64(types, i) : TELA_TOKEN_NORMAL;
        float score = scores ? (float)tela_gguf_arr_f64(scores, i) : 0.0f;
        TELA_TRY(tela_vocab_set_token(v, (int32_t)i, s->ptr, (size_t)s->len, type, score));
    }
    TELA_TRY(tela_vocab_index(v));

    if (kind == TELA_VOCAB_BPE) {
        const tela_gguf_value *merges;
        if (!tela_gguf_find(g, "tokenizer.ggml.merges"))
            return tela_errorf(TELA_ERR_FORMAT, "%s: tokenizer.ggml.merges is missing (needed by a 'gpt2' tokenizer)",
                               fn);
        TELA_TRY(optional_array(g, "tokenizer.ggml.merges", 0, true, &merges));
        TELA_TRY(tela_vocab_reserve_merges(v, (size_t)merges->v.arr.n));
        for (uint64_t i = 0; i < merges->v.arr.n; i++) {
            const tela_gguf_str *s = &merges->v.arr.strs[i];
            TELA_TRY(tela_vocab_add_merge_str(v, s->ptr, (size_t)s->len));
        }
        char pre[64] = "default";
        if (tela_gguf_find(g, "tokenizer.ggml.pre")) {
            tela_gguf_str p;
            TELA_TRY(tela_gguf_get_str(g, "tokenizer.ggml.pre", &p));
            if (p.len >= sizeof pre)
                return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: unknown pre-tokenizer '%.*s...'", fn, 40, p.ptr);
            memcpy(pre, p.ptr, (size_t)p.len);
            pre[p.len] = '\0';
        }
        tela_status st = tela_vocab_set_pre(v, pre);
        if (st != TELA_OK) return tela_error_prefix(st, "%s: tokenizer.ggml.pre: ", fn);
    } else {
        /* SentencePiece defaults, as llama.cpp has them */
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
        snprintf(v->pre_name, sizeof v->pre_name, "%s", "spm");
    }

    TELA_TRY(optional_id(g, "tokenizer.ggml.bos_token_id", &v->bos));
    TELA_TRY(optional_id(g, "tokenizer.ggml.eos_token_id", &v->eos));
    TELA_TRY(optional_id(g, "tokenizer.ggml.unknown_token_id", &v->unk));
    TELA_TRY(optional_id(g, "tokenizer.ggml.padding_token_id", &v->pad));
    TELA_TRY(optional_id(g, "tokenizer.ggml.eot_token_id", &v->eot));
    TELA_TRY(optional_id(g, "tokenizer.ggml.eom_token_id", &v->eom));
    TELA_TRY(optional_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos));
    TELA_TRY(optional_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos));
    TELA_TRY(optional_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix));

    /* Phi-3's added tokens swallow the whitespace after them (rstrip in its
     * tokenizer.json), which GGUF does not record: llama.cpp recognises the
     * model by name, and so does tela. */
    if (tela_gguf_find(g, "general.name")) {
        tela_gguf_str name;
        TELA_TRY(tela_gguf_get_str(g, "general.name", &name));
        char low[64];
        size_t k = 0;
        for (; k < name.len && k + 1 < sizeof low; k++)
            low[k] = (char)(name.ptr[k] >= 'A' && name.ptr[k] <= 'Z' ? name.ptr[k] + 32 : name.ptr[k]);
        low[k] = '\0';
        if (strstr(low, "phi-3") || strstr(low, "phi3")) {
            for (int32_t id = 0; id < v->n_tokens; id++) {
                tela_tok *t = &v->tok[id];
                const char *s = v->text + t->text_off;
                bool keep = !strcmp(s, "<unk>") || !strcmp(s, "<s>") || !strcmp(s, "<|endoftext|>");
                if (((t->flags & TELA_TOKF_ADDED) && !keep) || !strcmp(s, "</s>")) t->flags |= TELA_TOKF_RSTRIP;
            }
        }
    }

    if (tela_gguf_find(g, "tokenizer.chat_template")) {
        tela_gguf_str t;
        TELA_TRY(tela_gguf_get_str(g, "tokenizer.chat_template", &t));
        v->chat_template = malloc((size_t)t.len + 1);
        if (!v->chat_template) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory for the chat template", fn);
        memcpy(v->chat_template, t.ptr, (size_t)t.len);
        v->chat_template[t.len] = '\0';
    }
    return tela_vocab_finish(v);
}

tela_status tela_vocab_load_gguf(const tela_gguf *gguf, tela_vocab **out) {
    *out = NULL;
    if (!gguf) return tela_errorf(TELA_ERR_ARG, "tela_vocab_load_gguf: NULL file");
    tela_vocab *v = NULL;
    tela_status st = load(gguf, &v);
    if (st != TELA_OK) {
        tela_vocab_free(v);
        return st;
    }
    *out = v;
    return TELA_OK;
}

tela_status tela_vocab_load(const char *path, tela_vocab **out) {
    *out = NULL;
    if (!path) return tela_errorf(TELA_ERR_ARG, "tela_vocab_load: NULL path");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return tela_vocab_load_hf(path, out);
    tela_gguf *g;
    TELA_TRY(tela_gguf_open(path, &g));
    tela_status s = tela_vocab_load_gguf(g, out);
    tela_gguf_close(g);
    return s;
}
