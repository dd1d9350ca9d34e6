/* Value tables that the ternary, MXFP4 and IQ formats define (format data,
 * see blocks_iq.h for how each is indexed). */
#include "tensor/blocks_iq.h"


const int8_t tensor_mxfp4_values[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

const uint8_t tensor_tq1_pow3[5] = {1, 3, 9, 27, 81};
