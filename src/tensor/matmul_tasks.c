/* tensor_matmul_tasks (see matmul_tasks.h): a list of products run in one
 * pool dispatch, each with the kernels tensor_matmul would use for it.
 *
 * Work split. A task's rows are cut into units: for a packed matrix one
 * 8-row group, or two where the level has pair kernels and the task has
 * more than one token (as x8_run in matmul.c); for the GGUF layout the
 * least common multiple of the kernel set's rows_r and tile_r rows (as
 * mm_run). A unit covers all the task's tokens. The units of all tasks, in
 * task order, are claimed in runs from one atomic counter, so a thread
 * slowed by something else on its CPU does not hold the others up; a
 * thread's claims only grow, so it finds a unit's task by walking forward
 * from its previous one. No choice of split or thread changes a result
 * (matmul_kernels.h, pack.h). */
#include "tensor/matmul_tasks.h"

#include "base/err.h"
#include "gguf/types.h"
#include "tensor/matmul.h"
#include "tensor/matmul_kernels.h"
#include "tensor/pack.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"

#include <stdatomic.h>
#include <string.h>

static bool task_packed(uint32_t type)
{
    return (type & TENSOR_PACKED) != 0;
}

static bool float_type(uint32_t type)
{
    return type == STRATA_TYPE_F32 || type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16;
}

size_t tensor_matmul_act_row_bytes(uint32_t type, int64_t n_cols)
{
    if (!tensor_matmul_supported(type) || n_cols <= 0) return 0;
    if (task_packed(type)) return tensor_x8_act_row_bytes(type & ~TENSOR_PACKED, n_cols);
    if (strata_type_row_bytes(type, n_cols) == 0) return 0;
    if (float_type(type)) return (size_t)n_cols * sizeof(float);
    return strata_type_row_bytes((uint32_t)tensor_matmul_vec_dot_type(type), n_cols);
}

static bool level_ok(enum strata_simd_level level)
{
    return (int)level >= STRATA_SIMD_SCALAR &&
           (int)level <= (int)strata_cpu_level_max(strata_cpu_get());
}

int tensor_matmul_act_quantize_at_level(enum strata_simd_level level, uint32_t type,
                                        const float *x, void *dst, int64_t n_cols)
{
    if (!level_ok(level)) return STRATA_EUNSUPPORTED;
    if (x == NULL || dst == NULL) return STRATA_EINVAL;
    if (tensor_matmul_act_row_bytes(type, n_cols) == 0) return STRATA_EINVAL;
    if (!task_packed(type) && float_type(type)) {
        memcpy(dst, x, (size_t)n_cols * sizeof(float));
        return 0;
    }
    tensor_quant_fn q = task_packed(type)
                            ? tensor_x8_act_quant(type & ~TENSOR_PACKED, level)
                            : tensor_get_quant((uint32_t)tensor_matmul_vec_dot_type(type));
    if (q == NULL) return STRATA_EUNSUPPORTED;
    q(x, dst, n_cols);
    return 0;
}

int tensor_matmul_act_quantize(uint32_t type, const float *x, void *dst, int64_t n_cols)
{
    return tensor_matmul_act_quantize_at_level(strata_cpu_level(), type, x, dst, n_cols);
}

/* --- one task's kernels and units --- */

