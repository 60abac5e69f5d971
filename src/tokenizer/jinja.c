/* jinja.c: the Jinja2 subset interpreter behind chat templates: a lexer that
 * applies jinja2's whitespace rules, a recursive-descent parser building an
 * AST, and a tree-walking evaluator over a small JSON-like value model.
 *
 * Memory: the AST lives in an arena owned by the template; everything a
 * render creates lives in a second arena freed when the render ends. Values
 * are immutable (as in HF's ImmutableSandboxedEnvironment) except namespace
 * objects, so values can share strings and lists freely.
 *
 * Errors: parse and render errors longjmp back to the API entry point with a
 * message naming the template line and column; the arenas make that safe
 * (nothing else is allocated while a template runs). */
#include "tokenizer/jinja.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "util/error.h"

/* Limits that keep a hostile template from crashing or hanging the caller. */
#define J_MAX_DEPTH 200              /* parser nesting and evaluator recursion */
#define J_MAX_MACRO_DEPTH 100        /* nested macro calls */
#define J_MAX_STEPS 10000000ull      /* statements + loop iterations per render */
#define J_DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define J_DEFAULT_MAX_MEMORY ((size_t)1 << 30)
#define J_MAX_SOURCE ((size_t)16 << 20)

/* ------------------------------------------------------------ errors */

typedef struct jerr {
    jmp_buf jb;
    tela_status code;
    char msg[768];
    const char *name;   /* template name for messages */
} jerr;

