/* The forward pass of every architecture of hparams.h over a batch of
 * tokens from many sequences (see forward.h); what differs between them is
 * data in model_hparams and which tensors are present.
 *
 * Per chunk of at most n_batch tokens, with x the residual stream:
 *   x = token_embd[token] * embd_scale                (gemma: sqrt(n_embd))
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q = h Wq^T (+ bq),  k = h Wk^T (+ bk),  v = h Wv^T (+ bv)
 *     q, k = rmsnorm per head * q_norm, k_norm       (qwen3, gemma3)
 *     q, k = rope(q, k, pos) with the layer's base   (none in smollm3's every
 *            4th layer; YaRN for mistral3);  q *= temperature(pos) (mistral3)
 *     cache[seq][pos] = (k, v) as F16 or Q8_0
 *     a = attention(q, cache of seq, positions <= pos, within the window on
 *         sliding layers; scores soft-capped (gemma2); sinks (gpt-oss))
 *     x += post_attn_norm(a Wo^T (+ bo))             (the norm: gemma)
 *     h = rmsnorm(x) * ffn_norm
 *     x += post_ffw_norm((act(h Wgate^T) * (h Wup^T)) Wdown^T)
 *          act = silu or gelu (gemma); routed experts instead (moe.h)
 *   logits = (rmsnorm(x) * output_norm) Wout^T   for the tokens asked for,
 *            then c tanh(logits / c) (gemma2)
 *   (model_forward_ex also hands out rmsnorm(x) * output_norm itself, the
 *   final hidden state, for the tokens asked for: embeddings)
 *
 * Matrix products go to tensor_matmul with all the chunk's tokens at once;
 * everything else is row-wise, split over tokens across the pool (each row
 * computed the same way whatever the split). */
#include "forward.h"

#include "base/log.h"
#include "gguf/types.h"
#include "model/attention.h"
#include "model/moe.h"
#include "tensor/fp16.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct model_ctx {
    const model *m;
    strata_pool *pool;      /* NULL for one thread */
    bool owns_pool;         /* false: borrowed (model_ctx_params.pool) */
    int n_threads;
    kv_cache *kv;
    tensor_quant_fn quant_q8; /* writes Q8_0 KV rows (the reference quantizer) */
    int64_t n_batch;
    const float *rope_freqs; /* (n_rot/2) rope's frequency factors for this context: Llama 3's,
                                LongRoPE's long or short set, or NULL */

    /* Activations of one chunk; every buffer has n_batch rows. */
    float *x;               /* (n_batch, n_embd) residual stream */
    float *xn;              /* (n_batch, n_embd) normed input of the current sub-block */
    float *q;               /* (n_batch, n_head*head_dim) */
    float *k;               /* (n_batch, n_head_kv*head_dim) */
    float *v;               /* (n_batch, n_head_kv*head_dim_v) */
    float *attn;            /* (n_batch, n_head*head_dim_v) */
    float *gate;            /* (n_batch, n_ff) */
    float *up;              /* (n_batch, n_ff) */
    float *proj;            /* (n_batch, n_embd) */
    void *mm_scratch;       /* the largest tensor_matmul_scratch_bytes of any matrix */
    float *attn_scratch;    /* (n_threads, model_attention_scratch_floats) */
    int32_t *out_rows;      /* (n_batch) chunk rows whose logits are wanted */
    model_moe_bufs moe;     /* the routed FFN's scratch (empty for dense models) */

    /* Batch checks, per sequence slot. */
    int64_t *seq_first;     /* (n_seq_max) first position in the batch, -1 unseen */
    int64_t *seq_next;      /* (n_seq_max) position the next token must have */
    /* the step buffers above (x .. mm_scratch) and their sizes, for
     * model_ctx_release_scratch */
    struct {
        void *p;
        size_t bytes;
    } step_bufs[16];
    int n_step_bufs;
};

/* --- allocation --- */

