/* Least-squares scale searches shared by the weight quantizers.
 *
 * The problem: a group of values x (a block or sub-block) is stored as one
 * scale D and a code per value, reconstructed as D * v(code), where the
 * levels v come from a ladder: uniform integers lo..hi, or the IQ4_NL grid.
 * We want D and the codes minimising E = sum_i w_i (x_i - D v_i)^2.
 *
 * For fixed codes the best D is the least-squares one, D = Sxv / Svv with
 * Sxv = sum w x v, Svv = sum w v^2, and then E = Sxx - Sxv^2 / Svv; so the
 * best codes maximise Sxv^2 / Svv. For a fixed D the best codes are the
 * levels nearest x_i / D. Write D = s / t with a sign s and t > 0: as t
 * grows from 0, the nearest level of each x_i walks away from the level
 * nearest zero, one step each time t |x_i| crosses the midpoint between two
 * levels. The optimum (D*, codes*) has codes* = nearest levels of x / D*, so
 * it is one of the states met while sweeping t over those crossings. The
 * sweep visits the crossings in increasing t (a heap holding each element's
 * next crossing), updates Sxv and Svv in O(1) per step and keeps the best
 * score: the exact global optimum, with no grid of candidate scales to tune
 * (tests/tensor/test_quant_search.c checks it against brute force).
 *
 * Two bounds cut the sweep short without losing the optimum (see sweep()
 * and low_start()): below some t the smallest elements are stuck on level
 * 0 and already cost more than a known state; above some t the elements
 * clamped on their top level cost more than the best state found. On the
 * 4-bit types this leaves about one crossing per element. (The IQ4 grid
 * has no level 0; the analogous low bound for it measured too weak to pay
 * for itself, so IQ4 sweeps start at t = 0.)
 *
 * Ties: among states with equal scores the one met last wins, so of
 * several exact encodings of a group the finest is chosen, and the sign
 * that puts the largest element on the longer negative half of asymmetric
 * ranges such as -8..7. That, with the canonical sign of quantize.c, makes
 * quantize(dequantize(quantize(x))) reproduce the same bytes.
 *
 * The affine form x ~ s q + m (Q4_1, Q5_1 and the K-quants' sub-blocks) has
 * a second unknown; tensor_search_affine takes the exact scale at offset
 * m = min(x) (a search over states that include the min-max codes, so the
 * result is never worse than the min-max rule), then Lloyd steps: a joint
 * least-squares refit of (s, m) and the nearest codes, while E drops. */
#include "tensor/quant_internal.h"

#include <assert.h>
#include <float.h>

/* --- the ladder, unrolled into arrays for the sweep --- */

#define LADDER_MAX 130 /* steps in one direction, at most (int8 scales: 128) */

/* Levels and crossings in one direction: level[k] is the k-th level away
 * from the start (level[0] the start), cross[k] the |z| at which a code
 * moves from level[k] to level[k + 1] (the midpoint between them). */
typedef struct ladder_side {
    int n;
    float level[LADDER_MAX + 1];
    float cross[LADDER_MAX];
} ladder_side;

static void ladder_unroll(const tensor_ladder *lad, int dir, ladder_side *out)
{
    out->n = dir > 0 ? lad->n_up : lad->n_down;
    assert(out->n <= LADDER_MAX);
    for (int k = 0; k <= out->n; k++)
        out->level[k] = lad->table ? (float)lad->table[lad->start + dir * k] : (float)(dir * k);
    for (int k = 0; k < out->n; k++)
        out->cross[k] = (float)dir * 0.5f * (out->level[k] + out->level[k + 1]);
}

/* --- a min-heap of element indices keyed by their next event --- */

typedef struct sweep_heap {
    int n;
    float key[TENSOR_SEARCH_MAX_N];
    uint8_t idx[TENSOR_SEARCH_MAX_N];
} sweep_heap;

static void heap_sift_down(sweep_heap *h, int pos)
{
    float k = h->key[pos];
    uint8_t i = h->idx[pos];
    for (;;) {
        int c = 2 * pos + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->key[c + 1] < h->key[c])
            c++;
        if (!(h->key[c] < k))
            break;
        h->key[pos] = h->key[c];
        h->idx[pos] = h->idx[c];
        pos = c;
    }
    h->key[pos] = k;
    h->idx[pos] = i;
}

