/* The server's side of the engine protocol: a thin layer over the shared
 * codec (engine/protocol.h) that turns engine lines into the few facts the
 * replica code needs, and the server's ops into lines. */
#ifndef STRATA_SERVE_WIRE_H
#define STRATA_SERVE_WIRE_H

#include "base/err.h"
#include "engine/protocol.h"
#include "serve/request.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum wire_op {
    WIRE_READY = 1,
    WIRE_TOK,
    WIRE_EMB,
    WIRE_DONE,
    WIRE_ERR,
    WIRE_PONG,
    WIRE_PLP,
    WIRE_PROG,
};

typedef struct wire_msg {
    enum wire_op op;
    bool has_id;
    uint64_t id;
    proto_msg pm;            /* the decoded message; owns the arrays below */
    const int32_t *tokens;   /* tok */
    size_t n_tokens;
    const proto_logprob *logprobs; /* tok: (n_tokens) when the engine sent them, else NULL;
                                      plp: (n_tokens) prompt logprobs from prompt position from */
    int64_t from;            /* plp */
    const proto_prog *prog;  /* prog */
    const float *vec;        /* emb */
    size_t n_vec;
    enum sreq_finish finish; /* done */
    sreq_stats stats;        /* done */
    const char *code;        /* err */
    const char *message;     /* err */
    int64_t slots, n_ctx;    /* ready */
    const proto_pong *pong;  /* pong: its figures (pong->has_progress false when none came) */
} wire_msg;

/* Decodes one engine line (without its newline). STRATA_EFORMAT with the
 * reason for anything that is not a well-formed engine message. Free *m with
 * wire_msg_free (also after an error). */
int wire_decode(const char *line, size_t len, wire_msg *m, strata_err *err);
void wire_msg_free(wire_msg *m);

/* The server's ops, as one malloc'd NUL-terminated line ending in '\n'
 * (caller frees), or NULL when the codec refuses it (logged). */
char *wire_encode_request(const sreq *r, uint64_t id);
char *wire_encode_stop(uint64_t id);
char *wire_encode_ping(uint64_t id);
char *wire_encode_shutdown(void);

#endif