static float *alloc_floats(int64_t n)
{
    void *p = NULL;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

/* A step buffer: as alloc_floats, remembered for model_ctx_release_scratch. */
static float *alloc_step(model_ctx *ctx, int64_t n)
{
    float *p = alloc_floats(n);
    if (p != NULL && ctx->n_step_bufs < (int)(sizeof(ctx->step_bufs) / sizeof(ctx->step_bufs[0]))) {
        ctx->step_bufs[ctx->n_step_bufs].p = p;
        ctx->step_bufs[ctx->n_step_bufs].bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
        ctx->n_step_bufs++;
    }
    return p;
}

static size_t matrix_scratch(const model_matrix *w, int64_t n_tok)
{
    return w->data != NULL ? tensor_matmul_scratch_bytes(w->type, w->n_cols, n_tok) : 0;
}

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

void model_ctx_free(model_ctx *ctx)
{
    if (ctx == NULL) return;
    if (ctx->owns_pool) strata_pool_free(ctx->pool);
    kv_cache_free(ctx->kv);
    free(ctx->x);
    free(ctx->xn);
    free(ctx->q);
    free(ctx->k);
    free(ctx->v);
    free(ctx->attn);
    free(ctx->gate);
    free(ctx->up);
    free(ctx->proj);
    free(ctx->mm_scratch);
    free(ctx->attn_scratch);
    free(ctx->out_rows);
    model_moe_bufs_free(&ctx->moe);
    free(ctx->seq_first);
    free(ctx->seq_next);
    free(ctx);
}

int model_ctx_init(model_ctx **out, const model *m, const model_ctx_params *p, strata_err *err)
{
    *out = NULL;
    const model_hparams *hp = &m->hp;
    int n_threads = p->pool != NULL ? strata_pool_n_threads(p->pool)
                    : p->n_threads > 0 ? p->n_threads : 1;
    int n_seq_max = p->n_seq_max > 0 ? p->n_seq_max : 1;
    int64_t n_batch = p->n_batch > 0 ? p->n_batch : MODEL_DEFAULT_BATCH;
    if (p->n_ctx <= 0 || n_threads > STRATA_POOL_MAX_THREADS || n_batch > (1 << 20)) {
        return strata_err_set(err, STRATA_EINVAL,
                              "model context: bad parameters (context %" PRId64 ", threads %d, "
                              "batch %" PRId64 ")",
                              p->n_ctx, n_threads, n_batch);
    }
    model_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    ctx->m = m;
    ctx->n_threads = n_threads;
    ctx->n_batch = n_batch;
    ctx->quant_q8 = tensor_get_quant(STRATA_TYPE_Q8_0);
    /* LongRoPE's set by the longest a sequence may grow, as llama.cpp
     * chooses it by its context per sequence */
    const int64_t n_ctx_seq = p->n_ctx_seq > 0 ? p->n_ctx_seq : p->n_ctx / n_seq_max;
    const bool rope_long = n_ctx_seq > hp->n_ctx_orig_factors;
    ctx->rope_freqs = m->rope_freqs != NULL ? m->rope_freqs
                      : rope_long           ? m->rope_long
                                            : m->rope_short;
    if (m->rope_freqs == NULL && (m->rope_long != NULL || m->rope_short != NULL)) {
        LOG_INFO("model: LongRoPE with the %s factors (context %" PRId64 " per sequence, "
                 "original %" PRId64 ")",
                 rope_long ? "long" : "short", n_ctx_seq, hp->n_ctx_orig_factors);
    }

    kv_cache_params kp = {
        .n_layer = hp->n_layer,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .head_dim_v = hp->head_dim_v,
        .n_ctx = p->n_ctx,
        .n_seq_max = n_seq_max,
        .k_type = p->k_type,
        .v_type = p->v_type,
    };
    /* sliding-window layers keep only their window (kv_cache.h) */
    uint8_t *layer_swa = NULL;
    if (hp->n_swa > 0) {
        layer_swa = calloc((size_t)hp->n_layer, 1);
        if (layer_swa == NULL) {
            model_ctx_free(ctx);
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        }
        for (int64_t il = 0; il < hp->n_layer; il++) {
            layer_swa[il] = model_hparams_layer_swa(hp, il);
        }
        kp.n_swa = hp->n_swa;
        kp.layer_swa = layer_swa;
        kp.swa_batch = n_batch;
    }
    int rc = kv_cache_init(&ctx->kv, &kp, err);
    free(layer_swa);
    if (rc != 0) {
        model_ctx_free(ctx);
        return rc;
    }
    if (p->pool != NULL) {
        ctx->pool = p->pool;
    } else if (n_threads > 1) {
        ctx->owns_pool = true;
        ctx->pool = strata_pool_new(n_threads);
        if (ctx->pool == NULL) {
            model_ctx_free(ctx);
            return strata_err_set(err, STRATA_ENOMEM, "cannot start %d threads", n_threads);
        }
    }

    const int64_t n_q = hp->n_head * hp->head_dim;
    const int64_t n_k = hp->n_head_kv * hp->head_dim;
    const int64_t n_v = hp->n_head_kv * hp->head_dim_v;
    const int64_t n_o = hp->n_head * hp->head_dim_v;
    ctx->x = alloc_step(ctx, n_batch * hp->n_embd);
    ctx->xn = alloc_step(ctx, n_batch * hp->n_embd);
    ctx->q = alloc_step(ctx, n_batch * n_q);
    ctx->k = alloc_step(ctx, n_batch * n_k);
    ctx->v = alloc_step(ctx, n_batch * n_v);
    ctx->attn = alloc_step(ctx, n_batch * n_o);
    ctx->gate = alloc_step(ctx, n_batch * hp->n_ff);
    ctx->up = alloc_step(ctx, n_batch * hp->n_ff);
    ctx->proj = alloc_step(ctx, n_batch * hp->n_embd);
    ctx->attn_scratch =
        alloc_step(ctx, (int64_t)n_threads * (int64_t)model_attention_scratch_floats(ctx->kv, hp->n_head));
    ctx->out_rows = malloc((size_t)n_batch * sizeof(int32_t));
    ctx->seq_first = malloc((size_t)n_seq_max * sizeof(int64_t));
    ctx->seq_next = malloc((size_t)n_seq_max * sizeof(int64_t));

    size_t mm = matrix_scratch(&m->output, n_batch);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const model_layer *l = &m->layers[il];
        const model_matrix *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo,
                                    &l->ffn_gate, &l->ffn_up, &l->ffn_down};
        for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
            mm = max_sz(mm, matrix_scratch(ws[i], n_batch));
        }
    }
    ctx->mm_scratch = alloc_step(ctx, (int64_t)((mm + 3) / 4));
    if (model_moe_bufs_init(&ctx->moe, m, n_batch) != 0) {
        model_ctx_free(ctx);
        return strata_err_set(err, STRATA_ENOMEM, "model context: out of memory");
    }

    if (ctx->x == NULL || ctx->xn == NULL || ctx->q == NULL || ctx->k == NULL || ctx->v == NULL ||
        ctx->attn == NULL || ctx->gate == NULL || ctx->up == NULL || ctx->proj == NULL ||
        ctx->attn_scratch == NULL || ctx->out_rows == NULL || ctx->seq_first == NULL ||
        ctx->seq_next == NULL || ctx->mm_scratch == NULL) {
        model_ctx_free(ctx);
        return strata_err_set(err, STRATA_ENOMEM, "model context: out of memory");
    }
    *out = ctx;
    return 0;
}

