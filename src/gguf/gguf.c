/* Opening GGUF models: mapping files, loading every shard of a split model,
 * indexing tensors by name, and typed access to metadata. The byte-level
 * parsing of one file is in gguf_read.c. */
#include "gguf_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

static gguf *gguf_alloc(uint32_t n_shards)
{
    gguf *g = calloc(1, sizeof(*g));
    if (g == NULL) return NULL;
    strata_arena_init(&g->arena);
    g->shards = calloc(n_shards, sizeof(*g->shards));
    if (g->shards == NULL) {
        free(g);
        return NULL;
    }
    g->n_shards = n_shards;
    return g;
}

void gguf_close(gguf *g)
{
    if (g == NULL) return;
    for (uint32_t i = 0; i < g->n_shards; i++) {
        strata_mapfile_close(&g->shards[i].map);
        free(g->shards[i].path);
    }
    free(g->shards);
    free(g->tensors);
    strata_strmap_free(&g->kv_index);
    strata_strmap_free(&g->tensor_index);
    strata_arena_free(&g->arena);
    free(g);
}

/* Builds the name index over all shards' tensors; a name seen twice is an
 * error that names both places. */
static int index_tensors(gguf *g, strata_err *err)
{
    if (strata_strmap_init(&g->tensor_index, (size_t)g->n_tensors) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "out of memory indexing %" PRIu64 " tensors",
                              g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int64_t prev;
        if (strata_strmap_put(&g->tensor_index, t->name, t->name_len, (int64_t)i, &prev) != 0) {
            const gguf_tensor *p = &g->tensors[prev];
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: at byte %" PRIu64 ": duplicate tensor name '%s' (also at "
                                  "byte %" PRIu64 " of %s)", g->shards[t->shard].path,
                                  t->info_offset, t->name, p->info_offset,
                                  g->shards[p->shard].path);
        }
    }
    return 0;
}

/* Converts an integer value of any width to int64: 0, STRATA_EFORMAT when
 * the value is not an integer, STRATA_ERANGE when it does not fit. */
static int value_to_int(const gguf_value *v, int64_t *out)
{
    uint32_t t = v->type;
    if (!gguf_vtype_is_int(t)) return STRATA_EFORMAT;
    if (t == GGUF_VTYPE_UINT8 || t == GGUF_VTYPE_UINT16 || t == GGUF_VTYPE_UINT32 ||
        t == GGUF_VTYPE_UINT64) {
        if (v->v.u64 > (uint64_t)INT64_MAX) return STRATA_ERANGE;
        *out = (int64_t)v->v.u64;
    } else {
        *out = v->v.i64;
    }
    return 0;
}

/* Reads an integer key from a shard's own metadata (not the model's). */
static int shard_get_int(const gguf_shard *s, const char *key, int64_t *out)
{
    for (uint64_t i = 0; i < s->n_kv; i++) {
        if (strcmp(s->kvs[i].key, key) == 0) return value_to_int(&s->kvs[i].value, out);
    }
    return STRATA_ENOTFOUND;
}

/* Split keys of shard s (0-based shard_no of n_shards): both must agree. */
static int check_split_keys(const gguf_shard *s, const char *name, uint32_t shard_no,
                            uint32_t n_shards, strata_err *err)
{
    int64_t count = 1, no = 0;
    int rc = shard_get_int(s, "split.count", &count);
    if (rc == STRATA_ENOTFOUND) count = 1;
    else if (rc != 0) return strata_err_set(err, STRATA_EFORMAT, "%s: split.count is not an integer", name);
    rc = shard_get_int(s, "split.no", &no);
    if (rc == STRATA_ENOTFOUND) no = 0;
    else if (rc != 0) return strata_err_set(err, STRATA_EFORMAT, "%s: split.no is not an integer", name);
    if (count != (int64_t)n_shards || no != (int64_t)shard_no) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: this file says it is shard %" PRId64 " of %" PRId64
                              " (split.no, split.count), expected shard %" PRIu32 " of %" PRIu32,
                              name, no + 1, count, shard_no + 1, n_shards);
    }
    return 0;
}

