/* bench_spec.c: 'tela bench --spec ngram|draft': speculative decoding's
 * speed. Greedy generation of N tokens after a text prompt, plain and with
 * speculation for each --draft-max k (tokens/s, the acceptance rate, tokens
 * per verification step, the speedup, and whether the tokens are the plain
 * ones); then what a verification step costs: one forward pass of n tokens
 * with every position's logits against one of a single token, at the
 * prompt's depth, and for models with recurrent state what the rollback
 * adds: by the mark (saving the state before the pass, reloading it after;
 * the kept tokens are then evaluated again, a forward pass without
 * logits), or, where the pass can keep every token's state, that pass and
 * the copy back of the first token's. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_bench.h"
#include "runtime/session.h"
#include "tela/tela.h"

#define SPEC_DEFAULT_PROMPT                                                                                          \
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "           \
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, " \
    "Let there be light: and there was light. And God saw the light, that it was good: and God divided the light "    \
    "from the darkness. And God called the light Day, and the darkness he called Night. And the evening and the "     \
    "morning were the first day. And God said"

tela_model *cli_bench_load_draft(const tela_model *m, const cli_bench_opts *o) {
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = o->n_threads;
    mp.device = o->device;
    tela_model *dm = NULL;
    if (tela_model_load(o->draft_path, &mp, &dm) != TELA_OK) {
        fprintf(stderr, "tela bench: the draft model: %s\n", tela_last_error());
        return NULL;
    }
    if (tela_spec_check_draft(m, dm) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        tela_model_free(dm);
        return NULL;
    }
    return dm;
}

int32_t *cli_bench_spec_prompt(tela_model *m, const cli_bench_opts *o, size_t *np) {
    const tela_model_info *info = tela_model_get_info(m);
    const char *text = o->prompt ? o->prompt : SPEC_DEFAULT_PROMPT;
    int32_t *prompt = NULL;
    if (info->has_tokenizer) {
        const size_t cap = strlen(text) + 16;
        prompt = malloc(cap * sizeof *prompt);
        if (!prompt) {
            fprintf(stderr, "tela bench: out of memory\n");
            return NULL;
        }
        if (tela_tokenize(m, text, strlen(text), 1, 0, prompt, cap, np) != TELA_OK) {
            fprintf(stderr, "tela bench: tokenizing the prompt: %s\n", tela_last_error());
            free(prompt);
            return NULL;
        }
        return prompt;
    }
    /* token ids only: a pseudo-random prompt, twice (prompt lookup finds it) */
    *np = 128;
    prompt = malloc(*np * sizeof *prompt);
    if (!prompt) {
        fprintf(stderr, "tela bench: out of memory\n");
        return NULL;
    }
    cli_bench_fill_tokens(prompt, 64, info->n_vocab);
    memcpy(prompt + 64, prompt, 64 * sizeof *prompt);
    return prompt;
}

typedef struct spec_run {
    double ts;        /* generated tokens per second */
    tela_generate_result r;
    int same;         /* the tokens equal the plain run's */
} spec_run;

/* One greedy generation from a fresh session (and draft session). */
static int gen_once(tela_session *s, tela_session *d, const int32_t *prompt, int np, int n_gen,
                    const tela_spec_params *spec, int32_t *out, spec_run *res) {
    tela_session_reset(s);
    if (d) tela_session_reset(d);
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = n_gen;
    gp.ignore_eos = 1;
    gp.sampler.temperature = 0;
    tela_spec_params sp;
    if (spec) {
        sp = *spec;
        sp.draft = d;
        gp.spec = &sp;
    }
    if (tela_generate(s, prompt, np, &gp, out, (size_t)n_gen, &res->r) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        return -1;
    }
    res->ts = res->r.n_generated / (res->r.generate_seconds > 0 ? res->r.generate_seconds : 1e-9);
    return 0;
}

/* The mean over reps (after a warm-up) of gen_once. */
static int gen_mean(tela_session *s, tela_session *d, const int32_t *prompt, int np, int n_gen,
                    const tela_spec_params *spec, long long reps, int32_t *out, spec_run *mean) {
    double sum = 0;
    for (long long r = -1; r < reps; r++) {
        if (gen_once(s, d, prompt, np, n_gen, spec, out, mean)) return -1;
        if (r >= 0) sum += mean->ts;
    }
    mean->ts = sum / (double)reps;
    return 0;
}

