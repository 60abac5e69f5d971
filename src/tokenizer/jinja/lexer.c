/* lexer.c: template source to tokens, with jinja2's whitespace rules
 * (trim_blocks, lstrip_blocks, the '-' and '+' markers), comments, raw
 * blocks, and Python's syntax for number and string literals. */
#include "tokenizer/jinja/jinja_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Operators, longest first so the lexer can match greedily. */
const char *const jinja_ops[] = {
    "**", "//", "==", "!=", ">=", "<=",
    "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
};

typedef struct lexer {
    jarena *a;
    jerr *err;
    const char *src;
    size_t n, pos;
    size_t cur_off;      /* position cursor for line/column numbers */
    int cur_line, cur_col;
    tela_jinja_options opt;
    token *toks;
    size_t ntoks, cap;
} lexer;

/* Line and column (1-based, columns in code points) of a source offset.
 * Tokens arrive in source order, so a cursor makes this linear overall. */
static void offset_to_lc(lexer *L, size_t off, int *line, int *col) {
    if (off < L->cur_off || L->cur_line == 0) {
        L->cur_off = 0;
        L->cur_line = L->cur_col = 1;
    }
    for (; L->cur_off < off && L->cur_off < L->n; L->cur_off++) {
        unsigned char c = (unsigned char)L->src[L->cur_off];
        if (c == '\n') {
            if (L->cur_line < INT_MAX) L->cur_line++;
            L->cur_col = 1;
        } else if ((c & 0xc0) != 0x80 && L->cur_col < INT_MAX) {
            L->cur_col++;
        }
    }
    *line = L->cur_line;
    *col = L->cur_col;
}

static _Noreturn void lex_fail(lexer *L, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void lex_fail(lexer *L, size_t off, const char *fmt, ...) {
    char body[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    int line, col;
    offset_to_lc(L, off, &line, &col);
    jinja_fail(L->err, TELA_ERR_FORMAT, line, col, "syntax error: %s", body);
}

static token *lex_push(lexer *L, ttype t, size_t off) {
    if (L->ntoks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        token *nt = jinja_alloc(L->a, jinja_size_mul(L->a, cap, sizeof(token)));
        if (L->ntoks) memcpy(nt, L->toks, L->ntoks * sizeof(token));
        L->toks = nt;
        L->cap = cap;
    }
    token *k = &L->toks[L->ntoks++];
    memset(k, 0, sizeof *k);
    k->t = t;
    offset_to_lc(L, off, &k->line, &k->col);
    return k;
}

/* Skips python whitespace (\s) from pos, returns the new position. */
static size_t skip_pyspace(const lexer *L, size_t pos) {
    return pos + jinja_u8_lspace(L->src + pos, L->n - pos);
}

static bool starts(const lexer *L, size_t pos, const char *s) {
    size_t k = strlen(s);
    return pos + k <= L->n && !memcmp(L->src + pos, s, k);
}

/* Emits a text token after applying the whitespace rules jinja2 applies to
 * the text before a tag: '-' strips all trailing whitespace; otherwise, with
 * lstrip_blocks, spaces and tabs between the last line start and a block or
 * comment tag go (when nothing else is on that line). */
static void lex_text(lexer *L, size_t start, size_t end, char sign, bool lstrip_ok, bool line_starting) {
    const char *t = L->src + start;
    size_t n = end - start;
    if (sign == '-') {
        n -= jinja_u8_rspace(t, n);
    } else if (sign != '+' && lstrip_ok && L->opt.lstrip_blocks) {
        size_t l_pos = n;
        while (l_pos > 0 && t[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || line_starting) && l_pos < n && jinja_u8_lspace(t + l_pos, n - l_pos) == n - l_pos) n = l_pos;
    }
    if (n) {
        token *k = lex_push(L, T_TEXT, start);
        k->s.p = t;
        k->s.n = n;
    }
}

/* Unescapes a string literal body the way jinja2 does (python's
 * unicode-escape codec): \n \t \\ \' \" \xHH \uHHHH \UHHHHHHHH, octal, and
 * unknown escapes kept as written. */
static jstr unescape(lexer *L, size_t off, const char *s, size_t n) {
    sbuf b;
    sb_init(&b, L->a, SIZE_MAX / 2);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            sb_addc(&b, c);
            continue;
        }
        char e = s[++i];
        switch (e) {
        case '\n': break;
        case '\\': sb_addc(&b, '\\'); break;
        case '\'': sb_addc(&b, '\''); break;
        case '"': sb_addc(&b, '"'); break;
        case 'a': sb_addc(&b, '\a'); break;
        case 'b': sb_addc(&b, '\b'); break;
        case 'f': sb_addc(&b, '\f'); break;
        case 'n': sb_addc(&b, '\n'); break;
        case 'r': sb_addc(&b, '\r'); break;
        case 't': sb_addc(&b, '\t'); break;
        case 'v': sb_addc(&b, '\v'); break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = i + 1 + (size_t)k < n ? hexval(s[i + 1 + k]) : -1;
                if (h < 0) lex_fail(L, off, "truncated \\%c escape in a string literal", e);
                cp = cp * 16 + (uint32_t)h;
            }
            i += (size_t)nd;
            if (cp > 0x10ffff) lex_fail(L, off, "illegal Unicode character in a string literal");
            if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
            jinja_sb_add_cp(&b, (int32_t)cp);
            break;
        }
        case 'N':
            lex_fail(L, off, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[++i] - '0');
                jinja_sb_add_cp(&b, (int32_t)cp);
            } else {
                sb_addc(&b, '\\');
                sb_addc(&b, e);
            }
        }
    }
    return sb_str(&b);
}

