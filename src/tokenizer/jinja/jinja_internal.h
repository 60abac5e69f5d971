/* jinja_internal.h: what the files of the Jinja interpreter share. The
 * interpreter behind chat templates (tokenizer/jinja.h) is a lexer that
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
 * (nothing else is allocated while a template runs).
 *
 * The files, in order; each uses only the ones above it:
 *   value.c      errors, arenas, strings, UTF-8, the value model
 *   lexer.c      source to tokens
 *   parser.c     tokens to the AST, and the checks after parsing
 *   context.c    render state, scopes, str/repr, access, argument binding
 *   text.c       string helpers, printf-style and str.format(), tojson
 *   operators.c  arithmetic, comparisons, sort keys
 *   filters.c    filters and tests
 *   methods.c    methods of values, global functions
 *   eval.c       expressions, calls, statements
 *   template.c   the API of tokenizer/jinja.h
 * Names the files share start with jinja_; short names are a file's own or
 * the inline helpers of this header. */
#ifndef TELA_TOKENIZER_JINJA_INTERNAL_H
#define TELA_TOKENIZER_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/jinja.h"

/* Limits that keep a hostile template from crashing or hanging the caller. */
#define J_MAX_DEPTH 200              /* parser nesting and evaluator recursion */
#define J_MAX_MACRO_DEPTH 100        /* nested macro calls */
#define J_MAX_STEPS 10000000ull      /* statements + loop iterations per render */
#define J_DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define J_DEFAULT_MAX_MEMORY ((size_t)1 << 30)
#define J_MAX_SOURCE ((size_t)16 << 20)

/* ============================================================ value.c */

/* ---- errors */

typedef struct jerr {
    jmp_buf jb;
    tela_status code;
    char msg[768];
    const char *name;   /* template name for messages */
} jerr;

/* Formats the message (naming the template, and the line and column when
 * line > 0) and longjmps to the entry point with code. */
