/* The per-sequence sampler chain (see sampler.h).
 *
 * Candidates are (token, logit) pairs in a buffer sized to the vocabulary.
 * Each truncating stage (top-k, typical, top-p, min-p, XTC) leaves the kept
 * candidates at the front, sorted by descending logit where the stage
 * needs order. Sorting a whole vocabulary per token would cost
 * milliseconds, so the stages that need order take it incrementally from a
 * max-heap: top-k pops k, top-p pops until the mass is reached. */
#include "sample/sampler.h"

#include "base/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct sampler {
    sample_params p;
    int32_t n_vocab;
    sample_bias *bias;
    strata_rng rng;

    int32_t *history; /* ring of the last penalty_last_n tokens */
    int32_t n_history, i_history;
    int32_t *counts;  /* occurrences in the window, per token (scratch, kept zero) */

    cand *cand;       /* n_vocab: by token id, then a heap */
    cand *sorted;     /* n_vocab: candidates taken from the heap, best first */
    float mu;         /* Mirostat's state: 2 tau at the start */
    float *probs;     /* n_vocab: XTC's and the dynamic temperature's probabilities */

    /* DRY: its own window (it may be longer than the penalties'), the
     * restart sequences sorted by head, and scratch */
    bool dry;
    sample_dry_breaker *breakers;
    size_t n_breakers;
    int32_t *dry_hist;       /* ring of the last dry_penalty_last_n tokens */
    int32_t n_dry, i_dry;
    int32_t *dry_count;      /* (dry_penalty_last_n) repeat lengths */
    int32_t *dry_max;        /* (n_vocab) 1 + the longest repeat a token would extend; kept zero */
    int32_t *dry_touched;    /* (dry_penalty_last_n) tokens with a dry_max set */
};

static int cmp_breaker(const void *a, const void *b)
{
    const sample_dry_breaker *x = a, *y = b;
    return (x->head > y->head) - (x->head < y->head);
}

sample_params sample_params_default(void)
{
    return (sample_params){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f,
        .repeat_penalty = 1.0f, .penalty_last_n = 64, .seed = 0, .xtc_threshold = 0.1f,
        .dynatemp_exponent = 1.0f, .mirostat_tau = 5.0f, .mirostat_eta = 0.1f,
    };
}

