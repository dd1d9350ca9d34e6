/* The routed feed-forward of mixture-of-experts layers (see moe.h). */
#include "moe.h"

#include "gguf/types.h"
#include "tensor/matmul.h"
#include "tensor/matmul_tasks.h"
#include "tensor/ops.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* --- after repacking --- */

int model_moe_unify(const gguf *g, const model_hparams *hp, int64_t il, model_layer *l,
                    strata_err *err)
{
    static const char *const names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                         "ffn_down_exps.weight"};
    char name[GGUF_MAX_TENSOR_NAME + 32];
    model_matrix *slots = (model_matrix *)(uintptr_t)l->experts;
    for (int which = 0; which < 3; which++) {
        bool mixed = false;
        for (int64_t e = 1; e < hp->n_expert; e++)
            mixed |= slots[e * 3 + which].type != slots[which].type;
        if (!mixed) continue;
        /* some expert's data did not fit the x8 layout: all of this tensor
         * go back to the file's (its pages fault in again) */
        snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", il, names[which]);
        const bool down = which == 2;
        int rc = bind_experts(g, name, down ? hp->n_embd : hp->n_ff_exp,
                              down ? hp->n_ff_exp : hp->n_embd, hp->n_expert, slots, which, err);
        if (rc != 0) return rc;
    }
    return 0;
}

void model_moe_inactive(const model *m, uint64_t *bytes, uint64_t *params)
{
    static const char *const names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                         "ffn_down_exps.weight"};
    const model_hparams *hp = &m->hp;
    *bytes = *params = 0;
    if (hp->n_expert == 0) return;
    const uint64_t n_e = (uint64_t)hp->n_expert, n_idle = n_e - (uint64_t)hp->n_expert_used;
    char name[GGUF_MAX_TENSOR_NAME + 32];
    for (int64_t il = 0; il < hp->n_layer; il++) {
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", il, names[i]);
            const gguf_tensor *t = gguf_find_tensor(m->g, name);
            if (t == NULL) continue;
            const uint64_t n_el = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
            *bytes += (uint64_t)t->n_bytes / n_e * n_idle;
            *params += n_el / n_e * n_idle;
        }
    }
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
    free(b->exp_off);
    free(b->slot_exp);
    free(b->slot_of);
    free(b->xg_gate);
    free(b->xg_up);
    free(b->xd);
    free(b->gate);
    free(b->up);
    free(b->yg);
    free(b->tasks);
    free(b->mm_scratch);
    memset(b, 0, sizeof(*b));
}

/* Bytes of one activation row for w (the stride tensor_matmul_tasks reads
 * a task's rows at). */
static size_t act_bytes(const model_matrix *w)
{
    return tensor_matmul_act_row_bytes(w->type, w->n_cols);
}

int model_moe_bufs_init(model_moe_bufs *b, const model *m, int64_t n_batch)
{
    memset(b, 0, sizeof(*b));
    const model_hparams *hp = &m->hp;
    if (hp->n_expert == 0) return 0;
    const size_t nb = (size_t)n_batch, f = sizeof(float);
    const size_t n_slots = nb * (size_t)hp->n_expert_used;
    size_t in_bytes = 0, down_bytes = 0, mm = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const model_layer *l = &m->layers[il];
        if (l->experts == NULL) continue;
        size_t s = tensor_matmul_scratch_bytes(l->ffn_gate_inp.type, hp->n_embd, n_batch);
        mm = s > mm ? s : mm;
        for (int i = 0; i < 2; i++) {
            s = act_bytes(&l->experts[i]);
            in_bytes = s > in_bytes ? s : in_bytes;
        }
        s = act_bytes(&l->experts[2]);
        down_bytes = s > down_bytes ? s : down_bytes;
    }
    b->probs = alloc_bytes(nb * (size_t)hp->n_expert * f);
    b->sel = alloc_bytes(n_slots * sizeof(int32_t));
    b->wsel = alloc_bytes(n_slots * f);
    b->exp_off = alloc_bytes((size_t)(hp->n_expert + 1) * sizeof(int32_t));
    b->slot_exp = alloc_bytes(n_slots * sizeof(int32_t));
    b->slot_of = alloc_bytes(n_slots * sizeof(int32_t));
    const size_t sizes[6] = {n_slots * in_bytes, n_slots * in_bytes, n_slots * down_bytes,
                             n_slots * (size_t)hp->n_ff_exp * f, n_slots * (size_t)hp->n_ff_exp * f,
                             n_slots * (size_t)hp->n_embd * f};
    memcpy(b->slot_buf_bytes, sizes, sizeof(sizes));
    b->xg_gate = alloc_bytes(sizes[0]);
    b->xg_up = alloc_bytes(sizes[1]);
    b->xd = alloc_bytes(sizes[2]);
    b->gate = alloc_bytes(sizes[3]);
    b->up = alloc_bytes(sizes[4]);
    b->yg = alloc_bytes(sizes[5]);
    b->tasks = alloc_bytes((size_t)hp->n_expert * 2 * sizeof(tensor_mm_task));
    b->mm_scratch = alloc_bytes(mm);
    if (b->probs == NULL || b->sel == NULL || b->wsel == NULL || b->exp_off == NULL ||
        b->slot_exp == NULL || b->slot_of == NULL || b->xg_gate == NULL ||
        b->xg_up == NULL || b->xd == NULL || b->gate == NULL || b->up == NULL || b->yg == NULL ||
        b->tasks == NULL || b->mm_scratch == NULL) {
        model_moe_bufs_free(b);
        return STRATA_ENOMEM;
    }
    return 0;
}