int gguf_split_parse_path(const char *path, char *prefix, size_t prefix_size, uint32_t *no,
                          uint32_t *count)
{
    size_t len = strlen(path);
    if (len < SPLIT_SUFFIX_LEN) return 0;
    const char *s = path + len - SPLIT_SUFFIX_LEN;
    /* -NNNNN-of-MMMMM.gguf */
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || strcmp(s + 15, ".gguf") != 0) return 0;
    uint32_t a = 0, b = 0;
    for (int i = 1; i <= 5; i++) {
        if (!isdigit((unsigned char)s[i]) || !isdigit((unsigned char)s[i + 9])) return 0;
        a = a * 10 + (uint32_t)(s[i] - '0');
        b = b * 10 + (uint32_t)(s[i + 9] - '0');
    }
    if (a == 0 || b == 0 || a > b) return 0;
    if (prefix != NULL) {
        size_t n = len - SPLIT_SUFFIX_LEN;
        if (n >= prefix_size) n = prefix_size - 1;
        memcpy(prefix, path, n);
        prefix[n] = '\0';
    }
    *no = a;
    *count = b;
    return 1;
}

void gguf_split_path(char *out, size_t out_size, const char *prefix, uint32_t no, uint32_t count)
{
    snprintf(out, out_size, "%s-%05" PRIu32 "-of-%05" PRIu32 ".gguf", prefix, no, count);
}

static int open_shard(gguf *g, uint32_t shard_no, const char *path, strata_err *err)
{
    gguf_shard *s = &g->shards[shard_no];
    s->path = strdup(path);
    if (s->path == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int rc = strata_mapfile_open(&s->map, path, err);
    if (rc != 0) return rc;
    s->bytes = s->map.data;
    s->size = s->map.size;
    if (s->size == 0) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: the file is empty", path);
    }
    g->total_size += s->size;
    return gguf_parse_shard(g, s, shard_no, path, err);
}