int sampler_new(sampler **out, const sample_params *p, int32_t n_vocab, strata_err *err)
{
    *out = NULL;
    if (n_vocab <= 0) return strata_err_set(err, STRATA_EINVAL, "vocabulary of %d tokens", n_vocab);
    for (size_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "logit_bias names token %d, outside the vocabulary (0..%d)",
                                  p->bias[i].token, n_vocab - 1);
        }
    }
    sampler *s = calloc(1, sizeof(*s));
    if (s == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    s->bias = p->n_bias ? malloc(p->n_bias * sizeof(*s->bias)) : NULL;
    s->history = s->p.penalty_last_n ? malloc((size_t)s->p.penalty_last_n * sizeof(int32_t)) : NULL;
    s->counts = calloc((size_t)n_vocab, sizeof(int32_t));
    s->cand = malloc((size_t)n_vocab * sizeof(cand));
    s->sorted = malloc((size_t)n_vocab * sizeof(cand));
    s->probs = malloc((size_t)n_vocab * sizeof(float));
    if ((p->n_bias && s->bias == NULL) || (s->p.penalty_last_n && s->history == NULL) ||
        s->counts == NULL || s->cand == NULL || s->sorted == NULL || s->probs == NULL) {
        sampler_free(s);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (p->n_bias) memcpy(s->bias, p->bias, p->n_bias * sizeof(*s->bias));
    s->p.bias = s->bias;
    s->dry = p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n > 0;
    if (s->dry) {
        size_t w = (size_t)p->dry_penalty_last_n;
        s->breakers = p->n_dry_breakers ? malloc(p->n_dry_breakers * sizeof(*s->breakers)) : NULL;
        s->dry_hist = malloc(w * sizeof(int32_t));
        s->dry_count = malloc(w * sizeof(int32_t));
        s->dry_max = calloc((size_t)n_vocab, sizeof(int32_t));
        s->dry_touched = malloc(w * sizeof(int32_t));
        if ((p->n_dry_breakers && s->breakers == NULL) || !s->dry_hist || !s->dry_count || !s->dry_max ||
            !s->dry_touched) {
            sampler_free(s);
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        }
        if (p->n_dry_breakers) memcpy(s->breakers, p->dry_breakers, p->n_dry_breakers * sizeof(*s->breakers));
        s->n_breakers = p->n_dry_breakers;
        if (s->n_breakers > 1) qsort(s->breakers, s->n_breakers, sizeof(*s->breakers), cmp_breaker);
    }
    s->p.dry_breakers = NULL;
    s->p.n_dry_breakers = 0;
    strata_rng_seed(&s->rng, p->seed);
    s->mu = 2.0f * p->mirostat_tau;
    *out = s;
    return 0;
}

void sampler_free(sampler *s)
{
    if (s == NULL) return;
    free(s->bias);
    free(s->history);
    free(s->counts);
    free(s->cand);
    free(s->sorted);
    free(s->probs);
    free(s->breakers);
    free(s->dry_hist);
    free(s->dry_count);
    free(s->dry_max);
    free(s->dry_touched);
    free(s);
}

void sampler_accept(sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab) return;
    if (s->dry) {
        s->dry_hist[s->i_dry] = token;
        s->i_dry = (s->i_dry + 1) % s->p.dry_penalty_last_n;
        if (s->n_dry < s->p.dry_penalty_last_n) s->n_dry++;
    }
    if (s->p.penalty_last_n == 0) return;
    s->history[s->i_history] = token;
    s->i_history = (s->i_history + 1) % s->p.penalty_last_n;
    if (s->n_history < s->p.penalty_last_n) s->n_history++;
}

/* --- stages --- */

static void apply_penalties(sampler *s)
{
    const sample_params *p = &s->p;
    bool any = p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
               p->frequency_penalty != 0.0f;
    if (!any || s->n_history == 0) return;
    for (int32_t i = 0; i < s->n_history; i++) s->counts[s->history[i]]++;
    for (int32_t i = 0; i < s->n_history; i++) {
        int32_t t = s->history[i];
        int32_t c = s->counts[t];
        if (c == 0) continue; /* already applied for this token */
        float *l = &s->cand[t].logit; /* candidates are still indexed by id here */
        if (p->repeat_penalty != 1.0f) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)c * p->frequency_penalty + p->presence_penalty;
        s->counts[t] = 0;
    }
}

