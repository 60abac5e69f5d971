/* bench_parallel.c: 'tela bench --parallel P': decoding throughput of P
 * sequences at once through the batching engine (llama-batched-bench's
 * aggregate tg speed). Each of P requests gets its own 32-token prompt and
 * decodes N tokens (greedy, end-of-generation ignored, no prefix cache);
 * the time runs from the moment every request has its first token to the
 * last one's end, so prompt processing is not counted. */
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
        s->t_end = cli_now();
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* One run: seconds of decoding for P requests of n_gen tokens, -1 on error. */
static double run_once(tela_engine *e, const int32_t *ids, int P, int n_gen) {
    par_state s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    tela_request_params rp = tela_request_default_params();
    rp.sampler.temperature = 0.0f;
    rp.max_tokens = n_gen;
    rp.ignore_eos = 1;
    rp.callback = on_event;
    rp.user = &s;
    int submitted = 0;
    for (int i = 0; i < P; i++) {
        if (tela_engine_submit(e, ids + (size_t)i * BENCH_PROMPT, BENCH_PROMPT, &rp, NULL) != TELA_OK) {
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
    return s.t_end - s.t_all_first;
}

int cli_bench_parallel(tela_model *m, const cli_bench_opts *o, const cli_bench_table *t) {
    const tela_model_info *info = tela_model_get_info(m);
    int rc = 0;
    for (int pi = 0; pi < o->n_parallel && rc == 0; pi++)
        for (int gi = 0; gi < o->n_gen_n && rc == 0; gi++) {
            const int P = (int)o->parallel[pi], N = (int)o->n_gen[gi];
            if (N < 2) continue;
            tela_engine_params ep = tela_engine_default_params();
            ep.n_parallel = P;
            ep.n_ctx = BENCH_PROMPT + N + 16;
            ep.prefix_cache = 0;
            ep.n_threads = o->n_threads;
            ep.kv_type = o->kv_type;
            ep.mem_budget = o->mem_budget;
            tela_engine *e = NULL;
            if (tela_engine_create(m, &ep, &e) != TELA_OK) {
                fprintf(stderr, "tela bench: %s\n", tela_last_error());
                return 1;
            }
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)P * BENCH_PROMPT);
            if (!ids) {
                tela_engine_free(e);
                return 1;
            }
            cli_bench_fill_tokens(ids, P * BENCH_PROMPT, info->n_vocab);
            double sum = 0, sum2 = 0;
            for (long long r = -1; r < o->reps; r++) { /* r = -1: warm-up */
                const double sec = run_once(e, ids, P, N);
                if (sec < 0) {
                    rc = 1;
                    break;
                }
                if (r < 0) continue;
                /* the first token of each request comes from its prompt */
                const double ts = (double)P * (N - 1) / (sec > 0 ? sec : 1e-9);
                sum += ts;
                sum2 += ts * ts;
            }
            free(ids);
            tela_engine_free(e);
            if (rc) break;
            char name[48];
            snprintf(name, sizeof name, "tg%d x %d", N, P);
            cli_bench_row(t, name, BENCH_PROMPT, N, 0, P, sum, sum2, o->reps);
        }
    return rc;
}
