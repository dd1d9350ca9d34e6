/* The routed feed-forward of mixture-of-experts layers (see moe.h). */
#include "moe.h"

#include "gguf/types.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- binding --- */

/* Binds the 3-D tensor `name` (ne = [n_cols, n_rows, n_expert]) as
 * n_expert matrices, slot e * 3 + which. */
static int bind_experts(const gguf *g, const char *name, int64_t n_rows, int64_t n_cols,
                        int64_t n_expert, model_matrix *slots, int which, strata_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (t == NULL) return strata_err_set(err, STRATA_EFORMAT, "missing tensor %s", name);
    if (t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != n_expert || t->ne[3] != 1) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                              "], expected [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                              name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], n_cols, n_rows,
                              n_expert);
    }
    if (!tensor_matmul_supported(t->type)) {
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "tensor %s has type %s, which has no matrix kernels here", name,
                              strata_type_name(t->type));
    }
    size_t row_bytes = strata_type_row_bytes(t->type, n_cols);
    if (row_bytes == 0) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "tensor %s: rows of %" PRId64 " are not whole %s blocks", name,
                              n_cols, strata_type_name(t->type));
    }
    for (int64_t e = 0; e < n_expert; e++) {
        model_matrix *mm = &slots[e * 3 + which];
        mm->data = (const char *)t->data + (size_t)(e * n_rows) * row_bytes;
        mm->type = t->type;
        mm->n_rows = n_rows;
        mm->n_cols = n_cols;
        mm->row_bytes = row_bytes;
        mm->name = t->name;
    }
    return 0;
}

/* An optional F32 bias `name` of shape [ne0, ne1] (ne1 = 1 for a vector). */
static int bind_bias(const gguf *g, const char *name, int64_t ne0, int64_t ne1, const float **out,
                     strata_err *err)
{
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (t == NULL) return 0;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "tensor %s has shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64
                              ", %" PRId64 "]",
                              name, t->ne[0], t->ne[1], ne0, ne1);
    }
    if (t->type != STRATA_TYPE_F32) {
        return strata_err_set(err, STRATA_EUNSUPPORTED, "tensor %s has type %s, expected F32",
                              name, strata_type_name(t->type));
    }
    *out = (const float *)t->data;
    return 0;
}

int model_moe_bind(const gguf *g, const model_hparams *hp, int64_t il, model_layer *l,
                   model_matrix *slots, strata_err *err)
{
    char name[GGUF_MAX_TENSOR_NAME + 32];
    const int64_t n_e = hp->n_expert, n_ff = hp->n_ff_exp, n_embd = hp->n_embd;
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", il, suffix), name)
    const gguf_tensor *r = gguf_find_tensor(g, NAME("ffn_gate_inp.weight"));
    if (r == NULL) return strata_err_set(err, STRATA_EFORMAT, "missing tensor %s", name);
    if (r->ne[0] != n_embd || r->ne[1] != n_e || r->ne[2] != 1 || r->ne[3] != 1) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "tensor %s has shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64
                              ", %" PRId64 "]",
                              name, r->ne[0], r->ne[1], n_embd, n_e);
    }
    if (!tensor_matmul_supported(r->type) || strata_type_row_bytes(r->type, n_embd) == 0) {
        return strata_err_set(err, STRATA_EUNSUPPORTED, "tensor %s has type %s, not usable here",
                              name, strata_type_name(r->type));
    }
    l->ffn_gate_inp = (model_matrix){.data = r->data,
                                     .type = r->type,
                                     .n_rows = n_e,
                                     .n_cols = n_embd,
                                     .row_bytes = strata_type_row_bytes(r->type, n_embd),
                                     .name = r->name};
    int rc = bind_experts(g, NAME("ffn_gate_exps.weight"), n_ff, n_embd, n_e, slots, 0, err);
    if (rc == 0) rc = bind_experts(g, NAME("ffn_up_exps.weight"), n_ff, n_embd, n_e, slots, 1, err);
    if (rc == 0)
        rc = bind_experts(g, NAME("ffn_down_exps.weight"), n_embd, n_ff, n_e, slots, 2, err);
    if (rc == 0) rc = bind_bias(g, NAME("ffn_gate_inp.bias"), n_e, 1, &l->ffn_gate_inp_b, err);
    if (rc == 0) rc = bind_bias(g, NAME("ffn_gate_exps.bias"), n_ff, n_e, &l->exp_gate_b, err);
    if (rc == 0) rc = bind_bias(g, NAME("ffn_up_exps.bias"), n_ff, n_e, &l->exp_up_b, err);
    if (rc == 0) rc = bind_bias(g, NAME("ffn_down_exps.bias"), n_embd, n_e, &l->exp_down_b, err);
