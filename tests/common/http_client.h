/* A tiny blocking HTTP/1.1 client for tests: 127.0.0.1 only, one request per
 * connection (`Connection: close`), chunked bodies decoded, every socket
 * with a receive timeout so that no test can hang. Header-only (static). */
#ifndef STRATA_TESTS_HTTP_CLIENT_H
#define STRATA_TESTS_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct http_response {
    int status;
    char *headers; /* the raw header block, NUL-terminated */
    char *body;    /* decoded, NUL-terminated */
    size_t body_len;
} http_response;

static inline void http_response_free(http_response *r)
{
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* Connects to 127.0.0.1:port; -1 on failure. */
static inline int http_connect(int port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int http_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Sends one request; extra is more header lines ("K: V\r\n...") or NULL. */
static inline int http_send_request(int fd, const char *method, const char *path, const char *body,
                                    const char *extra)
{
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    snprintf(head, sizeof(head),
             "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
             method, path, blen, extra ? extra : "");
    if (http_send_all(fd, head, strlen(head)) != 0) return -1;
    return blen ? http_send_all(fd, body, blen) : 0;
}

/* Reads up to n bytes (one recv); 0 at EOF, -1 on error or timeout. */
static inline ssize_t http_recv_some(int fd, char *buf, size_t n)
{
    for (;;) {
        ssize_t k = recv(fd, buf, n, 0);
        if (k < 0 && errno == EINTR) continue;
        return k;
    }
}

/* Decodes a chunked body in place; returns its length. */
static inline size_t http_dechunk(char *b, size_t n)
{
    size_t in = 0, out = 0;
    while (in < n) {
        char *end;
        unsigned long sz = strtoul(b + in, &end, 16);
        char *crlf = strstr(end, "\r\n");
        if (crlf == NULL || sz == 0) break;
        in = (size_t)(crlf + 2 - b);
        if (in + sz > n) sz = n - in;
        memmove(b + out, b + in, sz);
        out += sz;
        in += sz + 2;
    }
    b[out] = '\0';
    return out;
}

/* Reads the whole response until the server closes. 0, or -1. */
static inline int http_read_response(int fd, http_response *r)
{
    memset(r, 0, sizeof(*r));
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
        ssize_t k = http_recv_some(fd, buf + len, cap - len - 1);
        if (k < 0) {
            free(buf);
            return -1;
        }
        if (k == 0) break;
        len += (size_t)k;
    }
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (sep == NULL || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    *sep = '\0';
    r->headers = strdup(buf);
    size_t blen = len - (size_t)(sep + 4 - buf);
    r->body = malloc(blen + 1);
    memcpy(r->body, sep + 4, blen);
    r->body[blen] = '\0';
    r->body_len = blen;
    if (strcasestr(r->headers, "Transfer-Encoding: chunked") != NULL) {
        r->body_len = http_dechunk(r->body, blen);
    }
    free(buf);
    return 0;
}

/* One whole request. 0, or -1 when the server could not be reached. */
static inline int http_do(int port, const char *method, const char *path, const char *body,
                          const char *extra, http_response *r)
{
    int fd = http_connect(port, 30);
    if (fd < 0) return -1;
    int rc = http_send_request(fd, method, path, body, extra);
    if (rc == 0) rc = http_read_response(fd, r);
    close(fd);
    return rc;
}

#endif