/* Lexes the expression tokens of a {{ }} or {% %} tag starting at pos, up to
 * and including its end marker. Returns the position after the tag and
 * whether the consumed end ended with a newline (jinja2's "line_starting"). */
static size_t lex_tag(lexer *L, size_t pos, bool block, bool *line_starting) {
    size_t tag_start = pos;
    int depth = 0;
    char stack[J_MAX_DEPTH];
    for (;;) {
        size_t p2 = skip_pyspace(L, pos);
        if (p2 >= L->n) lex_fail(L, tag_start, "unexpected end of template, the tag opened here is not closed");
        pos = p2;
        if (depth == 0) {
            size_t end = 0;
            if (block) {
                if (starts(L, pos, "+%}")) end = pos + 3;
                else if (starts(L, pos, "-%}")) end = skip_pyspace(L, pos + 3);
                else if (starts(L, pos, "%}")) {
                    end = pos + 2;
                    if (L->opt.trim_blocks && end < L->n && L->src[end] == '\n') end++;
                }
            } else {
                if (starts(L, pos, "-}}")) end = skip_pyspace(L, pos + 3);
                else if (starts(L, pos, "}}")) end = pos + 2;
            }
            if (end) {
                lex_push(L, block ? T_BLOCK_END : T_VAR_END, pos);
                *line_starting = L->src[end - 1] == '\n';
                return end;
            }
        }
        char c = L->src[pos];
        size_t start = pos;
        if (isdigit((unsigned char)c)) {
            /* integer or float, digits may be separated by '_' */
            size_t q = pos;
            bool is_float = false;
            if (c == '0' && q + 1 < L->n && strchr("bBoOxX", L->src[q + 1]) && L->src[q + 1]) {
                int base = strchr("bB", L->src[q + 1]) ? 2 : strchr("oO", L->src[q + 1]) ? 8 : 16;
                q += 2;
                uint64_t v = 0;
                size_t nd = 0;
                while (q < L->n) {
                    char d = L->src[q];
                    if (d == '_') { q++; continue; }
                    int h = hexval(d);
                    if (h < 0 || h >= base) break;
                    if (v > (UINT64_MAX - (uint64_t)h) / (uint64_t)base || v * (uint64_t)base + (uint64_t)h > INT64_MAX)
                        lex_fail(L, start, "integer literal too large");
                    v = v * (uint64_t)base + (uint64_t)h;
                    nd++;
                    q++;
                }
                if (!nd) lex_fail(L, start, "invalid integer literal");
                token *k = lex_push(L, T_INT, start);
                k->i = (int64_t)v;
                pos = q;
                continue;
            }
            while (q < L->n && (isdigit((unsigned char)L->src[q]) || (L->src[q] == '_' && q + 1 < L->n && isdigit((unsigned char)L->src[q + 1])))) q++;
            bool after_dot = start > 0 && L->src[start - 1] == '.';
            size_t fq = q;
            if (!after_dot && fq + 1 < L->n && L->src[fq] == '.' && isdigit((unsigned char)L->src[fq + 1])) {
                fq++;
                while (fq < L->n && (isdigit((unsigned char)L->src[fq]) || (L->src[fq] == '_' && fq + 1 < L->n && isdigit((unsigned char)L->src[fq + 1])))) fq++;
                is_float = true;
            }
            if (!after_dot && fq < L->n && (L->src[fq] == 'e' || L->src[fq] == 'E')) {
                size_t eq = fq + 1;
                if (eq < L->n && (L->src[eq] == '+' || L->src[eq] == '-')) eq++;
                if (eq < L->n && isdigit((unsigned char)L->src[eq])) {
                    while (eq < L->n && (isdigit((unsigned char)L->src[eq]) || (L->src[eq] == '_' && eq + 1 < L->n && isdigit((unsigned char)L->src[eq + 1])))) eq++;
                    fq = eq;
                    is_float = true;
                }
            }
            char num[128];
            size_t nn = 0;
            size_t stop = is_float ? fq : q;
            for (size_t i = start; i < stop; i++)
                if (L->src[i] != '_') {
                    if (nn + 1 >= sizeof num) lex_fail(L, start, "number literal too long");
                    num[nn++] = L->src[i];
                }
            num[nn] = 0;
            if (is_float) {
                token *k = lex_push(L, T_FLOAT, start);
                k->f = strtod(num, NULL);
            } else {
                errno = 0;
                char *endp;
                unsigned long long v = strtoull(num, &endp, 10);
                if (errno || v > INT64_MAX) lex_fail(L, start, "integer literal too large");
                token *k = lex_push(L, T_INT, start);
                k->i = (int64_t)v;
            }
            pos = stop;
            continue;
        }
        if (isalpha((unsigned char)c) || c == '_') {
            size_t q = pos;
            while (q < L->n && (isalnum((unsigned char)L->src[q]) || L->src[q] == '_')) q++;
            token *k = lex_push(L, T_NAME, start);
            k->s.p = L->src + pos;
            k->s.n = q - pos;
            pos = q;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t q = pos + 1;
            while (q < L->n && L->src[q] != c) q += L->src[q] == '\\' ? 2 : 1;
            if (q >= L->n) lex_fail(L, start, "unterminated string literal");
            token *k = lex_push(L, T_STRING, start);
            k->s = unescape(L, start, L->src + pos + 1, q - pos - 1);
            pos = q + 1;
            continue;
        }
        int op = -1;
        for (int i = 0; i < OP_COUNT; i++)
            if (starts(L, pos, jinja_ops[i])) { op = i; break; }
        if (op < 0) {
            if ((unsigned char)c >= 0x80) lex_fail(L, start, "unexpected character (non-ASCII) in a tag");
            lex_fail(L, start, "unexpected character '%c'", c);
        }
        if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
            if (depth >= J_MAX_DEPTH) lex_fail(L, start, "brackets nested too deeply");
            stack[depth++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
        } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
            char want = jinja_ops[op][0];
            if (depth == 0) lex_fail(L, start, "unexpected '%c'", want);
            if (stack[depth - 1] != want) lex_fail(L, start, "unexpected '%c', expected '%c'", want, stack[depth - 1]);
            depth--;
        }
        token *k = lex_push(L, T_OP, start);
        k->op = op;
        pos += strlen(jinja_ops[op]);
    }
}