typedef struct task_plan {
    const tensor_x8_kernels *x8;  /* packed: the group kernels */
    const tensor_mm_kernels *mm;  /* GGUF layout: the kernel set */
    int64_t unit_rows;            /* rows per unit (the last unit may be short) */
    int64_t n_units;
    size_t w_row_bytes;           /* GGUF layout: bytes per weight row */
    size_t group_bytes;           /* packed: bytes per 8-row group */
    size_t xs;                    /* bytes per activation row */
} task_plan;

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int plan_task(const tensor_mm_task *t, enum strata_simd_level level, task_plan *p)
{
    memset(p, 0, sizeof(*p));
    if (t->n_rows < 0 || t->n_cols <= 0 || t->n_tok < 0) return STRATA_EINVAL;
    if (!tensor_matmul_supported(t->type)) return STRATA_EUNSUPPORTED;
    p->xs = tensor_matmul_act_row_bytes(t->type, t->n_cols);
    if (p->xs == 0) return STRATA_EINVAL;
    if (t->n_rows == 0 || t->n_tok == 0) return 0;
    if (t->w == NULL || t->xq == NULL || t->y == NULL) return STRATA_EINVAL;
    if (task_packed(t->type)) {
        const uint32_t base = t->type & ~TENSOR_PACKED;
        size_t bytes = tensor_pack_bytes(base, t->n_rows, t->n_cols);
        if (bytes == 0) return STRATA_EINVAL;
        /* an expert with 16 tokens or more on AMX's tiles where the CPU
         * has them, as tensor_matmul (the same bits) */
        p->x8 = tensor_x8_kernels_for(base, level, t->n_tok);
        if (p->x8 == NULL) return STRATA_EUNSUPPORTED;
        p->group_bytes = bytes / (size_t)(t->n_rows / TENSOR_X8_ROWS);
        p->unit_rows = TENSOR_X8_ROWS * (p->x8->pair != NULL && t->n_tok > 1 ? 2 : 1);
    } else {
        p->mm = tensor_mm_kernels_at(t->type, level);
        if (p->mm == NULL) return STRATA_EUNSUPPORTED;
        p->w_row_bytes = strata_type_row_bytes(t->type, t->n_cols);
        p->unit_rows = (int64_t)p->mm->rows_r * p->mm->tile_r / gcd64(p->mm->rows_r, p->mm->tile_r);
    }
    p->n_units = (t->n_rows + p->unit_rows - 1) / p->unit_rows;
    return 0;
}

/* Rows [r0, r1) of a packed task, all its tokens. */
static void run_x8(const tensor_mm_task *t, const task_plan *p, int64_t r0, int64_t r1)
{
    const tensor_x8_kernels *k = p->x8;
    const char *w = t->w;
    const char *xq = t->xq;
    for (int64_t g = r0 / TENSOR_X8_ROWS; g * TENSOR_X8_ROWS < r1;) {
        const bool pair = k->pair != NULL && t->n_tok > 1 && (g + 2) * TENSOR_X8_ROWS <= r1;
        const char *wg = w + (size_t)g * p->group_bytes;
        for (int64_t tk = 0; tk < t->n_tok; tk += k->max_t) {
            int nt = t->n_tok - tk < k->max_t ? (int)(t->n_tok - tk) : k->max_t;
            float *yt = t->y + tk * t->n_rows + g * TENSOR_X8_ROWS;
            const char *xt = xq + (size_t)tk * p->xs;
            if (pair)
                k->pair(t->n_cols, wg, p->group_bytes, xt, p->xs, yt, (size_t)t->n_rows, nt);
            else
                k->one(t->n_cols, wg, xt, p->xs, yt, (size_t)t->n_rows, nt);
        }
        g += pair ? 2 : 1;
    }
}

/* Rows [r0, r1) with token tk: rows_r at a time, then one at a time. */
static void mm_rows_token(const tensor_mm_task *t, const task_plan *p, int64_t r0, int64_t r1,
                          int64_t tk)
{
    const tensor_mm_kernels *k = p->mm;
    const char *w = t->w;
    const char *xt = (const char *)t->xq + (size_t)tk * p->xs;
    float *yt = t->y + tk * t->n_rows;
    int64_t r = r0;
    if (k->tile_rows != NULL)
        for (; r + k->rows_r <= r1; r += k->rows_r)
            k->tile_rows(t->n_cols, w + (size_t)r * p->w_row_bytes, p->w_row_bytes, xt, p->xs,
                         yt + r, (size_t)t->n_rows);
    for (; r < r1; r++) yt[r] = k->vec_dot(t->n_cols, w + (size_t)r * p->w_row_bytes, xt);
}

/* Rows [r0, r1) of a task in the GGUF layout, all its tokens: tiles of
 * tile_r x tile_t, the edges by mm_rows_token. */
