/* Small helpers the tokenizer files share: the growable id vector and
 * strict UTF-8 decoding/encoding (see vocab_internal.h). */
#include "text/vocab_internal.h"

#include <stdlib.h>

int tok_ivec_push(tok_ivec *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(*v->ids)) return -1;
        int32_t *ids = realloc(v->ids, cap * sizeof(*ids));
        if (ids == NULL) return -1;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

void tok_ivec_free(tok_ivec *v)
{
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c < 0xE0) {
        len = 2;
        v = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c < 0xF0) {
        len = 3;
        v = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c < 0xF5) {
        len = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
