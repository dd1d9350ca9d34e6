/* libFuzzer target for the engine protocol codec (src/engine/protocol.c):
 * any bytes go through the line reader twice, once whole and once fed in
 * pieces whose sizes come from the input itself, and both must hand out
 * the same lines and oversized-line reports (with a small max_line so that
 * both paths are reached). Every line is decoded in both directions; a
 * refused line must carry a code and a message; an accepted one must
 * encode, decode again, and encode to the same bytes (a fixed point), so
 * the engine and the server can never disagree about a line this codec
 * wrote. A crash, a sanitizer report or a trap is a finding. */
#include "engine/protocol.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_LINE 4096
#define FUZZ_MAX_EVENTS 4096

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

typedef struct event {
    int kind;
    size_t len;
    uint32_t hash;
} event;

static uint32_t hash_bytes(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

static void check_line(const char *line, size_t len)
{
    for (int dir = 0; dir < 2; dir++) {
        proto_msg m;
        proto_error pe;
        if (proto_decode(line, len, (proto_dir)dir, &m, &pe) != 0) {
            check(pe.code != NULL && pe.message[0] != '\0');
            check(m.op == PROTO_OP_NONE);
            continue;
        }
        proto_buf a = {0}, b = {0};
        strata_err err;
        check(proto_encode(&m, &a, &err) == 0);
        check(a.len > 0 && a.data[a.len - 1] == '\n' && memchr(a.data, '\n', a.len - 1) == NULL);
        proto_msg m2;
        check(proto_decode(a.data, a.len - 1, (proto_dir)dir, &m2, &pe) == 0);
        check(m2.op == m.op && m2.has_id == m.has_id && m2.id == m.id);
        check(proto_encode(&m2, &b, &err) == 0);
        check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        proto_msg_free(&m);
        proto_msg_free(&m2);
        proto_buf_free(&a);
        proto_buf_free(&b);
    }
}

/* Reads data through a reader fed in pieces (sizes from `sizes`, cycling;
 * none: all at once), recording what came out. */
static size_t read_events(const uint8_t *data, size_t n, const uint8_t *sizes, size_t n_sizes,
                          event *ev, bool decode)
{
    proto_reader r;
    proto_reader_init(&r, FUZZ_MAX_LINE);
    size_t fed = 0, n_ev = 0, i_size = 0;
    for (;;) {
        const char *line;
        size_t len;
        int k = proto_reader_next(&r, &line, &len);
        if (k == PROTO_READ_EOF) break;
        if (k == PROTO_READ_NEED_MORE) {
            if (fed == n) {
                proto_reader_set_eof(&r);
                continue;
            }
            size_t take = n - fed;
            if (n_sizes > 0) {
                size_t want = (size_t)sizes[i_size++ % n_sizes] + 1;
                if (want < take) take = want;
            }
            check(proto_reader_feed(&r, data + fed, take) == 0);
            fed += take;
            continue;
        }
        check(k == PROTO_READ_LINE || k == PROTO_READ_TOO_LONG);
        if (k == PROTO_READ_LINE) {
            check(len > 0 && len <= FUZZ_MAX_LINE && memchr(line, '\n', len) == NULL);
            if (decode) check_line(line, len);
        } else {
            int64_t id;
            (void)proto_peek_id(line, len, &id);
        }
        if (n_ev < FUZZ_MAX_EVENTS) ev[n_ev++] = (event){k, len, hash_bytes(line, len)};
    }
    proto_reader_free(&r);
    return n_ev;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static event whole[FUZZ_MAX_EVENTS], split[FUZZ_MAX_EVENTS];
    size_t n_whole = read_events(data, size, NULL, 0, whole, true);
    /* the first 8 bytes double as the piece sizes of the second pass */
    size_t n_sizes = size < 8 ? size : 8;
    size_t n_split = read_events(data, size, data, n_sizes, split, false);
    check(n_whole == n_split);
    for (size_t i = 0; i < n_whole; i++) {
        check(whole[i].kind == split[i].kind);
        /* an oversized line's reported head depends on where it was noticed */
        if (whole[i].kind == PROTO_READ_LINE) {
            check(whole[i].len == split[i].len && whole[i].hash == split[i].hash);
        }
    }
    return 0;
}
