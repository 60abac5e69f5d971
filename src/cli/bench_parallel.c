/* bench_parallel.c: 'tela bench --parallel P': decoding throughput of P
 * sequences at once through the batching engine (llama-batched-bench's
 * aggregate tg speed). Each of P requests gets its own 32-token prompt and
 * decodes N tokens (greedy, or sampled at --temp with the sampler's other
 * defaults and a fixed seed; end-of-generation ignored, no prefix cache);
 * the time runs from the moment every request has its first token to the
 * last one's end, so prompt processing is not counted. With --spec ngram
 * or mtp, every request continues the speculative tests' prompt instead,
 * plainly and then with each --draft-max k, drafting inside the engine's
 * steps; the table says how many drafts were accepted. */
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_bench.h"

#define BENCH_PROMPT 32

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, first;       /* requests finished, with a first token */
    double t_all_first;    /* when the last of them got its first token */
    double t_end;
    int failed;
    char error[256];
    long long drafted, accepted;
} par_state;

static int on_event(void *user, const tela_engine_event *ev) {
    par_state *s = user;
    pthread_mutex_lock(&s->mu);
    if (ev->kind == TELA_EVENT_TOKEN && ev->usage.generated_tokens == 1) {
        s->first++;
        s->t_all_first = cli_now(); /* ends as the time of the last first token */
    } else if (ev->kind == TELA_EVENT_DONE) {
        if (ev->status != TELA_OK && !s->failed) {
            s->failed = 1;
            snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "failed");
        }
        s->done++;
        s->drafted += ev->usage.draft_tokens;
        s->accepted += ev->usage.accepted_tokens;
        s->t_end = cli_now();
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* One run: seconds of decoding for P requests of n_gen tokens (each
 * prompt np ids, one after the other in ids; stride 0: the same one), -1
 * on error; the drafts are added to *drafted and *accepted. */
static double run_once(tela_engine *e, const int32_t *ids, int np, int stride, int P, int n_gen, double temp,
                       const tela_spec_params *spec, long long *drafted, long long *accepted) {
    par_state s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    tela_request_params rp = tela_request_default_params();
    rp.sampler.temperature = (float)temp;
    rp.max_tokens = n_gen;
    rp.ignore_eos = 1;
    rp.callback = on_event;
    rp.user = &s;
    rp.spec = spec;
    int submitted = 0;
    for (int i = 0; i < P; i++) {
        if (tela_engine_submit(e, ids + (size_t)i * (size_t)stride, np, &rp, NULL) != TELA_OK) {
            fprintf(stderr, "tela bench: %s\n", tela_last_error());
            break;
        }
        submitted++;
    }
    pthread_mutex_lock(&s.mu);
    while (s.done < submitted) pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    if (submitted < P) return -1;
    if (s.failed) {
        fprintf(stderr, "tela bench: %s\n", s.error);
        return -1;
    }
    *drafted += s.drafted;
    *accepted += s.accepted;
    return s.t_end - s.t_all_first;
}

/* The rows of P sequences decoding N tokens each: plain (spec NULL), or
 * with spec at each of its draft_max. */
static int parallel_rows(tela_model *m, tela_model *draft, const cli_bench_opts *o, const cli_bench_table *t, int P,
                         int N, const int32_t *ids, int np, int stride, const tela_spec_params *spec) {
    tela_engine_params ep = tela_engine_default_params();
    ep.draft_model = spec ? draft : NULL;
    ep.n_parallel = P;
    ep.n_ctx = np + N + 16;
    ep.prefix_cache = 0;
    ep.n_threads = o->n_threads;
    ep.kv_type = o->kv_type;
    ep.mem_budget = o->mem_budget;
    tela_engine *e = NULL;
    if (tela_engine_create(m, &ep, &e) != TELA_OK) {
        fprintf(stderr, "tela bench: %s\n", tela_last_error());
        return 1;
    }
    int rc = 0;
    for (int ki = 0; ki < (spec ? o->n_draft_max : 1) && rc == 0; ki++) {
        tela_spec_params sp = spec ? *spec : tela_spec_default_params();
        if (spec) sp.draft_max = (int32_t)o->draft_max[ki];
        double sum = 0, sum2 = 0;
        long long drafted = 0, accepted = 0;
        for (long long r = -1; r < o->reps; r++) { /* r = -1: warm-up */
            long long d = 0, a = 0;
            const double sec = run_once(e, ids, np, stride, P, N, o->temp, spec ? &sp : NULL, &d, &a);
            if (sec < 0) {
                rc = 1;
                break;
            }
            if (r < 0) continue;
            drafted += d;
            accepted += a;
            /* the first token of each request comes from its prompt */
            const double ts = (double)P * (N - 1) / (sec > 0 ? sec : 1e-9);
            sum += ts;
            sum2 += ts * ts;
        }
        if (rc) break;
        char name[64];
        if (spec) snprintf(name, sizeof name, "tg%d x %d, %s k=%d", N, P, cli_spec_method_name(sp.method), sp.draft_max);
        else if (o->temp > 0) snprintf(name, sizeof name, "tg%d x %d, temp %g", N, P, o->temp);
        else snprintf(name, sizeof name, "tg%d x %d", N, P);
        cli_bench_row(t, name, np, N, 0, P, sum, sum2, o->reps);
        if (spec && !t->json)
            printf("  (%s k=%d: %lld of %lld drafts accepted, %.1f%%)\n", cli_spec_method_name(sp.method),
                   sp.draft_max, accepted, drafted, drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
    }
    tela_engine_free(e);
    return rc;
}

int cli_bench_parallel(tela_model *m, const cli_bench_opts *o, const cli_bench_table *t) {
    const tela_model_info *info = tela_model_get_info(m);
    const bool spec = o->spec.method != TELA_SPEC_NONE;
    int rc = 0;
    size_t np = BENCH_PROMPT;
    int32_t *ids = NULL;
    tela_model *draft = NULL; /* --draft: the engine's draft model */
    if (spec && o->spec.method == TELA_SPEC_DRAFT && !(draft = cli_bench_load_draft(m, o))) return 1;
    if (spec && !(ids = cli_bench_spec_prompt(m, o, &np))) {
        tela_model_free(draft);
        return 1;
    }
    for (int pi = 0; pi < o->n_parallel && rc == 0; pi++)
        for (int gi = 0; gi < o->n_gen_n && rc == 0; gi++) {
            const int P = (int)o->parallel[pi], N = (int)o->n_gen[gi];
            if (N < 2) continue;
            if (!spec) {
                ids = malloc(sizeof(int32_t) * (size_t)P * BENCH_PROMPT);
                if (!ids) return 1;
                cli_bench_fill_tokens(ids, P * BENCH_PROMPT, info->n_vocab);
                rc = parallel_rows(m, NULL, o, t, P, N, ids, BENCH_PROMPT, BENCH_PROMPT, NULL);
                free(ids);
                ids = NULL;
                continue;
            }
            rc = parallel_rows(m, NULL, o, t, P, N, ids, (int)np, 0, NULL);
            if (rc == 0) rc = parallel_rows(m, draft, o, t, P, N, ids, (int)np, 0, &o->spec);
        }
    free(ids);
    tela_model_free(draft);
    return rc;
}
