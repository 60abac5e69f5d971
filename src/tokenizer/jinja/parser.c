/* parser.c: a recursive-descent parser from tokens to the AST (node, in
 * jinja_internal.h), then the check jinja2 makes when it compiles a template
 * (filters and tests it does not know) and the marks the evaluator needs
 * (which macros use varargs and kwargs). Also the names of the filters and
 * tests there are. */
#include "tokenizer/jinja/jinja_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

bool jinja_known_filter(const char *name) {
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

bool jinja_known_test(const char *name) {
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
nlist jinja_parse(jarena *a, jerr *err, token *toks, size_t ntoks) {
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
