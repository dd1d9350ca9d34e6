/* A child process driven through real OS pipes, for tests of programs that
 * speak a line protocol on stdin/stdout (`strata engine`).
 *
 * Ownership: the test thread that calls pipeproc_read_line is the only
 * reader of the child's stdout; pipeproc_write may be called by several
 * threads (each call is written whole, under a lock). stderr goes to a
 * file (or is inherited when err_path is NULL). */
#ifndef STRATA_TESTS_PIPEPROC_H
#define STRATA_TESTS_PIPEPROC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct pipeproc {
    pid_t pid;
    int in_fd;          /* the child's stdin (ours to write); -1 once closed */
    int out_fd;         /* the child's stdout (ours to read) */
    pthread_mutex_t write_lock;
    char *buf;          /* read buffer */
    size_t len, cap, start;
    bool eof;
} pipeproc;

/* Starts argv (argv[0] a path, NULL-terminated). Returns 0 or -1. */
int pipeproc_start(pipeproc *p, const char *const *argv, const char *err_path);

/* Writes n bytes whole. Returns 0, or -1 (EPIPE: the child is gone). */
int pipeproc_write(pipeproc *p, const char *data, size_t n);
int pipeproc_write_str(pipeproc *p, const char *s);

/* Closes the child's stdin (end of input). */
void pipeproc_close_input(pipeproc *p);

/* The next line of stdout without its '\n' (malloc'd, *line freed by the
 * caller), waiting at most timeout_ms (a guard against a hung child, not a
 * measurement). Returns 1 with a line, 0 at end of output, -1 on timeout
 * or error. */
int pipeproc_read_line(pipeproc *p, char **line, int timeout_ms);

/* Waits for the child (at most timeout_ms, then kills it) and returns its
 * exit status, or 128 + signal. Closes the pipes and frees p's buffers. */
int pipeproc_finish(pipeproc *p, int timeout_ms);

#endif