static void spec_row(const cli_bench_table *t, const char *name, int np, int n_gen, int k, const spec_run *r,
                     double base_ts) {
    const double acc = r->r.n_drafted ? (double)r->r.n_accepted / r->r.n_drafted : 0.0;
    const double tps = r->r.n_spec_steps ? (double)r->r.n_spec_tokens / r->r.n_spec_steps : 0.0;
    if (t->json) {
        printf("{\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"draft_max\": %d, \"avg_ts\": %.6f, "
               "\"speedup\": %.4f, \"acceptance\": %.4f, \"tokens_per_step\": %.4f, \"steps\": %d, "
               "\"identical\": %s, \"threads\": %d, \"model_type\": \"%s\", \"cpu_info\": \"%s\", \"build\": "
               "\"tela %s\"}\n",
               name, np, n_gen, k, r->ts, base_ts > 0 ? r->ts / base_ts : 0.0, acc, tps, r->r.n_spec_steps,
               r->same ? "true" : "false", t->threads, t->model_type, t->cpu, tela_version());
    } else if (k == 0) {
        printf("| %-28s | %9.2f | %9s | %11s | %7.2f | %9s |\n", name, r->ts, "-", "-", 1.0, "-");
    } else {
        printf("| %-28s | %9.2f | %8.1f%% | %11.2f | %7.2f | %9s |\n", name, r->ts, 100.0 * acc, tps,
               base_ts > 0 ? r->ts / base_ts : 0.0, r->same ? "yes" : "NO");
    }
    fflush(stdout);
}

/* Untimed runs before each measured pass: on the GPU the first run of a
 * pass of a new shape is eager and the second is captured as a graph, so
 * only from the third on is the pass what a decode loop replays. */
#define SPEC_WARMUPS 2

/* A forward pass of n tokens keeping every token's state, then the
 * rewind to its first token (what a rejected first draft costs); mean
 * seconds of each over reps. */
static int keep_cost(tela_session *s, const int32_t *ids, int n, long long reps, float *buf, double *pass_s,
                     double *rewind_s) {
    const int32_t depth = tela_session_n_past(s);
    double sum = 0, sum_rw = 0;
    if (tela_session_mark(s) != TELA_OK) return -1;
    for (long long r = -SPEC_WARMUPS; r < reps; r++) {
        double t0 = cli_now();
        if (tela_session_eval_keep(s, ids, n, buf, NULL) != TELA_OK) return -1;
        double t1 = cli_now();
        if (tela_session_truncate(s, depth + 1) != TELA_OK) return -1;
        double t2 = cli_now();
        /* back to depth (the kept states start after the first token): the mark */
        if (tela_session_truncate(s, depth) != TELA_OK) return -1;
        if (r < 0) continue;
        sum += t1 - t0;
        sum_rw += t2 - t1;
    }
    *pass_s = sum / (double)reps;
    *rewind_s = sum_rw / (double)reps;
    return 0;
}

/* Seconds for a forward pass of n tokens at the session's position
 * (logits of every position, or none), rolled back after; mean of reps. */
static double forward_cost(tela_session *s, const int32_t *ids, int n, int logits, long long reps, float *buf,
                           double *mark_s, double *reload_s) {
    const int32_t depth = tela_session_n_past(s);
    double sum = 0, sum_mark = 0, sum_reload = 0;
    for (long long r = -SPEC_WARMUPS; r < reps; r++) {
        double t0 = cli_now();
        if (tela_session_mark(s) != TELA_OK) return -1;
        double t1 = cli_now();
        if (tela_session_eval(s, ids, n, logits ? buf : NULL, 1) != TELA_OK) return -1;
        double t2 = cli_now();
        if (tela_session_truncate(s, depth) != TELA_OK) return -1; /* to the mark: a reload, no evaluation */
        double t3 = cli_now();
        if (r < 0) continue;
        sum_mark += t1 - t0;
        sum += t2 - t1;
        sum_reload += t3 - t2;
    }
    *mark_s = sum_mark / (double)reps;
    *reload_s = sum_reload / (double)reps;
    return sum / (double)reps;
}

