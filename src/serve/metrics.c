/* Prometheus counters and histograms (metrics.h). Called from any HTTP
 * handler thread; everything is under metrics_lock. */
#include "serve/metrics.h"

#include <inttypes.h>
#include <string.h>

static const double k_buckets[METRICS_N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,   0.25,   0.5,   1,    2.5,   5,
                                                    10,    30};

void metrics_init(metrics *m)
{
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->metrics_lock, NULL);
}

void metrics_free(metrics *m)
{
    pthread_mutex_destroy(&m->metrics_lock);
}

void metrics_count_request(metrics *m, const char *endpoint, int status)
{
    pthread_mutex_lock(&m->metrics_lock);
    int i = 0;
    while (i < m->n_series &&
           !(m->series[i].status == status && strcmp(m->series[i].endpoint, endpoint) == 0)) {
        i++;
    }
    if (i == m->n_series && i < METRICS_MAX_SERIES) {
        m->series[i].endpoint = endpoint;
        m->series[i].status = status;
        m->series[i].n = 0;
        m->n_series++;
    }
    if (i < m->n_series) m->series[i].n++;
    pthread_mutex_unlock(&m->metrics_lock);
}

void metrics_add_tokens(metrics *m, int64_t prompt, int64_t generated)
{
    pthread_mutex_lock(&m->metrics_lock);
    m->prompt_tokens += (uint64_t)(prompt > 0 ? prompt : 0);
    m->generated_tokens += (uint64_t)(generated > 0 ? generated : 0);
    pthread_mutex_unlock(&m->metrics_lock);
}

static void hist_add(metrics_hist *h, double v, uint64_t times)
{
    int b = 0;
    while (b < METRICS_N_BUCKETS && v > k_buckets[b]) b++;
    h->counts[b] += times;
    h->sum += v * (double)times;
    h->n += times;
}

void metrics_observe_ttft(metrics *m, double seconds)
{
    pthread_mutex_lock(&m->metrics_lock);
    hist_add(&m->ttft, seconds, 1);
    pthread_mutex_unlock(&m->metrics_lock);
}

void metrics_observe_itl(metrics *m, double seconds, int64_t n_tokens)
{
    if (n_tokens <= 0) return;
    pthread_mutex_lock(&m->metrics_lock);
    hist_add(&m->itl, seconds / (double)n_tokens, (uint64_t)n_tokens);
    pthread_mutex_unlock(&m->metrics_lock);
}

static void hist_render(sbuf *o, const char *name, const char *help, const metrics_hist *h)
{
    sbuf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < METRICS_N_BUCKETS; b++) {
        cum += h->counts[b];
        sbuf_printf(o, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, k_buckets[b], cum);
    }
    cum += h->counts[METRICS_N_BUCKETS];
    sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name,
                cum, name, h->sum, name, h->n);
}

int metrics_render(metrics *m, const pool_info *pi, sbuf *o)
{
    pthread_mutex_lock(&m->metrics_lock);
    sbuf_printf(o, "# HELP strata_requests_total HTTP requests by endpoint and status.\n"
                   "# TYPE strata_requests_total counter\n");
    for (int i = 0; i < m->n_series; i++) {
        sbuf_printf(o, "strata_requests_total{endpoint=\"%s\",status=\"%d\"} %" PRIu64 "\n",
                    m->series[i].endpoint, m->series[i].status, m->series[i].n);
    }
    sbuf_printf(o,
                "# HELP strata_prompt_tokens_total Prompt tokens of completed requests.\n"
                "# TYPE strata_prompt_tokens_total counter\nstrata_prompt_tokens_total %" PRIu64
                "\n# HELP strata_generated_tokens_total Tokens generated.\n"
                "# TYPE strata_generated_tokens_total counter\nstrata_generated_tokens_total %" PRIu64
                "\n",
                m->prompt_tokens, m->generated_tokens);
    hist_render(o, "strata_time_to_first_token_seconds",
                "From arrival to the first generated token.", &m->ttft);
    hist_render(o, "strata_inter_token_latency_seconds", "Time per generated token after the first.",
                &m->itl);
    pthread_mutex_unlock(&m->metrics_lock);
    sbuf_printf(o, "# HELP strata_queue_depth Requests waiting for a slot.\n"
                   "# TYPE strata_queue_depth gauge\nstrata_queue_depth %d\n",
                pi->queue_depth);
    sbuf_printf(o, "# HELP strata_replica_in_flight Requests holding a slot of the replica.\n"
                   "# TYPE strata_replica_in_flight gauge\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        sbuf_printf(o, "strata_replica_in_flight{replica=\"%d\"} %d\n", i, pi->rep[i].in_flight);
    }
    sbuf_printf(o, "# HELP strata_replica_ready Whether the replica takes requests.\n"
                   "# TYPE strata_replica_ready gauge\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        sbuf_printf(o, "strata_replica_ready{replica=\"%d\"} %d\n", i, pi->rep[i].ready);
    }
    sbuf_printf(o, "# HELP strata_engine_restarts_total Engine processes started again.\n"
                   "# TYPE strata_engine_restarts_total counter\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        sbuf_printf(o, "strata_engine_restarts_total{replica=\"%d\"} %" PRId64 "\n", i,
                    pi->rep[i].restarts);
    }
    return 0;
}
