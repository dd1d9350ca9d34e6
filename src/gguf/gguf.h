/* Reading GGUF files (v2 and v3, little-endian), single or split.
 *
 * gguf_open maps the file read-only and parses its header, metadata and
 * tensor table; tensor data is used in place from the mapping, never
 * copied. Every length, count, offset and dimension product in the file is
 * checked against the bytes that remain and against overflow before use,
 * and allocations are bounded by the file's size, so no file can crash the
 * reader or make it allocate without bound. Errors name the file, the byte
 * offset and what was wrong.
 *
 * Split models: opening any shard named NAME-0000k-of-0000N.gguf whose
 * metadata says split.count = N opens all N shards; metadata comes from the
 * first shard and tensors are looked up across all of them.
 *
 * Everything a gguf hands out (keys, values, strings, tensor records and
 * tensor data) stays valid until gguf_close. Strings in values are not
 * NUL-terminated; print them with "%.*s". Keys and tensor names are. */
#ifndef STRATA_GGUF_GGUF_H
#define STRATA_GGUF_GGUF_H

#include "base/arena.h"
#include "base/err.h"
#include "base/mapfile.h"
#include "base/strmap.h"
#include "gguf/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_TENSOR_NAME 64    /* bytes, as the format specifies */
#define GGUF_MAX_KEY 65535         /* bytes */
#define GGUF_MAX_ARRAY_DEPTH 8     /* nesting of arrays inside arrays */
#define GGUF_MAX_SHARDS 9999

enum gguf_vtype {
    GGUF_VTYPE_UINT8 = 0,
    GGUF_VTYPE_INT8 = 1,
    GGUF_VTYPE_UINT16 = 2,
    GGUF_VTYPE_INT16 = 3,
    GGUF_VTYPE_UINT32 = 4,
    GGUF_VTYPE_INT32 = 5,
    GGUF_VTYPE_FLOAT32 = 6,
    GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8,
    GGUF_VTYPE_ARRAY = 9,
    GGUF_VTYPE_UINT64 = 10,
    GGUF_VTYPE_INT64 = 11,
    GGUF_VTYPE_FLOAT64 = 12,
    GGUF_VTYPE_COUNT = 13,
};

/* A byte string; not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* A metadata value. Scalars are widened: unsigned integers into u64, signed
 * into i64, FLOAT32/FLOAT64 into f64; `type` keeps the stored type. Arrays
 * of scalars keep their elements as n little-endian values of the element's
 * size at arr.raw (possibly unaligned: read them with gguf_arr_* below);
 * arrays of strings use arr.strs, arrays of arrays arr.vals.
 *
 * The writer takes values of the same shape, so a value read from one file
 * can be written to another unchanged. */
typedef struct gguf_value gguf_value;
struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        bool b;
        gguf_str str;
        struct {
            enum gguf_vtype elem_type;
            uint64_t n;
            const void *raw;   /* scalar elements */
            const gguf_str *strs; /* STRING elements */
            const gguf_value *vals; /* ARRAY elements */
        } arr;
    } v;
};

typedef struct gguf_kv {
    const char *key; /* NUL-terminated */
    size_t key_len;
    gguf_value value;
    uint64_t file_offset; /* where the key starts in its file */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name; /* NUL-terminated */
    size_t name_len;
    uint32_t type;    /* enum strata_type */
    uint32_t n_dims;  /* 0..GGUF_MAX_DIMS */
    int64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, ne[0] contiguous; unused dims are 1 */
    int64_t n_elems;
    size_t n_bytes;
    uint64_t offset;  /* from the start of its shard's data section */
    uint32_t shard;   /* index into gguf.shards */
    uint64_t info_offset; /* where its record starts in its file */
    const void *data; /* n_bytes in the mapping */
} gguf_tensor;

