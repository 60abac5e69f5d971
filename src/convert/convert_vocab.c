/* convert_vocab.c: tokenizer metadata (tokenizer.ggml.*) from a Hugging Face
 * tokenizer.json + tokenizer_config.json, written as llama.cpp's converter
 * writes a byte-level BPE ("gpt2") vocabulary (TextModel._set_vocab_gpt2 and
 * gguf-py's SpecialVocab), in its key order:
 *   tokenizer.ggml.model "gpt2", tokenizer.ggml.pre, tokens (padded to the
 *   model's vocab_size with "[PADn]"), token_type (1 normal, 3 control,
 *   4 user-defined, 5 unused), merges, special token ids, add_bos/add_eos,
 *   chat_template.
 * llama.cpp names the pre-tokenizer by hashing the token ids of a test text;
 * tela recognizes the pre-tokenizer regexes in tokenizer.json instead (same
 * names for the tokenizers tela supports) and refuses unknown ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/convert_internal.h"
#include "util/error.h"
#include "util/mapped_file.h"

#define RE_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

/* The Split regexes of known tokenizer.json files. */
static const char RE_LLAMA3[] = RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] = RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN35[] = RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
                                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const cJSON *obj(const cJSON *o, const char *key) { return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL; }

/* Does the post-processor add a special token first (BOS) / last (EOS) to a
 * single sequence? -1 when it does not say (no TemplateProcessing). */
static void template_adds(const cJSON *pp, int *bos, int *eos) {
    if (!pp) return;
    const cJSON *type = obj(pp, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, obj(pp, "processors")) template_adds(e, bos, eos);
        return;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing")) return;
    const cJSON *single = obj(pp, "single");
    int n = cJSON_GetArraySize(single);
    if (n <= 0) return;
    *bos = obj(cJSON_GetArrayItem(single, 0), "SpecialToken") != NULL;
    *eos = n > 1 && obj(cJSON_GetArrayItem(single, n - 1), "SpecialToken") != NULL;
}

/* tokenizer.ggml.pre from the pre_tokenizer's regexes. llama.cpp calls a
 * Llama-3 tokenizer "llama-bpe" when encoding adds BOS (its hash then starts
 * with the BOS id) and "smaug-bpe" otherwise; tela follows that. */
static tela_status recognize_pre(const char *path, const cJSON *tok, const char **out) {
    const cJSON *pre = obj(tok, "pre_tokenizer");
    const char *split = NULL;
    int n_split = 0, bytelevel_regex = 0;
    const cJSON *list = pre;
    const cJSON *type = obj(pre, "type");
    bool seq = cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence");
    const cJSON *e = seq ? obj(pre, "pretokenizers") : NULL;
    const cJSON *one = seq ? (e ? e->child : NULL) : list;
    for (; one; one = seq ? one->next : NULL) {
        const cJSON *t = obj(one, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "Split")) {
            const cJSON *re = obj(obj(one, "pattern"), "Regex");
            if (cJSON_IsString(re)) split = re->valuestring;
            n_split++;
        } else if (cJSON_IsString(t) && !strcmp(t->valuestring, "ByteLevel")) {
            const cJSON *ur = obj(one, "use_regex");
            bytelevel_regex = !cJSON_IsBool(ur) || cJSON_IsTrue(ur);
        }
        if (!seq) break;
    }
    if (n_split == 1 && split && !bytelevel_regex) {
        if (!strcmp(split, RE_LLAMA3)) {
            int bos = -1, eos = -1;
            template_adds(obj(tok, "post_processor"), &bos, &eos);
            *out = bos == 1 ? "llama-bpe" : "smaug-bpe";
            return TELA_OK;
        }
        if (!strcmp(split, RE_QWEN2)) { *out = "qwen2"; return TELA_OK; }
        if (!strcmp(split, RE_QWEN35)) { *out = "qwen35"; return TELA_OK; }
    }
    if (n_split == 0 && bytelevel_regex) { *out = "gpt-2"; return TELA_OK; }
    return tela_errorf(TELA_ERR_UNSUPPORTED,
                       "%s: unknown pre-tokenizer%s%.120s%s (tela convert knows the Llama 3, Qwen2/3, Qwen3.5 and "
                       "GPT-2 ones); use --no-vocab to convert without the tokenizer",
                       path, split ? " with regex '" : "", split ? split : "", split ? "'" : "");
}

/* llama.cpp's TextModel.does_token_look_special. */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return true; /* <｜ ｜> */
    if (!strncmp(s, "<unused", 7) && n > 7 && s[n - 1] == '>') return true;
    return false;
}

static tela_status read_json(const char *path, cJSON **out) {
    char *text = NULL;
    size_t len = 0;
    TELA_TRY(tela_read_file(path, &text, &len));
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (!*out) return tela_errorf(TELA_ERR_FORMAT, "%s: not valid JSON", path);
    return TELA_OK;
}

