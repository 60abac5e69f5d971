/* eval.c: the tree-walking evaluator: expressions, calls of macros and
 * builtins, and statements (output, if, for, set, macro, call and filter
 * blocks, with), over the render state of context.c. */
#include "tokenizer/jinja/jinja_internal.h"

#include <limits.h>
#include <string.h>

/* ---- calls */

static jv eval(render *R, const node *e, scope *sc);

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

void jinja_exec_body(render *R, nlist body, scope *sc) {
    for (size_t i = 0; i < body.n; i++) {
        exec_stmt(R, body.v[i], sc);
        if (R->loopctl) return;
    }
}