int cli_bench_spec(tela_model *m, const cli_bench_opts *o, const cli_bench_table *t) {
    const tela_model_info *info = t->info;
    const int n_gen = o->n_gen_n > 0 && o->n_gen[0] > 0 ? (int)o->n_gen[0] : 128;
    int kmax = 0;
    for (int i = 0; i < o->n_draft_max; i++) kmax = o->draft_max[i] > kmax ? (int)o->draft_max[i] : kmax;
    int rc = 1;
    int32_t *prompt = NULL, *out = NULL, *ref = NULL, *ids = NULL;
    float *buf = NULL;
    size_t np = 0;
    tela_model *dm = NULL;
    tela_session *s = NULL, *d = NULL;
    if (!(prompt = cli_bench_spec_prompt(m, o, &np))) goto done;
    if (o->draft_path && !(dm = cli_bench_load_draft(m, o))) goto done;
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = (int32_t)np + n_gen + kmax + 16;
    sp.n_threads = o->n_threads;
    sp.kv_type = o->kv_type;
    sp.mem_budget = o->mem_budget;
    if (tela_session_create(m, &sp, &s) != TELA_OK || (dm && tela_session_create(dm, &sp, &d) != TELA_OK)) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        goto done;
    }
    out = malloc((size_t)n_gen * sizeof *out);
    ref = malloc((size_t)n_gen * sizeof *ref);
    ids = malloc((size_t)(kmax + 1) * sizeof *ids);
    buf = malloc((size_t)(kmax + 1) * (size_t)info->n_vocab * sizeof *buf);
    if (!out || !ref || !ids || !buf) goto oom;

    const char *method = cli_spec_method_name(o->spec.method);
    if (!t->json) {
        printf("speculative decoding (%s%s%s): greedy, tg%d after a prompt of %zu tokens\n", method,
               dm ? " " : "", dm ? o->draft_path : "", n_gen, np);
        printf("| %-28s | %9s | %9s | %11s | %7s | %9s |\n", "test", "t/s", "accepted", "tokens/step", "speedup",
               "identical");
        printf("| ---------------------------- | --------: | --------: | ----------: | ------: | --------- |\n");
    }
    spec_run base, run;
    memset(&base, 0, sizeof base);
    if (gen_mean(s, NULL, prompt, (int)np, n_gen, NULL, o->reps, ref, &base)) goto done;
    char name[64];
    snprintf(name, sizeof name, "tg%d", n_gen);
    base.same = 1;
    spec_row(t, name, (int)np, n_gen, 0, &base, base.ts);
    for (int i = 0; i < o->n_draft_max; i++) {
        tela_spec_params spec = o->spec;
        spec.draft_max = (int32_t)o->draft_max[i];
        memset(&run, 0, sizeof run);
        if (gen_mean(s, d, prompt, (int)np, n_gen, &spec, o->reps, out, &run)) goto done;
        run.same = run.r.n_generated == base.r.n_generated &&
                   !memcmp(out, ref, (size_t)run.r.n_generated * sizeof *out);
        snprintf(name, sizeof name, "tg%d %s k=%d", n_gen, method, spec.draft_max);
        spec_row(t, name, (int)np, n_gen, spec.draft_max, &run, base.ts);
    }

    /* the cost of a verification pass */
    tela_session_reset(s);
    if (tela_session_eval(s, prompt, (int32_t)np, NULL, 0) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        goto done;
    }
    cli_bench_fill_tokens(ids, kmax + 1, info->n_vocab);
    const bool rec = tela_session_has_recurrent(s), keep = tela_session_keeps_states(s);
    if (!t->json) {
        printf("\nverification cost at depth %zu: one forward pass of n tokens vs one token%s\n", np,
               rec ? " (recurrent state: saved before and reloaded after; or kept per token, then the first "
                     "token's copied back)" : "");
        printf("| %6s | %12s | %10s | %14s | %8s | %10s | %12s | %9s |\n", "tokens", "all logits ms", "x 1 token",
               "no logits ms", "save ms", "reload ms", "kept pass ms", "rewind ms");
        printf("| -----: | -----------: | ---------: | -------------: | -------: | ---------: | -----------: | "
               "--------: |\n");
    }
    double one = 0;
    for (int n = 1; n <= kmax + 1; n++) {
        double mark_s = 0, reload_s = 0, m2 = 0, r2 = 0;
        const double with = forward_cost(s, ids, n, 1, o->reps, buf, &mark_s, &reload_s);
        const double without = forward_cost(s, ids, n, 0, o->reps, buf, &m2, &r2);
        if (with < 0 || without < 0) {
            fprintf(stderr, "tela bench: %s\n", tela_last_error());
            goto done;
        }
        if (n == 1) one = with;
        double kept = 0, rewind = 0;
        if (keep && keep_cost(s, ids, n, o->reps, buf, &kept, &rewind)) {
            fprintf(stderr, "tela bench: %s\n", tela_last_error());
            goto done;
        }
        if (t->json)
            printf("{\"test\": \"verify %d\", \"n_depth\": %zu, \"forward_ms\": %.4f, \"ratio\": %.4f, "
                   "\"forward_no_logits_ms\": %.4f, \"save_ms\": %.4f, \"reload_ms\": %.4f, \"kept_pass_ms\": %.4f, "
                   "\"rewind_ms\": %.4f, \"threads\": %d, \"model_type\": \"%s\"}\n",
                   n, np, 1e3 * with, one > 0 ? with / one : 0.0, 1e3 * without, 1e3 * mark_s, 1e3 * reload_s,
                   1e3 * kept, 1e3 * rewind, t->threads, t->model_type);
        else if (keep)
            printf("| %6d | %12.3f | %10.2f | %14.3f | %8.3f | %10.3f | %12.3f | %9.3f |\n", n, 1e3 * with,
                   one > 0 ? with / one : 0.0, 1e3 * without, 1e3 * mark_s, 1e3 * reload_s, 1e3 * kept, 1e3 * rewind);
        else
            printf("| %6d | %12.3f | %10.2f | %14.3f | %8.3f | %10.3f | %12s | %9s |\n", n, 1e3 * with,
                   one > 0 ? with / one : 0.0, 1e3 * without, 1e3 * mark_s, 1e3 * reload_s, "-", "-");
        fflush(stdout);
    }
    /* MTP: one draft step from the last position, and a chained one after
     * it (greedy, the pick made where the logits are) */
    if (o->spec.method == TELA_SPEC_MTP && tela_session_mtp_layers(s) > 0) {
        const int32_t last = tela_session_n_past(s) - 1;
        double first_s = 0, chain_s = 0;
        for (long long r = -SPEC_WARMUPS; r < o->reps; r++) {
            int32_t a = 0, b = 0;
            double t0 = cli_now();
            if (tela_session_mtp_draft(s, ids[0], last, false, NULL, &a) != TELA_OK) goto fail;
            double t1 = cli_now();
            if (tela_session_mtp_draft(s, a, last + 1, true, NULL, &b) != TELA_OK) goto fail;
            double t2 = cli_now();
            if (r < 0) continue;
            first_s += t1 - t0;
            chain_s += t2 - t1;
        }
        first_s /= (double)o->reps;
        chain_s /= (double)o->reps;
        if (t->json)
            printf("{\"test\": \"mtp draft\", \"draft_ms\": %.4f, \"chained_ms\": %.4f, \"threads\": %d, "
                   "\"model_type\": \"%s\"}\n", 1e3 * first_s, 1e3 * chain_s, t->threads, t->model_type);
        else
            printf("\nMTP draft step: %.3f ms from the last position, %.3f ms chained (greedy)\n", 1e3 * first_s,
                   1e3 * chain_s);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "tela bench: %s\n", tela_last_error());
    goto done;
oom:
    fprintf(stderr, "tela bench: out of memory\n");
done:
    free(prompt);
    free(out);
    free(ref);
    free(ids);
    free(buf);
    tela_session_free(d);
    tela_session_free(s);
    tela_model_free(dm);
    return rc;
}