/* Replaces the top's key with k (never smaller than it was) and restores
 * the order. The hole at the top is first walked down to a leaf along the
 * smaller children (a fixed-length walk whose branches predict well), then
 * the new key climbs back up; new keys usually belong deep in the heap, so
 * the climb is short. */
static void heap_replace_top(sweep_heap *h, float k)
{
    uint8_t i = h->idx[0];
    int pos = 0;
    for (;;) {
        int c = 2 * pos + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n) {
            float kl = h->key[c], kr = h->key[c + 1];
            c += kr < kl;
        }
        h->key[pos] = h->key[c];
        h->idx[pos] = h->idx[c];
        pos = c;
    }
    while (pos > 0) {
        int parent = (pos - 1) / 2;
        if (!(k < h->key[parent]))
            break;
        h->key[pos] = h->key[parent];
        h->idx[pos] = h->idx[parent];
        pos = parent;
    }
    h->key[pos] = k;
    h->idx[pos] = i;
}

/* Removes the top. */
static void heap_pop(sweep_heap *h)
{
    h->n--;
    if (h->n > 0) {
        uint8_t last_i = h->idx[h->n];
        float last_k = h->key[h->n];
        h->idx[0] = last_i;
        heap_replace_top(h, last_k);
    }
}

/* --- the exact scale search --- */

/* What every sweep of one search shares. */
typedef struct sweep_ctx {
    int n;
    const float *x;
    float a[TENSOR_SEARCH_MAX_N];     /* |x_i| */
    float inv_a[TENSOR_SEARCH_MAX_N]; /* 1 / |x_i| (0 where x_i == 0) */
    float wt[TENSOR_SEARCH_MAX_N];    /* weights */
    float wx[TENSOR_SEARCH_MAX_N];    /* w_i x_i */
    double sxx;                       /* sum w x^2 */
    const ladder_side *up, *down;
} sweep_ctx;

/* The best state so far, as the sums that define it (D = sxv / svv), and
 * its error sxx - sxv^2 / svv. */
typedef struct sweep_best {
    double sxv, svv, err;
    int found;
} sweep_best;

static inline void sweep_consider(const sweep_ctx *c, sweep_best *b, double sxv, double svv,
                                  int strict)
{
    if (!(svv > 0))
        return;
    /* sxv^2 / svv against b->sxv^2 / b->svv, cross-multiplied */
    double lhs = sxv * sxv * b->svv, rhs = b->sxv * b->sxv * svv;
    if (!b->found || lhs > rhs || (!strict && lhs == rhs)) {
        b->sxv = sxv;
        b->svv = svv;
        b->err = c->sxx - sxv * sxv / svv;
        b->found = 1;
    }
}

/* Crossings of `sd` that an element of magnitude a (inv_a = 1/a) has passed
 * at t, i.e. those with cross[k] * inv_a <= t, the same expression the heap
 * keys use. The estimate a * t + 1/2 is exact for uniform levels up to
 * rounding and a fair start for the IQ4 grid; the loops settle it. */
static inline int crossings_passed(const ladder_side *sd, float a, float inv_a, float t)
{
    float guess = a * t + 0.5f;
    int k = guess >= (float)sd->n ? sd->n : guess > 0 ? (int)guess : 0; /* NaN -> 0 */
    while (k < sd->n && sd->cross[k] * inv_a <= t)
        k++;
    while (k > 0 && sd->cross[k - 1] * inv_a > t)
        k--;
    return k;
}

/* The sums of the state at t with orientation s. */
static void state_at(const sweep_ctx *c, int s, float t, double *sxv, double *svv)
{
    *sxv = 0;
    *svv = 0;
    for (int i = 0; i < c->n; i++) {
        const ladder_side *sd = (c->x[i] > 0) == (s > 0) ? c->up : c->down;
        int k = c->x[i] != 0 ? crossings_passed(sd, c->a[i], c->inv_a[i], t) : 0;
        float v = sd->level[k];
        *sxv += (double)c->wx[i] * v;
        *svv += (double)c->wt[i] * v * v;
    }
}