static void run_mm(const tensor_mm_task *t, const task_plan *p, int64_t r0, int64_t r1)
{
    const tensor_mm_kernels *k = p->mm;
    if (t->n_tok == 1 || k->tile == NULL) {
        for (int64_t tk = 0; tk < t->n_tok; tk++) mm_rows_token(t, p, r0, r1, tk);
        return;
    }
    const int64_t R = k->tile_r, T = k->tile_t;
    const char *w = t->w;
    const char *xq = t->xq;
    int64_t r = r0;
    for (; r + R <= r1; r += R) {
        int64_t tk = 0;
        for (; tk + T <= t->n_tok; tk += T)
            k->tile(t->n_cols, w + (size_t)r * p->w_row_bytes, p->w_row_bytes,
                    xq + (size_t)tk * p->xs, p->xs, t->y + tk * t->n_rows + r, (size_t)t->n_rows);
        for (; tk < t->n_tok; tk++) mm_rows_token(t, p, r, r + R, tk);
    }
    for (int64_t tk = 0; tk < t->n_tok && r < r1; tk++) mm_rows_token(t, p, r, r1, tk);
}

/* --- the dispatch --- */

typedef struct tasks_ctx {
    const tensor_mm_task *tasks;
    int n_tasks;
    enum strata_simd_level level;
    int64_t n_units;          /* over all tasks */
    int64_t grain;            /* units per claim */
    atomic_int_fast64_t next; /* the next unclaimed unit */
} tasks_ctx;

static void tasks_worker(void *arg, int i_thread, int n_threads)
{
    (void)i_thread;
    (void)n_threads;
    tasks_ctx *c = arg;
    int ti = -1;           /* the task of the thread's last unit */
    int64_t base = 0;      /* units before task ti */
    task_plan p = {0};
    for (;;) {
        int64_t u0 = atomic_fetch_add_explicit(&c->next, c->grain, memory_order_relaxed);
        if (u0 >= c->n_units) return;
        int64_t u1 = u0 + c->grain < c->n_units ? u0 + c->grain : c->n_units;
        while (u0 < u1) {
            while (ti < 0 || u0 >= base + p.n_units) {
                if (ti >= 0) base += p.n_units;
                ti++;
                plan_task(&c->tasks[ti], c->level, &p); /* checked by the caller */
            }
            int64_t e = u1 < base + p.n_units ? u1 : base + p.n_units;
            const tensor_mm_task *t = &c->tasks[ti];
            int64_t r0 = (u0 - base) * p.unit_rows;
            int64_t r1 = (e - base) * p.unit_rows < t->n_rows ? (e - base) * p.unit_rows
                                                               : t->n_rows;
            if (p.x8 != NULL) run_x8(t, &p, r0, r1);
            else run_mm(t, &p, r0, r1);
            u0 = e;
        }
    }
}

int tensor_matmul_tasks_at_level(strata_pool *pool, enum strata_simd_level level,
                                 const tensor_mm_task *tasks, int n_tasks)
{
    if (!level_ok(level)) return STRATA_EUNSUPPORTED;
    if (n_tasks < 0 || (n_tasks > 0 && tasks == NULL)) return STRATA_EINVAL;
    tasks_ctx c = {.tasks = tasks, .n_tasks = n_tasks, .level = level};
    for (int i = 0; i < n_tasks; i++) {
        task_plan p;
        int rc = plan_task(&tasks[i], level, &p);
        if (rc != 0) return rc;
        c.n_units += p.n_units;
    }
    if (c.n_units == 0) return 0;
    /* about 8 claims per thread: few enough that the counter costs
     * nothing, enough to even out a slow thread */
    const int n_threads = pool != NULL ? strata_pool_n_threads(pool) : 1;
    c.grain = c.n_units / ((int64_t)n_threads * 8);
    if (c.grain < 1) c.grain = 1;
    atomic_init(&c.next, 0);
    if (n_threads == 1) tasks_worker(&c, 0, 1);
    else strata_pool_run(pool, tasks_worker, &c);
    return 0;
}

int tensor_matmul_tasks(strata_pool *pool, const tensor_mm_task *tasks, int n_tasks)
{
    return tensor_matmul_tasks_at_level(pool, strata_cpu_level(), tasks, n_tasks);
}
