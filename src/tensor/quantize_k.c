/* Encoding float32 rows into the two-level types: the K-quants (Q2_K..Q6_K)
 * and IQ4_XS, super-blocks of 256 split into sub-blocks of 16 or 32.
 *
 * Two families:
 *  - affine (Q2_K, Q4_K, Q5_K): sub-block j is x ~ d*sc_j*q - dmin*mn_j with
 *    unsigned codes q and unsigned integer scales sc_j and mins mn_j;
 *  - signed (Q3_K, Q6_K, IQ4_XS): x ~ d*sc_j*v(q) with signed integer sc_j
 *    and levels v from a signed range or the IQ4_NL grid.
 *
 * Both go the same way:
 *  1. each sub-block gets its best float scale (and min) from the exact
 *     searches of quant_search.c;
 *  2. the sub-block scales are themselves quantized to integers with one
 *     f16 super-scale, by the same search weighted by how much each scale
 *     matters: with the codes fixed, moving sub-block j's scale by e adds
 *     e^2 * sum_i v_i^2 to its squared error, so that sum is its weight
 *     (a min moves every value of its sub-block: weight = its length);
 *  3. codes are recomputed as the nearest levels for the stored scales;
 *  4. polish, while the error drops: refit the super-scale(s) by least
 *     squares with every integer fixed, round to f16, recompute the codes;
 *     for the affine family also try each sub-block's integer scale and
 *     min one step either way (separately quantized scale and min ignore
 *     their interaction: on Q2_K this step takes the error from 0.272 to
 *     0.264 of the RMS; on the signed family it gains < 0.01%).
 * Every decision compares the squared error of what the decoder will
 * actually reconstruct, so no step can make a block worse. */
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

#include <string.h>

#define MAX_SUB 16 /* sub-blocks per super-block, at most */

/* Step 2's search: the super-scale D for sub-block scales s (weights w) on
 * the integer ladder `lad`. Searched over 1/|D| >= half the max-abs value
 * n_top / max|s|, i.e. the largest scale keeps at least half of its range:
 * on the golden and random matrices no optimum lies below (measured), and
 * for the 8-bit scales of Q6_K this skips most of a 128-level sweep. */
static float scale_of_scales(const float *s, const float *w, int n, const tensor_ladder *lad)
{
    float amax = 0;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(s[j]));
    if (!(amax > 0))
        return 0.0f;
    int n_top = lad->n_up > lad->n_down ? lad->n_up : lad->n_down;
    return tensor_search_scale_in(s, w, n, lad, 0.5f * (float)n_top / amax, INFINITY);
}

/* ------------------------------------------------------------------ */
/* Affine family: Q2_K, Q4_K, Q5_K                                     */
/* ------------------------------------------------------------------ */

typedef struct k_affine_fmt {
    int n_sub, sub_len; /* n_sub * sub_len == 256 */
    int nmax;           /* codes 0..nmax */
    int scale_max;      /* integer scales and mins 0..scale_max */
} k_affine_fmt;

/* An encoded super-block before packing. */
typedef struct k_affine_enc {
    uint16_t dh, dminh;
    uint8_t sc[MAX_SUB], mn[MAX_SUB];
    uint8_t q[TENSOR_QK_K];
} k_affine_enc;

/* Nearest codes of one sub-block for x ~ dl * q - ml; returns the squared
 * error of that reconstruction. */
static double affine_sub_codes(const float *x, int len, int nmax, float dl, float ml, uint8_t *q)
{
    double err = 0;
    float inv = dl > 0 ? 1.0f / dl : 0.0f;
    for (int i = 0; i < len; i++) {
        q[i] = (uint8_t)tensor_round_clamp((x[i] + ml) * inv, 0, nmax);
        double r = (double)x[i] - ((double)dl * q[i] - ml);
        err += r * r;
    }
    return err;
}

/* Codes of the whole super-block for e's integers and f16 scales; returns
 * the squared error. */
static double affine_codes(const float *x, const k_affine_fmt *f, k_affine_enc *e)
{
    float d = tensor_f16_to_f32(e->dh), dmin = tensor_f16_to_f32(e->dminh);
    double err = 0;
    for (int j = 0; j < f->n_sub; j++) {
        int o = j * f->sub_len;
        err += affine_sub_codes(x + o, f->sub_len, f->nmax, d * (float)e->sc[j],
                                dmin * (float)e->mn[j], e->q + o);
    }
    return err;
}

/* Least-squares (d, dmin) for the current integers and codes:
 * x_i ~ d a_i - dmin b_i with a_i = sc_j q_i and b_i = mn_j, i.e.
 *   [Saa -Sab; -Sab Sbb] [d; dmin] = [Sax; -Sbx].
 * Returns 0 when the system is degenerate or the answer has a negative
 * scale (keep the old values then). */
