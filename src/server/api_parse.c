/* api_parse.c: request bodies of the HTTP API (chat completions,
 * completions, tokenize, detokenize) checked and turned into the structs of
 * api_parse.h; UTF-8 checking and repair; the error object's filler. No
 * HTTP, engine or model here (see api_parse.h for the rules). */
#include "server/api_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

int api_fail(api_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    if (!e) return -1;
    e->status = status;
    e->type = type ? type : INVALID;
    e->param[0] = e->code[0] = '\0';
    if (param) strncat(e->param, param, sizeof e->param - 1);
    if (code) strncat(e->code, code, sizeof e->code - 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* Field names for messages ("messages[3].content[0].text"): cut short
 * when too long, which is fine for a name (vsnprintf behind a function,
 * so that the compiler does not warn of the cut). */
static void pname(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pname(char *dst, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------- UTF-8 */

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when it is not
 * one (overlong forms, UTF-16 surrogates and code points past U+10FFFF are
 * invalid, as RFC 3629 says). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;  /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;  /* <= U+10FFFF */
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t api_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(u + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

size_t api_utf8_sanitize(const char *s, size_t n, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return o;
}

cJSON *api_json_text(const char *s, size_t n) {
    char stack[256], *buf = 3 * n + 1 <= sizeof stack ? stack : malloc(3 * n + 1);
    if (!buf) return NULL;
    api_utf8_sanitize(s, n, buf);
    cJSON *v = cJSON_CreateString(buf);
    if (buf != stack) free(buf);
    return v;
}

/* -------------------------------------------------- the body as a whole */

/* The offset of a \u0000 escape inside a string of the (already parsed,
 * so well-formed) JSON text, or len when there is none: cJSON would cut the
 * string there without a word. */
static size_t find_nul_escape(const char *s, size_t len) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!in_string) {
            if (c == '"') in_string = 1;
        } else if (c == '"') {
            in_string = 0;
        } else if (c == '\\' && i + 1 < len) {
            if (s[i + 1] == 'u' && i + 5 < len && !memcmp(s + i + 2, "0000", 4)) return i;
            i++; /* the escaped character */
        }
    }
    return len;
}

/* Parses body into a JSON object, or fills e: empty body, bad UTF-8, bad
 * JSON (with the byte offset), U+0000, not an object. */
static cJSON *parse_object(const char *body, size_t len, api_error *e) {
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r')) i++;
    if (i == len) {
        api_fail(e, 400, INVALID, "invalid_json", NULL, "the request body is empty: expected a JSON object");
        return NULL;
    }
    size_t bad = api_utf8_check(body, len);
    if (bad < len) {
        api_fail(e, 400, INVALID, "invalid_utf8", NULL, "the request body is not valid UTF-8: bad byte 0x%02x at byte %zu",
                 (unsigned)(unsigned char)body[bad], bad);
        return NULL;
    }
    if (memchr(body, '\0', len)) {
        api_fail(e, 400, INVALID, "invalid_json", NULL, "invalid JSON: a NUL byte at byte %zu",
                 (size_t)((const char *)memchr(body, '\0', len) - body));
        return NULL;
    }
    const char *end = NULL;
    /* len + 1: the terminating NUL is part of the buffer, so trailing
     * garbage after the value fails (require_null_terminated). */
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
        char near[24];
        size_t k = 0;
        for (size_t j = at; j < len && k < 16; j++) {
            unsigned char c = (unsigned char)body[j];
            near[k++] = c >= 0x20 && c < 0x7F ? (char)c : '.';
        }
        near[k] = '\0';
        if (at >= len)
            api_fail(e, 400, INVALID, "invalid_json", NULL, "invalid JSON: the body ends early, at byte %zu of %zu",
                     at, len);
        else
            api_fail(e, 400, INVALID, "invalid_json", NULL, "invalid JSON at byte %zu of %zu (near '%s')", at, len,
                     near);
        return NULL;
    }
    size_t nul = find_nul_escape(body, len);
    if (nul < len) {
        cJSON_Delete(root);
        api_fail(e, 400, INVALID, "invalid_value", NULL, "strings must not contain \\u0000 (at byte %zu)", nul);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_fail(e, 400, INVALID, "invalid_type", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* ------------------------------------------------------- typed values */

static int type_error(api_error *e, const char *name, const char *what) {
    return api_fail(e, 400, INVALID, "invalid_type", name, "'%s' must be %s", name, what);
}

static int get_bool(const cJSON *v, const char *name, int *out, api_error *e) {
    if (!cJSON_IsBool(v)) return type_error(e, name, "a boolean");
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

static int get_number(const cJSON *v, const char *name, double lo, double hi, double *out, api_error *e) {
    if (!cJSON_IsNumber(v)) return type_error(e, name, "a number");
    double d = v->valuedouble;
    if (!isfinite(d)) return api_fail(e, 400, INVALID, "invalid_value", name, "'%s' must be a finite number", name);
    if (d < lo || d > hi)
        return api_fail(e, 400, INVALID, "invalid_value", name, "'%s' must be between %g and %g (got %g)", name, lo,
                        hi, d);
    *out = d;
    return 0;
}

/* An integral number within [lo, hi] (both exactly representable). */
static int get_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out, api_error *e) {
    if (!cJSON_IsNumber(v)) return type_error(e, name, "an integer");
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return type_error(e, name, "an integer");
    if (d < lo || d > hi)
        return api_fail(e, 400, INVALID, "invalid_value", name, "'%s' must be an integer from %.0f to %.0f (got %.17g)",
                        name, lo, hi, d);
    *out = (int64_t)d;
    return 0;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int oom(api_error *e) { return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* A string field copied into *out (replacing what was there, for a key
 * given twice: the last one counts, as in most JSON readers). */
static int get_string(const cJSON *v, const char *name, char **out, api_error *e) {
    if (!cJSON_IsString(v)) return type_error(e, name, "a string");
    char *s = dup_bytes(v->valuestring, strlen(v->valuestring));
    if (!s) return oom(e);
    free(*out);
    *out = s;
    return 0;
}

/* A token id in [0, n_vocab) (unbounded above when n_vocab is 0). */
static int get_token(const cJSON *v, const char *name, int32_t n_vocab, int32_t *out, api_error *e) {
    int64_t t;
    if (!cJSON_IsNumber(v)) return type_error(e, name, "a token id (an integer)");
    if (get_int(v, name, 0, n_vocab > 0 ? (double)n_vocab - 1 : (double)INT32_MAX, &t, e)) return -1;
    *out = (int32_t)t;
    return 0;
}

static int get_tokens(const cJSON *arr, const char *name, int32_t n_vocab, int32_t **out, size_t *n, api_error *e) {
    if (!cJSON_IsArray(arr)) return type_error(e, name, "an array of token ids");
    size_t cnt = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc((cnt ? cnt : 1) * sizeof *ids);
    if (!ids) return oom(e);
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char nm[96];
        pname(nm, sizeof nm, "%s[%zu]", name, i);
        if (get_token(it, nm, n_vocab, &ids[i], e)) {
            free(ids);
            return -1;
        }
        i++;
    }
    free(*out);
    *out = ids;
    *n = cnt;
    return 0;
}

static int unknown_key(api_error *e, const char *prefix, const char *key) {
    char nm[96];
    pname(nm, sizeof nm, "%s%s", prefix, key);
    return api_fail(e, 400, INVALID, "unknown_parameter", nm, "unrecognized request argument supplied: %s", nm);
}

static int unsupported(api_error *e, const char *key, const char *detail) {
    return api_fail(e, 400, INVALID, "unsupported_parameter", key, "'%s' is not supported by tela%s%s", key,
                    detail ? ": " : "", detail ? detail : "");
}

/* ------------------------------------------------ the generation fields */

static void gen_init(api_gen *g, int32_t default_max_tokens) {
    memset(g, 0, sizeof *g);
    g->max_tokens = default_max_tokens;
    g->n = 1;
    g->temperature = 1.0;
    g->top_p = 1.0;
    g->logprobs = -1;
}

static void gen_free(api_gen *g) {
    for (size_t i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    free(g->logit_bias);
    free(g->prediction);
    g->stop = NULL;
    g->n_stop = 0;
    g->logit_bias = NULL;
    g->prediction = NULL;
    g->n_logit_bias = 0;
}

static int parse_stop(const cJSON *v, api_gen *g, api_error *e) {
    size_t cnt;
    if (cJSON_IsString(v)) cnt = 1;
    else if (cJSON_IsArray(v)) cnt = (size_t)cJSON_GetArraySize(v);
    else return type_error(e, "stop", "a string or an array of strings");
    if (cnt > API_MAX_STOP)
        return api_fail(e, 400, INVALID, "invalid_value", "stop", "'stop' has %zu strings; tela takes at most %d", cnt,
                        API_MAX_STOP);
    for (size_t i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    g->n_stop = 0;
    g->stop = calloc(cnt + 1, sizeof *g->stop);
    if (!g->stop) return oom(e);
    const cJSON *it = cJSON_IsString(v) ? v : v->child;
    for (size_t i = 0; i < cnt; i++, it = it->next) {
        char nm[32] = "stop";
        if (!cJSON_IsString(v)) pname(nm, sizeof nm, "stop[%zu]", i);
        if (!cJSON_IsString(it)) return type_error(e, nm, "a string");
        if (!it->valuestring[0]) return api_fail(e, 400, INVALID, "invalid_value", nm, "'%s' must not be empty", nm);
        if (!(g->stop[i] = dup_bytes(it->valuestring, strlen(it->valuestring)))) return oom(e);
        g->n_stop = i + 1;
    }
    return 0;
}

/* Keys are token ids written as decimal strings ("50256"), values biases
 * from -100 to 100, added to the logits. */
static int parse_logit_bias(const cJSON *v, int32_t n_vocab, api_gen *g, api_error *e) {
    if (!cJSON_IsObject(v)) return type_error(e, "logit_bias", "an object mapping token ids to numbers");
    size_t cnt = (size_t)cJSON_GetArraySize(v);
    free(g->logit_bias);
    g->n_logit_bias = 0;
    g->logit_bias = malloc((cnt ? cnt : 1) * sizeof *g->logit_bias);
    if (!g->logit_bias) return oom(e);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        const char *k = it->string;
        char nm[96];
        pname(nm, sizeof nm, "logit_bias.%s", k);
        size_t kl = strlen(k);
        int digits = kl > 0 && kl <= 10;
        for (size_t i = 0; digits && i < kl; i++) digits = k[i] >= '0' && k[i] <= '9';
        long long id = digits ? strtoll(k, NULL, 10) : -1;
        if (!digits || id > INT32_MAX || (n_vocab > 0 && id >= n_vocab))
            return api_fail(e, 400, INVALID, "invalid_value", nm,
                            "logit_bias keys must be token ids (decimal strings below %d); got '%s'",
                            n_vocab > 0 ? n_vocab : INT32_MAX, k);
        double b;
        if (get_number(it, nm, -100.0, 100.0, &b, e)) return -1;
        g->logit_bias[g->n_logit_bias].token = (int32_t)id;
        g->logit_bias[g->n_logit_bias].bias = (float)b;
        g->n_logit_bias++;
    }
    return 0;
}

/* What parse_gen_field saw, for the checks between fields (gen_finish). */
typedef struct gen_seen {
    int chat;                    /* /v1/chat/completions (max_completion_tokens is a field) */
    int stream_options;
    int64_t max_tokens, max_completion_tokens;  /* 0: not given */
} gen_seen;

/* The fields both endpoints take. 1 when key is one of them (handled), 0
 * when it is not, -1 on an error. */
static int parse_prediction(const cJSON *v, api_gen *g, api_error *e);

static int parse_gen_field(const char *key, const cJSON *v, int32_t n_vocab, api_gen *g, gen_seen *seen,
                           api_error *e) {
    int64_t iv;
    if (!strcmp(key, "stream")) return get_bool(v, key, &g->stream, e) ? -1 : 1;
    if (!strcmp(key, "stream_options")) {
        if (!cJSON_IsObject(v)) return type_error(e, key, "an object");
        seen->stream_options = 1;
        g->include_usage = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (cJSON_IsNull(it)) continue;
            if (strcmp(it->string, "include_usage") != 0) return unknown_key(e, "stream_options.", it->string);
            if (get_bool(it, "stream_options.include_usage", &g->include_usage, e)) return -1;
        }
        return 1;
    }
    if (!strcmp(key, "max_tokens")) return get_int(v, key, 1, INT32_MAX, &seen->max_tokens, e) ? -1 : 1;
    if (seen->chat && !strcmp(key, "max_completion_tokens"))
        return get_int(v, key, 1, INT32_MAX, &seen->max_completion_tokens, e) ? -1 : 1;
    if (!strcmp(key, "n")) {
        if (get_int(v, key, 1, API_MAX_N, &iv, e)) return -1;
        g->n = (int32_t)iv;
        return 1;
    }
    if (!strcmp(key, "temperature")) return get_number(v, key, 0.0, 2.0, &g->temperature, e) ? -1 : 1;
    if (!strcmp(key, "top_p")) return get_number(v, key, 0.0, 1.0, &g->top_p, e) ? -1 : 1;
    if (!strcmp(key, "min_p")) return get_number(v, key, 0.0, 1.0, &g->min_p, e) ? -1 : 1;
    if (!strcmp(key, "presence_penalty")) return get_number(v, key, -2.0, 2.0, &g->presence_penalty, e) ? -1 : 1;
    if (!strcmp(key, "frequency_penalty")) return get_number(v, key, -2.0, 2.0, &g->frequency_penalty, e) ? -1 : 1;
    if (!strcmp(key, "top_k")) {
        if (get_int(v, key, 0, INT32_MAX, &iv, e)) return -1;
        g->top_k = (int32_t)iv;
        return 1;
    }
    if (!strcmp(key, "seed")) {
        /* OpenAI's seed is a 64-bit integer; negative ones wrap around.
         * The upper bound is the largest double below 2^63. */
        if (get_int(v, key, -9223372036854775808.0, 9223372036854774784.0, &iv, e)) return -1;
        g->seed = (uint64_t)iv;
        g->has_seed = 1;
        return 1;
    }
    if (!strcmp(key, "stop")) return parse_stop(v, g, e) ? -1 : 1;
    if (!strcmp(key, "logit_bias")) return parse_logit_bias(v, n_vocab, g, e) ? -1 : 1;
    if (!strcmp(key, "ignore_eos")) return get_bool(v, key, &g->ignore_eos, e) ? -1 : 1;
    if (!strcmp(key, "prediction")) return parse_prediction(v, g, e) ? -1 : 1;
    if (!strcmp(key, "user")) return cJSON_IsString(v) ? 1 : type_error(e, key, "a string");
    return 0;
}

static int parse_content(const cJSON *v, const char *name, char **out, api_error *e);

/* prediction: {"type": "content", "content": a string or text parts}. */
static int parse_prediction(const cJSON *v, api_gen *g, api_error *e) {
    if (cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return type_error(e, "prediction", "an object ({\"type\": \"content\", \"content\": ...})");
    const cJSON *type = NULL, *content = NULL, *it;
    cJSON_ArrayForEach(it, v) {
        if (!strcmp(it->string, "type")) type = it;
        else if (!strcmp(it->string, "content")) content = it;
        else return unknown_key(e, "prediction.", it->string);
    }
    if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "content") != 0)
        return api_fail(e, 400, INVALID, "invalid_value", "prediction.type", "'prediction.type' must be 'content'");
    if (!content)
        return api_fail(e, 400, INVALID, "missing_required_parameter", "prediction.content",
                        "'prediction.content' is required");
    free(g->prediction);
    g->prediction = NULL;
    return parse_content(content, "prediction.content", &g->prediction, e);
}

/* After all fields: the checks between them. */
static int gen_finish(api_gen *g, const gen_seen *seen, api_error *e) {
    if (seen->stream_options && !g->stream)
        return api_fail(e, 400, INVALID, "invalid_value", "stream_options",
                        "'stream_options' is only allowed when 'stream' is true");
    if (seen->max_tokens && seen->max_completion_tokens && seen->max_tokens != seen->max_completion_tokens)
        return api_fail(e, 400, INVALID, "invalid_value", "max_completion_tokens",
                        "'max_tokens' (%lld) and 'max_completion_tokens' (%lld) are both given, and differ",
                        (long long)seen->max_tokens, (long long)seen->max_completion_tokens);
    if (seen->max_completion_tokens) g->max_tokens = (int32_t)seen->max_completion_tokens;
    else if (seen->max_tokens) g->max_tokens = (int32_t)seen->max_tokens;
    return 0;
}

/* --------------------------------------------------------------- chat */

static int parse_role(const cJSON *v, const char *name, api_role *out, api_error *e) {
    if (!cJSON_IsString(v)) return type_error(e, name, "a string");
    const char *r = v->valuestring;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) *out = API_ROLE_SYSTEM;
    else if (!strcmp(r, "user")) *out = API_ROLE_USER;
    else if (!strcmp(r, "assistant")) *out = API_ROLE_ASSISTANT;
    else if (!strcmp(r, "tool") || !strcmp(r, "function"))
        return api_fail(e, 400, INVALID, "unsupported_value", name, "role '%s' is not supported by tela (no tools)", r);
    else
        return api_fail(e, 400, INVALID, "invalid_value", name,
                        "'%s' must be 'system', 'developer', 'user' or 'assistant' (got '%.40s')", name, r);
    return 0;
}

/* content: a string, or an array of {"type": "text", "text": ...} parts,
 * joined. */
static int parse_content(const cJSON *v, const char *name, char **out, api_error *e) {
    if (cJSON_IsString(v)) return get_string(v, name, out, e);
    if (!cJSON_IsArray(v)) return type_error(e, name, "a string or an array of content parts");
    size_t cnt = (size_t)cJSON_GetArraySize(v), total = 0, i = 0;
    const char **texts = malloc((cnt ? cnt : 1) * sizeof *texts);
    if (!texts) return oom(e);
    int rc = -1;
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        char nm[96], fn[112];
        pname(nm, sizeof nm, "%s[%zu]", name, i);
        if (!cJSON_IsObject(part)) {
            type_error(e, nm, "an object ({\"type\": \"text\", \"text\": ...})");
            goto done;
        }
        const cJSON *type = NULL, *text = NULL, *other = NULL, *it;
        cJSON_ArrayForEach(it, part) {
            if (!strcmp(it->string, "type")) type = it;
            else if (!strcmp(it->string, "text")) text = it;
            else if (!cJSON_IsNull(it) && !other) other = it;
        }
        pname(fn, sizeof fn, "%s.type", nm);
        if (!type) {
            api_fail(e, 400, INVALID, "missing_required_parameter", fn, "'%s' is required", fn);
            goto done;
        }
        if (!cJSON_IsString(type)) {
            type_error(e, fn, "a string");
            goto done;
        }
        if (strcmp(type->valuestring, "text") != 0) {
            api_fail(e, 400, INVALID, "unsupported_value", fn,
                     "content parts of type '%.40s' are not supported by tela (only 'text')", type->valuestring);
            goto done;
        }
        if (other) { /* checked after the type: an image part's image_url is not the first thing to report */
            pname(fn, sizeof fn, "%s.", nm);
            unknown_key(e, fn, other->string);
            goto done;
        }
        pname(fn, sizeof fn, "%s.text", nm);
        if (!text) {
            api_fail(e, 400, INVALID, "missing_required_parameter", fn, "'%s' is required", fn);
            goto done;
        }
        if (!cJSON_IsString(text)) {
            type_error(e, fn, "a string");
            goto done;
        }
        texts[i++] = text->valuestring;
        total += strlen(text->valuestring);
    }
    char *s = malloc(total + 1);
    if (!s) {
        oom(e);
        goto done;
    }
    size_t o = 0;
    for (size_t j = 0; j < i; j++) {
        size_t n = strlen(texts[j]);
        memcpy(s + o, texts[j], n);
        o += n;
    }
    s[o] = '\0';
    free(*out);
    *out = s;
    rc = 0;
done:
    free(texts);
    return rc;
}

static int parse_messages(const cJSON *v, api_chat_request *r, api_error *e) {
    if (!cJSON_IsArray(v)) return type_error(e, "messages", "an array of messages");
    size_t cnt = (size_t)cJSON_GetArraySize(v);
    if (cnt == 0) return api_fail(e, 400, INVALID, "invalid_value", "messages", "'messages' must not be empty");
    for (size_t i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    r->n_messages = 0;
    r->messages = calloc(cnt, sizeof *r->messages);
    if (!r->messages) return oom(e);
    size_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        char nm[64], fn[96];
        pname(nm, sizeof nm, "messages[%zu]", i);
        if (!cJSON_IsObject(m)) return type_error(e, nm, "an object with 'role' and 'content'");
        api_message *out = &r->messages[i];
        r->n_messages = i + 1;
        int have_role = 0, have_content = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, m) {
            const char *k = it->string;
            pname(fn, sizeof fn, "%s.%s", nm, k);
            if (!strcmp(k, "role")) {
                if (parse_role(it, fn, &out->role, e)) return -1;
                have_role = 1;
            } else if (!strcmp(k, "content")) {
                if (cJSON_IsNull(it)) continue;
                if (parse_content(it, fn, &out->content, e)) return -1;
                have_content = 1;
            } else if (!strcmp(k, "name")) {
                /* a participant's name: templates have no place for it */
                if (!cJSON_IsNull(it) && !cJSON_IsString(it)) return type_error(e, fn, "a string");
            } else if (!strcmp(k, "tool_calls") || !strcmp(k, "tool_call_id") || !strcmp(k, "function_call") ||
                       !strcmp(k, "audio") || !strcmp(k, "refusal")) {
                if (cJSON_IsNull(it) || (cJSON_IsArray(it) && !it->child)) continue;
                return unsupported(e, fn, NULL);
            } else if (!cJSON_IsNull(it)) {
                char pre[72];
                pname(pre, sizeof pre, "%s.", nm);
                return unknown_key(e, pre, k);
            }
        }
        if (!have_role) {
            pname(fn, sizeof fn, "%s.role", nm);
            return api_fail(e, 400, INVALID, "missing_required_parameter", fn, "'%s' is required", fn);
        }
        if (!have_content) {
            pname(fn, sizeof fn, "%s.content", nm);
            return api_fail(e, 400, INVALID, "missing_required_parameter", fn, "'%s' is required", fn);
        }
        i++;
    }
    return 0;
}

int api_parse_chat(const char *body, size_t len, int32_t n_vocab, api_chat_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    gen_init(&r->gen, 0);
    cJSON *root = parse_object(body, len, e);
    if (!root) return -1;
    int rc = -1, logprobs = 0, top_given = 0;
    gen_seen seen = {.chat = 1};
    int64_t top = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (cJSON_IsNull(it)) continue;
        int g = parse_gen_field(k, it, n_vocab, &r->gen, &seen, e);
        if (g < 0) goto done;
        if (g > 0) continue;
        if (!strcmp(k, "messages")) {
            if (parse_messages(it, r, e)) goto done;
        } else if (!strcmp(k, "model")) {
            if (get_string(it, k, &r->model, e)) goto done;
        } else if (!strcmp(k, "logprobs")) {
            if (get_bool(it, k, &logprobs, e)) goto done;
        } else if (!strcmp(k, "top_logprobs")) {
            if (get_int(it, k, 0, API_MAX_TOP_LOGPROBS, &top, e)) goto done;
            top_given = 1;
        } else if (!strcmp(k, "store") || !strcmp(k, "parallel_tool_calls")) {
            int b = 0;
            if (get_bool(it, k, &b, e)) goto done;
        } else if (!strcmp(k, "metadata")) {
            if (!cJSON_IsObject(it)) {
                type_error(e, k, "an object");
                goto done;
            }
        } else if (!strcmp(k, "service_tier")) {
            if (!cJSON_IsString(it)) {
                type_error(e, k, "a string");
                goto done;
            }
        } else if (!strcmp(k, "tools") || !strcmp(k, "functions")) {
            if (!cJSON_IsArray(it) || it->child) {
                unsupported(e, k, "tela does not call tools");
                goto done;
            }
        } else if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) {
            if (!cJSON_IsString(it) || strcmp(it->valuestring, "none") != 0) {
                unsupported(e, k, "tela does not call tools");
                goto done;
            }
        } else if (!strcmp(k, "response_format")) {
            const cJSON *t = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "type") : NULL;
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0) {
                unsupported(e, k, "only {\"type\": \"text\"}");
                goto done;
            }
        } else if (!strcmp(k, "modalities")) {
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 1 || !cJSON_IsString(it->child) ||
                strcmp(it->child->valuestring, "text") != 0) {
                unsupported(e, k, "only [\"text\"]");
                goto done;
            }
        } else if (!strcmp(k, "audio") || !strcmp(k, "prediction") || !strcmp(k, "reasoning_effort") ||
                   !strcmp(k, "web_search_options") || !strcmp(k, "best_of") || !strcmp(k, "echo") ||
                   !strcmp(k, "suffix")) {
            unsupported(e, k, NULL);
            goto done;
        } else {
            unknown_key(e, "", k);
            goto done;
        }
    }
    if (!r->messages) {
        api_fail(e, 400, INVALID, "missing_required_parameter", "messages", "'messages' is required");
        goto done;
    }
    if (top_given && !logprobs) {
        api_fail(e, 400, INVALID, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        goto done;
    }
    r->gen.logprobs = logprobs ? (int32_t)top : -1;
    if (gen_finish(&r->gen, &seen, e)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) api_chat_request_free(r);
    return rc;
}

