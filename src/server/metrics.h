/* metrics.h: the counters behind GET /metrics (HTTP requests by endpoint
 * and status) and their rendering, with the engine's statistics, in the
 * Prometheus text format. */
#ifndef TELA_SERVER_METRICS_H
#define TELA_SERVER_METRICS_H

#include "tela/tela.h"

typedef struct metrics metrics;

metrics *metrics_create(void);
void metrics_free(metrics *m);
/* endpoint: a route's path (a string that outlives m), or "other". */
void metrics_count_request(metrics *m, const char *endpoint, int status);
/* The exposition text (malloc'd): the request counts, then st's fields
 * (st may be NULL when there is no engine). */
char *metrics_render(metrics *m, const tela_engine_stats *st, double uptime_seconds);

#endif
