/* The server's side of the engine protocol (wire.h). Pure functions. */
#include "serve/wire.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>

void wire_msg_free(wire_msg *m)
{
    proto_msg_free(&m->pm);
    memset(m, 0, sizeof(*m));
}

int wire_decode(const char *line, size_t len, wire_msg *m, strata_err *err)
{
    memset(m, 0, sizeof(*m));
    proto_error pe;
    if (proto_decode(line, len, PROTO_DIR_TO_SERVER, &m->pm, &pe) != 0) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: %s", pe.code, pe.message);
    }
    proto_msg *pm = &m->pm;
    m->has_id = pm->has_id;
    m->id = pm->has_id ? (uint64_t)pm->id : 0;
    switch (pm->op) {
    case PROTO_OP_READY:
        m->op = WIRE_READY;
        m->slots = pm->u.ready.slots;
        m->n_ctx = pm->u.ready.n_ctx;
        if (m->slots <= 0) return strata_err_set(err, STRATA_EFORMAT, "`ready` with no slots");
        break;
    case PROTO_OP_TOK:
        m->op = WIRE_TOK;
        m->tokens = pm->u.tok.tokens;
        m->n_tokens = pm->u.tok.n_tokens;
        m->logprobs = pm->u.tok.logprobs;
        break;
    case PROTO_OP_PLP:
        m->op = WIRE_PLP;
        m->from = pm->u.plp.from;
        m->logprobs = pm->u.plp.logprobs;
        m->n_tokens = pm->u.plp.n;
        break;
    case PROTO_OP_PROG:
        m->op = WIRE_PROG;
        m->prog = &pm->u.prog;
        break;
    case PROTO_OP_EMB:
        m->op = WIRE_EMB;
        m->vec = pm->u.emb.vector;
        m->n_vec = pm->u.emb.n;
        break;
    case PROTO_OP_DONE: {
        m->op = WIRE_DONE;
        const proto_done *d = &pm->u.done;
        m->finish = d->finish == PROTO_FINISH_STOP     ? SREQ_FINISH_STOP
                    : d->finish == PROTO_FINISH_LENGTH ? SREQ_FINISH_LENGTH
                                                       : SREQ_FINISH_CANCELLED;
        m->stats = (sreq_stats){.prompt_n = d->stats.prompt_n,
                                .cached_n = d->stats.cached_n,
                                .predicted_n = d->stats.predicted_n,
                                .draft_n = d->stats.draft_n,
                                .draft_accepted_n = d->stats.draft_accepted_n,
                                .prompt_ms = d->stats.prompt_ms,
                                .predicted_ms = d->stats.predicted_ms};
        break;
    }
    case PROTO_OP_ERR:
        m->op = WIRE_ERR;
        m->code = pm->u.err.code ? pm->u.err.code : "engine_error";
        m->message = pm->u.err.message ? pm->u.err.message : "engine error";
        break;
    case PROTO_OP_PONG:
        m->op = WIRE_PONG;
        m->pong = &pm->u.pong;
        break;
    default: return strata_err_set(err, STRATA_EFORMAT, "unexpected op %s", proto_op_name(pm->op));
    }
    if (m->op != WIRE_READY && m->op != WIRE_ERR && !m->has_id) {
        return strata_err_set(err, STRATA_EFORMAT, "`%s` without an id", proto_op_name(pm->op));
    }
    return 0;
}

static char *encode(const proto_msg *m)
{
    proto_buf b = {0};
    strata_err err;
    if (proto_encode(m, &b, &err) != 0) {
        LOG_ERROR("engine protocol: cannot encode `%s`: %s", proto_op_name(m->op), err.msg);
        proto_buf_free(&b);
        return NULL;
    }
    char *line = realloc(b.data, b.len + 1);
    if (line == NULL) {
        proto_buf_free(&b);
        return NULL;
    }
    line[b.len] = '\0';
    return line;
}

char *wire_encode_request(const sreq *r, uint64_t id)
{
    proto_msg m = {.op = r->embed ? PROTO_OP_EMBED : PROTO_OP_GEN, .has_id = true,
                   .id = (int64_t)id};
    if (r->embed) m.u.embed = r->emb;
    else m.u.gen = r->gen;
    return encode(&m);
}

char *wire_encode_stop(uint64_t id)
{
    proto_msg m = {.op = PROTO_OP_STOP, .has_id = true, .id = (int64_t)id};
    return encode(&m);
}

char *wire_encode_ping(uint64_t id)
{
    proto_msg m = {.op = PROTO_OP_PING, .has_id = true, .id = (int64_t)id};
    return encode(&m);
}

char *wire_encode_shutdown(void)
{
    proto_msg m = {.op = PROTO_OP_SHUTDOWN};
    return encode(&m);
}