/* Max-heap on logit (ties: lower id first). */
static bool cand_before(const cand *a, const cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void heap_down(cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        if (l < n && cand_before(&h[l], &h[best])) best = l;
        if (l + 1 < n && cand_before(&h[l + 1], &h[best])) best = l + 1;
        if (best == i) return;
        cand t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

/* Candidates come out of the heap in order, into s->sorted, only as far as
 * a stage needs them. */
typedef struct order {
    cand *heap;
    size_t n_heap;
    cand *out;
    size_t n_out;
} order;

static void order_take(order *o, size_t want)
{
    while (o->n_out < want && o->n_heap > 0) {
        o->out[o->n_out++] = o->heap[0];
        o->heap[0] = o->heap[--o->n_heap];
        heap_down(o->heap, o->n_heap, 0);
    }
}

/* Sum of exp(logit - max) over the best `limit` candidates. When they are
 * fewer than all that remain, they are taken out of the heap first; when
 * they are all of them, the heap is summed as it stands, unsorted. */
static double mass(order *o, size_t limit, float max)
{
    if (limit < o->n_out + o->n_heap) order_take(o, limit);
    double z = 0;
    for (size_t i = 0; i < o->n_out && i < limit; i++) z += exp((double)o->out[i].logit - max);
    if (limit > o->n_out) {
        for (size_t i = 0; i < o->n_heap; i++) z += exp((double)o->heap[i].logit - max);
    }
    return z;
}

static int cmp_typical(const void *a, const void *b)
{
    /* By the score apply_typical stores in .logit, ascending; ties by the
     * stored index so the order is total. */
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return (x->logit > y->logit) - (x->logit < y->logit);
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_logit_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x) ? 1 : 0;
}

/* Locally typical sampling: keep the tokens whose surprisal is closest to
 * the entropy, until their mass reaches typical_p. Needs every candidate in
 * play taken out of the heap; leaves them sorted by logit. Returns the new
 * count. */
static size_t apply_typical(order *o, size_t limit, float typical_p, cand *scratch)
{
    order_take(o, limit);
    size_t n = o->n_out < limit ? o->n_out : limit;
    float max = o->out[0].logit;
    double z = mass(o, n, max);
    double entropy = 0;
    for (size_t i = 0; i < n; i++) {
        double p = exp((double)o->out[i].logit - max) / z;
        if (p > 0) entropy -= p * log(p);
    }
    for (size_t i = 0; i < n; i++) {
        double p = exp((double)o->out[i].logit - max) / z;
        double surprisal = p > 0 ? -log(p) : INFINITY;
        scratch[i].id = (int32_t)i; /* index into o->out */
        scratch[i].logit = (float)fabs(surprisal - entropy);
    }
    qsort(scratch, n, sizeof(cand), cmp_typical);
    /* Keep by typicality until the mass is reached (at least one). */
    double cum = 0;
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        scratch[i] = o->out[scratch[i].id];
        cum += exp((double)scratch[i].logit - max) / z;
        keep = i + 1;
        if (cum >= typical_p) break;
    }
    memcpy(o->out, scratch, keep * sizeof(cand));
    qsort(o->out, keep, sizeof(cand), cmp_logit_desc);
    o->n_out = keep;
    o->n_heap = 0; /* the rest are dropped */
    return keep;
}

static int32_t argmax(const cand *c, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (c[i].logit > c[best].logit) best = i; /* strict: ties keep the lower id */
    }
    return c[best].id;
}

/* The token i places back from the newest in DRY's window (0: newest). */
static int32_t dry_at(const sampler *s, int32_t i)
{
    int32_t w = s->p.dry_penalty_last_n;
    return s->dry_hist[((s->i_dry - 1 - i) % w + w) % w];
}

/* The restart sequences whose head is tok: [*first, *first + return). */
static size_t breakers_of(const sampler *s, int32_t tok, size_t *first)
{
    size_t lo = 0, hi = s->n_breakers;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->breakers[mid].head < tok) lo = mid + 1;
        else hi = mid;
    }
    size_t end = lo;
    while (end < s->n_breakers && s->breakers[end].head == tok) end++;
    *first = lo;
    return end - lo;
}

/* DRY ("don't repeat yourself"), as llama.cpp computes it: the longest
 * suffix of the window that also occurs earlier (not reaching back past a
 * restart sequence) is found for every earlier occurrence (the Z
 * algorithm over the reversed window); the token that followed such an
 * occurrence would extend a repeat of that length n, and when n >=
 * allowed_length it loses multiplier x base^(n - allowed_length) (the
 * exponent capped where a float would overflow). Tokens that are
 * restart sequences by themselves are never penalised. */
