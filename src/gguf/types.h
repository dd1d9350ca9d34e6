/* The tensor type ids that GGUF files use (GGML's numbering), with the facts
 * the format fixes for each: name, elements per block, bytes per block.
 *
 * Every id a file may carry is listed, so any file can be described even
 * where this build cannot compute with a type. Ids that were retired from
 * the format (Q4_2, Q4_3, the interleaved Q4_0_x_y and IQ4_NL_x_y layouts)
 * are listed with block size 0: a file that uses them is refused with their
 * name. The compute side (src/tensor/) keys its kernels by the same enum. */
#ifndef STRATA_GGUF_TYPES_H
#define STRATA_GGUF_TYPES_H

#include <stddef.h>
#include <stdint.h>

enum strata_type {
    STRATA_TYPE_F32 = 0,
    STRATA_TYPE_F16 = 1,
    STRATA_TYPE_Q4_0 = 2,
    STRATA_TYPE_Q4_1 = 3,
    STRATA_TYPE_Q4_2 = 4, /* retired */
    STRATA_TYPE_Q4_3 = 5, /* retired */
    STRATA_TYPE_Q5_0 = 6,
    STRATA_TYPE_Q5_1 = 7,
    STRATA_TYPE_Q8_0 = 8,
    STRATA_TYPE_Q8_1 = 9,
    STRATA_TYPE_Q2_K = 10,
    STRATA_TYPE_Q3_K = 11,
    STRATA_TYPE_Q4_K = 12,
    STRATA_TYPE_Q5_K = 13,
    STRATA_TYPE_Q6_K = 14,
    STRATA_TYPE_Q8_K = 15,
    STRATA_TYPE_IQ2_XXS = 16,
    STRATA_TYPE_IQ2_XS = 17,
    STRATA_TYPE_IQ3_XXS = 18,
    STRATA_TYPE_IQ1_S = 19,
    STRATA_TYPE_IQ4_NL = 20,
    STRATA_TYPE_IQ3_S = 21,
    STRATA_TYPE_IQ2_S = 22,
    STRATA_TYPE_IQ4_XS = 23,
    STRATA_TYPE_I8 = 24,
    STRATA_TYPE_I16 = 25,
    STRATA_TYPE_I32 = 26,
    STRATA_TYPE_I64 = 27,
    STRATA_TYPE_F64 = 28,
    STRATA_TYPE_IQ1_M = 29,
    STRATA_TYPE_BF16 = 30,
    STRATA_TYPE_Q4_0_4_4 = 31, /* retired */
    STRATA_TYPE_Q4_0_4_8 = 32, /* retired */
    STRATA_TYPE_Q4_0_8_8 = 33, /* retired */
    STRATA_TYPE_TQ1_0 = 34,
    STRATA_TYPE_TQ2_0 = 35,
    STRATA_TYPE_IQ4_NL_4_4 = 36, /* retired */
    STRATA_TYPE_IQ4_NL_4_8 = 37, /* retired */
    STRATA_TYPE_IQ4_NL_8_8 = 38, /* retired */
    STRATA_TYPE_MXFP4 = 39,
    STRATA_TYPE_COUNT = 40,
};

typedef struct strata_type_info {
    const char *name;     /* "Q4_K"; NULL for ids no version of the format used */
    uint32_t block_elems; /* elements per block; 0 for retired types */
    uint32_t block_bytes; /* bytes per block; 0 for retired types */
    int quantized;        /* 1 for block-quantized types */
} strata_type_info;

/* Facts for type id t, or NULL when t is outside the table. */
const strata_type_info *strata_type_get(uint32_t t);

/* The type's name, or "?" for an unknown id. Never NULL. */
const char *strata_type_name(uint32_t t);

/* 1 when tensors of type t can be stored (known and not retired). */
int strata_type_usable(uint32_t t);

/* Parses a type name ("q4_k" or "Q4_K"). Returns the id, or -1. */
int strata_type_from_name(const char *name);

/* Bytes of a row of n_elems elements of type t, or 0 when t is unusable or
 * n_elems is not a whole number of blocks. */
size_t strata_type_row_bytes(uint32_t t, int64_t n_elems);

#endif
