/* profile.c: the profiler of an exec's operations (--profile): each
 * operation is bracketed by two marks of its backend (host clock readings
 * on the CPU, CUDA events on a GPU, so asynchronous work is timed on the
 * device), and the time between them is added to a row named after the
 * operation and its weight type (or the phase the model set: "FFN",
 * "output head"). Marks are turned into seconds after each synchronization
 * of the exec; host work (sampling, detokenization) is added directly.
 * The report is a table, or one JSON object, with the wall time of the
 * profiled span and what the rows do not account for. */
#include "backend/backend_impl.h"
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROF_KEY 48

typedef struct prof_row {
    char key[PROF_KEY];
    uint64_t calls;
    double seconds;
    double bytes;                /* weight bytes read (matmuls) */
    double flops;
} prof_row;

typedef struct prof_pending {
    int a, b;                    /* the backend's marks */
    int row;
} prof_pending;

struct tela_prof {
    prof_row *rows;
    int n_rows, cap_rows;
    prof_pending *pend;
    int n_pend, cap_pend;
    const char *phase;
    double t0;                   /* host clock at the start */
    tela_status failed;
};

static double host_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void tela_exec_profile_start(tela_exec *ex) {
    if (ex->prof) return;
    tela_prof *p = calloc(1, sizeof *p);
    if (!p) return;
    ex->ops->sync(ex);
    ex->ops->prof_mode(ex, true);
    p->t0 = host_seconds();
    ex->prof = p;
}

bool tela_exec_profiling(const tela_exec *ex) { return ex->prof != NULL; }

void tela_exec_profile_phase(tela_exec *ex, const char *phase) {
    if (ex->prof) ex->prof->phase = phase;
}

static int row_of(tela_prof *p, const char *key) {
    for (int i = 0; i < p->n_rows; i++)
        if (!strcmp(p->rows[i].key, key)) return i;
    if (p->n_rows == p->cap_rows) {
        int cap = p->cap_rows ? 2 * p->cap_rows : 32;
        prof_row *nr = realloc(p->rows, (size_t)cap * sizeof *nr);
        if (!nr) return -1;
        p->rows = nr;
        p->cap_rows = cap;
    }
    prof_row *r = &p->rows[p->n_rows];
    memset(r, 0, sizeof *r);
    snprintf(r->key, sizeof r->key, "%s", key);
    return p->n_rows++;
}

int tela_prof_begin(tela_exec *ex) { return ex->prof ? ex->ops->prof_mark(ex) : -1; }

void tela_prof_end(tela_exec *ex, int mark, const char *op, bool is_matmul, int wtype, double bytes, double flops) {
    tela_prof *p = ex->prof;
    if (!p || mark < 0) return;
    const int stop = ex->ops->prof_mark(ex);
    char key[PROF_KEY];
    const char *name = is_matmul && p->phase ? p->phase : op;
    const char *tn = wtype >= 0 ? tela_type_name((tela_type)wtype) : NULL;
    if (tn) snprintf(key, sizeof key, "%s %s", name, tn);
    else snprintf(key, sizeof key, "%s", name);
    const int row = row_of(p, key);
    if (row < 0 || stop < 0) return;
    p->rows[row].calls++;
    p->rows[row].bytes += bytes;
    p->rows[row].flops += flops;
    if (p->n_pend == p->cap_pend) {
        int cap = p->cap_pend ? 2 * p->cap_pend : 256;
        prof_pending *np = realloc(p->pend, (size_t)cap * sizeof *np);
        if (!np) return;
        p->pend = np;
        p->cap_pend = cap;
    }
    p->pend[p->n_pend++] = (prof_pending){mark, stop, row};
}

/* The pending marks into seconds: called after the exec has synchronized. */
void tela_prof_resolve(tela_exec *ex) {
    tela_prof *p = ex->prof;
    if (!p || p->n_pend == 0) return;
    for (int i = 0; i < p->n_pend; i++)
        p->rows[p->pend[i].row].seconds += ex->ops->prof_seconds(ex, p->pend[i].a, p->pend[i].b);
    p->n_pend = 0;
    ex->ops->prof_clear(ex);
}

