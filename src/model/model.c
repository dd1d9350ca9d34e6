/* Binding a model's weights by name, with every type and shape checked
 * against the hyper-parameters (see model.h). */
#include "model.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/threadpool.h"
#include "model/moe.h"
#include "gguf/types.h"
#include "tensor/matmul.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* "[256, 512]" for a tensor's ne[] (ne[0] first, as GGUF and llama.cpp print). */
static void fmt_shape(char *buf, size_t n, const gguf_tensor *t)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    uint32_t nd = t->n_dims == 0 ? 1 : t->n_dims;
    for (uint32_t i = 0; i < nd && off < n; i++) {
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", t->ne[i]);
    }
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* Looks up `name`; NULL with *rc = 0 when absent and optional. */
static const gguf_tensor *find(const gguf *g, const char *name, bool required, int *rc,
                               strata_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (t == NULL && required) {
        *rc = strata_err_set(err, STRATA_EFORMAT, "missing tensor %s", name);
    }
    return t;
}

/* True when t has exactly the shape (ne0[, ne1]) and no more dimensions. */
static bool shape_is(const gguf_tensor *t, int64_t ne0, int64_t ne1)
{
    if (t->ne[0] != ne0 || t->ne[1] != ne1) return false;
    for (int i = 2; i < GGUF_MAX_DIMS; i++) {
        if (t->ne[i] != 1) return false;
    }
    return true;
}

static int bad_shape(const gguf_tensor *t, int64_t ne0, int64_t ne1, bool vec, strata_err *err)
{
    char have[96];
    fmt_shape(have, sizeof(have), t);
    if (vec) {
        return strata_err_set(err, STRATA_EFORMAT, "tensor %s has shape %s, expected [%" PRId64 "]",
                              t->name, have, ne0);
    }
    return strata_err_set(err, STRATA_EFORMAT,
                          "tensor %s has shape %s, expected [%" PRId64 ", %" PRId64 "]", t->name,
                          have, ne0, ne1);
}

/* Binds a matrix of n_rows outputs over n_cols inputs (GGUF ne = [n_cols,
 * n_rows]) whose type tensor_matmul takes. */
static int bind_matrix(const gguf *g, const char *name, int64_t n_rows, int64_t n_cols,
                       bool required, model_matrix *out, strata_err *err)
{
    int rc = 0;
    memset(out, 0, sizeof(*out));
    const gguf_tensor *t = find(g, name, required, &rc, err);
    if (t == NULL) return rc;
    if (!shape_is(t, n_cols, n_rows)) return bad_shape(t, n_cols, n_rows, false, err);
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
    out->data = t->data;
    out->type = t->type;
    out->n_rows = n_rows;
    out->n_cols = n_cols;
    out->row_bytes = row_bytes;
    out->name = t->name;
    return 0;
}

/* Binds an F32 vector of n elements. */
static int bind_vector(const gguf *g, const char *name, int64_t n, bool required,
                       const float **out, strata_err *err)
{
    int rc = 0;
    *out = NULL;
    const gguf_tensor *t = find(g, name, required, &rc, err);
    if (t == NULL) return rc;
    if (!shape_is(t, n, 1)) return bad_shape(t, n, 1, true, err);
    if (t->type != STRATA_TYPE_F32) {
        return strata_err_set(err, STRATA_EUNSUPPORTED, "tensor %s has type %s, expected F32",
                              name, strata_type_name(t->type));
    }
    *out = (const float *)t->data;
    return 0;
}

/* Row range [r0, r0 + n_rows) of a bound matrix as a matrix of its own
 * (rows are contiguous, row_bytes apart). */
static model_matrix matrix_rows(const model_matrix *w, int64_t r0, int64_t n_rows)
{
    model_matrix s = *w;
    s.data = (const char *)w->data + (size_t)r0 * w->row_bytes;
    s.n_rows = n_rows;
    return s;
}