static int affine_refit(const float *x, const k_affine_fmt *f, const k_affine_enc *e, float *d,
                        float *dmin)
{
    double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int j = 0; j < f->n_sub; j++) {
        for (int l = 0; l < f->sub_len; l++) {
            int i = j * f->sub_len + l;
            double a = (double)e->sc[j] * e->q[i], b = e->mn[j];
            saa += a * a;
            sab += a * b;
            sbb += b * b;
            sax += a * x[i];
            sbx += b * x[i];
        }
    }
    double det = saa * sbb - sab * sab;
    double nd, ndmin;
    if (sbb == 0) { /* no mins in use: d alone */
        if (!(saa > 0))
            return 0;
        nd = sax / saa;
        ndmin = tensor_f16_to_f32(e->dminh);
    } else if (det > 1e-12 * saa * sbb) {
        nd = (sax * sbb - sab * sbx) / det;
        ndmin = (sab * sax - saa * sbx) / det;
    } else {
        return 0;
    }
    if (!(nd >= 0) || !(ndmin >= 0))
        return 0;
    *d = (float)nd;
    *dmin = (float)ndmin;
    return 1;
}

static void k_affine_block(const float *x, const k_affine_fmt *f, k_affine_enc *e)
{
    const int len = f->sub_len;
    float s[MAX_SUB], negm[MAX_SUB], ws[MAX_SUB], wm[MAX_SUB];

    /* 1. best float scale and min per sub-block */
    for (int j = 0; j < f->n_sub; j++) {
        float m;
        tensor_search_affine(x + j * len, NULL, len, f->nmax, 1, &s[j], &m);
        negm[j] = -m;
        affine_sub_codes(x + j * len, len, f->nmax, s[j], -m, e->q + j * len);
        double sq2 = 0;
        for (int l = 0; l < len; l++)
            sq2 += (double)e->q[j * len + l] * e->q[j * len + l];
        ws[j] = (float)sq2;
        wm[j] = (float)len;
    }

    /* 2. integer scales and mins under f16 super-scales */
    const tensor_ladder lad = tensor_ladder_uniform(0, f->scale_max);
    e->dh = tensor_f32_to_f16_sat(scale_of_scales(s, ws, f->n_sub, &lad));
    e->dminh = tensor_f32_to_f16_sat(scale_of_scales(negm, wm, f->n_sub, &lad));
    float d = tensor_f16_to_f32(e->dh), dmin = tensor_f16_to_f32(e->dminh);
    for (int j = 0; j < f->n_sub; j++) {
        e->sc[j] = (uint8_t)(d > 0 ? tensor_round_clamp(s[j] / d, 0, f->scale_max) : 0);
        e->mn[j] = (uint8_t)(dmin > 0 ? tensor_round_clamp(negm[j] / dmin, 0, f->scale_max) : 0);
    }

    /* 3. codes for what is stored */
    double err = affine_codes(x, f, e);

    /* 4. polish while it helps (a few rounds at most; each must lower the
     * error, so this terminates) */
    for (int round = 0; round < 3 && err > 0; round++) {
        double start = err;
        float nd, ndmin;
        if (affine_refit(x, f, e, &nd, &ndmin)) {
            k_affine_enc t = *e;
            t.dh = tensor_f32_to_f16_sat(nd);
            t.dminh = tensor_f32_to_f16_sat(ndmin);
            double terr = affine_codes(x, f, &t);
            if (terr < err) {
                *e = t;
                err = terr;
            }
        }
        d = tensor_f16_to_f32(e->dh);
        dmin = tensor_f16_to_f32(e->dminh);
        for (int j = 0; j < f->n_sub; j++) {
            const float *xs = x + j * len;
            uint8_t qt[32];
            double cur = 0;
            for (int l = 0; l < len; l++) {
                double r = (double)xs[l] - ((double)(d * (float)e->sc[j]) * e->q[j * len + l] -
                                            (double)(dmin * (float)e->mn[j]));
                cur += r * r;
            }
            int best_sc = e->sc[j], best_mn = e->mn[j];
            for (int dsc = -1; dsc <= 1; dsc++) {
                for (int dmn = -1; dmn <= 1; dmn++) {
                    int sc = e->sc[j] + dsc, mn = e->mn[j] + dmn;
                    if ((dsc == 0 && dmn == 0) || sc < 0 || mn < 0 || sc > f->scale_max ||
                        mn > f->scale_max)
                        continue;
                    double te = affine_sub_codes(xs, len, f->nmax, d * (float)sc,
                                                 dmin * (float)mn, qt);
                    if (te < cur) {
                        cur = te;
                        best_sc = sc;
                        best_mn = mn;
                    }
                }
            }
            e->sc[j] = (uint8_t)best_sc;
            e->mn[j] = (uint8_t)best_mn;
        }
        err = affine_codes(x, f, e);
        if (!(err < start))
            break;
    }
}