void api_chat_request_free(api_chat_request *r) {
    if (!r) return;
    gen_free(&r->gen);
    for (size_t i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* --------------------------------------------------------- completions */

static void prompts_free(api_prompt *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(p[i].text);
        free(p[i].tokens);
    }
    free(p);
}

/* prompt: a string, an array of strings, an array of token ids, or an
 * array of arrays of token ids. */
static int parse_prompt(const cJSON *v, int32_t n_vocab, api_completion_request *r, api_error *e) {
    prompts_free(r->prompts, r->n_prompts);
    r->prompts = NULL;
    r->n_prompts = 0;
    if (cJSON_IsString(v)) {
        if (!(r->prompts = calloc(1, sizeof *r->prompts))) return oom(e);
        r->n_prompts = 1;
        return get_string(v, "prompt", &r->prompts[0].text, e);
    }
    const char *what = "a string, an array of strings, an array of token ids or an array of arrays of token ids";
    if (!cJSON_IsArray(v)) return type_error(e, "prompt", what);
    size_t cnt = (size_t)cJSON_GetArraySize(v);
    if (cnt == 0) return api_fail(e, 400, INVALID, "invalid_value", "prompt", "'prompt' must not be an empty array");
    const cJSON *first = v->child;
    if (cJSON_IsNumber(first)) { /* one prompt of token ids */
        if (!(r->prompts = calloc(1, sizeof *r->prompts))) return oom(e);
        r->n_prompts = 1;
        return get_tokens(v, "prompt", n_vocab, &r->prompts[0].tokens, &r->prompts[0].n_tokens, e);
    }
    if (!cJSON_IsString(first) && !cJSON_IsArray(first)) return type_error(e, "prompt", what);
    if (cnt > API_MAX_N)
        return api_fail(e, 400, INVALID, "invalid_value", "prompt", "'prompt' has %zu prompts; tela takes at most %d",
                        cnt, API_MAX_N);
    if (!(r->prompts = calloc(cnt, sizeof *r->prompts))) return oom(e);
    r->n_prompts = cnt;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        char nm[32];
        pname(nm, sizeof nm, "prompt[%zu]", i);
        if (cJSON_IsString(first)) {
            if (!cJSON_IsString(it)) return type_error(e, nm, "a string (as the first prompt is)");
            if (get_string(it, nm, &r->prompts[i].text, e)) return -1;
        } else {
            if (!cJSON_IsArray(it)) return type_error(e, nm, "an array of token ids (as the first prompt is)");
            if (cJSON_GetArraySize(it) == 0)
                return api_fail(e, 400, INVALID, "invalid_value", nm, "'%s' must not be empty", nm);
            if (get_tokens(it, nm, n_vocab, &r->prompts[i].tokens, &r->prompts[i].n_tokens, e)) return -1;
        }
        i++;
    }
    return 0;
}