static void apply_dry(sampler *s)
{
    const sample_params *p = &s->p;
    int32_t n = s->n_dry < p->dry_penalty_last_n ? s->n_dry : p->dry_penalty_last_n;
    if (n <= p->dry_allowed_length) return;
    /* 1. the nearest restart sequence limits a repeat's length */
    int32_t rep_limit = n;
    for (int32_t i = 0; i < n; i++) {
        size_t first, nb = breakers_of(s, dry_at(s, i), &first);
        int32_t longest = -1;
        for (size_t b = first; b < first + nb; b++) {
            const sample_dry_breaker *br = &s->breakers[b];
            if (br->n_tail <= longest || br->n_tail > i) continue;
            bool match = true;
            for (int32_t off = 0; off < br->n_tail && match; off++) match = br->tail[off] == dry_at(s, i - off - 1);
            if (match) longest = br->n_tail;
        }
        if (longest >= 0) {
            rep_limit = i - longest;
            break;
        }
    }
    if (rep_limit < p->dry_allowed_length) return;
    /* 2. repeat lengths: count[last - k] is how many of the newest tokens
     * also end k places earlier (at most rep_limit) */
    int32_t *count = s->dry_count, last = n - 1, lt = 0, rt = 0;
    for (int32_t i = 0; i < n; i++) count[i] = 0;
    for (int32_t k = 1; k < n; k++) {
        if (k > rt) {
            int32_t m = 0;
            while (m + k < n && dry_at(s, m) == dry_at(s, m + k)) m++;
            count[last - k] = m < rep_limit ? m : rep_limit;
            if (m > 0) {
                lt = k;
                rt = k + m - 1;
            }
        } else {
            int32_t pair = k - lt, right = rt - k + 1;
            if (count[last - pair] < right) {
                count[last - k] = count[last - pair] < rep_limit ? count[last - pair] : rep_limit;
            } else {
                int32_t i = rt + 1;
                while (i < n && dry_at(s, i) == dry_at(s, i - k)) i++;
                count[last - k] = i - k < rep_limit ? i - k : rep_limit;
                lt = k;
                rt = i - 1;
            }
        }
    }
    /* 3. the token after each repeat would extend it */
    size_t n_touched = 0;
    for (int32_t i = 0; i + 1 < n; i++) {
        int32_t len = count[i];
        if (len < p->dry_allowed_length) continue;
        int32_t tok = dry_at(s, n - 2 - i);
        if (s->dry_max[tok] == 0) s->dry_touched[n_touched++] = tok;
        if (s->dry_max[tok] < len + 1) s->dry_max[tok] = len + 1; /* + 1: 0 means untouched */
    }
    /* 4. the penalties */
    int max_exp = p->dry_base > 1.000001f ? (int)(88.7228391f / logf(p->dry_base)) : 0;
    for (size_t i = 0; i < n_touched; i++) {
        int32_t tok = s->dry_touched[i];
        size_t first, nb = breakers_of(s, tok, &first);
        bool single = false;
        for (size_t b = first; b < first + nb; b++) single = single || s->breakers[b].n_tail == 0;
        if (!single) {
            int exp = s->dry_max[tok] - 1 - p->dry_allowed_length;
            if (max_exp > 0 && exp > max_exp) exp = max_exp;
            s->cand[tok].logit -= (float)((double)p->dry_multiplier * pow((double)p->dry_base, exp));
        }
        s->dry_max[tok] = 0;
    }
}

/* Top-n-sigma: every logit below max - n x the standard deviation of the
 * logits still in play is banned. Sums in float, in id order, as
 * llama.cpp's sampler does them. */
static void apply_top_n_sigma(cand *c, int32_t n, float n_sigma)
{
    float max = -INFINITY, sum = 0;
    size_t valid = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].logit == -INFINITY) continue;
        if (c[i].logit > max) max = c[i].logit;
        sum += c[i].logit;
        valid++;
    }
    if (valid <= 1) return;
    float mean = sum / (float)valid, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].logit != -INFINITY) acc = (float)((double)acc + pow((double)(c[i].logit - mean), 2));
    }
    float sd = sqrtf(acc / (float)valid), floor_logit = max - n_sigma * sd;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].logit < floor_logit) c[i].logit = -INFINITY;
    }
}

/* Probabilities (temperature 1, float, as llama.cpp's softmax) of the
 * candidates c[0..n), sorted by descending logit, into pr. */
static void softmax_sorted(const cand *c, size_t n, float *pr)
{
    float max = c[0].logit, z = 0;
    for (size_t i = 0; i < n; i++) {
        pr[i] = expf(c[i].logit - max);
        z += pr[i];
    }
    for (size_t i = 0; i < n; i++) pr[i] /= z;
}

