/* Child processes for tests (see run.h). Output goes to temporary files
 * rather than pipes, so a child that prints a lot cannot block on a full
 * pipe while the test waits for it. */
#define _GNU_SOURCE
#include "run.h"

#include "testdata.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *slurp_fd(int fd, size_t *len)
{
    off_t n = lseek(fd, 0, SEEK_END);
    if (n < 0) n = 0;
    lseek(fd, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = 0;
    while (buf != NULL && got < (size_t)n) {
        ssize_t k = read(fd, buf + got, (size_t)n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (buf != NULL) buf[got] = '\0';
    *len = got;
    return buf;
}

static int scratch_file(const char *tag)
{
    char path[4200];
    const char *dir = testdata_scratch_dir();
    if (dir == NULL) return -1;
    snprintf(path, sizeof(path), "%s/%s-XXXXXX", dir, tag);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    return fd;
}

int run_capture(const char *const *argv, run_result *r)
{
    return run_capture_input(argv, NULL, 0, r);
}

int run_capture_input(const char *const *argv, const char *input, size_t n_input, run_result *r)
{
    memset(r, 0, sizeof(*r));
    int in_fd = -1;
    if (input != NULL) {
        in_fd = scratch_file("stdin");
        if (in_fd < 0) return -1;
        size_t off = 0;
        while (off < n_input) {
            ssize_t k = write(in_fd, input + off, n_input - off);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                close(in_fd);
                return -1;
            }
            off += (size_t)k;
        }
        lseek(in_fd, 0, SEEK_SET);
    }
    int out_fd = scratch_file("stdout");
    int err_fd = scratch_file("stderr");
    if (out_fd < 0 || err_fd < 0) {
        if (out_fd >= 0) close(out_fd);
        if (err_fd >= 0) close(err_fd);
        if (in_fd >= 0) close(in_fd);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(out_fd);
        close(err_fd);
        if (in_fd >= 0) close(in_fd);
        return -1;
    }
    if (pid == 0) {
        int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
        if (in >= 0) dup2(in, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) break;
    }
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->out = slurp_fd(out_fd, &r->out_len);
    r->err = slurp_fd(err_fd, &r->err_len);
    close(out_fd);
    close(err_fd);
    if (in_fd >= 0) close(in_fd);
    return 0;
}

void run_result_free(run_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}
