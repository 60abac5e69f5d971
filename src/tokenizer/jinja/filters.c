/* filters.c: the filters (jinja2 3.1's, with Hugging Face's tojson) and
 * the tests. */
#include "tokenizer/jinja/jinja_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ filters */

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

jv jinja_items_of_dict(render *R, const jdict *d) {
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
jv jinja_apply_filter(render *R, const node *at, const char *name, jv v, const cargs *ca, scope *sc) {
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

bool jinja_apply_test(render *R, const node *at, const char *name, jv v, const cargs *ca) {
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