/* Mirostat (llama.cpp's chain for it: bias, temperature, then this):
 * version 2 keeps the tokens whose surprise -log2 p is at most mu;
 * version 1 estimates the Zipf exponent s from the best 100 and keeps the
 * k that its surprise target gives. A draw among them, then mu moves by
 * eta x (the drawn token's surprise - tau). */
static int32_t mirostat(sampler *s)
{
    const sample_params *p = &s->p;
    int32_t n = s->n_vocab;
    size_t n_heap = 0;
    for (int32_t i = 0; i < n; i++) {
        if (s->cand[i].logit > -INFINITY) s->cand[n_heap++] = s->cand[i];
    }
    if (n_heap == 0) return argmax(s->cand, n);
    if (p->temperature <= 0.0f) n_heap = 0; /* the temperature keeps the best only */
    for (size_t i = 0; i < n_heap; i++) s->cand[i].logit /= p->temperature;
    size_t keep = 1;
    order o = {.heap = s->cand, .n_heap = n_heap, .out = s->sorted, .n_out = 0};
    if (n_heap == 0) { /* greedy: the argmax, with probability 1 */
        int32_t best = argmax(s->cand, n);
        s->mu -= p->mirostat_eta * (0.0f - p->mirostat_tau);
        return best;
    }
    for (size_t i = n_heap / 2; i-- > 0;) heap_down(s->cand, n_heap, i);
    order_take(&o, 1);
    float max = o.out[0].logit;
    double z = mass(&o, n_heap, max);
    if (p->mirostat == 2) {
        /* p >= 2^-mu  <=>  logit >= max + log(z) - mu ln 2 */
        double floor_logit = (double)max + log(z) - (double)s->mu * log(2.0);
        while (keep < n_heap) {
            order_take(&o, keep + 1);
            if (o.n_out <= keep || (double)o.out[keep].logit < floor_logit) break;
            keep++;
        }
    } else {
        size_t m = n_heap < 100 ? n_heap : 100;
        order_take(&o, m);
        double sum_tb = 0, sum_tt = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            double t = log((double)(i + 2) / (double)(i + 1));
            sum_tb += t * ((double)o.out[i].logit - (double)o.out[i + 1].logit);
            sum_tt += t * t;
        }
        double s_hat = sum_tt > 0 ? sum_tb / sum_tt : 1.0, eps = s_hat - 1;
        double k = pow(eps * pow(2.0, (double)s->mu) / (1 - pow((double)n, -eps)), 1 / s_hat);
        /* k over the candidates (or past what a double holds): all of them */
        keep = !(k >= 1) ? 1 : k < (double)n_heap ? (size_t)k : n_heap;
        order_take(&o, keep);
        if (keep > o.n_out) keep = o.n_out;
    }
    double zk = 0;
    for (size_t i = 0; i < keep; i++) zk += exp((double)o.out[i].logit - max);
    double u = strata_rng_uniform(&s->rng) * zk, cum = 0;
    size_t pick = keep - 1;
    for (size_t i = 0; i < keep; i++) {
        cum += exp((double)o.out[i].logit - max);
        if (u < cum) {
            pick = i;
            break;
        }
    }
    double surprise = -log2(exp((double)o.out[pick].logit - max) / zk);
    s->mu -= p->mirostat_eta * (float)(surprise - (double)p->mirostat_tau);
    return o.out[pick].id;
}

