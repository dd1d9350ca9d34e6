/* Shared between the files of src/gguf/; not for other layers. */
#ifndef STRATA_GGUF_INTERNAL_H
#define STRATA_GGUF_INTERNAL_H

#include "gguf/gguf.h"

/* Parses s->bytes/s->size (set by the caller) as shard number shard_no of
 * g: fills s, appends its tensors to g->tensors (realloc'd) and, for shard 0, builds
 * g->kv_index. `name` is used in messages. */
int gguf_parse_shard(gguf *g, gguf_shard *s, uint32_t shard_no, const char *name,
                     strata_err *err);

#endif
