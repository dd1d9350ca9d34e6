/* Prometheus counters and histograms (metrics.h), and the per-replica KV
 * figures and vLLM-named gauges rendered from pool_info. Called from any HTTP
 * handler thread; everything is under metrics_lock. */
#include "serve/metrics.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

static const double k_buckets[METRICS_N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,   0.25,   0.5,   1,    2.5,   5,
                                                    10,    30};

/* The acceptance-rate histogram's bounds (a share, not seconds). */
#define METRICS_RATE_BUCKETS 10
static const double k_rate_buckets[METRICS_RATE_BUCKETS] = {0.1, 0.2, 0.3, 0.4, 0.5,
                                                            0.6, 0.7, 0.8, 0.9, 1.0};
_Static_assert(METRICS_RATE_BUCKETS < METRICS_N_BUCKETS, "the rate fits a metrics_hist");

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

void metrics_add_drafts(metrics *m, int64_t drafted, int64_t accepted)
{
    if (drafted <= 0) return;
    if (accepted < 0) accepted = 0;
    if (accepted > drafted) accepted = drafted;
    double rate = (double)accepted / (double)drafted;
    pthread_mutex_lock(&m->metrics_lock);
    m->draft_tokens += (uint64_t)drafted;
    m->draft_accepted += (uint64_t)accepted;
    int b = 0;
    while (b < METRICS_RATE_BUCKETS - 1 && rate > k_rate_buckets[b]) b++;
    m->draft_rate.counts[b]++;
    m->draft_rate.sum += rate;
    m->draft_rate.n++;
    pthread_mutex_unlock(&m->metrics_lock);
}

static void rate_render(sbuf *o, const metrics *m)
{
    const char *name = "strata_draft_acceptance_rate";
    sbuf_printf(o, "# HELP %s Share of a request's speculative draft tokens that were accepted "
                   "(requests that drafted).\n# TYPE %s histogram\n",
                name, name);
    uint64_t cum = 0;
    for (int b = 0; b < METRICS_RATE_BUCKETS; b++) {
        cum += m->draft_rate.counts[b];
        sbuf_printf(o, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, k_rate_buckets[b], cum);
    }
    sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n",
                name, cum, name, m->draft_rate.sum, name, m->draft_rate.n);
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

/* A label value as the exposition format wants it: \\, \" and \n escaped. */
static void label_escape(sbuf *o, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\') sbuf_printf(o, "\\\\");
        else if (*v == '"') sbuf_printf(o, "\\\"");
        else if (*v == '\n') sbuf_printf(o, "\\n");
        else sbuf_printf(o, "%c", *v);
    }
}

/* The per-replica KV series, then vLLM's aggregate names. Replicas whose
 * figures are not known (not ready, no kv pong yet) have no KV series and
 * count nothing in the sums. */
