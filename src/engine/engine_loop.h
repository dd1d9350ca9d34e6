/* The `strata engine` process loop: the engine protocol on two file
 * descriptors (stdin and stdout in the real process) around one engine.
 *
 * Three threads, each the only owner of what it touches:
 *   - the reader: the only code that reads in_fd. It splits lines
 *     (proto_reader) and decodes them (so a 16 MiB prompt is parsed off the
 *     scheduler). It answers a ping (`pong`, with engine_get_progress's
 *     snapshot of the scheduler) and a line it cannot decode (`err`) itself,
 *     at once and in arrival order, so neither waits for a step; everything
 *     else goes to the scheduler through the inbox.
 *   - the scheduler (the calling thread): the only user of the engine and
 *     the model (but for engine_get_progress). Between steps it takes
 *     everything in the inbox (gen, embed, stop, shutdown) in arrival
 *     order, then runs one engine_step, then hands that step's lines to the
 *     writer at once. A stuck step stops tokens, not pongs: the pongs'
 *     progress figures are what show it (protocol.h).
 *   - the writer: the only code that writes out_fd. It writes whole
 *     batches of whole lines, so lines never interleave and each step's
 *     tokens leave as soon as the step ends.
 *
 * `ready` is written first. `shutdown`, or end of file on in_fd, stops
 * accepting requests (later gen/embed: err "shutting_down"); those already
 * accepted, running or queued, finish; then the loop returns 0. If out_fd
 * breaks (the server is gone) the loop returns STRATA_EIO at once. */
#ifndef STRATA_ENGINE_ENGINE_LOOP_H
#define STRATA_ENGINE_ENGINE_LOOP_H

#include "base/err.h"
#include "engine/engine.h"

/* Serves e on in_fd / out_fd until shutdown (see above). in_fd and out_fd
 * stay open (the caller closes them). max_line 0: PROTOCOL_MAX_LINE. */
int engine_serve(engine *e, int in_fd, int out_fd, size_t max_line, strata_err *err);

#endif
