/* Prometheus metrics of the server (names documented in the README):
 *   strata_requests_total{endpoint,status}   counter
 *   strata_prompt_tokens_total               counter
 *   strata_generated_tokens_total            counter
 *   strata_time_to_first_token_seconds       histogram
 *   strata_inter_token_latency_seconds       histogram (per generated token)
 *   strata_draft_tokens_total                counter   speculative draft tokens verified
 *   strata_draft_accepted_tokens_total       counter   of them accepted
 *   strata_draft_acceptance_rate             histogram (per request that drafted:
 *                                            accepted / drafted, buckets 0.1 .. 1)
 *   strata_queue_depth                       gauge
 *   strata_replica_in_flight{replica}        gauge
 *   strata_replica_ready{replica}            gauge
 *   strata_engine_restarts_total{replica}    counter
 * and, per replica whose engine is ready and has reported them (its latest
 * `pong`'s kv figures, engine/protocol.h; a restarted engine starts its
 * counters again, which Prometheus reads as a counter reset):
 *   strata_kv_blocks{replica,state="total|used|cached"}   gauge
 *   strata_kv_bytes{replica}                               gauge
 *   strata_kv_committed_bytes{replica}                     gauge
 *   strata_prefix_cache_lookup_tokens_total{replica}       counter
 *   strata_prefix_cache_hit_tokens_total{replica}          counter
 *   strata_kv_preemptions_total{replica}                   counter
 * the router's decisions (pool.h "Routing"), since the server started:
 *   strata_route_decisions_total{reason="prefix|load|balance"}  counter
 * and the names of vLLM that external routers read, over all replicas, with
 * vLLM's model_name label:
 *   vllm:num_requests_waiting     gauge   the admission queue (strata_queue_depth)
 *   vllm:num_requests_running     gauge   requests holding a slot (sum of in_flight)
 *   vllm:kv_cache_usage_perc      gauge   used / total KV blocks, 0..1 (0 when unknown)
 *   vllm:prefix_cache_queries_total counter  prompt tokens looked up (sum)
 *   vllm:prefix_cache_hits_total    counter  prompt tokens reused (sum)
 *   vllm:num_preemptions_total      counter  preemptions (sum)
 * All counters live behind metrics_lock; gauges are read from the pool at
 * scrape time. */
#ifndef STRATA_SERVE_METRICS_H
#define STRATA_SERVE_METRICS_H

#include "serve/pool.h"
#include "serve/textgen.h"

#include <pthread.h>
#include <stdint.h>

#define METRICS_N_BUCKETS 14
#define METRICS_MAX_SERIES 128

typedef struct metrics_hist {
    uint64_t counts[METRICS_N_BUCKETS + 1]; /* the last is +Inf */
    double sum;
    uint64_t n;
} metrics_hist;

typedef struct metrics {
    pthread_mutex_t metrics_lock;
    struct {
        const char *endpoint; /* a string literal */
        int status;
        uint64_t n;
    } series[METRICS_MAX_SERIES];
    int n_series;
    uint64_t prompt_tokens, generated_tokens;
    metrics_hist ttft, itl;
    uint64_t draft_tokens, draft_accepted;
    metrics_hist draft_rate;  /* over METRICS_RATE_BUCKETS (counts[0..10]) */
} metrics;

void metrics_init(metrics *m);
void metrics_free(metrics *m);
/* endpoint must be a string literal (or outlive m). */
void metrics_count_request(metrics *m, const char *endpoint, int status);
void metrics_add_tokens(metrics *m, int64_t prompt, int64_t generated);
void metrics_observe_ttft(metrics *m, double seconds);
void metrics_observe_itl(metrics *m, double seconds, int64_t n_tokens);
/* A request's done stats: drafted and accepted tokens (nothing when it
 * drafted none). */
void metrics_add_drafts(metrics *m, int64_t drafted, int64_t accepted);
/* The exposition text into out; model_name is the vLLM metrics' label
 * (escaped here). */
int metrics_render(metrics *m, const pool_info *pi, const char *model_name, sbuf *out);

#endif