/* One sweep with orientation s (z_i = s x_i t walks the up side for z > 0,
 * the down side for z < 0) over t >= t0. Two exact prunings keep it short:
 *  - it starts at t0, below which the caller has shown no state can win;
 *  - it stops once no later state can win. When element i sits on its top
 *    level |v_top| and t >= |v_top| / |x_i|, any optimum with t* >= t has
 *    |D*| = 1/t* <= 1/t and so leaves element i a residual of at least
 *    |x_i| - |v_top| / t. The sum of those over such elements bounds the
 *    error of every later optimum from below; once it exceeds the best
 *    error found, nothing later can be the optimum. (The optimum is always
 *    a state of the sweep at t* = 1/|D*|, see the top of the file.)
 * States scoring equal to the best replace it unless `strict`. */
static void sweep(const sweep_ctx *c, int s, float t0, float t_end, int strict, sweep_best *best)
{
    const ladder_side *side[TENSOR_SEARCH_MAX_N];
    uint8_t step[TENSOR_SEARCH_MAX_N];
    double sxv = 0, svv = 0;
    double lb_aa = 0, lb_an = 0, lb_nn = 0; /* sums w a^2, w a |v_top|, w v_top^2 */
    sweep_heap h;
    h.n = 0;

    for (int i = 0; i < c->n; i++) {
        const ladder_side *sd = (c->x[i] > 0) == (s > 0) ? c->up : c->down;
        int live = c->x[i] != 0 && c->wt[i] > 0;
        int k = live ? crossings_passed(sd, c->a[i], c->inv_a[i], t0) : 0;
        side[i] = sd;
        step[i] = (uint8_t)k;
        float v = sd->level[k];
        sxv += (double)c->wx[i] * v;
        svv += (double)c->wt[i] * v * v;
        if (!live)
            continue;
        float key = k < sd->n ? sd->cross[k] * c->inv_a[i] : fabsf(sd->level[k]) * c->inv_a[i];
        if (k == sd->n && key <= t0) { /* already past its bound point */
            float top = fabsf(sd->level[k]);
            double a = fabsf(c->x[i]);
            lb_aa += (double)c->wt[i] * a * a;
            lb_an += (double)c->wt[i] * a * top;
            lb_nn += (double)c->wt[i] * top * top;
            continue;
        }
        h.key[h.n] = key;
        h.idx[h.n] = (uint8_t)i;
        h.n++;
    }
    for (int p = h.n / 2 - 1; p >= 0; p--)
        heap_sift_down(&h, p);
    sweep_consider(c, best, sxv, svv, strict);

    while (h.n > 0) {
        float t = h.key[0];
        int i = h.idx[0];
        if (t > t_end)
            break;
        const ladder_side *sd = side[i];
        if (step[i] < sd->n) {
            /* a crossing: element i moves one level outwards */
            float v_old = sd->level[step[i]];
            float v_new = sd->level[step[i] + 1];
            step[i]++;
            sxv += (double)c->wx[i] * (double)(v_new - v_old);
            svv += (double)c->wt[i] * ((double)v_new * v_new - (double)v_old * v_old);
            /* next: its next crossing, or (at the top) its bound point,
             * which is never earlier than the last crossing */
            heap_replace_top(&h, step[i] < sd->n ? sd->cross[step[i]] * c->inv_a[i]
                                                 : fabsf(v_new) * c->inv_a[i]);
            sweep_consider(c, best, sxv, svv, strict);
        } else {
            /* element i's bound point: it joins the lower bound */
            float top = fabsf(sd->level[step[i]]);
            double a = fabsf(c->x[i]);
            lb_aa += (double)c->wt[i] * a * a;
            lb_an += (double)c->wt[i] * a * top;
            lb_nn += (double)c->wt[i] * top * top;
            heap_pop(&h);
        }
        if (lb_aa > 0) {
            /* bound * t^2 = sum w (a t - |v_top|)^2, against best error * t^2 */
            double td = t;
            double lb_t2 = lb_aa * td * td - 2 * lb_an * td + lb_nn;
            if (lb_t2 > 0 && lb_t2 > best->err * td * td)
                break;
        }
    }
}