static int bind_layer(const gguf *g, const model_hparams *hp, int64_t il, model_layer *l,
                      model_matrix *slots, strata_err *err)
{
    char name[GGUF_MAX_TENSOR_NAME + 32];
    const int64_t n_q = hp->n_head * hp->head_dim;
    const int64_t n_k = hp->n_head_kv * hp->head_dim;
    const int64_t n_v = hp->n_head_kv * hp->head_dim_v;
    const int64_t n_o = hp->n_head * hp->head_dim_v;
    int rc = 0;
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", il, suffix), name)
    if (rc == 0) rc = bind_vector(g, NAME("attn_norm.weight"), hp->n_embd, true, &l->attn_norm, err);
    if (hp->fused_qkv) {
        model_matrix qkv;
        if (rc == 0)
            rc = bind_matrix(g, NAME("attn_qkv.weight"), n_q + n_k + n_v, hp->n_embd, true, &qkv,
                             err);
        if (rc == 0) {
            l->wq = matrix_rows(&qkv, 0, n_q);
            l->wk = matrix_rows(&qkv, n_q, n_k);
            l->wv = matrix_rows(&qkv, n_q + n_k, n_v);
        }
    } else {
        if (rc == 0) rc = bind_matrix(g, NAME("attn_q.weight"), n_q, hp->n_embd, true, &l->wq, err);
        if (rc == 0) rc = bind_matrix(g, NAME("attn_k.weight"), n_k, hp->n_embd, true, &l->wk, err);
        if (rc == 0) rc = bind_matrix(g, NAME("attn_v.weight"), n_v, hp->n_embd, true, &l->wv, err);
    }
    if (rc == 0)
        rc = bind_matrix(g, NAME("attn_output.weight"), hp->n_embd, n_o, true, &l->wo, err);
    /* Biases: required for qwen2, taken when present for llama (some
     * llama-architecture conversions carry them). */
    bool bias_req = hp->has_qkv_bias;
    if (rc == 0) rc = bind_vector(g, NAME("attn_q.bias"), n_q, bias_req, &l->bq, err);
    if (rc == 0) rc = bind_vector(g, NAME("attn_k.bias"), n_k, bias_req, &l->bk, err);
    if (rc == 0) rc = bind_vector(g, NAME("attn_v.bias"), n_v, bias_req, &l->bv, err);
    if (rc == 0) rc = bind_vector(g, NAME("attn_output.bias"), hp->n_embd, false, &l->bo, err);
    if (rc == 0) rc = bind_vector(g, NAME("attn_sinks.weight"), hp->n_head, false, &l->sinks, err);
    if (hp->has_qk_norm) {
        if (rc == 0)
            rc = bind_vector(g, NAME("attn_q_norm.weight"), hp->head_dim, true, &l->q_norm, err);
        if (rc == 0)
            rc = bind_vector(g, NAME("attn_k_norm.weight"), hp->head_dim, true, &l->k_norm, err);
    }
    if (rc == 0)
        rc = bind_vector(g, NAME(hp->ffn_norm_post_attn ? "post_attention_norm.weight"
                                                        : "ffn_norm.weight"),
                         hp->n_embd, true, &l->ffn_norm, err);
    if (hp->has_post_norms) {
        if (rc == 0)
            rc = bind_vector(g, NAME("post_attention_norm.weight"), hp->n_embd, true,
                             &l->post_attn_norm, err);
        if (rc == 0)
            rc = bind_vector(g, NAME("post_ffw_norm.weight"), hp->n_embd, true, &l->post_ffw_norm,
                             err);
    }
    if (hp->n_expert > 0) {
        if (rc == 0)
            rc = model_moe_bind(g, hp, il, l, slots + il * hp->n_expert * 3, err);
    } else if (hp->fused_gate_up) {
        model_matrix gu;
        if (rc == 0)
            rc = bind_matrix(g, NAME("ffn_up.weight"), 2 * hp->n_ff, hp->n_embd, true, &gu, err);
        if (rc == 0) {
            l->ffn_gate = matrix_rows(&gu, 0, hp->n_ff);
            l->ffn_up = matrix_rows(&gu, hp->n_ff, hp->n_ff);
        }
    } else {
        if (rc == 0)
            rc = bind_matrix(g, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, true, &l->ffn_gate,
                             err);
        if (rc == 0)
            rc = bind_matrix(g, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, true, &l->ffn_up, err);
    }
    if (rc == 0 && hp->n_expert == 0)
        rc = bind_matrix(g, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, true, &l->ffn_down, err);
#undef NAME
    return rc;
}

