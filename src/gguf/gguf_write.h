/* Writing GGUF v3 files: metadata of every value type (nested arrays too)
 * and tensors of any usable type, each aligned in the data section.
 *
 * Build a writer with the add functions, then write it once. Metadata values
 * are deep-copied into the writer; tensor data is either referenced (it must
 * stay valid until the write) or produced at write time by a callback, so a
 * multi-gigabyte model never has to sit in memory whole. Keys and tensors
 * are written in the order they were added; every tensor, the last too, is
 * padded to the alignment, as other tools expect. */
#ifndef STRATA_GGUF_WRITE_H
#define STRATA_GGUF_WRITE_H

#include "gguf/gguf.h"

#include <stdio.h>

typedef struct gguf_writer gguf_writer;

/* Fills dst (n_bytes) with tensor i's data in its type's block layout.
 * Returns 0, or a negative code to abort the write. */
typedef int (*gguf_tensor_fill_fn)(void *ctx, uint64_t i, void *dst, size_t n_bytes);

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

/* Sets the data alignment (a power of two; default 32). An alignment other
 * than the default is recorded as general.alignment, as the format asks. */
int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, strata_err *err);

/* Adds key = *v (deep copy). A duplicate key is STRATA_EINVAL. */
int gguf_writer_add(gguf_writer *w, const char *key, const gguf_value *v, strata_err *err);

/* Convenience forms of gguf_writer_add. */
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t x, strata_err *err);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t x, strata_err *err);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t x, strata_err *err);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float x, strata_err *err);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool x, strata_err *err);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, strata_err *err);
/* An array of n scalars of elem_type stored in host (little-endian) order. */
int gguf_writer_add_arr(gguf_writer *w, const char *key, enum gguf_vtype elem_type, uint64_t n,
                        const void *elems, strata_err *err);
int gguf_writer_add_str_arr(gguf_writer *w, const char *key, uint64_t n,
                            const char *const *strs, strata_err *err);

/* Adds a tensor whose n_bytes of data are at `data` (not copied: it must
 * stay valid until the write). ne[0] must be a whole number of the type's
 * blocks. Its index is the number of tensors added before it. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data, strata_err *err);

/* As gguf_writer_add_tensor, but the data is produced by fill(ctx, i, ...)
 * when the file is written; i is the tensor's index in the writer. */
int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne, gguf_tensor_fill_fn fill,
                                void *ctx, strata_err *err);

uint64_t gguf_writer_n_tensors(const gguf_writer *w);

/* Writes the file. gguf_writer_write_file writes to a temporary name beside
 * path and renames it into place, so a failed write leaves no partial file. */
int gguf_writer_write(gguf_writer *w, FILE *f, const char *name, strata_err *err);
int gguf_writer_write_file(gguf_writer *w, const char *path, strata_err *err);

#endif