#undef NAME
    l->experts = slots;
    return rc;
}

/* --- scratch --- */

static void *alloc_bytes(size_t n)
{
    void *p = NULL;
    n = (n + 63) / 64 * 64;
    if (posix_memalign(&p, 64, n > 0 ? n : 64) != 0) return NULL;
    return p;
}

void model_moe_bufs_free(model_moe_bufs *b)
{
    free(b->probs);
    free(b->sel);
    free(b->wsel);
    free(b->rows);
    free(b->ranks);
    free(b->xg);
    free(b->gate);
    free(b->up);
    free(b->yg);
    free(b->ys);
    free(b->mm_scratch);
    memset(b, 0, sizeof(*b));
}

int model_moe_bufs_init(model_moe_bufs *b, const model *m, int64_t n_batch)
{
    memset(b, 0, sizeof(*b));
    const model_hparams *hp = &m->hp;
    if (hp->n_expert == 0) return 0;
    const size_t nb = (size_t)n_batch, f = sizeof(float);
    b->probs = alloc_bytes(nb * (size_t)hp->n_expert * f);
    b->sel = alloc_bytes(nb * (size_t)hp->n_expert_used * sizeof(int32_t));
    b->wsel = alloc_bytes(nb * (size_t)hp->n_expert_used * f);
    b->rows = alloc_bytes(nb * sizeof(int32_t));
    b->ranks = alloc_bytes(nb * sizeof(int32_t));
    b->xg = alloc_bytes(nb * (size_t)hp->n_embd * f);
    b->gate = alloc_bytes(nb * (size_t)hp->n_ff_exp * f);
    b->up = alloc_bytes(nb * (size_t)hp->n_ff_exp * f);
    b->yg = alloc_bytes(nb * (size_t)hp->n_embd * f);
    b->ys = alloc_bytes(nb * (size_t)hp->n_expert_used * (size_t)hp->n_embd * f);
    size_t mm = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const model_layer *l = &m->layers[il];
        if (l->experts == NULL) continue;
        size_t s = tensor_matmul_scratch_bytes(l->ffn_gate_inp.type, hp->n_embd, n_batch);
        mm = s > mm ? s : mm;
        for (int i = 0; i < 3; i++) {
            const model_matrix *w = &l->experts[i];
            s = tensor_matmul_scratch_bytes(w->type, w->n_cols, n_batch);
            mm = s > mm ? s : mm;
        }
    }
    b->mm_scratch = alloc_bytes(mm);
    if (b->probs == NULL || b->sel == NULL || b->wsel == NULL || b->rows == NULL ||
        b->ranks == NULL || b->xg == NULL || b->gate == NULL || b->up == NULL || b->yg == NULL ||
        b->ys == NULL || b->mm_scratch == NULL) {
        model_moe_bufs_free(b);
        return STRATA_ENOMEM;
    }
    return 0;
}

/* --- the routed FFN --- */

static int mm(strata_pool *pool, const model_matrix *w, const float *x, int64_t n, float *y,
              void *scratch, strata_err *err)
{
    int rc = tensor_matmul(pool, w->type, w->data, w->n_rows, w->n_cols, x, n, y, scratch);
    if (rc != 0) return strata_err_set(err, rc, "matrix product with %s failed", w->name);
    return 0;
}

/* Token t's experts: the n_used largest probabilities (the lowest index
 * first among equal ones), weights renormalised to sum 1; or for
 * moe_softmax_chosen the n_used largest logits, weights their softmax.
 * A router bias is added to the logits first. */