void model_ctx_release_scratch(model_ctx *ctx)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < ctx->n_step_bufs; i++) {
        /* whole pages inside the buffer only: the allocator's own words
         * around it stay untouched */
        uintptr_t lo = ((uintptr_t)ctx->step_bufs[i].p + page - 1) / page * page;
        uintptr_t hi = ((uintptr_t)ctx->step_bufs[i].p + ctx->step_bufs[i].bytes) / page * page;
        if (hi <= lo) continue;
        while (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0 && errno == EINTR) {
        }
    }
    model_moe_bufs_release(&ctx->moe);
}

strata_pool *model_ctx_pool(model_ctx *ctx)
{
    return ctx->pool;
}

kv_cache *model_ctx_kv(model_ctx *ctx)
{
    return ctx->kv;
}

const model *model_ctx_model(const model_ctx *ctx)
{
    return ctx->m;
}

/* --- row-wise work --- */

enum row_op {
    ROW_EMBED,     /* x = token_embd[token] */
    ROW_NORM,      /* xn = rmsnorm(x) * w */
    ROW_QKV,       /* biases, q/k norms, rope, store k and v in the cache */
    ROW_ADD_NORM,  /* proj = rmsnorm(proj) * w_post when w_post is not NULL; x += proj;
                      then xn = rmsnorm(x) * w when w is not NULL */
    ROW_SWIGLU,    /* gate = act(gate) * up */
    ROW_OUT_NORM,  /* xn[j] = rmsnorm(x[out_rows[j]]) * w for the wanted rows */
};

typedef struct row_job {
    model_ctx *ctx;
    enum row_op op;
    int64_t n_rows;
    const float *w;           /* norm weight */
    const float *w_post;      /* ROW_ADD_NORM: post-norm weight of the sub-block, or NULL */
    const float *bias;        /* ROW_ADD_NORM: proj += bias first, or NULL */
    const model_layer *layer; /* ROW_QKV */
    int64_t il;               /* ROW_QKV: layer index */
    const int32_t *tokens;    /* (n_rows) this chunk's */
    const int32_t *seq_ids;
    const int32_t *pos;
} row_job;