int api_parse_completion(const char *body, size_t len, int32_t n_vocab, api_completion_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    gen_init(&r->gen, 16); /* the completions API's default length */
    cJSON *root = parse_object(body, len, e);
    if (!root) return -1;
    int rc = -1, have_prompt = 0;
    gen_seen seen = {.chat = 0};
    int64_t best_of = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (cJSON_IsNull(it)) continue;
        int g = parse_gen_field(k, it, n_vocab, &r->gen, &seen, e);
        if (g < 0) goto done;
        if (g > 0) continue;
        if (!strcmp(k, "prompt")) {
            if (parse_prompt(it, n_vocab, r, e)) goto done;
            have_prompt = 1;
        } else if (!strcmp(k, "model")) {
            if (get_string(it, k, &r->model, e)) goto done;
        } else if (!strcmp(k, "logprobs")) {
            int64_t lp;
            if (get_int(it, k, 0, API_MAX_LOGPROBS, &lp, e)) goto done;
            r->gen.logprobs = (int32_t)lp;
        } else if (!strcmp(k, "echo")) {
            int b = 0;
            if (get_bool(it, k, &b, e)) goto done;
            if (b) {
                unsupported(e, k, "the prompt is not returned");
                goto done;
            }
        } else if (!strcmp(k, "suffix")) {
            if (!cJSON_IsString(it) || it->valuestring[0]) {
                unsupported(e, k, "no insertion");
                goto done;
            }
        } else if (!strcmp(k, "best_of")) {
            if (get_int(it, k, 1, API_MAX_N, &best_of, e)) goto done;
        } else if (!strcmp(k, "max_completion_tokens") || !strcmp(k, "messages") || !strcmp(k, "tools") ||
                   !strcmp(k, "response_format") || !strcmp(k, "top_logprobs")) {
            unsupported(e, k, "not a field of /v1/completions");
            goto done;
        } else {
            unknown_key(e, "", k);
            goto done;
        }
    }
    if (!have_prompt) {
        api_fail(e, 400, INVALID, "missing_required_parameter", "prompt", "'prompt' is required");
        goto done;
    }
    if (best_of && best_of != r->gen.n) {
        unsupported(e, "best_of", "only best_of equal to n (every choice is returned)");
        goto done;
    }
    if ((size_t)r->gen.n * r->n_prompts > API_MAX_N) {
        api_fail(e, 400, INVALID, "invalid_value", "n", "n x prompts is %zu; tela takes at most %d",
                 (size_t)r->gen.n * r->n_prompts, API_MAX_N);
        goto done;
    }
    if (gen_finish(&r->gen, &seen, e)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) api_completion_request_free(r);
    return rc;
}

