/* The HTTP server: libmicrohttpd with a thread per connection, the OpenAI
 * routes (api.c), auth, and the pool of replicas behind them.
 *
 * Threads: libmicrohttpd's listening thread and one thread per connection,
 * which runs that connection's handler from body to last byte; a handler
 * may block waiting for its request's results (request.h) and checks
 * meanwhile whether its client went away. The pool's own threads are in
 * replica.c. */
#ifndef STRATA_SERVE_SERVER_H
#define STRATA_SERVE_SERVER_H

#include "base/err.h"
#include "serve/metrics.h"
#include "serve/pool.h"
#include "text/vocab.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct server_config {
    const char *host;          /* IPv4 address to bind; default 127.0.0.1 */
    int port;                  /* 0: any free port (see server_port) */
    const char *api_key;       /* NULL: no auth */
    size_t max_body_bytes;     /* 0: 8 MiB */
    const char *model_name;    /* the id in /v1/models */
    const char *const *model_aliases; /* (n_model_aliases) more names requests may give
                                         (--alias, --served-model-name); borrowed */
    size_t n_model_aliases;
    const vocab *voc;          /* borrowed, outlives the server */
    const char *chat_template; /* borrowed; ChatML when NULL */
    bool reasoning_off;        /* --reasoning-format none: chat replies keep their
                                  reasoning in `content` unless a request asks */
    const char *bos, *eos;     /* texts for the template; borrowed, may be NULL */
    const char *allowed_origins; /* CORS: NULL or "*": any page's origin; "none": no CORS
                                    headers; else a comma-separated list of origins */
} server_config;

typedef struct server server;

/* Starts listening (the pool must already be started; the server borrows it). */
int server_start(server **out, const server_config *c, pool *p, strata_err *err);
int server_port(const server *s);
/* Stops accepting connections; new requests on open connections get 503. */
void server_quiesce(server *s);
/* HTTP requests being handled now. */
int server_active(const server *s);
/* Makes every waiting handler give up (its request cancelled), closes the
 * connections and frees the server. Call after the pool has been stopped. */
void server_stop(server *s);

#endif
