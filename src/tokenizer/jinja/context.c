/* context.c: the evaluator's ground floor, which the builtins and the
 * evaluator stand on: the render state and its errors, undefined values,
 * scopes and name lookup, Python's str() and repr() of values, iteration
 * and len(), attribute, item and slice access, argument binding, and a
 * stable sort. */
#include "tokenizer/jinja/jinja_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The global functions (FN_*) by the names templates call them. */
const char *const jinja_fn_names[FN_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

_Noreturn void jinja_rfail(render *R, const node *at, const char *fmt, ...) {
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    jinja_fail(R->err, TELA_ERR_FORMAT, at ? at->line : 0, at ? at->col : 0, "%s", body);
}

/* Using an undefined value in a way that needs a value (jinja2's
 * UndefinedError). */
_Noreturn void jinja_fail_undef(render *R, const node *at, jv v) {
    if (v.u.s.p && v.u.s.n) jinja_rfail(R, at, "%.*s", (int)(v.u.s.n > 300 ? 300 : v.u.s.n), v.u.s.p);
    jinja_rfail(R, at, "undefined value");
}

jv jinja_mk_undef(render *R, const char *fmt, ...) {
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

scope *jinja_new_scope(render *R, scope *parent) {
    scope *s = jinja_alloc(R->a, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

void jinja_scope_set(render *R, scope *s, const char *name, jv v) {
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

jv jinja_lookup(render *R, scope *sc, const char *name) {
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

/* Python's str(v). */
jstr jinja_to_str(render *R, jv v) {
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

void jinja_repr(render *R, sbuf *b, jv v, int depth) {
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
jlist *jinja_to_iter(render *R, const node *at, jv v) {
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

int64_t jinja_len(render *R, const node *at, jv v) {
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

jv jinja_getattr(render *R, const node *at, jv obj, const char *name) {
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
size_t *jinja_cp_offsets(render *R, jstr s, size_t *ncp) {
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

jv jinja_getitem(render *R, const node *at, jv obj, jv key) {
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
jv jinja_slice(render *R, const node *at, jv obj, jv vs, jv ve, jv vst) {
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
jv jinja_attr_path(render *R, const node *at, jv v, const char *path) {
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
void jinja_bind(render *R, const node *at, const char *fname, const cargs *ca, const char *const *names,
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

const char *jinja_arg_cstr(render *R, const node *at, jv v, const char *what) {
    if (v.t != JV_STR) jinja_rfail(R, at, "%s must be a string, not %s", what, jinja_typename(v));
    return jinja_strndup(R->a, v.u.s.p, v.u.s.n);
}

int64_t jinja_arg_int(render *R, const node *at, jv v, const char *what) {
    if (!jv_isint(v)) jinja_rfail(R, at, "%s must be an integer, not %s", what, jinja_typename(v));
    return jv_ival(v);
}

/* ---- sorting */

/* Stable merge sort (python's sort is stable); errors longjmp out safely. */
void jinja_merge_sort(render *R, const node *at, jv *v, size_t n, int (*cmp)(render *, const node *, jv, jv, void *), void *ud) {
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
