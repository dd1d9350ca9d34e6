/* Many small matrix products in one pool dispatch: the experts of a
 * mixture-of-experts layer, each over the few tokens that chose it.
 *
 * tensor_matmul quantizes its activations and wakes the pool once or twice
 * per call; a decode step of a MoE layer has 2 x n_used products over one
 * token each, where those costs would rival the products themselves. Here
 * the caller quantizes each activation row once (tensor_matmul_act_*),
 * places the rows of each task contiguously, and hands all the tasks over
 * together: their (row unit, all the task's tokens) pieces are claimed from
 * one counter by the pool's threads.
 *
 * Results: each (row, token) pair is computed by the same kernel, with the
 * same activation bytes, as tensor_matmul computes it for the same matrix
 * and type (packed or not), so it has the same bits as that call, whatever
 * the other tasks, the token count of its task, the thread count or which
 * thread ran it. */
#ifndef STRATA_TENSOR_MATMUL_TASKS_H
#define STRATA_TENSOR_MATMUL_TASKS_H

#include "base/cpu.h"
#include "base/threadpool.h"

#include <stddef.h>
#include <stdint.h>

/* One product y = x W^T. */
typedef struct tensor_mm_task {
    uint32_t type;    /* weight type; | TENSOR_PACKED for an x8 matrix (pack.h) */
    const void *w;    /* (n_rows, n_cols) weights as tensor_matmul takes them */
    int64_t n_rows, n_cols;
    const void *xq;   /* (n_tok, tensor_matmul_act_row_bytes(type, n_cols)) activation rows */
    int64_t n_tok;
    float *y;         /* (n_tok, n_rows), written in full */
} tensor_mm_task;

/* Bytes of one activation row for weights of `type` (packed or not) over
 * n_cols: the vec_dot_type's row (n_cols floats for F32/F16/BF16). 0 when
 * tensor_matmul does not take the type or n_cols is not whole blocks. */
size_t tensor_matmul_act_row_bytes(uint32_t type, int64_t n_cols);

/* Quantizes one row x (n_cols floats) into dst (act_row_bytes bytes, 4-byte
 * aligned) exactly as tensor_matmul does for weights of `type` at the
 * process's SIMD level. 0, or STRATA_EINVAL / STRATA_EUNSUPPORTED. */
int tensor_matmul_act_quantize(uint32_t type, const float *x, void *dst, int64_t n_cols);

/* Runs every task (n_tasks >= 0; a task with n_tok or n_rows 0 is skipped)
 * with the pool (NULL: the calling thread). The outputs must not overlap
 * each other or any input. Returns 0; STRATA_EINVAL for a bad shape or NULL
 * pointer; STRATA_EUNSUPPORTED for a type without kernels; nothing is
 * computed after an error. */
int tensor_matmul_tasks(strata_pool *pool, const tensor_mm_task *tasks, int n_tasks);

/* The same with the kernels and quantizers of an explicit level (tests);
 * STRATA_EUNSUPPORTED when this CPU cannot run it. */
int tensor_matmul_act_quantize_at_level(enum strata_simd_level level, uint32_t type,
                                        const float *x, void *dst, int64_t n_cols);
int tensor_matmul_tasks_at_level(strata_pool *pool, enum strata_simd_level level,
                                 const tensor_mm_task *tasks, int n_tasks);

#endif