/* For ladders whose start level is 0: the smallest t from which a state can
 * still beat error e_ref. Below t = cross[0] / a for the k-th smallest |x|,
 * the k smallest elements all sit on level 0 and cost at least the sum of
 * their w x^2; so with k the first count where that sum exceeds e_ref, no
 * optimum lies below that t. */
static float low_start(const sweep_ctx *c, double e_ref)
{
    /* the smallest elements, in order, popped from a min-heap on |x| */
    sweep_heap h;
    h.n = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->x[i] != 0 && c->wt[i] > 0) {
            h.key[h.n] = c->a[i];
            h.idx[h.n] = (uint8_t)i;
            h.n++;
        }
    }
    for (int p = h.n / 2 - 1; p >= 0; p--)
        heap_sift_down(&h, p);
    /* the smaller first crossing of the two sides bounds both */
    float cross0 = c->down->n > 0 ? fminf(c->up->cross[0], c->down->cross[0]) : c->up->cross[0];
    double sum = 0;
    while (h.n > 0) {
        int i = h.idx[0];
        sum += (double)c->wx[i] * c->x[i];
        if (sum > e_ref)
            return cross0 * c->inv_a[i];
        heap_pop(&h);
    }
    return 0.0f;
}

float tensor_search_scale(const float *x, const float *w, int n, const tensor_ladder *lad)
{
    return tensor_search_scale_in(x, w, n, lad, 0.0f, INFINITY);
}

float tensor_search_scale_in(const float *x, const float *w, int n, const tensor_ladder *lad,
                             float t_lo, float t_hi)
{
    assert(n > 0 && n <= TENSOR_SEARCH_MAX_N);
    sweep_ctx c;
    ladder_side up, down;
    float amax = 0, vmax = 0;
    c.n = n;
    c.x = x;
    c.sxx = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        c.wt[i] = w ? w[i] : 1.0f;
        c.wx[i] = c.wt[i] * x[i];
        c.a[i] = a;
        c.inv_a[i] = a > 0 ? 1.0f / a : 0.0f;
        c.sxx += (double)c.wx[i] * x[i];
        if (a > amax) {
            amax = a;
            vmax = x[i];
        }
    }
    if (!(amax > 0)) /* all zero (or NaN): nothing to scale */
        return 0.0f;
    ladder_unroll(lad, 1, &up);
    ladder_unroll(lad, -1, &down);
    c.up = &up;
    c.down = &down;

    /* s_pref sends the largest element down (to the longer negative half of
     * the signed ranges used here); unsigned ladders have only s = +1. */
    int s_pref = lad->n_down == 0 ? 1 : (vmax > 0 ? -1 : 1);
    float t0 = 0;
    if (up.level[0] == 0 && n > 1) {
        /* The max-abs state (largest element exactly on its top level) is a
         * reference error for the low-end pruning. */
        const ladder_side *mside = s_pref * vmax > 0 ? &up : &down;
        double sxv, svv;
        state_at(&c, s_pref, fabsf(mside->level[mside->n]) / amax, &sxv, &svv);
        if (svv > 0)
            t0 = low_start(&c, c.sxx - sxv * sxv / svv);
    }
    if (t0 < t_lo)
        t0 = t_lo;
    sweep_best best = {0, 0, 0, 0};
    sweep(&c, s_pref, t0, t_hi, 0, &best);
    if (lad->n_down > 0) {
        /* The other orientation. With uniform levels, while every |z| is
         * below min(n_up, n_down) + 1/2 nothing is clamped and its states
         * are the mirror images of states already scored (same error), so it
         * starts where the largest element passes that point; it must beat
         * the best strictly, which keeps the canonical orientation on ties. */
        float t1 = t0;
        if (lad->table == NULL) {
            float mirror = ((float)(up.n < down.n ? up.n : down.n) + 0.5f) / amax;
            if (mirror > t1)
                t1 = mirror;
        }
        sweep(&c, -s_pref, t1, t_hi, 1, &best);
    }
    return best.found ? (float)(best.sxv / best.svv) : 0.0f;
}

/* --- the affine fit --- */