int gguf_open(gguf **out, const char *path, strata_err *err)
{
    *out = NULL;
    gguf *g = gguf_alloc(1);
    if (g == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int rc = open_shard(g, 0, path, err);
    if (rc != 0) {
        gguf_close(g);
        return rc;
    }

    int64_t count = 1;
    rc = shard_get_int(&g->shards[0], "split.count", &count);
    if (rc != 0 && rc != STRATA_ENOTFOUND) {
        gguf_close(g);
        return strata_err_set(err, STRATA_EFORMAT, "%s: split.count is not an integer", path);
    }
    if (rc == STRATA_ENOTFOUND || count == 1) {
        rc = index_tensors(g, err);
        if (rc != 0) {
            gguf_close(g);
            return rc;
        }
        *out = g;
        return 0;
    }

    /* A split model: derive every shard's name from this one's. */
    gguf_close(g);
    char prefix[4096];
    uint32_t no, n_shards;
    if (!gguf_split_parse_path(path, prefix, sizeof(prefix), &no, &n_shards)) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: split.count says the model is split in %" PRId64
                              " files, but the name does not end in -NNNNN-of-NNNNN.gguf",
                              path, count);
    }
    if (count < 1 || count > GGUF_MAX_SHARDS || (uint32_t)count != n_shards) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: split.count is %" PRId64 " but the name says %" PRIu32
                              " shards", path, count, n_shards);
    }
    g = gguf_alloc(n_shards);
    if (g == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < n_shards; i++) {
        char shard_path[4200];
        gguf_split_path(shard_path, sizeof(shard_path), prefix, i + 1, n_shards);
        rc = open_shard(g, i, shard_path, err);
        if (rc == 0) rc = check_split_keys(&g->shards[i], shard_path, i, n_shards, err);
        if (rc != 0) {
            if (rc == STRATA_ENOTFOUND && err != NULL) {
                size_t l = strlen(err->msg);
                snprintf(err->msg + l, sizeof(err->msg) - l, " (shard %" PRIu32 " of %" PRIu32
                         " of a split model)", i + 1, n_shards);
            }
            gguf_close(g);
            return rc;
        }
    }
    int64_t total;
    rc = shard_get_int(&g->shards[0], "split.tensors.count", &total);
    if (rc == 0 && total != (int64_t)g->n_tensors) {
        strata_err_set(err, STRATA_EFORMAT,
                       "%s: split.tensors.count is %" PRId64 " but the %" PRIu32
                       " shards hold %" PRIu64 " tensors", g->shards[0].path, total, n_shards,
                       g->n_tensors);
        gguf_close(g);
        return STRATA_EFORMAT;
    }
    rc = index_tensors(g, err);
    if (rc != 0) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open_buffer(gguf **out, const void *bytes, size_t size, const char *name,
                     strata_err *err)
{
    *out = NULL;
    gguf *g = gguf_alloc(1);
    if (g == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    gguf_shard *s = &g->shards[0];
    s->path = strdup(name);
    s->bytes = bytes;
    s->size = size;
    g->total_size = size;
    int rc = s->path == NULL ? strata_err_set(err, STRATA_ENOMEM, "out of memory")
                             : gguf_parse_shard(g, s, 0, name, err);
    if (rc == 0) {
        int64_t count = 1;
        if (shard_get_int(s, "split.count", &count) == 0 && count > 1) {
            int64_t no = -1;
            if (shard_get_int(s, "split.no", &no) != 0 || no < 0 || no >= count) {
                rc = strata_err_set(err, STRATA_EFORMAT,
                                    "%s: split.no is missing or outside 0..%" PRId64, name,
                                    count - 1);
            }
        }
    }
    if (rc == 0) rc = index_tensors(g, err);
    if (rc != 0) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* --- lookups --- */

const gguf_kv *gguf_find_kv(const gguf *g, const char *key)
{
    int64_t i = strata_strmap_get(&g->kv_index, key, strlen(key));
    return i < 0 ? NULL : &g->shards[0].kvs[i];
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name)
{
    int64_t i = strata_strmap_get(&g->tensor_index, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

static int wrong_type(strata_err *err, const gguf_kv *kv, const char *want)
{
    return strata_err_set(err, STRATA_EFORMAT, "metadata key '%s' has type %s, expected %s",
                          kv->key, gguf_vtype_name(kv->value.type), want);
}

static const gguf_kv *find_or_fail(const gguf *g, const char *key, strata_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) strata_err_set(err, STRATA_ENOTFOUND, "metadata key '%s' is missing", key);
    return kv;
}

int gguf_get_int(const gguf *g, const char *key, int64_t *out, strata_err *err)
{
    const gguf_kv *kv = find_or_fail(g, key, err);
    if (kv == NULL) return STRATA_ENOTFOUND;
    int rc = value_to_int(&kv->value, out);
    if (rc == STRATA_EFORMAT) return wrong_type(err, kv, "an integer");
    if (rc == STRATA_ERANGE) {
        return strata_err_set(err, STRATA_ERANGE, "metadata key '%s' is too large: %" PRIu64,
                              key, kv->value.v.u64);
    }
    return 0;
}

int gguf_get_float(const gguf *g, const char *key, double *out, strata_err *err)
{
    const gguf_kv *kv = find_or_fail(g, key, err);
    if (kv == NULL) return STRATA_ENOTFOUND;
    uint32_t t = kv->value.type;
    if (t == GGUF_VTYPE_FLOAT32 || t == GGUF_VTYPE_FLOAT64) {
        *out = kv->value.v.f64;
        return 0;
    }
    int64_t i;
    if (!gguf_vtype_is_int(t)) return wrong_type(err, kv, "a number");
    int rc = gguf_get_int(g, key, &i, err);
    if (rc == 0) *out = (double)i;
    return rc;
}

int gguf_get_bool(const gguf *g, const char *key, bool *out, strata_err *err)
{
    const gguf_kv *kv = find_or_fail(g, key, err);
    if (kv == NULL) return STRATA_ENOTFOUND;
    if (kv->value.type != GGUF_VTYPE_BOOL) return wrong_type(err, kv, "bool");
    *out = kv->value.v.b;
    return 0;
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *out, strata_err *err)
{
    const gguf_kv *kv = find_or_fail(g, key, err);
    if (kv == NULL) return STRATA_ENOTFOUND;
    if (kv->value.type != GGUF_VTYPE_STRING) return wrong_type(err, kv, "string");
    *out = kv->value.v.str;
    return 0;
}

int gguf_get_arr(const gguf *g, const char *key, const gguf_value **out, strata_err *err)
{
    const gguf_kv *kv = find_or_fail(g, key, err);
    if (kv == NULL) return STRATA_ENOTFOUND;
    if (kv->value.type != GGUF_VTYPE_ARRAY) return wrong_type(err, kv, "array");
    *out = &kv->value;
    return 0;
}

gguf_str gguf_arch(const gguf *g)
{
    gguf_str s = {"", 0};
    if (gguf_get_str(g, "general.architecture", &s, NULL) != 0) s = (gguf_str){"", 0};
    return s;
}