/* Rope with scaled cos and sin, and optionally YaRN, in place, over x's
 * n_head heads of head_dim (the first n_rot dims of each rotated, pairs as
 * hp->rope_mode says). Pair k's extrapolated angle is theta_e = pos
 * base^(-2k/n_rot) (in float, step by step as tensor_rope computes it)
 * divided by factors[k] when given (LongRoPE), and its interpolated angle
 * theta_i = fscale theta_e. Without YaRN the angle is theta_i and cos, sin
 * are multiplied by hp->rope_attn_factor. With YaRN:
 *     r = 1 - clamp((k - lo) / max(0.001, hi - lo), 0, 1)
 *     theta = theta_i (1 - r) + theta_e r
 * where lo, hi are the correction dims: lo = floor(d(beta_fast)), hi =
 * ceil(d(beta_slow)) clamped to [0, n_rot - 1], with
 *     d(beta) = n_rot ln(n_ctx_orig / (2 pi beta)) / (2 ln base)
 * (the dims whose wavelength fits beta times into the original context);
 * then cos and sin are multiplied by hp->yarn_mscale (which includes the
 * attention factor). */
static void rope_ext(float *x, int64_t n_head, int64_t head_dim, const model_hparams *hp,
                     int64_t pos, float base, float fscale, const float *factors)
{
    const int64_t n_rot = hp->n_rot;
    const float two_pi = 6.28318530717958647692f;
    const float ln_base = logf(base);
    float lo = 0.0f, hi = 0.0f;
    if (hp->rope_yarn) {
        lo = floorf((float)n_rot * logf((float)hp->n_ctx_orig / (hp->yarn_beta_fast * two_pi)) /
                    (2.0f * ln_base));
        hi = ceilf((float)n_rot * logf((float)hp->n_ctx_orig / (hp->yarn_beta_slow * two_pi)) /
                   (2.0f * ln_base));
        lo = lo > 0.0f ? lo : 0.0f;
        hi = hi < (float)(n_rot - 1) ? hi : (float)(n_rot - 1);
    }
    const float step = powf(base, -2.0f / (float)n_rot);
    const float fs = hp->rope_yarn ? hp->rope_freq_scale : fscale;
    const float mscale = hp->rope_yarn ? hp->yarn_mscale : hp->rope_attn_factor;
    const int64_t half = n_rot / 2;
    float theta_p = (float)pos;
    for (int64_t k = 0; k < half; k++, theta_p *= step) {
        const float theta_e = factors != NULL ? theta_p / factors[k] : theta_p;
        const float theta_i = fs * theta_e;
        float theta = theta_i;
        if (hp->rope_yarn) {
            float y = ((float)k - lo) / fmaxf(0.001f, hi - lo);
            float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            theta = theta_i * (1.0f - ramp) + theta_e * ramp;
        }
        float c = cosf(theta) * mscale, sn = sinf(theta) * mscale;
        const int64_t i0 = hp->rope_mode == TENSOR_ROPE_NEOX ? k : 2 * k;
        const int64_t i1 = hp->rope_mode == TENSOR_ROPE_NEOX ? k + half : 2 * k + 1;
        for (int64_t h = 0; h < n_head; h++) {
            float *xh = x + h * head_dim;
            float a = xh[i0], b = xh[i1];
            xh[i0] = a * c - b * sn;
            xh[i1] = a * sn + b * c;
        }
    }
}