/* Least-squares (s, m) for fixed codes q: the normal equations of
 * min sum w (x - s q - m)^2 are [Sqq Sq; Sq Sw] [s; m] = [Sqx; Sx]. With
 * min_nonpos and an optimum m > 0, the best m <= 0 is m = 0 (the error is
 * convex in (s, m)), and then s = Sqx / Sqq. Returns the error. */
static double affine_fit(const float *x, const float *w, int n, const uint8_t *q, int min_nonpos,
                         double *s_out, double *m_out)
{
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : 1.0;
        sw += wi;
        sq += wi * q[i];
        sqq += wi * q[i] * q[i];
        sx += wi * x[i];
        sqx += wi * q[i] * x[i];
    }
    double det = sqq * sw - sq * sq;
    double s = 0, m = sw > 0 ? sx / sw : 0;
    if (det > 0) {
        s = (sw * sqx - sq * sx) / det;
        m = (sqq * sx - sq * sqx) / det;
    }
    if (s < 0) {
        s = 0;
        m = sw > 0 ? sx / sw : 0;
    }
    if (min_nonpos && m > 0) {
        m = 0;
        s = sqq > 0 && sqx > 0 ? sqx / sqq : 0;
    }
    double err = 0;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : 1.0;
        double r = x[i] - s * q[i] - m;
        err += wi * r * r;
    }
    *s_out = s;
    *m_out = m;
    return err;
}

void tensor_search_affine(const float *x, const float *w, int n, int nmax, int min_nonpos,
                          float *s_out, float *m_out)
{
    assert(n > 0 && n <= TENSOR_SEARCH_MAX_N);
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo)
            lo = x[i];
        if (x[i] > hi)
            hi = x[i];
    }
    if (min_nonpos && lo > 0)
        lo = 0;
    if (!(hi > lo)) { /* all values equal to lo (or NaN): exact with s = 0 */
        *s_out = 0;
        *m_out = (hi == hi) ? lo : 0;
        return;
    }

    const tensor_ladder lad = tensor_ladder_uniform(0, nmax);
    double best_s = (hi - lo) / (double)nmax, best_m = lo, best_err = DBL_MAX;
    float y[TENSOR_SEARCH_MAX_N] = {0}; /* (all n are written; this quiets gcc) */
    uint8_t q[TENSOR_SEARCH_MAX_N];

    /* The exact scale for offset lo (this contains the min-max codes, so
     * the result is never worse than the min-max rule) ... */
    for (int i = 0; i < n; i++)
        y[i] = x[i] - lo;
    float D = tensor_search_scale(y, w, n, &lad);
    if (D > 0) {
        float inv = 1.0f / D;
        for (int i = 0; i < n; i++)
            q[i] = (uint8_t)tensor_round_clamp(y[i] * inv, 0, nmax);
        best_err = affine_fit(x, w, n, q, min_nonpos, &best_s, &best_m);
    }
    /* ... then Lloyd steps: nearest codes for (s, m), refit both, while the
     * error drops. A second exact sweep at the refitted offset gains
     * another ~0.4% RMS on Q4_1 for ~40% more time: not worth it. */
    for (int it = 0; it < 4 && best_s > 0 && best_err > 0; it++) {
        float inv_s = (float)(1.0 / best_s), mf = (float)best_m;
        for (int i = 0; i < n; i++)
            q[i] = (uint8_t)tensor_round_clamp((x[i] - mf) * inv_s, 0, nmax);
        double s, m;
        double err = affine_fit(x, w, n, q, min_nonpos, &s, &m);
        if (!(err < best_err))
            break;
        best_err = err;
        best_s = s;
        best_m = m;
    }
    *s_out = (float)best_s;
    *m_out = (float)best_m;
}

/* --- IQ4_NL levels --- */

int tensor_iq4_nearest(float v)
{
    /* midpoints between consecutive levels; the index is how many of them
     * lie at or below v (a tie goes to the upper level). Fifteen
     * comparisons without branches beat a binary search's mispredictions. */
    static const float mid[15] = {
        -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
        7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f,
    };
    int k = 0;
    for (int j = 0; j < 15; j++)
        k += v >= mid[j];
    return k;
}
