/* value.c: the ground floor of the Jinja interpreter: errors (jinja_fail),
 * the arenas everything lives in, growable strings, UTF-8 decoding, the
 * value model (lists, dicts, equality, truth, type names) and Python's
 * repr() of numbers and strings. */
#include "tokenizer/jinja/jinja_internal.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ errors */

_Noreturn void jinja_fail(jerr *e, tela_status code, int line, int col, const char *fmt, ...) {
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(e->msg, sizeof e->msg, "%s: line %d, column %d: %s", e->name, line, col, body);
    else
        snprintf(e->msg, sizeof e->msg, "%s: %s", e->name, body);
    e->code = code;
    longjmp(e->jb, 1);
}

/* ------------------------------------------------------------ arena */

void *jinja_alloc(jarena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (n == 0) n = sizeof(max_align_t);
    jblock *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 - sizeof(jblock) ? n : 65536 - sizeof(jblock);
        if (b && size < b->size * 2 && b->size * 2 <= ((size_t)4 << 20)) size = b->size * 2;
        if (a->total + size > a->limit)
            jinja_fail(a->err, TELA_ERR_UNSUPPORTED, 0, 0, "the template needs more than %zu MiB of memory",
                       a->limit >> 20);
        b = malloc(sizeof(jblock) + size);
        if (!b) jinja_fail(a->err, TELA_ERR_NOMEM, 0, 0, "out of memory");
        b->next = a->head;
        b->size = size;
        b->used = 0;
        a->head = b;
        a->total += size;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

void jinja_arena_free(jarena *a) {
    jblock *b = a->head;
    while (b) {
        jblock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}

char *jinja_strndup(jarena *a, const char *s, size_t n) {
    char *p = jinja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Overflow-checked size arithmetic for allocations. */
size_t jinja_size_mul(jarena *a, size_t x, size_t y) {
    if (y && x > SIZE_MAX / y) jinja_fail(a->err, TELA_ERR_UNSUPPORTED, 0, 0, "size overflow");
    return x * y;
}

/* ------------------------------------------------------------ strings */

void jinja_sb_reserve(sbuf *b, size_t extra) {
    if (extra > b->max || b->n > b->max - extra)
        jinja_fail(b->a->err, TELA_ERR_UNSUPPORTED, 0, 0, "the rendered text exceeds %zu bytes", b->max);
    size_t need = b->n + extra;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = jinja_alloc(b->a, cap);
    if (b->n) memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
}

void jinja_sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_add(b, tmp, (size_t)n);
        return;
    }
    jinja_sb_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

/* ------------------------------------------------------------ UTF-8 */

/* Decodes one code point at s[*i] (advancing *i); an invalid byte decodes as
 * itself (0x80..0xff) so every byte string has a defined length. */
int32_t jinja_u8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = n - *i;
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(u, (utf8proc_ssize_t)(left > 4 ? 4 : left), &cp);
    if (k <= 0) {
        (*i)++;
        return u[0];
    }
    *i += (size_t)k;
    return cp;
}

void jinja_sb_add_cp(sbuf *b, int32_t cp) {
    unsigned char tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    if (k <= 0) {
        tmp[0] = (unsigned char)cp;
        k = 1;
    }
    sb_add(b, (const char *)tmp, (size_t)k);
}

size_t jinja_u8_len(jstr s) {
    size_t n = 0, i = 0;
    while (i < s.n) {
        if ((unsigned char)s.p[i] < 0x80) i++;
        else jinja_u8_next(s.p, s.n, &i);
        n++;
    }
    return n;
}

/* Python's str.isspace(): the characters str.strip() and str.split() remove. */
bool jinja_py_isspace(int32_t c) {
    switch (c) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1c: case 0x1d: case 0x1e: case 0x1f: case 0x85: case 0xa0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
        return true;
    default:
        return c >= 0x2000 && c <= 0x200a;
    }
}

/* Length of the whitespace run that ends at s[n] (for rstrip). */
size_t jinja_u8_rspace(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80 && end - start < 4) start--;
        size_t i = start;
        int32_t c = jinja_u8_next(s, end, &i);
        if (i != end || !jinja_py_isspace(c)) break;
        end = start;
    }
    return n - end;
}

size_t jinja_u8_lspace(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        if (!jinja_py_isspace(jinja_u8_next(s, n, &j))) break;
        i = j;
    }
    return i;
}

/* ------------------------------------------------------------ values */

jlist *jinja_list_new(jarena *a, size_t cap) {
    jlist *l = jinja_alloc(a, sizeof *l);
    memset(l, 0, sizeof *l);
    if (cap) {
        l->v = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        l->cap = cap;
    }
    return l;
}