static _Noreturn void jinja_fail(jerr *e, tela_status code, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static _Noreturn void jinja_fail(jerr *e, tela_status code, int line, int col, const char *fmt, ...) {
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

typedef struct jblock {
    struct jblock *next;
    size_t size, used;
    max_align_t data[];
} jblock;

typedef struct jarena {
    jblock *head;
    size_t total, limit;
    jerr *err;
} jarena;

static void *jinja_alloc(jarena *a, size_t n) {
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

static void jinja_arena_free(jarena *a) {
    jblock *b = a->head;
    while (b) {
        jblock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}

static char *jinja_strndup(jarena *a, const char *s, size_t n) {
    char *p = jinja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Overflow-checked size arithmetic for allocations. */
static size_t jinja_size_mul(jarena *a, size_t x, size_t y) {
    if (y && x > SIZE_MAX / y) jinja_fail(a->err, TELA_ERR_UNSUPPORTED, 0, 0, "size overflow");
    return x * y;
}

/* ------------------------------------------------------------ strings */

typedef struct jstr {
    const char *p;
    size_t n;
} jstr;

/* A growable byte buffer inside an arena (old storage is abandoned when it
 * grows, which at most doubles the memory a render uses). */
typedef struct sbuf {
    jarena *a;
    char *p;
    size_t n, cap, max;
} sbuf;

static void sb_init(sbuf *b, jarena *a, size_t max) {
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
    b->max = max;
}

static void jinja_sb_reserve(sbuf *b, size_t extra) {
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

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (!n) return;
    jinja_sb_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_adds(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_addc(sbuf *b, char c) { sb_add(b, &c, 1); }

static void jinja_sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jinja_sb_printf(sbuf *b, const char *fmt, ...) {
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

static jstr sb_str(sbuf *b) {
    jstr s = {b->p ? b->p : "", b->n};
    return s;
}

/* ------------------------------------------------------------ UTF-8 */

/* Decodes one code point at s[*i] (advancing *i); an invalid byte decodes as
 * itself (0x80..0xff) so every byte string has a defined length. */
static int32_t jinja_u8_next(const char *s, size_t n, size_t *i) {
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

static void jinja_sb_add_cp(sbuf *b, int32_t cp) {
    unsigned char tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    if (k <= 0) {
        tmp[0] = (unsigned char)cp;
        k = 1;
    }
    sb_add(b, (const char *)tmp, (size_t)k);
}

static size_t jinja_u8_len(jstr s) {
    size_t n = 0, i = 0;
    while (i < s.n) {
        if ((unsigned char)s.p[i] < 0x80) i++;
        else jinja_u8_next(s.p, s.n, &i);
        n++;
    }
    return n;
}

/* Python's str.isspace(): the characters str.strip() and str.split() remove. */
static bool jinja_py_isspace(int32_t c) {
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
static size_t jinja_u8_rspace(const char *s, size_t n) {
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

static size_t jinja_u8_lspace(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        if (!jinja_py_isspace(jinja_u8_next(s, n, &j))) break;
        i = j;
    }
    return i;
}

/* ------------------------------------------------------------ values */

typedef enum jvtype {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_DICT, JV_NS, JV_LOOP, JV_MACRO, JV_FUNC
} jvtype;

struct jlist;
struct jdict;
struct jloop;
struct jmacro;

typedef struct jv {
    jvtype t;
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;               /* JV_STR; for JV_UNDEF the hint message (p may be NULL) */
        struct jlist *l;
        struct jdict *d;      /* JV_DICT and JV_NS */
        struct jloop *loop;
        struct jmacro *m;
        int fn;               /* JV_FUNC: a builtin id */
    } u;
    /* JV_STR: a markupsafe.Markup string (from |safe or |escape): adding a
     * plain string to it HTML-escapes the plain one, as in jinja2 */
    bool markup;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
    bool tuple;   /* prints as (a, b) */
    bool gen;     /* a python generator: always true, has no length */
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
} jdict;

static const jv J_NONE = {JV_NONE, {0}, false};

static jv jv_bool(bool b) { jv v = {JV_BOOL, {0}, false}; v.u.b = b; return v; }
static jv jv_int(int64_t i) { jv v = {JV_INT, {0}, false}; v.u.i = i; return v; }
static jv jv_float(double f) { jv v = {JV_FLOAT, {0}, false}; v.u.f = f; return v; }
static jv jv_strn(const char *p, size_t n) { jv v = {JV_STR, {0}, false}; v.u.s.p = p; v.u.s.n = n; return v; }
static jv jv_str(jstr s) { return jv_strn(s.p, s.n); }
static jv jv_cstr(const char *p) { return jv_strn(p, strlen(p)); }
static jv jv_undef(const char *hint) {
    jv v = {JV_UNDEF, {0}, false};
    v.u.s.p = hint;
    v.u.s.n = hint ? strlen(hint) : 0;
    return v;
}

static bool jv_isnum(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static bool jv_isint(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t jv_ival(jv v) { return v.t == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static double jv_fval(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}

static jlist *jinja_list_new(jarena *a, size_t cap) {
    jlist *l = jinja_alloc(a, sizeof *l);
    memset(l, 0, sizeof *l);
    if (cap) {
        l->v = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        l->cap = cap;
    }
    return l;
}

static void jinja_list_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jinja_alloc(a, jinja_size_mul(a, cap, sizeof(jv)));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static jv jv_list(jlist *l) { jv v = {JV_LIST, {0}, false}; v.u.l = l; return v; }
static jv jv_dict(jdict *d) { jv v = {JV_DICT, {0}, false}; v.u.d = d; return v; }

static jdict *jinja_dict_new(jarena *a) {
    jdict *d = jinja_alloc(a, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}

static bool jinja_eq(jv a, jv b);

static jv *jinja_dict_find(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jinja_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

static jv *jinja_dict_finds(const jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, key, n)) return &d->v[i];
    return NULL;
}

/* Sets key to v, replacing an existing entry in place (python dicts keep the
 * first insertion position). */
static void jinja_dict_set(jarena *a, jdict *d, jv key, jv v) {
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

static bool jinja_eq(jv a, jv b) {
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

static bool jinja_truthy(jv v) {
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
static const char *jinja_typename(jv v) {
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
static void jinja_py_float_repr(double x, char *out, size_t cap) {
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
static void jinja_py_str_repr(sbuf *b, jstr s) {
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
static jstr jinja_html_escape(jarena *a, jstr s) {
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

static jv jv_markup(jstr s) {
    jv v = jv_str(s);
    v.markup = true;
    return v;
}

/* ------------------------------------------------------------ lexer */

typedef enum ttype {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_INT, T_FLOAT, T_STRING, T_OP
} ttype;

/* Operators, longest first so the lexer can match greedily. */
static const char *const jinja_ops[] = {
    "**", "//", "==", "!=", ">=", "<=",
    "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
};
enum {
    OP_POW, OP_FLOORDIV, OP_EQ, OP_NE, OP_GE, OP_LE,
    OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN,
    OP_LBRACE, OP_RBRACE, OP_GT, OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
    OP_COUNT,
    /* comparison operators that are spelled as names */
    OP_IN = 100, OP_NOTIN
};

typedef struct token {
    ttype t;
    int op;
    int line, col;
    jstr s;          /* NAME, STRING (unescaped), TEXT */
    int64_t i;
    double f;
} token;

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

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
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
static void jinja_lex(jarena *a, jerr *err, const char *src, size_t n, const tela_jinja_options *opt, token **toks,
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

/* ------------------------------------------------------------ AST */

typedef enum nkind {
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_COND, E_CMP, E_CONCAT,
    /* statements */
    S_TEXT, S_OUTPUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK,
    S_WITH, S_BREAK, S_CONTINUE, S_BODY
} nkind;

typedef struct node node;

typedef struct nlist {
    node **v;
    size_t n;
} nlist;

/* Call arguments: positional, then keyword. */
typedef struct nargs {
    nlist pos;
    const char **kwn;
    node **kwv;
    size_t nkw;
} nargs;

struct node {
    nkind k;
    int line, col;
    int op;               /* E_BIN operator; E_TEST: 1 if negated; S_MACRO/S_CALLBLOCK: uses varargs (1), kwargs (2) */
    bool unknown;         /* E_FILTER/E_TEST naming no filter/test: an error if ever evaluated */
    const char *name;     /* E_NAME, E_ATTR, E_FILTER, E_TEST, S_MACRO, S_SET target */
    jv lit;               /* E_LIT, S_TEXT */
    node *a, *b, *c;      /* operands; E_SLICE: object a, and start/stop/step in args.pos */
    nlist items;          /* E_LIST/E_TUPLE/E_CONCAT items, E_DICT keys, E_CMP operands */
    nlist vals;           /* E_DICT values */
    int *ops;             /* E_CMP operators */
    nargs args;           /* E_CALL, E_FILTER, E_TEST; S_MACRO parameters (names in kwn, defaults in kwv) */
    nlist body, else_body;
    const char **targets; /* S_FOR and S_SET names; S_WITH names */
    size_t ntargets;
};

/* ------------------------------------------------------------ parser */

typedef struct parser {
    jarena *a;
    jerr *err;
    token *t;
    size_t i, n;
    int depth;
    int loop_depth;
} parser;

/* ---- the filters and tests there are (filters.c implements them) */

static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "unique", "upper", "wordcount", NULL,
};

static bool jinja_known_filter(const char *name) {
    for (size_t i = 0; filter_names[i]; i++)
        if (!strcmp(filter_names[i], name)) return true;
    return false;
}

static const char *const test_names[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">=",
    "filter", "test", NULL,
};

static bool jinja_known_test(const char *name) {
    for (size_t i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name)) return true;
    return false;
}

static _Noreturn void parse_fail(parser *P, const token *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void parse_fail(parser *P, const token *at, const char *fmt, ...) {
    char body[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    jinja_fail(P->err, TELA_ERR_FORMAT, at->line, at->col, "syntax error: %s", body);
}

static const token *peek(parser *P) { return &P->t[P->i]; }
static const token *peek2(parser *P) { return &P->t[P->i + 1 < P->n ? P->i + 1 : P->i]; }
static const token *next(parser *P) {
    const token *k = &P->t[P->i];
    if (P->i + 1 < P->n) P->i++;
    return k;
}

static bool is_op(const token *k, int op) { return k->t == T_OP && k->op == op; }
static bool is_name(const token *k, const char *s) {
    return k->t == T_NAME && k->s.n == strlen(s) && !memcmp(k->s.p, s, k->s.n);
}

static const char *tok_desc(const token *k, char *buf, size_t cap) {
    switch (k->t) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_NAME: snprintf(buf, cap, "'%.*s'", (int)(k->s.n > 40 ? 40 : k->s.n), k->s.p); return buf;
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_STRING: return "string";
    case T_OP: snprintf(buf, cap, "'%s'", jinja_ops[k->op]); return buf;
    }
    return "token";
}

static void expect_op(parser *P, int op) {
    const token *k = peek(P);
    if (!is_op(k, op)) {
        char buf[64];
        parse_fail(P, k, "expected '%s', found %s", jinja_ops[op], tok_desc(k, buf, sizeof buf));
    }
    next(P);
}

static void expect_end(parser *P, ttype t) {
    const token *k = peek(P);
    if (k->t != t) {
        char buf[64];
        parse_fail(P, k, "expected %s, found %s", t == T_BLOCK_END ? "'%}'" : "'}}'", tok_desc(k, buf, sizeof buf));
    }
    next(P);
}

static const char *expect_name(parser *P) {
    const token *k = peek(P);
    if (k->t != T_NAME) {
        char buf[64];
        parse_fail(P, k, "expected a name, found %s", tok_desc(k, buf, sizeof buf));
    }
    next(P);
    return jinja_strndup(P->a, k->s.p, k->s.n);
}

static node *mk(parser *P, nkind kind, const token *at) {
    node *e = jinja_alloc(P->a, sizeof *e);
    memset(e, 0, sizeof *e);
    e->k = kind;
    e->line = at->line;
    e->col = at->col;
    return e;
}

/* A growable node list used while parsing. */
typedef struct nvec {
    node **v;
    size_t n, cap;
} nvec;

static void nv_push(parser *P, nvec *v, node *e) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        node **nv = jinja_alloc(P->a, jinja_size_mul(P->a, cap, sizeof(node *)));
        if (v->n) memcpy(nv, v->v, v->n * sizeof(node *));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = e;
}

static nlist nv_list(nvec *v) {
    nlist l = {v->v, v->n};
    return l;
}

static void enter(parser *P) {
    if (++P->depth > J_MAX_DEPTH) parse_fail(P, peek(P), "the template is nested too deeply");
}

static node *parse_expr(parser *P);
static node *parse_or(parser *P);
static node *parse_unary(parser *P, bool with_filter);
static node *parse_primary(parser *P);
static node *parse_postfix(parser *P, node *e);
static node *parse_tuple(parser *P, bool with_cond, bool explicit_parens);

static void parse_call_args(parser *P, nargs *out) {
    const token *open = peek(P);
    expect_op(P, OP_LPAREN);
    nvec pos = {0}, kwv = {0};
    const char **kwn = NULL;
    size_t nkw = 0, capkw = 0;
    while (!is_op(peek(P), OP_RPAREN)) {
        if (pos.n + nkw > 0) {
            expect_op(P, OP_COMMA);
            if (is_op(peek(P), OP_RPAREN)) break;
        }
        const token *k = peek(P);
        if (is_op(k, OP_MUL) || is_op(k, OP_POW))
            parse_fail(P, k, "*args and **kwargs in calls are not supported");
        if (k->t == T_NAME && is_op(peek2(P), OP_ASSIGN)) {
            const char *name = expect_name(P);
            next(P);
            if (nkw == capkw) {
                capkw = capkw ? capkw * 2 : 4;
                const char **nn = jinja_alloc(P->a, capkw * sizeof(char *));
                if (nkw) memcpy(nn, kwn, nkw * sizeof(char *));
                kwn = nn;
            }
            kwn[nkw++] = name;
            nv_push(P, &kwv, parse_expr(P));
        } else {
            if (nkw) parse_fail(P, k, "positional argument after keyword argument");
            nv_push(P, &pos, parse_expr(P));
        }
        if (peek(P)->t == T_EOF) parse_fail(P, open, "unclosed '('");
    }
    next(P);
    out->pos = nv_list(&pos);
    out->kwn = kwn;
    out->kwv = kwv.v;
    out->nkw = nkw;
}

/* A filter application: at its name (after the '|'); operand NULL for the
 * filters of filter blocks and set blocks. */
static node *parse_filter(parser *P, node *operand) {
    const token *at = peek(P);
    const char *name = expect_name(P);
    node *f = mk(P, E_FILTER, at);
    f->name = name;
    f->unknown = !jinja_known_filter(name);
    f->a = operand;
    if (is_op(peek(P), OP_LPAREN)) parse_call_args(P, &f->args);
    return f;
}

static node *parse_test(parser *P, node *operand) {
    const token *at = next(P); /* 'is' */
    node *t = mk(P, E_TEST, at);
    t->a = operand;
    if (is_name(peek(P), "not")) {
        next(P);
        t->op = 1;
    }
    const char *name = expect_name(P);
    t->name = name;
    t->unknown = !jinja_known_test(name);
    const token *k = peek(P);
    if (is_op(k, OP_LPAREN)) {
        parse_call_args(P, &t->args);
    } else if ((k->t == T_NAME || k->t == T_STRING || k->t == T_INT || k->t == T_FLOAT || is_op(k, OP_LPAREN) ||
                is_op(k, OP_LBRACKET) || is_op(k, OP_LBRACE)) &&
               !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and")) {
        if (is_name(k, "is")) parse_fail(P, k, "you cannot chain multiple tests with 'is'");
        node *arg = parse_postfix(P, parse_primary(P));
        node **v = jinja_alloc(P->a, sizeof(node *));
        v[0] = arg;
        t->args.pos.v = v;
        t->args.pos.n = 1;
    }
    return t;
}

static node *parse_filter_expr(parser *P, node *e) {
    for (;;) {
        const token *k = peek(P);
        if (is_op(k, OP_PIPE)) {
            next(P);
            e = parse_filter(P, e);
        } else if (is_name(k, "is")) {
            e = parse_test(P, e);
        } else if (is_op(k, OP_LPAREN)) {
            node *c = mk(P, E_CALL, k);
            c->line = e->line; /* errors point at the start of the callee */
            c->col = e->col;
            c->a = e;
            parse_call_args(P, &c->args);
            e = c;
        } else {
            return e;
        }
    }
}

static node *parse_subscript(parser *P, node *obj, const token *at) {
    /* after '[' */
    node *parts[3] = {NULL, NULL, NULL};
    bool slice = false;
    if (!is_op(peek(P), OP_COLON)) parts[0] = parse_expr(P);
    if (is_op(peek(P), OP_COLON)) {
        slice = true;
        next(P);
        if (!is_op(peek(P), OP_RBRACKET) && !is_op(peek(P), OP_COLON)) parts[1] = parse_expr(P);
        if (is_op(peek(P), OP_COLON)) {
            next(P);
            if (!is_op(peek(P), OP_RBRACKET)) parts[2] = parse_expr(P);
        }
    }
    if (is_op(peek(P), OP_COMMA)) parse_fail(P, peek(P), "tuple subscripts are not supported");
    expect_op(P, OP_RBRACKET);
    if (!slice) {
        node *e = mk(P, E_ITEM, at);
        e->a = obj;
        e->b = parts[0];
        return e;
    }
    node *e = mk(P, E_SLICE, at);
    e->a = obj;
    node **v = jinja_alloc(P->a, 3 * sizeof(node *));
    memcpy(v, parts, sizeof parts);
    e->args.pos.v = v;
    e->args.pos.n = 3;
    return e;
}

static node *parse_postfix(parser *P, node *e) {
    for (;;) {
        const token *k = peek(P);
        if (is_op(k, OP_DOT)) {
            next(P);
            const token *nk = peek(P);
            if (nk->t == T_NAME) {
                node *a = mk(P, E_ATTR, k);
                a->a = e;
                a->name = expect_name(P);
                e = a;
            } else if (nk->t == T_INT) {
                next(P);
                node *a = mk(P, E_ITEM, k);
                a->a = e;
                a->b = mk(P, E_LIT, nk);
                a->b->lit = jv_int(nk->i);
                e = a;
            } else {
                char buf[64];
                parse_fail(P, nk, "expected an attribute name after '.', found %s", tok_desc(nk, buf, sizeof buf));
            }
        } else if (is_op(k, OP_LBRACKET)) {
            next(P);
            e = parse_subscript(P, e, k);
        } else if (is_op(k, OP_LPAREN)) {
            node *c = mk(P, E_CALL, k);
            c->line = e->line;
            c->col = e->col;
            c->a = e;
            parse_call_args(P, &c->args);
            e = c;
        } else {
            return e;
        }
    }
}

static node *parse_primary(parser *P) {
    enter(P);
    const token *k = peek(P);
    node *e;
    if (k->t == T_NAME) {
        next(P);
        e = mk(P, E_LIT, k);
        if (is_name(k, "true") || is_name(k, "True")) e->lit = jv_bool(true);
        else if (is_name(k, "false") || is_name(k, "False")) e->lit = jv_bool(false);
        else if (is_name(k, "none") || is_name(k, "None")) e->lit = J_NONE;
        else {
            e->k = E_NAME;
            e->name = jinja_strndup(P->a, k->s.p, k->s.n);
        }
    } else if (k->t == T_STRING) {
        next(P);
        e = mk(P, E_LIT, k);
        if (peek(P)->t == T_STRING) {
            sbuf b;
            sb_init(&b, P->a, SIZE_MAX / 2);
            sb_add(&b, k->s.p, k->s.n);
            while (peek(P)->t == T_STRING) {
                const token *s = next(P);
                sb_add(&b, s->s.p, s->s.n);
            }
            e->lit = jv_str(sb_str(&b));
        } else {
            e->lit = jv_str(k->s);
        }
    } else if (k->t == T_INT) {
        next(P);
        e = mk(P, E_LIT, k);
        e->lit = jv_int(k->i);
    } else if (k->t == T_FLOAT) {
        next(P);
        e = mk(P, E_LIT, k);
        e->lit = jv_float(k->f);
    } else if (is_op(k, OP_LPAREN)) {
        next(P);
        e = parse_tuple(P, true, true);
        expect_op(P, OP_RPAREN);
    } else if (is_op(k, OP_LBRACKET)) {
        next(P);
        nvec items = {0};
        while (!is_op(peek(P), OP_RBRACKET)) {
            if (items.n) {
                expect_op(P, OP_COMMA);
                if (is_op(peek(P), OP_RBRACKET)) break;
            }
            nv_push(P, &items, parse_expr(P));
        }
        next(P);
        e = mk(P, E_LIST, k);
        e->items = nv_list(&items);
    } else if (is_op(k, OP_LBRACE)) {
        next(P);
        nvec keys = {0}, vals = {0};
        while (!is_op(peek(P), OP_RBRACE)) {
            if (keys.n) {
                expect_op(P, OP_COMMA);
                if (is_op(peek(P), OP_RBRACE)) break;
            }
            nv_push(P, &keys, parse_expr(P));
            expect_op(P, OP_COLON);
            nv_push(P, &vals, parse_expr(P));
        }
        next(P);
        e = mk(P, E_DICT, k);
        e->items = nv_list(&keys);
        e->vals = nv_list(&vals);
    } else {
        char buf[64];
        parse_fail(P, k, "unexpected %s in an expression", tok_desc(k, buf, sizeof buf));
    }
    P->depth--;
    return e;
}

static node *parse_unary(parser *P, bool with_filter) {
    enter(P);
    const token *k = peek(P);
    node *e;
    if (is_op(k, OP_SUB) || is_op(k, OP_ADD)) {
        next(P);
        e = mk(P, is_op(k, OP_SUB) ? E_NEG : E_POS, k);
        e->a = parse_unary(P, false);
    } else {
        e = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) e = parse_filter_expr(P, e);
    P->depth--;
    return e;
}

static node *mk_bin(parser *P, const token *at, int op, node *l, node *r) {
    node *e = mk(P, E_BIN, at);
    e->op = op;
    e->a = l;
    e->b = r;
    return e;
}

static node *parse_pow(parser *P) {
    node *l = parse_unary(P, true);
    while (is_op(peek(P), OP_POW)) {
        const token *k = next(P);
        l = mk_bin(P, k, OP_POW, l, parse_unary(P, true));
    }
    return l;
}

static node *parse_math2(parser *P) {
    node *l = parse_pow(P);
    for (;;) {
        const token *k = peek(P);
        if (!(is_op(k, OP_MUL) || is_op(k, OP_DIV) || is_op(k, OP_FLOORDIV) || is_op(k, OP_MOD))) return l;
        next(P);
        l = mk_bin(P, k, k->op, l, parse_pow(P));
    }
}

static node *parse_concat(parser *P) {
    const token *at = peek(P);
    node *first = parse_math2(P);
    if (!is_op(peek(P), OP_TILDE)) return first;
    nvec items = {0};
    nv_push(P, &items, first);
    while (is_op(peek(P), OP_TILDE)) {
        next(P);
        nv_push(P, &items, parse_math2(P));
    }
    node *e = mk(P, E_CONCAT, at);
    e->items = nv_list(&items);
    return e;
}

static node *parse_math1(parser *P) {
    node *l = parse_concat(P);
    for (;;) {
        const token *k = peek(P);
        if (!(is_op(k, OP_ADD) || is_op(k, OP_SUB))) return l;
        next(P);
        l = mk_bin(P, k, k->op, l, parse_concat(P));
    }
}

static node *parse_compare(parser *P) {
    const token *at = peek(P);
    node *first = parse_math1(P);
    nvec operands = {0};
    int *ops = NULL;
    size_t nops = 0, capops = 0;
    for (;;) {
        const token *k = peek(P);
        int op;
        if (k->t == T_OP && (k->op == OP_EQ || k->op == OP_NE || k->op == OP_LT || k->op == OP_LE ||
                             k->op == OP_GT || k->op == OP_GE)) {
            op = k->op;
            next(P);
        } else if (is_name(k, "in")) {
            op = OP_IN;
            next(P);
        } else if (is_name(k, "not") && is_name(peek2(P), "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        } else {
            break;
        }
        if (!nops) nv_push(P, &operands, first);
        nv_push(P, &operands, parse_math1(P));
        if (nops == capops) {
            capops = capops ? capops * 2 : 4;
            int *no = jinja_alloc(P->a, capops * sizeof(int));
            if (nops) memcpy(no, ops, nops * sizeof(int));
            ops = no;
        }
        ops[nops++] = op;
    }
    if (!nops) return first;
    node *e = mk(P, E_CMP, at);
    e->items = nv_list(&operands);
    e->ops = ops;
    return e;
}

static node *parse_not(parser *P) {
    const token *k = peek(P);
    if (is_name(k, "not")) {
        enter(P);
        next(P);
        node *e = mk(P, E_NOT, k);
        e->a = parse_not(P);
        P->depth--;
        return e;
    }
    return parse_compare(P);
}

static node *parse_and(parser *P) {
    node *l = parse_not(P);
    while (is_name(peek(P), "and")) {
        const token *k = next(P);
        node *e = mk(P, E_AND, k);
        e->a = l;
        e->b = parse_not(P);
        l = e;
    }
    return l;
}

static node *parse_or(parser *P) {
    node *l = parse_and(P);
    while (is_name(peek(P), "or")) {
        const token *k = next(P);
        node *e = mk(P, E_OR, k);
        e->a = l;
        e->b = parse_and(P);
        l = e;
    }
    return l;
}

/* expr1 if cond [else expr2]; without else the value is undefined. */
static node *parse_expr(parser *P) {
    enter(P);
    node *e = parse_or(P);
    while (is_name(peek(P), "if")) {
        const token *k = next(P);
        node *c = mk(P, E_COND, k);
        c->a = e;
        c->b = parse_or(P);
        if (is_name(peek(P), "else")) {
            next(P);
            c->c = parse_expr(P);
        }
        e = c;
    }
    P->depth--;
    return e;
}

/* A comma-separated expression list: a single expression stays itself,
 * several (or a trailing comma) make a tuple. */
static node *parse_tuple(parser *P, bool with_cond, bool explicit_parens) {
    const token *at = peek(P);
    nvec items = {0};
    bool comma = false;
    for (;;) {
        if (items.n) {
            if (!is_op(peek(P), OP_COMMA)) break;
            next(P);
            comma = true;
        }
        const token *k = peek(P);
        if (k->t == T_BLOCK_END || k->t == T_VAR_END || is_op(k, OP_RPAREN) ||
            (items.n && (is_name(k, "in") || is_op(k, OP_ASSIGN))))
            break;
        nv_push(P, &items, with_cond ? parse_expr(P) : parse_or(P));
    }
    if (items.n == 1 && !comma) return items.v[0];
    if (!items.n && !explicit_parens) {
        char buf[64];
        parse_fail(P, at, "expected an expression, found %s", tok_desc(at, buf, sizeof buf));
    }
    node *e = mk(P, E_TUPLE, at);
    e->items = nv_list(&items);
    return e;
}

/* ---- statements */

static nlist parse_body(parser *P, const char *const *ends, const char **stopped_at);

static bool name_in(const token *k, const char *const *names) {
    for (size_t i = 0; names && names[i]; i++)
        if (is_name(k, names[i])) return true;
    return false;
}

/* Parses "name" or "a, b" (or "(a, b)") as assignment targets. */
static void parse_targets(parser *P, const char ***names, size_t *n) {
    bool paren = false;
    if (is_op(peek(P), OP_LPAREN)) {
        next(P);
        paren = true;
    }
    const char **v = NULL;
    size_t cnt = 0, cap = 0;
    for (;;) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nv = jinja_alloc(P->a, cap * sizeof(char *));
            if (cnt) memcpy(nv, v, cnt * sizeof(char *));
            v = nv;
        }
        v[cnt++] = expect_name(P);
        if (!is_op(peek(P), OP_COMMA)) break;
        next(P);
        if (paren && is_op(peek(P), OP_RPAREN)) break;
        if (!paren && (is_name(peek(P), "in") || is_op(peek(P), OP_ASSIGN))) break;
    }
    if (paren) expect_op(P, OP_RPAREN);
    *names = v;
    *n = cnt;
}

static node *parse_for(parser *P, const token *at) {
    node *s = mk(P, S_FOR, at);
    parse_targets(P, &s->targets, &s->ntargets);
    if (!is_name(peek(P), "in")) {
        char buf[64];
        parse_fail(P, peek(P), "expected 'in' in a for loop, found %s", tok_desc(peek(P), buf, sizeof buf));
    }
    next(P);
    s->a = parse_tuple(P, false, false);
    if (is_name(peek(P), "if")) {
        next(P);
        s->b = parse_expr(P);
    }
    if (is_name(peek(P), "recursive")) parse_fail(P, peek(P), "recursive for loops are not supported");
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"endfor", "else", NULL};
    const char *stop;
    P->loop_depth++;
    s->body = parse_body(P, ends, &stop);
    P->loop_depth--;
    if (!strcmp(stop, "else")) {
        expect_end(P, T_BLOCK_END);
        static const char *const ends2[] = {"endfor", NULL};
        int saved = P->loop_depth;
        P->loop_depth = 0;
        s->else_body = parse_body(P, ends2, &stop);
        P->loop_depth = saved;
    }
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_if(parser *P, const token *at) {
    node *s = mk(P, S_IF, at);
    s->a = parse_tuple(P, true, false);
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *stop;
    s->body = parse_body(P, ends, &stop);
    if (!strcmp(stop, "elif")) {
        const token *k = &P->t[P->i - 1];
        enter(P);
        node *inner = parse_if(P, k);
        P->depth--;
        node **v = jinja_alloc(P->a, sizeof(node *));
        v[0] = inner;
        s->else_body.v = v;
        s->else_body.n = 1;
        return s; /* the nested if consumed endif */
    }
    if (!strcmp(stop, "else")) {
        expect_end(P, T_BLOCK_END);
        static const char *const ends2[] = {"endif", NULL};
        s->else_body = parse_body(P, ends2, &stop);
    }
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_set(parser *P, const token *at) {
    /* set name = expr | set ns.attr = expr | set a, b = expr | set name [| filters] %}...{% endset */
    const token *first = peek(P);
    if (first->t == T_NAME && is_op(peek2(P), OP_DOT)) {
        node *s = mk(P, S_SET, at);
        const char *obj = expect_name(P);
        next(P);
        s->name = expect_name(P);
        const char **t = jinja_alloc(P->a, sizeof(char *));
        t[0] = obj;
        s->targets = t;
        s->ntargets = 1;
        s->op = 1; /* attribute assignment: targets[0].name */
        expect_op(P, OP_ASSIGN);
        s->a = parse_tuple(P, true, false);
        expect_end(P, T_BLOCK_END);
        return s;
    }
    const char **names;
    size_t n;
    parse_targets(P, &names, &n);
    if (is_op(peek(P), OP_ASSIGN)) {
        next(P);
        node *s = mk(P, S_SET, at);
        s->targets = names;
        s->ntargets = n;
        s->a = parse_tuple(P, true, false);
        expect_end(P, T_BLOCK_END);
        return s;
    }
    if (n != 1) parse_fail(P, peek(P), "expected '=' after the targets of set");
    node *s = mk(P, S_SETBLOCK, at);
    s->targets = names;
    s->ntargets = 1;
    node *chain = NULL;
    while (is_op(peek(P), OP_PIPE)) {
        next(P);
        chain = parse_filter(P, chain);
    }
    s->a = chain;
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"endset", NULL};
    const char *stop;
    s->body = parse_body(P, ends, &stop);
    expect_end(P, T_BLOCK_END);
    return s;
}

/* (a, b=default, ...) for macro and call-block signatures */
static void parse_signature(parser *P, nargs *sig) {
    const char **names = NULL;
    node **defs = NULL;
    size_t n = 0, cap = 0;
    if (!is_op(peek(P), OP_LPAREN)) return;
    next(P);
    while (!is_op(peek(P), OP_RPAREN)) {
        if (n) {
            expect_op(P, OP_COMMA);
            if (is_op(peek(P), OP_RPAREN)) break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nn = jinja_alloc(P->a, cap * sizeof(char *));
            node **nd = jinja_alloc(P->a, cap * sizeof(node *));
            if (n) {
                memcpy(nn, names, n * sizeof(char *));
                memcpy(nd, defs, n * sizeof(node *));
            }
            names = nn;
            defs = nd;
        }
        names[n] = expect_name(P);
        defs[n] = NULL;
        if (is_op(peek(P), OP_ASSIGN)) {
            next(P);
            defs[n] = parse_expr(P);
        } else if (n && defs[n - 1]) {
            parse_fail(P, peek(P), "non-default argument follows default argument");
        }
        n++;
    }
    next(P);
    sig->kwn = names;
    sig->kwv = defs;
    sig->nkw = n;
}

static node *parse_macro(parser *P, const token *at) {
    node *s = mk(P, S_MACRO, at);
    s->name = expect_name(P);
    if (!is_op(peek(P), OP_LPAREN)) parse_fail(P, peek(P), "expected '(' after the macro name");
    parse_signature(P, &s->args);
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"endmacro", NULL};
    const char *stop;
    int saved = P->loop_depth;
    P->loop_depth = 0;
    s->body = parse_body(P, ends, &stop);
    P->loop_depth = saved;
    if (peek(P)->t == T_NAME) next(P); /* {% endmacro name %} */
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_callblock(parser *P, const token *at) {
    node *s = mk(P, S_CALLBLOCK, at);
    if (is_op(peek(P), OP_LPAREN)) parse_signature(P, &s->args);
    const token *ct = peek(P);
    s->a = parse_expr(P);
    if (s->a->k != E_CALL) parse_fail(P, ct, "expected a call after 'call'");
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"endcall", NULL};
    const char *stop;
    int saved = P->loop_depth;
    P->loop_depth = 0;
    s->body = parse_body(P, ends, &stop);
    P->loop_depth = saved;
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_filterblock(parser *P, const token *at) {
    node *s = mk(P, S_FILTERBLOCK, at);
    node *chain = parse_filter(P, NULL);
    while (is_op(peek(P), OP_PIPE)) {
        next(P);
        chain = parse_filter(P, chain);
    }
    s->a = chain;
    expect_end(P, T_BLOCK_END);
    static const char *const ends[] = {"endfilter", NULL};
    const char *stop;
    s->body = parse_body(P, ends, &stop);
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_with(parser *P, const token *at) {
    node *s = mk(P, S_WITH, at);
    const char **names = NULL;
    nvec vals = {0};
    size_t cap = 0;
    while (peek(P)->t != T_BLOCK_END) {
        if (vals.n) expect_op(P, OP_COMMA);
        if (vals.n == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nn = jinja_alloc(P->a, cap * sizeof(char *));
            if (vals.n) memcpy(nn, names, vals.n * sizeof(char *));
            names = nn;
        }
        names[vals.n] = expect_name(P);
        expect_op(P, OP_ASSIGN);
        nv_push(P, &vals, parse_expr(P));
    }
    next(P);
    s->targets = names;
    s->ntargets = vals.n;
    s->vals = nv_list(&vals);
    static const char *const ends[] = {"endwith", NULL};
    const char *stop;
    s->body = parse_body(P, ends, &stop);
    expect_end(P, T_BLOCK_END);
    return s;
}

static node *parse_statement(parser *P) {
    const token *k = peek(P);
    if (k->t != T_NAME) {
        char buf[64];
        parse_fail(P, k, "expected a tag name after '{%%', found %s", tok_desc(k, buf, sizeof buf));
    }
    next(P);
    enter(P);
    node *s;
    if (is_name(k, "for")) s = parse_for(P, k);
    else if (is_name(k, "if")) s = parse_if(P, k);
    else if (is_name(k, "set")) s = parse_set(P, k);
    else if (is_name(k, "macro")) s = parse_macro(P, k);
    else if (is_name(k, "call")) s = parse_callblock(P, k);
    else if (is_name(k, "filter")) s = parse_filterblock(P, k);
    else if (is_name(k, "with")) s = parse_with(P, k);
    else if (is_name(k, "break") || is_name(k, "continue")) {
        if (!P->loop_depth) parse_fail(P, k, "'%.*s' outside of a loop", (int)k->s.n, k->s.p);
        s = mk(P, is_name(k, "break") ? S_BREAK : S_CONTINUE, k);
        expect_end(P, T_BLOCK_END);
    } else if (is_name(k, "generation")) {
        /* HF's AssistantTracker tag: renders its body unchanged */
        expect_end(P, T_BLOCK_END);
        s = mk(P, S_BODY, k);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *stop;
        s->body = parse_body(P, ends, &stop);
        expect_end(P, T_BLOCK_END);
    } else if (is_name(k, "extends") || is_name(k, "include") || is_name(k, "import") || is_name(k, "from") ||
               is_name(k, "block")) {
        parse_fail(P, k, "the '%.*s' tag is not supported", (int)k->s.n, k->s.p);
    } else {
        parse_fail(P, k, "unknown tag '%.*s'", (int)(k->s.n > 40 ? 40 : k->s.n), k->s.p);
    }
    P->depth--;
    return s;
}

/* Parses template content until a block tag whose name is in ends (the tag's
 * '{%' and name are consumed; *stopped_at names it) or, with ends NULL, until
 * the end of the template. */
static nlist parse_body(parser *P, const char *const *ends, const char **stopped_at) {
    nvec body = {0};
    const token *open = P->i > 0 ? &P->t[P->i - 1] : peek(P);
    for (;;) {
        const token *k = peek(P);
        if (k->t == T_EOF) {
            if (ends) {
                const char *closer = ends[0];
                for (size_t i = 0; ends[i]; i++)
                    if (!strncmp(ends[i], "end", 3)) closer = ends[i];
                parse_fail(P, open, "unexpected end of template: the block opened here needs '{%% %s %%}'", closer);
            }
            break;
        }
        if (k->t == T_TEXT) {
            next(P);
            node *s = mk(P, S_TEXT, k);
            s->lit = jv_str(k->s);
            nv_push(P, &body, s);
        } else if (k->t == T_VAR_BEGIN) {
            next(P);
            node *s = mk(P, S_OUTPUT, k);
            s->a = parse_tuple(P, true, false);
            expect_end(P, T_VAR_END);
            nv_push(P, &body, s);
        } else if (k->t == T_BLOCK_BEGIN) {
            const token *nk = peek2(P);
            if (name_in(nk, ends)) {
                next(P);
                next(P);
                for (size_t i = 0; ends[i]; i++)
                    if (is_name(nk, ends[i])) *stopped_at = ends[i];
                break;
            }
            if (nk->t == T_NAME && nk->s.n >= 3 && !memcmp(nk->s.p, "end", 3))
                parse_fail(P, nk, "unexpected '%.*s'%s%s%s", (int)(nk->s.n > 40 ? 40 : nk->s.n), nk->s.p,
                           ends ? " (expected '" : "", ends ? ends[0] : "", ends ? "')" : "");
            if (nk->t == T_NAME && (is_name(nk, "else") || is_name(nk, "elif")))
                parse_fail(P, nk, "unexpected '%.*s'", (int)nk->s.n, nk->s.p);
            next(P);
            nv_push(P, &body, parse_statement(P));
        } else {
            char buf[64];
            parse_fail(P, k, "unexpected %s", tok_desc(k, buf, sizeof buf));
        }
    }
    return nv_list(&body);
}

/* ---- checks and marks after parsing */

/* Whether the subtree mentions the variable name (jinja2 only gives a macro
 * varargs/kwargs when its body refers to them). */
static bool uses_name(const node *e, const char *name, int depth) {
    if (!e || depth > J_MAX_DEPTH * 4) return false;
    if (e->k == E_NAME && !strcmp(e->name, name)) return true;
    const node *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
        if (uses_name(kids[i], name, depth + 1)) return true;
    const nlist *lists[5] = {&e->items, &e->vals, &e->args.pos, &e->body, &e->else_body};
    for (int k = 0; k < 5; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (uses_name(lists[k]->v[i], name, depth + 1)) return true;
    for (size_t i = 0; i < e->args.nkw; i++)
        if (uses_name(e->args.kwv[i], name, depth + 1)) return true;
    return false;
}

static void mark_macros(nlist body, int depth);

/* jinja2 rejects an unknown filter or test when it compiles the template,
 * except inside an if statement or an inline if expression (a "soft" frame),
 * where the error waits until the filter is actually used; loop, macro,
 * call, filter and set-block bodies are not soft again. */
static void check_unknown(jerr *err, const node *e, bool soft, int depth) {
    if (!e || depth > J_MAX_DEPTH * 4) return;
    if ((e->k == E_FILTER || e->k == E_TEST) && e->unknown && !soft)
        jinja_fail(err, TELA_ERR_FORMAT, e->line, e->col, "syntax error: no %s named '%s'", e->k == E_FILTER ? "filter" : "test",
                   e->name);
    bool kid_soft = soft, body_soft = soft;
    switch (e->k) {
    case S_IF: case E_COND: kid_soft = body_soft = true; break;
    case S_FOR: body_soft = false; break;
    case S_MACRO: case S_CALLBLOCK: case S_FILTERBLOCK: case S_SETBLOCK: case S_WITH: case S_BODY:
        body_soft = false;
        if (e->k != S_CALLBLOCK) kid_soft = false;
        break;
    default: break;
    }
    const node *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
        check_unknown(err, kids[i], e->k == S_FOR && i == 1 ? false : kid_soft, depth + 1);
    const nlist *lists[3] = {&e->items, &e->vals, &e->args.pos};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < lists[k]->n; i++) check_unknown(err, lists[k]->v[i], kid_soft, depth + 1);
    for (size_t i = 0; i < e->args.nkw; i++) check_unknown(err, e->args.kwv[i], e->k == S_MACRO ? false : kid_soft, depth + 1);
    for (size_t i = 0; i < e->body.n; i++) check_unknown(err, e->body.v[i], body_soft, depth + 1);
    for (size_t i = 0; i < e->else_body.n; i++)
        check_unknown(err, e->else_body.v[i], e->k == S_FOR ? soft : body_soft, depth + 1);
}

static void mark_node(node *s, int depth) {
    if (!s || depth > J_MAX_DEPTH * 4) return;
    if (s->k == S_MACRO || s->k == S_CALLBLOCK) {
        int flags = 0;
        for (size_t i = 0; i < s->body.n; i++) {
            if (uses_name(s->body.v[i], "varargs", 0)) flags |= 1;
            if (uses_name(s->body.v[i], "kwargs", 0)) flags |= 2;
        }
        s->op = flags;
    }
    mark_macros(s->body, depth + 1);
    mark_macros(s->else_body, depth + 1);
}

static void mark_macros(nlist body, int depth) {
    for (size_t i = 0; i < body.n; i++) mark_node(body.v[i], depth);
}

/* The template's statements from its tokens, checked for unknown filters
 * and tests and with each macro's use of varargs/kwargs marked; errors
 * longjmp through err. */
static nlist jinja_parse(jarena *a, jerr *err, token *toks, size_t ntoks) {
    parser P;
    memset(&P, 0, sizeof P);
    P.a = a;
    P.err = err;
    P.t = toks;
    P.n = ntoks;
    nlist body = parse_body(&P, NULL, NULL);
    for (size_t i = 0; i < body.n; i++) check_unknown(err, body.v[i], false, 0);
    mark_macros(body, 0);
    return body;
}

/* ------------------------------------------------------------ evaluator */

typedef struct scope {
    struct scope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
} scope;

typedef struct jloop {
    jlist *items;
    size_t i;
} jloop;

typedef struct jmacro {
    const node *def;   /* S_MACRO, or S_CALLBLOCK for a caller */
    scope *closure;
    const char *name;
    bool catch_varargs, catch_kwargs;
} jmacro;

typedef struct cargs {
    jv *pos;
    size_t npos;
    const char **kwn;
    jv *kwv;
    size_t nkw;
} cargs;

enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME, FN_COUNT };
static const char *const jinja_fn_names[FN_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

typedef struct render {
    jarena *a;
    jerr *err;
    sbuf *out;
    uint64_t steps;
    int depth, macro_depth;
    int loopctl;          /* 1 break, 2 continue */
    int64_t now;
    size_t max_output;
} render;

static _Noreturn void jinja_rfail(render *R, const node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void jinja_rfail(render *R, const node *at, const char *fmt, ...) {
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    jinja_fail(R->err, TELA_ERR_FORMAT, at ? at->line : 0, at ? at->col : 0, "%s", body);
}

/* Using an undefined value in a way that needs a value (jinja2's
 * UndefinedError). */
static _Noreturn void jinja_fail_undef(render *R, const node *at, jv v) {
    if (v.u.s.p && v.u.s.n) jinja_rfail(R, at, "%.*s", (int)(v.u.s.n > 300 ? 300 : v.u.s.n), v.u.s.p);
    jinja_rfail(R, at, "undefined value");
}

static jv jinja_mk_undef(render *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static jv jinja_mk_undef(render *R, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    return jv_undef(jinja_strndup(R->a, tmp, (size_t)n));
}

static const char *obj_desc(jv v) {
    /* how jinja2 names an object in "has no attribute" messages */
    return v.t == JV_NONE ? "'None'" : NULL;
}

static scope *jinja_new_scope(render *R, scope *parent) {
    scope *s = jinja_alloc(R->a, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static void jinja_scope_set(render *R, scope *s, const char *name, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const char **nn = jinja_alloc(R->a, jinja_size_mul(R->a, cap, sizeof(char *)));
        jv *nv = jinja_alloc(R->a, jinja_size_mul(R->a, cap, sizeof(jv)));
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(char *));
            memcpy(nv, s->vals, s->n * sizeof(jv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
}

static bool scope_get(const scope *s, const char *name, jv *out) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

static jv jinja_lookup(render *R, scope *sc, const char *name) {
    jv v;
    if (scope_get(sc, name, &v)) return v;
    for (int i = 0; i < FN_COUNT; i++)
        if (!strcmp(jinja_fn_names[i], name)) {
            v.t = JV_FUNC;
            v.u.fn = i;
            return v;
        }
    return jinja_mk_undef(R, "'%s' is undefined", name);
}

/* ---- conversions */

static void jinja_repr(render *R, sbuf *b, jv v, int depth);

/* Python's str(v). */
static jstr jinja_to_str(render *R, jv v) {
    char buf[64];
    jstr s = {"", 0};
    switch (v.t) {
    case JV_UNDEF: return s;
    case JV_NONE: s.p = "None"; s.n = 4; return s;
    case JV_BOOL: s.p = v.u.b ? "True" : "False"; s.n = strlen(s.p); return s;
    case JV_INT: snprintf(buf, sizeof buf, "%" PRId64, v.u.i); break;
    case JV_FLOAT: jinja_py_float_repr(v.u.f, buf, sizeof buf); break;
    case JV_STR: return v.u.s;
    default: {
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        jinja_repr(R, &b, v, 0);
        return sb_str(&b);
    }
    }
    s.n = strlen(buf);
    s.p = jinja_strndup(R->a, buf, s.n);
    return s;
}

static void jinja_repr(render *R, sbuf *b, jv v, int depth) {
    if (depth > J_MAX_DEPTH) jinja_rfail(R, NULL, "value nested too deeply to print");
    switch (v.t) {
    case JV_UNDEF: sb_adds(b, "Undefined"); return;
    case JV_STR: jinja_py_str_repr(b, v.u.s); return;
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->gen) { sb_adds(b, "<generator object>"); return; }
        sb_addc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_adds(b, ", ");
            jinja_repr(R, b, l->v[i], depth + 1);
        }
        if (l->tuple && l->n == 1) sb_addc(b, ',');
        sb_addc(b, l->tuple ? ')' : ']');
        return;
    }
    case JV_DICT: case JV_NS: {
        const jdict *d = v.u.d;
        if (v.t == JV_NS) sb_adds(b, "<Namespace ");
        sb_addc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) sb_adds(b, ", ");
            jinja_repr(R, b, d->k[i], depth + 1);
            sb_adds(b, ": ");
            jinja_repr(R, b, d->v[i], depth + 1);
        }
        sb_addc(b, '}');
        if (v.t == JV_NS) sb_addc(b, '>');
        return;
    }
    case JV_LOOP: jinja_sb_printf(b, "<LoopContext %zu/%zu>", v.u.loop->i + 1, v.u.loop->items->n); return;
    case JV_MACRO: jinja_sb_printf(b, "<Macro '%s'>", v.u.m->name); return;
    case JV_FUNC: jinja_sb_printf(b, "<function %s>", jinja_fn_names[v.u.fn]); return;
    default: {
        jstr s = jinja_to_str(R, v);
        sb_add(b, s.p, s.n);
    }
    }
}

/* The items of an iterable as a list: lists, the keys of a dict, the
 * characters of a string; an undefined value iterates as empty. */
static jlist *jinja_to_iter(render *R, const node *at, jv v) {
    switch (v.t) {
    case JV_LIST: return v.u.l;
    case JV_UNDEF: return jinja_list_new(R->a, 0);
    case JV_DICT: {
        jlist *l = jinja_list_new(R->a, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jinja_list_push(R->a, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        jlist *l = jinja_list_new(R->a, v.u.s.n);
        size_t i = 0;
        while (i < v.u.s.n) {
            size_t start = i;
            jinja_u8_next(v.u.s.p, v.u.s.n, &i);
            jinja_list_push(R->a, l, jv_strn(v.u.s.p + start, i - start));
        }
        return l;
    }
    default:
        jinja_rfail(R, at, "'%s' object is not iterable", jinja_typename(v));
    }
}

static int64_t jinja_len(render *R, const node *at, jv v) {
    switch (v.t) {
    case JV_STR: return (int64_t)jinja_u8_len(v.u.s);
    case JV_LIST:
        if (v.u.l->gen) jinja_rfail(R, at, "object of type 'generator' has no len()");
        return (int64_t)v.u.l->n;
    case JV_DICT: return (int64_t)v.u.d->n;
    case JV_UNDEF: return 0;
    default: jinja_rfail(R, at, "object of type '%s' has no len()", jinja_typename(v));
    }
}

/* ---- attribute and item access */

static jv loop_attr(render *R, const jloop *lp, const char *name, bool *found) {
    size_t i = lp->i, n = lp->items->n;
    *found = true;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : jinja_mk_undef(R, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : jinja_mk_undef(R, "there is no next item");
    *found = false;
    return J_NONE;
}

static jv jinja_getattr(render *R, const node *at, jv obj, const char *name) {
    switch (obj.t) {
    case JV_UNDEF: jinja_fail_undef(R, at, obj);
    case JV_DICT: case JV_NS: {
        jv *v = jinja_dict_finds(obj.u.d, name, strlen(name));
        if (v) return *v;
        return jinja_mk_undef(R, "'%s' has no attribute '%s'", obj.t == JV_NS ? "Namespace object" : "dict object", name);
    }
    case JV_LOOP: {
        bool found;
        jv v = loop_attr(R, obj.u.loop, name, &found);
        if (found) return v;
        break;
    }
    default: break;
    }
    const char *d = obj_desc(obj);
    if (d) return jinja_mk_undef(R, "%s has no attribute '%s'", d, name);
    return jinja_mk_undef(R, "'%s object' has no attribute '%s'", jinja_typename(obj), name);
}

/* Index into a sequence of n items, python-style (negative from the end);
 * false when out of range. */
static bool seq_index(int64_t idx, size_t n, size_t *out) {
    if (idx < 0) idx += (int64_t)n;
    if (idx < 0 || (uint64_t)idx >= n) return false;
    *out = (size_t)idx;
    return true;
}

/* Byte offsets of the code points of s (n+1 entries, the last = s.n). */
static size_t *jinja_cp_offsets(render *R, jstr s, size_t *ncp) {
    size_t n = jinja_u8_len(s);
    size_t *off = jinja_alloc(R->a, jinja_size_mul(R->a, n + 1, sizeof(size_t)));
    size_t i = 0, k = 0;
    while (i < s.n) {
        off[k++] = i;
        jinja_u8_next(s.p, s.n, &i);
    }
    off[k] = s.n;
    *ncp = n;
    return off;
}

static jv jinja_getitem(render *R, const node *at, jv obj, jv key) {
    if (obj.t == JV_UNDEF) jinja_fail_undef(R, at, obj);
    if (jv_isint(key) && (obj.t == JV_LIST || obj.t == JV_STR)) {
        int64_t idx = jv_ival(key);
        size_t k;
        if (obj.t == JV_LIST && !obj.u.l->gen) {
            if (seq_index(idx, obj.u.l->n, &k)) return obj.u.l->v[k];
        } else if (obj.t == JV_STR) {
            size_t ncp;
            size_t *off = jinja_cp_offsets(R, obj.u.s, &ncp);
            if (seq_index(idx, ncp, &k)) return jv_strn(obj.u.s.p + off[k], off[k + 1] - off[k]);
        }
        return jinja_mk_undef(R, "'%s object' has no element %" PRId64, jinja_typename(obj), idx);
    }
    if (obj.t == JV_DICT) {
        jv *v = jinja_dict_find(obj.u.d, key);
        if (v) return *v;
    }
    if (key.t == JV_STR) {
        char *name = jinja_strndup(R->a, key.u.s.p, key.u.s.n);
        if (obj.t == JV_DICT)
            return jinja_mk_undef(R, "'dict object' has no attribute '%s'", name);
        return jinja_getattr(R, at, obj, name);
    }
    jstr ks = jinja_to_str(R, key);
    return jinja_mk_undef(R, "'%s object' has no element %.*s", jinja_typename(obj), (int)(ks.n > 60 ? 60 : ks.n), ks.p);
}

/* Python slice semantics: start/stop/step may be none. */
static jv jinja_slice(render *R, const node *at, jv obj, jv vs, jv ve, jv vst) {
    if (obj.t == JV_UNDEF) jinja_fail_undef(R, at, obj);
    size_t n;
    size_t *off = NULL;
    if (obj.t == JV_LIST && !obj.u.l->gen) n = obj.u.l->n;
    else if (obj.t == JV_STR) off = jinja_cp_offsets(R, obj.u.s, &n);
    else return jinja_mk_undef(R, "'%s object' cannot be sliced", jinja_typename(obj));
    int64_t step = 1;
    jv parts[3] = {vs, ve, vst};
    for (int i = 0; i < 3; i++)
        if (parts[i].t != JV_NONE && parts[i].t != JV_UNDEF && !jv_isint(parts[i]))
            jinja_rfail(R, at, "slice indices must be integers or None");
    if (vst.t != JV_NONE && vst.t != JV_UNDEF) step = jv_ival(vst);
    if (step == 0) jinja_rfail(R, at, "slice step cannot be zero");
    int64_t len = (int64_t)n, start, stop;
    if (vs.t == JV_NONE || vs.t == JV_UNDEF) start = step < 0 ? len - 1 : 0;
    else {
        start = jv_ival(vs);
        if (start < 0) { start += len; if (start < 0) start = step < 0 ? -1 : 0; }
        else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (ve.t == JV_NONE || ve.t == JV_UNDEF) stop = step < 0 ? -1 : len;
    else {
        stop = jv_ival(ve);
        if (stop < 0) { stop += len; if (stop < 0) stop = step < 0 ? -1 : 0; }
        else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    if (obj.t == JV_LIST) {
        jlist *l = jinja_list_new(R->a, 0);
        l->tuple = obj.u.l->tuple;
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
            jinja_list_push(R->a, l, obj.u.l->v[i]);
            if (__builtin_add_overflow(i, step, &i)) break;
        }
        return jv_list(l);
    }
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        sb_add(&b, obj.u.s.p + off[i], off[i + 1] - off[i]);
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    return jv_str(sb_str(&b));
}

/* jinja2's attribute getter for filters (selectattr, map, sort, ...): a dotted
 * path whose parts are looked up as items first; integer parts index. */
static jv jinja_attr_path(render *R, const node *at, jv v, const char *path) {
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits = digits && isdigit((unsigned char)p[i]);
        jv key = digits ? jv_int(strtoll(jinja_strndup(R->a, p, n), NULL, 10)) : jv_strn(jinja_strndup(R->a, p, n), n);
        v = jinja_getitem(R, at, v, key);
        if (!dot) return v;
        p = dot + 1;
    }
}

/* ---- arguments */

/* Binds call arguments to named parameters the way Python does. out[] holds
 * the defaults on entry; the first nreq parameters must be given. */
static void jinja_bind(render *R, const node *at, const char *fname, const cargs *ca, const char *const *names,
                       size_t n, size_t nreq, jv *out) {
    bool given[16] = {false};
    if (n > 16) jinja_rfail(R, at, "internal error: too many parameters");
    if (ca->npos > n) jinja_rfail(R, at, "%s() takes at most %zu argument%s (%zu given)", fname, n, n == 1 ? "" : "s", ca->npos);
    for (size_t i = 0; i < ca->npos; i++) {
        out[i] = ca->pos[i];
        given[i] = true;
    }
    for (size_t k = 0; k < ca->nkw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(names[i], ca->kwn[k])) break;
        if (i == n) jinja_rfail(R, at, "%s() got an unexpected keyword argument '%s'", fname, ca->kwn[k]);
        if (given[i]) jinja_rfail(R, at, "%s() got multiple values for argument '%s'", fname, ca->kwn[k]);
        out[i] = ca->kwv[k];
        given[i] = true;
    }
    for (size_t i = 0; i < nreq; i++)
        if (!given[i]) jinja_rfail(R, at, "%s() missing required argument '%s'", fname, names[i]);
}

static const char *jinja_arg_cstr(render *R, const node *at, jv v, const char *what) {
    if (v.t != JV_STR) jinja_rfail(R, at, "%s must be a string, not %s", what, jinja_typename(v));
    return jinja_strndup(R->a, v.u.s.p, v.u.s.n);
}

static int64_t jinja_arg_int(render *R, const node *at, jv v, const char *what) {
    if (!jv_isint(v)) jinja_rfail(R, at, "%s must be an integer, not %s", what, jinja_typename(v));
    return jv_ival(v);
}

/* ---- sorting */

/* Stable merge sort (python's sort is stable); errors longjmp out safely. */
static void jinja_merge_sort(render *R, const node *at, jv *v, size_t n, int (*cmp)(render *, const node *, jv, jv, void *), void *ud) {
    if (n < 2) return;
    jv *tmp = jinja_alloc(R->a, jinja_size_mul(R->a, n, sizeof(jv)));
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = cmp(R, at, v[j], v[i], ud) < 0 ? v[j++] : v[i++];
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(jv));
        if (width > n / 2) break;
    }
}

/* ------------------------------------------------------------ string helpers */

static jstr jinja_str_case(render *R, jstr s, int mode) {
    /* mode 0 lower, 1 upper, 2 swapcase */
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    size_t i = 0;
    while (i < s.n) {
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        int32_t l = utf8proc_tolower(c), u = utf8proc_toupper(c);
        if (c == 0xdf && mode != 0) sb_adds(&b, "SS"); /* python's full case mapping of sharp s */
        else jinja_sb_add_cp(&b, mode == 0 ? l : mode == 1 ? u : (c != l ? l : u));
    }
    return sb_str(&b);
}

static bool jinja_cp_is_cased_letter(int32_t c) {
    return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

/* Python's str.title(): a cased character after an uncased one starts a word. */
static jstr jinja_str_title_method(render *R, jstr s) {
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    size_t i = 0;
    bool prev_cased = false;
    while (i < s.n) {
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        bool cased = jinja_cp_is_cased_letter(c);
        if (cased) jinja_sb_add_cp(&b, prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c));
        else jinja_sb_add_cp(&b, c);
        prev_cased = cased;
    }
    return sb_str(&b);
}

/* jinja2's title filter: words start after runs of '-', whitespace, '(', '{',
 * '[' or '<'; the first character is upper-cased and the rest lower-cased. */
static jstr jinja_str_title_filter(render *R, jstr s) {
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    size_t i = 0;
    bool start = true;
    while (i < s.n) {
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jinja_py_isspace(c);
        if (sep) {
            jinja_sb_add_cp(&b, c);
            start = true;
        } else {
            jinja_sb_add_cp(&b, start ? utf8proc_toupper(c) : utf8proc_tolower(c));
            start = false;
        }
    }
    return sb_str(&b);
}

static jstr jinja_str_capitalize(render *R, jstr s) {
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    size_t i = 0;
    bool first = true;
    while (i < s.n) {
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        jinja_sb_add_cp(&b, first ? utf8proc_totitle(c) : utf8proc_tolower(c));
        first = false;
    }
    return sb_str(&b);
}

static bool cp_in(int32_t c, jstr set) {
    size_t i = 0;
    while (i < set.n)
        if (jinja_u8_next(set.p, set.n, &i) == c) return true;
    return false;
}

/* str.strip/lstrip/rstrip: chars NULL means python whitespace. */
static jstr jinja_str_strip(jstr s, const jstr *chars, bool left, bool right) {
    size_t start = 0, end = s.n;
    if (left) {
        while (start < end) {
            size_t j = start;
            int32_t c = jinja_u8_next(s.p, end, &j);
            if (chars ? !cp_in(c, *chars) : !jinja_py_isspace(c)) break;
            start = j;
        }
    }
    if (right) {
        while (end > start) {
            size_t k = end - 1;
            while (k > start && ((unsigned char)s.p[k] & 0xc0) == 0x80 && end - k < 4) k--;
            size_t j = k;
            int32_t c = jinja_u8_next(s.p, end, &j);
            if (j != end) k = end - 1, c = (unsigned char)s.p[end - 1];
            if (chars ? !cp_in(c, *chars) : !jinja_py_isspace(c)) break;
            end = k;
        }
    }
    jstr r = {s.p + start, end - start};
    return r;
}

static jstr jinja_str_replace(render *R, const node *at, jstr s, jstr old, jstr rep, int64_t count) {
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    if (count < 0) count = INT64_MAX;
    if (old.n == 0) {
        /* python inserts the replacement before every character and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (done < count) {
            sb_add(&b, rep.p, rep.n);
            done++;
            if (i >= s.n) break;
            size_t start = i;
            jinja_u8_next(s.p, s.n, &i);
            sb_add(&b, s.p + start, i - start);
        }
        if (i < s.n) sb_add(&b, s.p + i, s.n - i);
        return sb_str(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.n) {
        const char *hit = done < count && s.n - i >= old.n ? memmem(s.p + i, s.n - i, old.p, old.n) : NULL;
        if (!hit) break;
        size_t pos = (size_t)(hit - s.p);
        sb_add(&b, s.p + i, pos - i);
        sb_add(&b, rep.p, rep.n);
        i = pos + old.n;
        done++;
    }
    sb_add(&b, s.p + i, s.n - i);
    return sb_str(&b);
}

/* str.split / str.rsplit. sep NULL: split on whitespace runs, dropping empty
 * pieces. */
static jv jinja_str_split(render *R, jstr s, const jstr *sep, int64_t maxsplit, bool from_right) {
    jlist *l = jinja_list_new(R->a, 0);
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!sep) {
        /* collect whitespace-separated words as (start, end) pairs */
        size_t n = 0, cap = 8;
        size_t *st = jinja_alloc(R->a, cap * sizeof(size_t) * 2);
        size_t i = 0;
        while (i < s.n) {
            size_t j = i;
            if (jinja_py_isspace(jinja_u8_next(s.p, s.n, &j))) { i = j; continue; }
            size_t start = i;
            while (i < s.n) {
                size_t k = i;
                if (jinja_py_isspace(jinja_u8_next(s.p, s.n, &k))) break;
                i = k;
            }
            if (n == cap) {
                size_t *ns = jinja_alloc(R->a, jinja_size_mul(R->a, cap * 2, sizeof(size_t) * 2));
                memcpy(ns, st, n * sizeof(size_t) * 2);
                st = ns;
                cap *= 2;
            }
            st[2 * n] = start;
            st[2 * n + 1] = i;
            n++;
        }
        if ((uint64_t)maxsplit >= n || n == 0) {
            for (size_t k = 0; k < n; k++) jinja_list_push(R->a, l, jv_strn(s.p + st[2 * k], st[2 * k + 1] - st[2 * k]));
            return jv_list(l);
        }
        size_t m = (size_t)maxsplit;
        if (!from_right) {
            for (size_t k = 0; k < m; k++) jinja_list_push(R->a, l, jv_strn(s.p + st[2 * k], st[2 * k + 1] - st[2 * k]));
            /* the rest runs from word m to the very end, trailing spaces included */
            jinja_list_push(R->a, l, jv_strn(s.p + st[2 * m], s.n - st[2 * m]));
        } else {
            jinja_list_push(R->a, l, jv_strn(s.p, st[2 * (n - m - 1) + 1]));
            for (size_t k = n - m; k < n; k++) jinja_list_push(R->a, l, jv_strn(s.p + st[2 * k], st[2 * k + 1] - st[2 * k]));
        }
        return jv_list(l);
    }
    /* explicit separator: split scans from the left, rsplit from the right
     * (which matters for overlapping separators, as in python) */
    jlist *cuts = jinja_list_new(R->a, 0); /* separator byte offsets, in scan order */
    if (!from_right) {
        size_t i = 0;
        while ((int64_t)cuts->n < maxsplit && i + sep->n <= s.n) {
            const char *hit = memmem(s.p + i, s.n - i, sep->p, sep->n);
            if (!hit) break;
            jinja_list_push(R->a, cuts, jv_int(hit - s.p));
            i = (size_t)(hit - s.p) + sep->n;
        }
    } else {
        size_t end = s.n;
        while ((int64_t)cuts->n < maxsplit && end >= sep->n) {
            size_t p = end - sep->n + 1;
            bool found = false;
            while (p-- > 0)
                if (!memcmp(s.p + p, sep->p, sep->n)) {
                    found = true;
                    break;
                }
            if (!found) break;
            jinja_list_push(R->a, cuts, jv_int((int64_t)p));
            end = p;
        }
    }
    size_t prev = 0;
    for (size_t k = 0; k < cuts->n; k++) {
        size_t pos = (size_t)cuts->v[from_right ? cuts->n - 1 - k : k].u.i;
        jinja_list_push(R->a, l, jv_strn(s.p + prev, pos - prev));
        prev = pos + sep->n;
    }
    jinja_list_push(R->a, l, jv_strn(s.p + prev, s.n - prev));
    return jv_list(l);
}

/* Code point index of a byte offset. */
static int64_t jinja_cp_index(jstr s, size_t byte_off) {
    jstr pre = {s.p, byte_off};
    return (int64_t)jinja_u8_len(pre);
}

/* Python's str.splitlines() line boundaries, for the indent filter. */
static jlist *jinja_str_splitlines(render *R, jstr s) {
    jlist *l = jinja_list_new(R->a, 0);
    size_t i = 0, start = 0;
    while (i < s.n) {
        size_t j = i;
        int32_t c = jinja_u8_next(s.p, s.n, &j);
        bool nl = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e ||
                  c == 0x85 || c == 0x2028 || c == 0x2029;
        if (nl) {
            jinja_list_push(R->a, l, jv_strn(s.p + start, i - start));
            if (c == '\r' && j < s.n && s.p[j] == '\n') j++;
            start = j;
        }
        i = j;
    }
    if (start < s.n) jinja_list_push(R->a, l, jv_strn(s.p + start, s.n - start));
    return l;
}

/* ---- printf-style formatting: "%s" % x and the format filter */

static jv jinja_str_format_pct(render *R, const node *at, jstr fmt, jv args) {
    const jv *argv = &args;
    size_t argc = 1, used = 0;
    const jdict *map = NULL;
    if (args.t == JV_LIST && args.u.l->tuple) {
        argv = args.u.l->v;
        argc = args.u.l->n;
    } else if (args.t == JV_DICT) {
        map = args.u.d;
    }
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    for (size_t i = 0; i < fmt.n; i++) {
        char c = fmt.p[i];
        if (c != '%') {
            sb_addc(&b, c);
            continue;
        }
        if (++i >= fmt.n) jinja_rfail(R, at, "incomplete format");
        if (fmt.p[i] == '%') {
            sb_addc(&b, '%');
            continue;
        }
        jv arg;
        bool have = false;
        if (fmt.p[i] == '(') {
            size_t k = i + 1;
            while (k < fmt.n && fmt.p[k] != ')') k++;
            if (k >= fmt.n) jinja_rfail(R, at, "incomplete format key");
            if (!map) jinja_rfail(R, at, "format requires a mapping");
            jv *v = jinja_dict_finds(map, fmt.p + i + 1, k - i - 1);
            if (!v) jinja_rfail(R, at, "format key '%.*s' not found", (int)(k - i - 1), fmt.p + i + 1);
            arg = *v;
            have = true;
            i = k + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < fmt.n && strchr("-+ #0", fmt.p[i]) && nf < sizeof flags - 1) flags[nf++] = fmt.p[i++];
        flags[nf] = 0;
        int width = -1, prec = -1;
        if (i < fmt.n && isdigit((unsigned char)fmt.p[i])) {
            width = 0;
            while (i < fmt.n && isdigit((unsigned char)fmt.p[i]) && width < 10000) width = width * 10 + (fmt.p[i++] - '0');
        }
        if (i < fmt.n && fmt.p[i] == '.') {
            i++;
            prec = 0;
            while (i < fmt.n && isdigit((unsigned char)fmt.p[i]) && prec < 10000) prec = prec * 10 + (fmt.p[i++] - '0');
        }
        if (i >= fmt.n) jinja_rfail(R, at, "incomplete format");
        char conv = fmt.p[i];
        if (!have) {
            if (map) arg = args;
            else {
                if (used >= argc) jinja_rfail(R, at, "not enough arguments for format string");
                arg = argv[used++];
            }
        }
        char spec[32];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            jstr s;
            if (conv == 's') s = jinja_to_str(R, arg);
            else {
                sbuf t;
                sb_init(&t, R->a, R->max_output);
                jinja_repr(R, &t, arg, 0);
                s = sb_str(&t);
            }
            if (prec >= 0) {
                size_t k = 0, cps = 0;
                while (k < s.n && cps < (size_t)prec) { jinja_u8_next(s.p, s.n, &k); cps++; }
                s.n = k;
            }
            size_t len = jinja_u8_len(s);
            bool leftj = strchr(flags, '-') != NULL;
            if (!leftj) for (size_t k = len; (int)k < width; k++) sb_addc(&b, ' ');
            sb_add(&b, s.p, s.n);
            if (leftj) for (size_t k = len; (int)k < width; k++) sb_addc(&b, ' ');
        } else if (strchr("diouxXeEfFgGc", conv)) {
            if (arg.t == JV_UNDEF) jinja_fail_undef(R, at, arg);
            if (!jv_isnum(arg)) jinja_rfail(R, at, "%%%c format: a real number is required, not %s", conv, jinja_typename(arg));
            if (conv == 'c') {
                jinja_sb_add_cp(&b, (int32_t)jv_ival(arg));
                continue;
            }
            if (strchr("diouxX", conv)) {
                if (arg.t == JV_FLOAT && (isnan(arg.u.f) || fabs(arg.u.f) > 9.2e18)) jinja_rfail(R, at, "number out of range for %%%c", conv);
                int64_t x = arg.t == JV_FLOAT ? (int64_t)arg.u.f : jv_ival(arg);
                snprintf(spec, sizeof spec, "%%%s%s%s%s%s", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "",
                         "ll", conv == 'i' || conv == 'u' ? "d" : (char[2]){conv, 0});
                if (width >= 0 && prec >= 0) jinja_sb_printf(&b, spec, width, prec, (long long)x);
                else if (width >= 0) jinja_sb_printf(&b, spec, width, (long long)x);
                else if (prec >= 0) jinja_sb_printf(&b, spec, prec, (long long)x);
                else jinja_sb_printf(&b, spec, (long long)x);
            } else {
                double x = jv_fval(arg);
                snprintf(spec, sizeof spec, "%%%s%s%s%c", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "", conv);
                if (width >= 0 && prec >= 0) jinja_sb_printf(&b, spec, width, prec, x);
                else if (width >= 0) jinja_sb_printf(&b, spec, width, x);
                else if (prec >= 0) jinja_sb_printf(&b, spec, prec, x);
                else jinja_sb_printf(&b, spec, x);
            }
        } else {
            jinja_rfail(R, at, "unsupported format character '%c'", conv);
        }
    }
    if (!map && used < argc)
        jinja_rfail(R, at, "not all arguments converted during string formatting");
    return jv_str(sb_str(&b));
}

/* Python's str.format() without format specs: {} {0} {name} {0.attr} {0[key]}. */
static jv jinja_str_format_method(render *R, const node *at, jstr fmt, const cargs *ca) {
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    size_t auto_idx = 0;
    for (size_t i = 0; i < fmt.n; i++) {
        char c = fmt.p[i];
        if (c == '}') {
            if (i + 1 < fmt.n && fmt.p[i + 1] == '}') i++;
            else jinja_rfail(R, at, "single '}' encountered in format string");
            sb_addc(&b, '}');
            continue;
        }
        if (c != '{') {
            sb_addc(&b, c);
            continue;
        }
        if (i + 1 < fmt.n && fmt.p[i + 1] == '{') {
            sb_addc(&b, '{');
            i++;
            continue;
        }
        size_t k = i + 1;
        while (k < fmt.n && fmt.p[k] != '}') k++;
        if (k >= fmt.n) jinja_rfail(R, at, "single '{' encountered in format string");
        jstr field = {fmt.p + i + 1, k - i - 1};
        i = k;
        size_t e = 0;
        while (e < field.n && field.p[e] != '.' && field.p[e] != '[' && field.p[e] != '!' && field.p[e] != ':') e++;
        jv v;
        if (e == 0) {
            if (auto_idx >= ca->npos) jinja_rfail(R, at, "replacement index %zu out of range for positional args tuple", auto_idx);
            v = ca->pos[auto_idx++];
        } else if (isdigit((unsigned char)field.p[0])) {
            size_t idx = 0;
            for (size_t q = 0; q < e; q++) idx = idx * 10 + (size_t)(field.p[q] - '0');
            if (idx >= ca->npos) jinja_rfail(R, at, "replacement index %zu out of range for positional args tuple", idx);
            v = ca->pos[idx];
        } else {
            size_t q;
            for (q = 0; q < ca->nkw; q++)
                if (strlen(ca->kwn[q]) == e && !memcmp(ca->kwn[q], field.p, e)) break;
            if (q == ca->nkw) jinja_rfail(R, at, "format key '%.*s' not found", (int)e, field.p);
            v = ca->kwv[q];
        }
        while (e < field.n && (field.p[e] == '.' || field.p[e] == '[')) {
            if (field.p[e] == '.') {
                size_t s2 = ++e;
                while (e < field.n && field.p[e] != '.' && field.p[e] != '[' && field.p[e] != '!' && field.p[e] != ':') e++;
                v = jinja_getattr(R, at, v, jinja_strndup(R->a, field.p + s2, e - s2));
            } else {
                size_t s2 = ++e;
                while (e < field.n && field.p[e] != ']') e++;
                jstr key = {field.p + s2, e - s2};
                bool digits = key.n > 0;
                for (size_t q = 0; q < key.n; q++) digits = digits && isdigit((unsigned char)key.p[q]);
                v = jinja_getitem(R, at, v, digits ? jv_int(strtoll(jinja_strndup(R->a, key.p, key.n), NULL, 10)) : jv_str(key));
                if (e < field.n) e++;
            }
        }
        bool use_repr = false;
        if (e < field.n && field.p[e] == '!') {
            if (e + 1 < field.n && field.p[e + 1] == 'r') use_repr = true;
            e += 2;
        }
        if (e < field.n) jinja_rfail(R, at, "format specs in str.format() are not supported");
        if (use_repr) jinja_repr(R, &b, v, 0);
        else {
            jstr s = jinja_to_str(R, v);
            sb_add(&b, s.p, s.n);
        }
    }
    return jv_str(sb_str(&b));
}

/* ------------------------------------------------------------ JSON (tojson) */

typedef struct json_opts {
    const char *indent;   /* NULL: single line */
    jstr item_sep, key_sep;
    bool sort_keys, ensure_ascii;
} json_opts;

static void json_str(sbuf *b, jstr s, bool ensure_ascii) {
    sb_addc(b, '"');
    size_t i = 0;
    while (i < s.n) {
        size_t start = i;
        int32_t c = jinja_u8_next(s.p, s.n, &i);
        switch (c) {
        case '"': sb_adds(b, "\\\""); break;
        case '\\': sb_adds(b, "\\\\"); break;
        case '\n': sb_adds(b, "\\n"); break;
        case '\r': sb_adds(b, "\\r"); break;
        case '\t': sb_adds(b, "\\t"); break;
        case '\b': sb_adds(b, "\\b"); break;
        case '\f': sb_adds(b, "\\f"); break;
        default:
            if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
                if (c > 0xffff) {
                    int32_t v = c - 0x10000;
                    jinja_sb_printf(b, "\\u%04x\\u%04x", (unsigned)(0xd800 + (v >> 10)), (unsigned)(0xdc00 + (v & 0x3ff)));
                } else {
                    jinja_sb_printf(b, "\\u%04x", (unsigned)c);
                }
            } else {
                sb_add(b, s.p + start, i - start);
            }
        }
    }
    sb_addc(b, '"');
}

static void json_newline(sbuf *b, const json_opts *o, int level) {
    sb_addc(b, '\n');
    for (int i = 0; i < level; i++) sb_adds(b, o->indent);
}

static void json_float(sbuf *b, double f) {
    if (isnan(f)) sb_adds(b, "NaN");
    else if (isinf(f)) sb_adds(b, f < 0 ? "-Infinity" : "Infinity");
    else {
        char buf[40];
        jinja_py_float_repr(f, buf, sizeof buf);
        sb_adds(b, buf);
    }
}

static jstr json_key(render *R, const node *at, jv k) {
    switch (k.t) {
    case JV_STR: return k.u.s;
    case JV_NONE: return (jstr){"null", 4};
    case JV_BOOL: return k.u.b ? (jstr){"true", 4} : (jstr){"false", 5};
    case JV_INT: case JV_FLOAT: return jinja_to_str(R, k);
    default: jinja_rfail(R, at, "keys must be str, int, float, bool or None, not %s", jinja_typename(k));
    }
}

static int cmp_json_keys(render *R, const node *at, jv a, jv b, void *ud) {
    jstr x = json_key(R, at, a), y = json_key(R, at, b);
    size_t m = x.n < y.n ? x.n : y.n;
    int c = m ? memcmp(x.p, y.p, m) : 0;
    return c ? c : (x.n < y.n ? -1 : x.n > y.n);
}

static int cmp_json_pairs(render *R, const node *at, jv a, jv b, void *ud) {
    return cmp_json_keys(R, at, a.u.l->v[0], b.u.l->v[0], ud);
}

static void jinja_json_dump(render *R, const node *at, sbuf *b, jv v, const json_opts *o, int level) {
    if (level > J_MAX_DEPTH) jinja_rfail(R, at, "value nested too deeply for tojson");
    switch (v.t) {
    case JV_NONE: sb_adds(b, "null"); return;
    case JV_BOOL: sb_adds(b, v.u.b ? "true" : "false"); return;
    case JV_INT: jinja_sb_printf(b, "%" PRId64, v.u.i); return;
    case JV_FLOAT: json_float(b, v.u.f); return;
    case JV_STR: json_str(b, v.u.s, o->ensure_ascii); return;
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->gen) jinja_rfail(R, at, "Object of type generator is not JSON serializable");
        if (!l->n) { sb_adds(b, "[]"); return; }
        sb_addc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_add(b, o->item_sep.p, o->item_sep.n);
            if (o->indent) json_newline(b, o, level + 1);
            jinja_json_dump(R, at, b, l->v[i], o, level + 1);
        }
        if (o->indent) json_newline(b, o, level);
        sb_addc(b, ']');
        return;
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (!d->n) { sb_adds(b, "{}"); return; }
        size_t *order = jinja_alloc(R->a, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            /* sort (key, index) pairs by the key's JSON text */
            jv *tmp = jinja_alloc(R->a, d->n * sizeof(jv));
            for (size_t i = 0; i < d->n; i++) {
                jlist *pair = jinja_list_new(R->a, 2);
                jinja_list_push(R->a, pair, d->k[i]);
                jinja_list_push(R->a, pair, jv_int((int64_t)i));
                tmp[i] = jv_list(pair);
            }
            jinja_merge_sort(R, at, tmp, d->n, cmp_json_pairs, NULL);
            for (size_t i = 0; i < d->n; i++) order[i] = (size_t)tmp[i].u.l->v[1].u.i;
        }
        sb_addc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t k = order[i];
            if (i) sb_add(b, o->item_sep.p, o->item_sep.n);
            if (o->indent) json_newline(b, o, level + 1);
            json_str(b, json_key(R, at, d->k[k]), o->ensure_ascii);
            sb_add(b, o->key_sep.p, o->key_sep.n);
            jinja_json_dump(R, at, b, d->v[k], o, level + 1);
        }
        if (o->indent) json_newline(b, o, level);
        sb_addc(b, '}');
        return;
    }
    default:
        jinja_rfail(R, at, "Object of type %s is not JSON serializable", jinja_typename(v));
    }
}

/* ---- operators */

static bool jv_less(render *R, const node *at, jv a, jv b, const char *opname);

static _Noreturn void fail_order(render *R, const node *at, const char *op, jv a, jv b) {
    jinja_rfail(R, at, "'%s' not supported between instances of '%s' and '%s'", op, jinja_typename(a), jinja_typename(b));
}

/* Python's a < b, for numbers, strings and sequences. */
static bool jv_less(render *R, const node *at, jv a, jv b, const char *opname) {
    if (a.t == JV_UNDEF) jinja_fail_undef(R, at, a);
    if (b.t == JV_UNDEF) jinja_fail_undef(R, at, b);
    if (jv_isnum(a) && jv_isnum(b)) {
        if (jv_isint(a) && jv_isint(b)) return jv_ival(a) < jv_ival(b);
        return jv_fval(a) < jv_fval(b);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = m ? memcmp(a.u.s.p, b.u.s.p, m) : 0;
        return c < 0 || (c == 0 && a.u.s.n < b.u.s.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && !a.u.l->gen && !b.u.l->gen) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++)
            if (!jinja_eq(a.u.l->v[i], b.u.l->v[i])) return jv_less(R, at, a.u.l->v[i], b.u.l->v[i], opname);
        return a.u.l->n < b.u.l->n;
    }
    fail_order(R, at, opname, a, b);
}

static bool jinja_contains(render *R, const node *at, jv container, jv item) {
    switch (container.t) {
    case JV_STR: {
        if (item.t != JV_STR)
            jinja_rfail(R, at, "'in <string>' requires string as left operand, not %s", jinja_typename(item));
        if (item.u.s.n == 0) return true;
        if (item.u.s.n > container.u.s.n) return false;
        return memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
    }
    case JV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (jinja_eq(container.u.l->v[i], item)) return true;
        return false;
    case JV_DICT: return jinja_dict_find(container.u.d, item) != NULL;
    case JV_UNDEF: return false;
    default: jinja_rfail(R, at, "argument of type '%s' is not iterable", jinja_typename(container));
    }
}

static _Noreturn void fail_operands(render *R, const node *at, const char *op, jv a, jv b) {
    jinja_rfail(R, at, "unsupported operand type(s) for %s: '%s' and '%s'", op, jinja_typename(a), jinja_typename(b));
}

static jv repeat_seq(render *R, const node *at, jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > R->max_output / seq.u.s.n) jinja_rfail(R, at, "repeated string is too long");
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        for (int64_t i = 0; i < times; i++) sb_add(&b, seq.u.s.p, seq.u.s.n);
        jv r = jv_str(sb_str(&b));
        r.markup = seq.markup;
        return r;
    }
    if (seq.u.l->n && (uint64_t)times > 10000000 / seq.u.l->n) jinja_rfail(R, at, "repeated list is too long");
    jlist *l = jinja_list_new(R->a, 0);
    l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) jinja_list_push(R->a, l, seq.u.l->v[k]);
    return jv_list(l);
}

/* Python float floor division and modulo (the sign follows the divisor). */
static void float_divmod(double x, double y, double *fdiv, double *fmod_out) {
    double mod = fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, y);
    }
    double fl;
    if (div != 0) {
        fl = floor(div);
        if (div - fl > 0.5) fl += 1.0;
    } else {
        fl = copysign(0.0, x / y);
    }
    *fdiv = fl;
    *fmod_out = mod;
}

static jv jinja_binop(render *R, const node *at, int op, jv a, jv b) {
    static const char *const names[] = {
        [OP_ADD] = "+", [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/",
        [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**",
    };
    const char *name = names[op];
    if (a.t == JV_UNDEF) jinja_fail_undef(R, at, a);
    if (b.t == JV_UNDEF) jinja_fail_undef(R, at, b);
    bool ints = jv_isint(a) && jv_isint(b), nums = jv_isnum(a) && jv_isnum(b);
    int64_t x = ints ? jv_ival(a) : 0, y = ints ? jv_ival(b) : 0, r;
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r)) jinja_rfail(R, at, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_fval(a) + jv_fval(b));
        if (a.t == JV_STR && b.t == JV_STR) {
            if (a.markup != b.markup) {
                /* Markup + str escapes the plain operand */
                if (!a.markup) a = jv_markup(jinja_html_escape(R->a, a.u.s));
                else b = jv_markup(jinja_html_escape(R->a, b.u.s));
            }
            if (!a.u.s.n) return b;
            if (!b.u.s.n) return a;
            if (a.u.s.n > R->max_output - b.u.s.n) jinja_rfail(R, at, "string too long");
            char *p = jinja_alloc(R->a, a.u.s.n + b.u.s.n + 1);
            memcpy(p, a.u.s.p, a.u.s.n);
            memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
            p[a.u.s.n + b.u.s.n] = 0;
            jv res = jv_strn(p, a.u.s.n + b.u.s.n);
            res.markup = a.markup;
            return res;
        }
        if (a.t == JV_LIST && b.t == JV_LIST && !a.u.l->gen && !b.u.l->gen && a.u.l->tuple == b.u.l->tuple) {
            jlist *l = jinja_list_new(R->a, a.u.l->n + b.u.l->n);
            l->tuple = a.u.l->tuple;
            for (size_t i = 0; i < a.u.l->n; i++) jinja_list_push(R->a, l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) jinja_list_push(R->a, l, b.u.l->v[i]);
            return jv_list(l);
        }
        if (a.t == JV_STR) jinja_rfail(R, at, "can only concatenate str (not \"%s\") to str", jinja_typename(b));
        fail_operands(R, at, name, a, b);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r)) jinja_rfail(R, at, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_fval(a) - jv_fval(b));
        fail_operands(R, at, name, a, b);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r)) jinja_rfail(R, at, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_fval(a) * jv_fval(b));
        if ((a.t == JV_STR || (a.t == JV_LIST && !a.u.l->gen)) && jv_isint(b)) return repeat_seq(R, at, a, jv_ival(b));
        if ((b.t == JV_STR || (b.t == JV_LIST && !b.u.l->gen)) && jv_isint(a)) return repeat_seq(R, at, b, jv_ival(a));
        fail_operands(R, at, name, a, b);
    case OP_DIV:
        if (!nums) fail_operands(R, at, name, a, b);
        if (jv_fval(b) == 0) jinja_rfail(R, at, "division by zero");
        return jv_float(jv_fval(a) / jv_fval(b));
    case OP_FLOORDIV: case OP_MOD:
        if (op == OP_MOD && a.t == JV_STR) return jinja_str_format_pct(R, at, a.u.s, b);
        if (!nums) fail_operands(R, at, name, a, b);
        if (ints) {
            if (y == 0) jinja_rfail(R, at, op == OP_MOD ? "integer modulo by zero" : "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD) return jv_int(0);
                jinja_rfail(R, at, "integer overflow");
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jv_int(op == OP_MOD ? m : q);
        }
        if (jv_fval(b) == 0) jinja_rfail(R, at, op == OP_MOD ? "float modulo" : "float floor division by zero");
        {
            double d, m;
            float_divmod(jv_fval(a), jv_fval(b), &d, &m);
            return jv_float(op == OP_MOD ? m : d);
        }
    case OP_POW:
        if (!nums) fail_operands(R, at, name, a, b);
        if (ints && y >= 0) {
            int64_t res = 1, base = x, e = y;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(res, base, &res)) jinja_rfail(R, at, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) jinja_rfail(R, at, "integer overflow");
            }
            return jv_int(res);
        }
        if (jv_fval(a) == 0 && jv_fval(b) < 0) jinja_rfail(R, at, "0.0 cannot be raised to a negative power");
        return jv_float(pow(jv_fval(a), jv_fval(b)));
    }
    jinja_rfail(R, at, "unknown operator");
}

static bool jinja_compare(render *R, const node *at, int op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jinja_eq(a, b);
    case OP_NE: return !jinja_eq(a, b);
    case OP_LT: return jv_less(R, at, a, b, "<");
    case OP_GT: return jv_less(R, at, b, a, ">");
    case OP_LE:
        if (jv_isnum(a) && jv_isnum(b) && !(jv_isint(a) && jv_isint(b))) return jv_fval(a) <= jv_fval(b);
        return !jv_less(R, at, b, a, "<=");
    case OP_GE:
        if (jv_isnum(a) && jv_isnum(b) && !(jv_isint(a) && jv_isint(b))) return jv_fval(a) >= jv_fval(b);
        return !jv_less(R, at, a, b, ">=");
    case OP_IN: return jinja_contains(R, at, b, a);
    case OP_NOTIN: return !jinja_contains(R, at, b, a);
    }
    return false;
}