static void row_qkv(const row_job *j, int64_t t)
{
    model_ctx *ctx = j->ctx;
    const model *m = ctx->m;
    const model_hparams *hp = &m->hp;
    const model_layer *l = j->layer;
    const int64_t hd = hp->head_dim, hdv = hp->head_dim_v;
    const int64_t n_q = hp->n_head * hd, n_k = hp->n_head_kv * hd, n_v = hp->n_head_kv * hdv;
    float *q = ctx->q + t * n_q; /* (n_head, head_dim) */
    float *k = ctx->k + t * n_k; /* (n_head_kv, head_dim) */
    float *v = ctx->v + t * n_v; /* (n_head_kv, head_dim_v) */
    if (l->bq != NULL) tensor_add(q, q, l->bq, n_q);
    if (l->bk != NULL) tensor_add(k, k, l->bk, n_k);
    if (l->bv != NULL) tensor_add(v, v, l->bv, n_v);
    if (l->q_norm != NULL) {
        for (int64_t h = 0; h < hp->n_head; h++) {
            tensor_rmsnorm(q + h * hd, q + h * hd, l->q_norm, hd, hp->rms_eps);
        }
    }
    if (l->k_norm != NULL) {
        for (int64_t h = 0; h < hp->n_head_kv; h++) {
            tensor_rmsnorm(k + h * hd, k + h * hd, l->k_norm, hd, hp->rms_eps);
        }
    }
    const int64_t pos = j->pos[t];
    if (model_hparams_layer_rope(hp, j->il)) {
        const bool swa = model_hparams_layer_swa(hp, j->il);
        const float base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
        const float fscale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
        if (hp->rope_yarn || hp->rope_attn_factor != 1.0f) {
            rope_ext(q, hp->n_head, hd, hp, pos, base, fscale, ctx->rope_freqs);
            rope_ext(k, hp->n_head_kv, hd, hp, pos, base, fscale, ctx->rope_freqs);
        } else {
            tensor_rope(q, (int)hp->n_head, (int)hd, (int)hp->n_rot, pos, base, fscale,
                        ctx->rope_freqs, hp->rope_mode);
            tensor_rope(k, (int)hp->n_head_kv, (int)hd, (int)hp->n_rot, pos, base, fscale,
                        ctx->rope_freqs, hp->rope_mode);
        }
    }
    if (hp->attn_temp_scale != 0.0f) {
        /* Llama 4's query temperature, growing with the log of the
         * position's multiple of the original context */
        double f = floor((double)pos / (double)hp->attn_temp_floor) + 1.0;
        tensor_scale(q, (float)(log(f) * (double)hp->attn_temp_scale + 1.0), n_q);
    }
    /* Into the cache as F16 (round to nearest even) or Q8_0 (per 32-block
     * max-abs scale, codes rounded to nearest: tensor_quant_row_q8_0) */
    const int32_t seq = j->seq_ids[t];
    const kv_cache *kv = ctx->kv;
    for (int64_t h = 0; h < hp->n_head_kv; h++) {
        uint8_t *kr = kv_k_row(kv, seq, j->il, pos, h);
        uint8_t *vr = kv_v_row(kv, seq, j->il, pos, h);
        if (kv->k_type == STRATA_TYPE_Q8_0) {
            ctx->quant_q8(k + h * hd, kr, hd);
        } else {
            uint16_t *kh = (uint16_t *)(void *)kr;
            for (int64_t d = 0; d < hd; d++) kh[d] = tensor_f32_to_f16(k[h * hd + d]);
        }
        if (kv->v_type == STRATA_TYPE_Q8_0) {
            ctx->quant_q8(v + h * hdv, vr, hdv);
        } else {
            uint16_t *vh = (uint16_t *)(void *)vr;
            for (int64_t d = 0; d < hdv; d++) vh[d] = tensor_f32_to_f16(v[h * hdv + d]);
        }
    }
}

static void row_one(const row_job *j, int64_t t)
{
    model_ctx *ctx = j->ctx;
    const model *m = ctx->m;
    const int64_t n_embd = m->hp.n_embd;
    switch (j->op) {
    case ROW_EMBED: {
        const uint8_t *row = (const uint8_t *)m->tok_embd.data +
                             (size_t)j->tokens[t] * m->tok_embd.row_bytes;
        /* A tied output matrix that was repacked: the loader gave the
         * file's pages of the table back, so the row comes from the packed
         * copy (the same bytes) rather than faulting them in again. */
        _Alignas(64) uint8_t buf[16384];
        if (m->tied_output && (m->output.type & TENSOR_PACKED) != 0 &&
            m->tok_embd.row_bytes <= sizeof(buf) &&
            tensor_pack_row(m->tok_embd.type, m->output.data, m->output.n_rows,
                            m->output.n_cols, j->tokens[t], buf))
            row = buf;
        tensor_get_dequant(m->tok_embd.type)(row, ctx->x + t * n_embd, n_embd);
        if (m->hp.embd_scale != 1.0f) tensor_scale(ctx->x + t * n_embd, m->hp.embd_scale, n_embd);
        break;
    }
    case ROW_NORM:
        tensor_rmsnorm(ctx->xn + t * n_embd, ctx->x + t * n_embd, j->w, n_embd, m->hp.rms_eps);
        break;
    case ROW_QKV:
        row_qkv(j, t);
        break;
    case ROW_ADD_NORM:
        if (j->bias != NULL) tensor_add(ctx->proj + t * n_embd, ctx->proj + t * n_embd, j->bias, n_embd);
        if (j->w_post != NULL) {
            tensor_rmsnorm(ctx->proj + t * n_embd, ctx->proj + t * n_embd, j->w_post, n_embd,
                           m->hp.rms_eps);
        }
        tensor_add(ctx->x + t * n_embd, ctx->x + t * n_embd, ctx->proj + t * n_embd, n_embd);
        if (j->w != NULL) {
            tensor_rmsnorm(ctx->xn + t * n_embd, ctx->x + t * n_embd, j->w, n_embd,
                           m->hp.rms_eps);
        }
        break;
    case ROW_SWIGLU: {
        const int64_t n_ff = m->hp.n_ff;
        float *gate = ctx->gate + t * n_ff;
        if (m->hp.ffn_act == MODEL_FFN_GELU) {
            /* GeGLU: gelu(gate) rounded, then times up */
            tensor_gelu(gate, gate, n_ff);
            tensor_mul(gate, gate, ctx->up + t * n_ff, n_ff);
        } else {
            tensor_swiglu(gate, gate, ctx->up + t * n_ff, n_ff);
        }
        break;
    }
    case ROW_OUT_NORM:
        tensor_rmsnorm(ctx->xn + t * n_embd, ctx->x + (int64_t)ctx->out_rows[t] * n_embd, j->w,
                       n_embd, m->hp.rms_eps);
        break;
    }
}