static void lex_all(lexer *L) {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < L->n) {
        /* find the next tag start */
        size_t q = pos;
        char kind = 0;
        while (q + 1 < L->n) {
            if (L->src[q] == '{' && (L->src[q + 1] == '{' || L->src[q + 1] == '%' || L->src[q + 1] == '#')) {
                kind = L->src[q + 1];
                break;
            }
            q++;
        }
        if (!kind) {
            lex_text(L, pos, L->n, 0, false, line_starting);
            break;
        }
        size_t after = q + 2;
        char sign = 0;
        if (after < L->n && (L->src[after] == '-' || L->src[after] == '+')) sign = L->src[after++];
        /* {% raw %} ... {% endraw %} */
        if (kind == '%') {
            size_t r = skip_pyspace(L, after);
            if (starts(L, r, "raw") && !(r + 3 < L->n && (isalnum((unsigned char)L->src[r + 3]) || L->src[r + 3] == '_'))) {
                size_t r2 = skip_pyspace(L, r + 3);
                size_t body = 0;
                if (starts(L, r2, "-%}")) body = skip_pyspace(L, r2 + 3);
                else if (starts(L, r2, "%}")) body = r2 + 2;
                if (body) {
                    lex_text(L, pos, q, sign, true, line_starting);
                    /* find {%[-+]? endraw [-+]?%} */
                    size_t s = body;
                    for (;;) {
                        if (s + 1 >= L->n) lex_fail(L, q, "missing end of raw directive");
                        if (L->src[s] == '{' && L->src[s + 1] == '%') {
                            size_t e = s + 2;
                            char esign = 0;
                            if (e < L->n && (L->src[e] == '-' || L->src[e] == '+')) esign = L->src[e++];
                            e = skip_pyspace(L, e);
                            if (starts(L, e, "endraw")) {
                                e = skip_pyspace(L, e + 6);
                                size_t end = 0;
                                if (starts(L, e, "+%}")) end = e + 3;
                                else if (starts(L, e, "-%}")) end = skip_pyspace(L, e + 3);
                                else if (starts(L, e, "%}")) {
                                    end = e + 2;
                                    if (L->opt.trim_blocks && end < L->n && L->src[end] == '\n') end++;
                                }
                                if (end) {
                                    bool ls = L->src[body - 1] == '\n';
                                    lex_text(L, body, s, esign, true, ls);
                                    line_starting = L->src[end - 1] == '\n';
                                    pos = end;
                                    break;
                                }
                            }
                        }
                        s++;
                    }
                    continue;
                }
            }
        }
        lex_text(L, pos, q, sign, kind != '{', line_starting);
        if (kind == '#') {
            size_t s = after;
            size_t end = 0;
            for (; s + 1 < L->n; s++) {
                if (L->src[s] == '+' && starts(L, s + 1, "#}")) { end = s + 3; break; }
                if (L->src[s] == '-' && starts(L, s + 1, "#}")) { end = skip_pyspace(L, s + 3); break; }
                if (L->src[s] == '#' && L->src[s + 1] == '}') {
                    end = s + 2;
                    if (L->opt.trim_blocks && end < L->n && L->src[end] == '\n') end++;
                    break;
                }
            }
            if (!end) lex_fail(L, q, "missing end of comment tag");
            line_starting = L->src[end - 1] == '\n';
            pos = end;
            continue;
        }
        lex_push(L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, q);
        pos = lex_tag(L, after, kind == '%', &line_starting);
    }
    lex_push(L, T_EOF, L->n);
}

/* Splits src (n bytes, already normalized: see tela_jinja_parse) into
 * tokens in the arena, ending with T_EOF; errors longjmp through err. */
void jinja_lex(jarena *a, jerr *err, const char *src, size_t n, const tela_jinja_options *opt, token **toks,
               size_t *ntoks) {
    lexer L;
    memset(&L, 0, sizeof L);
    L.a = a;
    L.err = err;
    L.opt = *opt;
    L.src = src;
    L.n = n;
    lex_all(&L);
    *toks = L.toks;
    *ntoks = L.ntoks;
}
