/* The one decoder of the IQ super-blocks that both the row decoders
 * (dequant_iq.c) and the scalar dot products (vecdot_iq_scalar.c) use, so
 * that the two cannot disagree on a layout, and the ternary types' decoder
 * of the row decoders and the x8 packer. Internal to src/tensor/. */
#ifndef STRATA_TENSOR_IQ_INTERNAL_H
#define STRATA_TENSOR_IQ_INTERNAL_H

#include <stdint.h>

/* A decoded super-block: w[i] = (d * ls[i / 16] * f) * q[i] (blocks_iq.h),
 * with f = 2^-f_shift. */
typedef struct tensor_iq_decoded {
    float d;
    int8_t q[256];
    int8_t ls[16];
} tensor_iq_decoded;

/* f_shift of an IQ type (3 for f = 1/8), or -1 if `type` is not one. */
int tensor_iq_f_shift(uint32_t type);

/* Decodes one block of IQ type `type` (tensor_iq_f_shift(type) >= 0). */
void tensor_iq_decode(uint32_t type, const void *block, tensor_iq_decoded *out);

/* Decodes one block of TQ1_0 or TQ2_0 the same way: q = the ternary digit
 * - 1, every ls 1, f = 1 (w = d * q). */
void tensor_tq_decode(uint32_t type, const void *block, tensor_iq_decoded *out);

#endif