static int bind_all(model *m, strata_err *err)
{
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;

    /* The vocabulary size is token_embd's row count. */
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (te == NULL) return strata_err_set(err, STRATA_EFORMAT, "missing tensor token_embd.weight");
    if (te->ne[1] <= 0 || te->ne[1] > (1LL << 24)) {
        return bad_shape(te, hp->n_embd, hp->n_vocab > 0 ? hp->n_vocab : 1, false, err);
    }
    if (hp->n_vocab > 0 && hp->n_vocab > te->ne[1]) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "tensor token_embd.weight has %" PRId64
                              " rows but the tokenizer has %" PRId64 " tokens",
                              te->ne[1], hp->n_vocab);
    }
    hp->n_vocab = te->ne[1];
    int rc = bind_matrix(g, "token_embd.weight", hp->n_vocab, hp->n_embd, true, &m->tok_embd, err);
    if (rc != 0) return rc;
    if (tensor_get_dequant(m->tok_embd.type) == NULL) {
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "tensor token_embd.weight has type %s, which cannot be decoded here",
                              strata_type_name(m->tok_embd.type));
    }

    rc = bind_vector(g, "output_norm.weight", hp->n_embd, true, &m->output_norm, err);
    if (rc != 0) return rc;
    rc = bind_matrix(g, "output.weight", hp->n_vocab, hp->n_embd, false, &m->output, err);
    if (rc != 0) return rc;
    m->tied_output = m->output.data == NULL;
    if (m->tied_output) m->output = m->tok_embd;

    rc = bind_vector(g, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freqs, err);
    if (rc != 0) return rc;
    /* LongRoPE (Phi-3 128k and its successors): two sets of per-pair
     * factors, chosen per context by model_ctx_init */
    rc = bind_vector(g, "rope_factors_long.weight", hp->n_rot / 2, false, &m->rope_long, err);
    if (rc == 0)
        rc = bind_vector(g, "rope_factors_short.weight", hp->n_rot / 2, false, &m->rope_short,
                         err);
    if (rc != 0) return rc;

    for (int64_t il = 0; il < hp->n_layer; il++) {
        rc = bind_layer(g, hp, il, &m->layers[il], m->expert_slots, err);
        if (rc != 0) return rc;
    }
    return 0;
}

/* The matrices a forward pass multiplies (not tok_embd, whose rows are
 * looked up; output is its own struct even when tied). */
static size_t matrices(model *m, model_matrix **out, size_t cap)
{
    size_t n = 0;
#define ADD(mm) do { if (n < cap) out[n] = (mm); n++; } while (0)
    ADD(&m->output);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        model_layer *l = &m->layers[il];
        ADD(&l->wq);
        ADD(&l->wk);
        ADD(&l->wv);
        ADD(&l->wo);
        ADD(&l->ffn_gate);
        ADD(&l->ffn_up);
        ADD(&l->ffn_down);
        if (l->experts != NULL) {
            /* each expert's slab is a matrix of its own */
            ADD(&l->ffn_gate_inp);
            for (int64_t i = 0; i < m->hp.n_expert * 3; i++)
                ADD(&m->expert_slots[il * m->hp.n_expert * 3 + i]);
        }
    }
#undef ADD
    return n;
}

/* The repacked weights' memory: its own anonymous mapping, in 2 MiB pages
 * where the kernel gives them (transparent huge pages in "madvise" mode):
 * decode streams all of it every token, and with 4 KiB pages every 4 KiB
 * would cost a TLB miss. *map_bytes is the mapping's length. */
#define PACKED_ALIGN ((size_t)2 << 20)

static char *packed_alloc(size_t bytes, size_t *map_bytes)
{
    size_t len = (bytes + PACKED_ALIGN - 1) / PACKED_ALIGN * PACKED_ALIGN;
    /* over-allocate one huge page to align the start */
    void *p = mmap(NULL, len + PACKED_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)p + PACKED_ALIGN - 1) & ~(uintptr_t)(PACKED_ALIGN - 1);
    size_t head = a - (uintptr_t)p, tail = PACKED_ALIGN - head;
    if (head > 0) munmap(p, head);
    if (tail > 0) munmap((char *)a + len, tail);
#ifdef MADV_HUGEPAGE
    madvise((void *)a, len, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
#endif
    *map_bytes = len;
    return (char *)a;
}

static void packed_free(char *p, size_t map_bytes)
{
    if (p != NULL) munmap(p, map_bytes);
}