static void row_run(void *p, int i_thread, int n_threads)
{
    const row_job *j = p;
    int64_t begin, end;
    strata_split_range(j->n_rows, i_thread, n_threads, &begin, &end);
    for (int64_t t = begin; t < end; t++) row_one(j, t);
}

static void rows(const row_job *j)
{
    if (j->n_rows <= 1 || j->ctx->pool == NULL) row_run((void *)j, 0, 1);
    else strata_pool_run(j->ctx->pool, row_run, (void *)j);
}

/* --- the pass --- */

static int matmul(model_ctx *ctx, const model_matrix *w, const float *x, int64_t n_tok, float *y,
                  strata_err *err)
{
    int rc = tensor_matmul(ctx->pool, w->type, w->data, w->n_rows, w->n_cols, x, n_tok, y,
                           ctx->mm_scratch);
    if (rc != 0) return strata_err_set(err, rc, "matrix product with %s failed", w->name);
    return 0;
}

/* One chunk of n tokens; writes the logits of the wanted ones at
 * logits_out (rows in order) and returns how many through *n_out. */
static int forward_chunk(model_ctx *ctx, const int32_t *tokens, const int32_t *seq_ids,
                         const int32_t *pos, const int8_t *want, int64_t n, float *logits_out,
                         int64_t *n_out, const int8_t *want_embd, float *embd_out,
                         int64_t *n_embd_out, strata_err *err)
{
    const model *m = ctx->m;
    const model_hparams *hp = &m->hp;
    row_job j = {.ctx = ctx, .n_rows = n, .tokens = tokens, .seq_ids = seq_ids, .pos = pos};
    int rc = 0;

    j.op = ROW_EMBED;
    rows(&j);
    j.op = ROW_NORM;
    j.w = m->layers[0].attn_norm;
    rows(&j);

    for (int64_t il = 0; il < hp->n_layer && rc == 0; il++) {
        const model_layer *l = &m->layers[il];
        /* attention */
        rc = matmul(ctx, &l->wq, ctx->xn, n, ctx->q, err);
        if (rc == 0) rc = matmul(ctx, &l->wk, ctx->xn, n, ctx->k, err);
        if (rc == 0) rc = matmul(ctx, &l->wv, ctx->xn, n, ctx->v, err);
        if (rc != 0) break;
        j.op = ROW_QKV;
        j.layer = l;
        j.il = il;
        rows(&j);
        model_attn_args a = {
            .kv = ctx->kv,
            .layer = il,
            .n_tokens = n,
            .seq_ids = seq_ids,
            .pos = pos,
            .q = ctx->q,
            .out = ctx->attn,
            .n_head = hp->n_head,
            .scale = hp->attn_scale,
            .window = model_hparams_layer_swa(hp, il) ? hp->n_swa : 0,
            .softcap = hp->attn_softcap,
            .sinks = l->sinks,
            .scratch = ctx->attn_scratch,
        };
        model_attention(ctx->pool, &a);
        rc = matmul(ctx, &l->wo, ctx->attn, n, ctx->proj, err);
        if (rc != 0) break;
        j.op = ROW_ADD_NORM;
        j.w = l->ffn_norm;
        j.w_post = l->post_attn_norm;
        j.bias = l->bo;
        rows(&j);
        j.bias = NULL;

        if (l->experts != NULL) {
            /* routed: each token through its chosen experts (moe.h) */
            rc = model_moe_ffn(ctx->pool, hp, l, ctx->xn, n, ctx->proj, &ctx->moe, err);
            if (rc != 0) break;
        } else {
            /* feed-forward: out = W2 · (act(W1·h) ⊙ W3·h) */
            rc = matmul(ctx, &l->ffn_gate, ctx->xn, n, ctx->gate, err);
            if (rc == 0) rc = matmul(ctx, &l->ffn_up, ctx->xn, n, ctx->up, err);
            if (rc != 0) break;
            j.op = ROW_SWIGLU;
            rows(&j);
            rc = matmul(ctx, &l->ffn_down, ctx->gate, n, ctx->proj, err);
            if (rc != 0) break;
        }
        j.op = ROW_ADD_NORM;
        j.w = il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : NULL;
        j.w_post = l->post_ffw_norm;
        rows(&j);
        j.w_post = NULL;
    }
    if (rc != 0) return rc;

    /* final hidden states (after output_norm) for the rows asked for */
    *n_embd_out = 0;
    if (want_embd != NULL) {
        int64_t n_e = 0;
        for (int64_t t = 0; t < n; t++) {
            if (want_embd[t]) ctx->out_rows[n_e++] = (int32_t)t;
        }
        if (n_e > 0) {
            j.op = ROW_OUT_NORM;
            j.w = m->output_norm;
            j.n_rows = n_e;
            rows(&j);
            memcpy(embd_out, ctx->xn, (size_t)(n_e * hp->n_embd) * sizeof(float));
            j.n_rows = n;
        }
        *n_embd_out = n_e;
    }

    /* logits for the wanted rows only */
    int64_t n_want = 0;
    for (int64_t t = 0; t < n; t++) {
        if (want == NULL || want[t]) ctx->out_rows[n_want++] = (int32_t)t;
    }
    *n_out = n_want;
    if (n_want == 0) return 0;
    j.op = ROW_OUT_NORM;
    j.w = m->output_norm;
    j.n_rows = n_want;
    rows(&j);
    rc = matmul(ctx, &m->output, ctx->xn, n_want, logits_out, err);
    if (rc == 0 && hp->final_softcap > 0.0f) {
        /* gemma2: logits -> c tanh(logits / c) */
        tensor_softcap(logits_out, hp->final_softcap, n_want * hp->n_vocab);
    }
    return rc;
}