void jinja_list_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jdict *jinja_dict_new(jarena *a) {
    jdict *d = jinja_alloc(a, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}

jv *jinja_dict_find(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jinja_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jinja_dict_finds(const jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, key, n)) return &d->v[i];
    return NULL;
}

/* Sets key to v, replacing an existing entry in place (python dicts keep the
 * first insertion position). */
void jinja_dict_set(jarena *a, jdict *d, jv key, jv v) {
    jv *slot = jinja_dict_find(d, key);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        jv *nv = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = v;
    d->n++;
}

bool jinja_eq(jv a, jv b) {
    if (jv_isnum(a) && jv_isnum(b)) {
        if (jv_isint(a) && jv_isint(b)) return jv_ival(a) == jv_ival(b);
        return jv_fval(a) == jv_fval(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || !memcmp(a.u.s.p, b.u.s.p, a.u.s.n));
    case JV_LIST:
        if (a.u.l == b.u.l) return true;
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->gen || b.u.l->gen || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jinja_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jinja_dict_find(b.u.d, a.u.d->k[i]);
            if (!o || !jinja_eq(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_LOOP: return a.u.loop == b.u.loop;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jinja_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->gen || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

/* Python's type name, for error messages. */
const char *jinja_typename(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->gen ? "generator" : v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "builtin_function_or_method";
    }
    return "object";
}

/* ---- number formatting as Python prints numbers */

/* repr(float): the shortest digit string that reads back to the same double,
 * in fixed notation for exponents -4..15 and scientific notation otherwise. */
void jinja_py_float_repr(double x, char *out, size_t cap) {
    if (isnan(x)) { snprintf(out, cap, "nan"); return; }
    if (isinf(x)) { snprintf(out, cap, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { snprintf(out, cap, signbit(x) ? "-0.0" : "0.0"); return; }
    char buf[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (p > 17) p = 17;
    snprintf(buf, sizeof buf, "%.*e", p - 1, x);
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0;
    const char *s = buf;
    bool neg = false;
    if (*s == '-') { neg = true; s++; }
    for (; *s && *s != 'e'; s++)
        if (isdigit((unsigned char)*s) && nd < 20) digits[nd++] = *s;
    int e = *s == 'e' ? atoi(s + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char res[64];
    size_t k = 0;
    if (neg) res[k++] = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) res[k++] = i < nd ? digits[i] : '0';
            res[k++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) res[k++] = digits[i];
            else
                res[k++] = '0';
        } else {
            res[k++] = '0';
            res[k++] = '.';
            for (int i = 0; i < -e - 1; i++) res[k++] = '0';
            for (int i = 0; i < nd; i++) res[k++] = digits[i];
        }
        res[k] = 0;
    } else {
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++) res[k++] = digits[i];
        }
        res[k] = 0;
        snprintf(res + k, sizeof res - k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(out, cap, "%s", res);
}

/* Python's repr() of a string: single quotes unless the text has a single
 * quote and no double quote; escapes for backslash, the quote, control and
 * non-printable characters. */
void jinja_py_str_repr(sbuf *b, jstr s) {
    bool sq = memchr(s.p, '\'', s.n) != NULL, dq = memchr(s.p, '"', s.n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_addc(b, q);
    size_t i = 0;
    while (i < s.n) {
        size_t start = i;
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        if (c == q || c == '\\') { sb_addc(b, '\\'); sb_addc(b, (char)c); }
        else if (c == '\n') sb_adds(b, "\\n");
        else if (c == '\r') sb_adds(b, "\\r");
        else if (c == '\t') sb_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7f) jinja_sb_printf(b, "\\x%02x", (unsigned)c);
        else if (c < 0x80) sb_addc(b, (char)c);
        else {
            utf8proc_category_t cat = utf8proc_category(c);
            bool printable = !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                               cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
                               cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                               cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (printable) sb_add(b, s.p + start, i - start);
            else if (c <= 0xff) jinja_sb_printf(b, "\\x%02x", (unsigned)c);
            else if (c <= 0xffff) jinja_sb_printf(b, "\\u%04x", (unsigned)c);
            else jinja_sb_printf(b, "\\U%08x", (unsigned)c);
        }
    }
    sb_addc(b, q);
}

/* markupsafe.escape(): the five HTML-special characters. */
jstr jinja_html_escape(jarena *a, jstr s) {
    sbuf b;
    sb_init(&b, a, SIZE_MAX / 2);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.p[i]) {
        case '&': sb_adds(&b, "&amp;"); break;
        case '<': sb_adds(&b, "&lt;"); break;
        case '>': sb_adds(&b, "&gt;"); break;
        case '"': sb_adds(&b, "&#34;"); break;
        case '\'': sb_adds(&b, "&#39;"); break;
        default: sb_addc(&b, s.p[i]);
        }
    }
    if (!b.p) return (jstr){"", 0};
    return sb_str(&b);
}