/* ---- sort keys */

typedef struct sort_ctx {
    bool case_sensitive;
    const char *attribute;
    int by_value;   /* dictsort: jinja_compare pair element 1 instead of 0 */
} sort_ctx;

static jv jinja_sort_key(render *R, const node *at, jv v, const sort_ctx *sc) {
    if (sc->attribute) v = jinja_attr_path(R, at, v, sc->attribute);
    if (!sc->case_sensitive && v.t == JV_STR) v = jv_str(jinja_str_case(R, v.u.s, 0));
    return v;
}

static int jinja_cmp_default(render *R, const node *at, jv a, jv b, void *ud) {
    if (ud) {
        const sort_ctx *sc = ud;
        a = jinja_sort_key(R, at, a, sc);
        b = jinja_sort_key(R, at, b, sc);
    }
    if (jv_less(R, at, a, b, "<")) return -1;
    if (jv_less(R, at, b, a, "<")) return 1;
    return 0;
}

/* Compares the first elements of two pairs (dictsort's precomputed keys). */
static int jinja_cmp_first(render *R, const node *at, jv a, jv b, void *ud) {
    return jinja_cmp_default(R, at, a.u.l->v[0], b.u.l->v[0], ud);
}

/* ------------------------------------------------------------ filters */

static jv jinja_apply_filter(render *R, const node *at, const char *name, jv v, const cargs *ca, scope *sc);
static bool jinja_apply_test(render *R, const node *at, const char *name, jv v, const cargs *ca);

