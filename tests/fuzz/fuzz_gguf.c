/* libFuzzer target for the GGUF parser: any bytes go to gguf_open_buffer;
 * on success every key, value, array element (nested too) and tensor is
 * walked and its bytes touched, so that ASan sees any pointer the parser
 * handed out that reaches outside the input, and the lookups are checked
 * against the tables. A crash, a sanitizer report or a trap is a finding.
 *
 * The input is copied into an exactly sized heap block: libFuzzer's own
 * buffer is sized that way too, but the copy makes the guarantee ours. */
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink;

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

static void touch(const uint8_t *lo, const uint8_t *hi, const void *p, uint64_t n)
{
    const uint8_t *q = p;
    if (n == 0) return;
    check(q >= lo && q <= hi && n <= (uint64_t)(hi - q));
    g_sink += q[0] + q[n - 1];
}

static void walk_value(const uint8_t *lo, const uint8_t *hi, const gguf_value *v, int depth)
{
    check(depth <= GGUF_MAX_ARRAY_DEPTH);
    switch (v->type) {
    case GGUF_VTYPE_STRING:
        touch(lo, hi, v->v.str.ptr, v->v.str.len);
        return;
    case GGUF_VTYPE_ARRAY:
        break;
    default:
        check(v->type < GGUF_VTYPE_COUNT);
        g_sink += v->v.u64;
        return;
    }
    uint32_t et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    check(et < GGUF_VTYPE_COUNT);
    if (et == GGUF_VTYPE_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s = gguf_arr_str(v, i);
            touch(lo, hi, s.ptr, s.len);
        }
    } else if (et == GGUF_VTYPE_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            check(v->v.arr.vals[i].type == GGUF_VTYPE_ARRAY);
            walk_value(lo, hi, &v->v.arr.vals[i], depth + 1);
        }
    } else {
        size_t elem = gguf_vtype_size(et);
        check(elem > 0 && n <= (uint64_t)(hi - lo) / elem);
        touch(lo, hi, v->v.arr.raw, n * elem);
        /* gguf_arr_int on floats would convert out-of-range values, which
         * its contract leaves to the caller; read each with its own kind. */
        for (uint64_t i = 0; i < n; i++) {
            if (et == GGUF_VTYPE_FLOAT32 || et == GGUF_VTYPE_FLOAT64) {
                double x = gguf_arr_float(v, i);
                g_sink += x == x;
            } else {
                g_sink += (uint64_t)gguf_arr_int(v, i);
            }
        }
    }
}

static void walk(const gguf *g)
{
    const gguf_shard *s = &g->shards[0];
    const uint8_t *lo = s->bytes, *hi = s->bytes + s->size;
    check(g->n_shards == 1);
    check(s->alignment != 0 && (s->alignment & (s->alignment - 1)) == 0);
    check(s->data_offset % s->alignment == 0);
    for (uint64_t i = 0; i < s->n_kv; i++) {
        const gguf_kv *kv = &s->kvs[i];
        check(strlen(kv->key) == kv->key_len && kv->key_len > 0);
        check(gguf_find_kv(g, kv->key) == kv);
        walk_value(lo, hi, &kv->value, 0);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        check(strlen(t->name) == t->name_len && t->name_len <= GGUF_MAX_TENSOR_NAME);
        check(gguf_find_tensor(g, t->name) == t);
        check(t->n_dims <= GGUF_MAX_DIMS && t->offset % s->alignment == 0);
        check((const uint8_t *)t->data >= lo + s->data_offset);
        touch(lo, hi, t->data, t->n_bytes);
    }

    /* The typed getters on the keys a model loader asks for. */
    int64_t i64;
    double f64;
    gguf_str str;
    const gguf_value *arr;
    gguf_get_int(g, "llama.block_count", &i64, NULL);
    gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f64, NULL);
    gguf_get_str(g, "tokenizer.ggml.model", &str, NULL);
    gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, NULL);
    str = gguf_arch(g);
    touch(lo, hi, str.len > 0 ? str.ptr : NULL, str.len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL) return 0;
    if (size > 0) memcpy(copy, data, size);
    gguf *g = NULL;
    strata_err err;
    int rc = gguf_open_buffer(&g, copy, size, "fuzz.gguf", &err);
    if (rc == 0) {
        walk(g);
        gguf_close(g);
    } else {
        check(g == NULL && rc < 0 && err.code == rc && err.msg[0] != '\0');
        check(rc == STRATA_EFORMAT || rc == STRATA_EUNSUPPORTED);
    }
    free(copy);
    return 0;
}