static const k_affine_fmt k_fmt_q2_k = {16, 16, 3, 15};
static const k_affine_fmt k_fmt_q4_k = {8, 32, 15, 63};
static const k_affine_fmt k_fmt_q5_k = {8, 32, 31, 63};

void tensor_quant_row_q2_k(const float *src, void *dst, int64_t n)
{
    block_q2_k *b = dst;
    k_affine_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_affine_block(src, &k_fmt_q2_k, &e);
        b->d = e.dh;
        b->dmin = e.dminh;
        for (int j = 0; j < 16; j++)
            b->scales[j] = (uint8_t)(e.sc[j] | e.mn[j] << 4);
        memset(b->qs, 0, sizeof b->qs);
        for (int i = 0; i < TENSOR_QK_K; i++)
            b->qs[32 * (i / 128) + i % 32] |= (uint8_t)(e.q[i] << (2 * ((i % 128) / 32)));
    }
}

void tensor_quant_row_q4_k(const float *src, void *dst, int64_t n)
{
    block_q4_k *b = dst;
    k_affine_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_affine_block(src, &k_fmt_q4_k, &e);
        b->d = e.dh;
        b->dmin = e.dminh;
        tensor_k_scale_put(b->scales, e.sc, e.mn);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * c + l] = (uint8_t)(e.q[64 * c + l] | e.q[64 * c + 32 + l] << 4);
    }
}

void tensor_quant_row_q5_k(const float *src, void *dst, int64_t n)
{
    block_q5_k *b = dst;
    k_affine_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_affine_block(src, &k_fmt_q5_k, &e);
        b->d = e.dh;
        b->dmin = e.dminh;
        tensor_k_scale_put(b->scales, e.sc, e.mn);
        memset(b->qh, 0, sizeof b->qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * c + l] =
                    (uint8_t)((e.q[64 * c + l] & 15) | (e.q[64 * c + 32 + l] & 15) << 4);
        for (int i = 0; i < TENSOR_QK_K; i++)
            b->qh[i % 32] |= (uint8_t)((e.q[i] >> 4) << (i / 32));
    }
}

/* ------------------------------------------------------------------ */
/* Signed family: Q3_K, Q6_K, IQ4_XS                                   */
/* ------------------------------------------------------------------ */

typedef struct k_signed_fmt {
    int n_sub, sub_len;
    tensor_ladder levels;    /* the codes' levels */
    int scale_lo, scale_hi;  /* integer sub-block scales */
} k_signed_fmt;

typedef struct k_signed_enc {
    uint16_t dh;
    int8_t sc[MAX_SUB];
    uint8_t q[TENSOR_QK_K]; /* codes as tensor_ladder_nearest gives them, offset
                               by n_down for uniform ladders so they fit a byte */
} k_signed_enc;

/* Nearest codes of one sub-block for x ~ dl * v(q); squared error. */
static double signed_sub_codes(const float *x, const k_signed_fmt *f, float dl, uint8_t *q)
{
    const tensor_ladder *lad = &f->levels;
    int off = lad->table == NULL ? lad->n_down : 0;
    double err = 0;
    float inv = dl != 0 ? 1.0f / dl : 0.0f;
    for (int i = 0; i < f->sub_len; i++) {
        /* with dl == 0 every level decodes to 0: z = 0 picks the one nearest 0 */
        int c = tensor_ladder_nearest(lad, x[i] * inv);
        q[i] = (uint8_t)(c + off);
        double r = (double)x[i] - (double)dl * tensor_ladder_value(lad, c);
        err += r * r;
    }
    return err;
}

static inline float signed_level(const k_signed_fmt *f, uint8_t q)
{
    int off = f->levels.table == NULL ? f->levels.n_down : 0;
    return tensor_ladder_value(&f->levels, (int)q - off);
}

static double signed_codes(const float *x, const k_signed_fmt *f, k_signed_enc *e)
{
    float d = tensor_f16_to_f32(e->dh);
    double err = 0;
    for (int j = 0; j < f->n_sub; j++)
        err += signed_sub_codes(x + j * f->sub_len, f, d * (float)e->sc[j], e->q + j * f->sub_len);
    return err;
}