/* Replaces every ' ' by U+0120 (as gguf-py encodes spaces in [a, b] merges). */
static char *encode_spaces(const char *s) {
    size_t n = 0;
    for (const char *p = s; *p; p++) n += *p == ' ' ? 2 : 1;
    char *o = malloc(n + 1), *q = o;
    if (!o) return NULL;
    for (const char *p = s; *p; p++) {
        if (*p == ' ') { *q++ = (char)0xc4; *q++ = (char)0xa0; }
        else *q++ = *p;
    }
    *q = 0;
    return o;
}

typedef struct vocab_build {
    char **tokens;        /* n, owned strings (or NULL: pad) */
    int32_t *types;
    char **merges;
    size_t n, n_merges;
} vocab_build;

static void vocab_build_free(vocab_build *v) {
    for (size_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    for (size_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

static tela_status build_tokens(const char *path, const cJSON *tok, int64_t n_vocab, vocab_build *v) {
    const cJSON *model = obj(tok, "model");
    const cJSON *mtype = obj(model, "type");
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tokenizer model %s is not supported (byte-level BPE only); use "
                           "--no-vocab", path, cJSON_IsString(mtype) ? mtype->valuestring : "(none)");
    const cJSON *vocab = obj(model, "vocab");
    const cJSON *added = obj(tok, "added_tokens");
    if (!cJSON_IsObject(vocab)) return tela_errorf(TELA_ERR_FORMAT, "%s: no model.vocab object", path);
    int64_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8)
            return tela_errorf(TELA_ERR_FORMAT, "%s: vocab entry '%s' has a bad id", path, e->string);
        if ((int64_t)e->valuedouble > max_id) max_id = (int64_t)e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = obj(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 || !cJSON_IsString(obj(e, "content")))
            return tela_errorf(TELA_ERR_FORMAT, "%s: an added_tokens entry has no valid id/content", path);
        if ((int64_t)id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
    }
    if (n_vocab <= 0) n_vocab = max_id + 1;
    if (max_id >= n_vocab)
        return tela_errorf(TELA_ERR_FORMAT, "%s: token id %lld is not below the model's vocab_size %lld", path,
                           (long long)max_id, (long long)n_vocab);
    v->n = (size_t)n_vocab;
    v->tokens = calloc(v->n, sizeof *v->tokens);
    v->types = calloc(v->n, sizeof *v->types);
    if (!v->tokens || !v->types) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    cJSON_ArrayForEach(e, vocab) {
        size_t id = (size_t)e->valuedouble;
        free(v->tokens[id]);
        if (!(v->tokens[id] = strdup(e->string))) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        v->types[id] = 1;
    }
    cJSON_ArrayForEach(e, added) {
        size_t id = (size_t)obj(e, "id")->valuedouble;
        const char *content = obj(e, "content")->valuestring;
        bool special = cJSON_IsTrue(obj(e, "special"));
        free(v->tokens[id]);
        if (special || looks_special(content)) {
            v->tokens[id] = strdup(content);
            v->types[id] = 3;
        } else {
            /* pre-normalized user-defined spaces (llama.cpp: U+2581 -> ' ') */
            size_t n = strlen(content);
            char *s = malloc(n + 1), *q = s;
            for (size_t i = 0; s && i < n; i++) {
                if (i + 3 <= n && !memcmp(content + i, "\xe2\x96\x81", 3)) { *q++ = ' '; i += 2; }
                else *q++ = content[i];
            }
            if (s) *q = 0;
            v->tokens[id] = s;
            v->types[id] = 4;
        }
        if (!v->tokens[id]) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < v->n; i++)
        if (!v->tokens[i]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%zu]", i);
            if (!(v->tokens[i] = strdup(pad))) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
            v->types[i] = 5;
        }
    /* merges: "a b" strings, or [a, b] pairs (spaces inside encoded as U+0120) */
    const cJSON *merges = obj(model, "merges");
    int nm = cJSON_GetArraySize(merges);
    v->merges = calloc((size_t)nm + 1, sizeof *v->merges);
    if (!v->merges) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    cJSON_ArrayForEach(e, merges) {
        char *m = NULL;
        if (cJSON_IsString(e)) m = strdup(e->valuestring);
        else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
            char *a = encode_spaces(e->child->valuestring), *b = encode_spaces(e->child->next->valuestring);
            if (a && b && (m = malloc(strlen(a) + strlen(b) + 2))) sprintf(m, "%s %s", a, b);
            free(a);
            free(b);
        } else {
            return tela_errorf(TELA_ERR_FORMAT, "%s: merge %zu is neither \"a b\" nor [a, b]", path, v->n_merges);
        }
        if (!m) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        v->merges[v->n_merges++] = m;
    }
    return TELA_OK;
}

/* gguf-py SpecialVocab: ids from tokenizer_config.json's "<typ>_token"
 * (looked up among added_tokens), then config.json's "<typ>_token_id" for
 * the ones still missing; written in the order found. */
