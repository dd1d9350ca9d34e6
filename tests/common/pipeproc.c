/* Child processes on pipes (see pipeproc.h): fork/exec with the child's
 * stdin and stdout on pipes, O_CLOEXEC on our ends so that children started
 * by other test threads do not inherit them, EINTR retries, and a reaper
 * that kills a child which does not exit in time. */
#define _GNU_SOURCE
#include "pipeproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int pipeproc_start(pipeproc *p, const char *const *argv, const char *err_path)
{
    memset(p, 0, sizeof(*p));
    p->in_fd = p->out_fd = -1;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    int err_fd = -1;
    if (err_path != NULL) {
        err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    /* writing to a child that died must fail with EPIPE, not kill the test */
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        if (err_fd >= 0) close(err_fd);
        return -1;
    }
    if (pid == 0) {
        /* dup2 clears O_CLOEXEC on the new descriptors */
        if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0) _exit(126);
        if (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0) _exit(126);
        signal(SIGPIPE, SIG_DFL);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (err_fd >= 0) close(err_fd);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    pthread_mutex_init(&p->write_lock, NULL);
    return 0;
}

int pipeproc_write(pipeproc *p, const char *data, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&p->write_lock);
    while (n > 0) {
        if (p->in_fd < 0) {
            rc = -1;
            break;
        }
        ssize_t w = write(p->in_fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            rc = -1;
            break;
        }
        data += w;
        n -= (size_t)w;
    }
    pthread_mutex_unlock(&p->write_lock);
    return rc;
}

int pipeproc_write_str(pipeproc *p, const char *s)
{
    return pipeproc_write(p, s, strlen(s));
}

void pipeproc_close_input(pipeproc *p)
{
    pthread_mutex_lock(&p->write_lock);
    if (p->in_fd >= 0) close(p->in_fd);
    p->in_fd = -1;
    pthread_mutex_unlock(&p->write_lock);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pipeproc_read_line(pipeproc *p, char **line, int timeout_ms)
{
    *line = NULL;
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        char *nl = p->len > p->start ? memchr(p->buf + p->start, '\n', p->len - p->start) : NULL;
        if (nl != NULL) {
            size_t n = (size_t)(nl - (p->buf + p->start));
            *line = malloc(n + 1);
            if (*line == NULL) return -1;
            memcpy(*line, p->buf + p->start, n);
            (*line)[n] = '\0';
            p->start += n + 1;
            return 1;
        }
        if (p->eof) return 0;
        if (p->start > 0) {
            memmove(p->buf, p->buf + p->start, p->len - p->start);
            p->len -= p->start;
            p->start = 0;
        }
        if (p->cap - p->len < 65536) {
            size_t cap = p->cap ? p->cap * 2 : 131072;
            char *b = realloc(p->buf, cap);
            if (b == NULL) return -1;
            p->buf = b;
            p->cap = cap;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) return -1;
        struct pollfd fd = {.fd = p->out_fd, .events = POLLIN};
        int k = poll(&fd, 1, (int)left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        ssize_t r = read(p->out_fd, p->buf + p->len, p->cap - p->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) p->eof = true;
        p->len += (size_t)r;
    }
}

int pipeproc_finish(pipeproc *p, int timeout_ms)
{
    pipeproc_close_input(p);
    int status = 0;
    int64_t deadline = now_ms() + timeout_ms;
    int result = -1;
    for (;;) {
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w == p->pid) break;
        if (w < 0 && errno != EINTR) break;
        if (now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (WIFEXITED(status)) result = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) result = 128 + WTERMSIG(status);
    if (p->out_fd >= 0) close(p->out_fd);
    p->out_fd = -1;
    free(p->buf);
    p->buf = NULL;
    pthread_mutex_destroy(&p->write_lock);
    return result;
}
