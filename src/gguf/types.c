/* The GGML type table (see types.h). Block sizes and byte counts are the
 * ones the GGUF format defines for each type's block layout; the sum in each
 * comment is the block's fields. */
#include "types.h"

#include <strings.h>

#define QK 32   /* elements per block of the legacy quants */
#define QKK 256 /* elements per super-block of the K and IQ quants */

static const strata_type_info g_types[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = {"F32", 1, 4, 0},
    [STRATA_TYPE_F16] = {"F16", 1, 2, 0},
    [STRATA_TYPE_Q4_0] = {"Q4_0", QK, 2 + QK / 2, 1},          /* d, 4-bit quants */
    [STRATA_TYPE_Q4_1] = {"Q4_1", QK, 2 + 2 + QK / 2, 1},      /* d, m, quants */
    [STRATA_TYPE_Q4_2] = {"Q4_2", 0, 0, 1},
    [STRATA_TYPE_Q4_3] = {"Q4_3", 0, 0, 1},
    [STRATA_TYPE_Q5_0] = {"Q5_0", QK, 2 + 4 + QK / 2, 1},      /* d, high bits, quants */
    [STRATA_TYPE_Q5_1] = {"Q5_1", QK, 2 + 2 + 4 + QK / 2, 1},  /* d, m, high bits, quants */
    [STRATA_TYPE_Q8_0] = {"Q8_0", QK, 2 + QK, 1},              /* d, int8 quants */
    [STRATA_TYPE_Q8_1] = {"Q8_1", QK, 2 + 2 + QK, 1},          /* d, s, int8 quants */
    [STRATA_TYPE_Q2_K] = {"Q2_K", QKK, QKK / 16 + QKK / 4 + 2 + 2, 1},
    [STRATA_TYPE_Q3_K] = {"Q3_K", QKK, QKK / 8 + QKK / 4 + 12 + 2, 1},
    [STRATA_TYPE_Q4_K] = {"Q4_K", QKK, 2 + 2 + 12 + QKK / 2, 1},
    [STRATA_TYPE_Q5_K] = {"Q5_K", QKK, 2 + 2 + 12 + QKK / 8 + QKK / 2, 1},
    [STRATA_TYPE_Q6_K] = {"Q6_K", QKK, QKK / 2 + QKK / 4 + QKK / 16 + 2, 1},
    [STRATA_TYPE_Q8_K] = {"Q8_K", QKK, 4 + QKK + QKK / 16 * 2, 1}, /* f32 d, quants, sums */
    [STRATA_TYPE_IQ2_XXS] = {"IQ2_XXS", QKK, 2 + QKK / 8 * 2, 1},
    [STRATA_TYPE_IQ2_XS] = {"IQ2_XS", QKK, 2 + QKK / 8 * 2 + QKK / 32, 1},
    [STRATA_TYPE_IQ3_XXS] = {"IQ3_XXS", QKK, 2 + 3 * QKK / 8, 1},
    [STRATA_TYPE_IQ1_S] = {"IQ1_S", QKK, 2 + QKK / 8 + QKK / 32 * 2, 1},
    [STRATA_TYPE_IQ4_NL] = {"IQ4_NL", QK, 2 + QK / 2, 1},
    [STRATA_TYPE_IQ3_S] = {"IQ3_S", QKK, 2 + QKK / 4 + QKK / 32 + QKK / 8 + QKK / 64, 1},
    [STRATA_TYPE_IQ2_S] = {"IQ2_S", QKK, 2 + QKK / 4 + QKK / 32 + QKK / 32, 1},
    [STRATA_TYPE_IQ4_XS] = {"IQ4_XS", QKK, 2 + 2 + QKK / 64 + QKK / 2, 1},
    [STRATA_TYPE_I8] = {"I8", 1, 1, 0},
    [STRATA_TYPE_I16] = {"I16", 1, 2, 0},
    [STRATA_TYPE_I32] = {"I32", 1, 4, 0},
    [STRATA_TYPE_I64] = {"I64", 1, 8, 0},
    [STRATA_TYPE_F64] = {"F64", 1, 8, 0},
    [STRATA_TYPE_IQ1_M] = {"IQ1_M", QKK, QKK / 8 + QKK / 16 + QKK / 32, 1},
    [STRATA_TYPE_BF16] = {"BF16", 1, 2, 0},
    [STRATA_TYPE_Q4_0_4_4] = {"Q4_0_4_4", 0, 0, 1},
    [STRATA_TYPE_Q4_0_4_8] = {"Q4_0_4_8", 0, 0, 1},
    [STRATA_TYPE_Q4_0_8_8] = {"Q4_0_8_8", 0, 0, 1},
    [STRATA_TYPE_TQ1_0] = {"TQ1_0", QKK, (QKK - 4 * QKK / 64) / 5 + QKK / 64 + 2, 1},
    [STRATA_TYPE_TQ2_0] = {"TQ2_0", QKK, QKK / 4 + 2, 1},
    [STRATA_TYPE_IQ4_NL_4_4] = {"IQ4_NL_4_4", 0, 0, 1},
    [STRATA_TYPE_IQ4_NL_4_8] = {"IQ4_NL_4_8", 0, 0, 1},
    [STRATA_TYPE_IQ4_NL_8_8] = {"IQ4_NL_8_8", 0, 0, 1},
    [STRATA_TYPE_MXFP4] = {"MXFP4", QK, 1 + QK / 2, 1}, /* shared exponent, 4-bit values */
};

/* Spot checks of the table against the block sizes the format documents. */
_Static_assert(2 + QK / 2 == 18, "Q4_0 block is 18 bytes");
_Static_assert(QKK / 16 + QKK / 4 + 2 + 2 == 84, "Q2_K block is 84 bytes");
_Static_assert(QKK / 8 + QKK / 4 + 12 + 2 == 110, "Q3_K block is 110 bytes");
_Static_assert(2 + 2 + 12 + QKK / 2 == 144, "Q4_K block is 144 bytes");
_Static_assert(2 + 2 + 12 + QKK / 8 + QKK / 2 == 176, "Q5_K block is 176 bytes");
_Static_assert(QKK / 2 + QKK / 4 + QKK / 16 + 2 == 210, "Q6_K block is 210 bytes");
_Static_assert(2 + 2 + QKK / 64 + QKK / 2 == 136, "IQ4_XS block is 136 bytes");

const strata_type_info *strata_type_get(uint32_t t)
{
    if (t >= STRATA_TYPE_COUNT || g_types[t].name == NULL) return NULL;
    return &g_types[t];
}

const char *strata_type_name(uint32_t t)
{
    const strata_type_info *ti = strata_type_get(t);
    return ti != NULL ? ti->name : "?";
}

int strata_type_usable(uint32_t t)
{
    const strata_type_info *ti = strata_type_get(t);
    return ti != NULL && ti->block_elems != 0;
}

int strata_type_from_name(const char *name)
{
    for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++) {
        if (g_types[t].name != NULL && strcasecmp(g_types[t].name, name) == 0) return (int)t;
    }
    return -1;
}

size_t strata_type_row_bytes(uint32_t t, int64_t n_elems)
{
    if (!strata_type_usable(t) || n_elems < 0) return 0;
    const strata_type_info *ti = &g_types[t];
    if (n_elems % ti->block_elems != 0) return 0;
    uint64_t n_blocks = (uint64_t)n_elems / ti->block_elems;
    if (n_blocks > SIZE_MAX / ti->block_bytes) return 0;
    return (size_t)(n_blocks * ti->block_bytes);
}