static tela_status special_ids(conv_ctx *c, const cJSON *tok, const cJSON *tcfg, size_t n_vocab) {
    static const char *const TYPES[] = {"bos", "eos", "unk", "sep", "pad"};
    static const char *const KEYS[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                       "tokenizer.ggml.padding_token_id"};
    int64_t ids[5] = {-1, -1, -1, -1, -1};
    int order[10], n_order = 0;
    for (int t = 0; t < 5; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token", TYPES[t]);
        const cJSON *entry = obj(tcfg, key);
        const char *content = cJSON_IsString(entry) ? entry->valuestring : NULL;
        if (!content && cJSON_IsObject(entry) && cJSON_IsString(obj(entry, "content"))) content = obj(entry, "content")->valuestring;
        if (!content) continue;
        const cJSON *a;
        cJSON_ArrayForEach(a, obj(tok, "added_tokens")) {
            const cJSON *ct = obj(a, "content");
            if (cJSON_IsString(ct) && !strcmp(ct->valuestring, content)) {
                int64_t id = (int64_t)obj(a, "id")->valuedouble;
                if (id >= 0 && (size_t)id < n_vocab) { ids[t] = id; order[n_order++] = t; }
                break;
            }
        }
    }
    for (int t = 0; t < 5; t++) {
        if (ids[t] >= 0) continue;
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", TYPES[t]);
        const cJSON *v = conv_cfg(c, key);
        if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < (double)n_vocab) {
            ids[t] = (int64_t)v->valuedouble;
            order[n_order++] = t;
        }
    }
    for (int i = 0; i < n_order; i++)
        TELA_TRY(tela_gguf_writer_add_u32(c->w, KEYS[order[i]], (uint32_t)ids[order[i]]));
    /* add_bos_token / add_eos_token: tokenizer_config.json, else what the
     * post-processor template does */
    int bos = -1, eos = -1;
    template_adds(obj(tok, "post_processor"), &bos, &eos);
    const cJSON *ab = obj(tcfg, "add_bos_token"), *ae = obj(tcfg, "add_eos_token");
    if (cJSON_IsBool(ab)) bos = cJSON_IsTrue(ab);
    if (cJSON_IsBool(ae)) eos = cJSON_IsTrue(ae);
    if (bos >= 0) TELA_TRY(tela_gguf_writer_add_bool(c->w, "tokenizer.ggml.add_bos_token", bos));
    if (eos >= 0) TELA_TRY(tela_gguf_writer_add_bool(c->w, "tokenizer.ggml.add_eos_token", eos));
    return TELA_OK;
}

static tela_status chat_template(conv_ctx *c, const char *dir, const cJSON *tcfg) {
    const cJSON *ct = obj(tcfg, "chat_template");
    if (cJSON_IsString(ct)) return tela_gguf_writer_add_str(c->w, "tokenizer.chat_template", ct->valuestring);
    if (cJSON_IsArray(ct)) { /* [{name, template}]: "default" is the main one */
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *name = obj(e, "name"), *tmpl = obj(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(tmpl)) continue;
            char key[256];
            if (!strcmp(name->valuestring, "default")) snprintf(key, sizeof key, "tokenizer.chat_template");
            else snprintf(key, sizeof key, "tokenizer.chat_template.%s", name->valuestring);
            TELA_TRY(tela_gguf_writer_add_str(c->w, key, tmpl->valuestring));
        }
        return TELA_OK;
    }
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (stat(path, &sb) != 0) return TELA_OK;
    char *text = NULL;
    size_t len = 0;
    TELA_TRY(tela_read_file(path, &text, &len));
    tela_status st = tela_gguf_writer_add_str(c->w, "tokenizer.chat_template", text);
    free(text);
    return st;
}

tela_status conv_vocab(conv_ctx *c, const char *dir, int64_t n_vocab) {
    char path[4096], cfg_path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &sb) != 0) return TELA_ERR_NOT_FOUND;
    cJSON *tok = NULL, *tcfg = NULL;
    vocab_build v;
    memset(&v, 0, sizeof v);
    const char *pre = NULL;
    tela_status st = read_json(path, &tok);
    if (st != TELA_OK) return st;
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    if (stat(cfg_path, &sb) == 0 && (st = read_json(cfg_path, &tcfg)) != TELA_OK) goto done;
    if ((st = build_tokens(path, tok, n_vocab, &v)) != TELA_OK) goto done;
    if ((st = recognize_pre(path, tok, &pre)) != TELA_OK) goto done;
    if ((st = tela_gguf_writer_add_str(c->w, "tokenizer.ggml.model", "gpt2")) != TELA_OK) goto done;
    if ((st = tela_gguf_writer_add_str(c->w, "tokenizer.ggml.pre", pre)) != TELA_OK) goto done;
    if ((st = tela_gguf_writer_add_str_arr(c->w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, v.n)) != TELA_OK)
        goto done;
    if ((st = tela_gguf_writer_add_arr(c->w, "tokenizer.ggml.token_type", TELA_GGUF_INT32, v.types, v.n)) != TELA_OK)
        goto done;
    if (v.n_merges &&
        (st = tela_gguf_writer_add_str_arr(c->w, "tokenizer.ggml.merges", (const char *const *)v.merges, v.n_merges)) !=
            TELA_OK)
        goto done;
    if ((st = special_ids(c, tok, tcfg, v.n)) != TELA_OK) goto done;
    st = chat_template(c, dir, tcfg);
done:
    vocab_build_free(&v);
    cJSON_Delete(tok);
    cJSON_Delete(tcfg);
    return st;
}