typedef struct gguf_shard {
    char *path;
    strata_mapfile map;   /* empty when parsed from a caller's buffer */
    const uint8_t *bytes; /* the whole file */
    size_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* start of the data section; may be past the end of a
                             file without tensors */
    uint64_t n_kv;
    gguf_kv *kvs;
    uint64_t n_tensors; /* in this shard */
    uint64_t first_tensor; /* index of its first tensor in gguf.tensors */
} gguf_shard;

/* A parsed model: read-only to callers. */
typedef struct gguf {
    uint32_t n_shards;
    gguf_shard *shards;  /* shards[0] holds the model's metadata */
    uint64_t n_tensors;  /* across all shards, in file order */
    gguf_tensor *tensors; /* malloc'd; the records are copies, data is mapped */
    uint64_t total_size; /* bytes of all shards */
    strata_arena arena;
    strata_strmap kv_index;     /* key -> index into shards[0].kvs */
    strata_strmap tensor_index; /* name -> index into tensors */
} gguf;

/* Opens and validates the GGUF at path (and its sibling shards when it is
 * part of a split model). On success *out owns the mapping; free it with
 * gguf_close. Errors: STRATA_ENOTFOUND / STRATA_EIO for files that cannot
 * be opened, STRATA_EFORMAT for malformed contents, STRATA_EUNSUPPORTED for
 * GGUF v1, big-endian files and retired tensor types. */
int gguf_open(gguf **out, const char *path, strata_err *err);

/* Parses a GGUF held in memory; `name` is used in messages. The buffer is
 * not copied and must outlive the result. Split keys are checked for
 * consistency but sibling shards are not loaded. */
int gguf_open_buffer(gguf **out, const void *bytes, size_t size, const char *name,
                     strata_err *err);

void gguf_close(gguf *g);

/* --- metadata (of the first shard) --- */

const gguf_kv *gguf_find_kv(const gguf *g, const char *key);

/* Typed getters. Each returns 0 and fills *out, STRATA_ENOTFOUND when the
 * key is absent, or STRATA_EFORMAT when its type does not fit (with the key
 * and both types in err, which may be NULL). */

/* Any integer type (an unsigned value above INT64_MAX is STRATA_ERANGE). */
int gguf_get_int(const gguf *g, const char *key, int64_t *out, strata_err *err);
/* FLOAT32 or FLOAT64, or any integer type. */
int gguf_get_float(const gguf *g, const char *key, double *out, strata_err *err);
int gguf_get_bool(const gguf *g, const char *key, bool *out, strata_err *err);
int gguf_get_str(const gguf *g, const char *key, gguf_str *out, strata_err *err);
/* An ARRAY value; *out points into g. */
int gguf_get_arr(const gguf *g, const char *key, const gguf_value **out, strata_err *err);

/* The value of "general.architecture" ("llama", "qwen2", ...), or an empty
 * string when the file has none. */
gguf_str gguf_arch(const gguf *g);

/* Element i (< arr->v.arr.n) of an array, converted as the getters above
 * convert scalars. The caller checks the element type. */
int64_t gguf_arr_int(const gguf_value *arr, uint64_t i);
double gguf_arr_float(const gguf_value *arr, uint64_t i);
gguf_str gguf_arr_str(const gguf_value *arr, uint64_t i);

/* --- tensors (across all shards) --- */

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

/* --- value types --- */

const char *gguf_vtype_name(uint32_t t); /* "uint32", ...; "?" when unknown */
size_t gguf_vtype_size(uint32_t t);      /* bytes of a scalar; 0 for STRING/ARRAY/unknown */
bool gguf_vtype_is_int(uint32_t t);

/* 1 and the shard number and count when path ends in -NNNNN-of-MMMMM.gguf
 * (1-based), else 0. Writes into prefix (size prefix_size) the part before
 * "-NNNNN", when prefix is not NULL. */
int gguf_split_parse_path(const char *path, char *prefix, size_t prefix_size, uint32_t *no,
                          uint32_t *count);

/* Writes into out the path of shard no (1-based) of count for prefix. */
void gguf_split_path(char *out, size_t out_size, const char *prefix, uint32_t no,
                     uint32_t count);

#endif
