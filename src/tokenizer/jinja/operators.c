/* operators.c: arithmetic and comparison with Python's semantics (64-bit
 * ints with overflow errors, floor division and modulo, repetition and
 * concatenation of strings and lists, Markup escaping), membership, and the
 * sort keys of sort, dictsort, min, max and unique. */
#include "tokenizer/jinja/jinja_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

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

bool jinja_contains(render *R, const node *at, jv container, jv item) {
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

jv jinja_binop(render *R, const node *at, int op, jv a, jv b) {
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

bool jinja_compare(render *R, const node *at, int op, jv a, jv b) {
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

jv jinja_sort_key(render *R, const node *at, jv v, const sort_ctx *sc) {
    if (sc->attribute) v = jinja_attr_path(R, at, v, sc->attribute);
    if (!sc->case_sensitive && v.t == JV_STR) v = jv_str(jinja_str_case(R, v.u.s, 0));
    return v;
}

int jinja_cmp_default(render *R, const node *at, jv a, jv b, void *ud) {
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
int jinja_cmp_first(render *R, const node *at, jv a, jv b, void *ud) {
    return jinja_cmp_default(R, at, a.u.l->v[0], b.u.l->v[0], ud);
}