_Noreturn void jinja_fail(jerr *e, tela_status code, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- arena */

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

/* n bytes, aligned for any type; over the arena's limit or out of memory
 * fails through the arena's error target. */
void *jinja_alloc(jarena *a, size_t n);
void jinja_arena_free(jarena *a);
char *jinja_strndup(jarena *a, const char *s, size_t n);
/* Overflow-checked size arithmetic for allocations. */
size_t jinja_size_mul(jarena *a, size_t x, size_t y);

/* ---- strings */

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

/* Makes room for extra bytes more; the text may not grow past b->max bytes. */
void jinja_sb_reserve(sbuf *b, size_t extra);
void jinja_sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void sb_init(sbuf *b, jarena *a, size_t max) {
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
    b->max = max;
}

static inline void sb_add(sbuf *b, const char *s, size_t n) {
    if (!n) return;
    jinja_sb_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static inline void sb_adds(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static inline void sb_addc(sbuf *b, char c) { sb_add(b, &c, 1); }

static inline jstr sb_str(sbuf *b) {
    jstr s = {b->p ? b->p : "", b->n};
    return s;
}

/* ---- UTF-8 */

/* Decodes one code point at s[*i] (advancing *i); an invalid byte decodes as
 * itself (0x80..0xff) so every byte string has a defined length. */
int32_t jinja_u8_next(const char *s, size_t n, size_t *i);
void jinja_sb_add_cp(sbuf *b, int32_t cp);
/* Length in code points. */
size_t jinja_u8_len(jstr s);
/* Python's str.isspace(): the characters str.strip() and str.split() remove. */
bool jinja_py_isspace(int32_t c);
/* Length of the whitespace run that ends at s[n] (for rstrip). */
size_t jinja_u8_rspace(const char *s, size_t n);
/* Length of the whitespace run that starts s. */
size_t jinja_u8_lspace(const char *s, size_t n);

/* ---- values */

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

static inline jv jv_bool(bool b) { jv v = {JV_BOOL, {0}, false}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, {0}, false}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, {0}, false}; v.u.f = f; return v; }
static inline jv jv_strn(const char *p, size_t n) { jv v = {JV_STR, {0}, false}; v.u.s.p = p; v.u.s.n = n; return v; }
static inline jv jv_str(jstr s) { return jv_strn(s.p, s.n); }
static inline jv jv_cstr(const char *p) { return jv_strn(p, strlen(p)); }
static inline jv jv_undef(const char *hint) {
    jv v = {JV_UNDEF, {0}, false};
    v.u.s.p = hint;
    v.u.s.n = hint ? strlen(hint) : 0;
    return v;
}

static inline bool jv_isnum(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline bool jv_isint(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static inline int64_t jv_ival(jv v) { return v.t == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static inline double jv_fval(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}

static inline jv jv_list(jlist *l) { jv v = {JV_LIST, {0}, false}; v.u.l = l; return v; }
static inline jv jv_dict(jdict *d) { jv v = {JV_DICT, {0}, false}; v.u.d = d; return v; }

static inline jv jv_markup(jstr s) {
    jv v = jv_str(s);
    v.markup = true;
    return v;
}

jlist *jinja_list_new(jarena *a, size_t cap);
void jinja_list_push(jarena *a, jlist *l, jv v);
jdict *jinja_dict_new(jarena *a);
/* The value of key, or NULL. */
jv *jinja_dict_find(const jdict *d, jv key);
/* The value of the string key key[0..n), or NULL. */
jv *jinja_dict_finds(const jdict *d, const char *key, size_t n);
/* Sets key to v, replacing an existing entry in place (python dicts keep the
 * first insertion position). */
void jinja_dict_set(jarena *a, jdict *d, jv key, jv v);
/* Python's ==. */
bool jinja_eq(jv a, jv b);
/* Python's bool(). */
bool jinja_truthy(jv v);
/* Python's type name, for error messages. */
const char *jinja_typename(jv v);

/* repr(float): the shortest digit string that reads back to the same double,
 * in fixed notation for exponents -4..15 and scientific notation otherwise. */
void jinja_py_float_repr(double x, char *out, size_t cap);
/* Python's repr() of a string. */
void jinja_py_str_repr(sbuf *b, jstr s);
/* markupsafe.escape(): the five HTML-special characters. */
jstr jinja_html_escape(jarena *a, jstr s);

/* ============================================================ lexer.c */

typedef enum ttype {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_INT, T_FLOAT, T_STRING, T_OP
} ttype;

/* Operators, longest first (jinja_ops[op] spells op). */
extern const char *const jinja_ops[];
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

/* The value of a hex digit, or -1. */
static inline int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Splits src (n bytes, already normalized: see tela_jinja_parse) into
 * tokens in the arena, ending with T_EOF; errors longjmp through err. */
void jinja_lex(jarena *a, jerr *err, const char *src, size_t n, const tela_jinja_options *opt, token **toks,
               size_t *ntoks);

/* ============================================================ parser.c */

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

/* Whether a filter / test of that name exists. */
bool jinja_known_filter(const char *name);
bool jinja_known_test(const char *name);
/* The template's statements from its tokens, checked for unknown filters
 * and tests and with each macro's use of varargs/kwargs marked; errors
 * longjmp through err. */
nlist jinja_parse(jarena *a, jerr *err, token *toks, size_t ntoks);

/* ============================================================ context.c */

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

/* The global functions (methods.c), named by jinja_fn_names. */
enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME, FN_COUNT };
extern const char *const jinja_fn_names[FN_COUNT];

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

/* A render error at a node (at may be NULL). */
_Noreturn void jinja_rfail(render *R, const node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Using an undefined value in a way that needs a value (jinja2's
 * UndefinedError). */
_Noreturn void jinja_fail_undef(render *R, const node *at, jv v);
/* An undefined value whose message, should it be used, is the formatted
 * text. */
jv jinja_mk_undef(render *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
scope *jinja_new_scope(render *R, scope *parent);
void jinja_scope_set(render *R, scope *s, const char *name, jv v);
/* A variable, a global function, or an undefined value. */
jv jinja_lookup(render *R, scope *sc, const char *name);
/* Python's str(v). */
jstr jinja_to_str(render *R, jv v);
/* Python's repr(v), appended to b. */
void jinja_repr(render *R, sbuf *b, jv v, int depth);
/* The items of an iterable as a list: lists, the keys of a dict, the
 * characters of a string; an undefined value iterates as empty. */
jlist *jinja_to_iter(render *R, const node *at, jv v);
/* Python's len(). */
int64_t jinja_len(render *R, const node *at, jv v);
/* obj.name, as jinja2's getattr (attributes, then items). */
jv jinja_getattr(render *R, const node *at, jv obj, const char *name);
/* obj[key], as jinja2's getitem (items, then attributes). */
jv jinja_getitem(render *R, const node *at, jv obj, jv key);
/* obj[start:stop:step] with Python's slice semantics (bounds may be none). */
jv jinja_slice(render *R, const node *at, jv obj, jv vs, jv ve, jv vst);
/* Byte offsets of the code points of s (n+1 entries, the last = s.n). */
size_t *jinja_cp_offsets(render *R, jstr s, size_t *ncp);
/* jinja2's attribute getter for filters: a dotted path of items/attributes. */
jv jinja_attr_path(render *R, const node *at, jv v, const char *path);
/* Binds call arguments to named parameters the way Python does. out[] holds
 * the defaults on entry; the first nreq parameters must be given. */
void jinja_bind(render *R, const node *at, const char *fname, const cargs *ca, const char *const *names, size_t n,
                size_t nreq, jv *out);
/* A string / integer argument, or an error naming what it is. */
const char *jinja_arg_cstr(render *R, const node *at, jv v, const char *what);
int64_t jinja_arg_int(render *R, const node *at, jv v, const char *what);
/* Stable merge sort (python's sort is stable); errors longjmp out safely. */
void jinja_merge_sort(render *R, const node *at, jv *v, size_t n, int (*cmp)(render *, const node *, jv, jv, void *),
                      void *ud);

/* ============================================================ text.c */

/* mode 0 lower, 1 upper, 2 swapcase */
jstr jinja_str_case(render *R, jstr s, int mode);
bool jinja_cp_is_cased_letter(int32_t c);
/* Python's str.title() */
jstr jinja_str_title_method(render *R, jstr s);
/* jinja2's title filter */
jstr jinja_str_title_filter(render *R, jstr s);
jstr jinja_str_capitalize(render *R, jstr s);
/* str.strip/lstrip/rstrip: chars NULL means python whitespace. */
jstr jinja_str_strip(jstr s, const jstr *chars, bool left, bool right);
jstr jinja_str_replace(render *R, const node *at, jstr s, jstr old, jstr rep, int64_t count);
/* str.split / str.rsplit. sep NULL: split on whitespace runs, dropping empty
 * pieces. */
jv jinja_str_split(render *R, jstr s, const jstr *sep, int64_t maxsplit, bool from_right);
/* Code point index of a byte offset. */
int64_t jinja_cp_index(jstr s, size_t byte_off);
/* Python's str.splitlines() line boundaries, for the indent filter. */
jlist *jinja_str_splitlines(render *R, jstr s);
/* fmt % args */
jv jinja_str_format_pct(render *R, const node *at, jstr fmt, jv args);
/* Python's str.format() without format specs. */
jv jinja_str_format_method(render *R, const node *at, jstr fmt, const cargs *ca);

typedef struct json_opts {
    const char *indent;   /* NULL: single line */
    jstr item_sep, key_sep;
    bool sort_keys, ensure_ascii;
} json_opts;

void jinja_json_dump(render *R, const node *at, sbuf *b, jv v, const json_opts *o, int level);

/* ============================================================ operators.c */

/* a op b for the arithmetic operators (OP_ADD ... OP_POW). */
jv jinja_binop(render *R, const node *at, int op, jv a, jv b);
/* a op b for the comparison operators (OP_EQ ... OP_NOTIN). */
bool jinja_compare(render *R, const node *at, int op, jv a, jv b);
/* item in container */
bool jinja_contains(render *R, const node *at, jv container, jv item);

typedef struct sort_ctx {
    bool case_sensitive;
    const char *attribute;
    int by_value;   /* dictsort: jinja_compare pair element 1 instead of 0 */
} sort_ctx;

jv jinja_sort_key(render *R, const node *at, jv v, const sort_ctx *sc);
/* Python's ordering of a and b (by their sort keys when ud is a sort_ctx). */
int jinja_cmp_default(render *R, const node *at, jv a, jv b, void *ud);
/* Compares the first elements of two pairs (dictsort's precomputed keys). */
int jinja_cmp_first(render *R, const node *at, jv a, jv b, void *ud);

/* ============================================================ filters.c */

/* Applies the filter called name to v. Filters follow jinja2 3.1, with HF's
 * tojson. */
jv jinja_apply_filter(render *R, const node *at, const char *name, jv v, const cargs *ca, scope *sc);
bool jinja_apply_test(render *R, const node *at, const char *name, jv v, const cargs *ca);
/* d.items() as a list of (key, value) tuples. */
jv jinja_items_of_dict(render *R, const jdict *d);

/* ============================================================ methods.c */

/* Method calls on values (obj.name(args)); false when obj has no such method,
 * so the caller falls back to attribute lookup. */
bool jinja_call_method(render *R, const node *at, jv obj, const char *name, const cargs *ca, jv *out);
jv jinja_call_builtin(render *R, const node *at, int fn, const cargs *ca);

/* ============================================================ eval.c */

/* Runs the statements of body in scope sc, writing to R->out. */
void jinja_exec_body(render *R, nlist body, scope *sc);

#endif
