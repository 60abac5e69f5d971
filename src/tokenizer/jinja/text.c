/* text.c: the text helpers behind the string methods and filters (case
 * mapping, title, strip, replace, split, splitlines), printf-style
 * formatting ("%s" % x and the format filter), str.format(), and the JSON
 * output of tojson. */
#include "tokenizer/jinja/jinja_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ string helpers */

jstr jinja_str_case(render *R, jstr s, int mode) {
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

bool jinja_cp_is_cased_letter(int32_t c) {
    return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

/* Python's str.title(): a cased character after an uncased one starts a word. */
jstr jinja_str_title_method(render *R, jstr s) {
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
jstr jinja_str_title_filter(render *R, jstr s) {
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

jstr jinja_str_capitalize(render *R, jstr s) {
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
jstr jinja_str_strip(jstr s, const jstr *chars, bool left, bool right) {
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

jstr jinja_str_replace(render *R, const node *at, jstr s, jstr old, jstr rep, int64_t count) {
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
jv jinja_str_split(render *R, jstr s, const jstr *sep, int64_t maxsplit, bool from_right) {
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
int64_t jinja_cp_index(jstr s, size_t byte_off) {
    jstr pre = {s.p, byte_off};
    return (int64_t)jinja_u8_len(pre);
}

/* Python's str.splitlines() line boundaries, for the indent filter. */
jlist *jinja_str_splitlines(render *R, jstr s) {
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

jv jinja_str_format_pct(render *R, const node *at, jstr fmt, jv args) {
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
jv jinja_str_format_method(render *R, const node *at, jstr fmt, const cargs *ca) {
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

void jinja_json_dump(render *R, const node *at, sbuf *b, jv v, const json_opts *o, int level) {
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