/* Checks the whole batch and reserves its positions in the cache (see
 * forward.h for the rules). Nothing changes unless every check passes. */
static int prepare_batch(model_ctx *ctx, const model_batch *b, strata_err *err)
{
    kv_cache *kv = ctx->kv;
    const int64_t n_vocab = ctx->m->hp.n_vocab;
    for (int s = 0; s < kv->n_seq_max; s++) ctx->seq_first[s] = ctx->seq_next[s] = -1;
    if (b->tokens == NULL || b->seq_ids == NULL || b->pos == NULL) {
        return strata_err_set(err, STRATA_EINVAL, "batch: tokens, seq_ids and pos are required");
    }
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int32_t tok = b->tokens[i], s = b->seq_ids[i], p = b->pos[i];
        if (tok < 0 || tok >= n_vocab) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "batch token %" PRId64 ": id %" PRId32
                                  " is outside the vocabulary [0, %" PRId64 ")",
                                  i, tok, n_vocab);
        }
        if (!kv_seq_active(kv, s)) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "batch token %" PRId64 ": sequence %" PRId32 " is not active",
                                  i, s);
        }
        if (ctx->seq_next[s] < 0) {
            int64_t len = kv_seq_len(kv, s);
            if (p < 0 || p > len) {
                return strata_err_set(err, STRATA_EINVAL,
                                      "batch token %" PRId64 ": sequence %" PRId32
                                      " holds %" PRId64 " positions, so it cannot continue at %" PRId32,
                                      i, s, len, p);
            }
            /* the write guard: never into a shared or published block */
            int rc = kv_seq_check_writable(kv, s, p, err);
            if (rc != 0) return rc;
            if (p < len && !kv_seq_can_truncate(kv, s, p)) {
                return strata_err_set(err, STRATA_EINVAL,
                                      "batch token %" PRId64 ": sequence %" PRId32
                                      " cannot go back to position %" PRId32
                                      ": its sliding-window layers no longer hold the "
                                      "positions before it (start it again)",
                                      i, s, p);
            }
            ctx->seq_first[s] = p;
        } else if (p != ctx->seq_next[s]) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "batch token %" PRId64 ": sequence %" PRId32
                                  " is at position %" PRId32 " where %" PRId64 " comes next",
                                  i, s, p, ctx->seq_next[s]);
        }
        ctx->seq_next[s] = (int64_t)p + 1;
    }
    /* Truncating to p0 returns blocks that extending then takes, so the
     * pool must cover the net growth. */
    int64_t need = 0;
    const int64_t max_pos = (int64_t)kv->max_blocks_per_seq * kv->block_tokens;
    for (int s = 0; s < kv->n_seq_max; s++) {
        if (ctx->seq_next[s] < 0) continue;
        if (ctx->seq_next[s] > max_pos) {
            return strata_err_set(err, STRATA_ERANGE,
                                  "sequence %d: position %" PRId64
                                  " is past the KV cache's %" PRId64 " positions",
                                  s, ctx->seq_next[s] - 1, max_pos);
        }
        int64_t want = (ctx->seq_next[s] + kv->block_tokens - 1) / kv->block_tokens;
        need += want - kv->seqs[s].n_blocks;
    }
    if (need > kv_free_blocks(kv)) {
        return strata_err_set(err, STRATA_ERANGE,
                              "KV cache full: the batch needs %" PRId64 " more blocks of %d "
                              "positions, %" PRId32 " are free",
                              need, kv->block_tokens, kv_free_blocks(kv));
    }
    for (int s = 0; s < kv->n_seq_max; s++) {
        if (ctx->seq_first[s] >= 0) kv_seq_truncate(kv, s, ctx->seq_first[s]);
    }
    for (int s = 0; s < kv->n_seq_max; s++) {
        if (ctx->seq_next[s] < 0) continue;
        /* the window pool advances per chunk (model_forward_ex) */
        int rc = kv_seq_extend_main(kv, s, ctx->seq_next[s], err);
        if (rc != 0) return rc; /* cannot happen after the check above */
    }
    return 0;
}

