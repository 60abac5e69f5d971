/* vocab_hf.c: a vocabulary from a Hugging Face tokenizer directory:
 * tokenizer.json (model.vocab, model.merges as "a b" strings or ["a", "b"]
 * pairs, added_tokens, normalizer, pre_tokenizer, post_processor) and
 * tokenizer_config.json (bos/eos tokens, add_bos/add_eos, chat_template).
 * Byte-level BPE tokenizers are read; their pre-tokenizer regexes are matched
 * to the named ones GGUF files use, or else used as they are. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"
#include "util/mapped_file.h"

typedef struct hf_ctx {
    char path[4096];           /* of tokenizer.json, for messages */
    const char *patterns[TELA_MAX_PRETOK_RE];
    int n_patterns;
    char *owned[TELA_MAX_PRETOK_RE];
    bool byte_level;
    bool prefix_space;
} hf_ctx;

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static bool get_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *b = get(o, key);
    return cJSON_IsBool(b) ? cJSON_IsTrue(b) : dflt;
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *s = get(o, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

/* A token given as "text" or {"content": "text", ...} (tokenizer_config.json). */
static const char *token_content(const cJSON *o, const char *key) {
    const cJSON *t = get(o, key);
    if (cJSON_IsString(t)) return t->valuestring;
    if (cJSON_IsObject(t)) return get_str(t, "content");
    return NULL;
}

static bool get_id(const cJSON *n, int32_t *id) {
    if (!cJSON_IsNumber(n)) return false;
    double d = n->valuedouble;
    if (!(d >= 0 && d < (double)(1 << 26)) || d != (double)(int32_t)d) return false;
    *id = (int32_t)d;
    return true;
}

static tela_status add_pattern(hf_ctx *c, const char *pat, char *owned) {
    if (c->n_patterns == TELA_MAX_PRETOK_RE) {
        free(owned);
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer splits", c->path,
                           TELA_MAX_PRETOK_RE);
    }
    c->owned[c->n_patterns] = owned;
    c->patterns[c->n_patterns++] = pat;
    return TELA_OK;
}

/* A Split with a plain string pattern: quote it for PCRE2. */
static char *quote_literal(const char *s) {
    size_t n = strlen(s);
    char *q = malloc(n + 5);
    if (!q) return NULL;
    if (strstr(s, "\\E")) { /* cannot be quoted with \Q..\E: escape each char */
        free(q);
        q = malloc(n * 2 + 1);
        if (!q) return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (strchr("\\^$.|?*+()[]{}", s[i])) q[k++] = '\\';
            q[k++] = s[i];
        }
        q[k] = '\0';
        return q;
    }
    snprintf(q, n + 5, "\\Q%s\\E", s);
    return q;
}

static tela_status read_pretokenizer(hf_ctx *c, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return TELA_OK;
    const char *type = get_str(p, "type");
    if (!type) return tela_errorf(TELA_ERR_FORMAT, "%s: pre_tokenizer without a type", c->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, get(p, "pretokenizers")) TELA_TRY(read_pretokenizer(c, e));
        return TELA_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        c->byte_level = true;
        c->prefix_space = get_bool(p, "add_prefix_space", false);
        if (get_bool(p, "use_regex", true)) {
            static const char gpt2[] =
                "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            TELA_TRY(add_pattern(c, gpt2, NULL));
        }
        return TELA_OK;
    }
    if (!strcmp(type, "Split")) {
        const char *behavior = get_str(p, "behavior");
        if (!behavior || strcmp(behavior, "Isolated") != 0 || get_bool(p, "invert", false))
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: pre_tokenizer Split with behavior '%s'%s is not supported",
                               c->path, behavior ? behavior : "?", get_bool(p, "invert", false) ? " (inverted)" : "");
        const cJSON *pat = get(p, "pattern");
        const char *re = get_str(pat, "Regex");
        if (re) return add_pattern(c, re, NULL);
        const char *lit = get_str(pat, "String");
        if (lit) {
            char *q = quote_literal(lit);
            if (!q) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
            return add_pattern(c, q, q);
        }
        return tela_errorf(TELA_ERR_FORMAT, "%s: pre_tokenizer Split without a pattern", c->path);
    }
    if (!strcmp(type, "Digits")) return add_pattern(c, get_bool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+", NULL);
    return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' is not supported", c->path, type);
}

static tela_status read_normalizer(hf_ctx *c, const cJSON *n, int *norm) {
    if (!n || cJSON_IsNull(n)) return TELA_OK;
    const char *type = get_str(n, "type");
    if (!type) return tela_errorf(TELA_ERR_FORMAT, "%s: normalizer without a type", c->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, get(n, "normalizers")) TELA_TRY(read_normalizer(c, e, norm));
        return TELA_OK;
    }
    int k = !strcmp(type, "NFC") ? TELA_NORM_NFC : !strcmp(type, "NFD") ? TELA_NORM_NFD
          : !strcmp(type, "NFKC") ? TELA_NORM_NFKC : !strcmp(type, "NFKD") ? TELA_NORM_NFKD : -1;
    if (k < 0) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported", c->path, type);
    if (*norm != TELA_NORM_NONE && *norm != k)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: two different Unicode normalizers", c->path);
    *norm = k;
    return TELA_OK;
}