void api_completion_request_free(api_completion_request *r) {
    if (!r) return;
    gen_free(&r->gen);
    prompts_free(r->prompts, r->n_prompts);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------- tokenize, detokenize */

int api_parse_tokenize(const char *body, size_t len, api_tokenize_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    r->parse_special = 1;
    cJSON *root = parse_object(body, len, e);
    if (!root) return -1;
    int rc = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (cJSON_IsNull(it)) continue;
        if (!strcmp(k, "content")) {
            if (get_string(it, k, &r->content, e)) goto done;
            r->content_len = strlen(r->content);
        } else if (!strcmp(k, "add_special")) {
            if (get_bool(it, k, &r->add_special, e)) goto done;
        } else if (!strcmp(k, "parse_special")) {
            if (get_bool(it, k, &r->parse_special, e)) goto done;
        } else if (!strcmp(k, "with_pieces")) {
            if (get_bool(it, k, &r->with_pieces, e)) goto done;
        } else {
            unknown_key(e, "", k);
            goto done;
        }
    }
    if (!r->content) {
        api_fail(e, 400, INVALID, "missing_required_parameter", "content", "'content' is required");
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) api_tokenize_request_free(r);
    return rc;
}

void api_tokenize_request_free(api_tokenize_request *r) {
    if (!r) return;
    free(r->content);
    memset(r, 0, sizeof *r);
}

int api_parse_detokenize(const char *body, size_t len, int32_t n_vocab, api_detokenize_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    cJSON *root = parse_object(body, len, e);
    if (!root) return -1;
    int rc = -1, have = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (cJSON_IsNull(it)) continue;
        if (!strcmp(k, "tokens")) {
            if (get_tokens(it, k, n_vocab, &r->tokens, &r->n_tokens, e)) goto done;
            have = 1;
        } else {
            unknown_key(e, "", k);
            goto done;
        }
    }
    if (!have) {
        api_fail(e, 400, INVALID, "missing_required_parameter", "tokens", "'tokens' is required");
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) api_detokenize_request_free(r);
    return rc;
}

void api_detokenize_request_free(api_detokenize_request *r) {
    if (!r) return;
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