static void kv_render(sbuf *o, const pool_info *pi, const char *model_name)
{
    static const char *const states[3] = {"total", "used", "cached"};
    sbuf_printf(o, "# HELP strata_kv_blocks KV cache blocks of the replica's engine: in all, held "
                   "by running requests, listed in the prefix cache.\n"
                   "# TYPE strata_kv_blocks gauge\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        const pool_replica_info *r = &pi->rep[i];
        if (!r->kv_known) continue;
        int64_t v[3] = {r->kv.blocks, r->kv.used, r->kv.cached};
        for (int s = 0; s < 3; s++) {
            sbuf_printf(o, "strata_kv_blocks{replica=\"%d\",state=\"%s\"} %" PRId64 "\n", i,
                        states[s], v[s]);
        }
    }
    struct {
        const char *name, *type, *help;
        size_t off;
    } const series[] = {
        {"strata_kv_bytes", "gauge", "Bytes of the replica's KV cache pool.",
         offsetof(pool_kv_figures, bytes)},
        {"strata_kv_committed_bytes", "gauge",
         "Bytes of the replica's KV pool committed now (elastic pools; 0 when not reported).",
         offsetof(pool_kv_figures, committed_bytes)},
        {"strata_prefix_cache_lookup_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache since the engine started.",
         offsetof(pool_kv_figures, lookup_tokens)},
        {"strata_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens reused from the prefix cache since the engine started.",
         offsetof(pool_kv_figures, hit_tokens)},
        {"strata_kv_preemptions_total", "counter",
         "Requests preempted to free KV blocks since the engine started.",
         offsetof(pool_kv_figures, preemptions)},
    };
    for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
        sbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help,
                    series[k].name, series[k].type);
        for (int i = 0; i < pi->n_replicas; i++) {
            const pool_replica_info *r = &pi->rep[i];
            if (!r->kv_known) continue;
            int64_t v;
            memcpy(&v, (const char *)&r->kv + series[k].off, sizeof(v));
            sbuf_printf(o, "%s{replica=\"%d\"} %" PRId64 "\n", series[k].name, i, v);
        }
    }

    static const char *const reasons[3] = {"prefix", "load", "balance"};
    sbuf_printf(o, "# HELP strata_route_decisions_total Requests routed to a replica, by the rule "
                   "that chose it: the longest expected cached prefix, the least loaded (no "
                   "prefix anywhere, or --route load), or the least loaded because the prefix "
                   "replica was too busy.\n"
                   "# TYPE strata_route_decisions_total counter\n");
    for (int k = 0; k < 3; k++) {
        sbuf_printf(o, "strata_route_decisions_total{reason=\"%s\"} %" PRId64 "\n", reasons[k],
                    pi->route_decisions[k]);
    }

    int64_t running = 0, blocks = 0, used = 0, lookup = 0, hit = 0, preempt = 0;
    for (int i = 0; i < pi->n_replicas; i++) {
        const pool_replica_info *r = &pi->rep[i];
        running += r->in_flight;
        if (!r->kv_known) continue;
        blocks += r->kv.blocks;
        used += r->kv.used;
        lookup += r->kv.lookup_tokens;
        hit += r->kv.hit_tokens;
        preempt += r->kv.preemptions;
    }
    double usage = blocks > 0 ? (double)used / (double)blocks : 0.0;
    if (usage > 1) usage = 1; /* an engine's figures are taken as sent; the gauge stays a fraction */
    sbuf label = {0};
    label_escape(&label, model_name != NULL ? model_name : "");
    const char *l = label.data != NULL ? label.data : "";
    sbuf_printf(o,
                "# HELP vllm:num_requests_waiting Requests waiting for a slot (vLLM's name).\n"
                "# TYPE vllm:num_requests_waiting gauge\n"
                "vllm:num_requests_waiting{model_name=\"%s\"} %d\n"
                "# HELP vllm:num_requests_running Requests holding an engine slot (vLLM's name).\n"
                "# TYPE vllm:num_requests_running gauge\n"
                "vllm:num_requests_running{model_name=\"%s\"} %" PRId64 "\n"
                "# HELP vllm:kv_cache_usage_perc Fraction of KV blocks held by running requests "
                "(vLLM's name; 0..1).\n"
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                "vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6g\n"
                "# HELP vllm:prefix_cache_queries_total Prompt tokens looked up in the prefix "
                "cache (vLLM's name).\n"
                "# TYPE vllm:prefix_cache_queries_total counter\n"
                "vllm:prefix_cache_queries_total{model_name=\"%s\"} %" PRId64 "\n"
                "# HELP vllm:prefix_cache_hits_total Prompt tokens reused from the prefix cache "
                "(vLLM's name).\n"
                "# TYPE vllm:prefix_cache_hits_total counter\n"
                "vllm:prefix_cache_hits_total{model_name=\"%s\"} %" PRId64 "\n"
                "# HELP vllm:num_preemptions_total Requests preempted (vLLM's name).\n"
                "# TYPE vllm:num_preemptions_total counter\n"
                "vllm:num_preemptions_total{model_name=\"%s\"} %" PRId64 "\n",
                l, pi->queue_depth, l, running, l, usage, l, lookup, l, hit, l, preempt);
    sbuf_free(&label);
}

int metrics_render(metrics *m, const pool_info *pi, const char *model_name, sbuf *o)
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
    sbuf_printf(o,
                "# HELP strata_draft_tokens_total Speculative draft tokens verified.\n"
                "# TYPE strata_draft_tokens_total counter\nstrata_draft_tokens_total %" PRIu64
                "\n# HELP strata_draft_accepted_tokens_total Speculative draft tokens accepted.\n"
                "# TYPE strata_draft_accepted_tokens_total counter\n"
                "strata_draft_accepted_tokens_total %" PRIu64 "\n",
                m->draft_tokens, m->draft_accepted);
    rate_render(o, m);
    pthread_mutex_unlock(&m->metrics_lock);
    sbuf_printf(o, "# HELP strata_queue_depth Requests waiting for a slot.\n"
                   "# TYPE strata_queue_depth gauge\nstrata_queue_depth %d\n",
                pi->queue_depth);
    sbuf_printf(o, "# HELP strata_replica_in_flight Requests holding a slot of the replica.\n"
                   "# TYPE strata_replica_in_flight gauge\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        sbuf_printf(o, "strata_replica_in_flight{replica=\"%d\"} %d\n", i, pi->rep[i].in_flight);
    }
    sbuf_printf(o, "# HELP strata_replica_waiting Queued requests waiting for the replica "
                   "that holds their prompt's prefix.\n"
                   "# TYPE strata_replica_waiting gauge\n");
    for (int i = 0; i < pi->n_replicas; i++) {
        sbuf_printf(o, "strata_replica_waiting{replica=\"%d\"} %d\n", i, pi->rep[i].waiting);
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
    kv_render(o, pi, model_name);
    return 0;
}