static jv mk_gen(render *R, jlist *l) {
    l->gen = true;
    return jv_list(l);
}

/* Parses python int() text: optional sign, digits with single underscores,
 * surrounding whitespace. */
static bool parse_pyint(jstr s, int base, int64_t *out) {
    s = jinja_str_strip(s, NULL, true, true);
    size_t i = 0;
    bool neg = false;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) neg = s.p[i++] == '-';
    if (base == 16 && i + 1 < s.n && s.p[i] == '0' && (s.p[i + 1] == 'x' || s.p[i + 1] == 'X')) i += 2;
    if (i >= s.n) return false;
    uint64_t v = 0;
    bool prev_us = true;
    for (; i < s.n; i++) {
        char c = s.p[i];
        if (c == '_') {
            if (prev_us) return false;
            prev_us = true;
            continue;
        }
        int d = hexval(c);
        if (d < 0 || d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = false;
    }
    if (prev_us) return false;
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_pyfloat(render *R, jstr s, double *out) {
    s = jinja_str_strip(s, NULL, true, true);
    if (!s.n) return false;
    char *t = jinja_strndup(R->a, s.p, s.n);
    /* python accepts digits with underscores, inf/nan/infinity; reject hex floats */
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (t[i] != '_') t[k++] = t[i];
    t[k] = 0;
    if (strchr(t, 'x') || strchr(t, 'X')) return false;
    char *end;
    errno = 0;
    double v = strtod(t, &end);
    if (end == t || *end) return false;
    *out = v;
    return true;
}

static jv do_int(render *R, const node *at, jv v, jv dflt, int base) {
    int64_t r;
    double f;
    switch (v.t) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.u.b);
    case JV_FLOAT:
        if (isnan(v.u.f)) return dflt;
        if (fabs(v.u.f) >= 9.2e18) jinja_rfail(R, at, "cannot convert float to a 64-bit integer");
        return jv_int((int64_t)v.u.f);
    case JV_STR:
        if (parse_pyint(v.u.s, base, &r)) return jv_int(r);
        if (parse_pyfloat(R, v.u.s, &f)) {
            if (isnan(f)) return dflt;
            if (isinf(f) || fabs(f) >= 9.2e18) jinja_rfail(R, at, "cannot convert float infinity to integer");
            return jv_int((int64_t)f);
        }
        return dflt;
    case JV_UNDEF: jinja_fail_undef(R, at, v);
    default: return dflt;
    }
}