/* One matrix packed by the pool's threads, each a range of 8-row groups
 * (tensor_pack works group by group, so a range is a smaller matrix). */
typedef struct pack_job {
    const model_matrix *mm;
    char *dst;
    size_t group_bytes;
    atomic_int failed;  /* set by a thread whose tensor_pack failed */
} pack_job;

static void pack_worker(void *arg, int i_thread, int n_threads)
{
    pack_job *j = arg;
    int64_t g0, g1;
    strata_split_range(j->mm->n_rows / TENSOR_X8_ROWS, i_thread, n_threads, &g0, &g1);
    if (g0 >= g1) return;
    const char *src = (const char *)j->mm->data + (size_t)g0 * TENSOR_X8_ROWS * j->mm->row_bytes;
    int rc = tensor_pack(j->mm->type, src, (g1 - g0) * TENSOR_X8_ROWS, j->mm->n_cols,
                         j->dst + (size_t)g0 * j->group_bytes);
    if (rc != 0) atomic_store(&j->failed, 1);
}

/* The system's available memory (MemAvailable), or SIZE_MAX when
 * /proc/meminfo cannot tell. */
static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) return SIZE_MAX;
    char line[256];
    size_t kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "MemAvailable: %zu kB", &kib) == 1;
    fclose(f);
    return found && kib <= SIZE_MAX / 1024 ? kib * 1024 : SIZE_MAX;
}

bool model_repack_larger(size_t extra, size_t model_bytes, size_t available)
{
    if (available == SIZE_MAX) return true;
    size_t headroom = available > model_bytes ? available - model_bytes : 0;
    return extra <= headroom / 2;
}

/* A layout larger than the file's rows (the 1-3 bit IQ ones: 4.3 bits a
 * weight against the file's 1.6-3.4). */
static bool larger_layout(const model_matrix *mm, size_t packed)
{
    return packed > (size_t)mm->n_rows * mm->row_bytes / 8 * 9;
}

/* Repacks every matrix that has an x8 layout (tensor/pack.h) into one
 * allocation, unless STRATA_REPACK=0. A matrix whose data the layout does
 * not take stays in the file's layout. Layouts larger than the file's are
 * used only where model_repack_larger allows their extra bytes (or with
 * STRATA_REPACK=1), so that a model that fits in memory in its file's
 * layout still fits. */