static void route(const model_hparams *hp, const model_layer *l, model_moe_bufs *b, int64_t t)
{
    const int64_t n_e = hp->n_expert, k_used = hp->n_expert_used;
    float *p = b->probs + t * n_e;
    if (l->ffn_gate_inp_b != NULL) tensor_add(p, p, l->ffn_gate_inp_b, n_e);
    if (!hp->moe_softmax_chosen) tensor_softmax(p, n_e);
    int32_t *sel = b->sel + t * k_used;
    float *w = b->wsel + t * k_used;
    float sum = 0.0f;
    for (int64_t k = 0; k < k_used; k++) {
        int32_t best = -1;
        for (int64_t e = 0; e < n_e; e++) {
            bool taken = false;
            for (int64_t j = 0; j < k; j++) taken |= sel[j] == (int32_t)e;
            if (!taken && (best < 0 || p[e] > p[best])) best = (int32_t)e;
        }
        sel[k] = best;
        w[k] = p[best];
        sum += p[best];
    }
    if (hp->moe_softmax_chosen) tensor_softmax(w, k_used);
    else
        for (int64_t k = 0; k < k_used; k++) w[k] /= sum;
}

/* gpt-oss's expert activation, in place in gate:
 * g = min(gate, 7), u = clamp(up, -7, 7), gate = g / (1 + e^(-1.702 g)) * (u + 1). */
static void swiglu_oai(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i] < 7.0f ? gate[i] : 7.0f;
        float u = up[i] < -7.0f ? -7.0f : up[i] > 7.0f ? 7.0f : up[i];
        gate[i] = g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
    }
}

int model_moe_ffn(strata_pool *pool, const model_hparams *hp, const model_layer *l,
                  const float *xn, int64_t n, float *out, model_moe_bufs *b, strata_err *err)
{
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff_exp, k_used = hp->n_expert_used;
    int rc = mm(pool, &l->ffn_gate_inp, xn, n, b->probs, b->mm_scratch, err);
    if (rc != 0) return rc;
    for (int64_t t = 0; t < n; t++) route(hp, l, b, t);

    for (int64_t e = 0; e < hp->n_expert; e++) {
        /* the tokens that chose e, in batch order, with their rank */
        int64_t n_e = 0;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t k = 0; k < k_used; k++) {
                if (b->sel[t * k_used + k] != (int32_t)e) continue;
                b->rows[n_e] = (int32_t)t;
                b->ranks[n_e] = (int32_t)k;
                n_e++;
            }
        }
        if (n_e == 0) continue; /* an expert no token chose is not read */
        for (int64_t i = 0; i < n_e; i++) {
            memcpy(b->xg + i * n_embd, xn + (int64_t)b->rows[i] * n_embd,
                   (size_t)n_embd * sizeof(float));
        }
        const model_matrix *w = &l->experts[e * 3];
        rc = mm(pool, &w[0], b->xg, n_e, b->gate, b->mm_scratch, err);
        if (rc == 0) rc = mm(pool, &w[1], b->xg, n_e, b->up, b->mm_scratch, err);
        if (rc != 0) return rc;
        for (int64_t i = 0; i < n_e; i++) {
            float *gi = b->gate + i * n_ff, *ui = b->up + i * n_ff;
            if (l->exp_gate_b != NULL) tensor_add(gi, gi, l->exp_gate_b + e * n_ff, n_ff);
            if (l->exp_up_b != NULL) tensor_add(ui, ui, l->exp_up_b + e * n_ff, n_ff);
            if (hp->ffn_act == MODEL_FFN_SWIGLU_OAI) swiglu_oai(gi, ui, n_ff);
            else tensor_swiglu(gi, gi, ui, n_ff);
        }
        rc = mm(pool, &w[2], b->gate, n_e, b->yg, b->mm_scratch, err);
        if (rc != 0) return rc;
        if (l->exp_down_b != NULL) {
            for (int64_t i = 0; i < n_e; i++)
                tensor_add(b->yg + i * n_embd, b->yg + i * n_embd, l->exp_down_b + e * n_embd,
                           n_embd);
        }
        for (int64_t i = 0; i < n_e; i++) {
            const int64_t t = b->rows[i], k = b->ranks[i];
            float *dst = b->ys + (t * k_used + k) * n_embd;
            memcpy(dst, b->yg + i * n_embd, (size_t)n_embd * sizeof(float));
            tensor_scale(dst, b->wsel[t * k_used + k], n_embd);
        }
    }
    /* out = sum over ranks, in rank order */
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * n_embd;
        const float *y = b->ys + t * k_used * n_embd;
        memcpy(o, y, (size_t)n_embd * sizeof(float));
        for (int64_t k = 1; k < k_used; k++) tensor_add(o, o, y + k * n_embd, n_embd);
    }
    return 0;
}