static jv f_select_common(render *R, const node *at, jv v, const cargs *ca, bool attr, bool select) {
    /* jinja2 yields nothing for a false value (none, '', 0, undefined) */
    if (!jinja_truthy(v)) return mk_gen(R, jinja_list_new(R->a, 0));
    jlist *items = jinja_to_iter(R, at, v);
    const char *attribute = NULL;
    size_t first = 0;
    if (attr) {
        if (ca->npos < 1) jinja_rfail(R, at, "%s needs an attribute name", select ? "selectattr" : "rejectattr");
        attribute = jinja_arg_cstr(R, at, ca->pos[0], "the attribute");
        first = 1;
    }
    const char *test = NULL;
    if (ca->npos > first) test = jinja_arg_cstr(R, at, ca->pos[first], "the test name");
    cargs targs = {0};
    if (ca->npos > first + 1) {
        targs.pos = ca->pos + first + 1;
        targs.npos = ca->npos - first - 1;
    }
    targs.kwn = ca->kwn;
    targs.kwv = ca->kwv;
    targs.nkw = ca->nkw;
    jlist *out = jinja_list_new(R->a, 0);
    for (size_t i = 0; i < items->n; i++) {
        jv x = attribute ? jinja_attr_path(R, at, items->v[i], attribute) : items->v[i];
        bool r = test ? jinja_apply_test(R, at, test, x, &targs) : jinja_truthy(x);
        if (r == select) jinja_list_push(R->a, out, items->v[i]);
    }
    return mk_gen(R, out);
}

static jv f_map(render *R, const node *at, jv v, const cargs *ca, scope *sc) {
    if (!jinja_truthy(v)) return mk_gen(R, jinja_list_new(R->a, 0));
    jlist *items = jinja_to_iter(R, at, v);
    jlist *out = jinja_list_new(R->a, items->n);
    const char *attribute = NULL;
    jv dflt = {JV_UNDEF, {0}, false};
    bool have_default = false;
    for (size_t k = 0; k < ca->nkw; k++) {
        if (!strcmp(ca->kwn[k], "attribute")) attribute = jinja_arg_cstr(R, at, ca->kwv[k], "attribute");
        else if (!strcmp(ca->kwn[k], "default")) { dflt = ca->kwv[k]; have_default = true; }
    }
    if (attribute) {
        for (size_t i = 0; i < items->n; i++) {
            jv x = jinja_attr_path(R, at, items->v[i], attribute);
            if (x.t == JV_UNDEF && have_default) x = dflt;
            jinja_list_push(R->a, out, x);
        }
        return mk_gen(R, out);
    }
    if (ca->npos < 1) jinja_rfail(R, at, "map needs a filter name or attribute=");
    const char *fname = jinja_arg_cstr(R, at, ca->pos[0], "the filter name");
    if (!jinja_known_filter(fname)) jinja_rfail(R, at, "no filter named '%s'", fname);
    cargs fargs = {ca->pos + 1, ca->npos - 1, ca->kwn, ca->kwv, ca->nkw};
    for (size_t i = 0; i < items->n; i++) jinja_list_push(R->a, out, jinja_apply_filter(R, at, fname, items->v[i], &fargs, sc));
    return mk_gen(R, out);
}

static jv jinja_items_of_dict(render *R, const jdict *d) {
    jlist *l = jinja_list_new(R->a, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jlist *pair = jinja_list_new(R->a, 2);
        pair->tuple = true;
        jinja_list_push(R->a, pair, d->k[i]);
        jinja_list_push(R->a, pair, d->v[i]);
        jinja_list_push(R->a, l, jv_list(pair));
    }
    return jv_list(l);
}

