/* One row of a packed (x8) matrix back in its GGUF layout (pack.h).
 *
 * Packing permutes bytes (and, for Q4_K, spreads the 12 bytes of 6-bit
 * scales over bytes; Q6_K's codes are only regrouped), so a row comes back exactly: the blocks rebuilt here
 * equal the file's, and dequantizing them gives the file's floats. Used
 * for lookups into a matrix whose file pages were given back, such as the
 * token embeddings of a model whose output matrix is that table. */
#include "gguf/types.h"
#include "tensor/pack_internal.h"

#include <string.h>

static void row_q4_0(const block_q4_0x8 *g, int64_t nb, int r, block_q4_0 *out)
{
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q4_0x8 *b = &g[ib];
        uint8_t code[TENSOR_QK];
        /* qs[32 m + 4 r + e]: low nibble element 8m + e, high 8m + 4 + e */
        for (int m = 0; m < 4; m++)
            for (int e = 0; e < 4; e++) {
                uint8_t q = b->qs[32 * m + 4 * r + e];
                code[8 * m + e] = q & 15;
                code[8 * m + 4 + e] = q >> 4;
            }
        out[ib].d = b->d[r];
        /* GGUF: byte i holds element i (low) and i + 16 (high) */
        for (int i = 0; i < TENSOR_QK / 2; i++)
            out[ib].qs[i] = (uint8_t)(code[i] | code[i + TENSOR_QK / 2] << 4);
    }
}

static void row_q8_0(const block_q8_0x8 *g, int64_t nb, int r, block_q8_0 *out)
{
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q8_0x8 *b = &g[ib];
        out[ib].d = b->d[r];
        /* qs[32 j + 4 r + e]: element 4j + e */
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) out[ib].qs[4 * j + e] = b->qs[32 * j + 4 * r + e];
    }
}

static void row_q4_k(const block_q4_kx8 *g, int64_t nb, int r, block_q4_k *out)
{
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q4_kx8 *b = &g[ib];
        block_q4_k *o = &out[ib];
        o->d = b->d[r];
        o->dmin = b->dmin[r];
        int sc[8], mn[8];
        for (int s = 0; s < 8; s++) {
            sc[s] = b->sc[8 * s + r];
            mn[s] = b->mn[16 * (s / 2) + 2 * r + (s % 2)];
        }
        /* the inverse of blocks.h's 12-byte packing of the 6-bit values */
        for (int s = 0; s < 4; s++) {
            o->scales[s] = (uint8_t)(sc[s] | (sc[s + 4] >> 4) << 6);
            o->scales[s + 4] = (uint8_t)(mn[s] | (mn[s + 4] >> 4) << 6);
            o->scales[s + 8] = (uint8_t)((sc[s + 4] & 15) | (mn[s + 4] & 15) << 4);
        }
        /* x8: qs[128 s + 32 m + 4 r + e], low nibble element 32 s + 8 m + e,
         * high 32 s + 8 m + 4 + e; GGUF: sub-block 2c in the low nibbles of
         * qs[32 c .. 32 c + 31], 2c + 1 in the high ones */
        memset(o->qs, 0, sizeof(o->qs));
        for (int s = 0; s < 8; s++)
            for (int m = 0; m < 4; m++)
                for (int e = 0; e < 4; e++) {
                    uint8_t q = b->qs[128 * s + 32 * m + 4 * r + e];
                    int i0 = 8 * m + e, i1 = 8 * m + 4 + e, sh = 4 * (s & 1);
                    o->qs[32 * (s / 2) + i0] |= (uint8_t)((q & 15) << sh);
                    o->qs[32 * (s / 2) + i1] |= (uint8_t)((q >> 4) << sh);
                }
    }
}

static void row_q6_k(const block_q6_kx8 *g, int64_t nb, int r, block_q6_k *out)
{
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q6_kx8 *b = &g[ib];
        block_q6_k *o = &out[ib];
        o->d = b->d[r];
        for (int k = 0; k < 16; k++) o->scales[k] = b->sc[8 * k + r];
        uint8_t q[TENSOR_QK_K];
        /* vector j of sub-block s, byte e: element 32 s + 8 (j / 2) +
         * 4 (j % 2) + e; its low 4 bits in ql's nibble j % 2 of vector
         * pair j / 2, its high 2 in bits 2 (j % 4) of qh's vector j / 4 */
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++) {
                    int lo = (b->sb[s].ql[32 * (j / 2) + 4 * r + e] >> (4 * (j % 2))) & 15;
                    int hi = (b->sb[s].qh[32 * (j / 4) + 4 * r + e] >> (2 * (j % 4))) & 3;
                    q[32 * s + 8 * (j / 2) + 4 * (j % 2) + e] = (uint8_t)(lo | hi << 4);
                }
        /* GGUF (blocks.h): element i, h = i / 128, c = (i % 128) / 32,
         * l = i % 32: low 4 bits in ql[64 h + l + 32 (c & 1)] (low nibble
         * for c < 2), high 2 in bits 2c of qh[32 h + l] */
        memset(o->ql, 0, sizeof(o->ql));
        memset(o->qh, 0, sizeof(o->qh));
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            o->ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)((q[i] & 15) << (c < 2 ? 0 : 4));
            o->qh[32 * h + l] |= (uint8_t)((q[i] >> 4) << (2 * c));
        }
    }
}

bool tensor_pack_row(uint32_t type, const void *packed, int64_t n_rows, int64_t n_cols,
                     int64_t row, void *dst)
{
    if (!tensor_pack_available(type, n_rows, n_cols) || row < 0 || row >= n_rows) return false;
    const size_t group_bytes = tensor_pack_bytes(type, n_rows, n_cols) / (size_t)(n_rows / 8);
    const char *g = (const char *)packed + (size_t)(row / 8) * group_bytes;
    const int r = (int)(row % 8);
    switch (type) {
    case STRATA_TYPE_Q4_0: row_q4_0((const void *)g, n_cols / TENSOR_QK, r, dst); return true;
    case STRATA_TYPE_Q2_K: tensor_x8_row_q2_k(g, n_cols, r, dst); return true;
    case STRATA_TYPE_Q5_0: tensor_x8_row_q5_0(g, n_cols, r, dst); return true;
    case STRATA_TYPE_Q4_1: tensor_x8_row_q4_1(g, n_cols, r, dst); return true;
    case STRATA_TYPE_Q5_1: tensor_x8_row_q5_1(g, n_cols, r, dst); return true;
    case STRATA_TYPE_Q8_0: row_q8_0((const void *)g, n_cols / TENSOR_QK, r, dst); return true;
    case STRATA_TYPE_Q4_K: row_q4_k((const void *)g, n_cols / TENSOR_QK_K, r, dst); return true;
    case STRATA_TYPE_Q6_K: row_q6_k((const void *)g, n_cols / TENSOR_QK_K, r, dst); return true;
    case STRATA_TYPE_Q5_K: tensor_x8_row_q5_k(g, n_cols, r, dst); return true;
    case STRATA_TYPE_IQ4_NL: tensor_x8_row_iq4_nl(g, n_cols, r, dst); return true;
    case STRATA_TYPE_MXFP4: tensor_x8_row_mxfp4(g, n_cols, r, dst); return true;
    case STRATA_TYPE_IQ4_XS: tensor_x8_row_iq4_xs(g, n_cols, r, dst); return true;
    case STRATA_TYPE_F16:
    case STRATA_TYPE_BF16: tensor_x8_row_half(g, n_cols, r, dst); return true;
    default: return false;
    }
}
