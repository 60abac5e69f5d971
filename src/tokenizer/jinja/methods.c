/* methods.c: the methods of values (str, dict, list and loop methods, with
 * the sandbox's refusal of the mutating ones) and the global functions
 * (range, namespace, dict, raise_exception, strftime_now). */
#include "tokenizer/jinja/jinja_internal.h"

#include <string.h>
#include <time.h>
#include <utf8proc.h>

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
bool jinja_call_method(render *R, const node *at, jv obj, const char *name, const cargs *ca, jv *out) {
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

jv jinja_call_builtin(render *R, const node *at, int fn, const cargs *ca) {
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