/* TemplateProcessing's "single" template: special tokens before / after $A. */
static void read_post_processor(const cJSON *pp, const char **first, const char **last) {
    *first = *last = NULL;
    if (!pp || cJSON_IsNull(pp)) return;
    const char *type = get_str(pp, "type");
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, get(pp, "processors")) {
            const char *f, *l;
            read_post_processor(e, &f, &l);
            if (f) *first = f;
            if (l) *last = l;
        }
        return;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return;
    bool seen_a = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, get(pp, "single")) {
        const cJSON *st = get(e, "SpecialToken");
        if (st) {
            const char *id = get_str(st, "id");
            if (!seen_a && !*first) *first = id;
            else if (seen_a) *last = id;
        } else if (get(e, "Sequence")) {
            seen_a = true;
        }
    }
}

static tela_status load(const char *dir, tela_vocab **out, hf_ctx *c) {
    char cfg_path[4096];
    snprintf(c->path, sizeof c->path, "%s/tokenizer.json", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    char *text;
    size_t size;
    TELA_TRY(tela_read_file(c->path, &text, &size));
    cJSON *root = cJSON_ParseWithLengthOpts(text, size + 1, NULL, true) /* + its NUL */;
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tela_errorf(TELA_ERR_FORMAT, "%s: not valid JSON (or not a JSON object)", c->path);
    }
    cJSON *cfg = NULL;
    FILE *probe = fopen(cfg_path, "rb");
    if (probe) {
        fclose(probe);
        char *ctext;
        size_t csize;
        tela_status st = tela_read_file(cfg_path, &ctext, &csize);
        if (st != TELA_OK) {
            cJSON_Delete(root);
            return st;
        }
        cfg = cJSON_ParseWithLengthOpts(ctext, csize + 1, NULL, true);
        free(ctext);
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            cJSON_Delete(root);
            return tela_errorf(TELA_ERR_FORMAT, "%s: not valid JSON", cfg_path);
        }
    }

    tela_status st = TELA_OK;
    tela_vocab *v = NULL;
    const cJSON *model = get(root, "model");
    const cJSON *vocab = get(model, "vocab");
    const cJSON *merges = get(model, "merges");
    const cJSON *added = get(root, "added_tokens");
    const char *mtype = get_str(model, "type");
    int norm = TELA_NORM_NONE;
    if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab)) {
        st = tela_errorf(TELA_ERR_FORMAT, "%s: no model.vocab object", c->path);
        goto done;
    }
    if ((mtype && strcmp(mtype, "BPE") != 0) || !cJSON_IsArray(merges)) {
        st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (tela reads BPE with merges)",
                         c->path, mtype ? mtype : "?");
        goto done;
    }
    const char *cwp = get_str(model, "continuing_subword_prefix"), *ews = get_str(model, "end_of_word_suffix");
    if ((cwp && *cwp) || (ews && *ews)) {
        st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: BPE with subword prefixes/suffixes is not supported", c->path);
        goto done;
    }
    if ((st = read_pretokenizer(c, get(root, "pre_tokenizer"))) != TELA_OK) goto done;
    const cJSON *dec = get(root, "decoder");
    if (!c->byte_level && !(dec && get_str(dec, "type") && !strcmp(get_str(dec, "type"), "ByteLevel"))) {
        st = tela_errorf(TELA_ERR_UNSUPPORTED,
                         "%s: only byte-level BPE tokenizer.json files are supported (no ByteLevel pre-tokenizer)",
                         c->path);
        goto done;
    }
    if ((st = read_normalizer(c, get(root, "normalizer"), &norm)) != TELA_OK) goto done;

    /* ids: the largest of the vocabulary and the added tokens */
    int32_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id;
        if (!get_id(e, &id)) {
            st = tela_errorf(TELA_ERR_FORMAT, "%s: model.vocab['%.40s'] is not a valid token id", c->path, e->string);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    cJSON_ArrayForEach(e, added) {
        int32_t id;
        if (!get_id(get(e, "id"), &id) || !get_str(e, "content")) {
            st = tela_errorf(TELA_ERR_FORMAT, "%s: an added_tokens entry lacks a valid id or content", c->path);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    if ((st = tela_vocab_create(TELA_VOCAB_BPE, max_id + 1, &v)) != TELA_OK) goto done;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = 0;
        get_id(e, &id);
        if ((st = tela_vocab_set_token(v, id, e->string, strlen(e->string), TELA_TOKEN_NORMAL, 0.0f)) != TELA_OK)
            goto done;
    }
    cJSON_ArrayForEach(e, added) {
        int32_t id = 0;
        get_id(get(e, "id"), &id);
        const char *content = get_str(e, "content");
        bool special = get_bool(e, "special", false);
        st = tela_vocab_set_token(v, id, content, strlen(content),
                                  special ? TELA_TOKEN_CONTROL : TELA_TOKEN_USER_DEFINED, 0.0f);
        if (st != TELA_OK) goto done;
        uint8_t f = TELA_TOKF_ADDED | (special ? TELA_TOKF_SPECIAL : 0);
        if (get_bool(e, "lstrip", false)) f |= TELA_TOKF_LSTRIP;
        if (get_bool(e, "rstrip", false)) f |= TELA_TOKF_RSTRIP;
        if (get_bool(e, "single_word", false)) f |= TELA_TOKF_SINGLE_WORD;
        if (get_bool(e, "normalized", !special)) f |= TELA_TOKF_NORMALIZED;
        v->tok[id].flags = f;
    }
    if ((st = tela_vocab_index(v)) != TELA_OK) goto done;
    if ((st = tela_vocab_reserve_merges(v, (size_t)cJSON_GetArraySize(merges))) != TELA_OK) goto done;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            st = tela_vocab_add_merge_str(v, e->valuestring, strlen(e->valuestring));
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            st = tela_vocab_add_merge(v, a, strlen(a), b, strlen(b));
        } else {
            st = tela_errorf(TELA_ERR_FORMAT, "%s: a model.merges entry is neither \"a b\" nor [\"a\", \"b\"]",
                             c->path);
        }
        if (st != TELA_OK) goto done;
    }

    const char *name = tela_pretok_name_for_regexes(c->patterns, c->n_patterns);
    if (name) st = tela_vocab_set_pre(v, name);
    else st = tela_vocab_set_regexes(v, "hf-custom", c->patterns, c->n_patterns);
    if (st != TELA_OK) goto done;
    /* what the file says wins over the named pre-tokenizer's defaults */
    v->norm = norm;
    v->ignore_merges = get_bool(model, "ignore_merges", false);
    v->byte_prefix_space = c->prefix_space;
    const char *unk = get_str(model, "unk_token");
    if (unk) v->unk = tela_vocab_find(v, unk, strlen(unk));

    const char *pp_first, *pp_last;
    read_post_processor(get(root, "post_processor"), &pp_first, &pp_last);
    const char *bos = cfg ? token_content(cfg, "bos_token") : NULL;
    const char *eos = cfg ? token_content(cfg, "eos_token") : NULL;
    const char *pad = cfg ? token_content(cfg, "pad_token") : NULL;
    const char *cunk = cfg ? token_content(cfg, "unk_token") : NULL;
    if (!bos) bos = pp_first;
    if (!eos) eos = pp_last;
    v->bos = bos ? tela_vocab_find(v, bos, strlen(bos)) : -1;
    v->eos = eos ? tela_vocab_find(v, eos, strlen(eos)) : -1;
    v->pad = pad ? tela_vocab_find(v, pad, strlen(pad)) : -1;
    if (cunk) v->unk = tela_vocab_find(v, cunk, strlen(cunk));
    v->add_bos = cfg && cJSON_IsBool(get(cfg, "add_bos_token")) ? cJSON_IsTrue(get(cfg, "add_bos_token"))
                                                                 : pp_first != NULL;
    v->add_eos = cfg && cJSON_IsBool(get(cfg, "add_eos_token")) ? cJSON_IsTrue(get(cfg, "add_eos_token"))
                                                                 : pp_last != NULL;

    const cJSON *tpl = cfg ? get(cfg, "chat_template") : NULL;
    const char *tpl_text = cJSON_IsString(tpl) ? tpl->valuestring : NULL;
    if (cJSON_IsArray(tpl)) { /* [{"name": "default", "template": ...}, ...] */
        cJSON_ArrayForEach(e, tpl) {
            const char *nm = get_str(e, "name");
            if (nm && !strcmp(nm, "default")) tpl_text = get_str(e, "template");
        }
    }
    if (tpl_text) {
        v->chat_template = strdup(tpl_text);
        if (!v->chat_template) {
            st = tela_errorf(TELA_ERR_NOMEM, "out of memory");
            goto done;
        }
    } else {
        /* newer checkpoints keep the template in a file of its own */
        char tpl_path[4200];
        size_t tl;
        snprintf(tpl_path, sizeof tpl_path, "%s/chat_template.jinja", dir);
        FILE *tf = fopen(tpl_path, "rb");
        if (tf) {
            fclose(tf);
            if ((st = tela_read_file(tpl_path, &v->chat_template, &tl)) != TELA_OK) goto done;
        }
    }
    st = tela_vocab_finish(v);

done:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (st != TELA_OK) tela_vocab_free(v);
    else *out = v;
    return st;
}

tela_status tela_vocab_load_hf(const char *dir, tela_vocab **out) {
    *out = NULL;
    if (!dir) return tela_errorf(TELA_ERR_ARG, "tela_vocab_load_hf: NULL directory");
    hf_ctx *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    tela_status st = load(dir, out, c);
    for (int i = 0; i < c->n_patterns; i++) free(c->owned[i]);
    free(c);
    return st;
}