static int pack_all(model *m, strata_err *err)
{
    const char *env = getenv("STRATA_REPACK");
    if (env != NULL && strcmp(env, "0") == 0) return 0;
    const bool force = env != NULL && strcmp(env, "1") == 0;
    const int64_t t0 = strata_clock_ns();
    size_t n = matrices(m, NULL, 0);
    model_matrix **mats = calloc(n, sizeof(*mats));
    size_t *off = calloc(n, sizeof(*off));
    if (mats == NULL || off == NULL) {
        free(mats), free(off);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    matrices(m, mats, n);
    size_t extra = 0, model_bytes = 0, n_larger = 0;
    for (size_t i = 0; i < n; i++) {
        size_t b = tensor_pack_bytes(mats[i]->type, mats[i]->n_rows, mats[i]->n_cols);
        size_t file = (size_t)mats[i]->n_rows * mats[i]->row_bytes;
        model_bytes += file;
        if (b > 0 && larger_layout(mats[i], b)) {
            extra += b - file;
            n_larger++;
        }
    }
    const size_t available = n_larger > 0 && !force ? mem_available() : SIZE_MAX;
    const bool larger_ok = model_repack_larger(extra, model_bytes, available);
    if (!larger_ok)
        LOG_INFO("model: %zu matrices keep the file's layout: their row-interleaved one would "
                 "take %.1f MiB more, and %.1f MiB are available beyond the model's %.1f MiB "
                 "(STRATA_REPACK=1 repacks them anyway)",
                 n_larger, (double)extra / (1 << 20),
                 (double)(available > model_bytes ? available - model_bytes : 0) / (1 << 20),
                 (double)model_bytes / (1 << 20));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t b = tensor_pack_bytes(mats[i]->type, mats[i]->n_rows, mats[i]->n_cols);
        if (b > 0 && !larger_ok && larger_layout(mats[i], b)) b = 0;
        off[i] = total;
        total += (b + 63) / 64 * 64;
    }
    int rc = 0;
    size_t n_packed = 0;
    if (total > 0) {
        m->packed = packed_alloc(total, &m->packed_map);
        if (m->packed == NULL) {
            rc = strata_err_set(err, STRATA_ENOMEM, "out of memory repacking %zu bytes of weights"
                                " (STRATA_REPACK=0 uses the file's layout in place)", total);
        }
    }
    /* the file's pages are read and the copy written by every CPU */
    long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = n_cpu < 1 ? 1 : n_cpu > 16 ? 16 : (int)n_cpu;
    strata_pool *pool = rc == 0 && total > 0 ? strata_pool_new(n_threads) : NULL;
    for (size_t i = 0; rc == 0 && i < n && total > 0; i++) {
        model_matrix *mm = mats[i];
        size_t bytes = tensor_pack_bytes(mm->type, mm->n_rows, mm->n_cols);
        if (bytes == 0 || (!larger_ok && larger_layout(mm, bytes))) continue;
        char *dst = m->packed + off[i];
        pack_job job = {.mm = mm, .dst = dst,
                        .group_bytes = bytes / (size_t)(mm->n_rows / TENSOR_X8_ROWS)};
        atomic_init(&job.failed, 0);
        if (pool != NULL) strata_pool_run(pool, pack_worker, &job);
        else pack_worker(&job, 0, 1);
        if (atomic_load(&job.failed)) continue; /* data the layout cannot hold: stays as it is */
        /* the file's copy of the matrix is not read again by the kernels:
         * give its pages back so the weights count once in the resident
         * memory, not twice (anything that still reads them, the token
         * embeddings of a tied output, faults them in again) */
        for (uint32_t k = 0; k < m->g->n_shards; k++)
            strata_mapfile_release(&m->g->shards[k].map, mm->data,
                                   (size_t)mm->n_rows * mm->row_bytes);
        mm->data = dst;
        mm->type |= TENSOR_PACKED;
        m->packed_bytes += bytes;
        n_packed++;
    }
    if (n_packed > 0)
        LOG_INFO("model: repacked %zu of %zu matrices (%.1f MiB) to the row-interleaved layout in "
                 "%.2f s (STRATA_REPACK=0 keeps the file's layout)",
                 n_packed, n, (double)m->packed_bytes / (1 << 20),
                 (double)(strata_clock_ns() - t0) * 1e-9);
    strata_pool_free(pool);
    free(mats);
    free(off);
    return rc;
}

int model_load(model **out, gguf *g, strata_err *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof(*m));
    if (m == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    m->g = g;
    int rc = model_hparams_load(g, &m->hp, err);
    if (rc == 0) {
        m->layers = calloc((size_t)m->hp.n_layer, sizeof(*m->layers));
        if (m->layers == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (rc == 0 && m->hp.n_expert > 0) {
        m->expert_slots = calloc((size_t)(m->hp.n_layer * m->hp.n_expert * 3),
                                 sizeof(*m->expert_slots));
        if (m->expert_slots == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (rc == 0) rc = bind_all(m, err);
    if (rc == 0) rc = pack_all(m, err);
    for (int64_t il = 0; rc == 0 && m->hp.n_expert > 0 && il < m->hp.n_layer; il++)
        rc = model_moe_unify(g, &m->hp, il, &m->layers[il], err);
    if (rc != 0) {
        packed_free(m->packed, m->packed_map);
        free(m->expert_slots);
        free(m->layers);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int model_open(model **out, const char *path, strata_err *err)
{
    *out = NULL;
    gguf *g = NULL;
    int rc = gguf_open(&g, path, err);
    if (rc != 0) return rc;
    rc = model_load(out, g, err);
    if (rc != 0) {
        /* say which file the load error is about */
        if (err != NULL) {
            char msg[STRATA_ERR_MSG_MAX];
            memcpy(msg, err->msg, sizeof(msg));
            msg[sizeof(msg) - 1] = '\0';
            strata_err_set(err, rc, "%.200s: %.300s", path, msg);
        }
        gguf_close(g);
        return rc;
    }
    (*out)->owns_gguf = true;
    return 0;
}

void model_close(model *m)
{
    if (m == NULL) return;
    if (m->owns_gguf) gguf_close(m->g);
    packed_free(m->packed, m->packed_map);
    free(m->expert_slots);
    free(m->layers);
    free(m);
}