int32_t sampler_sample(sampler *s, const float *logits)
{
    const sample_params *p = &s->p;
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->cand[i] = (cand){i, logits[i]};
    for (size_t i = 0; i < p->n_bias; i++) s->cand[p->bias[i].token].logit += p->bias[i].bias;
    if (p->mirostat == 1 || p->mirostat == 2) return mirostat(s);
    apply_penalties(s);
    if (s->dry) apply_dry(s);
    bool xtc = p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f;
    bool dyn = p->dynatemp_range > 0.0f;
    if (p->temperature <= 0.0f && !xtc && !dyn) return argmax(s->cand, n);
    if (p->top_n_sigma > 0.0f) apply_top_n_sigma(s->cand, n, p->top_n_sigma);

    /* Heap over every candidate that is not banned (-inf). */
    size_t n_heap = 0;
    for (int32_t i = 0; i < n; i++) {
        if (s->cand[i].logit > -INFINITY) s->cand[n_heap++] = s->cand[i];
    }
    if (n_heap == 0) return argmax(s->cand, n); /* everything banned: still answer */
    for (size_t i = n_heap / 2; i-- > 0;) heap_down(s->cand, n_heap, i);
    order o = {.heap = s->cand, .n_heap = n_heap, .out = s->sorted, .n_out = 0};

    size_t limit = n_heap;
    if (p->top_k > 0 && (size_t)p->top_k < limit) limit = (size_t)p->top_k;
    order_take(&o, 1);
    float max = o.out[0].logit;

    if (p->typical_p < 1.0f && limit > 1) {
        /* scratch: the heap's storage is free once everything is taken */
        order_take(&o, limit);
        limit = apply_typical(&o, limit, p->typical_p, s->cand);
    }
    if (p->top_p < 1.0f && limit > 1) {
        double z = mass(&o, limit, max), cum = 0;
        size_t keep = 0;
        while (keep < limit) {
            order_take(&o, keep + 1);
            if (o.n_out <= keep) break;
            cum += exp((double)o.out[keep].logit - max) / z;
            keep++;
            if (cum >= p->top_p) break;
        }
        limit = keep;
    }
    if (p->min_p > 0.0f && limit > 1) {
        /* p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p) */
        double floor_logit = (double)max + log((double)p->min_p);
        size_t keep = 1;
        while (keep < limit) {
            order_take(&o, keep + 1);
            if (o.n_out <= keep || (double)o.out[keep].logit < floor_logit) break;
            keep++;
        }
        limit = keep;
    }
    order_take(&o, limit);
    if (limit > o.n_out) limit = o.n_out;

    /* XTC: by chance, every candidate of at least the threshold's
     * probability but the least likely of them goes. */
    const cand *kept = o.out;
    float *pr = s->probs;
    if (xtc && limit >= 2 && (float)strata_rng_uniform(&s->rng) <= p->xtc_probability) {
        softmax_sorted(kept, limit, pr);
        size_t last = 0;
        while (last + 1 < limit && pr[last + 1] >= p->xtc_threshold) last++;
        if (pr[0] < p->xtc_threshold) last = 0;
        kept += last;
        limit -= last;
    }
    max = kept[0].logit;
    float temp = p->temperature;
    if (dyn && limit > 1) {
        /* the dynamic temperature: the entropy of what is left, over the
         * largest it could be, raised to the exponent, placed in the range */
        float lo = p->temperature - p->dynatemp_range > 0.0f ? p->temperature - p->dynatemp_range : 0.0f;
        float hi = p->temperature + p->dynatemp_range;
        float max_entropy = -logf(1.0f / (float)limit), entropy = 0;
        softmax_sorted(kept, limit, pr);
        for (size_t i = 0; i < limit; i++) {
            if (pr[i] > 0.0f) entropy -= pr[i] * logf(pr[i]);
        }
        temp = lo + (hi - lo) * powf(entropy / max_entropy, p->dynatemp_exponent);
    }
    if (temp <= 0.0f) return kept[0].id;

    /* Temperature, then one draw from this sequence's stream. */
    double z = 0;
    for (size_t i = 0; i < limit; i++) z += exp(((double)kept[i].logit - max) / temp);
    double u = strata_rng_uniform(&s->rng) * z, cum = 0;
    for (size_t i = 0; i < limit; i++) {
        cum += exp(((double)kept[i].logit - max) / temp);
        if (u < cum) return kept[i].id;
    }
    return kept[limit - 1].id; /* u landed on the rounding edge */
}