static jv f_tojson(render *R, const node *at, jv v, const cargs *ca) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jv a[4] = {jv_bool(false), J_NONE, J_NONE, jv_bool(false)};
    jinja_bind(R, at, "tojson", ca, names, 4, 0, a);
    json_opts o = {0};
    o.ensure_ascii = jinja_truthy(a[0]);
    o.sort_keys = jinja_truthy(a[3]);
    if (a[1].t == JV_STR) {
        o.indent = jinja_strndup(R->a, a[1].u.s.p, a[1].u.s.n);
    } else if (jv_isint(a[1])) {
        int64_t n = jv_ival(a[1]);
        if (n > 1000) jinja_rfail(R, at, "tojson indent too large");
        if (n < 0) n = 0;
        char *sp = jinja_alloc(R->a, (size_t)n + 1);
        memset(sp, ' ', (size_t)n);
        sp[n] = 0;
        o.indent = sp;
    } else if (a[1].t != JV_NONE) {
        jinja_rfail(R, at, "tojson indent must be an integer or a string");
    }
    if (a[2].t == JV_LIST && a[2].u.l->n == 2 && a[2].u.l->v[0].t == JV_STR && a[2].u.l->v[1].t == JV_STR) {
        o.item_sep = a[2].u.l->v[0].u.s;
        o.key_sep = a[2].u.l->v[1].u.s;
    } else if (a[2].t == JV_NONE) {
        o.item_sep = o.indent ? (jstr){",", 1} : (jstr){", ", 2};
        o.key_sep = (jstr){": ", 2};
    } else {
        jinja_rfail(R, at, "tojson separators must be a pair of strings");
    }
    sbuf b;
    sb_init(&b, R->a, R->max_output);
    jinja_json_dump(R, at, &b, v, &o, 0);
    return jv_str(sb_str(&b));
}

static jv minmax(render *R, const node *at, jv v, const cargs *ca, bool want_max) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    jv a[2] = {jv_bool(false), J_NONE};
    jinja_bind(R, at, want_max ? "max" : "min", ca, names, 2, 0, a);
    sort_ctx sc = {jinja_truthy(a[0]), a[1].t == JV_STR ? jinja_arg_cstr(R, at, a[1], "attribute") : NULL, 0};
    jlist *items = jinja_to_iter(R, at, v);
    if (!items->n) return jinja_mk_undef(R, "no %s item, sequence was empty", want_max ? "largest" : "smallest");
    jv best = items->v[0];
    for (size_t i = 1; i < items->n; i++) {
        int c = jinja_cmp_default(R, at, items->v[i], best, &sc);
        if (want_max ? c > 0 : c < 0) best = items->v[i];
    }
    return best;
}

/* Applies the filter called name to v. Filters follow jinja2 3.1, with HF's
 * tojson. */