void tela_exec_profile_host(tela_exec *ex, const char *name, double seconds) {
    tela_prof *p = ex->prof;
    if (!p) return;
    const int row = row_of(p, name);
    if (row < 0) return;
    p->rows[row].calls++;
    p->rows[row].seconds += seconds;
}

static int by_seconds(const void *a, const void *b) {
    const prof_row *x = a, *y = b;
    return (x->seconds < y->seconds) - (x->seconds > y->seconds);
}

/* A growing string for the report. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = b->s ? vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 4096;
        if (n >= 0 && cap < b->len + (size_t)n + 1) cap = b->len + (size_t)n + 1;
        char *ns = realloc(b->s, cap);
        if (!ns) return;
        b->s = ns;
        b->cap = cap;
    }
}

char *tela_exec_profile_report(tela_exec *ex, bool json) {
    tela_prof *p = ex->prof;
    if (!p) return NULL;
    ex->ops->sync(ex);
    tela_prof_resolve(ex);
    const double wall = host_seconds() - p->t0;
    qsort(p->rows, (size_t)p->n_rows, sizeof *p->rows, by_seconds);
    double total = 0;
    for (int i = 0; i < p->n_rows; i++) total += p->rows[i].seconds;
    const double other = wall - total;
    sbuf b = {NULL, 0, 0};
    if (json) {
        sb_printf(&b, "{\"profile\": {\"device\": \"%s\", \"wall_seconds\": %.6f, \"accounted_seconds\": %.6f, "
                      "\"unaccounted_seconds\": %.6f, \"phases\": [",
                  ex->be->description, wall, total, other);
        for (int i = 0; i < p->n_rows; i++) {
            const prof_row *r = &p->rows[i];
            sb_printf(&b, "%s{\"phase\": \"%s\", \"calls\": %llu, \"seconds\": %.6f, \"share\": %.6f", i ? ", " : "",
                      r->key, (unsigned long long)r->calls, r->seconds, wall > 0 ? r->seconds / wall : 0.0);
            if (r->bytes > 0 && r->seconds > 0)
                sb_printf(&b, ", \"gb_per_s\": %.3f, \"gflop_per_s\": %.3f", r->bytes / r->seconds / 1e9,
                          r->flops / r->seconds / 1e9);
            sb_printf(&b, "}");
        }
        sb_printf(&b, "]}}\n");
    } else {
        sb_printf(&b, "profile on %s: %.3f s wall, %.1f%% of it in the phases below\n", ex->be->description, wall,
                  wall > 0 ? 100.0 * total / wall : 0.0);
        sb_printf(&b, "  %-30s %9s %11s %7s %10s %9s %10s\n", "phase", "calls", "time (ms)", "share", "avg (us)",
                  "GB/s", "GFLOP/s");
        for (int i = 0; i < p->n_rows; i++) {
            const prof_row *r = &p->rows[i];
            sb_printf(&b, "  %-30s %9llu %11.3f %6.1f%% %10.2f", r->key, (unsigned long long)r->calls,
                      r->seconds * 1e3, wall > 0 ? 100.0 * r->seconds / wall : 0.0,
                      r->calls ? r->seconds / (double)r->calls * 1e6 : 0.0);
            if (r->bytes > 0 && r->seconds > 0)
                sb_printf(&b, " %9.1f %10.1f", r->bytes / r->seconds / 1e9, r->flops / r->seconds / 1e9);
            sb_printf(&b, "\n");
        }
        sb_printf(&b, "  %-30s %9s %11.3f %6.1f%%\n", "(outside the phases)", "", other * 1e3,
                  wall > 0 ? 100.0 * other / wall : 0.0);
    }
    return b.s;
}

void tela_exec_profile_stop(tela_exec *ex) {
    tela_prof *p = ex->prof;
    if (!p) return;
    ex->ops->sync(ex);
    ex->prof = NULL;
    ex->ops->prof_clear(ex);
    ex->ops->prof_mode(ex, false);
    free(p->rows);
    free(p->pend);
    free(p);
}