void model_moe_bufs_release(model_moe_bufs *b)
{
    void *const bufs[6] = {b->xg_gate, b->xg_up, b->xd, b->gate, b->up, b->yg};
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 6; i++) {
        if (bufs[i] == NULL) continue;
        /* whole pages inside the buffer only */
        uintptr_t lo = ((uintptr_t)bufs[i] + page - 1) / page * page;
        uintptr_t hi = ((uintptr_t)bufs[i] + b->slot_buf_bytes[i]) / page * page;
        if (hi <= lo) continue;
        while (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0 && errno == EINTR) {
        }
    }
}

/* --- the routed FFN --- */

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
    bool taken[MODEL_MOE_MAX_EXPERTS];
    memset(taken, 0, (size_t)n_e * sizeof(bool));
    float sum = 0.0f;
    for (int64_t k = 0; k < k_used; k++) {
        int32_t best = -1;
        for (int64_t e = 0; e < n_e; e++) {
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = (int32_t)e;
        }
        taken[best] = true;
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

/* The row-wise phases of one call, split over tokens or slots. */
enum moe_phase {
    MOE_ROUTE,    /* per token: route() */
    MOE_GATHER,   /* per token: its row quantized into each of its slots */
    MOE_ACT,      /* per slot: biases, activation, quantized for down */
    MOE_COMBINE,  /* per token: the weighted sum of its slots in rank order */
};

typedef struct moe_job {
    enum moe_phase phase;
    const model_hparams *hp;
    const model_layer *l;
    model_moe_bufs *b;
    const float *xn;    /* (n, n_embd) */
    float *out;         /* (n, n_embd) */
    int64_t n_items;    /* tokens or slots */
    size_t gate_bytes, up_bytes, down_bytes; /* activation row strides */
    bool up_shares;     /* up's activation rows are gate's */
} moe_job;

static void moe_item(const moe_job *j, int64_t i)
{
    const model_hparams *hp = j->hp;
    const model_layer *l = j->l;
    model_moe_bufs *b = j->b;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff_exp, k_used = hp->n_expert_used;
    switch (j->phase) {
    case MOE_ROUTE:
        route(hp, l, b, i);
        break;
    case MOE_GATHER: {
        const float *x = j->xn + i * n_embd;
        const int32_t *so = b->slot_of + i * k_used;
        char *g0 = (char *)b->xg_gate + (size_t)so[0] * j->gate_bytes;
        tensor_matmul_act_quantize(l->experts[0].type, x, g0, n_embd);
        for (int64_t k = 1; k < k_used; k++)
            memcpy((char *)b->xg_gate + (size_t)so[k] * j->gate_bytes, g0, j->gate_bytes);
        if (!j->up_shares) {
            char *u0 = (char *)b->xg_up + (size_t)so[0] * j->up_bytes;
            tensor_matmul_act_quantize(l->experts[1].type, x, u0, n_embd);
            for (int64_t k = 1; k < k_used; k++)
                memcpy((char *)b->xg_up + (size_t)so[k] * j->up_bytes, u0, j->up_bytes);
        }
        break;
    }
    case MOE_ACT: {
        const int64_t e = b->slot_exp[i];
        float *gi = b->gate + i * n_ff, *ui = b->up + i * n_ff;
        if (l->exp_gate_b != NULL) tensor_add(gi, gi, l->exp_gate_b + e * n_ff, n_ff);
        if (l->exp_up_b != NULL) tensor_add(ui, ui, l->exp_up_b + e * n_ff, n_ff);
        if (hp->ffn_act == MODEL_FFN_SWIGLU_OAI) swiglu_oai(gi, ui, n_ff);
        else tensor_swiglu(gi, gi, ui, n_ff);
        tensor_matmul_act_quantize(l->experts[e * 3 + 2].type, gi,
                                   (char *)b->xd + (size_t)i * j->down_bytes, n_ff);
        break;
    }
    case MOE_COMBINE: {
        /* out = sum over ranks, in rank order, of w_k (down_k + bias_k) */
        float *o = j->out + i * n_embd;
        for (int64_t k = 0; k < k_used; k++) {
            const int64_t s = b->slot_of[i * k_used + k];
            float *y = b->yg + s * n_embd;
            if (l->exp_down_b != NULL)
                tensor_add(y, y, l->exp_down_b + (int64_t)b->slot_exp[s] * n_embd, n_embd);
            tensor_scale(y, b->wsel[i * k_used + k], n_embd);
            if (k == 0) memcpy(o, y, (size_t)n_embd * sizeof(float));
            else tensor_add(o, o, y, n_embd);
        }
        break;
    }
    }
}

static void moe_run(void *p, int i_thread, int n_threads)
{
    const moe_job *j = p;
    int64_t begin, end;
    strata_split_range(j->n_items, i_thread, n_threads, &begin, &end);
    for (int64_t i = begin; i < end; i++) moe_item(j, i);
}

/* A phase over n_items: on the calling thread when the pool would cost
 * more than the work (min_items is the phase's break-even). */
static void moe_phase_run(strata_pool *pool, moe_job *j, enum moe_phase phase, int64_t n_items,
                          int64_t min_items)
{
    j->phase = phase;
    j->n_items = n_items;
    if (pool == NULL || n_items < min_items) moe_run(j, 0, 1);
    else strata_pool_run(pool, moe_run, j);
}

int model_moe_ffn(strata_pool *pool, const model_hparams *hp, const model_layer *l,
                  const float *xn, int64_t n, float *out, model_moe_bufs *b, strata_err *err)
{
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff_exp, k_used = hp->n_expert_used;
    const int64_t n_e = hp->n_expert, n_slots = n * k_used;
    if (k_used == 0) {
        memset(out, 0, (size_t)(n * n_embd) * sizeof(float));
        return 0;
    }
    const model_matrix *r = &l->ffn_gate_inp;
    int rc = tensor_matmul(pool, r->type, r->data, r->n_rows, r->n_cols, xn, n, b->probs,
                           b->mm_scratch);
    if (rc != 0) return strata_err_set(err, rc, "matrix product with %s failed", r->name);
    moe_job j = {.hp = hp, .l = l, .b = b, .xn = xn, .out = out};
    moe_phase_run(pool, &j, MOE_ROUTE, n, 8);

    /* slots: the (token, rank) pairs grouped by expert, experts in order
     * and each expert's tokens in batch order (a counting sort) */
    int32_t *off = b->exp_off;
    memset(off, 0, (size_t)(n_e + 1) * sizeof(int32_t));
    for (int64_t s = 0; s < n_slots; s++) off[b->sel[s] + 1]++;
    for (int64_t e = 0; e < n_e; e++) off[e + 1] += off[e];
    for (int64_t s = 0; s < n_slots; s++) {
        const int32_t e = b->sel[s];
        const int32_t slot = off[e]++;
        b->slot_of[s] = slot;
        b->slot_exp[slot] = e;
    }
    for (int64_t e = n_e; e > 0; e--) off[e] = off[e - 1]; /* back to the starts */
    off[0] = 0;

    const model_matrix *w0 = &l->experts[0];
    j.gate_bytes = act_bytes(&l->experts[0]);
    j.up_bytes = act_bytes(&l->experts[1]);
    j.down_bytes = act_bytes(&l->experts[2]);
    j.up_shares = l->experts[1].type == w0->type;
    moe_phase_run(pool, &j, MOE_GATHER, n, 4);

    /* gate and up of every chosen expert, one dispatch */
    tensor_mm_task *tasks = b->tasks;
    int n_tasks = 0;
    for (int64_t e = 0; e < n_e; e++) {
        const int64_t n_tok = off[e + 1] - off[e];
        if (n_tok == 0) continue; /* an expert no token chose is not read */
        const model_matrix *w = &l->experts[e * 3];
        const char *xu = j.up_shares ? b->xg_gate : b->xg_up;
        const size_t ub = j.up_shares ? j.gate_bytes : j.up_bytes;
        tasks[n_tasks++] = (tensor_mm_task){
            .type = w[0].type, .w = w[0].data, .n_rows = n_ff, .n_cols = n_embd,
            .xq = (const char *)b->xg_gate + (size_t)off[e] * j.gate_bytes, .n_tok = n_tok,
            .y = b->gate + off[e] * n_ff};
        tasks[n_tasks++] = (tensor_mm_task){
            .type = w[1].type, .w = w[1].data, .n_rows = n_ff, .n_cols = n_embd,
            .xq = xu + (size_t)off[e] * ub, .n_tok = n_tok, .y = b->up + off[e] * n_ff};
    }
    rc = tensor_matmul_tasks(pool, tasks, n_tasks);
    if (rc != 0) return strata_err_set(err, rc, "expert products of %s failed", w0->name);
    moe_phase_run(pool, &j, MOE_ACT, n_slots, 2);

    /* down of every chosen expert, one dispatch */
    n_tasks = 0;
    for (int64_t e = 0; e < n_e; e++) {
        const int64_t n_tok = off[e + 1] - off[e];
        if (n_tok == 0) continue;
        const model_matrix *w = &l->experts[e * 3 + 2];
        tasks[n_tasks++] = (tensor_mm_task){
            .type = w->type, .w = w->data, .n_rows = n_embd, .n_cols = n_ff,
            .xq = (const char *)b->xd + (size_t)off[e] * j.down_bytes, .n_tok = n_tok,
            .y = b->yg + off[e] * n_embd};
    }
    rc = tensor_matmul_tasks(pool, tasks, n_tasks);
    if (rc != 0) return strata_err_set(err, rc, "expert products of %s failed", l->experts[2].name);
    moe_phase_run(pool, &j, MOE_COMBINE, n, 4);
    return 0;
}