int model_forward(model_ctx *ctx, const model_batch *b, float *logits_out, strata_err *err)
{
    return model_forward_ex(ctx, b, logits_out, NULL, NULL, err);
}

int model_forward_ex(model_ctx *ctx, const model_batch *b, float *logits_out,
                     const int8_t *want_embd, float *embd_out, strata_err *err)
{
    if (b->n_tokens < 0) return strata_err_set(err, STRATA_EINVAL, "batch: negative size");
    if (b->n_tokens == 0) return 0;
    if (logits_out == NULL) {
        bool any = b->want_logits == NULL;
        for (int64_t t = 0; !any && t < b->n_tokens; t++) any = b->want_logits[t] != 0;
        if (any) {
            return strata_err_set(err, STRATA_EINVAL, "batch asks for logits but logits_out is NULL");
        }
    }
    if (want_embd != NULL && embd_out == NULL) {
        for (int64_t t = 0; t < b->n_tokens; t++) {
            if (want_embd[t]) {
                return strata_err_set(err, STRATA_EINVAL,
                                      "batch asks for hidden states but embd_out is NULL");
            }
        }
    }
    int rc = prepare_batch(ctx, b, err);
    if (rc != 0) return rc;
    const int64_t n_vocab = ctx->m->hp.n_vocab;
    const int64_t n_embd = ctx->m->hp.n_embd;
    int64_t n_out_total = 0, n_embd_total = 0;
    for (int64_t off = 0; off < b->n_tokens; off += ctx->n_batch) {
        int64_t n = b->n_tokens - off < ctx->n_batch ? b->n_tokens - off : ctx->n_batch;
        int64_t n_out = 0;
        float *dst = logits_out != NULL ? logits_out + n_out_total * n_vocab : NULL;
        const int8_t *want = b->want_logits != NULL ? b->want_logits + off : NULL;
        const int8_t *want_e = want_embd != NULL ? want_embd + off : NULL;
        float *dst_e = embd_out != NULL ? embd_out + n_embd_total * n_embd : NULL;
        int64_t n_e = 0;
        if (ctx->kv->layer_swa != NULL) {
            /* each sequence's positions in the chunk, [seq_first, seq_next)
             * (prepare_batch is done with the two arrays) */
            const int n_seq = ctx->kv->n_seq_max;
            for (int s = 0; s < n_seq; s++) ctx->seq_first[s] = ctx->seq_next[s] = -1;
            for (int64_t t = off; t < off + n; t++) {
                int32_t s = b->seq_ids[t];
                if (ctx->seq_first[s] < 0) ctx->seq_first[s] = b->pos[t];
                ctx->seq_next[s] = (int64_t)b->pos[t] + 1;
            }
            for (int s = 0; s < n_seq && rc == 0; s++) {
                if (ctx->seq_first[s] < 0) continue;
                rc = kv_seq_window_advance(ctx->kv, s, ctx->seq_first[s], ctx->seq_next[s], err);
            }
            if (rc != 0) return rc;
        }
        rc = forward_chunk(ctx, b->tokens + off, b->seq_ids + off, b->pos + off, want, n, dst,
                           &n_out, want_e, dst_e, &n_e, err);
        if (rc != 0) return rc;
        n_out_total += n_out;
        n_embd_total += n_e;
    }
    return 0;
}