static void k_signed_block(const float *x, const k_signed_fmt *f, k_signed_enc *e)
{
    const int len = f->sub_len;
    float s[MAX_SUB], ws[MAX_SUB];

    /* 1. best float scale per sub-block, weighted by its sum of squared levels */
    for (int j = 0; j < f->n_sub; j++) {
        s[j] = tensor_search_scale(x + j * len, NULL, len, &f->levels);
        signed_sub_codes(x + j * len, f, s[j], e->q + j * len);
        double sv2 = 0;
        for (int l = 0; l < len; l++) {
            float v = signed_level(f, e->q[j * len + l]);
            sv2 += (double)v * v;
        }
        ws[j] = s[j] != 0 ? (float)sv2 : 0.0f;
    }

    /* 2. signed integer scales under one f16 super-scale */
    const tensor_ladder lad = tensor_ladder_uniform(f->scale_lo, f->scale_hi);
    e->dh = tensor_f32_to_f16_sat(scale_of_scales(s, ws, f->n_sub, &lad));
    float d = tensor_f16_to_f32(e->dh);
    for (int j = 0; j < f->n_sub; j++)
        e->sc[j] = (int8_t)(d != 0 ? tensor_round_clamp(s[j] / d, f->scale_lo, f->scale_hi) : 0);

    /* 3. codes for what is stored */
    double err = signed_codes(x, f, e);

    /* 4. polish: least-squares d for fixed integers (d = Sxa / Saa with
     * a_i = sc_j v_i), while it helps. Trying each integer scale one step
     * either way as the affine family does gains < 0.01% here (the signed
     * scales have one more bit of range), so it is left out. */
    for (int round = 0; round < 2 && err > 0; round++) {
        double saa = 0, sax = 0;
        for (int j = 0; j < f->n_sub; j++) {
            for (int l = 0; l < len; l++) {
                int i = j * len + l;
                double a = (double)e->sc[j] * signed_level(f, e->q[i]);
                saa += a * a;
                sax += a * x[i];
            }
        }
        if (!(saa > 0))
            break;
        k_signed_enc t = *e;
        t.dh = tensor_f32_to_f16_sat((float)(sax / saa));
        if (t.dh == e->dh)
            break;
        double terr = signed_codes(x, f, &t);
        if (!(terr < err))
            break;
        *e = t;
        err = terr;
    }
}

void tensor_quant_row_q3_k(const float *src, void *dst, int64_t n)
{
    const k_signed_fmt f = {16, 16, tensor_ladder_uniform(-4, 3), -32, 31};
    block_q3_k *b = dst;
    k_signed_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_signed_block(src, &f, &e);
        b->d = e.dh;
        uint8_t stored[16];
        for (int j = 0; j < 16; j++)
            stored[j] = (uint8_t)(e.sc[j] + 32);
        tensor_q3k_scale_put(b->scales, stored);
        memset(b->qs, 0, sizeof b->qs);
        memset(b->hmask, 0, sizeof b->hmask);
        for (int i = 0; i < TENSOR_QK_K; i++) { /* e.q[i] = code + 4, 0..7 */
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            b->qs[32 * h + l] |= (uint8_t)((e.q[i] & 3) << (2 * c));
            b->hmask[l] |= (uint8_t)((e.q[i] >> 2) << (4 * h + c));
        }
    }
}

void tensor_quant_row_q6_k(const float *src, void *dst, int64_t n)
{
    const k_signed_fmt f = {16, 16, tensor_ladder_uniform(-32, 31), -128, 127};
    block_q6_k *b = dst;
    k_signed_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_signed_block(src, &f, &e);
        b->d = e.dh;
        memcpy(b->scales, e.sc, sizeof b->scales);
        memset(b->ql, 0, sizeof b->ql);
        memset(b->qh, 0, sizeof b->qh);
        for (int i = 0; i < TENSOR_QK_K; i++) { /* e.q[i] = code + 32, 0..63 */
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            b->ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)((e.q[i] & 15) << (4 * (c / 2)));
            b->qh[32 * h + l] |= (uint8_t)((e.q[i] >> 4) << (2 * c));
        }
    }
}

void tensor_quant_row_iq4_xs(const float *src, void *dst, int64_t n)
{
    const k_signed_fmt f = {8, 32, tensor_ladder_iq4(), -32, 31};
    block_iq4_xs *b = dst;
    k_signed_enc e;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        k_signed_block(src, &f, &e);
        b->d = e.dh;
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int j = 0; j < 8; j++) {
            int ls = e.sc[j] + 32;
            b->scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            b->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
        }
        for (int j = 0; j < 8; j++) /* e.q holds table indices 0..15 */
            for (int l = 0; l < 16; l++)
                b->qs[16 * j + l] = (uint8_t)(e.q[32 * j + l] | e.q[32 * j + 16 + l] << 4);
    }
}
