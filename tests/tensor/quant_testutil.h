/* Helpers shared by the quantization tests (header-only: each test program
 * is built from one .c file). */
#ifndef STRATA_TESTS_TENSOR_QUANT_TESTUTIL_H
#define STRATA_TESTS_TENSOR_QUANT_TESTUTIL_H

#include "gguf/types.h"
#include "tensor/quant.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Sanitizer builds run 3-10x slower: tests thin out their work there. */
#include "sanitized.h"

/* Error of a reconstruction y of x. */
typedef struct qt_err {
    double sum_sq_err; /* sum (y - x)^2 */
    double sum_sq_ref; /* sum x^2 */
    double max_abs_err;
    double max_abs_ref;
    int64_t n_nonfinite; /* elements of y that are NaN or Inf */
} qt_err;

static inline void qt_err_add(qt_err *e, const float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            e->n_nonfinite++;
            continue;
        }
        double d = (double)y[i] - (double)x[i];
        e->sum_sq_err += d * d;
        e->sum_sq_ref += (double)x[i] * x[i];
        if (fabs(d) > e->max_abs_err)
            e->max_abs_err = fabs(d);
        if (fabs((double)x[i]) > e->max_abs_ref)
            e->max_abs_ref = fabs((double)x[i]);
    }
}

/* RMS error relative to the RMS of the reference. */
static inline double qt_rel_rms(const qt_err *e)
{
    return e->sum_sq_ref > 0 ? sqrt(e->sum_sq_err / e->sum_sq_ref) : sqrt(e->sum_sq_err);
}

/* Largest error relative to the largest reference magnitude. */
static inline double qt_rel_max(const qt_err *e)
{
    return e->max_abs_ref > 0 ? e->max_abs_err / e->max_abs_ref : e->max_abs_err;
}

/* Bytes of n elements of type t (n a whole number of blocks). */
static inline size_t qt_row_bytes(uint32_t t, int64_t n)
{
    return strata_type_row_bytes(t, n);
}

#endif