static jv jinja_apply_filter(render *R, const node *at, const char *name, jv v, const cargs *ca, scope *sc) {
#define IS(s) (!strcmp(name, s))
#define ARGS(...) static const char *const names_[] = {__VA_ARGS__}; const size_t nn_ = sizeof names_ / sizeof names_[0]
    if (IS("safe")) return v.t == JV_STR && v.markup ? v : jv_markup(jinja_to_str(R, v));
    if (IS("e") || IS("escape") || IS("forceescape")) {
        if (v.t == JV_STR && v.markup && !IS("forceescape")) return v;
        return jv_markup(jinja_html_escape(R->a, jinja_to_str(R, v)));
    }
    if (IS("string")) return v.t == JV_STR ? v : jv_str(jinja_to_str(R, v));
    if (IS("trim")) {
        ARGS("chars");
        jv a[1] = {J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        jstr chars = a[0].t == JV_STR ? a[0].u.s : (jstr){"", 0};
        jv r = jv_str(jinja_str_strip(jinja_to_str(R, v), a[0].t == JV_STR ? &chars : NULL, true, true));
        r.markup = v.t == JV_STR && v.markup;
        return r;
    }
    if (IS("upper") || IS("lower") || IS("title") || IS("capitalize")) {
        jstr s = jinja_to_str(R, v);
        jv r = jv_str(IS("title") ? jinja_str_title_filter(R, s) : IS("capitalize") ? jinja_str_capitalize(R, s) : jinja_str_case(R, s, IS("upper")));
        r.markup = v.t == JV_STR && v.markup && !IS("title"); /* title joins plain pieces */
        return r;
    }
    if (IS("length") || IS("count")) return jv_int(jinja_len(R, at, v));
    if (IS("wordcount")) {
        jv parts = jinja_str_split(R, jinja_to_str(R, v), NULL, -1, false);
        return jv_int((int64_t)parts.u.l->n);
    }
    if (IS("replace")) {
        ARGS("old", "new", "count");
        jv a[3] = {J_NONE, J_NONE, J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 2, a);
        int64_t count = a[2].t == JV_NONE ? -1 : jinja_arg_int(R, at, a[2], "count");
        /* without autoescape jinja2 replaces on plain str(), even for Markup */
        return jv_str(jinja_str_replace(R, at, jinja_to_str(R, v), jinja_to_str(R, a[0]), jinja_to_str(R, a[1]), count));
    }
    if (IS("default") || IS("d")) {
        ARGS("default_value", "boolean");
        jv a[2] = {jv_strn("", 0), jv_bool(false)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        if (v.t == JV_UNDEF || (jinja_truthy(a[1]) && !jinja_truthy(v))) return a[0];
        return v;
    }
    if (IS("list")) {
        jlist *items = jinja_to_iter(R, at, v);
        jlist *l = jinja_list_new(R->a, items->n);
        for (size_t i = 0; i < items->n; i++) jinja_list_push(R->a, l, items->v[i]);
        return jv_list(l);
    }
    if (IS("first")) {
        jlist *items = jinja_to_iter(R, at, v);
        return items->n ? items->v[0] : jinja_mk_undef(R, "No first item, sequence was empty.");
    }
    if (IS("last")) {
        if (v.t == JV_LIST && v.u.l->gen) jinja_rfail(R, at, "'generator' object is not reversible");
        if (v.t == JV_DICT) jinja_rfail(R, at, "'dict' object is not reversible");
        jlist *items = jinja_to_iter(R, at, v);
        return items->n ? items->v[items->n - 1] : jinja_mk_undef(R, "No last item, sequence was empty.");
    }
    if (IS("reverse")) {
        if (v.t == JV_STR) return jinja_slice(R, at, v, J_NONE, J_NONE, jv_int(-1));
        jlist *items = jinja_to_iter(R, at, v);
        jlist *l = jinja_list_new(R->a, items->n);
        for (size_t i = items->n; i-- > 0;) jinja_list_push(R->a, l, items->v[i]);
        return mk_gen(R, l);
    }
    if (IS("join")) {
        ARGS("d", "attribute");
        jv a[2] = {jv_strn("", 0), J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        jlist *items = jinja_to_iter(R, at, v);
        jstr sep = jinja_to_str(R, a[0]);
        const char *attribute = a[1].t == JV_STR ? jinja_arg_cstr(R, at, a[1], "attribute") : NULL;
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        for (size_t i = 0; i < items->n; i++) {
            if (i) sb_add(&b, sep.p, sep.n);
            jv x = attribute ? jinja_attr_path(R, at, items->v[i], attribute) : items->v[i];
            jstr s = jinja_to_str(R, x);
            sb_add(&b, s.p, s.n);
        }
        return jv_str(sb_str(&b));
    }
    if (IS("items")) {
        if (v.t == JV_UNDEF) return mk_gen(R, jinja_list_new(R->a, 0));
        if (v.t != JV_DICT) jinja_rfail(R, at, "Can only get item pairs from a mapping.");
        jv l = jinja_items_of_dict(R, v.u.d);
        return mk_gen(R, l.u.l);
    }
    if (IS("dictsort")) {
        ARGS("case_sensitive", "by", "reverse");
        jv a[3] = {jv_bool(false), jv_cstr("key"), jv_bool(false)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        if (v.t != JV_DICT) jinja_rfail(R, at, "dictsort needs a mapping, not %s", jinja_typename(v));
        const char *by = jinja_arg_cstr(R, at, a[1], "by");
        sort_ctx sc2 = {jinja_truthy(a[0]), NULL, 0};
        if (!strcmp(by, "value")) sc2.by_value = 1;
        else if (strcmp(by, "key")) jinja_rfail(R, at, "You can only sort by either \"key\" or \"value\"");
        jv l = jinja_items_of_dict(R, v.u.d);
        /* jinja_compare the chosen pair element */
        jv *keys = jinja_alloc(R->a, (l.u.l->n ? l.u.l->n : 1) * sizeof(jv));
        for (size_t i = 0; i < l.u.l->n; i++) {
            jlist *wrap = jinja_list_new(R->a, 2);
            jinja_list_push(R->a, wrap, jinja_sort_key(R, at, l.u.l->v[i].u.l->v[sc2.by_value], &sc2));
            jinja_list_push(R->a, wrap, l.u.l->v[i]);
            keys[i] = jv_list(wrap);
        }
        jinja_merge_sort(R, at, keys, l.u.l->n, jinja_cmp_first, NULL);
        jlist *out = jinja_list_new(R->a, l.u.l->n);
        for (size_t i = 0; i < l.u.l->n; i++) {
            size_t k = jinja_truthy(a[2]) ? l.u.l->n - 1 - i : i;
            jinja_list_push(R->a, out, keys[k].u.l->v[1]);
        }
        return jv_list(out);
    }
    if (IS("sort")) {
        ARGS("reverse", "case_sensitive", "attribute");
        jv a[3] = {jv_bool(false), jv_bool(false), J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        jlist *items = jinja_to_iter(R, at, v);
        jlist *l = jinja_list_new(R->a, items->n);
        for (size_t i = 0; i < items->n; i++) jinja_list_push(R->a, l, items->v[i]);
        sort_ctx sc2 = {jinja_truthy(a[1]), a[2].t == JV_STR ? jinja_arg_cstr(R, at, a[2], "attribute") : NULL, 0};
        jinja_merge_sort(R, at, l->v, l->n, jinja_cmp_default, &sc2);
        if (jinja_truthy(a[0])) {
            /* python's reverse=True keeps equal elements in their original order */
            jlist *r = jinja_list_new(R->a, l->n);
            size_t end = l->n;
            while (end > 0) {
                size_t start = end - 1;
                while (start > 0 && jinja_cmp_default(R, at, l->v[start - 1], l->v[end - 1], &sc2) == 0) start--;
                for (size_t i = start; i < end; i++) jinja_list_push(R->a, r, l->v[i]);
                end = start;
            }
            l = r;
        }
        return jv_list(l);
    }
    if (IS("unique")) {
        ARGS("case_sensitive", "attribute");
        jv a[2] = {jv_bool(false), J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        sort_ctx sc2 = {jinja_truthy(a[0]), a[1].t == JV_STR ? jinja_arg_cstr(R, at, a[1], "attribute") : NULL, 0};
        jlist *items = jinja_to_iter(R, at, v);
        jlist *out = jinja_list_new(R->a, 0), *seen = jinja_list_new(R->a, 0);
        for (size_t i = 0; i < items->n; i++) {
            jv key = jinja_sort_key(R, at, items->v[i], &sc2);
            if (jinja_contains(R, at, jv_list(seen), key)) continue;
            jinja_list_push(R->a, seen, key);
            jinja_list_push(R->a, out, items->v[i]);
        }
        return mk_gen(R, out);
    }
    if (IS("min") || IS("max")) return minmax(R, at, v, ca, IS("max"));
    if (IS("sum")) {
        ARGS("attribute", "start");
        jv a[2] = {J_NONE, jv_int(0)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        const char *attribute = a[0].t == JV_STR ? jinja_arg_cstr(R, at, a[0], "attribute") : NULL;
        jlist *items = jinja_to_iter(R, at, v);
        jv acc = a[1];
        for (size_t i = 0; i < items->n; i++)
            acc = jinja_binop(R, at, OP_ADD, acc, attribute ? jinja_attr_path(R, at, items->v[i], attribute) : items->v[i]);
        return acc;
    }
    if (IS("abs")) {
        if (v.t == JV_UNDEF) jinja_fail_undef(R, at, v);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (jv_isint(v)) {
            int64_t x = jv_ival(v);
            if (x == INT64_MIN) jinja_rfail(R, at, "integer overflow");
            return jv_int(x < 0 ? -x : x);
        }
        jinja_rfail(R, at, "bad operand type for abs(): '%s'", jinja_typename(v));
    }
    if (IS("round")) {
        ARGS("precision", "method");
        jv a[2] = {jv_int(0), jv_cstr("common")};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        if (v.t == JV_UNDEF) jinja_fail_undef(R, at, v);
        if (!jv_isnum(v)) jinja_rfail(R, at, "round needs a number, not %s", jinja_typename(v));
        int64_t prec = jinja_arg_int(R, at, a[0], "precision");
        const char *method = jinja_arg_cstr(R, at, a[1], "method");
        if (prec < -300 || prec > 300) jinja_rfail(R, at, "round precision out of range");
        double x = jv_fval(v);
        if (!strcmp(method, "common")) {
            if (jv_isint(v) && prec >= 0) return jv_int(jv_ival(v));
            if (prec >= 0) {
                char buf[400];
                snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
                return jv_float(strtod(buf, NULL));
            }
            double p = pow(10.0, (double)-prec);
            return jv_float(nearbyint(x / p) * p);
        }
        double p = pow(10.0, (double)prec);
        if (!strcmp(method, "ceil")) return jv_float(ceil(x * p) / p);
        if (!strcmp(method, "floor")) return jv_float(floor(x * p) / p);
        jinja_rfail(R, at, "method must be common, ceil or floor");
    }
    if (IS("int")) {
        ARGS("default", "base");
        jv a[2] = {jv_int(0), jv_int(10)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        int64_t base = jinja_arg_int(R, at, a[1], "base");
        if (base != 2 && base != 8 && base != 10 && base != 16) jinja_rfail(R, at, "int base must be 2, 8, 10 or 16");
        return do_int(R, at, v, a[0], (int)base);
    }
    if (IS("float")) {
        ARGS("default");
        jv a[1] = {jv_float(0.0)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        double f;
        if (jv_isnum(v)) return jv_float(jv_fval(v));
        if (v.t == JV_STR && parse_pyfloat(R, v.u.s, &f)) return jv_float(f);
        if (v.t == JV_UNDEF) jinja_fail_undef(R, at, v);
        return a[0];
    }
    if (IS("tojson")) return f_tojson(R, at, v, ca);
    if (IS("map")) return f_map(R, at, v, ca, sc);
    if (IS("select") || IS("reject")) return f_select_common(R, at, v, ca, false, IS("select"));
    if (IS("selectattr") || IS("rejectattr")) return f_select_common(R, at, v, ca, true, IS("selectattr"));
    if (IS("attr")) {
        ARGS("name");
        jv a[1] = {J_NONE};
        jinja_bind(R, at, name, ca, names_, nn_, 1, a);
        return jinja_getattr(R, at, v, jinja_arg_cstr(R, at, a[0], "the attribute name"));
    }
    if (IS("indent")) {
        ARGS("width", "first", "blank");
        jv a[3] = {jv_int(4), jv_bool(false), jv_bool(false)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        jstr ind;
        if (a[0].t == JV_STR) ind = a[0].u.s;
        else {
            int64_t w = jinja_arg_int(R, at, a[0], "width");
            if (w < 0) w = 0;
            if (w > 1000) jinja_rfail(R, at, "indent width too large");
            char *sp = jinja_alloc(R->a, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            ind.p = sp;
            ind.n = (size_t)w;
        }
        jstr s = jinja_to_str(R, v);
        sbuf t;
        sb_init(&t, R->a, R->max_output);
        sb_add(&t, s.p, s.n);
        sb_addc(&t, '\n');
        jlist *lines = jinja_str_splitlines(R, sb_str(&t));
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        if (jinja_truthy(a[1])) sb_add(&b, ind.p, ind.n);
        for (size_t i = 0; i < lines->n; i++) {
            jstr line = lines->v[i].u.s;
            if (i) {
                sb_addc(&b, '\n');
                if (line.n || jinja_truthy(a[2])) sb_add(&b, ind.p, ind.n);
            }
            sb_add(&b, line.p, line.n);
        }
        return jv_str(sb_str(&b));
    }
    if (IS("center")) {
        ARGS("width");
        jv a[1] = {jv_int(80)};
        jinja_bind(R, at, name, ca, names_, nn_, 0, a);
        jstr s = jinja_to_str(R, v);
        int64_t w = jinja_arg_int(R, at, a[0], "width"), len = (int64_t)jinja_u8_len(s);
        if (w > 100000) jinja_rfail(R, at, "center width too large");
        if (w <= len) return jv_str(s);
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        for (int64_t i = 0; i < left; i++) sb_addc(&b, ' ');
        sb_add(&b, s.p, s.n);
        for (int64_t i = 0; i < pad - left; i++) sb_addc(&b, ' ');
        return jv_str(sb_str(&b));
    }
    if (IS("format")) {
        jstr fmt = jinja_to_str(R, v);
        if (ca->nkw) {
            jdict *d = jinja_dict_new(R->a);
            for (size_t i = 0; i < ca->nkw; i++) jinja_dict_set(R->a, d, jv_cstr(ca->kwn[i]), ca->kwv[i]);
            return jinja_str_format_pct(R, at, fmt, jv_dict(d));
        }
        jlist *t = jinja_list_new(R->a, ca->npos);
        t->tuple = true;
        for (size_t i = 0; i < ca->npos; i++) jinja_list_push(R->a, t, ca->pos[i]);
        return jinja_str_format_pct(R, at, fmt, jv_list(t));
    }
    jinja_rfail(R, at, "no filter named '%s'", name);
#undef IS
#undef ARGS
}

/* ------------------------------------------------------------ tests */

static bool jinja_apply_test(render *R, const node *at, const char *name, jv v, const cargs *ca) {
#define IS(s) (!strcmp(name, s))
    if (IS("defined")) return v.t != JV_UNDEF;
    if (IS("undefined")) return v.t == JV_UNDEF;
    if (IS("none")) return v.t == JV_NONE;
    if (IS("boolean")) return v.t == JV_BOOL;
    if (IS("true")) return v.t == JV_BOOL && v.u.b;
    if (IS("false")) return v.t == JV_BOOL && !v.u.b;
    if (IS("integer")) return v.t == JV_INT;
    if (IS("float")) return v.t == JV_FLOAT;
    if (IS("number")) return jv_isnum(v);
    if (IS("string")) return v.t == JV_STR;
    if (IS("mapping")) return v.t == JV_DICT;
    if (IS("iterable")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (IS("sequence")) return (v.t == JV_LIST && !v.u.l->gen) || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (IS("callable")) return v.t == JV_MACRO || v.t == JV_FUNC;
    if (IS("escaped")) return false;
    if (IS("filter") || IS("test")) {
        if (v.t != JV_STR) return false;
        char *n = jinja_strndup(R->a, v.u.s.p, v.u.s.n);
        return IS("filter") ? jinja_known_filter(n) : jinja_known_test(n);
    }
    if (IS("lower") || IS("upper")) {
        jstr s = jinja_to_str(R, v);
        bool cased = false;
        size_t i = 0;
        while (i < s.n) {
            int32_t c = jinja_u8_next(s.p, s.n, &i);
            if (!jinja_cp_is_cased_letter(c)) continue;
            cased = true;
            if (IS("lower") ? utf8proc_tolower(c) != c : utf8proc_toupper(c) != c) return false;
        }
        return cased;
    }
    if (IS("even") || IS("odd")) {
        if (v.t == JV_UNDEF) jinja_fail_undef(R, at, v);
        if (!jv_isnum(v)) jinja_rfail(R, at, "the %s test needs a number, not %s", name, jinja_typename(v));
        jv m = jinja_binop(R, at, OP_MOD, v, jv_int(2));
        return IS("even") ? !jinja_truthy(m) : jinja_truthy(m);
    }
    if (ca->npos + ca->nkw != 1) jinja_rfail(R, at, "the '%s' test needs one argument", name);
    jv arg = ca->npos ? ca->pos[0] : ca->kwv[0];
    if (IS("divisibleby")) {
        jv m = jinja_binop(R, at, OP_MOD, v, arg);
        return !jinja_truthy(m);
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jinja_eq(v, arg);
    if (IS("ne") || IS("!=")) return !jinja_eq(v, arg);
    if (IS("lt") || IS("lessthan") || IS("<")) return jinja_compare(R, at, OP_LT, v, arg);
    if (IS("le") || IS("<=")) return jinja_compare(R, at, OP_LE, v, arg);
    if (IS("gt") || IS("greaterthan") || IS(">")) return jinja_compare(R, at, OP_GT, v, arg);
    if (IS("ge") || IS(">=")) return jinja_compare(R, at, OP_GE, v, arg);
    if (IS("in")) return jinja_contains(R, at, arg, v);
    if (IS("sameas")) {
        if (v.t != arg.t) return false;
        if (v.t == JV_LIST) return v.u.l == arg.u.l;
        if (v.t == JV_DICT || v.t == JV_NS) return v.u.d == arg.u.d;
        return jinja_eq(v, arg);
    }
    jinja_rfail(R, at, "no test named '%s'", name);
#undef IS
}

/* ------------------------------------------------------------ methods */

static jstr arg_str(render *R, const node *at, jv v, const char *fn) {
    if (v.t != JV_STR) jinja_rfail(R, at, "%s() argument must be str, not %s", fn, jinja_typename(v));
    return v.u.s;
}

/* str.find/rfind/index/count with optional start/end (code point indices). */
static int64_t str_find(render *R, const node *at, jstr s, const cargs *ca, const char *fn, bool from_right, int64_t *count_out) {
    static const char *const names[] = {"sub", "start", "end"};
    jv a[3] = {J_NONE, J_NONE, J_NONE};
    jinja_bind(R, at, fn, ca, names, 3, 1, a);
    jstr sub = arg_str(R, at, a[0], fn);
    size_t ncp;
    size_t *off = jinja_cp_offsets(R, s, &ncp);
    /* slice semantics for start/end; a start beyond the end finds nothing */
    int64_t len = (int64_t)ncp, start = 0, end = len;
    if (a[1].t != JV_NONE) {
        start = jinja_arg_int(R, at, a[1], "start");
        if (start < 0 && (start += len) < 0) start = 0;
    }
    if (a[2].t != JV_NONE) {
        end = jinja_arg_int(R, at, a[2], "end");
        if (end < 0 && (end += len) < 0) end = 0;
        if (end > len) end = len;
    }
    if (count_out) *count_out = 0;
    if (start > len || start > end) return -1;
    jstr hay = {s.p + off[start], off[end] - off[start]};
    if (count_out) {
        if (!sub.n) {
            *count_out = end - start + 1;
            return 0;
        }
        size_t i = 0;
        while (i + sub.n <= hay.n) {
            const char *h = memmem(hay.p + i, hay.n - i, sub.p, sub.n);
            if (!h) break;
            (*count_out)++;
            i = (size_t)(h - hay.p) + sub.n;
        }
        return 0;
    }
    if (sub.n > hay.n) return -1;
    if (!from_right) {
        const char *h = sub.n ? memmem(hay.p, hay.n, sub.p, sub.n) : hay.p;
        if (!h) return -1;
        return start + jinja_cp_index(hay, (size_t)(h - hay.p));
    }
    for (size_t p = hay.n - sub.n + 1; p-- > 0;)
        if (!sub.n || !memcmp(hay.p + p, sub.p, sub.n)) return start + jinja_cp_index(hay, p);
    return -1;
}

static bool affix_match(jstr s, jstr affix, bool suffix) {
    if (affix.n > s.n) return false;
    return !affix.n || !memcmp(suffix ? s.p + s.n - affix.n : s.p, affix.p, affix.n);
}

static bool str_method(render *R, const node *at, jstr s, const char *name, const cargs *ca, jv *out) {
#define IS(x) (!strcmp(name, x))
    if (IS("startswith") || IS("endswith")) {
        static const char *const names[] = {"prefix", "start", "end"};
        jv a[3] = {J_NONE, J_NONE, J_NONE};
        jinja_bind(R, at, name, ca, names, 3, 1, a);
        jstr hay = s;
        if (a[1].t != JV_NONE || a[2].t != JV_NONE) {
            jv sl = jinja_slice(R, at, jv_str(s), a[1], a[2], J_NONE);
            hay = sl.u.s;
        }
        bool suffix = IS("endswith");
        if (a[0].t == JV_LIST && a[0].u.l->tuple) {
            bool r = false;
            for (size_t i = 0; i < a[0].u.l->n; i++)
                r = r || affix_match(hay, arg_str(R, at, a[0].u.l->v[i], name), suffix);
            *out = jv_bool(r);
            return true;
        }
        if (a[0].t != JV_STR) jinja_rfail(R, at, "%s first arg must be str or a tuple of str, not %s", name, jinja_typename(a[0]));
        *out = jv_bool(affix_match(hay, a[0].u.s, suffix));
        return true;
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        static const char *const names[] = {"chars"};
        jv a[1] = {J_NONE};
        jinja_bind(R, at, name, ca, names, 1, 0, a);
        jstr chars = a[0].t == JV_NONE ? (jstr){"", 0} : arg_str(R, at, a[0], name);
        *out = jv_str(jinja_str_strip(s, a[0].t == JV_NONE ? NULL : &chars, !IS("rstrip"), !IS("lstrip")));
        return true;
    }
    if (IS("split") || IS("rsplit")) {
        static const char *const names[] = {"sep", "maxsplit"};
        jv a[2] = {J_NONE, jv_int(-1)};
        jinja_bind(R, at, name, ca, names, 2, 0, a);
        int64_t maxsplit = jinja_arg_int(R, at, a[1], "maxsplit");
        if (a[0].t == JV_NONE) {
            *out = jinja_str_split(R, s, NULL, maxsplit, IS("rsplit"));
        } else {
            jstr sep = arg_str(R, at, a[0], name);
            if (!sep.n) jinja_rfail(R, at, "empty separator");
            *out = jinja_str_split(R, s, &sep, maxsplit, IS("rsplit"));
        }
        return true;
    }
    if (IS("splitlines")) {
        *out = jv_list(jinja_str_splitlines(R, s));
        return true;
    }
    if (IS("upper") || IS("lower") || IS("swapcase") || IS("title") || IS("capitalize") || IS("casefold")) {
        if (ca->npos || ca->nkw) jinja_rfail(R, at, "%s() takes no arguments", name);
        if (IS("title")) *out = jv_str(jinja_str_title_method(R, s));
        else if (IS("capitalize")) *out = jv_str(jinja_str_capitalize(R, s));
        else *out = jv_str(jinja_str_case(R, s, IS("upper") ? 1 : IS("swapcase") ? 2 : 0));
        return true;
    }
    if (IS("replace")) {
        static const char *const names[] = {"old", "new", "count"};
        jv a[3] = {J_NONE, J_NONE, jv_int(-1)};
        jinja_bind(R, at, name, ca, names, 3, 2, a);
        *out = jv_str(jinja_str_replace(R, at, s, arg_str(R, at, a[0], name), arg_str(R, at, a[1], name),
                                        jinja_arg_int(R, at, a[2], "count")));
        return true;
    }
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex")) {
        int64_t r = str_find(R, at, s, ca, name, IS("rfind") || IS("rindex"), NULL);
        if (r < 0 && (IS("index") || IS("rindex"))) jinja_rfail(R, at, "substring not found");
        *out = jv_int(r);
        return true;
    }
    if (IS("count")) {
        int64_t c;
        str_find(R, at, s, ca, name, false, &c);
        *out = jv_int(c);
        return true;
    }
    if (IS("format")) {
        *out = jinja_str_format_method(R, at, s, ca);
        return true;
    }
    if (IS("join")) {
        if (ca->npos != 1 || ca->nkw) jinja_rfail(R, at, "join() takes exactly one argument");
        jlist *items = jinja_to_iter(R, at, ca->pos[0]);
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        for (size_t i = 0; i < items->n; i++) {
            if (i) sb_add(&b, s.p, s.n);
            if (items->v[i].t != JV_STR)
                jinja_rfail(R, at, "sequence item %zu: expected str instance, %s found", i, jinja_typename(items->v[i]));
            sb_add(&b, items->v[i].u.s.p, items->v[i].u.s.n);
        }
        *out = jv_str(sb_str(&b));
        return true;
    }
    if (IS("removeprefix") || IS("removesuffix")) {
        if (ca->npos != 1 || ca->nkw) jinja_rfail(R, at, "%s() takes exactly one argument", name);
        jstr affix = arg_str(R, at, ca->pos[0], name);
        bool suffix = IS("removesuffix");
        if (affix.n && affix_match(s, affix, suffix)) {
            jstr r = {suffix ? s.p : s.p + affix.n, s.n - affix.n};
            *out = jv_str(r);
        } else {
            *out = jv_str(s);
        }
        return true;
    }
    if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace") || IS("isupper") || IS("islower") ||
        IS("isnumeric") || IS("isdecimal")) {
        if (ca->npos || ca->nkw) jinja_rfail(R, at, "%s() takes no arguments", name);
        if (IS("isupper") || IS("islower")) {
            cargs none = {0};
            *out = jv_bool(jinja_apply_test(R, at, IS("isupper") ? "upper" : "lower", jv_str(s), &none));
            return true;
        }
        bool r = s.n > 0;
        size_t i = 0;
        while (r && i < s.n) {
            int32_t c = jinja_u8_next(s.p, s.n, &i);
            utf8proc_category_t cat = utf8proc_category(c);
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            bool alpha = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
                         cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
            bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
            if (IS("isdigit") || IS("isdecimal")) r = digit;
            else if (IS("isnumeric")) r = numeric;
            else if (IS("isalpha")) r = alpha;
            else if (IS("isalnum")) r = alpha || numeric;
            else r = jinja_py_isspace(c);
        }
        *out = jv_bool(r);
        return true;
    }
    if (IS("zfill") || IS("ljust") || IS("rjust") || IS("center")) {
        static const char *const names[] = {"width", "fillchar"};
        jv a[2] = {J_NONE, jv_cstr(" ")};
        jinja_bind(R, at, name, ca, names, IS("zfill") ? 1 : 2, 1, a);
        int64_t w = jinja_arg_int(R, at, a[0], "width"), len = (int64_t)jinja_u8_len(s);
        if (w > 100000) jinja_rfail(R, at, "width too large");
        jstr fill = IS("zfill") ? (jstr){"0", 1} : arg_str(R, at, a[1], name);
        if (jinja_u8_len(fill) != 1) jinja_rfail(R, at, "The fill character must be exactly one character long");
        if (w <= len) {
            *out = jv_str(s);
            return true;
        }
        int64_t pad = w - len, left;
        if (IS("ljust")) left = 0;
        else if (IS("rjust") || IS("zfill")) left = pad;
        else left = pad / 2 + (pad & w & 1);
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        size_t body = 0;
        if (IS("zfill") && s.n && (s.p[0] == '+' || s.p[0] == '-')) {
            sb_addc(&b, s.p[0]);
            body = 1;
        }
        for (int64_t i = 0; i < left; i++) sb_add(&b, fill.p, fill.n);
        sb_add(&b, s.p + body, s.n - body);
        for (int64_t i = 0; i < pad - left; i++) sb_add(&b, fill.p, fill.n);
        *out = jv_str(sb_str(&b));
        return true;
    }
    return false;
#undef IS
}

/* Method calls on values (obj.name(args)); false when obj has no such method,
 * so the caller falls back to attribute jinja_lookup. */
static bool jinja_call_method(render *R, const node *at, jv obj, const char *name, const cargs *ca, jv *out) {
    static const char *const unsafe_list[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                              "reverse", "__setitem__", NULL};
    static const char *const unsafe_dict[] = {"update", "pop", "popitem", "setdefault", "clear", "__setitem__", NULL};
    switch (obj.t) {
    case JV_STR: {
        if (!str_method(R, at, obj.u.s, name, ca, out)) return false;
        /* markupsafe keeps Markup through these methods */
        static const char *const keep[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize",
                                           "swapcase", "center", "ljust", "rjust", "zfill", "removeprefix",
                                           "removesuffix", NULL};
        if (obj.markup && out->t == JV_STR)
            for (size_t i = 0; keep[i]; i++)
                if (!strcmp(name, keep[i])) out->markup = true;
        return true;
    }
    case JV_DICT:
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            if (ca->npos || ca->nkw) jinja_rfail(R, at, "%s() takes no arguments", name);
            if (name[0] == 'i') *out = jinja_items_of_dict(R, obj.u.d);
            else {
                jlist *l = jinja_list_new(R->a, obj.u.d->n);
                for (size_t i = 0; i < obj.u.d->n; i++) jinja_list_push(R->a, l, name[0] == 'k' ? obj.u.d->k[i] : obj.u.d->v[i]);
                *out = jv_list(l);
            }
            return true;
        }
        if (!strcmp(name, "get")) {
            static const char *const names[] = {"key", "default"};
            jv a[2] = {J_NONE, J_NONE};
            jinja_bind(R, at, name, ca, names, 2, 1, a);
            jv *v = jinja_dict_find(obj.u.d, a[0]);
            *out = v ? *v : a[1];
            return true;
        }
        if (!strcmp(name, "copy")) {
            jdict *d = jinja_dict_new(R->a);
            for (size_t i = 0; i < obj.u.d->n; i++) jinja_dict_set(R->a, d, obj.u.d->k[i], obj.u.d->v[i]);
            *out = jv_dict(d);
            return true;
        }
        for (size_t i = 0; unsafe_dict[i]; i++)
            if (!strcmp(name, unsafe_dict[i])) jinja_rfail(R, at, "access to attribute '%s' of 'dict' object is unsafe.", name);
        return false;
    case JV_LIST:
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            if (ca->npos != 1 || ca->nkw) jinja_rfail(R, at, "%s() takes exactly one argument", name);
            int64_t cnt = 0;
            for (size_t i = 0; i < obj.u.l->n; i++)
                if (jinja_eq(obj.u.l->v[i], ca->pos[0])) {
                    if (name[0] == 'i') {
                        *out = jv_int((int64_t)i);
                        return true;
                    }
                    cnt++;
                }
            if (name[0] == 'i') jinja_rfail(R, at, "value is not in list");
            *out = jv_int(cnt);
            return true;
        }
        for (size_t i = 0; unsafe_list[i]; i++)
            if (!strcmp(name, unsafe_list[i]))
                jinja_rfail(R, at, "access to attribute '%s' of '%s' object is unsafe.", name, jinja_typename(obj));
        return false;
    case JV_LOOP:
        if (!strcmp(name, "cycle")) {
            if (!ca->npos) jinja_rfail(R, at, "no items for cycling given");
            *out = ca->pos[obj.u.loop->i % ca->npos];
            return true;
        }
        return false;
    default:
        return false;
    }
}

/* ------------------------------------------------------------ globals */

static jv jinja_call_builtin(render *R, const node *at, int fn, const cargs *ca) {
    switch (fn) {
    case FN_RANGE: {
        if (ca->nkw || ca->npos < 1 || ca->npos > 3) jinja_rfail(R, at, "range() takes 1 to 3 positional arguments");
        int64_t start = 0, stop, stepv = 1;
        for (size_t i = 0; i < ca->npos; i++)
            if (!jv_isint(ca->pos[i])) jinja_rfail(R, at, "range() arguments must be integers, not %s", jinja_typename(ca->pos[i]));
        if (ca->npos == 1) stop = jv_ival(ca->pos[0]);
        else {
            start = jv_ival(ca->pos[0]);
            stop = jv_ival(ca->pos[1]);
            if (ca->npos == 3) stepv = jv_ival(ca->pos[2]);
        }
        if (stepv == 0) jinja_rfail(R, at, "range() arg 3 must not be zero");
        /* number of items, computed without overflow */
        uint64_t count = 0;
        if (stepv > 0 && start < stop) count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)stepv + 1;
        if (stepv < 0 && start > stop)
            count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)stepv) + 1;
        if (count > 10000000) jinja_rfail(R, at, "range() too large");
        jlist *l = jinja_list_new(R->a, (size_t)count);
        for (uint64_t k = 0; k < count; k++) jinja_list_push(R->a, l, jv_int((int64_t)((uint64_t)start + k * (uint64_t)stepv)));
        return jv_list(l);
    }
    case FN_NAMESPACE: case FN_DICT: {
        jdict *d = jinja_dict_new(R->a);
        for (size_t i = 0; i < ca->npos; i++) {
            if (ca->pos[i].t != JV_DICT && ca->pos[i].t != JV_NS)
                jinja_rfail(R, at, "%s() positional arguments must be mappings", jinja_fn_names[fn]);
            const jdict *src = ca->pos[i].u.d;
            for (size_t k = 0; k < src->n; k++) jinja_dict_set(R->a, d, src->k[k], src->v[k]);
        }
        for (size_t i = 0; i < ca->nkw; i++) jinja_dict_set(R->a, d, jv_cstr(ca->kwn[i]), ca->kwv[i]);
        jv v = jv_dict(d);
        if (fn == FN_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case FN_RAISE: {
        jstr msg = ca->npos ? jinja_to_str(R, ca->pos[0]) : (jstr){"", 0};
        jinja_fail(R->err, TELA_ERR_ARG, at->line, at->col, "the template raised an error: %.*s",
                   (int)(msg.n > 400 ? 400 : msg.n), msg.p);
    }
    case FN_STRFTIME: {
        if (ca->npos != 1 || ca->nkw || ca->pos[0].t != JV_STR) jinja_rfail(R, at, "strftime_now() takes one format string");
        time_t t = R->now ? (time_t)R->now : time(NULL);
        struct tm tmv;
        if (!localtime_r(&t, &tmv)) jinja_rfail(R, at, "strftime_now(): cannot convert the time");
        char *fmt = jinja_strndup(R->a, ca->pos[0].u.s.p, ca->pos[0].u.s.n);
        char buf[512];
        size_t n = strftime(buf, sizeof buf, fmt, &tmv);
        if (n == 0 && fmt[0]) jinja_rfail(R, at, "strftime_now(): format result too long or empty");
        return jv_strn(jinja_strndup(R->a, buf, n), n);
    }
    }
    jinja_rfail(R, at, "internal error: unknown builtin");
}

/* ------------------------------------------------------------ evaluation */

/* ---- calls */

static jv eval(render *R, const node *e, scope *sc);
static void jinja_exec_body(render *R, nlist body, scope *sc);

static cargs eval_args(render *R, const nargs *na, scope *sc) {
    cargs ca = {0};
    ca.npos = na->pos.n;
    ca.nkw = na->nkw;
    if (ca.npos) {
        ca.pos = jinja_alloc(R->a, ca.npos * sizeof(jv));
        for (size_t i = 0; i < ca.npos; i++) ca.pos[i] = eval(R, na->pos.v[i], sc);
    }
    if (ca.nkw) {
        ca.kwn = na->kwn;
        ca.kwv = jinja_alloc(R->a, ca.nkw * sizeof(jv));
        for (size_t i = 0; i < ca.nkw; i++) ca.kwv[i] = eval(R, na->kwv[i], sc);
    }
    return ca;
}

static jv call_macro(render *R, const node *at, const jmacro *m, const cargs *ca, const jmacro *caller) {
    if (R->macro_depth >= J_MAX_MACRO_DEPTH)
        jinja_rfail(R, at, "macros nested more than %d deep (endless recursion?)", J_MAX_MACRO_DEPTH);
    const nargs *sig = &m->def->args;
    size_t np = sig->nkw;
    scope *sc = jinja_new_scope(R, m->closure);
    bool *given = jinja_alloc(R->a, (np ? np : 1) * sizeof(bool));
    memset(given, 0, (np ? np : 1) * sizeof(bool));
    jlist *varargs = jinja_list_new(R->a, 0);
    varargs->tuple = true;
    jdict *kwargs = jinja_dict_new(R->a);
    for (size_t i = 0; i < ca->npos; i++) {
        if (i < np) {
            jinja_scope_set(R, sc, sig->kwn[i], ca->pos[i]);
            given[i] = true;
        } else if (m->catch_varargs) {
            jinja_list_push(R->a, varargs, ca->pos[i]);
        } else {
            jinja_rfail(R, at, "macro '%s' takes not more than %zu argument(s)", m->name, np);
        }
    }
    for (size_t k = 0; k < ca->nkw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (!strcmp(sig->kwn[i], ca->kwn[k])) break;
        if (i < np) {
            if (given[i]) jinja_rfail(R, at, "macro '%s' got multiple values for argument '%s'", m->name, ca->kwn[k]);
            jinja_scope_set(R, sc, sig->kwn[i], ca->kwv[k]);
            given[i] = true;
        } else if (m->catch_kwargs) {
            jinja_dict_set(R->a, kwargs, jv_cstr(ca->kwn[k]), ca->kwv[k]);
        } else {
            jinja_rfail(R, at, "macro '%s' takes no keyword argument '%s'", m->name, ca->kwn[k]);
        }
    }
    R->macro_depth++;
    for (size_t i = 0; i < np; i++)
        if (!given[i])
            jinja_scope_set(R, sc, sig->kwn[i],
                            sig->kwv[i] ? eval(R, sig->kwv[i], sc)
                                        : jinja_mk_undef(R, "parameter '%s' was not provided", sig->kwn[i]));
    if (m->catch_varargs) jinja_scope_set(R, sc, "varargs", jv_list(varargs));
    if (m->catch_kwargs) jinja_scope_set(R, sc, "kwargs", jv_dict(kwargs));
    if (caller) {
        jv cv = {JV_MACRO, {0}, false};
        cv.u.m = (jmacro *)caller;
        jinja_scope_set(R, sc, "caller", cv);
    }
    sbuf *saved = R->out, buf;
    sb_init(&buf, R->a, R->max_output);
    R->out = &buf;
    int saved_ctl = R->loopctl;
    jinja_exec_body(R, m->def->body, sc);
    R->loopctl = saved_ctl;
    R->out = saved;
    R->macro_depth--;
    return jv_str(sb_str(&buf));
}

static jv call_value(render *R, const node *at, jv fn, const cargs *ca, const jmacro *caller) {
    switch (fn.t) {
    case JV_MACRO: return call_macro(R, at, fn.u.m, ca, caller);
    case JV_FUNC:
        if (caller) jinja_rfail(R, at, "a call block needs a macro");
        return jinja_call_builtin(R, at, fn.u.fn, ca);
    case JV_UNDEF: jinja_fail_undef(R, at, fn);
    default: jinja_rfail(R, at, "'%s' object is not callable", jinja_typename(fn));
    }
}

static jv eval_call(render *R, const node *e, scope *sc, const jmacro *caller) {
    const node *callee = e->a;
    if (callee->k == E_ATTR) {
        jv obj = eval(R, callee->a, sc);
        if (obj.t == JV_UNDEF) jinja_fail_undef(R, callee, obj);
        cargs ca = eval_args(R, &e->args, sc);
        jv res;
        if (!caller && jinja_call_method(R, e, obj, callee->name, &ca, &res)) return res;
        return call_value(R, e, jinja_getattr(R, callee, obj, callee->name), &ca, caller);
    }
    jv fn = eval(R, callee, sc);
    cargs ca = eval_args(R, &e->args, sc);
    return call_value(R, e, fn, &ca, caller);
}

/* ---- expressions */

static jv eval(render *R, const node *e, scope *sc) {
    if (++R->depth > J_MAX_DEPTH * 8) jinja_rfail(R, e, "expressions or macros nested too deeply");
    jv v;
    switch (e->k) {
    case E_LIT: v = e->lit; break;
    case E_NAME: v = jinja_lookup(R, sc, e->name); break;
    case E_LIST: case E_TUPLE: {
        jlist *l = jinja_list_new(R->a, e->items.n);
        l->tuple = e->k == E_TUPLE;
        for (size_t i = 0; i < e->items.n; i++) jinja_list_push(R->a, l, eval(R, e->items.v[i], sc));
        v = jv_list(l);
        break;
    }
    case E_DICT: {
        jdict *d = jinja_dict_new(R->a);
        for (size_t i = 0; i < e->items.n; i++) {
            jv k = eval(R, e->items.v[i], sc);
            if (k.t == JV_LIST && !k.u.l->tuple) jinja_rfail(R, e->items.v[i], "unhashable type: 'list'");
            if (k.t == JV_DICT || k.t == JV_NS) jinja_rfail(R, e->items.v[i], "unhashable type: 'dict'");
            jinja_dict_set(R->a, d, k, eval(R, e->vals.v[i], sc));
        }
        v = jv_dict(d);
        break;
    }
    case E_ATTR: v = jinja_getattr(R, e, eval(R, e->a, sc), e->name); break;
    case E_ITEM: {
        jv obj = eval(R, e->a, sc);
        v = jinja_getitem(R, e, obj, eval(R, e->b, sc));
        break;
    }
    case E_SLICE: {
        jv obj = eval(R, e->a, sc);
        jv p[3];
        for (int i = 0; i < 3; i++) p[i] = e->args.pos.v[i] ? eval(R, e->args.pos.v[i], sc) : J_NONE;
        v = jinja_slice(R, e, obj, p[0], p[1], p[2]);
        break;
    }
    case E_CALL: v = eval_call(R, e, sc, NULL); break;
    case E_FILTER: {
        jv operand = eval(R, e->a, sc);
        cargs ca = eval_args(R, &e->args, sc);
        v = jinja_apply_filter(R, e, e->name, operand, &ca, sc);
        break;
    }
    case E_TEST: {
        jv operand = eval(R, e->a, sc);
        cargs ca = eval_args(R, &e->args, sc);
        bool r = jinja_apply_test(R, e, e->name, operand, &ca);
        v = jv_bool(e->op ? !r : r);
        break;
    }
    case E_BIN: {
        jv a = eval(R, e->a, sc);
        v = jinja_binop(R, e, e->op, a, eval(R, e->b, sc));
        break;
    }
    case E_NEG: case E_POS: {
        jv a = eval(R, e->a, sc);
        if (a.t == JV_UNDEF) jinja_fail_undef(R, e, a);
        if (!jv_isnum(a)) jinja_rfail(R, e, "bad operand type for unary %c: '%s'", e->k == E_NEG ? '-' : '+', jinja_typename(a));
        if (e->k == E_POS) v = a.t == JV_BOOL ? jv_int(a.u.b) : a;
        else if (a.t == JV_FLOAT) v = jv_float(-a.u.f);
        else {
            int64_t x = jv_ival(a);
            if (x == INT64_MIN) jinja_rfail(R, e, "integer overflow");
            v = jv_int(-x);
        }
        break;
    }
    case E_NOT: v = jv_bool(!jinja_truthy(eval(R, e->a, sc))); break;
    case E_AND: v = eval(R, e->a, sc); if (jinja_truthy(v)) v = eval(R, e->b, sc); break;
    case E_OR: v = eval(R, e->a, sc); if (!jinja_truthy(v)) v = eval(R, e->b, sc); break;
    case E_COND:
        if (jinja_truthy(eval(R, e->b, sc))) v = eval(R, e->a, sc);
        else v = e->c ? eval(R, e->c, sc) : jinja_mk_undef(R, "the inline if expression evaluated to false and no else section was defined");
        break;
    case E_CMP: {
        jv left = eval(R, e->items.v[0], sc);
        v = jv_bool(true);
        for (size_t i = 0; i + 1 < e->items.n; i++) {
            jv right = eval(R, e->items.v[i + 1], sc);
            if (!jinja_compare(R, e, e->ops[i], left, right)) {
                v = jv_bool(false);
                break;
            }
            left = right;
        }
        break;
    }
    case E_CONCAT: {
        sbuf b;
        sb_init(&b, R->a, R->max_output);
        for (size_t i = 0; i < e->items.n; i++) {
            jstr s = jinja_to_str(R, eval(R, e->items.v[i], sc));
            sb_add(&b, s.p, s.n);
        }
        v = jv_str(sb_str(&b));
        break;
    }
    default: jinja_rfail(R, e, "internal error: bad expression node");
    }
    R->depth--;
    return v;
}

/* ---- statements */

static void bind_targets(render *R, const node *at, scope *sc, const char **names, size_t n, jv v) {
    if (n == 1) {
        jinja_scope_set(R, sc, names[0], v);
        return;
    }
    if (v.t == JV_UNDEF) jinja_fail_undef(R, at, v);
    jlist *l = jinja_to_iter(R, at, v);
    if (l->n < n) jinja_rfail(R, at, "not enough values to unpack (expected %zu, got %zu)", n, l->n);
    if (l->n > n) jinja_rfail(R, at, "too many values to unpack (expected %zu)", n);
    for (size_t i = 0; i < n; i++) jinja_scope_set(R, sc, names[i], l->v[i]);
}

static jv apply_chain(render *R, const node *f, jv v, scope *sc) {
    if (!f) return v;
    v = apply_chain(R, f->a, v, sc);
    cargs ca = eval_args(R, &f->args, sc);
    return jinja_apply_filter(R, f, f->name, v, &ca, sc);
}

static jstr render_capture(render *R, nlist body, scope *sc) {
    sbuf *saved = R->out, buf;
    sb_init(&buf, R->a, R->max_output);
    R->out = &buf;
    jinja_exec_body(R, body, sc);
    R->out = saved;
    return sb_str(&buf);
}

static void step(render *R, const node *at) {
    if (++R->steps > J_MAX_STEPS)
        jinja_fail(R->err, TELA_ERR_UNSUPPORTED, at->line, at->col, "the template ran for more than %llu steps",
                   (unsigned long long)J_MAX_STEPS);
}

static void exec_for(render *R, const node *s, scope *sc) {
    jv it = eval(R, s->a, sc);
    jlist *items = jinja_to_iter(R, s->a, it);
    if (s->b) {
        jlist *kept = jinja_list_new(R->a, 0);
        for (size_t i = 0; i < items->n; i++) {
            step(R, s);
            scope *fs = jinja_new_scope(R, sc);
            bind_targets(R, s, fs, s->targets, s->ntargets, items->v[i]);
            if (jinja_truthy(eval(R, s->b, fs))) jinja_list_push(R->a, kept, items->v[i]);
        }
        items = kept;
    }
    if (items->n == 0) {
        jinja_exec_body(R, s->else_body, sc);
        return;
    }
    /* one scope and loop object serve every iteration (emptied each time,
     * which gives jinja2's rule that sets inside the body do not survive to
     * the next iteration) so long loops do not grow memory */
    scope *is = jinja_new_scope(R, sc);
    jloop *lp = jinja_alloc(R->a, sizeof *lp);
    lp->items = items;
    jv lv = {JV_LOOP, {0}, false};
    lv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        step(R, s);
        is->n = 0;
        lp->i = i;
        bind_targets(R, s, is, s->targets, s->ntargets, items->v[i]);
        jinja_scope_set(R, is, "loop", lv);
        jinja_exec_body(R, s->body, is);
        if (R->loopctl == 1) {
            R->loopctl = 0;
            break;
        }
        R->loopctl = 0;
    }
}

static void exec_stmt(render *R, const node *s, scope *sc) {
    step(R, s);
    if (++R->depth > J_MAX_DEPTH * 8) jinja_rfail(R, s, "blocks or macros nested too deeply");
    switch (s->k) {
    case S_TEXT: sb_add(R->out, s->lit.u.s.p, s->lit.u.s.n); break;
    case S_OUTPUT: {
        jstr str = jinja_to_str(R, eval(R, s->a, sc));
        sb_add(R->out, str.p, str.n);
        break;
    }
    case S_IF:
        if (jinja_truthy(eval(R, s->a, sc))) jinja_exec_body(R, s->body, sc);
        else jinja_exec_body(R, s->else_body, sc);
        break;
    case S_FOR: exec_for(R, s, sc); break;
    case S_SET: {
        jv v = eval(R, s->a, sc);
        if (s->op == 1) {
            jv obj = jinja_lookup(R, sc, s->targets[0]);
            if (obj.t != JV_NS) jinja_rfail(R, s, "cannot assign attribute on non-namespace object '%s'", s->targets[0]);
            jinja_dict_set(R->a, obj.u.d, jv_cstr(s->name), v);
        } else {
            bind_targets(R, s, sc, s->targets, s->ntargets, v);
        }
        break;
    }
    case S_SETBLOCK: {
        jstr text = render_capture(R, s->body, sc);
        jinja_scope_set(R, sc, s->targets[0], apply_chain(R, s->a, jv_str(text), sc));
        break;
    }
    case S_MACRO: {
        jmacro *m = jinja_alloc(R->a, sizeof *m);
        m->def = s;
        m->closure = sc;
        m->name = s->name;
        m->catch_varargs = s->op & 1;
        m->catch_kwargs = (s->op & 2) != 0;
        jv mv = {JV_MACRO, {0}, false};
        mv.u.m = m;
        jinja_scope_set(R, sc, s->name, mv);
        break;
    }
    case S_CALLBLOCK: {
        jmacro *caller = jinja_alloc(R->a, sizeof *caller);
        caller->def = s;
        caller->closure = sc;
        caller->name = "caller";
        caller->catch_varargs = s->op & 1;
        caller->catch_kwargs = (s->op & 2) != 0;
        jstr str = jinja_to_str(R, eval_call(R, s->a, sc, caller));
        sb_add(R->out, str.p, str.n);
        break;
    }
    case S_FILTERBLOCK: {
        jstr text = render_capture(R, s->body, sc);
        jstr str = jinja_to_str(R, apply_chain(R, s->a, jv_str(text), sc));
        sb_add(R->out, str.p, str.n);
        break;
    }
    case S_WITH: {
        scope *ws = jinja_new_scope(R, sc);
        for (size_t i = 0; i < s->ntargets; i++) jinja_scope_set(R, ws, s->targets[i], eval(R, s->vals.v[i], sc));
        jinja_exec_body(R, s->body, ws);
        break;
    }
    case S_BODY: jinja_exec_body(R, s->body, sc); break;
    case S_BREAK: R->loopctl = 1; break;
    case S_CONTINUE: R->loopctl = 2; break;
    default: jinja_rfail(R, s, "internal error: bad statement node");
    }
    R->depth--;
}

static void jinja_exec_body(render *R, nlist body, scope *sc) {
    for (size_t i = 0; i < body.n; i++) {
        exec_stmt(R, body.v[i], sc);
        if (R->loopctl) return;
    }
}

/* ------------------------------------------------------------ API */

struct tela_jinja {
    jarena arena;
    jerr err;          /* the arena's error target while parsing */
    nlist body;
    char *name;
};

tela_jinja_options tela_jinja_hf_options(void) {
    tela_jinja_options o = {true, true, false};
    return o;
}

/* Normalizes \r\n and \r to \n and drops one trailing newline (unless
 * keep_trailing_newline), as jinja2's lexer does before tokenizing. */
static char *normalize_source(jarena *a, const char *src, size_t len, bool keep_trailing, size_t *out_len) {
    char *s = jinja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (!keep_trailing && n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

tela_status tela_jinja_parse(const char *source, size_t len, const char *name, const tela_jinja_options *opt,
                             tela_jinja **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_jinja_parse: out is NULL");
    *out = NULL;
    if (!source && len) return tela_errorf(TELA_ERR_ARG, "tela_jinja_parse: source is NULL");
    if (!name) name = "template";
    if (len > J_MAX_SOURCE) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: template of %zu bytes is too large", name, len);
    tela_jinja *t = calloc(1, sizeof *t);
    if (!t) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    t->name = strdup(name);
    if (!t->name) {
        free(t);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    }
    t->err.name = t->name;
    t->arena.err = &t->err;
    t->arena.limit = J_DEFAULT_MAX_MEMORY;
    tela_jinja_options o = opt ? *opt : tela_jinja_hf_options();
    if (setjmp(t->err.jb)) {
        tela_status code = t->err.code;
        tela_errorf(code, "%s", t->err.msg);
        tela_jinja_free(t);
        return code;
    }
    size_t n, ntoks;
    const char *src = normalize_source(&t->arena, source ? source : "", len, o.keep_trailing_newline, &n);
    token *toks;
    jinja_lex(&t->arena, &t->err, src, n, &o, &toks, &ntoks);
    t->body = jinja_parse(&t->arena, &t->err, toks, ntoks);
    *out = t;
    return TELA_OK;
}

void tela_jinja_free(tela_jinja *tmpl) {
    if (!tmpl) return;
    jinja_arena_free(&tmpl->arena);
    free(tmpl->name);
    free(tmpl);
}

/* cJSON -> value. Strings point into the cJSON tree, which outlives the
 * render. */
static jv from_json(render *R, const cJSON *j, int depth) {
    if (depth > 2000) jinja_rfail(R, NULL, "variables nested too deeply");
    if (!j || cJSON_IsNull(j)) return J_NONE;
    if (cJSON_IsTrue(j)) return jv_bool(true);
    if (cJSON_IsFalse(j)) return jv_bool(false);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return j->valuestring ? jv_cstr(j->valuestring) : jv_strn("", 0);
    if (cJSON_IsRaw(j)) return j->valuestring ? jv_cstr(j->valuestring) : jv_strn("", 0);
    if (cJSON_IsArray(j)) {
        jlist *l = jinja_list_new(R->a, 0);
        for (const cJSON *c = j->child; c; c = c->next) jinja_list_push(R->a, l, from_json(R, c, depth + 1));
        return jv_list(l);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jinja_dict_new(R->a);
        for (const cJSON *c = j->child; c; c = c->next)
            jinja_dict_set(R->a, d, c->string ? jv_cstr(c->string) : jv_strn("", 0), from_json(R, c, depth + 1));
        return jv_dict(d);
    }
    return J_NONE;
}

tela_status tela_jinja_render(const tela_jinja *tmpl, const cJSON *vars, const tela_jinja_render_params *params,
                              char **out, size_t *out_len) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_jinja_render: out is NULL");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!tmpl) return tela_errorf(TELA_ERR_ARG, "tela_jinja_render: template is NULL");
    if (vars && !cJSON_IsObject(vars))
        return tela_errorf(TELA_ERR_ARG, "%s: the template variables must be a JSON object", tmpl->name);
    /* everything the longjmp error path touches lives on the heap, so no local
     * changes between setjmp and longjmp */
    struct rctx {
        jerr err;
        jarena arena;
        render R;
        sbuf out;
    } *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", tmpl->name);
    c->err.name = tmpl->name;
    c->arena.err = &c->err;
    c->arena.limit = params && params->max_memory ? params->max_memory : J_DEFAULT_MAX_MEMORY;
    c->R.a = &c->arena;
    c->R.err = &c->err;
    c->R.now = params ? params->now : 0;
    c->R.max_output = params && params->max_output ? params->max_output : J_DEFAULT_MAX_OUTPUT;
    if (setjmp(c->err.jb)) {
        tela_status code = tela_errorf(c->err.code, "%s", c->err.msg);
        jinja_arena_free(&c->arena);
        free(c);
        return code;
    }
    scope *globals = jinja_new_scope(&c->R, NULL);
    if (vars)
        for (const cJSON *v = vars->child; v; v = v->next)
            if (v->string)
                jinja_scope_set(&c->R, globals, jinja_strndup(&c->arena, v->string, strlen(v->string)), from_json(&c->R, v, 0));
    scope *root = jinja_new_scope(&c->R, globals);
    sb_init(&c->out, &c->arena, c->R.max_output);
    c->R.out = &c->out;
    jinja_exec_body(&c->R, tmpl->body, root);
    char *res = malloc(c->out.n + 1);
    tela_status st = TELA_OK;
    if (res) {
        if (c->out.n) memcpy(res, c->out.p, c->out.n);
        res[c->out.n] = 0;
        if (out_len) *out_len = c->out.n;
        *out = res;
    } else {
        st = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory for the rendered text", tmpl->name);
    }
    jinja_arena_free(&c->arena);
    free(c);
    return st;
}
